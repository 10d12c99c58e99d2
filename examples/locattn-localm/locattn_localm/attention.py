"""Local-m attention (Luong, Pham & Manning 2015, "Effective Approaches to Attention-based Neural
Machine Translation", sec. 3.2), written as any PyTorch module is: ``nn.Linear``, ``nn.LayerNorm``
and a registered buffer, nothing of locattn's but the two dataclasses of the interface.

At decoder step t the aligned position is monotonic, p_t = t (clamped to the last valid
position), and the weights are the softmax of Luong's ``general`` score within the window:

    a_t(s) = softmax_{|s - p_t| <= D}( h_t^T W_a e_s / sqrt(d) )

with h_t the (layer-normalised) query, this project's decoder state before the step's update.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from locattn.models.attention import AttnStep, SourceMemory


class LocalM(nn.Module):
    """Local-m attention; ``cfg.options["window"]`` is D."""

    def __init__(self, cfg: Any, *, query_size: int, key_size: int, dim: int,
                 total_batches: int = 1) -> None:
        super().__init__()
        self.window = int(cfg.options["window"])
        self.norm = nn.LayerNorm(query_size)
        self.w_a = nn.Linear(key_size, query_size, bias=False)  # the general score's W_a
        self.register_buffer("scale", torch.tensor(key_size ** -0.5))

    def prepare(self, memory: SourceMemory) -> Tensor:
        return self.w_a(memory.keys)  # (B, L, H): W_a e_s, once per batch

    def initial_state(self, memory: SourceMemory) -> None:
        return None

    def forward(self, query: Tensor, memory: SourceMemory, cache: Tensor, state: Any,
                t: int) -> tuple[AttnStep, Any]:
        scores = torch.einsum("blh,bh->bl", cache, self.norm(query)) * self.scale  # (B, L)
        p = torch.clamp(memory.lengths - 1, max=float(t))  # (B,) p_t = t
        s = torch.arange(scores.shape[1], device=scores.device, dtype=p.dtype)  # (L,)
        inside = ((s[None, :] - p[:, None]).abs() <= self.window) & memory.mask  # (B, L)
        weights = torch.softmax(scores.masked_fill(~inside, float("-inf")), dim=-1)  # (B, L)
        mu = p / (memory.lengths - 1).clamp(min=1)  # in the units of memory.positions
        return AttnStep(weights=weights, mu=mu), state
