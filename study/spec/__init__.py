"""Study specs: load a YAML file, validate it, apply a profile, expand it into trials.

A spec (``ablations/*.yaml``) declares grid axes, a replicate axis (seeds), optional
Optuna-searched axes, per-profile overrides, resources and concurrency. Everything here is pure
Python + ``locattn`` (no Ray, no MLflow), so specs can be checked before anything starts.

Errors are :class:`SpecError` and always name the file, the key and the valid choices.

The parts live in their own modules, lowest first: :mod:`study.spec.keys` (run identities),
:mod:`study.spec.checks` (keys, limits, :class:`SpecError`), :mod:`study.spec.yaml` (reading the
file), :mod:`study.spec.model` (:class:`StudySpec` and its expansion), :mod:`study.spec.grid`
(cells, search, packing, config checks) and :mod:`study.spec.task_data` (size and task-data checks).
This package's ``__init__`` resolves a spec from them and re-exports their public names.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any, Mapping

from locattn import registry, table_defs
from record import schema as record_schema  # (study.spec.json_schema, the submodule, takes the name schema here)
from study.spec.keys import cell_id, hparams_json, run_key
from study.spec.retention import DEFAULT_KEEP, KEEP_POLICIES
from study.spec.checks import (COST_KEYS, MAX_SEED, MAX_SEEDS, PROFILE_KEYS, RESOURCE_KEYS, SPECIAL_AXES,
                               TOP_KEYS, SpecError, check_int, check_list, check_mapping, check_number,
                               check_study_name, check_unique, did_you_mean, short_repr, spec_error)
from study.spec.task_data import SIZE_LIMITS, check_task_data, require_task_data, size_warnings
from study.spec.canon import canonical, canonical_mapping
from study.spec.grid import (canonical_grid, expand_cells, parse_pack, parse_search, restrict_grid,
                             validate_configs)
# the module, not its names: study.spec.plugins imports study.spec.checks, which runs this package's
# __init__ while study.spec.plugins is still half-loaded when a process imports study.spec.plugins first
from study.spec import plugins as study_plugins
from study.spec.model import Cell, SearchSpec, StudySpec, TrialSpec
from study.spec.yaml import read_yaml
from study.spec.compare import same_spec, spec_changes, widens


__all__ = [
    "SIZE_LIMITS", "Cell", "SearchSpec", "SpecError", "StudySpec", "TrialSpec", "cell_id",
    "check_study_name", "check_task_data", "hparams_json", "load_spec", "parse_only", "read_yaml",
    "require_task_data", "resolve_spec", "run_key", "same_spec", "size_warnings", "spec_changes", "widens",
]


def _merge(base: dict, profile: dict) -> dict:
    """Profile keys replace spec keys; mappings (overrides, resources, search, cost) merge."""
    out = copy.deepcopy(base)
    for key, value in profile.items():
        if key in ("overrides", "resources", "search", "cost", "grid") and isinstance(
            out.get(key), dict
        ) and isinstance(value, dict):
            out[key] = {**out[key], **copy.deepcopy(value)}
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_spec(
    path: str | Path, profile: str | None = None, only: Mapping[str, list] | None = None
) -> StudySpec:
    """Load, validate and resolve a spec file with a profile (default: ``default_profile``),
    importing the plugins its ``plugins:`` names (the user names the file)."""
    path = str(Path(path).resolve())
    raw = read_yaml(path)
    study_plugins.import_named(study_plugins.spec_plugins(raw, path), f"{path}: plugins")
    return resolve_spec(raw, path=path, profile=profile, only=only)


def parse_seeds(text: str | None) -> int | list[int] | None:
    """``--seeds`` -> the spec's ``seeds`` value: ``"10"`` is seeds 0-9, ``"5,6,7"`` those seeds."""
    if text is None:
        return None
    parts = [t.strip() for t in str(text).split(",")]
    if not all(t.isdigit() for t in parts):
        raise SpecError(f"--seeds {text!r}: expected a count n (seeds 0..n-1) or a comma list of "
                        "seeds (e.g. 10, or 5,6,7,8,9)")
    if len(parts) == 1:
        if int(parts[0]) < 1:
            raise SpecError(f"--seeds {text!r}: a count must be >= 1")
        return int(parts[0])
    seeds = [int(t) for t in parts]
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"--seeds {text!r}: a seed is listed twice")
    return seeds


