"""Launch, resume and widen studies: spec -> Ray Tune (+ Optuna) -> MLflow.

A study directory's layout is :mod:`record.layout`'s. Nothing here calls ``ray.init`` at import time.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from record import schema
from record.layout import StudyPaths, study_paths
from record.store import StoreError, move_artifact_root, split_credentials, sqlite_path, sqlite_uri
from study.spec import (SpecError, StudySpec, check_task_data, read_yaml, require_task_data,
                        resolve_spec, size_warnings, widens)
from study.status import pid_alive


class StudyError(SpecError):
    """A study cannot run as asked (in use, unreadable state, no space, read-only root...);
    the message is one line naming the file or the holder."""

DEFAULT_TRAIN_FN = "locattn.train:train"
#: Tune checkpoints kept per trial. Tune also snapshots its whole experiment state (O(trials)
#: bytes) whenever one trial has reported this many checkpoints since the last snapshot, so
#: that a snapshot never names a pruned checkpoint. At 3 (one per epoch) a study of N short
#: trials wrote ~N snapshots of O(N) bytes: quadratic. At 10, a forced snapshot comes at most
#: once per 10 epochs of the fastest trial and short trials never force one; the rest follow
#: Tune's timer (``TUNE_GLOBAL_CHECKPOINT_S``, default auto: ~5 % of the driver's time).
#: Finished trials drop the model files of their checkpoints (study.trainable), so the
#: disk cost of keeping 10 is paid only by running trials.
TUNE_CHECKPOINTS_KEPT = 10
REPO_ROOT = Path(__file__).resolve().parent.parent


def load_meta(paths: StudyPaths) -> dict[str, Any]:
    """The saved ``study.json``; a one-line error when it is missing, empty, corrupt or unreadable."""
    if not paths.meta.is_file():
        raise SpecError(f"{paths.dir}: no study here (missing study.json); launch it first")
    try:
        text = paths.meta.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise StudyError(f"{paths.meta}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        meta = json.loads(text)
    except ValueError as exc:
        what = "empty" if not text.strip() else f"corrupt ({exc})"
        raise StudyError(
            f"{paths.meta}: {what}; the runs and the store are untouched: restore the file, or "
            f"launch the spec again under this --name to rewrite it") from None
    missing = [k for k in ("name", "spec_path", "profile", "raw", "resolved", "tracking_uri")
               if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise StudyError(f"{paths.meta}: corrupt (missing {', '.join(missing)}); restore the file, or "
                         f"launch the spec again under this --name to rewrite it")
    return meta


def _take_credentials(tracking_uri: str | None, out: TextIO) -> str | None:
    """Strip userinfo from a tracking URI; hand it to MLflow through its environment variables
    (``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``), never to a file or a log."""
    if tracking_uri is None:
        return None
    clean, user, password = split_credentials(tracking_uri)
    if user is None and password is None:
        return tracking_uri
    if user is not None:
        os.environ.setdefault("MLFLOW_TRACKING_USERNAME", user)
    if password is not None:
        os.environ.setdefault("MLFLOW_TRACKING_PASSWORD", password)
    print(f"[study] credentials removed from the tracking URI ({clean}); they are not saved. "
          "MLflow reads them from MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD: set these "
          "to resume", file=out)
    return clean


# ---------------------------------------------------------------------------- the study lock


class StudyLock:
    """One driver per study: an exclusive ``flock`` on ``study.lock``, holding the driver's PID,
    host and Ray session.

    The kernel releases the lock when its holder dies, however it dies (``kill -9`` included),
    so a stale lock never blocks: the next driver takes it over and says whose it was. A second
    live driver is refused with the holder's PID and host.
    """

    def __init__(self, paths: StudyPaths, out: TextIO) -> None:
        self.paths = paths
        self.out = out
        self.fd: int | None = None
        self.previous: dict[str, Any] = {}

    def acquire(self) -> "StudyLock":
        path = self.paths.lock
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StudyError(f"{path}: cannot create the study lock ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StudyError(f"{path}: cannot lock ({exc.strerror})") from None
            holder = self._read(path)
            raise StudyError(
                f"study {self.paths.dir.name!r} is already running: driver PID {holder.get('pid', '?')} "
                f"on host {holder.get('host', '?')} holds {path}; wait for it, or stop that driver first"
            ) from None
        self.fd = fd
        self.previous = self._read(path)
        pid, host = self.previous.get("pid"), self.previous.get("host")
        if pid and pid != os.getpid():
            here = host == socket.gethostname()
            state = "no longer running" if here and not pid_alive(int(pid)) else "lock released"
            print(f"[study {self.paths.dir.name}] taking over the stale lock of driver PID {pid} on "
                  f"host {host} ({state})", file=self.out)
        self.write()
        return self

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text() or "{}")
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def write(self, **extra: Any) -> None:
        """(Re)write the holder record: PID, host, start time, and e.g. the Ray session dir."""
        if self.fd is None:
            return
        body = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), **extra}
        blob = json.dumps(body).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, blob, 0)

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
            except OSError:
                pass
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None

    def reap_stale_ray(self) -> list[int]:
        """Kill, by PID, the Ray processes a dead previous driver of this study left behind.

        A ``kill -9``'d driver's local Ray (GCS, raylet, dashboard and runtime-env agents, idle
        workers) can linger for about a minute. They belong to the session directory recorded
        in the lock; only processes whose command line names that exact directory are killed.
        """
        session = self.previous.get("ray_session")
        pid = self.previous.get("pid")
        if (not session or not pid or self.previous.get("host") != socket.gethostname()
                or pid_alive(int(pid)) or not str(session).startswith("/")):
            return []
        return kill_session_processes(str(session))


def session_processes(session_dir: str) -> list[int]:
    """PIDs (not this one) of the processes of one Ray session: their command line names
    ``session_dir``, or they hold a file open under it (Ray's agents retitle themselves,
    e.g. ``ray::DashboardAgent``, but keep their session log files open)."""
    found = []
    needle = session_dir.encode()
    prefix = session_dir.rstrip("/") + "/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
                continue
            for fd in (entry / "fd").iterdir():
                try:
                    if os.readlink(fd).startswith(prefix):
                        found.append(int(entry.name))
                        break
                except OSError:
                    continue
        except OSError:
            continue
    return found


def kill_session_processes(session_dir: str) -> list[int]:
    """SIGKILL, by PID, every process of one Ray session (:func:`session_processes`)."""
    killed = []
    for pid in session_processes(session_dir):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    return killed


def ray_session_dir() -> str | None:
    """The session directory of the Ray this process started (None if it joined one)."""
    try:
        from ray._private import worker

        node = worker._global_node
        return node.get_session_dir_path() if node is not None else None
    except Exception:  # noqa: BLE001 - Ray internals
        return None


def spec_from_meta(meta: dict[str, Any]) -> StudySpec:
    """Rebuild the study's spec from what was saved at launch (the YAML may have changed)."""
    return resolve_spec(meta["raw"], path=meta["spec_path"], profile=meta["profile"] or None,
                        only=meta.get("only") or None)


