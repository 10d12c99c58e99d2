"""Ablation effects (reports effects): paired differences over shared seeds with a bootstrap
interval, the probability of improvement, Holm-corrected Wilcoxon tests and a forest plot,
from the committed Table 4 records."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("polars")
pytest.importorskip("scipy")

from reports.aggregate import Cell, holm_adjust  # noqa: E402
from reports.cli import main  # noqa: E402
from reports.effects import build_effects, effect  # noqa: E402
from reports.intervals import bootstrap_interval  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "results"
RECORDS = RESULTS / "record"
#: The committed effects: output folder -> (records, base), as docs/howto/reproduce-a-table.md
#: gives the commands.
COMMITTED = {
    "rc_table4-effects": (["rc_table4-paper", "rc_table4-gpu", "rc_table4-gpu_seeds20"], "onestep"),
    "rc_table4-effects-seeds10": ([f"rc_table4-seeds10-{s}" for s in ("copy", "revcopy", "step3", "sigmoid", "invrev")],
                                  "onestep"),
}


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(ln for ln in path.read_text().splitlines() if not ln.startswith("#")))


def test_an_effect_is_the_paired_difference_over_shared_seeds():
    base = Cell(row="b", column="c", seeds=((0, 100.0), (1, 100.0), (2, 100.0), (3, 100.0), (4, 0.0), (9, 50.0)))
    other = Cell(row="a", column="c", seeds=((0, 16.05), (1, 0.65), (2, 15.9), (3, 14.6), (4, 0.0), (7, 1.0)))
    e = effect("a", "c", "Copy 30", base, other, "max")
    assert e.seeds == (0, 1, 2, 3, 4)  # seeds 7 and 9 have no partner
    assert e.diffs == pytest.approx((-83.95, -99.35, -84.1, -85.4, 0.0))
    assert e.mean == pytest.approx(-70.56) and e.median == pytest.approx(-84.1)
    assert (e.ci_low, e.ci_high) == bootstrap_interval(list(e.diffs), "mean")
    assert e.p_improve == pytest.approx(0.1)  # no seed better, one tie counting one half
    assert e.p_value == pytest.approx(0.125) and e.n_nonzero == 4 and not e.testable  # 2 / 2**4
    # lower is better (edit distance): a smaller value is the improvement
    lower = effect("a", "c", "x", base, other, "min")
    assert lower.p_improve == pytest.approx(0.9)
    assert effect("a", "c", "x", base, Cell(row="a", column="c", seeds=((8, 1.0),)), "max") is None


def test_table4_effects_from_the_committed_records(tmp_path, capsys):
    sources = [str(RECORDS / r) for r in COMMITTED["rc_table4-effects"][0]]
    assert main(["effects", *sources, "--base", "onestep", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in printed) == sorted(
        ["effects-onestep.md", "effects-onestep.tex", "effects-onestep.csv", "effects-onestep.png", "effects-onestep.pdf"])
    rows = _rows(tmp_path / "effects-onestep.csv")
    # -Step 2 and -Step 3 on Copy and Reverse Copy (rc_table4-paper), -Sigmoid on the Inv tasks (rc_table4-gpu)
    assert {(r["variant"], r["column"].split(":")[0]) for r in rows} == {
        ("onestep_no_step2", "copy"), ("onestep_no_step2", "reverse_copy"), ("onestep_no_step3", "copy"),
        ("onestep_no_step3", "reverse_copy"), ("onestep_no_sigmoid", "inv_recopy"),
        ("onestep_no_sigmoid", "inv_reverse_recopy")}
    assert len(rows) == 18 and all(r["n"] == "5" for r in rows)
    step2 = next(r for r in rows if r["variant"] == "onestep_no_step2" and r["column"] == "copy:len30")
    assert float(step2["mean_diff"]) == pytest.approx(-70.56) and float(step2["p_improve"]) == pytest.approx(0.1)
    assert [float(r["p_holm"]) for r in rows] == pytest.approx(holm_adjust([float(r["p_value"]) for r in rows]))
    md = (tmp_path / "effects-onestep.md").read_text()
    assert "| -Step 2 | Copy 30 | 5 | 100.0 | 14.6 | -70.6 [-93.2, -33.9] | 0.10 | 0.125 (1) |" in md
    assert "Holm-corrected over the 18 tests" in md and "0 of 18 tests could" in md
    assert r"-70.6 [-93.2, -33.9]" in (tmp_path / "effects-onestep.tex").read_text()


@pytest.mark.parametrize("folder", sorted(COMMITTED))
def test_committed_effects_regenerate_byte_for_byte(folder, tmp_path):
    records, base = COMMITTED[folder]
    written = build_effects([RECORDS / r for r in records], base, out_dir=tmp_path, figure=False)
    assert written
    for path in written:
        assert path.read_bytes() == (RESULTS / folder / path.name).read_bytes(), path.name
    assert (RESULTS / folder / "figures" / f"effects-{base}.png").is_file()


def test_the_forest_plot_has_a_row_per_effect_and_a_group_per_variant(tmp_path):
    from reports.effects import collect, effects
    from reports.figures import forest_plot

    res = effects(collect([RECORDS / r for r in COMMITTED["rc_table4-effects"][0]]).results, "onestep")
    fig = forest_plot(res)
    ax = fig.axes[0]
    assert len(ax.get_yticks()) == len(res.effects) == 18
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(res.variants)
    assert ax.get_yticklabels()[0].get_text() == "Copy 15 (n=5)"


@pytest.mark.parametrize("argv, needle", [
    (["--base", "onestep_typo"], "variant 'onestep_typo' is no row of rc_table4; valid: onestep, "),
    (["--base", "onestep", "--vs", "content"], "variant 'content' is no row of rc_table4"),
    (["--base", "onestep", "--table", "rc_table7"], "table rc_table7 has no cell of study 'rc_table4-paper'"),
    (["--base", "onestep", "--format", "html"], "unknown format(s) html; valid: md, latex, csv"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, needle, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["effects", str(RECORDS / "rc_table4-paper"), *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and err.startswith("reports effects: ")
    assert not out.exists()


def test_records_merge_into_one_table_and_pair_only_shared_seeds(tmp_path, capsys):
    # seeds 5-19 of -Step 2 and -Step 3 on Reverse Copy sit in gpu_seeds20, seeds 0-4 (and
    # OneStepAttn's) in paper: the merged cells hold 20 seeds, the effects pair 5
    from reports.effects import collect, effects

    built = collect([RECORDS / "rc_table4-paper", RECORDS / "rc_table4-gpu_seeds20"])
    cell = built.results[0].cell("onestep_no_step2", "reverse_copy:len15")
    assert cell.n == 20 and cell.records == ("rc_table4-gpu_seeds20", "rc_table4-paper")
    merged = effects(built.results, "onestep")
    alone = effects(collect(RECORDS / "rc_table4-paper").results, "onestep")
    assert [(e.variant, e.column, e.seeds, e.diffs) for e in merged.effects] == \
        [(e.variant, e.column, e.seeds, e.diffs) for e in alone.effects]
    assert main(["effects", str(tmp_path / "nope"), "--base", "onestep"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_one_cell_with_other_seeds_in_two_tables_is_refused():
    from dataclasses import replace

    from reports.effects import collect, effects

    result = collect(RECORDS / "rc_table4-paper").results[0]
    cell = result.cell("onestep", "copy:len15")
    other = replace(result, cells={**result.cells, ("onestep", "copy:len15"): replace(cell, seeds=cell.seeds[:3])})
    with pytest.raises(Exception, match=r"onestep / Copy 15 has other seeds in rc_table4 than in rc_table4: "
                                        "pool its records into one table first"):
        effects([result, other], "onestep")


def test_arms_with_seeds_but_none_shared_are_named_under_the_table():
    from reports.effects import EffectsResult, render_effects_latex, render_effects_markdown

    e = effect("a", "c", "Copy 15", Cell(row="b", column="c", seeds=((0, 1.0), (1, 2.0))),
               Cell(row="a", column="c", seeds=((0, 3.0), (1, 2.0))), "max")
    res = EffectsResult(base="b", variants=("a",), tables=("t",), source="S", metric="seq_acc",
                        direction="max", decimals=1, effects=(e,), skipped=(("a", "Copy 30"),))
    assert render_effects_markdown(res, [], str).endswith("\n- No seed shared with b: a / Copy 30.\n")
    assert r"{\footnotesize No seed shared with b: a / Copy 30.}" in render_effects_latex(res, [], str)


@pytest.mark.skipif(__import__("shutil").which("pdflatex") is None, reason="pdflatex not installed")
def test_the_committed_effects_table_compiles_with_pdflatex(tmp_path):
    from tests.reports.test_reports_render import assert_compiles

    body = (RESULTS / "rc_table4-effects" / "effects-onestep.tex").read_text()
    assert_compiles("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs,graphicx}\n"
                    "\\begin{document}\n" + body + "\\end{document}\n", tmp_path)