def parse_only(items: list[str]) -> dict[str, list[str]]:
    """``["task=copy,lookup"]`` (from ``--only``) -> ``{"task": ["copy", "lookup"]}``."""
    only: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise SpecError(f"--only {item!r}: expected AXIS=V1,V2 (e.g. task=copy,lookup)")
        only.setdefault(key.strip(), []).extend(v.strip() for v in values.split(",") if v.strip())
    return only


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``["optim.epochs=3", "optim.lr=3e-4"]`` (from ``--set``) -> ``{"optim.epochs": 3, ...}``.

    A value is read as JSON where it is JSON (numbers, ``true``, ``null``, ``[30, 100]``), else
    kept as text, so ``3`` and ``3e-4`` are the numbers a spec would hold, and put in its field's
    canonical form (:mod:`study.spec.canon`: ``--set optim.lr=1`` is 1.0). A key set twice to one
    value is taken once; to two values, refused. The keys and values are validated with the spec
    (:func:`resolve_spec`), as any override is."""
    sets: dict[str, Any] = {}
    given: dict[str, str] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip() or not text.strip():
            raise SpecError(f"--set {item!r}: expected KEY=VALUE with a dotted config key "
                            "(e.g. --set optim.epochs=3)")
        key = key.strip()
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text.strip()
        value = canonical(key, value)
        if key in sets and json.dumps(sets[key], default=str) != json.dumps(value, default=str):
            raise SpecError(f"--set {key}: set twice, to {given[key]} and {text.strip()}; give it once")
        sets[key] = value
        given[key] = text.strip()
    return sets


def apply_sets(raw: Mapping[str, Any], profile: str | None, sets: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with ``sets`` as the last overrides: in the chosen profile's (or the default
    profile's) ``overrides``, which merge over the spec's, else in the spec's own."""
    out = copy.deepcopy(dict(raw))
    if not sets:
        return out
    name = profile or out.get("default_profile")
    profiles = out.get("profiles")
    if isinstance(profiles, Mapping) and isinstance(profiles.get(name), Mapping):
        body = dict(profiles[name])
        body["overrides"] = {**(body.get("overrides") or {}), **sets}
        out["profiles"] = {**profiles, name: body}
    else:
        out["overrides"] = {**(out.get("overrides") or {}), **sets}
    return out


