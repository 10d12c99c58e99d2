"""MLflow on a real PostgreSQL (README "Clusters", "MLflow on Postgres").

A throwaway PostgreSQL cluster (Debian's package: ``initdb``/``pg_ctl`` in a temporary directory,
on a free 127.0.0.1 port) backs a real ``mlflow server`` on 127.0.0.1. A small study logs to the
server over HTTP (``study launch --tracking-uri http://...``). ``reports build`` then reads the
same runs through Postgres SQL (``--tracking-uri postgresql://...``) and over REST
(``--tracking-uri http://...``), and both give byte-identical tables, provenance line aside.

:func:`postgres_server` is also what ``benchmarks/bench_reports_postgres.py`` starts.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin(name: str) -> str | None:
    """Path of a PostgreSQL server binary (Debian keeps them in /usr/lib/postgresql/N/bin)."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                      key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return versions[-1] if versions else None


def _wait_port(port: int, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what} exited ({proc.returncode}) before listening on {port}")
            if time.time() > deadline:
                raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")
            time.sleep(0.3)


@contextlib.contextmanager
def postgres_server(database: str = "mlflow", user: str = "locattn",
                    password: str = "locattn-test") -> Iterator[str]:
    """A throwaway PostgreSQL on a free 127.0.0.1 port; yields ``postgresql://...`` of a fresh DB.

    As root the server runs as the ``postgres`` user (PostgreSQL refuses root). Raises
    ``FileNotFoundError`` when the binaries are missing (``apt-get install postgresql``).
    """
    initdb, pg_ctl = postgres_bin("initdb"), postgres_bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise FileNotFoundError("PostgreSQL's initdb/pg_ctl not found (apt-get install postgresql)")
    as_root = os.geteuid() == 0
    if as_root:
        import pwd

        try:
            pg_user = pwd.getpwnam("postgres")
        except KeyError:
            raise FileNotFoundError("running as root, but there is no `postgres` user to run "
                                    "PostgreSQL as (apt-get install postgresql creates it)") from None

    def run(*cmd: str) -> subprocess.CompletedProcess:
        full = (["runuser", "-u", "postgres", "--", *cmd] if as_root else list(cmd))
        return subprocess.run(full, capture_output=True, text=True, check=True)

    tmp = Path(tempfile.mkdtemp(prefix="locattn-pg-"))
    data, pwfile = tmp / "data", tmp / "pw"
    pwfile.write_text(password + "\n")
    if as_root:
        os.chown(tmp, pg_user.pw_uid, pg_user.pw_gid)
        os.chown(pwfile, pg_user.pw_uid, pg_user.pw_gid)
    port = free_port()
    try:
        run(initdb, "-D", str(data), "-U", user, f"--pwfile={pwfile}", "--auth-local=trust",
            "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8")
        # TCP on loopback only; the Unix socket in the temporary directory, not /var/run.
        run(pg_ctl, "-D", str(data), "-l", str(tmp / "server.log"), "-w", "-t", "60",
            "-o", f"-h 127.0.0.1 -p {port} -k {tmp} -c fsync=off", "start")
        try:
            psql = postgres_bin("psql") or "psql"
            run(psql, "-h", str(tmp), "-p", str(port), "-U", user, "-d", "postgres", "-q",
                "-c", f"CREATE DATABASE {database}")
            yield f"postgresql://{user}:{password}@127.0.0.1:{port}/{database}"
        finally:
            run(pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(backend_uri: str, artifacts: Path) -> Iterator[str]:
    """``mlflow server`` over ``backend_uri`` on a free 127.0.0.1 port; yields its http:// URI."""
    port = free_port()
    log = artifacts.parent / "mlflow-server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
             "--artifacts-destination", artifacts.as_uri(), "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        try:
            _wait_port(port, 180, "mlflow server", proc)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{log.read_text()[-3000:]}") from None
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, 15)  # the server and its workers: its own process group
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a loaded machine: its workers may not stop in time
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)


