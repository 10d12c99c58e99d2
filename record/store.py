"""The one door into MLflow's store, for everyone: the :class:`Store` protocol and its contract,
the readers (:func:`read_rows`, ...), the creation of a SQLite store and the schema check.

Three ways in, one answer (:class:`RunRows`, plain tuples):

- a SQLite store (``sqlite:///...``, what a study writes to ``<study_dir>/mlflow.db``): plain SQL
  through the standard library ``sqlite3`` module, read-only;
- other SQL stores (``postgresql://``, ``mysql://``): the same SQL through SQLAlchemy (installed
  with MLflow);
- an MLflow server (``http://`` / ``https://``): ``MlflowClient.search_runs`` page by page.

The SQL itself, and every private name of MLflow the project uses, is in the adapter
:mod:`record.mlflow_sql`; tracking URIs (parsing, redaction, the SQLite file) are in
:mod:`record.uri`. Both are re-exported here, so callers import from this one module. Everything
else is written through MLflow's client (:mod:`record.writer`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Mapping, Protocol, Sequence, runtime_checkable
from urllib.parse import unquote, urlsplit

from record import mlflow_sql, schema
from record.mlflow_sql import (  # noqa: F401 - re-exported: the door callers use
    SQLReader, experiment_id, insert_rows, move_artifact_root, open_database, stored_value)
from record.uri import (  # noqa: F401 - re-exported: the door callers use
    ARCHIVE_SUFFIX, FULL, GONE, LOCKED, PASSWORD_QUERY_KEYS, READ_ONLY, SECRET_QUERY_KEYS, SQLITE_PREFIX,
    STORE_ERROR_MODULES, USER_QUERY_KEYS, StoreError, StudyNotFound, UriParts, hidden_secrets, is_server,
    is_store_error, local_store, portable_uri, readonly_uri, redact, split_credentials, sqlite_path, sqlite_uri,
    store_condition, unpack, uri_parts)


# ---------------------------------------------------------------------------- the contract


@runtime_checkable
class Store(Protocol):
    """The record's store as the project uses it: one MLflow tracking store (a SQLite file, a
    SQL database or an MLflow server) holding one experiment per study. :func:`open_store` gives
    one (:class:`MlflowStore`); the writes go through MLflow's client in
    :class:`record.writer.RecordWriter`.

    **Who writes.** One process per study: its driver (``study launch``/``resume``), which holds
    the study folder's ``study.lock`` (:class:`study.driver.process.StudyLock`). Trial processes never
    talk to the store. ``study status`` and ``reports`` never write. Two repairs write outside a
    driver: the artifact locations of a moved study folder (:func:`adopt_artifact_root` before
    ``study ui``, :func:`record.mlflow_sql.move_artifact_root` from ``study.recording.folder``), and
    ``study ui`` deleting again the runs :func:`superseded` by another of their identity.

    **What is atomic** (on a SQL store, where each MLflow client call opens its own session):

    - creating a run together with its tags (``create_run``): a run never appears without the
      tags it was created with (its ``locattn.run_key``, role, cell);
    - one ``log_batch``'s params, then its metrics (with their ``latest_metrics`` rows), then its
      tags: three transactions, in that order, not one. A driver killed between them leaves a
      run's final metrics without its ``locattn.status=finished`` tag (the writer then logs only
      the finals the store lacks: ``RunState.finals_logged``);
    - a run's params are logged in chunks of 100 after ``create_run``: a killed driver can leave
      a run with some of them (a resume completes them: ``RecordWriter.complete_params``);
    - a new SQLite store: built aside and renamed into place (:func:`ensure_sqlite_store`), so it
      appears whole or not at all;
    - the project's own SQL writes (:func:`record.mlflow_sql.move_artifact_root`,
      :func:`record.mlflow_sql.insert_rows`): one transaction each.

    **What is idempotent.** Opening (the experiment and the study's run are created only if
    missing); a run is found by its deterministic ``locattn.run_key`` tag, so relaunching or
    resuming continues the same run; an epoch metric at or below a run's last logged step is not
    logged again; a finished run's record is final; a cell's medians and the study's summary
    metrics are logged only when their value changed (``record.writer.unlogged``); artifacts are
    copied to the same paths. Two active runs of one identity (MLflow's restore of a deleted
    experiment revives its deleted runs) are resolved by :func:`superseded`, by readers and the
    writer alike.

    **What a reader may assume while a driver writes.** It sees only committed transactions
    (a SQLite reader opens the file read-only, ``mode=ro``, and waits up to its timeout for a
    writer's lock). So: every run it sees has its run key; a run may still lack params or
    metrics; a run's ``locattn.status`` tag, not its MLflow status, says whether it finished
    (a run RUNNING in MLflow's status may hold all its finals, and the reverse for a moment);
    a cell's run lags its seeds (rewritten after each finished seed); metrics of a running
    trial arrive in batches (every ``flush_seconds``, 5 s by default). It must not assume that
    two reads see the same set of runs.

    **Schema.** A driver, and ``study ui`` (its ``mlflow server``), open a SQL store only at the
    schema revision the installed MLflow writes (:func:`check_schema`; a newer or older one is
    refused in one line). Readers read the six tables they need by SQL and do not check the
    revision.
    """

    tracking_uri: str
    """The store's tracking URI (it may hold a password: show it through :func:`redact`)."""

    def read_rows(self, study: str, *, tag_keys: Sequence[str], metric_keys: Sequence[str] | None = None,
                  metric_prefixes: Sequence[str] = (), param_keys: Sequence[str] | None = (),
                  as_stored: bool = False) -> "RunRows":
        """The active runs of ``study``: :func:`read_rows`."""

    def run_index(self, experiment_id: str) -> dict[str, IndexedRun] | None:
        """run key -> what the record holds of that run: :func:`run_index`."""

    def superseded_runs(self, experiment_id: str) -> list[str]:
        """The active runs another run of their identity supersedes: :func:`superseded_runs`."""

    def latest_metrics(self, run_ids: Sequence[str]) -> dict[str, dict[str, tuple[int, float]]]:
        """run id -> key -> (step, value) of its latest row: :func:`latest_metrics`."""

    def artifact_uris(self, run_ids: Sequence[str], local_root: Path | None = None) -> dict[str, str]:
        """run id -> its artifact location: :func:`artifact_uris`."""


@dataclass(frozen=True)
class MlflowStore:
    """The :class:`Store` of one MLflow tracking URI (the module's functions, bound to it)."""

    tracking_uri: str

    def read_rows(self, study: str, *, tag_keys: Sequence[str], metric_keys: Sequence[str] | None = None,
                  metric_prefixes: Sequence[str] = (), param_keys: Sequence[str] | None = (),
                  as_stored: bool = False) -> "RunRows":
        """:func:`read_rows` of this store."""
        return read_rows(self.tracking_uri, study, tag_keys=tag_keys, metric_keys=metric_keys,
                         metric_prefixes=metric_prefixes, param_keys=param_keys, as_stored=as_stored)

    def run_index(self, experiment_id: str) -> dict[str, IndexedRun] | None:
        """:func:`run_index` of this store."""
        return run_index(self.tracking_uri, experiment_id)

    def superseded_runs(self, experiment_id: str) -> list[str]:
        """:func:`superseded_runs` of this store."""
        return superseded_runs(self.tracking_uri, experiment_id)

    def latest_metrics(self, run_ids: Sequence[str]) -> dict[str, dict[str, tuple[int, float]]]:
        """:func:`latest_metrics` of this store."""
        return latest_metrics(self.tracking_uri, run_ids)

    def artifact_uris(self, run_ids: Sequence[str], local_root: Path | None = None) -> dict[str, str]:
        """:func:`artifact_uris` of this store."""
        return artifact_uris(self.tracking_uri, run_ids, local_root)


def open_store(tracking_uri: str, *, writing: bool = False) -> MlflowStore:
    """The :class:`Store` of ``tracking_uri``. ``writing`` (a driver): the store's schema must be
    the installed MLflow's (:func:`check_schema`; :class:`StoreError` in one line otherwise)."""
    if writing:
        check_schema(tracking_uri)
    return MlflowStore(tracking_uri)


def check_schema(tracking_uri: str) -> None:
    """Refuse a SQL store whose MLflow schema revision (alembic's ``alembic_version``) is not the
    one the installed MLflow writes: :class:`StoreError` in one line naming the store (redacted),
    the revision found and the one expected, and what to do. A new store (no stamp yet) and an
    MLflow server (it checks its own database) pass. MLflow alone refuses such a store too, but
    with a traceback, and after a newer MLflow wrote it, with no word of which to install."""
    if is_server(tracking_uri) or urlsplit(tracking_uri).scheme in ("", "file"):
        return
    found = mlflow_sql.schema_revision(tracking_uri)
    if found is None:
        return
    known = mlflow_sql.known_revisions()
    if found == known[0]:
        return
    mlflow = f"MLflow {metadata.version('mlflow')}"
    if found in known:
        raise StoreError(
            f"the store {redact(tracking_uri)} has MLflow schema {found}, older than {known[0]} that "
            f"{mlflow} writes: back it up and run `mlflow db upgrade {redact(tracking_uri)}`, or "
            "install the MLflow that wrote it")
    raise StoreError(
        f"the store {redact(tracking_uri)} has MLflow schema {found}, newer than {mlflow} knows "
        f"(its newest is {known[0]}): install the newer MLflow that wrote it "
        "(`pip install -U mlflow`; the record's locattn.versions tag names it)")


# ---------------------------------------------------------------------------- reading


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
    param_keys: Sequence[str] | None = (),
    as_stored: bool = False,
) -> RunRows:
    """The runs of ``study`` (an MLflow experiment name) in ``tracking_uri``: the tags
    ``tag_keys``, the params ``param_keys`` (``None``: every param), and the latest values of
    ``metric_keys`` and of the keys starting with one of ``metric_prefixes`` (``metric_keys=None``:
    every metric).

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
        if param_keys is not None:
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
    param_keys: Sequence[str] | None, metric_prefixes: Sequence[str],
) -> RunRows:
    runs, tags, params, metrics = mlflow_sql.study_rows(uri, study, tag_keys, metric_keys, param_keys,
                                                        metric_prefixes)
    return RunRows(runs=runs, tags=tags, params=params, metrics=metrics)


def reach_server(uri: str, seconds: float = 10.0) -> None:
    """One ``GET <uri>/health`` (``mlflow server``'s liveness route), waiting at most
    ``seconds``, before a reader asks an MLflow server anything: MLflow's own client retries a
    refused or silent server for minutes (``reports build`` on a closed port: 4 min 10 s), then
    ends in many lines. :class:`StoreError` in one line (the server, credentials masked, and the
    socket's reason) when nothing answers; an answer of any HTTP status passes (a proxy in front
    may not route ``/health``)."""
    import urllib.error  # reason: a server store only
    import urllib.request  # reason: idem

    parts = urlsplit(uri)
    host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname
    netloc = f"{host}:{parts.port}" if parts.port else str(host)  # no user:password@ (urllib would take it for the host)
    try:
        urllib.request.urlopen(parts._replace(netloc=netloc, query="", fragment="").geturl().rstrip("/") + "/health",
                               timeout=seconds).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StoreError(f"cannot reach the MLflow server at {redact(uri)}: {reason} (is it running? "
                         "'study ui <study>' serves a study's store on 127.0.0.1)") from None


def _read_rest(
    uri: str, study: str, tag_keys: Sequence[str], metric_keys: Sequence[str] | None,
    param_keys: Sequence[str] | None, metric_prefixes: Sequence[str],
) -> RunRows:
    from mlflow.entities import ViewType  # a server only: `study status` on SQLite stays light
    from mlflow.tracking import MlflowClient

    reach_server(uri)
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
    wanted_params = None if param_keys is None else set(param_keys)
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
            out.params.extend((rid, k, v) for k, v in r.data.params.items()
                              if wanted_params is None or k in wanted_params)
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
        for run_id, key, step, value in mlflow_sql.latest_metric_rows(tracking_uri, run_ids):
            out[run_id][key] = (step, value)
        return out
    from mlflow.tracking import MlflowClient  # a tracking server only: MLflow's REST client

    client = MlflowClient(tracking_uri=tracking_uri)
    for run_id in run_ids:
        for key in client.get_run(run_id).data.metrics:
            last = max(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
            out[run_id][key] = (int(last.step), float(last.value))
    return out


@dataclass(frozen=True)
class IndexedRun:
    """What a SQLite store holds of one active run that has a ``locattn.run_key``
    (:func:`run_index`): enough for the writer to continue the run without logging twice."""

    run_id: str
    """MLflow run id."""
    last_step: int
    """Last epoch step logged (``schema.EPOCH_METRICS``; 0: none)."""
    status: str | None
    """The run's ``locattn.status`` tag, or None when it has none."""
    metric_keys: frozenset[str]
    """The keys of the run's other (not per-epoch) metrics: its finals, cell medians, ..."""


def run_index(tracking_uri: str, experiment_id: str) -> dict[str, IndexedRun] | None:
    """run key -> :class:`IndexedRun` of every active run of an experiment that has a
    ``locattn.run_key`` (a run :func:`superseded` by another of its identity left out), by SQL on
    a SQLite store; None for any other store (ask MLflow's client there)."""
    db = local_store(tracking_uri)
    if db is None or not db.is_file():
        return None
    keys, steps, statuses, others, starts = mlflow_sql.run_key_rows(tracking_uri, experiment_id)
    drop = superseded([(run_id, key, statuses.get(run_id), starts.get(run_id)) for key, run_id in keys])
    return {key: IndexedRun(run_id=run_id, last_step=int(steps.get(run_id) or 0), status=statuses.get(run_id),
                            metric_keys=frozenset(others.get(run_id, ())))
            for key, run_id in keys if run_id not in drop}


def superseded_runs(tracking_uri: str, experiment_id: str) -> list[str]:
    """The active runs of an experiment that another run of their identity supersedes
    (:func:`superseded`), by SQL; [] for a tracking server or a store not there."""
    if is_server(tracking_uri) or urlsplit(tracking_uri).scheme in ("", "file"):
        return []
    db = local_store(tracking_uri)
    if db is not None and not db.is_file():
        return []
    rows = mlflow_sql.keyed_run_rows(tracking_uri, experiment_id)
    return sorted(superseded(rows))


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
    rows = mlflow_sql.artifact_rows(tracking_uri, run_ids)
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
    locations = mlflow_sql.artifact_locations(db)
    new = here.resolve().as_uri()
    old = [loc for loc in locations if loc and loc != new and urlsplit(loc).scheme == "file"
           and Path(unquote(urlsplit(loc).path)).name == here.name]
    for loc in old:
        mlflow_sql.move_artifact_root(db, loc, new)
    return old


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
        if not mlflow_sql.half_built(db):
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
    mlflow_sql.create_store(tmp)
    os.replace(tmp, db)
    mlflow_sql.forget_engines(tmp, db)
    return note