def resolve_spec(
    raw: Mapping[str, Any],
    *,
    path: str,
    profile: str | None = None,
    only: Mapping[str, list] | None = None,
    seeds: int | list[int] | None = None,
) -> StudySpec:
    """Validate a raw spec mapping and apply a profile (and an ``--only`` subset of the grid, and
    ``--seeds`` in place of the profile's seeds). The plugins of its ``plugins:`` key must be
    imported already (:func:`load_spec` and ``study launch`` import them; a resume, only trusted
    ones: :mod:`study.spec.plugins`)."""
    raw = dict(raw)
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        raise spec_error(path, unknown[0], "unknown key", sorted(TOP_KEYS))
    plugins = check_plugins_imported(path, raw)
    profile, merged = apply_profile(path, raw, profile)

    name = merged.get("name", Path(path).stem)
    check_study_name(name, f"{path}: name:")
    description = merged.get("description", "")
    tables = check_tables(path, merged.get("tables", []))

    # every value in its field's canonical form before it is compared, hashed or recorded
    overrides = canonical_mapping(check_mapping(path, "overrides", merged.get("overrides") or {}))
    grid = check_mapping(path, "grid", merged.get("grid") or {})
    hparams = check_mapping(path, "hparams", merged.get("hparams") or {})
    for key in ("task", "variant"):
        if key not in grid:
            raise spec_error(path, f"grid.{key}", "missing axis (a list of values)")
    grid = canonical_grid(path, grid)
    if only:
        grid, only = restrict_grid(path, grid, only)
    table_defs_json = declared_tables(path, merged.get("tables", []), grid)

    cells = expand_cells(path, grid, overrides)
    for key, values in hparams.items():
        check_list(path, f"hparams.{key}", values)
        if key in SPECIAL_AXES:
            raise spec_error(path, f"hparams.{key}", "not a config path; put it under grid")
        canon = [canonical(key, v) for v in values]
        check_unique(path, f"hparams.{key}", [hparams_json({key: v}) for v in canon], values, canon)
        hparams[key] = canon

    seeds = check_seeds(path, merged.get("seeds", 5) if seeds is None else seeds)
    search = parse_search(path, merged.get("search"))
    if search is not None:
        clash = sorted(set(search.space) & (set(hparams) | set(grid)))
        if clash:
            raise spec_error(path, f"search.space.{clash[0]}", "also a grid/hparams axis; choose one")

    cpus, gpus = check_resources(path, merged)
    max_concurrent = check_int(path, "max_concurrent", merged.get("max_concurrent", 0))
    max_failures = check_int(path, "max_failures", merged.get("max_failures", 1))
    pack_seeds = merged.get("pack_seeds", False)
    if not isinstance(pack_seeds, bool):
        raise spec_error(path, "pack_seeds", f"expected true or false, got {pack_seeds!r}")
    pack_seeds, pack_axes, auto_pack = parse_pack(path, merged, hparams, search, gpus, pack_seeds)
    spk = check_cost(path, merged)
    keep = merged.get("keep", DEFAULT_KEEP)
    if keep not in KEEP_POLICIES:
        raise spec_error(path, "keep", f"unknown policy {short_repr(keep)}", list(KEEP_POLICIES))

    # Every trial config must resolve (catches bad dotted paths and bad values early).
    validate_configs(path, cells, hparams, search, pack_seeds=pack_seeds or bool(pack_axes))
    if auto_pack is not None:
        pack_seeds, pack_axes = auto_pack(cells)

    return assemble_spec(
        path, name=name, profile=profile, description=description, tables=tables, grid=grid, only=only,
        hparams=hparams, search_raw=None if search is None else {**merged["search"], "space": search.space},
        search=search, seeds=seeds, overrides=overrides,
        cells=cells, cpus=cpus, gpus=gpus, max_concurrent=max_concurrent, max_failures=max_failures, spk=spk,
        pack_seeds=pack_seeds, keep=keep, pack_axes=pack_axes, plugins=plugins, table_defs=table_defs_json)


