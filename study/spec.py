"""Study specs: load a YAML file, validate it, apply a profile, expand it into trials.

A spec (``ablations/*.yaml``) declares grid axes, a replicate axis (seeds), optional
Optuna-searched axes, per-profile overrides, resources and concurrency. Everything here is pure
Python + ``locattn`` (no Ray, no MLflow), so specs can be checked before anything starts.

Errors are :class:`SpecError` and always name the file, the key and the valid choices.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from record import schema
from study import cost
from study.retention import DEFAULT_KEEP, KEEP_POLICIES

TOP_KEYS = {
    "name": "default study name (str)",
    "description": "free text (str)",
    "tables": "report tables the study regenerates (list of str)",
    "grid": "grid axes: task, variant, ablation, or any dotted config path -> list of values",
    "hparams": "per-cell selection hyperparameters (dotted path -> list), chosen later by dev",
    "search": "Optuna-searched axes (mapping)",
    "seeds": "replicate axis: an int n (seeds 0..n-1) or a list of ints",
    "overrides": "fixed dotted config overrides for every trial (mapping)",
    "resources": "per-trial resources: cpus, gpus (mapping)",
    "max_concurrent": "maximum trials running at once (int, 0 = as many as resources allow)",
    "max_failures": "retries of a failed trial before it is recorded as failed (int)",
    "pack_seeds": "train the seeds of a cell (and hparams point) in one trial as one packed model (bool)",
    "pack": "axes trained together in one trial as one packed model: seeds and/or hparams axes "
            "such as optim.lr (list; default with resources.gpus > 0: seeds and every packable "
            "hparams axis)",
    "profiles": "named profiles (smoke, quick, paper, ...) of overrides to the keys above",
    "default_profile": "profile used when --profile is not given (str)",
    "cost": "cost model for --dry-run: seconds_per_1k_examples (float)",
    "keep": "what a finished run keeps on disk: model (default), results, all (study.retention)",
}
PROFILE_KEYS = {
    "overrides",
    "seeds",
    "grid",
    "hparams",
    "search",
    "resources",
    "max_concurrent",
    "max_failures",
    "pack_seeds",
    "pack",
    "cost",
    "description",
    "keep",
}
SEARCH_KEYS = {
    "space": "dotted path -> {type: loguniform|uniform|int|categorical, low, high | choices}",
    "num_samples": "search points per cell (int)",
    "sampler": "tpe | random | gp (str)",
    "sampler_seed": "seed of the sampler (int)",
    "metric": "per-seed final metric aggregated (median over seeds) for the sampler (str)",
    "mode": "max | min",
}
SPACE_TYPES = ("loguniform", "uniform", "int", "categorical")
SAMPLERS = ("tpe", "random", "gp")
RESOURCE_KEYS = {"cpus", "gpus"}
COST_KEYS = {"seconds_per_1k_examples"}
SPECIAL_AXES = ("task", "variant", "ablation")
PROFILES_REQUIRED = ("smoke", "quick", "paper")
#: A study name (``--name``, a spec's ``name``, ``<name>-<profile>``) is one directory under
#: the root: no separators, no '..', no leading dot, nothing a URI would read as syntax.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Deepest nesting a spec may have; PyYAML composes recursively, so deeper input would end in a
#: RecursionError (the shipped specs nest 5 levels).
MAX_YAML_DEPTH = 50
#: Most seeds a spec may list or count (``seeds: n``), and the largest seed value (numpy's seeds
#: are 32-bit).
MAX_SEEDS = 10_000_000
MAX_SEED = 2**32 - 1
#: Largest integer any spec field or override may hold (a C ``int64``: torch, Ray and SQLite).
MAX_INT = 2**63 - 1


class SpecError(ValueError):
    """An invalid study spec; the message names the file, the key and the valid choices."""


def check_study_name(name: Any, where: str) -> None:
    """Refuse a study name that is not one plain directory name (it would write outside the
    root, or be read as URI syntax); ``where`` names its source (``--name``, ``<file>: name``)."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise SpecError(f"{where} {name!r}: a study name is one directory under --root, made of "
                        "letters, digits, '.', '_' and '-' (no '/', no '..', not starting with '.')")


@dataclass(frozen=True, kw_only=True)
class SearchSpec:
    """Optuna-searched axes of a spec."""

    space: dict[str, dict[str, Any]]
    """Dotted config path -> distribution (``type``, ``low``/``high`` or ``choices``)."""
    num_samples: int
    """Search points (Tune trials) per cell; each trains every seed."""
    sampler: str = "tpe"
    """Optuna sampler name."""
    sampler_seed: int = 0
    """Seed of the sampler, so a study's search points are reproducible."""
    metric: str = "best_dev_score"
    """Per-seed final metric; its median over all seeds is what the sampler sees."""
    mode: str = "max"
    """``max`` or ``min``."""


