"""One driver pass over a study, in parts that are called alone: the recorder, open the record, fit
the trials (one Tuner that :mod:`study.plan.tuner` plans from the spec and the record), close the
record; :func:`run_pass` runs them under the study's lock and signals and summarises.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from record import schema
from record.layout import StudyPaths
from record.store import FULL, READ_ONLY, is_server, redact, sqlite_path, store_condition
from record.summary import RunCounts
from study.cost import study_eta
from study.driver.process import RayStart, StudyLock, check_gpus, init_ray, quiet_tune, stop_ray
from study.driver.signals import Interrupt
from study.driver.summary import StudySummary, summarise, summary_line
from study.recording.folder import StudyError, one_line_os_error
from study.recording.meta import DriverOptions, StudyMeta
from study.recording.runs import run_folders
from study.recording.study_store import browse_advice
from study.spec import StudySpec
from study.spec.plugins import export_to_workers, labels_tag, runtime_env, solo_note

if TYPE_CHECKING:
    from ray.tune import ResultGrid
    from ray.tune.search import Searcher

    from study.cost import StudyEta
    from study.recording.record_callback import RecordCallback
    from study.trial.trainable import Trainer


#: Tune's experiment state, one file per driver (about 37 KB a trial); a study never restores it
#: (every launch and resume builds a new Tuner), so only the newest driver's is kept.
TUNE_STATE_GLOB = "experiment_state-*.json"


def prune_tune_state(tune_dir: Path) -> int:
    """Delete the experiment state files earlier drivers left in ``tune_dir``; returns how many."""
    old = sorted(tune_dir.glob(TUNE_STATE_GLOB)) if tune_dir.is_dir() else []
    for path in old:
        path.unlink(missing_ok=True)
    return len(old)


def trial_slots(spec: StudySpec, max_concurrent: int | None) -> int:
    """Trials that run at once: the concurrency asked for, else what the CPUs allow."""
    limit = max_concurrent if max_concurrent is not None else spec.max_concurrent
    return limit or max(1, int((os.cpu_count() or 1) // max(spec.cpus, 1e-9)))


def run_pass(spec: StudySpec, paths: StudyPaths, meta: StudyMeta, options: DriverOptions, *, out: TextIO,
             lock: StudyLock | None, deadline: tuple[float, float] | None = None, trainer: Trainer | None = None,
             plugins: list[str] | tuple[str, ...] = ()) -> StudySummary:
    """:func:`_run_locked`, with Ctrl-C and SIGTERM ours from here on (a signal in the first
    seconds of a launch stops it in one line and leaves it resumable: driver.Interrupt), and a
    full disk or a read-only store said in one line."""
    interrupt = Interrupt(meta.name, out, deadline).install()
    try:
        return _run_locked(spec, paths, meta, options, out=out, lock=lock, deadline=deadline, interrupt=interrupt,
                           trainer=trainer, plugins=plugins)
    except OSError as exc:
        raise StudyError(one_line_os_error(exc, paths.dir)) from None
    except Exception as exc:  # noqa: BLE001 - the store's own errors: one line when disk/permission
        if store_condition(exc) in (FULL, READ_ONLY):
            db = sqlite_path(meta.tracking_uri)  # the store failed: name it, not the study folder
            raise StudyError(one_line_os_error(exc, db or Path(redact(meta.tracking_uri)),
                                               paths.dir)) from None
        raise
    finally:
        interrupt.uninstall()


def _run_locked(
    spec: StudySpec,
    paths: StudyPaths,
    meta: StudyMeta,
    options: DriverOptions,
    *,
    out: TextIO,
    lock: StudyLock | None,
    interrupt: Interrupt,
    deadline: tuple[float, float] | None = None,
    trainer: Trainer | None = None,
    plugins: list[str] | tuple[str, ...] = (),
) -> StudySummary:
    """Reconcile the record, start Ray, plan the trials, fit them and summarise: the study's
    one driver pass, under its lock."""
    address, max_concurrent = options.address, options.max_concurrent
    quiet_tune()
    # Ray Tune (and what subclasses its classes) only when a study runs: `study launch
    # --dry-run` starts no Ray.
    from study.plan.tuner import plan_trials, searcher

    name = meta.name
    t_start = time.time()
    if lock is not None:
        reaped = lock.reap_stale_ray()
        if reaped:
            print(f"[study {name}] stopped {len(reaped)} Ray processes left by the previous driver "
                  f"(PIDs {', '.join(map(str, reaped[:8]))}{' ...' if len(reaped) > 8 else ''})", file=out)
    recorder = study_recorder(spec, paths, meta)
    ray_start = RayStart(started=False)
    try:
        open_record(recorder, paths, name, out)
        export_to_workers(list(plugins))  # a local Ray's workers inherit it
        ray_start = init_ray(address, resume=f"`study resume {paths.dir}`: the study is kept",
                             runtime_env=runtime_env(list(plugins)) if address else None)
        if lock is not None and ray_start.session_dir:  # our private Ray: its helpers are ours
            lock.write(ray_session=ray_start.session_dir)
        # Always a new Tuner, planned from the spec and the record: Tune's saved state in tune/
        # (tuner.pkl, its snapshots) holds pickles, and unpickling a planted one runs its code.
        # Unfinished trials continue from their runs' own verified checkpoints (study.trial.trainable).
        trials, skipped = plan_trials(spec, paths, meta, recorder.runs)
        search_alg, n_trials, skipped = searcher(spec, paths, meta, trials, skipped, out)
        if search_alg is None:
            return all_finished(recorder, spec, paths, meta, skipped, t_start, out)
        if skipped:  # in runs, as `study status` and the summary line count them
            done = recorder.writer.run_counts(spec.n_runs()).finished
            print(f"[study {name}] {done} of {spec.n_runs()} runs already finished in the record "
                  f"({skipped} of {skipped + len(trials)} trials); running the other {len(trials)} "
                  "trial(s)", file=out)
        check_gpus(spec.gpus, address, f"{meta.spec_path} (profile {spec.profile})", out)
        note = solo_note(spec)
        if note:
            print(f"[study {name}] {note}", file=out)
        eta = study_eta(trials * (spec.search.num_samples if spec.search else 1), trial_slots(spec, max_concurrent))
        grid, fit_seconds = fit_trials(spec, paths, name, recorder, search_alg, n_trials, max_concurrent=max_concurrent,
                                       progress_seconds=options.progress_seconds, out=out, t_start=t_start, eta=eta,
                                       interrupt=interrupt, trainer=trainer)
        interrupted = interrupt.event.is_set()
        counts = close_record(recorder, spec, paths, interrupted=interrupted)
        summary = summarise(name, paths.dir, meta.tracking_uri, grid, counts, skipped=skipped,
                            wall_seconds=time.time() - t_start, fit_seconds=fit_seconds,
                            interrupted=interrupted, timed_out=interrupt.timed_out)
        print(summary_line(summary, max_concurrent=max_concurrent, address=address, deadline=deadline),
              file=out)
        return summary
    finally:
        stop_ray(ray_start)


def study_recorder(spec: StudySpec, paths: StudyPaths, meta: StudyMeta) -> RecordCallback:
    """The study's :class:`study.recording.record_callback.RecordCallback` (not opened): its store, experiment,
    artifact location and the parent run's tags."""
    from study.recording.record_callback import RecordCallback  # Ray Tune's Callback: only when a study runs

    tracking_uri = meta.tracking_uri
    return RecordCallback(
        tracking_uri=tracking_uri,
        study=meta.name,
        study_dir=str(paths.dir),
        # On an MLflow server the server's default root (its artifact proxy, mlflow-artifacts:/):
        # no node needs the study folder for artifacts. A database URI: the study folder.
        artifact_location=None if is_server(tracking_uri) else paths.artifacts.as_uri(),
        parent_tags={
            schema.TABLES: ",".join(spec.tables),
            schema.LABELS: labels_tag(spec.cells),
            schema.PROFILE: spec.profile,
            schema.SPEC_PATH: meta.spec_path,
            schema.N_TRIALS: str(spec.n_trials()),
            schema.N_RUNS: str(spec.n_runs()),
            schema.N_SEEDS: str(len(spec.seeds)),
            **({schema.TABLE_DEFS: json.dumps(list(spec.table_defs), sort_keys=True)}
               if spec.table_defs else {}),
        },
        n_seeds=len(spec.seeds),
    )


