"""The report tables, read from the one table registry (:mod:`locattn.table_defs`).

The table layouts (:class:`TableDef`, :class:`Column`, ...) and the built-in paper tables are
defined and registered in :mod:`locattn.table_defs` (standard library only, so ``study`` checks a
spec's ``tables:`` against the same registry without importing ``reports``); a plugin registers
its own with :func:`locattn.register_table`, and a study spec may declare one (recorded with
the study: :func:`study_tables`). This module is the reports' face of that registry.
"""

from __future__ import annotations

import difflib
import json
from typing import Mapping

from locattn.table_defs import (
    DUBOIS_INTERP_SPLITS,
    LEGACY_PROTOCOL,
    RC_PANEL_A,
    RC_PANEL_B,
    STATS,
    TEST_SELECTED_PROTOCOL,
    Column,
    ColumnGroup,
    Direction,
    MetricKind,
    Panel,
    Stat,
    TableDef,
    TableView,
    table_from_dict,
)

#: {id: TableDef} of every registered numeric table (built-ins first, then plugins'): a live view.
TABLES: Mapping[str, TableDef] = TableView(exhibit=False)
#: {id: description} of the qualitative exhibits (``reports/exhibits.py``): ids a spec's
#: ``tables:`` may name besides the numeric tables; ``reports build`` writes them from the
#: runs' artifacts. A live view of the table registry.
EXHIBITS: Mapping[str, str] = TableView(exhibit=True)

#: File stem (and ``--table`` id) of the per-cell summary ``reports build`` writes for a study
#: that declares no table, or when asked for beside the tables.
SUMMARY_ID = "summary"


def study_tables(defs_json: str | None) -> dict[str, TableDef]:
    """{id: TableDef} of the tables a study recorded with itself (its parent run's
    ``locattn.table_defs`` tag: a spec's own tables and plugins' tables, as JSON); {} for none."""
    if not defs_json:
        return {}
    try:
        items = json.loads(defs_json)
    except ValueError as exc:
        raise ValueError(f"the study's recorded table definitions are not JSON: {exc}") from None
    return {t.id: t for t in (table_from_dict(d) for d in items)}


def get_table(table_id: str, recorded: Mapping[str, TableDef] | None = None) -> TableDef:
    """The table ``table_id``: a registered one, else one of ``recorded`` (a study's own,
    :func:`study_tables`); ValueError listing the valid ids otherwise."""
    if recorded and table_id in recorded:
        return recorded[table_id]
    try:
        return TABLES[table_id]
    except KeyError:
        valid = sorted({*TABLES, *(recorded or {})})
        close = difflib.get_close_matches(str(table_id), valid, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"unknown table id {table_id!r}{hint}; valid: {', '.join(valid)}"
        ) from None


__all__ = [
    "Column",
    "ColumnGroup",
    "DUBOIS_INTERP_SPLITS",
    "Direction",
    "EXHIBITS",
    "LEGACY_PROTOCOL",
    "MetricKind",
    "Panel",
    "RC_PANEL_A",
    "RC_PANEL_B",
    "STATS",
    "SUMMARY_ID",
    "Stat",
    "TABLES",
    "TEST_SELECTED_PROTOCOL",
    "TableDef",
    "get_table",
    "study_tables",
]
