"""Device memory of a graphed pack of K replicas of one cell, from its config alone.

A graphed pack (:class:`~locattn.training.graphed.GraphedStep`) holds, per replica, in float32:

* its solo model (the run's own parameters), its solo AdamW moments (2 x) and its best model
  (a clone of the state dict), which :class:`~locattn.training.seq2seq.Seq2SeqRun` keeps on
  the device between epochs;
* its slice of the stacked parameters, their gradients and the stacked AdamW moments (2 x);

that is :data:`STATE_COPIES` = 8 copies of the parameters; while a CUDA graph is recorded, the
warm-up step's saved copies of the stacked parameters and moments (:data:`CAPTURE_COPIES` = 3
more); each run's own training and dev splits (int64 tokens and lengths); and, during a training
step, the tensors autograd saves for the backward pass plus the step's transients (logits, their
gradient, the gradients of the activations). The saved tensors are counted exactly by running
the packed forward and loss on the ``meta`` device (shapes only, no data, no compute) at the
training split's longest source and target and the batch size, with
``torch.autograd.graph.saved_tensors_hooks``; the transients are :data:`TRANSIENT_FACTOR` times
the saved tensors (fitted on a CPU against torch's ``MemTracker`` peak of real steps:
``benchmarks/bench_gpu_memory.py``, ``test_memory_model.py``). What grows
with K is linear in K (every replica has the same shapes), so

    bytes(K) = fixed + K x per_replica

with ``fixed`` the pack's padded copy of the training split (and its all-padding row). The CUDA context and
the caching allocator's rounding are not in the model: :data:`HEADROOM` of the device is left
free for them, as :func:`~locattn.training.graphed.pick_pack_size` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from locattn.models import build_model
from locattn.training.epoch import ParamPack
from locattn.training.graphed import step_nll

STATE_COPIES = 8
"""Float32 copies of a replica's parameters a graphed pack keeps on the device (see above)."""
PROBED_COPIES = 4
"""Of those, the copies a pack of one run repeated holds per replica (the stacked slice, its
gradient and moments): what :func:`~locattn.training.graphed.measure_bytes_per_replica`'s probe
sees grow; the solo model, its moments and best model are the one run's, counted once."""
CAPTURE_COPIES = 3
"""More copies while the CUDA graph is recorded: the stacked parameters and both moments, saved
before the warm-up step and put back after it (:meth:`GraphedStep._graph`)."""
TRANSIENT_FACTOR = 1.4
"""A step's peak above its state, over the bytes autograd saves for its backward. Measured on a
CPU (``python benchmarks/bench_gpu_memory.py``: torch's ``MemTracker`` peak of one graphed step,
K = 1 and 3): 1.31 to 1.36 over Copy with OneStepAttn, content attention and Mix OneStepAttn PR,
and Lookup, and 1.34 for Copy at batch 64 with hidden size 256 (``--set optim.batch_size=64
--set model.hidden_size=256``); rounded up, so that the model errs towards smaller packs."""
HEADROOM = 0.1
"""Fraction of the device left free for the CUDA context, the allocator's rounding, decoding."""


