"""A resolved spec against a saved one: the same study (:func:`same_spec`), what changed
(:func:`spec_changes`), or the same study grown by grid values or seeds (:func:`widens`).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from record import schema as record_schema


#: Keys of a resolved spec that change no run: a study relaunched after an edit of these is the
#: same study.
COSMETIC_KEYS = ("description",)


def _current_names(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """``resolved`` without :data:`COSMETIC_KEYS`, with its override keys and search metric under
    their current names (:data:`record.schema.RENAMED_PARAMS`,
    :data:`record.schema.RENAMED_METRICS`). Grid and hparams axes keep theirs: an axis name is
    part of the run keys."""
    out = {k: v for k, v in resolved.items() if k not in COSMETIC_KEYS}
    if isinstance(out.get("overrides"), Mapping):
        out["overrides"] = {record_schema.RENAMED_PARAMS.get(k, k): v for k, v in out["overrides"].items()}
    search = out.get("search")
    if isinstance(search, Mapping) and isinstance(search.get("metric"), str):
        out["search"] = {**search, "metric": record_schema.current_metric(search["metric"])}
    return out


def same_spec(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether resolved specs ``old`` and ``new`` are the same study, also when one names an
    override or the search metric by its former name, or has another description."""
    return _current_names(old) == _current_names(new)


def spec_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between resolved specs ``old`` and ``new`` (as :func:`same_spec` compares
    them), one ``key: old -> new`` per changed field, dotted into nested mappings (``absent``
    for a field one side lacks), in key order."""
    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(d, Mapping) or not d:
            return {prefix: d}
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out

    a, b = flat(_current_names(old)), flat(_current_names(new))
    missing = object()

    def text(d: dict[str, Any], k: str) -> str:
        return "absent" if k not in d else repr(d[k])

    return [f"{k}: {text(a, k)} -> {text(b, k)}"
            for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]


def widens(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether resolved spec ``new`` is ``old`` with more grid values or more seeds and nothing
    else changed: the same spec and profile launched with a wider (or no) ``--only`` or more
    ``--seeds``. Every run of ``old`` is then a run of ``new``, so a study can grow without
    rerunning what it finished. Search specs never widen (their samplers' histories belong to
    the old cells), and a spec that packs its seeds into one trial never grows its seeds (the
    grown trial would train its finished seeds again)."""
    old, new = _current_names(old), _current_names(new)
    if old == new or new.get("search") is not None:
        return False
    if not set(old.get("seeds") or []) <= set(new.get("seeds") or []):
        return False
    if old.get("seeds") != new.get("seeds") and packs_seeds(new):
        return False
    rest = {"grid", "only", "seeds"}
    if {k: v for k, v in old.items() if k not in rest} != {k: v for k, v in new.items() if k not in rest}:
        return False
    old_grid, new_grid = old.get("grid") or {}, new.get("grid") or {}
    if set(old_grid) != set(new_grid):
        return False

    def texts(values: Any) -> set[str]:
        return {json.dumps(v, sort_keys=True) for v in values}

    return all(texts(old_grid[axis]) <= texts(new_grid[axis]) for axis in old_grid)


def packs_seeds(resolved: Mapping[str, Any]) -> bool:
    """Whether a resolved spec trains each cell's seeds together, as one packed trial."""
    return bool(resolved.get("pack_seeds")) or "seeds" in (resolved.get("pack") or [])
