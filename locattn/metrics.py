"""Evaluation metrics: seqAcc, seqAccBE and attnLoss (Dubois et al. 2020, sec. 6.2), edit
distance (Ray Chowdhury & Caragea 2023, Table 9) and Raffel & Ellis's accuracy. Pure functions on
tensors, arrays or lists.

Token sequences are (B, T) integer tensors/arrays (or lists of lists) that may hold padding:
a sequence ends at its first ``eos_id`` (and, if ``pad_id`` is given, at its first pad).
Gold targets are the :class:`locattn.tasks.Batch` ``tgt`` tensors (ids, <eos>, pad).
All accuracies are fractions in [0, 1].
"""

from __future__ import annotations

import math
import typing
from typing import Any, Sequence

import numpy as np
import torch
from rapidfuzz.distance import Levenshtein as _rf_levenshtein

from locattn.metric_names import AttnLossDecode, AttnLossSteps  # registered there, without torch

__all__ = [
    "accuracy_by_length",
    "AttnLossDecode",
    "AttnLossSteps",
    "attn_loss",
    "attn_loss_terms",
    "edit_distance",
    "epochs_to_100",
    "levenshtein",
    "raffel_accuracy",
    "seq_acc",
    "seq_acc_be",
    "seq_correct",
    "seq_correct_be",
    "sequence_lengths",
]


def _as_2d(x: Any, fill: int) -> np.ndarray:
    """(B,T) int64 array from a tensor, array or list of (ragged) lists."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().astype(np.int64).reshape(x.shape[0], -1)
    if isinstance(x, np.ndarray):
        return x.astype(np.int64).reshape(x.shape[0], -1)
    rows = [list(r) for r in x]
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def sequence_lengths(tokens: Any, eos_id: int, pad_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Length before the end marker and whether an <eos> was emitted.

    tokens (B,T) -> (lengths (B,) int: index of the first eos (or pad), else T;
    has_eos (B,) bool: an eos occurs before any pad).
    """
    a = _as_2d(tokens, eos_id if pad_id is None else pad_id)
    b, t = a.shape
    end = a == eos_id  # (B,T)
    if pad_id is not None:
        end |= a == pad_id
    first = np.where(end.any(axis=1), end.argmax(axis=1), t)  # (B,)
    has_eos = np.zeros(b, dtype=bool)
    rows = first < t
    has_eos[rows] = a[rows, first[rows]] == eos_id
    return first, has_eos


def _aligned(pred: Any, gold: Any, eos_id: int, pad_id: int | None):
    p = _as_2d(pred, eos_id)
    g = _as_2d(gold, eos_id)
    if p.shape[0] != g.shape[0]:
        raise ValueError(f"pred has {p.shape[0]} rows but gold has {g.shape[0]}")
    width = max(p.shape[1], g.shape[1])
    fill = eos_id if pad_id is None else pad_id
    p = np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=fill)
    g = np.pad(g, ((0, 0), (0, width - g.shape[1])), constant_values=fill)
    return p, g


def seq_correct(pred: Any, gold: Any, eos_id: int, pad_id: int | None = None) -> np.ndarray:
    """Per-example seqAcc: pred (B,T1), gold (B,T2) -> (B,) bool.

    Correct when the prediction emits <eos> and the tokens before its first <eos> equal the
    gold tokens before the gold <eos> (length included). A prediction that never emits <eos>
    is wrong.
    """
    p_len, p_eos = sequence_lengths(pred, eos_id, pad_id)
    g_len, _ = sequence_lengths(gold, eos_id, pad_id)
    p, g = _aligned(pred, gold, eos_id, pad_id)
    pos = np.arange(p.shape[1])[None, :]  # (1,T)
    inside = pos < g_len[:, None]  # (B,T)
    same = ((p == g) | ~inside).all(axis=1)
    return p_eos & (p_len == g_len) & same


def seq_correct_be(pred: Any, gold: Any, eos_id: int, pad_id: int | None = None) -> np.ndarray:
    """Per-example seqAccBE (Dubois et al. 2020, sec. 6.2): pred (B,T1), gold (B,T2) -> (B,) bool.

    With k the length of the prediction before its first <eos> (its full length if it has
    none), correct when k <= gold length and pred[:k] == gold[:k]: the output is right up to
    where the model stopped. Stopping too early is forgiven; a wrong token or running past
    the gold length is not. (An immediate <eos>, k = 0, counts as correct.)
    """
    p_len, _ = sequence_lengths(pred, eos_id, pad_id)
    g_len, _ = sequence_lengths(gold, eos_id, pad_id)
    p, g = _aligned(pred, gold, eos_id, pad_id)
    pos = np.arange(p.shape[1])[None, :]
    inside = pos < p_len[:, None]
    same = ((p == g) | ~inside).all(axis=1)
    return (p_len <= g_len) & same


def seq_acc(pred: Any, gold: Any, eos_id: int, pad_id: int | None = None) -> float:
    """Sequence accuracy: fraction of ``seq_correct``. pred (B,T1), gold (B,T2)."""
    c = seq_correct(pred, gold, eos_id, pad_id)
    return float(c.mean()) if c.size else float("nan")


def seq_acc_be(pred: Any, gold: Any, eos_id: int, pad_id: int | None = None) -> float:
    """Sequence accuracy before <eos>: fraction of ``seq_correct_be``. pred (B,T1), gold (B,T2)."""
    c = seq_correct_be(pred, gold, eos_id, pad_id)
    return float(c.mean()) if c.size else float("nan")


