"""Atomic per-epoch checkpoints and the RNG state they carry.

Layout of ``out_dir/checkpoint/``::

    meta.json   epoch, run identity, resolved config (readable without torch), and the
                SHA-256 of state.pt
    state.pt    model, optimizer, scheduler, RNG states, best-so-far model, counters, history:
                tensors and plain Python values only, read with ``torch.load(weights_only=True)``

A checkpoint is written into a fresh temporary directory beside it and then swapped in with
renames, so ``checkpoint/`` always holds one complete epoch. If a crash falls between the two
renames, :func:`find_checkpoint` recovers the previous complete checkpoint.

Loading never executes code from the file (``weights_only=True``: a crafted pickle is refused),
and a checkpoint whose ``state.pt`` does not match its checksum, or does not load, is set aside
(``checkpoint.bad/``) with one line naming the file: the run falls back to the previous good
checkpoint, or starts fresh.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from locattn.config import config_to_dict, identity_dict, run_identity
from locattn.training.files import CHECKPOINT_DIR, CHECKPOINT_META, CHECKPOINT_STATE

CHECKPOINT = CHECKPOINT_DIR
_OLD = "checkpoint.old"
BAD = "checkpoint.bad"
META = CHECKPOINT_META
STATE = CHECKPOINT_STATE
#: meta.json key holding the SHA-256 (hex) of state.pt.
CHECKSUM_KEY = "state_sha256"


class CheckpointMismatchError(ValueError):
    """The checkpoint in an output directory belongs to a run with a different config."""


def rng_state() -> dict[str, Any]:
    """Global RNG states of torch (CPU and CUDA), numpy and Python, as tensors and plain
    Python values (so a checkpoint loads with ``weights_only=True``)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    npst = state["numpy"]
    if isinstance(npst, dict):
        npst = (npst["kind"], npst["keys"].numpy().astype(np.uint32), npst["pos"],
                npst["has_gauss"], npst["cached_gaussian"])
    np.random.set_state(npst)
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
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
        # Serialise in memory, then write: a full disk then raises OSError ENOSPC ("No space
        # left on device") instead of torch's opaque "unexpected pos" from its zip writer.
        buffer = io.BytesIO()
        torch.save(state, buffer)
        with open(tmp / STATE, "wb") as fh:
            fh.write(buffer.getbuffer())
            fh.flush()
            os.fsync(fh.fileno())
        meta = {**meta, CHECKSUM_KEY: hashlib.sha256(buffer.getbuffer()).hexdigest()}
        del buffer
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


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_checkpoint(checkpoint_dir: Path) -> str | None:
    """Why the checkpoint in ``checkpoint_dir`` cannot be used (one line), or None if it can.

    Checks that both files exist, that ``state.pt`` matches the checksum in ``meta.json`` (a
    ``meta.json`` without one is checked by loading alone: loading is weights-only, so an
    unverified file can fail to load but cannot run code) and that it loads weights-only.
    """
    checkpoint_dir = Path(checkpoint_dir)
    state = checkpoint_dir / STATE
    if not (checkpoint_dir / META).is_file() or not state.is_file():
        return f"{checkpoint_dir}: incomplete (missing {META} or {STATE})"
    try:
        meta = read_meta(checkpoint_dir)
    except (OSError, ValueError) as exc:
        return f"{checkpoint_dir / META}: unreadable ({type(exc).__name__})"
    expected = meta.get(CHECKSUM_KEY) if isinstance(meta, dict) else None
    if not isinstance(meta, dict):
        return f"{checkpoint_dir / META}: not a mapping"
    if expected is not None and file_sha256(state) != expected:
        return f"{state}: checksum mismatch (corrupt)"
    try:
        load_state(checkpoint_dir)
    except Exception as exc:  # noqa: BLE001 - any failure to load means unusable
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{state}: cannot be loaded safely ({type(exc).__name__}: {first[:160]})"
    return None


def _set_aside(path: Path, why: str, then: str) -> None:
    bad = path.parent / BAD
    shutil.rmtree(bad, ignore_errors=True)
    try:
        os.replace(path, bad)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
    print(f"locattn: checkpoint {why}; set aside as {bad}; {then}", file=sys.stderr, flush=True)


def find_checkpoint(out_dir: Path) -> Path | None:
    """The complete, verified checkpoint directory in ``out_dir``, or None.

    Recovers ``checkpoint.old`` if a crash happened between the two renames of a save. A
    checkpoint that fails :func:`verify_checkpoint` is moved to ``checkpoint.bad`` with one line
    on stderr naming the file; the previous good one (``checkpoint.old``) is used if there is
    one, else None (a fresh start).
    """
    out_dir = Path(out_dir)
    final = out_dir / CHECKPOINT
    old = out_dir / _OLD
    if final.exists() or (final / META).is_file():
        why = verify_checkpoint(final)
        if why is None:
            return final
        if (old / META).is_file() or (old / STATE).is_file():
            _set_aside(final, why, f"falling back to {old}")
        elif (final / META).is_file() or (final / STATE).is_file():
            _set_aside(final, why, "starting this run fresh")
        else:
            shutil.rmtree(final, ignore_errors=True)
    if (old / META).is_file() or (old / STATE).is_file():
        why = verify_checkpoint(old)
        if why is None:
            if final.exists():
                shutil.rmtree(final)
            os.replace(old, final)
            return final
        _set_aside(old, why, "starting this run fresh")
    return None


def read_meta(checkpoint_dir: Path) -> dict[str, Any]:
    """``meta.json`` of a checkpoint."""
    return json.loads((Path(checkpoint_dir) / META).read_text())


def load_state(checkpoint_dir: Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """``state.pt`` of a checkpoint, loaded weights-only: tensors and plain values, never code."""
    return torch.load(Path(checkpoint_dir) / STATE, map_location=device, weights_only=True)


def remove_checkpoint(out_dir: Path) -> None:
    """Delete any checkpoint in ``out_dir`` (a fresh start)."""
    for name in (CHECKPOINT, _OLD, BAD):
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


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and Python's global RNGs."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def checkpoint_meta(cfg: Any, epoch: int) -> dict[str, Any]:
    """The readable part of a checkpoint of ``cfg`` (a ``RunConfig``) after ``epoch``."""
    return {
        "epoch": epoch,
        "run_identity": run_identity(cfg),
        "identity": identity_dict(cfg),
        "config": config_to_dict(cfg),
    }
