"""Build report files for a study: read once, aggregate per table, render, write.

:func:`build_reports` is the entry point other packages (and the end-to-end tests) call.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import polars as pl

from reports.agreement import agreement
from reports.aggregate import (BEST_EPOCH_KEY, DEFAULT_SOLVED, SELECTION_KEY, CellSummary, TableResult,
                               aggregate, cell_summaries, headline_keys)
from reports.exhibits import build_exhibits
from reports.figures import study_figures
from reports.variant_grid import GRID_ID, render_grid
from reports.row_labels import StudyLabels, paper_label
from reports.paper import load_paper_numbers
from reports.render import (LAYOUTS, RENDERERS, Provenance, RecordProvenance, render_summary, shown_frame,
                            standalone_latex)
# RecordConflict and RecordSource: collect's API, importable from here beside it
from reports.runset import (RecordConflict, RecordSource, ReportsError, RunSet, Source, expand_sources,
                            read_records, resolve_record)
from reports.tables import EXHIBITS, STATS, SUMMARY_ID, TABLES, TableDef, get_table, study_tables
from record import schema

FORMATS = tuple(RENDERERS)


def provenance(runset: RunSet) -> Provenance:
    """Where ``runset``'s numbers came from: its runs' hash, code versions, newest end time and
    runs of uncommitted code, over every record it was read from (and, with several, per record)."""
    runs = runset.runs.sort("run_id")
    h = hashlib.sha256()
    for rid, ms, st, end in runs.select("run_id", "mlflow_status", "status", "end_time").iter_rows():
        h.update(f"{rid}\t{ms}\t{st}\t{end}\n".encode())
    newest = runs["end_time"].drop_nulls().max() if runs.height else None
    if newest is None:
        data_time = "no run has ended yet"
    else:
        data_time = _dt.datetime.fromtimestamp(newest / 1000, tz=_dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    versions = tuple(sorted(set(runs["code_version"].drop_nulls().to_list())))
    trial = pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY
    trials = runs.filter(trial)
    dirty = pl.col("code_version").fill_null("").str.ends_with("+dirty")
    if "dirty" in runs.columns:
        dirty = dirty | (pl.col("dirty").fill_null("") == "true")
    records: tuple[RecordProvenance, ...] = ()
    if len(runset.records) > 1:
        counts = {rec: (n, t, d) for rec, n, t, d in runs.group_by("record").agg(
            pl.len(), trial.sum().alias("trials"), (trial & dirty).sum().alias("dirty_trials")).iter_rows()}
        records = tuple(RecordProvenance(name=r.name, source=r.source, **dict(zip(
            ("n_runs", "n_trials", "n_dirty"), counts.get(r.name, (0, 0, 0))))) for r in runset.records)
    return Provenance(
        study=runset.study, source=runset.source, n_runs=runs.height,
        runs_hash=h.hexdigest(), run_code_versions=versions,
        data_time=data_time, n_dirty=trials.filter(dirty).height, n_trials=trials.height,
        records=records, n_shared=runset.n_shared,
    )


def _params_needed(tables: Sequence[TableDef]) -> list[str]:
    keys: dict[str, None] = {}
    for t in tables:
        for c in t.columns:
            for k, _ in c.params:
                keys[k] = None
        if t.protocol_param:  # Raffel & Ellis: the protocol decides how lrs are chosen
            keys[t.protocol_param] = None
        if t.epoch_param:  # Raffel & Ellis: epochs are counted in the paper's 1,000 updates
            keys[t.epoch_param] = None
    return list(keys)


def tables_of_study(runset: RunSet) -> list[str]:
    """Table ids from the parent run's ``locattn.tables`` tag (empty when no parent says)."""
    parents = runset.runs.filter(pl.col("role") == schema.ROLE_STUDY)
    ids: dict[str, None] = {}
    for tag in parents["tables"].drop_nulls().to_list():
        for t in tag.split(","):
            if t.strip():
                ids[t.strip()] = None
    return list(ids)


