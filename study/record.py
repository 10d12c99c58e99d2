"""MLflow is the record: a driver-side Tune callback that writes one MLflow run per seed.

All MLflow writes happen here, in the driver process, batched with ``MlflowClient.log_batch``;
trial processes never talk to MLflow (so a SQLite store is safe). A run is identified by its
deterministic ``locattn.run_key`` tag: at start the callback reads every existing run key of the
experiment once (direct SQL on a SQLite store, ``search_runs`` otherwise) into memory, so
re-launching or resuming continues the same run and never logs an epoch step twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from record import layout, schema
from record.store import run_index, sqlite_path
from study.naming import run_name
from study.search import OpenTrialsScheduler, TrialQueue  # noqa: F401 - see below
from study.spec import hparams_json
from study.trainable import (OBJECTIVE, final_metrics, is_packed, resolve_run_config,
                             run_dir, trial_run_keys)

try:  # the callback must subclass Tune's Callback; study is only used with Ray installed
    from ray.tune import Callback as _TuneCallback
except ImportError:  # pragma: no cover
    _TuneCallback = object  # type: ignore[assignment,misc]

# TrialQueue and OpenTrialsScheduler live in study.search; studies started before they moved
# have them pickled under study.record in tune/, and Tuner.restore looks them up here.

#: Result keys that are bookkeeping, not metrics.
NON_METRIC_KEYS = {"kind", "seed", "run_key", "epoch", "node_id", "resumed_from", "start_time",
                   "seeds_done", "history", "replay", OBJECTIVE}
MAX_TAG_CHARS = 5000


@dataclass
class RunState:
    """What the driver knows about one MLflow trial run."""

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


def package_versions() -> dict[str, str]:
    """Versions of the packages that change results or records."""
    from importlib import metadata

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


# ---------------------------------------------------------------------------- store access


def existing_runs(client: Any, tracking_uri: str, experiment_id: str) -> dict[str, RunState]:
    """run key -> RunState for every active run of the experiment (trial and parent runs)."""
    index = run_index(tracking_uri, experiment_id)
    if index is not None:
        return {key: RunState(run_id=run_id, last_step=step, status=status or schema.STATUS_RUNNING)
                for key, (run_id, step, status) in index.items()}
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
                for metric in schema.EPOCH_METRICS:
                    hist = client.get_metric_history(run.info.run_id, metric)
                    if hist:
                        state.last_step = max(state.last_step, max(m.step for m in hist))
            out[key] = state
        token = page.token
        if not token:
            return out


def study_key(study: str) -> str:
    """Run key of the study's parent run."""
    import hashlib

    return hashlib.sha1(json.dumps(["study", study]).encode()).hexdigest()[:16]


def _chunks(items: list, n: int) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


# ---------------------------------------------------------------------------- the callback