@dataclass(frozen=True, kw_only=True)
class TrialSpec:
    """One Tune trial of a grid study: a (cell, hparams, seed) point."""

    cell: str
    """Cell id, e.g. ``task=copy,variant=onestep``."""
    task: str
    """Task key."""
    variant: str
    """Variant key."""
    overrides: dict[str, Any]
    """Dotted config overrides: fixed + cell axes + hparams (profile applied)."""
    hparams: dict[str, Any]
    """Per-cell selection hyperparameters (a subset of ``overrides``)."""
    seeds: tuple[int, ...]
    """Seeds this trial trains (one for grid studies, all for a search point or a packed trial)."""
    points: tuple[dict[str, Any], ...] = ()
    """Every hparams point this trial trains when hparams axes are packed (``pack``), each with
    every seed; empty for one point (``hparams``)."""


@dataclass(frozen=True, kw_only=True)
class Cell:
    """A grid point without seeds and without selection hyperparameters."""

    cell: str
    """Cell id."""
    task: str
    """Task key."""
    variant: str
    """Variant key."""
    overrides: dict[str, Any]
    """Fixed overrides plus this cell's axis values."""


@dataclass(frozen=True, kw_only=True)
class StudySpec:
    """A validated spec with its profile applied."""

    path: str
    """Absolute path of the YAML file."""
    name: str
    """Default study name."""
    profile: str
    """Profile applied."""
    description: str
    """Free text."""
    tables: tuple[str, ...]
    """Report tables regenerated by this study."""
    cells: tuple[Cell, ...]
    """Expanded cells, in grid order."""
    hparams: dict[str, list[Any]]
    """Grid selection hyperparameters."""
    seeds: tuple[int, ...]
    """Replicate axis."""
    search: SearchSpec | None
    """Optuna search, or None for a pure grid."""
    cpus: float
    """CPUs per trial."""
    gpus: float
    """GPUs per trial (fractional allowed)."""
    max_concurrent: int
    """Maximum concurrent trials (0 = resources decide)."""
    max_failures: int
    """Retries per trial."""
    seconds_per_1k_examples: float
    """Cost model for the dry-run estimate."""
    pack_seeds: bool = False
    """Train all seeds of a (cell, hparams) point in one trial as one packed model
    (``locattn.packed.train_packed``); each seed still gets its own run and MLflow record."""
    keep: str = DEFAULT_KEEP
    """What a finished run keeps on disk (:data:`study.retention.KEEP_POLICIES`)."""
    pack_axes: tuple[str, ...] = ()
    """Hparams axes whose points one trial trains together as one packed model (``pack``)."""
    resolved: dict[str, Any] = field(default_factory=dict)
    """The resolved spec (profile applied) as saved in the study directory."""

    # ------------------------------------------------------------------ expansion

    def hparam_points(self) -> list[dict[str, Any]]:
        """Cartesian product of the grid hparams (a single empty point when none)."""
        keys = list(self.hparams)
        return [dict(zip(keys, vals)) for vals in itertools.product(*self.hparams.values())]

    @property
    def packed(self) -> bool:
        """Whether trials train several runs together as one packed model."""
        return self.pack_seeds or bool(self.pack_axes)

    def point_groups(self) -> list[list[dict[str, Any]]]:
        """The hparams points, grouped into the points one trial trains together (``pack_axes``
        packed; the other axes in grid order); one point per group without packed axes."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for hp in self.hparam_points():
            rest = {k: v for k, v in hp.items() if k not in self.pack_axes}
            groups.setdefault(json.dumps(rest, sort_keys=True, default=str), []).append(hp)
        return list(groups.values())

    def grid_trials(self) -> list[TrialSpec]:
        """One trial per (cell, hparams point, seed), in a stable order; with ``pack_seeds``
        one trial per (cell, hparams point) that trains every seed, and with ``pack_axes`` one
        trial trains every point of its group (:meth:`point_groups`)."""
        groups = [self.seeds] if self.pack_seeds else [(seed,) for seed in self.seeds]
        out = []
        for cell in self.cells:
            for points in self.point_groups():
                hp = points[0]
                for seeds in groups:
                    out.append(
                        TrialSpec(
                            cell=cell.cell,
                            task=cell.task,
                            variant=cell.variant,
                            overrides={**cell.overrides, **hp},
                            hparams=hp,
                            seeds=seeds,
                            points=tuple(points) if len(points) > 1 else (),
                        )
                    )
        return out

    def n_trials(self) -> int:
        """Tune trials the study runs."""
        if self.search is not None:
            return len(self.cells) * len(self.hparam_points()) * self.search.num_samples
        per_point = 1 if self.pack_seeds else len(self.seeds)
        return len(self.cells) * len(self.point_groups()) * per_point

    def n_runs(self) -> int:
        """MLflow trial runs the study produces (one per seed and hparams point of each trial)."""
        if self.search is not None:
            return self.n_trials() * len(self.seeds)
        return len(self.cells) * len(self.hparam_points()) * len(self.seeds)

    def plan(self) -> str:
        """Human-readable plan: cells, trials and an estimated cost."""
        from locattn.config import make_run_config

        lines = [
            f"spec     {self.path} (profile {self.profile})",
            f"cells    {len(self.cells)}",
        ]
        for cell in self.cells[:20]:
            lines.append(f"  - {cell.cell}")
        if len(self.cells) > 20:
            lines.append(f"  ... {len(self.cells) - 20} more")
        if self.hparams:
            lines.append(f"hparams  {json.dumps(self.hparams)} (selected per cell by dev)")
        lines.append(f"seeds    {list(self.seeds)}" + (" (packed: one trial trains them together)"
                                                        if self.pack_seeds else ""))
        if self.pack_axes:
            lines.append(f"pack     {list(self.pack_axes)}: one trial trains every point of these axes "
                         "together as one packed model")
        if self.search:
            lines.append(
                f"search   optuna {self.search.sampler}: {self.search.num_samples} points/cell over "
                f"{sorted(self.search.space)}; sampler sees median {self.search.metric} "
                f"({self.search.mode}) over all {len(self.seeds)} seeds"
            )
        lines.append(f"trials   {self.n_trials()} Tune trials, {self.n_runs()} MLflow runs")
        max_epochs = max(make_run_config(task=c.task, variant=c.variant, overrides=c.overrides).optim.epochs
                         for c in self.cells)
        slots = self.max_concurrent or max(1, int((os.cpu_count() or 1) // max(self.cpus, 1e-9)))
        lines.append(
            f"budget   up to {max_epochs} epochs per run; {self.cpus:g} CPU, {self.gpus:g} GPU per trial;"
            f" max concurrent {self.max_concurrent or 'auto'}; retries {self.max_failures}"
        )
        lines.extend(cost.plan_lines(self, slots))
        return "\n".join(lines)


# ---------------------------------------------------------------------------- identities


def cell_id(axes: Mapping[str, Any]) -> str:
    """``task=copy,variant=onestep[,ablation=x][,path=value]``; task and variant first."""
    parts = []
    for key in ("task", "variant"):
        if key in axes:
            parts.append(f"{key}={axes[key]}")
    for key, value in axes.items():
        if key not in ("task", "variant"):
            parts.append(f"{key}={_fmt(value)}")
    return ",".join(parts)


def _fmt(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_fmt(v) for v in value) + ")"
    return str(value)


def hparams_json(hparams: Mapping[str, Any]) -> str:
    """Canonical JSON of selection hyperparameters (the ``locattn.hparams`` tag)."""
    return json.dumps(dict(sorted(hparams.items())), sort_keys=True, default=str)


def run_key(study: str, cell: str, hparams: Mapping[str, Any], seed: int) -> str:
    """Deterministic run identity: sha1(study, cell, hparams, seed)[:16]."""
    blob = json.dumps([study, cell, hparams_json(hparams), int(seed)]).encode()
    return hashlib.sha1(blob).hexdigest()[:16]


# ---------------------------------------------------------------------------- loading


def _err(path: str, key: str, msg: str, valid: Any = None) -> SpecError:
    text = f"{path}: {key}: {msg}"
    if valid is not None:
        text += f"; valid: {valid}"
    return SpecError(text)


def _check_mapping(path: str, key: str, value: Any) -> dict:
    if not isinstance(value, Mapping):
        raise _err(path, key, f"expected a mapping, got {type(value).__name__} {value!r}")
    return dict(value)


def _check_list(path: str, key: str, value: Any) -> list:
    if not isinstance(value, list):
        raise _err(path, key, f"expected a list, got {type(value).__name__} {value!r}")
    if not value:
        raise _err(path, key, "empty list: the grid would have no trials")
    return value


def _check_int(path: str, key: str, value: Any, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise _err(path, key, f"expected an integer from {minimum} to {maximum:,}, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    """``repr`` cut to 80 characters, so a huge value stays a one-line message."""
    if isinstance(value, int) and value.bit_length() > 64:  # str() of a huge int is slow or refused
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_number(path: str, key: str, value: Any, minimum: float = 0.0) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > MAX_INT
            or not math.isfinite(value) or value < minimum):
        raise _err(path, key, f"expected a finite number >= {minimum}, got {_short(value)}")
    return float(value)


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


def _spec_loader() -> type:
    """A safe YAML loader for specs. It refuses a mapping with the same key twice (PyYAML keeps
    the last), aliases (``*name``: a few lines of them expand to gigabytes) and nesting deeper
    than :data:`MAX_YAML_DEPTH` (PyYAML composes recursively)."""
    import yaml

    class SpecLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent):
                raise SpecError(f"line {line}: YAML alias *{event.anchor}: a spec may not use "
                                "aliases; write the value out")
            if self.depth >= MAX_YAML_DEPTH:
                raise SpecError(f"line {line}: nested deeper than {MAX_YAML_DEPTH} levels")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise SpecError(
                    f"duplicate key {key!r} (lines {seen[key]} and {key_node.start_mark.line + 1}); "
                    "YAML would silently keep the last value: keep one")
            seen[key] = key_node.start_mark.line + 1
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    SpecLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return SpecLoader


def read_yaml(path: str | Path) -> dict:
    """Read a spec file; a missing, binary or unreadable file, bad YAML or a duplicate key is a
    :class:`SpecError`."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{path}: no such spec file")
    try:
        blob = p.read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the spec file ({exc.strerror or exc})") from None
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not a text (UTF-8) YAML file: undecodable byte at offset "
                        f"{exc.start}") from None
    if "\x00" in text:
        raise SpecError(f"{path}: not a text YAML file (it contains NUL bytes)")
    try:
        data = yaml.load(text, Loader=_spec_loader())  # noqa: S506 - a SafeLoader subclass
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to read") from None
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())
        raise SpecError(f"{path}: not valid YAML: {first}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a spec is a mapping of keys {sorted(TOP_KEYS)}")
    return data


