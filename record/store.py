"""The one door into MLflow's database, and the only code that parses or redacts a tracking URI.

Three ways in, one answer (:class:`RunRows`, plain tuples):

- a SQLite store (``sqlite:///...``, what a study writes to ``<study_dir>/mlflow.db``): plain SQL
  through the standard library ``sqlite3`` module, read-only;
- other SQL stores (``postgresql://``, ``mysql://``): the same SQL through SQLAlchemy (installed
  with MLflow);
- an MLflow server (``http://`` / ``https://``): ``MlflowClient.search_runs`` page by page.

The SQL reads only the tables ``experiments``, ``runs``, ``tags``, ``params``, ``metrics`` and
``latest_metrics`` of MLflow's schema, and only the keys asked for. It writes in two places: the
artifact paths of a moved study (:func:`move_artifact_root`) and synthetic stores for tests and
benchmarks (:func:`insert_rows`). Everything else is written through MLflow's client
(:mod:`record.writer`).
"""

from __future__ import annotations

import lzma
import math
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from record import schema

SQLITE_PREFIX = "sqlite:///"
ARCHIVE_SUFFIX = ".xz"
"""A SQLite store committed compressed is ``<store>.xz`` (``xz -9 -k mlflow.db``): see :func:`unpack`."""


class StoreError(ValueError):
    """The store cannot be read or written as asked; the message is one line naming it (password
    redacted)."""


class StudyNotFound(StoreError):
    """The store holds no study (MLflow experiment) of that name."""


# ---------------------------------------------------------------------------- tracking URIs


def sqlite_uri(path: str | Path) -> str:
    """The tracking URI of a SQLite store file. ``%``, ``?`` and ``#`` in the path are
    percent-encoded (SQLAlchemy decodes them; unencoded, ``?`` and ``#`` end the path and ``%``
    starts an escape); any other path is written as it is, so the URIs in committed records
    still match."""
    text = str(path).replace("%", "%25").replace("?", "%3F").replace("#", "%23")
    return f"{SQLITE_PREFIX}{text}"


def readonly_uri(path: str | Path) -> str:
    """sqlite3's URI opening ``path`` read-only (the path percent-encoded: a '?' or '#' in it
    would end it)."""
    return f"file:{quote(str(path), safe='/')}?mode=ro"


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI, else None."""
    if not tracking_uri.startswith(SQLITE_PREFIX):
        return None
    return Path(unquote(tracking_uri[len(SQLITE_PREFIX):].split("?", 1)[0]))


def unpack(db: Path) -> bool:
    """Unpack a store committed compressed: ``<db>.xz`` becomes ``db`` when ``db`` is missing or
    older than the archive (a pull brought a newer one; the older file is kept as ``<db>.old``).
    Returns whether it unpacked. A committed SQLite file is ~14x the size of its ``xz -9``
    archive, so records are committed compressed and unpacked beside themselves on first use."""
    archive = db.with_name(db.name + ARCHIVE_SUFFIX)
    if not archive.is_file() or (db.is_file() and db.stat().st_mtime >= archive.stat().st_mtime):
        return False
    tmp = db.with_name(f".{db.name}.unpacking")
    try:
        with lzma.open(archive) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, lzma.LZMAError) as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"{archive}: cannot unpack ({exc})") from None
    if db.is_file():
        os.replace(db, db.with_name(db.name + ".old"))
    os.replace(tmp, db)
    return True


def local_store(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI, unpacked first if it was committed
    compressed (:func:`unpack`); None for any other store."""
    db = sqlite_path(tracking_uri)
    if db is not None:
        unpack(db)
    return db


#: Query parameters of a tracking URI that name its user (libpq's ``user``), shown as ``***``
#: as a userinfo user is (a user name alone may be a token).
USER_QUERY_KEYS = frozenset({"user", "username"})
#: Query parameters that carry its password (libpq's ``password``).
PASSWORD_QUERY_KEYS = frozenset({"password", "passwd", "pwd"})
#: Other query parameters that carry a secret: never saved, shown as ``***``.
SECRET_QUERY_KEYS = frozenset({"sslpassword", "token", "access_token", "api_key", "apikey", "secret",
                               "auth", "private_key"})


