"""The ``study`` subcommands that read, show or move a study's record without running it:
``status``, ``runs``, ``ui``, ``migrate``, ``export``, ``import``, ``schema``, ``report``;
each takes its parser's namespace and returns the exit status. (``launch`` and ``resume``, and
the parser that names these, are :mod:`study.cli`'s.)
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from record.layout import StudyPaths, is_study_dir, study_paths
from record.store import sqlite_path
from study.driver.process import StudyLock
from study.recording.cell_results import cell_results, format_results
from study.recording.folder import load_meta, migrate, take_credentials
from study.recording.runs import format_runs, list_runs
from study.recording.status import format_status, study_status
from study.recording.study_store import current_store, server_url, store_uri
from study.recording.ui import (UI_FILTER, VIEW_NAME, GridServer, browse_host, check_port, experiment_url,
                                grid_page, health_url, save_view, serve, ui_command, write_served)
from study.spec import SpecError, parse_only, parse_seeds
from study.spec.checks import did_you_mean
from study.spec.json_schema import schema_text


#: The ``reports`` command's console-script entry point. ``study report`` is ``reports build``
#: with the study found by name; study never imports reports (the two stand side by side on
#: ``record``), so it reaches that command the way a shell does: by its entry point.
REPORTS_ENTRY = "reports"
REPORTS_ENTRY_DEFAULT = "reports.cli:main"


def reports_cli() -> ModuleType | None:
    """The module of the installed ``reports`` command, or None when it cannot be imported (the
    ``reports`` extra is not installed)."""
    value = next((ep.value for ep in entry_points(group="console_scripts", name=REPORTS_ENTRY)),
                 REPORTS_ENTRY_DEFAULT)
    try:
        return importlib.import_module(value.split(":", 1)[0])
    except ImportError:
        return None


def find_study(study: str, root: str) -> StudyPaths:
    """The study's paths; a one-line error that names the closest study under the root."""
    paths = study_paths(study, root)
    if is_study_dir(paths.dir):
        return paths
    base = paths.dir.parent
    known = sorted(p.name for p in base.iterdir() if is_study_dir(p)) \
        if base.is_dir() else []
    where = f"studies under {base}: {', '.join(known)}" if known else f"no studies under {base}"
    raise SpecError(f"no study {study!r}{did_you_mean(paths.dir.name, known)}; {where}")


