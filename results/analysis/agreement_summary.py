"""Agreement with the papers over every committed table, non-trivial cells first.

    python results/analysis/agreement_summary.py

Counts, per table, from the newest quick-budget record of that table (CURRENT below), the cells
that agree with the paper by the table metric's tolerance (reports.agreement.TOLERANCE_RULES:
accuracy within 10 points; edit distance within 10 % of the target length; attnLoss within
25 %; Raffel & Ellis's epochs within a factor of 1.5, and a cell that reached 100 % on one side
only is a disagreement): first among the accuracy cells where the paper reports more than 10 %,
then among every compared cell, over all 800 transcribed cells. A table whose claim is an
ordering (Dubois Table 3: the best row of each column) is judged on that ordering too. Prints
Markdown, as quoted in results/README.md.

Not here yet (issue 41, item 7): the best-budget and paper-budget counts side by side, and
Holm over each table's declared family for "contradicted".
"""

from __future__ import annotations

from pathlib import Path

from reports.agreement import TOLERANCE_RULES, agreement, best_rows
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
    ("raffel_variable-quick", ("raffel_variable",)),  # Raffel & Ellis §2.3: 4 cells
)
#: Tables whose claim is an ordering: judged on the best row of each column as well.
ORDERING = ("dubois_table3",)


def main() -> int:
    print("| table | record | accuracy cells, paper > 10 %: within 10 points | every compared cell: "
          "agrees | published cells compared |")
    print("|---|---|---|---|---|")
    tot = [0, 0, 0, 0, 0, 0]
    counted = set()  # a table's published cells count once, however many records share it
    rules, orderings = {}, []
    for record, tables in CURRENT:
        for result in collect(RECORDS / record, tables=list(tables)).results:
            paper = load_paper_numbers(result.table)
            a = agreement(result, paper)
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
            rules[a.table] = TOLERANCE_RULES.get(result.table.metric, "")
            if a.table in ORDERING:
                rows = best_rows(result, paper)
                same = sum(theirs == ours for _, theirs, ours in rows)
                orderings.append(f"{a.table} ({record}): the paper's best row is ours in {same} of "
                                 f"{len(rows)} columns (" + "; ".join(
                                     f"{c}: paper {theirs}, ours {ours or '–'}" for c, theirs, ours in rows) + ")")
    print(f"| **all** | | **{tot[0]} of {tot[1]}** | {tot[2]} of {tot[3]} | {tot[4]} of {tot[5]} |")
    print()
    for table, rule in rules.items():
        print(f"- {table}: {rule}")
    for line in orderings:
        print(f"- ordering: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
