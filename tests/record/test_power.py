"""Power before compute: the one-sided Fisher exact test's power over n seeds per cell, exact
by enumeration (record.power), and the dry run's lines that say it."""

from __future__ import annotations

from math import comb
from pathlib import Path

import pytest

from record.power import (centred, detectable_difference, fisher_power, power_lines, rejection_region,
                          seeds_needed)
from tests.locattn.test_cli import run_main

SPEC = str(Path(__file__).resolve().parents[2] / "ablations" / "rc_table4.yaml")


def _scipy_rejects(n: int) -> set[tuple[int, int]]:
    fisher_exact = pytest.importorskip("scipy.stats").fisher_exact
    return {(a, b) for a in range(n + 1) for b in range(n + 1)
            if fisher_exact([[b, n - b], [a, n - a]], alternative="greater").pvalue <= 0.05 + 1e-12}


def _enumerated_power(n: int, p0: float, p1: float) -> float:
    pmf = lambda k, p: comb(n, k) * p ** k * (1 - p) ** (n - k)  # noqa: E731
    return sum(pmf(a, p0) * pmf(b, p1) for a, b in _scipy_rejects(n))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_the_rejection_region_is_scipys_fisher_exact_test(n):
    assert set(rejection_region(n)) == _scipy_rejects(n)


def test_power_for_5_against_5_seeds_is_the_enumeration_over_scipys_test():
    # 5 vs 5 rejects at (a, b) with b - a large: e.g. 0 of 5 against 4 of 5 (p = 0.024), not
    # 1 against 4 (p = 0.103); 0 of 3 against 3 of 3 has p = 1/20 exactly, and rejects
    assert (0, 4) in rejection_region(5) and (1, 4) not in rejection_region(5)
    assert (0, 3) in rejection_region(3)
    for p0, p1 in [(0.0, 1.0), (0.2, 0.8), (0.5, 0.9), (0.1, 0.3)]:
        assert fisher_power(5, p0, p1) == pytest.approx(_enumerated_power(5, p0, p1), abs=1e-12)
    assert fisher_power(5, 0.0, 1.0) == 1.0 and fisher_power(5, 0.5, 0.5) < 0.05


def test_detectable_difference_and_seeds_needed():
    assert detectable_difference(1) is None and detectable_difference(2) is None
    d5 = detectable_difference(5)
    assert d5 == 0.84
    assert fisher_power(5, *centred(0.84)) >= 0.8 > fisher_power(5, *centred(0.83))
    n = seeds_needed(0.5)
    assert n == 15
    assert _enumerated_power(15, 0.25, 0.75) >= 0.8 > _enumerated_power(14, 0.25, 0.75)
    assert seeds_needed(0.05) is None  # more than 100 seeds per cell
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        seeds_needed(0.0)


def test_power_lines_name_the_test_and_the_rates():
    lines = power_lines(5, 0.5)
    assert lines == [
        "power    5 seeds per cell detect a difference in solved rate between two cells of 0.84 or more "
        "(rates 0.08 against 0.92; one-sided Fisher exact test, alpha 0.05, 80 % power)",
        "         a difference of 0.50 (rates 0.25 against 0.75) needs 15 seeds per cell",
    ]
    assert "not even 0 against 1" in power_lines(2)[0] and len(power_lines(2)) == 1


def test_the_dry_run_says_what_its_seeds_detect_and_what_a_target_needs(tmp_path, capsys):
    from study.cli import main

    argv = ["launch", SPEC, "--profile", "smoke", "--dry-run", "--root", str(tmp_path)]
    code, out, _ = run_main([*argv, "--power-target", "0.5"], capsys, entry=main)
    assert code == 0, out
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("power "))
    assert lines[i:i + 2] == power_lines(1, 0.5) and "1 seed(s) per cell: no difference" in lines[i]
    code, _, err = run_main([*argv, "--power-target", "1.5"], capsys, entry=main)
    assert code == 2 and "'1.5' is not a difference in solved rate" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_main(argv[:4] + ["--root", str(tmp_path), "--power-target", "0.5"], capsys, entry=main)
    assert code == 2 and "--power-target goes with --dry-run" in err
    assert not any(tmp_path.iterdir())  # nothing written
