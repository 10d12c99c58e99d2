"""The compiled training path (``train_path="compiled"``) against the eager one.

Tolerances: the compiled graph computes the same function with fused kernels, so single-batch
numbers agree to float32 rounding (losses within 1e-5 relative, gradients within 1e-4 of their
scale); after an epoch of training the runs differ only as far as that rounding has grown (the
losses of a tiny task within 1e-3), and the final dev score of a tiny task is equal. Within the
compiled path, packed equals solo and a resumed run equals an uninterrupted one to the bit.

Tiny sizes with one batch shape each (sources of length 3, batches that divide the split), so
each test compiles one or two small graphs; inductor's on-disk cache makes reruns fast. A cold
compile still takes minutes on a loaded 2-core machine, so only the single-batch check runs by
default; the training-level checks are marked ``slow``. The graphed step's compiled path
(``optim.train_step: graphed``) is checked by default for its wiring (uncompiled stand-ins,
bit for bit) and, marked ``slow``, compiled.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from locattn.config import make_run_config
from locattn.models.functional import LeakyReLUFromOutput, apply_dropout, dropout_keep
from locattn.packed import train_packed
from locattn.tasks import load_task
from locattn.train import train
from locattn.training import checkpoint as ckpt
from tests.run_helpers import kill_after_epoch
from locattn.training.compiles import (SHARED_CACHE_VAR, CompileWatch, compiled_frames, fixed_train_shape,
                                      raise_on_recompile_limit, share_compile_cache)
from locattn.training.epoch import RECOMPILE_LIMIT, ParamPack, batch_nll, compiled_batch_nll, fixed_shape_inputs
from locattn.training import graphed
from locattn.training.graphed import GraphedStep
from locattn.training.seq2seq import Seq2SeqRun

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "task.train_size": 64, "task.dev_size": 16, "task.test_size": 16,
    "task.train_lengths": (3, 3), "task.dev_lengths": (3, 3), "task.test_lengths": (4,),
    "optim.batch_size": 16, "optim.dev_batch_size": 16, "optim.epochs": 3, "num_threads": 1,
}


def cfg(tmp: Path, path: str, seed: int = 0, **extra):
    over = {**TINY, "cache_dir": str(tmp / "cache"), "train_path": path, **extra}
    return make_run_config(task="copy", variant="onestep", seed=seed, overrides=over)


PER_PROCESS = ("epoch_seconds", "compiles", "compile_seconds")  # timings and this process's compiles


def history(result) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in PER_PROCESS} for h in result.history]


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
        saved: list[torch.Tensor] = []
        for name, fn in (("eager", batch_nll), ("compiled", compiled_batch_nll())):
            for p in pack.stacked:
                p.grad = None
            # as the training pass calls them: eager with the noise, compiled with its multiplier
            given = {"noise": noise} if name == "eager" else {"noise": None,
                                                              "keep": dropout_keep(noise, model.dropout_p)}
            hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t)
            with hooks if name == "compiled" else contextlib.nullcontext():
                nll = fn(model, None, b.src, b.src_len, b.tgt_in, b.tgt_out, pad=run.ids["pad_id"], k=1, **given)
            nll.sum().backward()
            out[name] = (nll.detach(), [p.grad.clone() for p in pack.stacked])
    finally:
        pack.release()
    # no bool mask of the encoder outputs or the value layer is saved for the backward: inductor's
    # CPU kernels store and load bools at a small fraction of float speed (dropout and leaky ReLU
    # saved two (B, L, H) masks, ~1.5 ms of a Copy batch)
    big = noise.numel()
    assert saved and not [tuple(t.shape) for t in saved if t.dtype == torch.bool and t.numel() >= big]
    (e_nll, e_grads), (c_nll, c_grads) = out["eager"], out["compiled"]
    assert torch.allclose(c_nll, e_nll, rtol=1e-5, atol=0)
    assert float(e_nll[0]) > 1.0  # an untrained model: a real loss, not a degenerate one
    for name, e, g in zip(pack.names, e_grads, c_grads):
        assert torch.allclose(g, e, rtol=0, atol=1e-4 * max(1.0, float(e.abs().max()))), name


def test_the_dropout_multiplier_and_the_output_based_leaky_relu_are_the_eager_ops_to_the_bit() -> None:
    """What the compiled step computes in place of a bool mask: ``x * dropout_keep(u, p)`` is
    ``apply_dropout(x, u, p)``, and the leaky ReLU whose backward reads its output has
    F.leaky_relu's values and gradients, zeros, negatives and subnormals included."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 7, 33, generator=g)
    x.view(-1)[:6] = torch.tensor([0.0, -0.0, 1e-42, -1e-42, 1e-38, -3e-39])
    u = torch.rand(x.shape, generator=g)
    assert torch.equal(x * dropout_keep(u, 0.1), apply_dropout(x, u, 0.1))
    assert torch.equal((x * dropout_keep(u, 0.1)).signbit(), apply_dropout(x, u, 0.1).signbit())
    grad = torch.randn(x.shape, generator=g)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = torch.nn.functional.leaky_relu(a, 0.01), LeakyReLUFromOutput.apply(b, 0.01)
    assert torch.equal(ya, yb)
    ya.backward(grad)
    yb.backward(grad)
    assert torch.equal(a.grad, b.grad)


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


