"""Small pure tensor functions shared by the attenders (paper equations cited per function)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

SOFTSTAIR_TEMPERATURE = 20.0
"""tau in softstair (Dubois et al., sec. 5.1; Ray Chowdhury eq. 14)."""
CLAMP_SLOPE = 0.01
"""m, the leak of the clamp (Ray Chowdhury eq. 8)."""


def softstair(x: Tensor, temperature: float = SOFTSTAIR_TEMPERATURE) -> Tensor:
    """softstair(x) = floor(x) + sigmoid(tau·(x - floor(x) - 0.5)) (Dubois sec. 5.1, RC eq. 14)."""
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


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout. Same distribution as ``F.dropout``; drawing the mask with ``rand`` is
    about twice as fast on CPU as the ``bernoulli_`` that ``F.dropout`` uses."""
    if not training or p == 0.0:
        return x
    return apply_dropout(x, torch.rand_like(x), p)


def apply_dropout(x: Tensor, noise: Tensor, p: float) -> Tensor:
    """Inverted dropout of ``x`` with uniform ``noise`` of its shape: keep where noise >= p."""
    return x * (noise >= p) * (1.0 / (1.0 - p))


def dropout_keep(noise: Tensor, p: float) -> Tensor:
    """The inverted-dropout multiplier of uniform ``noise``: 1/(1 - p) where noise >= p, else 0
    (float, the shape of ``noise``). ``x * dropout_keep(u, p)`` equals ``apply_dropout(x, u, p)``
    to the bit (x·1·s and x·(1·s) are both x·s; x·0 is ±0 either way)."""
    return (noise >= p) * (1.0 / (1.0 - p))


class LeakyReLUFromOutput(torch.autograd.Function):
    """``F.leaky_relu`` whose backward reads its output instead of its input: y > 0 exactly where
    x > 0, so the gradient is the same, but a compiled graph then saves nothing beyond y (which
    the next product's weight gradient saves anyway) instead of a bool mask of x > 0. Inductor's
    CPU kernels store and load bool tensors at a small fraction of float speed (a (32, 12, 128)
    mask: about 500 us to store, 200 us to load, against 20 us for the float op)."""

    @staticmethod
    def forward(x: Tensor, slope: float) -> Tensor:  # type: ignore[override]
        return torch.nn.functional.leaky_relu(x, slope)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(output)
        ctx.slope = inputs[1]

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        # y + 0·grad is y for every finite gradient; reading grad keeps the comparison in the
        # backward, where AOTAutograd would otherwise hoist y > 0 into the forward and save it
        # as a bool tensor beside y
        return torch.where(y.add(grad, alpha=0.0) > 0, grad, grad * ctx.slope), None


def leaky_relu(x: Tensor, slope: float = 0.01) -> Tensor:
    """``F.leaky_relu(x, slope)``; under torch.compile with a backward that reads the output
    (:class:`LeakyReLUFromOutput`: the same values and gradients, no saved bool mask)."""
    if torch.compiler.is_compiling():
        return LeakyReLUFromOutput.apply(x, slope)
    return torch.nn.functional.leaky_relu(x, slope)


def take_rows(x: Tensor, index: Tensor) -> Tensor:
    """out[b, l] = x[b, index[b, l]] for x (B, L, ...) and index (B, L) long.

    The same values as ``x.gather(1, index[..., None].expand_as(x))``, but as one row lookup
    in the flattened (B*L, ...) tensor: the expanded-index gather was ~10 ms at B = 256,
    L = 102, d = 128 on CPU, the lookup is a few times faster. Pure data movement, so forward
    and gradient are exactly those of the gather."""
    B, L = index.shape
    flat = (index + torch.arange(B, device=index.device).unsqueeze(1) * x.shape[1]).reshape(-1)
    return x.reshape(B * x.shape[1], *x.shape[2:]).index_select(0, flat).view(B, L, *x.shape[2:])


