"""Launch, resume and widen studies: spec -> Ray Tune (+ Optuna) -> MLflow.

:func:`launch` and :func:`resume` take the study's lock and hand the study to one runner, which
plans the trials (the grid queue, or Optuna per cell), builds one ``TuneConfig``, and fits. The
folder is :mod:`study.folder`'s, the driver process's plumbing :mod:`study.driver`'s, the record
:mod:`study.record`'s. Nothing here calls ``ray.init`` at import time.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from locattn.config import make_run_config
from record import layout, schema
from record.layout import StudyPaths, study_paths
from record.store import is_server, redact, split_credentials, sqlite_path, sqlite_uri
from study import slices
from study.cost import study_eta
from study.driver import Interrupt, RayStart, StudyLock, deadline as make_deadline, init_ray, limit_text, quiet_tune
from study.folder import (StudyError, legacy_tune_state, load_meta, one_line_os_error, relocate,
                          spec_from_meta, take_credentials, write_meta)
from study.retention import disk_line
from study.spec import (SpecError, StudySpec, check_task_data, read_yaml, require_task_data,
                        resolve_spec, size_warnings, widens)
from study.trainable import run_trial, trial_descriptor, trial_dirname, trial_run_keys

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
    time_limit: float | None = None,
) -> dict[str, Any]:
    """Launch a study, or resume it if it already exists with the same spec (idempotent).

    A spec above :data:`study.spec.SIZE_LIMITS` (runs, epochs, CPU hours) is refused with its
    dry-run cost unless ``yes``. ``time_limit`` (seconds from now): stop gracefully before it
    (:mod:`study.slices`); the summary then has ``time_limit`` true.
    """
    deadline = make_deadline(time_limit)
    out = out or sys.stdout
    spec_path = Path(spec_path).resolve()
    raw = read_yaml(spec_path)
    spec = resolve_spec(raw, path=str(spec_path), profile=profile, only=only)
    if not name:
        name = f"{spec.name}-{spec.profile}" if spec.profile else spec.name
    paths = study_paths(Path(root).resolve() / name)
    tracking_uri = take_credentials(tracking_uri, out)
    big = size_warnings(spec)
    if dry_run:
        print(f"study    {name} -> {paths.dir}", file=out)
        print(spec.plan(), file=out)
        for warning in big:
            print(f"size     WARNING {warning}: `study launch` will ask for --yes", file=out)
        problems = check_task_data(spec)
        for problem in problems:
            print(f"data     PROBLEM {problem}", file=out)
        disk, short = disk_line(spec, _slots(spec, max_concurrent), paths.dir)
        print(disk, file=out)
        return {"dry_run": True, "name": name, "n_trials": spec.n_trials(), "n_runs": spec.n_runs(),
                "data_problems": problems, "size_warnings": big, "disk_short": short}
    if big and not yes:
        cost = next((ln for ln in spec.plan().splitlines() if ln.startswith("cost")), "").split(None, 1)
        raise StudyError(
            f"{spec_path}: a very large study ({'; '.join(big)}; dry-run cost "
            f"{cost[-1] if cost else '?'}); check with --dry-run, then pass --yes to launch it")
    require_task_data(spec)  # before anything is created or started
    if not paths.meta.is_file():  # a new study: will its runs fit on the disk?
        disk, short = disk_line(spec, _slots(spec, max_concurrent), paths.dir)
        if short:
            print(f"[study {name}] WARNING {disk.split(None, 1)[1]}", file=out)
    try:
        paths.dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StudyError(one_line_os_error(exc, paths.dir)) from None
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
                write_meta(paths, meta)
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
            write_meta(paths, meta)
        return _run(spec, paths, meta, address=address, max_concurrent=max_concurrent,
                    progress_seconds=progress_seconds, out=out, lock=lock, deadline=deadline)
    finally:
        lock.release()


def _slots(spec: StudySpec, max_concurrent: int | None) -> int:
    """Trials that run at once: the concurrency asked for, else what the CPUs allow."""
    limit = max_concurrent if max_concurrent is not None else spec.max_concurrent
    return limit or max(1, int((os.cpu_count() or 1) // max(spec.cpus, 1e-9)))


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
            raise StudyError(one_line_os_error(exc, paths.dir)) from None
        print(f"[study {meta['name']}] Tune's state of the narrower study set aside as {aside.name}",
              file=out)
    meta["only"] = only
    meta["resolved"] = spec.resolved
    write_meta(paths, meta)


def resume(
    study: str | Path,
    *,
    root: str | Path = "studies",
    address: str | None = None,
    progress_seconds: float = 10.0,
    out: TextIO | None = None,
    time_limit: float | None = None,
) -> dict[str, Any]:
    """Resume a study from its directory: finished trials are kept, unfinished ones continue
    (``time_limit`` as in :func:`launch`)."""
    deadline = make_deadline(time_limit)
    paths = study_paths(study, root)
    out = out or sys.stdout
    meta = load_meta(paths)
    _, user, password = split_credentials(meta["tracking_uri"])
    if user or password:  # a study.json written before credentials were stripped
        meta["tracking_uri"] = take_credentials(meta["tracking_uri"], out)
    spec = spec_from_meta(meta)
    require_task_data(spec)
    lock = StudyLock(paths, out).acquire()
    try:
        relocate(paths, meta, out)
        if user or password:
            write_meta(paths, meta)
        return _run(spec, paths, meta, address=address, max_concurrent=None,
                    progress_seconds=progress_seconds, out=out, lock=lock, deadline=deadline)
    finally:
        lock.release()


def _run(spec: StudySpec, paths: StudyPaths, meta: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """:func:`_run_locked`, with a full disk or a read-only store said in one line."""
    try:
        return _run_locked(spec, paths, meta, **kw)
    except OSError as exc:
        raise StudyError(one_line_os_error(exc, paths.dir)) from None
    except Exception as exc:  # noqa: BLE001 - the store's own errors: one line when disk/permission
        text = str(exc)
        if any(m in text for m in ("database or disk is full", "No space left", "readonly database",
                                   "attempt to write a readonly")):
            db = sqlite_path(meta["tracking_uri"])  # the store failed: name it, not the study folder
            raise StudyError(one_line_os_error(exc, db or Path(redact(meta["tracking_uri"])),
                                               paths.dir)) from None
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
    deadline: tuple[float, float] | None = None,
) -> dict[str, Any]:
    quiet_tune()
    # Ray Tune (and what subclasses its classes) only when a study runs: `study launch
    # --dry-run` starts no Ray.
    from ray import tune

    from study.progress import ProgressLine
    from study.record import MlflowRecorder, reconcile

    name = meta["name"]
    tracking_uri = meta["tracking_uri"]
    t_start = time.time()
    if lock is not None:
        reaped = lock.reap_stale_ray()
        if reaped:
            print(f"[study {name}] stopped {len(reaped)} Ray processes left by the previous driver "
                  f"(PIDs {', '.join(map(str, reaped[:8]))}{' ...' if len(reaped) > 8 else ''})", file=out)
    recorder = MlflowRecorder(
        tracking_uri=tracking_uri,
        study=name,
        study_dir=str(paths.dir),
        # On an MLflow server the server's default root (its artifact proxy, mlflow-artifacts:/):
        # no node needs the study folder for artifacts. A database URI: the study folder.
        artifact_location=None if is_server(tracking_uri) else paths.artifacts.as_uri(),
        parent_tags={
            schema.TABLES: ",".join(spec.tables),
            schema.PROFILE: spec.profile,
            schema.SPEC_PATH: meta["spec_path"],
            schema.N_TRIALS: str(spec.n_trials()),
            schema.N_RUNS: str(spec.n_runs()),
            schema.N_SEEDS: str(len(spec.seeds)),
        },
        n_seeds=len(spec.seeds),
    )
    writer = recorder.writer
    interrupt = Interrupt(name, out, deadline)
    ray_start = RayStart(started=False)
    try:
        # The record first: finished runs the store lost (a deleted mlflow.db, another store,
        # a study copied without tune/) are re-recorded from their run directories.
        recorder.open()
        fixed = reconcile(recorder, paths.dir)
        if fixed:
            print(f"[study {name}] re-recorded {fixed} finished runs missing from the store "
                  "(from their run directories)", file=out)
        ray_start = init_ray(address)
        if lock is not None and ray_start.session_dir:  # our private Ray: its helpers are ours
            lock.write(ray_session=ray_start.session_dir)
        if legacy_tune_state(paths.tune):
            aside = paths.tune.with_name(f"tune.legacy-{int(time.time())}")
            paths.tune.rename(aside)
            print(f"[study {name}] {paths.tune} holds a pickled searcher state from an older "
                  f"version (never loaded: unpickling can run code); set aside as {aside.name}, "
                  "the remaining trials are planned from the record", file=out)
        trainable = tune.with_resources(run_trial, {"cpu": spec.cpus, "gpu": spec.gpus})
        restore = tune.Tuner.can_restore(str(paths.tune))
        trials, skipped = _trials(spec, paths, meta, recorder)
        search_alg, n_trials, skipped = (None, spec.n_trials(), 0) if restore else \
            _plan(spec, paths, meta, trials, skipped, out)
        if not restore and search_alg is None:
            print(f"[study {name}] every trial is already finished in the record", file=out)
            writer.finish_parent(interrupted=False)
            return {"name": name, "dir": str(paths.dir), "skipped": skipped,
                    "trials": 0, "errors": 0, "wall_seconds": time.time() - t_start,
                    **writer.run_counts(spec.n_runs()), "interrupted": False}
        limit = max_concurrent if max_concurrent is not None else spec.max_concurrent
        slots = limit or max(1, int((os.cpu_count() or 1) // max(spec.cpus, 1e-9)))
        eta = study_eta(trials * (spec.search.num_samples if spec.search else 1), slots)
        callbacks = [recorder, ProgressLine(study=name, total_trials=n_trials,
                                            epochs_per_trial=_max_epochs(spec), counts=recorder.trial_counts,
                                            seconds=progress_seconds, out=out, t0=t_start, eta=eta,
                                            over=recorder.trial_over)]
        if restore:
            tuner = tune.Tuner.restore(
                str(paths.tune), trainable=trainable, resume_unfinished=True, resume_errored=True
            )
            _use_callbacks(tuner, callbacks)
        else:
            tuner = tune.Tuner(trainable, param_space={}, tune_config=_tune_config(search_alg, n_trials, limit),
                               run_config=tune.RunConfig(
                                   name=layout.TUNE_DIR,
                                   storage_path=str(paths.dir),
                                   callbacks=callbacks,
                                   failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                                   checkpoint_config=tune.CheckpointConfig(num_to_keep=TUNE_CHECKPOINTS_KEPT),
                                   verbose=0,
                               ))
        t_fit = time.time()
        grid = None
        with interrupt:
            try:
                if not interrupt.event.is_set():  # (a --time-limit spent before the fit)
                    grid = tuner.fit()
            except KeyboardInterrupt:  # a second Ctrl-C: stop now, state as of the last snapshot
                interrupt.event.set()
        fit_seconds = time.time() - t_fit
        if recorder.failure is not None:
            raise StudyError(f"{recorder.failure}; the runs are safe in {paths.dir}: free or restore "
                             f"the store, then `study resume {paths.dir}`")
        errors = sum(1 for r in grid if r.error is not None) if grid is not None else 0
        writer.flush()
        counts = writer.run_counts(spec.n_runs())
        interrupted = interrupt.event.is_set()
        writer.finish_parent(interrupted=interrupted)
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
            "time_limit": interrupted and interrupt.timed_out,
            **counts,
        }
        line = (f"[study {name}] {counts['runs_finished']} of {counts['runs_expected']} runs finished, "
                f"{counts['runs_failed']} failed, {counts['runs_unfinished']} not finished; record: "
                f"{tracking_uri} (experiment {name!r})")
        if interrupted and interrupt.timed_out:
            limit_arg = limit_text(deadline[0])
            print(f"{line}. Time limit {limit_arg} reached (exit status {slices.EXIT_TIME_LIMIT}): "
                  f"continue with `study resume {paths.dir} --time-limit {limit_arg}`", file=out)
        elif interrupted:
            print(f"{line}. Interrupted: continue with `study resume {paths.dir}`", file=out)
        else:
            print(f"{line}; `study ui {paths.dir}` to browse", file=out)
        return summary
    finally:
        interrupt.cancel()
        if ray_start:
            import ray

            ray.shutdown()


def _trials(spec: StudySpec, paths: StudyPaths, meta: dict[str, Any], recorder: Any
            ) -> tuple[list[dict[str, Any]], int]:
    """(trial descriptors, trials skipped): a grid study's trials the record does not hold
    finished, or a search study's cell groups (one per cell x hparams point)."""

    common = dict(study=meta["name"], study_dir=str(paths.dir), cpus=spec.cpus, gpus=spec.gpus,
                  metric=spec.search.metric if spec.search else "best_dev_score",
                  train_fn=meta.get("train_fn", DEFAULT_TRAIN_FN), pack=spec.pack_seeds)
    if spec.search is not None:
        return [trial_descriptor(cell=cell.cell, task=cell.task, variant=cell.variant,
                                 overrides={**cell.overrides, **hp}, hparams=hp, seeds=spec.seeds,
                                 **common)
                for cell in spec.cells for hp in spec.hparam_points()], 0
    done = {k for k, s in recorder.runs.items() if s.status == schema.STATUS_FINISHED}
    trials, skipped = [], 0
    for t in spec.grid_trials():
        desc = trial_descriptor(cell=t.cell, task=t.task, variant=t.variant, overrides=t.overrides,
                                hparams=t.hparams, seeds=t.seeds, points=t.points, **common)
        if all(k in done for _, k in trial_run_keys({"trial": desc})):
            skipped += 1
        else:
            trials.append(desc)
    return trials, skipped