@dataclass(frozen=True)
class Built:
    """Aggregated tables of one build, before writing."""

    runset: RunSet
    results: list[TableResult]
    provenance: Provenance
    summary: list[CellSummary] | None = None
    """Per-cell summary, for a study that declares no table (e.g. a search study), or when the
    tables asked for include :data:`SUMMARY_ID`."""
    summary_keys: tuple[str, ...] = ()
    """The summary's test-split keys of the headline metric."""
    unplaced: tuple[str, ...] = ()
    """Cells (``task=...,variant=...``) with trial runs that no built table has a row and a
    column for: their runs appear in no file unless the summary is asked for."""
    table_ids: tuple[str, ...] = ()
    """The ids built: those asked for (or a campaign file's), else those the parent runs declare;
    exhibits included."""
    asked: bool = False
    """Whether ``table_ids`` were asked for (an argument or a campaign file's ``tables``)."""


class IncompleteError(ReportsError):
    """--strict: a table has missing or incomplete cells."""


def collect(
    source: Source | Sequence[Source],
    study: str | None = None,
    tables: Sequence[str] | None = None,
    *,
    stat: str | None = None,
    solved_at: float | None = None,
) -> Built:
    """Read the runs once and aggregate every requested table.

    ``source``: one record or several, merged by run identity (:func:`reports.runset.read_records`):
    a study directory (``results/record/<name>/``), a store file, a tracking URI (with
    ``study``), a :class:`~reports.runset.RecordSource`, a campaign file (``.yaml``: its
    ``records:``), or a sequence of these. ``study``: the experiment of a single source.
    ``tables``: table ids; None: a campaign file's ``tables``, else those the records' parent
    runs declare (``locattn.tables``). A table named here is built from every run that fits its
    rows and columns, whatever the records declare. Each cell's ``seed_records`` says which
    record each seed came from.
    Raises :class:`~reports.runset.ReportsError` (one line: a missing record, a bad campaign file,
    an unknown table) and its :class:`~reports.runset.RecordConflict` (two records hold one run
    identity unequal)."""
    if stat is not None and stat not in STATS:
        raise ReportsError(f"unknown --stat {stat!r}; valid: {', '.join(STATS)}")
    records, campaigns = expand_sources(source, study)
    name = campaigns[0].name if len(campaigns) == 1 and len(records) == len(campaigns[0].records) else None
    if tables is None:
        tables = [t for c in campaigns for t in (c.tables or ())] or None
    want_summary = bool(tables) and SUMMARY_ID in tables
    named = [t for t in tables if t != SUMMARY_ID] if tables else None
    # exhibits (reports/exhibits.py) are written by build_reports, not aggregated here
    # a study's own tables (recorded with it) are known once its parent run is read
    defs = ([TABLES[t] for t in named if t in TABLES] if named is not None else list(TABLES.values()))
    keys: dict[str, None] = {SELECTION_KEY: None}
    for t in defs:
        for k in t.metric_keys():
            keys[k] = None
    runset = read_records(records, name=name, metric_keys=list(keys), param_keys=_params_needed(defs))
    if runset.runs.height == 0:
        raise ReportsError(f"study {runset.study!r} in {runset.source} has no runs yet")
    recorded = recorded_tables(runset)
    if recorded:  # read again with the metric keys and params its own tables need
        more = [k for t in recorded.values() for k in t.metric_keys() if k not in keys]
        params = _params_needed([*defs, *recorded.values()])
        if more or set(params) - set(_params_needed(defs)):
            keys.update(dict.fromkeys(more))
            runset = read_records(records, name=name, metric_keys=list(keys), param_keys=params)
    ids = named if named is not None else tables_of_study(runset)
    where = "" if named is not None else f"the parent run's {schema.TABLES} tag"
    defs = [_table(t, where, recorded) for t in ids if t not in EXHIBITS]
    trials = runset.runs.filter(pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY)
    if trials.height == 0:
        raise ReportsError(f"study {runset.study!r} has a parent run but no trial runs yet")
    if named is not None:
        refuse_tables_without_cells(trials, defs, runset.study, runset)
    summary, summary_keys = None, ()
    # A study that names no paper table (a search, a one-off ablation) gets its per-cell summary.
    if want_summary or not ids:
        srs = read_records(records, name=name, metric_keys=[SELECTION_KEY, BEST_EPOCH_KEY],
                           metric_prefixes=("test.",))
        summary = cell_summaries(srs, solved_at=DEFAULT_SOLVED if solved_at is None else solved_at)
        summary_keys = tuple(headline_keys(srs))
        if not ids:
            return Built(runset=srs, results=[], provenance=provenance(srs), summary=summary,
                         summary_keys=summary_keys, table_ids=tuple(tables or ()), asked=bool(tables))
    results = [with_seed_records(aggregate(runset, t, stat=stat if t.kind == "split" else None), runset)
               for t in defs]
    if solved_at is not None:
        results = [dataclasses.replace(r, solved_at=solved_at) for r in results]
    # Exhibits read runs of their own, so only a tables-only build can say what it left out.
    unplaced = () if any(t in EXHIBITS for t in ids) else unplaced_cells(trials, defs)
    return Built(runset=runset, results=results, provenance=provenance(runset), summary=summary,
                 summary_keys=summary_keys, unplaced=unplaced, table_ids=tuple(tables or ids),
                 asked=bool(tables))


