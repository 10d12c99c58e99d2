"""Metrics register once and record: the trainer computes every registered metric that applies,
and the reports' tolerances and accuracy counts read the registry."""

from __future__ import annotations


import pytest

from locattn import registry
from locattn.config import make_run_config
from locattn.train import train
from reports import agreement as A
from reports.tables import get_table

TINY = {"task.train_size": 48, "task.dev_size": 8, "task.test_size": 12, "task.test_lengths": (15,),
        "optim.epochs": 1, "num_threads": 1}


def seq_err(pred, gold, *, eos_id):
    """Fraction of outputs that differ from the target (both cut after their first <eos>)."""
    def cut(row):
        return list(row[: row.index(eos_id) + 1]) if eos_id in row else list(row)
    return sum(cut(p) != cut(g) for p, g in zip(pred, gold)) / len(gold)


@pytest.fixture
def plugin_metric():
    entry = registry.register_metric(
        "seq_err", seq_err, label="Error rate", direction="min", scale="percent",
        tolerance=registry.Tolerance("relative", 0.5, rule="within half the paper's value"),
        doc="1 - sequence accuracy, as a plugin would compute it.")
    yield entry
    registry.unregister("metric", "seq_err")


def test_the_builtin_metrics_keep_their_rules():
    """Each built-in's direction, scale, accuracy flag and tolerance as the reports used them
    (the tolerance sentences are the ones the committed agreement summaries print)."""
    m = {n: e.meta for n, e in registry.entries("metric").items() if e.builtin}
    assert [n for n, v in m.items() if v["computed_by"] == "predictions"] == [
        "seq_acc", "seq_acc_be", "edit_distance"]
    assert {n for n, v in m.items() if v["accuracy"]} == {
        "seq_acc", "seq_acc_be", "raffel_accuracy", "accuracy_by_length"}
    assert {n: v["direction"] for n, v in m.items() if v["direction"] == "min"} == {
        "edit_distance": "min", "attn_loss": "min", "epochs_to_100": "min"}
    assert registry.metric("accuracy").name == "raffel_accuracy"
    assert dict(A.TOLERANCE_RULES)["edit_distance"].startswith("within 10 % of the column's target length")
    assert A.TOLERANCE_RULES["accuracy"] == A.TOLERANCE_RULES["seq_acc"] == "within 10 points (accuracy in %)"
    assert A.TOLERANCE_RULES["attn_loss"].startswith("within 25 % of the paper's value")
    # the tolerance rules of the built-in tables, cell by cell, as before the registry held them
    t9, t3, r1 = get_table("rc_table9"), get_table("dubois_table3"), get_table("raffel_table1")
    col15 = next(c.key for c in t9.columns if c.label == "15")
    assert A.tolerance(t9, col15, 3.0, 1.5) and not A.tolerance(t9, col15, 3.0, 1.51)
    assert A.tolerance(t3, "interp", 2.0, -0.5) and not A.tolerance(t3, "interp", 2.0, 0.51)
    assert A.tolerance(r1, r1.columns[0].key, 10.0, 5.0) and not A.tolerance(r1, r1.columns[0].key, 10.0, 5.1)
    assert A.tolerance(r1, r1.columns[0].key, 50.0, 10.0, greyed=True)
    assert not A.tolerance(r1, r1.columns[0].key, 50.0, 10.5, greyed=True)


def test_a_registered_tolerance_and_accuracy_flag_reach_the_reports(plugin_metric):
    """agreement.py names no metric: a plugin metric's tolerance and accuracy flag come from
    its registration."""
    import dataclasses

    table = dataclasses.replace(get_table("rc_table2"), metric="seq_err", direction="min")
    col = table.columns[0].key
    assert A.tolerance(table, col, 20.0, 9.9) and not A.tolerance(table, col, 20.0, 10.1)
    assert A.TOLERANCE_RULES["seq_err"] == "within half the paper's value"
    assert not registry.is_accuracy("seq_err") and registry.is_accuracy("seq_acc")


