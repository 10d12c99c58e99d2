"""The adapter to MLflow's SQL store: every SQL statement the project runs against MLflow's
tables, and every private name of MLflow it uses, live here and nowhere else
(``test_architecture.py`` enforces it). :mod:`record.store` is the door the rest of the
project uses; this module is what stands behind it.

Why SQL at all, rather than MLflow's public client: ``MlflowClient.search_runs`` loads every
run whole (all its params, tags and latest metrics), page by page, where a report asks for a few
keys; it has no query for the latest step of a metric over many runs; and it needs MLflow
imported: ``study status`` on a SQLite store reads with the standard library's ``sqlite3``
alone. A tracking server (``http://``) is read through the client (:mod:`record.store`).

What it assumes of MLflow's schema (MLflow 3.x, alembic head ``dc11669786a5`` for 3.17): the
tables ``experiments``, ``runs``, ``tags``, ``params``, ``metrics``, ``latest_metrics`` and
``alembic_version`` with the columns named in the statements below. A store whose schema
revision is not the one the installed MLflow writes is refused when a driver opens it
(:func:`schema_revision`, :func:`known_revisions`, used by :func:`record.store.check_schema`).
"""

from __future__ import annotations

import math
import os
import sqlite3
from pathlib import Path
from typing import Any, Mapping, Sequence

from record import schema
from record.uri import StoreError, StudyNotFound, local_store, readonly_uri, redact, sqlite_path, sqlite_uri


# ---------------------------------------------------------------------------- opening a database


def open_database(tracking_uri: str, seconds: float = 10.0) -> None:
    """For a database store other than SQLite (``postgresql://``, ``mysql://``, ``mssql://``):
    one connection, waiting at most ``seconds``, then closed (MLflow alone retries a refused
    connection for about 100 s, then ends in a traceback). :class:`StoreError` in one line
    naming the store (password redacted) and the database's own first line of error."""
    scheme = tracking_uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in ("postgresql", "mysql", "mssql"):
        return
    import sqlalchemy  # reason: only a database store needs it, and it is heavy

    # No public MLflow call opens a store with a time limit (its engine retries ~100 s).

    engine = sqlalchemy.create_engine(tracking_uri, connect_args={"connect_timeout": max(1, int(seconds))})
    try:
        engine.connect().close()
    except Exception as exc:  # noqa: BLE001 - the driver's own error (refused, auth, no such database)
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        reason = first[0] if first else type(exc).__name__
        raise StoreError(f"its store {redact(tracking_uri)} cannot be opened: {reason}") from None
    finally:
        engine.dispose()



# ---------------------------------------------------------------------------- reading


class SQLReader:
    """Read-only queries over sqlite3 (fast path) or SQLAlchemy (other databases), with named
    parameters (``:name``) in both."""

    def __init__(self, uri: str, *, timeout: float = 5.0) -> None:
        self.uri = uri
        path = local_store(uri)
        if path is not None:
            if not path.exists():
                raise StoreError(f"SQLite store {str(path)!r} does not exist")
            self._conn = sqlite3.connect(readonly_uri(path), uri=True, timeout=timeout)
            self._engine = None
        else:
            import sqlalchemy  # installed with mlflow; only non-SQLite stores need it

            try:
                self._engine = sqlalchemy.create_engine(uri)
                self._conn = self._engine.connect()
            except Exception as exc:  # driver missing, server down: the driver's first line (psycopg adds hints)
                first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
                reason = first[0] if first else type(exc).__name__
                raise StoreError(f"cannot open tracking store {redact(uri)}: {reason}") from exc

    def query(self, sql: str, params: Mapping[str, object]) -> list[tuple]:
        """The rows of one ``SELECT`` (named parameters ``:name``), as tuples."""
        try:
            if self._engine is None:
                return self._conn.execute(sql, dict(params)).fetchall()
            import sqlalchemy  # see __init__

            return [tuple(r) for r in self._conn.execute(sqlalchemy.text(sql), dict(params))]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{redact(self.uri)} is not a readable MLflow store ({exc})") from exc

    def close(self) -> None:
        self._conn.close()
        if self._engine is not None:
            self._engine.dispose()

    def __enter__(self) -> "SQLReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_clause(name: str, values: Sequence[str]) -> tuple[str, dict[str, object]]:
    """``(":name0, :name1, ...", {"name0": v0, ...})``: an SQL ``IN`` list of named parameters."""
    params = {f"{name}{i}": v for i, v in enumerate(values)}
    return ", ".join(f":{k}" for k in params), params



