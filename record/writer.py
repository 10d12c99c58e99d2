"""The MLflow half of the record: one writer per study, in the driver process, batched and
idempotent.

All MLflow writes of a study happen here, in the driver, batched with ``MlflowClient.log_batch``;
trial processes never talk to MLflow (so a SQLite store is safe). A run is identified by its
deterministic ``locattn.run_key`` tag: :meth:`RecordWriter.open` reads every run key of the
experiment once (:func:`record.store.run_index` on a SQLite store, ``search_runs`` otherwise),
so re-launching or resuming continues the same run and never logs an epoch step twice.

What goes into a run (which tags, which params) is the caller's business (``study.recording.record_callback``);
this module knows MLflow's client, the record's status tags and the run folder's artifacts.

The runs: the study's parent run; a run per cell (variant x task, and any further grid axis;
``locattn.role`` ``cell``) carrying the median over seeds of its chosen point's final metrics
(:mod:`record.summary`), rewritten each time a seed of the cell finishes and when the writer
opens (a resume); and the seeds' trial runs, nested under their cell's run. A cell's run is a
top-level run (tagged with its study, not nested under the study's run): MLflow's runs table
fetches the parents of the runs it shows, so cells under the study's run would fold into one
row. A record without cell runs has its trial runs under the study's run; it is read as it is.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, TextIO
from urllib.parse import unquote, urlparse

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from record import layout, schema
from record.store import (StoreError, StudyNotFound, ensure_sqlite_store, local_store, open_store, redact,
                          run_index)
from record.summary import RunCounts, cell_medians, chosen_point

MAX_TAG_CHARS = 5000
"""Tag values are cut to this many characters (MLflow's limit is 8,000)."""
BATCH = 900
"""Metrics per ``log_batch`` call that also carries a tag (MLflow's limit is 1,000 entries)."""

WAIT_NOTICE_SECONDS = 60.0
"""While one store call has not returned (a server down: MLflow's REST client retries for
minutes), the driver says so on stderr once per this many seconds."""


class StoreWaits:
    """The store calls in flight and the one daemon thread that watches them all
    (:func:`waiting_notice`): a thread started per call cost about 0.5 ms of every call."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.calls: dict[object, list] = {}
        """token -> [what, stream, start, next notice, every] (monotonic seconds)."""
        self.thread: threading.Thread | None = None

    def add(self, token: object, what: str, stream: TextIO | None) -> None:
        """Watch one call from now, a notice every :data:`WAIT_NOTICE_SECONDS` (as it is now)."""
        now, every = time.monotonic(), WAIT_NOTICE_SECONDS
        with self.cond:
            self.calls[token] = [what, stream, now, now + every, every]
            if self.thread is None or not self.thread.is_alive():  # none yet, or a forked child
                self.thread = threading.Thread(target=self.watch, name="store-wait", daemon=True)
                self.thread.start()
            self.cond.notify()

    def remove(self, token: object) -> None:
        """The call returned (or raised): no more notices for it."""
        with self.cond:
            self.calls.pop(token, None)

    def watch(self) -> None:
        """The watcher's loop: sleep until the next notice is due, print the due ones (outside
        the lock, so that a slow stderr never holds a store call up)."""
        while True:
            with self.cond:
                now = time.monotonic()
                due = []
                for call in self.calls.values():
                    if call[3] <= now:
                        due.append((call[0], call[1], now - call[2]))
                        call[3] = now + call[4]
                if not due:
                    nxt = min((call[3] for call in self.calls.values()), default=None)
                    self.cond.wait(None if nxt is None else nxt - now)
                    continue
            for what, stream, waited in due:
                print(f"{what}: no answer for {waited:.0f} s; still retrying "
                      "(MLflow's client retries for minutes; Ctrl-C stops, the study is kept)",
                      file=stream or sys.stderr, flush=True)


STORE_WAITS = StoreWaits()
"""The process's watcher of store calls (a forked child starts afresh: its lock may be held)."""
os.register_at_fork(after_in_child=STORE_WAITS.__init__)