RAGGED = {"task.train_size": 40, "task.train_lengths": (2, 4)}  # lengths vary; last batch of 8


def test_a_padded_batch_has_the_loss_and_gradients_of_the_trimmed_one(tmp_path: Path) -> None:
    """The compiled path pads every batch to the split's longest source and target and to the
    full batch size (filler rows with an all-<pad> target): eagerly, the padded batch gives the
    trimmed batch's summed loss and gradients within float32 rounding, with the same dropout
    masks (dropout 0.5)."""
    c = cfg(tmp_path, "eager", **RAGGED)
    run = Seq2SeqRun(c, load_task(c.task, cache_dir=c.cache_dir), tmp_path / "run")
    pad = run.ids["pad_id"]
    S, T = fixed_train_shape(run.train_split)
    b = run.train_split.batch(run.train_split.sorted_batches(8)[0])  # the 8 shortest sources
    assert b.src.shape[0] == 8 and (b.src.shape[1], b.tgt_in.shape[1]) != (S, T)
    model = ParamPack([run]).model.train()
    noise = torch.rand(model.dropout_shape(b.src))
    padded_noise = torch.cat([noise, noise.new_ones(noise.shape[0], S - b.src.shape[1], noise.shape[2])], 1)
    padded_noise = torch.cat([padded_noise, padded_noise.new_ones(8, *padded_noise.shape[1:])])
    out = []
    for inputs, u in (((b.src, b.src_len, b.tgt_in, b.tgt_out), noise),
                      (fixed_shape_inputs(b, S, T, 16, pad), padded_noise)):
        model.zero_grad()
        nll = batch_nll(model, None, *inputs, u, pad, 1)
        nll.sum().backward()
        out.append((nll.detach(), [p.grad.clone() for p in model.parameters()]))
    (n0, g0), (n1, g1) = out
    assert fixed_shape_inputs(b, S, T, 16, pad)[0].shape == (16, S)
    assert torch.allclose(n1, n0, rtol=1e-6, atol=0) and float(n0[0]) > 1.0
    for a, e in zip(g1, g0):
        assert torch.allclose(a, e, rtol=0, atol=1e-5 * max(1.0, float(e.abs().max())))


@pytest.mark.timeout(1200)  # a cold compile under load
def test_a_compiled_run_compiles_once_and_records_it(tmp_path: Path) -> None:
    """Batches trimmed to their own longest example gave one graph per batch shape: the epoch's
    last, partial batch and every new longest source compiled again, in any epoch. Padded to one
    shape per run, a run with ragged lengths and a partial last batch compiles in its first
    epoch only, and its history records the compiles (``compiles``, ``compile_seconds``)."""
    before = compiled_frames()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a recompile after epoch 1 warns
        result = train(cfg(tmp_path, "compiled", **{**RAGGED, "optim.epochs": 2}), tmp_path / "run")
    assert compiled_frames() - before == 1
    assert [h["compiles"] for h in result.history] == [1.0, 0.0]
    assert result.history[0]["compile_seconds"] > 0.0 == result.history[1]["compile_seconds"]


def test_a_recompile_after_the_first_epoch_warns_with_its_reason() -> None:
    watch = CompileWatch(label="probe")
    fn = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
    watch.start_epoch(1)
    watch.call(fn, fn, torch.ones(3))
    assert watch.metrics()["compiles"] == 1.0
    watch.start_epoch(2)
    with pytest.warns(RuntimeWarning, match=r"probe: epoch 2: torch.compile compiled again.*size"):
        watch.call(fn, fn, torch.ones(4))


def test_the_recompile_limit_fallback_to_eager_warns() -> None:
    """Past dynamo's recompile limit the step runs eagerly for the rest of the run, with a
    warning (dynamo itself would fall back silently)."""
    watch = CompileWatch(label="probe")
    fn = torch.compile(lambda x: x * 3, backend="eager", dynamic=False)
    calls = []

    def eager(x):
        calls.append(x.shape[0])
        return x * 3

    old = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 1
    try:
        raise_on_recompile_limit()
        watch.start_epoch(1)
        watch.call(fn, eager, torch.ones(2))
        with pytest.warns(RuntimeWarning, match="recompile limit.*train eagerly"):
            out = watch.call(fn, eager, torch.ones(5))
        assert torch.equal(out, torch.full((5,), 3.0)) and watch.eager
        watch.call(fn, eager, torch.ones(2))
        assert calls == [5, 2]
    finally:
        torch._dynamo.config.recompile_limit = old
        torch._dynamo.config.fail_on_recompile_limit_hit = False


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
            "--epochs", "12", "--threads", "1", "--no-progress", "--out", str(out), "--cache-dir", str(cache)]
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
    # 12 epochs: compiled once, an epoch of this tiny run takes a fraction of a second, and with
    # 4 the run had ended before the poll saw epoch 2 (load 16)
    assert 2 <= ckpt.read_meta(tmp_path / "cut" / "checkpoint")["epoch"] < 12
    assert not (tmp_path / "cut" / "result.json").exists()
    resumed = subprocess.run(_cli(tmp_path / "cut", cache), env=env, cwd=ROOT, capture_output=True,
                             text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    a = json.loads((tmp_path / "full" / "result.json").read_text())
    b = json.loads((tmp_path / "cut" / "result.json").read_text())
    assert len(a["history"]) == 12
    assert [{k: v for k, v in h.items() if k not in PER_PROCESS} for h in a["history"]] == \
        [{k: v for k, v in h.items() if k not in PER_PROCESS} for h in b["history"]]
    assert a["test"] == b["test"]


pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(shutil.which("g++") is None, reason="inductor's CPU kernels need g++"),
]


