"""A study's folder as the driver keeps it: ``study.json`` read, written and moved.

The folder's layout is :mod:`record.layout`'s; its record format, and the upgrade of an older
one, :mod:`study.recording.migrate`'s (a ``study.json`` is upgraded in memory when read, on disk by
``study migrate``). The study is :class:`study.recording.meta.StudyMeta`, which maps it to and from JSON.
Standard library, ``record``, ``study.spec``, ``study.recording.migrate`` and ``study.recording.meta`` only: no Ray,
no MLflow.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, TextIO

from locattn.config import TRAIN_PATHS
from record.layout import StudyPaths, study_paths
from record.store import (FULL, READ_ONLY, StoreError, hidden_secrets, move_artifact_root, open_database, redact,
                          split_credentials, sqlite_path, store_condition, unpack, uri_parts)
from study.recording.meta import StudyMeta
from study.recording.migrate import FORMAT_VERSION, FormatError, upgrade_meta
from study.spec import SpecError, StudySpec, check_study_name, resolve_spec


class StudyError(SpecError):
    """A study cannot run as asked (in use, unreadable state, no space, read-only root...);
    the message is one line naming the file or the holder."""


def new_study_paths(root: str | Path, name: Any, where: str = "--name") -> StudyPaths:
    """The folder of the study ``name`` under ``root``: every command that makes a study folder
    (``study launch``, ``study export SPEC``) turns its name into a folder here, after
    :func:`study.spec.check_study_name` (one directory under ``root``: no ``/``, ``..``,
    absolute path, newline or escape); ``where`` names the name's source for the error."""
    check_study_name(name, where)
    folder = Path(root).resolve() / name
    check_study_folder(folder, root, where)
    return study_paths(folder)


