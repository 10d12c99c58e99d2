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

import shlex
from html import escape
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from record import schema
from record.store import experiment_id
from reports.aggregate import DEFAULT_SOLVED, CellSummary
from reports.build import collect
from reports.grid import Grid, grid_layout
from reports.labels import StudyLabels
from reports.render import MISSING, Provenance, seeds_text
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


def summary_grid(summaries: list[CellSummary], keys: list[str]) -> Grid:
    """A row per cell id and a column per test split: the grid of a study whose cells differ in
    more than task and variant (:func:`reports.grid.grid_layout` gives None)."""
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
                link: Callable[[CellSummary], str | None], where: str) -> str:
    """The page as text. ``link`` gives a cell's URL (None: no link); ``where`` is a sentence
    saying where the links lead."""
    e = escape
    title = f"Study {provenance.study}: variant × task grid"
    caption = (f"Per row and test split: the median over seeds (%) at the hyperparameters chosen "
               f"on dev, with (k/n): k of n seeds reached {solved_at:g} % or more.")
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f"<title>{e(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
           f"<h1>{e(title)}</h1>"]
    if provenance.n_dirty:
        out.append(f'<p class="dirty">{e(provenance.dirty_text())}</p>')
    out += [f"<p>{e(caption)} {e(where)}</p>", '<div class="scroll">', '<table class="grid">',
            *head_rows(grid), "<tbody>"]
    for label, cells in grid.rows:
        out.append(f'<tr><th scope="row">{e(label)}</th>')
        for s, key in zip(cells, grid.keys):
            text = MISSING if s is None else seeds_text(s, key, unit=" %")
            url = None if s is None or text == MISSING else link(s)
            if url is None:
                cls = ' class="missing"' if text == MISSING else ""
                out.append(f"<td{cls}>{e(text)}</td>")
            else:
                out.append(f'<td><a href="{e(url)}" title="{e(s.cell)}">{e(text)}</a></td>')
        out.append("</tr>")
    out += ["</tbody>", "</table>", "</div>", '<h2>Provenance</h2>', '<ul class="provenance">',
            *(f"<li>{e(line)}</li>" for line in provenance.lines()), "</ul>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def write_html(source: str | Path, study: str | None, out_dir: str | Path, *, ui: str,
               solved_at: float | None = None) -> Path:
    """Write ``<out_dir>/report.html`` for a study (``source`` as
    :func:`reports.build.build_reports` takes it) and return its path. The cells link into the
    MLflow UI at ``ui`` when the store is SQLite (its experiment id is read here); otherwise the
    page says how to find a cell's runs. Raises :class:`reports.store.ReportsError` as
    ``build_reports`` does."""
    solved = DEFAULT_SOLVED if solved_at is None else solved_at
    built = collect(source, study, [SUMMARY_ID], solved_at=solved)
    keys = list(built.summary_keys)
    summaries = built.summary or []
    labels = StudyLabels.from_tags(built.runset.recorded_labels())  # else the registry's
    grid = grid_layout(summaries, keys, labels) or summary_grid(summaries, keys)
    exp = experiment_id(built.runset.source, built.runset.study)
    if exp is not None:
        serve = (f"'study ui {shlex.quote(str(source))}' serves it there by default" if Path(source).is_dir()
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


__all__ = ["HTML_FILE", "cell_url", "head_rows", "render_html", "runs_filter", "summary_grid",
           "write_html"]
