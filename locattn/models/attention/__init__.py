"""Attenders: one class per mechanism family, built from an :class:`AttentionConfig`.

``content`` -> :class:`ContentAttender`, ``positional`` -> :class:`PositionalAttender`,
``location`` -> :class:`LocationAttender`, ``dubois_code`` -> :class:`DuboisCodeAttender`. Direction mixing (e_dir) is applied to the source
before the attender sees it (:mod:`locattn.models.encoder`), so it works with any family.
"""

from __future__ import annotations

from locattn.models.attention.base import Attender, AttnStep, SourceMemory
from locattn.models.attention.content import ContentAttender, ContentScorer
from locattn.models.attention.dubois_code import DuboisCodeAttender
from locattn.models.attention.location import LocationAttender, LocationState
from locattn.models.attention.positional import PositionalAttender
from locattn.models.config import AttentionConfig


def build_attender(cfg: AttentionConfig, *, query_size: int, key_size: int, dim: int,
                   total_batches: int = 1) -> Attender:
    """The attender for ``cfg`` (a seq2seq family); ``dim`` is the head size d; ``total_batches``
    the run's training batches (``dubois_code`` anneals over shares of them)."""
    if cfg.family == "content":
        return ContentAttender(cfg.content_score, key_size=key_size, query_size=query_size, dim=dim)
    if cfg.family == "positional":
        return PositionalAttender(cfg.positions, key_size=key_size, query_size=query_size, dim=dim)
    if cfg.family == "location":
        return LocationAttender(
            query_size=query_size,
            key_size=key_size,
            dim=dim,
            reference=cfg.reference,
            step=cfg.step,
            step_temperature=cfg.step_temperature,
            mono_gate_init=cfg.mono_gate_init,
            mono_gate_on=cfg.mono_gate_on,
            location_norm=cfg.location_norm,
            rho_init=cfg.rho_init,
            mode=cfg.mode,
            mix_temperature=cfg.mix_temperature,
            pa_from=cfg.pa_from,
            content_score=cfg.content_score,
            controller=cfg.controller,
            controller_size=cfg.controller_size,
            controller_init=cfg.controller_init,
            sigma_min=cfg.sigma_min,
        )
    if cfg.family == "dubois_code":
        return DuboisCodeAttender(
            query_size=query_size, key_size=key_size, controller_size=cfg.controller_size,
            total_batches=total_batches,
        )
    raise ValueError(
        f"attention.family={cfg.family!r} is not a seq2seq attender; valid: content, positional, "
        "location, dubois_code"
    )


__all__ = [
    "Attender",
    "AttnStep",
    "ContentAttender",
    "ContentScorer",
    "DuboisCodeAttender",
    "LocationAttender",
    "LocationState",
    "PositionalAttender",
    "SourceMemory",
    "build_attender",
]
