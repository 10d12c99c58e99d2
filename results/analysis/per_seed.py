"""Per-seed values of a committed study, one row per cell: the table behind a write-up's
"per seed" claims, so that none of them is copied by hand.

    python results/analysis/per_seed.py results/record/<study> --splits longer_seen_1,longer_seen_3,longer_seen_5 \
        [--metric seq_acc] [--cells task=lookup,variant=mono ...] [--threshold 90] [--out FILE.md]

Per cell (in the record's order, or the order of ``--cells``): each finished seed's values of
``test.<split>.<metric>`` (percent, joined by " / "), the median over seeds per split, and per
split how many seeds reached the threshold. Seeds without a finished run show "–".
With ``--out``, the file's first line names the command that made it, and
``tests/paper/test_results.py`` remakes every committed ``results/analysis/*.md`` from its first line.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import polars as pl

from made_by import analysis_parser, emit, split_list  # results/analysis/made_by.py, beside this script
from record import schema
from reports.runset import read_runs, resolve_source

def seed_values(record: Path, splits: list[str], metric: str, cells: list[str] | None
                ) -> tuple[list[int], dict[str, dict[int, list[float | None]]]]:
    """The seeds of the record's finished trial runs, and per cell (in the record's order, or
    the order of ``cells``) each seed's values (%) of ``test.<split>.<metric>``, one per split
    (None where the run has none)."""
    uri, name = resolve_source(record)
    keys = [f"test.{s}.{metric}" for s in splits]
    rs = read_runs(uri, name, metric_keys=keys)
    trials = rs.runs.filter((pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY)
                            & (pl.col("status") == schema.STATUS_FINISHED))
    order = cells or trials["cell"].unique(maintain_order=True).to_list()
    unknown = sorted(set(order) - set(trials["cell"].to_list()))
    if unknown:
        raise SystemExit(f"{record}: no finished run of cell(s) {', '.join(unknown)}; cells with "
                         f"one: {', '.join(sorted(set(trials['cell'].to_list())))}")
    values = {(r, k): v for r, k, v in rs.metrics.select("run_id", "key", "value").iter_rows()}
    by_cell = {}
    for cell in order:
        runs = trials.filter(pl.col("cell") == cell)
        by_cell[cell] = {s: [100 * values[(rid, k)] if (rid, k) in values else None for k in keys]
                         for rid, s in runs.select("run_id", "seed").iter_rows()}
    return sorted(set(trials["seed"].to_list())), by_cell


def rows(record: Path, splits: list[str], metric: str, cells: list[str] | None,
         threshold: float) -> list[str]:
    """Markdown table rows (header first) of the per-seed values."""
    seeds, by_cell = seed_values(record, splits, metric, cells)
    head = ["cell", *(f"seed {s}" for s in seeds), "median", f"seeds ≥ {threshold:g} %"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell, by_seed in by_cell.items():
        entries = [" / ".join("–" if v is None else f"{v:.1f}" for v in by_seed[s]) if s in by_seed
                   else "–" for s in seeds]
        per_split = [[v[i] for v in by_seed.values() if v[i] is not None] for i in range(len(splits))]
        medians = " / ".join(f"{statistics.median(v):.1f}" if v else "–" for v in per_split)
        solved = " / ".join(f"{sum(x >= threshold for x in v)}/{len(v)}" for v in per_split)
        out.append(f"| {cell} | " + " | ".join(entries) + f" | {medians} | {solved} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = analysis_parser(__doc__, "count the seeds at >= this %%", splits=True)
    ap.add_argument("--cells", nargs="+", help="cells to show, in this order (default: every cell)")
    args = ap.parse_args(argv)
    splits = split_list(args.splits)
    text = "\n".join(rows(args.record, splits, args.metric, args.cells, args.threshold)) + "\n"
    emit(text, args.out, "per_seed.py",
         [str(args.record), "--splits", ",".join(splits), "--metric", args.metric,
          *(["--cells", *args.cells] if args.cells else []), "--threshold", f"{args.threshold:g}"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