def load_spec(
    path: str | Path, profile: str | None = None, only: Mapping[str, list] | None = None
) -> StudySpec:
    """Load, validate and resolve a spec file with a profile (default: ``default_profile``)."""
    path = str(Path(path).resolve())
    return resolve_spec(read_yaml(path), path=path, profile=profile, only=only)


def parse_only(items: list[str]) -> dict[str, list[str]]:
    """``["task=copy,lookup"]`` (from ``--only``) -> ``{"task": ["copy", "lookup"]}``."""
    only: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise SpecError(f"--only {item!r}: expected AXIS=V1,V2 (e.g. task=copy,lookup)")
        only.setdefault(key.strip(), []).extend(v.strip() for v in values.split(",") if v.strip())
    return only


def widens(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether resolved spec ``new`` is ``old`` with more grid values and nothing else changed:
    the same spec and profile launched with a wider (or no) ``--only``. Every trial of ``old``
    is then a trial of ``new``, so a study can grow without rerunning what it finished. Search
    specs never widen (their samplers' histories belong to the old cells)."""
    if old == new or new.get("search") is not None:
        return False
    rest = {"grid", "only"}
    if {k: v for k, v in old.items() if k not in rest} != {k: v for k, v in new.items() if k not in rest}:
        return False
    old_grid, new_grid = old.get("grid") or {}, new.get("grid") or {}
    if set(old_grid) != set(new_grid):
        return False

    def texts(values: Any) -> set[str]:
        return {json.dumps(v, sort_keys=True) for v in values}

    return all(texts(old_grid[axis]) <= texts(new_grid[axis]) for axis in old_grid)


def _restrict_grid(path: str, grid: dict, only: Mapping[str, list]) -> dict:
    """Keep only the listed values of grid axes (``--only``); each must be one of the axis's."""
    grid = dict(grid)
    for key, wanted in only.items():
        if key not in grid:
            raise _err(path, f"--only {key}", "not a grid axis of this spec/profile", sorted(grid))
        values = _check_list(path, f"grid.{key}", grid[key])
        by_text = {str(v): v for v in values}
        missing = [w for w in wanted if str(w) not in by_text]
        if missing:
            raise _err(path, f"--only {key}", f"{missing[0]!r} is not a value of grid.{key}",
                       [str(v) for v in values])
        keep = {str(w) for w in wanted}
        grid[key] = [v for v in values if str(v) in keep]
    return grid


def resolve_spec(
    raw: Mapping[str, Any],
    *,
    path: str,
    profile: str | None = None,
    only: Mapping[str, list] | None = None,
) -> StudySpec:
    """Validate a raw spec mapping and apply a profile (and an ``--only`` subset of the grid)."""
    raw = dict(raw)
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        raise _err(path, unknown[0], "unknown key", sorted(TOP_KEYS))
    profiles = _check_mapping(path, "profiles", raw.get("profiles", {}))
    for pname, pbody in profiles.items():
        check_study_name(pname, f"{path}: profiles:")  # the default study name ends with it
        pbody = _check_mapping(path, f"profiles.{pname}", pbody if pbody is not None else {})
        bad = sorted(set(pbody) - PROFILE_KEYS)
        if bad:
            raise _err(path, f"profiles.{pname}.{bad[0]}", "unknown profile key", sorted(PROFILE_KEYS))
    if profile is None:
        profile = raw.get("default_profile", "quick" if "quick" in profiles else None)
    if profile is not None and profile not in profiles:
        raise _err(path, "profile", f"unknown profile {profile!r}", sorted(profiles))
    base = {k: v for k, v in raw.items() if k not in ("profiles", "default_profile")}
    merged = _merge(base, profiles[profile] or {}) if profile is not None else base

    name = merged.get("name", Path(path).stem)
    check_study_name(name, f"{path}: name:")
    description = merged.get("description", "")
    tables = merged.get("tables", [])
    if isinstance(tables, str):
        tables = [tables]
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        raise _err(path, "tables", f"expected a list of table ids, got {tables!r}")
    valid_tables = sorted(schema.TABLE_IDS)
    for table in tables:
        if table not in valid_tables:
            raise _err(path, "tables", f"unknown table {table!r}", valid_tables)

    overrides = _check_mapping(path, "overrides", merged.get("overrides") or {})
    grid = _check_mapping(path, "grid", merged.get("grid") or {})
    hparams = _check_mapping(path, "hparams", merged.get("hparams") or {})
    for key in ("task", "variant"):
        if key not in grid:
            raise _err(path, f"grid.{key}", "missing axis (a list of values)")
    if only:
        grid = _restrict_grid(path, grid, only)

    cells = _expand_cells(path, grid, overrides)
    for key, values in hparams.items():
        _check_list(path, f"hparams.{key}", values)
        if key in SPECIAL_AXES:
            raise _err(path, f"hparams.{key}", "not a config path; put it under grid")
        _check_unique(path, f"hparams.{key}", [hparams_json({key: v}) for v in values], values)

    seeds_raw = merged.get("seeds", 5)
    if isinstance(seeds_raw, int) and not isinstance(seeds_raw, bool):
        seeds = tuple(range(_check_int(path, "seeds", seeds_raw, 1, MAX_SEEDS)))
    elif isinstance(seeds_raw, list) and seeds_raw:
        if len(seeds_raw) > MAX_SEEDS:
            raise _err(path, "seeds", f"{len(seeds_raw):,} seeds; at most {MAX_SEEDS:,}")
        seeds = tuple(_check_int(path, "seeds[]", s, 0, MAX_SEED) for s in seeds_raw)
        if len(set(seeds)) != len(seeds):
            raise _err(path, "seeds", f"duplicate seeds in {seeds_raw!r}")
    else:
        raise _err(path, "seeds", f"expected an int n or a non-empty list of ints, got {seeds_raw!r}")

    search = _parse_search(path, merged.get("search"))
    if search is not None:
        clash = sorted(set(search.space) & (set(hparams) | set(grid)))
        if clash:
            raise _err(path, f"search.space.{clash[0]}", "also a grid/hparams axis; choose one")

    resources = _check_mapping(path, "resources", merged.get("resources") or {})
    bad = sorted(set(resources) - RESOURCE_KEYS)
    if bad:
        raise _err(path, f"resources.{bad[0]}", "unknown key", sorted(RESOURCE_KEYS))
    cpus = _check_number(path, "resources.cpus", resources.get("cpus", 1), 0.0)
    gpus = _check_number(path, "resources.gpus", resources.get("gpus", 0), 0.0)
    if cpus <= 0:
        raise _err(path, "resources.cpus", f"expected > 0, got {cpus!r}")
    max_concurrent = _check_int(path, "max_concurrent", merged.get("max_concurrent", 0))
    max_failures = _check_int(path, "max_failures", merged.get("max_failures", 1))
    pack_seeds = merged.get("pack_seeds", False)
    if not isinstance(pack_seeds, bool):
        raise _err(path, "pack_seeds", f"expected true or false, got {pack_seeds!r}")
    pack_seeds, pack_axes, auto_pack = _parse_pack(path, merged, hparams, search, gpus, pack_seeds)
    cost_raw = _check_mapping(path, "cost", merged.get("cost") or {})
    bad = sorted(set(cost_raw) - COST_KEYS)
    if bad:
        raise _err(path, f"cost.{bad[0]}", "unknown key", sorted(COST_KEYS))
    spk = _check_number(path, "cost.seconds_per_1k_examples", cost_raw.get("seconds_per_1k_examples", 1.3))
    keep = merged.get("keep", DEFAULT_KEEP)
    if keep not in KEEP_POLICIES:
        raise _err(path, "keep", f"unknown policy {_short(keep)}", list(KEEP_POLICIES))

    # Every trial config must resolve (catches bad dotted paths and bad values early).
    _validate_configs(path, cells, hparams, search, pack_seeds=pack_seeds or bool(pack_axes))
    if auto_pack is not None:
        pack_seeds, pack_axes = auto_pack(cells)

    resolved = {
        "name": name,
        "profile": profile,
        "description": description,
        "tables": list(tables),
        "grid": grid,
        "only": {k: list(v) for k, v in (only or {}).items()},
        "hparams": hparams,
        "search": merged.get("search"),
        "seeds": list(seeds),
        "overrides": overrides,
        "resources": {"cpus": cpus, "gpus": gpus},
        "max_concurrent": max_concurrent,
        "max_failures": max_failures,
        "cost": {"seconds_per_1k_examples": spk},
    }
    if pack_seeds:  # only when set, so studies recorded before the key existed still match
        resolved["pack_seeds"] = True
    if keep != DEFAULT_KEEP:  # likewise
        resolved["keep"] = keep
    if pack_axes:
        resolved["pack"] = list(pack_axes)
    return StudySpec(
        path=path,
        name=name,
        profile=profile or "",
        description=str(description),
        tables=tuple(tables),
        cells=tuple(cells),
        hparams={k: list(v) for k, v in hparams.items()},
        seeds=seeds,
        search=search,
        cpus=cpus,
        gpus=gpus,
        max_concurrent=max_concurrent,
        max_failures=max_failures,
        seconds_per_1k_examples=spk,
        pack_seeds=pack_seeds,
        keep=keep,
        pack_axes=pack_axes,
        resolved=json.loads(json.dumps(resolved, default=str)),
    )


def _parse_pack(path: str, merged: Mapping[str, Any], hparams: dict, search: Any, gpus: float,
                pack_seeds: bool) -> tuple[bool, tuple[str, ...], Any]:
    """(pack seeds, packed hparams axes, auto) from ``pack`` and ``pack_seeds``.

    ``pack`` lists ``seeds`` and/or hparams axes that :data:`locattn.packed.PACKABLE_FIELDS`
    allows to differ inside a pack; ``pack_seeds: true`` is the older spelling of
    ``pack: [seeds]``. Without either, a spec whose trials get a GPU packs on its own: ``auto``
    is then a function of the cells returning what to pack (seeds and every packable hparams
    axis, or nothing when a cell's model cannot be packed); else ``auto`` is None.
    """
    from locattn.packed import PACKABLE_FIELDS

    raw = merged.get("pack")
    valid = ["seeds", *[k for k in hparams if k in PACKABLE_FIELDS]]
    if raw is None:
        if "pack_seeds" in merged or gpus <= 0:
            return pack_seeds, (), None
        axes = tuple(k for k in hparams if k in PACKABLE_FIELDS) if search is None else ()

        def auto(cells: list[Cell]) -> tuple[bool, tuple[str, ...]]:
            from locattn.config import make_run_config

            try:
                for cell in cells:
                    _check_packable(path, cell, make_run_config(task=cell.task, variant=cell.variant,
                                                                overrides=cell.overrides))
            except SpecError:
                return False, ()
            return True, axes

        return pack_seeds, (), auto
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise _err(path, "pack", f"expected a list of axes, got {raw!r}", valid)
    for axis in raw:
        if axis not in valid:
            why = ("not an hparams axis of this spec/profile" if axis not in hparams
                   else "a field packed runs may not differ in")
            raise _err(path, "pack", f"{axis!r}: {why}", valid)
    if "pack_seeds" in merged and merged["pack_seeds"] != ("seeds" in raw):
        raise _err(path, "pack_seeds", f"{merged['pack_seeds']!r} contradicts pack: {raw!r}; keep one")
    axes = tuple(a for a in raw if a != "seeds")
    if axes and search is not None:
        raise _err(path, "pack", f"{axes[0]!r}: hparams axes pack only in grid studies (search "
                   "points are sampled one trial at a time); pack: [seeds] packs a point's seeds")
    return "seeds" in raw, axes, None


def _expand_cells(path: str, grid: dict, overrides: dict) -> list[Cell]:
    import locattn
    from locattn.tasks import TASK_DEFAULTS, list_tasks

    axes: dict[str, list] = {}
    for key, values in grid.items():
        values = _check_list(path, f"grid.{key}", values)
        if key == "task":
            valid = sorted(list_tasks())
            for v in values:
                if v not in valid:
                    raise _err(path, "grid.task", f"unknown task {v!r}", valid)
        elif key == "variant":
            valid = sorted(locattn.list_variants())
            for v in values:
                if v not in valid:
                    raise _err(path, "grid.variant", f"unknown variant {v!r}", valid)
        elif key == "ablation":
            for i, v in enumerate(values):
                if not isinstance(v, Mapping) or set(v) - {"name", "overrides"} or "name" not in v:
                    raise _err(
                        path,
                        f"grid.ablation[{i}]",
                        f"expected {{name: str, overrides: {{dotted.path: value}}}}, got {v!r}",
                    )
                _check_mapping(path, f"grid.ablation[{i}].overrides", v.get("overrides") or {})
            names = [v["name"] for v in values]
            if len(set(names)) != len(names):
                raise _err(path, "grid.ablation", f"duplicate ablation names {names}")
        if key != "ablation":  # two equal values would be one cell, run once and counted twice
            _check_unique(path, f"grid.{key}", [_fmt(v) for v in values], values)
        axes[key] = values
    cells = []
    keys = list(axes)
    for combo in itertools.product(*axes.values()):
        point = dict(zip(keys, combo))
        # Task defaults (e.g. SCAN's dev size) first, then the spec's fixed overrides.
        cell_overrides = {**TASK_DEFAULTS.get(point["task"], {}), **overrides}
        label: dict[str, Any] = {}
        for key, value in point.items():
            if key == "ablation":
                cell_overrides.update(value.get("overrides") or {})
                label["ablation"] = value["name"]
            elif key in ("task", "variant"):
                label[key] = value
            else:
                cell_overrides[key] = value
                label[key] = value
        cells.append(
            Cell(
                cell=cell_id(label),
                task=point["task"],
                variant=point["variant"],
                overrides=cell_overrides,
            )
        )
    if not cells:
        raise _err(path, "grid", "empty grid: no cells")
    return cells


def _check_unique(path: str, key: str, texts: list[str], values: list) -> None:
    """Refuse an axis listing one value twice (as its cell id or run key would print it)."""
    dup = next((v for i, v in enumerate(values) if texts[i] in texts[:i]), None)
    if len(set(texts)) != len(texts):
        raise _err(path, key, f"{_short(dup)} is listed twice in {_short(values)}: both would be "
                              "the same runs; list each value once")


def _parse_search(path: str, raw: Any) -> SearchSpec | None:
    if raw is None:
        return None
    raw = _check_mapping(path, "search", raw)
    bad = sorted(set(raw) - set(SEARCH_KEYS))
    if bad:
        raise _err(path, f"search.{bad[0]}", "unknown key", sorted(SEARCH_KEYS))
    space = _check_mapping(path, "search.space", raw.get("space") or {})
    if not space:
        raise _err(path, "search.space", "empty search space")
    for key, dist in space.items():
        where = f"search.space.{key}"
        dist = _check_mapping(path, where, dist)
        kind = dist.get("type")
        if kind not in SPACE_TYPES:
            raise _err(path, f"{where}.type", f"unknown distribution {kind!r}", list(SPACE_TYPES))
        if kind == "categorical":
            _check_list(path, f"{where}.choices", dist.get("choices"))
        else:
            low, high = dist.get("low"), dist.get("high")
            for k, v in (("low", low), ("high", high)):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise _err(path, f"{where}.{k}", f"expected a number, got {v!r}")
            if not low < high or (kind == "loguniform" and low <= 0):
                raise _err(path, where, f"need 0 < low < high for {kind}, got low={low}, high={high}")
    num_samples = _check_int(path, "search.num_samples", raw.get("num_samples", 8), 1, 1_000_000)
    sampler = raw.get("sampler", "tpe")
    if sampler not in SAMPLERS:
        raise _err(path, "search.sampler", f"unknown sampler {sampler!r}", list(SAMPLERS))
    mode = raw.get("mode", "max")
    if mode not in ("max", "min"):
        raise _err(path, "search.mode", f"unknown mode {mode!r}", ["max", "min"])
    metric = raw.get("metric", "best_dev_score")
    from record import schema

    valid_metrics = sorted(set(schema.FINAL_METRICS) | set(schema.EPOCH_METRICS))
    if not isinstance(metric, str) or (metric not in valid_metrics and not metric.startswith("test.")):
        raise _err(path, "search.metric", f"unknown metric {metric!r}", valid_metrics)
    return SearchSpec(
        space={k: dict(v) for k, v in space.items()},
        num_samples=num_samples,
        sampler=sampler,
        sampler_seed=_check_int(path, "search.sampler_seed", raw.get("sampler_seed", 0)),
        metric=metric,
        mode=mode,
    )


def _validate_configs(
    path: str, cells: list[Cell], hparams: dict, search: SearchSpec | None, *, pack_seeds: bool = False
) -> None:
    from locattn.config import make_run_config

    points = [dict(zip(hparams, v)) for v in itertools.product(*hparams.values())] or [{}]
    if search is not None:
        probe = {}
        for key, dist in search.space.items():
            probe[key] = dist["choices"][0] if dist["type"] == "categorical" else dist["low"]
        points = [{**p, **probe} for p in points]
    seen: set[tuple] = set()
    for cell in cells:
        for point in points:
            sig = (cell.task, cell.variant, json.dumps(point, sort_keys=True, default=str))
            overrides = {**cell.overrides, **point}
            try:
                cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=overrides)
            except (ValueError, KeyError, TypeError) as exc:
                raise SpecError(f"{path}: cell {cell.cell}: {exc}") from None
            _check_values(path, cell, overrides, cfg)
            _check_kind(path, cell, cfg)
            if pack_seeds:
                _check_packable(path, cell, cfg)
            seen.add(sig)


def _check_values(path: str, cell: Cell, overrides: Mapping[str, Any], cfg: Any) -> None:
    """Every number in the resolved config is finite, and every override kept its value
    (``optim.epochs: 1.5`` would otherwise be truncated to 1)."""
    from locattn.config import config_to_dict, flatten

    flat = flatten(config_to_dict(cfg))
    for key, value in flat.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{path}: cell {cell.cell}: {key}={value!r} is not a finite number")
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, int) and abs(v) > MAX_INT:
                raise SpecError(f"{path}: cell {cell.cell}: {key}={_short(v)}: larger than "
                                f"{MAX_INT:,}")
    for key, given in overrides.items():
        if key not in flat or isinstance(given, bool) or not isinstance(given, (int, float)):
            continue
        got = flat[key]
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            continue
        if isinstance(got, int) and given != int(given):
            raise SpecError(f"{path}: cell {cell.cell}: {key}={given!r}: expected an integer")
        if float(got) != float(given):
            raise SpecError(f"{path}: cell {cell.cell}: {key}={given!r} became {got!r}")