# ------------------------------------------------------------------ the graphed step, compiled

def _graphed_pack(tmp: Path, path: str, name: str) -> list[Seq2SeqRun]:
    cfgs = [cfg(tmp, path, seed=s, **{"optim.train_step": "graphed"}) for s in (0, 1)]
    data = load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)
    return [Seq2SeqRun(c, data, tmp / f"{name}{c.seed}") for c in cfgs]


def _two_epochs(runs: list[Seq2SeqRun]) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Both replicas' losses of epochs 1 and 2, and replica 1's weights after them."""
    step = GraphedStep(runs)
    losses = step.train_epoch(1) + step.train_epoch(2)
    return losses, runs[1].model.state_dict()


def test_the_graphed_step_takes_its_compiled_path_with_the_same_masks(tmp_path: Path, monkeypatch) -> None:
    """``train_path: compiled`` with ``optim.train_step: graphed`` routes the step's forward and
    loss through :func:`compiled_step_nll` and its update through :func:`compiled_adamw_update`
    (the graphed step used to ignore the field). Here both stand uncompiled, so what is tested is
    the wiring: the dropout noise the compiled path draws before the forward is the very noise the
    uncompiled forward draws inside, so the runs are equal to the bit (dropout 0.5: the masks
    matter)."""
    calls = {"nll": 0, "update": 0}

    def counted(name, fn):
        def call(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return lambda: call

    monkeypatch.setattr(graphed, "compiled_step_nll", counted("nll", graphed.step_nll))
    monkeypatch.setattr(graphed, "compiled_adamw_update", counted("update", graphed.stacked_adamw_update))
    plain = _graphed_pack(tmp_path, "eager", "plain")
    assert plain[0].model.dropout_p == 0.5
    loss_plain, w_plain = _two_epochs(plain)
    assert calls == {"nll": 0, "update": 0}
    routed = _graphed_pack(tmp_path, "compiled", "routed")
    loss_routed, w_routed = _two_epochs(routed)
    steps = 2 * len(routed[0].train_split) // 16  # two epochs of full batches of 16
    assert calls == {"nll": steps, "update": steps}
    assert loss_routed == loss_plain and len(set(loss_plain)) == 4
    assert all(torch.equal(w_plain[k], w_routed[k]) for k in w_plain)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a cold compile under load
def test_the_compiled_graphed_step_equals_the_graphed_step_within_rounding(tmp_path: Path) -> None:
    """The real compile (forward, backward and stacked AdamW update: three graphs), a pack of 2
    seeds, two epochs (8 steps). Measured on this CPU: losses 3e-8 apart (relative); weights
    3.4e-5 apart at most, where Adam turns a rounding difference in a near-zero gradient into a
    visible step: within 1 % of how far the 8 steps moved the weights."""
    plain = _graphed_pack(tmp_path, "eager", "plain")
    init = {k: v.clone() for k, v in plain[1].model.state_dict().items()}
    loss_plain, w_plain = _two_epochs(plain)
    loss_comp, w_comp = _two_epochs(_graphed_pack(tmp_path, "compiled", "comp"))
    for a, b in zip(loss_plain, loss_comp):
        assert abs(a - b) <= 1e-6 * abs(a), (loss_plain, loss_comp)
    moved = max(float((w_plain[k] - init[k]).abs().max()) for k in w_plain)
    apart = max(float((w_plain[k] - w_comp[k]).abs().max()) for k in w_plain)
    assert 0 < apart <= 0.01 * moved, (apart, moved)


def test_a_study_shares_one_inductor_cache_unless_the_user_set_one(tmp_path: Path, monkeypatch) -> None:
    """Every trial of a study points inductor's disk cache at the study folder, so the graphs
    one trial compiled load in the next; a cache folder the user chose stays."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir  # here: inductor's own reader

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv(SHARED_CACHE_VAR, raising=False)
    assert share_compile_cache(tmp_path / "a") == str(tmp_path / "a") == cache_dir()
    assert share_compile_cache(tmp_path / "b") == str(tmp_path / "b")  # the next study's trial
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert share_compile_cache(tmp_path / "c") == str(tmp_path / "mine") == cache_dir()
