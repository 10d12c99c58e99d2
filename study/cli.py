"""``study`` command line: launch, resume, status, runs, ui, report, migrate, export, import.

    study launch ablations/rc_table2.yaml [--profile quick] [--name N] [--root studies/]
                 [--address ADDR] [--tracking-uri URI] [--max-concurrent N] [--dry-run]
                 [--only AXIS=V,...] [--seeds N|S1,S2]
    study resume <study> [--root studies/] [--address ADDR]
    study status <study> [--root studies/]
    study runs <study> [--root studies/]
    study ui <study> [--root studies/] [--port 5000]
    study report <study> [--root studies/] [reports build options: --table, --compare, ...]
    study export <study | spec.yaml> --out DIR [--only AXIS=V,...] [--seeds S1,S2] [--limit N]
    study import <study> RUNS_DIR

A study is named by its directory under ``--root`` (or given as a path); a mistyped name gets
the closest study there. ``status`` imports neither torch nor Ray nor MLflow.
"""

from __future__ import annotations

import os
import signal
import sys


def _stop_while_starting(signum: int, frame: object) -> None:
    """A SIGINT or SIGTERM before :func:`main` took over: one line, exit status 130."""
    os.write(2, f"study: interrupted ({signal.Signals(signum).name}) while starting; nothing "
                "was done\n".encode())
    os._exit(130)  # nothing to clean up yet; a KeyboardInterrupt here would leave a traceback


#: The handlers this module found when it installed :func:`_stop_while_starting`, first thing
#: (before numpy, polars, MLflow's and Ray's modules load: the first second of ``study``). Only
#: as the program (``study``, ``python -m study.cli``), never when imported as a library; and
#: only from the main thread, where signal handlers can be set.
_STARTING: dict[int, object] = {}
if __name__ == "__main__" or os.path.basename(getattr(sys, "argv", [""])[0]) == "study":
    try:
        for _sig in (signal.SIGINT, signal.SIGTERM):
            _STARTING[_sig] = signal.signal(_sig, _stop_while_starting)
    except ValueError:  # not the main thread
        pass

# Everything else is imported once the handler is in.
import argparse
import logging
from pathlib import Path
from typing import Any

from locattn.cliparse import Parser, closest_path, parse
from locattn.config import TRAIN_PATHS
from locattn.folders import FolderError
from record.layout import study_paths
from study.driver import ray_compat
from study.plan import preflight, slices
from study.driver.signals import early_signals, hold_signals
from study.recording.folder import load_meta, migrate
from study.driver.launch import launch, resume
from study.driver.summary import DryRunPlan, StudySummary
from study.recording.meta import DriverOptions
from study.recording.cell_results import cell_results, format_results
from study.spec import SpecError, parse_only, parse_seeds, parse_sets
from study.recording.study_store import current_store
from study.commands import (find_study, report_target, reports_cli, run_export, run_import, run_migrate,
                            run_report, run_runs, run_schema, run_status, run_ui)


def parser() -> Parser:
    """The `study` command line: launch, resume, status, report, ui. Each subcommand's parser
    names the function that runs it (``set_defaults(func=...)``), which :func:`main` calls."""
    p = Parser(prog="study", description=DESCRIPTION, epilog=EXAMPLES,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    for add in (add_launch, add_resume, add_status, add_runs, add_ui, add_migrate, add_export,
                add_import, add_schema, add_report):
        add(sub)
    return p


def power_target(text: str) -> float:
    """``--power-target D``: a difference in solved rate, 0 < D <= 1; else a usage error."""
    try:
        d = float(text)
    except ValueError:
        d = float("nan")
    if not 0.0 < d <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a difference in solved rate: expected a number "
                                         "in (0, 1], e.g. 0.5 (from 25 % of seeds solved to 75 %)")
    return d