#: A launch above any of these needs an explicit confirmation (``study launch --yes``).
SIZE_LIMITS = {"runs": 20_000, "epochs": 100_000, "cpu_hours": 50_000.0}


def size_warnings(spec: "StudySpec") -> list[str]:
    """Why a spec is suspiciously large (runs, epochs per run, estimated CPU time), or []."""
    from locattn.config import make_run_config

    out = []
    if spec.n_runs() > SIZE_LIMITS["runs"]:
        out.append(f"{spec.n_runs():,} runs (more than {SIZE_LIMITS['runs']:,})")
    max_epochs = max(make_run_config(task=c.task, variant=c.variant, overrides=c.overrides).optim.epochs
                     for c in spec.cells)
    cells = cost.cell_costs(spec, cost.load_calibration())
    cpu_seconds = cost.study_seconds(cells) * max(1.0, spec.cpus) if cells else 0.0
    if max_epochs > SIZE_LIMITS["epochs"]:
        out.append(f"up to {max_epochs:,} epochs per run (more than {SIZE_LIMITS['epochs']:,})")
    if cpu_seconds / 3600 > SIZE_LIMITS["cpu_hours"]:
        out.append(f"~{cpu_seconds / 3600:,.0f} CPU hours estimated (more than "
                   f"{SIZE_LIMITS['cpu_hours']:,.0f})")
    return out