def assemble_spec(path: str, *, name: str, profile: str | None, description: Any, tables: list[str],
                  grid: dict[str, Any], only: Mapping[str, list] | None, hparams: dict[str, Any],
                  search_raw: Any, search: Any, seeds: tuple[int, ...], overrides: dict[str, Any],
                  cells: list[Any], cpus: float, gpus: float, max_concurrent: int, max_failures: int,
                  spk: float, pack_seeds: bool, keep: str, pack_axes: Any, plugins: list[str],
                  table_defs: list[dict[str, Any]] | None = None) -> StudySpec:
    """The :class:`StudySpec` of a validated spec's parts, with its ``resolved`` mapping (what
    study.json saves and :func:`same_spec` compares; optional keys only when set, so that a
    study saved before a key existed still matches)."""
    resolved = {
        "name": name,
        "profile": profile,
        "description": description,
        "tables": list(tables),
        "grid": grid,
        "only": {k: list(v) for k, v in (only or {}).items()},
        "hparams": hparams,
        "search": search_raw,
        "seeds": list(seeds),
        "overrides": overrides,
        "resources": {"cpus": cpus, "gpus": gpus},
        "max_concurrent": max_concurrent,
        "max_failures": max_failures,
        "cost": {"seconds_per_1k_examples": spk},
    }
    if pack_seeds:  # only when set: the resolved spec a study saved without the key still matches
        resolved["pack_seeds"] = True
    if keep != DEFAULT_KEEP:  # likewise
        resolved["keep"] = keep
    if pack_axes:
        resolved["pack"] = list(pack_axes)
    if plugins:  # likewise
        resolved["plugins"] = plugins
    if table_defs:  # likewise: the spec's own tables (and plugins'), as the study records them
        resolved["table_defs"] = table_defs
    return StudySpec(
        path=path, name=name, profile=profile or "", description=str(description), tables=tuple(tables),
        cells=tuple(cells), hparams={k: list(v) for k, v in hparams.items()}, seeds=seeds, search=search,
        cpus=cpus, gpus=gpus, max_concurrent=max_concurrent, max_failures=max_failures,
        seconds_per_1k_examples=spk, pack_seeds=pack_seeds, keep=keep, pack_axes=pack_axes,
        table_defs=tuple(table_defs or ()), resolved=json.loads(json.dumps(resolved, default=str)),
    )


def check_plugins_imported(path: str, raw: Mapping[str, Any]) -> list[str]:
    """The spec's ``plugins:`` modules, each of which must be imported already (:class:`SpecError`)."""
    plugins = study_plugins.spec_plugins(raw, path)
    for module in plugins:
        if module not in sys.modules:
            raise SpecError(f"{path}: plugins: {module!r} is not imported (`study launch` imports a "
                            "spec's plugins; `study resume` only installed ones and --plugin's)")
    return plugins


def apply_profile(path: str, raw: Mapping[str, Any], profile: str | None) -> tuple[str | None, dict[str, Any]]:
    """Check the spec's ``profiles:`` and merge the chosen one (``profile``, else
    ``default_profile``, else ``quick`` when there is one) over the spec's other keys; returns
    (profile or None, the merged mapping)."""
    profiles = check_mapping(path, "profiles", raw.get("profiles", {}))
    for pname, pbody in profiles.items():
        check_study_name(pname, f"{path}: profiles:")  # the default study name ends with it
        pbody = check_mapping(path, f"profiles.{pname}", pbody if pbody is not None else {})
        bad = sorted(set(pbody) - PROFILE_KEYS)
        if bad:
            raise spec_error(path, f"profiles.{pname}.{bad[0]}", "unknown profile key", sorted(PROFILE_KEYS))
    if profile is None:
        profile = raw.get("default_profile", "quick" if "quick" in profiles else None)
    if profile is not None and profile not in profiles:
        raise spec_error(path, "profile", f"unknown profile {profile!r}", sorted(profiles))
    base = {k: v for k, v in raw.items() if k not in ("profiles", "default_profile", "plugins")}
    return profile, (_merge(base, profiles[profile] or {}) if profile is not None else base)


def check_tables(path: str, tables: Any) -> list[str]:
    """The ids of the spec's ``tables:``: a table id or a list whose items are registered table
    ids (:mod:`locattn.table_defs`, plugins' included) or the spec's own tables (mappings with
    an ``id``, checked by :func:`declared_tables`)."""
    if isinstance(tables, (str, Mapping)):
        tables = [tables]
    if not isinstance(tables, list) or not all(isinstance(t, (str, Mapping)) for t in tables):
        raise spec_error(path, "tables", f"expected a list of table ids or table mappings, got {tables!r}")
    valid_tables = sorted(registry.entries("table"))
    for table in tables:
        if isinstance(table, str) and table not in valid_tables:
            raise spec_error(path, "tables", f"unknown table {table!r}{did_you_mean(table, valid_tables)}",
                             valid_tables)
    return [t if isinstance(t, str) else str(t.get("id")) for t in tables]


