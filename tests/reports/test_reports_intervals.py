"""Intervals beside every median: the bootstrap interval of a cell's statistic over seeds and
the solved rate's exact interval, in every CSV and, with ``--ci``, in Markdown and LaTeX."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("polars")
pytest.importorskip("scipy")

from reports.build import build_reports  # noqa: E402
from reports.cli import main  # noqa: E402
from reports.intervals import bootstrap_interval, rate_interval, solved_rate  # noqa: E402
from reports.tables import EXHIBITS, SUMMARY_ID, TABLES  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "results"
RECORD = RESULTS / "record" / "rc_table4-paper"


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(ln for ln in path.read_text().splitlines() if not ln.startswith("#")))


# Newcombe (1998), "Two-sided confidence intervals for the single proportion: comparison of
# seven methods", Statistics in Medicine 17:857-872, Table II: method 3 (Wilson score, no
# continuity correction) and method 5 (Clopper-Pearson exact), to 4 decimals.
NEWCOMBE = [
    (81, 263, "wilson", (0.2553, 0.3662)), (81, 263, "exact", (0.2527, 0.3676)),
    (15, 148, "wilson", (0.0624, 0.1605)), (15, 148, "exact", (0.0578, 0.1617)),
    (0, 20, "wilson", (0.0, 0.1611)), (0, 20, "exact", (0.0, 0.1684)),
    (1, 29, "wilson", (0.0061, 0.1718)), (1, 29, "exact", (0.0009, 0.1776)),
]


@pytest.mark.parametrize("k,n,method,published", NEWCOMBE)
def test_rate_intervals_match_newcombes_published_table(k, n, method, published):
    low, high = rate_interval(k, n, method=method)
    assert (round(low, 4), round(high, 4)) == published


def test_wilson_for_3_of_10_is_the_score_formula():
    # Wilson (1927): (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), z = 1.959964
    z, k, n = 1.959963984540054, 3, 10
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    expected = ((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n))
    assert rate_interval(3, 10, method="wilson") == pytest.approx(expected, abs=1e-12)
    assert (round(expected[0], 4), round(expected[1], 4)) == (0.1078, 0.6032)
    with pytest.raises(ValueError, match="valid: exact, wilson"):
        rate_interval(3, 10, method="wald")
    with pytest.raises(ValueError, match="0 <= k <= n"):
        rate_interval(4, 3)


def test_solved_rate_counts_seeds_at_or_above_the_threshold():
    s = solved_rate([100.0, 90.0, 89.99, 0.0], 90.0)
    assert (s.k, s.n) == (2, 4) and (s.low, s.high) == rate_interval(2, 4)
    assert solved_rate([], 90.0) is None


def test_bootstrap_interval_is_deterministic_order_free_and_exact_where_it_can_be():
    values = [0.0, 2.8, 0.0, 12.4, 100.0]
    first = bootstrap_interval(values)
    assert first == bootstrap_interval(list(reversed(values))) == bootstrap_interval(values)
    # n = 2: the resampled median is 0, 50 or 100 with probabilities 1/4, 1/2, 1/4
    assert bootstrap_interval([0.0, 100.0]) == (0.0, 100.0)
    # [0, 0, 0, 0, 100]: the median is 100 when 3+ of 5 draws are 100, P = 0.058 > 0.025
    assert bootstrap_interval([0.0, 0.0, 0.0, 0.0, 100.0]) == (0.0, 100.0)
    # 10 seeds, one at 100: P(median > 0) = P(5+ of 10 draws are 100) = 0.0016 < 0.025
    assert bootstrap_interval([0.0] * 9 + [100.0]) == (0.0, 0.0)
    assert bootstrap_interval([7.0]) is None and bootstrap_interval([3.0, 3.0, 3.0]) == (3.0, 3.0)
    # inf (Raffel & Ellis: 100 % never reached) stays inf, never NaN
    assert bootstrap_interval([3.0, math.inf, math.inf]) == (3.0, math.inf)
    with pytest.raises(ValueError, match="valid: median, mean"):
        bootstrap_interval(values, "mode")


def test_bootstrap_interval_agrees_with_scipys_percentile_bootstrap():
    from scipy.stats import bootstrap

    x = np.array([64.55, 98.4, 99.9, 100.0, 100.0, 12.0, 55.5])
    for stat in ("median", "mean"):
        ours = bootstrap_interval(x, stat)
        ref = bootstrap((np.sort(x),), getattr(np, stat), n_resamples=10_000, method="percentile",
                        rng=np.random.default_rng(0), vectorized=True).confidence_interval
        # the same draws; scipy interpolates between order statistics, ours takes them
        assert ref.low - 1.0 <= ours[0] <= ref.low + 1e-9 and ref.high - 1e-9 <= ours[1] <= ref.high + 1.0


def test_every_cell_of_a_built_table_has_its_interval_and_solved_rate_in_the_csv(tmp_path):
    build_reports(RECORD, tables=["rc_table4"], formats=("csv", "md"), out_dir=tmp_path)
    build_reports(RECORD, tables=["rc_table4"], formats=("csv",), out_dir=tmp_path / "full", full_frame=True)
    rows, full = _rows(tmp_path / "rc_table4.csv"), _rows(tmp_path / "full" / "rc_table4.csv")
    # --full-frame: every cell of the paper's 4 x 24 frame; by default the CSV holds the cells the
    # Markdown shows (reports.render.shown_frame): those of the rows and columns holding a result,
    # so every cell with a result, each as in the full frame
    assert len(full) == 4 * 24
    shown = ({r["row"] for r in rows}, {r["column"] for r in rows})
    assert rows == [r for r in full if r["row"] in shown[0] and r["column"] in shown[1]]
    assert {(r["row"], r["column"]) for r in full if r["n"] != "0"} <= {(r["row"], r["column"]) for r in rows}
    assert len(rows) < len(full)
    for r in full:
        assert r["ci_stat"] == "median"
        if r["n"] == "0":
            assert r["ci_low"] == r["solved_k"] == ""
            continue
        seeds = [v for _, v in json.loads(r["seeds"])]
        assert float(r["ci_low"]) <= float(r["median"]) <= float(r["ci_high"])
        assert (float(r["ci_low"]), float(r["ci_high"])) == pytest.approx(bootstrap_interval(seeds))
        k = sum(v >= 90.0 for v in seeds)
        assert (r["solved_at"], r["solved_k"], r["solved_n"]) == ("90.0", str(k), str(len(seeds)))
        assert (float(r["solved_low"]), float(r["solved_high"])) == pytest.approx(rate_interval(k, len(seeds)))
    # the intervals stay out of Markdown unless asked for
    md = (tmp_path / "rc_table4.md").read_text()
    assert "bootstrap" not in md and "[0.0, 100.0]" not in md


def test_ci_flag_shows_the_intervals_in_markdown_and_latex(tmp_path, capsys):
    assert main(["build", str(RECORD), "--table", "rc_table4", "--solved", "--ci", "--out", str(tmp_path)]) == 0
    md, tex = (tmp_path / "rc_table4.md").read_text(), (tmp_path / "rc_table4.tex").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| -Step 2 |"))
    # -Step 2, Copy 15: seeds 99.9, 98.4, 100, 100, 64.55
    assert "99.9 [64.5, 100.0] (4/5, 28–99 %)" in row
    assert "95 % percentile bootstrap interval of the median over seeds (10,000 resamples" in md
    assert "Clopper-Pearson" in md
    assert r"99.9 [64.5, 100.0] (4/5, 28--99 \%)" in tex and "bootstrap interval" in tex
    csv_text = _rows(tmp_path / "rc_table4.csv")
    step2 = next(r for r in csv_text if r["row"] == "onestep_no_step2" and r["column"] == "copy:len15")
    assert step2["text"] == "99.9 [64.5, 100.0] (4/5, 28–99 %)"


def test_a_table_of_means_carries_the_means_interval(tmp_path):
    rec = RESULTS / "record" / "rc_table3_scan-quick"
    build_reports(rec, formats=("csv", "md"), out_dir=tmp_path, ci=True)
    rows = [r for r in _rows(next(tmp_path.glob("*.csv"))) if r["n"] not in ("0", "1")]
    assert rows and all(r["ci_stat"] == "mean" for r in rows)
    for r in rows:
        seeds = [v for _, v in json.loads(r["seeds"])]
        assert (float(r["ci_low"]), float(r["ci_high"])) == pytest.approx(bootstrap_interval(seeds, "mean"))
    assert "bootstrap interval of the mean over seeds" in next(tmp_path.glob("*.md")).read_text()


def test_every_committed_table_csv_carries_an_interval_for_every_cell_of_two_seeds_or_more():
    tables = set(TABLES) - set(EXHIBITS) - {SUMMARY_ID}
    csvs = sorted(p for p in RESULTS.glob("*/*.csv") if p.stem in tables)
    assert len(csvs) > 30
    for path in csvs:
        for r in _rows(path):
            if int(r["n"]) >= 2:
                assert r["ci_low"] and r["ci_high"], (path, r["row"], r["column"])
            if r["solved_k"]:
                assert float(r["solved_low"]) <= int(r["solved_k"]) / int(r["solved_n"]) <= float(r["solved_high"])


def test_every_committed_summary_csv_carries_the_intervals_of_each_headline_median():
    paths = sorted(RESULTS.glob(f"*/{SUMMARY_ID}.csv"))
    assert len(paths) >= 5
    for path in paths:
        rows = _rows(path)
        keys = [c.removesuffix(".median") for c in rows[0] if c.endswith(".median")]
        for r in rows:
            for k in keys:
                if r[f"{k}.median"] == "":
                    continue
                n = int(r[f"{k}.solved_n"])
                assert (float(r[f"{k}.solved_low"]), float(r[f"{k}.solved_high"])) == pytest.approx(
                    rate_interval(int(r[f"{k}.solved"]), n)), (path, r["cell"], k)
                if n >= 2:
                    assert float(r[f"{k}.ci_low"]) <= float(r[f"{k}.median"]) <= float(r[f"{k}.ci_high"])


@pytest.mark.skipif(__import__("shutil").which("pdflatex") is None, reason="pdflatex not installed")
@pytest.mark.parametrize("record, table", [("rc_table4-paper", "rc_table4"), ("raffel_table1-quick", "raffel_table1"),
                                           ("rc_table3_scan-quick", "rc_table3")])
def test_ci_tables_compile_with_pdflatex(record, table, tmp_path):
    from tests.reports.test_reports_render import assert_compiles

    build_reports(RESULTS / "record" / record, tables=[table], formats=("latex",), out_dir=tmp_path,
                  solved_at=90.0, ci=True, standalone=True)
    doc = (tmp_path / f"{table}.tex").read_text()
    assert "bootstrap" in doc
    assert_compiles(doc, tmp_path)