def open_record(recorder: RecordCallback, paths: StudyPaths, name: str, out: TextIO) -> None:
    """Open the study's record and re-record the finished runs the store lost (a deleted
    mlflow.db, another store, a study copied without tune/) from their run directories."""
    from study.recording.record_callback import reconcile  # Ray Tune's Callback: only when a study runs

    run_folders(paths.dir)  # one linking out of the study: refused before the store opens
    recorder.open()
    fixed = reconcile(recorder, paths.dir)
    if fixed:
        print(f"[study {name}] re-recorded {fixed} finished runs missing from the store "
              "(from their run directories)", file=out)


def all_finished(recorder: RecordCallback, spec: StudySpec, paths: StudyPaths, meta: StudyMeta, skipped: int,
                 t_start: float, out: TextIO) -> StudySummary:
    """A study with nothing left to run: say so, close the parent run, return its summary."""
    name, writer = meta.name, recorder.writer
    counts = writer.run_counts(spec.n_runs())
    print(f"[study {name}] every trial is already finished in the record "
          f"({counts.finished} of {counts.expected} runs finished, "
          f"{counts.failed} failed); {browse_advice(meta.tracking_uri, paths.dir, name)}",
          file=out)
    writer.finish_parent(interrupted=False)
    return StudySummary(name=name, study_dir=paths.dir, tracking_uri=meta.tracking_uri, trials=0, errors=0,
                        skipped=skipped, wall_seconds=time.time() - t_start, fit_seconds=0.0,
                        interrupted=False, time_limit=False, runs=counts)


