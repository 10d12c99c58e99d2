"""Parsing the parts of a spec that expand: grid axes into cells (``--only`` included), the
Optuna search, packing (``pack``, ``pack_seeds``), and the check that every trial's config
resolves to a valid, finite, trainable ``RunConfig``. Errors are :class:`SpecError`.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import TYPE_CHECKING, Any, Mapping

import locattn
from locattn.config import PACKABLE_FIELDS, config_to_dict, flatten, make_run_config
from locattn.models.config import packable_families
from locattn.tasks import list_tasks
from locattn.tasks.config import task_defaults, task_kind
from record import schema
from study.spec.keys import cell_id, format_value, hparams_json
from study.spec.canon import canonical, canonical_mapping
from study.spec.checks import (MAX_CELLS, MODES, SAMPLERS, SEARCH_KEYS, SPACE_TYPES, SpecError, check_int, check_list,
                               check_mapping, check_range, check_unique, did_you_mean, spec_error)
from study.spec.model import Cell, SearchSpec

if TYPE_CHECKING:
    from locattn.config import RunConfig


def canonical_grid(path: str, grid: Mapping[str, Any]) -> dict[str, Any]:
    """``grid`` with the values of each config-path axis, and the overrides of each ablation, in
    their field's canonical form (:mod:`study.spec.canon`); an axis listing one value twice, in
    one spelling or two (``[3e-4, 0.0003]``), is refused naming both."""
    out: dict[str, Any] = {}
    for key, values in grid.items():
        values = check_list(path, f"grid.{key}", values)
        if key == "ablation":
            out[key] = [{**v, "overrides": canonical_mapping(v["overrides"])}
                        if isinstance(v, Mapping) and isinstance(v.get("overrides"), Mapping) else v for v in values]
            continue
        if key in ("task", "variant"):
            out[key] = values
            continue
        canon = [canonical(key, v) for v in values]
        check_unique(path, f"grid.{key}", [format_value(v) for v in canon], values, canon)
        out[key] = canon
    return out


def restrict_grid(path: str, grid: dict, only: Mapping[str, list]) -> tuple[dict, dict[str, list[str]]]:
    """Keep only the listed values of grid axes (``--only``); each must be one of the axis's,
    compared in its field's canonical form (``--only optim.lr=3e-4`` keeps the grid's 0.0003).
    Returns the grid and the ``--only`` as recorded: each value as the cell id writes the grid's
    value it keeps. A value listed twice (in one spelling or two) is refused."""
    grid = dict(grid)
    recorded: dict[str, list[str]] = {}
    for key, wanted in only.items():
        if key not in grid:
            raise spec_error(path, f"--only {key}", "not a grid axis of this spec/profile", sorted(grid))
        values = check_list(path, f"grid.{key}", grid[key])
        by_text = {str(v): v for v in values}
        kept = []
        for w in wanted:
            text = str(w) if str(w) in by_text else format_value(canonical(key, w))
            if text not in by_text:
                raise spec_error(path, f"--only {key}", f"{w!r} is not a value of grid.{key}",
                                 [str(v) for v in values])
            kept.append(text)
        check_unique(path, f"--only {key}", kept, list(wanted), [by_text[t] for t in kept])
        grid[key] = [v for v in values if str(v) in kept]
        recorded[key] = kept
    return grid, recorded


def parse_pack(path: str, merged: Mapping[str, Any], hparams: dict, search: Any, gpus: float,
                pack_seeds: bool) -> tuple[bool, tuple[str, ...], Any]:
    """(pack seeds, packed hparams axes, auto) from ``pack`` and ``pack_seeds``.

    ``pack`` lists ``seeds`` and/or hparams axes that :data:`locattn.packed.PACKABLE_FIELDS`
    allows to differ inside a pack; ``pack_seeds: true`` is another spelling of
    ``pack: [seeds]``. Without either, a spec whose trials get a GPU packs on its own: ``auto``
    is then a function of the cells returning what to pack (seeds and every packable hparams
    axis, or nothing when a cell's model cannot be packed); else ``auto`` is None.
    """
    raw = merged.get("pack")
    valid = ["seeds", *[k for k in hparams if k in PACKABLE_FIELDS]]
    if raw is None:
        if "pack_seeds" in merged or gpus <= 0:
            return pack_seeds, (), None
        axes = tuple(k for k in hparams if k in PACKABLE_FIELDS) if search is None else ()

        def auto(cells: list[Cell]) -> tuple[bool, tuple[str, ...]]:
            try:
                for cell in cells:
                    _check_packable(path, cell, make_run_config(task=cell.task, variant=cell.variant,
                                                                overrides=cell.overrides))
            except SpecError:
                return False, ()
            return True, axes

        return pack_seeds, (), auto
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise spec_error(path, "pack", f"expected a list of axes, got {raw!r}", valid)
    for axis in raw:
        if axis not in valid:
            why = ("not an hparams axis of this spec/profile" if axis not in hparams
                   else "a field packed runs may not differ in")
            raise spec_error(path, "pack", f"{axis!r}: {why}", valid)
    if "pack_seeds" in merged and merged["pack_seeds"] != ("seeds" in raw):
        raise spec_error(path, "pack_seeds", f"{merged['pack_seeds']!r} contradicts pack: {raw!r}; keep one")
    axes = tuple(a for a in raw if a != "seeds")
    if axes and search is not None:
        raise spec_error(path, "pack", f"{axes[0]!r}: hparams axes pack only in grid studies (search "
                   "points are sampled one trial at a time); pack: [seeds] packs a point's seeds")
    return "seeds" in raw, axes, None


def expand_cells(path: str, grid: dict, overrides: dict) -> list[Cell]:
    """The cells of a grid (task, variant, ablation and config-path axes), each with the task's
    defaults and the fixed ``overrides`` under its own axis values; bad axis values are refused."""
    axes: dict[str, list] = {}
    for key, values in grid.items():
        values = check_list(path, f"grid.{key}", values)
        if key == "task":
            valid = sorted(list_tasks())
            for v in values:
                if v not in valid:
                    raise spec_error(path, "grid.task", f"unknown task {v!r}{did_you_mean(v, valid)}", valid)
        elif key == "variant":
            valid = sorted(locattn.list_variants())
            for v in values:
                if v not in valid:
                    raise spec_error(path, "grid.variant", f"unknown variant {v!r}{did_you_mean(v, valid)}",
                                     valid)
        elif key == "ablation":
            for i, v in enumerate(values):
                if not isinstance(v, Mapping) or set(v) - {"name", "overrides"} or "name" not in v:
                    raise spec_error(
                        path,
                        f"grid.ablation[{i}]",
                        f"expected {{name: str, overrides: {{dotted.path: value}}}}, got {v!r}",
                    )
                check_mapping(path, f"grid.ablation[{i}].overrides", v.get("overrides") or {})
            names = [v["name"] for v in values]
            if len(set(names)) != len(names):
                raise spec_error(path, "grid.ablation", f"duplicate ablation names {names}")
        if key != "ablation":  # two equal values would be one cell, run once and counted twice
            check_unique(path, f"grid.{key}", [format_value(v) for v in values], values)
        axes[key] = values
    n_cells = math.prod(len(v) for v in axes.values())  # before any cell is built
    if n_cells > MAX_CELLS:
        sizes = " x ".join(f"{k} {len(v):,}" for k, v in axes.items())
        raise spec_error(path, "grid", f"{n_cells:,} cells ({sizes}); a grid has at most {MAX_CELLS:,}")
    cells = []
    keys = list(axes)
    for combo in itertools.product(*axes.values()):
        point = dict(zip(keys, combo))
        # Task defaults (e.g. SCAN's dev size) first, then the spec's fixed overrides.
        cell_overrides = {**task_defaults(point["task"]), **overrides}
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
        raise spec_error(path, "grid", "empty grid: no cells")
    return cells


def parse_search(path: str, raw: Any) -> SearchSpec | None:
    """The ``search:`` mapping as a :class:`SearchSpec` (None without one), validated."""
    if raw is None:
        return None
    raw = check_mapping(path, "search", raw)
    bad = sorted(set(raw) - set(SEARCH_KEYS))
    if bad:
        raise spec_error(path, f"search.{bad[0]}", "unknown key", sorted(SEARCH_KEYS))
    space = check_mapping(path, "search.space", raw.get("space") or {})
    if not space:
        raise spec_error(path, "search.space", "empty search space")
    for key, dist in space.items():
        where = f"search.space.{key}"
        dist = check_mapping(path, where, dist)
        kind = dist.get("type")
        if kind not in SPACE_TYPES:
            raise spec_error(path, f"{where}.type", f"unknown distribution {kind!r}", list(SPACE_TYPES))
        if kind == "categorical":
            choices = check_list(path, f"{where}.choices", dist.get("choices"))
            canon = [canonical(key, c) for c in choices]
            check_unique(path, f"{where}.choices", [hparams_json({key: c}) for c in canon], choices, canon)
            space[key] = {**dist, "choices": canon}
        else:
            low, high = dist.get("low"), dist.get("high")
            for k, v in (("low", low), ("high", high)):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise spec_error(path, f"{where}.{k}", f"expected a number, got {v!r}")
            if not low < high or (kind == "loguniform" and low <= 0):
                raise spec_error(path, where, f"need 0 < low < high for {kind}, got low={low}, high={high}")
    num_samples = check_int(path, "search.num_samples", raw.get("num_samples", 8), 1, 1_000_000)
    sampler = raw.get("sampler", "tpe")
    if sampler not in SAMPLERS:
        raise spec_error(path, "search.sampler", f"unknown sampler {sampler!r}", list(SAMPLERS))
    mode = raw.get("mode", "max")
    if mode not in MODES:
        raise spec_error(path, "search.mode", f"unknown mode {mode!r}", list(MODES))
    metric = raw.get("metric", "best_selection_score")
    if isinstance(metric, str):
        metric = schema.current_metric(metric)  # a former name still names its metric
    valid_metrics = sorted(set(schema.FINAL_METRICS) | set(schema.EPOCH_METRICS))
    if not isinstance(metric, str) or (metric not in valid_metrics and not metric.startswith("test.")):
        raise spec_error(path, "search.metric", f"unknown metric {metric!r}", valid_metrics)
    return SearchSpec(
        space={k: dict(v) for k, v in space.items()},
        num_samples=num_samples,
        sampler=sampler,
        sampler_seed=check_int(path, "search.sampler_seed", raw.get("sampler_seed", 0)),
        metric=metric,
        mode=mode,
    )


def validate_configs(
    path: str, cells: list[Cell], hparams: dict, search: SearchSpec | None, *, pack_seeds: bool = False
) -> None:
    """Resolve every (cell, hparams point) config once and check it: values finite and kept,
    the model kind fits the task, packable when trials pack, and no two of them the same config
    (two ablations with one set of overrides, a grid value equal to another in effect)."""
    n_configs = len(cells) * math.prod(len(v) for v in hparams.values() if isinstance(v, list))
    if n_configs > MAX_CELLS:
        raise spec_error(path, "hparams", f"{n_configs:,} configs ({len(cells):,} cells x the hparams "
                         f"axes' product); a spec resolves at most {MAX_CELLS:,}")
    points = [dict(zip(hparams, v)) for v in itertools.product(*hparams.values())] or [{}]
    if search is not None:
        probe = {}
        for key, dist in search.space.items():
            probe[key] = dist["choices"][0] if dist["type"] == "categorical" else dist["low"]
        points = [{**p, **probe} for p in points]
    seen: dict[str, str] = {}  # the resolved config, as JSON -> the cell and point that gave it first
    for cell in cells:
        for point in points:
            overrides = {**cell.overrides, **point}
            try:
                cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=overrides)
            except (ValueError, KeyError, TypeError, OverflowError) as exc:  # int(inf): OverflowError
                raise SpecError(f"{path}: cell {cell.cell}: {exc}") from None
            flat = _check_values(path, cell, overrides, cfg)
            _check_kind(path, cell, cfg)
            if pack_seeds:
                _check_packable(path, cell, cfg)
            where = cell.cell + (f" with hparams {json.dumps(point, default=str)}" if hparams and point else "")
            sig = json.dumps(flat, sort_keys=True, default=str)
            if sig in seen:  # two names for one config: the same runs trained and counted twice
                raise SpecError(f"{path}: cell {where} resolves to the same config as cell {seen[sig]}: "
                                "both would train the same runs; keep one")
            seen[sig] = where


def _check_values(path: str, cell: Cell, overrides: Mapping[str, Any], cfg: RunConfig) -> dict[str, Any]:
    """Every number in the resolved config is finite, and every override kept its value
    (``optim.epochs: 1.5`` would otherwise be truncated to 1). Returns the flattened config."""
    flat = flatten(config_to_dict(cfg))
    for key, value in flat.items():
        check_range(f"{path}: cell {cell.cell}", key, value)
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
    return flat



def _check_kind(path: str, cell: Cell, cfg: RunConfig) -> None:
    """A regression task (Raffel & Ellis) needs a regressor variant, and a seq2seq task a
    seq2seq one; otherwise the trial would fail only once it starts."""
    want = "regressor" if task_kind(cfg.task.name) == "regression" else "seq2seq"
    if cfg.model.kind != want:
        kind = "a regression" if want == "regressor" else "a seq2seq"
        raise SpecError(f"{path}: cell {cell.cell}: task {cfg.task.name!r} is {kind} task, but "
                        f"variant {cell.variant!r} has model.kind={cfg.model.kind!r}; pair it with "
                        f"a {want} variant")


def _check_packable(path: str, cell: Cell, cfg: RunConfig) -> None:
    """``pack_seeds`` / ``pack`` need a model the packed trainer handles (seq2seq, a packable attender)."""
    family = cfg.model.attention.family
    if cfg.model.kind != "seq2seq" or family not in packable_families():
        raise SpecError(
            f"{path}: pack_seeds: cell {cell.cell} has model.kind={cfg.model.kind!r}, "
            f"attention.family={family!r}, which cannot be packed; packable: seq2seq models with "
            f"attention.family in {packable_families()} (drop pack_seeds or these cells)"
        )
