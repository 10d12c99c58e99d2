"""Train a study's exported runs with torch only: ``python -m locattn.offline DIR --out RUNS_DIR``.

``DIR`` is what ``study export`` wrote: :data:`MANIFEST_FILE` (per trial: its descriptor, whether
it packs its runs, and per run its run key, seed, resolved ``RunConfig`` and seed folder) and,
per run, a seed folder holding the study's trial file and any partial trainer checkpoint. Each
run is trained in ``RUNS_DIR/<run key>/``, which starts as a copy of its seed folder (copied
once: a second worker on the same ``RUNS_DIR`` continues from the checkpoints the first left),
with locattn's public training API, the way a study's trial trains it: a packed trial's runs
together (``locattn.packed.train_packed``), a solo trial's one after another (``locattn.train.train``).
Nothing read from ``DIR`` is imported or called: the trainer is this code's, and a manifest
that names another (``train_fn``, as format 1 could) is refused in one line.

``--deadline SECONDS`` (from the start): the worker stops at an epoch boundary once the next
epoch would not fit (estimated from the last one, with half an epoch to spare for scoring; the
first from its own time, without the start-up and compilation before it);
the runs not finished keep their checkpoints. Exit status 0 when every run finished, 75 when
the deadline stopped it, 1 when a run failed.

This module is for machines without Ray, MLflow, Optuna or polars: it imports none of them,
nor anything of ``study``, ``record`` or ``reports``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from locattn.config import run_config_from_dict, run_identity
from locattn.folders import LEGACY_TRAIN_FN, FolderError, confined, copy_regular
from locattn.packed import check_packable, train_packed
from locattn.train import load_result, train as locattn_train
from locattn.training.epoch import prepare_compile

MANIFEST_FILE = "manifest.json"
"""What ``study export`` writes into its folder: the trials and runs to train."""
MANIFEST_FORMAT = 1
"""Version of :data:`MANIFEST_FILE`'s layout."""
DROP_KEY = "drop_finished"
"""Manifest key: what a finished run's folder drops (the study's ``keep`` policy: file and
folder names in it), so that less travels back."""
EXIT_DEADLINE = 75
"""Exit status when ``--deadline`` stopped the worker (the same as ``study --time-limit``)."""
MAX_MANIFEST_BYTES = 64 << 20
"""Largest manifest read (one of 10,000 runs is about 30 MB)."""
SPARE = 1.5
"""Epochs' worth of time an epoch needs to start: itself and half an epoch for the scoring."""


class DeadlineReached(Exception):
    """Raised from a recorder at an epoch boundary (its checkpoint is saved) to stop training."""


class Deadline:
    """When to stop: ``at`` (``time.monotonic()``) or never. One per trial: its epochs are timed
    per round (every run of a pack trains one epoch per round), and the stop comes once every
    run still training has saved the round's epoch."""

    def __init__(self, at: float | None) -> None:
        self.at = at
        self.epoch_seconds: float | None = None

    def start(self, keys: Sequence[str], epochs: Mapping[str, int]) -> None:
        self.keys = set(keys)
        self.epochs = dict(epochs)
        self.last = time.monotonic()
        self.round: int | None = None
        self.stop_epoch: int | None = None
        self.reported: set[str] = set()
        self.final: set[str] = set()

    def fits(self) -> bool:
        """Whether a run (its first epoch) may still start."""
        if self.at is None:
            return True
        return time.monotonic() + SPARE * (self.epoch_seconds or 0.0) < self.at

    def on_epoch(self, key: str, epoch: int, seconds: float | None = None) -> None:
        """Run ``key`` saved ``epoch`` (which took it ``seconds``, its share of a pack's epoch):
        raise :class:`DeadlineReached` when training stops here."""
        if self.at is None:
            return
        now = time.monotonic()
        if epoch >= self.epochs.get(key, epoch + 1):
            self.final.add(key)
        if self.stop_epoch is not None:
            self.reported.add(key)
            if epoch > self.stop_epoch or self.reported >= self.keys - self.final:
                raise DeadlineReached
            return
        if epoch != self.round:  # the first run of a new round: the last round's time
            self.epoch_seconds = now - self.last
            if self.round is None and seconds is not None:
                # the first round's wall time holds the one-time costs (data, the pack, torch.compile
                # and graph capture: minutes on a GPU); the epoch's own time, the whole pack's, is nearer
                self.epoch_seconds = min(self.epoch_seconds, seconds * len(self.keys))
            self.last, self.round = now, epoch
        if self.keys <= self.final or now + SPARE * (self.epoch_seconds or 0.0) < self.at:
            return
        self.stop_epoch, self.reported = epoch, {key}
        if self.reported >= self.keys - self.final:
            raise DeadlineReached