def check_study_folder(folder: Path, root: str | Path, where: str = "--name") -> None:
    """Refuse, in one line (:class:`StudyError`), a study folder that cannot be made: a name
    longer than the file system takes for one directory (``NAME_MAX``, 255 bytes on most), or a
    ``--root`` that is, or lies under, a regular file, or where nothing can be written. Every
    command that makes a study folder checks it before anything else, the dry run as the
    launch, so a dry run refuses what the launch would."""
    name = folder.name
    base = folder.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    try:
        limit = os.pathconf(base if base.is_dir() else base.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(os.fsencode(name)) > limit:
        raise StudyError(f"{where} {name[:24]!r}... is {len(os.fsencode(name))} bytes long: a study name "
                         f"is one directory name, at most {limit} bytes on {base}")
    if not base.is_dir():
        raise StudyError(f"--root {root}: {base} is a file, not a directory: the study folder "
                         f"{folder} cannot be made")
    if not os.access(base, os.W_OK | os.X_OK):
        why = "Read-only file system" if os.statvfs(base).f_flag & os.ST_RDONLY else "permission denied"
        raise StudyError(f"--root {root}: cannot write in {base} ({why})")


def load_meta(paths: StudyPaths) -> StudyMeta:
    """The saved ``study.json``, upgraded to the current record format (:mod:`study.recording.migrate`); a
    one-line error when it is missing, empty, corrupt, unreadable or of a newer format."""
    return StudyMeta.from_json(_upgraded(paths, read_meta(paths))[0])


def _upgraded(paths: StudyPaths, doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    try:
        return upgrade_meta(doc)
    except FormatError as exc:
        raise StudyError(f"{paths.meta}: {exc}") from None


def read_meta(paths: StudyPaths) -> dict[str, Any]:
    """The saved ``study.json`` as it is on disk (any record format); errors as :func:`load_meta`'s."""
    if not paths.meta.is_file():
        raise SpecError(f"{paths.dir}: no study here (missing study.json); launch it first")
    try:
        text = paths.meta.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise StudyError(f"{paths.meta}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested beyond Python's stack
        what = "empty" if not text.strip() else f"corrupt ({exc})"
        raise StudyError(
            f"{paths.meta}: {what}; the runs and the store are untouched: restore the file, or "
            f"launch the spec again under this --name to rewrite it") from None
    missing = [k for k in ("name", "spec_path", "profile", "raw", "resolved", "tracking_uri")
               if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise StudyError(f"{paths.meta}: corrupt (missing {', '.join(missing)}); restore the file, or "
                         f"launch the spec again under this --name to rewrite it")
    types = {"name": str, "spec_path": str, "tracking_uri": str, "raw": dict, "resolved": dict,
             "profile": (str, type(None))}
    wanted = {"raw": "an object (the spec)", "resolved": "an object (the spec)", "profile": "a string or null"}
    wrong = [f"{k} is {type(meta[k]).__name__}, expected {wanted.get(k, 'a string')}" for k, t in types.items()
             if not isinstance(meta[k], t)]
    paths_ = sorted({p for steps in TRAIN_PATHS.values() for p in steps})
    wrong += [f"{k} is {json.dumps(meta[k])[:40]}, expected {want}" for k, ok, want in (  # the optional keys
        ("only", lambda v: isinstance(v, dict) and all(isinstance(x, list) for x in v.values()),
         "an object of grid axis -> list of values"),
        ("seeds", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)),
         "a seed count or a list of seeds"),
        ("set", lambda v: isinstance(v, dict), "an object of dotted config key -> value"),
        ("train_path", lambda v: v in paths_, f"one of {', '.join(paths_)}"),
        ("plugin_sources", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
         "an object of module -> source hash"),
        ("created", lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
         "seconds since the epoch")) if k in meta and not ok(meta[k])]
    if wrong:
        raise StudyError(f"{paths.meta}: corrupt ({', '.join(wrong)}); restore the file, or launch the "
                         "spec again under this --name to rewrite it")
    return meta


#: Environment variables that carry a tracking URI's credentials, by scheme: a PostgreSQL
#: store's go to libpq (which also reads ``~/.pgpass``), an MLflow server's to MLflow's client.
CREDENTIAL_VARIABLES = {"postgresql": ("PGUSER", "PGPASSWORD"),
                        "http": ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"),
                        "https": ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}


def reach_database(tracking_uri: str, meta_path: Path) -> None:
    """:func:`record.store.open_database` before a resume opens the store: :class:`StudyError`
    in one line naming ``meta_path``, the store (password redacted), the database's own reason
    and the credential variables that are not set (:data:`CREDENTIAL_VARIABLES`: study.json
    keeps no secret, so after a restart they must come from the environment again)."""
    try:
        open_database(tracking_uri)
    except StoreError as exc:
        scheme = uri_parts(tracking_uri).kind  # postgresql, mysql or mssql: open_database tries no other
        unset = [v for v in CREDENTIAL_VARIABLES.get(scheme, ()) if not os.environ.get(v)]
        hint = (f"; {' and '.join(unset)} not set (study.json keeps no secret: give them by environment"
                f"{' or ~/.pgpass' if scheme == 'postgresql' else ''})") if unset else ""
        raise StudyError(f"{meta_path}: {exc}{hint}; nothing was run") from None


def take_credentials(tracking_uri: str | None, out: TextIO) -> str | None:
    """Strip the credentials from a tracking URI (userinfo, or the query's ``user``/``password``:
    :func:`record.store.split_credentials`) and keep them in this process's memory only: in the
    environment variables the store's client reads (:data:`CREDENTIAL_VARIABLES`), never in a
    file or a log. Other schemes are refused (there is no variable to carry the secret)."""
    if tracking_uri is None:
        return None
    clean, user, password = split_credentials(tracking_uri)
    hidden = hidden_secrets(clean)
    if hidden:
        raise StudyError(f"--tracking-uri {redact(tracking_uri)}: its {' and '.join(hidden)} would be saved "
                         "in study.json; give the secret to the store's client another way (PGPASSWORD, "
                         "~/.pgpass, MLFLOW_TRACKING_TOKEN)")
    if user is None and password is None:
        return tracking_uri
    scheme = clean.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in CREDENTIAL_VARIABLES:
        raise StudyError(f"--tracking-uri {clean}: a password in a {scheme} URI would be saved in "
                         f"study.json; give it to the database client another way (schemes that "
                         f"take credentials here: {sorted(CREDENTIAL_VARIABLES)})")
    user_var, password_var = CREDENTIAL_VARIABLES[scheme]
    if user is not None:
        os.environ.setdefault(user_var, user)
    if password is not None:
        os.environ.setdefault(password_var, password)
    print(f"[study] credentials removed from the tracking URI ({clean}); they are not saved. "
          f"The store's client reads them from {user_var}/{password_var}: set these to resume",
          file=out)
    return clean


def spec_from_meta(meta: StudyMeta) -> StudySpec:
    """Rebuild the study's spec from what was saved at launch (the YAML may have changed)."""
    return resolve_spec(meta.raw, path=meta.spec_path, profile=meta.profile or None,
                        only=meta.only or None, seeds=meta.seeds)


def one_line_os_error(exc: BaseException, where: Path, study: Path | None = None) -> str:
    """One line for a filesystem or store failure at ``where`` (of the study folder ``study``,
    when that is not ``where``), saying "No space left on device" when it is."""
    text = str(exc)
    condition = store_condition(exc)
    if condition == FULL:
        return (f"{where}: No space left on device ({type(exc).__name__}); free space, then "
                f"`study resume {study or where}`")
    if condition == READ_ONLY:
        return f"{where}: cannot write here ({getattr(exc, 'strerror', None) or text.splitlines()[0]})"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"{where}: {type(exc).__name__}: {first[:300]}"


def write_meta(paths: StudyPaths, meta: StudyMeta) -> None:
    """Write ``study.json`` atomically, in the current record format (:meth:`StudyMeta.to_json`)."""
    tmp = paths.meta.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(meta.to_json(), indent=1, default=str))
        os.replace(tmp, paths.meta)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StudyError(one_line_os_error(exc, paths.dir)) from None


def legacy_tune_state(tune_dir: Path) -> bool:
    """Whether ``tune_dir`` holds a searcher state that is not JSON: a pickled one, which is
    never loaded (unpickling a file can run code)."""
    for path in tune_dir.glob("searcher-state-*"):
        try:
            json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            return True
    return False


def relocate(paths: StudyPaths, meta: StudyMeta, out: TextIO) -> StudyMeta:
    """Adopt a study folder that was moved (committed, copied to another machine, renamed).

    A study's own SQLite store is saved in ``study.json`` by absolute path, and MLflow keeps the
    absolute artifact location of its experiment and runs. When the folder now lives elsewhere
    and holds its ``mlflow.db``, the study uses that store and its paths are rewritten to point
    into the folder (one line says so); a store outside the folder (a server, another file) is
    left as it is. Returns the study, with its new store when it moved.
    """
    unpack(paths.db)  # a record committed compressed
    old_db = sqlite_path(meta.tracking_uri)
    if old_db is None or old_db.name != paths.db.name or not paths.db.is_file():
        return meta
    old_dir = old_db.parent
    if old_dir == paths.dir or (old_dir.exists() and old_dir.resolve() == paths.dir.resolve()):
        return meta
    try:
        move_artifact_root(paths.db, (old_dir / paths.artifacts.name).as_uri(), paths.artifacts.as_uri())
    except StoreError as exc:
        raise StudyError(str(exc)) from None
    meta = meta.replace(tracking_uri=paths.default_tracking_uri())
    write_meta(paths, meta)
    print(f"[study {meta.name}] moved from {old_dir}: now recording in {paths.db}", file=out)
    return meta


def migrate(paths: StudyPaths, out: TextIO) -> list[str]:
    """``study migrate``: upgrade a study folder to the current record format in place, and say
    what changed (one line each; none when it is current). A pickled searcher state
    (:func:`legacy_tune_state`) is set aside as ``tune.legacy-<time>``, since it is never
    loaded; the runs and the store are untouched. The caller holds the study's lock."""
    doc, changes = _upgraded(paths, read_meta(paths))
    meta = StudyMeta.from_json(doc)
    if legacy_tune_state(paths.tune):
        aside = paths.tune.with_name(f"tune.legacy-{int(time.time())}")
        paths.tune.rename(aside)
        changes.append(f"{paths.tune.name}/: a pickled searcher state, set aside as {aside.name} (the "
                       "remaining trials are planned from the record)")
    if changes:
        write_meta(paths, meta)
    name = meta.name
    for change in changes:
        print(f"[study {name}] {change}", file=out)
    print(f"[study {name}] {paths.dir}: record format {FORMAT_VERSION}"
          + (" (already current)" if not changes else ""), file=out)
    return changes
