"""End to end: a real MLflow SQLite store written with MlflowClient -> reports build."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from reports.build import build_reports
from reports.cli import main
from reports.runset import ReportsError, read_runs
from reports.synth import SynthRun, create_empty_store, write_with_client

SPLITS = ("len15", "len30", "len100")


def _runs() -> list[SynthRun]:
    rng = np.random.default_rng(1)
    runs = []
    for v in ("onestep", "onestep_no_step2", "onestep_no_sigmoid"):
        for lr, dev in ((0.001, 0.9), (0.0003, 0.7)):
            for s in range(3):
                acc = {f"test.{sp}.seq_acc": float(rng.uniform(0, 1)) for sp in SPLITS}
                runs.append(SynthRun(task="copy", variant=v, seed=s, n_seeds=3,
                                     hparams={"optim.lr": lr},
                                     metrics={"best_selection_score": dev + 0.01 * s, **acc}))
    # onestep_no_step3: one finished seed, one running, one failed, one finished without metrics.
    runs.append(SynthRun(task="copy", variant="onestep_no_step3", seed=0, n_seeds=3,
                         hparams={"optim.lr": 0.001},
                         metrics={"best_selection_score": 0.5, **{f"test.{sp}.seq_acc": 0.25 for sp in SPLITS}}))
    runs.append(SynthRun(task="copy", variant="onestep_no_step3", seed=1, n_seeds=3,
                         hparams={"optim.lr": 0.001}, status="running",
                         metrics={"best_selection_score": 0.4}))
    runs.append(SynthRun(task="copy", variant="onestep_no_step3", seed=2, n_seeds=3,
                         hparams={"optim.lr": 0.001}, status="failed"))
    runs.append(SynthRun(task="recopy", variant="onestep", seed=0, n_seeds=1,
                         hparams={"optim.lr": 0.001}, metrics={"best_selection_score": 0.5}))
    return runs


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("studies") / "e2e"
    d.mkdir()
    write_with_client(f"sqlite:///{d / 'mlflow.db'}", "e2e", _runs(), tables=["rc_table4"])
    return d


def _expected_median(variant: str, split: str) -> float:
    vals = [r.metrics[f"test.{split}.seq_acc"] for r in _runs()
            if r.variant == variant and r.hparams == {"optim.lr": 0.001} and r.task == "copy"]
    return float(np.median(vals)) * 100


def test_build_writes_tables_from_real_store(study_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "a"
    paths = build_reports(study_dir, None, None, ("md", "latex", "csv"), out)
    assert sorted(p.name for p in paths) == ["rc_table4.csv", "rc_table4.md", "rc_table4.tex"]
    csv = pl.read_csv(out / "rc_table4.csv", comment_prefix="#")
    row = csv.filter((pl.col("row") == "onestep_no_step2") & (pl.col("column") == "copy:len30"))
    assert row["median"][0] == pytest.approx(_expected_median("onestep_no_step2", "len30"))
    assert row["n"][0] == 3 and row["hparams"][0] == '["{\\"optim.lr\\": 0.001}"]'
    inc = csv.filter((pl.col("row") == "onestep_no_step3") & (pl.col("column") == "copy:len15"))
    assert (inc["n"][0], inc["n_expected"][0], inc["n_running"][0], inc["n_failed"][0]) == (1, 3, 1, 1)
    assert inc["text"][0] == "25.0†"
    md = (out / "rc_table4.md").read_text()
    assert "study: e2e" in md and "runs: 22 trial runs and 1 study parent run; sha256 of (run id, status, end time) of these 23: " in md
    assert "-Step 3 / Copy 15: 1 of 3 (1 running, 1 failed)" in md
    # recopy/onestep finished without test metrics -> the gap is reported, the cell is missing.
    assert "Data: OneStepAttn / ReCopy 15, ReCopy 30, ReCopy 100: 1 finished run(s) lack the metric" in md
    best = csv.filter(pl.col("best") == 1)["row"].to_list()
    assert best, "some cell must be bold"

    # Same runs -> byte-identical files.
    out2 = tmp_path / "b"
    build_reports(study_dir, None, ["rc_table4"], ("md", "latex", "csv"), out2)
    for name in ("rc_table4.md", "rc_table4.tex", "rc_table4.csv"):
        assert (out / name).read_bytes() == (out2 / name).read_bytes()


def test_sql_readers_agree(study_dir: Path) -> None:
    """sqlite3 fast path and the SQLAlchemy path (what Postgres uses) read the same frames."""
    keys = ["best_selection_score", "test.len15.seq_acc"]
    a = read_runs(f"sqlite:///{study_dir / 'mlflow.db'}", "e2e", metric_keys=keys)
    b = read_runs(f"sqlite+pysqlite:///{study_dir / 'mlflow.db'}", "e2e", metric_keys=keys)
    assert a.runs.equals(b.runs) and a.metrics.equals(b.metrics)
    assert a.runs.height == 23 and set(a.metrics["key"].unique()) == set(keys)
    assert a.tidy().height == a.metrics.height


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rest_reader_matches_sql(study_dir: Path, tmp_path: Path) -> None:
    """A real `mlflow server` on loopback, read through MlflowClient.search_runs pages."""
    db = tmp_path / "copy.db"
    shutil.copy(study_dir / "mlflow.db", db)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        uri = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    pytest.fail("mlflow server did not start")
                time.sleep(0.5)
        keys = ["best_selection_score", "test.len15.seq_acc"]
        for _ in range(30):
            try:
                rest = read_runs(uri, "e2e", metric_keys=keys)
                break
            except ReportsError:
                time.sleep(1)
        sql = read_runs(f"sqlite:///{db}", "e2e", metric_keys=keys)
        cols = [c for c in sql.runs.columns]
        assert rest.runs.select(cols).equals(sql.runs.select(cols))
        assert rest.metrics.equals(sql.metrics)
        out = tmp_path / "rest"
        paths = build_reports(uri, "e2e", ["rc_table4"], ("md",), out)
        assert paths == [out / "rc_table4.md"]
        with pytest.raises(ReportsError, match="study 'nope' not found"):
            read_runs(uri, "nope")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def test_cli_strict_refuses_incomplete(study_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "strict"
    rc = main(["build", str(study_dir), "--table", "rc_table4", "--strict", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 3
    assert "rc_table4: -Step 3 (onestep_no_step3) / Copy 15 [copy:len15]: 1 of 3 seeds" in err
    assert "rc_table4: -Step 2 (onestep_no_step2) / ReCopy 15 [recopy:len15]: missing" in err
    assert not out.exists()
    rc = main(["build", str(study_dir), "--format", "md", "--out", str(out), "--stat", "iqr",
               "--compare", "--figures"])
    assert rc == 0 and (out / "rc_table4.md").exists()
    md = (out / "rc_table4.md").read_text()
    assert "the median over seeds [25th, 75th percentile]" in md
    assert "**Published numbers** (Ray Chowdhury & Caragea (2023), Table 4" in md
    # -Step 2 published Copy 30 = 1.4; ours is the median of the lr=0.001 seeds.
    diff = _expected_median("onestep_no_step2", "len30") - 1.4
    assert f"{diff:+.1f}" in md.split("**Difference**")[1]
    assert (out / "figures" / "length_copy.png").stat().st_size > 5000
    assert (out / "figures" / "length_copy.pdf").exists()


def test_bad_inputs_get_clear_messages(study_dir: Path, tmp_path: Path, capsys) -> None:
    rc = main(["build", str(tmp_path / "nosuch"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    rc = main(["build", str(empty)])
    assert rc == 2 and "holds no mlflow.db" in capsys.readouterr().err
    rc = main(["build", str(study_dir), "--study", "other", "--out", str(tmp_path / "o")])
    assert rc == 2 and "study 'other' not found" in capsys.readouterr().err
    assert "studies there: e2e" in str(pytest.raises(ReportsError, read_runs,
                                                      f"sqlite:///{study_dir / 'mlflow.db'}", "x").value)
    norun = tmp_path / "norun"
    norun.mkdir()
    create_empty_store(norun / "mlflow.db", "norun")
    rc = main(["build", str(norun), "--table", "rc_table2"])
    assert rc == 2 and "has no runs yet" in capsys.readouterr().err
    rc = main(["build", str(study_dir), "--table", "rc_table99", "--out", str(tmp_path / "o")])
    assert rc == 2 and "unknown table id 'rc_table99' (did you mean rc_table9?); valid: dubois_interp, dubois_table3" in capsys.readouterr().err
    rc = main(["build", str(study_dir), "--format", "html", "--out", str(tmp_path / "o")])
    assert rc == 2 and "unknown format(s) html; valid: md, latex, csv" in capsys.readouterr().err
