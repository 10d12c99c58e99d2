"""Numbers on screen: a compact per-cell results table for ``study status`` and the end of
``study launch``/``resume``.

Per cell: its headline number (the median over seeds of the sequence accuracy, or accuracy, on
its hardest test split, :func:`hardest_split`),
how many of those seeds solved it (at least :data:`SOLVED_AT` %), and for a study with
hyperparameters the chosen point (best median ``best_selection_score``, never test) and that
score, and the median of every plugin metric (:func:`locattn.register_metric`) the runs
recorded on that split. The full tables are ``study report``'s. Standard library only: it
reads the store through :mod:`record.store` and the metric registry, and imports neither
torch, Ray nor MLflow.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from locattn import registry
from record import schema
from record.store import StoreError, StudyNotFound, read_rows
from record.summary import (BEST_EPOCH_KEY, HEADLINE_METRICS, SELECTION_KEY, SOLVED_AT, chosen_point,
                            hardest_split, is_measurement, median_of)


@dataclass(frozen=True, kw_only=True)
class CellResult:
    """The headline of one cell."""

    cell: str
    split: str
    """The test split of the headline (``len100``); empty when no seed finished."""
    median: float | None
    """Median (%) over the chosen point's finished seeds."""
    solved: int
    n: int
    """Finished seeds of the chosen point."""
    hparams: str
    """The chosen point, ``lr=3e-4`` (empty: nothing to choose)."""
    dev: float | None
    """Median best_selection_score (%) of the chosen point."""
    diverged: int = 0
    """Finished seeds of the chosen point whose headline value is not finite (not in ``n``)."""
    extra: tuple[tuple[str, float | None], ...] = ()
    """(metric key, median over the seeds on ``split``, in percent for a ``percent`` metric) of
    every plugin metric the runs recorded (:func:`plugin_metric_keys`)."""


def plugin_metric_keys(keys: list[str]) -> list[str]:
    """The metric keys among the record keys ``test.<split>.<key>`` that no built-in metric
    records (a plugin's, :func:`locattn.register_metric`), sorted."""
    builtin = {str(e.meta["key"]) for e in registry.entries("metric", discover=False).values()
               if e.builtin} | set(registry.RESERVED_METRIC_KEYS)
    return sorted({k.split(".")[2] for k in keys if k.startswith("test.") and len(k.split(".")) == 3}
                  - builtin)


def _shown(key: str, values: list[float]) -> float | None:
    """Median of a plugin metric's finite values, x 100 when the registry says ``percent`` (a
    metric whose plugin is not imported here, installed plugins included, is shown as recorded:
    ``study status`` imports no plugin)."""
    finite = [v for v in values if is_measurement(v)]
    if not finite:
        return None
    known = {e.meta["key"]: e for e in registry.entries("metric", discover=False).values()}
    percent = key in known and known[key].meta["scale"] == "percent"
    return statistics.median(finite) * (100 if percent else 1)


def _short(hparams: str) -> str:
    try:
        point = json.loads(hparams)
    except (TypeError, ValueError):
        return hparams
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v:.2g}" if isinstance(v, float) else
                     f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(point.items()))