def declared_tables(path: str, tables: Any, grid: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON definitions of the tables the spec names that are not built-ins, recorded with
    the study: its own (``tables:`` mappings, :func:`locattn.table_defs.table_from_spec`;
    rows default to the grid's variants, columns to its tasks) and plugins' registered ones."""
    items = [tables] if isinstance(tables, (str, Mapping)) else list(tables or [])
    variants = [v for v in grid.get("variant", []) if isinstance(v, str)]
    tasks = [t for t in grid.get("task", []) if isinstance(t, str)]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            entry = registry.get("table", item)
            if not entry.builtin and not entry.meta["exhibit"]:
                out.append(table_defs.table_to_dict(table_defs.with_metric_info(entry.load())))
            continue
        try:
            table = table_defs.table_from_spec(item, spec_dir=Path(path).parent, variants=variants,
                                               tasks=tasks, spec_name=Path(path).name)
        except table_defs.TableSpecError as exc:
            raise spec_error(path, f"tables[{i}].{exc.key}".rstrip("."), exc.message, exc.valid) from None
        if any(d["id"] == table.id for d in out):
            raise spec_error(path, f"tables[{i}].id", f"table {table.id!r} is declared twice")
        out.append(table_defs.table_to_dict(table))
    size = len(json.dumps(out, sort_keys=True))
    if size > record_schema.MAX_TABLE_DEFS_CHARS:
        raise spec_error(path, "tables", f"the tables' definitions take {size:,} characters; the "
                         f"record holds at most {record_schema.MAX_TABLE_DEFS_CHARS:,} (fewer rows, "
                         "columns or published numbers)")
    return out


def check_seeds(path: str, seeds_raw: Any) -> tuple[int, ...]:
    """``seeds:`` (or ``--seeds``): a count n (seeds 0..n-1) or a non-empty list of distinct seeds."""
    if isinstance(seeds_raw, int) and not isinstance(seeds_raw, bool):
        return tuple(range(check_int(path, "seeds", seeds_raw, 1, MAX_SEEDS)))
    if isinstance(seeds_raw, list) and seeds_raw:
        if len(seeds_raw) > MAX_SEEDS:
            raise spec_error(path, "seeds", f"{len(seeds_raw):,} seeds; at most {MAX_SEEDS:,}")
        seeds = tuple(check_int(path, "seeds[]", s, 0, MAX_SEED) for s in seeds_raw)
        if len(set(seeds)) != len(seeds):
            raise spec_error(path, "seeds", f"duplicate seeds in {seeds_raw!r}")
        return seeds
    raise spec_error(path, "seeds", f"expected an int n or a non-empty list of ints, got {seeds_raw!r}")


def check_resources(path: str, merged: Mapping[str, Any]) -> tuple[float, float]:
    """``resources:``: (cpus > 0, gpus >= 0) a trial asks for."""
    resources = check_mapping(path, "resources", merged.get("resources") or {})
    bad = sorted(set(resources) - RESOURCE_KEYS)
    if bad:
        raise spec_error(path, f"resources.{bad[0]}", "unknown key", sorted(RESOURCE_KEYS))
    cpus = check_number(path, "resources.cpus", resources.get("cpus", 1), 0.0)
    gpus = check_number(path, "resources.gpus", resources.get("gpus", 0), 0.0)
    if cpus <= 0:
        raise spec_error(path, "resources.cpus", f"expected > 0, got {cpus!r}")
    return cpus, gpus


def check_cost(path: str, merged: Mapping[str, Any]) -> float:
    """``cost:``: seconds per 1,000 training examples (default 1.3)."""
    cost_raw = check_mapping(path, "cost", merged.get("cost") or {})
    bad = sorted(set(cost_raw) - COST_KEYS)
    if bad:
        raise spec_error(path, f"cost.{bad[0]}", "unknown key", sorted(COST_KEYS))
    return check_number(path, "cost.seconds_per_1k_examples", cost_raw.get("seconds_per_1k_examples", 1.3))
