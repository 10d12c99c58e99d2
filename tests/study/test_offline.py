"""Offline training: ``study export`` -> ``python -m locattn.offline`` (torch only, in a
subprocess that cannot import Ray, MLflow, Optuna, polars, study, record or reports) ->
``study import`` -> ``study resume`` records the finished runs from disk and trains nothing,
and continues a run the worker's deadline stopped from its checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback; before ray is imported
pytest.importorskip("ray")
pytest.importorskip("mlflow")

from record import schema  # noqa: E402
from study.cli import main as study  # noqa: E402
from study.driver.launch import resume  # noqa: E402
from tests.study_helpers import trial_run_rows  # noqa: E402
from tests.study.test_study import SMOKE, ray_address, write_spec  # noqa: E402,F401 - the module's Ray and spec writer

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("ray", "mlflow", "optuna", "polars", "study", "record", "reports")
#: Runs the worker with every BLOCKED package unimportable (``import ray`` raises ImportError).
WORKER = ("import runpy, sys\n"
          f"sys.modules.update(dict.fromkeys({BLOCKED!r}))\n"
          "sys.argv = ['locattn.offline', *sys.argv[1:]]\n"
          "runpy.run_module('locattn.offline', run_name='__main__', alter_sys=True)\n")


def worker(folder: Path, runs: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-c", WORKER, str(folder), "--out", str(runs), "--device", "cpu",
                           *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def test_exported_runs_trained_offline_are_recorded_not_retrained(ray_address, tmp_path: Path,
                                                                   capsys) -> None:
    spec = write_spec(tmp_path, "off", grid={"task": ["copy"], "variant": ["onestep"]}, seeds=2,
                      pack_seeds=True, overrides=SMOKE)
    root, export, runs = tmp_path / "s", tmp_path / "export", tmp_path / "runs"
    assert study(["export", str(spec), "--root", str(root), "--out", str(export)]) == 0
    assert "exported 1 trials (2 runs)" in capsys.readouterr().out
    manifest = json.loads((export / "manifest.json").read_text())
    keys = [r["key"] for r in manifest["trials"][0]["runs"]]
    assert manifest["trials"][0]["packed"] and len(keys) == 2

    done = worker(export, runs)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 runs finished, 0 not finished, 0 failed" in done.stdout
    assert sorted(p.name for p in runs.iterdir()) == sorted(keys)
    history = {k: json.loads((runs / k / "result.json").read_text())["history"] for k in keys}
    assert all([h["epoch"] for h in hist] == [1, 2] for hist in history.values())
    assert not any((runs / k / "checkpoint").exists() for k in keys)  # keep: model (the default)

    study_dir = root / "off-smoke"
    assert study(["import", "off-smoke", str(runs), "--root", str(root)]) == 0
    assert "imported 2 finished runs" in capsys.readouterr().out
    mtimes = {p: p.stat().st_mtime_ns for p in (study_dir / "runs").glob("*/result.json")}
    assert len(mtimes) == 2
    summary = resume(study_dir, root=root, progress_seconds=60)
    assert summary.trials == 0 and summary.runs.finished == 2
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # nothing retrained
    rows = trial_run_rows(study_dir / "mlflow.db")
    assert len(rows) == 2
    for row in rows:
        key = row["tags"][schema.RUN_KEY]
        assert row["tags"][schema.STATUS] == schema.STATUS_FINISHED
        for metric in ("train_loss", "dev_score"):
            assert row["metrics"][metric] == [(h["epoch"], pytest.approx(h[metric])) for h in history[key]]


def epochs_of(out: str) -> list[int]:
    return [int(ln.split(" epoch ")[1].split(":")[0]) for ln in out.splitlines() if " epoch " in ln]


def test_a_deadline_stops_at_an_epoch_and_study_resume_continues_there(ray_address, tmp_path: Path,
                                                                        capsys) -> None:
    import torch

    spec = write_spec(tmp_path, "dl", grid={"task": ["copy"], "variant": ["onestep"]},
                      overrides={**SMOKE, "optim.epochs": 40, "task.train_size": 200})
    root, export, runs = tmp_path / "s", tmp_path / "export", tmp_path / "runs"
    assert study(["export", str(spec), "--root", str(root), "--out", str(export)]) == 0
    stopped = worker(export, runs, "--deadline", "2")
    assert stopped.returncode == 75, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    assert "0 runs finished, 1 not finished" in stopped.stdout
    (key,) = [p.name for p in runs.iterdir()]
    assert (runs / key / "checkpoint").is_dir() and not (runs / key / "result.json").exists()
    first = epochs_of(stopped.stdout)
    assert first == list(range(1, len(first) + 1)) and len(first) < 40
    again = worker(export, runs, "--deadline", "2")  # the next worker continues from the checkpoint
    assert again.returncode == 75, again.stderr[-3000:]
    second = epochs_of(again.stdout)
    assert second == list(range(first[-1] + 1, first[-1] + 1 + len(second))) and second[-1] < 40
    offline = torch.load(runs / key / "checkpoint" / "state.pt", weights_only=True)["history"]
    assert [h["epoch"] for h in offline] == first + second

    capsys.readouterr()
    assert study(["import", "dl-smoke", str(runs), "--root", str(root)]) == 0
    assert "1 not finished, imported with their checkpoints" in capsys.readouterr().out
    study_dir = root / "dl-smoke"
    summary = resume(study_dir, root=root, progress_seconds=60)
    assert summary.errors == 0 and summary.runs.finished == 1
    history = json.loads((study_dir / "runs" / key / "result.json").read_text())["history"]
    assert [h["epoch"] for h in history] == list(range(1, 41))
    # continued, not retrained: the offline epochs keep their own timings
    assert [h["epoch_seconds"] for h in history[:len(offline)]] == [h["epoch_seconds"] for h in offline]
    (row,) = trial_run_rows(study_dir / "mlflow.db")
    assert row["metrics"]["train_loss"] == [(h["epoch"], pytest.approx(h["train_loss"])) for h in history]


def test_refusals_are_one_line(tmp_path: Path, capsys) -> None:
    root = tmp_path / "s"
    assert study(["export", "nope", "--root", str(root), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("study export: no study 'nope'") and "\n" not in err
    assert study(["export", str(ROOT / "ablations/search_lr.yaml"), "--profile", "smoke", "--root", str(root),
                  "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "'search_lr-smoke' is a search study" in err and "\n" not in err
    assert not (root / "search_lr-smoke").exists()

    spec = write_spec(tmp_path, "ref", grid={"task": ["copy"], "variant": ["onestep"]}, overrides=SMOKE)
    export = tmp_path / "export"
    assert study(["export", str(spec), "--root", str(root), "--out", str(export)]) == 0
    (key,) = [p.name for p in (export / "runs").iterdir()]
    body = json.loads((export / "runs" / key / "trial.json").read_text())
    other = tmp_path / "other" / key
    other.mkdir(parents=True)
    (other / "trial.json").write_text(json.dumps({**body, "trial": {**body["trial"], "study": "else"}}))
    capsys.readouterr()
    assert study(["import", "ref-smoke", str(other.parent), "--root", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"study import: {other}: its trial.json names study 'else', not 'ref-smoke' "
                   "(to import only this study's folders: --skip-other-studies)")
    # one worker's --out holding two studies' runs: each import takes its own
    assert study(["import", "ref-smoke", str(other.parent), "--root", str(root), "--skip-other-studies"]) == 0
    said = capsys.readouterr().out
    assert "imported 0 finished runs" in said and "skipped the folders of other studies (else: 1)" in said
    stray = tmp_path / "stray" / "0123456789abcdef"
    stray.mkdir(parents=True)
    (stray / "trial.json").write_text(json.dumps(body))
    assert study(["import", "ref-smoke", str(stray.parent), "--root", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"study import: {stray}: run key 0123456789abcdef") and "\n" not in err
    assert not (root / "ref-smoke" / "runs").exists()


def test_the_worker_takes_a_train_path_and_refuses_one_its_model_cannot_take() -> None:
    """``--train-path`` replaces the exported runs' operational ``train_path`` (a CPU worker can
    compile what a GPU study exported eager); a path the model cannot take is one line naming the
    flag and the valid paths."""
    from locattn.config import make_run_config
    from locattn.offline import main as offline_main, with_device

    exported = make_run_config(task="copy", variant="onestep", overrides={"optim.train_step": "graphed"})
    assert exported.train_path == "eager"
    cfg = with_device(exported, "cpu", "compiled")
    assert (cfg.train_path, cfg.device, cfg.optim.train_step) == ("compiled", "cpu", "graphed")
    assert with_device(exported, "cpu", None).train_path == "eager"
    with pytest.raises(SystemExit) as refused:
        with_device(exported, "cpu", "fused")
    msg = str(refused.value)
    assert msg.startswith("locattn.offline: --train-path fused: ") and "eager, compiled" in msg
    assert "\n" not in msg
    with pytest.raises(SystemExit) as bad_flag:
        offline_main(["folder", "--out", "runs", "--train-path", "graph"])
    assert bad_flag.value.code == 2  # argparse's usage error, with the choices


def test_a_worker_without_a_compiler_refuses_the_compiled_path_in_one_line(tmp_path: Path, monkeypatch) -> None:
    """``--train-path compiled`` needs g++ for inductor's kernels: checked before any run starts,
    one line, and nothing is written."""
    import shutil as shutil_mod

    from locattn.offline import main as offline_main

    monkeypatch.setattr(shutil_mod, "which", lambda name, *a, **k: None)
    with pytest.raises(SystemExit) as refused:
        offline_main([str(tmp_path / "export"), "--out", str(tmp_path / "runs"), "--train-path", "compiled"])
    msg = str(refused.value)
    assert msg.startswith("locattn.offline: --train-path compiled: ") and "g++ not found" in msg
    assert "\n" not in msg and not (tmp_path / "runs").exists()


def test_export_takes_some_seeds_of_a_pack_and_refuses_seeds_the_study_lacks(tmp_path: Path, capsys) -> None:
    spec = write_spec(tmp_path, "part", grid={"task": ["copy"], "variant": ["onestep"]}, seeds=4,
                      pack_seeds=True, overrides=SMOKE)
    root = tmp_path / "s"
    assert study(["export", str(spec), "--root", str(root), "--out", str(tmp_path / "a"), "--seeds", "1,3"]) == 0
    assert "exported 1 trials (2 runs)" in capsys.readouterr().out
    (trial,) = json.loads((tmp_path / "a" / "manifest.json").read_text())["trials"]
    assert trial["packed"] and [r["seed"] for r in trial["runs"]] == [1, 3]
    assert sorted(p.name for p in (tmp_path / "a" / "runs").iterdir()) == sorted(r["key"] for r in trial["runs"])
    assert study(["export", "part-smoke", "--root", str(root), "--out", str(tmp_path / "b"), "--seeds", "0"]) == 0
    (trial,) = json.loads((tmp_path / "b" / "manifest.json").read_text())["trials"]
    assert [r["seed"] for r in trial["runs"]] == [0]  # one number is that seed, not a count
    capsys.readouterr()
    assert study(["export", "part-smoke", "--root", str(root), "--out", str(tmp_path / "c"), "--seeds", "2,7,9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "study export: --seeds: 7, 9 not a seed of study 'part-smoke' (its seeds: 0, 1, 2, 3)"
    assert not (tmp_path / "c").exists()


def test_a_pack_trained_in_parts_offline_is_recorded_whole_and_the_rest_trained_by_resume(
        ray_address, tmp_path: Path, capsys) -> None:
    spec = write_spec(tmp_path, "halves", grid={"task": ["copy"], "variant": ["onestep"]}, seeds=3,
                      pack_seeds=True, overrides=SMOKE)
    root, export, runs = tmp_path / "s", tmp_path / "export", tmp_path / "runs"
    assert study(["export", str(spec), "--root", str(root), "--out", str(export), "--seeds", "0,2"]) == 0
    done = worker(export, runs)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 runs finished, 0 not finished, 0 failed" in done.stdout
    offline = {p.name: p.joinpath("result.json").stat().st_mtime_ns for p in runs.iterdir()}
    assert study(["import", "halves-smoke", str(runs), "--root", str(root)]) == 0
    study_dir = root / "halves-smoke"
    summary = resume(study_dir, root=root, progress_seconds=60)
    assert summary.errors == 0 and summary.runs.finished == 3
    rows = trial_run_rows(study_dir / "mlflow.db")
    recorded = {r["tags"][schema.RUN_KEY] for r in rows if r["tags"][schema.STATUS] == schema.STATUS_FINISHED}
    seeds = {json.loads((study_dir / "runs" / k / "trial.json").read_text())["seed"] for k in recorded}
    assert len(rows) == 3 and seeds == {0, 1, 2} and set(offline) < recorded
    for key, mtime in offline.items():  # the offline halves were recorded, not retrained
        assert (study_dir / "runs" / key / "result.json").stat().st_mtime_ns == mtime


def test_the_first_epoch_is_timed_without_the_start_up_before_it(monkeypatch) -> None:
    """A compiled pack on the H200 spent about 200 s before its first epoch ended (7 s a run's
    share): timed from the start, the next epoch 'would not fit' and the worker stopped after one
    epoch with 250 s left. The first round is timed by the epoch's own seconds, the next by the
    wall clock between rounds."""
    from locattn import offline

    now = [1000.0]
    monkeypatch.setattr(offline.time, "monotonic", lambda: now[0])
    keys = [f"r{k}" for k in range(10)]
    clock = offline.Deadline(now[0] + 471)
    clock.start(keys, dict.fromkeys(keys, 100))
    now[0] += 224  # start-up, compilation, capture and epoch 1
    for k in keys:
        clock.on_epoch(k, 1, 7.0)  # the pack's epoch: 70 s; 247 s are left
    assert clock.epoch_seconds == 70.0
    for epoch in (2, 3):
        now[0] += 60
        for k in keys:
            clock.on_epoch(k, epoch, 6.0)
    assert clock.epoch_seconds == 60.0  # from the wall clock once a round has passed
    now[0] += 60  # epoch 4 ends 23 s before the deadline: epoch 5 would not fit
    with pytest.raises(offline.DeadlineReached):
        for k in keys:
            clock.on_epoch(k, 4, 6.0)
    # without the epoch's own time (an older recorder), the first round is the wall time
    old = offline.Deadline(now[0] + 300)
    old.start(keys, dict.fromkeys(keys, 100))
    now[0] += 224
    with pytest.raises(offline.DeadlineReached):
        for k in keys:
            old.on_epoch(k, 1)