def study_rows(
    uri: str, study: str, tag_keys: Sequence[str], metric_keys: Sequence[str] | None,
    param_keys: Sequence[str] | None, metric_prefixes: Sequence[str],
) -> tuple[list[tuple], list[tuple], list[tuple], list[tuple]]:
    """``(runs, tags, params, metrics)`` of the active runs of ``study`` (the fields of
    :class:`record.store.RunRows`): the tags ``tag_keys``, the params ``param_keys`` (``None``:
    every param), the latest
    value of ``metric_keys`` and of keys starting with ``metric_prefixes`` (``None``: every
    metric). Raises :class:`StudyNotFound` naming the studies there, or :class:`StoreError`."""
    with SQLReader(uri) as db:
        try:
            exps = db.query(
                "SELECT experiment_id, name FROM experiments WHERE lifecycle_stage = 'active'", {}
            )
        except Exception as exc:
            raise StoreError(f"{redact(uri)} is not an MLflow tracking store ({exc})") from exc
        ids = [e for e, n in exps if n == study]
        if not ids:
            names = sorted(n for _, n in exps if n != "Default")
            raise StudyNotFound(
                f"study {study!r} not found in {redact(uri)}; studies there: "
                + (", ".join(names) if names else "(none)")
            )
        exp = {"exp": ids[0]}
        run_filter = "r.experiment_id = :exp AND r.lifecycle_stage = 'active'"
        runs = db.query(
            "SELECT r.run_uuid, r.status, r.start_time, r.end_time FROM runs r "
            f"WHERE {run_filter}", exp,
        )
        tag_in, tag_params = in_clause("t", tag_keys)
        tags = db.query(
            "SELECT t.run_uuid, t.key, t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            f"WHERE {run_filter} AND t.key IN ({tag_in})", {**exp, **tag_params},
        )
        params: list[tuple] = []
        if param_keys is None or param_keys:
            p_in, p_params = in_clause("p", param_keys or ())
            p_where = "" if param_keys is None else f" AND p.key IN ({p_in})"
            params = db.query(
                "SELECT p.run_uuid, p.key, p.value FROM params p "
                "JOIN runs r ON r.run_uuid = p.run_uuid "
                f"WHERE {run_filter}{p_where}", {**exp, **p_params},
            )
        conds: list[str] = []
        m_params: dict[str, object] = {}
        if metric_keys is not None:
            if metric_keys:
                m_in, m_params = in_clause("m", metric_keys)
                conds.append(f"m.key IN ({m_in})")
            for i, prefix in enumerate(metric_prefixes):
                m_params[f"pre{i}"] = prefix + "%"
                conds.append(f"m.key LIKE :pre{i}")
        where = f" AND ({' OR '.join(conds)})" if conds else ""
        metrics: list[tuple] = []
        if metric_keys is None or conds:
            metrics = db.query(
                "SELECT m.run_uuid, m.key, m.value, CASE WHEN m.is_nan THEN 1 ELSE 0 END "
                f"FROM latest_metrics m JOIN runs r ON r.run_uuid = m.run_uuid WHERE {run_filter}{where}",
                {**exp, **m_params},
            )
    return runs, tags, params, [(r, k, stored_value(v, is_nan)) for r, k, v, is_nan in metrics]


#: MLflow's SQL store keeps +inf and -inf as the largest finite doubles (and NaN as 0 with
#: ``is_nan``); :func:`stored_value` turns them back.
_MAX_DOUBLE = 1.7976931348623157e308


def stored_value(value: float, is_nan: int | bool = False) -> float:
    """A metric value as logged, from its SQL row: NaN for ``is_nan``, ±inf for the ±largest
    double that MLflow stores in their place, else ``value``."""
    if is_nan:
        return float("nan")
    if value is not None and abs(value) >= _MAX_DOUBLE:
        return math.copysign(math.inf, value)
    return value



def latest_metric_rows(tracking_uri: str, run_ids: Sequence[str]) -> list[tuple[str, str, int, float]]:
    """``(run id, key, step, value)`` of each metric's latest row of ``run_ids`` (MLflow's
    ``latest_metrics`` table: the highest step, then the newest)."""
    r_in, r_params = in_clause("r", list(run_ids))
    with SQLReader(tracking_uri, timeout=30) as con:
        return [(run_id, key, int(step), stored_value(value, is_nan)) for run_id, key, step, value, is_nan
                in con.query("SELECT run_uuid, key, step, value, CASE WHEN is_nan THEN 1 ELSE 0 END "
                             f"FROM latest_metrics WHERE run_uuid IN ({r_in})", r_params)]


