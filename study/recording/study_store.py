"""Where a study's store is now, and which one ``study ui`` serves: a moved study folder's own
``mlflow.db``, a SQLite store that exists nowhere refused, superseded runs deleted again; the
server's address and how to browse a study.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from record.layout import ARTIFACTS_DIR, META_FILE, STORE_FILE
from record.store import (StoreError, adopt_artifact_root, check_schema, experiment_id, sqlite_path,
                          sqlite_uri, superseded_runs, unpack)
from study.spec import SpecError


def current_store(tracking_uri: str, study_dir: Path) -> str:
    """Where the store of a study whose ``study.json`` saved ``tracking_uri`` is now.

    A study folder that moved (committed as ``results/record/<study>/``, copied, renamed) keeps
    its own ``mlflow.db`` while ``study.json`` still names the old path: that is the folder's
    store, read as it is (``study resume`` is what rewrites the saved paths). Any other URI
    (Postgres, a server, a SQLite file outside the folder) is the saved one.
    """
    db = sqlite_path(tracking_uri)
    own = Path(study_dir) / STORE_FILE
    unpack(own)  # a record committed compressed (mlflow.db.xz)
    if db is not None and db.name == STORE_FILE and own.is_file() and db.resolve() != own.resolve():
        return sqlite_uri(own.resolve())
    return tracking_uri


def store_uri(tracking_uri: str, study_dir: Path, study: str | None = None) -> str:
    """The store ``study ui`` serves (:func:`current_store`); a SQLite store that exists nowhere
    is refused, since ``mlflow server`` would create an empty one at the stale path, and so is a
    store of another MLflow schema (:func:`record.store.check_schema`). With
    ``study``, runs of that study superseded by another run of their identity (a deleted run
    revived by a restore, :func:`record.store.superseded`) are deleted again first, so that the
    UI counts each identity once, as status and the tables do."""
    uri = current_store(tracking_uri, study_dir)
    db = sqlite_path(uri)
    if db is not None and not db.is_file():
        raise SpecError(f"no MLflow store at {db} (saved in {Path(study_dir) / META_FILE}) and "
                        f"none in the study folder: nothing to show")
    try:  # before any repair writes to it; `mlflow server` would refuse it with a traceback
        check_schema(uri)
    except StoreError as exc:
        raise SpecError(str(exc)) from None
    own = Path(study_dir) / STORE_FILE
    if db is not None and own.is_file() and db.resolve() == own.resolve():
        # A moved or copied folder: the server reads the artifact paths the store holds, so they
        # are pointed into this folder (its own store; study.json is left as it is).
        for old in adopt_artifact_root(db, Path(study_dir) / ARTIFACTS_DIR):
            print(f"study ui: artifact paths {old} now read from {Path(study_dir) / ARTIFACTS_DIR}",
                  file=sys.stderr)
    exp = experiment_id(uri, study) if study is not None else None
    duplicates = superseded_runs(uri, exp) if exp is not None else []
    if duplicates:
        from mlflow.tracking import MlflowClient  # `study ui` starts an MLflow server anyway

        client = MlflowClient(tracking_uri=uri)
        for run_id in duplicates:
            client.delete_run(run_id)
        print(f"study ui: {len(duplicates)} run(s) deleted again: another run of their identity was "
              f"recorded after they were deleted ({', '.join(duplicates)})", file=sys.stderr)
    return uri


def server_url(tracking_uri: str) -> str | None:
    """The address of an MLflow server a study records to (``http(s)://``, credentials
    removed), else None."""
    parts = urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return None
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def browse_advice(tracking_uri: str, study_dir: Path, name: str) -> str:
    """How to browse a study's runs, as the end of a launch says it: the server's URL for a
    study recorded on an MLflow server (``study ui`` would only point there), else the
    ``study ui`` command."""
    remote = server_url(tracking_uri)
    if remote is not None:
        return f"browse it at {remote} (experiment {name!r})"
    return f"`study ui {study_dir}` to browse"