def add_launch(sub: Any) -> None:
    """``study launch``: a study from a spec."""
    lp = sub.add_parser("launch", help="launch (or idempotently resume) a study from a spec")
    lp.add_argument("spec", help="ablations/<spec>.yaml")
    lp.add_argument("--profile", help="profile of the spec (smoke, quick, paper; default: the "
                                      "spec's default_profile)")
    lp.add_argument("--name", help="study name, a directory under --root: letters, digits, '.', "
                                   "'_', '-' (default: <spec name>-<profile>)")
    lp.add_argument("--root", default="studies", help=ROOT_HELP)
    lp.add_argument("--address", help=ADDRESS_HELP)
    lp.add_argument("--tracking-uri", help="MLflow tracking URI (default: SQLite mlflow.db in the "
                                           "study directory)")
    lp.add_argument("--max-concurrent", type=int, help=MAX_CONCURRENT_HELP)
    lp.add_argument("--only", action="append", default=[], metavar="AXIS=V1,V2",
                    help="run a subset of a grid axis, e.g. --only task=copy,lookup (repeatable); "
                         "relaunching with a wider --only grows the study, keeping its finished runs")
    lp.add_argument("--seeds", metavar="N|S1,S2",
                    help="seeds in place of the profile's: a count n (seeds 0..n-1) or a list; "
                         "relaunching with more seeds grows the study, keeping its finished runs")
    lp.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    lp.add_argument("--power-target", type=power_target, metavar="D",
                    help="with --dry-run: the seeds per cell a difference D in solved rate (0 < D <= 1, "
                         "e.g. 0.5) needs for 80 %% power (one-sided Fisher exact test, alpha 0.05)")
    lp.add_argument("--yes", action="store_true", help="launch a study above the size limits (see --dry-run)")
    lp.add_argument("--progress-seconds", type=float, default=DriverOptions.progress_seconds,
                    help=PROGRESS_HELP)
    lp.add_argument("--time-limit", metavar="DURATION", help=TIME_LIMIT_HELP)
    lp.add_argument("--train-path", choices=TRAIN_PATH_CHOICES, help=TRAIN_PATH_HELP)
    lp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                    help="dotted config override applied after the profile's, e.g. --set optim.epochs=3 "
                         "(repeatable; validated with the spec, saved in study.json, part of the "
                         "study's spec: a study launched with other values is another study)")
    lp.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    lp.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                    help=PLUGIN_HELP)
    lp.set_defaults(func=run_launch)


def add_resume(sub: Any) -> None:
    """``study resume``: an interrupted study."""
    rp = sub.add_parser("resume", help="resume an interrupted study")
    rp.add_argument("study", help=STUDY_HELP)
    rp.add_argument("--root", default="studies", help=ROOT_HELP)
    rp.add_argument("--address", help=ADDRESS_HELP)
    rp.add_argument("--max-concurrent", type=int, help=MAX_CONCURRENT_HELP)
    rp.add_argument("--progress-seconds", type=float, default=DriverOptions.progress_seconds,
                    help=PROGRESS_HELP)
    rp.add_argument("--time-limit", metavar="DURATION", help=TIME_LIMIT_HELP)
    rp.add_argument("--train-path", choices=TRAIN_PATH_CHOICES, help=TRAIN_PATH_HELP)
    rp.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    rp.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                    help=PLUGIN_HELP + "; a plugin study.json names is imported only when installed "
                         "or named here")
    rp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                    help="dotted config override over the study's saved spec, as launch's --set "
                         "(repeatable; validated, saved in study.json; a value that changes the spec "
                         "gives new runs, refused once a run finished under the old value)")
    rp.set_defaults(func=run_resume)


def add_study_command(sub: Any, name: str, about: str) -> argparse.ArgumentParser:
    """A subcommand that names a study (positional ``study``, ``--root``); ``about`` is its help."""
    sp = sub.add_parser(name, help=about)
    sp.add_argument("study", help=STUDY_HELP)
    sp.add_argument("--root", default="studies", help=ROOT_HELP)
    return sp


def add_status(sub: Any) -> None:
    """``study status``: per cell, what is done."""
    add_study_command(sub, "status", "per cell: seeds done, running, stale, failed, missing") \
        .set_defaults(func=run_status)


def add_runs(sub: Any) -> None:
    """``study runs``: which run folder is which run."""
    add_study_command(sub, "runs", "which run folder (runs/<hash>) is which run: name, cell, "
                                   "seed, how far it got").set_defaults(func=run_runs)


