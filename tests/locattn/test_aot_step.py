"""The compiled step saved to disk (locattn/training/aot_step.py): a second process's SavedStep
loads the file instead of tracing, computes the same loss and gradients to the bit, and a
corrupted file or a changed switch costs a compile, never a wrong number; compiles after the
same seed of Python's ``random`` get their own graphs."""

from __future__ import annotations

import random
import warnings

import pytest
import torch

from locattn.training import aot_step
from locattn.training.aot_step import SavedStep, step_key


class Toy(torch.nn.Module):
    def __init__(self, squash: bool = True) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 5)
        self.squash = squash

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return torch.tanh(y) if self.squash else y


def loss(model: torch.nn.Module, x: torch.Tensor, scale: float) -> torch.Tensor:
    return model(x).pow(2).sum() * scale


class Cube(torch.autograd.Function):
    """x ** 3 with a hand-written backward: a custom Function in the graph, as the model's
    LeakyReLUFromOutput is, which AOTAutograd's cache cannot key."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x * x * x

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return 3 * x * x * grad


class CubeToy(Toy):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = Cube.apply(self.lin(x))
        return torch.tanh(y) if self.squash else y


def _grads(fn, model, x):
    model.zero_grad()
    out = fn(model, x, 0.5)
    out.backward()
    return out.detach(), model.lin.weight.grad.clone()


@pytest.mark.skipif(not hasattr(torch._dynamo, "aot_compile"), reason="this torch has no aot_compile")
def test_saved_step_loads_and_equals(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(aot_step.ENV_SWITCH, "1")
    torch.manual_seed(0)
    model, x = Toy(), torch.randn(4, 6)
    want = _grads(loss, model, x)
    first = _grads(SavedStep(loss, dynamic=False, fullgraph=True), model, x)
    files = list((tmp_path / aot_step.STEP_DIR).glob("*.bin"))
    assert len(files) == 1
    before = aot_step.loads
    second = _grads(SavedStep(loss, dynamic=False, fullgraph=True), model, x)  # a new process's view
    assert aot_step.loads == before + 1
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    torch.testing.assert_close(first, want)  # inductor's rounding, not eager's
    # a switch that changes the graph changes the key, so it never loads the other graph
    assert step_key(loss, (Toy(squash=False), x, 0.5), {}) != step_key(loss, (model, x, 0.5), {})
    # a corrupted file: a warning, a fresh compile, the same numbers
    files[0].write_bytes(b"not a saved step")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        third = _grads(SavedStep(loss, dynamic=False, fullgraph=True), model, x)
    assert any("did not load" in str(w.message) for w in caught)
    assert torch.equal(first[0], third[0]) and torch.equal(first[1], third[1])
    assert files[0].read_bytes() != b"not a saved step"  # replaced by the fresh compile


@pytest.mark.skipif(not hasattr(torch._dynamo, "aot_compile"), reason="this torch has no aot_compile")
def test_compiles_after_the_same_seed_get_their_own_graphs(tmp_path, monkeypatch):
    """A graph with a custom autograd.Function has no AOTAutograd cache key; aot_compile keys it
    with ``str(random.random())``, which a seeded ``random`` makes the same for every compile:
    a Ray trial (seed 0, sources of length 3) got the graphs of an earlier process's length 4 and
    failed inductor's size assertion. Here, in one process: a second batch shape must not get the
    first one's graph (a size assertion), nor a changed switch at the same shape its graph
    (silently another function); and a compile leaves the caller's ``random`` where it was."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(aot_step.ENV_SWITCH, raising=False)  # on by default
    torch.manual_seed(0)
    model, step = CubeToy(), SavedStep(loss, dynamic=False, fullgraph=True)
    plain = CubeToy(squash=False)
    plain.load_state_dict(model.state_dict())
    draws = []
    for m, x in ((model, torch.randn(4, 6)), (model, torch.randn(3, 6)), (plain, torch.randn(3, 6))):
        random.seed(0)  # as every run seeds it (seed_everything) before its first step
        got = _grads(step, m, x)
        draws.append(random.random())
        torch.testing.assert_close(got, _grads(loss, m, x))
    assert draws == [random.Random(0).random()] * 3  # the compiles drew nothing of the caller's
    assert len(step.steps) == 3 and all(step.steps.values())  # three compiled steps, no fallback
    assert len(list((tmp_path / aot_step.STEP_DIR).glob("*.bin"))) == 3


def test_off_uses_plain_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(aot_step.ENV_SWITCH, raising=False)
    assert aot_step.enabled() == hasattr(torch._dynamo, "aot_compile")  # on unless turned off
    monkeypatch.setenv(aot_step.ENV_SWITCH, "0")
    assert not aot_step.enabled()
    model, x = Toy(), torch.randn(3, 6)
    got = _grads(SavedStep(loss, dynamic=False, fullgraph=True), model, x)
    torch.testing.assert_close(got, _grads(loss, model, x))
    assert not (tmp_path / aot_step.STEP_DIR).exists()


def test_a_bad_switch_value_is_named(monkeypatch):
    monkeypatch.setenv(aot_step.ENV_SWITCH, "yes")
    with pytest.raises(ValueError, match=r"LOCATTN_SAVED_STEP='yes': expected 0 \(off\) or 1 "
                                         r"\(save the compiled step, the default\)"):
        aot_step.enabled()
