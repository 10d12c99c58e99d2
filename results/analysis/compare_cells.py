"""Two cells of one committed study, split by split: is the difference between them (an
ablation against its control, one attender against another) larger than seed variance?

    python results/analysis/compare_cells.py results/record/<study> \
        --a task=lookup,variant=dubois_location --b task=lookup,variant=dubois_transformer \
        --splits longer_seen_1,longer_seen_3,longer_seen_5 [--metric seq_acc] [--threshold 90] \
        [--out FILE.md]

Per split: each cell's median over its finished seeds and its seeds at or above the
threshold, then two two-sided tests of A against B over the seeds both cells finished:
Fisher's exact test of the success counts, and the Wilcoxon signed-rank test of the per-seed
differences (paired by seed, as the tables' ties are), each with its Holm-adjusted p-value over
the splits (the family a claim like "A beats B at every length" is read against).
With ``--out``, the file's first line names the command that made it, and
``tests/test_results.py`` remakes every committed ``results/analysis/*.md`` from its first line.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from made_by import emit  # results/analysis/made_by.py, beside this script
from per_seed import seed_values  # beside this script too
from reports.aggregate import holm_adjust
from reports.agreement import compare_arms


def rows(record: Path, a: str, b: str, splits: list[str], metric: str,
         threshold: float) -> list[str]:
    """Markdown table rows (header first), one per split, and a line naming the seeds."""
    if a == b:
        raise SystemExit(f"--a and --b name the same cell ({a}): compare two cells")
    _, by_cell = seed_values(record, splits, metric, [a, b])
    seeds = sorted(set(by_cell[a]) & set(by_cell[b]))
    if not seeds:
        raise SystemExit(f"{record}: cells {a} and {b} have no finished seed in common "
                         f"({a}: {sorted(by_cell[a])}; {b}: {sorted(by_cell[b])})")
    tests, lines = [], []
    for i, split in enumerate(splits):
        va = {s: by_cell[a][s][i] for s in seeds if by_cell[a][s][i] is not None}
        vb = {s: by_cell[b][s][i] for s in seeds if by_cell[b][s][i] is not None}
        if not va or not vb:
            raise SystemExit(f"{record}: no test.{split}.{metric} in the runs of "
                             f"{a if not va else b}: check --splits and --metric")
        tests.append(compare_arms(va, vb, threshold))
        lines.append((split, statistics.median(va.values()), statistics.median(vb.values())))
    fisher_holm = holm_adjust([t.fisher_p for t in tests])
    rank_holm = holm_adjust([t.wilcoxon_p for t in tests])
    out = [f"A: `{a}`; B: `{b}`; {metric}, seeds {', '.join(map(str, seeds))} "
           f"(the seeds both finished); solved: ≥ {threshold:g} %.", "",
           "| split | A median | B median | A solved | B solved | Fisher p | Holm | "
           "Wilcoxon p | Holm |", "|---|---|---|---|---|---|---|---|---|"]
    for (split, ma, mb), t, fh, rh in zip(lines, tests, fisher_holm, rank_holm):
        out.append(f"| {split} | {ma:.1f} | {mb:.1f} | {t.a_k}/{t.n} | {t.b_k}/{t.n} | "
                   f"{t.fisher_p:.3g} | {fh:.3g} | {t.wilcoxon_p:.3g} | {rh:.3g} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("record", type=Path, help="results/record/<study> (holds mlflow.db)")
    ap.add_argument("--a", required=True, help="one cell, as the record names it (task=...,variant=...)")
    ap.add_argument("--b", required=True, help="the other cell")
    ap.add_argument("--splits", required=True, help="comma-separated test splits, e.g. len15,len30,len100")
    ap.add_argument("--metric", default="seq_acc", help="metric per split (default seq_acc)")
    ap.add_argument("--threshold", type=float, default=90.0, help="a seed at >= this %% solved the split")
    ap.add_argument("--out", type=Path, help="write the Markdown here instead of stdout")
    args = ap.parse_args(argv)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    text = "\n".join(rows(args.record, args.a, args.b, splits, args.metric, args.threshold)) + "\n"
    emit(text, args.out, "compare_cells.py",
         [str(args.record), "--a", args.a, "--b", args.b, "--splits", ",".join(splits),
          "--metric", args.metric, "--threshold", f"{args.threshold:g}"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
