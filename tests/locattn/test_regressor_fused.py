"""The fused regressor path (``train_path="fused"``, :class:`locattn.models.regressor.PoolKernel`)
against the op-by-op one: the same function, gradients at least as close to float64, the same
training to rounding, and a clear refusal where a model does not take the path.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from locattn.config import make_run_config
from locattn.models.regressor import FeedForwardAttention, MeanPooling, chunk_steps, init_paper_
from locattn.tasks import raffel

CLASSES = {"ffattn": FeedForwardAttention, "mean": MeanPooling}


def _model(variant: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = CLASSES[variant](input_channels=2, hidden_size=40)
    init_paper_(m)
    if variant == "ffattn":  # sharper attention than at initialisation: the softmax matters
        with torch.no_grad():
            m.energy.weight.mul_(4)
            m.energy.bias.fill_(0.3)
    return m


def _batch(lengths, op="add"):
    return raffel.sample_sequences(np.random.default_rng(1), np.asarray(lengths), op)


def _grads(model, x, lengths, y, *, fused: bool, weight_term: bool):
    model.fused = fused
    model.zero_grad()
    y_hat, a = model(x, lengths)
    loss = F.mse_loss(y_hat, y)
    if weight_term:  # a loss that reads the returned weights exercises their gradient too
        loss = loss + (a * a).sum()
    loss.backward()
    return y_hat.detach(), a.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("variant", ["ffattn", "mean"])
@pytest.mark.parametrize("weight_term", [False, True])
def test_fused_equals_eager_on_padded_batches(variant: str, weight_term: bool) -> None:
    # mixed lengths: padding inside the batch; 23 steps per chunk so chunks end mid-sequence
    x, lengths, y = _batch([40, 57, 13, 90, 90, 26])
    model = _model(variant)
    ref = copy.deepcopy(model).double()
    y64, a64, g64 = _grads(ref, x.double(), lengths, y.double(), fused=False, weight_term=weight_term)
    ye, ae, ge = _grads(model, x, lengths, y, fused=False, weight_term=weight_term)
    from locattn.models import regressor

    old = regressor.CHUNK_ELEMENTS["cpu"], regressor.FUSED_MIN_POSITIONS
    regressor.CHUNK_ELEMENTS["cpu"], regressor.FUSED_MIN_POSITIONS = 23 * 6 * 40, 1
    try:
        assert chunk_steps(6, 40, torch.device("cpu")) == 23
        yf, af, gf = _grads(model, x, lengths, y, fused=True, weight_term=weight_term)
    finally:
        regressor.CHUNK_ELEMENTS["cpu"], regressor.FUSED_MIN_POSITIONS = old
    torch.testing.assert_close(yf, ye, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(af, ae, rtol=1e-5, atol=1e-7)
    assert float(af[lengths.unsqueeze(1) <= torch.arange(90)].abs().max()) == 0.0  # padding: 0
    torch.testing.assert_close(af.sum(-1), torch.ones(6))
    for name, g in g64.items():
        scale = float(g.abs().max())
        err_fused = float((gf[name].double() - g).abs().max()) / scale
        err_eager = float((ge[name].double() - g).abs().max()) / scale
        assert err_fused < 1e-5, (name, err_fused)
        assert err_fused <= max(err_eager, 1e-6) * 4, (name, err_fused, err_eager)


def test_fused_gradients_are_closer_to_float64_on_long_sequences() -> None:
    # 40 x 3000 steps: eager sums W_xh's gradient over 120,000 rows at once and drifts
    x, lengths, y = _batch([3000] * 40)
    model = _model("ffattn")
    ref = copy.deepcopy(model).double()
    _, _, g64 = _grads(ref, x.double(), lengths, y.double(), fused=False, weight_term=False)
    _, _, ge = _grads(model, x, lengths, y, fused=False, weight_term=False)
    _, _, gf = _grads(model, x, lengths, y, fused=True, weight_term=False)
    w = "inp.weight"
    scale = float(g64[w].abs().max())
    err_eager = float((ge[w].double() - g64[w]).abs().max()) / scale
    err_fused = float((gf[w].double() - g64[w]).abs().max()) / scale
    assert err_fused < 1e-5 and err_fused < err_eager, (err_fused, err_eager)


def test_short_batches_pool_op_by_op_on_the_fused_path(monkeypatch) -> None:
    from locattn.models import regressor

    calls = []
    monkeypatch.setattr(regressor.PoolKernel, "apply", lambda *a: calls.append(a[0].shape) or
                        regressor.PoolKernel.forward(type("Ctx", (), {"save_for_backward": lambda *t: None})(), *a))
    model = _model("ffattn")
    model.fused = True
    with torch.no_grad():
        model(*_batch([90] * 8)[:2])  # 720 positions: op by op
        assert calls == []
        model(*_batch([regressor.FUSED_MIN_POSITIONS // 4] * 4)[:2])
    assert calls == [(4, regressor.FUSED_MIN_POSITIONS // 4, 2)]


def test_gradcheck_float64() -> None:
    from locattn.models.regressor import PoolKernel

    torch.manual_seed(3)
    x = torch.randn(3, 11, 2, dtype=torch.float64)
    mask = torch.arange(11).unsqueeze(0) < torch.tensor([[11], [7], [4]])
    w = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    we = torch.randn(5, dtype=torch.float64, requires_grad=True)
    be = torch.randn((), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *p: PoolKernel.apply(x, mask, *p, 4), (w, b, we, be))
    assert torch.autograd.gradcheck(lambda *p: PoolKernel.apply(x, mask, *p, None, None, 3), (w, b))


def _run_cfg(train_path: str, **over):
    base = {"task.t0": 20, "optim.batch_size": 50, "optim.updates_per_epoch": 30,
            "optim.epochs": 3, "optim.lr": 1e-2, "task.dev_size": 30, "task.test_size": 30,
            "num_threads": 1, "train_path": train_path}
    return make_run_config(task="raffel_mul", variant="ffattn", seed=0, overrides={**base, **over})


def test_a_fused_run_trains_like_an_eager_one(tmp_path, monkeypatch) -> None:
    from locattn.models import regressor
    from locattn.train import train

    monkeypatch.setattr(regressor, "FUSED_MIN_POSITIONS", 1)  # these batches are short: fuse them anyway
    calls, apply = [], regressor.PoolKernel.apply
    monkeypatch.setattr(regressor.PoolKernel, "apply", lambda *a: calls.append(1) or apply(*a))

    runs = {}
    for p in ("eager", "fused"):
        before = len(calls)
        runs[p] = train(_run_cfg(p), tmp_path / p)
        assert (len(calls) > before) == (p == "fused"), p  # 90 updates + scoring, on the kernel
    e, f = runs["eager"], runs["fused"]
    assert e.run_identity == f.run_identity  # operational: the same run
    assert json.loads((tmp_path / "fused" / "config.json").read_text())["train_path"] == "fused"
    assert len(e.history) == len(f.history) == 3
    for he, hf in zip(e.history, f.history):
        assert hf["train_loss"] == pytest.approx(he["train_loss"], rel=1e-4)
        assert hf["test_loss"] == pytest.approx(he["test_loss"], rel=1e-3)


@pytest.mark.parametrize("task, variant, path, valid", [
    ("raffel_add", "ffattn", "compiled", "eager, fused"),
    ("copy", "onestep", "fused", "eager, compiled"),
])
def test_a_path_the_model_does_not_take_is_refused(task, variant, path, valid) -> None:
    with pytest.raises(ValueError, match=rf"train_path='{path}' does not apply to a \w+ model "
                                         rf"\(variant '{variant}'\): valid are {valid}"):
        make_run_config(task=task, variant=variant, overrides={"train_path": path})
    with pytest.raises(ValueError, match=r"train_path='jit'; valid: \['eager', 'compiled', 'fused'\]"):
        make_run_config(task=task, variant=variant, overrides={"train_path": "jit"})


def test_study_launch_refuses_the_wrong_path_before_starting(tmp_path, capsys) -> None:
    from study.cli import main

    spec = "ablations/raffel_variable.yaml"
    code = main(["launch", spec, "--profile", "smoke", "--root", str(tmp_path), "--dry-run",
                 "--train-path", "compiled"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--train-path compiled" in err and "regressor model, which takes --train-path eager or fused" in err
    assert not any(tmp_path.iterdir())  # nothing created
    assert main(["launch", spec, "--profile", "smoke", "--root", str(tmp_path), "--dry-run",
                 "--train-path", "fused"]) == 0, capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_on_cuda_matches_cpu(monkeypatch) -> None:
    from locattn.models import regressor

    monkeypatch.setattr(regressor, "FUSED_MIN_POSITIONS", 1)
    x, lengths, y = _batch([500, 733, 120, 900])
    model = _model("ffattn")
    _, _, g_cpu = _grads(model, x, lengths, y, fused=True, weight_term=True)
    cuda = copy.deepcopy(model).cuda()
    _, _, g_gpu = _grads(cuda, x.cuda(), lengths.cuda(), y.cuda(), fused=True, weight_term=True)
    for name, g in g_cpu.items():
        torch.testing.assert_close(g_gpu[name].cpu(), g, rtol=1e-4, atol=1e-6)

