"""Benchmark: `reports build` on synthetic study stores of 10,000 runs in PostgreSQL.

The Postgres twin of bench_reports.py. Starts a throwaway PostgreSQL on a free 127.0.0.1 port
(Debian's package; ``postgres_server`` of test_postgres_store.py), lets MLflow create its schema and
the experiments there, and fills it with the same synthetic studies bench_reports.py writes to
SQLite (one per spec that regenerates a table; written to SQLite first with reports.synth, then
copied row for row). Then times the `reports build` command (a fresh process per study: imports
included) for every table in md, latex and csv against `--tracking-uri postgresql://...`, and
checks that its tables equal the ones built from the SQLite twin, provenance aside (exits 1
when they differ). ``--quick``: 400 runs (every cell of every table gets one) of 2 epochs, one
repeat. Without PostgreSQL's binaries (``apt-get install postgresql``) or psycopg
(the cluster extra) it stops with the reason.

    python benchmarks/bench_reports_postgres.py [--runs 10000] [--epochs 10] [--repeat 3]
                                                [--dir DIR] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_reports import build_command, time_reports_build, write_studies  # noqa: E402
from benchmarks._common import parse_args  # noqa: E402
from tests.cluster.test_postgres_store import postgres_server  # noqa: E402

COPIED = {  # MLflow tables the synthetic store fills, with their columns
    "runs": ("run_uuid", "name", "source_type", "source_name", "entry_point_name", "user_id",
             "status", "start_time", "end_time", "source_version", "lifecycle_stage",
             "artifact_uri", "experiment_id"),
    "tags": ("key", "value", "run_uuid"),
    "params": ("key", "value", "run_uuid"),
    "latest_metrics": ("key", "value", "timestamp", "step", "is_nan", "run_uuid"),
    "metrics": ("key", "value", "timestamp", "run_uuid", "step", "is_nan"),
}


def copy_to_postgres(db: Path, pg_uri: str, studies: list[str]) -> int:
    """Copy the synthetic SQLite store's runs of ``studies`` (one experiment each) into the
    Postgres MLflow store, an experiment of the same name each; returns the runs copied."""
    import psycopg
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=pg_uri)  # creates MLflow's schema in Postgres
    src = sqlite3.connect(db)
    to_pg = {}
    for study in studies:
        (sq_eid,) = src.execute("SELECT experiment_id FROM experiments WHERE name = ?", (study,)).fetchone()
        to_pg[sq_eid] = int(client.create_experiment(study))
    try:
        with psycopg.connect(pg_uri) as con, con.cursor() as cur:
            for table, cols in COPIED.items():
                rows = src.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
                if table == "runs":
                    assert all(r[-1] in to_pg for r in rows)
                    rows = [(*r[:-1], to_pg[r[-1]]) for r in rows]
                if "is_nan" in cols:  # SQLite stores the boolean as 0/1
                    i = cols.index("is_nan")
                    rows = [(*r[:i], bool(r[i]), *r[i + 1:]) for r in rows]
                with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            cur.execute("SELECT count(*) FROM runs WHERE experiment_id = ANY(%s)", (list(to_pg.values()),))
            (n,) = cur.fetchone()
    finally:
        src.close()
    return n


def _without_source(out: Path, study: str) -> dict[str, list[str]]:
    return {p.name: [ln for ln in p.read_text().splitlines() if f"study: {study} (" not in ln]
            for p in sorted(out.iterdir())}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=10, help="per-epoch history rows per metric")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one); "
                    "the PostgreSQL server keeps its own temporary directory")
    args = parse_args(ap, {"runs": 400, "epochs": 2, "repeat": 1}, argv)

    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_reports_pg-"))
    for stale in (work / "sqlite_store", work / "pg", work / "sqlite"):  # a reused --dir
        shutil.rmtree(stale, ignore_errors=True)
    (work / "sqlite_store").mkdir(parents=True)
    db = work / "sqlite_store" / "mlflow.db"
    t = time.perf_counter()
    studies = write_studies(db, args.runs, args.epochs)
    n = sum(len(runs) + 1 for _, runs in studies)
    print(f"SQLite twin: {n} runs (incl. parents) of {len(studies)} studies in {time.perf_counter() - t:.1f} s")

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    files = {s.name: 3 * len(s.tables) for s, _ in studies}
    with postgres_server() as pg:
        t = time.perf_counter()
        n_pg = copy_to_postgres(db, pg, list(files))
        print(f"PostgreSQL store: {n_pg} runs copied in {time.perf_counter() - t:.1f} s "
              f"({pg.split('@')[1]})")
        assert n_pg == n
        time_reports_build([(build_command(pg, name, work / "pg" / name), k) for name, k in files.items()],
                           env, args.repeat, "reports build --tracking-uri postgresql://...")

    # The same builds from the SQLite twin, timed the same way: the two numbers compare under the
    # same machine load.
    time_reports_build([(build_command(f"sqlite:///{db}", name, work / "sqlite" / name), k)
                        for name, k in files.items()], env, args.repeat,
                       "reports build --tracking-uri sqlite:///... (SQLite twin, same runs)")
    print(f"load average {os.getloadavg()[0]:.1f}")
    same = all(_without_source(work / "pg" / name, name) == _without_source(work / "sqlite" / name, name)
               for name in files)
    print(f"tables from Postgres == tables from the SQLite twin (provenance source aside): {same}")
    if not same:
        raise SystemExit("the Postgres and SQLite builds differ")


if __name__ == "__main__":
    main()
