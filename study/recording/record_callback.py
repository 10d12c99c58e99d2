"""MLflow is the record: a driver-side Tune callback that records one MLflow run per seed.

:class:`RecordCallback` turns Tune's events into the record's runs: what a trial's runs are
called, tagged and parametrised, and when they start, finish or fail. The writing itself,
batched and idempotent, is :class:`record.writer.RecordWriter`'s. :func:`reconcile` re-records
finished runs a store lost, from their run folders.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from locattn.config import config_to_dict, flatten
from record import layout, schema
from record.store import FULL, GONE, READ_ONLY, StoreError, is_store_error, redact, sqlite_path, store_condition
from record.summary import seed_percents
from record.writer import MAX_TAG_CHARS, RecordWriter, RunState
from study.recording.folder import StudyError, one_line_os_error
from study.recording.naming import cell_name, run_name
from study.spec.plugins import config_plugins
from study.recording.runs import run_folders
from study.spec import hparams_json
from study.trial.trainable import NOTICES, OBJECTIVE, TrialDescriptor, final_metrics, finished_result, run_dir

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

try:  # the callback must subclass Tune's Callback; study is only used with Ray installed
    from ray.tune import Callback as _TuneCallback
except ImportError:  # pragma: no cover
    _TuneCallback = object  # type: ignore[assignment,misc]

#: Result keys that are bookkeeping, not metrics.
NON_METRIC_KEYS = {"kind", "seed", "run_key", "epoch", "node_id", "resumed_from", "start_time",
                   "seeds_done", "history", "replay", NOTICES, OBJECTIVE}


def is_final_metric(key: str, value: Any) -> bool:
    """Whether a ``seed_final`` result entry is a final metric of the run."""
    return (key not in NON_METRIC_KEYS and (key in schema.FINAL_METRICS or key.startswith("test."))
            and isinstance(value, (int, float)))


#: What :func:`store_failure` says of each condition :func:`record.store.store_condition` finds.
FAILURE_WHY = {FULL: "no space left on its device", READ_ONLY: "it became read-only",
               GONE: "it is gone: deleted or moved"}


def store_failure(where: str, exc: BaseException) -> str | None:
    """One line for an exception of the store at ``where`` (its file, or its redacted URI), or
    None when ``exc`` is not a store failure (a bug, which keeps its traceback)."""
    if not is_store_error(exc):
        return None
    why = FAILURE_WHY.get(store_condition(exc) or "")
    if why is None:
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return f"the store {where} failed mid-run ({why})"


def unwritable(exc: BaseException) -> bool:
    """Whether a store's exception says its file system or file refuses writes (read-only, no
    permission, full): the store's condition, not a bug."""
    return store_condition(exc) in (FULL, READ_ONLY)


