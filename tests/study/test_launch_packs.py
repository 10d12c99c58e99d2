"""Ablation packs through the launcher: the cells of Table 4's Copy row that differ only in
ablation switches (OneStepAttn, -Step 3, -Sigmoid) share one Tune trial and train as one packed
model, each run keeping its own cell, key and identity, and equal to the same runs trained solo.
A real local Ray and a real MLflow store, as test_study.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback; before ray is imported
pytest.importorskip("ray")
pytest.importorskip("mlflow")

from locattn.config import run_identity  # noqa: E402
from locattn.packable import pack_groups  # noqa: E402
from record import layout, schema  # noqa: E402
from tests.study_helpers import start_private_ray, trial_run_rows, wait_for  # noqa: E402
from study.driver.launch import launch, resume  # noqa: E402
from study.trial.descriptor import TrialDescriptor  # noqa: E402
from study.spec import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PACKABLE = ["onestep", "onestep_no_step3", "onestep_no_sigmoid"]
EPOCHS = 10
BODY = {"grid": {"task": ["copy"], "variant": PACKABLE}, "seeds": 2, "resources": {"cpus": 1},
        "max_failures": 0, "profiles": {"smoke": {}}, "default_profile": "smoke",
        "overrides": {"task.train_size": 300, "task.dev_size": 32, "task.test_size": 32,
                      "task.test_lengths": [15], "optim.epochs": EPOCHS}}


@pytest.fixture(scope="module")
def ray_address():
    import ray

    started = start_private_ray()
    address = ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:")  # tests talk to loopback only
    yield address
    if started:
        ray.shutdown()


def write_spec(tmp_path: Path, name: str, **changes) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**BODY, "name": name, **changes}))
    return path


def by_run(study_dir: Path) -> dict[tuple[str, str], dict]:
    """(cell, seed) -> the trial run's record, with its folder's run identity and trial file."""
    out = {}
    for run in trial_run_rows(study_dir / "mlflow.db"):
        folder = study_dir / layout.RUNS_DIR / run["tags"][schema.RUN_KEY]
        run["identity"] = json.loads((folder / layout.RESULT_FILE).read_text())["run_identity"]
        run["trial_file"] = json.loads((folder / layout.TRIAL_FILE).read_text())
        out[(run["tags"][schema.CELL], run["tags"][schema.SEED])] = run
    return out


def test_the_plan_packs_the_switch_cells_and_leaves_mix_alone(tmp_path: Path) -> None:
    """Mix OneStepAttn (a content scorer and a mix gate: parameters of its own) cannot join; the
    other three pack, and no run's key changes (the same runs as the cells' own packs)."""
    grid = {"task": ["copy"], "variant": ["onestep", "mix_onestep", *PACKABLE[1:]]}
    spec = load_spec(write_spec(tmp_path, "t4", grid=grid, pack_seeds=True), None)
    assert spec.cell_packs() == [(0, 2, 3), (1,)] and spec.n_trials() == len(spec.grid_trials()) == 2
    assert [[c.cell for c in t.cells] for t in spec.grid_trials()] == [
        ["task=copy,variant=onestep", "task=copy,variant=onestep_no_step3", "task=copy,variant=onestep_no_sigmoid"],
        []]
    plain = load_spec(write_spec(tmp_path, "t4", grid=grid), None)
    assert plain.cell_packs() == [(0,), (1,), (2,), (3,)]  # a spec that does not pack keeps its cells apart
    packed_runs = {key: d.alone(key) for d in descriptors(spec) for _, key in d.run_keys}
    solo_runs = {key: d for d in descriptors(plain) for _, key in d.run_keys}
    assert sorted(packed_runs) == sorted(solo_runs)  # the same 8 runs, keys and identities
    for key, narrowed in packed_runs.items():
        solo = solo_runs[key]
        assert run_identity(narrowed.run_config(key)) == run_identity(solo.run_config(key))
        assert (narrowed.cell, narrowed.variant, narrowed.overrides) == (solo.cell, solo.variant, solo.overrides)
    one_cell = descriptors(spec)[1]  # Mix alone: its trial file reads as before (no cells)
    assert "cells" not in one_cell.to_dict() and "packed_cells" not in one_cell.to_dict()
    assert "\npacks " not in plain.plan()
    graphed = load_spec(write_spec(tmp_path, "t4", grid=grid, pack_seeds=True,
                                   overrides={**BODY["overrides"], "optim.train_step": "graphed"}), None)
    assert graphed.cell_packs() == [(0, 2, 3), (1,)]  # the graphed (GPU) step packs switches too
    # On --train-path compiled a pack's trial trains its cells' own packs one after another
    # (study.trial.trainable.run_trial splits its runs with pack_groups, the one judge).
    pack = descriptors(spec)[0]
    cfgs = [pack.run_config(key) for _, key in pack.run_keys]
    assert pack_groups(cfgs) == [list(range(6))]
    assert pack_groups([replace(c, train_path="compiled") for c in cfgs]) == [[0, 1], [2, 3], [4, 5]]


def descriptors(spec) -> list[TrialDescriptor]:
    """Each trial's descriptor as a worker reads it: through the JSON of its Tune config."""
    common = dict(study=spec.name, study_dir="/tmp/x", cpus=1, metric="best_selection_score", pack=spec.pack_seeds)
    return [TrialDescriptor.of(json.loads(json.dumps({"trial": TrialDescriptor(
                cell=t.cell, task=t.task, variant=t.variant, overrides=t.overrides, hparams=t.hparams,
                seeds=t.seeds, points=t.points, cells=t.cells, **common).to_dict()})))
            for t in spec.grid_trials()]


