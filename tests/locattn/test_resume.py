"""Checkpoint and resume: an interrupted run, resumed, ends exactly where an uninterrupted one does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from locattn.config import apply_overrides, make_run_config
from locattn.train import CheckpointMismatchError, train
from locattn.training import checkpoint as ckpt
from tests.run_helpers import kill_after_epoch

ROOT = Path(__file__).resolve().parents[2]
SMALL = {
    "task.train_size": 160,
    "task.dev_size": 40,
    "task.test_size": 16,
    "task.test_lengths": (15, 30),
    "optim.epochs": 4,
    "num_threads": 1,
}


def without_time(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if k != "epoch_seconds"} for h in history]


class Interrupt(Exception):
    pass


class StopAfter:
    """Raises after the checkpoint of ``epoch`` is written (like a crash between epochs)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch(self, epoch, metrics, checkpoint_dir):
        if epoch == self.epoch:
            raise Interrupt

    def on_end(self, result):
        pass


def test_interrupted_in_process_resume_equals_uninterrupted(tmp_path: Path) -> None:
    cfg = make_run_config(task="reverse_copy", variant="mono", seed=3,
                          overrides={**SMALL, "cache_dir": str(tmp_path / "cache")})
    full = train(cfg, tmp_path / "full")
    with pytest.raises(Interrupt):
        train(cfg, tmp_path / "cut", recorder=StopAfter(2))
    assert ckpt.read_meta(tmp_path / "cut" / "checkpoint")["epoch"] == 2
    resumed = train(cfg, tmp_path / "cut")
    assert without_time(resumed.history) == without_time(full.history)
    assert resumed.test == full.test and resumed.by_length == full.by_length
    assert resumed.best_epoch == full.best_epoch


def test_other_config_is_refused_and_fresh_starts_over(tmp_path: Path) -> None:
    cfg = make_run_config(task="copy", variant="content", seed=0,
                          overrides={**SMALL, "optim.epochs": 1,
                                     "cache_dir": str(tmp_path / "cache")})
    first = train(cfg, tmp_path / "run")
    other = apply_overrides(cfg, {"optim.lr": 3e-4})
    with pytest.raises(CheckpointMismatchError, match=r"optim\.lr: 0\.001 -> 0\.0003"):
        train(other, tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["optim"]["lr"] == 1e-3  # the refused run wrote nothing
    fresh = train(other, tmp_path / "run", resume=False)
    assert fresh.run_identity != first.run_identity
    assert ckpt.read_meta(tmp_path / "run" / "checkpoint")["run_identity"] == fresh.run_identity
    # Operational fields are not part of the identity: another cache dir resumes fine.
    moved = apply_overrides(cfg, {"cache_dir": str(tmp_path / "cache2")})
    again = train(moved, tmp_path / "run", resume=False)
    assert again.run_identity == first.run_identity
    assert train(cfg, tmp_path / "run").test == again.test


def test_half_swapped_checkpoint_is_recovered(tmp_path: Path) -> None:
    """A crash between the two renames of a save leaves only checkpoint.old: it is used."""
    out = tmp_path / "run"
    ckpt.save_checkpoint(out, {"epoch": 1, "run_identity": "x"}, {"a": 1})
    ckpt.save_checkpoint(out, {"epoch": 2, "run_identity": "x"}, {"a": 2})
    os.replace(out / "checkpoint", out / "checkpoint.old")  # simulate the crash window
    found = ckpt.find_checkpoint(out)
    assert found == out / "checkpoint"
    assert ckpt.read_meta(found)["epoch"] == 2 and ckpt.load_state(found)["a"] == 2
    assert not (out / "checkpoint.old").exists()


def _cli(out: Path, cache: Path) -> list[str]:
    args = [sys.executable, "-m", "locattn", "train", "--task", "copy", "--variant", "onestep",
            "--seed", "1", "--epochs", "4", "--threads", "1", "--no-progress",
            "--out", str(out), "--cache-dir", str(cache)]
    for key, value in {"task.train_size": 320, "task.dev_size": 60, "task.test_size": 16,
                       "task.test_lengths": "15,30"}.items():
        args += ["--set", f"{key}={value}"]
    return args


def test_sigkill_during_epoch_3_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Warm the dataset cache so both runs start from the same files.
    from locattn.tasks import load_task

    load_task(make_run_config(task="copy", overrides={
        "task.train_size": 320, "task.dev_size": 60, "task.test_size": 16,
        "task.test_lengths": (15, 30)}).task, cache_dir=cache)

    full = subprocess.Popen(_cli(tmp_path / "full", cache), env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = kill_after_epoch(_cli(tmp_path / "cut", cache), tmp_path / "cut", 2, env=env,
                              cwd=ROOT, timeout=240)
    assert victim.returncode == -signal.SIGKILL
    # Killed while epoch 3 was running: the last complete checkpoint is epoch 2, no result.
    assert ckpt.read_meta(tmp_path / "cut" / "checkpoint")["epoch"] == 2
    assert not (tmp_path / "cut" / "result.json").exists()

    resumed = subprocess.run(_cli(tmp_path / "cut", cache), env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr and "epoch 2" in resumed.stderr
    out, err = full.communicate(timeout=300)
    assert full.returncode == 0, err

    a = json.loads((tmp_path / "full" / "result.json").read_text())
    b = json.loads((tmp_path / "cut" / "result.json").read_text())
    assert len(a["history"]) == 4
    assert without_time(a["history"]) == without_time(b["history"])
    assert a["test"] == b["test"] and a["by_length"] == b["by_length"]
    assert a["best_epoch"] == b["best_epoch"] and a["best_selection_score"] == b["best_selection_score"]


def test_regression_run_resumes_exactly(tmp_path: Path) -> None:
    cfg = make_run_config(task="raffel_mul", variant="ffattn", seed=2, overrides={
        "optim.batch_size": 20, "optim.updates_per_epoch": 15, "optim.epochs": 3,
        "task.dev_size": 50, "task.test_size": 50, "num_threads": 1})
    full = train(cfg, tmp_path / "full")
    assert full.kind == "regression" and full.epochs_run == 3
    with pytest.raises(Interrupt):
        train(cfg, tmp_path / "cut", recorder=StopAfter(1))
    resumed = train(cfg, tmp_path / "cut")
    assert without_time(resumed.history) == without_time(full.history)
    assert resumed.test == full.test