def used_runs(result: TableResult, runset: RunSet) -> pl.DataFrame:
    """The runs behind the cells of ``result`` (aggregated from ``runset``): one row per cell,
    task of its column and seed used, with columns ``row, column, task, seed, record, run_id,
    code_version, dirty`` (bool: trained from uncommitted code, a ``+dirty`` code version or a
    ``locattn.dirty`` tag). A run is found by task, row, the column's params, the cell's chosen
    hparams for that task, and seed: one run, since ``runset`` holds one run per identity."""
    t = result.table
    pcols = list(dict.fromkeys(k for c in t.columns for k, _ in c.params))
    runs = runset.runs_with_record().filter(
        (pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY)
        & pl.col("task").is_in(list(t.tasks)) & pl.col("variant").is_in(list(t.rows)))
    cols = ["task", "variant", *pcols]
    present = set(runs.select(cols).unique().rows())
    dirty = pl.col("code_version").fill_null("").str.ends_with("+dirty")
    if "dirty" in runs.columns:
        dirty = dirty | (pl.col("dirty").fill_null("") == "true")
    finished = runs.filter(pl.col("status") == schema.STATUS_FINISHED)
    where: dict[tuple, tuple] = {}
    for row in finished.select(*cols, pl.col("hparams").fill_null("{}"), pl.col("seed").fill_null(-1),
                               "record", "run_id", "code_version", dirty.alias("_dirty")).rows():
        where[row[:-4]] = row[-4:]
    out = []
    for col in t.columns:
        wanted = dict(col.params)
        pkey = tuple(wanted.get(p) for p in pcols)
        for variant in t.rows:
            cell = result.cell(variant, col.key)
            tasks = [task for task in col.tasks if (task, variant, *pkey) in present]
            for task, hp in zip(tasks, cell.hparams):
                for seed, _ in cell.seeds:
                    if (task, variant, *pkey, hp, seed) in where:
                        out.append((variant, col.key, task, seed, *where[(task, variant, *pkey, hp, seed)]))
    return pl.DataFrame(out, orient="row", schema={
        "row": pl.String, "column": pl.String, "task": pl.String, "seed": pl.Int64, "record": pl.String,
        "run_id": pl.String, "code_version": pl.String, "dirty": pl.Boolean})