# ---------------------------------------------------------------------------- ray


def init_ray(address: str | None = None) -> bool:
    """Start a private local Ray on loopback, or join ``address``. Returns True if this call
    started it.

    Without an address this never joins a Ray that is already running on the host (a
    neighbour's ``ray start``, another study's driver): ``ray.init()`` alone would connect to
    the newest one and hand it our trials.
    """
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if ray.is_initialized():
        return False
    if not address and os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
        # Ray reads the variable when first imported; if ray was imported before study, apply it.
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
    # Workers of a local Ray inherit the environment: make this checkout importable.
    pp = os.environ.get("PYTHONPATH", "")
    if str(REPO_ROOT) not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), pp) if p)
    if address:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    else:
        ray.init(
            address="local",
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )  # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every Ray address on 127.0.0.1
    return True


def _stale_checkpoint_filter(record: Any) -> bool:
    """Drop Tune's error about deleting a checkpoint that a killed driver already deleted.

    After ``Tuner.restore`` the restored checkpoint list can name checkpoints that the previous
    (killed) driver pruned after its last state snapshot; Tune then fails to delete them again
    and logs the error, but the new checkpoint is registered. Nothing is lost.
    """
    exc = record.exc_info[1] if record.exc_info else None
    return not (
        isinstance(exc, FileNotFoundError)
        and "checkpoint_" in str(exc)
        and "Error handling checkpoint" in str(record.msg)
    )