def _tables(out: Path, study: str) -> tuple[dict[str, list[str]], list[str]]:
    """(file name -> lines without the provenance line naming the source, those lines)."""
    files, sources = {}, []
    for p in sorted(out.iterdir()):
        lines = p.read_text().splitlines()
        src = [ln for ln in lines if f"study: {study} (" in ln]
        assert len(src) == 1, (p, lines[:6])
        sources += src
        files[p.name] = [ln for ln in lines if ln not in src]
    return files, sources


@pytest.mark.cluster
def test_study_logs_to_mlflow_on_postgres_and_reports_agree(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("ray")
    pytest.importorskip("psycopg", reason="the Postgres driver comes with the cluster extra")
    if not (postgres_bin("initdb") and postgres_bin("pg_ctl")):
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (apt-get install postgresql)")
    import sqlalchemy

    spec = ROOT / "ablations/rc_table2.yaml"  # its smoke profile: 2 variants x 2 seeds, seconds
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    with postgres_server() as pg, mlflow_server(pg, tmp_path / "mlflow-artifacts") as http:
        assert pg.startswith("postgresql://locattn:") and "@127.0.0.1:" in pg
        launch = subprocess.run(
            [str(BIN / "study"), "launch", str(spec), "--profile", "smoke", "--root",
             str(tmp_path / "studies"), "--tracking-uri", http, "--progress-seconds", "30"],
            env=env, capture_output=True, text=True, timeout=400)
        assert launch.returncode == 0, launch.stdout[-3000:] + launch.stderr[-3000:]

        # The runs are in Postgres: the MLflow schema, read with plain SQL.
        engine = sqlalchemy.create_engine(pg)
        with engine.connect() as con:
            n_trials = con.execute(sqlalchemy.text(
                "SELECT count(*) FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                "JOIN experiments e ON e.experiment_id = r.experiment_id "
                "WHERE e.name = 'rc_table2-smoke' AND t.key = 'locattn.role' AND t.value = 'trial' "
                "AND r.status = 'FINISHED'")).scalar()
            artifact_uris = con.execute(sqlalchemy.text(
                "SELECT r.artifact_uri FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                "WHERE t.key = 'locattn.role' AND t.value = 'trial'")).scalars().all()
        engine.dispose()
        assert n_trials == 4  # 2 variants x 2 seeds
        # Artifacts travel through the server's proxy (--artifacts-destination), so no node
        # needs the artifact folder: every run's files are in the destination, none in --root.
        assert len(artifact_uris) == 4 and all(u.startswith("mlflow-artifacts:/") for u in artifact_uris)
        stored = [p.name for p in (tmp_path / "mlflow-artifacts").rglob("*") if p.is_file()]
        assert stored.count("result.json") == 4, stored
        assert not list((tmp_path / "studies").rglob("artifacts/*"))

        outs = {}
        for name, uri in (("sql", pg), ("rest", http)):
            out = tmp_path / name
            proc = subprocess.run(
                [str(BIN / "reports"), "build", "--tracking-uri", uri, "--study", "rc_table2-smoke",
                 "--table", "rc_table2", "--format", "md,latex,csv", "--out", str(out)],
                env=env, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
            outs[name] = out
    sql, sql_src = _tables(outs["sql"], "rc_table2-smoke")
    rest, rest_src = _tables(outs["rest"], "rc_table2-smoke")
    assert sorted(sql) == ["rc_table2.csv", "rc_table2.md", "rc_table2.tex"], sorted(sql)
    assert sql == rest  # byte-identical apart from the provenance line naming the source
    md = "\n".join(sql["rc_table2.md"])
    assert "OneStepAttn" in md and "Content" in md  # both variants' rows, from the study's runs
    assert all("postgresql://locattn:***@127.0.0.1:" in ln for ln in sql_src), sql_src
    assert all(http in ln for ln in rest_src), rest_src


@pytest.mark.cluster
def test_a_launch_with_credentials_in_a_postgres_uri_connects_and_saves_none(tmp_path: Path) -> None:
    """#27 item 14: ``postgresql://user:pw@...`` stopped connecting ("fe_sendauth: no password
    supplied"): the password was stripped before the store was opened. It connects now, and the
    credentials stay in memory: not in study.json, not in the output."""
    pytest.importorskip("mlflow")
    pytest.importorskip("ray")
    pytest.importorskip("psycopg", reason="the Postgres driver comes with the cluster extra")
    if not (postgres_bin("initdb") and postgres_bin("pg_ctl")):
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (apt-get install postgresql)")
    import json

    import sqlalchemy

    spec = tmp_path / "pgc.yaml"
    spec.write_text(
        "name: pgc\ngrid: {task: [copy], variant: [onestep]}\nseeds: 1\n"
        "overrides: {task.train_size: 32, task.dev_size: 8, task.test_size: 8, task.test_lengths: [15], "
        "optim.epochs: 1}\nresources: {cpus: 1}\nmax_failures: 0\nprofiles: {smoke: {}}\n"
        "default_profile: smoke\n")
    secret = "pw-s3cret-27"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGUSER", "PGPASSWORD", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    env.update(PYTHONPATH=str(ROOT), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")
    with postgres_server(user="alice", password=secret) as pg:
        assert pg.startswith(f"postgresql://alice:{secret}@127.0.0.1:")
        res = subprocess.run(
            [sys.executable, "-m", "study.cli", "launch", str(spec), "--root", str(tmp_path / "s"),
             "--tracking-uri", pg, "--progress-seconds", "30"],
            env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert "1 of 1 runs finished" in res.stdout
        engine = sqlalchemy.create_engine(pg)
        with engine.connect() as con:
            n = con.execute(sqlalchemy.text(
                "SELECT count(*) FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                "WHERE t.key = 'locattn.role' AND t.value = 'trial' AND r.status = 'FINISHED'")).scalar()
        engine.dispose()
        assert n == 1
    study = tmp_path / "s" / "pgc-smoke"
    meta = (study / "study.json").read_text()
    assert json.loads(meta)["tracking_uri"].startswith("postgresql://127.0.0.1:")
    on_disk = [p for p in study.rglob("*") if p.is_file() and p.stat().st_size < 5_000_000]
    for text in (res.stdout, res.stderr, *(p.read_bytes().decode(errors="replace") for p in on_disk)):
        assert secret not in text and "alice:" not in text


@pytest.mark.cluster
def test_a_postgres_store_of_another_schema_is_refused_in_one_line_with_its_password_hidden(
        tmp_path: Path) -> None:
    """Issue 44: the schema check on a database store (SQLAlchemy, not sqlite3): a store stamped
    at an older revision is refused in one line naming it with its password as ``***``; readers
    still read it."""
    pytest.importorskip("mlflow")
    pytest.importorskip("psycopg", reason="the Postgres driver comes with the cluster extra")
    if not (postgres_bin("initdb") and postgres_bin("pg_ctl")):
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (apt-get install postgresql)")
    import sqlalchemy

    from record import mlflow_sql, schema
    from record.store import StoreError, check_schema, open_store
    from record.writer import RecordWriter

    secret = "pw-s3cret-44"
    with postgres_server(user="alice", password=secret) as pg:
        w = RecordWriter(tracking_uri=pg, study="s", artifact_location=(tmp_path / "a").as_uri(),
                         parent_tags={}).open()
        check_schema(pg)  # MLflow built it: at the head
        older = mlflow_sql.known_revisions()[1]
        engine = sqlalchemy.create_engine(pg)
        with engine.begin() as con:
            con.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = :v"), {"v": older})
        engine.dispose()
        with pytest.raises(StoreError) as exc:
            check_schema(pg)
        rows = open_store(pg).read_rows("s", tag_keys=[schema.ROLE])
    message = str(exc.value)
    assert "\n" not in message and secret not in message
    assert f"the store postgresql://alice:***@127.0.0.1:" in message
    assert f"has MLflow schema {older}, older than {mlflow_sql.head_revision()}" in message
    assert [r[0] for r in rows.runs] == [w.parent_id]
