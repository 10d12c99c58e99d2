"""``reports`` command line.

    reports build <study_dir> [--format md,latex,csv] [--out DIR] [--table ID] [--compare] ...
    reports build <study_dir> <study_dir> ... --out DIR [...]   (one table from several records)
    reports build <campaign.yaml> [...]                         (the records a campaign file lists)
    reports build --tracking-uri URI --study NAME [--out DIR] [...]
    reports list [<study_dir>]

``study report <study>`` is the same ``build`` with the study found by name: it shares
:func:`add_build_options` and :func:`run_build`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import urlsplit

from locattn.cliparse import Parser, closest_path, parse
from record.store import ARCHIVE_SUFFIX
from reports.runset import CAMPAIGN_KEYS, STORE_FILE, ReportsError, is_campaign, read_runs, resolve_source
from reports.tables import EXHIBITS, STATS, SUMMARY_ID, TABLES


#: Where ``--html`` links a cell's runs by default: the address ``study ui`` serves (its default
#: ``--port``).
DEFAULT_UI = "http://127.0.0.1:5000"


def ui_url(text: str) -> str:
    """``--html UI_URL``: the MLflow UI's address, ``http(s)://host[:port][/path]``, the links'
    base. Anything else is a usage error (one line, exit 2) before any file is written: a link
    base without a host, of another scheme (``ftp:``, ``javascript:``), with a query or fragment
    (the links append their own) or with credentials (the page would carry them)."""
    try:
        url = urlsplit(text.strip())
        url.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        url = None
    if (url is None or url.scheme not in ("http", "https") or not url.hostname or url.username is not None
            or url.password is not None or url.query or url.fragment):
        shown = re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", text)  # a password is masked
        raise argparse.ArgumentTypeError(
            f"{shown!r} is not an MLflow UI address: expected http(s)://host[:port][/path], without "
            f"user, password, query or fragment (default {DEFAULT_UI}, where 'study ui' serves it)")
    return text.strip()


def _split(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def add_build_options(b: argparse.ArgumentParser) -> None:
    """The options of ``reports build`` (and ``study report``), after the study argument."""
    b.add_argument("--format", default="md,latex,csv",
                   help="comma-separated output formats: md, latex, csv (default: all three)")
    b.add_argument("--out", default=None, help="output directory (default: <study_dir>/reports; "
                                               "with --tracking-uri: ./<study>-reports; a campaign "
                                               "file: <campaign>-reports beside it; required with "
                                               "several sources)")
    b.add_argument("--table", action="append", default=None,
                   help=f"table id (repeatable or comma-separated; default: the study's "
                        f"locattn.tables tag). Valid: {', '.join(sorted(TABLES))}; exhibits: "
                        f"{', '.join(sorted(EXHIBITS))}; '{SUMMARY_ID}': one row per cell of the "
                        f"study, including cells no table has a row for")
    b.add_argument("--stat", choices=STATS, default=None,
                   help="statistic per cell (default: the paper's: median, or mean ± std for SCAN/CFQ)")
    b.add_argument("--solved", type=float, nargs="?", const=90.0, default=None, metavar="PCT",
                   help="after each accuracy cell, (k/n): the seeds that reached PCT or more "
                        "(default 90), so a fragile median is visible")
    b.add_argument("--ci", action="store_true",
                   help="beside each Markdown and LaTeX cell, its 95 %% bootstrap interval (and "
                        "with --solved the solved rate's exact interval); the CSV always has them")
    b.add_argument("--compare", action="store_true",
                   help="add the papers' published numbers and the differences (three tables)")
    b.add_argument("--side-by-side", action="store_true",
                   help="compare in one table: 'ours / paper' in each cell (implies --compare; "
                        "Markdown and LaTeX)")
    b.add_argument("--strict", action="store_true",
                   help="refuse to write tables with missing or incomplete cells (exit 3, names the cells)")
    b.add_argument("--figures", action="store_true",
                   help="also draw the study's figures (PNG + PDF, under <out>/figures)")
    b.add_argument("--standalone", action="store_true",
                   help="write each LaTeX table as a document that compiles alone (pdflatex "
                        "<table>.tex), on the narrowest page that holds it at its natural size: "
                        "portrait A4, else landscape A4 or A3 (default: a fragment to \\input)")
    b.add_argument("--full-frame", action="store_true",
                   help="each table in the paper's whole frame: every row and column, '–' where "
                        "the study ran nothing (default: the rows and columns that hold a result)")
    b.add_argument("--html", nargs="?", const=DEFAULT_UI, default=None, metavar="UI_URL", type=ui_url,
                   help=f"also write report.html: the variant x task grid, each cell linking to its "
                        f"runs in the MLflow UI at UI_URL (default {DEFAULT_UI}, where 'study ui' "
                        f"serves it)")


#: How several records make one table (``reports build A B``, ``study report A B``).
MERGE_HELP = ("runs are merged by identity (cell, hparams, seed); a run two records hold is taken "
              "once when equal and refused (exit 2, nothing written) when they differ; each CSV cell "
              "says which records and seeds it used (column 'records').")
SOURCE_HELP = ("a study directory (studies/<name>/ or results/record/<name>/, holding mlflow.db or "
               "mlflow.db.xz), its store file, or a campaign file (.yaml, keys: "
               + ", ".join(CAMPAIGN_KEYS) + "; paths relative to it); repeatable")


def parser() -> Parser:
    p = Parser(prog="reports", description="Paper tables and figures from a study's MLflow runs.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    b = sub.add_parser("build", help="write the study's tables (and optionally figures)",
                       description="Write a study's tables. Several sources (or a campaign file) "
                                   "make one table from their runs: " + MERGE_HELP)
    b.add_argument("study_dir", nargs="*", metavar="SOURCE", help=SOURCE_HELP)
    b.add_argument("--tracking-uri", help="sqlite:///..., postgresql://..., or http://host:port")
    b.add_argument("--study", help="study (MLflow experiment) name; default: the directory name "
                                   "(one source only)")
    add_build_options(b)
    ef = sub.add_parser("effects", help="ablation effects against a base variant, with intervals and tests",
                        description="Per column, the paired differences (ablation - base) over shared "
                                    "seeds: mean with a 95 %% bootstrap interval, P(better), Holm-corrected "
                                    "Wilcoxon tests; Markdown, LaTeX, CSV and a forest plot.")
    ef.add_argument("sources", nargs="+", help="study directories (studies/<name>/, results/record/<name>/)")
    ef.add_argument("--base", required=True, help="the base variant, e.g. onestep or mix_onestep")
    ef.add_argument("--vs", help="comma-separated ablations (default: every other row of the tables)")
    ef.add_argument("--table", action="append", help="table ids to use (default: each source's declared tables)")
    ef.add_argument("--format", default="md,latex,csv", help="comma-separated: md, latex, csv")
    ef.add_argument("--out", help="output directory (default: <first source>/reports)")
    ef.add_argument("--no-figure", action="store_true", help="skip the forest plot (figures/effects-<base>.png, .pdf)")
    ls = sub.add_parser("list", help="list the table ids (with a study directory: mark the study's)",
                        description="List the table ids. Given a study directory, say which "
                                    "tables the study declares (what 'reports build' writes).")
    ls.add_argument("study_dir", nargs="?", help="studies/<name>/ (holds mlflow.db); optional")
    return p


def run_build(args: argparse.Namespace, prog: str = "reports build") -> int:
    """Run a parsed ``build``: ``args`` has ``study_dir`` (one path or a list), ``tracking_uri``,
    ``study`` and the options of :func:`add_build_options`; or ``sources``, a list of
    ``(location, study)`` (``study report``). Prints the written paths; returns the exit status."""
    from reports.build import IncompleteError, build_reports  # numpy, renderers: off --help
    from reports.html import write_html  # as build_reports

    sources, out, problem = build_sources(args)
    if problem:
        print(f"{prog}: {problem}", file=sys.stderr)
        return 2
    tables = [t for arg in args.table for t in _split(arg)] if args.table else None
    one, study = sources[0]
    from reports.runset import RecordSource, expand_sources  # polars: off --help, as build_reports

    given = [s if is_campaign(s) else RecordSource(s, name) for s, name in sources]
    summary: list[str] = []
    warnings: list[str] = []
    try:
        if args.html is not None and len(expand_sources(given)[0]) > 1:
            raise ReportsError("--html links one record's runs in its MLflow UI; give one source")
        paths = build_reports(
            given, None, tables, _split(args.format), out, stat=args.stat,
            compare=args.compare or args.side_by_side,
            layout="cells" if args.side_by_side else "tables", strict=args.strict,
            figures=args.figures, solved_at=args.solved, summary=summary, warnings=warnings,
            standalone=args.standalone, ci=args.ci, full_frame=args.full_frame,
        )
        if args.html is not None:
            paths.append(write_html(one, study, out, ui=args.html, solved_at=args.solved,
                                    served_first=args.html == DEFAULT_UI))
    except IncompleteError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 3
    except ReportsError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    for line in warnings:  # runs that no written file shows
        print(f"{prog}: warning: {line}", file=sys.stderr)
    for line in summary:  # --compare: agreement with the paper, non-trivial cells first
        print(line)
    return 0


def build_sources(args: argparse.Namespace) -> tuple[list[tuple[str, str | None]], str, str]:
    """The ``(location, study)`` of each source ``args`` names, the output directory, and a
    problem (one line; empty when none): no source, a missing directory, --study or a missing
    --out with several sources."""
    sources = getattr(args, "sources", None)
    if sources is None:
        dirs = [args.study_dir] if isinstance(args.study_dir, (str, Path)) else list(args.study_dir or ())
        if bool(dirs) == (args.tracking_uri is not None):
            return [], "", ("give a study directory (or several, or a campaign file) or --tracking-uri "
                            "URI --study NAME")
        for d in dirs:
            if not Path(d).exists():
                return [], "", (f"campaign file {d!r} does not exist" if is_campaign(d)
                                else missing_study_dir(str(d)))
        if args.tracking_uri is not None and not args.study:
            return [], "", "--tracking-uri needs --study NAME (the study's MLflow experiment)"
        if len(dirs) > 1 and args.study:
            return [], "", ("--study names one source's experiment; with several, write a campaign file "
                            "whose records say {path: DIR, study: NAME}")
        sources = [(str(d), args.study) for d in dirs] or [(args.tracking_uri, args.study)]
    out = args.out
    if out is None and len(sources) > 1:
        return [], "", f"{len(sources)} sources: give --out DIR for the tables built from them"
    if out is None:
        loc, study = sources[0]
        if is_campaign(loc):
            out = str(Path(loc).with_name(f"{Path(loc).stem}-reports"))
        elif "://" in loc:
            out = f"{study}-reports"
        else:
            out = f"{str(loc).rstrip('/')}/reports"
    return sources, out, ""


def missing_study_dir(study_dir: str) -> str:
    """One line for a study directory that does not exist, naming the closest study beside it."""
    parent = Path(study_dir).parent
    stores = (STORE_FILE, STORE_FILE + ARCHIVE_SUFFIX)  # a committed record holds it compressed
    studies = [p for p in parent.iterdir() if any((p / f).is_file() for f in stores)] \
        if parent.is_dir() else []
    return (f"study directory {study_dir!r} does not exist{closest_path(study_dir, studies)} "
            f"(expected studies/<name>/ containing {' or '.join(stores)})")


def live_grid_page(source: str | Path, study: str, *, ui: str, marks: Mapping[str, tuple[int, int]],
                   status: str) -> str:
    """``study ui``'s live grid page, :func:`reports.html.live_html` (study reaches reports by
    this module, the ``reports`` command's, only)."""
    from reports.html import live_html  # as build_reports: polars only when a page is asked for

    return live_html(source, study, ui=ui, marks=marks, status=status)


