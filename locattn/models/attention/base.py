"""The attender interface shared by every mechanism family.

An attender is called once per decoding step with the query h_{t-1} (the decoder state *before*
the update, Ray Chowdhury App. E.1). Everything that does not depend on the step is computed once
per sequence in :meth:`Attender.prepare`; recurrent quantities (previous attended position,
Dubois's weighter state) travel in an explicit ``state`` value, never on ``self``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Sequence

import torch
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


ROW = "(B,)"
"""Shape of a diagnostic with one value per row and step (a trace holds it as (B, T))."""
MAP = "(B, L)"
"""Shape of a diagnostic over the attention axis (a trace holds it as (B, T, L))."""


@dataclass(frozen=True)
class Diagnostic:
    """What the model and the run do with one optional :class:`AttnStep` field (its
    :func:`diagnostic` declaration): the field is the one place a per-step diagnostic is added.

    ``shape``: per step, :data:`ROW` or :data:`MAP` (checked on a plugin's dry batch,
    :mod:`locattn.models.attention.check`), or another shape, not checked. ``traced``: stacked
    over the steps into the model's ``AttentionTrace`` under the same name. ``recorded``: written
    to a run's ``attention.json`` (``locattn.training.attention``), as null when the attender
    has none; ``recorded_with``: written only when that other diagnostic is set (and then
    after the always-written ones)."""

    shape: str
    traced: bool = True
    recorded: bool = True
    recorded_with: str | None = None


def diagnostic(shape: str, *, traced: bool = True, recorded: bool = True, recorded_with: str | None = None) -> Any:
    """An optional :class:`AttnStep` field (default None) declared a :class:`Diagnostic`."""
    return field(default=None, metadata={"diagnostic": Diagnostic(shape, traced, recorded, recorded_with)})


@dataclass(frozen=True)
class AttnStep:
    """One step's attention and diagnostics; diagnostics are None where the family has none."""

    weights: Tensor
    """(B, L) final attention alpha_t (rows sum to 1 over valid positions, 0 on padding)."""
    mu: Tensor | None = diagnostic(ROW)
    """(B,) centre of the location Gaussian."""
    sigma: Tensor | None = diagnostic(ROW)
    """(B,) its standard deviation."""
    step: Tensor | None = diagnostic(ROW)
    """(B,) activated step (in units of stepsize)."""
    mix_gate: Tensor | None = diagnostic(ROW)
    """(B,) weight m of the location attention in a Mix attender."""
    location_weights: Tensor | None = diagnostic(MAP, recorded_with="content_weights")
    """(B, L) location-only attention lambda (location family)."""
    content_weights: Tensor | None = diagnostic(MAP, recorded_with="content_weights")
    """(B, L) content-only attention softmax(scores) of a Mix attender (alpha = m·lambda +
    (1 - m)·content)."""
    rho: Tensor | None = diagnostic("(B, n_rho)", traced=False, recorded=False)
    """(B, n_rho) raw building-block logits rho_t of a location attender; the weights they give
    the blocks (1/(L-1), pa_{t-1}, 1) are :func:`locattn.models.attention.location.building_block_weights`
    (the trace's ``blocks``)."""


def diagnostics() -> dict[str, Diagnostic]:
    """Every optional :class:`AttnStep` field, in declaration order: name -> :class:`Diagnostic`."""
    return {f.name: f.metadata["diagnostic"] for f in fields(AttnStep) if "diagnostic" in f.metadata}


def traced_fields() -> list[tuple[str, Any, Any]]:
    """The per-step fields of an attention trace, as ``dataclasses.make_dataclass`` takes them:
    ``weights`` (B, T, L), then each traced diagnostic (:func:`diagnostics`), None by default."""
    return [("weights", Tensor)] + [(name, "Tensor | None", field(default=None))
                                    for name, d in diagnostics().items() if d.traced]


def stack_steps(steps: Sequence[AttnStep]) -> dict[str, Tensor | None]:
    """``weights`` and every diagnostic of ``steps`` (one :class:`AttnStep` per decoding step)
    stacked on a new step axis 1, (B, ...) -> (B, T, ...); None for a diagnostic the first step
    does not set."""
    out: dict[str, Tensor | None] = {"weights": torch.stack([s.weights for s in steps], dim=1)}
    for name in diagnostics():
        first = getattr(steps[0], name)
        out[name] = None if first is None else torch.stack([getattr(s, name) for s in steps], dim=1)
    return out


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