@contextmanager
def waiting_notice(what: str, stream: TextIO | None = None) -> Iterator[None]:
    """Around one blocking store call: every :data:`WAIT_NOTICE_SECONDS` it has not returned,
    one line on ``stream`` (stderr) naming ``what`` and how long it has waited
    (:data:`STORE_WAITS` watches)."""
    token = object()
    STORE_WAITS.add(token, what, stream)
    try:
        yield
    finally:
        STORE_WAITS.remove(token)


class PatientClient:
    """An ``MlflowClient`` whose every call says, once per :data:`WAIT_NOTICE_SECONDS`, that it
    is still waiting for the store (:func:`waiting_notice`); otherwise the client itself."""

    def __init__(self, client: MlflowClient, what: str) -> None:
        self.client, self.what = client, what

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with waiting_notice(self.what):
                return attr(*args, **kwargs)
        return call


@dataclass
class RunState:
    """What the driver knows about one MLflow run."""

    run_id: str
    """MLflow run id."""
    last_step: int = 0
    """Last epoch step logged (metrics at or below it are not logged again)."""
    status: str = schema.STATUS_RUNNING
    """``locattn.status`` tag value."""
    resumed_from: int = -1
    """Last ``resumed_from`` tag written in this session (-1: none)."""
    pending: list = field(default_factory=list)
    """Buffered ``mlflow.entities.Metric`` objects."""
    params_complete: bool = False
    """Whether every param of the run is known to be in the store: true for a run this driver
    created; a run of an earlier driver is checked once (:meth:`RecordWriter.complete_params`)."""
    finals_logged: set = field(default_factory=set)
    """Final metric keys the store already holds for a run not tagged finished: MLflow's
    ``log_batch`` commits its metrics and its tags in separate transactions, so a driver killed
    between them left the finals without the tag. They are not logged again."""


def same_value(a: float, b: float) -> bool:
    """Equal metric values (NaN equals NaN)."""
    return a == b or (a != a and b != b)


def unlogged(held: Mapping[str, tuple[int, float]], values: Mapping[str, float], step: int) -> list:
    """The ``Metric`` rows to log so that a run's latest value of each key is ``values[key]``
    with at most one row per (run, key, step): a key whose latest value is already this one is
    skipped (a resume that changes nothing writes nothing); a changed value goes at ``step``,
    or after the held row's step when that is not earlier."""
    ts = int(time.time() * 1000)
    out = []
    for key, value in values.items():
        value = float(value)
        old = held.get(key)
        if old is not None and same_value(old[1], value):
            continue
        out.append(Metric(key, value, ts, step if old is None or old[0] < step else old[0] + 1))
    return out


# ---------------------------------------------------------------------------- provenance


def code_version(repo: str | Path | None = None) -> str:
    """``<git sha>`` or ``<git sha>+dirty``; ``unknown`` outside a git checkout."""
    repo = Path(repo or Path(__file__).resolve().parent.parent)
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha or "unknown") + ("+dirty" if dirty and sha else "")


#: The package code a run's numbers rest on: a working tree that differs from its commit here is
#: refused by ``study launch|resume`` unless ``--allow-dirty``.
PACKAGE_DIRS = ("locattn", "study", "record", "reports")


