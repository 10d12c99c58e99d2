"""Packed runs: K replicas of one cell trained in one process as one vectorized model.

``train_packed(cfgs, out_dirs, recorders)`` trains runs that differ only in ``seed`` and
``optim.lr``. Each replica is exactly the solo run :func:`locattn.train.train` would do:

* it *is* a solo run object (``locattn.train._Seq2SeqRun``): its own model initialised from its
  seed, its own ``torch.optim.AdamW``, ``ReduceLROnPlateau``, best-model tracking, early
  stopping, checkpoint directory (the solo format: a packed run resumes packed or solo and
  vice versa), recorder calls, dev scoring and final test scoring;
* only the training pass is shared. Per epoch the replicas' parameters are stacked into one
  packed model (leading K axis, see :mod:`locattn.models.functional`); each replica's solo
  parameters become views of its slice, so after one packed forward/backward every replica's
  own gradient-norm clipping and own optimizer step run on its own slice, unchanged;
* replica k's batch i is the solo run's batch i (its own data order, trimmed to its own
  longest source and target); batches are padded to a common shape, and the padding is masked
  everywhere (encoder states frozen, attention bias -inf, loss ignores padding), so valid
  positions compute the solo values;
* dropout masks come from a per-(seed, epoch) generator in both solo and packed training
  (:func:`epoch_dropout_noise`), each replica's mask drawn at its own shape;
* the loss of replica k is the token-level mean over its own tokens; the packed backward runs
  on the sum of the K losses, so gradients do not mix;
* a replica that stops early (or raises ``NonFiniteLossError``) leaves the pack; the others go on.

The result per replica equals its solo run up to float rounding (batched vs single matrix
products); ``tests/test_packed.py`` checks per-epoch metrics and test metrics.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from locattn.config import RunConfig, config_to_dict, identity_dict, run_identity
from locattn.models.functional import DropoutNoise

PACKABLE_FAMILIES = ("content", "positional", "location")
"""Attention families whose modules are written for packed parameters."""
_MAY_DIFFER = ("seed", "optim.lr")


def epoch_dropout_noise(seeds: Sequence[int], epoch: int, device: str | torch.device) -> DropoutNoise:
    """Dropout noise for training epoch ``epoch`` of runs with these seeds: one generator per run,
    seeded from (seed, epoch), so the stream needs no checkpoint and packing cannot change it."""
    gens = []
    for seed in seeds:
        digest = hashlib.sha256(f"locattn-dropout:{seed}:{epoch}".encode()).digest()
        g = torch.Generator(device=torch.device(device))
        g.manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
        gens.append(g)
    return DropoutNoise(gens)


def _flat_identity(cfg: RunConfig) -> dict[str, Any]:
    from locattn.config import flatten

    return {k: v for k, v in flatten(identity_dict(cfg)).items() if k not in _MAY_DIFFER}


def check_packable(cfgs: Sequence[RunConfig]) -> None:
    """Raise ``ValueError`` unless ``cfgs`` are one cell: equal except ``seed`` and ``optim.lr``."""
    if not cfgs:
        raise ValueError("train_packed needs at least one RunConfig")
    ref = _flat_identity(cfgs[0])
    for i, cfg in enumerate(cfgs[1:], start=1):
        other = _flat_identity(cfg)
        diff = sorted(k for k in set(ref) | set(other) if ref.get(k) != other.get(k))
        if diff:
            raise ValueError(
                f"cfgs[{i}] differs from cfgs[0] in {diff}; packed runs may differ only in {list(_MAY_DIFFER)}"
            )
        if cfg.device != cfgs[0].device:
            raise ValueError(f"cfgs[{i}].device={cfg.device!r} differs from cfgs[0].device={cfgs[0].device!r}")
    family = cfgs[0].model.attention.family
    if cfgs[0].model.kind != "seq2seq" or family not in PACKABLE_FAMILIES:
        raise ValueError(
            f"model.kind={cfgs[0].model.kind!r}, attention.family={family!r} cannot be packed; "
            f"packable: seq2seq with attention.family in {list(PACKABLE_FAMILIES)}"
        )
    seeds = [c.seed for c in cfgs]
    if len(set(zip(seeds, (c.optim.lr for c in cfgs)))) != len(cfgs):
        raise ValueError(f"packed runs must differ in seed or optim.lr, got seeds {seeds}")


# --------------------------------------------------------------------------- the packed model


def _set_param(module: torch.nn.Module, name: str, value: torch.nn.Parameter) -> None:
    *path, leaf = name.split(".")
    for part in path:
        module = getattr(module, part)
    setattr(module, leaf, value)


class _Pack:
    """The active replicas' parameters stacked into one packed model for one epoch."""

    def __init__(self, runs: list[Any]) -> None:
        self.runs = runs
        solo = runs[0].model
        noise, solo.noise = solo.noise, None  # generators are not copied
        self.model = copy.deepcopy(solo)
        solo.noise = noise
        self.names = [n for n, _ in runs[0].model.named_parameters()]
        self.replica_params = [dict(r.model.named_parameters()) for r in runs]
        self.stacked: list[torch.nn.Parameter] = []
        for name in self.names:
            s = torch.nn.Parameter(torch.stack([p[name].detach() for p in self.replica_params]))
            _set_param(self.model, name, s)
            self.stacked.append(s)
            for k, p in enumerate(self.replica_params):
                p[name].data = s.data[k]  # the solo parameter is now a view of its slice

    def release(self) -> None:
        """Give every solo parameter its own storage again (checkpoints save only its slice)."""
        for p in self.replica_params:
            for name in self.names:
                p[name].data = p[name].data.clone()
                p[name].grad = None

    def distribute_grads(self) -> None:
        for i, name in enumerate(self.names):
            g = self.stacked[i].grad
            for k, p in enumerate(self.replica_params):
                p[name].grad = None if g is None else g[k]


