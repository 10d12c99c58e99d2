"""Raffel & Ellis (2016) feed-forward attention regressors (their sec. 2.1, D = 100).

    h_t = LReLU(W_xh x_t + b_xh)                   per step, x_t has 2 channels
    attention: e_t = tanh(w·h_t + b), a = softmax_t(e) over valid steps, c = sum_t a_t h_t
    mean:      c = mean of h_t over valid steps     (a_t = 1 / T_b)
    s = LReLU(W_cs c + b_cs);  y = LReLU(w_sy·s + b_sy)

LReLU(x) = max(x, 0.01x). With D = 100: 10,602 parameters (attention) and 10,501 (mean).

Two implementations of the same function (``RunConfig.train_path``): ``eager`` runs the layers op
by op and holds the (B, T, D) hidden states in memory; ``fused`` (:class:`PoolKernel`) computes
c = sum_t a_t h_t in cache-sized chunks of time steps, one pass forward and one backward,
recomputing h_t (two multiply-adds and a leak) instead of storing it, for batches of at least
:data:`FUSED_MIN_POSITIONS` positions (shorter ones gain nothing and run op by op). Lengths of
50-10000 make h hundreds of megabytes per batch, so eager is memory-bound; fused is 2-3x faster
on a CPU (benchmarks/bench_regressor.py) and its gradients are closer to a float64 computation
than eager's (test_regressor_fused.py).

Initialisation (``ModelConfig.regressor_init``): ``paper`` follows their sec. 2.1: a weight
matrix
W of shape M x N gets entries from a zero-mean Gaussian whose standard deviation (not variance)
is 1/sqrt(N), and biases start at zero. Their W_xh is D x 2 and multiplies x_t in R^2, so N is
the number of columns, the fan-in (``in_features`` of an ``nn.Linear``). ``torch`` keeps
PyTorch's default ``nn.Linear`` initialisation.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from locattn.models.config import ModelConfig

LEAK = 0.01
"""LReLU's slope below zero (torch's leaky_relu default, as Raffel & Ellis's max(x, 0.01x))."""
FUSED_MIN_POSITIONS = 100_000
"""Batches of fewer (sequence, step) positions than this pool op by op even on the fused path:
below about 1,000 steps at batch 100 the chunk loop's overhead outweighs the memory it saves
(benchmarks/bench_regressor.py: at T = 50 the fused pass costs 1-1.7x eager's)."""
CHUNK_ELEMENTS = {"cpu": 320_000, "cuda": 1 << 26}
"""Elements of one chunk of hidden states (B x steps x D) in :class:`PoolKernel`: about 1.3 MB,
a core's cache, on a CPU; 256 MB on a GPU, where bandwidth is plentiful and launches are not."""


def init_paper_(module: nn.Module) -> None:
    """Raffel & Ellis initialisation of every ``nn.Linear`` in ``module``, in place: weights from
    N(0, std = 1/sqrt(fan_in)), biases zero."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            with torch.no_grad():
                m.weight.normal_(0.0, m.in_features ** -0.5)
                if m.bias is not None:
                    m.bias.zero_()


def _hidden(x: Tensor, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """(z, h = LReLU(z)) with z = W x_t + b, as a sum over the input channels (there are two)."""
    z = b.expand(*x.shape[:-1], b.shape[0])
    for k in range(x.shape[-1]):
        z = torch.addcmul(z, x[..., k:k + 1], w[:, k])
    return z, F.leaky_relu(z, LEAK)


class PoolKernel(torch.autograd.Function):
    """c = sum_t a_t h_t, h_t = LReLU(W x_t + b), in chunks of time steps; returns (c, a).

    Attention (``we`` given): a = softmax over valid steps of e_t = tanh(we·h_t + be). Since
    tanh bounds e_t to [-1, 1], exp(e_t) needs no max shift, so the softmax and the weighted sum
    take one pass. Mean pooling (``we`` None): a_t = 1 / T_b on valid steps. The backward pass
    recomputes h_t chunk by chunk and uses sum_t a_t (h_t·g_c) = c·g_c, so it is one pass too.
    x (B, T, C), mask (B, T) bool, w (D, C), b (D,), we (D,), be () -> c (B, D), a (B, T).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, mask: Tensor, w: Tensor, b: Tensor, we: Tensor | None,
                be: Tensor | None, steps: int) -> tuple[Tensor, Tensor]:
        B, T, _ = x.shape
        a = mask.to(x.dtype)  # unnormalised weights, filled in per chunk for attention
        e = torch.zeros_like(a) if we is not None else a
        c = x.new_zeros(B, 1, w.shape[0])
        for s in range(0, T, steps):
            _, h = _hidden(x[:, s:s + steps], w, b)
            if we is not None:
                es = torch.tanh(torch.matmul(h, we) + be, out=e[:, s:s + steps])
                a[:, s:s + steps].mul_(torch.exp(es))
            c.baddbmm_(a[:, None, s:s + steps], h)
        total = a.sum(-1, keepdim=True)  # (B, 1)
        a = a / total
        c = c.squeeze(1) / total
        ctx.save_for_backward(x, w, b, we, a, e, c)
        ctx.steps = steps
        return c, a

    @staticmethod
    def backward(ctx: Any, gc: Tensor, ga: Tensor | None) -> tuple[Tensor | None, ...]:
        x, w, b, we, a, e, c = ctx.saved_tensors
        steps, T = ctx.steps, x.shape[1]
        attention = we is not None
        base = (c * gc).sum(-1, keepdim=True)  # sum_t a_t (h_t·gc), (B, 1)
        if ga is not None:
            base = base + (a * ga).sum(-1, keepdim=True)
        gw, gb = torch.zeros_like(w), torch.zeros_like(b)
        gwe = torch.zeros_like(we) if attention else None
        gbe = x.new_zeros(()) if attention else None
        for s in range(0, T, steps):
            xs, a_s = x[:, s:s + steps], a[:, s:s + steps]
            z, h = _hidden(xs, w, b)
            gh = a_s.unsqueeze(-1) * gc.unsqueeze(1)  # (B, t, D)
            if attention:
                g_a = torch.matmul(h, gc.unsqueeze(-1)).squeeze(-1)  # dL/da_t through c
                if ga is not None:
                    g_a = g_a + ga[:, s:s + steps]
                es = e[:, s:s + steps]
                gp = a_s * (g_a - base) * (1 - es * es)  # dL/d(we·h_t + be)
                gwe.add_(torch.matmul(gp.unsqueeze(1), h).sum((0, 1)))
                gbe.add_(gp.sum())
                gh = torch.addcmul(gh, gp.unsqueeze(-1), we)
            gz = torch.where(z > 0, gh, gh * LEAK).reshape(-1, w.shape[0])
            gw.add_(gz.t() @ xs.reshape(-1, xs.shape[-1]))
            gb.add_(gz.sum(0))
        return None, None, gw, gb, gwe, gbe, None