def _guarded(hook: Any) -> Any:
    """A Tune hook of :class:`RecordCallback` that turns a store failure into one line and a
    graceful stop (Tune's SIGUSR1, as Ctrl-C: the trials stay resumable), instead of a traceback
    per hook call for the rest of the run."""
    @functools.wraps(hook)
    def wrapper(self: "RecordCallback", *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "failure", None) is not None:
            return None
        try:
            return hook(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - classified: only store failures are caught
            line = self.failure_line(exc)
            if line is None:
                raise
            self.failure = line  # said once, by the driver, when Tune has stopped
            if callable(signal.getsignal(signal.SIGUSR1)):  # Tune's handler, installed during fit
                os.kill(os.getpid(), signal.SIGUSR1)
            return None
    return wrapper


class RecordCallback(_TuneCallback):
    """Tune callback: the study's trial runs in MLflow, through one :class:`RecordWriter`."""

    def __init__(self, *, tracking_uri: str, study: str, study_dir: str, artifact_location: str | None,
                 parent_tags: Mapping[str, str], n_seeds: int, flush_seconds: float = 5.0) -> None:
        self.settings = dict(tracking_uri=tracking_uri, study=study, study_dir=str(study_dir),
                             artifact_location=artifact_location, parent_tags=dict(parent_tags),
                             n_seeds=n_seeds, flush_seconds=flush_seconds)
        self.study_dir = str(study_dir)
        self.n_seeds = n_seeds
        self.writer = RecordWriter(tracking_uri=tracking_uri, study=study,
                                   artifact_location=artifact_location, parent_tags=parent_tags,
                                   flush_seconds=flush_seconds, cell_name=cell_name)
        self.trial_current: dict[str, str] = {}  # Tune trial id -> run key in progress
        self.failure: str | None = None
        """One line saying how the store failed mid-run (:func:`store_failure`), or None."""
        self.store_id: tuple[int, int] | None = None
        """(device, inode) of a SQLite store's file once open (:meth:`check_store`)."""

    # Pickled into Tune's tuner state (and replaced on restore): keep only the settings.
    def __getstate__(self) -> dict:
        return {"settings": self.settings}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def open(self) -> "RecordCallback":
        """Open the record (idempotent): the experiment, the parent run, every run key.

        A SQLite store that cannot be written (a read-only or full file system, no permission)
        is a :class:`StudyError` naming the store's file, not the study folder."""
        try:
            self.writer.open()
        except StoreError as exc:  # a schema this MLflow does not write (record.store.check_schema)
            raise StudyError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - only an unwritable store is turned into one line
            db = sqlite_path(self.settings["tracking_uri"])
            if db is None or getattr(self, "store_id", None) is not None or not unwritable(exc):
                raise
            raise StudyError(one_line_os_error(exc, db, Path(self.study_dir))) from None
        if getattr(self, "store_id", None) is None:  # (a recorder Tune unpickled has settings only)
            db = sqlite_path(self.settings["tracking_uri"])
            try:
                st = os.stat(db) if db is not None else None
            except OSError:
                st = None
            self.store_id = (st.st_dev, st.st_ino) if st is not None else None
        return self

    def check_store(self) -> None:
        """Raise ``FileNotFoundError`` when a SQLite store's file was deleted or replaced since it
        was opened: SQLite goes on writing to the open, unlinked file without an error, and the
        study would end "finished" with its record nowhere."""
        if getattr(self, "store_id", None) is None:
            return
        db = sqlite_path(self.settings["tracking_uri"])
        try:
            st = os.stat(db)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "the store's file does not exist", str(db)) from None
        if (st.st_dev, st.st_ino) != self.store_id:
            raise FileNotFoundError(errno.ENOENT, "the store's file was replaced (it does not exist "
                                                  "as opened)", str(db))

    def failure_line(self, exc: BaseException) -> str | None:
        """One line for a store failure ``exc`` (:func:`store_failure`), naming the missing file
        as the cause where the store's file is gone; None for any other exception (a bug)."""
        db = sqlite_path(self.settings["tracking_uri"])
        where = str(db) if db is not None else redact(self.settings["tracking_uri"])
        line = store_failure(where, exc)
        if line is None or isinstance(exc, FileNotFoundError):
            return line
        try:  # SQLite answers a write to a deleted or moved file with "readonly" (DBMOVED):
            self.check_store()  # the missing file is the cause, said as such
        except FileNotFoundError as gone:
            line = store_failure(where, gone)
        return line

    @property
    def runs(self) -> dict[str, RunState]:
        """run key -> :class:`RunState` of every run of the study in the store."""
        return self.writer.runs

    def setup(self, **info: Any) -> None:
        self.open()

    # ------------------------------------------------------------------ runs of a trial

    def run_for(self, t: TrialDescriptor, seed: int, key: str) -> RunState:
        """Find (in memory) or create the MLflow run of one seed of a trial. An unfinished run
        of an earlier driver first gets the params it lacks (that driver may have died between
        creating it and logging them)."""
        state = self.writer.runs.get(key)
        if state is not None and (state.params_complete or state.status == schema.STATUS_FINISHED):
            return state
        t = t.alone(key)  # a run of an ablation pack is recorded as the run of its own cell
        hp = t.member(key).hparams
        flat = flatten(config_to_dict(t.run_config(key)))
        w = self.writer
        if state is not None:
            w.complete_params(state, flat)
            return state
        tags = {
            schema.ROLE: schema.ROLE_TRIAL,
            schema.STUDY: w.study,
            schema.RUN_KEY: key,
            schema.CELL: t.cell,
            schema.HPARAMS: hparams_json(hp),
            schema.TASK: t.task,
            schema.VARIANT: t.variant,
            schema.SEED: str(seed),
            schema.N_SEEDS: str(self.n_seeds),
            schema.STATUS: schema.STATUS_RUNNING,
            schema.CODE_VERSION: w.code_version,
            schema.VERSIONS: w.versions,
            schema.DEV_SCORING: str(flat.get("optim.dev_scoring", "")),
            "mlflow.parentRunId": w.cell_run(t.cell, t.task, t.variant).run_id,
        }
        if t.packed:
            tags[schema.PACKED_WITH] = ",".join(str(s) for s in t.seeds)
        if t.packed_cells:
            tags[schema.PACKED_CELLS] = json.dumps(list(t.packed_cells))
        plugins = config_plugins(str(flat["model.attention.family"]), t.task, t.variant)
        if plugins:  # only then: a built-in run's tags are as before
            tags[schema.PLUGINS] = json.dumps(plugins, sort_keys=True)
        name = run_name(task=t.task, variant=t.variant, seed=seed, hparams=hp, cell=t.cell)
        return w.create_run(key, tags=tags, params=flat, name=name)

    def current(self, trial: Trial) -> list[tuple[int, str]]:
        """(seed, key) of the seeds the trial is training: the first unfinished one, or every
        unfinished one when the trial trains its seeds packed together."""
        todo = []
        desc = TrialDescriptor.of(trial.config)
        for seed, key in desc.run_keys:
            state = self.writer.runs.get(key)
            if state is None or state.status != schema.STATUS_FINISHED:
                todo.append((seed, key))
                if not desc.packed:
                    break
        return todo

    def trial_counts(self, trials: list[Trial]) -> dict[str, int]:
        """Trials done, running, failed and pending, judged by the record where Tune's state
        overcounts: Tune marks a trial stopped by Ctrl-C TERMINATED too, so a trial is done only
        when every seed of it is finished in the record, and failed only when Tune gave up on it
        and no seed of it is left unrecorded. A stopped, unfinished trial is pending: the next
        ``study resume`` runs it."""
        c = {"done": 0, "running": 0, "failed": 0, "pending": 0}
        runs = self.writer.runs
        for trial in trials:
            states = [runs[k].status if k in runs else None for _, k in TrialDescriptor.of(trial.config).run_keys]
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

    def trial_over(self, trial: Trial) -> bool:
        """Whether the record holds every run of ``trial`` finished, or Tune gave up on it and
        none is left unrecorded (Tune may still call a trial with finished runs RUNNING)."""
        states = [self.writer.runs[k].status if k in self.writer.runs else None
                  for _, k in TrialDescriptor.of(trial.config).run_keys]
        return all(s == schema.STATUS_FINISHED for s in states) or trial.status == "ERROR" and all(
            s in (schema.STATUS_FINISHED, schema.STATUS_FAILED) for s in states)

    # ------------------------------------------------------------------ Tune hooks

    @_guarded
    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.open()
        current = self.current(trial)
        desc = TrialDescriptor.of(trial.config)
        for seed, key in current:
            self.writer.mark_running(self.run_for(desc, seed, key))
        if current:
            self.trial_current[trial.trial_id] = current[0][1]

    @_guarded
    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info: Any) -> None:
        self.open()
        kind = result.get("kind")
        key = result.get("run_key")
        if kind not in ("epoch", "seed_final") or key is None:
            return
        desc = TrialDescriptor.of(trial.config).alone(key)
        state = self.run_for(desc, int(result["seed"]), key)
        self.trial_current[trial.trial_id] = key
        where = f"[study {self.writer.study}] seed {result['seed']} of {desc.cell}"
        for notice in result.get(NOTICES) or []:  # workers' output never reaches the user
            print(f"{where}: {notice}", flush=True)
        # (A finished run's tags are final: a restored trial reports its finished seeds again.)
        if state.status != schema.STATUS_FINISHED and result.get("resumed_from", 0) != state.resumed_from:
            if state.last_step > 0 or result.get("resumed_from", 0) > 0:
                print(f"{where} continues from epoch {int(result.get('resumed_from', 0))}"
                      + (f" (its record has {state.last_step} epochs)" if state.last_step else ""),
                      flush=True)
            state.resumed_from = int(result.get("resumed_from", 0))
            self.writer.set_tags(state.run_id, {schema.RESUMED_FROM: state.resumed_from,
                                                schema.NODE_ID: result.get("node_id", "")})
        # After a restore the trial replays its epoch history: log the epochs not yet logged.
        epochs = list(result.get("history") or [])
        if kind == "epoch":
            self.writer.buffer_epochs(key, epochs + [result])
            self.writer.flush(force=False)
            return
        self.writer.buffer_epochs(key, epochs)
        finals = {k: v for k, v in result.items() if is_final_metric(k, v)}
        finals.update(seed_percents(finals))  # the UI's columns in percent
        newly = state.status != schema.STATUS_FINISHED
        self.writer.finish(key, finals, run_dir(self.study_dir, key))
        if newly:  # the cell's medians, now (not for a restored trial's replay of a finished seed)
            self.writer.update_cells([desc.cell])

    @_guarded
    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.open()
        key = self.trial_current.get(trial.trial_id)
        if key and key in self.writer.runs:
            self.writer.set_tags(self.writer.runs[key].run_id, {
                schema.ERROR: error_text(trial)[:MAX_TAG_CHARS],
                schema.ATTEMPTS: str(trial.run_metadata.num_failures)})

    @_guarded
    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.open()
        self.writer.flush()
        current = self.current(trial)
        error = error_text(trial) if current else ""
        desc = TrialDescriptor.of(trial.config)
        for seed, key in current:
            self.run_for(desc, seed, key)
            self.writer.fail(key, error, trial.run_metadata.num_failures)

    @_guarded
    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.open()
        self.writer.flush()

    @_guarded
    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        self.open()
        self.writer.flush()
        c = self.trial_counts(trials)
        counts = self.writer.run_counts(self.writer.expected_runs())
        self.writer.log_parent_metrics({
            "trials_finished": c["done"],
            "trials_failed": c["failed"],
            "runs_finished": counts.finished,
            "runs_failed": counts.failed,
            "wall_seconds": self.writer.seconds_open(),
        })

    @_guarded
    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        self.check_store()
        self.writer.flush(force=False)


