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
from tests.test_cli import run_main


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
