"""The papers' published numbers, kept as data in ``reports/paper_numbers/<table id>.csv``.

Each file has the header ``row,column,value,std,greyed``: ``row`` is a variant key, ``column``
a column key of the table definition (see :mod:`reports.tables`), ``value`` the published
number as printed (percent for accuracies), ``std`` the published std (mean ± std tables, else
empty) and ``greyed`` 1 when the paper greys the value out (Raffel & Ellis: an accuracy after
the budget instead of an epoch count).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from reports.tables import TableDef

PAPER_DIR = Path(__file__).parent / "paper_numbers"


@dataclass(frozen=True, kw_only=True)
class PaperValue:
    """One published cell."""

    value: float
    """The number as printed."""
    std: float | None = None
    """Published standard deviation, if any."""
    greyed: bool = False
    """Greyed out in the paper (accuracy after the budget)."""


def load_paper_numbers(table: TableDef, directory: Path = PAPER_DIR) -> dict[tuple[str, str], PaperValue]:
    """Published numbers of ``table`` keyed by (variant, column key); {} when none are kept.

    Rows or columns that the table definition does not know are errors naming the file and key.
    A table that keeps its published numbers itself (a spec's own table, read from the CSV
    beside the spec when it was launched: ``TableDef.published``) gives those.
    """
    if table.published:
        return {(row, col): PaperValue(value=value, std=std, greyed=greyed)
                for row, col, value, std, greyed in table.published}
    path = directory / f"{table.id}.csv"
    if not path.exists():
        return {}
    rows, cols = set(table.rows), {c.key for c in table.columns}
    out: dict[tuple[str, str], PaperValue] = {}
    with path.open(newline="") as fh:
        for i, rec in enumerate(csv.DictReader(fh), start=2):
            if rec["row"] not in rows:
                raise ValueError(f"{path}:{i}: row {rec['row']!r} not in {table.id}; valid: "
                                 f"{', '.join(table.rows)}")
            if rec["column"] not in cols:
                raise ValueError(f"{path}:{i}: column {rec['column']!r} not in {table.id}; "
                                 f"valid: {', '.join(sorted(cols))}")
            out[(rec["row"], rec["column"])] = PaperValue(
                value=float(rec["value"]),
                std=float(rec["std"]) if rec.get("std") else None,
                greyed=rec.get("greyed", "").strip() == "1",
            )
    return out