def with_seed_records(result: TableResult, runset: RunSet) -> TableResult:
    """``result`` with each cell's ``seed_records``: for each seed it used, the record its run
    was read from (:func:`used_runs`)."""
    pairs: dict[tuple[str, str], set[tuple[int, str]]] = {}
    for row, column, seed, record in used_runs(result, runset).select("row", "column", "seed", "record").rows():
        pairs.setdefault((row, column), set()).add((seed, record))
    cells = {k: dataclasses.replace(c, seed_records=tuple(sorted(pairs.get(k, ()))))
             for k, c in result.cells.items()}
    return dataclasses.replace(result, cells=cells)


def refuse_tables_without_cells(trials: pl.DataFrame, defs: Sequence[TableDef], name: str,
                                runset: RunSet) -> None:
    """:class:`ReportsError` (one line) when a table asked for by name has no row and column
    that a trial run of the study falls in: it would be a frame of dashes. Names the study's
    cells and the tables it declares."""
    ran = set(trials.select("task", "variant").iter_rows())
    for t in defs:
        if any((task, row) in ran for task in t.tasks for row in t.rows):
            continue
        cells = list(dict.fromkeys(c or f"task={k},variant={v}"
                                   for k, v, c in trials.select("task", "variant", "cell").iter_rows()))
        shown = "; ".join(cells[:4]) + (f"; and {len(cells) - 4} more" if len(cells) > 4 else "")
        declared = ", ".join(tables_of_study(runset)) or "none"
        raise ReportsError(f"table {t.id} has no cell of study {name!r} (its runs are of {shown}); "
                           f"the study's tables: {declared}; --table {SUMMARY_ID} lists every cell")


def unplaced_cells(trials: pl.DataFrame, defs: Sequence[TableDef]) -> tuple[str, ...]:
    """The cells of ``trials`` whose (task, variant) is in no row and column of ``defs``."""
    placed = {(task, row) for t in defs for task in t.tasks for row in t.rows}
    out: dict[str, None] = {}
    for task, variant, cell in trials.select("task", "variant", "cell").iter_rows():
        if (task, variant) not in placed:
            out[cell or f"task={task},variant={variant}"] = None
    return tuple(out)


def recorded_tables(runset: RunSet) -> dict[str, TableDef]:
    """The tables the study recorded with itself (its parent run's ``locattn.table_defs`` tag:
    a spec's own tables, plugins' tables), by id; {} for none."""
    if "table_defs" not in runset.runs.columns:
        return {}
    parents = runset.runs.filter(pl.col("role") == schema.ROLE_STUDY)
    out: dict[str, TableDef] = {}
    for tag in parents["table_defs"].drop_nulls().to_list():
        try:
            out.update(study_tables(tag))
        except ValueError as exc:
            raise ReportsError(f"study {runset.study!r}: {schema.TABLE_DEFS}: {exc}") from None
    return out


def _table(table_id: str, where: str = "", recorded: dict[str, TableDef] | None = None) -> TableDef:
    try:
        return get_table(table_id, recorded)
    except ValueError as exc:
        raise ReportsError(f"{exc}" + (f" (from {where})" if where else "")) from None


def describe_gaps(result: TableResult) -> list[str]:
    """Human-readable names of the missing and incomplete cells of a table."""
    t = result.table
    col_label = {c.key: f"{g.label} {c.label}".strip() for p in t.panels for g in p.groups
                 for c in g.columns}
    out = []
    for r, c in result.missing_cells:
        out.append(f"{t.id}: {paper_label(r)} ({r}) / {col_label[c]} [{c}]: missing")
    for r, c in result.incomplete_cells:
        cell = result.cell(r, c)
        out.append(f"{t.id}: {paper_label(r)} ({r}) / {col_label[c]} [{c}]: "
                   f"{cell.n} of {cell.n_expected} seeds")
    return out


