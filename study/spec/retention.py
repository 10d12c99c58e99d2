"""What a finished run keeps on disk, and how much disk a study needs.

A finished run never trains again, yet its directory kept the trainer's resume state
(``checkpoint/state.pt``: model, optimizer, best model, RNG; ~4 MB at the default sizes) and
its selected model (``best_model.pt``, ~1 MB): a 3,712-run study took 18 GB. The spec's
``keep`` key says what stays once a run has finished:

- ``model`` (default): the selected model and every record file; the resume state goes.
  ``locattn attention`` and the re-scoring scripts in ``results/analysis/`` read the model.
- ``results``: only what reports and exhibits read (``result.json``, ``config.json``,
  ``trial.json``, ``attention.json``/``.png``, ``examples.json``): about 1 % of ``model``.
- ``all``: everything, the resume state included.

Runs that are still training keep everything they need to resume whatever the policy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from record.layout import BEST_MODEL_FILE, CHECKPOINT_DIR, META_FILE

if TYPE_CHECKING:
    from study.spec import StudySpec
    from study.spec.model import Cell

#: ``keep`` values -> files and directories of a finished run's directory that are deleted.
DROPPED = {
    "all": (),
    "model": (CHECKPOINT_DIR,),
    "results": (CHECKPOINT_DIR, BEST_MODEL_FILE),
}
KEEP_POLICIES = tuple(DROPPED)
DEFAULT_KEEP = "model"
#: Bytes of a run's record files (result.json with its epoch history, attention.png, ...).
RECORD_BYTES = 200_000
#: A vocabulary size for the estimate (the papers' tasks have 14 to a few hundred tokens).
ESTIMATE_VOCAB = 200
#: Tune checkpoints a running trial holds (``study.plan.tuner.TUNE_CHECKPOINTS_KEPT``), each a copy
#: of its resume state.
RUNNING_COPIES = 10


def prune_finished_run(out_dir: str | Path, keep: str) -> int:
    """Delete what ``keep`` drops from a finished run's directory; returns the bytes freed."""
    freed = 0
    for name in DROPPED[keep]:
        path = Path(out_dir) / name
        if path.is_dir():
            freed += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file():
            freed += path.stat().st_size
            path.unlink(missing_ok=True)
    return freed


def study_keep(study_dir: str | Path) -> str:
    """The ``keep`` policy of the study in ``study_dir`` (from its ``study.json``); the default
    when the file or the key is missing or unreadable (never a reason to fail a trial)."""
    try:
        resolved = json.loads((Path(study_dir) / META_FILE).read_text())["resolved"]
        keep = resolved.get("keep", DEFAULT_KEEP)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return DEFAULT_KEEP
    return keep if keep in DROPPED else DEFAULT_KEEP


def model_bytes(cell: Cell, cache: dict[str, int] | None = None) -> int:
    """Bytes of one saved model of ``cell`` (float32 parameters), counted on the meta device;
    ``cache`` holds the counts of model configs seen before."""
    import torch  # only for --dry-run's estimate; the spec module stays torch-free

    from locattn.config import make_run_config
    from locattn.models import build_model, build_regressor

    cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
    key = repr(cfg.model)
    if cache is not None and key in cache:
        return cache[key]
    with torch.device("meta"):
        if cfg.model.kind == "regressor":
            model = build_regressor(cfg.model)
        else:
            model = build_model(cfg.model, ESTIMATE_VOCAB, pad_id=0, sos_id=1, eos_id=2)
    size = 4 * sum(p.numel() for p in model.parameters())
    if cache is not None:
        cache[key] = size
    return size


def disk_estimate(spec: StudySpec, slots: int) -> tuple[int, int]:
    """(bytes the finished study keeps, extra bytes while ``slots`` trials run): a finished run
    keeps its record files plus what ``spec.keep`` leaves of its model (1x) and resume state
    (~4x: model, best model, two Adam moments); a running trial also holds its Tune copies."""
    cache: dict[str, int] = {}
    sizes = [model_bytes(cell, cache) for cell in spec.cells]
    mean_model = sum(sizes) / max(1, len(sizes))
    kept = RECORD_BYTES
    if spec.keep in ("model", "all"):
        kept += mean_model
    if spec.keep == "all":
        kept += 4 * mean_model
    seeds_per_trial = max(1, spec.n_runs() // max(1, spec.n_trials()))
    running = slots * seeds_per_trial * 4 * mean_model * (1 + RUNNING_COPIES)
    return int(kept * spec.n_runs()), int(running)


def disk_line(spec: StudySpec, slots: int, where: str | Path) -> tuple[str, bool]:
    """The dry run's ``disk`` line, and whether the free space at ``where`` (or its nearest
    existing parent) will not do."""
    finished, running = disk_estimate(spec, slots)
    need = finished + running
    base = Path(where).resolve()
    while not base.exists() and base != base.parent:
        base = base.parent
    free = shutil.disk_usage(base).free
    short = need > free
    text = (f"disk     ~{_size(finished)} kept (keep: {spec.keep}) + ~{_size(running)} while "
            f"{slots} trial(s) run; {_size(free)} free at {base}"
            + ("  NOT ENOUGH: free space, or set keep: results" if short else ""))
    return text, short


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