def _pad(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
    return F.pad(x, (0, width - x.shape[1]), value=value)


def packed_train_epoch(runs: list[Any], epoch: int, *, exact: bool = True) -> list[float]:
    """One training pass of every run in ``runs`` at once; per run its token-weighted mean loss.

    ``exact=False`` pads every batch to the pack's longest instead of grouping equal shapes:
    faster when lengths vary a lot, equal to the solo runs only up to chaotic growth of
    rounding differences.

    Raises :class:`ReplicaFailed` (wrapping ``NonFiniteLossError``) when a replica's loss is not
    finite; the other replicas' parameters and optimizers have then moved part-way into the epoch.
    """
    from locattn.train import NonFiniteLossError
    from locattn.training.data import epoch_order

    cfg0 = runs[0].cfg
    pad = runs[0].ids["pad_id"]
    pack = _Pack(runs)
    model = pack.model
    model.train()
    for r in runs:
        r.model.train()
    noise = epoch_dropout_noise([r.cfg.seed for r in runs], epoch, runs[0].device)
    gens = list(noise.generators)
    model.noise = noise
    iters = [
        r.train_split.train_batches(epoch_order(r.cfg.seed, epoch, len(r.train_split)), cfg0.optim.batch_size)
        for r in runs
    ]
    K = len(runs)
    loss_sums = [torch.zeros((), dtype=torch.float64, device=runs[0].device) for _ in runs]
    n_tokens = [0] * K
    params = [[p for p in r.model.parameters() if p.requires_grad] for r in runs]
    try:
        for step, batches in enumerate(zip(*iters), start=1):
            # replicas whose batches have the same shape run together; with ``exact`` a replica
            # whose batch is shorter runs in its own group instead of being padded (padding
            # changes the rounding of a few reductions, and training is chaotic enough to turn
            # a last-bit difference into a different run within an epoch). An epoch's last,
            # partial batch also trains alone: packed, batches of 8 or 12 examples rounded
            # differently from the solo run (1e-8 in the loss, 1e-2 eight epochs later), while
            # full batches of 32 matched to the bit in every case measured.
            groups: dict[Any, list[int]] = {}
            for k, b in enumerate(batches):
                key = (b.src.shape[1], b.tgt_in.shape[1]) if exact else None
                if exact and b.src.shape[0] != cfg0.optim.batch_size:
                    key = ("alone", k)  # an epoch's last, partial batch: see above
                groups.setdefault(key, []).append(k)
            loss_parts: list[torch.Tensor] = [None] * K  # type: ignore[list-item]
            for idx in groups.values():
                group = [batches[k] for k in idx]
                S = max(b.src.shape[1] for b in group)
                T = max(b.tgt_in.shape[1] for b in group)
                noise.generators = [gens[k] for k in idx]
                noise.trim = [S - b.src.shape[1] for b in group]
                src = torch.cat([_pad(b.src, S, pad) for b in group])  # (k*B, S)
                src_len = torch.cat([b.src_len for b in group])  # (k*B,)
                tgt_in = torch.cat([_pad(b.tgt_in, T, pad) for b in group])  # (k*B, T)
                tgt_out = torch.cat([_pad(b.tgt_out, T, pad) for b in group])  # (k*B, T)
                if len(idx) == K:
                    logits = model(src, src_len, tgt_in).logits  # (K*B, T, V)
                else:
                    sel = torch.tensor(idx, device=src.device)
                    sub = {name: p.index_select(0, sel) for name, p in zip(pack.names, pack.stacked)}
                    logits = torch.func.functional_call(model, sub, (src, src_len, tgt_in)).logits
                nll = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=pad,
                    reduction="none",
                ).view(len(idx), -1).sum(1)  # (k,)
                for j, k in enumerate(idx):
                    loss_parts[k] = nll[j] / batches[k].n_tokens  # token-level mean
            losses = torch.stack(loss_parts)  # (K,)
            finite = torch.isfinite(losses.detach())
            if not bool(finite.all()):
                bad = int((~finite).nonzero()[0, 0])
                r = runs[bad]
                raise ReplicaFailed(bad, NonFiniteLossError(
                    f"non-finite training loss ({float(losses[bad].detach())}) at epoch {epoch}, batch {step} "
                    f"(task={r.cfg.task.name}, variant={r.cfg.variant}, lr={r.cfg.optim.lr}, "
                    f"seed={r.cfg.seed}; packed run)"
                ))
            for s in pack.stacked:
                s.grad = None
            losses.sum().backward()
            pack.distribute_grads()
            for k, r in enumerate(runs):
                torch.nn.utils.clip_grad_norm_(params[k], r.cfg.optim.clip)
                r.optimizer.step()
                loss_sums[k] += losses[k].detach().double() * batches[k].n_tokens
                n_tokens[k] += batches[k].n_tokens
    finally:
        pack.release()
    return [float(s) / n for s, n in zip(loss_sums, n_tokens)]