def _check_kind(path: str, cell: Cell, cfg: Any) -> None:
    """A regression task (Raffel & Ellis) needs a regressor variant, and a seq2seq task a
    seq2seq one; otherwise the trial would fail only once it starts."""
    from locattn.tasks import RAFFEL

    want = "regressor" if cfg.task.name in RAFFEL else "seq2seq"
    if cfg.model.kind != want:
        kind = "a regression" if want == "regressor" else "a seq2seq"
        raise SpecError(f"{path}: cell {cell.cell}: task {cfg.task.name!r} is {kind} task, but "
                        f"variant {cell.variant!r} has model.kind={cfg.model.kind!r}; pair it with "
                        f"a {want} variant")


def _check_packable(path: str, cell: Cell, cfg: Any) -> None:
    """``pack_seeds`` / ``pack`` need a model the packed trainer handles (seq2seq, a packable attender)."""
    from locattn.packed import PACKABLE_FAMILIES

    family = cfg.model.attention.family
    if cfg.model.kind != "seq2seq" or family not in PACKABLE_FAMILIES:
        raise SpecError(
            f"{path}: pack_seeds: cell {cell.cell} has model.kind={cfg.model.kind!r}, "
            f"attention.family={family!r}, which cannot be packed; packable: seq2seq models with "
            f"attention.family in {list(PACKABLE_FAMILIES)} (drop pack_seeds or these cells)"
        )