def reconcile(recorder: RecordCallback, study_dir: str | Path) -> int:
    """Re-record finished runs that the store lacks, from their run directories.

    A run directory holding ``result.json`` (of the same run identity as its ``trial.json``
    says) is a finished run. If the store has no finished run under its key (the store was
    deleted, replaced, or the study was copied without it), the run is written now: tags,
    params, every epoch of its history, final metrics, artifacts, status. Returns how many.
    An entry not named as a run key is skipped unread; a run folder (or ``runs/``) that links
    out of the study raises :class:`locattn.folders.FolderError` before any run is recorded.
    """
    out_dirs = run_folders(study_dir)  # every one checked before any is read or the store opened
    recorder.open()
    fixed = 0
    for out_dir in out_dirs:
        key = out_dir.name
        state = recorder.runs.get(key)
        if state is not None and state.status == schema.STATUS_FINISHED:
            continue
        try:
            body = json.loads((out_dir / layout.TRIAL_FILE).read_text())
            desc = TrialDescriptor.of({"trial": body["trial"], "search": body.get("search") or {}})
            seed = int(body["seed"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue
        if (seed, key) not in desc.run_keys:
            continue
        result = finished_result(out_dir, desc.run_config(key))
        if result is None:
            continue
        recorder.run_for(desc, seed, key)
        recorder.writer.buffer_epochs(key, getattr(result, "history", None) or [])
        finals = {k: v for k, v in final_metrics(out_dir, result).items()
                  if k in schema.FINAL_METRICS or k.startswith("test.")}
        finals.update(seed_percents(finals))
        recorder.writer.finish(key, finals, out_dir)
        recorder.writer.update_cells([desc.cell])
        fixed += 1
    return fixed


def error_text(trial: Trial) -> str:
    """The end of a failed trial's traceback (Tune's error file), for the ``locattn.error`` tag."""
    path = getattr(trial, "error_file", None)
    if path and os.path.isfile(path):
        text = Path(path).read_text(errors="replace")
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        # The exception line(s) are at the end; keep the end of the traceback.
        return "\n".join(lines[-25:])
    return "unknown error (no error file)"


__all__ = ["RecordCallback", "NON_METRIC_KEYS", "OpenTrialsScheduler", "TrialQueue", "error_text",
           "is_final_metric", "reconcile"]
