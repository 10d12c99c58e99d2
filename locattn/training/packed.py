"""Floor 4 of a training run: K runs of one cell (seeds, learning rates) trained as one pack.

``train_packed(cfgs, out_dirs, recorders)`` trains runs that differ only in ``seed``, the
per-replica optimizer fields :data:`PACKABLE_FIELDS` (learning rate, weight decay, clipping,
schedule, patience, epochs, dev scoring) and, on the eager path, the ablation switches
:data:`SWITCH_FIELDS` (step activation, normalisation, reference, pa source, MonoAttn's gate;
a parameter whose shape differs, or that only some replicas have, is stacked at the widest shape
and each replica keeps only its own part). Each replica is exactly the solo run
:func:`locattn.training.run.train` would do:

* it *is* a solo run object (:class:`~locattn.training.seq2seq.Seq2SeqRun`): its own model
  initialised from its seed, its own ``torch.optim.AdamW``, ``ReduceLROnPlateau``, best-model
  tracking, early stopping, checkpoint directory (the solo format: a packed run resumes packed or
  solo and vice versa), recorder calls, dev scoring and final test scoring;
* only the training pass is shared (:func:`~locattn.training.epoch.packed_train_epoch`):
  replica k's batch i is the solo run's batch i, each replica's loss is the token-level mean
  over its own tokens, and the packed backward runs on the sum of the K losses, so gradients do
  not mix; dropout masks come from a per-(seed, epoch) generator in both solo and packed training;
* a replica that stops early (or raises ``NonFiniteLossError``) leaves the pack; the others go on.

The result per replica equals its solo run bit for bit (``test_packed.py``).
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from locattn.config import PACKABLE_FIELDS, RunConfig, config_to_dict, identity_dict, run_identity
from locattn.packable import SWITCH_FIELDS, check_packable
from locattn.models.config import packable_families
from locattn.tasks import load_task
from locattn.training import checkpoint as ckpt
from locattn.training.decode import graphed_greedy_dev_accuracy, graphed_test_decodes
from locattn.training.epoch import ReplicaFailed, packed_train_epoch
from locattn.training.graphed import (graphed_dev_scores, graphed_train_epoch, measure_bytes_per_replica,
                                     pick_pack_size)
from locattn.training.memory import run_pack_memory, unprobed_bytes
from locattn.training.recorders import NullRecorder
from locattn.training.results import CONFIG_FILE, RESULT_FILE
from locattn.training.seq2seq import Seq2SeqRun

PACKABLE_FAMILIES = tuple(packable_families())
"""The built-in attention families whose modules are written for packed parameters (a plugin's
declared packable counts too: ``check_packable`` asks the registry)."""


def train_packed(
    cfgs: Sequence[RunConfig],
    out_dirs: Sequence[str | Path],
    recorders: Sequence[Any] | None = None,
    *,
    resume: bool = True,
    max_pack: int | None = None,
) -> list[Any]:
    """Train the runs ``cfgs`` (one cell: equal except :data:`PACKABLE_FIELDS`) as one pack.

    ``out_dirs[k]`` receives exactly what ``train(cfgs[k], out_dirs[k])`` writes (config,
    per-epoch checkpoint, result, best model, attention figure) and ``recorders[k]`` hears the
    same calls. With ``resume`` each replica continues from its own checkpoint, which has the
    solo format (a run may switch between solo and packed training at any epoch boundary).
    Replicas standing at different epochs are trained in groups of equal epoch, lowest first,
    so a lagging replica trains alone (or with its peers) until it catches up.

    With ``optim.train_step: graphed`` the training pass is
    :class:`~locattn.training.graphed.GraphedStep` (CUDA graphs on a GPU). ``max_pack`` caps
    how many runs train at once (the rest train in later packs of that size); on a CUDA device
    with the graphed step it defaults to what fits the run's share (``gpu_share``) of the
    device's memory (:func:`pack_size`); an eager pack on CUDA is not sized and warns.

    Returns one entry per run: its :class:`~locattn.training.results.RunResult`, or the exception that
    ended it (e.g. ``NonFiniteLossError``), so one diverging seed does not cost the others.
    """
    cfgs = list(cfgs)
    if len(out_dirs) != len(cfgs) or (recorders is not None and len(recorders) != len(cfgs)):
        raise ValueError(
            f"train_packed needs one out_dir (and recorder) per config: {len(cfgs)} configs, "
            f"{len(out_dirs)} out_dirs, {None if recorders is None else len(recorders)} recorders"
        )
    check_packable(cfgs)
    recs = list(recorders) if recorders is not None else [NullRecorder() for _ in cfgs]
    recs = [r if r is not None else NullRecorder() for r in recs]
    torch.set_num_threads(cfgs[0].num_threads)
    data = load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)
    if data.kind != "seq2seq":
        raise ValueError(f"task {cfgs[0].task.name!r} is a {data.kind} task; only seq2seq runs are packed")

    if max_pack is None:
        max_pack = pack_size(cfgs[0], len(cfgs), lambda: _device_memory(cfgs[0], data, Path(out_dirs[0])))
    size = max_pack or len(cfgs)
    results: list[Any] = []
    for at in range(0, len(cfgs), size):
        part = slice(at, at + size)
        results += _train_pack(cfgs[part], list(out_dirs)[part], recs[part], data, resume)
    return results


def pack_size(cfg: RunConfig, n_runs: int, memory: Callable[[], tuple[int, int, int, int]]) -> int:
    """How many of the ``n_runs`` runs of ``cfg``'s cell :func:`train_packed` trains at once.

    Off CUDA: all of them. On CUDA with ``optim.train_step: graphed``: what fits the run's share
    of the device, :func:`~locattn.training.graphed.pick_pack_size` of ``memory()`` =
    (free bytes, total bytes, bytes per replica, fixed bytes) with ``share=cfg.gpu_share``.
    On CUDA with the eager step the memory per replica is not measured (the eager pass has no
    single static step to probe), so all runs train at once and a ``UserWarning`` says so."""
    if torch.device(cfg.device).type != "cuda":
        return n_runs
    if cfg.optim.train_step != "graphed":
        warnings.warn(
            f"an eager pack on {cfg.device} is not sized to the device's memory: all {n_runs} runs train "
            f"at once whatever the GPU share ({cfg.gpu_share:g}); set optim.train_step: graphed to size "
            "packs to the share, or pass max_pack", UserWarning, stacklevel=3)
        return n_runs
    free, total, per, fixed = memory()
    k = min(n_runs, pick_pack_size(free, per, fixed_bytes=fixed, total_bytes=total, share=cfg.gpu_share))
    if k < n_runs:  # the largest pack that fits, and why, in one line
        warnings.warn(
            f"{n_runs} runs of {cfg.task.name}/{cfg.variant} do not fit one pack on {cfg.device} "
            f"({per / 2**20:.1f} MiB a replica, {fixed / 2**20:.0f} MiB fixed, {free / 2**30:.1f} GiB free of "
            f"{total / 2**30:.1f}, share {cfg.gpu_share:g}, 10 % headroom): they train as "
            f"{-(-n_runs // k)} packs of at most {k}, one after another", UserWarning, stacklevel=3)
    return k


def _device_memory(cfg: RunConfig, data: Any, out_dir: Path) -> tuple[int, int, int, int]:
    """(free, total, bytes per replica, fixed bytes) of ``cfg``'s CUDA device and graphed step."""
    probe = Seq2SeqRun(cfg, data, out_dir)
    per, fixed = measure_bytes_per_replica(probe)
    per += unprobed_bytes(run_pack_memory(cfg, data))  # each further run's own state and data
    free, total = torch.cuda.mem_get_info(probe.device)
    del probe
    return free, total, per, fixed


