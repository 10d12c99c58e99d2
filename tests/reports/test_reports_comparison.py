"""Tables and figures that compare: no bold on a column of equal values, the paper's number beside
ours in one cell (``--side-by-side``), the runs no table shows named in the summary, a labelled
IQR band on the length curves."""

from __future__ import annotations

from pathlib import Path

from reports.cli import main as reports_main
from reports.synth import SynthRun, runset_from_synth, write_bulk_sql
from tests.locattn.test_cli import run_main


def _two_rows(len100: tuple[float, float]) -> list[SynthRun]:
    return [SynthRun(task="copy", variant=v, seed=s, n_seeds=2,
                     metrics={"best_selection_score": 0.9, "test.len15.seq_acc": a,
                              "test.len30.seq_acc": 0.5, "test.len100.seq_acc": len100[i]})
            for i, (v, a) in enumerate((("onestep", 1.0), ("content", 0.2))) for s in range(2)]


def test_a_column_of_equal_values_has_no_bold_and_side_by_side_puts_the_paper_in_the_cell() -> None:
    from reports.aggregate import aggregate
    from reports.build import paper_label, provenance
    from reports.paper import load_paper_numbers
    from reports.render import render_latex, render_markdown
    from reports.tables import get_table

    rs = runset_from_synth("s", _two_rows((0.0, 0.0)), tables=["rc_table2"])
    res = aggregate(rs, get_table("rc_table2"))
    assert res.cell("onestep", "copy:len15").best and not res.cell("content", "copy:len15").best
    # Copy 30 (50.0 both) and Copy 100 (0.0 both): every row equal, nothing is best.
    for col in ("copy:len30", "copy:len100"):
        assert not res.cell("onestep", col).best and not res.cell("content", col).best
    paper = load_paper_numbers(res.table)
    md = render_markdown(res, provenance(rs), paper_label, paper, layout="cells")
    row = next(ln for ln in md.splitlines() if ln.startswith("| OneStepAttn |"))
    assert row.split(" | ")[1:4] == ["**100.0** / 100", "50.0 / 100", "0.0 / 100"]
    assert "Published numbers" not in md and "Difference" not in md
    assert "Each cell: ours / published in Ray Chowdhury & Caragea (2023), Table 2" in md
    assert md.count("| Model |") == len(res.table.panels)
    tex = render_latex(res, provenance(rs), paper_label, paper, layout="cells")
    assert r"OneStepAttn & \textbf{100.0} / 100 & 50.0 / 100 & 0.0 / 100 &" in tex
    assert tex.count(r"\begin{table}") == 1
    assert render_latex(res, provenance(rs), paper_label, paper).count(r"\begin{table}") == 3


def test_side_by_side_flag_writes_one_table(tmp_path: Path, capsys) -> None:
    d = tmp_path / "s"
    d.mkdir()
    write_bulk_sql(d / "mlflow.db", "s", _two_rows((0.4, 0.0)), tables=["rc_table2"])
    capsys.readouterr()
    code, _, err = run_main(["build", str(d), "--side-by-side", "--format", "md", "--out",
                             str(tmp_path / "o")], capsys, reports_main)
    assert code == 0, err
    md = (tmp_path / "o" / "rc_table2.md").read_text()
    assert "| Content | 20.0 / 0 | 50.0 / 0 | 0.0 / 0 |" in md


def test_runs_no_table_shows_are_named_and_the_summary_lists_them(tmp_path: Path, capsys) -> None:
    # as rc_table2-monospread: Table 2 has no row for mono_eq19, so its runs were in no file
    d = tmp_path / "s"
    d.mkdir()
    extra = [SynthRun(task="copy", variant="mono_eq19", seed=s, n_seeds=2,
                      metrics={"best_selection_score": 0.9, "test.len15.seq_acc": 0.7})
             for s in range(2)]
    write_bulk_sql(d / "mlflow.db", "s", _two_rows((0.4, 0.0)) + extra, tables=["rc_table2"])
    capsys.readouterr()
    code, out, err = run_main(["build", str(d), "--format", "md", "--out", str(tmp_path / "o")],
                              capsys, reports_main)
    assert code == 0, err
    assert out.split() == [str(tmp_path / "o" / "rc_table2.md")]
    assert err.strip() == ("reports build: warning: 1 cell(s) of study 's' are in no row or column "
                           "of rc_table2: task=copy,variant=mono_eq19; add --table summary to "
                           "list every cell")
    code, out, err = run_main(["build", str(d), "--format", "md", "--out", str(tmp_path / "o"),
                               "--table", "rc_table2,summary"], capsys, reports_main)
    assert code == 0 and err == "", err
    assert out.split() == [str(tmp_path / "o" / f"{t}.md") for t in ("rc_table2", "summary")]
    rows = [ln for ln in (tmp_path / "o" / "summary.md").read_text().splitlines()
            if ln.startswith("| task=")]
    assert [r.split(" | ")[0] for r in rows] == ["| task=copy,variant=onestep",
                                                 "| task=copy,variant=content",
                                                 "| task=copy,variant=mono_eq19"]
    assert rows[2].endswith("| 70.0 (0/2) | – | – |")
    # every cell placed: no warning
    (tmp_path / "t").mkdir()
    write_bulk_sql(tmp_path / "t" / "mlflow.db", "t", _two_rows((0.4, 0.0)), tables=["rc_table2"])
    capsys.readouterr()
    code, _, err = run_main(["build", str(tmp_path / "t"), "--format", "md", "--out",
                             str(tmp_path / "o2")], capsys, reports_main)
    assert code == 0 and err == "", err


def test_length_curves_label_the_iqr_band() -> None:
    import polars as pl

    from reports.figures import IQR_LABEL, length_curves

    df = pl.DataFrame({"variant": ["a", "a", "b", "b"], "x": [15.0, 30.0, 15.0, 30.0],
                       "split": ["len15", "len30", "len15", "len30"], "value": [100.0, 50, 90, 10]})
    fig = length_curves({"seqAcc": df}, title="copy")
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b", IQR_LABEL]
    assert "25th–75th percentile" in IQR_LABEL
