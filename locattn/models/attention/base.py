"""The attender interface shared by every mechanism family.

An attender is called once per decoding step with the query h_{t-1} (the decoder state *before*
the update, Ray Chowdhury App. E.1). Everything that does not depend on the step is computed once
per sequence in :meth:`Attender.prepare`; recurrent quantities (previous attended position,
Dubois's weighter state) travel in an explicit ``state`` value, never on ``self``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn


@dataclass(frozen=True)
class SourceMemory:
    """The encoded source as the attender sees it (attention axis L includes START/END)."""

    keys: Tensor
    """(B, L, d) encoder outputs e, or e_dir when direction mixing is on."""
    values: Tensor
    """(B, L, H) output-projected values W_o·leaky_relu(W_v e); context = sum_j alpha_j values_j."""
    mask: Tensor
    """(B, L) bool, True on valid positions."""
    score_bias: Tensor
    """(B, L) float, 0 on valid positions and -inf on padding (added to scores before softmax)."""
    positions: Tensor
    """(B, L) float p_j = j / max(1, L_b - 1) (0 on padding)."""
    lengths: Tensor
    """(B,) float L_b, the valid attention length per sequence."""
    stepsize: Tensor
    """(B,) float 1 / max(1, L_b - 1)."""


@dataclass(frozen=True)
class AttnStep:
    """One step's attention and diagnostics; diagnostics are None where the family has none."""

    weights: Tensor
    """(B, L) final attention alpha_t (rows sum to 1 over valid positions, 0 on padding)."""
    mu: Tensor | None = None
    """(B,) centre of the location Gaussian."""
    sigma: Tensor | None = None
    """(B,) its standard deviation."""
    step: Tensor | None = None
    """(B,) activated step (in units of stepsize)."""
    mix_gate: Tensor | None = None
    """(B,) weight m of the location attention in a Mix attender."""
    location_weights: Tensor | None = None
    """(B, L) location-only attention lambda (location family)."""
    content_weights: Tensor | None = None
    """(B, L) content-only attention softmax(scores) of a Mix attender (alpha = m·lambda +
    (1 - m)·content)."""
    rho: Tensor | None = None
    """(B, n_rho) raw building-block logits rho_t of a location attender; the weights they give
    the blocks (1/(L-1), pa_{t-1}, 1) are :func:`locattn.models.attention.location.building_block_weights`."""


class Attender(nn.Module):
    """Base class: ``prepare`` once per sequence, ``initial_state``, then ``forward`` per step."""

    def prepare(self, memory: SourceMemory) -> Any:
        """Step-independent work (projected keys ...). Default: nothing."""
        return None

    def initial_state(self, memory: SourceMemory) -> Any:
        """Recurrent state before the first step. Default: none."""
        return None

    def forward(  # type: ignore[override]
        self, query: Tensor, memory: SourceMemory, cache: Any, state: Any, t: int
    ) -> tuple[AttnStep, Any]:
        """query (B, H) = h_{t-1}; t is the 0-based decoding step. Returns (AttnStep, new state)."""
        raise NotImplementedError
