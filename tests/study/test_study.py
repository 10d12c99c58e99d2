"""Studies end to end: real local Ray, real MLflow SQLite store, real locattn training (smoke).

One Ray instance (2 CPUs, loopback) is shared by the tests of this module; drivers launched as
subprocesses join it with --address, so killing them leaves no Ray processes behind.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback; before ray is imported
pytest.importorskip("ray")
pytest.importorskip("mlflow")
pytest.importorskip("optuna")

from record import schema  # noqa: E402
from tests.study_helpers import duplicate_metric_rows, start_private_ray, trial_run_rows, wait_for  # noqa: E402
from study.driver.launch import launch, resume  # noqa: E402
from study.spec import SpecError  # noqa: E402
from study.recording.status import STALE, study_status  # noqa: E402
from study.recording.folder import load_meta  # noqa: E402
from record.layout import StudyPaths  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMOKE = {"task.train_size": 64, "task.dev_size": 32, "task.test_size": 32,
         "task.test_lengths": [15], "optim.epochs": 2}


@pytest.fixture(scope="module")
def ray_address():
    import ray

    started = start_private_ray()  # init_ray, retried under load
    address = ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:")  # tests talk to loopback only
    yield address
    if started:
        ray.shutdown()


def write_spec(tmp_path: Path, name: str, **body) -> Path:
    spec = {"name": name, "seeds": 1, "resources": {"cpus": 1}, "max_failures": 0,
            "profiles": {"smoke": {}}, "default_profile": "smoke", **body}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def status(study_dir: Path) -> list[dict]:
    """``study status``'s rows as dicts (a run marked running after its driver exited counts
    as running here)."""
    rows, _ = study_status(load_meta(StudyPaths(dir=Path(study_dir))), Path(study_dir))
    return [{"done": r.count(schema.STATUS_FINISHED), "failed": r.count(schema.STATUS_FAILED),
             "running": r.count(schema.STATUS_RUNNING) + r.count(STALE), "missing": r.missing,
             "seeds_done": r.seeds.get(schema.STATUS_FINISHED, [])} for r in rows]


def trial_runs(db: Path) -> dict[str, dict]:
    """run_id -> {run_id, tags, status, metrics: {key: [(step, value)]}} of the trial runs."""
    return {r["run_id"]: r for r in trial_run_rows(db)}


def test_smoke_study_records_runs(ray_address, tmp_path: Path, capsys) -> None:
    root = tmp_path / "studies"
    summary = launch(ROOT / "ablations/rc_table2.yaml", profile="smoke", root=root,
                     progress_seconds=1.0)
    assert summary.trials == 4 and summary.errors == 0
    out = capsys.readouterr().out
    assert "4/4 done" in out and "ETA" in out
    study_dir = root / "rc_table2-smoke"
    runs = trial_runs(study_dir / "mlflow.db")
    assert len(runs) == 4  # 2 variants x 2 seeds
    cells = sorted((r["tags"][schema.CELL], r["tags"][schema.SEED]) for r in runs.values())
    assert cells == [("task=copy,variant=content", "0"), ("task=copy,variant=content", "1"),
                     ("task=copy,variant=onestep", "0"), ("task=copy,variant=onestep", "1")]
    for run in runs.values():
        assert run["status"] == "FINISHED" and run["tags"][schema.STATUS] == "finished"
        assert run["tags"][schema.N_SEEDS] == "2" and run["tags"][schema.STUDY] == "rc_table2-smoke"
        assert len(run["tags"][schema.CODE_VERSION]) >= 40
        assert "torch" in json.loads(run["tags"][schema.VERSIONS])
        assert "mlflow.parentRunId" in run["tags"]
        # per-epoch metrics at steps 1..2, once each; final per-split test metrics
        assert [s for s, _ in run["metrics"]["train_loss"]] == [1, 2]
        assert [s for s, _ in run["metrics"]["dev_score"]] == [1, 2]
        assert all(v > 0 for _, v in run["metrics"]["train_loss"])
        acc = run["metrics"]["test.len15.seq_acc"][0][1]
        assert 0.0 <= acc <= 1.0
        assert run["metrics"]["test.iid.n"][0][1] == 32
        assert run["metrics"]["epochs_run"][0][1] == 2
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{study_dir / 'mlflow.db'}")
    run_id = next(iter(runs))
    params = client.get_run(run_id).data.params
    assert params["optim.epochs"] == "2" and params["task.train_size"] == "64"
    arts = {a.path for a in client.list_artifacts(run_id)}
    assert {"attention.png", "result.json"} <= arts
    exp = client.get_experiment_by_name("rc_table2-smoke")
    assert exp.artifact_location.startswith("file://" + str(study_dir))
    parent = client.search_runs([exp.experiment_id], f"tags.`{schema.ROLE}` = 'study'")
    assert len(parent) == 1 and parent[0].data.tags[schema.TABLES] == "rc_table2,rc_table9"
    assert parent[0].data.metrics["trials_finished"] == 4

    # status: per cell, both seeds done
    rows = status(study_dir)
    assert [(r["done"], r["running"], r["failed"], r["missing"]) for r in rows] == [(2, 0, 0, 0)] * 2

    # launching the same spec again is idempotent: nothing reruns, no new run
    mtimes = {p: p.stat().st_mtime for p in (study_dir / "runs").glob("*/result.json")}
    again = launch(ROOT / "ablations/rc_table2.yaml", profile="smoke", root=root)
    assert again.errors == 0
    assert len(trial_runs(study_dir / "mlflow.db")) == 4
    assert {p: p.stat().st_mtime for p in mtimes} == mtimes


def test_nan_trial_is_recorded_failed_while_others_finish(ray_address, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "nan", grid={"task": ["copy"], "variant": ["onestep"]},
                      hparams={"optim.lr": [1e-3, 1e12]}, overrides=SMOKE, max_failures=1)
    summary = launch(spec, root=tmp_path / "s", progress_seconds=60)
    assert summary.trials == 2 and summary.errors == 1
    runs = trial_runs(tmp_path / "s" / "nan-smoke" / "mlflow.db")
    by_lr = {json.loads(r["tags"][schema.HPARAMS])["optim.lr"]: r for r in runs.values()}
    assert by_lr[1e-3]["status"] == "FINISHED"
    bad = by_lr[1e12]
    assert bad["status"] == "FAILED" and bad["tags"][schema.STATUS] == "failed"
    assert "NonFiniteLossError" in bad["tags"][schema.ERROR]
    assert bad["tags"][schema.ATTEMPTS] == "2"  # first attempt + 1 retry
    rows = status(tmp_path / "s" / "nan-smoke")
    assert rows[0]["done"] == 1 and rows[0]["failed"] == 1


def _progress(db: Path) -> tuple[int, int]:
    """(finished trial runs, max epoch step of an unfinished run)."""
    if not db.is_file():
        return 0, 0
    try:
        runs = trial_runs(db)
    except sqlite3.OperationalError:
        return 0, 0
    done = sum(1 for r in runs.values() if r["tags"].get(schema.STATUS) == "finished")
    steps = [max((s for s, _ in r["metrics"].get("train_loss", [])), default=0)
             for r in runs.values() if r["tags"].get(schema.STATUS) != "finished"]
    return done, max(steps, default=0)


def _launch_then_kill(spec: Path, root: Path, ray_address: str, log: Path, ready, what: str) -> None:
    """Launch ``spec`` in a driver subprocess, wait until ``ready()``, then ``kill -9`` it.

    ``ready`` may store what it last saw in ``ready.last`` (shown if the driver exits first).
    """
    env = dict(os.environ, TUNE_GLOBAL_CHECKPOINT_S="1", PYTHONPATH=str(ROOT))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "study.cli", "launch", str(spec), "--root", str(root),
             "--address", ray_address, "--progress-seconds", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_for(ready, 240, what, proc)
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- driver output ---\n{log.read_text()[-3000:]}") from None
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # kill -9 the driver
        proc.wait()


def test_kill_driver_then_resume(ray_address, tmp_path: Path) -> None:
    import ray

    # Two budgets per variant: the 2-epoch trials finish while the 30-epoch ones are mid-run, so
    # the kill lands in a wide window however fast the machine is (no race on epoch timing).
    overrides = {**SMOKE, "task.train_size": 300}
    spec = write_spec(tmp_path, "kill", grid={"task": ["copy"], "variant": ["onestep", "mono"]},
                      hparams={"optim.epochs": [2, 30]}, seeds=1, overrides=overrides,
                      max_concurrent=2)
    root = tmp_path / "s"
    db = root / "kill-smoke" / "mlflow.db"

    def killable() -> bool:
        done, step = killable.last = _progress(db)
        return done >= 1 and 2 <= step <= 24

    _launch_then_kill(spec, root, ray_address, tmp_path / "driver.log", killable,
                      "one finished run and one at epoch 2..24")
    finished_before = {rid: r["metrics"]["train_loss"] for rid, r in trial_runs(db).items()
                       if r["tags"][schema.STATUS] == "finished"}
    result_files = {p: p.stat().st_mtime for p in (root / "kill-smoke" / "runs").glob("*/result.json")}
    assert finished_before and len(finished_before) < 4
    # Ray frees the dead driver's trial actors.
    wait_for(lambda: ray.available_resources().get("CPU", 0) >= 2, 60, "CPUs released")

    summary = resume(root / "kill-smoke", progress_seconds=60)
    assert summary.errors == 0
    runs = trial_runs(db)
    assert len(runs) == 4  # one MLflow run per trial, no duplicates
    assert all(r["status"] == "FINISHED" for r in runs.values())
    for rid, r in runs.items():
        steps = [s for s, _ in r["metrics"]["train_loss"]]
        assert steps == sorted(set(steps)) and steps[-1] == r["metrics"]["epochs_run"][0][1]
        assert len(r["metrics"]["test.len15.seq_acc"]) == 1  # final metrics logged once
    for rid, hist in finished_before.items():
        assert runs[rid]["metrics"]["train_loss"] == hist  # finished runs untouched
    for p, mtime in result_files.items():
        assert p.stat().st_mtime == mtime  # and not retrained
    resumed = [int(r["tags"].get(schema.RESUMED_FROM, 0)) for r in runs.values()]
    assert max(resumed) > 0  # an unfinished trial continued from its epoch checkpoint


def _checkpoint_epochs(study_dir: Path) -> list[int]:
    """Epoch of every run's trainer checkpoint on disk (written before Tune hears of it)."""
    out = []
    for meta in sorted(study_dir.glob("runs/*/checkpoint/meta.json")):
        try:
            out.append(int(json.loads(meta.read_text())["epoch"]))
        except (OSError, ValueError, KeyError):
            pass
    return out


