"""Every view of one real SQLite study store gives the same numbers: ``study status``
(:mod:`study.recording.cell_results`), the cell runs the writer logs for the UI (:mod:`record.writer`) and
``reports`` (the summary and the paper tables), under :mod:`record.summary`'s one rule for
non-finite values (left out of every median and ranking, and counted as diverged)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from record import schema
from record.summary import DIVERGED_KEY
from record.writer import RecordWriter
from reports.aggregate import CellSummary, aggregate, cell_summaries
from reports.render import notes, summary_rows
from reports.runset import read_runs
from reports.synth import SynthRun, write_with_client
from reports.tables import get_table
from study.recording.cell_results import cell_results, format_results

@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch) -> None:
    """MLflow puts the artifacts of a store without an artifact location in ./mlruns: here."""
    monkeypatch.chdir(tmp_path)


LOW, HIGH = {"optim.lr": 0.001}, {"optim.lr": 0.003}
KEY = "test.len15.seq_acc"


def store(tmp_path: Path, bad: float, where: str) -> tuple[str, str]:
    """2 learning rates x 3 seeds of Copy / OneStepAttn. lr 0.001: dev 0.50 and 0.60 and one
    seed with ``bad`` as its ``where`` metric; test 20 %. lr 0.003: dev 0.58, test 80 %."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = []
    for seed in range(3):
        low = {"best_selection_score": (0.55, 0.50, 0.60)[seed], "best_epoch": 3.0, KEY: 0.2}
        if seed == 0:
            low[where] = bad
        runs.append(SynthRun(task="copy", variant="onestep", seed=seed, hparams=LOW, metrics=low, n_seeds=3))
        runs.append(SynthRun(task="copy", variant="onestep", seed=seed, hparams=HIGH, n_seeds=3,
                             metrics={"best_selection_score": 0.58, "best_epoch": 3.0, KEY: 0.8}))
    write_with_client(uri, "s", runs)
    return uri, "s"


def cell_run_view(uri: str, study: str) -> tuple[str, float, float | None]:
    """(chosen hparams tag, median of KEY, seeds_diverged) on the cell run the writer logs."""
    w = RecordWriter(tracking_uri=uri, study=study, artifact_location=None, parent_tags={}).open()
    assert w.update_cells() == 1
    client = MlflowClient(tracking_uri=uri)
    (cell,) = [r for r in client.search_runs([w.experiment_id])
               if r.data.tags.get(schema.ROLE) == schema.ROLE_CELL]
    return (cell.data.tags[schema.HPARAMS], cell.data.metrics[KEY],
            cell.data.metrics.get(DIVERGED_KEY))


