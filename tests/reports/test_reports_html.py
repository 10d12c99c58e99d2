"""``reports build --html`` / ``study report --html`` (issue 42, item 4): the variant x task grid
as one static HTML page, from a real SQLite MLflow store, opened in a real headless Chromium.

The browser checks skip, saying why, where no Chromium is installed (``.ci/run`` installs
Debian's ``chromium``).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

from record import schema
from reports.cli import DEFAULT_UI
from reports.cli import main as reports_main
from reports.html import HTML_FILE, cell_url, runs_filter, write_html
from reports.synth import SynthRun, write_bulk_sql

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no headless browser: apt-get install chromium (Debian) to run this check")

KEY = "test.len100.seq_acc"
#: A plugin's label is data from a folder: the page must show it, never run it.
EVIL = "<script>alert('x')</script> & Co"


def _store(root: Path, labels: dict | None = None) -> Path:
    """studies/html-demo/mlflow.db: 2 tasks x 2 variants x 2 seeds x 2 learning rates; the chosen
    lr (1e-3, the better dev score) gives the medians below. ``labels`` becomes the parent run's
    ``locattn.labels`` tag, as a launch records it."""
    d = root / "html-demo"
    d.mkdir(parents=True)
    acc = {("copy", "onestep"): (0.4321, 0.6543), ("copy", "content"): (0.125, 0.25),
           ("reverse_copy", "onestep"): (0.95, 1.0), ("reverse_copy", "content"): (0.0, 0.5)}
    runs = [SynthRun(task=t, variant=v, seed=s, hparams={"optim.lr": lr}, n_seeds=2,
                     metrics={"best_selection_score": 0.9 if lr == 1e-3 else 0.1,
                              KEY: acc[t, v][s] if lr == 1e-3 else 0.0})
            for (t, v) in acc for s in (0, 1) for lr in (1e-3, 3e-3)]
    write_bulk_sql(d / "mlflow.db", "html-demo", runs)
    if labels is not None:
        con = sqlite3.connect(d / "mlflow.db")
        with con:
            parent = con.execute("SELECT run_uuid FROM tags WHERE key = ? AND value = ?",
                                 (schema.ROLE, schema.ROLE_STUDY)).fetchone()[0]
            con.execute("INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?)",
                        (schema.LABELS, json.dumps(labels), parent))
        con.close()
    return d


def _cells(page: str) -> list[tuple[str, str]]:
    """(href, text) of every linked cell."""
    return re.findall(r'<td><a href="([^"]+)" title="[^"]*">([^<]+)</a></td>', page)


def test_the_page_is_the_variant_by_task_grid_in_percent_with_each_cell_linked_to_its_runs(
        tmp_path: Path) -> None:
    d = _store(tmp_path)
    page = write_html(d, None, tmp_path / "out", ui="http://127.0.0.1:5123").read_text()
    # rows: variants by key (content, onestep); columns: tasks by key, each test split
    assert re.findall(r'<th scope="colgroup" colspan="(\d+)">([^<]+)</th>', page) == \
        [("1", "Copy"), ("1", "Reverse Copy")]
    head = re.findall(r'<th scope="col"(?: rowspan="2")?>([^<]+)</th>', page)
    assert head == ["Variant", "len100.seq_acc", "len100.seq_acc"]
    rows = re.findall(r'<th scope="row">([^<]+)</th>', page)
    assert rows == ["Content", "OneStepAttn"]
    cells = _cells(page)
    # medians in % over the chosen lr's 2 seeds; (k/n) solved at 90 %
    assert [t for _, t in cells] == ["18.8 % (0/2)", "25.0 % (0/2)", "54.3 % (0/2)", "97.5 % (2/2)"]
    href = cells[2][0].replace("&amp;", "&")
    assert href.startswith("http://127.0.0.1:5123/#/experiments/1/runs?searchFilter=")
    assert unquote(href.split("searchFilter=", 1)[1].split("&", 1)[0]) == \
        "tags.locattn.cell = 'task=copy,variant=onestep' and tags.locattn.role = 'trial'"
    # provenance, with the store as the tables name it; self-contained: no script, no fetch
    assert "study: html-demo (sqlite: html-demo/mlflow.db)" in page
    assert re.search(r"runs: 16 trial runs and 1 study parent run; sha256 of \(run id, status, end time\) of these 17: [0-9a-f]{64}", page)
    assert "runs trained by code version(s)" in page
    for fetch in ("<script", "src=", "<link", "@import", "url("):
        assert fetch not in page, fetch
    # the same record gives the same bytes
    assert write_html(d, None, tmp_path / "again", ui="http://127.0.0.1:5123").read_text() == page


def test_labels_and_values_from_the_record_are_escaped_not_run(tmp_path: Path) -> None:
    d = _store(tmp_path, labels={"variant": {"onestep": EVIL}, "task": {"copy": "Copy <b>"}})
    page = write_html(d, None, tmp_path / "out", ui=DEFAULT_UI).read_text()
    assert "<script>" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; Co" in page
    assert '<th scope="colgroup" colspan="1">Copy &lt;b&gt;</th>' in page


def test_a_filter_value_is_quoted_into_the_url_and_escaped_in_the_attribute() -> None:
    url = cell_url("http://127.0.0.1:5000/", "7", "task=copy,variant=a&b")
    assert url.startswith("http://127.0.0.1:5000/#/experiments/7/runs?searchFilter=tags.locattn.cell")
    assert "a%26b" in url and unquote(url.split("=", 1)[1].split("&orderByKey")[0]) == \
        runs_filter("task=copy,variant=a&b")


def test_a_cell_id_with_a_quote_gets_a_filter_mlflow_parses_to_that_id_or_no_link() -> None:
    from mlflow.utils.search_utils import SearchUtils

    for cell in ("task=copy,variant=it's", 'task=copy,note="x"', "task=copy,variant=onestep"):
        parsed = SearchUtils.parse_search_filter(runs_filter(cell))
        assert [(c["key"], c["value"]) for c in parsed] == [("locattn.cell", cell), ("locattn.role", "trial")]
    both = "task=copy,note=\"it's\""
    assert runs_filter(both) is None and cell_url("http://127.0.0.1:5000", "7", both) is None


def test_reports_build_html_writes_the_page_beside_the_tables(tmp_path: Path, capsys) -> None:
    d = _store(tmp_path)
    assert reports_main(["build", str(d), "--format", "md", "--html", "--out", str(tmp_path / "r")]) == 0
    printed = capsys.readouterr().out.split()
    assert str(tmp_path / "r" / HTML_FILE) in printed and str(tmp_path / "r" / "summary.md") in printed
    page = (tmp_path / "r" / HTML_FILE).read_text()
    assert "http://127.0.0.1:5000/#/experiments/1/runs?" in page
    assert f"&#x27;study ui {d}&#x27; serves it there" in page  # the folder, wherever it lies (no --root to guess)


@pytest.mark.parametrize("url", ["ftp://x", "not a url", "http://", "localhost:5000", "javascript:alert(1)",
                                 "http://127.0.0.1:5000/?a=1", "http://127.0.0.1:5000/#/x", "http://h:99999",
                                 "http://me:s3cret@mlflow.example.org", "http://me:s3cret@h:99999"])
def test_a_ui_url_that_is_no_http_address_is_one_line_before_any_file(tmp_path: Path, capsys, url) -> None:
    """Each was taken as the links' base (exit 0: 'localhost:5000/#/...' a relative link,
    'javascript:...' a script, the password written into the page); now one line, exit 2, that
    names the value (a password masked) and the form, and nothing is written."""
    d = _store(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        reports_main(["build", str(d), "--format", "md", "--html", url, "--out", str(tmp_path / "r")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1, lines
    assert "is not an MLflow UI address: expected http(s)://host[:port][/path]" in lines[0], lines[0]
    assert "s3cret" not in lines[0] and url.replace("s3cret", "***") in lines[0], lines[0]
    assert not (tmp_path / "r").exists()
    assert reports_main(["build", str(d), "--format", "md", "--out", str(tmp_path / "r"),
                         "--html", "https://mlflow.example.org/team/"]) == 0  # a path under a proxy is one
    assert "https://mlflow.example.org/team/#/experiments/1/runs?" in (tmp_path / "r" / HTML_FILE).read_text()


def _browser(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--window-size=1200,700", *args],
        capture_output=True, text=True, timeout=180)


@needs_browser
def test_chromium_renders_the_grid_and_a_picture_that_is_not_blank(tmp_path: Path) -> None:
    from PIL import Image  # matplotlib's dependency, in the reports extra

    d = _store(tmp_path, labels={"variant": {"onestep": EVIL}})
    page = write_html(d, None, tmp_path / "out", ui=DEFAULT_UI)
    dom = _browser("--dump-dom", page.as_uri(), profile=tmp_path / "p1").stdout
    # the browser parsed the label as text (one table cell), not as a script element
    assert re.search(r'<th scope="row">&lt;script&gt;alert\(\'x\'\)&lt;/script&gt; &amp; Co</th>', dom), dom
    assert "<script" not in dom
    for text in ("18.8 % (0/2)", "97.5 % (2/2)", ">Reverse Copy<", "Content"):
        assert text in dom, text
    png = tmp_path / "report.png"
    _browser(f"--screenshot={png}", page.as_uri(), profile=tmp_path / "p2")
    img = Image.open(png).convert("L")
    assert img.size == (1200, 700)
    dark = sum(img.histogram()[:128])  # text and borders on a white page
    assert 2_000 < dark < 0.5 * img.size[0] * img.size[1], dark


def test_study_report_html_writes_the_page_into_the_study_folder(tmp_path: Path, capsys) -> None:
    from study.cli import main as study_main

    d = _store(tmp_path)
    meta = {"name": "html-demo", "spec_path": "", "profile": "smoke", "only": {}, "raw": {},
            "resolved": {"grid": {"task": ["copy", "reverse_copy"], "variant": ["onestep", "content"]},
                         "hparams": {"optim.lr": [1e-3, 3e-3]}, "search": None, "seeds": [0, 1]},
            "tracking_uri": f"sqlite:///{d / 'mlflow.db'}"}
    (d / "study.json").write_text(json.dumps(meta))
    assert study_main(["report", "html-demo", "--root", str(tmp_path), "--format", "csv",
                       "--html", "http://127.0.0.1:5999"]) == 0
    assert str(d / "reports" / HTML_FILE) in capsys.readouterr().out.split()
    assert "http://127.0.0.1:5999/#/experiments/1/runs?" in (d / "reports" / HTML_FILE).read_text()


def test_cells_told_apart_by_another_axis_get_a_row_each_under_their_cell_id() -> None:
    from reports.aggregate import CellSummary
    from reports.variant_grid import grid_layout
    from reports.html import render_html, summary_grid
    from reports.row_labels import StudyLabels
    from reports.render import Provenance

    cell = "model.attention.step=relu,task=copy,variant=onestep"
    s = CellSummary(cell=cell, hparams="{}", n_points=1, dev=90.0, medians={KEY: 50.0},
                    solved={KEY: 1}, n=3, n_expected=3, diverged={KEY: 1})
    assert grid_layout([s], [KEY], StudyLabels()) is None
    prov = Provenance(study="s", source="sqlite:////x/s/mlflow.db", n_runs=4, runs_hash="0" * 64,
                      run_code_versions=("abc",), data_time="t", n_dirty=1, n_trials=3)
    page = render_html(summary_grid([s], [KEY]), prov, 90.0, lambda c: None, "Not linked.")
    assert re.findall(r'<th scope="col">([^<]+)</th>', page) == ["Cell", "len100.seq_acc"]
    assert f'<tr><th scope="row">{cell}</th>\n<td>50.0 % (1/2, 1 diverged)</td>' in page
    assert '<p class="dirty">UNCOMMITTED CODE: 1 of 3 trial runs' in page
