"""What one Tune trial trains: its descriptor (the JSON-safe ``trial`` entry of a Tune config),
the runs it trains (seed, run key, hparams), their resolved ``RunConfig``s and run folders, and
what a finished run left (its final metrics, its ``result.json``). No Ray.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from dataclasses import asdict, is_dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from locattn.config import make_run_config, run_identity
from locattn.train import load_result
from record import layout
from record.layout import TRIAL_FILE
from study.keys import run_key

#: Result key of a trial's objective (the median over all its seeds of the search metric).
OBJECTIVE = "objective"
#: Key of a run's trial file listing the Tune trial directories that trained it, newest last. A
#: resumed study starts new Tune trials (it never restores Tune's pickled state), which find
#: the earlier attempts' checkpoints there. Only names of this form, directly under ``tune/``.
TUNE_TRIALS = "tune_trials"
TUNE_TRIAL_NAME = re.compile(r"trial_[A-Za-z0-9_]{1,64}")
TUNE_TRIALS_KEPT = 8


def trial_dirname(trial_id: str) -> str:
    """Name of a trial's directory under ``<study>/tune/`` (``trial_dirname_creator``)."""
    return f"trial_{trial_id}"


def trial_descriptor(
    *,
    study: str,
    study_dir: str,
    cell: str,
    task: str,
    variant: str,
    overrides: Mapping[str, Any],
    hparams: Mapping[str, Any],
    seeds: tuple[int, ...] | list[int],
    cpus: float,
    metric: str,
    train_fn: str,
    gpus: float = 0.0,
    pack: bool = False,
    points: Any = (),
) -> dict[str, Any]:
    """The JSON-safe description of one trial placed in its Tune config.

    ``points``: the hparams points a packed trial trains (each with every seed), when it packs
    hparams axes; ``hparams`` is then the first of them. Left out of the descriptor otherwise,
    so a trial that packs no hparams keeps the descriptor its run folders' trial files hold."""
    out = {
        "study": study,
        "study_dir": str(study_dir),
        "cell": cell,
        "task": task,
        "variant": variant,
        "overrides": dict(overrides),
        "hparams": dict(hparams),
        "seeds": [int(s) for s in seeds],
        "cpus": float(cpus),
        "gpus": float(gpus),
        "metric": metric,
        "train_fn": train_fn,
        "pack": bool(pack) or len(points) > 1,
    }
    if len(points) > 1:
        out["points"] = [dict(p) for p in points]
    return out


def is_packed(config: Mapping[str, Any]) -> bool:
    """Whether the trial trains its runs (seeds, hparams points) together as one packed model."""
    t = config["trial"]
    return bool(t.get("pack")) and len(t["seeds"]) * len(t.get("points") or [None]) > 1


def trial_members(config: Mapping[str, Any]) -> list[tuple[int, str, dict[str, Any]]]:
    """(seed, run key, hparams) of every run this trial trains, in training order: per hparams
    point (one unless the trial packs hparams axes) every seed. The hparams are the grid
    hparams plus the Optuna-sampled values."""
    t = config["trial"]
    search = config.get("search") or {}
    out = []
    for point in t.get("points") or [t["hparams"]]:
        hp = {**point, **search}
        out += [(seed, run_key(t["study"], t["cell"], hp, seed), hp) for seed in t["seeds"]]
    return out


def trial_hparams(config: Mapping[str, Any], key: str | None = None) -> dict[str, Any]:
    """Selection hyperparameters of the trial's run ``key`` (default: its first run)."""
    members = trial_members(config)
    return next((hp for _, k, hp in members if k == key), members[0][2])