def _kill_packed_mid_training_then_resume(spec: Path, study_dir: Path, ray_address: str, tmp_path: Path,
                                          *, runs: int, lo: int, hi: int) -> None:
    """Launch a packed one-trial ``spec``, ``kill -9`` its driver once all ``runs`` checkpoints
    stand between epochs ``lo`` and ``hi``, then resume it to the end."""
    import ray

    def mid_training() -> bool:
        eps = mid_training.last = _checkpoint_epochs(study_dir)
        return len(eps) == runs and lo <= min(eps) and max(eps) <= hi

    _launch_then_kill(spec, study_dir.parent, ray_address, tmp_path / "driver.log", mid_training,
                      f"{runs} checkpoints at epochs {lo}..{hi}")
    wait_for(lambda: ray.available_resources().get("CPU", 0) >= 2, 60, "CPUs released")
    summary = resume(study_dir, progress_seconds=60)
    assert summary.errors == 0 and summary.trials == 1  # one trial for every run


def test_packed_seeds_killed_resumed_equal_sequential_seeds(ray_address, tmp_path: Path) -> None:
    """pack_seeds: one trial trains three seeds as one packed model, one MLflow run per seed.
    Killed mid-training and resumed, every seed's record equals the same seed trained alone."""
    body = dict(grid={"task": ["copy"], "variant": ["onestep"]}, seeds=3,
                overrides={**SMOKE, "optim.epochs": 16, "task.train_size": 300})
    epochs = 16
    packed = write_spec(tmp_path, "pk", pack_seeds=True, **body)
    root = tmp_path / "s"
    study_dir = root / "pk-smoke"
    _kill_packed_mid_training_then_resume(packed, study_dir, ray_address, tmp_path, runs=3, lo=3, hi=epochs - 4)

    sequential = write_spec(tmp_path, "seq", **body)
    assert launch(sequential, root=root, progress_seconds=60).trials == 3

    def by_seed(db: Path) -> dict[str, dict]:
        return {r["tags"][schema.SEED]: r for r in trial_runs(db).values()}

    pk, seq = by_seed(study_dir / "mlflow.db"), by_seed(root / "seq-smoke" / "mlflow.db")
    assert sorted(pk) == sorted(seq) == ["0", "1", "2"]  # one run per seed, no duplicates
    for seed, run in pk.items():
        assert run["status"] == "FINISHED" and run["tags"][schema.PACKED_WITH] == "0,1,2"
        # Continued from its own checkpoint (Tune's newest may lag the trainer's by a report).
        assert int(run["tags"][schema.RESUMED_FROM]) >= 1
        steps = [s for s, _ in run["metrics"]["train_loss"]]
        assert steps == list(range(1, epochs + 1))  # every epoch logged once, none lost
        for key in ("train_loss", "dev_loss", "dev_score", "best_selection_score", "test.len15.seq_acc",
                    "test.len15.seq_acc_be", "test.len15.edit_distance"):
            assert run["metrics"][key] == seq[seed]["metrics"][key], (seed, key)
    assert len({tuple(r["metrics"]["train_loss"]) for r in pk.values()}) == 3  # seeds differ
    rows = status(study_dir)
    assert rows[0]["done"] == 3 and rows[0]["seeds_done"] == [0, 1, 2]