@pytest.mark.parametrize("bad,where", [
    (math.nan, "best_selection_score"),   # the case: polars ranked NaN above 0.58
    (math.inf, "best_selection_score"),   # MLflow stores +inf as the largest double
    (-math.inf, "best_selection_score"),
])
def test_status_ui_and_reports_choose_the_same_point(tmp_path: Path, bad: float, where: str) -> None:
    uri, study = store(tmp_path, bad, where)
    (status,) = cell_results(uri, study)
    (summary,) = cell_summaries(read_runs(uri, study))
    hparams, ui_median, _ = cell_run_view(uri, study)
    # lr 0.001's finite dev scores have median 0.55 < 0.58: lr 0.003 wins everywhere
    assert json.loads(summary.hparams) == HIGH
    assert json.loads(hparams) == HIGH
    assert status.hparams == "lr=0.003"
    assert status.median == summary.medians[KEY] == pytest.approx(100 * ui_median) == 80.0
    assert status.dev == summary.dev == pytest.approx(58.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_diverged_seed_is_left_out_and_said(tmp_path: Path, bad: float) -> None:
    """A seed whose test value is not finite: out of the median and n, flagged in each view."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=3,
                     metrics={"best_selection_score": 0.5, KEY: (bad, 0.4, 0.6)[s]}) for s in range(3)]
    write_with_client(uri, "s", runs)
    (status,) = cell_results(uri, "s")
    assert (status.median, status.n, status.diverged) == (pytest.approx(50.0), 2, 1)
    assert "1 diverged: n = 2 of 3" in format_results([status], "s")
    (summary,) = cell_summaries(read_runs(uri, "s"))
    assert summary.medians[KEY] == pytest.approx(50.0) and summary.diverged == {KEY: 1}
    assert summary_rows([summary], [KEY])[1][0][-1] == "50.0 (0/2, 1 diverged)"
    _, ui_median, ui_diverged = cell_run_view(uri, "s")
    assert ui_median == pytest.approx(0.5) and ui_diverged == 1.0
    table = get_table("rc_table2")  # a paper table over the same store
    result = aggregate(read_runs(uri, "s"), table)
    cell = result.cell("onestep", next(c.key for c in table.columns if c.tasks == ("copy",) and c.splits == ("len15",)))
    assert (cell.n, cell.n_diverged, cell.median) == (2, 1, pytest.approx(50.0))
    assert any("2 of 3 (1 diverged)" in n for n in notes(result, str))


def test_the_grid_says_a_diverged_seed_as_the_summary_does_and_fits_the_line() -> None:
    """reports.variant_grid's cells are the summary's numbers, text included: "(0/2, 1 diverged)", not
    a bare "(0/2)"; its LaTeX is scaled to the line as the summary's is (--standalone's fit)."""
    from reports.variant_grid import grid_rows, render_grid
    from reports.row_labels import StudyLabels
    from reports.render import Provenance

    s = CellSummary(cell="task=copy,variant=onestep", hparams="{}", n_points=1, dev=50.0,
                    medians={KEY: 50.0}, solved={KEY: 0}, n=3, n_expected=3, diverged={KEY: 1})
    head, rows = grid_rows([s], [KEY], StudyLabels())
    assert rows == [["OneStepAttn", "50.0 (0/2, 1 diverged)"]] == [[rows[0][0], summary_rows([s], [KEY])[1][0][-1]]]
    prov = Provenance(study="s", source="sqlite:///x.db", n_runs=3, runs_hash="0", run_code_versions=(),
                      data_time="2026-01-01T00:00:00Z")
    assert r"\resizebox{\linewidth}{!}{%" in render_grid([s], [KEY], StudyLabels(), prov, "latex", 90.0)


def test_summaries_are_logged_once_per_run_key_and_step(tmp_path: Path) -> None:
    """update_cells and log_parent_metrics, called again (a resume) or after a seed grows the
    cell, leave at most one metric row per (run, key, step)."""
    from tests.study_helpers import duplicate_metric_rows

    uri, study = store(tmp_path, 0.5, "best_selection_score")
    db = tmp_path / "mlflow.db"

    def rows() -> int:
        import sqlite3
        return sqlite3.connect(db).execute("SELECT COUNT(*) FROM metrics").fetchone()[0]

    w = RecordWriter(tracking_uri=uri, study=study, artifact_location=None, parent_tags={}).open()
    w.update_cells()
    w.log_parent_metrics({"runs_finished": 6.0, "runs_failed": 0.0})
    before = rows()
    again = RecordWriter(tracking_uri=uri, study=study, artifact_location=None, parent_tags={}).open()
    again.update_cells()  # a resume that changes nothing writes nothing
    again.log_parent_metrics({"runs_finished": 6.0, "runs_failed": 0.0})
    assert rows() == before and duplicate_metric_rows(db) == []
    write_with_client(uri, study, [SynthRun(task="copy", variant="onestep", seed=3, hparams=HIGH, n_seeds=4,
                                            metrics={"best_selection_score": 0.58, KEY: 0.9})])
    grown = RecordWriter(tracking_uri=uri, study=study, artifact_location=None, parent_tags={}).open()
    grown.update_cells()
    grown.log_parent_metrics({"runs_finished": 7.0, "runs_failed": 0.0})
    grown.log_parent_metrics({"runs_finished": 6.0, "runs_failed": 0.0})  # changed at the same step
    assert duplicate_metric_rows(db) == []
    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(grown.parent_id)
    assert parent.data.metrics["runs_finished"] == 6.0  # the latest value is the last logged
    assert rows() > before


@pytest.mark.parametrize("revive", ["restore_experiment", "restore_run"])
def test_one_active_run_per_identity_after_the_ui_revives_a_deleted_run(tmp_path: Path, revive: str) -> None:
    """A seed's run deleted in the UI, recorded again (a resume), then revived (the experiment
    deleted and restored, which restores every run deleted in it, or the run itself restored):
    every view counts the seed once, and the next driver deletes the superseded run again."""
    from record.store import read_rows
    from study.recording.status import trial_runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    seeds = [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=2,
                      metrics={"best_selection_score": 0.5, KEY: (0.4, 1.0)[s]}) for s in range(2)]
    first = write_with_client(uri, "s", seeds)
    client = MlflowClient(tracking_uri=uri)
    client.delete_run(first[1])  # the UI
    (again,) = write_with_client(uri, "s", [replace_metric(seeds[1], 0.6)],  # a resume records seed 1 again
                                 t0_ms=1_700_000_100_000)
    exp = client.get_experiment_by_name("s").experiment_id
    if revive == "restore_experiment":
        client.delete_experiment(exp)
        client.restore_experiment(exp)
    else:
        client.restore_run(first[1])
    assert client.get_run(first[1]).info.lifecycle_stage == "active"  # two runs of one identity
    assert sorted(seed for _, seed, _ in trial_runs(uri, "s")) == [0, 1]
    (status,) = cell_results(uri, "s")
    (summary,) = cell_summaries(read_runs(uri, "s"))
    assert status.n == summary.n == 2 and status.median == summary.medians[KEY] == pytest.approx(50.0)
    assert {r[0] for r in read_rows(uri, "s", tag_keys=[]).runs} >= {first[0], again}
    assert first[1] not in {r[0] for r in read_rows(uri, "s", tag_keys=[]).runs}
    if revive == "restore_run":  # `study ui` deletes it again before MLflow's UI shows it
        from study.recording.study_store import store_uri
        store_uri(uri, tmp_path, "s")
    else:  # so does the next driver
        RecordWriter(tracking_uri=uri, study="s", artifact_location=None, parent_tags={}).open()
    assert client.get_run(first[1]).info.lifecycle_stage == "deleted"
    assert client.get_run(again).info.lifecycle_stage == "active"


def replace_metric(run: SynthRun, value: float) -> SynthRun:
    from dataclasses import replace
    return replace(run, metrics={**run.metrics, KEY: value})


def recorded_folder(root: Path) -> tuple[Path, str]:
    """A study folder (``mlflow.db``, ``artifacts/``) whose one run logged ``attention.png``
    through the writer, as a study records it; returns the folder and the run id."""
    from record.store import sqlite_uri

    folder = root / "s-smoke"
    folder.mkdir(parents=True)
    w = RecordWriter(tracking_uri=sqlite_uri(folder / "mlflow.db"), study="s",
                     artifact_location=(folder / "artifacts").as_uri(), parent_tags={}).open()
    state = w.create_run("k", tags={schema.RUN_KEY: "k", schema.ROLE: schema.ROLE_TRIAL}, params={}, name="k")
    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "attention.png").write_bytes(b"original")
    w.finish("k", {"epochs_run": 1.0}, run_dir)
    return folder, state.run_id


@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_study_folder_reads_its_own_artifacts_wherever_it_lies(tmp_path: Path, how: str) -> None:
    """``study ui`` (MLflow's server reads the stored paths) and ``reports`` read the artifacts
    of the folder they are given, after the folder was moved or copied."""
    import shutil

    from record.store import sqlite_uri
    from reports.exhibits import artifact_uris
    from study.recording.study_store import store_uri

    folder, run_id = recorded_folder(tmp_path / "a")
    saved = sqlite_uri(folder / "mlflow.db")  # what study.json holds
    there = tmp_path / "b" / folder.name
    there.parent.mkdir()
    (shutil.move if how == "moved" else shutil.copytree)(folder, there)
    (there / "artifacts" / run_id / "artifacts" / "attention.png").write_bytes(b"here")
    uri = sqlite_uri(there / "mlflow.db")
    (reported,) = artifact_uris(uri, [run_id]).values()
    assert reported.startswith((there / "artifacts").resolve().as_uri())
    served = store_uri(saved, there)  # what `study ui` serves
    got = MlflowClient(tracking_uri=served).download_artifacts(run_id, "attention.png", str(tmp_path))
    assert Path(got).read_bytes() == b"here"
    if how == "copied":  # the original folder still reads its own
        again = MlflowClient(tracking_uri=saved).download_artifacts(run_id, "attention.png", str(tmp_path / "o"))
        assert Path(again).read_bytes() == b"original"


@pytest.mark.parametrize("axis,arms", [
    ("ablation", ("sigmoid", "relu")),                 # the case
    ("model.attention.step", ("sigmoid", "relu")),     # a dotted config path as a grid axis
    ("optim.clip", ("1.0", "5.0")),                    # another axis no table knows
])
def test_a_grid_axis_a_paper_table_does_not_know_is_refused_not_merged(tmp_path: Path, axis: str,
                                                                      arms: tuple[str, str]) -> None:
    from reports.build import collect
    from reports.runset import ReportsError

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=2, params={axis: arm},
                     metrics={"best_selection_score": 0.5, KEY: 1.0 if arm == arms[0] else 0.5})
            for arm in arms for s in range(2)]
    write_with_client(uri, "s", runs, tables=["rc_table2"])
    a, b = sorted(f"{axis}={arm}" for arm in arms)
    with pytest.raises(ReportsError, match=rf"table rc_table2: .*2 grid cells \({a}, {b}\).*--table summary") as err:
        collect(uri, "s")
    assert "\n" not in str(err.value)
    built = collect(uri, "s", tables=["summary"])  # the per-cell table shows both arms
    assert sorted(s.cell for s in built.summary) == sorted(f"task=copy,variant=onestep,{axis}={a}" for a in arms)


def git_repo(root: Path) -> Path:
    """A checkout with committed package code (locattn/model.py)."""
    import subprocess

    (root / "locattn").mkdir(parents=True)
    (root / "locattn" / "model.py").write_text("WIDTH = 1\n")
    (root / "README.md").write_text("docs\n")
    for cmd in (["init", "-q"], ["add", "-A"],
                ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "c"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True)
    return root


def test_training_from_uncommitted_package_code_is_refused_unless_allowed(tmp_path: Path, monkeypatch) -> None:
    from study.driver.launch import ALLOW_DIRTY_ENV, check_committed_code
    from study.spec import SpecError

    monkeypatch.delenv(ALLOW_DIRTY_ENV, raising=False)
    repo = git_repo(tmp_path / "repo")
    (repo / "README.md").write_text("other docs\n")  # not package code
    check_committed_code(False, repo)
    (repo / "locattn" / "model.py").write_text("WIDTH = 2\n")
    (repo / "study").mkdir()
    (repo / "study" / "new.py").write_text("X = 1\n")  # untracked package code counts too
    with pytest.raises(SpecError, match=r"differs from commit [0-9a-f]{12} \(locattn/model.py, "
                                        r"study/new.py\).*--allow-dirty") as err:
        check_committed_code(False, repo)
    assert "\n" not in str(err.value)
    check_committed_code(True, repo)


def test_a_dirty_run_keeps_its_diff_and_every_table_marks_it(tmp_path: Path) -> None:
    from record.layout import CODE_DIFF
    from record.writer import code_diff
    from reports.build import collect
    from reports.render import render_markdown

    repo = git_repo(tmp_path / "repo")
    (repo / "locattn" / "model.py").write_text("WIDTH = 2\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    w = RecordWriter(tracking_uri=uri, study="s", artifact_location=None, parent_tags={}).open()
    w.code_diff = code_diff(repo)  # as open() finds it in a dirty checkout
    state = w.create_run("k", tags={schema.RUN_KEY: "k", schema.ROLE: schema.ROLE_TRIAL}, params={}, name="k")
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(state.run_id).data.tags[schema.DIRTY] == "true"
    diff = Path(client.download_artifacts(state.run_id, CODE_DIFF, str(tmp_path))).read_text()
    assert "-WIDTH = 1" in diff and "+WIDTH = 2" in diff

    uri2 = f"sqlite:///{tmp_path / 'table.db'}"  # a table over runs of which one is +dirty
    ids = write_with_client(uri2, "t", [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=2,
                                                 metrics={"best_selection_score": 0.5, KEY: 1.0})
                                        for s in range(2)], tables=["rc_table2"])
    MlflowClient(tracking_uri=uri2).set_tag(ids[1], schema.CODE_VERSION, "abc+dirty")
    built = collect(uri2, "t")
    assert built.provenance.n_dirty == 1
    text = render_markdown(built.results[0], built.provenance, str)
    assert "**UNCOMMITTED CODE: 1 of 2 trial runs were trained" in text
    assert any("UNCOMMITTED CODE" in ln for ln in built.provenance.lines())  # LaTeX and CSV headers


def test_a_changed_spec_names_each_changed_field_with_its_old_and_new_value() -> None:
    from study.spec import resolve_spec, same_spec, spec_changes

    base = {"name": "t", "description": "d", "tables": [], "grid": {"task": ["copy"], "variant": ["onestep"]},
            "seeds": 2, "overrides": {"optim.epochs": 1, "task.train_size": 32}}
    old = resolve_spec(base, path="t.yaml").resolved
    new = resolve_spec({**base, "seeds": 3, "overrides": {"optim.epochs": 2, "task.train_size": 32,
                                                           "optim.lr": 0.01}}, path="t.yaml").resolved
    assert not same_spec(old, new)
    assert spec_changes(old, new) == ["overrides.optim.epochs: 1 -> 2", "overrides.optim.lr: absent -> 0.01",
                                      "seeds: [0, 1] -> [0, 1, 2]"]
    assert spec_changes(old, resolve_spec({**base, "description": "other"}, path="t.yaml").resolved) == []


@pytest.mark.parametrize("interrupted", [True, False])
def test_every_run_a_stop_ends_carries_the_same_status_tag(tmp_path: Path, interrupted: bool) -> None:
    """A study stopped by a signal (or finished): its parent, its cells' runs and its running
    trial runs end with one status tag each, matching MLflow's status."""
    uri, study = store(tmp_path, 0.5, "best_selection_score")
    w = RecordWriter(tracking_uri=uri, study=study, artifact_location=None,
                     parent_tags={schema.N_RUNS: "6"}).open()  # (open logs the cell's run)
    w.finish_parent(interrupted=interrupted)
    client = MlflowClient(tracking_uri=uri)
    runs = {r.info.run_id: r for r in client.search_runs([w.experiment_id])}
    want = (schema.STATUS_INTERRUPTED, "KILLED") if interrupted else (schema.STATUS_FINISHED, "FINISHED")
    cells = [r for r in runs.values() if r.data.tags.get(schema.ROLE) == schema.ROLE_CELL]
    assert cells
    for run in [runs[w.parent_id], *cells]:
        assert (run.data.tags.get(schema.STATUS), run.info.status) == want, run.data.tags.get(schema.ROLE)
