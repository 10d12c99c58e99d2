"""Two cells, split by split: is the difference between them larger than seed variance?

The cells: an ablation against its control, one attender against another, or a study's cell
against the same cell of its one-change arm.

    python results/analysis/compare_cells.py results/record/<study> \
        --a task=lookup,variant=dubois_location --b task=lookup,variant=dubois_transformer \
        --splits longer_seen_1,longer_seen_3,longer_seen_5 [--metric seq_acc] [--threshold 90] \
        [--out FILE.md]
    python results/analysis/compare_cells.py results/record/<study> --b-record results/record/<arm> \
        --a task=lookup,variant=dubois_location --splits ...

Cell B is read from ``--b-record`` when given (default: the same record), and is cell A when
``--b`` is left out, so an arm profile (one field changed, run as its own study) is compared
with the same cell of the study it changes.

Per split: each cell's median over its finished seeds and its seeds at or above the
threshold, then two two-sided tests of A against B over the seeds both cells finished:
Fisher's exact test of the success counts, and the Wilcoxon signed-rank test of the per-seed
differences (paired by seed, as the tables' ties are), each with its Holm-adjusted p-value over
the splits (the family a claim like "A beats B at every length" is read against).
With ``--out``, the file's first line names the command that made it, and
``tests/paper/test_results.py`` remakes every committed ``results/analysis/*.md`` from its first line.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from made_by import analysis_parser, emit, split_list  # results/analysis/made_by.py, beside this script
from per_seed import seed_values  # beside this script too
from reports.aggregate import holm_adjust
from reports.agreement import compare_arms


def rows(record: Path, a: str, b: str | None, splits: list[str], metric: str,
         threshold: float, b_record: Path | None = None) -> list[str]:
    """Markdown table rows (header first), one per split, and a line naming the seeds."""
    b = b or a
    if b_record is None and a == b:
        raise SystemExit(f"--a and --b name the same cell ({a}): compare two cells, or one cell "
                         "of two records with --b-record")
    by_a = seed_values(record, splits, metric, [a])[1][a]
    by_b = seed_values(b_record or record, splits, metric, [b])[1][b]
    seeds = sorted(set(by_a) & set(by_b))
    if not seeds:
        raise SystemExit(f"cells {a} and {b} have no finished seed in common "
                         f"({a}: {sorted(by_a)}; {b}: {sorted(by_b)})")
    tests, lines = [], []
    for i, split in enumerate(splits):
        va = {s: by_a[s][i] for s in seeds if by_a[s][i] is not None}
        vb = {s: by_b[s][i] for s in seeds if by_b[s][i] is not None}
        if not va or not vb:
            raise SystemExit(f"{record if not va else b_record or record}: no test.{split}.{metric} "
                             f"in the runs of {a if not va else b}: check --splits and --metric")
        tests.append(compare_arms(va, vb, threshold))
        lines.append((split, statistics.median(va.values()), statistics.median(vb.values())))
    fisher_holm = holm_adjust([t.fisher_p for t in tests])
    rank_holm = holm_adjust([t.wilcoxon_p for t in tests])
    where = "" if b_record is None else f" of `{record.name}`"
    where_b = "" if b_record is None else f" of `{b_record.name}`"
    out = [f"A: `{a}`{where}; B: `{b}`{where_b}; {metric}, seeds {', '.join(map(str, seeds))} "
           f"(the seeds both finished); solved: ≥ {threshold:g} %.", "",
           "| split | A median | B median | A solved | B solved | Fisher p | Holm | "
           "Wilcoxon p | Holm |", "|---|---|---|---|---|---|---|---|---|"]
    for (split, ma, mb), t, fh, rh in zip(lines, tests, fisher_holm, rank_holm):
        out.append(f"| {split} | {ma:.1f} | {mb:.1f} | {t.a_k}/{t.n} | {t.b_k}/{t.n} | "
                   f"{t.fisher_p:.3g} | {fh:.3g} | {t.wilcoxon_p:.3g} | {rh:.3g} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = analysis_parser(__doc__, "a seed at >= this %% solved the split", splits=True)
    ap.add_argument("--a", required=True, help="one cell, as the record names it (task=...,variant=...)")
    ap.add_argument("--b", help="the other cell (default: --a's cell, read from --b-record)")
    ap.add_argument("--b-record", type=Path, help="read cell B from this record (an arm's study)")
    args = ap.parse_args(argv)
    splits = split_list(args.splits)
    if args.b is None and args.b_record is None:
        ap.error("give --b (another cell of the record), --b-record (the same cell of another "
                 "record), or both")
    text = "\n".join(rows(args.record, args.a, args.b, splits, args.metric, args.threshold,
                          args.b_record)) + "\n"
    emit(text, args.out, "compare_cells.py",
         [str(args.record), *(["--b-record", str(args.b_record)] if args.b_record else []),
          "--a", args.a, *(["--b", args.b] if args.b else []), "--splits", ",".join(splits),
          "--metric", args.metric, "--threshold", f"{args.threshold:g}"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
