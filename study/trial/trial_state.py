"""A trial's Tune checkpoints: the trial state file (with its own checksum and every trainer
checkpoint file's size and SHA-256), staging one, verifying one, choosing the most advanced
complete one on restore, and reading a state in the solo layout (one seed at a time). Ray is imported
only where a function asks Tune for the trial it runs in.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from ray import tune

from locattn.train import CHECKPOINT_DIR, file_sha256, remove_checkpoint
from record import layout
from study.trial.descriptor import listed_trials, trial_dirname

STATE_FILE = "trial_state.json"
#: Key of the trial state file's own SHA-256 (:func:`state_digest`).
STATE_DIGEST = "sha256"
RUN_SUBDIR = "run"
#: Tune's experiment directory under the study (``tune.RunConfig(name=...)``).
TUNE_DIRNAME = layout.TUNE_DIR


def stage_checkpoint(staging: Path, state: Mapping[str, Any], sources: Mapping[str, Path]) -> Path:
    """A directory with the trial state and (hard links to) trainer checkpoints:
    ``sources`` maps a path inside the staging directory to a checkpoint directory.

    The state file lists every file of the trainer checkpoints with its size and SHA-256, so a
    copy that a crash interrupted, or a file corrupted later, is recognised (:func:`read_complete`).
    """
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for rel, src in sources.items():
        try:
            shutil.copytree(src, staging / rel, copy_function=os.link)
        except OSError:
            shutil.rmtree(staging / rel, ignore_errors=True)
            shutil.copytree(src, staging / rel)
    files = {str(p.relative_to(staging)): [p.stat().st_size, file_sha256(p)]
             for p in sorted((staging / RUN_SUBDIR).rglob("*")) if p.is_file()}
    body = {**state, "files": files}
    (staging / STATE_FILE).write_text(json.dumps({**body, STATE_DIGEST: state_digest(body)}))
    return staging


def state_digest(body: Mapping[str, Any]) -> str:
    """SHA-256 of a trial state (its canonical JSON): the state file's own checksum, so an edit
    of its epoch history is caught like a corrupt model file."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def read_complete(ckpt_dir: Path, notices: list[str] | None = None) -> dict[str, Any] | None:
    """The trial state of a Tune checkpoint directory if it is complete and intact, else None.

    A file whose size or checksum differs from the state's list makes the checkpoint unusable,
    as does a state file whose own SHA-256 (:data:`STATE_DIGEST`) differs or is missing while
    its files carry theirs (only a state from before checksums is read unverified); that is said in one line naming the file (a restore then falls back to an older one), also
    appended to ``notices`` (the driver prints them: the worker's output never reaches the user).
    """
    try:
        state = json.loads((ckpt_dir / STATE_FILE).read_text())
        digest = state.pop(STATE_DIGEST, None)
        if digest is None and _lists_digests(state):
            # The writer that lists files' digests seals the state too: a missing seal is an
            # edit (deleting the key would otherwise let any change of the history through).
            _notice(notices, f"trial checkpoint file {ckpt_dir / STATE_FILE} is corrupt (no checksum "
                              "of its own); falling back to an older checkpoint")
            return None
        if digest is not None and digest != state_digest(state):
            _notice(notices, f"trial checkpoint file {ckpt_dir / STATE_FILE} is corrupt (checksum "
                              "mismatch); falling back to an older checkpoint")
            return None
        for rel, expect in (state.get("files") or {}).items():
            size, digest = (expect, None) if isinstance(expect, int) else expect
            path = ckpt_dir / rel
            if path.stat().st_size != size:
                return None
            if digest is not None and file_sha256(path) != digest:
                _notice(notices, f"trial checkpoint file {path} is corrupt (checksum mismatch); "
                                 "falling back to an older checkpoint")
                return None
    except (OSError, ValueError, TypeError, AttributeError):  # (AttributeError: not a JSON object)
        return None
    return state