def test_packed_learning_rates_by_seeds_killed_resumed_equal_unpacked_runs(ray_address, tmp_path: Path) -> None:
    """pack: [seeds, optim.lr]: one trial trains 2 learning rates x 2 seeds as one packed model,
    one MLflow run each (its own hparams tag). Killed mid-training (kill -9 of the driver) and
    resumed, every run's record equals the same run trained alone."""
    epochs = 12
    body = dict(grid={"task": ["copy"], "variant": ["onestep"]}, seeds=2,
                hparams={"optim.lr": [1e-3, 3e-3]},
                overrides={**SMOKE, "optim.epochs": epochs, "task.train_size": 300})
    packed = write_spec(tmp_path, "pklr", pack=["seeds", "optim.lr"], **body)
    root = tmp_path / "s"
    study_dir = root / "pklr-smoke"
    _kill_packed_mid_training_then_resume(packed, study_dir, ray_address, tmp_path, runs=4, lo=2, hi=epochs - 4)

    sequential = write_spec(tmp_path, "seqlr", **body)
    assert launch(sequential, root=root, progress_seconds=60).trials == 4

    def by_run(db: Path) -> dict[tuple[str, float], dict]:
        return {(r["tags"][schema.SEED], json.loads(r["tags"][schema.HPARAMS])["optim.lr"]): r
                for r in trial_runs(db).values()}

    pk, seq = by_run(study_dir / "mlflow.db"), by_run(root / "seqlr-smoke" / "mlflow.db")
    assert sorted(pk) == sorted(seq) == [("0", 1e-3), ("0", 3e-3), ("1", 1e-3), ("1", 3e-3)]
    for run_id, run in pk.items():
        assert run["status"] == "FINISHED" and int(run["tags"][schema.RESUMED_FROM]) >= 1
        steps = [s for s, _ in run["metrics"]["train_loss"]]
        assert steps == list(range(1, epochs + 1))  # every epoch logged once, none lost
        for key in ("train_loss", "dev_loss", "dev_score", "lr", "best_selection_score", "test.len15.seq_acc"):
            assert run["metrics"][key] == seq[run_id]["metrics"][key], (run_id, key)
    assert len({tuple(r["metrics"]["train_loss"]) for r in pk.values()}) == 4  # runs differ
    rows = status(study_dir)
    assert rows[0]["done"] == 4