def add_ui(sub: Any) -> None:
    """``study ui``: the MLflow UI over the study's store."""
    up = add_study_command(sub, "ui", "serve the MLflow UI over the study's store on 127.0.0.1")
    up.add_argument("--port", type=int, default=5000, help="TCP port, 1-65535 (default 5000)")
    up.add_argument("--host", default="127.0.0.1",
                    help="bind address (default 127.0.0.1; use an SSH tunnel rather than 0.0.0.0)")
    up.add_argument("--grid-port", type=int, default=None,
                    help="TCP port of the live grid page (default: --port + 1; 0: no grid page)")
    up.set_defaults(func=run_ui)


def add_migrate(sub: Any) -> None:
    """``study migrate``: an older study folder to the current format."""
    add_study_command(sub, "migrate", "upgrade a study folder written by an older version to the "
                                      "current record format, in place").set_defaults(func=run_migrate)


def add_export(sub: Any) -> None:
    """``study export``: unfinished runs to a folder for ``python -m locattn.offline``."""
    xp = sub.add_parser("export", help="write a study's unfinished runs to a folder that "
                                       "`python -m locattn.offline` trains without Ray or MLflow")
    xp.add_argument("study", help=STUDY_HELP + "; or a spec (.yaml), whose study is created "
                                               "with nothing run (--profile, --name as for launch)")
    xp.add_argument("--out", required=True, help="the export folder (new or empty)")
    xp.add_argument("--root", default="studies", help=ROOT_HELP)
    xp.add_argument("--profile", help="with a spec: its profile")
    xp.add_argument("--name", help="with a spec: the study name")
    xp.add_argument("--only", action="append", default=[], metavar="AXIS=V1,V2",
                    help="export only the trials with these values of a grid axis (repeatable)")
    xp.add_argument("--seeds", metavar="S1,S2",
                    help="export only the runs of these seeds (of the study's), e.g. 5,6,7,8,9 (a packed trial's "
                         "pack is then these seeds: train a large pack in parts)")
    xp.add_argument("--limit", type=int, help="export at most this many trials")
    xp.set_defaults(func=run_export)


def add_import(sub: Any) -> None:
    """``study import``: run folders trained offline into the study."""
    ip = sub.add_parser("import", help="copy the run folders `python -m locattn.offline` trained "
                                       "into the study (then `study resume` records them)")
    ip.add_argument("study", help=STUDY_HELP)
    ip.add_argument("runs_dir", help="the worker's --out folder")
    ip.add_argument("--root", default="studies", help=ROOT_HELP)
    ip.add_argument("--skip-other-studies", action="store_true",
                    help="leave the folders of other studies' runs (one worker's --out holding several "
                         "studies) for their own import, instead of refusing")
    ip.set_defaults(func=run_import)


def add_schema(sub: Any) -> None:
    """``study schema``: the spec's JSON Schema."""
    sub.add_parser("schema", help="print the JSON Schema of a study spec (ablations/spec.schema.json), "
                                  "generated from the spec parser's keys").set_defaults(func=run_schema)


def add_report(sub: Any) -> None:
    """``study report``: ``reports build`` by study name."""
    ep = sub.add_parser("report", help="the study's tables and figures: 'reports build' by study name",
                        description="Build the study's report: the same options as 'reports build', "
                                    "with the study found by name under --root. Several studies (or "
                                    "a campaign file) make one table from their runs, merged by run "
                                    "identity (cell, hparams, seed): a run two of them hold is taken "
                                    "once when equal and refused when not; give --out.")
    ep.add_argument("study", nargs="+", help=STUDY_HELP + "; several, or a campaign file (.yaml "
                                                          "listing records:), for one table from all")
    ep.add_argument("--root", default="studies", help=ROOT_HELP)
    cli = reports_cli()
    if cli is not None:
        cli.add_build_options(ep)  # the reports command's own options, one definition
    ep.set_defaults(func=run_report)


DESCRIPTION = ("Run an ablation study from a spec (ablations/*.yaml) on Ray Tune, recording\n"
               "every run in MLflow: launch, resume, status, runs, ui, report, migrate; export and\n"
               "import train a study's runs on a machine without Ray or MLflow (docs/gpu_offline.md).")
EXAMPLES = """examples:
  study launch ablations/rc_table2.yaml --profile smoke
  study status rc_table2-smoke
  study report rc_table2-smoke --compare"""