def _lists_digests(state: Mapping[str, Any]) -> bool:
    """Whether a trial state lists a SHA-256 for any of its files (only a state from before
    checksums, sizes alone, is read unverified)."""
    files = state.get("files")
    return isinstance(files, dict) and any(not isinstance(v, int) for v in files.values())


def _notice(notices: list[str] | None, text: str) -> None:
    print(f"study: {text}", flush=True)
    if notices is not None:
        notices.append(text)


def newest_checkpoint(restored: Path | None, trial_dir: Path | None, notices: list[str] | None = None,
                      earlier: list[Path] = (), keys: set[str] | None = None
                      ) -> tuple[Path | None, dict | None]:
    """The most advanced complete checkpoint among the restored one and the trial's own.

    Tune restores the checkpoint named in its last experiment snapshot, which after a killed
    driver can be older than the trial's newest one, or stripped of its model files by
    :func:`strip_finished`. Every checkpoint on disk was reported by this trial and training
    is deterministic, so the complete one with the most progress (seeds finished, epochs) is the
    best place to continue; the first report after it replays its epoch history to the driver.

    The choice depends only on what verifies, never on which checkpoint Tune's snapshot names
    nor on directory names (a restore from an older snapshot makes Tune reuse the names of
    newer checkpoints): every candidate is read, and an unfinished seed counts only the epochs
    of model files the checkpoint holds and whose checksums match. ``earlier``: the trial
    directories of earlier attempts (:func:`earlier_trial_dirs`); with ``keys``, a state that
    names another run is skipped.
    """
    candidates = [restored] if restored is not None else []
    for folder in (trial_dir, restored.parent if restored is not None else None, *earlier):
        if folder is not None and folder.is_dir() and folder.name.startswith("trial_"):
            candidates += [p for p in sorted(folder.glob("checkpoint_*")) if p not in candidates]
    best: tuple[tuple[int, int], Path, dict] | None = None
    for path in candidates:
        state = read_complete(path, notices)
        if state is None or (keys is not None and not _names_only(state, keys)):
            continue
        rank = _rank(_held(state, path))
        if best is None or rank > best[0]:
            best = (rank, path, state)
    return (best[1], best[2]) if best is not None else (None, None)


def _names_only(state: Mapping[str, Any], keys: set[str]) -> bool:
    """Whether a trial state speaks only of the runs ``keys`` (the solo layout names none)."""
    named = set(state.get("replicas") or {}) | set(state.get("done") or [])
    return named <= keys


def earlier_trial_dirs(study_dir: str | Path, out_dirs: list[Path]) -> list[Path]:
    """The Tune trial directories that earlier attempts of these runs reported checkpoints to,
    as their trial files list them (:data:`TUNE_TRIALS`); a name of any other form is ignored."""
    tune_dir = Path(study_dir).resolve() / TUNE_DIRNAME
    found: list[Path] = []
    for out_dir in out_dirs:
        for name in listed_trials(out_dir):
            if tune_dir / name not in found:
                found.append(tune_dir / name)
    return found


def _held(state: Mapping[str, Any], ckpt_dir: Path) -> Mapping[str, Any]:
    """``state`` with only the replicas whose model files the checkpoint lists (and
    :func:`read_complete` verified): a replica without them would restart from scratch."""
    if "replicas" not in state:
        return state
    listed = {Path(rel).parts[1] for rel in state.get("files") or {} if len(Path(rel).parts) > 2}
    return {**state, "replicas": {k: v for k, v in state["replicas"].items() if k in listed}}


def _rank(state: Mapping[str, Any]) -> tuple[int, int]:
    """Progress of a trial state: (seeds finished, epochs of the unfinished ones).

    (A state in the solo layout, ``seed_index`` and ``epoch``, counts its seed index and that
    seed's epoch: the same progress.)
    """
    if "seed_index" in state:
        return int(state.get("seed_index", 0)), int(state.get("epoch", 0))
    epochs = sum(int(r.get("epoch", 0)) for r in (state.get("replicas") or {}).values())
    return len(state.get("done") or []), epochs