def split_credentials(uri: str) -> tuple[str, str | None, str | None]:
    """``(uri without its credentials, user, password)``: a ``user:password@`` userinfo, or the
    query's ``user``/``password`` parameters (:data:`USER_QUERY_KEYS`,
    :data:`PASSWORD_QUERY_KEYS`: libpq's ``?user=u&password=p``); the URI unchanged when it
    has none. Other secrets (:func:`hidden_secrets`) are left in place: no client variable
    carries them."""
    head, hash_, fragment = uri.partition("#")
    base, _, query = head.partition("?")
    user = password = None
    netloc = urlsplit(base).netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        name, _, secret = userinfo.partition(":")
        user, password = unquote(name) or None, unquote(secret) if secret else None
        base = base.replace(netloc, hostport, 1)
    pairs = parse_qsl(query, keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k.lower() not in USER_QUERY_KEYS | PASSWORD_QUERY_KEYS]
    for k, v in pairs:
        if k.lower() in USER_QUERY_KEYS:
            user = user or v or None
        elif k.lower() in PASSWORD_QUERY_KEYS:
            password = password or v or None
    if user is None and password is None and len(kept) == len(pairs):
        return uri, None, None
    query = query if len(kept) == len(pairs) else urlencode(kept)
    return base + (f"?{query}" if query else "") + hash_ + fragment, user, password


def hidden_secrets(uri: str) -> list[str]:
    """The parts of ``uri`` that hold a secret :func:`split_credentials` does not take: a query
    parameter of :data:`SECRET_QUERY_KEYS`, a fragment (never sent to a store; only a secret
    would put one there)."""
    head, _, fragment = uri.partition("#")
    query = head.partition("?")[2]
    found = [f"query parameter {k!r}" for k, _ in parse_qsl(query, keep_blank_values=True)
             if k.lower() in SECRET_QUERY_KEYS]
    return found + (["fragment"] if fragment else [])


def open_database(tracking_uri: str, seconds: float = 10.0) -> None:
    """For a database store other than SQLite (``postgresql://``, ``mysql://``, ``mssql://``):
    one connection, waiting at most ``seconds``, then closed (MLflow alone retries a refused
    connection for about 100 s, then ends in a traceback). :class:`StoreError` in one line
    naming the store (password redacted) and the database's own first line of error."""
    scheme = tracking_uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in ("postgresql", "mysql", "mssql"):
        return
    import sqlalchemy  # reason: only a database store needs it, and it is heavy

    engine = sqlalchemy.create_engine(tracking_uri, connect_args={"connect_timeout": max(1, int(seconds))})
    try:
        engine.connect().close()
    except Exception as exc:  # noqa: BLE001 - the driver's own error (refused, auth, no such database)
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        reason = first[0] if first else type(exc).__name__
        raise StoreError(f"its store {redact(tracking_uri)} cannot be opened: {reason}") from None
    finally:
        engine.dispose()


def redact(uri: str) -> str:
    """The URI with every secret shown as ``***`` (for messages and provenance lines): the
    userinfo's password (and a user name without one: it may be a token), the values of the
    query's user, password and secret parameters, and a fragment."""
    head, hash_, fragment = uri.partition("#")
    base, q, query = head.partition("?")
    parts = urlsplit(base)
    if "@" in parts.netloc:
        userinfo, _, hostport = parts.netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        shown = f"{user}:***" if has_password else "***"
        base = base.replace(parts.netloc, f"{shown}@{hostport}", 1)
    secret = USER_QUERY_KEYS | PASSWORD_QUERY_KEYS | SECRET_QUERY_KEYS
    query = "&".join(f"{item.partition('=')[0]}=***" if unquote(item.partition("=")[0]).lower() in secret
                     else item for item in query.split("&")) if query else query
    return base + q + query + (f"{hash_}***" if hash_ else "")