STUDY_HELP = "study name (a directory under --root) or a study directory"
ROOT_HELP = "directory holding the studies (default: studies/)"
ADDRESS_HELP = ("join this Ray cluster (e.g. auto, or ray://head:10001) instead of starting a "
                "private local Ray on 127.0.0.1")
PROGRESS_HELP = "seconds between progress lines (default 10)"
MAX_CONCURRENT_HELP = "most trials at once, >= 0 (default: the spec's; 0: as many as the CPUs allow)"
#: ``--train-path``'s choices: every model kind's training steps (:data:`locattn.config.TRAIN_PATHS`,
#: their one owner), eager first.
TRAIN_PATH_CHOICES = tuple(dict.fromkeys(p for paths in TRAIN_PATHS.values() for p in paths))
ALLOW_DIRTY_HELP = ("train from package code that differs from its commit: each run records the "
                    "diff (artifact code.diff) and a locattn.dirty tag, and tables mark those runs")
PLUGIN_HELP = ("import this plugin module first, on the driver and in every trial: attenders, "
               "tasks, variants (repeatable; installed plugins load on their own)")
TRAIN_PATH_HELP = ("how each run's training step runs: eager; for the seq2seq models compiled "
                   "(torch.compile with C++ kernels: 1.3-2.8x faster per CPU epoch at the papers' "
                   "data sizes, equal to eager "
                   "within rounding, one compile per run shape, shared by a study's trials on a "
                   "machine; needs g++; with "
                   "optim.train_step graphed it compiles the graphed step, 1.45-1.6x on a CPU, "
                   "inside the CUDA graph on a GPU, unmeasured there); for Raffel & "
                   "Ellis's regressors fused (the attention pooling in cache-sized chunks: 2-3x "
                   "faster on a CPU, closer to float64 than eager). Not part of any run's identity, "
                   "saved for the study's resumes (default: the study's choice; a new study takes "
                   "compiled where it costs less even compiling cold, and says so, else eager)")
TIME_LIMIT_HELP = ("stop gracefully before this much wall time (9m, 1h30m, 600, SLURM's HH:MM:SS): "
                   "finished epochs are kept, the resume command is printed, exit status 75")


def check_spec_path(spec: str) -> None:
    """Refuse a spec path that is no file, naming the closest spec beside it or in ablations/."""
    if Path(spec).is_file():
        return
    parent = Path(spec).parent
    candidates = [*parent.glob("*.yaml"), *Path("ablations").glob("*.yaml")] if parent.is_dir() \
        else list(Path("ablations").glob("*.yaml"))
    raise SpecError(f"{spec}: no such spec file{closest_path(spec, candidates)}")


def show_results(summary: StudySummary | DryRunPlan) -> None:
    """After a launch or resume that ran: the per-cell results table (:mod:`study.recording.cell_results`)."""
    if not isinstance(summary, StudySummary):
        return
    study_dir = summary.study_dir
    try:
        saved = load_meta(study_paths(study_dir)).tracking_uri
    except SpecError:  # no readable study.json (StudyError is a SpecError): no table
        return
    results = cell_results(current_store(saved, study_dir), summary.name)
    print(format_results(results, report_target(study_dir, summary.name)), flush=True)


def exit_code(summary: StudySummary | DryRunPlan) -> int:
    """A driver's exit status: 75 when its --time-limit stopped it (``study resume`` goes on),
    130 interrupted (also by a signal before the study started), 1 when a trial failed or a run
    will not finish in this launch (its summary line says how many), else 0 (a dry run: 0,
    or 130 after a signal)."""
    if not isinstance(summary, StudySummary):
        return 130 if early_signals else 0
    if summary.time_limit:
        return slices.EXIT_TIME_LIMIT
    if summary.interrupted or early_signals:
        return 130
    return 1 if summary.errors or summary.runs.unfinished else 0


