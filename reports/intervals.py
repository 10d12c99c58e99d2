"""Interval estimates for few-seed results: a bootstrap interval of a statistic over seeds and an
exact interval of a solved rate k/n.

- :func:`bootstrap_interval`: the percentile bootstrap (Efron & Tibshirani 1993, *An
  Introduction to the Bootstrap*, ch. 13): draw :data:`RESAMPLES` samples of the n seed values
  with replacement, compute the statistic (median, or mean) of each, and take the
  (1 - :data:`CONFIDENCE`) / 2 and (1 + :data:`CONFIDENCE`) / 2 quantiles of those statistics.
  The draws come from ``numpy.random.default_rng(BOOTSTRAP_SEED)`` (PCG64) on the values sorted
  ascending, so the interval depends only on the values, never on the order cells are computed
  in or on seed labels: the same values give the same interval, byte for byte. The quantiles are
  order statistics of the resampled statistics (``numpy.quantile`` methods ``lower`` and
  ``higher``, no interpolation), so a value of ``inf`` (Raffel & Ellis: 100 % never reached)
  stays ``inf`` and is never turned into NaN. With 2 or 3 seeds the interval is wide, and
  honestly so: the bootstrap cannot know more than the seeds say; rliable (Agarwal et al. 2021,
  "Deep Reinforcement Learning at the Edge of the Statistical Precipice") made such interval
  estimates the standard for few-run results.
- :func:`rate_interval`: the Clopper & Pearson (1934) exact interval of a binomial rate (the
  interval ``reports.agreement`` gives success counts), or Wilson's (1927) score interval, via
  ``scipy.stats.binomtest``. Exact is the default: its coverage is at least the nominal level
  for every rate, at the price of width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

CONFIDENCE = 0.95
"""Level of every interval (two-sided)."""
RESAMPLES = 10_000
"""Bootstrap resamples per interval."""
BOOTSTRAP_SEED = 0
"""Seed of the bootstrap's generator (``numpy.random.default_rng``)."""
RATE_METHODS = ("exact", "wilson")
"""``exact``: Clopper & Pearson (1934); ``wilson``: Wilson's (1927) score interval."""
RATE_METHOD = "exact"
"""The solved rate's interval in the tables."""

_STATISTICS = {"median": np.median, "mean": np.mean}


def bootstrap_interval(values: Sequence[float], statistic: str = "median", *,
                       resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED,
                       confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Percentile bootstrap interval (low, high) of ``statistic`` (``median`` or ``mean``) of
    ``values`` (one per seed, any unit; ``inf`` allowed), at ``confidence``.

    None for fewer than 2 values (one seed has no spread to resample); (v, v) when every value
    is v. Raises ValueError for an unknown statistic, a NaN value, ``resamples < 1`` or a
    confidence outside (0, 1).
    """
    if statistic not in _STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; valid: {', '.join(_STATISTICS)}")
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need resamples >= 1 and 0 < confidence < 1, got {resamples}, {confidence}")
    x = np.sort(np.asarray(values, dtype=float))
    if np.isnan(x).any():
        raise ValueError("a NaN value has no place in an interval (leave diverged seeds out)")
    if x.size < 2:
        return None
    if x[0] == x[-1]:
        return float(x[0]), float(x[0])
    if statistic == "median":
        # x is sorted, so a resample's median is (x[i] + x[j]) / 2 for its middle draws' indices:
        # np.median's value, without sorting 10,000 rows per cell
        lo, hi = _middle_draws(x.size, resamples, seed)
        stats = (x[lo] + x[hi]) / 2.0
    else:
        with np.errstate(invalid="ignore"):  # inf - inf in a mean of infs: those rows are inf anyway
            stats = np.mean(x[_draws(x.size, resamples, seed)], axis=1)
        stats = np.where(np.isnan(stats), np.inf, stats)
    tail = (1.0 - confidence) / 2.0
    return (float(np.quantile(stats, tail, method="lower")),
            float(np.quantile(stats, 1.0 - tail, method="higher")))


@lru_cache(maxsize=64)
def _draws(n: int, resamples: int, seed: int) -> np.ndarray:
    """The bootstrap's (resamples, n) indices: the same draws for every sample of n values."""
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    idx.setflags(write=False)
    return idx


@lru_cache(maxsize=64)
def _middle_draws(n: int, resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per resample of :func:`_draws`, the indices of its two middle draws in sorted order
    (the same one twice for odd n)."""
    ordered = np.sort(_draws(n, resamples, seed), axis=1)
    lo, hi = ordered[:, (n - 1) // 2].copy(), ordered[:, n // 2].copy()
    lo.setflags(write=False)
    hi.setflags(write=False)
    return lo, hi


def rate_interval(k: int, n: int, *, method: str = RATE_METHOD,
                  confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Two-sided interval (low, high), as fractions in [0, 1], of a binomial rate ``k``/``n``:
    Clopper-Pearson exact (``method="exact"``) or Wilson score (``"wilson"``). Raises
    ValueError unless 0 <= k <= n and n > 0, or for an unknown method."""
    from scipy.stats import binomtest  # scipy only where statistics are asked for

    if method not in RATE_METHODS:
        raise ValueError(f"unknown rate interval {method!r}; valid: {', '.join(RATE_METHODS)}")
    if not 0 <= k <= n or n <= 0:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method=method)
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Solved:
    """The solved rate of one cell: k of n seeds at or above ``threshold``, with its interval."""

    threshold: float
    """In cell units (90: 90 % sequence accuracy)."""
    k: int
    n: int
    low: float
    """Interval bounds as fractions (0.07 = 7 %)."""
    high: float


def solved_rate(values: Sequence[float], threshold: float, *, method: str = RATE_METHOD,
                confidence: float = CONFIDENCE) -> Solved | None:
    """How many of ``values`` (one per finished seed with a finite value) reach ``threshold``,
    with :func:`rate_interval`; None when there is no value."""
    n = len(values)
    if n == 0:
        return None
    k = sum(1 for v in values if v >= threshold)
    low, high = rate_interval(k, n, method=method, confidence=confidence)
    return Solved(threshold=threshold, k=k, n=n, low=low, high=high)


def method_sentence(*, solved: bool, statistic: str = "median") -> str:
    """The caption's sentence saying how the intervals beside ``statistic`` (``median``,
    ``mean``) were made; ``solved``: the (k/n) counts carry an interval too."""
    s = (f"[low, high]: {100 * CONFIDENCE:g} % percentile bootstrap interval of the {statistic} over "
         f"seeds ({RESAMPLES:,} resamples, numpy default_rng seed {BOOTSTRAP_SEED}; Efron & "
         "Tibshirani 1993), wide with 2-5 seeds")
    if solved:
        s += (f"; after k/n, the solved rate's {100 * CONFIDENCE:g} % Clopper-Pearson exact interval "
              "(Clopper & Pearson 1934)")
    return s + "."
