"""``study ui``'s live grid while a real study runs: a real ``study launch`` (a private local Ray,
a real MLflow store), ``study ui`` serving it, and headless Chromium taking two screenshots of the
grid page, the second after a cell changed. The two pages' HTML (Chromium's DOM dump) differ in a
cell, and each cell links into the MLflow UI at the port ``study ui`` serves, not 5000.

``slow`` tier: it trains a study. ``LOCATTN_GRID_PNG_DIR=docs/img`` keeps the screenshots
(``live_grid_1.png``, ``live_grid_2.png``). Skips, saying why, where no Chromium is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.cluster.test_postgres_store import free_port
from tests.study.test_study import SMOKE, write_spec
from tests.study.test_ui_screenshot import BROWSER

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    BROWSER is None, reason="no headless browser: apt-get install chromium (Debian) to run this check")]


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--window-size=900,420", *args],
        capture_output=True, text=True, timeout=240)


def _cells(html: str) -> list[str]:
    """The grid's cells as text, row by row (tags stripped)."""
    if "<tbody>" not in html:
        return []
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", body)]


def _page(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.read().decode()
    except OSError:
        return ""


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_live_grid_changes_in_a_cell_while_the_study_runs(tmp_path: Path) -> None:
    # 2 cells x 2 seeds, one trial at a time: the cells fill in one after the other
    spec = write_spec(tmp_path, "live", grid={"task": ["copy"], "variant": ["onestep", "content"]},
                      seeds=2, overrides={**SMOKE, "optim.epochs": 25}, max_concurrent=1)
    root = tmp_path / "studies"
    study_dir = root / "live-smoke"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    launch = subprocess.Popen([sys.executable, "-m", "study.cli", "launch", str(spec), "--root", str(root)],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    ui = None
    try:
        deadline = time.time() + 300
        while not (study_dir / "mlflow.db").is_file():
            assert launch.poll() is None, "study launch exited before its store existed"
            assert time.time() < deadline, "no store in 300 s"
            time.sleep(1)
        port, grid_port = free_port(), free_port()
        ui = subprocess.Popen([sys.executable, "-m", "study.cli", "ui", str(study_dir), "--root", str(root),
                               "--port", str(port), "--grid-port", str(grid_port)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True)
        lines = [ui.stdout.readline() for _ in range(3)]
        grid_url = f"http://127.0.0.1:{grid_port}/"
        assert any(f"Live grid of study 'live-smoke': {grid_url}" in ln for ln in lines), lines
        deadline = time.time() + 300
        while not _cells(first := _page(grid_url)):  # the grid shows its first cell
            assert launch.poll() is None, f"the study ended before its grid had a cell: {first[-2000:]}"
            assert time.time() < deadline, f"no cell in the grid in 300 s: {first[-2000:]}"
            time.sleep(1)
        assert "runs finished" in first
        shots = tmp_path / "shots"
        shots.mkdir()
        # one browser load gives both the picture and its DOM: they show the same page
        dom1 = _chromium("--dump-dom", f"--screenshot={shots / 'live_grid_1.png'}", grid_url,
                         profile=tmp_path / "p1").stdout
        # wait for a cell to change (a seed finished or started), polling the page itself
        deadline = time.time() + 600
        while _cells(_page(grid_url)) == _cells(dom1):
            assert time.time() < deadline, f"no cell changed in 600 s: {_cells(dom1)}"
            time.sleep(2)
        dom2 = _chromium("--dump-dom", f"--screenshot={shots / 'live_grid_2.png'}", grid_url,
                         profile=tmp_path / "p2").stdout
        cells1, cells2 = _cells(dom1), _cells(dom2)
        assert cells1 and cells2 and cells1 != cells2, (cells1, cells2)
        for png in shots.glob("*.png"):
            data = png.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000, png
        # each linked cell leads to its runs in the MLflow UI at the port served
        links = re.findall(r'<a href="([^"]+)"', dom2)
        assert links and all(h.startswith(f"http://127.0.0.1:{port}/#/experiments/") for h in links), links
        assert ":5000" not in dom2
        # the first picture is of the study running: a cell marks its running seed
        assert re.search(r'<td class="[^"]*running[^"]*">.*?<span class="mark">1 running</span>', dom1), cells1
        if os.environ.get("LOCATTN_GRID_PNG_DIR"):  # the pictures of docs/howto/mlflow-ui.md
            for png in shots.glob("*.png"):
                shutil.copyfile(png, Path(os.environ["LOCATTN_GRID_PNG_DIR"]) / png.name)
        print(f"cells before: {cells1}; after: {cells2}")
    finally:
        if ui is not None:
            _stop(ui)
        _stop(launch)
    assert not (study_dir / "ui.json").exists()  # study ui removed its address on exit