def trial_run_keys(config: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(seed, run key) of every run this trial trains, in training order."""
    return [(seed, key) for seed, key, _ in trial_members(config)]


def run_dir(study_dir: str | Path, key: str) -> Path:
    """Per-run output directory (absolute, under the study directory)."""
    return Path(study_dir).resolve() / layout.RUNS_DIR / key


def resolve_run_config(config: Mapping[str, Any], seed: int, key: str | None = None) -> Any:
    """The resolved ``RunConfig`` of one seed of a trial, of its run ``key`` when the trial packs
    hparams points (also used by the driver for params)."""
    t = config["trial"]
    overrides = {**t["overrides"], **trial_hparams(config, key)}
    cfg = make_run_config(task=t["task"], variant=t["variant"], seed=seed, overrides=overrides)
    gpus = float(t.get("gpus", 0.0))
    if gpus > 0:  # the trial's share of its one device sizes its pack (RunConfig.gpu_share)
        cfg = replace(cfg, device="cuda", gpu_share=min(1.0, gpus))
    return replace(cfg, num_threads=max(1, int(t["cpus"])))


def load_train_fn(path: str) -> Callable[..., Any]:
    """Import ``module:function``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def final_metrics(out_dir: Path, result: Any) -> dict[str, float]:
    """Final per-run metrics from the trainer: its ``RunResult`` or ``out_dir/result.json``.

    Returns flat MLflow keys: ``best_selection_score``, ``best_epoch``, ``epochs_run``,
    ``epochs_to_100`` and ``test.<split>.<metric>`` (a key of ``result.json`` by its former name
    under its current one).
    """
    from record import schema  # light (imports nothing): may join the module-level imports

    if result is not None and hasattr(result, "final_metrics"):
        return {k: float(v) for k, v in result.final_metrics().items()}
    data: Mapping[str, Any] = {}
    path = out_dir / layout.RESULT_FILE
    if path.is_file():
        data = json.loads(path.read_text())
    elif result is not None:
        data = asdict(result) if is_dataclass(result) else dict(getattr(result, "__dict__", {}))
    out: dict[str, float] = {}
    for key in (*schema.RENAMED_METRICS, *schema.FINAL_METRICS):
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[schema.current_metric(key)] = float(value)
    test = data.get("test") or data.get("test_metrics") or {}
    for split, metrics in test.items():
        if isinstance(metrics, Mapping):
            for metric, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[f"test.{split}.{metric}"] = float(value)
    for key, value in data.items():  # already-flat test keys
        if key.startswith("test.") and isinstance(value, (int, float)):
            out[key] = float(value)
    return out


def listed_trials(out_dir: Path) -> list[str]:
    """The Tune trial directory names a run's trial file lists (:data:`TUNE_TRIALS`), newest
    last; a name of any other form is left out."""
    try:
        names = json.loads((out_dir / TRIAL_FILE).read_text()).get(TUNE_TRIALS)
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str) and TUNE_TRIAL_NAME.fullmatch(n)] \
        if isinstance(names, list) else []


def write_trial_file(out_dir: Path, config: Mapping[str, Any], seed: int, tune_trial: str | None = None
                     ) -> None:
    """Record in ``out_dir`` which trial and seed it belongs to (for reconciliation), and the
    Tune trial directories that trained it (``tune_trial`` added last)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {"trial": config["trial"], "search": dict(config.get("search") or {}), "seed": int(seed)}
    listed = [n for n in listed_trials(out_dir) if n != tune_trial] + ([tune_trial] if tune_trial else [])
    if listed:
        body[TUNE_TRIALS] = listed[-TUNE_TRIALS_KEPT:]
    tmp = out_dir / f".{TRIAL_FILE}.tmp"
    tmp.write_text(json.dumps(body, sort_keys=True, default=str))
    os.replace(tmp, out_dir / TRIAL_FILE)


def finished_result(out_dir: Path, cfg: Any) -> Any:
    """The trainer's result if this exact run already finished (its result.json), else None.

    ``train`` deletes ``result.json`` when it starts and writes it last, so its presence with
    the same run identity means the run finished; it is never trained (or scored) twice.
    """
    path = out_dir / layout.RESULT_FILE
    if not path.is_file():
        return None
    try:
        result = load_result(out_dir)
    except (ValueError, TypeError, KeyError, ImportError):
        return None
    return result if getattr(result, "run_identity", None) == run_identity(cfg) else None