def attn_loss_terms(weights: Any, gold: Any, *, source_offset: int = 0,
                    lengths: Any | None = None,
                    steps: AttnLossSteps = "with_eos") -> tuple[float, int]:
    """(sum of squared errors, number of scored steps) of :func:`attn_loss`, for pooling the
    loss over batches: the pooled loss is the sum of the sums over the sum of the counts."""
    if steps not in typing.get_args(AttnLossSteps):
        raise ValueError(f"attn_loss steps={steps!r}; valid: {list(typing.get_args(AttnLossSteps))}")
    w = torch.as_tensor(weights, dtype=torch.float64)
    g = torch.as_tensor(gold, dtype=torch.long)
    if steps == "before_eos":  # the last gold index of each row is its <eos> step
        has = g >= 0  # (B,T')
        last = has.shape[1] - 1 - torch.flip(has, dims=[1]).to(torch.int64).argmax(dim=1)  # (B,)
        g = g.clone()
        rows = torch.nonzero(has.any(dim=1)).flatten()
        g[rows, last[rows]] = -1
    t = min(w.shape[1], g.shape[1])
    w, g = w[:, :t], g[:, :t]  # (B,T,L), (B,T)
    index = torch.arange(w.shape[2], dtype=torch.float64) - source_offset  # (L,)
    expected = (w * index).sum(dim=2)  # (B,T)
    mask = g >= 0  # (B,T)
    if lengths is not None:
        n = torch.as_tensor(lengths, dtype=torch.long).reshape(-1, 1)
        mask &= torch.arange(t).reshape(1, -1) < n
    err = (expected - g.to(torch.float64))[mask]
    return float((err**2).sum()), int(mask.sum())


def attn_loss(weights: Any, gold: Any, *, source_offset: int = 0,
              lengths: Any | None = None, steps: AttnLossSteps = "with_eos") -> float:
    """Attention loss (Dubois et al. 2020, sec. 6.2): MSE between the expected attended source
    index and the gold index, pooled over all scored steps.

    weights (B,T,L): attention over the model's attention axis, where axis position l holds
        source token l - source_offset (source_offset = 1 when a START vector precedes the
        source; START then counts as index -1 and END as index S).
    gold (B,T') long: gold source-token index per target step; negative = no gold (padding,
        undefined steps). Only the first min(T, T') steps are compared.
    lengths (B,) optional: score only steps t < lengths[b], e.g. the steps the decoder emitted.
        Default: every step with a gold index.
    steps: ``with_eos`` (default, as Dubois's metric code) scores the ``<eos>`` step's gold
        index too; ``before_eos`` leaves out each row's last gold step (its ``<eos>`` step).
    Returns nan when no step is scored.
    """
    total, n = attn_loss_terms(weights, gold, source_offset=source_offset, lengths=lengths,
                               steps=steps)
    return total / n if n else float("nan")


def levenshtein(a: Sequence[int], b: Sequence[int]) -> int:
    """Token-level edit distance (insertions, deletions, substitutions cost 1).

    Computed by rapidfuzz's C++ Levenshtein on the token lists: the plain dynamic programme in
    Python took ~5 s for one split of 2,000 length-100 sequences, longer than decoding them."""
    return int(_rf_levenshtein.distance(list(a), list(b)))


def edit_distance(pred: Any, gold: Any, eos_id: int, pad_id: int | None = None) -> float:
    """Mean token-level Levenshtein distance between pred (B,T1) and gold (B,T2), each cut at
    its first <eos> (or pad, if ``pad_id`` is given)."""
    p = _as_2d(pred, eos_id)
    g = _as_2d(gold, eos_id)
    if p.shape[0] != g.shape[0]:
        raise ValueError(f"pred has {p.shape[0]} rows but gold has {g.shape[0]}")
    if p.shape[0] == 0:
        return float("nan")
    p_len, _ = sequence_lengths(p, eos_id, pad_id)
    g_len, _ = sequence_lengths(g, eos_id, pad_id)
    total = sum(
        levenshtein(p[i, : p_len[i]].tolist(), g[i, : g_len[i]].tolist()) for i in range(p.shape[0])
    )
    return total / p.shape[0]


def raffel_accuracy(y_hat: Any, y: Any, tol: float = 0.04) -> float:
    """Fraction of predictions with |y_hat - y| < tol (Raffel & Ellis). y_hat, y: (N,)."""
    a = torch.as_tensor(y_hat, dtype=torch.float64).reshape(-1)
    b = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"y_hat has {a.numel()} values but y has {b.numel()}")
    if a.numel() == 0:
        return float("nan")
    return float(((a - b).abs() < tol).double().mean())


def epochs_to_100(accuracies: Sequence[float]) -> int | None:
    """First epoch (1-based) whose accuracy is 1.0, or None if never reached.

    accuracies: per-epoch accuracy fractions, epoch 1 first.
    """
    for epoch, acc in enumerate(accuracies, 1):
        if acc is not None and not math.isnan(acc) and acc >= 1.0:
            return epoch
    return None


def accuracy_by_length(correct: Any, lengths: Any) -> dict[int, float]:
    """Accuracy per gold output length. correct (B,) bool, lengths (B,) int -> {length: acc},
    sorted by length."""
    c = np.asarray(torch.as_tensor(correct).cpu() if isinstance(correct, torch.Tensor) else correct,
                   dtype=bool).reshape(-1)
    n = np.asarray(torch.as_tensor(lengths).cpu() if isinstance(lengths, torch.Tensor) else lengths,
                   dtype=np.int64).reshape(-1)
    if c.shape != n.shape:
        raise ValueError(f"correct has {c.size} values but lengths has {n.size}")
    return {int(k): float(c[n == k].mean()) for k in np.unique(n)}
