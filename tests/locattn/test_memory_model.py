"""The memory model of a graphed pack (locattn.training.memory) against what a real pack holds
and what a real step allocates, on the CPU: the state it keeps (counted tensor by tensor) and a
step's peak above it (torch's MemTracker, which follows every tensor a step allocates). The
CUDA caching allocator rounds allocations to 512 bytes and keeps a CUDA context, which the
model leaves to its headroom: unmeasured here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from locattn.config import make_run_config
from locattn.tasks import load_task
from locattn.training.graphed import GraphedStep
from locattn.training.memory import HEADROOM, STATE_COPIES, run_pack_memory
from locattn.training.seq2seq import Seq2SeqRun

SMALL = {"task.train_size": 64, "task.dev_size": 8, "task.test_size": 8, "optim.batch_size": 16,
         "optim.train_step": "graphed", "num_threads": 1}


def _runs(tmp: Path, variant: str, K: int) -> list[Seq2SeqRun]:
    cfg = make_run_config(task="copy", variant=variant, seed=0, overrides={**SMALL, "cache_dir": str(tmp / "c")})
    data = load_task(cfg.task, cache_dir=cfg.cache_dir)
    return [Seq2SeqRun(cfg, data, tmp / f"r{k}") for k in range(K)]


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_the_state_is_eight_copies_of_the_weights_per_replica(tmp_path: Path) -> None:
    runs = _runs(tmp_path, "onestep", 2)
    step = GraphedStep(runs)
    step.idx.zero_()
    step._body()  # one step: the stacked gradients and moments
    step.store()  # each run's own weights and AdamW moments, as after an epoch
    for r in runs:  # what a run holds after its first dev score: its best model
        r.best_state = {k: v.detach().clone() for k, v in r.model.state_dict().items()}
    params = sum(p.numel() for p in runs[0].model.parameters())
    held = sum(_bytes(r.model.parameters()) + _bytes(v for s in r.optimizer.state.values()
                                                     for k, v in s.items() if k != "step")
               + _bytes(r.best_state.values()) for r in runs)
    held += _bytes(step.stacked) + _bytes(p.grad for p in step.stacked) + _bytes(step.opt.exp_avg) \
        + _bytes(step.opt.exp_avg_sq)
    mem = run_pack_memory(runs[0].cfg, runs[0].data)
    assert mem.params == params
    assert held == 2 * mem.state_bytes == 2 * STATE_COPIES * 4 * params
    splits = [r.train_split for r in runs] + [r.dev_split for r in runs]
    assert 2 * mem.data_bytes == _bytes(t for s in splits for t in (s.src, s.src_len, s.tgt))
    assert mem.fixed == _bytes((step.src_all, step.len_all, step.tgt_all))


def test_a_steps_peak_is_what_the_model_says(tmp_path: Path) -> None:
    """The model's step bytes against MemTracker's peak of a real step (K = 2): within 10 %, and
    never below it by more than 2 %."""
    from torch.distributed._tools.mem_tracker import MemTracker

    runs = _runs(tmp_path, "onestep", 2)
    mem = run_pack_memory(runs[0].cfg, runs[0].data)
    step = GraphedStep(runs)
    step.idx.zero_()
    step._body()  # the first step creates the gradients; the second is the steady state
    tracker = MemTracker()
    with tracker:
        step._body()
    peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    measured = peak["Total"] - sum(v for k, v in peak.items() if k != "Total" and k.value in ("Parameter", "Buffer"))
    predicted = 2 * mem.step_bytes
    assert 0.98 * measured <= predicted <= 1.10 * measured, (predicted, measured)


def test_the_largest_pack_that_fits_a_device(tmp_path: Path) -> None:
    runs = _runs(tmp_path, "onestep", 1)
    mem = run_pack_memory(runs[0].cfg, runs[0].data)
    device = 1 << 30
    k = mem.largest_k(device)
    assert mem.bytes(k) <= device * (1 - HEADROOM) < mem.bytes(k + 1)
    assert mem.largest_k(device, share=0.25) == int((device * 0.25 * (1 - HEADROOM) - mem.fixed) // mem.per_replica)
    assert mem.largest_k(1) == 1  # a lone replica is still tried
    why = mem.why(4 * k, device)
    assert f"the largest K that fits is {k:,}" in why and "a pack of" in why
    with pytest.raises(ValueError, match="seq2seq"):
        run_pack_memory(make_run_config(task="raffel_add", variant="ffattn"), None)
