"""Checks of a launch's operational arguments before anything starts or is created.

``--tracking-uri``, ``--address`` and ``--progress-seconds`` are refused in one line when they
cannot work: an unknown scheme, a SQLite file in a directory that does not exist (nothing is
created for it), a server or cluster that does not answer within :data:`CONNECT_TIMEOUT_S`
seconds. Standard library only (``study status`` and the CLI's usage errors import no MLflow).
"""

from __future__ import annotations

import math
import shutil
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from locattn.config import DEFAULT_TRAIN_PATH, TRAIN_PATHS, make_run_config
from record.store import redact, sqlite_path, uri_parts
from study.spec import SpecError

if TYPE_CHECKING:
    from study.spec import StudySpec

#: Seconds to wait for a tracking server, a database or a Ray cluster to accept a connection.
CONNECT_TIMEOUT_S = 5.0
#: Tracking URI schemes a study can record to (SQLAlchemy ones may name a driver: ``+psycopg``).
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
SERVER_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}
#: Ray's default GCS port, for an ``--address`` given without one.
RAY_DEFAULT_PORT = 6379
RAY_CLIENT_PORT = 10001


def check_progress_seconds(seconds: float) -> None:
    """Refuse a progress interval that is not a positive finite number of seconds."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise SpecError(f"--progress-seconds {seconds}: expected a number of seconds > 0 (default 10)")


def check_train_path(train_path: str | None) -> None:
    """Refuse ``--train-path compiled`` where inductor has no C++ compiler to build its kernels
    (the runs would fail at their first batch)."""
    if train_path == "compiled" and shutil.which("g++") is None:
        raise SpecError("--train-path compiled: needs a C++ compiler for inductor's CPU kernels (g++ "
                        "not found: apt-get install g++), or --train-path eager")


def check_train_path_fits(spec: StudySpec, train_path: str | None) -> None:
    """Refuse a ``--train-path`` that some cell's model does not take (``compiled`` is for the
    seq2seq models, ``fused`` for Raffel & Ellis's regressors), before anything starts."""
    if train_path in (None, DEFAULT_TRAIN_PATH):
        return
    for cell in spec.cells:
        kind = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides).model.kind
        if train_path not in TRAIN_PATHS[kind]:
            raise SpecError(
                f"--train-path {train_path}: {spec.path} cell {cell.cell} ({cell.variant}) is a "
                f"{kind} model, which takes --train-path {' or '.join(TRAIN_PATHS[kind])}")


def reachable(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when ``host:port`` accepts a TCP connection within ``timeout`` s, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.timeout:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def check_tracking_uri(uri: str) -> None:
    """Refuse a ``--tracking-uri`` a study cannot record to, in one line, before anything starts."""
    parts = uri_parts(uri)
    scheme = parts.kind
    shown = redact(uri)  # every message: a password never reaches a terminal or a log
    valid = ("sqlite:////abs/path/mlflow.db, postgresql://host/db, mysql://host/db, "
             "http(s)://mlflow-server:port")
    if scheme == "file" or (not scheme and uri):
        raise SpecError(f"--tracking-uri {shown}: MLflow's file store is not supported (it is in "
                        f"maintenance mode); use a database or a server: {valid}")
    if scheme not in DATABASE_SCHEMES + SERVER_SCHEMES:
        raise SpecError(f"--tracking-uri {shown}: unknown scheme {parts.scheme + '://'!r}; valid: {valid}")
    if scheme == "sqlite":
        db = sqlite_path(uri)
        if db is None or db.name in ("", ":memory:"):
            raise SpecError(f"--tracking-uri {shown}: expected sqlite:///<path to a file> (four "
                            "slashes for an absolute path)")
        if not db.parent.is_dir():
            raise SpecError(f"--tracking-uri {shown}: directory {db.parent} does not exist; create "
                            "it first (a study creates no directory outside its own)")
        return
    try:
        host, port = parts.address()
    except ValueError as exc:  # a port that is not a number, or out of range
        raise SpecError(f"--tracking-uri {shown}: {exc}") from None
    if not host:
        if scheme in SERVER_SCHEMES:
            raise SpecError(f"--tracking-uri {shown}: no host; valid: {valid}")
        return  # a database on a local socket
    why = reachable(host, port or DEFAULT_PORTS[scheme])
    if why:
        what = "MLflow server" if scheme in SERVER_SCHEMES else f"{scheme} database"
        raise SpecError(f"--tracking-uri {shown}: no {what} answers at "
                        f"{host}:{port or DEFAULT_PORTS[scheme]} ({why}); start it, or fix the URI")


def check_address(address: str) -> None:
    """Refuse an ``--address`` of a Ray cluster that does not accept a connection within
    :data:`CONNECT_TIMEOUT_S` s (``auto`` and ``local`` are Ray's own look-ups, left to it)."""
    if address in ("auto", "local"):
        return
    client = address.startswith("ray://")
    try:  # urlsplit itself refuses some (ray://[::1: "Invalid IPv6 URL")
        parts = urlsplit(address if "://" in address else f"ray://{address}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise SpecError(f"--address {address}: {exc}") from None
    if not host:
        raise SpecError(f"--address {address}: expected auto, HOST:PORT or ray://HOST:PORT")
    port = port or (RAY_CLIENT_PORT if client else RAY_DEFAULT_PORT)
    why = reachable(host, port)
    if why:
        raise SpecError(f"--address {address}: no Ray cluster answers at {host}:{port} ({why}); "
                        "start it (`ray start --head`), or leave --address out for a private local Ray")

