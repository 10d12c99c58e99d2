"""The JSON Schema of a study spec (``ablations/*.yaml``), generated from the spec parser's own
vocabulary (:mod:`study.spec.checks`: its key tables, choices and limits) and the retention
policies (:mod:`study.spec.retention`), so it cannot drift from what ``study launch`` accepts.

``study schema`` prints it; ``ablations/spec.schema.json`` is its committed copy, which the specs
name in their ``# yaml-language-server: $schema=spec.schema.json`` line so that an editor checks
a spec as it is typed. The schema checks shapes (keys, types, choices, limits); what needs the
registries (task and variant names, dotted config paths) is checked by ``study launch
--dry-run``. Standard library only.
"""

from __future__ import annotations

import json
from typing import Any

from study.spec.retention import KEEP_POLICIES
from study.spec.checks import (COST_KEYS, MAX_INT, MAX_SEED, MAX_SEEDS, MODES, NAME_PATTERN, PROFILE_KEYS,
                               RESOURCE_KEYS, SAMPLERS, SEARCH_KEYS, SPACE_TYPES, TOP_KEYS)

SCHEMA_ID = "spec.schema.json"
_INT = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
_VALUES = {"type": "array", "minItems": 1, "description": "the values of the axis, each listed once"}
_SPACE = {
    "type": "object",
    "properties": {"type": {"enum": list(SPACE_TYPES)}, "low": {"type": "number"},
                   "high": {"type": "number"}, "choices": {"type": "array", "minItems": 1}},
    "required": ["type"],
    "additionalProperties": False,
}
_SEARCH_SHAPES: dict[str, dict[str, Any]] = {
    "space": {"type": "object", "additionalProperties": _SPACE},
    "num_samples": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
    "sampler": {"enum": list(SAMPLERS)},
    "sampler_seed": _INT,
    "metric": {"type": "string"},
    "mode": {"enum": list(MODES)},
}
_ABLATION = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "overrides": {"type": ["object", "null"]}},
    "required": ["name"],
    "additionalProperties": False,
}
#: The shape of each top-level key's value. A key of :data:`study.spec.checks.TOP_KEYS` missing
#: here still gets its description and accepts any value (test_spec_schema.py names it).
SHAPES: dict[str, dict[str, Any]] = {
    "name": {"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$"},
    "description": {"type": "string"},
    "tables": {"type": ["string", "array"],
               "items": {"oneOf": [{"type": "string"},
                                   {"type": "object", "required": ["id", "metric", "splits"]}]}},
    "grid": {"type": "object", "minProperties": 1,
             "properties": {"task": {**_VALUES, "items": {"type": "string"}},
                            "variant": {**_VALUES, "items": {"type": "string"}},
                            "ablation": {**_VALUES, "items": _ABLATION}},
             "additionalProperties": _VALUES},
    "hparams": {"type": "object", "additionalProperties": _VALUES},
    "search": {"type": "object",
               "properties": {k: {**_SEARCH_SHAPES[k], "description": v} for k, v in SEARCH_KEYS.items()},
               "additionalProperties": False},
    "seeds": {"oneOf": [{"type": "integer", "minimum": 1, "maximum": MAX_SEEDS},
                        {"type": "array", "minItems": 1, "maxItems": MAX_SEEDS,
                         "items": {"type": "integer", "minimum": 0, "maximum": MAX_SEED}}]},
    "overrides": {"type": ["object", "null"],
                  "description": "dotted config path -> value, e.g. optim.lr: 3.0e-4"},
    "resources": {"type": "object",
                  "properties": {k: {"type": "number", "minimum": 0} for k in sorted(RESOURCE_KEYS)},
                  "additionalProperties": False},
    "max_concurrent": _INT,
    "max_failures": _INT,
    "pack_seeds": {"type": "boolean"},
    "pack": {"type": "array", "items": {"type": "string"}},
    "profiles": {"type": "object"},
    "default_profile": {"type": "string"},
    "cost": {"type": "object",
             "properties": {k: {"type": "number", "minimum": 0} for k in sorted(COST_KEYS)},
             "additionalProperties": False},
    "keep": {"enum": list(KEEP_POLICIES)},
    "plugins": {"type": ["array", "null"],
                "items": {"type": "string", "pattern": r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"}},
}


def _shape(key: str) -> dict[str, Any]:
    return {**SHAPES.get(key, {}), "description": TOP_KEYS[key]}


def spec_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a spec: a mapping of the top-level keys, whose
    ``profiles`` map names to mappings of the profile keys."""
    profile = {
        "type": "object",
        "properties": {k: _shape(k) if k in TOP_KEYS else {"type": "string"} for k in sorted(PROFILE_KEYS)},
        "additionalProperties": False,
    }
    # a profile's grid narrows or widens the spec's: any axis may be given alone
    profile["properties"]["grid"] = {**profile["properties"]["grid"], "minProperties": 0}
    props = {k: _shape(k) for k in TOP_KEYS}
    props["profiles"] = {**props["profiles"], "type": "object",
                         "propertyNames": {"pattern": f"^{NAME_PATTERN.pattern}$"},
                         "additionalProperties": profile}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "locattn study spec (ablations/*.yaml)",
        "description": "Generated by `study schema` from study/spec/checks.py; do not edit.",
        "type": "object",
        "properties": props,
        "required": ["grid"],
        "additionalProperties": False,
    }


def schema_text() -> str:
    """:func:`spec_schema` as the JSON text ``study schema`` prints (sorted keys, a newline)."""
    return json.dumps(spec_schema(), indent=2, sort_keys=True) + "\n"
