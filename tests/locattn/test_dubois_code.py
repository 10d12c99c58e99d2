"""Dubois's location attender as his code computes it (``dubois_location_code``): its pieces, its
training schedule, and a real run that keeps the schedule across a checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from locattn import get_variant
from locattn.config import make_run_config
from locattn.models import build_model
from locattn.models.attention.dubois_code import (
    HARD_MIN_SIGMA,
    plateau,
    schedule_batches,
    soft_concrete_round,
)
from locattn.tasks import load_task
from locattn.train import train
from locattn.training import checkpoint as ckpt
from locattn.training.seq2seq import Seq2SeqRun

V, PAD, SOS, EOS = 14, 0, 1, 2
TINY = {
    "task.train_size": 64, "task.dev_size": 16, "task.test_size": 16,
    "task.train_lengths": (3, 5), "task.dev_lengths": (3, 5), "task.test_lengths": (7,),
    "optim.batch_size": 16, "optim.dev_batch_size": 16, "optim.epochs": 2, "num_threads": 1,
}


def model(total_batches: int = 100):
    torch.manual_seed(0)
    return build_model(get_variant("dubois_location_code"), V, pad_id=PAD, sos_id=SOS, eos_id=EOS,
                       total_batches=total_batches)


def batch():
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([7, 4, 6])
    src = torch.randint(3, V, (3, 7), generator=g)
    for i, n in enumerate(lengths):
        src[i, n:] = PAD
    tgt_in = torch.randint(3, V, (3, 5), generator=g)
    tgt_in[:, 0] = SOS
    return src, lengths, tgt_in


def test_plateau_snaps_the_plateaus_and_leaks_outside() -> None:
    x = torch.tensor([0.5, 0.05, 0.95, 1.3, -0.5], requires_grad=True)
    y = plateau(x, 0.0, 1.0)
    assert y[0].item() == pytest.approx(0.5)
    assert y[1].item() == 0.0 and y[2].item() == 1.0  # within 1e-4 of a plateau: exactly on it
    assert y[3].item() == pytest.approx(1.0 + 0.01 * 0.3) and y[4].item() == pytest.approx(-0.005)
    y.sum().backward()
    # the sigmoid's slope at the midpoint (t = ln(0.9999e4) / 0.4 = 23.03, height 1), and a
    # straight-through gradient (not 0) where the value was snapped
    assert x.grad[0].item() == pytest.approx(math.log(0.9999e4) / 0.4 / 4, rel=1e-4)
    assert 0 < x.grad[1].item() < 1e-2 and x.grad[3].item() == pytest.approx(0.01)
    step = plateau(torch.tensor([-2.0, 0.0, 0.5, 2.0]), -1.0, 1.0)
    assert step.tolist() == pytest.approx([-1.01, 0.0, 2 * torch.sigmoid(torch.tensor(0.5 * 11.0038)).item() - 1, 1.01],
                                          abs=1e-4)


def test_soft_concrete_rounds_up_with_the_fractional_probability() -> None:
    torch.manual_seed(0)
    x = torch.full((20000,), 2.3, requires_grad=True)
    y = soft_concrete_round(x, 0.5)
    assert ((y >= 2.0) & (y <= 3.0)).all()
    # P(relaxed sample > 1/2) is the Bernoulli probability at any temperature: 0.001 + 0.998 * 0.3
    assert (y > 2.5).float().mean().item() == pytest.approx(0.3004, abs=0.015)
    y.sum().backward()
    assert torch.isfinite(x.grad).all() and (x.grad != 1.0).any()  # x's own 1 plus the sample's


def test_schedule_sigma_mixing_and_rounding_follow_the_batch_count() -> None:
    assert schedule_batches(100) == (5, 10) and schedule_batches(1) == (1, 1)
    m = model(total_batches=100)
    src, lengths, tgt_in = batch()
    att = m.attender
    m.train()
    out = m(src, lengths, tgt_in, trace=True)  # training batch 1 of 100: preparation
    assert int(att.calls) == 1
    sigma = out.trace.sigma * lengths.unsqueeze(1)  # the attender reports sigma / n
    assert torch.allclose(sigma, torch.full_like(sigma, 5.0 + (0.82 - 5.0) * 1 / 5))
    assert torch.allclose(out.trace.mix_gate, torch.full_like(out.trace.mix_gate, 0.7))
    m.eval()  # evaluation in preparation: the annealed sigma, mixed by its confidence
    with torch.no_grad():
        ev = m(src, lengths, tgt_in, trace=True)
    assert int(att.calls) == 1
    s = 5.0 + (0.82 - 5.0) / 5
    assert torch.allclose(ev.trace.mix_gate, torch.full_like(ev.trace.mix_gate, 0.999 * math.exp(-s * s + HARD_MIN_SIGMA ** 2)))
    att.calls.fill_(5)  # preparation over: sigma from the weighter, at least 0.41 / 1.5
    with torch.no_grad():
        ev = m(src, lengths, tgt_in, trace=True)
    sigma = ev.trace.sigma * lengths.unsqueeze(1)
    assert (sigma >= HARD_MIN_SIGMA - 1e-6).all()
    expect = 0.999 * torch.exp(-sigma ** 2 + HARD_MIN_SIGMA ** 2)
    assert torch.allclose(ev.trace.mix_gate, expect, atol=1e-6)
    # evaluation rounds mu to a source position (then a leaky clamp that is the identity on [0, 1])
    pos = ev.trace.mu * (lengths.unsqueeze(1) - 1)
    assert torch.allclose(pos, pos.round(), atol=1e-5) and (ev.trace.mu >= 0).all() and (ev.trace.mu <= 1).all()
    w = ev.trace.weights
    assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-5)


def cfg(tmp: Path, **extra):
    return make_run_config(task="copy", variant="dubois_location_code", seed=0,
                           overrides={**TINY, "cache_dir": str(tmp / "cache"), **extra})


def test_a_run_counts_its_batches_and_a_checkpoint_keeps_the_count(tmp_path: Path) -> None:
    c = cfg(tmp_path)
    run = Seq2SeqRun(c, load_task(c.task, cache_dir=c.cache_dir), tmp_path / "r")
    per_epoch = math.ceil(len(run.train_split) / 16)
    assert int(run.model.attender.total_batches) == math.ceil(2 * len(run.train_split) / 16)
    run.train_epoch()
    run.epoch = 1
    assert int(run.model.attender.calls) == per_epoch  # the pass ran on a copy; the count came back
    again = Seq2SeqRun(c, load_task(c.task, cache_dir=c.cache_dir), tmp_path / "r2")
    again.model.load_state_dict(run.state()["model"])
    assert int(again.model.attender.calls) == per_epoch

    result = train(c, tmp_path / "out")
    assert len(result.history) == 2 and all(math.isfinite(h["train_loss"]) for h in result.history)
    state = ckpt.load_state(tmp_path / "out" / "checkpoint")
    assert int(state["model"]["attender.calls"]) == 2 * per_epoch


@pytest.mark.parametrize("extra, named", [({"train_path": "compiled"}, "train_path='compiled'"),
                                          ({"optim.train_step": "graphed"}, "train_step='graphed'")])
def test_its_python_schedule_refuses_the_compiled_and_graphed_steps(tmp_path: Path, extra, named) -> None:
    with pytest.raises(ValueError, match="dubois_code.*--train-path eager") as err:
        cfg(tmp_path, **extra)
    assert named in str(err.value)


def test_its_content_score_is_the_codes_parameter_free_scaled_dot() -> None:
    from locattn.models.attention.base import SourceMemory
    from locattn.models.attention.dubois_code import DuboisCodeAttender

    torch.manual_seed(0)
    att = DuboisCodeAttender(query_size=8, key_size=8, controller_size=4, total_batches=10).eval()
    assert {n.split(".")[0] for n, _ in att.named_parameters()} == {"resize", "weighter", "hidden0", "blocks", "sigma"}
    keys, query = torch.randn(2, 5, 8), torch.randn(2, 8)
    n = torch.tensor([5.0, 3.0])
    mask = torch.arange(5).unsqueeze(0) < n.unsqueeze(1)
    memory = SourceMemory(keys=keys, values=keys, mask=mask, lengths=n, stepsize=1 / (n - 1),
                          positions=torch.arange(5.0).unsqueeze(0) / (n - 1).unsqueeze(1) * mask,
                          score_bias=torch.zeros(2, 5).masked_fill(~mask, float("-inf")))
    out, _ = att(query, memory, att.prepare(memory), att.initial_state(memory), 0)
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(8)
    expect = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    assert torch.allclose(out.content_weights, expect, atol=1e-6)
    with pytest.raises(ValueError, match="key_size == query_size"):
        DuboisCodeAttender(query_size=8, key_size=6, controller_size=4, total_batches=10)
