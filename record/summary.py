"""What a cell's number is: the median over seeds of its chosen point's final metrics.

A cell is a grid point (variant x task, and any further grid axis); with hyperparameters it
has several points, and the chosen one is the point with the best median
``best_selection_score`` (never test). ``study status`` prints these numbers and the writer logs
them on the cell's MLflow run, so that the UI's grouped view shows the table's number. Standard
library only.
"""

from __future__ import annotations

import math
import statistics
from typing import Mapping, Sequence

SELECTION_KEY = "best_selection_score"
"""The final metric that chooses a cell's point: the best value of the run's checkpoint-selection
signal (higher is better)."""
SEEDS_KEY = "seeds_finished"
"""Metric of a cell run: how many finished seeds its medians are over."""


def median_of(runs: Sequence[Mapping[str, float]], key: str) -> float | None:
    """Median of ``key`` over the runs that have it (NaN left out); None when none has it."""
    values = [r[key] for r in runs if key in r and not math.isnan(r[key])]
    return statistics.median(values) if values else None


def chosen_point(by_point: Mapping[str, Sequence[Mapping[str, float]]]) -> str:
    """The point (its hparams JSON) whose finished runs have the best median
    ``best_selection_score``; the first by sorted JSON among equals, and among points with no
    such score."""
    def selection(item: tuple[str, Sequence[Mapping[str, float]]]) -> float:
        value = median_of(item[1], SELECTION_KEY)
        return -math.inf if value is None else value

    return max(sorted(by_point.items()), key=selection)[0]


def cell_medians(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per final metric of ``runs`` (one point's finished seeds), its median over them, and
    :data:`SEEDS_KEY`."""
    keys = sorted({k for r in runs for k in r})
    out = {k: v for k in keys if (v := median_of(runs, k)) is not None}
    out[SEEDS_KEY] = float(len(runs))
    return out
