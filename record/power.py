"""Power before compute: what a number of seeds per cell can detect in solved rates.

Two cells (an ablation and its base, two attenders) each train n seeds; a seed *solves* its cell
when it reaches the solved threshold. Their solved counts are compared by a one-sided Fisher
exact test (the test ``reports.agreement`` uses for success counts) at :data:`ALPHA`. Its power
against rates p0 < p1 is computed exactly, by enumerating every pair of outcomes (a of n seeds
of one cell, b of n of the other, binomial probabilities) and summing those the test rejects:
no approximation, no simulation.

The baseline: a difference d is placed centred on 0.5 (rates 0.5 - d/2 against 0.5 + d/2),
where a binomial count varies most, so the same d near 0 or 1 usually needs fewer seeds. Very
near 0 or 1 the test's discreteness can make a small d harder still, so the number is a guide
for planning, not a guarantee. Pure Python (``math.comb``, exact integers for the test's
p-values), so a dry run needs neither scipy nor numpy.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import comb

ALPHA = 0.05
"""The one-sided test's level."""
POWER = 0.8
"""The power asked for."""
MAX_SEEDS = 100
"""Seeds per cell the search for a target difference goes up to."""
#: The differences (in solved rate) a detectable-difference search steps through.
_STEPS = 100


@lru_cache(maxsize=None)
def rejection_region(n: int, alpha: float = ALPHA) -> tuple[tuple[int, int], ...]:
    """The outcomes (a, b) (a of n seeds solved in the lower cell, b of n in the higher) at
    which the one-sided Fisher exact test rejects "equal rates" at ``alpha``: P(X >= b) <=
    alpha for X hypergeometric (2n seeds, a + b solved, n drawn), computed in exact integers."""
    if n < 1:
        raise ValueError(f"need n >= 1 seeds per cell, got {n}")
    level = Fraction(str(alpha))  # 0.05 as 1/20 exactly: p = 1/20 (0 of 3 against 3 of 3) rejects
    total = comb(2 * n, n)
    out = []
    for t in range(2 * n + 1):  # t seeds solved in all; the upper tail in b, summed downward
        tail = 0
        for b in range(min(t, n), max(0, t - n) - 1, -1):
            tail += comb(t, b) * comb(2 * n - t, n - b)
            if tail * level.denominator > level.numerator * total:
                break
            out.append((t - b, b))
    return tuple(sorted(out))


def fisher_power(n: int, p0: float, p1: float, alpha: float = ALPHA) -> float:
    """Power of the one-sided Fisher exact test at ``alpha`` to find that a cell with solved
    rate ``p1`` beats one with rate ``p0``, both with ``n`` seeds: the probability, under the
    two binomials, of an outcome in :func:`rejection_region`. Rates are fractions in [0, 1]."""
    if not (0.0 <= p0 <= 1.0 and 0.0 <= p1 <= 1.0):
        raise ValueError(f"rates are fractions in [0, 1], got {p0}, {p1}")
    pa = [comb(n, k) * p0 ** k * (1 - p0) ** (n - k) for k in range(n + 1)]
    pb = [comb(n, k) * p1 ** k * (1 - p1) ** (n - k) for k in range(n + 1)]
    return float(sum(pa[a] * pb[b] for a, b in rejection_region(n, alpha)))


def centred(d: float) -> tuple[float, float]:
    """The rates (p0, p1) of a difference ``d`` centred on 0.5: (0.5 - d/2, 0.5 + d/2)."""
    return 0.5 - d / 2, 0.5 + d / 2


def detectable_difference(n: int, *, power: float = POWER, alpha: float = ALPHA) -> float | None:
    """The smallest difference in solved rate, in steps of 0.01 and centred on 0.5
    (:func:`centred`), that ``n`` seeds per cell detect with ``power``; None when not even
    0 against 1 is detected that often."""
    for i in range(1, _STEPS + 1):
        d = i / _STEPS
        if fisher_power(n, *centred(d), alpha) >= power:
            return d
    return None


def seeds_needed(d: float, *, power: float = POWER, alpha: float = ALPHA,
                 most: int = MAX_SEEDS) -> int | None:
    """The fewest seeds per cell with which a difference ``d`` (0 < d <= 1) in solved rate,
    centred on 0.5, is detected with ``power``; None above ``most``. (The Fisher test is
    discrete, so a few seeds more can have a little less power: this is the first n that
    reaches it.)"""
    if not 0.0 < d <= 1.0:
        raise ValueError(f"a difference in solved rate is in (0, 1], got {d}")
    for n in range(1, most + 1):
        if fisher_power(n, *centred(d), alpha) >= power:
            return n
    return None


def power_lines(n: int, target: float | None = None) -> list[str]:
    """The dry run's ``power`` lines for ``n`` seeds per cell, and with ``target`` (a difference
    in solved rate) the seeds it needs."""
    how = f"one-sided Fisher exact test, alpha {ALPHA:g}, {100 * POWER:g} % power"
    d = detectable_difference(n) if n <= MAX_SEEDS else None
    if n > MAX_SEEDS:
        lines = [f"power    {n:,} seeds per cell: not computed above {MAX_SEEDS} seeds per cell "
                 f"(there, a difference in solved rate of a few points is detected; {how})"]
    elif d is None:
        lines = [f"power    {n} seed(s) per cell: no difference in solved rate between two cells is "
                 f"detected, not even 0 against 1 ({how})"]
    else:
        lo, hi = centred(d)
        lines = [f"power    {n} seeds per cell detect a difference in solved rate between two cells "
                 f"of {d:.2f} or more (rates {lo:.2f} against {hi:.2f}; {how})"]
    if target is not None:
        need = seeds_needed(target)
        lo, hi = centred(target)
        lines.append(f"         a difference of {target:.2f} (rates {lo:.2f} against {hi:.2f}) needs "
                     + (f"{need} seeds per cell" if need else f"more than {MAX_SEEDS} seeds per cell"))
    return lines