def write_tables(built: Built, out: Path, formats: Sequence[str], labels: StudyLabels, *, compare: bool,
                 layout: str, summary: list[str] | None, standalone: bool,
                 full_frame: bool = False) -> list[Path]:
    """Write ``<out>/<table id>.<ext>`` for each of ``built``'s tables (a :func:`collect`
    result) in each format, cut to the rows and columns that hold a result of the study
    (:func:`reports.render.shown_frame`) unless ``full_frame``; with ``compare``, the paper's
    numbers beside them and one agreement line per table appended to ``summary``. Returns the
    written paths."""
    written: list[Path] = []
    for result in built.results:
        paper = load_paper_numbers(result.table) if compare else None
        if paper and summary is not None:
            summary.append(agreement(result, paper).sentence())
        if not full_frame:
            result = shown_frame(result)
        for fmt in formats:
            fn, ext = RENDERERS[fmt]
            text = fn(result, built.provenance, labels.variant, paper, layout)
            if standalone and fmt == "latex":
                text = standalone_latex(text)
            path = out / f"{result.table.id}.{ext}"
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def write_summary(built: Built, out: Path, formats: Sequence[str], labels: StudyLabels, solved_at: float, *,
                  standalone: bool) -> list[Path]:
    """Write ``<out>/summary.<ext>`` (every cell of ``built``, a :func:`collect` result with a
    summary) and, when the study recorded its labels, ``<out>/grid.<ext>`` (the variant x task
    grid under them) in each format. Returns the written paths."""
    written: list[Path] = []
    keys = list(built.summary_keys)
    for fmt in formats:
        path = out / f"{SUMMARY_ID}.{RENDERERS[fmt][1]}"
        text = render_summary(built.summary, keys, built.provenance, fmt, solved_at)
        if standalone and fmt == "latex":
            text = standalone_latex(text)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    # A study launched with recorded labels also gets its variant x task grid under them.
    for fmt in formats if built.runset.recorded_labels() else ():
        text = render_grid(built.summary, keys, labels, built.provenance, fmt, solved_at)
        if text is None:
            break
        path = out / f"{GRID_ID}.{RENDERERS[fmt][1]}"
        path.write_text(standalone_latex(text) if standalone and fmt == "latex" else text,
                        encoding="utf-8")
        written.append(path)
    return written


def unplaced_line(built: Built) -> str:
    """The warning naming the cells of ``built`` (a :func:`collect` result) that no table written
    has a row and a column for."""
    shown = ", ".join(built.unplaced[:6]) + (", ..." if len(built.unplaced) > 6 else "")
    ids = ", ".join(r.table.id for r in built.results)
    return (f"{len(built.unplaced)} cell(s) of study {built.runset.study!r} are in no row or column of "
            f"{ids}: {shown}; add --table {SUMMARY_ID} to list every cell")


