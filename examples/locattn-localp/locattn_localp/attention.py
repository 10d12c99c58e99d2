"""Local-p attention (Luong, Pham & Manning 2015, "Effective Approaches to Attention-based Neural
Machine Translation", sec. 3.2, eqs. 9-10).

At each decoder step t the attender predicts an aligned position

    p_t = (L - 1) · sigmoid(v_p^T tanh(W_p h_t))                       (eq. 9)

(L the valid attention length, so p_t spans the positions 0 .. L-1), and weighs the source by a
content score times a Gaussian centred there,

    a_t(s) = softmax_s(score(h_t, e_s)) · exp(-(s - p_t)^2 / (2 sigma^2)),  sigma = D / 2  (eq. 10)

over the window s in [p_t - D, p_t + D] (zero outside), with Luong's ``general`` score
e_s^T W_a h_t. As in the paper the weights are not renormalised after the Gaussian: a row sums to
at most 1. h_t is this project's query, the decoder state before the step's update.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from locattn.models.attention import Attender, AttnStep, ContentScorer, SourceMemory
from locattn.models.functional import linear


class LocalP(Attender):
    """Local-p attention; ``cfg.options["window"]`` is D."""

    def __init__(self, cfg: Any, *, query_size: int, key_size: int, dim: int,
                 total_batches: int = 1) -> None:
        super().__init__()
        self.window = float(cfg.options["window"])
        self.sigma = self.window / 2.0
        self.scorer = ContentScorer("multiplicative", key_size=key_size, query_size=query_size, dim=dim)
        self.w_p = nn.Linear(query_size, dim, bias=False)
        self.v_p = nn.Linear(dim, 1, bias=False)

    def prepare(self, memory: SourceMemory) -> Tensor:
        return self.scorer.prepare(memory.keys)  # (B, L, H)

    def forward(  # type: ignore[override]
        self, query: Tensor, memory: SourceMemory, cache: Any, state: Any, t: int
    ) -> tuple[AttnStep, Any]:
        last = (memory.lengths - 1).clamp(min=0)  # (B,)
        # registered stacked=True: the trainer stacks every parameter (K, out, in), a solo run
        # too (K = 1), so weights go through functional.linear (an ordinary module need not)
        hidden = torch.tanh(linear(query, self.w_p.weight))  # (B, d)
        p = last * torch.sigmoid(linear(hidden, self.v_p.weight)).squeeze(-1)  # (B,)
        s = torch.arange(memory.keys.shape[1], device=query.device, dtype=p.dtype)  # (L,)
        dist = s.unsqueeze(0) - p.unsqueeze(1)  # (B, L)
        align = torch.softmax(self.scorer(query, cache) + memory.score_bias, dim=-1)  # (B, L)
        inside = (dist.abs() <= self.window) & memory.mask  # (B, L)
        gauss = torch.exp(-dist.pow(2) / (2 * self.sigma ** 2))  # (B, L)
        weights = torch.where(inside, align * gauss, torch.zeros_like(align))  # (B, L)
        scale = 1.0 / last.clamp(min=1)  # positions in the units the built-in traces use (0..1)
        sigma = torch.full_like(p, self.sigma) * scale
        return AttnStep(weights=weights, mu=p * scale, sigma=sigma), state