def cell_results(tracking_uri: str, study: str) -> list[CellResult]:
    """Per cell with a finished run, in the store's order of cells; [] when the store or the
    study does not exist yet."""
    try:
        rows = read_rows(tracking_uri, study,
                         tag_keys=(schema.ROLE, schema.CELL, schema.STATUS, schema.HPARAMS),
                         metric_keys=[SELECTION_KEY, BEST_EPOCH_KEY], metric_prefixes=("test.",))
    except (StudyNotFound, StoreError):
        return []
    tags: dict[str, dict[str, str]] = {}
    for run_id, key, value in rows.tags:
        tags.setdefault(run_id, {})[key] = value
    metrics: dict[str, dict[str, float]] = {}
    for run_id, key, value, *_ in rows.metrics:
        metrics.setdefault(run_id, {})[key] = value
    # cell -> hparams -> [run ids of finished trial runs]
    points: dict[str, dict[str, list[str]]] = {}
    for run_id, *_ in sorted(rows.runs, key=lambda r: (r[2] or 0, r[0])):
        t = tags.get(run_id, {})
        if t.get(schema.ROLE) != schema.ROLE_TRIAL or schema.CELL not in t:
            continue
        if t.get(schema.STATUS) == schema.STATUS_FINISHED:
            points.setdefault(t[schema.CELL], {}).setdefault(t.get(schema.HPARAMS) or "{}", []).append(run_id)
    out = []
    for cell, by_point in points.items():
        hparams = chosen_point({p: [metrics.get(r, {}) for r in ids] for p, ids in by_point.items()})
        ids = by_point[hparams]
        values: dict[str, list[float]] = {}
        for metric in HEADLINE_METRICS:
            for r in ids:
                for key, v in metrics.get(r, {}).items():
                    parts = key.split(".")
                    if len(parts) == 3 and parts[2] == metric:
                        values.setdefault(parts[1], []).append(100 * v)
            if values:
                break
        split = hardest_split(list(values)) or ""
        seeds = [v for v in values.get(split, []) if is_measurement(v)]
        n_diverged = len(values.get(split, [])) - len(seeds)
        d = median_of([metrics.get(r, {}) for r in ids], SELECTION_KEY)
        extra = tuple((k, _shown(k, [metrics[r][f"test.{split}.{k}"] for r in ids
                                      if f"test.{split}.{k}" in metrics.get(r, {})]))
                      for k in plugin_metric_keys([key for r in ids for key in metrics.get(r, {})]))
        out.append(CellResult(
            cell=cell, split=split, median=statistics.median(seeds) if seeds else None,
            solved=sum(v >= SOLVED_AT for v in seeds), n=len(seeds),
            hparams=_short(hparams) if len(by_point) > 1 or hparams != "{}" else "",
            dev=None if d is None else 100 * d, diverged=n_diverged, extra=extra))
    return out


def format_results(results: list[CellResult], study: str) -> str:
    """The compact table and a pointer to ``study report``; one line when nothing finished."""
    if not results:
        return f"no finished run yet; tables: study report {study}"
    with_hp = any(r.hparams for r in results)
    wc = max(len("cell"), *(len(r.cell) for r in results))
    ws = max(len("split"), *(len(r.split) for r in results))
    head = f"{'cell':<{wc}}  {'split':<{ws}}  {'median %':>8}  {'solved':>6}"
    extras = sorted({k for r in results for k, _ in r.extra})
    head += "".join(f"  {k:>{max(8, len(k))}}" for k in extras)
    head += f"  {'dev %':>6}  hparams" if with_hp else ""
    lines = [head]
    for r in results:
        med = "–" if r.median is None else f"{r.median:.1f}"
        line = f"{r.cell:<{wc}}  {r.split:<{ws}}  {med:>8}  {f'{r.solved}/{r.n}':>6}"
        got = dict(r.extra)
        for k in extras:  # plugin metrics on the same split, median over the same seeds
            v = got.get(k)
            line += f"  {'–' if v is None else f'{v:.3g}':>{max(8, len(k))}}"
        if with_hp:
            dev = "–" if r.dev is None else f"{r.dev:.1f}" if r.dev >= 0 else f"loss {-r.dev / 100:.2g}"
            line += f"  {dev:>6}  {r.hparams}"  # (a negative score is a negated dev loss)
        if r.diverged:  # non-finite values: not in n (record.summary's rule)
            line += f"  ({r.diverged} diverged: n = {r.n} of {r.n + r.diverged})"
        lines.append(line)
    lines.append(f"median over seeds of the hardest test split; solved: seeds at >= {SOLVED_AT:g} %"
                 f"{'; hparams chosen by median dev score' if with_hp else ''}. "
                 f"Full tables: study report {study}")
    return "\n".join(lines)