def run_list(study_dir: str | None) -> int:
    declared: list[str] = []
    if study_dir is not None and not Path(study_dir).exists():
        print(f"reports list: {missing_study_dir(study_dir)}", file=sys.stderr)
        return 2
    if study_dir is not None:
        from reports.build import tables_of_study  # see run_build

        try:
            uri, name = resolve_source(study_dir)
            declared = tables_of_study(read_runs(uri, name, metric_keys=[]))
        except ReportsError as exc:
            print(f"reports list: {exc}", file=sys.stderr)
            return 2
        print(f"study {name} declares: {', '.join(declared) if declared else '(none)'}")
    listing = {**{tid: f"{t.source}: {t.title}" for tid, t in TABLES.items()},
               **{tid: f"{text} (exhibit)" for tid, text in EXHIBITS.items()}}
    for tid, text in sorted(listing.items()):
        mark = "* " if tid in declared else "  " if study_dir is not None else ""
        print(f"{mark}{tid:15s} {text}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(parser(), argv)
    try:
        if args.command == "effects":
            from reports.effects import run_effects  # numpy, scipy, renderers: off --help

            return run_effects(args)
        code = run_list(args.study_dir) if args.command == "list" else run_build(args)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's teardown
        return code
    except BrokenPipeError:  # `reports list | head`: the reader left; drop the rest quietly (as study's)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