def report_target(study_dir: Path, name: str) -> str:
    """What to type after ``study report``: the name when the study sits under the default
    ``studies/`` of this directory, else its folder (a name alone would not find it)."""
    if (Path("studies") / name).resolve() == study_dir.resolve():
        return name
    try:
        return str(study_dir.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(study_dir)


def run_status(args: argparse.Namespace) -> int:
    """``study status``: the per-cell status table, then the results table."""
    paths = find_study(args.study, args.root)
    meta = load_meta(paths)
    # a moved folder (a committed record): its own store, not the saved path
    meta = meta.replace(tracking_uri=current_store(meta.tracking_uri, paths.dir))
    rows, driver = study_status(meta, paths.dir)
    # the resume command as it works when pasted here: the name, or the folder under --root
    print(format_status(rows, driver, report_target(paths.dir, meta.name)))
    print()
    print(format_results(cell_results(meta.tracking_uri, meta.name), report_target(paths.dir, meta.name)))
    return 0


def run_runs(args: argparse.Namespace) -> int:
    """``study runs``: which run folder is which run."""
    paths = find_study(args.study, args.root)
    print(format_runs(list_runs(paths.dir), paths.dir))
    return 0


def run_ui(args: argparse.Namespace) -> int:
    """``study ui``: serve the MLflow UI over the study's store (or point to its server)."""
    paths = find_study(args.study, args.root)
    meta = load_meta(paths)
    remote = server_url(meta.tracking_uri)
    if remote is not None:  # the server already serves the UI
        print(f"study {meta.name!r} records to the MLflow server {remote}: open it "
              f"there (experiment {meta.name!r}); no local server is needed")
        return 0
    # credentials (an older study.json's) go to the server by environment, not its command line
    store = take_credentials(store_uri(meta.tracking_uri, paths.dir, meta.name), sys.stderr)
    check_port(args.host, args.port)
    grid_port = args.port + 1 if args.grid_port is None else args.grid_port
    if grid_port == args.port:
        raise SpecError(f"--grid-port {grid_port}: the MLflow UI serves on that port")
    if grid_port:
        check_port(args.host, grid_port)
    base = f"http://{browse_host(args.host)}:{args.port}"
    view = save_view(store, meta.name)
    url = base + view if view else experiment_url(base, store, meta.name)
    print(f"study ui: starting mlflow server on {args.host}:{args.port} (15 s or more)",
          file=sys.stderr, flush=True)

    grid = None
    reports = reports_cli() if grid_port else None
    if grid_port and reports is None:
        print("study ui: no live grid page (the 'reports' extra is not installed)", file=sys.stderr)
    elif grid_port:
        grid = GridServer(args.host, grid_port, grid_page(paths.dir, meta.replace(tracking_uri=store), base,
                                                          reports.live_grid_page))
    served = None

    def ready() -> None:
        nonlocal served
        print(f"MLflow UI for study {meta.name!r}: {url}", flush=True)
        print(f"  (saved view '{VIEW_NAME}': a row per cell with its medians over seeds in %, "
              "seeds solved and finished, its seeds' runs inside)" if view else
              f"  (trial runs only, filter: {UI_FILTER}; add the columns you compare with "
              "'Columns', e.g. metrics test.len100.seq_acc and best_selection_score)", flush=True)
        if grid is not None:
            grid.start()
            print(f"Live grid of study {meta.name!r}: http://{browse_host(args.host)}:{grid_port}/ "
                  "(reloads every few seconds)", flush=True)
        served = write_served(paths.dir, base)

    try:
        return serve(ui_command(store, args.host, args.port),
                     probe=health_url(args.host, args.port), ready=ready)
    finally:
        if grid is not None and grid.thread.is_alive():
            grid.stop()
        if served is not None:
            served.unlink(missing_ok=True)


def run_migrate(args: argparse.Namespace) -> int:
    """``study migrate``: upgrade the study folder in place, under the study's lock."""
    paths = find_study(args.study, args.root)
    lock = StudyLock(paths, sys.stdout).acquire()  # never under a running driver
    try:
        migrate(paths, sys.stdout)
    finally:
        lock.release()
    return 0


def run_import(args: argparse.Namespace) -> int:
    """``study import``: copy offline-trained run folders into the study."""
    from study.driver import export  # MLflow and Ray Tune: off the light commands

    export.import_runs(find_study(args.study, args.root), Path(args.runs_dir), out=sys.stdout,
                        skip_others=args.skip_other_studies)
    return 0


def run_export(args: argparse.Namespace) -> int:
    """``study export``: the study's (or a new study's) unfinished runs to a folder."""
    from study.driver import export  # MLflow and Ray Tune: off the light commands

    if args.limit is not None and args.limit < 1:
        raise SpecError(f"--limit {args.limit}: must be >= 1")
    if args.study.endswith((".yaml", ".yml")) and Path(args.study).is_file():
        paths = export.create(Path(args.study), profile=args.profile, name=args.name,
                               root=args.root, out=sys.stdout)
    else:
        paths = find_study(args.study, args.root)
    # one number names that seed here (export selects seeds, it never counts them)
    seeds = [int(args.seeds)] if (args.seeds or "").strip().isdigit() else parse_seeds(args.seeds)
    export.export(paths, Path(args.out), only=parse_only(args.only), seeds=seeds, limit=args.limit,
                   out=sys.stdout)
    return 0


def run_schema(args: argparse.Namespace) -> int:
    """``study schema``: print the spec's JSON Schema."""
    print(schema_text(), end="")
    return 0


def run_report(args: argparse.Namespace) -> int:
    """``study report``: ``reports build`` over the study found by name."""
    cli = reports_cli()
    if cli is None:
        raise SpecError("the reports command is not installed: pip install -e '.[reports]'")
    args.sources = [report_source(name, args.root) for name in args.study]
    if len(args.sources) == 1 and Path(args.study[0]).suffix not in CAMPAIGN_SUFFIXES:
        args.out = args.out or str(find_study(args.study[0], args.root).dir / "reports")
    return cli.run_build(args, prog="study report")


#: A ``study report`` argument ending so is a campaign file (read by ``reports``), not a study.
CAMPAIGN_SUFFIXES = (".yaml", ".yml")


def report_source(name: str, root: str) -> tuple[str, str | None]:
    """``(location, study)`` of one ``study report`` argument for ``reports build``: a study found
    by name (its directory when it holds its store, else its tracking URI) or a campaign file."""
    if Path(name).suffix in CAMPAIGN_SUFFIXES and Path(name).is_file():
        return name, None
    paths = find_study(name, root)
    meta = load_meta(paths)
    # a moved folder (a committed record, a copy): its own store, as status and ui read it
    db = sqlite_path(current_store(meta.tracking_uri, paths.dir))
    if db is not None and db.resolve() == paths.db.resolve():
        return str(paths.dir), meta.name
    return meta.tracking_uri, meta.name  # a store outside the study directory (an MLflow server, Postgres)
