"""The report table ids live in one registry (:mod:`locattn.table_defs`, kind ``table``): the
reports' ``TABLES`` and ``EXHIBITS`` are views of it, a spec's ``tables:`` is checked against it,
and a plugin's table joins it through ``locattn.register_table``."""

from __future__ import annotations

import dataclasses

import pytest

from locattn import registry, table_defs
from record import schema
from reports.tables import EXHIBITS, TABLES, get_table


def test_the_reports_tables_and_exhibits_are_the_registry():
    everything = registry.entries("table")  # an installed plugin's tables (examples/) too
    assert set(everything) == set(TABLES) | set(EXHIBITS)
    entries = {n: e for n, e in everything.items() if e.builtin}
    assert list(entries) == [*(t for t in TABLES if t in entries), *(t for t in EXHIBITS if t in entries)]
    assert {n for n, e in entries.items() if e.meta["exhibit"]} == {"rc_table10", "dubois_fig9"}
    assert not hasattr(schema, "TABLE_IDS")  # no second list of ids
    for tid, table in TABLES.items():  # each built-in's metric is a registered one, same direction
        assert table.id == tid
        assert registry.metric(table.metric).meta["direction"] == table.direction


def test_a_plugin_table_joins_the_registry_and_a_spec_may_name_it(tmp_path):
    from study.spec import SpecError, load_spec

    mine = dataclasses.replace(get_table("rc_table4"), id="plugin_table4", title="Mine")
    registry.register_table("plugin_table4", mine, label="A plugin's table")
    try:
        assert TABLES["plugin_table4"] is mine and "plugin_table4" in TABLES
        assert "plugin_table4" not in EXHIBITS and get_table("plugin_table4") is mine
        spec = tmp_path / "s.yaml"
        spec.write_text("tables: [rc_table4, plugin_table4]\ngrid: {task: [copy], variant: [onestep]}\n")
        loaded = load_spec(spec)
        assert loaded.tables == ("rc_table4", "plugin_table4")
        # the study records the plugin's table (a report needs no plugin), not the built-in
        assert [d["id"] for d in loaded.table_defs] == ["plugin_table4"]
        recorded = table_defs.table_from_dict(loaded.table_defs[0])
        assert recorded == dataclasses.replace(mine, tolerance=("points", 10.0, "within 10 points (accuracy in %)",
                                                                None), accuracy=True)
    finally:
        registry.unregister("table", "plugin_table4")
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    assert "unknown table 'plugin_table4'" in str(info.value) and "rc_table4" in str(info.value)


def test_a_bad_table_registration_is_one_line():
    with pytest.raises(registry.PluginError, match="the TableDef's id is 'rc_table2'"):
        registry.register_table("other_id", get_table("rc_table2"), label="x")
    with pytest.raises(registry.PluginError, match="target must be a TableDef"):
        registry.register_table("no_target", None, label="x")
    with pytest.raises(registry.PluginError, match="is already registered"):
        registry.register_table("rc_table2", dataclasses.replace(get_table("rc_table2"), title="t"),
                                label="x")
