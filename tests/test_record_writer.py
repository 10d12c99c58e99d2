"""The record writer against a real SQLite MLflow store: a driver killed inside
``RecordWriter.finish`` leaves a run that the next driver finishes, never one tagged finished
that MLflow shows RUNNING for good."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from record import schema
from record.writer import RecordWriter


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