def fit_trials(spec: StudySpec, paths: StudyPaths, name: str, recorder: RecordCallback, search_alg: Searcher,
               n_trials: int, *, max_concurrent: int | None, progress_seconds: float, out: TextIO, t_start: float,
               eta: StudyEta | None, interrupt: Interrupt, trainer: Trainer | None = None
               ) -> tuple[ResultGrid | None, float]:
    """Fit a new Tuner over the planned trials with the record and progress callbacks; its
    result grid (None when interrupted before one) and the fit's wall seconds. A store that
    failed during the fit is a :class:`StudyError`."""
    # Ray Tune (and what subclasses its classes) only when a study runs
    from study.plan.tuner import make_tuner, max_epochs
    from study.recording.progress import ProgressLine

    callbacks = [recorder, ProgressLine(study=name, total_trials=n_trials,
                                        epochs_per_trial=max_epochs(spec), counts=recorder.trial_counts,
                                        seconds=progress_seconds, out=out, t0=t_start, eta=eta,
                                        over=recorder.trial_over)]
    prune_tune_state(paths.tune)
    tuner = make_tuner(spec, paths, search_alg, n_trials,
                            max_concurrent if max_concurrent is not None else spec.max_concurrent, callbacks,
                            trainer=trainer)
    t_fit = time.time()
    grid = interrupt.fit(tuner)
    fit_seconds = time.time() - t_fit
    if recorder.failure is not None:
        raise StudyError(f"{recorder.failure}; the runs are safe in {paths.dir}: free or restore "
                         f"the store, then `study resume {paths.dir}`")
    return grid, fit_seconds


def close_record(recorder: RecordCallback, spec: StudySpec, paths: StudyPaths, *, interrupted: bool) -> RunCounts:
    """Flush the record, close the parent run and check the store once more; the run counts
    (:meth:`record.writer.RecordWriter.run_counts`). A store failure is a :class:`StudyError`."""
    writer = recorder.writer
    try:
        writer.flush()
        counts = writer.run_counts(spec.n_runs())
        writer.finish_parent(interrupted=interrupted)
        # The file checked once more after the last write: a store deleted after Tune's last
        # step takes every write since without an error, and the study would end "4 of 4 runs
        # finished" with its record nowhere (benchmarks/bench_chaos.py deletes it so).
        recorder.check_store()
    except Exception as exc:  # noqa: BLE001 - classified: only store failures are caught
        failure = recorder.failure_line(exc)
        if failure is None:
            raise
        raise StudyError(f"{failure}; the runs are safe in {paths.dir}: free or restore "
                         f"the store, then `study resume {paths.dir}`") from None
    return counts