def _trial_dirname(trial: Any) -> str:
    from study.trainable import trial_dirname

    return trial_dirname(trial.trial_id)


def _trial_failure_filter(record: Any) -> bool:
    """Tune logs a failed trial with the whole remote traceback (dozens of lines per attempt;
    1,000+ lines when a full disk fails every trial). Keep one line: the trial and the error's
    last line. The full text stays in the run's ``locattn.error`` tag and Tune's error file."""
    if "Trial task failed" in str(record.msg) and record.exc_info:
        exc = record.exc_info[1]
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        last = lines[-1] if lines else type(exc).__name__
        record.msg = f"{record.getMessage()}: {last[:300]}"
        record.args = ()
        record.exc_info = None
        record.exc_text = None
    return True


def _tune_log_filter(record: Any) -> bool:
    """Drop Tune's advice to call ``Tuner.restore``: ``study resume`` is the way back."""
    return "Tuner.restore" not in str(record.msg)


def _one_line_os_error(exc: BaseException, where: Path) -> str:
    """One line for a filesystem or store failure, saying "No space left on device" when it is."""
    text = str(exc)
    full = ("database or disk is full" in text or getattr(exc, "errno", None) == errno.ENOSPC
            or "No space left" in text)
    if full:
        return f"{where}: No space left on device ({type(exc).__name__}); free space, then `study resume {where}`"
    if getattr(exc, "errno", None) in (errno.EROFS, errno.EACCES, errno.EPERM) or "readonly" in text \
            or "read-only" in text:
        return f"{where}: cannot write here ({getattr(exc, 'strerror', None) or text.splitlines()[0]})"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"{where}: {type(exc).__name__}: {first[:300]}"


# ---------------------------------------------------------------------------- launch


def launch(
    spec_path: str | Path,
    *,
    profile: str | None = None,
    name: str | None = None,
    root: str | Path = "studies",
    address: str | None = None,
    tracking_uri: str | None = None,
    max_concurrent: int | None = None,
    dry_run: bool = False,
    progress_seconds: float = 10.0,
    only: dict[str, list] | None = None,
    train_fn: str = DEFAULT_TRAIN_FN,
    out: TextIO | None = None,
    yes: bool = False,
) -> dict[str, Any]:
    """Launch a study, or resume it if it already exists with the same spec (idempotent).

    A spec above :data:`study.spec.SIZE_LIMITS` (runs, epochs, CPU hours) is refused with its
    dry-run cost unless ``yes``.
    """
    out = out or sys.stdout
    spec_path = Path(spec_path).resolve()
    raw = read_yaml(spec_path)
    spec = resolve_spec(raw, path=str(spec_path), profile=profile, only=only)
    if not name:
        name = f"{spec.name}-{spec.profile}" if spec.profile else spec.name
    paths = study_paths(Path(root).resolve() / name)
    tracking_uri = _take_credentials(tracking_uri, out)
    big = size_warnings(spec)
    if dry_run:
        print(f"study    {name} -> {paths.dir}", file=out)
        print(spec.plan(), file=out)
        for warning in big:
            print(f"size     WARNING {warning}: `study launch` will ask for --yes", file=out)
        problems = check_task_data(spec)
        for problem in problems:
            print(f"data     PROBLEM {problem}", file=out)
        return {"dry_run": True, "name": name, "n_trials": spec.n_trials(), "n_runs": spec.n_runs(),
                "data_problems": problems, "size_warnings": big}
    if big and not yes:
        cost = next((ln for ln in spec.plan().splitlines() if ln.startswith("cost")), "").split(None, 1)
        raise StudyError(
            f"{spec_path}: a very large study ({'; '.join(big)}; dry-run cost "
            f"{cost[-1] if cost else '?'}); check with --dry-run, then pass --yes to launch it")
    require_task_data(spec)  # before anything is created or started
    try:
        paths.dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StudyError(_one_line_os_error(exc, paths.dir)) from None
    lock = StudyLock(paths, out).acquire()
    try:
        if paths.meta.is_file():
            meta = load_meta(paths)
            relocate(paths, meta, out)
            if widens(meta["resolved"], spec.resolved):
                _widen(paths, meta, spec, only or {}, out)
            elif meta["resolved"] != spec.resolved:
                raise SpecError(
                    f"{spec_path}: study {name!r} at {paths.dir} was launched with a different spec or "
                    f"profile ({meta['spec_path']}, profile {meta['profile']}, --only "
                    f"{_only_text(meta.get('only'))}); resume it with `study resume {paths.dir}`, "
                    "widen it with the same spec and profile and a wider --only, or launch under "
                    "another --name"
                )
            if tracking_uri and tracking_uri != meta["tracking_uri"]:
                print(f"[study {name}] WARNING: --tracking-uri {tracking_uri} differs from the one "
                      f"saved in study.json ({meta['tracking_uri']}); using {tracking_uri} from now on "
                      "(finished runs missing there are re-recorded from the run directories)", file=out)
                meta["tracking_uri"] = tracking_uri
                _write_meta(paths, meta)
            print(f"[study {name}] exists at {paths.dir}: resuming (finished trials are not rerun)",
                  file=out)
        else:
            meta = {
                "name": name,
                "spec_path": str(spec_path),
                "profile": spec.profile,
                "only": only or {},
                "raw": raw,
                "resolved": spec.resolved,
                "tracking_uri": tracking_uri or paths.default_tracking_uri(),
                "train_fn": train_fn,
                "created": time.time(),
            }
            _write_meta(paths, meta)
        return _run(spec, paths, meta, address=address, max_concurrent=max_concurrent,
                    progress_seconds=progress_seconds, out=out, lock=lock)
    finally:
        lock.release()


