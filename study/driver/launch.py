"""Launch, resume and widen studies: spec -> Ray Tune (+ Optuna) -> MLflow.

:func:`launch` and :func:`resume` take the study's lock and hand the study to one runner, which
fits a new Tuner that :mod:`study.plan.tuner` plans from the spec and the record. The folder is :mod:`study.recording.folder`'s, the driver process's plumbing :mod:`study.driver.process`'s, the record
:mod:`study.recording.record_callback`'s. Nothing here calls ``ray.init`` at import time.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from locattn.config import OPERATIONAL_FIELDS
from record import schema
from record.layout import StudyPaths, study_paths
from record.power import power_lines
from record.summary import RunCounts
from record.store import FULL, READ_ONLY, is_server, redact, split_credentials, sqlite_path, store_condition
from study.plan import slices
from study.cost import study_eta
from study.cost.paths import choose_train_path  # a new study's train path when none is given
from study.driver.process import RayStart, StudyLock, check_gpus, init_ray, quiet_tune, stop_ray
from study.driver.signals import Interrupt, deadline as make_deadline, limit_text
from study.recording.folder import (StudyError, load_meta, new_study_paths, one_line_os_error, reach_database, relocate,
                                    spec_from_meta, take_credentials, write_meta)
from study.recording.meta import DEFAULT_TRAIN_PATH, DriverOptions, StudyMeta
from study.plan.preflight import check_train_path_fits
from study.spec.plugins import (check_attenders, check_sources, export_to_workers, import_named, labels_tag,
                                runtime_env, solo_note, spec_plugin_sources, spec_plugins, trusted_for_resume)
from study.spec.retention import disk_line
from study.recording.runs import run_folders, started_under_other_values
from study.spec import (SpecError, StudySpec, apply_sets, check_task_data, read_yaml, require_task_data,
                        resolve_spec, same_spec, size_warnings, spec_changes, widens)
from study.recording.status import trial_runs
from study.recording.study_store import browse_advice

if TYPE_CHECKING:
    from ray.tune.search import Searcher
    from study.cost import StudyEta
    from study.trial.trainable import Trainer
    from ray.tune import ResultGrid

    from study.recording.record_callback import RecordCallback


def resume_command(study_dir: Path, max_concurrent: int | None, address: str | None) -> str:
    """The ``study resume`` command a stopped driver prints, as it works when pasted: the study's
    folder (so no ``--root``), the concurrency it was given, and the Ray cluster it joined (the
    tracking URI is in study.json)."""
    return (f"study resume {study_dir}" + (f" --max-concurrent {max_concurrent}" if max_concurrent is not None else "")
            + (f" --address {address}" if address else ""))


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


#: Tune's experiment state, one file per driver (about 37 KB a trial); a study never restores it
#: (every launch and resume builds a new Tuner), so only the newest driver's is kept.
TUNE_STATE_GLOB = "experiment_state-*.json"


def prune_tune_state(tune_dir: Path) -> int:
    """Delete the experiment state files earlier drivers left in ``tune_dir``; returns how many."""
    old = sorted(tune_dir.glob(TUNE_STATE_GLOB)) if tune_dir.is_dir() else []
    for path in old:
        path.unlink(missing_ok=True)
    return len(old)


@dataclass(frozen=True)
class StudySummary:
    """What one driver pass of :func:`launch` or :func:`resume` did (a dry run returns a
    :class:`DryRunPlan` instead). Run counts are the record's, not Tune's trial states."""

    name: str
    """The study's name (its MLflow experiment)."""
    study_dir: Path
    """The study folder."""
    tracking_uri: str
    """The record's store (it may hold a password: show it through ``record.store.redact``)."""
    trials: int
    """Tune trials this pass fitted (0 when every trial was already finished in the record)."""
    errors: int
    """Of those, the trials that ended in an error."""
    skipped: int
    """Trials not run because the record holds all their runs finished."""
    wall_seconds: float
    """The pass's wall time, seconds."""
    fit_seconds: float
    """The Tuner's ``fit`` wall time, seconds (0.0 when nothing was fitted)."""
    interrupted: bool
    """Whether a signal or the time limit stopped the pass (``study resume`` continues it)."""
    time_limit: bool
    """Whether it was the time limit (``--time-limit``): the exit status is then 75."""
    runs: RunCounts
    """The record's run counts after the pass."""