def strip_finished(trial_dir: Path | None) -> None:
    """A finished trial keeps its Tune checkpoints' trial state but drops the model files.

    Nothing resumes from them any more (every seed has its ``result.json``); a restore from
    one of them finds it incomplete and falls back to the final checkpoint (no model files).
    """
    if trial_dir is None or not trial_dir.is_dir():
        return
    for path in trial_dir.glob(f"checkpoint_*/{RUN_SUBDIR}"):
        shutil.rmtree(path, ignore_errors=True)


def current_trial_dir(study_dir: str | Path) -> Path | None:
    """This trial's directory under ``<study>/tune/``, where Tune keeps its checkpoints.

    (``tune.get_context().get_trial_dir()`` names a directory under Ray's temporary working
    directory, not the storage directory, so it held no checkpoints to scan or strip.)
    """
    try:
        trial_id = tune.get_context().get_trial_id()
    except Exception:  # noqa: BLE001 - not inside a Tune trial
        return None
    if not trial_id:
        return None
    return Path(study_dir).resolve() / TUNE_DIRNAME / trial_dirname(trial_id)


def restore_run_checkpoint(out_dir: Path, source: Path | None) -> None:
    """Make ``out_dir/checkpoint`` equal to ``source``, the run's trainer checkpoint inside the
    Tune checkpoint (or absent: start fresh).

    The Tune checkpoint is the source of truth: every epoch it holds was reported, so metrics
    continue without gaps.
    """
    remove_checkpoint(out_dir)
    if source is not None and source.is_dir():
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, out_dir / CHECKPOINT_DIR)


def upgrade_state(found: Mapping[str, Any], ckpt_dir: Path, keys: list[tuple[int, str]]
                   ) -> tuple[dict[str, Any], dict[str, Path]]:
    """A restored trial state in today's layout, and where in ``ckpt_dir`` each of its
    replicas' trainer checkpoints lies.

    A state in the solo layout keeps its progress as (``seed_index``, ``epoch``, ``history``)
    with the one trainer checkpoint at ``run/``; it is read as the same progress, so such a
    study resumes where it stopped.
    """
    state = {k: v for k, v in found.items() if k not in ("files", "packed")}
    if "seed_index" not in state:
        state.setdefault("replicas", {})
        state.setdefault("done", [])
        state.setdefault("scores", {})
        return state, {key: ckpt_dir / RUN_SUBDIR / key for key in state["replicas"]}
    ordered = [key for _, key in keys]
    index = min(int(state["seed_index"]), len(ordered))
    upgraded: dict[str, Any] = {"replicas": {}, "done": ordered[:index],
                                "scores": dict(state.get("scores") or {})}
    sources: dict[str, Path] = {}
    if index < len(ordered) and int(state.get("epoch", 0)) > 0:
        key = ordered[index]
        upgraded["replicas"][key] = {"epoch": int(state["epoch"]),
                                     "history": list(state.get("history") or [])}
        sources[key] = ckpt_dir / RUN_SUBDIR
    return upgraded, sources


def staged_runs(ckpt_dir: Path) -> dict[str, tuple[int, Path]]:
    """Run key -> (epoch, trainer checkpoint directory) of every seed whose model files a
    complete Tune checkpoint of a trial holds (empty when it is incomplete or holds none)."""
    state = read_complete(ckpt_dir)
    if state is None:
        return {}
    if "seed_index" in state:  # the solo layout: one trainer checkpoint at run/
        path = ckpt_dir / RUN_SUBDIR
        return {"": (int(state.get("epoch", 0)), path)} if (path / layout.CHECKPOINT_STATE).is_file() else {}
    out = {}
    for key, replica in (state.get("replicas") or {}).items():
        path = ckpt_dir / RUN_SUBDIR / key
        if (path / layout.CHECKPOINT_STATE).is_file():
            out[key] = (int(replica.get("epoch", 0)), path)
    return out
