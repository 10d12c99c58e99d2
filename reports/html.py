"""``reports build --html`` (and ``study report --html``): the study's variant x task grid as one
static, self-contained HTML page, ``<out>/report.html``.

- Each cell: the median over the chosen hyperparameters' finished seeds of a test split, in %,
  with (k/n) seeds solved, written as the summary writes it (:func:`reports.render.seeds_text`).
- Each cell links to its trial runs in the MLflow UI: the study's experiment, searched for the
  cell's ``locattn.cell`` tag (:func:`cell_url`), at the address given (``reports build
  --html``'s default: where ``study ui`` serves, :data:`reports.cli.DEFAULT_UI`).
- Every label and value read from the record is HTML-escaped (a plugin's labels are data).
- The page needs no JavaScript and fetches nothing: its style is inline, it has no images.
- Provenance (study, store with its password redacted, runs hash, code versions, data time)
  closes the page. Like the other renderers it reads no clock: the same record gives the same
  bytes.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from html import escape
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import quote

from record import schema
from record.layout import UI_FILE
from record.store import experiment_id
from reports.aggregate import DEFAULT_SOLVED, CellSummary
from reports.build import collect
from reports.variant_grid import Grid, grid_layout
from reports.row_labels import StudyLabels
from reports.render import MISSING, Provenance, seeds_text
from reports.runset import ReportsError
from reports.tables import SUMMARY_ID

HTML_FILE = "report.html"
"""The page's file name under the output directory."""

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em; color: #222; }
p { max-width: 80em; }
table.grid { border-collapse: collapse; margin: 1em 0; }
table.grid th, table.grid td { border: 1px solid #bbb; padding: .35em .7em; }
table.grid thead th { background: #eef1f5; }
table.grid tbody th { text-align: left; font-weight: 600; }
table.grid td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
div.scroll { overflow-x: auto; }
td.missing { color: #999; }
td.running { background: #fff4cc; }
td.stale { background: #fde0dc; }
span.mark { font-size: 12px; color: #7a5b00; margin-left: .4em; }
td.stale span.mark { color: #a02a1a; }
.dirty { color: #b00; font-weight: 600; }
.provenance { font-size: 13px; color: #555; }
"""


def runs_filter(cell: str) -> str | None:
    """The MLflow search filter of a cell's trial runs (``tags.locattn.cell = '...'``; a cell id
    that holds a ``'`` is put in double quotes); None for an id holding both kinds of quote, which
    MLflow's filter syntax cannot state."""
    if "'" in cell and '"' in cell:
        return None
    value = f'"{cell}"' if "'" in cell else f"'{cell}'"
    return f"tags.{schema.CELL} = {value} and tags.{schema.ROLE} = '{schema.ROLE_TRIAL}'"


def cell_url(ui: str, experiment: str, cell: str) -> str | None:
    """URL of a cell's trial runs in the MLflow UI (3.x) at ``ui``: the experiment's runs page
    searched by :func:`runs_filter`, sorted by run name (the seeds in order); None (no link, not
    a wrong one) when no filter can name the cell."""
    search = runs_filter(cell)
    if search is None:
        return None
    query = (f"searchFilter={quote(search, safe='')}"
             f"&orderByKey={quote('attributes.run_name')}&orderByAsc=true")
    return f"{ui.rstrip('/')}/#/experiments/{quote(experiment)}/runs?{query}"


@dataclass(frozen=True)
class CellMark:
    """What a live page says of a cell beside its number: its seeds running now and its stale
    seeds (recorded running or interrupted, with no driver: resumable)."""

    running: int = 0
    stale: int = 0

    def __bool__(self) -> bool:
        return bool(self.running or self.stale)

    def text(self) -> str:
        """``2 running``, ``1 stale``, ``1 running, 1 stale``."""
        return ", ".join(f"{n} {what}" for n, what in ((self.running, "running"), (self.stale, "stale")) if n)


def summary_grid(summaries: list[CellSummary], keys: list[str]) -> Grid:
    """A row per cell id and a column per test split: the grid of a study whose cells differ in
    more than task and variant (:func:`reports.variant_grid.grid_layout` gives None)."""
    return Grid(head=["Cell", *(k.removeprefix("test.") for k in keys)], keys=list(keys),
                rows=[(s.cell, [s] * len(keys)) for s in summaries])


def head_rows(grid: Grid) -> list[str]:
    """The table's head: with tasks, a row of task labels over their splits' columns (the
    paper's layout), then the splits; else one row of :attr:`Grid.head`."""
    e = escape
    if not grid.tasks:
        return ["<thead><tr>", *(f'<th scope="col">{e(h)}</th>' for h in grid.head), "</tr></thead>"]
    spans: list[list] = []  # [task label, columns], consecutive columns of one task
    for task in grid.tasks:
        if spans and spans[-1][0] == task:
            spans[-1][1] += 1
        else:
            spans.append([task, 1])
    return ["<thead><tr>", f'<th scope="col" rowspan="2">{e(grid.head[0])}</th>',
            *(f'<th scope="colgroup" colspan="{n}">{e(task)}</th>' for task, n in spans), "</tr><tr>",
            *(f'<th scope="col">{e(k.removeprefix("test."))}</th>' for k in grid.keys),
            "</tr></thead>"]


def render_html(grid: Grid, provenance: Provenance, solved_at: float,
                link: Callable[[CellSummary], str | None], where: str, *,
                marks: Mapping[str, CellMark] | None = None, refresh: int | None = None,
                status: str | None = None) -> str:
    """The page as text. ``link`` gives a cell's URL (None: no link); ``where`` is a sentence
    saying where the links lead. A live page (:func:`live_html`) adds ``marks`` (cell id -> its
    running and stale seeds, shown in the cell), ``refresh`` (seconds between reloads) and a
    ``status`` line."""
    e = escape
    marks = marks or {}
    title = f"Study {provenance.study}: variant × task grid"
    caption = (f"Per row and test split: the median over seeds (%) at the hyperparameters chosen "
               f"on dev, with (k/n): k of n seeds reached {solved_at:g} % or more.")
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           *([f'<meta http-equiv="refresh" content="{int(refresh)}">'] if refresh else []),
           f"<title>{e(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
           f"<h1>{e(title)}</h1>"]
    if status:
        out.append(f'<p class="status">{e(status)}</p>')
    if provenance.n_dirty:
        out.append(f'<p class="dirty">{e(provenance.dirty_text())}</p>')
    out += [f"<p>{e(caption)} {e(where)}</p>", '<div class="scroll">', '<table class="grid">',
            *head_rows(grid), "<tbody>"]
    for label, cells in grid.rows:
        out.append(f'<tr><th scope="row">{e(label)}</th>')
        for s, key in zip(cells, grid.keys):
            text = MISSING if s is None else seeds_text(s, key, unit=" %")
            mark = marks.get(s.cell) if s is not None else None
            # a cell with a running or stale seed links to its runs even before one finished
            url = None if s is None or (text == MISSING and not mark) else link(s)
            classes = [c for c, on in (("missing", text == MISSING), ("running", bool(mark and mark.running)),
                                       ("stale", bool(mark and mark.stale and not mark.running))) if on]
            cls = f' class="{" ".join(classes)}"' if classes else ""
            note = f'<span class="mark">{e(mark.text())}</span>' if mark else ""
            if url is None:
                out.append(f"<td{cls}>{e(text)}{note}</td>")
            else:
                out.append(f'<td{cls}><a href="{e(url)}" title="{e(s.cell)}">{e(text)}</a>{note}</td>')
        out.append("</tr>")
    out += ["</tbody>", "</table>", "</div>", '<h2>Provenance</h2>', '<ul class="provenance">',
            *(f"<li>{e(line)}</li>" for line in provenance.lines()), "</ul>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def served_ui(source: str | Path) -> str | None:
    """The address of the MLflow UI that ``study ui`` serves a study folder's store on now (its
    ``ui.json``, :data:`record.layout.UI_FILE`, naming a live process of this host); None
    when none serves it, or ``source`` is not a study folder."""
    try:
        record = json.loads((Path(source) / UI_FILE).read_text())
        pid, host, url = int(record["pid"]), str(record["host"]), str(record["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if host != socket.gethostname() or not url.startswith("http://"):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return url


def write_html(source: str | Path, study: str | None, out_dir: str | Path, *, ui: str,
               solved_at: float | None = None, served_first: bool = False) -> Path:
    """Write ``<out_dir>/report.html`` for a study (``source`` as
    :func:`reports.build.build_reports` takes it) and return its path. The cells link into the
    MLflow UI at ``ui`` when the store is SQLite (its experiment id is read here); otherwise the
    page says how to find a cell's runs. ``served_first`` (``--html`` without an address): the
    address ``study ui`` serves the study folder on now, when it does (:func:`served_ui`), else
    ``ui``. Raises :class:`reports.runset.ReportsError` as ``build_reports`` does."""
    served = served_ui(source) if served_first else None
    ui = served or ui
    solved = DEFAULT_SOLVED if solved_at is None else solved_at
    built = collect(source, study, [SUMMARY_ID], solved_at=solved)
    keys = list(built.summary_keys)
    summaries = built.summary or []
    labels = StudyLabels.from_tags(built.runset.recorded_labels())  # else the registry's
    grid = grid_layout(summaries, keys, labels) or summary_grid(summaries, keys)
    exp = experiment_id(built.runset.source, built.runset.study)
    if exp is not None:
        serve = (f"'study ui {shlex.quote(str(source))}' serves it there now" if served else
                 f"'study ui {shlex.quote(str(source))}' serves it there by default" if Path(source).is_dir()
                 else "an 'mlflow server' on the store serves it")
        where = f"Each cell links to its runs in the MLflow UI at {ui} ({serve})."
        page = render_html(grid, built.provenance, solved, lambda s: cell_url(ui, exp, s.cell), where)
    else:
        where = (f"The cells are not linked: this store's experiment id is not read here; in the "
                 f"MLflow UI, search the study's runs with tags.{schema.CELL} = '<cell>'.")
        page = render_html(grid, built.provenance, solved, lambda s: None, where)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / HTML_FILE
    path.write_text(page, encoding="utf-8")
    return path


LIVE_REFRESH = 5
"""Seconds between reloads of the live grid page."""


def live_html(source: str | Path, study: str | None, *, ui: str, marks: Mapping[str, tuple[int, int]],
              status: str, refresh: int = LIVE_REFRESH, solved_at: float | None = None) -> str:
    """The live grid page of ``study ui``: :func:`write_html`'s page of the record as it is
    now, regenerated on each request, with each cell's running and stale seeds marked
    (``marks``: cell id -> (running, stale) seeds), a ``status`` line (the study's counts, the time it was read) and a reload
    every ``refresh`` seconds; the cells link into the MLflow UI at ``ui``, the address
    ``study ui`` serves. A study with no run recorded yet is a page that says so and reloads.
    Raises :class:`reports.runset.ReportsError` for a source that cannot be read."""
    solved = DEFAULT_SOLVED if solved_at is None else solved_at
    try:
        built = collect(source, study, [SUMMARY_ID], solved_at=solved)
    except ReportsError as exc:
        if "has no runs yet" not in str(exc):
            raise
        e = escape
        return "\n".join(["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
                          f'<meta http-equiv="refresh" content="{int(refresh)}">',
                          f"<title>Study {e(str(study))}: variant × task grid</title>",
                          f"<style>{STYLE}</style>", "</head>", "<body>",
                          f"<h1>Study {e(str(study))}: variant × task grid</h1>",
                          f'<p class="status">{e(status)}</p>', "<p>No run recorded yet.</p>",
                          "</body>", "</html>"]) + "\n"
    keys = list(built.summary_keys)
    summaries = built.summary or []
    labels = StudyLabels.from_tags(built.runset.recorded_labels())
    grid = grid_layout(summaries, keys, labels) or summary_grid(summaries, keys)
    exp = experiment_id(built.runset.source, built.runset.study)
    where = (f"Each cell links to its runs in the MLflow UI at {ui}; the page reloads every "
             f"{refresh} s.")
    link = (lambda s: cell_url(ui, exp, s.cell)) if exp is not None else (lambda s: None)
    return render_html(grid, built.provenance, solved, link, where,
                       marks={c: CellMark(*m) for c, m in marks.items()}, refresh=refresh, status=status)


__all__ = ["CellMark", "LIVE_REFRESH", "live_html", "HTML_FILE", "cell_url", "head_rows", "render_html", "runs_filter", "summary_grid",
           "write_html"]