class EpochPrinter:
    """locattn recorder: prints each epoch of one run and checks the deadline."""

    def __init__(self, key: str, deadline: Deadline, out: Any) -> None:
        self.key, self.deadline, self.out = key, deadline, out

    def on_epoch(self, epoch: int, metrics: Mapping[str, float], checkpoint_dir: Path) -> None:
        shown = " ".join(f"{k} {v:.4g}" for k, v in metrics.items()
                         if k in ("train_loss", "dev_loss", "dev_score", "epoch_seconds")
                         and isinstance(v, (int, float)))
        print(f"[offline] {self.key} epoch {epoch}: {shown}", file=self.out, flush=True)
        seconds = metrics.get("epoch_seconds")
        self.deadline.on_epoch(self.key, epoch, seconds if isinstance(seconds, (int, float)) else None)

    def on_end(self, result: Any) -> None:
        print(f"[offline] {self.key} finished", file=self.out, flush=True)


def finished(out_dir: Path, cfg: Any) -> bool:
    """Whether ``out_dir`` holds this run's result (the trainer writes it last)."""
    try:
        return getattr(load_result(out_dir), "run_identity", None) == run_identity(cfg)
    except (OSError, ValueError, TypeError, KeyError, ImportError):
        return False


def drop(out_dir: Path, names: Sequence[str]) -> None:
    """Delete ``names`` (plain names, as the study's ``keep`` policy lists them) from a finished
    run's folder; a name that is not plain, or resolves outside the folder, is left alone."""
    for name in names:
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            continue
        path = out_dir / name
        if path.is_symlink():
            path.unlink()  # the link itself, inside the folder; never what it points at
            continue
        try:
            confined(out_dir, name, what=f"{out_dir}: {DROP_KEY}")
        except FolderError:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of an export folder, checked (:func:`check_manifest`); ``SystemExit`` with
    one line when it is not one."""
    path = folder / MANIFEST_FILE
    try:
        size = path.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise SystemExit(f"locattn.offline: {path}: {size} bytes, over the {MAX_MANIFEST_BYTES} a "
                             "manifest may be")
        manifest = json.loads(path.read_text())
    except OSError as exc:
        raise SystemExit(f"locattn.offline: {path}: {exc.strerror} (not a folder `study export` wrote)")
    except (ValueError, RecursionError) as exc:
        raise SystemExit(f"locattn.offline: {path}: not JSON ({str(exc)[:200] or type(exc).__name__})")
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise SystemExit(f"locattn.offline: {path}: manifest format {found!r}, "
                         f"this worker reads {MANIFEST_FORMAT}")
    try:
        check_manifest(manifest, folder)
    except (FolderError, ValueError) as exc:
        raise SystemExit(f"locattn.offline: {path}: {exc}") from None
    return manifest


def check_manifest(manifest: Mapping[str, Any], folder: Path) -> None:
    """``ValueError`` (one line, naming the entry) unless every trial is an object with a
    ``trial`` object and a ``runs`` list, every run names a run key (16 hex digits), a seed
    folder inside ``folder`` and a config object, and no trial names a trainer other than
    :data:`LEGACY_TRAIN_FN` (nothing of the folder is ever imported)."""
    trials = manifest.get("trials")
    if not isinstance(trials, list):
        raise ValueError("trials: not a list")
    drops = manifest.get(DROP_KEY, [])
    if not isinstance(drops, list) or not all(isinstance(d, str) for d in drops):
        raise ValueError(f"{DROP_KEY}: not a list of names")
    for i, trial in enumerate(trials):
        if not isinstance(trial, dict) or not isinstance(trial.get("trial"), dict) \
                or not isinstance(trial.get("runs"), list):
            raise ValueError(f"trials[{i}]: not an object with a trial object and a runs list")
        named = trial["trial"].get("train_fn", LEGACY_TRAIN_FN)
        if named != LEGACY_TRAIN_FN:
            raise ValueError(f"train_fn {named!r}: an export does not choose its trainer (this worker "
                             f"runs {LEGACY_TRAIN_FN}); nothing of it was imported")
        for j, run in enumerate(trial["runs"]):
            where = f"trials[{i}].runs[{j}]"
            if not isinstance(run, dict) or not isinstance(run.get("config"), dict):
                raise ValueError(f"{where}: not an object with a config object")
            confined(folder, run.get("key"), what=f"{where}.key", key=True)
            confined(folder, run.get("folder"), what=f"{where}.folder")


def seed_folder(src: Path, out_dir: Path, where: str) -> None:
    """Copy a run's seed folder to ``out_dir`` (regular files only: :func:`copy_regular`),
    through a staging folder, so that a refused copy leaves nothing."""
    staging = out_dir.with_name(f".{out_dir.name}.copy")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        copy_regular(src, staging, what=where)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("locattn.offline: --device cuda: no CUDA device here")
    return device


def with_device(cfg: Any, device: str, train_path: str | None) -> Any:
    """``cfg`` on ``device``, with ``train_path`` when given; a path its model cannot take is a
    one-line exit naming the flag and the valid paths."""
    try:
        return replace(cfg, device=device, **({"train_path": train_path} if train_path else {}))
    except ValueError as exc:
        raise SystemExit(f"locattn.offline: --train-path {train_path}: {exc}") from None


def run(folder: Path, runs_dir: Path, *, deadline_s: float | None = None, device: str = "auto",
        train_path: str | None = None, out: Any = None) -> dict[str, Any]:
    """Train every unfinished run of the export ``folder`` into ``runs_dir``; counts of runs
    ``finished`` (now or before), ``unfinished``, ``failed`` and whether the ``deadline`` stopped it.
    ``train_path`` (operational, as ``device``) replaces the exported runs' ``RunConfig.train_path``."""
    out = out or sys.stdout
    manifest = read_manifest(folder)
    device = pick_device(device)
    clock = Deadline(time.monotonic() + deadline_s if deadline_s is not None else None)
    counts = {"finished": 0, "unfinished": 0, "failed": 0, "deadline": False}
    if runs_dir.exists() and not runs_dir.is_dir():
        raise SystemExit(f"locattn.offline: --out {runs_dir}: not a folder")
    runs_dir.mkdir(parents=True, exist_ok=True)
    for i, trial in enumerate(manifest["trials"]):
        todo = []
        for j, r in enumerate(trial["runs"]):
            where = f"locattn.offline: {folder / MANIFEST_FILE}: trials[{i}].runs[{j}]"
            try:
                out_dir = confined(runs_dir, r["key"], what=f"{where}.key", key=True)
                if not out_dir.exists():  # the seed folder: trial file, partial checkpoint
                    seed_folder(confined(folder, r["folder"], what=f"{where}.folder"), out_dir, where)
                cfg = run_config_from_dict(r["config"])
            except (FolderError, ValueError, TypeError, KeyError, OSError) as exc:
                raise SystemExit(f"{where}: {exc}" if not str(exc).startswith(where) else str(exc)) from None
            cfg = with_device(cfg, device, train_path)
            if finished(out_dir, cfg):
                counts["finished"] += 1
                drop(out_dir, manifest.get(DROP_KEY) or ())
            else:
                todo.append((r["key"], cfg, out_dir))
        if not todo:
            continue
        if counts["deadline"] or not clock.fits():
            counts["deadline"] = True
            counts["unfinished"] += len(todo)
            continue
        packed = bool(trial.get("packed")) and len(todo) > 1
        if packed:
            try:
                check_packable([cfg for _, cfg, _ in todo])
            except ValueError as exc:
                print(f"[offline] trial {trial['trial']['cell']}: trained one run at a time ({exc})", file=out)
                packed = False
        torch.set_num_threads(max(1, todo[0][1].num_threads))
        clock.start([k for k, _, _ in todo], {k: cfg.optim.epochs for k, cfg, _ in todo})
        recorders = [EpochPrinter(k, clock, out) for k, _, _ in todo]
        results: list[Any] = []
        try:
            if packed:
                results = list(train_packed([c for _, c, _ in todo], [d for _, _, d in todo], recorders,
                                            resume=True))
            else:
                train = locattn_train
                for (key, cfg, out_dir), rec in zip(todo, recorders):
                    if results and not clock.fits():
                        raise DeadlineReached
                    clock.start([key], {key: cfg.optim.epochs})
                    results.append(train(cfg, out_dir, recorder=rec, resume=True))
        except DeadlineReached:
            counts["deadline"] = True
        for key, cfg, out_dir in todo:
            result = next((r for (k, _, _), r in zip(todo, results) if k == key), None)
            if isinstance(result, BaseException):
                counts["failed"] += 1
                print(f"[offline] {key} failed: {type(result).__name__}: {result}", file=out)
            elif finished(out_dir, cfg):
                counts["finished"] += 1
                drop(out_dir, manifest.get(DROP_KEY) or ())
            else:
                counts["unfinished"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m locattn.offline", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="the folder `study export` wrote")
    p.add_argument("--out", type=Path, required=True,
                   help="where the run folders go (RUNS_DIR/<run key>/); run again with the same "
                        "--out to continue the runs a deadline stopped")
    p.add_argument("--deadline", type=float, metavar="SECONDS",
                   help="stop at an epoch boundary before this many seconds from now")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="torch device (default: cuda when there is one)")
    p.add_argument("--train-path", choices=("eager", "compiled", "fused"), default=None,
                   help="how each step runs (operational; default: as exported). compiled: "
                        "torch.compile of the step, eager and graphed alike (needs g++ on a CPU)")
    args = p.parse_args(argv)
    if args.deadline is not None and not 0 < args.deadline < float("inf"):  # nan, inf, <= 0
        print(f"python -m locattn.offline: --deadline {args.deadline:g}: must be a number of seconds > 0",
              file=sys.stderr)  # one line, not argparse's usage block
        return 2
    if args.train_path == "compiled":  # before any run starts: no compiler is one line, not a traceback
        try:
            prepare_compile()
        except RuntimeError as exc:
            raise SystemExit(f"locattn.offline: --train-path compiled: {exc}") from None
    t0 = time.monotonic()
    counts = run(args.folder, args.out, deadline_s=args.deadline, device=args.device,
                 train_path=args.train_path)
    line = (f"[offline] {counts['finished']} runs finished, {counts['unfinished']} not finished, "
            f"{counts['failed']} failed in {time.monotonic() - t0:.0f} s; run folders in {args.out}")
    if counts["deadline"]:
        print(f"{line}. Deadline reached: the unfinished runs kept their checkpoints; run again with "
              f"--out {args.out} to continue them", flush=True)
        return EXIT_DEADLINE
    print(f"{line}. Bring the folder back and `study import <study> {args.out}`", flush=True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