def code_diff(repo: str | Path | None = None) -> str:
    """``git diff HEAD`` of :data:`PACKAGE_DIRS` in the checkout ``repo`` (this package's by
    default), then each untracked file there in full; empty when that code is its commit's, or
    outside a git checkout."""
    repo = Path(repo or Path(__file__).resolve().parent.parent)
    git = ["git", "-C", str(repo)]
    try:
        diff = subprocess.run([*git, "diff", "HEAD", "--", *PACKAGE_DIRS], capture_output=True,
                              text=True, timeout=30).stdout
        new = subprocess.run([*git, "ls-files", "--others", "--exclude-standard", "--", *PACKAGE_DIRS],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ""
    for name in new:
        try:
            diff += f"\n--- /dev/null\n+++ b/{name} (untracked)\n" + (repo / name).read_text(errors="replace")
        except OSError:
            diff += f"\n+++ b/{name} (untracked, unreadable)\n"
    return diff


def changed_files(diff: str) -> list[str]:
    """The files a :func:`code_diff` names, in order."""
    out = []
    for line in diff.splitlines():
        if line.startswith("+++ b/"):
            out.append(line[6:].split(" (untracked")[0])
    return list(dict.fromkeys(out))


def package_versions() -> dict[str, str]:
    """Versions of the packages that change results or records."""
    out = {"python": sys.version.split()[0]}
    for name in ("torch", "numpy", "ray", "mlflow", "optuna", "locattn"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            try:
                out[name] = getattr(__import__(name), "__version__", "unknown")
            except ImportError:
                continue
    return out


def study_key(study: str) -> str:
    """Run key of the study's parent run."""
    return hashlib.sha1(json.dumps(["study", study]).encode()).hexdigest()[:16]


CELL_KEY_PREFIX = "cell-"


def cell_key(study: str, cell: str) -> str:
    """Run key of a cell's run: ``cell-<hash>`` (trial run keys are bare hashes)."""
    return CELL_KEY_PREFIX + hashlib.sha1(json.dumps(["cell", study, cell]).encode()).hexdigest()[:16]


def is_cell_key(key: str) -> bool:
    """Whether ``key`` is a cell run's key (:func:`cell_key`)."""
    return key.startswith(CELL_KEY_PREFIX)


# ---------------------------------------------------------------------------- store access


def existing_runs(client: MlflowClient | PatientClient | None, tracking_uri: str,
                  experiment_id: str) -> dict[str, RunState]:
    """run key -> RunState for every active run of the experiment (trial and parent runs).
    ``client`` is asked only where :func:`record.store.run_index` cannot answer (not a SQLite
    store): None is enough for a SQLite store."""
    index = run_index(tracking_uri, experiment_id)
    if index is not None:
        return {key: RunState(run_id=run.run_id, last_step=run.last_step,
                              status=run.status or schema.STATUS_RUNNING,
                              finals_logged=set(run.metric_keys) if run.status != schema.STATUS_FINISHED else set())
                for key, run in index.items()}
    out: dict[str, RunState] = {}
    token = None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string="", max_results=1000, page_token=token
        )
        for run in page:
            key = run.data.tags.get(schema.RUN_KEY)
            if key is None:
                continue
            state = RunState(run_id=run.info.run_id,
                             status=run.data.tags.get(schema.STATUS, schema.STATUS_RUNNING))
            if state.status != schema.STATUS_FINISHED:
                state.finals_logged = {k for k in run.data.metrics if k not in schema.EPOCH_METRICS}
                for metric in schema.EPOCH_METRICS:
                    hist = client.get_metric_history(run.info.run_id, metric)
                    if hist:
                        state.last_step = max(state.last_step, max(m.step for m in hist))
            out[key] = state
        token = page.token
        if not token:
            return out


def ensure_experiment(client: MlflowClient | PatientClient, name: str, artifact_location: str | None) -> str:
    """Experiment id of ``name``, created with ``artifact_location`` if missing (None: the
    server's default artifact root)."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage != "active":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    return client.create_experiment(name, artifact_location=artifact_location)


class store_lock:
    """An exclusive file lock beside a SQLite store (``<db>.lock``) while it is opened and
    created: two drivers creating one new store at once would both run its migrations."""

    def __init__(self, tracking_uri: str) -> None:
        self.db = local_store(tracking_uri)
        self.fd: int | None = None
        self.note: str | None = None  # what creating the store did, when worth a line

    def __enter__(self) -> "store_lock":
        if self.db is not None:
            self.db.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(f"{self.db}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            self.note = ensure_sqlite_store(self.db)  # built aside: a kill leaves no half store
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def local_dir(uri: str) -> Path | None:
    """The directory of a ``file:`` URI or a plain path; None for remote artifact stores."""
    parsed = urlparse(uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None


def param_items(params: Mapping[str, object]) -> list[Param]:
    """MLflow params of a run's flat config (dotted key -> value: lists and dicts as JSON, any
    other value as ``str``), in key order."""
    return [Param(k, json.dumps(v) if isinstance(v, (list, dict)) else str(v)) for k, v in sorted(params.items())]


def chunks(items: list, n: int) -> Iterable[list]:
    """``items`` in slices of at most ``n``."""
    for i in range(0, len(items), n):
        yield items[i:i + n]


# ---------------------------------------------------------------------------- the writer


class RecordWriter:
    """The study's MLflow runs: a parent run for the study, one run per cell and one run per
    trial seed, each found by its run key. Call :meth:`open` first (it is idempotent).
    ``cell_name(task, variant, cell)`` names a cell's run in the UI."""

    def __init__(self, *, tracking_uri: str, study: str, artifact_location: str | None,
                 parent_tags: Mapping[str, str], flush_seconds: float = 5.0,
                 cell_name: Callable[[str, str, str], str] | None = None) -> None:
        self.tracking_uri = tracking_uri
        self.cell_name = cell_name
        self.study = study
        self.artifact_location = artifact_location
        self.parent_tags = dict(parent_tags)
        self.flush_seconds = flush_seconds
        self.ready = False
        self.runs: dict[str, RunState] = {}
        """run key -> what the driver knows of that run (every run of the study in the store)."""
        self.stats = {"mlflow_seconds": 0.0}
        """Seconds spent in MLflow calls by the buffered writes."""

    def open(self) -> "RecordWriter":
        """Connect, create the experiment and the parent run if missing, read every run key."""
        if self.ready:
            return self
        with store_lock(self.tracking_uri) as lock:  # a new SQLite store is created (migrated) once
            self.store = open_store(self.tracking_uri, writing=True)  # the schema this MLflow writes
            what = f"[study {self.study}] the store {redact(self.tracking_uri)}"
            with waiting_notice(what):  # a database store's engine: MLflow retries it for ~100 s
                self.client = PatientClient(MlflowClient(tracking_uri=self.tracking_uri), what)
            self.experiment_id = ensure_experiment(self.client, self.study, self.artifact_location)
        if lock.note:
            print(f"[study {self.study}] {lock.note}", flush=True)
        for run_id in self.store.superseded_runs(self.experiment_id):
            # One active run per identity: a restored experiment revived a run deleted in the
            # UI whose seed was recorded again since. The superseded one goes back to deleted.
            self.client.delete_run(run_id)
            print(f"[study {self.study}] run {run_id} deleted again: another run of its identity "
                  "was recorded after it was deleted (restored with its experiment)", flush=True)
        self.runs = existing_runs(self.client, self.tracking_uri, self.experiment_id)
        location = self.client.get_experiment(self.experiment_id).artifact_location
        self.artifact_root = local_dir(location)
        self.code_version = code_version()
        self.code_diff = code_diff() if self.code_version.endswith("+dirty") else ""
        self.versions = json.dumps(package_versions(), sort_keys=True)
        self.dirty: set[str] = set()  # run keys with buffered metrics
        self.t_open = self.last_flush = time.time()
        self.parent_id = self._open_parent()
        self.ready = True
        self.update_cells()  # a resume: the cells' medians from what the record holds
        return self

    def seconds_open(self) -> float:
        """Seconds since :meth:`open`."""
        return time.time() - self.t_open

    def _open_parent(self) -> str:
        key = study_key(self.study)
        tags = {
            schema.ROLE: schema.ROLE_STUDY,
            schema.STUDY: self.study,
            schema.RUN_KEY: key,
            schema.CODE_VERSION: self.code_version,
            schema.VERSIONS: self.versions,
            schema.STATUS: schema.STATUS_RUNNING,
            **self.parent_tags,
        }
        state = self.runs.get(key)
        if state is None:
            run = self.client.create_run(self.experiment_id, tags=tags, run_name=f"study {self.study}")
            state = RunState(run_id=run.info.run_id)
            self.runs[key] = state
        else:
            self.set_tags(state.run_id, tags)
            self.client.update_run(state.run_id, status="RUNNING")
        return state.run_id

    # ------------------------------------------------------------------ runs

    def set_tags(self, run_id: str, tags: Mapping[str, object]) -> None:
        """Write tags now (values as strings, cut to :data:`MAX_TAG_CHARS`)."""
        items = [RunTag(k, str(v)[:MAX_TAG_CHARS]) for k, v in tags.items()]
        for chunk in chunks(items, 100):
            self.client.log_batch(run_id, tags=chunk, synchronous=True)

    def create_run(self, key: str, *, tags: Mapping[str, str], params: Mapping[str, object],
                   name: str) -> RunState:
        """A new run under ``key`` with these tags, params (lists and dicts as JSON) and UI name."""
        if self.code_diff:  # study launch|resume --allow-dirty: the run says so, and keeps the diff
            tags = {**tags, schema.DIRTY: "true"}
        run = self.client.create_run(self.experiment_id, tags=dict(tags), run_name=name)
        for chunk in chunks(param_items(params), 100):
            self.client.log_batch(run.info.run_id, params=chunk, synchronous=True)
        if self.code_diff:
            self.client.log_text(run.info.run_id, self.code_diff, layout.CODE_DIFF)
        state = RunState(run_id=run.info.run_id, params_complete=True)
        self.runs[key] = state
        return state

    def complete_params(self, state: RunState, params: Mapping[str, object]) -> int:
        """Log the params that a run of an earlier driver lacks: a driver killed between creating
        a run and logging its params (in chunks of 100) left it without some, and reports read
        them (``task.t0``, ...). Params it holds are left as they are. Returns how many were
        logged."""
        if state.params_complete:
            return 0
        have = {schema.RENAMED_PARAMS.get(k, k) for k in self.client.get_run(state.run_id).data.params}
        items = [p for p in param_items(params) if p.key not in have]  # (a former name counts)
        for chunk in chunks(items, 100):
            self.client.log_batch(state.run_id, params=chunk, synchronous=True)
        state.params_complete = True
        return len(items)

    def cell_run(self, cell: str, task: str, variant: str) -> RunState:
        """The run of ``cell`` (created, top-level, if missing): its seeds' runs go under it
        (``mlflow.parentRunId``)."""
        key = cell_key(self.study, cell)
        state = self.runs.get(key)
        if state is None:
            tags = {schema.ROLE: schema.ROLE_CELL, schema.STUDY: self.study, schema.RUN_KEY: key,
                    schema.CELL: cell, schema.TASK: task, schema.VARIANT: variant}
            name = self.cell_name(task, variant, cell) if self.cell_name else cell
            run = self.client.create_run(self.experiment_id, tags=tags, run_name=name)
            state = self.runs[key] = RunState(run_id=run.info.run_id)
        return state

    def update_cells(self, cells: Iterable[str] | None = None) -> int:
        """Log on each cell's run (``cells``, or every cell with a finished run) the median over
        its chosen point's finished seeds of each final metric, and the chosen point as its
        ``locattn.hparams`` tag (step: the cell's finished runs, so the latest is the newest).
        Returns how many cells were written."""
        wanted = None if cells is None else set(cells)
        try:
            rows = self.store.read_rows(self.study,
                                        tag_keys=(schema.ROLE, schema.CELL, schema.STATUS, schema.HPARAMS,
                                                  schema.TASK, schema.VARIANT),
                                        metric_keys=schema.FINAL_METRICS, metric_prefixes=("test.",))
        except (StudyNotFound, StoreError):  # a file store (tests) or a store not there yet
            return 0
        tags: dict[str, dict[str, str]] = {}
        for run_id, k, v in rows.tags:
            tags.setdefault(run_id, {})[k] = v
        metrics: dict[str, dict[str, float]] = {}
        for run_id, k, v in rows.metrics:
            metrics.setdefault(run_id, {})[k] = v
        points: dict[str, dict[str, list[dict[str, float]]]] = {}
        where: dict[str, tuple[str, str]] = {}
        for run_id, t in sorted(tags.items()):
            cell = t.get(schema.CELL)
            if (t.get(schema.ROLE) != schema.ROLE_TRIAL or cell is None
                    or t.get(schema.STATUS) != schema.STATUS_FINISHED
                    or (wanted is not None and cell not in wanted)):
                continue
            points.setdefault(cell, {}).setdefault(t.get(schema.HPARAMS) or "{}", []).append(
                metrics.get(run_id, {}))
            where[cell] = (t.get(schema.TASK, ""), t.get(schema.VARIANT, ""))
        states = {cell: self.cell_run(cell, *where[cell]) for cell in points}
        held = self.held_metrics([s.run_id for s in states.values()])
        for cell, by_point in points.items():
            state = states[cell]
            hparams = chosen_point(by_point)
            step = sum(len(runs) for runs in by_point.values())
            medians = unlogged(held[state.run_id], cell_medians(by_point[hparams]), step)
            if tags.get(state.run_id, {}).get(schema.HPARAMS) != hparams[:MAX_TAG_CHARS]:
                self.set_tags(state.run_id, {schema.HPARAMS: hparams})
            for chunk in chunks(medians, BATCH):
                self.client.log_batch(state.run_id, metrics=chunk, synchronous=True)
        return len(points)

    def held_metrics(self, run_ids: list[str]) -> dict[str, dict[str, tuple[int, float]]]:
        """run id -> key -> (step, value) of the latest row the store holds (empty for a store
        that cannot be read by SQL: a file store in tests)."""
        try:
            return self.store.latest_metrics(run_ids)
        except StoreError:
            return {r: {} for r in run_ids}

    def mark_running(self, state: RunState) -> None:
        """A run starts (again): status ``running``."""
        if state.status != schema.STATUS_RUNNING:
            state.status = schema.STATUS_RUNNING
            self.set_tags(state.run_id, {schema.STATUS: schema.STATUS_RUNNING})
            self.client.update_run(state.run_id, status="RUNNING")

    def buffer_epochs(self, key: str, epochs: Iterable[Mapping[str, Any]]) -> None:
        """Buffer the epoch metrics of ``key`` not yet logged (a restored trial replays its
        history: epochs at or below the last logged step are skipped)."""
        state = self.runs[key]
        ts = int(time.time() * 1000)
        for values in sorted(epochs, key=lambda h: int(h["epoch"])):
            epoch = int(values["epoch"])
            if epoch > state.last_step:
                state.pending.extend(
                    Metric(k, float(v), ts, epoch)
                    for k, v in values.items()
                    if k in schema.EPOCH_METRICS and isinstance(v, (int, float))
                )
                state.last_step = epoch
                self.dirty.add(key)

    def flush(self, force: bool = True) -> None:
        """Write the buffered metrics (unless ``force`` is off and the last flush was less than
        ``flush_seconds`` ago)."""
        if not self.ready:
            return
        now = time.time()
        if not force and now - self.last_flush < self.flush_seconds:
            return
        t = time.perf_counter()
        # Only the runs with buffered metrics (not every run of the study: O(1) per flush).
        for key in list(self.dirty):
            state = self.runs[key]
            if state.pending:
                for chunk in chunks(state.pending, 1000):
                    self.client.log_batch(state.run_id, metrics=chunk, synchronous=True)
                state.pending = []
        self.dirty.clear()
        self.stats["mlflow_seconds"] += time.perf_counter() - t
        self.last_flush = now

    def finish(self, key: str, finals: Mapping[str, float], run_dir: Path) -> None:
        """A run is finished: its artifacts, its buffered epochs, its final metrics and the
        ``finished`` tag. A finished run's record is final: calling this again only re-marks it
        terminated."""
        state = self.runs[key]
        if state.status != schema.STATUS_FINISHED:
            # MLflow's status first: a driver killed after it and before the batch leaves a run
            # that a resume trains (judged by the tag) and finishes again; the other order left a
            # run tagged finished, which a resume skips, RUNNING in the UI for good.
            self.client.set_terminated(state.run_id, "FINISHED")
            self.log_artifacts(state.run_id, run_dir)  # idempotent (same paths)
            ts = int(time.time() * 1000)
            metrics = [Metric(k, float(v), ts, 0) for k, v in finals.items() if k not in state.finals_logged]
            # The buffered epochs, the final metrics and the finished tag in one batch. MLflow
            # commits a batch's metrics, then its tags, in two transactions: a driver killed
            # between them left the metrics without the tag, and a resume finishes the run again
            # with only the finals the store lacks (RunState.finals_logged); a resume replays
            # only the epochs after the last logged step. Either way each is logged once.
            if len(state.pending) + len(metrics) > BATCH:  # rare: too many for one batch
                self.flush()
            metrics = state.pending + metrics
            state.pending = []
            self.dirty.discard(key)
            for chunk in chunks(metrics, BATCH) if metrics else [[]]:  # (the tag even with no metric left)
                self.client.log_batch(state.run_id, metrics=chunk,
                                      tags=[RunTag(schema.STATUS, schema.STATUS_FINISHED)],
                                      synchronous=True)
            state.status = schema.STATUS_FINISHED
            state.finals_logged = set()
        else:
            self.client.set_terminated(state.run_id, "FINISHED")

    def fail(self, key: str, error: str, attempts: int) -> None:
        """A run failed for good: status ``failed``, the error text and the attempts made."""
        state = self.runs[key]
        state.status = schema.STATUS_FAILED
        self.set_tags(state.run_id, {
            schema.STATUS: schema.STATUS_FAILED,
            schema.ERROR: error[:MAX_TAG_CHARS],
            schema.ATTEMPTS: str(attempts),
        })
        self.client.set_terminated(state.run_id, "FAILED")

    def log_artifacts(self, run_id: str, run_dir: Path) -> None:
        """Copy the run folder's artifact files (:data:`record.layout.RUN_ARTIFACTS`) into the run."""
        files = [run_dir / n for n in layout.RUN_ARTIFACTS if (run_dir / n).is_file()]
        local = self.artifact_root / run_id / "artifacts" if self.artifact_root is not None else None
        for path in files:
            if local is None:
                self.client.log_artifact(run_id, str(path))
                continue
            # A local artifact store is a directory per run: copy the file there directly.
            # (``log_artifact`` first loads the whole run, params, tags and metrics, to find
            # that directory: ~0.1 s per call, a third of the driver's cost per trial.)
            local.mkdir(parents=True, exist_ok=True)
            tmp = local / f".{path.name}.tmp"
            shutil.copyfile(path, tmp)
            os.replace(tmp, local / path.name)

    # ------------------------------------------------------------------ the study's parent run

    def run_counts(self, expected: int) -> RunCounts:
        """True counts of the study's trial runs in the record (not Tune's trial states)."""
        parent = study_key(self.study)
        states = [s.status for k, s in self.runs.items() if k != parent and not is_cell_key(k)]
        done = sum(1 for s in states if s == schema.STATUS_FINISHED)
        failed = sum(1 for s in states if s == schema.STATUS_FAILED)
        return RunCounts(expected=expected, finished=done, failed=failed,
                         unfinished=max(0, expected - done - failed))

    def expected_runs(self) -> int:
        """Trial runs the study expects (its parent's ``locattn.n_runs`` tag)."""
        return int(self.parent_tags.get(schema.N_RUNS, 0) or 0)

    def log_parent_metrics(self, metrics: Mapping[str, float]) -> None:
        """Summary metrics on the parent run (step 0, or the next step when a value changed):
        a value the parent already holds is not logged again (:func:`unlogged`)."""
        new = unlogged(self.held_metrics([self.parent_id])[self.parent_id], metrics, 0)
        if new:
            self.client.log_batch(self.parent_id, metrics=new, synchronous=True)

    def finish_parent(self, *, interrupted: bool) -> None:
        """After ``fit``: the parent run is never left RUNNING by a driver that returns.

        Interrupted: status ``interrupted`` (MLflow KILLED). Otherwise finished (FAILED if a
        run failed) when every expected run is in the record, else ``interrupted`` too: the
        study stopped short and needs a resume.
        """
        self.open()
        counts = self.run_counts(self.expected_runs())
        if interrupted or counts.unfinished:
            status, mlflow_status = schema.STATUS_INTERRUPTED, "KILLED"
        else:
            status = schema.STATUS_FINISHED
            mlflow_status = "FAILED" if counts.failed else "FINISHED"
        self.set_tags(self.parent_id, {schema.STATUS: status})
        self.client.set_terminated(self.parent_id, mlflow_status)
        for key, state in self.runs.items():  # the cells' runs end with the study's, tagged alike
            if is_cell_key(key):
                self.set_tags(state.run_id, {schema.STATUS: status})
                self.client.set_terminated(state.run_id, mlflow_status)
        if status == schema.STATUS_INTERRUPTED:  # its trial runs stopped with it: none left RUNNING
            for key, state in self.runs.items():
                if (state.run_id != self.parent_id and not is_cell_key(key)
                        and state.status == schema.STATUS_RUNNING):
                    self.set_tags(state.run_id, {schema.STATUS: schema.STATUS_INTERRUPTED})
                    self.client.set_terminated(state.run_id, "KILLED")
                    state.status = schema.STATUS_INTERRUPTED
