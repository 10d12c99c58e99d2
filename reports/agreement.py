"""How many cells of a table agree with the paper, counted first where the paper's number is
not trivially near zero.

Most of the agreement between a failing reproduction and a paper sits in cells where both
score about 0: a model that fails a split agrees with a paper whose model fails it too. So an
accuracy table's agreement is counted twice: over the cells where the paper reports more than
:data:`NONTRIVIAL` percent (the count that says whether a result reproduces), and over every
compared cell. Tables whose metric is not an accuracy (edit distance, attnLoss, epochs) get the
second count only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from reports.aggregate import TableResult
from reports.paper import PaperValue
from reports.render import paper_diff

NONTRIVIAL = 10.0
"""A published accuracy above this (percent) makes a cell non-trivial."""
TOLERANCE = 10.0
"""Ours within this many units (points, tokens) of the paper counts as agreement."""
ACCURACY_METRICS = ("seq_acc", "seq_acc_be")


@dataclass(frozen=True)
class Agreement:
    """Agreement counts of one table against its published numbers."""

    table: str
    """Table id."""
    compared: int
    """Cells with both a published number and a result of ours."""
    within: int
    """Compared cells where ours is within :data:`TOLERANCE` of the paper."""
    nontrivial: int | None
    """Compared cells where the paper reports more than :data:`NONTRIVIAL` %; None when the
    table's metric is not an accuracy."""
    nontrivial_within: int | None
    """Of those, the ones within :data:`TOLERANCE` points."""
    published: int
    """Published cells of the table (with or without a result of ours)."""

    def sentence(self) -> str:
        """One line, the non-trivial count first: ``rc_table2: 31 of 60 cells where ...``."""
        every = (f"{self.within} of {self.compared} compared cells in all "
                 f"({self.published} published)")
        if self.nontrivial is None:
            return f"{self.table}: {every} are within {TOLERANCE:g} of the paper"
        return (f"{self.table}: {self.nontrivial_within} of {self.nontrivial} cells where the "
                f"paper reports more than {NONTRIVIAL:g} % are within {TOLERANCE:g} points; "
                f"{every}")


def is_accuracy(result: TableResult) -> bool:
    """Whether the table shows an accuracy in percent (the non-trivial count applies)."""
    t = result.table
    return t.kind == "split" and t.metric in ACCURACY_METRICS and t.direction == "max"


def agreement(result: TableResult, paper: Mapping[tuple[str, str], PaperValue]) -> Agreement:
    """Count agreement of ``result`` with ``paper`` (keyed by (variant, column key))."""
    compared = within = nontrivial = nontrivial_within = 0
    accuracy = is_accuracy(result)
    for (row, col), p in paper.items():
        if (row, col) not in result.cells:
            continue
        d = paper_diff(result.table, result.stat, result.cell(row, col), p)
        if d is None:
            continue
        ok = abs(d) <= TOLERANCE
        compared += 1
        within += ok
        if accuracy and p.value > NONTRIVIAL:
            nontrivial += 1
            nontrivial_within += ok
    return Agreement(
        table=result.table.id, compared=compared, within=within,
        nontrivial=nontrivial if accuracy else None,
        nontrivial_within=nontrivial_within if accuracy else None,
        published=len(paper),
    )
