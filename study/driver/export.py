"""Train a study's runs on a machine without Ray or MLflow: ``study export`` and ``study import``.

``export`` plans the study's unfinished trials as a resume would (from the record) and writes a
folder for :mod:`locattn.offline`: its manifest (per trial the descriptor, per run its key,
seed and resolved ``RunConfig``) and per run a seed folder with the run's trial file and any
partial trainer checkpoint. The worker trains them there into ``RUNS_DIR/<run key>/``;
``import`` copies the run folders back into ``<study>/runs/``: the next ``study resume``
records the finished ones from disk (:func:`study.recording.record_callback.reconcile`) instead of training them,
and continues the unfinished ones from their checkpoints, which the import stages as a Tune
checkpoint of an earlier attempt of their trial (:func:`stage_offline`).
Grid studies only: a search study's trials are sampled by Optuna as it goes.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Mapping, Sequence, TextIO

import torch
from mlflow.tracking import MlflowClient

from locattn.config import config_to_dict
from locattn.folders import FolderError, confined, copy_regular
from locattn.offline import DROP_KEY, MANIFEST_FILE, MANIFEST_FORMAT
from locattn.train import find_checkpoint
from record import layout
from record.layout import StudyPaths
from record.store import experiment_id, local_store
from record.writer import RunState, existing_runs
from study.trial.descriptor import TrialDescriptor, finished_result, write_trial_file
from study.driver.process import StudyLock
from study.recording.folder import load_meta, new_study_paths, spec_from_meta, write_meta
from study.recording.meta import StudyMeta
from study.plan.tuner import plan_trials
from study.spec.retention import DROPPED, study_keep
from study.trial.trial_state import RUN_SUBDIR, stage_checkpoint
from study.spec import SpecError, StudySpec, read_yaml, require_task_data, resolve_spec
from study.recording.study_store import current_store

#: Where the seed folders lie in an export folder (``<out>/runs/<run key>/``).
SEEDS_DIR = layout.RUNS_DIR
#: Name of the Tune checkpoint an import stages for a trial's unfinished runs (under
#: ``<study>/tune/trial_offline_<first run key>/``), where a resumed trial finds it.
OFFLINE_TRIAL = "trial_offline_{}"
OFFLINE_CHECKPOINT = "checkpoint_000000"


def _grid_spec(paths: StudyPaths, meta: StudyMeta, what: str) -> StudySpec:
    spec = spec_from_meta(meta)
    if spec.search is not None:
        raise SpecError(f"study {meta.name!r} is a search study (Optuna samples its trials as it "
                        f"goes): only grid studies can be {what}")
    return spec


def record_runs(meta: StudyMeta, paths: StudyPaths) -> dict[str, RunState]:
    """run key -> RunState of every run in the study's record (empty before its first run)."""
    uri = current_store(meta.tracking_uri, paths.dir)
    if local_store(uri) is not None:  # SQLite: read without creating a store
        exp = experiment_id(uri, meta.name)
        return existing_runs(None, uri, exp) if exp is not None else {}
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(meta.name)
    return existing_runs(client, uri, found.experiment_id) if found is not None else {}


def create(spec_path: Path, *, profile: str | None, name: str | None, root: str | Path,
           out: TextIO) -> StudyPaths:
    """The study of a spec, created as ``study launch`` creates it (its ``study.json``, the
    default SQLite store) but with nothing run, so that its runs can be exported before any
    ran here. An existing study of that name is returned as it is."""
    spec_path = spec_path.resolve()
    raw = read_yaml(spec_path)
    spec = resolve_spec(raw, path=str(spec_path), profile=profile, only=None)
    where = "--name" if name else f"{spec_path}: name and profile"
    name = name or (f"{spec.name}-{spec.profile}" if spec.profile else spec.name)
    if spec.search is not None:
        raise SpecError(f"study {name!r} is a search study (Optuna samples its trials as it goes): "
                        "only grid studies can be exported")
    paths = new_study_paths(root, name, where)
    if paths.meta.is_file():
        return paths
    require_task_data(spec)
    paths.dir.mkdir(parents=True, exist_ok=True)
    write_meta(paths, StudyMeta(name=name, spec_path=str(spec_path), profile=spec.profile, raw=raw,
                                resolved=spec.resolved, tracking_uri=paths.default_tracking_uri(),
                                created=time.time()))
    print(f"[study {name}] created at {paths.dir} (nothing run yet)", file=out)
    return paths