def chunk_steps(batch: int, hidden: int, device: torch.device) -> int:
    """Time steps per chunk of :class:`PoolKernel` (see :data:`CHUNK_ELEMENTS`)."""
    budget = CHUNK_ELEMENTS["cuda" if device.type == "cuda" else "cpu"]
    return max(1, budget // max(1, batch * hidden))


class _Regressor(nn.Module):
    fused = False
    """Whether :meth:`forward` pools with :class:`PoolKernel` (``train_path="fused"``)."""

    def __init__(self, *, input_channels: int, hidden_size: int) -> None:
        super().__init__()
        self.inp = nn.Linear(input_channels, hidden_size)
        self.mid = nn.Linear(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, 1)

    def _weights(self, h: Tensor, mask: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """x (B, T, C) float, lengths (B,) long -> (y_hat (B,), weights (B, T))."""
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.inp.in_features:
            raise ValueError(
                f"x must be a (B, T, {self.inp.in_features}) float tensor, got shape "
                f"{tuple(getattr(x, 'shape', ()))}"
            )
        if not x.is_floating_point():
            raise ValueError(f"x must be a floating-point tensor, got {x.dtype}")
        B, T, _ = x.shape
        if (not isinstance(lengths, Tensor) or lengths.shape != (B,)
                or lengths.dtype != torch.long):
            raise ValueError(
                f"lengths must be a ({B},) int64 tensor, got "
                f"{getattr(lengths, 'dtype', type(lengths).__name__)} of shape "
                f"{tuple(getattr(lengths, 'shape', ()))}"
            )
        if int(lengths.min()) < 1 or int(lengths.max()) > T:
            raise ValueError(f"lengths must be in [1, T={T}], got {lengths.tolist()[:8]}")
        mask = torch.arange(T, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
        if self.fused and B * T >= FUSED_MIN_POSITIONS:
            c, weights = self._pool_fused(x, mask)
        else:
            h = F.leaky_relu(self.inp(x))  # (B, T, D)
            weights = self._weights(h, mask)  # (B, T)
            c = torch.bmm(weights.unsqueeze(1), h).squeeze(1)  # (B, D)
        s = F.leaky_relu(self.mid(c))
        y = F.leaky_relu(self.out(s)).squeeze(-1)  # (B,)
        return y, weights

    def _pool_fused(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        energy = getattr(self, "energy", None)
        we, be = (energy.weight[0], energy.bias[0]) if energy is not None else (None, None)
        steps = chunk_steps(x.shape[0], self.inp.out_features, x.device)
        return PoolKernel.apply(x, mask, self.inp.weight, self.inp.bias, we, be, steps)


class FeedForwardAttention(_Regressor):
    """Raffel & Ellis's attention regressor: a_t = softmax_t(tanh(w·h_t + b))."""

    def __init__(self, *, input_channels: int, hidden_size: int) -> None:
        super().__init__(input_channels=input_channels, hidden_size=hidden_size)
        self.energy = nn.Linear(hidden_size, 1)

    def _weights(self, h: Tensor, mask: Tensor) -> Tensor:
        e = torch.tanh(self.energy(h)).squeeze(-1)  # (B, T)
        return torch.softmax(e.masked_fill(~mask, float("-inf")), dim=-1)


class MeanPooling(_Regressor):
    """The unweighted-mean baseline: a_t = 1 / T_b on valid steps."""

    def _weights(self, h: Tensor, mask: Tensor) -> Tensor:
        m = mask.to(h.dtype)
        return m / m.sum(-1, keepdim=True)


def build_regressor(cfg: ModelConfig, *, fused: bool = False) -> FeedForwardAttention | MeanPooling:
    """The regressor for ``cfg`` (``kind="regressor"``, family ``feedforward`` or ``mean``);
    ``fused`` pools with :class:`PoolKernel` (``RunConfig.train_path="fused"``)."""
    if cfg.kind != "regressor":
        raise ValueError(f"build_regressor needs kind='regressor', got kind={cfg.kind!r}")
    cls = FeedForwardAttention if cfg.attention.family == "feedforward" else MeanPooling
    model = cls(input_channels=cfg.input_channels, hidden_size=cfg.hidden_size)
    if cfg.regressor_init == "paper":  # "torch": the layers' own initialisation, as constructed
        init_paper_(model)
    model.fused = fused
    return model


__all__ = ["FeedForwardAttention", "MeanPooling", "PoolKernel", "build_regressor", "init_paper_"]
