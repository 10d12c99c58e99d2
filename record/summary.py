"""What a cell's number is: the median over seeds of its chosen point's final metrics.

A cell is a grid point (variant x task, and any further grid axis); with hyperparameters it
has several points, and the chosen one is the point with the best median
``best_selection_score`` (never test), then the smallest median ``best_epoch``, then the
smallest hparams JSON. ``study status`` prints these numbers, the writer logs them on the
cell's MLflow run (so that the UI's grouped view shows the table's number), and ``reports``
applies the same rule with polars.

**Non-finite values: the one rule.** A NaN or ±inf metric value (a diverged run leaves them) is
not a measurement. Every statistic over seeds (median, mean, IQR, std, k of n, a Wilcoxon pair)
and every ranking over such statistics (the chosen point, the best row of a column) is taken
over the finite values only; a point or cell with no finite value ranks last. A seed whose value
is not finite is *diverged*: it is not counted in n, and every view says so (``n = 2 of 3,
1 diverged``). :func:`is_measurement` is the test; nothing else decides it.

Standard library and :mod:`record.schema` (the headline metrics, :data:`HEADLINE_METRICS`) only.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from record.schema import HEADLINE_METRICS  # noqa: F401 - re-exported: the readers' summary names


@dataclass(frozen=True)
class RunCounts:
    """A study's trial runs as its record holds them (not Tune's trial states): how many it
    expects, and how many are finished, failed and neither."""

    expected: int
    """Trial runs the study plans (``locattn.n_runs``)."""
    finished: int
    """Runs tagged ``locattn.status=finished``."""
    failed: int
    """Runs tagged ``locattn.status=failed``."""
    unfinished: int
    """The rest of ``expected``: runs not in the record yet or still running."""


SELECTION_KEY = "best_selection_score"
"""The final metric that chooses a cell's point: the best value of the run's checkpoint-selection
signal (higher is better)."""
BEST_EPOCH_KEY = "best_epoch"
"""Final metric: the epoch of the best checkpoint; among points of equal median selection score,
the smaller median wins (the same dev score reached sooner)."""
SEEDS_KEY = "seeds_finished"
"""Metric of a cell run: how many finished seeds its medians are over."""
DIVERGED_KEY = "seeds_diverged"
"""Metric of a cell run: finished seeds of its chosen point with a non-finite value."""
SOLVED_AT = 90.0
"""A seed "solved" a cell at this accuracy (%) or more (the tables' default ``--solved``)."""
PERCENT_SUFFIX = " pct"
"""A cell run's headline of a test split in percent is ``<split> pct`` (``len15 pct``): short
enough for a column head of MLflow's runs table, whose metric names cannot hold ``%``."""
SOLVED_KEY = "solved"
"""Metric of a cell run: seeds of its chosen point at :data:`SOLVED_AT` % or more on its hardest
test split (:func:`hardest_split`); of :data:`SEEDS_KEY`."""


def is_measurement(value: float | None) -> bool:
    """Whether ``value`` counts in a statistic: a finite number (not None, NaN, +inf or -inf)."""
    return value is not None and math.isfinite(value)


def median_of(runs: Sequence[Mapping[str, float]], key: str) -> float | None:
    """Median of ``key`` over the runs whose value is a measurement (:func:`is_measurement`);
    None when none has one."""
    values = [r[key] for r in runs if is_measurement(r.get(key))]
    return statistics.median(values) if values else None


def diverged(runs: Sequence[Mapping[str, float]]) -> int:
    """How many of ``runs`` hold a non-finite value of some metric."""
    return sum(1 for r in runs if any(not is_measurement(v) for v in r.values()))


def chosen_point(by_point: Mapping[str, Sequence[Mapping[str, float]]]) -> str:
    """The point (its hparams JSON) whose finished runs have the best median
    ``best_selection_score``, then the smallest median ``best_epoch``, then the smallest JSON;
    points with no finite score rank last."""
    def rank(item: tuple[str, Sequence[Mapping[str, float]]]) -> tuple:
        score = median_of(item[1], SELECTION_KEY)
        epoch = median_of(item[1], BEST_EPOCH_KEY)
        return (score is None, -(score or 0.0), epoch is None, epoch or 0.0, item[0])

    return min(by_point.items(), key=rank)[0]


def hardest_split(splits: list[str]) -> str | None:
    """The longest ``lenN`` split (the probing tasks), else the longest ``longer_seen_N`` (Lookup,
    Long N), else the last split by name that is not ``iid``, else ``iid``."""
    for prefix in ("len", "longer_seen_"):
        numbered = [s for s in splits if s.startswith(prefix) and s[len(prefix):].isdigit()]
        if numbered:
            return max(numbered, key=lambda s: int(s[len(prefix):]))
    others = sorted(s for s in splits if s != "iid")
    return others[-1] if others else (splits[0] if splits else None)


def headline_keys(keys: Sequence[str]) -> dict[str, str]:
    """Test split -> its headline metric key (``len15`` -> ``test.len15.seq_acc``) among
    ``keys``: of the first of :data:`HEADLINE_METRICS` that some ``test.<split>.<metric>`` holds."""
    for metric in HEADLINE_METRICS:
        found = {parts[1]: k for k in keys if len(parts := k.split(".")) == 3
                 and parts[0] == "test" and parts[2] == metric}
        if found:
            return found
    return {}


def percent(fraction: float) -> float:
    """A fraction in % as a column shows it: to 4 decimals (0.6932 is 69.32, not
    69.32000000000001); a non-finite value stays as it is."""
    return round(100 * fraction, 4) if math.isfinite(fraction) else fraction


def seed_percents(finals: Mapping[str, float]) -> dict[str, float]:
    """A seed's run's headline of each test split in % (``len15 pct``, :data:`PERCENT_SUFFIX`),
    from its final metrics: the values its cell's run shows the median of, in the same column."""
    return {split + PERCENT_SUFFIX: percent(finals[key])
            for split, key in sorted(headline_keys(list(finals)).items())}


def cell_percents(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The cell run's columns as the tables print them, over ``runs`` (one point's finished
    seeds): per test split, ``<split> pct`` (:data:`PERCENT_SUFFIX`), the median of its
    headline metric in % (0-100); and :data:`SOLVED_KEY`, how many seeds reached
    :data:`SOLVED_AT` % on the hardest split (non-finite values left out, the one rule).
    Empty when no run holds a headline metric."""
    splits = headline_keys(sorted({k for r in runs for k in r}))
    out = {}
    for split, key in sorted(splits.items()):
        if (v := median_of(runs, key)) is not None:
            out[split + PERCENT_SUFFIX] = percent(v)
    hardest = hardest_split(list(splits))
    if hardest is not None:
        key = splits[hardest]
        out[SOLVED_KEY] = float(sum(1 for r in runs if is_measurement(r.get(key))
                                    and 100 * r[key] >= SOLVED_AT))
    return out


def cell_medians(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per final metric of ``runs`` (one point's finished seeds), its median over their finite
    values, :data:`SEEDS_KEY`, the columns in percent of :func:`cell_percents` and, when some
    seed diverged, :data:`DIVERGED_KEY`."""
    keys = sorted({k for r in runs for k in r})
    out = {k: v for k in keys if (v := median_of(runs, k)) is not None}
    out[SEEDS_KEY] = float(len(runs))
    out.update(cell_percents(runs))
    if n_diverged := diverged(runs):
        out[DIVERGED_KEY] = float(n_diverged)
    return out
