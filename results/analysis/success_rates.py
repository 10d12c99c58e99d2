"""Per-cell success rates of a committed study against the paper, with the verdict each cell
earns under the project's rule (reports/agreement.py).

    python results/analysis/success_rates.py results/record/<study> --table rc_table4 \
        [--with results/record/<other>] [--budget quick|paper] [--threshold 90] \
        [--only-disagreeing] [--out FILE.md]

With ``--out``, the file's first line is an HTML comment naming the command that made it;
``tests/paper/test_results.py`` remakes every ``results/analysis/success_rates-*.md`` from it.

Per cell with a published number: our median, the paper's, k/n seeds at or above the
threshold with its Clopper-Pearson 95 % interval, the paper's success count as its median of
5 seeds bounds it, the one-sided Fisher exact p-value, and the verdict (agreement_summary.py's
``verdict_word``). A cell here is in no Holm family, so it is never "contradicted": that needs
the paper's budget, at least 5 seeds and p < 0.05 after Holm over the table's family, which
results/analysis/agreement_summary.py judges; every other disagreement is "not reproduced at
this budget".

``--with`` (repeatable) reads another record with it as one (reports.build.collect over
several records): for a record of more seeds of the same runs (the ``gpu_seeds20`` profiles:
the ``gpu`` runs with seeds 5-19, tests/paper/test_fidelity.py). Runs merge by identity (cell,
hparams, seed): one that two records hold equal is taken once, one they hold unequal is refused
in one line; a cell is shown with the seeds it has in any of them.
"""

from __future__ import annotations

from pathlib import Path

from made_by import analysis_parser, emit  # results/analysis/made_by.py, beside this script
from agreement_summary import is_accuracy_metric, verdict_word  # beside this script
from reports.agreement import VERDICTS, success_test
from reports.build import collect
from reports.row_labels import paper_label
from reports.paper import load_paper_numbers
from reports.render import paper_diff
from reports.runset import RecordConflict


def rows(record: Path, table: str, *, budget: str, threshold: float,
         only_disagreeing: bool, pooled: tuple[Path, ...] = ()) -> list[str]:
    """Markdown table rows (header first) for one table of one study record (and the records
    ``pooled`` with it, seeds added per cell)."""
    try:  # several records are read as one, their runs merged by identity
        result = collect([record, *pooled] if pooled else record, tables=[table]).results[0]
    except RecordConflict as e:
        raise SystemExit(f"success_rates.py: {e}") from None
    if not is_accuracy_metric(result.table):
        raise SystemExit(f"{table}: success rates apply to accuracy tables only")
    paper = load_paper_numbers(result.table)
    col_label = {c.key: f"{g.label} {c.label}".strip() for p in result.table.panels
                 for g in p.groups for c in g.columns}
    out = ["| model | column | ours (median) | paper | ours solved [95 % CI] | paper's bound | "
           "Fisher p | verdict |", "|---|---|---|---|---|---|---|---|"]
    for (row, col), p in paper.items():
        cell = result.cells.get((row, col))
        if cell is None or not cell.seeds:
            continue
        d = paper_diff(result.table, result.stat, cell, p)
        if d is None:
            continue
        t = success_test([v for _, v in cell.seeds], p.value, threshold)
        word = verdict_word(d, t, paper_budget=budget == "paper", holm_p=None)
        if only_disagreeing and word == VERDICTS[0]:
            continue
        bound = f"{'≥' if p.value >= threshold else '≤'} {t.paper_k}/{t.paper_n}"
        out.append(f"| {paper_label(row)} | {col_label[col]} | {cell.median:.1f} | {p.value:g} | "
                   f"{t.k}/{t.n} [{100 * t.low:.0f}–{100 * t.high:.0f} %] | {bound} | "
                   f"{t.p_value:.3g} | {word} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = analysis_parser(__doc__, "a seed succeeds at >= this %%")
    ap.add_argument("--table", required=True, help="an accuracy table id, e.g. rc_table4")
    ap.add_argument("--budget", choices=("quick", "paper"), default="quick",
                    help="the budget the study ran at (a cell here is never 'contradicted': that needs the Holm family of agreement_summary.py)")
    ap.add_argument("--only-disagreeing", action="store_true")
    ap.add_argument("--with", dest="pooled", action="append", type=Path, default=[], metavar="RECORD",
                    help="pool this record's seeds into each cell (more seeds of the same runs; repeatable)")
    args = ap.parse_args(argv)
    text = "\n".join(rows(args.record, args.table, budget=args.budget, threshold=args.threshold,
                          only_disagreeing=args.only_disagreeing, pooled=tuple(args.pooled))) + "\n"
    emit(text, args.out, "success_rates.py",
         [str(args.record), *[a for r in args.pooled for a in ("--with", str(r))],
          "--table", args.table, "--budget", args.budget,
          "--threshold", f"{args.threshold:g}", *(["--only-disagreeing"] if args.only_disagreeing else [])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
