"""The driver process's plumbing: the study lock, leftover Ray processes, Ray itself and Tune's
log lines (its signals: :mod:`study.driver.signals`).

Nothing here calls ``ray.init`` at import time, and nothing here knows what a study runs.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import signal
import socket
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from record.layout import StudyPaths
from study.driver import ray_compat
from study.recording.folder import StudyError
from study.recording.status import pid_alive

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Tries to start a private local Ray when its GCS fails to start: two Rays starting at once on one
#: host (a study beside a test run) can pick the same free port, and the second's GCS then fails
#: ("Failed to start GCS"); a second try picks other ports. Any other start failure is not retried.
GCS_START_ATTEMPTS = 2


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
        self.dir_fd: int | None = None
        self.previous: dict[str, Any] = {}

    def acquire(self) -> "StudyLock":
        path = self.paths.lock
        # The lock that counts is on the study folder itself: deleting study.lock (a new file, a
        # new inode, a free flock) must not let a second driver in. study.lock says who holds it.
        self.dir_fd = self._lock(self.paths.dir, os.O_RDONLY | os.O_DIRECTORY, "open the study folder")
        self.fd = self._lock(path, os.O_RDWR | os.O_CREAT, "create the study lock")
        self.previous = self._read(path)
        pid, host = self.previous.get("pid"), self.previous.get("host")
        if pid and pid != os.getpid():
            here = host == socket.gethostname()
            state = "no longer running" if here and not pid_alive(int(pid)) else "lock released"
            print(f"[study {self.paths.dir.name}] taking over the stale lock of driver PID {pid} on "
                  f"host {host} ({state})", file=self.out)
        self.write()
        return self

    def _lock(self, target: Path, flags: int, what: str) -> int:
        """An open descriptor of ``target`` holding its exclusive flock; a held one is refused
        in one line naming the holder (and everything taken so far is released)."""
        try:
            fd = os.open(target, flags, 0o644)
        except OSError as exc:
            self.release()
            raise StudyError(f"{target}: cannot {what} ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            self.release()
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StudyError(f"{target}: cannot lock ({exc.strerror})") from None
            self._refuse(self.paths.lock)
        return fd

    def _refuse(self, path: Path) -> None:
        holder = self._read(path)
        who = (f"driver PID {holder['pid']} on host {holder.get('host', '?')} holds {path}"
               if holder.get("pid") else f"a driver holds the study folder (its {path.name} was deleted)")
        raise StudyError(f"study {self.paths.dir.name!r} is already running: {who}; wait for it, or "
                         "stop that driver first") from None

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
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None

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


@dataclass(frozen=True)
class RayStart:
    """What :func:`init_ray` did. True when this call started (or joined) Ray, so the caller
    shuts it down."""

    started: bool
    session_dir: str | None = None
    """The session directory of a private Ray this call started (its processes are ours)."""

    def __bool__(self) -> bool:
        return self.started


def init_ray(address: str | None = None, resume: str = "",
             runtime_env: dict[str, Any] | None = None) -> RayStart:
    """Start a private local Ray on loopback, or join ``address`` (with the job's
    ``runtime_env``: a study's plugins, :func:`study.spec.plugins.runtime_env`).

    Without an address this never joins a Ray that is already running on the host (a
    neighbour's ``ray start``, another study's driver): ``ray.init()`` alone would connect to
    the newest one and hand it our trials.

    A private Ray that cannot start (its temp directory unusable, a full disk, a raylet that
    did not register within Ray's 30 s on an overloaded machine) raises :class:`StudyError` in
    one line with the cause; ``resume`` (the command that takes the study up again) ends it.
    """
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray  # the driver's heavy import: `study status` and `study --help` stay light

    if ray.is_initialized():
        return RayStart(started=False)
    if not address and os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
        ray_compat.keep_on_loopback()  # ray may have been imported before study read the variable
    # Workers of a local Ray inherit the environment: make this checkout importable.
    pp = os.environ.get("PYTHONPATH", "")
    if str(REPO_ROOT) not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), pp) if p)
    ours = signal.getsignal(signal.SIGTERM)
    # A driver's Interrupt handles SIGTERM. ray.init replaces any handler with one that calls
    # sys.exit, which inside Ray's start-up gave a traceback or a C++ abort: its setter is
    # skipped while it runs (ray_compat). Then Ray's core installs its own (it logs, then the
    # driver aborts at exit, -6): ours is put back after it.
    kept = ray_compat.sigterm_handler_kept() if callable(ours) else nullcontext()
    # Ray puts the driver's working directory first on every worker's sys.path (Ray 2.60,
    # ray._private.worker.connect: no option turns it off short of a runtime_env working_dir,
    # which uploads the folder). `cd <study> && study resume .` would then let a module lying in
    # the study folder shadow any the workers import: ray.init runs from this checkout's root.
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        with kept:
            if address:
                ray.init(address=address, log_to_driver=False, configure_logging=False,
                         runtime_env=runtime_env)
                return RayStart(started=True)
            for attempt in range(1, GCS_START_ATTEMPTS + 1):
                try:
                    with ray_compat.own_process_group():  # a signal to our group is the driver's alone
                        context = ray.init(
                            address="local",
                            include_dashboard=False,
                            log_to_driver=False,
                            configure_logging=False,
                        )  # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every Ray address on 127.0.0.1
                    break
                except Exception as exc:  # Ray raises bare Exception (start-up timeout), OSError, ...
                    if ray.is_initialized():
                        ray.shutdown()
                    cause = (str(exc).strip().splitlines() or [""])[0]
                    if "GCS" in cause and attempt < GCS_START_ATTEMPTS:
                        print(f"[study] a private local Ray did not start ({cause}): starting it again on "
                              "fresh ports", file=sys.stderr, flush=True)
                        continue
                    raise StudyError(
                        f"a private local Ray did not start ({type(exc).__name__}: {cause}); nothing ran. Check "
                        f"free disk and memory, the load, and Ray's temp directory ({_ray_temp_dir()}; RAY_TMPDIR "
                        f"moves it){f', then {resume}' if resume else ''}"
                    ) from None
            return RayStart(started=True, session_dir=context.address_info.get("session_dir"))
    finally:
        os.chdir(cwd)
        if callable(ours):
            signal.signal(signal.SIGTERM, ours)


def _ray_temp_dir() -> str:
    """Where a local Ray writes its sessions: ``$RAY_TMPDIR/ray``, else ``/tmp/ray``."""
    return os.path.join(os.environ.get("RAY_TMPDIR") or "/tmp", "ray")


def check_gpus(need: float, address: str | None, where: str, out: TextIO) -> None:
    """Trials that ask for ``need`` GPUs each, on the Ray just started or joined. A private local
    Ray never gains a GPU, so a study whose trials need one stops before any trial starts (Tune
    would wait for it forever), with the ways out; a cluster may (its autoscaler adds GPU nodes
    on demand), so there it is only said."""
    if need <= 0:
        return
    import ray  # the driver's heavy import (see init_ray)

    have = float(ray.cluster_resources().get("GPU", 0.0))
    if have >= need:
        return
    if address:
        print(f"[study] {where}: resources.gpus is {need:g} per trial and the Ray cluster at {address} has "
              f"{have:g} GPU now: the trials wait until its autoscaler adds GPU nodes", file=out)
        return
    raise StudyError(
        f"{where}: resources.gpus is {need:g} per trial, but this machine has {have:g} GPU for Ray; nothing "
        "ran and the study is kept. Resume it on a GPU machine or cluster (--address), train its runs "
        "with torch alone (`study export`, then `python -m locattn.offline DIR --out RUNS --device "
        "cuda|cpu`, `study import`: docs/gpu_offline.md), or launch a CPU profile of the spec")


def stop_ray(start: RayStart) -> None:
    """Shut down the Ray that :func:`init_ray` started or joined, then SIGKILL, by PID, what is
    left of a private one (after a second Ctrl-C its agents outlived ``ray.shutdown``)."""
    if not start:
        return
    import ray  # the driver's heavy import (see init_ray)

    ray.shutdown()
    if start.session_dir:
        kill_session_processes(start.session_dir)


def quiet_tune() -> None:
    """Tune's settings for a study driver (read from the environment) and its log filters."""
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # MLflow is the record
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")  # objective only at the end
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Ctrl-C is ours (see Interrupt): Tune's own handler would report an interrupted study as
    # finished and advise ``Tuner.restore``.
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    # Tune's default result loggers are off (MLflow is the record), so the end-of-run
    # dataframe fetch has no files to read: silence that warning only.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    controller = logging.getLogger("ray.tune.execution.tune_controller")
    for log, keep in ((logging.getLogger("ray.tune.tune"), _tune_log_filter), (controller, _trial_failure_filter),
                      (logging.getLogger("mlflow.store.db.utils"), _store_error_filter)):
        if keep not in log.filters:
            log.addFilter(keep)


def _store_error_filter(record: Any) -> bool:
    """Drop MLflow's own traceback of a store failure: the recorder turns the same exception into
    one line naming the store (``study.recording.record_callback.store_failure``) and stops the study."""
    from study.recording.record_callback import store_failure  # study.recording.record_callback imports Ray Tune: only once running

    exc = record.exc_info[1] if record.exc_info else None
    return exc is None or store_failure("", exc) is None


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
    """Drop Tune's advice to call ``Tuner.restore`` (``study resume`` is the way back) and its
    "Stop signal received" (the driver's :class:`Interrupt` says it in one line)."""
    text = str(record.msg)
    return "Tuner.restore" not in text and "Stop signal received" not in text