@dataclass(frozen=True)
class UriParts:
    """What a tracking URI names: the kind of store, and the host it is reached at."""

    uri: str
    """The URI as given."""
    scheme: str
    """Its scheme, lowercased, with any SQLAlchemy driver (``postgresql+psycopg``); ``""`` for a
    bare path."""

    @property
    def kind(self) -> str:
        """The scheme without its driver: ``sqlite``, ``postgresql``, ``http``, ``file``, ..."""
        return self.scheme.split("+", 1)[0]

    def address(self) -> tuple[str | None, int | None]:
        """``(host, port)``, each None when absent. A port that is not a number, or is out of
        range, is a ``ValueError``."""
        parts = urlsplit(self.uri)
        return parts.hostname, parts.port


def uri_parts(uri: str) -> UriParts:
    """The parts of a tracking URI that say where its store is (:class:`UriParts`)."""
    return UriParts(uri=uri, scheme=urlsplit(uri).scheme)


def portable_uri(uri: str) -> str:
    """A SQLite store as ``sqlite: <study dir>/<file>``, so that the same store gives the same
    bytes wherever it is checked out; other URIs as they are (passwords already redacted)."""
    if uri.startswith("sqlite:"):
        path = uri.split(":///", 1)[-1]
        parts = [p for p in path.split("/") if p]
        return "sqlite: " + "/".join(parts[-2:])
    return uri


def is_server(tracking_uri: str) -> bool:
    """Whether the URI names an MLflow tracking server (``http(s)://``) rather than a database."""
    return urlsplit(tracking_uri).scheme in ("http", "https")


# ---------------------------------------------------------------------------- SQL access


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
            except Exception as exc:  # driver missing, server down
                raise StoreError(f"cannot open tracking store {redact(uri)}: {exc}") from exc

    def query(self, sql: str, params: Mapping[str, object]) -> list[tuple]:
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

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _in_clause(name: str, values: Sequence[str]) -> tuple[str, dict[str, object]]:
    params = {f"{name}{i}": v for i, v in enumerate(values)}
    return ", ".join(f":{k}" for k in params), params


@dataclass(frozen=True)
class RunRows:
    """The active runs of one study as plain rows.

    ``runs``: ``(run_id, mlflow_status, start_time, end_time)`` (ms); ``tags`` and ``params``:
    ``(run_id, key, value)``; ``metrics``: ``(run_id, key, latest value)`` (NaN where MLflow
    stored NaN).
    """

    runs: list[tuple]
    tags: list[tuple]
    params: list[tuple]
    metrics: list[tuple]


def read_rows(
    tracking_uri: str,
    study: str,
    *,
    tag_keys: Sequence[str],
    metric_keys: Sequence[str] | None = None,
    metric_prefixes: Sequence[str] = (),
    param_keys: Sequence[str] = (),
    as_stored: bool = False,
) -> RunRows:
    """The runs of ``study`` (an MLflow experiment name) in ``tracking_uri``: the tags
    ``tag_keys``, the params ``param_keys``, and the latest values of ``metric_keys`` and of the
    keys starting with one of ``metric_prefixes`` (``metric_keys=None``: every metric).

    Metric and param keys are the current names (:data:`record.schema.RENAMED_METRICS`,
    :data:`record.schema.RENAMED_PARAMS`): a key asked for by a former name is asked for by its
    current one, and a value a run holds under a former name is returned under the current one
    (a run that holds both keeps the current one's). ``as_stored``: the keys as the store holds
    them (for MLflow's own UI, which shows those).
    Raises :class:`StudyNotFound` (naming the studies there) or :class:`StoreError`."""
    scheme = urlsplit(tracking_uri).scheme
    if scheme in ("", "file"):
        raise StoreError(
            f"tracking URI {tracking_uri!r} is a file store; the record is read from SQL stores "
            "(sqlite:///..., postgresql://...) or an MLflow server (http://...)"
        )
    if not as_stored:
        if metric_keys is not None:
            metric_keys = _with_former(metric_keys, schema.RENAMED_METRICS, metric_prefixes)
        param_keys = _with_former(param_keys, schema.RENAMED_PARAMS, ())
    read = _read_rest if scheme in ("http", "https") else _read_sql
    asked = list(tag_keys)
    tag_keys = list(dict.fromkeys([*asked, schema.RUN_KEY, schema.STATUS]))
    rows = one_run_per_identity(read(tracking_uri, study, tag_keys, metric_keys, param_keys,
                                     metric_prefixes), asked)
    if as_stored:
        return rows
    return RunRows(runs=rows.runs, tags=rows.tags,
                   params=_current_names(rows.params, schema.RENAMED_PARAMS),
                   metrics=_current_names(rows.metrics, schema.RENAMED_METRICS))