class MlflowRecorder(_TuneCallback):
    """Tune callback: the driver's single, batched, idempotent MLflow writer."""

    def __init__(
        self,
        *,
        tracking_uri: str,
        study: str,
        study_dir: str,
        artifact_location: str,
        parent_tags: Mapping[str, str],
        n_seeds: int,
        total_trials: int,
        epochs_per_trial: int,
        flush_seconds: float = 5.0,
        progress_seconds: float = 10.0,
        out: Any = None,
    ) -> None:
        self.cfg = dict(
            tracking_uri=tracking_uri, study=study, study_dir=str(study_dir),
            artifact_location=artifact_location, parent_tags=dict(parent_tags), n_seeds=n_seeds,
            total_trials=total_trials, epochs_per_trial=epochs_per_trial,
            flush_seconds=flush_seconds, progress_seconds=progress_seconds,
        )
        self._out = out
        self._ready = False

    # Pickled into Tune's tuner state: keep only the configuration.
    def __getstate__(self) -> dict:
        return {"cfg": self.cfg, "_ready": False, "_out": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    # ------------------------------------------------------------------ setup

    def setup(self, **info: Any) -> None:
        self._ensure()

    def _ensure(self) -> None:
        if self._ready:
            return
        from mlflow.tracking import MlflowClient

        c = self.cfg
        with store_lock(c["tracking_uri"]):  # a new SQLite store is created (migrated) once
            self.client = MlflowClient(tracking_uri=c["tracking_uri"])
            self.experiment_id = ensure_experiment(self.client, c["study"], c["artifact_location"])
        self.runs = existing_runs(self.client, c["tracking_uri"], self.experiment_id)
        location = self.client.get_experiment(self.experiment_id).artifact_location
        self.artifact_root = _local_dir(location)
        self.code_version = code_version()
        self.versions = json.dumps(package_versions(), sort_keys=True)
        self.parent_id = self._ensure_parent()
        self.dirty: set[str] = set()  # run keys with buffered metrics
        self.trial_current: dict[str, str] = {}  # Tune trial id -> run key in progress
        self.trial_progress: dict[str, float] = {}  # Tune trial id -> fraction done
        self.t0 = time.time()
        self.last_flush = self.last_progress = time.time()
        self.units_at_start: float | None = None
        self.stats = {"mlflow_seconds": 0.0, "results": 0}
        self._ready = True

    def _ensure_parent(self) -> str:
        c = self.cfg
        key = study_key(c["study"])
        tags = {
            schema.ROLE: schema.ROLE_STUDY,
            schema.STUDY: c["study"],
            schema.RUN_KEY: key,
            schema.CODE_VERSION: self.code_version,
            schema.VERSIONS: self.versions,
            schema.STATUS: schema.STATUS_RUNNING,
            **c["parent_tags"],
        }
        state = self.runs.get(key)
        if state is None:
            run = self.client.create_run(self.experiment_id, tags=tags, run_name=f"study {c['study']}")
            state = RunState(run_id=run.info.run_id)
            self.runs[key] = state
        else:
            self._set_tags(state.run_id, tags)
            self.client.update_run(state.run_id, status="RUNNING")
        return state.run_id

    # ------------------------------------------------------------------ helpers

    def _set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)[:MAX_TAG_CHARS]) for k, v in tags.items()]
        for chunk in _chunks(items, 100):
            self.client.log_batch(run_id, tags=chunk, synchronous=True)

    def _run_for(self, trial: Any, seed: int, key: str) -> RunState:
        """Find (from the in-memory map) or create the MLflow run of one seed of a trial."""
        state = self.runs.get(key)
        if state is not None:
            return state
        from mlflow.entities import Param

        t = trial.config["trial"]
        from study.trainable import trial_hparams

        hp = trial_hparams(trial.config, key)
        cfg = resolve_run_config(trial.config, seed, key)
        from locattn.config import config_to_dict, flatten

        flat = flatten(config_to_dict(cfg))
        tags = {
            schema.ROLE: schema.ROLE_TRIAL,
            schema.STUDY: self.cfg["study"],
            schema.RUN_KEY: key,
            schema.CELL: t["cell"],
            schema.HPARAMS: hparams_json(hp),
            schema.TASK: t["task"],
            schema.VARIANT: t["variant"],
            schema.SEED: str(seed),
            schema.N_SEEDS: str(self.cfg["n_seeds"]),
            schema.STATUS: schema.STATUS_RUNNING,
            schema.CODE_VERSION: self.code_version,
            schema.VERSIONS: self.versions,
            schema.DEV_SCORING: str(flat.get("optim.dev_scoring", "")),
            "mlflow.parentRunId": self.parent_id,
        }
        if is_packed(trial.config):
            tags[schema.PACKED_WITH] = ",".join(str(s) for s in t["seeds"])
        name = run_name(task=t["task"], variant=t["variant"], seed=seed, hparams=hp, cell=t["cell"])
        run = self.client.create_run(self.experiment_id, tags=tags, run_name=name)
        params = [Param(k, json.dumps(v) if isinstance(v, (list, dict)) else str(v)) for k, v in
                  sorted(flat.items())]
        for chunk in _chunks(params, 100):
            self.client.log_batch(run.info.run_id, params=chunk, synchronous=True)
        state = RunState(run_id=run.info.run_id)
        self.runs[key] = state
        return state

    def _current(self, trial: Any) -> list[tuple[int, str]]:
        """(seed, key) of the seeds the trial is training: the first unfinished one, or every
        unfinished one when the trial trains its seeds packed together."""
        todo = []
        for seed, key in trial_run_keys(trial.config):
            state = self.runs.get(key)
            if state is None or state.status != schema.STATUS_FINISHED:
                todo.append((seed, key))
                if not is_packed(trial.config):
                    break
        return todo

    def _flush(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_flush < self.cfg["flush_seconds"]:
            return
        t = time.perf_counter()
        # Only the runs with buffered metrics (not every run of the study: O(1) per flush).
        for key in list(self.dirty):
            state = self.runs[key]
            if state.pending:
                for chunk in _chunks(state.pending, 1000):
                    self.client.log_batch(state.run_id, metrics=chunk, synchronous=True)
                state.pending = []
        self.dirty.clear()
        self.stats["mlflow_seconds"] += time.perf_counter() - t
        self.last_flush = now

    def flush(self) -> None:
        """Write every buffered metric now."""
        if self._ready:
            self._flush(force=True)

    def run_counts(self, expected: int) -> dict[str, int]:
        """True counts of the study's trial runs in the record (not Tune's trial states)."""
        parent = study_key(self.cfg["study"])
        states = [s.status for k, s in self.runs.items() if k != parent]
        done = sum(1 for s in states if s == schema.STATUS_FINISHED)
        failed = sum(1 for s in states if s == schema.STATUS_FAILED)
        return {"runs_expected": expected, "runs_finished": done, "runs_failed": failed,
                "runs_unfinished": max(0, expected - done - failed)}

    def finish_parent(self, *, interrupted: bool) -> None:
        """After ``fit``: the parent run is never left RUNNING by a driver that returns.

        Interrupted: status ``interrupted`` (MLflow KILLED). Otherwise finished (FAILED if a
        run failed) when every expected run is in the record, else ``interrupted`` too: the
        study stopped short and needs a resume.
        """
        self._ensure()
        counts = self.run_counts(int(self.cfg["parent_tags"].get(schema.N_RUNS, 0) or 0))
        complete = counts["runs_unfinished"] == 0
        if interrupted or not complete:
            status, mlflow_status = schema.STATUS_INTERRUPTED, "KILLED"
        else:
            status = schema.STATUS_FINISHED
            mlflow_status = "FAILED" if counts["runs_failed"] else "FINISHED"
        self._set_tags(self.parent_id, {schema.STATUS: status})
        self.client.set_terminated(self.parent_id, mlflow_status)

    # ------------------------------------------------------------------ Tune hooks

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ensure()
        t = time.perf_counter()
        current = self._current(trial)
        for seed, key in current:
            state = self._run_for(trial, seed, key)
            if state.status != schema.STATUS_RUNNING:
                state.status = schema.STATUS_RUNNING
                self._set_tags(state.run_id, {schema.STATUS: schema.STATUS_RUNNING})
                self.client.update_run(state.run_id, status="RUNNING")
        if current:
            self.trial_current[trial.trial_id] = current[0][1]
        self.stats["mlflow_seconds"] += time.perf_counter() - t

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self._ensure()
        from mlflow.entities import Metric

        t = time.perf_counter()
        self.stats["results"] += 1
        kind = result.get("kind")
        key = result.get("run_key")
        if kind not in ("epoch", "seed_final") or key is None:
            return
        seed = int(result["seed"])
        state = self._run_for(trial, seed, key)
        self.trial_current[trial.trial_id] = key
        # (A finished run's tags are final: a restored trial reports its finished seeds again.)
        if state.status != schema.STATUS_FINISHED and result.get("resumed_from", 0) != state.resumed_from:
            state.resumed_from = int(result.get("resumed_from", 0))
            self._set_tags(state.run_id, {schema.RESUMED_FROM: state.resumed_from,
                                          schema.NODE_ID: result.get("node_id", "")})
        ts = int(time.time() * 1000)
        # After a restore the trial replays its epoch history: log the epochs not yet logged.
        epochs = list(result.get("history") or [])
        if kind == "epoch":
            epochs.append(result)
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
        if kind == "epoch":
            self.trial_progress[trial.trial_id] = _progress(trial, seed, int(result["epoch"]), self.cfg)
            self.stats["mlflow_seconds"] += time.perf_counter() - t
            self._flush()
            self._progress_line(trials)
            return
        # seed_final: final metrics, artifacts, status
        if state.status != schema.STATUS_FINISHED:
            from mlflow.entities import RunTag

            self._log_artifacts(state.run_id, key)  # idempotent (same paths)
            finals = [
                Metric(k, float(v), ts, 0)
                for k, v in result.items()
                if k not in NON_METRIC_KEYS and (k in schema.FINAL_METRICS or k.startswith("test."))
                and isinstance(v, (int, float))
            ]
            # This run's buffered epochs, its final metrics and the finished tag in one batch
            # (one transaction): a driver killed around here either wrote all or none, so finals
            # are never logged twice (a resume replays the epochs after the last logged step).
            if len(state.pending) + len(finals) > 900:  # rare: too many for one batch
                self._flush(force=True)
            finals = state.pending + finals
            state.pending = []
            self.dirty.discard(key)
            for chunk in _chunks(finals, 900):
                self.client.log_batch(state.run_id, metrics=chunk,
                                      tags=[RunTag(schema.STATUS, schema.STATUS_FINISHED)],
                                      synchronous=True)
            state.status = schema.STATUS_FINISHED
        self.client.set_terminated(state.run_id, "FINISHED")
        self.trial_progress[trial.trial_id] = 0.0
        self.stats["mlflow_seconds"] += time.perf_counter() - t
        self._progress_line(trials)

    def _log_artifacts(self, run_id: str, key: str) -> None:
        out_dir = run_dir(self.cfg["study_dir"], key)
        files = [out_dir / n for n in layout.RUN_ARTIFACTS if (out_dir / n).is_file()]
        local = self._local_artifacts(run_id)
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

    def _local_artifacts(self, run_id: str) -> Path | None:
        """``<experiment artifact location>/<run id>/artifacts`` if it is a local directory."""
        if self.artifact_root is None:
            return None
        return self.artifact_root / run_id / "artifacts"

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ensure()
        key = self.trial_current.get(trial.trial_id)
        if key and key in self.runs:
            self._set_tags(self.runs[key].run_id, {schema.ERROR: _error_text(trial)[:MAX_TAG_CHARS],
                                                  schema.ATTEMPTS: str(trial.run_metadata.num_failures)})

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ensure()
        self._flush(force=True)
        current = self._current(trial)
        if not current:
            return
        error = _error_text(trial)[:MAX_TAG_CHARS]
        for seed, key in current:
            state = self._run_for(trial, seed, key)
            state.status = schema.STATUS_FAILED
            self._set_tags(state.run_id, {
                schema.STATUS: schema.STATUS_FAILED,
                schema.ERROR: error,
                schema.ATTEMPTS: str(trial.run_metadata.num_failures),
            })
            self.client.set_terminated(state.run_id, "FAILED")
        self._progress_line(trials, force=True)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ensure()
        self._flush(force=True)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._ensure()
        self._flush(force=True)
        from mlflow.entities import Metric

        c = self._trial_counts(trials)
        done, failed = c["done"], c["failed"]
        counts = self.run_counts(int(self.cfg["parent_tags"].get(schema.N_RUNS, 0) or 0))
        ts = int(time.time() * 1000)
        self.client.log_batch(self.parent_id, metrics=[
            Metric("trials_finished", done, ts, 0),
            Metric("trials_failed", failed, ts, 0),
            Metric("runs_finished", counts["runs_finished"], ts, 0),
            Metric("runs_failed", counts["runs_failed"], ts, 0),
            Metric("wall_seconds", time.time() - self.t0, ts, 0),
        ], synchronous=True)
        self._progress_line(trials, force=True)

    # ------------------------------------------------------------------ progress

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if self._ready:
            self._flush()
            self._progress_line(trials)

    def _trial_counts(self, trials: list) -> dict[str, int]:
        """Trials done, running, failed and pending, judged by the record where Tune's state
        overcounts: Tune marks a trial stopped by Ctrl-C TERMINATED too, so a trial is done only
        when every seed of it is finished in the record, and failed only when Tune gave up on it
        and no seed of it is left unrecorded. A stopped, unfinished trial is pending: the next
        ``study resume`` runs it."""
        c = {"done": 0, "running": 0, "failed": 0, "pending": 0}
        for trial in trials:
            states = [self.runs[k].status if k in self.runs else None
                      for _, k in trial_run_keys(trial.config)]
            if trial.status == "RUNNING":
                c["running"] += 1
            elif all(s == schema.STATUS_FINISHED for s in states):
                c["done"] += 1
            elif trial.status == "ERROR" and all(
                    s in (schema.STATUS_FINISHED, schema.STATUS_FAILED) for s in states):
                c["failed"] += 1
            else:
                c["pending"] += 1
        return c

    def _progress_line(self, trials: list, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_progress < self.cfg["progress_seconds"]:
            return
        self.last_progress = now
        c = self._trial_counts(trials)
        total = max(self.cfg["total_trials"], len(trials))
        units = c["done"] + c["failed"] + sum(
            self.trial_progress.get(t.trial_id, 0.0) for t in trials if t.status == "RUNNING"
        )
        if self.units_at_start is None:
            self.units_at_start = units
            self.t_units = now
        rate = (units - self.units_at_start) / max(1e-9, now - self.t_units)
        eta = (total - units) / rate if rate > 0 else float("nan")
        pending = max(c["pending"], total - c["done"] - c["running"] - c["failed"])
        line = (
            f"[study {self.cfg['study']}] {c['done']}/{total} done, {c['running']} running, "
            f"{c['failed']} failed, {pending} pending | elapsed {_hms(now - self.t0)}"
            f" | ETA {_hms(eta)}"
        )
        print(line, file=self._out or sys.stdout, flush=True)


class store_lock:
    """An exclusive file lock beside a SQLite store (``<db>.lock``) while it is opened and
    created: two drivers creating one new store at once would both run its migrations."""

    def __init__(self, tracking_uri: str) -> None:
        self.db = sqlite_path(tracking_uri)
        self.fd: int | None = None

    def __enter__(self) -> "store_lock":
        if self.db is not None:
            import fcntl

            Path(self.db).parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(f"{self.db}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def reconcile(recorder: MlflowRecorder, study_dir: str | Path) -> int:
    """Re-record finished runs that the store lacks, from their run directories.

    A run directory holding ``result.json`` (of the same run identity as its ``trial.json``
    says) is a finished run. If the store has no finished run under its key (the store was
    deleted, replaced, or the study was copied without it), the run is written now: tags,
    params, every epoch of its history, final metrics, artifacts, status. Returns how many.
    """
    from types import SimpleNamespace

    from mlflow.entities import Metric, RunTag

    from study.trainable import finished_result

    recorder._ensure()
    fixed = 0
    runs_root = Path(study_dir) / layout.RUNS_DIR
    if not runs_root.is_dir():
        return 0
    for out_dir in sorted(runs_root.iterdir()):
        key = out_dir.name
        state = recorder.runs.get(key)
        if state is not None and state.status == schema.STATUS_FINISHED:
            continue
        try:
            body = json.loads((out_dir / layout.TRIAL_FILE).read_text())
            config = {"trial": body["trial"], "search": body.get("search") or {}}
            seed = int(body["seed"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (seed, key) not in trial_run_keys(config):
            continue
        result = finished_result(out_dir, resolve_run_config(config, seed, key))
        if result is None:
            continue
        state = recorder._run_for(SimpleNamespace(config=config), seed, key)
        ts = int(time.time() * 1000)
        metrics = [Metric(k, float(v), ts, int(h["epoch"]))
                   for h in (getattr(result, "history", None) or []) if int(h["epoch"]) > state.last_step
                   for k, v in h.items() if k in schema.EPOCH_METRICS and isinstance(v, (int, float))]
        metrics += [Metric(k, float(v), ts, 0) for k, v in final_metrics(out_dir, result).items()
                    if k in schema.FINAL_METRICS or k.startswith("test.")]
        recorder._log_artifacts(state.run_id, key)
        for chunk in _chunks(metrics, 900):
            recorder.client.log_batch(state.run_id, metrics=chunk, synchronous=True)
        recorder.client.log_batch(state.run_id, tags=[RunTag(schema.STATUS, schema.STATUS_FINISHED)],
                                  synchronous=True)
        recorder.client.set_terminated(state.run_id, "FINISHED")
        state.status = schema.STATUS_FINISHED
        state.last_step = max([state.last_step] + [m.step for m in metrics])
        fixed += 1
    return fixed


def _local_dir(uri: str) -> Path | None:
    """The directory of a ``file:`` URI or a plain path; None for remote artifact stores."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None


def ensure_experiment(client: Any, name: str, artifact_location: str) -> str:
    """Experiment id of ``name``, created with ``artifact_location`` if missing."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage != "active":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    return client.create_experiment(name, artifact_location=artifact_location)


def _progress(trial: Any, seed: int, epoch: int, cfg: Mapping[str, Any]) -> float:
    seeds = trial.config["trial"]["seeds"]
    per = max(1, cfg["epochs_per_trial"])
    if is_packed(trial.config):  # the seeds advance together
        return min(1.0, epoch / per)
    index = seeds.index(seed) if seed in seeds else 0
    return min(1.0, (index + min(epoch, per) / per) / len(seeds))


def _error_text(trial: Any) -> str:
    path = getattr(trial, "error_file", None)
    if path and os.path.isfile(path):
        text = Path(path).read_text(errors="replace")
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        # The exception line(s) are at the end; keep the end of the traceback.
        return "\n".join(lines[-25:])
    return "unknown error (no error file)"


def _hms(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
