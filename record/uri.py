"""Tracking URIs: what a URI names, its SQLite file, its secrets redacted, and the store's errors
(what a store's failure says of it: :func:`store_condition`).

The lowest floor of the record's store access: :mod:`record.mlflow_sql` (the SQL) and
:mod:`record.store` (the door everyone uses) both stand on it. Plain string work and files; no
MLflow, no database driver.
"""

from __future__ import annotations

import errno
import lzma
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

SQLITE_PREFIX = "sqlite:///"
ARCHIVE_SUFFIX = ".xz"
"""A SQLite store committed compressed is ``<store>.xz`` (``xz -9 -k mlflow.db``): see :func:`unpack`."""


class StoreError(ValueError):
    """The store cannot be read or written as asked; the message is one line naming it (password
    redacted)."""


class StudyNotFound(StoreError):
    """The store holds no study (MLflow experiment) of that name."""


# ---------------------------------------------------------------------------- the store's failures

#: Modules whose exceptions are the store's (MLflow's client, the database drivers, HTTP): a
#: failure of the store, not a bug of this code.
STORE_ERROR_MODULES = ("mlflow", "sqlalchemy", "sqlite3", "requests", "urllib3", "psycopg", "pymysql")

FULL = "full"
"""The store's device has no space left (SQLite's SQLITE_FULL, ``ENOSPC``)."""
READ_ONLY = "read-only"
"""The store's file or file system refuses writes (SQLite's SQLITE_READONLY, ``EROFS``,
``EACCES``, ``EPERM``)."""
GONE = "gone"
"""The store's file or tables are not there any more (deleted or moved)."""
LOCKED = "locked"
"""Another connection holds the store's write lock past the wait (SQLite's SQLITE_BUSY/LOCKED)."""

#: Each condition with the ``errno`` codes and the (lowercased) message texts that say it, in
#: the order they are tried. The texts are SQLite's own (sqlite3.OperationalError and
#: SQLAlchemy's wrapper of it quote them) and the C library's ``strerror``.
STORE_CONDITIONS: tuple[tuple[str, tuple[int, ...], tuple[str, ...]], ...] = (
    (FULL, (errno.ENOSPC,), ("database or disk is full", "no space left")),
    (READ_ONLY, (errno.EROFS, errno.EACCES, errno.EPERM), ("readonly", "read-only")),
    (GONE, (), ("no such table", "unable to open database", "does not exist")),
    (LOCKED, (), ("database is locked", "database table is locked")),
)


def is_store_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the store's or the file system's (an ``OSError``, or an exception of
    one of :data:`STORE_ERROR_MODULES`) rather than this code's own."""
    module = type(exc).__module__ or ""
    return isinstance(exc, OSError) or module.startswith(STORE_ERROR_MODULES)


def store_condition(exc: BaseException) -> str | None:
    """What a failed store operation's ``exc`` says of the store: :data:`FULL`,
    :data:`READ_ONLY`, :data:`GONE` or :data:`LOCKED`; None when it says none of these, or is
    not the store's or the file system's (:func:`is_store_error`: a bug, or this code's own
    error). ``errno`` is read first, then the message (case and line breaks ignored)."""
    if not is_store_error(exc):
        return None
    code = getattr(exc, "errno", None)
    for condition, codes, _ in STORE_CONDITIONS:
        if code in codes:
            return condition
    text = " ".join(str(exc).split()).lower()
    for condition, _, marks in STORE_CONDITIONS:
        if any(m in text for m in marks):
            return condition
    return None


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