def _only_text(only: dict[str, list] | None) -> str:
    return " ".join(f"{k}={','.join(map(str, v))}" for k, v in (only or {}).items()) or "(none)"


def _widen(paths: StudyPaths, meta: dict[str, Any], spec: StudySpec, only: dict[str, list],
           out: TextIO) -> None:
    """Grow a study to a wider ``--only`` of its own spec and profile. Finished runs stay in the
    record and are not rerun. Tune's state knows only the old trials, so it is set aside (kept,
    never deleted) and the trials are planned from the record; a run that was part-way through
    starts again from its first epoch."""
    before = spec_from_meta(meta).n_trials()
    print(f"[study {meta['name']}] widening --only {_only_text(meta.get('only'))} -> "
          f"{_only_text(only)}: {before} -> {spec.n_trials()} trials; finished runs are kept, "
          "unfinished ones start again", file=out)
    if paths.tune.exists():
        aside = paths.tune.with_name(f"tune.before-widening-{int(time.time())}")
        try:
            paths.tune.rename(aside)
        except OSError as exc:
            raise StudyError(_one_line_os_error(exc, paths.dir)) from None
        print(f"[study {meta['name']}] Tune's state of the narrower study set aside as {aside.name}",
              file=out)
    meta["only"] = only
    meta["resolved"] = spec.resolved
    _write_meta(paths, meta)


def _write_meta(paths: StudyPaths, meta: dict[str, Any]) -> None:
    tmp = paths.meta.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(meta, indent=1, default=str))
        os.replace(tmp, paths.meta)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StudyError(_one_line_os_error(exc, paths.dir)) from None


def legacy_tune_state(tune_dir: Path) -> bool:
    """Whether ``tune_dir`` holds a searcher state that is not JSON: written by a version that
    pickled it (before issue 13), which this version never unpickles."""
    for path in tune_dir.glob("searcher-state-*"):
        try:
            json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            return True
    return False