@dataclass(frozen=True)
class DryRunPlan:
    """What ``study launch --dry-run`` planned (printed on its ``out``; nothing was written)."""

    name: str
    """The study's name."""
    study_dir: Path
    """The folder a launch would create or continue."""
    n_trials: int
    """Tune trials the spec plans."""
    n_runs: int
    """Trial runs (cells x hparam points x seeds)."""
    data_problems: tuple[str, ...]
    """A task's data that is missing or unreadable, one line each."""
    size_warnings: tuple[str, ...]
    """Limits the spec exceeds (:data:`study.spec.SIZE_LIMITS`): a launch asks for ``--yes``."""
    disk_short: bool
    """Whether the study folder's disk lacks the space the plan needs."""


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
            meta = _relaunch(spec, spec_path, raw, paths, name, only=only, seeds=seeds, train_path=train_path,
                             tracking_uri=tracking_uri, allow_dirty=allow_dirty, out=out, relaunch=(profile, sets))
        else:
            meta = new_meta(spec, spec_path, raw, paths, name, only=only, seeds=seeds, sets=sets,
                            train_path=train_path, tracking_uri=tracking_uri)
            write_meta(paths, meta)
        options = DriverOptions(address=address, max_concurrent=max_concurrent, progress_seconds=progress_seconds)
        return _run(spec, paths, meta, options, out=out, lock=lock, deadline=deadline, trainer=trainer,
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
    disk, short = disk_line(spec, _slots(spec, max_concurrent), paths.dir)
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
        disk, short = disk_line(spec, _slots(spec, max_concurrent), paths.dir)
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


def refuse_other_spec(spec: StudySpec, spec_path: Path, paths: StudyPaths, name: str, meta: StudyMeta,
                      profile: str | None, only: dict[str, list] | None, seeds: int | list[int] | None,
                      sets: dict[str, Any] | None) -> None:
    """A launch (or its dry run) of an existing study under a spec that neither is its own nor
    widens it: :class:`SpecError` in one line. When runs of the study finished, it names them
    and their values beside the launch's (another budget, ``--set optim.epochs=4``: the tables
    would pool the two) and the launch that puts the new spec beside them under another
    ``--name``. No ``--yes`` overrides it: a study is one spec, so that each of its cells is
    one number."""
    if widens(meta.resolved, spec.resolved) or same_spec(meta.resolved, spec.resolved):
        return
    changed = spec_changes(meta.resolved, spec.resolved)
    shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
    done = sum(1 for *_, status in trial_runs(meta.tracking_uri, name) if status == schema.STATUS_FINISHED)
    if done:
        old = "; ".join(c.split(" -> ")[0] for c in changed[:4])
        new = "; ".join(f"{c.split(': ')[0]}: {c.split(' -> ')[-1]}" for c in changed[:4])
        again = " ".join([f"study launch {spec_path}"] + ([f"--profile {profile}"] if profile else [])
                         + [f"--name {name}-2"] + [f"--only {k}={','.join(map(str, v))}" for k, v in (only or {}).items()]
                         + ([f"--seeds {_seeds_arg(seeds)}"] if seeds is not None else [])
                         + ["--set " + shlex.quote(f"{k}={json.dumps(v, separators=(',', ':'))}")
                            for k, v in (sets or {}).items()])
        raise SpecError(
            f"{spec_path}: study {name!r} at {paths.dir} has {done} finished run(s) under {old}, and this "
            f"launch asks for {new} ({meta.spec_path}, profile {meta.profile}, --only {_only_text(meta.only)}"
            f"{_seeds_text(meta)}): its {spec.n_runs()} runs would be planned beside them and the tables "
            f"would pool the two; launch it as another study, `{again}`, resume this one as it was "
            f"with `study resume {paths.dir}`, or widen it with the same spec and profile and a wider "
            "--only or more --seeds")
    raise SpecError(
        f"{spec_path}: study {name!r} at {paths.dir} was launched with a different spec or "
        f"profile (changed: {shown}) ({meta.spec_path}, profile {meta.profile}, --only "
        f"{_only_text(meta.only)}{_seeds_text(meta)}); resume it with `study "
        f"resume {paths.dir}`, widen it with the same spec and profile and a wider --only "
        "or more --seeds, or launch under another --name"
    )


def _relaunch(spec: StudySpec, spec_path: Path, raw: dict[str, Any], paths: StudyPaths, name: str, *,
              only: dict[str, list] | None, seeds: int | list[int] | None, train_path: str | None,
              tracking_uri: str | None, allow_dirty: bool, out: TextIO,
              relaunch: tuple[str | None, dict[str, Any] | None] = (None, None)) -> StudyMeta:
    """A launch of a study that exists: the same spec resumes it, a wider ``only`` or more
    ``seeds`` widens it, another spec is refused (:func:`refuse_other_spec`; ``relaunch``: the
    launch's ``--profile`` and ``--set``, for the command it suggests); returns its saved meta,
    updated (YAML, train path, tracking URI)."""
    meta = load_meta(paths)
    refuse_other_spec(spec, spec_path, paths, name, meta, relaunch[0], only, seeds, relaunch[1])
    check_sources(meta.plugin_sources, spec_plugin_sources(spec.cells), paths.meta, allow_dirty)
    meta = relocate(paths, meta, out)
    if widens(meta.resolved, spec.resolved):
        meta = _widen(paths, meta, spec, raw, only or {}, seeds, out)
    elif meta.raw != raw or meta.resolved != spec.resolved:
        # the YAML changed elsewhere (a description, a former key's new name): saved, so
        # that a resume rebuilds this spec
        meta = meta.replace(raw=raw, resolved=spec.resolved)
        write_meta(paths, meta)
    meta = _set_train_path(paths, meta, train_path, out)
    if tracking_uri and tracking_uri != meta.tracking_uri:
        print(f"[study {name}] WARNING: --tracking-uri {tracking_uri} differs from the one "
              f"saved in study.json ({meta.tracking_uri}); using {tracking_uri} from now on "
              "(finished runs missing there are re-recorded from the run directories)", file=out)
        meta = meta.replace(tracking_uri=tracking_uri)
        write_meta(paths, meta)
    print(f"[study {name}] exists at {paths.dir}: resuming (finished trials are not rerun)",
          file=out)
    return meta


def _slots(spec: StudySpec, max_concurrent: int | None) -> int:
    """Trials that run at once: the concurrency asked for, else what the CPUs allow."""
    limit = max_concurrent if max_concurrent is not None else spec.max_concurrent
    return limit or max(1, int((os.cpu_count() or 1) // max(spec.cpus, 1e-9)))


def _only_text(only: dict[str, list] | None) -> str:
    return " ".join(f"{k}={','.join(map(str, v))}" for k, v in (only or {}).items()) or "(none)"


def _set_train_path(paths: StudyPaths, meta: StudyMeta, train_path: str | None, out: TextIO) -> StudyMeta:
    """Save a launch's or resume's ``--train-path`` in study.json when it changes the study's."""
    if train_path is None or train_path == meta.train_path:
        return meta
    print(f"[study {meta.name}] --train-path {train_path} (was {meta.train_path}) "
          "from now on; run identities and finished runs are unchanged", file=out)
    meta = meta.replace(train_path=train_path)
    write_meta(paths, meta)
    return meta


def _seeds_text(meta: StudyMeta) -> str:
    return f", --seeds {_seeds_arg(meta.seeds)}" if meta.seeds is not None else ""


def _seeds_arg(seeds: int | list[int]) -> str:
    return ",".join(map(str, seeds)) if isinstance(seeds, list) else str(seeds)


def _seed_range(seeds: list[int]) -> str:
    """``[0, 1, 2]`` -> ``0-2``; other lists as they are."""
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def _widen(paths: StudyPaths, meta: StudyMeta, spec: StudySpec, raw: dict[str, Any],
           only: dict[str, list], seeds: int | list[int] | None, out: TextIO) -> StudyMeta:
    """Grow a study to a wider ``--only`` or more ``--seeds`` of its own spec and profile. Finished runs stay in the
    record and are not rerun. Tune's state knows only the old trials, so it is set aside (kept,
    never deleted) and the trials are planned from the record; a run that was part-way through
    starts again from its first epoch. The YAML read now (``raw``) is saved with the wider
    ``--only``: its grid may have grown since the launch, and a resume rebuilds the spec from both."""
    before = resolve_spec(raw, path=meta.spec_path, profile=meta.profile or None,
                          only=meta.only or None, seeds=meta.seeds).n_trials()
    old_seeds = meta.resolved.get("seeds") or []
    grown = (f" and seeds {_seed_range(old_seeds)} -> {_seed_range(list(spec.seeds))}"
             if list(spec.seeds) != old_seeds else "")
    print(f"[study {meta.name}] widening --only {_only_text(meta.only)} -> "
          f"{_only_text(only)}{grown}: {before} -> {spec.n_trials()} trials; finished runs are kept, "
          "unfinished ones start again", file=out)
    if paths.tune.exists():
        aside = paths.tune.with_name(f"tune.before-widening-{int(time.time())}")
        try:
            paths.tune.rename(aside)
        except OSError as exc:
            raise StudyError(one_line_os_error(exc, paths.dir)) from None
        print(f"[study {meta.name}] Tune's state of the narrower study set aside as {aside.name}",
              file=out)
    meta = meta.replace(only=only, seeds=seeds, raw=raw, resolved=spec.resolved)
    write_meta(paths, meta)
    return meta


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
        more = f" --seeds {_seeds_arg(meta.seeds)}" if meta.seeds is not None else ""
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
        meta = _set_train_path(paths, meta, train_path, out)
        options = DriverOptions(address=address, max_concurrent=max_concurrent, progress_seconds=progress_seconds)
        return _run(spec, paths, meta, options, out=out, lock=lock, deadline=deadline, trainer=trainer,
                    plugins=plugin_names)
    finally:
        lock.release()


def spec_with_sets(meta: StudyMeta, sets: dict[str, Any]) -> StudySpec:
    """The study's saved spec with ``sets`` as its last overrides (:func:`study.spec.apply_sets`
    in its profile), validated as a launch's are; raises :class:`SpecError` in one line."""
    raw = apply_sets(meta.raw, meta.profile or None, sets)
    return resolve_spec(raw, path=meta.spec_path, profile=meta.profile or None,
                        only=meta.only or None, seeds=meta.seeds)


def resume_sets(paths: StudyPaths, meta: StudyMeta, spec: StudySpec, sets: dict[str, Any],
                out: TextIO) -> StudyMeta:
    """Record ``study resume --set`` in ``study.json`` (``raw``, ``resolved`` and ``set``), so
    that later resumes, status and reports see the spec the runs train under. A set that
    changes the spec changes the runs' identities: it is said, and refused once a run has
    finished under the old values, since the tables would pool the old and the new runs of a
    cell (launch such a study under another ``--name``), or while an unfinished run holds a
    checkpoint of the old values. A set of operational fields only (``num_threads``, ``device``:
    :data:`locattn.config.OPERATIONAL_FIELDS`) changes no identity and is taken as it is."""
    changed = spec_changes(meta.resolved, spec.resolved)
    name = meta.name
    old, new = meta.resolved.get("overrides") or {}, spec.resolved.get("overrides") or {}
    keys = {k for k in sets if old.get(k, old) != new.get(k, new)}  # the fields the sets change
    if changed and keys <= OPERATIONAL_FIELDS:  # threads, device, ...: no run's identity or metrics
        print(f"[study {name}] --set changes how its runs train ({'; '.join(changed)}), not what they "
              "compute: their identities stay, finished runs are kept", file=out)
    elif changed:
        shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
        done = sum(1 for *_, status in trial_runs(meta.tracking_uri, name)
                   if status == schema.STATUS_FINISHED)
        another = " ".join([f"launch another study, `study launch {meta.spec_path}"]  # the study's own options too
                           + ([f"--profile {meta.profile}"] if meta.profile else []) + [f"--name {name}-2"]
                           + [f"--only {k}={','.join(map(str, v))}" for k, v in meta.only.items()]
                           + ([f"--seeds {_seeds_arg(meta.seeds)}"] if meta.seeds is not None else [])
                           + ["--set " + shlex.quote(f"{k}={json.dumps(v, separators=(',', ':'))}")
                              for k, v in {**meta.sets, **sets}.items()]) + "`"
        if done:
            raise SpecError(
                f"--set changes study {name!r}'s spec ({shown}), but {done} of its runs finished under "
                f"the old values and its tables would pool them with the new ones: {another}")
        if started := started_under_other_values(paths.dir, sets):  # their checkpoints hold the old config
            folders = ", ".join(str(p.relative_to(paths.dir)) for p in started[:3])
            raise SpecError(
                f"--set changes study {name!r}'s spec ({shown}), but {len(started)} of its runs started under "
                f"the old values ({folders}{', ...' if len(started) > 3 else ''}) and their checkpoints cannot "
                f"continue under the new ones: `study resume {paths.dir}` without --set finishes them, or "
                f"{another}")
        print(f"[study {name}] --set changes its spec ({shown}): the runs from here on train under the "
              "new values (new run identities; no run had finished under the old ones)", file=out)
    meta = meta.replace(raw=apply_sets(meta.raw, meta.profile or None, sets), resolved=spec.resolved,
                        sets={**meta.sets, **sets})
    write_meta(paths, meta)
    return meta


def _run(spec: StudySpec, paths: StudyPaths, meta: StudyMeta, options: DriverOptions, *, out: TextIO,
         deadline: tuple[float, float] | None = None, **kw: Any) -> StudySummary:
    """:func:`_run_locked`, with Ctrl-C and SIGTERM ours from here on (a signal in the first
    seconds of a launch stops it in one line and leaves it resumable: driver.Interrupt), and a
    full disk or a read-only store said in one line."""
    interrupt = Interrupt(meta.name, out, deadline).install()
    try:
        return _run_locked(spec, paths, meta, options, out=out, deadline=deadline, interrupt=interrupt, **kw)
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
        eta = study_eta(trials * (spec.search.num_samples if spec.search else 1), _slots(spec, max_concurrent))
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


def summarise(name: str, study_dir: Path, tracking_uri: str, grid: ResultGrid | None, counts: RunCounts, *,
              skipped: int, wall_seconds: float, fit_seconds: float, interrupted: bool,
              timed_out: bool) -> StudySummary:
    """A driver pass's summary: the study, trials fitted and failed (``grid``: Tune's result
    grid or None), ``counts`` (the record's run counts), times in seconds, and whether a signal
    (``interrupted``) or the time limit (``time_limit``) stopped it."""
    return StudySummary(
        name=name, study_dir=Path(study_dir), tracking_uri=tracking_uri,
        trials=len(grid) if grid is not None else 0,
        errors=sum(1 for r in grid if r.error is not None) if grid is not None else 0,
        skipped=skipped, wall_seconds=wall_seconds, fit_seconds=fit_seconds,
        interrupted=interrupted, time_limit=interrupted and timed_out, runs=counts)


def summary_line(summary: StudySummary, *, max_concurrent: int | None, address: str | None,
                 deadline: tuple[float, float] | None) -> str:
    """The driver's last line: runs finished, failed and not finished, the record, and what to
    do next (resume after a signal or the time limit, else where to browse the record)."""
    name, study_dir, tracking_uri, runs = summary.name, summary.study_dir, summary.tracking_uri, summary.runs
    line = (f"[study {name}] {runs.finished} of {runs.expected} runs finished, "
            f"{runs.failed} failed, {runs.unfinished} not finished; record: "
            f"{tracking_uri} (experiment {name!r})")
    # The resume command says the concurrency this driver was given: the study resumes with
    # the spec's otherwise, which may be more trials than the user chose to run at once.
    again = resume_command(study_dir, max_concurrent, address)
    if summary.time_limit:
        limit_arg = limit_text(deadline[0])
        return (f"{line}. Time limit {limit_arg} reached (exit status {slices.EXIT_TIME_LIMIT}): "
                f"continue with `{again} --time-limit {limit_arg}`")
    if summary.interrupted:
        return f"{line}. Interrupted: continue with `{again}`"
    return f"{line}; {browse_advice(tracking_uri, study_dir, name)}"
