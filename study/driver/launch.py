"""Launch, resume and widen studies: spec -> Ray Tune (+ Optuna) -> MLflow.

:func:`launch` and :func:`resume` take the study's lock and hand the study to one driver pass
(:func:`study.driver.driver_pass.run_pass`), which fits a new Tuner that :mod:`study.plan.tuner`
plans from the spec and the record. A launch beside an existing study is
:mod:`study.driver.relaunch`'s, what both return :mod:`study.driver.summary`'s, the folder
:mod:`study.recording.folder`'s, the driver process's plumbing :mod:`study.driver.process`'s.
Nothing here calls ``ray.init`` at import time.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from record.layout import StudyPaths, study_paths
from record.power import power_lines
from record.store import split_credentials, sqlite_path
from study.cost.paths import choose_train_path  # a new study's train path when none is given
from study.driver.driver_pass import run_pass, trial_slots
from study.driver.process import StudyLock
from study.driver.relaunch import (refuse_other_spec, relaunch_meta, resume_sets, seeds_arg, set_train_path,
                                   spec_with_sets)
from study.driver.signals import deadline as make_deadline
from study.driver.summary import DryRunPlan, StudySummary
from study.plan.preflight import check_train_path_fits
from study.recording.folder import (StudyError, load_meta, new_study_paths, one_line_os_error, reach_database, relocate,
                                    spec_from_meta, take_credentials, write_meta)
from study.recording.meta import DEFAULT_TRAIN_PATH, DriverOptions, StudyMeta
from study.spec import (SpecError, StudySpec, apply_sets, check_task_data, read_yaml, require_task_data,
                        resolve_spec, size_warnings)
from study.spec.plugins import (check_attenders, check_sources, import_named, spec_plugin_sources,
                                spec_plugins, trusted_for_resume)
from study.spec.retention import disk_line

if TYPE_CHECKING:
    from study.trial.trainable import Trainer


#: Set by the test suite (its conftest.py), whose worktrees are dirty by design: the same as
#: ``--allow-dirty`` for every launch and resume. Not for studies whose numbers are kept.
ALLOW_DIRTY_ENV = "LOCATTN_ALLOW_DIRTY"


def check_committed_code(allow_dirty: bool, repo: str | Path | None = None) -> None:
    """Refuse, in one line naming the changed files, to train from package code that differs
    from its commit (:func:`record.writer.code_diff` of ``repo``, this package's checkout by
    default), unless ``allow_dirty`` (each run then records the diff and a ``locattn.dirty``
    tag)."""
    if allow_dirty or os.environ.get(ALLOW_DIRTY_ENV) == "1":
        return
    # record.writer imports MLflow: kept off `study status` and the other light commands
    from record.writer import changed_files, code_diff, code_version

    files = changed_files(code_diff(repo))
    if files:
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise SpecError(f"the package code differs from commit {code_version(repo).split('+')[0][:12]} "
                        f"({shown}): commit it, or pass --allow-dirty to record the diff with "
                        "every run (tables then mark those runs)")


def launch(
    spec_path: str | Path,
    *,
    profile: str | None = None,
    name: str | None = None,
    root: str | Path = "studies",
    address: str | None = DriverOptions.address,
    tracking_uri: str | None = None,
    max_concurrent: int | None = DriverOptions.max_concurrent,
    dry_run: bool = False,
    progress_seconds: float = DriverOptions.progress_seconds,
    only: dict[str, list] | None = None,
    seeds: int | list[int] | None = None,
    train_path: str | None = None,
    trainer: Trainer | None = None,
    out: TextIO | None = None,
    yes: bool = False,
    time_limit: float | None = None,
    sets: dict[str, Any] | None = None,
    allow_dirty: bool = False,
    plugins: list[str] | tuple[str, ...] = (),
    power_target: float | None = None,
) -> StudySummary | DryRunPlan:
    """Launch a study, or resume it if it already exists with the same spec (idempotent): the
    pass's :class:`StudySummary`, or with ``dry_run`` the :class:`DryRunPlan` (nothing written).
    ``sets`` (``--set KEY=VALUE``) are dotted overrides applied after the profile's, saved in
    ``study.json`` (``raw`` and ``set``) and part of the study's spec as any override is.
    The spec's ``plugins:`` and ``plugins`` (``--plugin``) are imported first, here and in
    every trial (:mod:`study.spec.plugins`); resuming a study whose plugins' source changed is refused
    unless ``allow_dirty``, as for the package's own uncommitted code. ``power_target`` (a dry
    run's ``--power-target``): a difference in solved rate whose seeds the plan says
    (:mod:`record.power`).
    A wider ``only`` or more ``seeds`` (in place of the profile's) grows an existing study.
    ``train_path`` (operational, saved for the resumes): how the runs' eager training steps run;
    None keeps the study's saved choice; a new study then takes the one
    :func:`study.cost.paths.choose_train_path` picks (compiled where it pays, else eager) and
    says so.

    A spec above :data:`study.spec.SIZE_LIMITS` (runs, epochs, CPU hours) is refused with its
    dry-run cost unless ``yes``. ``time_limit`` (seconds from now): stop gracefully before it
    (:mod:`study.plan.slices`); the summary then has ``time_limit`` true. ``trainer``: the solo
    trainer this call's code chooses (``locattn.train.train`` when None; benchmarks pass a fake
    one); it is not saved, and nothing in a study folder names one. Package code that differs
    from its commit is refused unless ``allow_dirty`` (:func:`check_committed_code`).
    """
    deadline = make_deadline(time_limit)
    out = out or sys.stdout
    spec_path = Path(spec_path).resolve()
    raw = read_yaml(spec_path)
    plugin_names = [*import_named(spec_plugins(raw, spec_path), f"{spec_path}: plugins"),
                    *import_named(plugins, "--plugin")]
    raw = apply_sets(raw, profile, sets or {})  # --set: the last overrides
    spec = resolve_spec(raw, path=str(spec_path), profile=profile, only=only, seeds=seeds)
    where = "--name" if name else f"{spec_path}: name and profile"
    if not name:
        name = f"{spec.name}-{spec.profile}" if spec.profile else spec.name
    paths = new_study_paths(root, name, where)
    tracking_uri = take_credentials(tracking_uri, out)
    check_train_path_fits(spec, train_path)  # a dry run too: before anything is created
    train_path, chosen = _new_study_train_path(spec, paths, name, train_path, dry_run, out)
    if dry_run:
        if paths.meta.is_file():  # the launch's refusal of another spec, before it plans anything
            refuse_other_spec(spec, spec_path, paths, name, load_meta(paths), profile, only, seeds, sets)
        return dry_run_plan(spec, name, paths, max_concurrent, train_path, out, chosen, power_target)
    prepare_launch(spec, spec_path, name, paths, max_concurrent=max_concurrent, yes=yes,
                   allow_dirty=allow_dirty, out=out)
    lock = StudyLock(paths, out).acquire()
    try:
        if paths.meta.is_file():
            meta = relaunch_meta(spec, spec_path, raw, paths, name, only=only, seeds=seeds, train_path=train_path,
                                 tracking_uri=tracking_uri, allow_dirty=allow_dirty, out=out, relaunch=(profile, sets))
        else:
            meta = new_meta(spec, spec_path, raw, paths, name, only=only, seeds=seeds, sets=sets,
                            train_path=train_path, tracking_uri=tracking_uri)
            write_meta(paths, meta)
        options = DriverOptions(address=address, max_concurrent=max_concurrent, progress_seconds=progress_seconds)
        return run_pass(spec, paths, meta, options, out=out, lock=lock, deadline=deadline, trainer=trainer,
                       plugins=plugin_names)
    finally:
        lock.release()


def _new_study_train_path(spec: StudySpec, paths: StudyPaths, name: str, train_path: str | None,
                          dry_run: bool, out: TextIO) -> tuple[str | None, str]:
    """(the launch's train path, the dry run's ``path`` line or ""): for a new study launched
    without ``--train-path``, :func:`study.cost.paths.choose_train_path`'s pick, said on ``out``
    unless a dry run (whose plan prints the line); else ``train_path`` as given."""
    if train_path is not None or paths.meta.is_file():
        return train_path, ""
    choice = choose_train_path(spec)
    if choice.why and not dry_run:
        print(f"[study {name}] train path {choice.why}", file=out)
    return (None if choice.path == DEFAULT_TRAIN_PATH else choice.path), (f"path     {choice.why}" if choice.why else "")


def dry_run_plan(spec: StudySpec, name: str, paths: StudyPaths, max_concurrent: int | None,
                 train_path: str | None, out: TextIO, chosen: str = "",
                 power_target: float | None = None) -> DryRunPlan:
    """``study launch --dry-run``: print the plan (``chosen``: the line of the train path the
    launcher picked, if any), what its seeds per cell can detect (:func:`record.power.power_lines`,
    with the seeds ``power_target`` needs), its size warnings, data problems and disk line to
    ``out``; return the :class:`DryRunPlan`. Writes nothing."""
    big = size_warnings(spec)
    print(f"study    {name} -> {paths.dir}", file=out)
    print(spec.plan(max_concurrent, train_path), file=out)
    if chosen:
        print(chosen, file=out)
    print("\n".join(power_lines(len(spec.seeds), power_target)), file=out)
    for warning in big:
        print(f"size     WARNING {warning}: `study launch` will ask for --yes", file=out)
    problems = check_task_data(spec)
    for problem in problems:
        print(f"data     PROBLEM {problem}", file=out)
    disk, short = disk_line(spec, trial_slots(spec, max_concurrent), paths.dir)
    print(disk, file=out)
    return DryRunPlan(name=name, study_dir=paths.dir, n_trials=spec.n_trials(), n_runs=spec.n_runs(),
                      data_problems=tuple(problems), size_warnings=tuple(big), disk_short=short)


def prepare_launch(spec: StudySpec, spec_path: Path, name: str, paths: StudyPaths, *,
                   max_concurrent: int | None, yes: bool, allow_dirty: bool, out: TextIO) -> None:
    """Before a launch takes the lock: refuse a very large spec without ``yes``, missing task
    data and uncommitted code (:class:`StudyError`, :class:`SpecError`); warn when a new
    study's runs may not fit on the disk; create the study folder."""
    big = size_warnings(spec)
    if big and not yes:
        cost = next((ln for ln in spec.plan().splitlines() if ln.startswith("cost")), "").split(None, 1)
        raise StudyError(
            f"{spec_path}: a very large study ({'; '.join(big)}; dry-run cost "
            f"{cost[-1] if cost else '?'}); check with --dry-run, then pass --yes to launch it")
    require_task_data(spec)  # before anything is created or started
    check_attenders(spec, spec_path)  # plugin attenders on a dry batch, before any trial
    check_committed_code(allow_dirty)
    if not paths.meta.is_file():  # a new study: will its runs fit on the disk?
        disk, short = disk_line(spec, trial_slots(spec, max_concurrent), paths.dir)
        if short:
            print(f"[study {name}] WARNING {disk.split(None, 1)[1]}", file=out)
    try:
        paths.dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StudyError(one_line_os_error(exc, paths.dir)) from None