def _launch_then_kill(spec: Path, root: Path, ray_address: str, log: Path, ready) -> None:
    """Launch ``spec`` in a driver subprocess, wait until ``ready()``, then ``kill -9`` it."""
    env = dict(os.environ, TUNE_GLOBAL_CHECKPOINT_S="1", PYTHONPATH=str(ROOT))
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "study.cli", "launch", str(spec), "--root", str(root),
                                 "--address", ray_address, "--progress-seconds", "1"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(ready, 300, "6 checkpoints mid-training", proc, log)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # kill -9 the driver
        proc.wait()


def test_an_ablation_pack_is_one_trial_killed_resumed_equal_to_solo_runs(ray_address, tmp_path: Path,
                                                                         capsys) -> None:
    """OneStepAttn, -Step 3 and -Sigmoid x 2 seeds on Copy: the dry run shows one pack, the
    launch trains the six runs in one trial (killed mid-training and resumed, it retrains only
    what is unfinished), and every run equals the same run of a study that trains each run alone:
    the same run identity, every epoch's metrics and the test metrics, to the bit. The trial
    saves one Tune checkpoint of the pack per epoch, not one per run per epoch."""
    import ray

    packed, root = write_spec(tmp_path, "abl", pack_seeds=True), tmp_path / "s"
    dry = launch(packed, root=root, dry_run=True)
    out = capsys.readouterr().out
    assert dry.n_trials == 1 and dry.n_runs == 6
    assert ("  - pack 1: task=copy,variant=onestep + task=copy,variant=onestep_no_step3 + "
            "task=copy,variant=onestep_no_sigmoid (3 cells x 2 runs = 6 runs per trial)") in out
    assert "trials   1 Tune trials, 6 MLflow runs" in out
    study_dir = root / "abl-smoke"

    def mid_training() -> bool:
        eps = []
        for meta in study_dir.glob("runs/*/checkpoint/meta.json"):
            try:
                eps.append(int(json.loads(meta.read_text())["epoch"]))
            except (OSError, ValueError, KeyError):
                pass
        mid_training.last = eps
        return len(eps) == 6 and 2 <= min(eps) and max(eps) <= EPOCHS - 3

    _launch_then_kill(packed, root, ray_address, tmp_path / "driver.log", mid_training)
    wait_for(lambda: ray.available_resources().get("CPU", 0) >= 1, 60, "CPUs released")
    summary = resume(study_dir, progress_seconds=60)
    assert summary.errors == 0 and summary.trials == 1  # one trial for every run

    solo = write_spec(tmp_path, "solo")
    assert launch(solo, root=root, progress_seconds=60).trials == 6
    pk, alone = by_run(study_dir), by_run(root / "solo-smoke")
    cells = [f"task=copy,variant={v}" for v in PACKABLE]
    assert sorted(pk) == sorted(alone) == sorted((c, s) for c in cells for s in ("0", "1"))
    trials = {tuple(run["trial_file"]["tune_trials"]) for run in pk.values()}
    assert len(trials) == 1 and len(next(iter(trials))) == 2  # one trial: its launch and its resume
    resumed = study_dir / "tune" / next(iter(trials))[-1]
    saved = 1 + max(int(p.name.split("_")[1]) for p in resumed.glob("checkpoint_*"))
    assert saved <= EPOCHS + 6  # one checkpoint of the pack per epoch and one per finished run, not 6 per epoch
    for where, run in pk.items():
        assert run["status"] == "FINISHED" and json.loads(run["tags"][schema.PACKED_CELLS]) == cells
        assert run["tags"][schema.PACKED_WITH] == "0,1" and int(run["tags"][schema.RESUMED_FROM]) >= 1
        assert run["tags"][schema.VARIANT] == where[0].split("variant=")[1]
        assert run["trial_file"]["trial"]["cell"] == where[0]  # the run's own cell, as solo
        assert run["identity"] == alone[where]["identity"], where
        assert [s for s, _ in run["metrics"]["train_loss"]] == list(range(1, EPOCHS + 1))
        for key in ("train_loss", "dev_loss", "dev_score", "best_selection_score", "test.len15.seq_acc",
                    "test.len15.edit_distance"):
            assert run["metrics"][key] == alone[where]["metrics"][key], (where, key)
        assert schema.PACKED_CELLS not in alone[where]["tags"]
    assert len({tuple(r["metrics"]["train_loss"]) for r in pk.values()}) == 6  # the runs differ
