"""Where a study keeps its state, and the names of the files in it.

Layout of a study directory (``<root>/<name>/``, absolute)::

    study.json     the spec as launched (raw + resolved), profile, tracking URI
    mlflow.db      the MLflow SQLite store (unless --tracking-uri)
    artifacts/     MLflow artifact root of the study's experiment
    tune/          Ray Tune's experiment folder: its own state (never read back: every launch and
                   resume fits a new Tuner, and Tune's pickles are not unpickled) and the trial
                   checkpoints an unfinished trial continues from (``study.trial.trial_state``)
    runs/<key>/    per-run trainer out_dir (trial.json, config.json, result.json, checkpoint/, ...)
    optuna.db      Optuna studies (search specs only)
    study.lock     held (``flock``) by the one driver running the study: its PID, host, Ray session

The names of the files a training run writes are ``locattn``'s own
(:mod:`locattn.training.files`), re-exported here; the study's own names are defined here and
nowhere else. Standard library only (plus that import-free module and :mod:`record.store`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from locattn.training.files import (ATTENTION_JSON, ATTENTION_PNG, BEST_MODEL_FILE,  # noqa: F401
                                    CHECKPOINT_DIR, CHECKPOINT_META, CHECKPOINT_STATE,
                                    CONFIG_FILE, EXAMPLES_JSON, RESULT_FILE)
from record.store import sqlite_uri

META_FILE = "study.json"
"""The study as launched: spec (raw and resolved), profile, tracking URI."""
STORE_FILE = "mlflow.db"
"""The study's MLflow SQLite store."""
LOCK_FILE = "study.lock"
"""The driver's lock and its record (PID, host, Ray session)."""
UI_FILE = "ui.json"
"""Where ``study ui`` serves the study now (its MLflow UI's address, PID, host), while it runs:
``study report --html`` links its cells there."""
OPTUNA_FILE = "optuna.db"
"""Optuna's studies (search specs only)."""
ARTIFACTS_DIR = "artifacts"
TUNE_DIR = "tune"
RUNS_DIR = "runs"
TRIAL_FILE = "trial.json"
"""In a run folder: the trial and seed that own it, so a lost store can be rebuilt from it."""
CODE_DIFF = "code.diff"
"""Artifact of a run trained from uncommitted package code: ``git diff HEAD`` of
:data:`record.writer.PACKAGE_DIRS` and the untracked files there."""
RUN_ARTIFACTS = (ATTENTION_PNG, RESULT_FILE, ATTENTION_JSON, EXAMPLES_JSON)
"""The run-folder files logged to MLflow as artifacts (the JSON ones feed the exhibits)."""


@dataclass(frozen=True, kw_only=True)
class StudyPaths:
    """Where a study keeps its state."""

    dir: Path
    """The study directory (absolute)."""

    @property
    def meta(self) -> Path:
        return self.dir / META_FILE

    @property
    def db(self) -> Path:
        return self.dir / STORE_FILE

    @property
    def artifacts(self) -> Path:
        return self.dir / ARTIFACTS_DIR

    @property
    def tune(self) -> Path:
        return self.dir / TUNE_DIR

    @property
    def runs(self) -> Path:
        return self.dir / RUNS_DIR

    @property
    def optuna_db(self) -> Path:
        return self.dir / OPTUNA_FILE

    @property
    def lock(self) -> Path:
        return self.dir / LOCK_FILE

    def default_tracking_uri(self) -> str:
        """The study's own SQLite store as a tracking URI."""
        return sqlite_uri(self.db)


def study_paths(name_or_dir: str | Path, root: str | Path = "studies") -> StudyPaths:
    """Paths of a study given its name (under ``root``) or its directory."""
    p = Path(name_or_dir)
    if (p / META_FILE).is_file() or p.is_absolute() or len(p.parts) > 1:
        return StudyPaths(dir=p.resolve())
    return StudyPaths(dir=(Path(root) / p).resolve())


def is_study_dir(path: Path) -> bool:
    """Whether ``path`` holds a launched study (its ``study.json``)."""
    return (path / META_FILE).is_file()