def test_packed_trial_records_every_failed_seed(ray_address, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "pknan", grid={"task": ["copy"], "variant": ["onestep"]},
                      seeds=2, pack_seeds=True, overrides={**SMOKE, "optim.lr": 1e12})
    summary = launch(spec, root=tmp_path / "s", progress_seconds=60)
    assert summary.trials == 1 and summary.errors == 1
    runs = trial_runs(tmp_path / "s" / "pknan-smoke" / "mlflow.db")
    assert sorted(r["tags"][schema.SEED] for r in runs.values()) == ["0", "1"]
    for r in runs.values():
        assert r["status"] == "FAILED" and r["tags"][schema.STATUS] == "failed"
        assert "NonFiniteLossError" in r["tags"][schema.ERROR]


def test_optuna_sees_only_complete_results_and_resume_keeps_state(ray_address, tmp_path: Path) -> None:
    import optuna

    root = tmp_path / "s"
    summary = launch(ROOT / "ablations/search_lr.yaml", profile="smoke", root=root,
                     progress_seconds=60)
    assert summary.trials == 3 and summary.errors == 0
    study_dir = root / "search_lr-smoke"
    runs = trial_runs(study_dir / "mlflow.db")
    assert len(runs) == 3 * 2  # 3 search points x 2 seeds, one run each
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    (summary_,) = optuna.get_all_study_summaries(storage)
    assert summary_.study_name == "search_lr-smoke · task=copy,variant=onestep"  # for optuna-dashboard
    ostudy = optuna.load_study(study_name=summary_.study_name, storage=storage)
    trials = ostudy.get_trials(deepcopy=False)
    assert len(trials) == 3
    for t in trials:
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.intermediate_values == {}  # no partial budgets ever reported
        seeds = [r for r in runs.values()
                 if abs(json.loads(r["tags"][schema.HPARAMS])["optim.lr"] - t.params["optim.lr"]) < 1e-15]
        assert sorted(r["tags"][schema.SEED] for r in seeds) == ["0", "1"]
        scores = sorted(r["metrics"]["best_selection_score"][0][1] for r in seeds)
        assert t.value == pytest.approx(sum(scores) / 2)  # median of 2 = mean, full budgets
        assert all(r["metrics"]["epochs_run"][0][1] == 2 for r in seeds)
    lrs = sorted(t.params["optim.lr"] for t in trials)
    assert len(set(lrs)) == 3 and 1e-4 <= lrs[0] and lrs[-1] <= 1e-2

    # Resume/relaunch keeps the sampler state: no new Optuna trial, no new run.
    again = resume(study_dir, progress_seconds=60)
    assert again.errors == 0
    assert len(optuna.load_study(study_name=summary_.study_name, storage=storage).trials) == 3
    assert len(trial_runs(study_dir / "mlflow.db")) == 6


