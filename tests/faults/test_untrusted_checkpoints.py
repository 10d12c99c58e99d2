"""A study's checkpoints and run folders are data: corrupt and crafted checkpoints never fail a
resume or run code, and pickles planted in Tune's folders and a run folder run nothing.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
pytest.importorskip("ray")
pytest.importorskip("mlflow")

from tests.study_helpers import wait_for  # noqa: E402
from tests.faults.fault_helpers import (  # noqa: E402
    ENV,
    TINY,
    checkpoints,
    has_traceback,
    kill_tree,
    start_driver,
    study_cli,
    trial_runs,
    write_spec,
)


def test_corrupt_and_crafted_checkpoints_never_fail_or_run_code(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "locattn.cli", "train", "--task", "copy", "--variant", "onestep",
           "--epochs", "2", "--out", str(out), "--no-progress",
           *[f"--set={k}={json.dumps(v)}" for k, v in TINY.items()]]
    first = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    state = out / "checkpoint" / "state.pt"
    meta = json.loads((out / "checkpoint" / "meta.json").read_text())
    assert len(meta["state_sha256"]) == 64

    # Same size, different bytes: refused by checksum, set aside, the run starts fresh.
    blob = bytearray(state.read_bytes())
    blob[100:116] = bytes(16)
    state.write_bytes(bytes(blob))
    again = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    said = [ln for ln in again.stderr.splitlines() if "checksum mismatch" in ln]
    assert len(said) == 1 and str(state) in said[0] and "starting this run fresh" in said[0]
    assert json.loads((out / "result.json").read_text())["epochs_run"] == 2

    # A crafted pickle with a matching checksum: weights_only refuses it, no code runs.
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import torch

    from locattn.training.checkpoint import file_sha256

    torch.save({"model": Evil()}, state)
    meta = json.loads((out / "checkpoint" / "meta.json").read_text())
    meta["state_sha256"] = file_sha256(state)
    (out / "checkpoint" / "meta.json").write_text(json.dumps(meta))
    third = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr
    assert not marker.exists()
    said = [ln for ln in third.stderr.splitlines() if "cannot be loaded safely" in ln]
    assert len(said) == 1 and str(state) in said[0]
    assert pickle  # (the crafted file above is a real pickle stream written by torch.save)


class _Planted:
    """A pickle payload: unpickling it runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.faults  # a real driver killed mid-training, then resumed
@pytest.mark.timeout(1200)  # two drivers
def test_pickles_planted_in_tune_and_a_run_folder_run_nothing_on_resume(tmp_path: Path) -> None:
    """#27 item 1: `study resume` once unpickled tune/tuner.pkl, search_gen_state-*.json and the
    trials' storage values. Every file of tune/ and of the unfinished run's folder is replaced
    by a payload that would create a marker file; the resume runs none of them and finishes."""
    spec = write_spec(tmp_path, "plant", overrides={**TINY, "task.train_size": 160, "optim.epochs": 12})
    root = tmp_path / "s"
    study = root / "plant-smoke"
    log = tmp_path / "d.log"
    d = start_driver("launch", str(spec), "--root", str(root), "--progress-seconds", "1", log=log)
    wait_for(lambda: any(e >= 2 for e, _ in checkpoints(study)), 300, "epoch 2", d, log)
    kill_tree(d.pid)
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Planted(marker))
    tune_dir = study / "tune"
    for extra in ("tuner.pkl", "search_gen_state-2030-01-01_00-00-00.json",
                  "searcher-state-2030-01-01_00-00-00.pkl"):
        (tune_dir / extra).write_bytes(b"")
    (run,) = (study / "runs").iterdir()
    planted = [p for folder in (tune_dir, run) for p in folder.rglob("*") if p.is_file()]
    assert len(planted) > 10 and any(p.name.startswith("experiment_state") for p in planted)
    for path in planted:
        path.write_bytes(payload)

    res = study_cli("resume", str(study), "--progress-seconds", "5", timeout=600)
    assert not marker.exists(), "a planted pickle ran"
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not has_traceback(res.stdout + res.stderr), res.stdout[-3000:] + res.stderr[-3000:]
    assert "1 of 1 runs finished" in res.stdout
    (row,) = trial_runs(study / "mlflow.db").values()
    assert row["status"] == "FINISHED" and row["steps"]["train_loss"] == list(range(1, 13))
