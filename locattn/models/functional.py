"""Small pure tensor functions shared by the attenders (paper equations cited per function)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

SOFTSTAIR_TEMPERATURE = 20.0
"""tau in softstair (Dubois et al. §5.1; Ray Chowdhury eq. 14)."""
CLAMP_SLOPE = 0.01
"""m, the leak of the clamp (Ray Chowdhury eq. 8)."""


def softstair(x: Tensor, temperature: float = SOFTSTAIR_TEMPERATURE) -> Tensor:
    """softstair(x) = floor(x) + sigmoid(tau·(x - floor(x) - 0.5)) (Dubois §5.1, RC eq. 14)."""
    fl = torch.floor(x)
    return fl + torch.sigmoid(temperature * (x - fl - 0.5))


def leaky_clamp(x: Tensor, slope: float = CLAMP_SLOPE) -> Tensor:
    """clamp(x) = max(m·x, min(x, 1 + m·x)) (Ray Chowdhury eq. 8): identity on [0, 1], leaky outside."""
    return torch.maximum(slope * x, torch.minimum(x, 1.0 + slope * x))


def sinusoid(positions: Tensor, dim: int) -> Tensor:
    """Sinusoidal encoding of (possibly negative, any size) positions: (...,) -> (..., dim).

    Even dimensions hold sin(pos·w_i), odd ones cos(pos·w_i), w_i = 10000^(-2i/dim). Computed on
    the fly, so there is no maximum length.
    """
    half = torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device)
    inv_freq = torch.exp(-math.log(10000.0) * half / dim)  # (dim/2,)
    angles = positions.to(torch.float32).unsqueeze(-1) * inv_freq  # (..., dim/2)
    out = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)  # (..., dim/2, 2)
    return out.flatten(-2)[..., :dim]


def rotary_tables(positions: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """cos and sin tables for RoPE (Su et al. 2021): positions (...,) -> two (..., dim) tensors."""
    half = torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device)
    inv_freq = torch.exp(-math.log(10000.0) * half / dim)  # (dim/2,)
    angles = positions.to(torch.float32).unsqueeze(-1) * inv_freq  # (..., dim/2)
    angles = torch.repeat_interleave(angles, 2, dim=-1)  # (..., dim)
    return torch.cos(angles), torch.sin(angles)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Apply RoPE to x (..., dim) with interleaved pairs (x0, x1) -> (x0 c - x1 s, x1 c + x0 s)."""
    pairs = x.unflatten(-1, (-1, 2))  # (..., dim/2, 2)
    swapped = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (..., dim)
    return x * cos + swapped * sin


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis with invalid positions (mask False) at exactly zero weight."""
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout. Same distribution as ``F.dropout``; drawing the mask with ``rand`` is
    about twice as fast on CPU as the ``bernoulli_`` that ``F.dropout`` uses."""
    if not training or p == 0.0:
        return x
    return x * (torch.rand_like(x) >= p) * (1.0 / (1.0 - p))
