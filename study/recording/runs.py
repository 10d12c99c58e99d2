"""``study runs``: which run folder is which run.

A study keeps each run's files under ``<study>/runs/<key>/``, where ``<key>`` is the run's
identity hash (``sha1(study, cell, hparams, seed)[:16]``, see :func:`study.spec.run_key`). This
listing maps each folder to the run's UI name (variant · task · seed · hparams), its cell and
how far it got, from the folder's own files: ``trial.json`` (written when the run starts),
``checkpoint/meta.json`` (the last saved epoch) and ``result.json`` (written last). Standard
library only: it reads no store and imports neither torch, Ray nor MLflow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from locattn.config import apply_overrides, run_config_from_dict, run_identity
from locattn.folders import RUN_KEY
from record.layout import CHECKPOINT_DIR, CHECKPOINT_META, CONFIG_FILE, RESULT_FILE, RUNS_DIR, TRIAL_FILE
from study.trial.descriptor import run_dir
from study.recording.naming import run_name


@dataclass(frozen=True, kw_only=True)
class RunFolder:
    """One ``<study>/runs/<key>/`` folder."""

    key: str
    """The folder's name: the run's identity hash."""
    name: str
    """The run's name in the MLflow UI (``1step·copy·s0``); ``?`` if trial.json is unreadable."""
    cell: str
    """The grid cell, ``task=copy,variant=onestep``."""
    seed: int | None
    state: str
    """``finished``, ``epoch N`` (last checkpoint) or ``started`` (nothing saved yet)."""


def read_folder(path: Path) -> RunFolder:
    """What one run folder says about its run."""
    try:
        body = json.loads((path / TRIAL_FILE).read_text())
        trial, seed = body["trial"], int(body["seed"])
        hparams = {**(trial.get("hparams") or {}), **(body.get("search") or {})}
        name = run_name(task=trial["task"], variant=trial["variant"], seed=seed, hparams=hparams,
                        cell=trial.get("cell", ""))
        cell = str(trial.get("cell", ""))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        name, cell, seed = "?", "?", None
    if (path / RESULT_FILE).is_file():
        state = "finished"
    else:
        try:
            state = f"epoch {int(json.loads((path / CHECKPOINT_DIR / CHECKPOINT_META).read_text())['epoch'])}"
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            state = "started"
    return RunFolder(key=path.name, name=name, cell=cell, seed=seed, state=state)


def run_folders(study_dir: str | Path) -> list[Path]:
    """The study's run folders, ``<study>/runs/<key>``, in key order, each through the one check
    (:func:`study.trial.descriptor.run_dir`); an entry not named as a run key is left out unread.
    :class:`locattn.folders.FolderError` (one line) if one, or ``runs/``, links out of the study."""
    root = Path(study_dir) / RUNS_DIR
    if not root.is_dir():
        return []
    return [run_dir(study_dir, p.name) for p in sorted(root.iterdir()) if RUN_KEY.fullmatch(p.name)]


def started_under_other_values(study_dir: str | Path, sets: dict[str, Any]) -> list[Path]:
    """The unfinished run folders whose run ``sets`` (dotted overrides, ``study resume --set``)
    would give another identity: runs started under the old values, whose checkpoints (in the
    folder or in a Tune trial it lists) hold the old config and cannot be continued under the
    new one. Read from each folder's ``config.json``; a folder without one is left out (nothing
    trained there), one that does not read or take the overrides is counted."""
    out = []
    for path in run_folders(study_dir):
        if (path / RESULT_FILE).is_file() or not (path / CONFIG_FILE).is_file():
            continue
        try:
            old = run_config_from_dict(json.loads((path / CONFIG_FILE).read_text()))
            changed = run_identity(apply_overrides(old, sets)) != run_identity(old)
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            changed = True
        if changed:
            out.append(path)
    return out


def list_runs(study_dir: Path) -> list[RunFolder]:
    """Every run folder of the study, sorted by cell, then seed, then name; an entry not named
    as a run key is left out unread. :class:`locattn.folders.FolderError` if one links out of
    the study."""
    folders = [read_folder(p) for p in run_folders(study_dir) if p.is_dir()]
    return sorted(folders, key=lambda r: (r.cell, -1 if r.seed is None else r.seed, r.name))


def format_runs(runs: list[RunFolder], study_dir: Path) -> str:
    """One line per run folder: key, state, name, cell; a note when there is none."""
    if not runs:
        return f"no run folders under {Path(study_dir) / RUNS_DIR} (none started here yet)"
    width = max(len(r.name) for r in runs)
    lines = [f"{'folder':<16}  {'state':<9}  {'run':<{width}}  cell"]
    lines += [f"{r.key:<16}  {r.state:<9}  {r.name:<{width}}  {r.cell}" for r in runs]
    lines.append(f"{len(runs)} run folder(s) under {Path(study_dir) / RUNS_DIR}")
    return "\n".join(lines)
