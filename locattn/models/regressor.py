"""Raffel & Ellis (2016) feed-forward attention regressors (their §2.1, D = 100).

    h_t = LReLU(W_xh x_t + b_xh)                   per step, x_t has 2 channels
    attention: e_t = tanh(w·h_t + b), a = softmax_t(e) over valid steps, c = sum_t a_t h_t
    mean:      c = mean of h_t over valid steps     (a_t = 1 / T_b)
    s = LReLU(W_cs c + b_cs);  y = LReLU(w_sy·s + b_sy)

LReLU(x) = max(x, 0.01x). With D = 100: 10,602 parameters (attention) and 10,501 (mean).

Initialisation (``ModelConfig.regressor_init``): ``paper`` follows their §2.1: a weight matrix
W of shape M x N gets entries from a zero-mean Gaussian whose standard deviation (not variance)
is 1/sqrt(N), and biases start at zero. Their W_xh is D x 2 and multiplies x_t in R^2, so N is
the number of columns, the fan-in (``in_features`` of an ``nn.Linear``). ``torch`` keeps
PyTorch's default ``nn.Linear`` initialisation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from locattn.models.config import ModelConfig


def init_paper_(module: nn.Module) -> None:
    """Raffel & Ellis initialisation of every ``nn.Linear`` in ``module``, in place: weights from
    N(0, std = 1/sqrt(fan_in)), biases zero."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            with torch.no_grad():
                m.weight.normal_(0.0, m.in_features ** -0.5)
                if m.bias is not None:
                    m.bias.zero_()


class _Regressor(nn.Module):
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
        h = F.leaky_relu(self.inp(x))  # (B, T, D)
        weights = self._weights(h, mask)  # (B, T)
        c = torch.bmm(weights.unsqueeze(1), h).squeeze(1)  # (B, D)
        s = F.leaky_relu(self.mid(c))
        y = F.leaky_relu(self.out(s)).squeeze(-1)  # (B,)
        return y, weights


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


def build_regressor(cfg: ModelConfig) -> FeedForwardAttention | MeanPooling:
    """The regressor for ``cfg`` (``kind="regressor"``, family ``feedforward`` or ``mean``)."""
    if cfg.kind != "regressor":
        raise ValueError(f"build_regressor needs kind='regressor', got kind={cfg.kind!r}")
    cls = FeedForwardAttention if cfg.attention.family == "feedforward" else MeanPooling
    model = cls(input_channels=cfg.input_channels, hidden_size=cfg.hidden_size)
    if cfg.regressor_init == "paper":  # "torch": the layers' own initialisation, as constructed
        init_paper_(model)
    return model


__all__ = ["FeedForwardAttention", "MeanPooling", "build_regressor", "init_paper_"]
