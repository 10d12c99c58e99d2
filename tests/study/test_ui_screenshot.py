"""The MLflow UI as a researcher sees it: ``study ui`` serves a real study store with a real
``mlflow server``, and a real headless Chromium opens the URL it prints (issue 16, item 1).

The page opens the study's saved view: a row per cell run, named by what differs (``1step·copy``)
and showing the medians over its seeds in the headline metric columns, its seeds' runs inside.
Skips, saying why, where no Chromium is installed (``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no headless browser: apt-get install chromium (Debian) to run this check")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _store(root: Path) -> list[str]:
    """A study directory with a real MLflow store: 2 variants x 2 seeds x 2 learning rates,
    named as the study names its runs, each seed's run under its cell's run as a launch writes
    them (the cell runs by the study's own writer). Returns the cell runs' names."""
    import json
    import sqlite3

    from record.summary import seed_percents
    from record.writer import RecordWriter
    from reports.synth import SynthRun, write_bulk_sql
    from study.recording.naming import cell_name, run_name

    d = root / "ui-demo"
    d.mkdir(parents=True)
    acc = {("onestep", 0): 0.4321, ("onestep", 1): 0.9543, ("content", 0): 0.125, ("content", 1): 0.25}
    finals = {(v, s, lr): {"best_selection_score": 0.9 if lr == 1e-3 else 0.1,
                           "test.len100.seq_acc": acc[v, s] if lr == 1e-3 else 0.0}
              for v in ("onestep", "content") for s in (0, 1) for lr in (1e-3, 3e-3)}
    # each seed's run with its columns in percent, as the study's recorder logs them
    runs = [SynthRun(task="copy", variant=v, seed=s, hparams={"optim.lr": lr}, n_seeds=2,
                     metrics={**m, **seed_percents(m)}) for (v, s, lr), m in finals.items()]
    write_bulk_sql(d / "mlflow.db", "ui-demo", runs, tables=["rc_table2"])
    uri = f"sqlite:///{d / 'mlflow.db'}"
    writer = RecordWriter(tracking_uri=uri, study="ui-demo", artifact_location=None, parent_tags={},
                          cell_name=cell_name).open()
    con = sqlite3.connect(d / "mlflow.db")
    with con:  # write_bulk_sql numbers the trial runs 2, 3, ... in order (1 is the parent)
        for i, r in enumerate(runs):
            rid = f"{i + 2:032x}"
            cell = writer.cell_run(f"task={r.task},variant={r.variant}", r.task, r.variant)
            con.execute("UPDATE runs SET name = ? WHERE run_uuid = ?",
                        (run_name(task=r.task, variant=r.variant, seed=r.seed, hparams=r.hparams), rid))
            con.execute("UPDATE tags SET value = ? WHERE run_uuid = ? AND key = 'mlflow.parentRunId'",
                        (cell.run_id, rid))
    con.close()
    meta = {"name": "ui-demo", "spec_path": "", "profile": "smoke", "only": {}, "raw": {},
            "resolved": {"grid": {"task": ["copy"], "variant": ["onestep", "content"]},
                         "hparams": {"optim.lr": [1e-3, 3e-3]}, "search": None, "seeds": [0, 1]},
            "tracking_uri": uri}
    (d / "study.json").write_text(json.dumps(meta))
    return [cell_name("copy", v) for v in ("onestep", "content")]


def _browser(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--window-size=1600,1000", "--virtual-time-budget=15000",
         *args], capture_output=True, text=True, timeout=180)


def test_study_ui_opens_a_row_per_cell_with_its_medians_in_the_metric_columns(tmp_path: Path) -> None:
    root = tmp_path / "studies"
    names = _store(root)
    port = _free_port()
    ui = subprocess.Popen([sys.executable, "-m", "study.cli", "ui", "ui-demo", "--root", str(root),
                           "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        first = ui.stdout.readline()
        m = re.match(r"MLflow UI for study 'ui-demo': (http://127\.0\.0\.1:\d+/#/experiments/\d+/runs"
                     r"\?viewStateShareKey=locattn-cells)$", first.strip())
        assert m, first
        url = m.group(1)
        deadline = time.time() + 120
        while True:  # the server is up when its port accepts connections
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.time() < deadline, "mlflow server did not start in 120 s"
            assert ui.poll() is None, "study ui exited"
            time.sleep(1)
        dom = _browser("--dump-dom", url, profile=tmp_path / "profile1").stdout
        # The saved view: its columns are the table's numbers in percent, the seeds solved and
        # finished, then the selection score; each cell's run is a row (its 4 runs nested inside
        # it, collapsed), and the row shows the medians of the chosen lr.
        # (ag-grid's DOM keeps its own order; a header cell's aria-colindex is where it shows)
        shown = sorted({(int(i), c) for i, c in re.findall(
            r'<div[^>]*?aria-colindex="(\d+)"[^>]*?col-id="metrics\.`([^`]+)`"', dom)})
        assert [c for _, c in shown] == ["len100 pct", "solved", "seeds_finished", "best_selection_score"], shown
        assert shown[0][0] == 2  # the first column after the row's checkbox and name
        assert "test.len100.seq_acc" not in dom  # the fraction: not a column of the view
        for name in names:
            assert name in dom, name
        # median of 43.21 and 95.43 %, one of them solved (>= 90 %); of 12.5 and 25 %, none
        assert re.search(r">69\.32<", dom) and re.search(r">18\.75<", dom)

        def column(name: str) -> list[str]:
            return re.findall(rf'col-id="metrics\.`{re.escape(name)}`"[^>]*><div[^>]*><span[^>]*>([^<]*)<', dom)

        assert column("len100 pct") == ["69.32", "18.75"] and column("solved") == ["1", "0"]
        assert column("seeds_finished") == ["2", "2"]
        # 2 cell runs and 8 seeds' runs match; the seeds' runs are inside their cell's row
        assert re.search(r"<strong>10</strong>\s*matching runs", dom), dom[-2000:]
        assert "1step·copy·s0" not in dom
        png = tmp_path / "ui.png"
        _browser(f"--screenshot={png}", url, profile=tmp_path / "profile2")
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
        if os.environ.get("LOCATTN_UI_PNG"):  # regenerate README's picture: docs/img/mlflow_ui.png
            shutil.copyfile(png, os.environ["LOCATTN_UI_PNG"])
        # `study report --html`: a cell's link opens its 4 trial runs (2 seeds x 2 lrs) in this UI
        from reports.html import write_html

        page = write_html(root / "ui-demo", None, tmp_path / "html", ui=url.split("/#/")[0]).read_text()
        href = re.search(r'<a href="([^"]+)" title="task=copy,variant=onestep">', page).group(1)
        dom = _browser("--dump-dom", href.replace("&amp;", "&"), profile=tmp_path / "profile3").stdout
        assert re.search(r"<strong>4</strong>\s*matching runs", dom), dom[-2000:]
        assert "1step·copy·s0" in dom and "1step·copy·s1" in dom and "content·copy" not in dom
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # study ui and its mlflow server (our process group)
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
