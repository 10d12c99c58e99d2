"""Names that changed keep working where they were written: a config field's former path in
specs, ``study.json``, ``config.json`` and ``result.json``; a metric's or param's former name in a
run record, which readers see under the current name; a spec's search metric by its former name.
(Run identities: tests/locattn/test_identity.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from locattn.config import (RENAMED_FIELDS, config_to_dict, make_run_config, run_config_from_dict,
                            run_identity)
from locattn.training.results import RENAMED_RESULT_FIELDS, RunResult
from record import schema

ROOT = Path(__file__).resolve().parents[2]


def test_the_record_layer_knows_the_same_renames_as_locattn() -> None:
    assert schema.RENAMED_PARAMS is RENAMED_FIELDS  # one owner: locattn.renamed
    assert RENAMED_RESULT_FIELDS == schema.RENAMED_METRICS
    assert set(schema.RENAMED_METRICS.values()) <= set(schema.FINAL_METRICS)


@pytest.mark.parametrize("old, new, value", [
    ("optim.attn_loss_steps", "eval.attn_loss_steps", "before_eos"),
    ("optim.attn_loss_decode", "eval.attn_loss_decode", "gold_length"),
    ("optim.raffel_protocol", "eval.regression_protocol", "dev"),
])
def test_a_former_path_sets_the_field_and_naming_both_is_an_error(old, new, value) -> None:
    task, variant = ("raffel_add", "ffattn") if "regression" in new else ("lookup", "dubois_mix")
    by_old = make_run_config(task=task, variant=variant, overrides={old: value})
    by_new = make_run_config(task=task, variant=variant, overrides={new: value})
    head, leaf = old.split(".")
    nested = make_run_config(task=task, variant=variant, overrides={head: {leaf: value}})
    assert by_old == by_new == nested
    assert getattr(by_new.eval, new.split(".")[1]) == value
    with pytest.raises(ValueError, match=rf"config keys '{old}' and '{new}' name one field"):
        make_run_config(task=task, variant=variant, overrides={old: value, new: value})


def test_a_config_json_written_with_the_former_paths_loads() -> None:
    cfg = make_run_config(task="raffel_add", variant="ffattn",
                          overrides={"eval.regression_protocol": "dev", "optim.lr": 0.003})
    saved = config_to_dict(cfg)
    moved = saved.pop("eval")
    saved["optim"].update(attn_loss_steps=moved["attn_loss_steps"],
                          attn_loss_decode=moved["attn_loss_decode"],
                          raffel_protocol=moved["regression_protocol"])
    assert run_config_from_dict(saved) == cfg
    saved["eval"] = {"regression_protocol": "paper"}
    with pytest.raises(ValueError, match="'optim.raffel_protocol' and 'eval.regression_protocol'"):
        run_config_from_dict(saved)


def test_a_spec_override_by_its_former_path_is_the_same_study() -> None:
    from study.spec import same_spec, widens

    new = {"grid": {"task": ["raffel_add"]}, "overrides": {"eval.regression_protocol": "paper"},
           "search": {"metric": "best_selection_score"}}
    old = {"grid": {"task": ["raffel_add"]}, "overrides": {"optim.raffel_protocol": "paper"},
           "search": {"metric": "best_dev_score"}}
    assert same_spec(old, new) and not same_spec(old, {**new, "overrides": {}})
    # a description changes no run (dubois_table3-quick-v2's YAML gained a sentence since)
    assert same_spec({**old, "description": "a"}, {**new, "description": "b"})
    plain_old, plain_new = ({k: v for k, v in d.items() if k != "search"} for d in (old, new))
    wider = {**plain_new, "grid": {"task": ["raffel_add", "raffel_mul"]}}
    assert widens(plain_old, wider) and not widens(plain_old, plain_new)


def test_a_committed_study_json_with_former_paths_resolves() -> None:
    from record.layout import StudyPaths
    from study.recording.folder import load_meta, spec_from_meta

    meta = load_meta(StudyPaths(dir=ROOT / "results" / "record" / "raffel_table1-quick"))
    assert meta.raw["overrides"]["optim.raffel_protocol"] == "paper"
    spec = spec_from_meta(meta)
    cell = spec.cells[0]
    cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
    assert cfg.eval.regression_protocol == "paper"
    current = {k.replace("optim.raffel_protocol", "eval.regression_protocol"): v
               for k, v in cell.overrides.items()}
    assert run_identity(cfg) == run_identity(make_run_config(task=cell.task, variant=cell.variant,
                                                             overrides=current))


def test_the_search_metric_may_go_by_its_former_name(tmp_path: Path) -> None:
    from study.spec.grid import parse_search

    space = {"optim.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}
    assert parse_search("s.yaml", {"space": space, "metric": "best_dev_score"}).metric == "best_selection_score"
    assert parse_search("s.yaml", {"space": space}).metric == "best_selection_score"


def test_a_result_json_with_the_former_field_loads(tmp_path: Path) -> None:
    from study.trial.descriptor import final_metrics

    result = {"run_identity": "x", "config": {}, "kind": "seq2seq", "dev_scoring": "greedy",
              "history": [], "best_epoch": 3, "best_dev_score": -0.25, "epochs_run": 4,
              "stop_reason": "max_epochs", "test": {"len15": {"seq_acc": 0.5}}}
    loaded = RunResult.from_dict(result)
    assert loaded.best_selection_score == -0.25
    assert loaded.final_metrics()["best_selection_score"] == -0.25
    (tmp_path / "result.json").write_text(json.dumps(result))
    assert final_metrics(tmp_path, None) == {"best_selection_score": -0.25, "best_epoch": 3.0,
                                             "epochs_run": 4.0, "test.len15.seq_acc": 0.5}
    with pytest.raises(ValueError, match="'best_dev_score' and 'best_selection_score'"):
        RunResult.from_dict({**result, "best_selection_score": 1.0})


def test_the_record_reads_former_metric_and_param_names_under_the_current_ones(tmp_path: Path) -> None:
    from record.store import read_rows, sqlite_uri
    from reports.synth import SynthRun, write_bulk_sql

    runs = [SynthRun(task="raffel_add", variant="ffattn", seed=0, n_seeds=2,
                     params={"optim.raffel_protocol": "paper"},
                     metrics={"best_dev_score": 0.5, "test.test.accuracy": 0.5}),
            SynthRun(task="raffel_add", variant="ffattn", seed=1, n_seeds=2,
                     params={"eval.regression_protocol": "dev"},
                     metrics={"best_dev_score": 0.1, "best_selection_score": 0.75})]
    write_bulk_sql(tmp_path / "mlflow.db", "s", runs)
    uri = sqlite_uri(tmp_path / "mlflow.db")

    def read(**kw):
        rows = read_rows(uri, "s", tag_keys=(schema.SEED,), **kw)
        seed = {r: int(v) for r, _, v in rows.tags}
        return (sorted((seed[r], k, v) for r, k, v in rows.metrics if r in seed),
                sorted((seed[r], k, v) for r, k, v in rows.params if r in seed))

    metrics, params = read(metric_keys=["best_selection_score"], param_keys=["eval.regression_protocol"])
    assert metrics == [(0, "best_selection_score", 0.5), (1, "best_selection_score", 0.75)]
    assert params == [(0, "eval.regression_protocol", "paper"), (1, "eval.regression_protocol", "dev")]
    assert read(metric_keys=["best_dev_score"], param_keys=["optim.raffel_protocol"]) == (metrics, params)
    everything, _ = read(metric_keys=None)
    assert [m for m in everything if m[1].startswith("best_")] == metrics
    stored, _ = read(metric_keys=["best_selection_score", "best_dev_score"], as_stored=True)
    assert stored == [(0, "best_dev_score", 0.5), (1, "best_dev_score", 0.1),
                      (1, "best_selection_score", 0.75)]