def run_key_rows(tracking_uri: str, experiment_id: str) -> tuple[
        list[tuple[str, str]], dict[str, int], dict[str, str], dict[str, set[str]], dict[str, int]]:
    """Of the runs of an experiment: ``(run key, run id)`` of each active run that has a
    ``locattn.run_key``; run id -> last epoch step logged; run id -> ``locattn.status``; run id ->
    the keys of its other metrics; run id -> start time (ms)."""
    with SQLReader(tracking_uri, timeout=30) as con:
        exp = {"exp": int(experiment_id)}
        keys = con.query(
            "SELECT t.value, r.run_uuid FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            "WHERE t.key = :key AND r.experiment_id = :exp AND r.lifecycle_stage = 'active'",
            {"key": schema.RUN_KEY, **exp})
        m_in, m_params = in_clause("m", schema.EPOCH_METRICS)
        steps = dict(con.query(
            "SELECT m.run_uuid, MAX(m.step) FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid "
            f"WHERE r.experiment_id = :exp AND m.key IN ({m_in}) GROUP BY m.run_uuid",
            {**exp, **m_params}))
        statuses = dict(con.query(
            "SELECT t.run_uuid, t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            "WHERE t.key = :key AND r.experiment_id = :exp", {"key": schema.STATUS, **exp}))
        others: dict[str, set[str]] = {}
        for run_id, key in con.query(  # latest_metrics: one row per run and key
                "SELECT m.run_uuid, m.key FROM latest_metrics m JOIN runs r ON r.run_uuid = m.run_uuid "
                f"WHERE r.experiment_id = :exp AND m.key NOT IN ({m_in})", {**exp, **m_params}):
            others.setdefault(run_id, set()).add(key)
        starts = dict(con.query("SELECT run_uuid, start_time FROM runs WHERE experiment_id = :exp", exp))
    return keys, steps, statuses, others, starts


def keyed_run_rows(tracking_uri: str, experiment_id: str) -> list[tuple]:
    """``(run id, run key, locattn.status or None, start time)`` of each active run of an
    experiment that has a ``locattn.run_key``."""
    with SQLReader(tracking_uri, timeout=30) as con:
        return con.query(
            "SELECT r.run_uuid, k.value, s.value, r.start_time FROM runs r "
            "JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = :key "
            "LEFT JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = :status "
            "WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active'",
            {"key": schema.RUN_KEY, "status": schema.STATUS, "exp": int(experiment_id)})


def experiment_id(tracking_uri: str, name: str) -> str | None:
    """Id of the active experiment ``name`` in a SQLite store; None when it is not there, the
    file is not a store, or the store is not SQLite (no MLflow import)."""
    db = local_store(tracking_uri)
    if db is None or not db.is_file():
        return None
    try:
        with SQLReader(tracking_uri) as con:
            rows = con.query("SELECT experiment_id FROM experiments WHERE name = :name AND "
                             "lifecycle_stage = 'active'", {"name": name})
    except StoreError:
        return None
    return str(rows[0][0]) if rows else None


def artifact_rows(tracking_uri: str, run_ids: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(run id, its artifact URI, its experiment's artifact location)`` of ``run_ids``."""
    r_in, params = in_clause("r", run_ids)
    with SQLReader(tracking_uri) as db:
        return db.query(f"SELECT r.run_uuid, r.artifact_uri, e.artifact_location FROM runs r "
                        f"JOIN experiments e ON e.experiment_id = r.experiment_id "
                        f"WHERE r.run_uuid IN ({r_in})", params)


def artifact_locations(db: Path) -> list[str]:
    """The distinct artifact locations of the experiments of the SQLite store ``db``."""
    with SQLReader(sqlite_uri(db), timeout=30) as con:
        return [r[0] for r in con.query("SELECT DISTINCT artifact_location FROM experiments", {})]


# ---------------------------------------------------------------------------- writing
# MLflow's client has no call that rewrites an experiment's or a run's artifact location, and
# none that inserts many finished runs at once: these two are SQL.


def move_artifact_root(db: Path, old: str, new: str) -> None:
    """Rewrite the artifact locations under ``old`` (an experiment's and its runs') to ``new`` in
    the SQLite store ``db``: the one edit a moved study folder needs, since MLflow keeps
    absolute paths."""
    con = sqlite3.connect(db)
    try:
        with con:
            con.execute("UPDATE experiments SET artifact_location = ? WHERE artifact_location = ?",
                        (new, old))
            con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
                        "WHERE substr(artifact_uri, 1, ?) = ?",
                        (new, len(old) + 1, len(old), old))
    except sqlite3.Error as exc:
        raise StoreError(f"{db}: cannot adopt the moved study's store ({exc})") from None
    finally:
        con.close()


def insert_rows(db: str | Path, tables: Mapping[str, tuple[Sequence[str], Sequence[tuple]]]) -> None:
    """Bulk-insert rows into MLflow's tables of a SQLite store whose schema MLflow created, in
    one transaction: ``{table: (columns, rows)}`` (synthetic stores for tests and benchmarks)."""
    con = sqlite3.connect(str(db))
    try:
        with con:
            for table, (columns, rows) in tables.items():
                marks = ",".join("?" * len(columns))
                con.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
    finally:
        con.close()



# ---------------------------------------------------------------------------- MLflow's private names


def create_store(db: Path) -> None:
    """Create a complete MLflow store in the SQLite file ``db`` and close every connection to it."""
    from mlflow.tracking import MlflowClient  # heavy: only when a store is created

    # Private: ``MlflowClient._tracking_client.store``. Building the client's store runs
    # MLflow's migrations, with the default artifact root a store opened in place gets; the
    # public API has no "create the store" call and no way to close its engine, which must be
    # closed for the file to be renamed whole.
    store = MlflowClient(tracking_uri=sqlite_uri(db))._tracking_client.store
    store.engine.dispose()


def forget_engines(*dbs: Path) -> None:
    """Drop this process's cached MLflow engines of these SQLite files. MLflow keeps one engine
    per URI for the life of the process; an engine of a store that was deleted and built anew
    holds connections to the deleted file, and every write through it failed as "readonly"
    (a study resumed in the process whose driver lost the store)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # heavy: only when a store is built

    # Private: ``SqlAlchemyStore._engine_map``, MLflow's process-wide engine cache. The public
    # API neither exposes nor clears it.
    engines = getattr(SqlAlchemyStore, "_engine_map", None)
    if not isinstance(engines, dict):  # (another MLflow: nothing of ours to forget)
        return
    gone = {Path(os.path.abspath(d)) for d in dbs}
    for uri in list(engines):
        path = sqlite_path(uri)
        if path is not None and Path(os.path.abspath(path)) in gone:
            engines.pop(uri).dispose()


def _migration_scripts() -> Any:
    """alembic's ``ScriptDirectory`` of the installed MLflow's migrations."""
    # alembic and mlflow (installed with MLflow; about 1 s): only when a store is created or checked
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    # Private: ``mlflow.store.db.utils._get_alembic_config``, the only way MLflow names its
    # migration folder. ``mlflow db upgrade`` is public but upgrades; nothing public says which
    # revision the installed MLflow writes, or which revisions it knows.
    return ScriptDirectory.from_config(_get_alembic_config(""))


def head_revision() -> str:
    """MLflow's newest schema revision (its migration scripts' head): what it writes."""
    return _migration_scripts().get_current_head()


def known_revisions() -> list[str]:
    """Every schema revision the installed MLflow knows, newest first (its head first)."""
    return [s.revision for s in _migration_scripts().walk_revisions()]


def schema_revision(tracking_uri: str) -> str | None:
    """The schema revision a SQL store is stamped with (``alembic_version``); None for a store
    with no stamp yet (a new database MLflow has not built), a SQLite file not there or not a
    database, and a database that cannot be reached now."""
    db = sqlite_path(tracking_uri)
    if db is not None and not db.is_file():
        return None
    try:
        with SQLReader(tracking_uri, timeout=30) as con:
            rows = con.query("SELECT version_num FROM alembic_version", {})
    except Exception:  # noqa: BLE001 - no such table, not a database, a database not reachable
        return None  # (MLflow's own open says which, and retries a database that is down)
    return str(rows[0][0]) if rows else None


def half_built(db: Path) -> bool:
    """Whether the SQLite store ``db`` holds no run and is not stamped at MLflow's newest schema."""
    try:
        con = sqlite3.connect(readonly_uri(db), uri=True, timeout=30)
    except sqlite3.Error:
        return False
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "runs" in tables and con.execute("SELECT count(*) FROM runs").fetchone()[0]:
            return False  # runs recorded: never rebuilt (MLflow upgrades or refuses it itself)
        stamp = (con.execute("SELECT version_num FROM alembic_version").fetchall()
                 if "alembic_version" in tables else [])
    except sqlite3.Error:
        return False
    finally:
        con.close()
    return [r[0] for r in stamp] != [head_revision()]