def test_search_points_train_their_seeds_packed(ray_address, tmp_path: Path) -> None:
    import optuna

    raw = yaml.safe_load((ROOT / "ablations/search_lr.yaml").read_text())
    spec = tmp_path / "search_packed.yaml"
    spec.write_text(yaml.safe_dump({**raw, "name": "sp", "pack_seeds": True}))
    summary = launch(spec, profile="smoke", root=tmp_path / "s", progress_seconds=60)
    assert summary.trials == 3 and summary.errors == 0
    study_dir = tmp_path / "s" / "sp-smoke"
    runs = trial_runs(study_dir / "mlflow.db")
    assert len(runs) == 6 and all(r["tags"][schema.PACKED_WITH] == "0,1" for r in runs.values())
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    (summary_,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary_.study_name, storage=storage).get_trials()
    assert len(trials) == 3
    for t in trials:  # the sampler saw the median of both seeds, each at its full budget
        assert t.state == optuna.trial.TrialState.COMPLETE
        seeds = [r for r in runs.values()
                 if abs(json.loads(r["tags"][schema.HPARAMS])["optim.lr"] - t.params["optim.lr"]) < 1e-15]
        assert len(seeds) == 2 and all(r["metrics"]["epochs_run"][0][1] == 2 for r in seeds)
        assert t.value == pytest.approx(sum(r["metrics"]["best_selection_score"][0][1] for r in seeds) / 2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_the_study_on_loopback(ray_address, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "ui", grid={"task": ["copy"], "variant": ["onestep"]},
                      overrides={**SMOKE, "optim.epochs": 1})
    root = tmp_path / "s"
    launch(spec, root=root, progress_seconds=60)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "study.cli", "ui", str(root / "ui-smoke"), "--port", str(port)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in line
        base = f"http://127.0.0.1:{port}/api/2.0/mlflow"

        def search():
            try:
                with urllib.request.urlopen(f"{base}/experiments/get-by-name?experiment_name=ui-smoke",
                                            timeout=2) as r:
                    exp = json.load(r)["experiment"]
                req = urllib.request.Request(
                    f"{base}/runs/search", method="POST", headers={"Content-Type": "application/json"},
                    data=json.dumps({"experiment_ids": [exp["experiment_id"]]}).encode())
                with urllib.request.urlopen(req, timeout=2) as r:
                    return json.load(r)["runs"]
            except OSError:
                return None

        runs = wait_for(search, 90, "the MLflow server", proc)
        roles = sorted(next(t["value"] for t in r["data"]["tags"] if t["key"] == schema.ROLE)
                       for r in runs)
        assert roles == ["cell", "study", "trial"]  # the cell's run holds its seeds' medians
        # bound to loopback only
        conns = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
        listening = [ln for ln in conns.splitlines() if f":{port} " in ln]
        assert listening and all("127.0.0.1:" in ln for ln in listening)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the group of the process this test started
        proc.wait(timeout=30)


def test_a_time_limited_slice_says_how_to_resume_at_its_concurrency(ray_address, tmp_path: Path,
                                                                     capsys) -> None:
    """A slice launched with --max-concurrent 1 prints a resume command that keeps it, and a
    resume given it never runs more trials at once (the spec's default would run two here)."""
    overrides = {**SMOKE, "task.train_size": 64, "optim.epochs": 20}
    spec = write_spec(tmp_path, "conc", grid={"task": ["copy"], "variant": ["onestep", "mono"]},
                      overrides=overrides, max_concurrent=0)
    root = tmp_path / "s"
    summary = launch(spec, root=root, max_concurrent=1, time_limit=15, progress_seconds=0.5)
    out = capsys.readouterr().out
    study_dir = root / "conc-smoke"
    if summary.time_limit:  # (a machine fast enough to finish in 15 s has nothing to resume)
        assert f"continue with `study resume {study_dir} --max-concurrent 1 --time-limit " in out, out[-2000:]
    summary = resume(study_dir, max_concurrent=1, progress_seconds=0.5)
    out += capsys.readouterr().out
    assert summary.runs.finished == 2 and summary.errors == 0
    running = [int(m) for m in re.findall(r"(\d+) running", out)]
    assert running and max(running) == 1, out[-2000:]


def test_a_moved_or_committed_study_resumes_in_its_new_folder(ray_address, tmp_path: Path) -> None:
    """Issue 12: a study record committed (mlflow.db or mlflow.db.xz, and study.json) or moved
    to another folder or machine resumes there, recording in its own store, never in the old
    path."""
    import shutil

    spec = write_spec(tmp_path, "mv", grid={"task": ["copy"], "variant": ["content"]},
                      overrides={**SMOKE, "optim.epochs": 1})
    launch(spec, root=tmp_path / "A", progress_seconds=60)
    old = tmp_path / "A" / "mv-smoke"
    committed = tmp_path / "C" / "mv-smoke"
    committed.mkdir(parents=True)
    for name in ("mlflow.db", "study.json"):  # what a copied record holds
        shutil.copy(old / name, committed / name)
    packed = tmp_path / "P" / "mv-smoke"  # what results/record/<study>/ holds: the store as .xz
    packed.mkdir(parents=True)
    shutil.copy(old / "study.json", packed / "study.json")
    (packed / "mlflow.db.xz").write_bytes(lzma.compress((old / "mlflow.db").read_bytes(), preset=9))
    moved = tmp_path / "B" / "mv-smoke"
    moved.parent.mkdir()
    shutil.move(str(old), str(moved))
    for study_dir in (moved, committed, packed):
        summary = resume(study_dir, progress_seconds=60)
        assert summary.errors == 0 and summary.study_dir == study_dir
        meta = json.loads((study_dir / "study.json").read_text())
        assert meta["tracking_uri"] == f"sqlite:///{study_dir / 'mlflow.db'}"
        con = sqlite3.connect(study_dir / "mlflow.db")
        try:
            locations = [r[0] for r in con.execute("SELECT artifact_location FROM experiments "
                                                   "WHERE name = 'mv-smoke'")]
            uris = [r[0] for r in con.execute("SELECT artifact_uri FROM runs")]
        finally:
            con.close()
        assert locations == [(study_dir / "artifacts").as_uri()]
        assert uris and all(u.startswith((study_dir / "artifacts").as_uri()) for u in uris)
        assert len(trial_runs(study_dir / "mlflow.db")) == 1  # nothing retrained or duplicated
    assert not old.exists()  # nothing was written back to the old folder


def test_a_study_widened_after_its_yaml_grew_resumes(ray_address, tmp_path: Path, capsys) -> None:
    """The YAML's grid grows after the launch and a wider --only takes the new value: the study
    then resumes from what the widening saved. rc_table2-recopy once could not: its resume rebuilt
    the launch-time YAML with the new --only. A study.json written that way is named, with the
    relaunch that repairs it."""
    body = {"overrides": {**SMOKE, "optim.epochs": 1}}
    spec = write_spec(tmp_path, "grown", grid={"task": ["copy"], "variant": ["content"]}, **body)
    launch_time_yaml = yaml.safe_load(spec.read_text())
    root = tmp_path / "s"
    study_dir = root / "grown-smoke"
    launch(spec, root=root, only={"variant": ["content"]}, progress_seconds=60)
    write_spec(tmp_path, "grown", grid={"task": ["copy"], "variant": ["content", "onestep"]}, **body)
    wide = {"variant": ["content", "onestep"]}
    assert launch(spec, root=root, only=wide, progress_seconds=60).errors == 0
    meta_path = study_dir / "study.json"
    assert json.loads(meta_path.read_text())["raw"] == yaml.safe_load(spec.read_text())
    again = resume(study_dir, progress_seconds=60)
    assert again.errors == 0 and again.runs.finished == 2
    assert duplicate_metric_rows(study_dir / "mlflow.db") == []  # widened, then resumed: each row once

    meta = json.loads(meta_path.read_text())  # as the widening wrote it before it saved the YAML
    meta_path.write_text(json.dumps({**meta, "raw": launch_time_yaml}))
    with pytest.raises(SpecError) as refused:
        resume(study_dir)
    message = str(refused.value)
    assert message.startswith(f"{meta_path}: the spec saved there does not rebuild with its --only")
    assert "'onestep' is not a value of grid.variant" in message
    assert f"study launch {spec} --profile smoke --name grown-smoke --root {root} --only variant=content,onestep" in message
    capsys.readouterr()
    assert launch(spec, root=root, only=wide, progress_seconds=60).errors == 0  # the repair
    assert json.loads(meta_path.read_text())["raw"] == yaml.safe_load(spec.read_text())
    assert resume(study_dir, progress_seconds=60).runs.finished == 2
    assert len(trial_runs(study_dir / "mlflow.db")) == 2  # nothing retrained or duplicated


def test_more_seeds_grow_the_study_and_keep_its_finished_runs(ray_address, tmp_path: Path, capsys) -> None:
    """`study launch --seeds N` with more seeds than the study has grows it: the finished seeds
    are neither rerun nor duplicated, and the grown study is the study from then on (issue 24's
    open Lookup cells need 10 seeds where the paper-budget study ran 5)."""
    spec = write_spec(tmp_path, "seeded", grid={"task": ["copy"], "variant": ["content"]},
                      overrides={**SMOKE, "optim.epochs": 1})
    root = tmp_path / "s"
    study_dir = root / "seeded-smoke"
    launch(spec, root=root, progress_seconds=60)  # the spec's 1 seed
    results = {p: p.stat().st_mtime for p in (study_dir / "runs").glob("*/result.json")}
    assert len(results) == 1
    capsys.readouterr()
    summary = launch(spec, root=root, seeds=3, progress_seconds=60)
    out = capsys.readouterr().out
    assert "widening --only (none) -> (none) and seeds 0 -> 0-2: 1 -> 3 trials" in out
    assert summary.errors == 0 and summary.trials == 2
    runs = trial_runs(study_dir / "mlflow.db")
    assert sorted(r["tags"][schema.SEED] for r in runs.values()) == ["0", "1", "2"]
    assert all(r["tags"][schema.STATUS] == "finished" for r in runs.values())
    assert {p: p.stat().st_mtime for p in results} == results  # seed 0 not retrained
    assert duplicate_metric_rows(study_dir / "mlflow.db") == []  # the cell's and study's summaries too
    assert json.loads((study_dir / "study.json").read_text())["seeds"] == 3
    with pytest.raises(SpecError, match=r"--only \(none\), --seeds 3\).*or more --seeds"):
        launch(spec, root=root)  # the profile's 1 seed is another study now
    count = "SELECT COUNT(*) FROM metrics WHERE key != 'wall_seconds'"  # (the resume's own time)
    rows = sqlite3.connect(study_dir / "mlflow.db").execute(count).fetchone()
    again = resume(study_dir, progress_seconds=60)
    assert again.errors == 0 and again.runs.finished == 3
    assert len(trial_runs(study_dir / "mlflow.db")) == 3
    # a resume with nothing to do writes no metric row (it once logged every summary again)
    assert sqlite3.connect(study_dir / "mlflow.db").execute(count).fetchone() == rows
    assert duplicate_metric_rows(study_dir / "mlflow.db") == []
    # one Tune experiment state (the last driver's), not one per launch and resume
    assert len(list((study_dir / "tune").glob("experiment_state-*.json"))) == 1


@pytest.mark.timeout(1200)  # a cold compile of the tiny graph under load
def test_a_study_trains_on_the_train_path_it_was_given(ray_address, tmp_path: Path, capsys) -> None:
    """`study launch --train-path compiled` trains every run through torch.compile (recorded in
    its config.json) and saves the choice for the resumes; `study resume --train-path eager`
    changes it back without touching a finished run. The shapes are test_compiled's, so a suite
    that ran it loads the graph from inductor's disk cache."""
    tiny = {"task.train_size": 64, "task.dev_size": 16, "task.test_size": 16,
            "task.train_lengths": [3, 3], "task.dev_lengths": [3, 3], "task.test_lengths": [4],
            "optim.batch_size": 16, "optim.dev_batch_size": 16, "optim.epochs": 1}
    spec = write_spec(tmp_path, "path", grid={"task": ["copy"], "variant": ["onestep"]}, overrides=tiny)
    root = tmp_path / "s"
    study_dir = root / "path-smoke"
    summary = launch(spec, root=root, train_path="compiled", progress_seconds=60)
    assert summary.errors == 0 and summary.runs.finished == 1
    (config,) = [json.loads(p.read_text()) for p in (study_dir / "runs").glob("*/config.json")]
    assert config["train_path"] == "compiled"
    meta_path = study_dir / "study.json"
    assert json.loads(meta_path.read_text())["train_path"] == "compiled"
    results = {p: p.stat().st_mtime for p in (study_dir / "runs").glob("*/result.json")}
    capsys.readouterr()
    again = resume(study_dir, train_path="eager", progress_seconds=60)
    assert "--train-path eager (was compiled) from now on" in capsys.readouterr().out
    assert again.errors == 0 and "train_path" not in json.loads(meta_path.read_text())
    assert {p: p.stat().st_mtime for p in results} == results and len(trial_runs(study_dir / "mlflow.db")) == 1


def test_a_wider_only_grows_the_study_and_keeps_its_finished_runs(ray_address, tmp_path: Path,
                                                                  capsys) -> None:
    """`study launch` with the same spec and profile and a wider --only grows the study: its
    finished runs are neither rerun nor duplicated (rc_table4 once had to be relaunched whole)."""
    from study.spec import SpecError

    spec = write_spec(tmp_path, "wide", grid={"task": ["copy"], "variant": ["content", "onestep"]},
                      overrides={**SMOKE, "optim.epochs": 1})
    root = tmp_path / "s"
    study_dir = root / "wide-smoke"
    launch(spec, root=root, only={"variant": ["content"]}, progress_seconds=60)
    first = trial_runs(study_dir / "mlflow.db")
    assert [r["tags"][schema.CELL] for r in first.values()] == ["task=copy,variant=content"]
    results = {p: p.stat().st_mtime for p in (study_dir / "runs").glob("*/result.json")}
    assert len(results) == 1

    with pytest.raises(SpecError, match=r"--only variant=content\).*widen it"):
        launch(spec, root=root, only={"variant": ["onestep"]})  # not a superset: refused
    capsys.readouterr()
    summary = launch(spec, root=root, progress_seconds=60)
    out = capsys.readouterr().out
    assert "widening --only variant=content -> (none): 1 -> 2 trials" in out
    assert "1 of 2 runs already finished in the record (1 of 2 trials); running the other 1 trial(s)" in out
    assert summary.errors == 0 and summary.trials == 1
    runs = trial_runs(study_dir / "mlflow.db")
    assert set(first) < set(runs) and len(runs) == 2  # the first run kept, one new run
    assert all(r["tags"][schema.STATUS] == "finished" for r in runs.values())
    assert {p: p.stat().st_mtime for p in results} == results  # not retrained
    assert json.loads((study_dir / "study.json").read_text())["only"] == {}
    assert list(study_dir.glob("tune.before-widening-*"))  # Tune's old state kept, not deleted
    assert [(r["done"], r["missing"]) for r in status(study_dir)] == [(1, 0), (1, 0)]
    results = {p: p.stat().st_mtime for p in (study_dir / "runs").glob("*/result.json")}
    again = resume(study_dir, progress_seconds=60)  # the wide study is the study now
    assert again.errors == 0 and again.runs.finished == 2
    assert len(trial_runs(study_dir / "mlflow.db")) == 2
    assert {p: p.stat().st_mtime for p in results} == results and len(results) == 2


def test_a_store_deleted_after_tunes_last_step_stops_in_one_line_and_resumes(ray_address, tmp_path: Path,
                                                                          monkeypatch) -> None:
    """The driver checks its SQLite store's file at every Tune step; a store deleted after the
    last one took the driver's final writes without an error, and the study ended "4 of 4 runs
    finished" with its record nowhere (bench_chaos --cycles 20). The store is deleted here as
    Tune's fit returns: the driver says so in one line and `study resume` re-records the runs."""
    from study.driver.signals import Interrupt
    from study.recording.folder import StudyError

    spec = write_spec(tmp_path, "gone", grid={"task": ["copy"], "variant": ["onestep"]}, seeds=2,
                      overrides=SMOKE)
    root = tmp_path / "s"
    study = root / "gone-smoke"
    db = study / "mlflow.db"
    fit = Interrupt.fit

    def fit_then_delete(self, tuner):
        grid = fit(self, tuner)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        return grid

    with monkeypatch.context() as m:
        m.setattr(Interrupt, "fit", fit_then_delete)
        with pytest.raises(StudyError) as info:
            launch(spec, root=root, address=ray_address)
    assert str(info.value) == (f"the store {db} failed mid-run (it is gone: deleted or moved); the runs are "
                               f"safe in {study}: free or restore the store, then `study resume {study}`")
    assert not db.exists()
    summary = resume(study, address=ray_address)
    assert summary.runs.finished == 2
    runs = trial_runs(db)
    assert len(runs) == 2 and all(r["tags"][schema.STATUS] == "finished" for r in runs.values())
    assert all([s for s, _ in r["metrics"]["train_loss"]] == [1, 2] for r in runs.values())