def superseded(runs: Sequence[tuple[str, str | None, str | None, int | None]]) -> set[str]:
    """Of ``(run id, run key, locattn.status, start time)`` rows, the run ids that another run of
    the same key supersedes: the record holds one active run per identity, and when there are
    more (MLflow's restore of a deleted experiment revives the runs deleted in it, and a resume
    had recorded those seeds again), the one kept is the finished one, then the one started
    last, then the largest run id. Runs without a key are never superseded."""
    by_key: dict[str, list[tuple]] = {}
    for run_id, key, status, start in runs:
        if key is not None:
            by_key.setdefault(key, []).append((status == schema.STATUS_FINISHED, start or 0, run_id))
    return {r[2] for group in by_key.values() if len(group) > 1
            for r in sorted(group)[:-1]}


def one_run_per_identity(rows: RunRows, tag_keys: Sequence[str]) -> RunRows:
    """``rows`` (read with the ``locattn.run_key`` and ``locattn.status`` tags) without the runs
    :func:`superseded` by another of their identity, and with only the tags ``tag_keys``."""
    tags: dict[str, dict[str, str]] = {}
    for run_id, key, value in rows.tags:
        tags.setdefault(run_id, {})[key] = value
    drop = superseded([(r[0], tags.get(r[0], {}).get(schema.RUN_KEY),
                        tags.get(r[0], {}).get(schema.STATUS), r[2]) for r in rows.runs])
    wanted = set(tag_keys)
    return RunRows(runs=[r for r in rows.runs if r[0] not in drop],
                   tags=[t for t in rows.tags if t[0] not in drop and t[1] in wanted],
                   params=[p for p in rows.params if p[0] not in drop],
                   metrics=[m for m in rows.metrics if m[0] not in drop])


def _with_former(keys: Sequence[str], renamed: Mapping[str, str], prefixes: Sequence[str]) -> list[str]:
    """``keys`` by their current names, and the former names of those (and of the current names
    that start with one of ``prefixes``)."""
    current = list(dict.fromkeys(renamed.get(k, k) for k in keys))
    former = [old for old, new in renamed.items()
              if new in current or any(new.startswith(p) for p in prefixes)]
    return list(dict.fromkeys(current + former))


def _current_names(rows: list[tuple], renamed: Mapping[str, str]) -> list[tuple]:
    """``(run_id, key, value)`` rows with each former key renamed to its current one; a row under
    a former key is dropped when its run also has a row under the current key."""
    if not any(r[1] in renamed for r in rows):
        return rows
    held = {(r[0], r[1]) for r in rows}
    return [(r[0], renamed[r[1]], *r[2:]) if r[1] in renamed else r for r in rows
            if r[1] not in renamed or (r[0], renamed[r[1]]) not in held]