def _plan(spec: StudySpec, paths: StudyPaths, meta: dict[str, Any], trials: list[dict[str, Any]],
          skipped: int, out: TextIO) -> tuple[Any | None, int, int]:
    """(Tune searcher, trials it will run, trials skipped) of a study without Tune state to
    restore, from :func:`_trials`; no searcher when every trial is already finished in the
    record. A grid study queues its trials; a search study runs Optuna per cell."""
    from study.search import CellSearch, TrialQueue  # Ray Tune and Optuna (see _run_locked)

    name = meta["name"]
    if spec.search is not None:
        searcher = CellSearch(
            groups=trials, space=spec.search.space, num_samples=spec.search.num_samples,
            sampler=spec.search.sampler, sampler_seed=spec.search.sampler_seed,
            mode=spec.search.mode, storage_url=sqlite_uri(paths.optuna_db), study=name,
        )
        return searcher, spec.n_trials(), 0
    if not trials:
        return None, 0, skipped
    if skipped:
        print(f"[study {name}] {skipped} of {skipped + len(trials)} trials already "
              f"finished in the record; running the other {len(trials)}", file=out)
    return TrialQueue(trials), len(trials), skipped


def _tune_config(search_alg: Any, num_samples: int, limit: int | None) -> Any:
    """The one ``TuneConfig`` of every study: trials from ``search_alg``, first-in first-out."""
    from ray import tune  # (see _run_locked)

    from study.search import OpenTrialsScheduler

    return tune.TuneConfig(
        search_alg=search_alg,
        num_samples=num_samples,
        max_concurrent_trials=limit or None,
        reuse_actors=True,
        scheduler=OpenTrialsScheduler(),
        trial_dirname_creator=_trial_dirname,
    )


def _trial_dirname(trial: Any) -> str:
    return trial_dirname(trial.trial_id)


def _use_callbacks(tuner: Any, callbacks: list) -> None:
    """Give a restored Tuner this session's callbacks. ``Tuner.restore`` brings back pickled
    copies of the old ones (settings only, no store connection) and takes no new ones: Tune has
    no public way to replace them, so this reaches into the tuner's run config."""
    try:
        tuner._local_tuner.get_run_config().callbacks = callbacks
    except AttributeError:  # pragma: no cover - depends on Ray internals
        pass


def _max_epochs(spec: StudySpec) -> int:
    cell = spec.cells[0]
    cfg = make_run_config(task=cell.task, variant=cell.variant,
                          overrides={**cell.overrides, **spec.hparam_points()[0]})
    return cfg.optim.epochs
