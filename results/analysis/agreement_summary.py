"""Agreement with the papers over every committed table, non-trivial cells first.

    python results/analysis/agreement_summary.py

Counts, per table, from the newest committed record of that table (CURRENT below), the cells
within 10 points of the paper (reports/agreement.py): first among the accuracy cells where the
paper reports more than 10 %, then among every compared cell. Prints a Markdown table with
the totals, as quoted in README "First results" and results/README.md.
"""

from __future__ import annotations

from pathlib import Path

from reports.agreement import agreement
from reports.build import collect
from reports.paper import load_paper_numbers

RECORDS = Path(__file__).resolve().parents[1] / "record"
#: (record, table ids): the newest record of each table; older generations are superseded.
CURRENT = (
    ("rc_table2-quick-v2", ("rc_table2", "rc_table9")),
    ("rc_table4-quick-v3", ("rc_table4",)),
    ("rc_table7-quick", ("rc_table7",)),
    ("rc_table7-quick_rest", ("rc_table7",)),  # the six other tasks: disjoint cells, summed
    ("rc_table6-quick", ("rc_table6",)),
    ("rc_table3_scan-quick", ("rc_table3",)),
    ("rc_table8-quick", ("rc_table8",)),
    ("rc_table8-quick_rest", ("rc_table8",)),  # the other 6 rows: disjoint cells, summed
    ("dubois_table3-quick-v2", ("dubois_table3",)),
    ("raffel_table1-quick", ("raffel_table1",)),
)


def main() -> int:
    print("| table | record | accuracy cells, paper > 10 %: within 10 | every compared cell: within 10 | published cells with a result |")
    print("|---|---|---|---|---|")
    tot = [0, 0, 0, 0, 0, 0]
    counted = set()  # a table's published cells count once, however many records share it
    for record, tables in CURRENT:
        for result in collect(RECORDS / record, tables=list(tables)).results:
            a = agreement(result, load_paper_numbers(result.table))
            nt = "–" if a.nontrivial is None else f"{a.nontrivial_within} of {a.nontrivial}"
            print(f"| {a.table} | {record} | {nt} | {a.within} of {a.compared} | "
                  f"{a.compared} of {a.published} |")
            tot[0] += a.nontrivial_within or 0
            tot[1] += a.nontrivial or 0
            tot[2] += a.within
            tot[3] += a.compared
            tot[4] += a.compared
            tot[5] += 0 if a.table in counted else a.published
            counted.add(a.table)
    print(f"| **all** | | **{tot[0]} of {tot[1]}** | {tot[2]} of {tot[3]} | {tot[4]} of {tot[5]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