def _matches(desc: TrialDescriptor, only: Mapping[str, list]) -> bool:
    for axis, values in only.items():
        if axis in ("task", "variant", "cell"):
            value = getattr(desc, axis)
        else:
            value = {**desc.overrides, **desc.hparams}.get(axis)
        if str(value) not in {str(v) for v in values}:
            return False
    return True


def export(paths: StudyPaths, out_dir: Path, *, only: Mapping[str, list] | None = None,
           seeds: Sequence[int] | None = None, limit: int | None = None, out: TextIO) -> dict[str, int]:
    """Write the export folder ``out_dir`` for the study's unfinished runs; counts of trials
    and runs exported. ``seeds``: only these seeds' runs of each trial (a packed trial's pack
    is then those seeds: several workers can train one large pack in parts)."""
    meta = load_meta(paths)
    spec = _grid_spec(paths, meta, "exported")
    if seeds is not None:
        stray = sorted(set(seeds) - set(spec.seeds))
        if stray:
            raise SpecError(f"--seeds: {', '.join(map(str, stray))} not a seed of study {meta.name!r} "
                            f"(its seeds: {', '.join(map(str, spec.seeds))})")
    if out_dir.exists() and not out_dir.is_dir():
        raise SpecError(f"--out {out_dir}: a file, not a folder; export into a new folder")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise SpecError(f"{out_dir}: not empty; export into a new folder")
    lock = StudyLock(paths, out).acquire()  # never while a driver trains these runs
    try:
        trials, _ = plan_trials(spec, paths, meta, record_runs(meta, paths))
        trials = [t for t in trials if _matches(t, only or {})]
        entries, n_runs, on_disk = [], 0, 0
        for desc in trials:
            runs = []
            for seed, key in desc.run_keys:
                if seeds is not None and int(seed) not in seeds:
                    continue
                cfg = desc.run_config(key)
                if finished_result(desc.run_dir(key), cfg) is not None:
                    on_disk += 1  # finished, not yet recorded: the next resume records it
                    continue
                folder = out_dir / SEEDS_DIR / key
                write_trial_file(folder, desc, seed)
                found = find_checkpoint(desc.run_dir(key))
                if found is not None:  # training continues from it
                    shutil.copytree(found, folder / layout.CHECKPOINT_DIR)
                runs.append({"key": key, "seed": int(seed), "config": config_to_dict(cfg),
                             "folder": f"{SEEDS_DIR}/{key}", "checkpoint": found is not None})
            if runs:
                entries.append({"trial": desc.to_dict(), "search": dict(desc.search),
                                "packed": desc.packed, "runs": runs})
                n_runs += len(runs)
            if limit is not None and len(entries) >= limit:
                break
        out_dir.mkdir(parents=True, exist_ok=True)
        manifest = {"format": MANIFEST_FORMAT, "study": meta.name, "created": time.time(),
                    "trials": entries, DROP_KEY: list(DROPPED[study_keep(paths.dir)])}
        (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    finally:
        lock.release()
    print(f"[study {meta.name}] exported {len(entries)} trials ({n_runs} runs) to {out_dir}"
          + (f"; {on_disk} finished runs are on disk already (`study resume` records them)" if on_disk else "")
          + f". Train them with `python -m locattn.offline {out_dir} --out RUNS_DIR`, then "
          f"`study import {meta.name} RUNS_DIR`", file=out)
    return {"trials": len(entries), "runs": n_runs, "on_disk": on_disk}


def import_runs(paths: StudyPaths, runs_dir: Path, *, out: TextIO, skip_others: bool = False
                ) -> dict[str, int | dict[str, int]]:
    """Copy the run folders of ``runs_dir`` into the study's ``runs/`` (an unfinished one with
    its checkpoint staged for the next resume; one without a checkpoint is left out); a folder
    of another study, or of a run the study does not plan, refuses the whole import.
    ``skip_others``: a folder of another study is left for that study's import instead (one
    worker's ``--out`` can hold several studies' runs)."""
    meta = load_meta(paths)
    spec = _grid_spec(paths, meta, "imported")
    name = meta.name
    if not runs_dir.is_dir():
        raise SpecError(f"{runs_dir}: no such folder")
    lock = StudyLock(paths, out).acquire()  # never under a running driver
    try:
        planned, _ = plan_trials(spec, paths, meta, {})
        keys = {key: (seed, desc) for desc in planned for seed, key in desc.run_keys}
        found, others = import_folders(runs_dir, keys, name, skip_others)
        copied, unfinished, present, staged, kept = copy_runs(paths, runs_dir, found)
    finally:
        lock.release()
    n_staged = sum(len(h) for _, h in staged.values())
    print(import_line(name, paths.dir, runs_dir, copied=copied, present=present, n_staged=n_staged,
                      unfinished=unfinished, kept=kept, others=others), file=out)
    return {"copied": copied, "present": present, "staged": n_staged, "unfinished": unfinished,
            "other_studies": others}


def import_folders(runs_dir: Path, keys: dict[str, tuple[int, Any]], name: str,
                   skip_others: bool) -> tuple[list[tuple[Path, Any]], dict[str, int]]:
    """The run folders of ``runs_dir`` to import into study ``name`` (``keys``: run key ->
    (seed, the trial's descriptor) of the runs it plans), each with its descriptor, and the
    count of other studies' folders skipped (``skip_others``; else one is a :class:`SpecError`)."""
    found, others = [], {}
    for folder in sorted(runs_dir.iterdir()):
        if folder.name.startswith(".") or (folder.is_file() and not folder.is_symlink()):
            continue  # a worker's staging folder, a log beside the run folders
        if folder.is_symlink() or not folder.is_dir():
            raise SpecError(f"{folder}: {'a symlink' if folder.is_symlink() else 'not a folder'}: a "
                            "run folder is a plain folder; nothing imported")
        try:
            body = json.loads((folder / layout.TRIAL_FILE).read_text())
            study, seed = body["trial"]["study"], int(body["seed"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise SpecError(f"{folder}: no readable {layout.TRIAL_FILE} ({type(exc).__name__}): not a "
                            "run folder of `python -m locattn.offline`") from None
        if study != name and skip_others:
            others[study] = others.get(study, 0) + 1
            continue
        if study != name:
            raise SpecError(f"{folder}: its {layout.TRIAL_FILE} names study {study!r}, not {name!r} "
                            "(to import only this study's folders: --skip-other-studies)")
        if keys.get(folder.name, (None,))[0] != seed:
            raise SpecError(f"{folder}: run key {folder.name} (seed {seed}) is not a run study "
                            f"{name!r} plans")
        found.append((folder, keys[folder.name][1]))
    return found, others


def copy_runs(paths: StudyPaths, runs_dir: Path, found: list[tuple[Path, Any]]) -> tuple[Any, ...]:
    """Copy the ``found`` run folders into the study: every copy is made (to a staging folder)
    before any run folder changes, and a failed copy leaves the study as it was (a
    :class:`SpecError`, nothing imported). A finished run already in the study, or one further
    along there, is kept. Returns (finished runs copied, unfinished keys without a checkpoint,
    finished already, staged: first run key -> (descriptor, key -> checkpoint history), kept)."""
    copied, unfinished, present, staged, kept = 0, [], 0, {}, []
    moves = []  # (staging copy, run folder): every copy made before any run folder changes
    try:
        for folder, desc in found:
            cfg = desc.run_config(folder.name)
            done = finished_result(folder, cfg) is not None
            dest = confined(paths.runs, folder.name, what=f"{paths.runs}", key=True)
            if finished_result(dest, cfg) is not None:
                present += 1
                continue
            history = None if done else checkpoint_history(folder)
            if not done and history is None:
                unfinished.append(folder.name)
                continue
            here = None if done else checkpoint_history(dest)
            if here is not None and int(here[-1]["epoch"]) >= int(history[-1]["epoch"]):
                kept.append(f"{folder.name} at epoch {int(here[-1]['epoch'])} here, "
                            f"{int(history[-1]['epoch'])} in the import")
                continue  # the study's own checkpoint is further along: never replaced by an older one
            tmp = paths.runs / f".{folder.name}.import"
            shutil.rmtree(tmp, ignore_errors=True)
            moves.append((tmp, dest))
            copy_regular(folder, tmp, what=f"study import {runs_dir}")
            if done:
                copied += 1
            else:
                staged.setdefault(desc.run_keys[0][1], (desc, {}))[1][folder.name] = history
    except BaseException as exc:
        for tmp, _ in moves:
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, FolderError):
            raise SpecError(f"{exc}; nothing imported") from None
        if isinstance(exc, OSError):
            raise SpecError(f"study import {runs_dir}: {exc}; nothing imported") from None
        raise
    for tmp, dest in moves:
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    for first, (desc, histories) in staged.items():
        stage_offline(paths, desc, first, histories)
    return copied, unfinished, present, staged, kept


def import_line(name: str, study_dir: Path, runs_dir: Path, *, copied: int, present: int, n_staged: int,
                unfinished: list[str], kept: list[str], others: dict[str, int]) -> str:
    """The line ``study import`` ends with: what was imported, what was kept or left out."""
    line = f"[study {name}] imported {copied} finished runs from {runs_dir}"
    if present:
        line += f"; {present} were finished in the study already"
    if n_staged:
        line += f"; {n_staged} not finished, imported with their checkpoints (study resume continues them)"
    if unfinished:
        line += f"; {len(unfinished)} not finished without a checkpoint, left out (study resume trains them)"
    if kept:
        line += f"; kept {len(kept)} runs further along here than in the import ({'; '.join(kept[:4])}" \
                f"{' ...' if len(kept) > 4 else ''})"
    if others:
        line += ("; skipped the folders of other studies (" + ", ".join(f"{k}: {v}" for k, v in sorted(others.items()))
                 + f"), for `study import <that study> {runs_dir} --skip-other-studies`")
    return f"{line}. Record them: `study resume {study_dir}`"


def checkpoint_history(folder: Path) -> list[dict[str, Any]] | None:
    """The epoch history of a run folder's verified trainer checkpoint, or None."""
    found = find_checkpoint(folder)
    if found is None:
        return None
    try:
        history = torch.load(found / layout.CHECKPOINT_STATE, map_location="cpu", weights_only=True)["history"]
    except (OSError, RuntimeError, KeyError, TypeError, ValueError):
        return None
    return [dict(h) for h in history] if isinstance(history, list) and history else None


def stage_offline(paths: StudyPaths, desc: TrialDescriptor, first: str,
                  histories: Mapping[str, list[dict[str, Any]]]) -> None:
    """Stage the imported unfinished runs of one trial as a Tune checkpoint of an earlier
    attempt of it (their run folders' trial files list it): a resumed trial restores their
    trainer checkpoints from there, and its first reports replay their offline epochs to the
    record, as after a killed driver (:mod:`study.trial.trial_state`)."""
    name = OFFLINE_TRIAL.format(first)
    state = {"replicas": {key: {"epoch": int(h[-1]["epoch"]), "history": h} for key, h in histories.items()},
             "done": [], "scores": {}}
    sources = {f"{RUN_SUBDIR}/{key}": paths.runs / key / layout.CHECKPOINT_DIR for key in histories}
    target = paths.tune / name / OFFLINE_CHECKPOINT
    staging = paths.tune / name / f".{OFFLINE_CHECKPOINT}.tmp"
    stage_checkpoint(staging, state, sources)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    seeds = dict((key, seed) for seed, key in desc.run_keys)
    for key in histories:
        write_trial_file(paths.runs / key, desc, seeds[key], name)