def test_a_table_recorded_with_its_metric_tolerance_needs_no_plugin():
    """A study's own table keeps its metric's tolerance and accuracy flag (recorded with the
    study), so a report compares its cells by them with the metric's plugin not imported."""
    import dataclasses

    table = dataclasses.replace(get_table("rc_table2"), metric="gone_metric", direction="max",
                                tolerance=("relative", 0.5, "within half", None), accuracy=True)
    col = table.columns[0].key
    assert not registry.has("metric", "gone_metric")
    assert A.tolerance(table, col, 20.0, 9.9) and not A.tolerance(table, col, 20.0, 10.1)
    assert A.metric_tolerance("gone_metric", table).rule == "within half"
    plain = dataclasses.replace(table, tolerance=None, accuracy=None)  # the registry's default
    assert A.tolerance(plain, col, 20.0, 10.0) and not A.tolerance(plain, col, 20.0, 10.1)


@pytest.mark.parametrize("kwargs, message", [
    ({"direction": "up"}, "direction='up'; valid: ['max', 'min']"),
    ({"scale": "percentage"}, "scale='percentage'; valid: ['percent', 'raw']"),
    ({"computed_by": "trainer"}, "computed_by='trainer' is for the built-ins"),
    ({"key": "seq_acc"}, "key 'seq_acc' is already the key of metric 'seq_acc'"),
    ({"key": "n"}, "key 'n' must be lower-case"),
    ({"tolerance": 0.1}, "tolerance must be a locattn.registry.Tolerance"),
])
def test_a_bad_metric_registration_is_one_line(kwargs, message):
    with pytest.raises(registry.PluginError) as info:
        registry.register_metric("bad_metric", seq_err, label="Bad", **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not registry.has("metric", "bad_metric")


def test_a_plugin_metric_is_computed_and_recorded_by_a_training_run(tmp_path, plugin_metric):
    """A tiny in-process training run computes the plugin metric on every test split (the
    trainer passes pred and gold as documented: it equals 1 - seq_acc) and its final metrics,
    what the record writer logs to MLflow, carry it as ``test.<split>.seq_err``. (Its place in
    ``study status`` and in a table: tests/e2e/test_spec_tables.py.)"""
    cfg = make_run_config(task="copy", variant="content", seed=0,
                          overrides={**TINY, "cache_dir": str(tmp_path / "cache")})
    result = train(cfg, tmp_path / "run")
    finals = result.final_metrics()
    for split in ("iid", "len15"):
        assert finals[f"test.{split}.seq_err"] == pytest.approx(1 - finals[f"test.{split}.seq_acc"])
        keys = list(result.test[split])  # the built-ins first, in their order; n last
        assert keys[:4] == ["seq_acc", "seq_acc_be", "edit_distance", "seq_err"] and keys[-1] == "n"


def test_a_plugin_metric_that_fails_is_one_line_naming_it(tmp_path):
    def broken(pred, gold, *, eos_id):
        raise ZeroDivisionError("division by zero")

    registry.register_metric("broken_metric", broken, label="Broken")
    try:
        cfg = make_run_config(task="copy", variant="content", seed=0,
                              overrides={**TINY, "cache_dir": str(tmp_path / "cache")})
        with pytest.raises(registry.PluginError) as info:
            train(cfg, tmp_path / "run")
    finally:
        registry.unregister("metric", "broken_metric")
    assert "metric 'broken_metric'" in str(info.value) and "ZeroDivisionError" in str(info.value)
    assert "fn(pred, gold, eos_id=)" in str(info.value)


def test_a_metric_restricted_to_tasks_is_computed_only_for_them():
    registry.register_metric("copy_only", seq_err, label="Copy only", tasks=("copy",))
    try:
        assert "copy_only" in [e.name for e in registry.split_metrics_for("seq2seq", "copy")]
        assert "copy_only" not in [e.name for e in registry.split_metrics_for("seq2seq", "recopy")]
        assert "copy_only" not in [e.name for e in registry.split_metrics_for("regression", "raffel_add")]
    finally:
        registry.unregister("metric", "copy_only")
