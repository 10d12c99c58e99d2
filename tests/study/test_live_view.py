"""What a researcher reads while and after a study runs: the cell runs' columns in percent in
the MLflow UI's saved view (the names fit a column; the seeds' runs show their own values in the
same columns), and ``study ui``'s live grid page (its HTML, regenerated from the store on each
request, with running and stale cells marked and links into the MLflow UI at the address served).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from record.summary import cell_medians, cell_percents, seed_percents


def test_a_cell_run_holds_each_split_in_percent_and_its_solved_seeds_on_the_hardest_split() -> None:
    runs = [{"test.len15.seq_acc": 1.0, "test.len100.seq_acc": 0.95, "best_selection_score": 0.9},
            {"test.len15.seq_acc": 0.9, "test.len100.seq_acc": 0.5, "best_selection_score": 0.8},
            {"test.len15.seq_acc": 0.8, "test.len100.seq_acc": math.nan, "best_selection_score": 0.7}]
    got = cell_percents(runs)
    # medians over the finite values; solved: 0.95 only (len100 is the hardest split; a NaN is no seed)
    assert got == {"len15 pct": 90.0, "len100 pct": 72.5, "solved": 1.0}
    assert cell_percents([{"test.len15.seq_acc": 0.4321}, {"test.len15.seq_acc": 0.9543}])["len15 pct"] == 69.32
    all_ = cell_medians(runs)
    assert all_["len100 pct"] == 72.5 and all_["test.len100.seq_acc"] == 0.725
    assert all_["seeds_finished"] == 3.0 and all_["seeds_diverged"] == 1.0
    # the names fit MLflow's metric names and a column: short, no '%', which MLflow refuses
    from mlflow.utils.validation import validate_param_and_metric_name

    assert all(validate_param_and_metric_name(k) and len(k) <= 12 for k in got)


def test_accuracy_is_the_headline_where_no_split_has_a_sequence_accuracy() -> None:
    finals = {"test.iid.accuracy": 0.25, "test.iid.loss": 3.0, "best_epoch": 4.0}
    assert seed_percents(finals) == {"iid pct": 25.0}
    assert cell_percents([finals]) == {"iid pct": 25.0, "solved": 0.0}
    assert cell_percents([{"best_epoch": 3.0}]) == {}


def test_the_saved_view_puts_the_percent_solved_and_seeds_columns_first(tmp_path: Path) -> None:
    """A record with cell runs (as a launch writes them): the view's columns start with the
    hardest split in percent, the seeds solved and finished, in that order (the runs table's
    column state, since MLflow would order them by name), then the other splits in percent."""
    from record.writer import RecordWriter
    from reports.synth import SynthRun, write_bulk_sql
    from study.recording.naming import cell_name
    from study.recording.ui import view_state

    runs = [SynthRun(task="copy", variant=v, seed=s, hparams={}, n_seeds=2,
                     metrics={"best_selection_score": 0.5, "test.len15.seq_acc": 0.5,
                              "test.len100.seq_acc": 0.25})
            for v in ("onestep", "content") for s in (0, 1)]
    db = tmp_path / "mlflow.db"
    write_bulk_sql(db, "s", runs, tables=["rc_table2"])
    uri = f"sqlite:///{db}"
    RecordWriter(tracking_uri=uri, study="s", artifact_location=None, parent_tags={},
                 cell_name=cell_name).open()  # writes the cells' runs, as a resume does
    state = view_state(uri, "s")
    want = ["metrics.`len100 pct`", "metrics.`solved`", "metrics.`seeds_finished`",
            "metrics.`len15 pct`", "metrics.`best_selection_score`"]
    assert state["selectedColumns"] == want and state["columnOrder"] == want
    assert state["searchFilter"] == "tags.locattn.role != 'study'"
    assert all(70 <= w <= 200 for w in state["columnWidths"].values())
    assert json.dumps(state)  # the saved view is JSON


def _study(root: Path, statuses: dict[tuple[str, int], str]) -> Path:
    """A study folder (study.json, a real MLflow SQLite store) of 2 variants x 2 seeds on Copy,
    each run in the status ``statuses`` gives it (finished by default)."""
    from reports.synth import SynthRun, write_bulk_sql

    d = root / "live-demo"
    d.mkdir(parents=True, exist_ok=True)
    acc = {("onestep", 0): 0.95, ("onestep", 1): 0.5, ("content", 0): 0.25, ("content", 1): 0.125}
    runs = []
    for (v, s), a in acc.items():
        status = statuses.get((v, s), "finished")
        runs.append(SynthRun(task="copy", variant=v, seed=s, n_seeds=2, status=status,
                             metrics={"best_selection_score": 0.9, "test.len100.seq_acc": a}
                             if status == "finished" else {}))
    db = d / "mlflow.db"
    fresh = root / f"next-{len(list(root.glob('next-*')))}" / "mlflow.db"  # a new store, swapped in whole
    fresh.parent.mkdir()
    write_bulk_sql(fresh, "live-demo", runs, tables=["rc_table2"])
    os.replace(fresh, db)
    meta = {"name": "live-demo", "spec_path": "", "profile": "smoke", "only": {}, "raw": {},
            "resolved": {"grid": {"task": ["copy"], "variant": ["onestep", "content"]},
                         "hparams": {}, "search": None, "seeds": [0, 1]},
            "tracking_uri": f"sqlite:///{db}"}
    (d / "study.json").write_text(json.dumps(meta))
    return d


def _get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_live_grid_is_read_from_the_store_on_each_request_with_running_cells_marked(tmp_path: Path) -> None:
    import os
    import re
    import socket

    from study.commands import find_study
    from study.recording.folder import load_meta
    from study.recording.ui import GridServer, grid_page

    d = _study(tmp_path, {("content", 1): "running"})
    # a driver runs the study (this process, by its lock's record): its running run is running
    (d / "study.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    meta = load_meta(find_study(str(d), str(tmp_path)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui = "http://127.0.0.1:5123"  # the MLflow UI's address as served: the links lead there
    from reports.cli import live_grid_page

    grid = GridServer("127.0.0.1", port, grid_page(d, meta, ui, live_grid_page)).start()
    try:
        status, first = _get(f"http://127.0.0.1:{port}/")
        assert status == 200
        assert '<meta http-equiv="refresh" content="5">' in first
        assert "3 of 4 runs finished, 1 running, 0 stale" in first
        # onestep: median of 95 and 50 %, 1 of 2 solved; content: one seed finished, one running
        assert re.search(r">72\.5 % \(1/2\)</a></td>", first), first
        running = re.search(r'<td class="running"><a href="([^"]+)"[^>]*>25\.0 % \(0/1\)</a>'
                            r'<span class="mark">1 running</span></td>', first)
        assert running, first
        assert running.group(1).startswith(f"{ui}/#/experiments/")
        assert "5000" not in first
        # the run finishes: the next request reads the store again
        _study(tmp_path, {})
        status, second = _get(f"http://127.0.0.1:{port}/")
        assert status == 200 and "4 of 4 runs finished, 0 running" in second
        assert re.search(r">18\.8 % \(0/2\)</a></td>", second) and 'class="running"' not in second
        # the driver is gone: a run the record says is running is stale (resumable)
        _study(tmp_path, {("onestep", 0): "running"})
        (d / "study.lock").write_text("")
        status, third = _get(f"http://127.0.0.1:{port}/")
        assert "3 of 4 runs finished, 0 running, 1 stale" in third
        assert re.search(r'<td class="stale"><a [^>]*>50\.0 % \(0/1\)</a><span class="mark">1 stale</span>', third)
        assert _get(f"http://127.0.0.1:{port}/other")[0] == 404
    finally:
        grid.stop()


def test_report_html_links_where_study_ui_serves_the_study(tmp_path: Path) -> None:
    """The static page's default address is port 5000; while `study ui` serves the folder on
    another port (its ui.json), the links lead there."""
    import os
    import re

    from reports.cli import DEFAULT_UI
    from reports.html import write_html
    from study.recording.ui import write_served

    d = _study(tmp_path, {})
    page = write_html(d, None, tmp_path / "a", ui=DEFAULT_UI, served_first=True).read_text()
    assert re.search(r'href="http://127\.0\.0\.1:5000/#/experiments/', page)
    served = write_served(d, "http://127.0.0.1:5123")
    assert json.loads(served.read_text())["pid"] == os.getpid()
    page = write_html(d, None, tmp_path / "b", ui=DEFAULT_UI, served_first=True).read_text()
    assert re.search(r'href="http://127\.0\.0\.1:5123/#/experiments/', page) and ":5000" not in page
    assert "serves it there now" in page
    # an address given explicitly wins; a ui.json of a process that is gone is ignored
    page = write_html(d, None, tmp_path / "c", ui="http://127.0.0.1:7000").read_text()
    assert "127.0.0.1:7000/#/" in page and ":5123" not in page
    served.write_text(json.dumps({"url": "http://127.0.0.1:5123", "pid": 2 ** 22 + 12345,
                                  "host": __import__("socket").gethostname()}))
    page = write_html(d, None, tmp_path / "d", ui=DEFAULT_UI, served_first=True).read_text()
    assert "127.0.0.1:5000/#/" in page