def new_meta(spec: StudySpec, spec_path: Path, raw: dict[str, Any], paths: StudyPaths, name: str, *,
             only: dict[str, list] | None, seeds: int | list[int] | None, sets: dict[str, Any] | None,
             train_path: str | None, tracking_uri: str | None) -> StudyMeta:
    """The study of a new launch (not written)."""
    return StudyMeta(name=name, spec_path=str(spec_path), profile=spec.profile, only=dict(only or {}), seeds=seeds,
                     sets=dict(sets or {}), train_path=train_path or DEFAULT_TRAIN_PATH, raw=raw,
                     resolved=spec.resolved, tracking_uri=tracking_uri or paths.default_tracking_uri(),
                     plugin_sources=spec_plugin_sources(spec.cells), created=time.time())


def resume(
    study: str | Path,
    *,
    root: str | Path = "studies",
    address: str | None = DriverOptions.address,
    progress_seconds: float = DriverOptions.progress_seconds,
    out: TextIO | None = None,
    time_limit: float | None = None,
    max_concurrent: int | None = DriverOptions.max_concurrent,
    train_path: str | None = None,
    trainer: Trainer | None = None,
    allow_dirty: bool = False,
    plugins: list[str] | tuple[str, ...] = (),
    sets: dict[str, Any] | None = None,
) -> StudySummary:
    """Resume a study from its directory (its :class:`StudySummary`): finished trials are kept, unfinished ones continue
    (``time_limit``, ``max_concurrent``, ``train_path``, ``trainer`` and ``allow_dirty`` as in
    :func:`launch`; the spec's or the study's saved choice by default). A plugin its
    ``study.json`` names is imported only when installed or named again in ``plugins``
    (``--plugin``): a folder never names code that runs. ``sets`` (``--set KEY=VALUE``): as
    :func:`launch`'s, over the saved spec (:func:`resume_sets`)."""
    check_committed_code(allow_dirty)
    deadline = make_deadline(time_limit)
    paths = study_paths(study, root)
    out = out or sys.stdout
    meta = load_meta(paths)
    _, user, password = split_credentials(meta.tracking_uri)
    if user or password:  # a study.json written before credentials were stripped
        meta = meta.replace(tracking_uri=take_credentials(meta.tracking_uri, out))
    named = spec_plugins(meta.raw, paths.meta)
    plugin_names = import_named(trusted_for_resume(named, plugins, paths.meta), "--plugin")
    try:
        spec = spec_from_meta(meta)
    except SpecError as exc:  # e.g. a study widened before the widening saved its YAML
        only = " ".join(f"--only {k}={','.join(map(str, v))}" for k, v in meta.only.items())
        profile = f" --profile {meta.profile}" if meta.profile else ""
        more = f" --seeds {seeds_arg(meta.seeds)}" if meta.seeds is not None else ""
        command = (f"study launch {meta.spec_path}{profile} --name {meta.name} "
                   f"--root {paths.dir.parent} {only}{more}").strip()
        raise SpecError(
            f"{paths.meta}: the spec saved there does not rebuild with its --only ({exc}); save the "
            f"current spec with `{command}`, which resumes the study (finished runs are kept)"
        ) from None
    set_spec = spec_with_sets(meta, sets) if sets else None  # validated before anything changes
    spec = set_spec or spec
    require_task_data(spec)
    check_train_path_fits(spec, train_path or meta.train_path)
    check_sources(meta.plugin_sources, spec_plugin_sources(spec.cells), paths.meta, allow_dirty)
    lock = StudyLock(paths, out).acquire()
    try:
        meta = relocate(paths, meta, out)
        db = sqlite_path(meta.tracking_uri)
        if db is not None and not db.is_file() and db.parent.resolve() != paths.dir.resolve():
            # a store study.json names elsewhere that is gone: creating it (and its directories)
            # would start an empty record there; the study's own folder is where a lost store is rebuilt
            raise StudyError(f"{paths.meta}: its store {db} does not exist; resume records only into an "
                             f"existing store or the study's own folder ({paths.db}): restore it, or "
                             f"`study launch <spec> --name {meta.name} --tracking-uri <store>`")
        reach_database(meta.tracking_uri, paths.meta)  # a server down, no credentials: one line
        if user or password:
            write_meta(paths, meta)
        if set_spec is not None:
            meta = resume_sets(paths, meta, set_spec, sets or {}, out)
        meta = set_train_path(paths, meta, train_path, out)
        options = DriverOptions(address=address, max_concurrent=max_concurrent, progress_seconds=progress_seconds)
        return run_pass(spec, paths, meta, options, out=out, lock=lock, deadline=deadline, trainer=trainer,
                       plugins=plugin_names)
    finally:
        lock.release()