def gru_update(gi: Tensor, gh: Tensor, h: Tensor) -> Tensor:
    """Standard GRU update from gate pre-activations gi = W_ih x + b_ih, gh = W_hh h + b_hh (B, 3H)."""
    H = h.shape[-1]
    rz = torch.sigmoid(gi[:, : 2 * H] + gh[:, : 2 * H])  # (B, 2H)
    n = torch.tanh(gi[:, 2 * H :] + rz[:, :H] * gh[:, 2 * H :])  # (B, H)
    return n + rz[:, H:] * (h - n)  # (1 - z) n + z h


# --------------------------------------------------------------------------- packed replicas
# A packed model holds K replicas of one architecture: every parameter has a leading K axis and
# the batch axis holds the K replicas' batches one after another (rows k*B .. k*B + B - 1 belong
# to replica k). The helpers below are the only places that know; for an ordinary (solo) model
# they are the plain ops.


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear`` for a solo weight (out, in); for a packed weight (K, out, in) and x
    (K*B, ..., in), one batched product per replica's rows."""
    if weight.dim() == 2:
        return torch.nn.functional.linear(x, weight, bias)
    K = weight.shape[0]
    xk = x.reshape(K, -1, x.shape[-1])  # (K, B*..., in)
    if weight.shape[1] == 1:
        # a batched mat-vec rounds differently for different K (MKL), a product-sum does not
        out = (xk * weight).sum(-1, keepdim=True)  # (K, B*..., 1)
        out = out if bias is None else out + bias.unsqueeze(1)
    else:
        wt = weight.transpose(1, 2)  # (K, in, out)
        out = torch.bmm(xk, wt) if bias is None else torch.baddbmm(bias.unsqueeze(1), xk, wt)
    return out.view(*x.shape[:-1], weight.shape[1])


def embed(ids: Tensor, weight: Tensor) -> Tensor:
    """Embedding lookup; a packed table (K, V, E) looks up rows of replica k in table k."""
    if weight.dim() == 2:
        return torch.nn.functional.embedding(ids, weight)
    K, V, E = weight.shape
    B = ids.shape[0] // K
    offset = torch.arange(K, device=ids.device).repeat_interleave(B) * V  # (K*B,)
    offset = offset.view(-1, *([1] * (ids.dim() - 1)))
    return torch.nn.functional.embedding(ids + offset, weight.reshape(K * V, E))


def per_row(param: Tensor, rows: int, solo_dims: int) -> Tensor:
    """A parameter used elementwise: solo (``solo_dims`` dims) as is, packed (K, ...) repeated
    to (rows, ...) so that each row sees its replica's value."""
    if param.dim() == solo_dims:
        return param
    return param.repeat_interleave(rows // param.shape[0], dim=0)


class DropoutNoise:
    """Uniform noise for dropout masks from explicit per-replica generators.

    For a solo model ``generators`` has one entry. Replica k's mask for a (K*B, L, ...) tensor
    is drawn at the replica's own shape (B, L - trim[k], ...), then padded with ones (kept) on
    the attention axis, so a packed replica draws exactly what the same run draws alone
    (its batch trimmed to its own longest source). ``trim`` is set per batch by the trainer.
    """

    def __init__(self, generators: list[torch.Generator]) -> None:
        self.generators = list(generators)
        self.trim = [0] * len(self.generators)

    def uniform(self, x: Tensor) -> Tensor:
        K = len(self.generators)
        B = x.shape[0] // K
        parts = []
        for g, trim in zip(self.generators, self.trim):
            own = (B, x.shape[1] - trim, *x.shape[2:])
            u = torch.rand(own, generator=g, device=g.device, dtype=x.dtype).to(x.device)
            if trim:
                u = torch.cat((u, u.new_ones(B, trim, *x.shape[2:])), dim=1)
            parts.append(u)
        return parts[0] if K == 1 else torch.cat(parts, dim=0)


def dropout_with(x: Tensor, p: float, training: bool, noise: DropoutNoise | None) -> Tensor:
    """:func:`dropout` with the mask drawn from ``noise`` when given (else the global RNG)."""
    if not training or p == 0.0 or noise is None:
        return dropout(x, p, training)
    return apply_dropout(x, noise.uniform(x), p)
