"""Tables of what was run: a table built from a study shows the rows and columns that hold a
result of it (``--full-frame``: the paper's whole table), its standalone LaTeX takes the page
it needs (portrait unless the table is wider), and a table asked for that has no cell of the
study is refused in one line with nothing written. Synthetic stores (``reports.synth``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.cli import main as reports_main
from reports.synth import SynthRun, write_bulk_sql
from tests.locattn.test_cli import run_main


def _smoke_like(tmp_path: Path, name: str = "s") -> Path:
    """A store shaped like ``rc_table2 --profile smoke``'s: Copy only, tested on len15 only,
    two variants of two seeds."""
    d = tmp_path / name
    d.mkdir()
    runs = [SynthRun(task="copy", variant=v, seed=s, n_seeds=2,
                     metrics={"best_selection_score": 0.9, "test.len15.seq_acc": a + 0.1 * s,
                              "test.len15.edit_distance": 3.0 - s})
            for v, a in (("onestep", 0.8), ("content", 0.1)) for s in range(2)]
    write_bulk_sql(d / "mlflow.db", name, runs, tables=["rc_table2", "rc_table9"])
    return d


def test_a_table_with_no_cell_of_the_study_is_one_line_exit_2_and_nothing_written(tmp_path: Path, capsys) -> None:
    d = _smoke_like(tmp_path)
    capsys.readouterr()  # (MLflow's lines creating the store)
    out = tmp_path / "o"
    code, stdout, err = run_main(["build", str(d), "--table", "dubois_table3", "--out", str(out)],
                                 capsys, reports_main)
    assert code == 2 and stdout == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("reports build: table dubois_table3 has no cell of study 's' (its runs are of "
                          "task=copy,variant=onestep; task=copy,variant=content); the study's tables: "
                          "rc_table2, rc_table9"), err
    assert not out.exists()
    # one of two tables without a cell: the same refusal, nothing of the other written either
    code, _, err = run_main(["build", str(d), "--table", "rc_table2,dubois_table3", "--out", str(out)],
                            capsys, reports_main)
    assert code == 2 and "table dubois_table3 has no cell" in err and not out.exists()


def test_a_table_shows_the_rows_and_columns_that_hold_a_result_and_the_full_frame_on_request(
        tmp_path: Path, capsys) -> None:
    d = _smoke_like(tmp_path)
    capsys.readouterr()
    code, _, err = run_main(["build", str(d), "--format", "md,csv", "--solved", "--out", str(tmp_path / "o")],
                            capsys, reports_main)
    assert code == 0, err
    md = (tmp_path / "o" / "rc_table2.md").read_text()
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert table == ["| Model | Copy 15 |", "|:--|--:|", "| Content | 15.0 (0/2) |", "| *Ours* | |",
                     "| OneStepAttn | **85.0 (1/2)** |"], md
    assert ("Shown: the 2 of 6 rows and 1 of 24 columns of the paper's table that hold a run of this "
            "study (--full-frame: all of them).") in md
    assert "–" not in "".join(table) and "lack the metric" not in md  # (len30 and len100: never tested)
    csv_rows = [ln for ln in (tmp_path / "o" / "rc_table2.csv").read_text().splitlines()
                if ln.startswith("rc_table2,")]
    assert [r.split(",")[1] for r in csv_rows] == ["content", "onestep"]
    # --full-frame: the paper's 6 x 24 frame, as before
    code, _, err = run_main(["build", str(d), "--format", "md", "--solved", "--full-frame", "--out",
                             str(tmp_path / "f")], capsys, reports_main)
    assert code == 0, err
    full = (tmp_path / "f" / "rc_table2.md").read_text()
    assert "Shown:" not in full and "No finished run with this metric: 142 cell(s)." in full
    assert sum(ln.count("| –") for ln in full.splitlines()) == 142


def test_a_frame_keeps_a_column_whose_only_runs_are_running_or_failed(tmp_path: Path) -> None:
    from reports.aggregate import aggregate
    from reports.render import shown_frame
    from reports.synth import runset_from_synth
    from reports.tables import get_table

    runs = [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=2,
                     metrics={"best_selection_score": 0.9, "test.len15.seq_acc": 1.0}) for s in range(2)]
    runs += [SynthRun(task="lookup", variant="content", seed=0, n_seeds=2, status="running"),
             SynthRun(task="lookup", variant="content", seed=1, n_seeds=2, status="failed")]
    res = shown_frame(aggregate(runset_from_synth("s", runs, tables=["rc_table2"]), get_table("rc_table2")))
    assert [c.label for p in res.table.panels for g in p.groups for c in g.columns] == ["15", "7", "9", "11"]
    assert res.table.rows == ("content", "onestep")
    assert res.cell("content", "lookup:longer_seen_1").n_running == 1


needs_pdflatex = pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")

#: Typesets each table's box and logs its width, the line's and the page's (pdflatex's own).
PROBE = (r"\typeout{PAGE \the\paperwidth\space\the\paperheight}",
         r"\renewcommand{\fitwidth}[1]{\sbox{\fitbox}{#1}\typeout{BOX \the\wd\fitbox\space LINE "
         r"\the\linewidth}\usebox{\fitbox}}")


def _compile(tex: Path) -> tuple[tuple[float, float], list[tuple[float, float]]]:
    """pdflatex ``tex`` with :data:`PROBE`: (page width, height), [(box width, line width)] in pt."""
    from reports.render import SHRINK_IF_WIDER

    doc = tex.read_text()
    doc = doc.replace(r"\begin{document}", "\\begin{document}\n" + "\n".join(PROBE), 1)
    doc = doc.replace(SHRINK_IF_WIDER, r"}\typeout{BOX \the\wd0\space LINE \the\linewidth}\usebox0")
    work = tex.parent / "probe"
    work.mkdir(exist_ok=True)
    (work / "t.tex").write_text(doc)
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=work,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    log = (work / "t.log").read_text(errors="replace")
    page = tuple(float(x) for x in re.search(r"PAGE ([\d.]+)pt\s*([\d.]+)pt", log).groups())
    boxes = [(float(b), float(w)) for b, w in re.findall(r"BOX ([\d.]+)pt\s*LINE ([\d.]+)pt", log)]
    return page, boxes


@needs_pdflatex
def test_a_small_study_s_table_is_one_portrait_page_at_its_natural_size(tmp_path: Path, capsys) -> None:
    # study report rc_table2-smoke --format latex --standalone --solved: was a landscape A3 page
    d = _smoke_like(tmp_path)
    capsys.readouterr()
    code, _, err = run_main(["build", str(d), "--format", "latex", "--standalone", "--solved", "--out",
                             str(tmp_path / "o")], capsys, reports_main)
    assert code == 0, err
    tex = tmp_path / "o" / "rc_table2.tex"
    assert "landscape" not in tex.read_text()
    (width, height), boxes = _compile(tex)
    assert width < height and round(width) == 598  # A4 portrait (597.5 pt)
    assert boxes and all(b <= w for b, w in boxes), boxes  # natural size: nothing shrunk
    assert tex.read_text().count(r"\begin{tabular}") == 1


@needs_pdflatex
def test_a_table_takes_a_landscape_page_only_where_it_needs_one(tmp_path: Path, capsys) -> None:
    import dataclasses

    from reports.aggregate import aggregate
    from reports.build import paper_label, provenance
    from reports.paper import load_paper_numbers
    from reports.render import render_latex, standalone_latex
    from reports.synth import runset_from_synth
    from reports.tables import get_table

    # the smoke study's whole frame, with the paper's numbers: every table fits a portrait line
    d = _smoke_like(tmp_path)
    capsys.readouterr()
    out = tmp_path / "o"
    code, _, err = run_main(["build", str(d), "--table", "rc_table2", "--format", "latex", "--standalone",
                             "--solved", "--compare", "--full-frame", "--out", str(out)], capsys, reports_main)
    assert code == 0, err
    (width, height), boxes = _compile(out / "rc_table2.tex")
    assert width < height and boxes and all(b <= w for b, w in boxes), boxes
    # every cell of Table 2 run, 'ours (k/n) / paper' in each: wider than a portrait line
    t = get_table("rc_table2")
    runs = [SynthRun(task=task, variant=v, seed=s, n_seeds=5,
                     metrics={"best_selection_score": 0.9,
                              **{f"test.{sp}.seq_acc": 0.123 + 0.3 * s for c in t.columns for sp in c.splits}})
            for task in t.tasks for v in t.rows for s in range(3)]
    rs = runset_from_synth("s", runs, tables=["rc_table2"])
    res = dataclasses.replace(aggregate(rs, t), solved_at=90.0)
    tex = tmp_path / "wide.tex"
    tex.write_text(standalone_latex(render_latex(res, provenance(rs), paper_label, load_paper_numbers(t), "cells")))
    (width, height), boxes = _compile(tex)
    assert width > height and boxes and all(b <= w for b, w in boxes), boxes
    assert max(b for b, _ in boxes) > 483.7  # (A4 portrait's line: needed)
