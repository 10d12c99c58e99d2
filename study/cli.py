"""``study`` command line: launch, resume, status, ui, report.

    study launch ablations/rc_table2.yaml [--profile quick] [--name N] [--root studies/]
                 [--address ADDR] [--tracking-uri URI] [--max-concurrent N] [--dry-run]
    study resume <study> [--root studies/] [--address ADDR]
    study status <study> [--root studies/]
    study ui <study> [--root studies/] [--port 5000]
    study report <study> [--root studies/] [--out DIR]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from locattn.cliparse import Parser, parse
from study.spec import SpecError


def _parser() -> Parser:
    p = Parser(prog="study", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    lp = sub.add_parser("launch", help="launch (or idempotently resume) a study from a spec")
    lp.add_argument("spec", help="ablations/<spec>.yaml")
    lp.add_argument("--profile", help="profile of the spec (smoke, quick, paper)")
    lp.add_argument("--name", help="study name (default: <spec name>-<profile>)")
    lp.add_argument("--root", default="studies", help="directory holding studies (default: studies/)")
    lp.add_argument("--address", help="join an existing Ray cluster (e.g. auto)")
    lp.add_argument("--tracking-uri", help="MLflow tracking URI (default: SQLite in the study dir)")
    lp.add_argument("--max-concurrent", type=int, help="maximum concurrent trials")
    lp.add_argument("--only", action="append", default=[], metavar="AXIS=V1,V2",
                    help="run a subset of a grid axis, e.g. --only task=copy,lookup (repeatable)")
    lp.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    lp.add_argument("--progress-seconds", type=float, default=10.0, help="progress line interval")

    rp = sub.add_parser("resume", help="resume an interrupted study")
    rp.add_argument("study", help="study name (under --root) or directory")
    rp.add_argument("--root", default="studies")
    rp.add_argument("--address")
    rp.add_argument("--progress-seconds", type=float, default=10.0)

    sp = sub.add_parser("status", help="per cell: seeds done, running, failed, missing")
    sp.add_argument("study")
    sp.add_argument("--root", default="studies")

    up = sub.add_parser("ui", help="serve the MLflow UI over the study's store on 127.0.0.1")
    up.add_argument("study")
    up.add_argument("--root", default="studies")
    up.add_argument("--port", type=int, default=5000)
    up.add_argument("--host", default="127.0.0.1",
                    help="bind address (default 127.0.0.1; use an SSH tunnel rather than 0.0.0.0)")

    ep = sub.add_parser("report", help="build report tables from the study's record")
    ep.add_argument("study")
    ep.add_argument("--root", default="studies")
    ep.add_argument("--out", help="output directory (default: <study>/reports)")
    return p


def ui_command(tracking_uri: str, host: str, port: int) -> list[str]:
    """The ``mlflow server`` command serving a store on host:port."""
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
            "--host", host, "--port", str(port), "--workers", "1"]


def main(argv: list[str] | None = None) -> int:
    args = parse(_parser(), argv)
    try:
        if args.cmd == "launch":
            from study.launch import launch
            from study.spec import parse_only

            summary = launch(
                args.spec, profile=args.profile, name=args.name, root=args.root,
                address=args.address, tracking_uri=args.tracking_uri,
                max_concurrent=args.max_concurrent, dry_run=args.dry_run,
                progress_seconds=args.progress_seconds, only=parse_only(args.only),
            )
            return 1 if summary.get("errors") else 0
        if args.cmd == "resume":
            from study.launch import resume

            summary = resume(args.study, root=args.root, address=args.address,
                             progress_seconds=args.progress_seconds)
            return 1 if summary.get("errors") else 0
        if args.cmd == "status":
            from study.launch import format_status, status

            print(format_status(status(args.study, root=args.root)))
            return 0
        if args.cmd == "ui":
            from study.launch import load_meta, study_paths

            meta = load_meta(study_paths(args.study, args.root))
            cmd = ui_command(meta["tracking_uri"], args.host, args.port)
            print(f"MLflow UI for study {meta['name']!r}: http://{args.host}:{args.port}", flush=True)
            proc = subprocess.Popen(cmd)
            stop = lambda *_: proc.terminate()  # noqa: E731
            signal.signal(signal.SIGTERM, stop)
            try:
                return proc.wait()
            except KeyboardInterrupt:
                proc.terminate()
                return proc.wait()
        if args.cmd == "report":
            from study.launch import load_meta, study_paths

            paths = study_paths(args.study, args.root)
            meta = load_meta(paths)
            try:
                from reports.build import build_reports
            except ImportError as exc:
                print(f"study report: the reports package is not available ({exc})", file=sys.stderr)
                return 2
            out = Path(args.out or paths.dir / "reports")
            written = build_reports(meta["tracking_uri"], study=meta["name"], out_dir=out)
            for path in written or []:
                print(path)
            return 0
    except SpecError as exc:
        print(f"study {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    sys.exit(main())
