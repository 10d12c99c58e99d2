"""The compiled step saved to disk (locattn/training/aot_step.py): a second process's SavedStep
loads the file instead of tracing, computes the same loss and gradients to the bit, and a
corrupted file or a changed switch costs a compile, never a wrong number."""

from __future__ import annotations

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


def test_off_by_default_uses_plain_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(aot_step.ENV_SWITCH, raising=False)
    assert not aot_step.enabled()  # off unless asked for
    model, x = Toy(), torch.randn(3, 6)
    got = _grads(SavedStep(loss, dynamic=False, fullgraph=True), model, x)
    torch.testing.assert_close(got, _grads(loss, model, x))
    assert not (tmp_path / aot_step.STEP_DIR).exists()


def test_a_bad_switch_value_is_named(monkeypatch):
    monkeypatch.setenv(aot_step.ENV_SWITCH, "yes")
    with pytest.raises(ValueError, match=r"LOCATTN_SAVED_STEP='yes': expected 0 .* or 1"):
        aot_step.enabled()
