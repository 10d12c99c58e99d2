"""Scoring: teacher-forced dev loss/accuracy and batched greedy decoding of test splits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from locattn.metrics import attn_loss_terms
from locattn.training.data import EncodedSplit


class DevScores(NamedTuple):
    """A run's teacher-forced dev scores after an epoch."""

    loss: float
    """Token-level mean NLL, ``<eos>`` included."""
    acc: float
    """Sequence accuracy (greedy when ``optim.dev_scoring`` says so; see ``Seq2SeqRun.dev_scores``)."""
    mix_gate: float | None = None
    """A Mix attender's mean gate over the same scored steps, from the same forward (None: not
    asked, or not a Mix model)."""


@torch.no_grad()
def teacher_forced(model: torch.nn.Module, split: EncodedSplit, batch_size: int, *,
                   mix_gate: bool = False) -> DevScores:
    """Token-level mean NLL incl. ``<eos>`` and teacher-forced sequence accuracy over ``split``;
    with ``mix_gate``, also the Mix gate's mean over the same steps (1 = location only), read
    from the same forward.

    A sequence counts as correct when the argmax at every target position (incl. <eos>)
    is the gold token: the reference code's dev accuracy.
    """
    model.eval()
    nll = torch.zeros((), dtype=torch.float64, device=split.device)
    gate = torch.zeros((), dtype=torch.float64, device=split.device)
    correct = torch.zeros((), dtype=torch.long, device=split.device)
    n_tokens = 0
    for index in split.sorted_batches(batch_size):
        b = split.batch(index)
        out = model(b.src, b.src_len, b.tgt_in, trace=mix_gate)
        logits = out.logits  # (B, T, V)
        mask = b.tgt_out != split.pad_id  # (B, T)
        nll += F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), b.tgt_out.reshape(-1),
            ignore_index=split.pad_id, reduction="sum",
        ).double()
        hit = (logits.argmax(-1) == b.tgt_out) | ~mask  # (B, T)
        correct += hit.all(dim=1).sum()
        if mix_gate:
            gate += out.trace.mix_gate[mask].double().sum()  # (B, T) -> the scored steps
        n_tokens += b.n_tokens
    return DevScores(float(nll) / n_tokens, int(correct) / len(split),
                     float(gate) / n_tokens if mix_gate else None)


@torch.no_grad()
def teacher_forced_matches(model: torch.nn.Module, split: EncodedSplit, batch_size: int) -> list[bool]:
    """Per example, in split order: whether every teacher-forced argmax (``<eos>`` included) is
    the gold token, i.e. the example :func:`teacher_forced` counts as correct."""
    model.eval()
    out = [False] * len(split)
    for index in split.sorted_batches(batch_size):
        b = split.batch(index)
        logits = model(b.src, b.src_len, b.tgt_in).logits  # (B, T, V)
        hit = ((logits.argmax(-1) == b.tgt_out) | (b.tgt_out == split.pad_id)).all(1)  # (B,)
        for i, h in zip(index, hit.tolist()):
            out[int(i)] = bool(h)
    return out


@dataclass
class Decoded:
    """Greedy outputs of a whole split, in split order."""

    pred: list[list[int]]  # token ids before the first <eos> (or up to the cap)
    ended: list[bool]  # whether <eos> was emitted
    attn_loss: float | None  # pooled attnLoss over scored steps (None: not asked / no gold)


@torch.no_grad()
def greedy_decode(
    model: torch.nn.Module,
    split: EncodedSplit,
    caps: np.ndarray,
    batch_size: int,
    *,
    want_attention: bool = False,
    attn_steps: str = "with_eos",
    attn_decode: str = "emitted",
) -> Decoded:
    """Decode every example greedily, batched by similar source length.

    ``caps`` (N,) is the per-example step cap from the task (never from the gold). With
    ``want_attention`` and gold attention in ``split``, also the attention loss
    (:func:`locattn.metrics.attn_loss`) pooled over every emitted step that has a gold index:
    with ``attn_steps="with_eos"`` (default, Dubois's metric code) the ``<eos>`` step included,
    with ``"before_eos"`` without it. With ``attn_decode="emitted"`` (default) the loss reads
    this decode, so steps after a predicted ``<eos>`` are never scored; with ``"gold_length"``
    a second decode per batch runs free for exactly each gold length and every gold step is
    scored (Dubois's evaluation).
    """
    model.eval()
    n = len(split)
    pred: list[list[int]] = [[] for _ in range(n)]
    ended = [False] * n
    want_attention = want_attention and split.attn is not None
    offset = int(getattr(model, "source_offset", 0))
    eos = split.eos_id
    sq_err, n_steps = 0.0, 0
    for index in split.sorted_batches(batch_size):
        b = split.batch(index)
        cap = torch.as_tensor(caps[index], dtype=torch.long, device=split.device)
        gold_length = want_attention and attn_decode == "gold_length"
        out = model.greedy(b.src, b.src_len, cap, trace=want_attention and not gold_length)
        tokens = out.tokens.tolist()
        lengths = out.lengths.tolist()
        for row, i in enumerate(index.tolist()):
            seq = tokens[row][: lengths[row]]
            if seq and seq[-1] == eos:
                ended[i] = True
                seq = seq[:-1]
            pred[i] = seq
        if want_attention:
            gold = split.attn[b.index].cpu()  # (B, T)
            if gold_length:  # every gold step, whatever the model predicts
                steps = (gold >= 0).sum(1).clamp_min(1).to(split.device)  # (B,)
                weights = model.greedy(b.src, b.src_len, steps, trace=True,
                                       stop_at_eos=False).trace.weights.cpu()  # (B, T, L)
                lengths = None
            else:
                weights, lengths = out.trace.weights.cpu(), out.lengths.cpu()  # (B, T', L), (B,)
            total, scored = attn_loss_terms(weights, gold, source_offset=offset,
                                            lengths=lengths, steps=attn_steps)
            sq_err += total
            n_steps += scored
    pooled = sq_err / n_steps if want_attention and n_steps else None
    return Decoded(pred=pred, ended=ended, attn_loss=pooled)


def split_caps(split: EncodedSplit, decode_cap: Callable[[int], int]) -> np.ndarray:
    """(N,) greedy step caps from the task's ``decode_cap(src_len)``."""
    return np.array([int(decode_cap(int(s))) for s in split.src_len_np], dtype=np.int64)