@dataclass(frozen=True)
class PackMemory:
    """The memory model of one cell's graphed pack: ``fixed + K * per_replica`` bytes."""

    params: int
    """Parameters of one replica."""
    state_bytes: int
    """Per replica: :data:`STATE_COPIES` float32 copies of its parameters."""
    capture_bytes: int
    """Per replica: :data:`CAPTURE_COPIES` float32 copies of its parameters (graph recording)."""
    data_bytes: int
    """Per replica: its run's training and dev splits on the device."""
    saved_bytes: int
    """Per replica: what autograd saves for one training step's backward (meta-device count)."""
    step_bytes: int
    """Per replica: the step's peak above the state (saved x :data:`TRANSIENT_FACTOR`)."""
    fixed: int
    """Bytes that do not grow with K: the pack's padded copy of the training split."""
    shape: tuple[int, int, int]
    """(batch size, longest source, longest target) of one replica's training batch."""

    @property
    def per_replica(self) -> int:
        return self.state_bytes + self.capture_bytes + self.data_bytes + self.step_bytes

    def bytes(self, K: int) -> int:
        """Predicted peak bytes of a training step of a pack of ``K`` replicas."""
        return self.fixed + K * self.per_replica

    def largest_k(self, device_bytes: int, *, share: float = 1.0, headroom: float = HEADROOM) -> int:
        """The largest K whose :meth:`bytes` fit ``share`` of ``device_bytes`` less the
        headroom; at least 1 (a lone replica is tried even where the model says it may not fit)."""
        usable = device_bytes * share * (1.0 - headroom) - self.fixed
        return max(1, int(usable // self.per_replica))

    def why(self, K: int, device_bytes: int, *, share: float = 1.0) -> str:
        """One line: what a pack of ``K`` needs against the device, and the largest K that fits."""
        fit = self.largest_k(device_bytes, share=share)
        of = f"{share:g} of " if share < 1.0 else ""
        return (f"a pack of {K:,} needs ~{_gib(self.bytes(K))} by the memory model "
                f"({_mib(self.per_replica)} a replica: {_mib(self.state_bytes + self.capture_bytes)} of weights, "
                f"grads and AdamW states, {_mib(self.data_bytes)} of data, {_mib(self.step_bytes)} of a "
                f"step's activations at batch {self.shape[0]} x "
                f"{self.shape[1]} x {self.shape[2]}), against {of}{_gib(device_bytes)} less "
                f"{HEADROOM:.0%} headroom: the largest K that fits is {fit:,}")


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**30:.2g} GiB"


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def saved_tensor_bytes(model: torch.nn.Module, src: torch.Tensor, src_len: torch.Tensor,
                       tgt_in: torch.Tensor, tgt_out: torch.Tensor, pad: int, K: int) -> int:
    """Bytes autograd saves for the backward of the graphed step's forward and loss, counted once
    per storage, parameters (state, counted apart) left out. Runs on any device; on ``meta`` it
    costs no memory and no compute."""
    own = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s._cdata not in own:
            seen[s._cdata] = max(seen.get(s._cdata, 0), s.nbytes())
        return t

    keep = (torch.empty(model.dropout_shape(src), device=src.device)  # the dropout multiplier's shape
            if getattr(model, "dropout_p", 0) > 0 else None)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        nll = step_nll(model, src, src_len, tgt_in, tgt_out, keep, pad, K)
        n_tok = (tgt_out != pad).view(K, -1).sum(1)
        loss = nll.sum(1) / n_tok
    del loss
    return sum(seen.values())


def pack_memory(cfg: Any, vocab_size: int, ids: dict[str, int], shape: tuple[int, int, int],
                n_train: int, data_bytes: int) -> PackMemory:
    """The :class:`PackMemory` of ``cfg``'s cell (a resolved seq2seq ``RunConfig``) for a
    training split of ``n_train`` examples, batch ``shape`` = (batch size, longest source,
    longest target), a vocabulary of ``vocab_size``, ``ids`` (pad_id, sos_id, eos_id) and
    ``data_bytes`` (one run's splits on the device: :func:`split_bytes`).

    Builds the model and a pack of two replicas on the ``meta`` device (well under a second);
    raises ``ValueError`` for a model kind other than seq2seq."""
    if cfg.model.kind != "seq2seq":
        raise ValueError(f"the pack memory model covers seq2seq models, got model.kind={cfg.model.kind!r}")
    B, S, T = shape
    with torch.device("meta"):
        solo = build_model(cfg.model, vocab_size, **ids, total_batches=1)
    params = sum(p.numel() for p in solo.parameters())
    K = 2  # a pack of two: anything not replicated per replica is then counted for both
    pack = ParamPack([SimpleNamespace(model=solo, cfg=cfg)] * K)
    model = pack.model.train()
    model._check = lambda *a, **k: None
    src = torch.zeros(K * B, S, dtype=torch.long, device="meta")
    src_len = torch.full((K * B,), S, dtype=torch.long, device="meta")
    tgt = torch.zeros(K * B, T, dtype=torch.long, device="meta")
    per_saved = math.ceil(saved_tensor_bytes(model, src, src_len, F.pad(tgt[:, 1:], (1, 0)), tgt, ids["pad_id"], K) / K)
    fixed = (n_train + 1) * (S + T + 1) * 8  # int64 sources, targets and lengths on the device
    return PackMemory(params=params, state_bytes=STATE_COPIES * 4 * params,
                      capture_bytes=CAPTURE_COPIES * 4 * params, data_bytes=data_bytes, saved_bytes=per_saved,
                      step_bytes=int(per_saved * TRANSIENT_FACTOR), fixed=fixed, shape=(B, S, T))


def run_pack_memory(cfg: Any, data: Any) -> PackMemory:
    """:func:`pack_memory` of ``cfg`` on its task's data (a ``TaskData``): the training split's
    longest source and target (plus the end-of-sequence token a target gets) and its size."""
    if cfg.model.kind != "seq2seq":
        raise ValueError(f"the pack memory model covers seq2seq models, got model.kind={cfg.model.kind!r}")
    vocab = data.vocab
    ids = dict(pad_id=vocab.pad_id, sos_id=vocab.sos_id, eos_id=vocab.eos_id)
    train = data.splits["train"]
    S = max(len(e.src) for e in train)
    T = max(len(e.tgt) for e in train) + 1
    data_bytes = split_bytes(train) + split_bytes(data.splits["dev"])
    return pack_memory(cfg, len(vocab), ids, (cfg.optim.batch_size, S, T), len(train), data_bytes)


def unprobed_bytes(mem: PackMemory) -> int:
    """Per replica, what :func:`~locattn.training.graphed.measure_bytes_per_replica`'s probe
    (one run repeated) cannot see grow: each further run's own weights, AdamW moments and best
    model, its train and dev splits, and the copies a graph's recording saves."""
    return (STATE_COPIES - PROBED_COPIES + CAPTURE_COPIES) * 4 * mem.params + mem.data_bytes


def split_bytes(examples: Any) -> int:
    """Device bytes of a split as :class:`~locattn.training.data.EncodedSplit` holds it: int64
    sources and targets (with ``<eos>``) padded to their longest, and the source lengths."""
    n = len(examples)
    if not n:
        return 0
    S = max(len(e.src) for e in examples)
    T = max(len(e.tgt) for e in examples) + 1
    return n * (S + T + 1) * 8


__all__ = ["CAPTURE_COPIES", "HEADROOM", "PROBED_COPIES", "PackMemory", "STATE_COPIES", "split_bytes", "unprobed_bytes", "TRANSIENT_FACTOR", "pack_memory", "run_pack_memory",
           "saved_tensor_bytes"]