def relocate(paths: StudyPaths, meta: dict[str, Any], out: TextIO) -> bool:
    """Adopt a study folder that was moved (committed, copied to another machine, renamed).

    A study's own SQLite store is saved in ``study.json`` by absolute path, and MLflow keeps the
    absolute artifact location of its experiment and runs. When the folder now lives elsewhere
    and holds its ``mlflow.db``, the study uses that store and its paths are rewritten to point
    into the folder (one line says so); a store outside the folder (a server, another file) is
    left as it is. Returns whether anything changed.
    """
    old_db = sqlite_path(meta["tracking_uri"])
    if old_db is None or old_db.name != paths.db.name or not paths.db.is_file():
        return False
    old_dir = old_db.parent
    if old_dir == paths.dir or (old_dir.exists() and old_dir.resolve() == paths.dir.resolve()):
        return False
    try:
        move_artifact_root(paths.db, (old_dir / paths.artifacts.name).as_uri(), paths.artifacts.as_uri())
    except StoreError as exc:
        raise StudyError(str(exc)) from None
    meta["tracking_uri"] = paths.default_tracking_uri()
    _write_meta(paths, meta)
    print(f"[study {meta['name']}] moved from {old_dir}: now recording in {paths.db}", file=out)
    return True


def resume(
    study: str | Path,
    *,
    root: str | Path = "studies",
    address: str | None = None,
    progress_seconds: float = 10.0,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Resume a study from its directory: finished trials are kept, unfinished ones continue."""
    paths = study_paths(study, root)
    out = out or sys.stdout
    meta = load_meta(paths)
    _, user, password = split_credentials(meta["tracking_uri"])
    if user or password:  # a study.json written before credentials were stripped
        meta["tracking_uri"] = _take_credentials(meta["tracking_uri"], out)
    spec = spec_from_meta(meta)
    require_task_data(spec)
    lock = StudyLock(paths, out).acquire()
    try:
        relocate(paths, meta, out)
        if user or password:
            _write_meta(paths, meta)
        return _run(spec, paths, meta, address=address, max_concurrent=None,
                    progress_seconds=progress_seconds, out=out, lock=lock)
    finally:
        lock.release()


def _run(spec: StudySpec, paths: StudyPaths, meta: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """:func:`_run_locked`, with a full disk or a read-only store said in one line."""
    try:
        return _run_locked(spec, paths, meta, **kw)
    except OSError as exc:
        raise StudyError(_one_line_os_error(exc, paths.dir)) from None
    except Exception as exc:  # noqa: BLE001 - the store's own errors: one line when disk/permission
        text = str(exc)
        if any(m in text for m in ("database or disk is full", "No space left", "readonly database",
                                   "attempt to write a readonly")):
            raise StudyError(_one_line_os_error(exc, paths.dir)) from None
        raise


def _run_locked(
    spec: StudySpec,
    paths: StudyPaths,
    meta: dict[str, Any],
    *,
    address: str | None,
    max_concurrent: int | None,
    progress_seconds: float,
    out: TextIO,
    lock: StudyLock | None,
) -> dict[str, Any]:
    # Tune settings read from the environment by the driver.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # MLflow is the record
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")  # objective only at the end
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Ctrl-C is ours (see _Interrupt): Tune's own handler would report an interrupted study as
    # finished and advise ``Tuner.restore``.
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    import logging

    from ray import tune

    # Tune's default result loggers are off (MLflow is the record), so the end-of-run
    # dataframe fetch has no files to read: silence that warning only.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    logging.getLogger("ray.tune.execution.tune_controller").addFilter(_stale_checkpoint_filter)
    logging.getLogger("ray.tune.tune").addFilter(_tune_log_filter)
    logging.getLogger("ray.tune.execution.tune_controller").addFilter(_trial_failure_filter)

    from study.record import MlflowRecorder, reconcile
    from study.search import OpenTrialsScheduler, TrialQueue
    from study.trainable import run_trial, trial_descriptor, trial_run_keys

    name = meta["name"]
    tracking_uri = meta["tracking_uri"]
    t_start = time.time()
    if lock is not None:
        reaped = lock.reap_stale_ray()
        if reaped:
            print(f"[study {name}] stopped {len(reaped)} Ray processes left by the previous driver "
                  f"(PIDs {', '.join(map(str, reaped[:8]))}{' ...' if len(reaped) > 8 else ''})", file=out)
    started = False
    trainable = tune.with_resources(run_trial, {"cpu": spec.cpus, "gpu": spec.gpus})
    metric = spec.search.metric if spec.search else "best_dev_score"
    common = dict(study=name, study_dir=str(paths.dir), cpus=spec.cpus, gpus=spec.gpus, metric=metric,
                  train_fn=meta.get("train_fn", DEFAULT_TRAIN_FN), pack=spec.pack_seeds)
    with_epochs = _max_epochs(spec)
    recorder = MlflowRecorder(
        tracking_uri=tracking_uri,
        study=name,
        study_dir=str(paths.dir),
        artifact_location=paths.artifacts.as_uri(),
        parent_tags={
            schema.TABLES: ",".join(spec.tables),
            schema.PROFILE: spec.profile,
            schema.SPEC_PATH: meta["spec_path"],
            schema.N_TRIALS: str(spec.n_trials()),
            schema.N_RUNS: str(spec.n_runs()),
            schema.N_SEEDS: str(len(spec.seeds)),
        },
        n_seeds=len(spec.seeds),
        total_trials=spec.n_trials(),
        epochs_per_trial=with_epochs,
        progress_seconds=progress_seconds,
        out=out,
    )
    run_config = tune.RunConfig(
        name="tune",
        storage_path=str(paths.dir),
        callbacks=[recorder],
        failure_config=tune.FailureConfig(max_failures=spec.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=TUNE_CHECKPOINTS_KEPT),
        verbose=0,
    )
    limit = max_concurrent if max_concurrent is not None else spec.max_concurrent
    interrupt = _Interrupt(name, out)
    try:
        # The record first: finished runs the store lost (a deleted mlflow.db, another store,
        # a study copied without tune/) are re-recorded from their run directories.
        recorder._ensure()
        fixed = reconcile(recorder, paths.dir)
        if fixed:
            print(f"[study {name}] re-recorded {fixed} finished runs missing from the store "
                  "(from their run directories)", file=out)
        started = init_ray(address)
        if lock is not None and started and not address:  # our private Ray: its helpers are ours
            lock.write(ray_session=ray_session_dir())
        if legacy_tune_state(paths.tune):
            aside = paths.tune.with_name(f"tune.legacy-{int(time.time())}")
            paths.tune.rename(aside)
            print(f"[study {name}] {paths.tune} holds a pickled searcher state from an older "
                  f"version (never loaded: unpickling can run code); set aside as {aside.name}, "
                  "the remaining trials are planned from the record", file=out)
        if tune.Tuner.can_restore(str(paths.tune)):
            tuner = tune.Tuner.restore(
                str(paths.tune), trainable=trainable, resume_unfinished=True, resume_errored=True
            )
            # Callbacks are restored from the pickled tuner state: use this session's writer.
            try:
                tuner._local_tuner.get_run_config().callbacks = [recorder]
            except AttributeError:  # pragma: no cover - depends on Ray internals
                pass
            skipped = 0
        else:
            if spec.search is None:
                trials = []
                done = {k for k, s in recorder.runs.items() if s.status == schema.STATUS_FINISHED}
                skipped = 0
                for t in spec.grid_trials():
                    desc = trial_descriptor(cell=t.cell, task=t.task, variant=t.variant,
                                            overrides=t.overrides, hparams=t.hparams,
                                            seeds=t.seeds, points=t.points, **common)
                    if all(k in done for _, k in trial_run_keys({"trial": desc})):
                        skipped += 1
                        continue
                    trials.append(desc)
                if not trials:
                    print(f"[study {name}] every trial is already finished in the record", file=out)
                    recorder.finish_parent(interrupted=False)
                    return {"name": name, "dir": str(paths.dir), "skipped": skipped,
                            "trials": 0, "errors": 0, "wall_seconds": time.time() - t_start,
                            **recorder.run_counts(spec.n_runs()), "interrupted": False}
                if skipped:
                    print(f"[study {name}] {skipped} of {skipped + len(trials)} trials already "
                          f"finished in the record; running the other {len(trials)}", file=out)
                    recorder.cfg["total_trials"] = len(trials)
                tune_config = tune.TuneConfig(
                    search_alg=TrialQueue(trials),
                    num_samples=len(trials),
                    max_concurrent_trials=limit or None,
                    reuse_actors=True,
                    scheduler=OpenTrialsScheduler(),
                    trial_dirname_creator=_trial_dirname,
                )
                param_space = {}
            else:
                from study.search import CellSearch

                groups = []
                for cell in spec.cells:
                    for hp in spec.hparam_points():
                        groups.append(trial_descriptor(
                            cell=cell.cell, task=cell.task, variant=cell.variant,
                            overrides={**cell.overrides, **hp}, hparams=hp, seeds=spec.seeds,
                            **common))
                searcher = CellSearch(
                    groups=groups, space=spec.search.space, num_samples=spec.search.num_samples,
                    sampler=spec.search.sampler, sampler_seed=spec.search.sampler_seed,
                    mode=spec.search.mode, storage_url=sqlite_uri(paths.optuna_db), study=name,
                )
                tune_config = tune.TuneConfig(
                    search_alg=searcher,
                    num_samples=spec.n_trials(),
                    max_concurrent_trials=limit or None,
                    reuse_actors=True,
                    scheduler=OpenTrialsScheduler(),
                    trial_dirname_creator=_trial_dirname,
                )
                param_space = {}
                skipped = 0
            tuner = tune.Tuner(trainable, param_space=param_space, tune_config=tune_config,
                               run_config=run_config)
        t_fit = time.time()
        grid = None
        with interrupt:
            try:
                grid = tuner.fit()
            except KeyboardInterrupt:  # a second Ctrl-C: stop now, state as of the last snapshot
                interrupt.event.set()
        fit_seconds = time.time() - t_fit
        errors = sum(1 for r in grid if r.error is not None) if grid is not None else 0
        recorder.flush()
        counts = recorder.run_counts(spec.n_runs())
        interrupted = interrupt.event.is_set()
        recorder.finish_parent(interrupted=interrupted)
        summary = {
            "name": name,
            "dir": str(paths.dir),
            "tracking_uri": tracking_uri,
            "trials": len(grid) if grid is not None else 0,
            "errors": errors,
            "skipped": skipped,
            "wall_seconds": time.time() - t_start,
            "fit_seconds": fit_seconds,
            "interrupted": interrupted,
            **counts,
        }
        line = (f"[study {name}] {counts['runs_finished']} of {counts['runs_expected']} runs finished, "
                f"{counts['runs_failed']} failed, {counts['runs_unfinished']} not finished; record: "
                f"{tracking_uri} (experiment {name!r})")
        if interrupted:
            print(f"{line}. Interrupted: continue with `study resume {paths.dir}`", file=out)
        else:
            print(f"{line}; `study ui {paths.dir}` to browse", file=out)
        return summary
    finally:
        if started:
            import ray

            ray.shutdown()


class _Interrupt:
    """Ctrl-C (SIGINT) or SIGTERM (a plain ``kill``, a scheduler or service manager stopping
    the driver) during ``fit``: the first asks Tune to stop gracefully (its SIGUSR1 handler
    saves the experiment state); a second one raises ``KeyboardInterrupt``. Either way
    ``event`` is set, so the study reports itself interrupted (exit status 130). Without this,
    SIGTERM met the handler ``ray.init`` installs, which exits at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, name: str, out: TextIO) -> None:
        self.name = name
        self.out = out
        self.event = threading.Event()
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()
        print(f"[study {self.name}] interrupted ({signal.Signals(signum).name}): stopping the trials and saving state "
              "(Ctrl-C again to stop at once)", file=self.out, flush=True)
        tune_handler = signal.getsignal(signal.SIGUSR1)
        if callable(tune_handler):
            tune_handler(signal.SIGUSR1, frame)  # Tune's graceful stop
            for sig in self.SIGNALS:  # (Tune's handler reinstalled the previous SIGINT one)
                signal.signal(sig, self._handle)
        else:
            raise KeyboardInterrupt

    def __enter__(self) -> "_Interrupt":
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.previous.items():
            if handler is not None:
                signal.signal(sig, handler)
        self.previous = {}


def _max_epochs(spec: StudySpec) -> int:
    from locattn.config import make_run_config

    cell = spec.cells[0]
    cfg = make_run_config(task=cell.task, variant=cell.variant,
                          overrides={**cell.overrides, **spec.hparam_points()[0]})
    return cfg.optim.epochs