def _train_pack(cfgs: list[RunConfig], out_dirs: list[Any], recs: list[Any], data: Any, resume: bool) -> list[Any]:
    """:func:`train_packed` for one pack that trains at once."""
    runs: list[Any] = []
    for cfg, out in zip(cfgs, out_dirs):
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        found = ckpt.find_checkpoint(out)
        if found is not None and not resume:
            ckpt.remove_checkpoint(out)
            found = None
        if found is not None:
            ckpt.check_identity(found, run_identity(cfg), identity_dict(cfg))
        (out / CONFIG_FILE).write_text(json.dumps(config_to_dict(cfg), indent=1) + "\n")
        (out / RESULT_FILE).unlink(missing_ok=True)
        run = Seq2SeqRun(cfg, data, out)
        if found is not None:
            run.restore(found)
        runs.append(run)

    results: list[Any] = [None] * len(runs)
    graphed: dict[Any, Any] | None = {} if cfgs[0].optim.train_step == "graphed" else None
    greedy: dict[Any, Any] = {}  # the graphed pack's greedy dev decoder (its graphs), while it lasts
    active = [k for k, r in enumerate(runs) if r.stop_reason is None and r.epoch < r.cfg.optim.epochs]
    while active:
        # replicas at the lowest epoch train together (all of them unless resumed unevenly)
        low = min(runs[k].epoch for k in active)
        group = [k for k in active if runs[k].epoch == low]
        for k in group:
            runs[k].epoch += 1
        start = time.perf_counter()
        try:
            if graphed is not None:
                losses = graphed_train_epoch([runs[k] for k in group], low + 1, graphed)
                devs = dict(zip(group, graphed_dev_scores([runs[k] for k in group])))
                free = [k for k in group if runs[k].cfg.optim.dev_scoring == "greedy"]
                if free:  # the greedy dev accuracy of the pack, decoded together
                    accs = graphed_greedy_dev_accuracy([runs[k] for k in free], greedy)
                    devs.update({k: devs[k]._replace(acc=a) for k, a in zip(free, accs)})
            else:
                losses, devs = packed_train_epoch([runs[k] for k in group], low + 1), {}
        except ReplicaFailed as failed:
            k = group[failed.index]
            results[k] = failed.error
            active.remove(k)
            for j in group:  # the epoch is redone without the failed replica
                runs[j].epoch -= 1
                if j != k:
                    _reload(runs[j])
            continue
        seconds = (time.perf_counter() - start) / len(group)  # each replica's share
        for k, loss in zip(group, losses):
            runs[k].end_epoch(loss, seconds, recs[k], dev=devs.get(k))
            if runs[k].stop_reason is not None:
                active.remove(k)
        for k in group:  # every replica of the group has its epoch's checkpoint on disk now
            after = getattr(recs[k], "on_pack_epoch", None)
            if after is not None:
                after()
    done = [k for k in range(len(runs)) if results[k] is None]
    decoded: list[Any] = [None] * len(runs)
    if graphed is not None and done:  # the pack's test splits decoded together (locattn.training.decode)
        for k in done:
            runs[k].load_best()
        for k, dec in zip(done, graphed_test_decodes([runs[k] for k in done])):
            decoded[k] = dec
    for k in done:
        run = runs[k]
        result = run.finish(decoded=decoded[k])
        (run.out_dir / RESULT_FILE).write_text(json.dumps(result.to_dict(), indent=1) + "\n")
        recs[k].on_end(result)
        results[k] = result
    return results


def _reload(run: Any) -> None:
    """Put a run back to its last completed epoch (its checkpoint, or its initial state)."""
    found = ckpt.find_checkpoint(run.out_dir)
    if found is not None:
        run.restore(found)
    else:
        fresh = type(run)(run.cfg, run.data, run.out_dir)
        run.__dict__.update(fresh.__dict__)


__all__ = ["PACKABLE_FAMILIES", "PACKABLE_FIELDS", "SWITCH_FIELDS", "check_packable", "pack_size", "train_packed"]
