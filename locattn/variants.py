"""Named model presets: every paper variant is a frozen ``ModelConfig`` derived from a parent.

Each row of ``_TABLE`` is (key, paper label, parent key, delta); the preset is
``derive(parent, delta)`` with dotted field paths, so a variant *is* its declared delta. The
roots derive from ``ModelConfig()`` (parent ``None``). ``PAPER_LABELS`` is the only place a paper
name is written; reports use it for row names.

Sources: Ray Chowdhury & Caragea (ICML 2023) Tables 2-4, 7-8 (base: BiGRU + START/END);
Dubois et al. (ACL 2020) secs. 5-6 (unidirectional GRU with a residual connection, no START/END);
Raffel & Ellis (2016) Table 1 (regressors).

Mix variants set the single field ``attention.mode = "mix"``, so they always mix content attention
in: the reference code's defect (a "location only" switch checked before the mix switch, which
left its Mix OneStep/Mono/RMono configs unmixed) cannot be expressed. ``... PR`` variants add
``attention.pa_from = "location"``, which the config rejects without ``mode="mix"``.

``list_variants("mix_*")`` -> {key: label}; ``get_variant(key)`` -> ``ModelConfig``.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Mapping

from locattn import registry
from locattn.models.config import ModelConfig, derive

LOCATION_FAMILY = ("locattn", "locattn_s", "onestep", "mono", "rmono")

_A = "attention."
_TABLE: list[tuple[str, str, str | None, dict[str, Any]]] = [
    # --- Ray Chowdhury & Caragea: baselines
    ("content", "Content", None, {}),
    ("relative", "Relative", "content",
     {_A + "family": "positional"}),
    ("birelative", "Bi-Relative", "relative", {_A + "direction": "mixed"}),
    ("birope", "Bi-ROPE", "birelative", {_A + "positions": "rotary"}),
    # --- location family
    ("locattn", "LocAttn", "content",
     {_A + "family": "location", _A + "reference": "gated", _A + "step": "softstair"}),
    ("locattn_s", "LocAttn S", "locattn", {_A + "reference": "initial"}),
    ("onestep", "OneStepAttn", "locattn",
     {_A + "direction": "mixed", _A + "reference": "previous", _A + "step": "sigmoid"}),
    # MonoAttn as the reference code computes it (gate s = sigmoid(p) on the ReLU term, p = 20:
    # exactly RMonoAttn in float32); this produced the published MonoAttn numbers.
    ("mono", "MonoAttn", "onestep", {_A + "step": "mono", _A + "mono_gate_init": 20.0}),
    ("rmono", "RMonoAttn", "onestep", {_A + "step": "relu"}),
    # --- MonoAttn as the paper's eq. 19 writes it: the gate on the sigmoid term, p = 0 (no value given)
    ("mono_eq19", "MonoAttn (eq. 19)", "mono",
     {_A + "mono_gate_on": "sigmoid", _A + "mono_gate_init": 0.0}),
    # --- OneStep ablations (Table 4)
    ("onestep_no_step2", "-Step 2", "onestep", {_A + "reference": "gated"}),
    ("onestep_no_step3", "-Step 3", "onestep", {_A + "step": "softstair"}),
    ("onestep_no_sigmoid", "-Sigmoid", "onestep", {_A + "step": "raw"}),
]
_LABEL = {key: label for key, label, _, _ in _TABLE}
for _x in LOCATION_FAMILY:
    _TABLE.append((f"mix_{_x}", f"Mix {_LABEL[_x]}", _x, {_A + "mode": "mix"}))
    _TABLE.append((f"mix_{_x}_pr", f"Mix {_LABEL[_x]} PR", f"mix_{_x}", {_A + "pa_from": "location"}))
_DUBOIS = {"encoder": "gru_residual", "source_boundaries": "none"}
_TABLE += [
    # --- Dubois et al.: unidirectional GRU + residual, no START/END
    ("dubois_scaled_dot", "Scaled Dot", "content", dict(_DUBOIS)),
    ("dubois_additive", "Additive", "dubois_scaled_dot", {_A + "content_score": "additive"}),
    ("dubois_multiplicative", "Multiplicative", "dubois_scaled_dot",
     {_A + "content_score": "multiplicative"}),
    ("dubois_transformer", "Transformer", "dubois_scaled_dot",
     {_A + "family": "positional", _A + "positions": "absolute"}),
    ("dubois_transformer_xl", "TransformerXL", "dubois_transformer",
     {_A + "positions": "relative_shared_bias"}),
    ("dubois_location", "Location", "locattn",
     {**_DUBOIS, _A + "controller": "gru", _A + "controller_init": "dubois", _A + "location_norm": "l1"}),
    ("dubois_mix", "Mix", "dubois_location", {_A + "mode": "mix", _A + "mix_temperature": 1.0}),
    # --- Dubois's location attender as his code computes it (locattn.models.attention.dubois_code)
    ("dubois_location_code", "Location (his code)", "dubois_scaled_dot", {_A + "family": "dubois_code"}),
    # --- Raffel & Ellis regressors
    ("ffattn", "Feed-forward attention", None,
     {"kind": "regressor", "hidden_size": 100, _A + "family": "feedforward"}),
    ("mean", "Unweighted mean", "ffattn", {_A + "family": "mean"}),
]

for _key, _label, _parent, _delta in _TABLE:
    registry.register_variant(_key, label=_label, parent=_parent, delta=_delta)


PAPER_LABELS: Mapping[str, str] = registry.View("variant")
"""Variant key -> the name the papers use for it (the only place these names are written);
a live view of the registry, plugins' variants included."""
VARIANT_PARENTS: Mapping[str, str | None] = registry.View("variant", lambda e: e.meta["parent"])
"""Variant key -> parent key (None: derived from ``ModelConfig()``)."""
VARIANT_DELTAS: Mapping[str, Mapping[str, Any]] = registry.View("variant", lambda e: e.meta["delta"])
"""Variant key -> {dotted field: value} it changes relative to its parent."""

_PRESETS: dict[str, ModelConfig] = {}


def _preset(key: str) -> ModelConfig:
    """The preset of a registered variant, built once from its parent and delta."""
    if key not in _PRESETS:
        entry = registry.get("variant", key)
        parent = entry.meta["parent"]
        if parent is not None and not registry.has("variant", parent):
            raise ValueError(f"variant {key!r} (registered by {entry.module!r}): "
                             + registry.unknown_message("variant", parent, "its parent"))
        base = ModelConfig() if parent is None else _preset(parent)
        try:
            _PRESETS[key] = derive(base, entry.meta["delta"])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"variant {key!r} (registered by {entry.module!r}): {exc}") from None
    return _PRESETS[key]


class UnknownVariantError(KeyError, ValueError):
    """An unknown variant key; the message lists the valid keys and a close match."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def list_variants(pattern: str = "*") -> dict[str, str]:
    """{key: paper label} for keys matching the fnmatch ``pattern``: the built-ins in table order,
    then plugins' (:func:`locattn.register_variant`)."""
    return {k: e.label for k, e in registry.entries("variant").items()
            if fnmatch.fnmatchcase(k, pattern)}


def get_variant(key: str) -> ModelConfig:
    """The frozen preset for ``key``; an unknown key raises listing the valid keys."""
    if not isinstance(key, str) or not registry.has("variant", key):
        raise UnknownVariantError(registry.unknown_message("variant", key))
    return _preset(key)


__all__ = [
    "LOCATION_FAMILY",
    "PAPER_LABELS",
    "UnknownVariantError",
    "VARIANT_DELTAS",
    "VARIANT_PARENTS",
    "get_variant",
    "list_variants",
]
