"""Atomic per-epoch checkpoints and the RNG state they carry.

Layout of ``out_dir/checkpoint/``::

    meta.json   epoch, run identity, resolved config (readable without torch)
    state.pt    model, optimizer, scheduler, RNG states, best-so-far model, counters, history

A checkpoint is written into a fresh temporary directory beside it and then swapped in with
renames, so ``checkpoint/`` always holds one complete epoch. If a crash falls between the two
renames, :func:`find_checkpoint` recovers the previous complete checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT = "checkpoint"
_OLD = "checkpoint.old"
META = "meta.json"
STATE = "state.pt"


class CheckpointMismatchError(ValueError):
    """The checkpoint in an output directory belongs to a run with a different config."""


def rng_state() -> dict[str, Any]:
    """Global RNG states of torch (CPU and CUDA), numpy and Python."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(out_dir: Path, meta: dict[str, Any], state: dict[str, Any]) -> Path:
    """Atomically replace ``out_dir/checkpoint`` with (``meta``, ``state``); returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / CHECKPOINT
    old = out_dir / _OLD
    tmp = Path(tempfile.mkdtemp(prefix=".checkpoint-", dir=out_dir))
    os.chmod(tmp, 0o755)
    try:
        with open(tmp / STATE, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        with open(tmp / META, "w") as fh:
            json.dump(meta, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        if old.exists():
            shutil.rmtree(old)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return final


def find_checkpoint(out_dir: Path) -> Path | None:
    """The complete checkpoint directory in ``out_dir``, or None.

    Recovers ``checkpoint.old`` if a crash happened between the two renames of a save.
    """
    out_dir = Path(out_dir)
    final = out_dir / CHECKPOINT
    if (final / META).is_file() and (final / STATE).is_file():
        return final
    old = out_dir / _OLD
    if (old / META).is_file() and (old / STATE).is_file():
        if final.exists():
            shutil.rmtree(final)
        os.replace(old, final)
        return final
    return None


def read_meta(checkpoint_dir: Path) -> dict[str, Any]:
    """``meta.json`` of a checkpoint."""
    return json.loads((Path(checkpoint_dir) / META).read_text())


def load_state(checkpoint_dir: Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """``state.pt`` of a checkpoint (contains numpy/python RNG states, so not weights-only)."""
    return torch.load(Path(checkpoint_dir) / STATE, map_location=device, weights_only=False)


def remove_checkpoint(out_dir: Path) -> None:
    """Delete any checkpoint in ``out_dir`` (a fresh start)."""
    for name in (CHECKPOINT, _OLD):
        shutil.rmtree(Path(out_dir) / name, ignore_errors=True)
    for stale in Path(out_dir).glob(".checkpoint-*"):
        shutil.rmtree(stale, ignore_errors=True)


def check_identity(
    checkpoint_dir: Path, identity: str, identity_items: dict[str, Any]
) -> dict[str, Any]:
    """Read the checkpoint's meta; refuse with the differing keys if it is another config's."""
    meta = read_meta(checkpoint_dir)
    saved = meta.get("run_identity")
    if saved != identity:
        theirs = meta.get("identity", {})
        diffs = [
            f"{k}: {theirs.get(k, '<absent>')!r} -> {identity_items.get(k, '<absent>')!r}"
            for k in sorted(set(theirs) | set(identity_items))
            if theirs.get(k, "<absent>") != identity_items.get(k, "<absent>")
        ]
        shown = "; ".join(diffs[:6]) + (" ..." if len(diffs) > 6 else "")
        raise CheckpointMismatchError(
            f"{checkpoint_dir} holds a checkpoint of a different run config "
            f"(saved identity {saved}, this run {identity}; {shown or 'differences unknown'}). "
            "Resume with the same config, or start fresh (train(resume=False) / --fresh)."
        )
    return meta