def _read_sql(
    uri: str, study: str, tag_keys: Sequence[str], metric_keys: Sequence[str] | None,
    param_keys: Sequence[str], metric_prefixes: Sequence[str],
) -> RunRows:
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
        tag_in, tag_params = _in_clause("t", tag_keys)
        tags = db.query(
            "SELECT t.run_uuid, t.key, t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            f"WHERE {run_filter} AND t.key IN ({tag_in})", {**exp, **tag_params},
        )
        params: list[tuple] = []
        if param_keys:
            p_in, p_params = _in_clause("p", param_keys)
            params = db.query(
                "SELECT p.run_uuid, p.key, p.value FROM params p "
                "JOIN runs r ON r.run_uuid = p.run_uuid "
                f"WHERE {run_filter} AND p.key IN ({p_in})", {**exp, **p_params},
            )
        conds: list[str] = []
        m_params: dict[str, object] = {}
        if metric_keys is not None:
            if metric_keys:
                m_in, m_params = _in_clause("m", metric_keys)
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
    return RunRows(runs=runs, tags=tags, params=params,
                   metrics=[(r, k, stored_value(v, is_nan)) for r, k, v, is_nan in metrics])


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


def _read_rest(
    uri: str, study: str, tag_keys: Sequence[str], metric_keys: Sequence[str] | None,
    param_keys: Sequence[str], metric_prefixes: Sequence[str],
) -> RunRows:
    from mlflow.entities import ViewType  # a server only: `study status` on SQLite stays light
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        exp = client.get_experiment_by_name(study)
    except Exception as exc:
        raise StoreError(f"cannot reach the MLflow server at {redact(uri)}: {exc}") from exc
    if exp is None:
        names = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise StudyNotFound(
            f"study {study!r} not found on {redact(uri)}; studies there: "
            + (", ".join(names) if names else "(none)")
        )
    wanted_tags = set(tag_keys)
    wanted_params = set(param_keys)
    keyset = set(metric_keys) if metric_keys is not None else None
    out = RunRows(runs=[], tags=[], params=[], metrics=[])
    token = None
    while True:
        page = client.search_runs(
            [exp.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=1000,
            page_token=token,
        )
        for r in page:
            rid = r.info.run_id
            out.runs.append((rid, r.info.status, r.info.start_time, r.info.end_time))
            out.tags.extend((rid, k, v) for k, v in r.data.tags.items() if k in wanted_tags)
            out.params.extend((rid, k, v) for k, v in r.data.params.items() if k in wanted_params)
            for k, v in r.data.metrics.items():
                if keyset is None or k in keyset or any(k.startswith(p) for p in metric_prefixes):
                    out.metrics.append((rid, k, float(v)))
        token = page.token
        if not token:
            return out


def latest_metrics(tracking_uri: str, run_ids: Sequence[str]) -> dict[str, dict[str, tuple[int, float]]]:
    """run id -> metric key -> (step, value) of its latest row (MLflow's ``latest_metrics``: the
    highest step, then the newest), for ``run_ids``; by SQL on a SQL store, else through MLflow's
    client (one metric history per key)."""
    out: dict[str, dict[str, tuple[int, float]]] = {r: {} for r in run_ids}
    if not run_ids:
        return out
    if not is_server(tracking_uri):
        with SQLReader(tracking_uri, timeout=30) as con:
            r_in, r_params = _in_clause("r", list(run_ids))
            for run_id, key, step, value, is_nan in con.query(
                    "SELECT run_uuid, key, step, value, CASE WHEN is_nan THEN 1 ELSE 0 END "
                    f"FROM latest_metrics WHERE run_uuid IN ({r_in})", r_params):
                out[run_id][key] = (int(step), stored_value(value, is_nan))
        return out
    from mlflow.tracking import MlflowClient  # a tracking server only: MLflow's REST client

    client = MlflowClient(tracking_uri=tracking_uri)
    for run_id in run_ids:
        for key in client.get_run(run_id).data.metrics:
            last = max(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
            out[run_id][key] = (int(last.step), float(last.value))
    return out


def run_index(tracking_uri: str, experiment_id: str
              ) -> dict[str, tuple[str, int, str | None, frozenset[str]]] | None:
    """run key -> (run id, last epoch step logged (0: none), ``locattn.status`` tag or None, the
    keys of the other metrics it holds) of every active run of an experiment that has a
    ``locattn.run_key``, by SQL on a SQLite store; None for any other store (ask MLflow's client
    there)."""
    db = local_store(tracking_uri)
    if db is None or not db.is_file():
        return None
    with SQLReader(tracking_uri, timeout=30) as con:
        exp = {"exp": int(experiment_id)}
        keys = con.query(
            "SELECT t.value, r.run_uuid FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            "WHERE t.key = :key AND r.experiment_id = :exp AND r.lifecycle_stage = 'active'",
            {"key": schema.RUN_KEY, **exp})
        m_in, m_params = _in_clause("m", schema.EPOCH_METRICS)
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
    drop = superseded([(run_id, key, statuses.get(run_id), starts.get(run_id)) for key, run_id in keys])
    return {key: (run_id, int(steps.get(run_id) or 0), statuses.get(run_id), frozenset(others.get(run_id, ())))
            for key, run_id in keys if run_id not in drop}


def superseded_runs(tracking_uri: str, experiment_id: str) -> list[str]:
    """The active runs of an experiment that another run of their identity supersedes
    (:func:`superseded`), by SQL; [] for a tracking server or a store not there."""
    if is_server(tracking_uri) or urlsplit(tracking_uri).scheme in ("", "file"):
        return []
    db = local_store(tracking_uri)
    if db is not None and not db.is_file():
        return []
    with SQLReader(tracking_uri, timeout=30) as con:
        rows = con.query(
            "SELECT r.run_uuid, k.value, s.value, r.start_time FROM runs r "
            "JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = :key "
            "LEFT JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = :status "
            "WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active'",
            {"key": schema.RUN_KEY, "status": schema.STATUS, "exp": int(experiment_id)})
    return sorted(superseded(rows))


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


def artifact_uris(tracking_uri: str, run_ids: Sequence[str],
                  local_root: Path | None = None) -> dict[str, str]:
    """Artifact location of each run (``runs.artifact_uri``; from the server for http URIs).
    ``local_root``: the artifact root beside a SQLite store that moved (a committed record, a
    copied study), read where the recorded root no longer exists."""
    if not run_ids:
        return {}
    if is_server(tracking_uri):
        from mlflow.tracking import MlflowClient  # a server only (see _read_rest)

        client = MlflowClient(tracking_uri=tracking_uri)
        return {r: client.get_run(r).info.artifact_uri for r in run_ids}
    r_in, params = _in_clause("r", run_ids)
    with SQLReader(tracking_uri) as db:
        rows = db.query(f"SELECT r.run_uuid, r.artifact_uri, e.artifact_location FROM runs r "
                        f"JOIN experiments e ON e.experiment_id = r.experiment_id "
                        f"WHERE r.run_uuid IN ({r_in})", params)
    here = local_root.resolve().as_uri() if local_root is not None and local_root.is_dir() else None
    return {r: _in_moved_folder(a, root, here) for r, a, root in rows}


def _in_moved_folder(uri: str, old_root: str, here: str | None) -> str:
    """``uri`` under ``here`` instead of ``old_root`` when the store's folder moved or was copied:
    the recorded root is gone, or ``here`` holds the run's own artifact folder (a copy reads its
    own files, not the original's). Read-only: the store keeps its paths until a resume adopts
    the folder (:func:`move_artifact_root`)."""
    if here is None or not uri.startswith(old_root) or old_root == here:
        return uri
    old = urlsplit(old_root)
    if old.scheme not in ("", "file"):
        return uri
    moved = here + uri[len(old_root):]
    if Path(unquote(old.path)).exists() and not Path(unquote(urlsplit(moved).path)).exists():
        return uri
    return moved


def adopt_artifact_root(db: Path, here: Path) -> list[str]:
    """Point the artifact locations of the SQLite store ``db`` (its experiments' and runs') into
    ``here``, the artifact folder beside it, where they name another folder of the same name (the
    study folder was moved or copied). ``study ui`` needs it: MLflow's server reads the stored
    paths. Returns the old locations rewritten."""
    with SQLReader(sqlite_uri(db), timeout=30) as con:
        locations = [r[0] for r in con.query("SELECT DISTINCT artifact_location FROM experiments", {})]
    new = here.resolve().as_uri()
    old = [loc for loc in locations if loc and loc != new and urlsplit(loc).scheme == "file"
           and Path(unquote(urlsplit(loc).path)).name == here.name]
    for loc in old:
        move_artifact_root(db, loc, new)
    return old


# ---------------------------------------------------------------------------- SQL writes


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


# ---------------------------------------------------------------------------- creating a store


def ensure_sqlite_store(db: Path) -> str | None:
    """Make sure ``db`` is a complete MLflow SQLite store before MLflow opens it; returns what was
    done (a line for the driver) or None when the store was already there.

    MLflow builds a new store in place, by ~50 migrations; a ``kill -9`` in between leaves tables
    without their migration stamp, and every later open fails with a 139-line traceback
    ("table ... already exists"). So a new store is built aside (``.<name>.creating-<pid>-<ns>``) and
    renamed into place, and a store that holds no run but is not stamped at MLflow's newest
    schema (half built in place, by MLflow itself) is set aside (``<name>.half-built``) and
    rebuilt. Call it under :class:`record.writer.store_lock`: two creators would race.
    """
    for stale in db.parent.glob(f".{db.name}.creating-*"):  # left by a killed creator
        stale.unlink(missing_ok=True)
    note = None
    if db.exists():
        if not _half_built(db):
            return None
        aside = db.with_name(f"{db.name}.half-built")
        os.replace(db, aside)
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        note = f"{db} was half-built (no run, schema not complete): set aside as {aside.name}, rebuilt"
    # A name never used before, in this process either: MLflow caches a store per URI, so a
    # second creation under the same name (a store lost and rebuilt by one process) got the
    # cached store and no file to rename.
    tmp = db.with_name(f".{db.name}.creating-{os.getpid()}-{time.time_ns()}")
    _migrate(tmp)
    os.replace(tmp, db)
    _forget_engines(tmp, db)
    return note


def _forget_engines(*dbs: Path) -> None:
    """Drop this process's cached MLflow engines of these SQLite files. MLflow keeps one engine
    per URI for the life of the process; an engine of a store that was deleted and built anew
    holds connections to the deleted file, and every write through it failed as "readonly"
    (a study resumed in the process whose driver lost the store)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # heavy: only when a store is built

    engines = getattr(SqlAlchemyStore, "_engine_map", None)
    if not isinstance(engines, dict):  # (another MLflow: nothing of ours to forget)
        return
    gone = {Path(os.path.abspath(d)) for d in dbs}
    for uri in list(engines):
        path = sqlite_path(uri)
        if path is not None and Path(os.path.abspath(path)) in gone:
            engines.pop(uri).dispose()


def _migrate(db: Path) -> None:
    """Create a complete MLflow store in ``db`` and close every connection to it."""
    from mlflow.tracking import MlflowClient  # heavy: only when a store is created

    # The client's own store (its default artifact root, as a store opened in place gets);
    # building it runs the migrations. Closing its engine lets the file be renamed whole.
    store = MlflowClient(tracking_uri=sqlite_uri(db))._tracking_client.store
    store.engine.dispose()


def _head_revision() -> str:
    """MLflow's newest schema revision (its migration scripts' head)."""
    # alembic and mlflow (installed with MLflow; about 1 s): only when a store is created
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    return ScriptDirectory.from_config(_get_alembic_config("sqlite://")).get_current_head()


def _half_built(db: Path) -> bool:
    """Whether ``db`` holds no run and is not stamped at MLflow's newest schema."""
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
    return [r[0] for r in stamp] != [_head_revision()]
