"""The record writer against a real SQLite MLflow store: a driver killed inside
``RecordWriter.finish`` leaves a run that the next driver finishes, never one tagged finished
that MLflow shows RUNNING for good."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from record import schema
from record.writer import RecordWriter


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch) -> None:
    """The writers here have no artifact location, so MLflow puts their artifacts (a dirty
    tree's code.diff) in ./mlruns: here, never in the checkout."""
    monkeypatch.chdir(tmp_path)


class Killed(BaseException):
    """The driver dying between two MLflow calls."""


def writer(uri: str) -> RecordWriter:
    return RecordWriter(tracking_uri=uri, study="s", artifact_location=None, parent_tags={}).open()


@pytest.mark.parametrize("dies_in", ["set_terminated", "log_batch"])
def test_a_kill_inside_finish_leaves_a_run_the_next_driver_finishes(tmp_path: Path, monkeypatch,
                                                                   dies_in: str) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    w = writer(uri)
    state = w.create_run("k", tags={schema.RUN_KEY: "k", schema.ROLE: schema.ROLE_TRIAL,
                                    schema.STATUS: schema.STATUS_RUNNING}, params={}, name="k")
    w.buffer_epochs("k", [{"epoch": 1, "train_loss": 0.5}])
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def die(*args, **kwargs):
        raise Killed

    with monkeypatch.context() as m:  # the driver dies at one of finish's MLflow writes
        m.setattr(w.client, dies_in, die)
        with pytest.raises(Killed):
            w.finish("k", {"epochs_run": 1.0}, run_dir)

    again = writer(uri)  # the next driver: a run tagged finished is skipped by a resume...
    seen = MlflowClient(tracking_uri=uri).get_run(state.run_id)
    if seen.data.tags[schema.STATUS] == schema.STATUS_FINISHED:  # ...so it must be FINISHED
        assert seen.info.status == "FINISHED"
        return
    assert again.runs["k"].status != schema.STATUS_FINISHED  # else its trial runs again
    again.mark_running(again.runs["k"])
    again.buffer_epochs("k", [{"epoch": 1, "train_loss": 0.5}])
    again.finish("k", {"epochs_run": 1.0}, run_dir)
    run = MlflowClient(tracking_uri=uri).get_run(state.run_id)
    assert run.info.status == "FINISHED" and run.data.tags[schema.STATUS] == schema.STATUS_FINISHED
    history = MlflowClient(tracking_uri=uri).get_metric_history(state.run_id, "epochs_run")
    assert [m.value for m in history] == [1.0]  # final metrics logged once


FINALS = {"epochs_run": 2.0, "best_epoch": 2.0, "test.iid.seq_acc": 100.0}


@pytest.mark.parametrize("reader", ["sql_index", "mlflow_client"])
def test_a_kill_inside_log_batch_between_metrics_and_tags_logs_each_final_once(
        tmp_path: Path, monkeypatch, reader: str) -> None:
    """MLflow's SQL store commits a batch's metrics and its tags in two transactions (seen in
    bench_chaos on CI: a run with its 13 finals logged twice). A driver killed between them
    leaves the finals and the last epoch without the finished tag; the next driver finishes the
    run and logs no final or epoch a second time, whether it reads the store by SQL (SQLite) or
    through MLflow's client (a server, PostgreSQL)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    w = writer(uri)
    state = w.create_run("k", tags={schema.RUN_KEY: "k", schema.ROLE: schema.ROLE_TRIAL,
                                    schema.STATUS: schema.STATUS_RUNNING}, params={}, name="k")
    w.buffer_epochs("k", [{"epoch": 1, "train_loss": 0.5}])
    w.flush()
    w.buffer_epochs("k", [{"epoch": 2, "train_loss": 0.25}])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = w.client._tracking_client.store

    def die(*args, **kwargs):
        raise Killed

    with monkeypatch.context() as m:
        m.setattr(store, "_set_tags", die)  # the metrics' transaction committed, the tags' not
        with pytest.raises(Killed):
            w.finish("k", FINALS, run_dir)
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(state.run_id).data.tags[schema.STATUS] == schema.STATUS_RUNNING
    assert [m.value for m in client.get_metric_history(state.run_id, "epochs_run")] == [2.0]

    if reader == "mlflow_client":
        monkeypatch.setattr("record.writer.run_index", lambda *a: None)
    again = writer(uri)
    assert again.runs["k"].status != schema.STATUS_FINISHED and again.runs["k"].last_step == 2
    assert again.runs["k"].finals_logged == set(FINALS)
    again.mark_running(again.runs["k"])
    again.buffer_epochs("k", [{"epoch": 1, "train_loss": 0.5}, {"epoch": 2, "train_loss": 0.25}])
    again.finish("k", FINALS, run_dir)
    run = client.get_run(state.run_id)
    assert run.info.status == "FINISHED" and run.data.tags[schema.STATUS] == schema.STATUS_FINISHED
    for key in FINALS:
        assert [m.value for m in client.get_metric_history(state.run_id, key)] == [FINALS[key]], key
    assert [(m.step, m.value) for m in client.get_metric_history(state.run_id, "train_loss")] == [(1, 0.5), (2, 0.25)]


def test_a_kill_between_creating_a_run_and_its_params_is_completed_by_the_next_driver(
        tmp_path: Path, monkeypatch) -> None:
    """create_run logs a run's params in chunks of 100 after creating it: a driver killed after
    the first chunk left a run the index finds by its key, without the rest of its params
    (reports read them). The next driver logs only those it lacks, once."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params = {f"p{i:03d}": i for i in range(150)} | {"task.test_lengths": [15, 30]}
    w = writer(uri)
    calls = []
    real = w.client.log_batch

    def dies_on_second_params_chunk(run_id, *args, **kwargs):
        calls.append(kwargs.get("params"))
        if kwargs.get("params") and len(calls) == 2:
            raise Killed
        return real(run_id, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(w.client, "log_batch", dies_on_second_params_chunk)
        with pytest.raises(Killed):
            w.create_run("k", tags={schema.RUN_KEY: "k", schema.ROLE: schema.ROLE_TRIAL,
                                    schema.STATUS: schema.STATUS_RUNNING}, params=params, name="k")
    client = MlflowClient(tracking_uri=uri)
    (run,) = [r for r in client.search_runs([w.experiment_id]) if r.data.tags.get(schema.RUN_KEY) == "k"]
    assert len(run.data.params) == 100

    again = writer(uri)
    state = again.runs["k"]
    assert not state.params_complete
    assert again.complete_params(state, params) == 51
    assert again.complete_params(state, params) == 0  # checked once per driver
    got = client.get_run(run.info.run_id).data.params
    assert got == {k: (json.dumps(v) if isinstance(v, list) else str(v)) for k, v in params.items()}
