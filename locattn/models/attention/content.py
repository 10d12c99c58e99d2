"""Content attention: alpha_t = softmax_j score(k_j, q_t) (Dubois eqs. 2-3; Ray Chowdhury eq. 1).

Scorers (x~ = W x, no biases unless stated):

* ``scaled_dot``: (W_q h)·(W_k e_j) / sqrt(d) -- Ray Chowdhury's "Content" and Dubois's
  "Scaled Dot".
* ``multiplicative``: e_j·(W h) (Luong et al. 2015, Dubois's "Multiplicative").
* ``additive``: u·tanh(W_k e_j + W_q h + b) (Bahdanau et al. 2015, Dubois's "Additive").

The bilinear scorers fold the query projection into the keys once per sequence:
q·k = (W_q h)·k = h·(W_q^T k), so each step costs one batched mat-vec.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from locattn.models.attention.base import Attender, AttnStep, SourceMemory
from locattn.models.config import ContentScore
from locattn.models.functional import linear


class ContentScorer(nn.Module):
    """Unnormalised content scores (B, L) for a query (B, H); the scorer is fixed at construction."""

    def __init__(self, score: ContentScore, *, key_size: int, query_size: int, dim: int) -> None:
        super().__init__()
        self.scale = 1.0
        if score == "scaled_dot":
            self.key = nn.Linear(key_size, dim, bias=False)
            self.query = nn.Linear(query_size, dim, bias=False)
            self.scale = 1.0 / math.sqrt(dim)
            nn.init.xavier_uniform_(self.key.weight)  # reference init
            nn.init.xavier_uniform_(self.query.weight)
            self._prepare, self._score = self._prepare_bilinear, self._score_bilinear
        elif score == "multiplicative":
            self.key = None
            self.query = nn.Linear(query_size, key_size, bias=False)
            self._prepare, self._score = self._prepare_bilinear, self._score_bilinear
        elif score == "additive":
            self.key = nn.Linear(key_size, dim, bias=False)
            self.query = nn.Linear(query_size, dim, bias=True)
            self.energy = nn.Linear(dim, 1, bias=False)
            self._prepare, self._score = self._prepare_additive, self._score_additive
        else:  # pragma: no cover - the config validates the Literal
            raise ValueError(f"content_score={score!r}; valid: scaled_dot, multiplicative, additive")

    def _prepare_bilinear(self, keys: Tensor) -> Tensor:
        k = keys if self.key is None else linear(keys, self.key.weight)  # (B, L, d)
        return linear(k, self.query.weight.transpose(-1, -2)) * self.scale  # (B, L, H): W_q^T k / sqrt(d)

    def _score_bilinear(self, query: Tensor, prepared: Tensor) -> Tensor:
        return torch.bmm(prepared, query.unsqueeze(-1)).squeeze(-1)  # (B, L)

    def _prepare_additive(self, keys: Tensor) -> Tensor:
        return linear(keys, self.key.weight)  # (B, L, d)

    def _score_additive(self, query: Tensor, prepared: Tensor) -> Tensor:
        q = linear(query, self.query.weight, self.query.bias)  # (B, d)
        hidden = torch.tanh(prepared + q.unsqueeze(1))  # (B, L, d)
        return linear(hidden, self.energy.weight).squeeze(-1)  # (B, L)

    def prepare(self, keys: Tensor) -> Tensor:
        """keys (B, L, d_k) -> per-sequence cache."""
        return self._prepare(keys)

    def forward(self, query: Tensor, prepared: Tensor) -> Tensor:  # type: ignore[override]
        """query (B, H) -> scores (B, L)."""
        return self._score(query, prepared)


class ContentAttender(Attender):
    """alpha_t = masked softmax of a content score (no position information)."""

    def __init__(self, score: ContentScore, *, key_size: int, query_size: int, dim: int) -> None:
        super().__init__()
        self.scorer = ContentScorer(score, key_size=key_size, query_size=query_size, dim=dim)

    def prepare(self, memory: SourceMemory) -> Tensor:
        return self.scorer.prepare(memory.keys)

    def forward(  # type: ignore[override]
        self, query: Tensor, memory: SourceMemory, cache: Any, state: Any, t: int
    ) -> tuple[AttnStep, Any]:
        weights = torch.softmax(self.scorer(query, cache) + memory.score_bias, dim=-1)  # (B, L)
        return AttnStep(weights=weights), state