def _end_dry_run(signum: int, frame: object) -> None:
    """A signal to ``study launch --dry-run``: one line and exit 130 now (it writes nothing),
    not at the end of a plan that may take minutes."""
    os.write(2, f"study launch --dry-run: stopped by {signal.Signals(signum).name}; nothing was written\n".encode())
    os._exit(130)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``): the subcommand's function,
    its exit status; a :class:`SpecError` or :class:`FolderError` is one line and status 2."""
    args = parse(parser(), argv)
    if args.cmd != "schema":  # schema prints at once, under the handler it started with
        take_signals(args)
    try:
        return args.func(args)
    except (SpecError, FolderError) as exc:  # FolderError: a study folder that names a path outside it
        print(f"study {args.cmd}: {exc}", file=sys.stderr)
        return 2


def take_signals(args: argparse.Namespace) -> None:
    """The signal handlers of the command: a dry run ends at once on Ctrl-C; launch and resume
    stop the study cleanly; the others handle signals as before :func:`_stop_while_starting`."""
    if args.cmd == "launch" and args.dry_run:  # nothing to keep safe: Ctrl-C ends it at once
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _end_dry_run)
    elif args.cmd in ("launch", "resume"):
        hold_signals()  # a Ctrl-C from now on stops the study cleanly (study.driver.signals.Interrupt)
    else:  # the other commands handle signals as they did before _stop_while_starting
        for sig, previous in _STARTING.items():
            signal.signal(sig, previous)


def check_driver_args(args: argparse.Namespace) -> float | None:
    """Check the options launch and resume share; return --time-limit in seconds (or None).
    Without --address it sets ``RAY_AUTH_MODE=token`` (unless set)."""
    if not args.address:
        # A private local Ray enables token authentication and says so on every launch;
        # setting the same mode explicitly keeps it on and the line off.
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    preflight.check_progress_seconds(args.progress_seconds)
    try:
        time_limit = slices.parse_time_limit(args.time_limit) if args.time_limit else None
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    if args.address:
        preflight.check_address(args.address)
    preflight.check_train_path(args.train_path)
    if args.max_concurrent is not None and args.max_concurrent < 0:
        raise SpecError(f"--max-concurrent {args.max_concurrent}: must be >= 0 "
                        "(0: as many as the CPUs allow)")
    return time_limit


def run_launch(args: argparse.Namespace) -> int:
    """``study launch``: launch the spec's study, print its results, its exit status."""
    time_limit = check_driver_args(args)
    if args.power_target is not None and not args.dry_run:
        raise SpecError("--power-target goes with --dry-run: it says what the plan's seeds can detect")
    check_spec_path(args.spec)
    if args.tracking_uri is not None:
        preflight.check_tracking_uri(args.tracking_uri)
    summary = launch(
        args.spec, profile=args.profile, name=args.name, root=args.root,
        address=args.address, tracking_uri=args.tracking_uri,
        max_concurrent=args.max_concurrent, dry_run=args.dry_run,
        progress_seconds=args.progress_seconds, only=parse_only(args.only), yes=args.yes,
        seeds=parse_seeds(args.seeds), train_path=args.train_path, sets=parse_sets(args.sets),
        time_limit=time_limit, allow_dirty=args.allow_dirty, plugins=args.plugins,
        power_target=args.power_target,
    )
    show_results(summary)
    return exit_code(summary)


def run_resume(args: argparse.Namespace) -> int:
    """``study resume``: resume the study, print its results, its exit status."""
    time_limit = check_driver_args(args)
    summary = resume(find_study(args.study, args.root).dir, root=args.root, address=args.address,
                     progress_seconds=args.progress_seconds, time_limit=time_limit,
                     max_concurrent=args.max_concurrent, train_path=args.train_path,
                     allow_dirty=args.allow_dirty, plugins=args.plugins, sets=parse_sets(args.sets))
    show_results(summary)
    return exit_code(summary)


def program() -> None:
    """``study`` as a program (the console script, ``python -m study.cli``): :func:`main`, then
    its exit status. A process that loaded Ray's C++ core (a launch or resume: the driver has
    shut Ray down and written its record and summary by now) leaves through ``os._exit``,
    skipping the interpreter's teardown: a driver in CI's faults tier aborted there (status -6
    instead of 130, after its summary line), where Ray's C++ core unloads beside its threads."""
    try:
        code = main()
    except BrokenPipeError:  # `study status ... | head`: the reader left; drop the rest quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    if ray_compat.core_loaded():
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more can be said there
                pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    program()
