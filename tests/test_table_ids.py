"""The report table ids: defined by ``reports.tables``, named by ``record.schema.TABLE_IDS`` (what
``study`` validates a spec's ``tables:`` against), checked equal when ``reports.tables`` loads."""

from __future__ import annotations

import pytest

from record import schema
from reports.tables import EXHIBITS, TABLES, check_table_ids


def test_the_reports_tables_and_exhibits_are_the_ids_a_spec_may_name() -> None:
    check_table_ids(TABLES, EXHIBITS)
    assert set(schema.TABLE_IDS) == set(TABLES) | set(EXHIBITS)


def test_a_table_missing_on_either_side_is_named() -> None:
    with pytest.raises(ValueError, match=r"only in reports.tables: \['rc_table99'\]; only in record.schema"
                                         r".TABLE_IDS: \[\]"):
        check_table_ids([*TABLES, "rc_table99"], EXHIBITS)
    with pytest.raises(ValueError, match=r"only in reports.tables: \[\]; only in record.schema.TABLE_IDS: "
                                         r"\['dubois_fig9'\]"):
        check_table_ids(TABLES, [e for e in EXHIBITS if e != "dubois_fig9"])
