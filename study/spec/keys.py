"""Run identities of a study: cell ids, the canonical hparams JSON and run keys.

A run key is ``sha1(study, cell, hparams, seed)[:16]``; committed records are keyed by it, so
these functions never change their output. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping


def cell_id(axes: Mapping[str, Any]) -> str:
    """``task=copy,variant=onestep[,ablation=x][,path=value]``; task and variant first."""
    parts = []
    for key in ("task", "variant"):
        if key in axes:
            parts.append(f"{key}={axes[key]}")
    for key, value in axes.items():
        if key not in ("task", "variant"):
            parts.append(f"{key}={format_value(value)}")
    return ",".join(parts)


def format_value(value: Any) -> str:
    """A grid value as a cell id writes it (lists and tuples in parentheses)."""
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(format_value(v) for v in value) + ")"
    return str(value)


def hparams_json(hparams: Mapping[str, Any]) -> str:
    """Canonical JSON of selection hyperparameters (the ``locattn.hparams`` tag)."""
    return json.dumps(dict(sorted(hparams.items())), sort_keys=True, default=str)


def run_key(study: str, cell: str, hparams: Mapping[str, Any], seed: int) -> str:
    """Deterministic run identity: sha1(study, cell, hparams, seed)[:16]."""
    blob = json.dumps([study, cell, hparams_json(hparams), int(seed)]).encode()
    return hashlib.sha1(blob).hexdigest()[:16]


# ---------------------------------------------------------------------------- loading