def check_task_data(spec: StudySpec) -> list[str]:
    """Problems with user-supplied task data, found before anything is launched.

    Every distinct task config that reads files (CFQ, or any task with ``task.data_dir``) is
    loaded once here, so a missing directory, a missing file or a malformed line is reported
    with the file (and line) instead of failing every trial. A relative ``task.data_dir`` is a
    problem too: trials run in Ray's own working directories. Returns one message per problem.
    """
    from dataclasses import asdict

    from locattn.config import make_run_config
    from locattn.tasks import load_task

    problems: list[str] = []
    seen: set[str] = set()
    for cell in spec.cells:
        try:
            task = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides).task
        except (ValueError, KeyError, TypeError):
            continue  # reported by validation
        if not task.data_dir and task.name != "cfq":
            continue  # generated data
        key = json.dumps(asdict(task), sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        if task.data_dir and not Path(task.data_dir).is_absolute():
            problems.append(
                f"cell {cell.cell}: task.data_dir={task.data_dir!r} is a relative path, but trials run "
                f"in Ray's own working directories; give it as an absolute path (from here: "
                f"{str(Path(task.data_dir).resolve())!r})")
            continue
        try:
            load_task(task, use_cache=False)
        except (OSError, ValueError) as exc:
            problems.append(f"cell {cell.cell}: {exc}")
    return problems


def require_task_data(spec: StudySpec) -> None:
    """Raise :class:`SpecError` naming the spec file if :func:`check_task_data` finds problems."""
    problems = check_task_data(spec)
    if problems:
        hint = ""
        if any("data_dir" in p for p in problems):
            hint = (f" (set task.data_dir under `overrides:` in {spec.path} to the absolute path of "
                    "the directory holding those files)")
        raise SpecError(f"{spec.path}: task data: " + "; ".join(problems) + hint)
