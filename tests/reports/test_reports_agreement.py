"""Agreement with the paper, counted first where the paper's accuracy is above 10 %
(reports/agreement.py), on committed records whose counts were recounted by hand from their
--compare tables."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from reports.agreement import NONTRIVIAL, agreement, compare_arms, tolerance
from reports.build import collect
from reports.paper import load_paper_numbers
from reports.render import paper_diff

RECORDS = Path(__file__).resolve().parents[2] / "results" / "record"


@pytest.mark.parametrize("study,table,expected", [
    ("rc_table4-quick-v3", "rc_table4", (50, 96, 18, 53)),
    ("rc_table3_scan-quick", "rc_table3", (5, 6, 4, 5)),
    # edit distance: no % count; within 10 % of the target length (126 with 10 tokens anywhere)
    ("rc_table2-quick-v2", "rc_table9", (92, 144, None, None)),
])
def test_counts_on_committed_records(study: str, table: str, expected: tuple) -> None:
    result = collect(RECORDS / study, tables=[table]).results[0]
    paper = load_paper_numbers(result.table)
    a = agreement(result, paper)
    assert (a.within, a.compared, a.nontrivial_within, a.nontrivial) == expected
    # the same counts by brute force over the cells
    diffs = [(p.value, paper_diff(result.table, result.stat, result.cell(r, c), p), c)
             for (r, c), p in paper.items() if (r, c) in result.cells]
    diffs = [(v, d, c) for v, d, c in diffs if d is not None]
    assert a.compared == len(diffs)
    assert a.within == sum(tolerance(result.table, c, v, d) for v, d, c in diffs)
    if a.nontrivial is not None:
        assert a.nontrivial == sum(v > NONTRIVIAL for v, _, _ in diffs)
        assert a.nontrivial < a.compared  # trivial cells exist and are left out of the first count


def test_build_compare_prints_the_nontrivial_count_first(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "reports.cli", "build", str(RECORDS / "rc_table4-quick-v3"),
         "--out", str(tmp_path), "--compare", "--format", "md"],
        capture_output=True, text=True, check=True, timeout=300).stdout
    line = out.strip().splitlines()[-1]
    assert line.startswith("rc_table4: 18 of 53 cells where the paper reports more than 10 %")
    assert "50 of 96 compared cells in all" in line
    plain = subprocess.run(
        [sys.executable, "-m", "reports.cli", "build", str(RECORDS / "rc_table4-quick-v3"),
         "--out", str(tmp_path), "--format", "md"],
        capture_output=True, text=True, check=True, timeout=300).stdout
    assert "cells where" not in plain  # without --compare there is nothing to count


def test_clopper_pearson_known_values() -> None:
    from reports.agreement import clopper_pearson

    assert clopper_pearson(0, 10) == (0.0, pytest.approx(0.3085, abs=1e-4))
    assert clopper_pearson(10, 10) == (pytest.approx(0.6915, abs=1e-4), 1.0)
    low, high = clopper_pearson(5, 10)
    assert (low, high) == (pytest.approx(0.1871, abs=1e-4), pytest.approx(0.8129, abs=1e-4))
    with pytest.raises(ValueError, match="k=3, n=2"):
        clopper_pearson(3, 2)


def test_success_test_takes_the_papers_bound_nearest_to_ours() -> None:
    from reports.agreement import success_test, verdict

    # ours 10/10 solved where the paper's median is 6.9: at most 2 of its 5 seeds solved.
    t = success_test([100.0] * 10, 6.9)
    assert (t.k, t.n, t.paper_k, t.paper_n) == (10, 10, 2, 5)
    # hypergeometric tail by hand: 12 successes among 15 seeds, all 10 of ours among them:
    # C(12,10) * C(3,0) / C(15,10) = 66 / 3003
    assert t.p_value == pytest.approx(66 / 3003, rel=1e-9)
    assert verdict(93.1, t, paper_budget=False) == "not reproduced at this budget"
    assert verdict(93.1, t, paper_budget=True) == "contradicted"
    # 1 of 3 solved where the paper's median is 100: at least 3 of 5 solved; 3 seeds cannot decide.
    t = success_test([100.0, 0.0, 10.0], 100.0)
    assert (t.k, t.paper_k) == (1, 3) and t.p_value > 0.05
    assert verdict(-90.0, t, paper_budget=True) == "not reproduced at this budget"
    # ours on the paper's side of the threshold: nothing to test
    assert success_test([95.0, 99.0], 100.0).p_value == 1.0
    assert verdict(-5.0, t, paper_budget=True) == "reproduced"


def test_compare_arms_pairs_the_shared_seeds_and_tests_both_ways() -> None:
    # 8 of 10 seeds of A solve, none of B: Fisher's two-sided p is the two equally likely
    # extreme tables, 2 * C(10,8) / C(20,8); every paired difference is positive, so the exact
    # signed-rank p is 2 / 2^8.
    a = {s: (100.0 if s < 8 else 0.0) for s in range(10)}
    b = {s: 0.0 for s in range(10)}
    t = compare_arms({**a, 11: 100.0}, {**b, 12: 100.0})  # seeds 11 and 12: one arm each, left out
    assert (t.a_k, t.b_k, t.n) == (8, 0, 10)
    assert t.fisher_p == pytest.approx(2 * math.comb(10, 8) / math.comb(20, 8))
    assert t.wilcoxon_p == pytest.approx(2 / 2 ** 8)
    same = compare_arms(b, b)
    assert (same.fisher_p, same.wilcoxon_p) == (1.0, 1.0)
    with pytest.raises(ValueError, match="share no seed"):
        compare_arms({0: 1.0}, {1: 1.0})
