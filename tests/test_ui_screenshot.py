"""The MLflow UI as a researcher sees it: ``study ui`` serves a real study store with a real
``mlflow server``, and a real headless Chromium opens the URL it prints (issue 16, item 1).

The page must show the trial runs flat (not under the collapsed parent), filtered and named by
what differs (``1step·copy·s0·lr=1e-3``). Skips, saying why, where no Chromium is
installed (``.ci/run`` installs Debian's ``chromium``).
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

ROOT = Path(__file__).resolve().parents[1]
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
    named as the study names its runs. Returns the run names."""
    import json
    import sqlite3

    from reports.synth import SynthRun, write_bulk_sql
    from study.naming import run_name

    d = root / "ui-demo"
    d.mkdir(parents=True)
    runs = [SynthRun(task="copy", variant=v, seed=s, hparams={"optim.lr": lr}, n_seeds=2,
                     metrics={"best_dev_score": 0.9, "test.len100.seq_acc": 0.5})
            for v in ("onestep", "content") for s in (0, 1) for lr in (1e-3, 3e-3)]
    write_bulk_sql(d / "mlflow.db", "ui-demo", runs, tables=["rc_table2"])
    names = [run_name(task=r.task, variant=r.variant, seed=r.seed, hparams=r.hparams) for r in runs]
    con = sqlite3.connect(d / "mlflow.db")
    with con:  # write_bulk_sql numbers the trial runs 2, 3, ... in order (1 is the parent)
        for i, name in enumerate(names):
            con.execute("UPDATE runs SET name = ? WHERE run_uuid = ?", (name, f"{i + 2:032x}"))
    con.close()
    meta = {"name": "ui-demo", "spec_path": "", "profile": "smoke", "only": {}, "raw": {},
            "resolved": {"grid": {"task": ["copy"], "variant": ["onestep", "content"]},
                         "hparams": {"optim.lr": [1e-3, 3e-3]}, "search": None, "seeds": [0, 1]},
            "tracking_uri": f"sqlite:///{d / 'mlflow.db'}"}
    (d / "study.json").write_text(json.dumps(meta))
    return names


def _browser(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--window-size=1600,1000", "--virtual-time-budget=15000",
         *args], capture_output=True, text=True, timeout=180)


def test_study_ui_shows_the_trial_runs_by_name_in_a_real_browser(tmp_path: Path) -> None:
    root = tmp_path / "studies"
    names = _store(root)
    port = _free_port()
    ui = subprocess.Popen([sys.executable, "-m", "study.cli", "ui", "ui-demo", "--root", str(root),
                           "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        first = ui.stdout.readline()
        m = re.match(r"MLflow UI for study 'ui-demo': (http://127\.0\.0\.1:\d+/#/experiments/\d+/runs\?\S+)",
                     first)
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
        # The filter in the URL shows the 8 trial runs (not the parent), flat, by their names.
        assert re.search(r"<strong>8</strong>\s*matching runs", dom), dom[-2000:]
        for name in names:
            assert name in dom, name
        png = tmp_path / "ui.png"
        _browser(f"--screenshot={png}", url, profile=tmp_path / "profile2")
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # study ui and its mlflow server (our process group)
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