def build_reports(
    source: Source | Sequence[Source],
    study: str | None = None,
    tables: Sequence[str] | None = None,
    formats: Sequence[str] = ("md", "latex", "csv"),
    out_dir: str | Path = "reports_out",
    *,
    stat: str | None = None,
    solved_at: float | None = None,
    compare: bool = False,
    layout: str = "tables",
    strict: bool = False,
    figures: bool = False,
    summary: list[str] | None = None,
    warnings: list[str] | None = None,
    standalone: bool = False,
    ci: bool = False,
    full_frame: bool = False,
) -> list[Path]:
    """Write ``<out_dir>/<table id>.<md|tex|csv>`` for a study; return the written paths.

    ``source``: a study directory (``studies/<name>/`` with ``mlflow.db``) or a tracking URI
    (``sqlite:///...``, ``postgresql://...``, ``http://host:port``; then ``study`` is required);
    or several records, a campaign file, as :func:`collect` takes them (exhibits and ``figures``
    read one record: :class:`ReportsError` when asked for with several).
    ``tables``: table ids; None reads them from the parent run's ``locattn.tables`` tag, and a
    study that names none (a search study) gets ``summary.<ext>``: per cell the chosen
    hyperparameters, their median dev score and the medians of the headline metric; when its
    parent run recorded its labels (``locattn.labels``), also ``grid.<ext>``, the variant x task
    grid under those labels (:mod:`reports.variant_grid`).
    ``layout``: with ``compare``, ``tables`` (ours, paper, difference as separate tables) or
    ``cells`` ("ours / paper" in each cell of one table).
    ``strict``: raise :class:`IncompleteError` (and write nothing) when a cell is missing or
    has fewer seeds than expected.
    ``summary``: with ``compare``, one agreement line per table (:mod:`reports.agreement`) is
    appended to it. ``tables`` may name :data:`SUMMARY_ID` to write the per-cell summary beside
    the tables, which lists every cell, including those no table has a row for.
    ``warnings``: a line naming the cells whose runs no written table shows is appended to it.
    ``standalone``: each ``.tex`` table is a document that compiles alone
    (:func:`reports.render.standalone_latex`) instead of a fragment to ``\\input``.
    ``ci``: Markdown and LaTeX cells show their intervals (:mod:`reports.intervals`), as the CSV
    always does.
    ``full_frame``: the paper's whole frame (default: :func:`reports.render.shown_frame`'s rows and columns).
    """
    bad = [f for f in formats if f not in RENDERERS]
    if bad:
        raise ReportsError(f"unknown format(s) {', '.join(bad)}; valid: {', '.join(FORMATS)}")
    if layout not in LAYOUTS:
        raise ReportsError(f"unknown compare layout {layout!r}; valid: {', '.join(LAYOUTS)}")
    built = collect(source, study, tables, stat=stat, solved_at=solved_at)
    if ci:
        built = dataclasses.replace(built, results=[dataclasses.replace(r, ci=True) for r in built.results])
    exhibit_ids = [t for t in built.table_ids if t in EXHIBITS]
    several = len(built.runset.records) > 1
    if several:
        refuse_one_record_files(built, exhibit_ids, figures)
    if strict:
        gaps = [g for r in built.results for g in describe_gaps(r)]
        if gaps:
            raise IncompleteError("refusing to write incomplete tables (--strict):\n  "
                                  + "\n  ".join(gaps))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    labels = StudyLabels.from_tags(built.runset.recorded_labels())  # else the registry's
    written = write_tables(built, out, formats, labels, compare=compare, layout=layout, summary=summary,
                           standalone=standalone, full_frame=full_frame)
    if built.unplaced and built.summary is None and warnings is not None:
        warnings.append(unplaced_line(built))
    if built.summary is not None:
        written += write_summary(built, out, formats, labels,
                                 DEFAULT_SOLVED if solved_at is None else solved_at, standalone=standalone)
    if exhibit_ids and several and warnings is not None:
        warnings.append(f"exhibit(s) {', '.join(exhibit_ids)} that the records declare read one record "
                        f"each: not written; build them from one source")
    if not several:
        written += write_one_record_files(built, expand_sources(source, study)[0][0], exhibit_ids, out,
                                          formats, figures)
    return written


def refuse_one_record_files(built: Built, exhibit_ids: Sequence[str], figures: bool) -> None:
    """:class:`ReportsError` (one line) for ``--figures`` or an exhibit asked for by name in a
    build of several records: they read their runs from one record."""
    if figures or (exhibit_ids and built.asked):
        what = "--figures" if figures else f"exhibit {exhibit_ids[0]}"
        raise ReportsError(f"{what} reads one record; build it from one source (this build has "
                           f"{len(built.runset.records)}: {', '.join(r.name for r in built.runset.records)})")


def write_one_record_files(built: Built, record: RecordSource, exhibit_ids: Sequence[str], out: Path,
                           formats: Sequence[str], figures: bool) -> list[Path]:
    """The files that read runs of their own from ``built``'s one record: its exhibits
    (:mod:`reports.exhibits`) and, with ``figures``, its figures. Returns the written paths."""
    written: list[Path] = []
    if exhibit_ids:
        uri, _ = resolve_record(record)
        written += build_exhibits(built.runset, uri, exhibit_ids, out, formats,
                                  built.provenance, paper_label)
    if figures:
        written += study_figures(record.location, record.study, out)
    return written
