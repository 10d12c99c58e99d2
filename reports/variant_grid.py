"""The variant x task grid of a study that names no paper table: rows are variants and columns
are (task, test split), every one under its registered label (:class:`reports.row_labels.StudyLabels`),
so a plugin's rows sit beside the built-ins' as in a paper table.

Each cell is the summary's number (:func:`reports.aggregate.cell_summaries`): the median over the
chosen hyperparameters' finished seeds of the headline metric, with (k/n) seeds solved.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from reports.aggregate import CellSummary
from reports.row_labels import StudyLabels
from reports.render import MISSING, Provenance, seeds_text, text_table

GRID_ID = "grid"
"""The file stem of the grid (``grid.md``, ``grid.tex``, ``grid.csv``)."""


def _axes(cell: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in cell.split(",") if "=" in part)


@dataclass(frozen=True)
class Grid:
    """The grid before it becomes text: a row per variant, a column per (task, test split)."""

    head: list[str]
    """Column heads: ``Variant``, then ``<task label> <split>``."""
    keys: list[str]
    """The headline metric key of each column after the first (``test.len100.seq_acc``)."""
    rows: list[tuple[str, list[CellSummary | None]]]
    """Per variant: its label and, per column after the first, its cell (None: not run)."""
    tasks: list[str] = field(default_factory=list)
    """The task label of each column after the first (empty: the columns are not by task)."""


def grid_layout(summaries: list[CellSummary], keys: list[str], labels: StudyLabels) -> Grid | None:
    """The grid's cells under their labels; None when the cells are not told apart by task and
    variant alone (another axis, or no task/variant in the cell id)."""
    place: dict[tuple[str, str], CellSummary] = {}
    for s in summaries:
        axes = _axes(s.cell)
        if set(axes) != {"task", "variant"}:
            return None
        place[(axes["task"], axes["variant"])] = s
    # by key, not by the order the store returned the cells in: the same record gives the same grid
    tasks = sorted({t for t, _ in place})
    variants = sorted({v for _, v in place})
    columns = [(t, k) for t in tasks for k in keys
               if any(k in s.medians for (t2, _), s in place.items() if t2 == t)]
    head = ["Variant", *(f"{labels.task(t)} {k.removeprefix('test.')}" for t, k in columns)]
    rows = [(labels.variant(v), [place.get((t, v)) for t, _ in columns]) for v in variants]
    return Grid(head=head, keys=[k for _, k in columns], rows=rows,
                tasks=[labels.task(t) for t, _ in columns])


def grid_rows(summaries: list[CellSummary], keys: list[str], labels: StudyLabels
              ) -> tuple[list[str], list[list[str]]] | None:
    """Header and text rows of the grid (:func:`grid_layout`); None as it."""
    grid = grid_layout(summaries, keys, labels)
    if grid is None:
        return None
    rows = [[label, *(MISSING if s is None else seeds_text(s, k) for s, k in zip(cells, grid.keys))]
            for label, cells in grid.rows]
    return grid.head, rows


def render_grid(summaries: list[CellSummary], keys: list[str], labels: StudyLabels,
                provenance: Provenance, fmt: str, solved_at: float) -> str | None:
    """The grid as Markdown (``md``), LaTeX (``latex``) or CSV (``csv``) text; None as
    :func:`grid_rows`."""
    made = grid_rows(summaries, keys, labels)
    if made is None:
        return None
    head, rows = made
    caption = (f"Study {provenance.study}: per variant and task, the median over seeds of each "
               f"test split at the hyperparameters chosen on dev; (k/n): k of n seeds reached "
               f"{solved_at:g} % or more.")
    if fmt == "csv":
        buf = io.StringIO()
        buf.writelines(f"# {ln}\n" for ln in provenance.lines())
        csv.writer(buf, lineterminator="\n").writerows([head, *rows])
        return buf.getvalue()
    return text_table(head, rows, provenance, caption, GRID_ID, fmt, n_left=1)


__all__ = ["GRID_ID", "Grid", "grid_layout", "grid_rows", "render_grid"]
