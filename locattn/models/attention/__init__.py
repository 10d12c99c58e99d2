"""Attenders: one class per mechanism family, built from an :class:`AttentionConfig`.

``content`` -> :class:`ContentAttender`, ``positional`` -> :class:`PositionalAttender`,
``location`` -> :class:`LocationAttender`, ``dubois_code`` -> :class:`DuboisCodeAttender`, each
through its ``build_<family>`` factory, registered in :mod:`locattn.models.config` exactly as a
plugin registers its own (:func:`locattn.register_attender`). Direction mixing (e_dir) is applied to the source
before the attender sees it (:mod:`locattn.models.encoder`), so it works with any family.
"""

from __future__ import annotations

from locattn.models.attention.base import Attender, AttnStep, SourceMemory
from locattn.models.attention.content import ContentAttender, ContentScorer
from locattn.models.attention.dubois_code import DuboisCodeAttender
from locattn.models.attention.location import LocationAttender, LocationState
from locattn.models.attention.positional import PositionalAttender
from locattn import registry
from locattn.models.config import AttentionConfig, families


def build_attender(cfg: AttentionConfig, *, query_size: int, key_size: int, dim: int,
                   total_batches: int = 1) -> Attender:
    """The attender for ``cfg``: the registered family's target (:func:`locattn.register_attender`)
    called as ``target(cfg, query_size=, key_size=, dim=, total_batches=)``. ``dim`` is the head
    size d; ``total_batches`` the run's training batches (``dubois_code`` anneals over shares of
    them). A family of another model kind raises ``ValueError`` naming the seq2seq families."""
    entry = registry.get("attender", cfg.family, where="attention.family")
    if entry.meta["model_kind"] != "seq2seq":
        raise ValueError(f"attention.family={cfg.family!r} is not a seq2seq attender; valid: "
                         f"{', '.join(families('seq2seq'))}")
    return entry.load()(cfg, query_size=query_size, key_size=key_size, dim=dim,
                        total_batches=total_batches)


def attender_is_stacked(family: str) -> bool:
    """Whether family ``family``'s modules are written for stacked (K, ...) parameters
    (``register_attender(..., stacked=True)``: the built-ins, through
    :mod:`locattn.models.functional`), so that a pack stacks them itself; an ordinary module
    (the default) runs per replica through :mod:`torch.func`
    (:mod:`locattn.models.attention.replicas`)."""
    return bool(registry.get("attender", family, where="attention.family").meta.get("stacked", False))


def build_content(cfg: AttentionConfig, *, query_size: int, key_size: int, dim: int,
                  total_batches: int = 1) -> ContentAttender:
    """Family ``content`` (registered in :mod:`locattn.models.config`)."""
    return ContentAttender(cfg.content_score, key_size=key_size, query_size=query_size, dim=dim)


def build_positional(cfg: AttentionConfig, *, query_size: int, key_size: int, dim: int,
                     total_batches: int = 1) -> PositionalAttender:
    """Family ``positional``."""
    return PositionalAttender(cfg.positions, key_size=key_size, query_size=query_size, dim=dim)


def build_location(cfg: AttentionConfig, *, query_size: int, key_size: int, dim: int,
                   total_batches: int = 1) -> LocationAttender:
    """Family ``location``."""
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


def build_dubois_code(cfg: AttentionConfig, *, query_size: int, key_size: int, dim: int,
                      total_batches: int = 1) -> DuboisCodeAttender:
    """Family ``dubois_code``."""
    return DuboisCodeAttender(
        query_size=query_size, key_size=key_size, controller_size=cfg.controller_size,
        total_batches=total_batches,
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
    "attender_is_stacked",
    "build_attender",
    "build_content",
    "build_dubois_code",
    "build_location",
    "build_positional",
]
