"""The compiled training path (``train_path="compiled"``) against the eager one.

Tolerances: the compiled graph computes the same function with fused kernels, so single-batch
numbers agree to float32 rounding (losses within 1e-5 relative, gradients within 1e-4 of their
scale); after an epoch of training the runs differ only as far as that rounding has grown (the
losses of a tiny task within 1e-3), and the final dev score of a tiny task is equal. Within the
compiled path, packed equals solo and a resumed run equals an uninterrupted one to the bit.

Tiny sizes with one batch shape each (sources of length 3, batches that divide the split), so
each test compiles one or two small graphs; inductor's on-disk cache makes reruns fast. A cold
compile still takes minutes on a loaded 2-core machine, so only the single-batch check runs by
default; the training-level checks are marked ``slow``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from locattn.config import make_run_config
from locattn.packed import train_packed
from locattn.tasks import load_task
from locattn.train import train
from locattn.training import checkpoint as ckpt
from run_helpers import kill_after_epoch
from locattn.training.epoch import RECOMPILE_LIMIT, ParamPack, batch_nll, compiled_batch_nll
from locattn.training.seq2seq import Seq2SeqRun

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "task.train_size": 64, "task.dev_size": 16, "task.test_size": 16,
    "task.train_lengths": (3, 3), "task.dev_lengths": (3, 3), "task.test_lengths": (4,),
    "optim.batch_size": 16, "optim.dev_batch_size": 16, "optim.epochs": 3, "num_threads": 1,
}


def cfg(tmp: Path, path: str, seed: int = 0, **extra):
    over = {**TINY, "cache_dir": str(tmp / "cache"), "train_path": path, **extra}
    return make_run_config(task="copy", variant="onestep", seed=seed, overrides=over)


def history(result) -> list[dict]:
    return [{k: v for k, v in h.items() if k != "epoch_seconds"} for h in result.history]


def test_every_thread_that_trains_compiled_gets_the_raised_recompile_limit() -> None:
    """torch keeps dynamo's config per thread, and Ray Tune trains each trial of a reused actor in
    a new thread: the second trial saw the default limit of 8 shapes and failed with
    FailOnRecompileLimitHit (rc_table4-paper, 2026-11-28). Each thread that asks for the compiled
    step gets the limit raised; the compiled function stays one per process."""
    import threading

    seen: list[tuple[int, int, object]] = []

    def trial() -> None:
        fn = compiled_batch_nll()
        seen.append((torch._dynamo.config.recompile_limit,
                     torch._dynamo.config.accumulated_recompile_limit, fn.func))

    for _ in range(2):
        t = threading.Thread(target=trial)
        t.start()
        t.join()
    assert [s[:2] for s in seen] == [(RECOMPILE_LIMIT, RECOMPILE_LIMIT)] * 2
    assert seen[0][2] is seen[1][2]


@pytest.mark.timeout(1200)  # a cold compile under load
def test_compiled_batch_equals_eager_within_rounding(tmp_path: Path) -> None:
    c = cfg(tmp_path, "compiled")
    run = Seq2SeqRun(c, load_task(c.task, cache_dir=c.cache_dir), tmp_path / "run")
    pack = ParamPack([run])
    try:
        model = pack.model.train()
        b = next(run.train_split.train_batches(torch.arange(len(run.train_split)), 16))
        noise = torch.rand(model.dropout_shape(b.src))
        out = {}
        for name, fn in (("eager", batch_nll), ("compiled", compiled_batch_nll())):
            for p in pack.stacked:
                p.grad = None
            nll = fn(model, None, b.src, b.src_len, b.tgt_in, b.tgt_out, noise, run.ids["pad_id"], 1)
            nll.sum().backward()
            out[name] = (nll.detach(), [p.grad.clone() for p in pack.stacked])
    finally:
        pack.release()
    (e_nll, e_grads), (c_nll, c_grads) = out["eager"], out["compiled"]
    assert torch.allclose(c_nll, e_nll, rtol=1e-5, atol=0)
    assert float(e_nll[0]) > 1.0  # an untrained model: a real loss, not a degenerate one
    for name, e, g in zip(pack.names, e_grads, c_grads):
        assert torch.allclose(g, e, rtol=0, atol=1e-4 * max(1.0, float(e.abs().max()))), name


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a cold compile under load
def test_compiled_training_equals_eager_within_tolerance(tmp_path: Path) -> None:
    eager = train(cfg(tmp_path, "eager"), tmp_path / "eager")
    compiled = train(cfg(tmp_path, "compiled"), tmp_path / "compiled")
    assert compiled.run_identity == eager.run_identity  # operational, like the device
    saved = json.loads((tmp_path / "compiled" / "config.json").read_text())
    assert saved["train_path"] == "compiled"
    e, c = history(eager), history(compiled)
    assert abs(e[0]["train_loss"] - c[0]["train_loss"]) <= 1e-5 * e[0]["train_loss"]
    for he, hc in zip(e, c):
        assert abs(he["train_loss"] - hc["train_loss"]) <= 1e-3, (he, hc)
    assert e[0]["train_loss"] != c[0]["train_loss"] or e[-1] == c[-1]  # compiled really ran
    assert compiled.best_selection_score == eager.best_selection_score
    assert compiled.test["iid"]["seq_acc"] == eager.test["iid"]["seq_acc"]


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a cold compile under load
def test_compiled_packed_equals_compiled_solo(tmp_path: Path) -> None:
    cfgs = [cfg(tmp_path, "compiled", seed=s) for s in (0, 1)]
    solos = [train(c, tmp_path / f"solo{c.seed}") for c in cfgs]
    packed = train_packed(cfgs, [tmp_path / f"packed{c.seed}" for c in cfgs])
    for s, p in zip(solos, packed):
        assert history(p) == history(s)
        assert p.test == s.test


def _cli(out: Path, cache: Path) -> list[str]:
    args = [sys.executable, "-m", "locattn", "train", "--task", "copy", "--variant", "onestep",
            "--epochs", "4", "--threads", "1", "--no-progress", "--out", str(out), "--cache-dir", str(cache)]
    sets = {**TINY, "task.train_size": 320, "train_path": "compiled", "task.train_lengths": "3,3",
            "task.dev_lengths": "3,3", "task.test_lengths": "4"}
    for key, value in sets.items():
        if key not in ("num_threads", "optim.epochs"):
            args += ["--set", f"{key}={value}"]
    return args


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a cold compile under load
def test_compiled_sigkill_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    full = subprocess.run(_cli(tmp_path / "full", cache), env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert full.returncode == 0, full.stderr
    kill_after_epoch(_cli(tmp_path / "cut", cache), tmp_path / "cut", 2, env=env, cwd=ROOT,
                     timeout=600, poll=0.005)
    assert ckpt.read_meta(tmp_path / "cut" / "checkpoint")["epoch"] in (2, 3)
    assert not (tmp_path / "cut" / "result.json").exists()
    resumed = subprocess.run(_cli(tmp_path / "cut", cache), env=env, cwd=ROOT, capture_output=True,
                             text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    a = json.loads((tmp_path / "full" / "result.json").read_text())
    b = json.loads((tmp_path / "cut" / "result.json").read_text())
    assert len(a["history"]) == 4
    assert [{k: v for k, v in h.items() if k != "epoch_seconds"} for h in a["history"]] == \
        [{k: v for k, v in h.items() if k != "epoch_seconds"} for h in b["history"]]
    assert a["test"] == b["test"]


pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(shutil.which("g++") is None, reason="inductor's CPU kernels need g++"),
]
