"""Scaled-dot content attention plus a sinusoidal/rotary position term.

With q = W_q h_{t-1}, k_j = W_k e_j (no biases), d the head size, key positions j = 0..L-1 on the
attention axis and query position t (the 0-based decoding step):

* ``relative`` (Transformer-XL as in Ray Chowdhury eqs. 3-4, "Relative"):
  score_tj = [(q + u)·k_j + (q + v)·W_r R_{j-t}] / sqrt(d), with u, v zero-initialised and R a
  frozen sinusoidal encoding of the signed distance.
* ``relative_shared_bias`` (Dubois eq. 4, "TransformerXL"): the same with one bias b = u = v.
* ``rotary`` (Su et al. 2021; Ray Chowdhury App. B.1, "Bi-ROPE"): score_tj =
  rot_t(q)·rot_j(k_j) / sqrt(d).
* ``absolute`` (Dubois eq. 4, "Transformer"): score_tj = (k_j + P_j)·(q + P_t) / sqrt(d).

Every sinusoid is computed on the fly from the positions needed, so any length works; per-step
relative tables are memoised per call in the sequence cache (not on the module).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from locattn.models.attention.base import Attender, AttnStep, SourceMemory
from locattn.models.config import Positions
from locattn.models.functional import linear, per_row, rotary_tables, rotate, sinusoid


class PositionalAttender(Attender):
    """Content + position scores; ``positions`` chooses the position term once at construction."""

    def __init__(self, positions: Positions, *, key_size: int, query_size: int, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.scale = 1.0 / math.sqrt(dim)
        self.key = nn.Linear(key_size, dim, bias=False)
        self.query = nn.Linear(query_size, dim, bias=False)
        nn.init.xavier_uniform_(self.key.weight)  # reference init
        nn.init.xavier_uniform_(self.query.weight)
        if positions in ("relative", "relative_shared_bias"):
            self.rel = nn.Linear(dim, dim, bias=False)  # W_r
            nn.init.xavier_uniform_(self.rel.weight)
            self.u = nn.Parameter(torch.zeros(dim))
            self.v = nn.Parameter(torch.zeros(dim)) if positions == "relative" else None
            self._prepare, self._score = self._prepare_relative, self._score_relative
        elif positions == "rotary":
            self._prepare, self._score = self._prepare_rotary, self._score_rotary
        elif positions == "absolute":
            self._prepare, self._score = self._prepare_absolute, self._score_absolute
        else:  # pragma: no cover - the config validates the Literal
            raise ValueError(f"positions={positions!r}")

    # -- relative (Transformer-XL)
    def _prepare_relative(self, memory: SourceMemory) -> dict[str, Any]:
        k = linear(memory.keys, self.key.weight)  # (B, L, d)
        return {
            # (B, L, H): W_q^T k / sqrt(d)
            "kq": linear(k, self.query.weight.transpose(-1, -2)) * self.scale,
            # (B, L): u·k_j / sqrt(d)
            "uk": linear(k, self.u.unsqueeze(-2)).squeeze(-1) * self.scale,
            "tables": {},
        }

    def _score_relative(self, query: Tensor, memory: SourceMemory, cache: Any, t: int) -> Tensor:
        tables: dict[int, Tensor] = cache["tables"]
        if t not in tables:
            L = memory.keys.shape[1]
            dist = torch.arange(L, device=query.device) - t  # (L,) j - t
            tables[t] = sinusoid(dist, self.dim)  # (L, d), frozen
        q = linear(query, self.query.weight)  # (B, d)
        v = per_row(self.u if self.v is None else self.v, q.shape[0], solo_dims=1)  # (B or 1, d)
        r = linear(q + v, self.rel.weight.transpose(-1, -2))  # (B, d): W_r^T (q + v)
        pos = r @ tables[t].t()  # (B, L)
        content = torch.bmm(cache["kq"], query.unsqueeze(-1)).squeeze(-1) + cache["uk"]
        return content + pos * self.scale

    # -- rotary
    def _prepare_rotary(self, memory: SourceMemory) -> dict[str, Any]:
        L = memory.keys.shape[1]
        cos, sin = rotary_tables(torch.arange(L, device=memory.keys.device), self.dim)  # (L, d)
        return {"k": rotate(linear(memory.keys, self.key.weight), cos, sin) * self.scale}  # (B, L, d)

    def _score_rotary(self, query: Tensor, memory: SourceMemory, cache: Any, t: int) -> Tensor:
        cos, sin = rotary_tables(torch.tensor(float(t), device=query.device), self.dim)  # (d,)
        q = rotate(linear(query, self.query.weight), cos, sin)  # (B, d)
        return torch.bmm(cache["k"], q.unsqueeze(-1)).squeeze(-1)  # (B, L)

    # -- absolute
    def _prepare_absolute(self, memory: SourceMemory) -> dict[str, Any]:
        L = memory.keys.shape[1]
        pe = sinusoid(torch.arange(L, device=memory.keys.device), self.dim)  # (L, d)
        return {"k": (linear(memory.keys, self.key.weight) + pe) * self.scale}  # (B, L, d)

    def _score_absolute(self, query: Tensor, memory: SourceMemory, cache: Any, t: int) -> Tensor:
        q = linear(query, self.query.weight) + sinusoid(torch.tensor(float(t), device=query.device), self.dim)
        return torch.bmm(cache["k"], q.unsqueeze(-1)).squeeze(-1)  # (B, L)

    def prepare(self, memory: SourceMemory) -> dict[str, Any]:
        return self._prepare(memory)

    def forward(  # type: ignore[override]
        self, query: Tensor, memory: SourceMemory, cache: Any, state: Any, t: int
    ) -> tuple[AttnStep, Any]:
        scores = self._score(query, memory, cache, t)  # (B, L)
        weights = torch.softmax(scores + memory.score_bias, dim=-1)  # (B, L)
        return AttnStep(weights=weights), state