def solo_train_epoch(run: Any) -> float:
    """A solo run's training pass (``_Seq2SeqRun.train_epoch``): a pack of one."""
    try:
        return packed_train_epoch([run], run.epoch)[0]
    except ReplicaFailed as failed:
        raise failed.error from None


class ReplicaFailed(Exception):
    """A replica's loss became non-finite; ``index`` is its position in the pack."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.index, self.error = index, error


# --------------------------------------------------------------------------- the driver


def _end_epoch(run: Any, train_loss: float, seconds: float, recorder: Any) -> None:
    """The solo run's per-epoch bookkeeping after a (packed) training pass."""
    run.end_epoch(train_loss, seconds, recorder)


def train_packed(
    cfgs: Sequence[RunConfig],
    out_dirs: Sequence[str | Path],
    recorders: Sequence[Any] | None = None,
    *,
    resume: bool = True,
) -> list[Any]:
    """Train the runs ``cfgs`` (one cell: equal except ``seed`` / ``optim.lr``) as one pack.

    ``out_dirs[k]`` receives exactly what ``train(cfgs[k], out_dirs[k])`` writes (config,
    per-epoch checkpoint, result, best model, attention figure) and ``recorders[k]`` hears the
    same calls. With ``resume`` each replica continues from its own checkpoint, which has the
    solo format (a run may switch between solo and packed training at any epoch boundary).
    Replicas standing at different epochs are trained in groups of equal epoch, lowest first,
    so a lagging replica trains alone (or with its peers) until it catches up.

    Returns one entry per run: its :class:`~locattn.train.RunResult`, or the exception that
    ended it (e.g. ``NonFiniteLossError``), so one diverging seed does not cost the others.
    """
    from locattn.tasks import load_task
    from locattn.train import CONFIG_FILE, RESULT_FILE, _Seq2SeqRun
    from locattn.training import checkpoint as ckpt
    from locattn.training.recorders import NullRecorder

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
        run = _Seq2SeqRun(cfg, data, out)
        if found is not None:
            run.restore(found)
        runs.append(run)

    results: list[Any] = [None] * len(runs)
    active = [k for k, r in enumerate(runs) if r.stop_reason is None and r.epoch < r.cfg.optim.epochs]
    while active:
        # replicas at the lowest epoch train together (all of them unless resumed unevenly)
        low = min(runs[k].epoch for k in active)
        group = [k for k in active if runs[k].epoch == low]
        for k in group:
            runs[k].epoch += 1
        start = time.perf_counter()
        try:
            losses = packed_train_epoch([runs[k] for k in group], low + 1)
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
            _end_epoch(runs[k], loss, seconds, recs[k])
            if runs[k].stop_reason is not None:
                active.remove(k)
    for k, run in enumerate(runs):
        if results[k] is not None:
            continue
        result = run.finish()
        (run.out_dir / RESULT_FILE).write_text(json.dumps(result.to_dict(), indent=1) + "\n")
        recs[k].on_end(result)
        results[k] = result
    return results


def _reload(run: Any) -> None:
    """Put a run back to its last completed epoch (its checkpoint, or its initial state)."""
    from locattn.training import checkpoint as ckpt

    found = ckpt.find_checkpoint(run.out_dir)
    if found is not None:
        run.restore(found)
    else:
        fresh = type(run)(run.cfg, run.data, run.out_dir)
        run.__dict__.update(fresh.__dict__)


__all__ = [
    "PACKABLE_FAMILIES",
    "ReplicaFailed",
    "check_packable",
    "epoch_dropout_noise",
    "packed_train_epoch",
    "solo_train_epoch",
    "train_packed",
]
