"""Floor 3 of a training run: one epoch's training pass, for a pack of K runs of one cell.

A solo run is a pack of one (:func:`solo_train_epoch`), so solo and packed training execute the
same kernels and draw the same dropout masks. Per epoch the replicas' parameters are stacked into
one packed model (leading K axis, see :mod:`locattn.models.functional`); each replica's solo
parameters become views of its slice, so after one packed forward/backward every replica's own
gradient-norm clipping and own optimizer step run on its own slice, unchanged.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import shutil
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from locattn.models.attention.replicas import method_modules
from locattn.models.functional import DropoutNoise, dropout_keep
from locattn.training import aot_step
from locattn.training.aot_step import SavedStep
from locattn.training.compiles import fixed_train_shape, raise_on_recompile_limit
from locattn.training.data import epoch_order
from locattn.training.graph_passes import product_pass
from locattn.training.results import NonFiniteLossError


def _epoch_generator(stream: str, seed: int, epoch: int, device: str | torch.device) -> torch.Generator:
    """A generator seeded from (stream, seed, epoch): it needs no checkpoint, and packing cannot
    change it."""
    digest = hashlib.sha256(f"locattn-{stream}:{seed}:{epoch}".encode()).digest()
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
    return g


def epoch_dropout_noise(seeds: Sequence[int], epoch: int, device: str | torch.device) -> DropoutNoise:
    """Dropout noise for training epoch ``epoch`` of runs with these seeds: one generator per run,
    seeded from (seed, epoch), so the stream needs no checkpoint and packing cannot change it."""
    return DropoutNoise([_epoch_generator("dropout", seed, epoch, device) for seed in seeds])


def teacher_forcing_draws(seed: int, epoch: int, ratio: float, n_batches: int) -> list[bool]:
    """Which of an epoch's ``n_batches`` training batches are teacher-forced
    (``optim.teacher_forcing_ratio``): batch i is when the i-th U(0, 1) draw of the run's
    (seed, epoch) generator is below ``ratio``, as Dubois et al.'s decoder draws once per batch.
    A ratio of 1 draws nothing: every batch is teacher-forced, the default that
    :data:`locattn.config.LEGACY_VALUES` keeps out of the run identity."""
    if ratio >= 1.0:
        return [True] * n_batches
    u = torch.rand(n_batches, generator=_epoch_generator("teacher-forcing", seed, epoch, "cpu"),
                   dtype=torch.float64)
    return (u < ratio).tolist()


# --------------------------------------------------------------------------- the packed model


def _set_param(module: torch.nn.Module, name: str, value: torch.nn.Parameter) -> None:
    *path, leaf = name.split(".")
    for part in path:
        module = getattr(module, part)
    setattr(module, leaf, value)


class ParamPack:
    """The active replicas' parameters stacked into one packed model for one epoch.

    ``ParamPack(runs)`` stacks the parameters of each run's ``model`` into ``.model`` (leading K
    axis) and makes every solo parameter a view of its slice; :meth:`distribute_grads` hands each
    replica its own gradient slice, :meth:`release` gives the solo parameters their own storage
    back (checkpoints then save only their slice)."""

    def __init__(self, runs: list[Any]) -> None:
        self.runs = runs
        solo = runs[0].model
        noise, solo.noise = solo.noise, None  # generators are not copied
        self.model = copy.deepcopy(solo)
        solo.noise = noise
        self.replica_params = [dict(r.model.named_parameters()) for r in runs]
        self.names = list(dict.fromkeys(n for p in self.replica_params for n in p))
        """Every replica's parameter names; a name only some replicas have (MonoAttn's gate in a
        pack with other steps) is stacked with zeros in the others' slots, which never read it."""
        attender = getattr(self.model, "attender", None)
        cfgs = [getattr(r, "cfg", None) for r in runs]  # a bare model holder has none: one cell
        if len(runs) > 1 and hasattr(attender, "pack_switches") and None not in cfgs:  # per-replica switches
            a = [c.model.attention for c in cfgs]
            attender.pack_switches([x.step for x in a], [x.location_norm for x in a],
                                   [x.step_temperature for x in a], references=[x.reference for x in a],
                                   pa_froms=[x.pa_from for x in a], mono_gate_ons=[x.mono_gate_on for x in a])
        replicated = attender is not None and not getattr(self.model, "attender_stacked", True)
        self.switches = [(f"attender.{n}", b) for n, b in attender.named_buffers()
                         if n.startswith("replica_")] if attender is not None and not replicated else []
        """(name, (K,) buffer) of the switches that differ between replicas (a subset of the
        replicas runs with their rows: see :func:`packed_train_epoch`)."""
        self.buffers: list[tuple[str, torch.Tensor]] = []
        """(name, (K, ...) buffer) of an ordinary-module attender's buffers, stacked per replica
        (written back to each replica's own by :meth:`release`)."""
        if replicated:  # an ordinary module: run per replica through torch.func (attention.replicas)
            self.model.replicated_attender = True
            method_modules(self.model.attender)  # made before a compiled step traces a call
            for name, _ in runs[0].model.attender.named_buffers():
                full = f"attender.{name}"
                b = torch.stack([dict(r.model.named_buffers())[full].detach() for r in runs])
                _set_param(self.model, full, b)
                self.buffers.append((full, b))
        self.stacked: list[torch.nn.Parameter] = []
        self.own: dict[str, list[tuple[slice, ...]]] = {}
        """name -> per replica, its own part of the stacked slice, for a parameter whose shape
        differs between replicas (the step head under different ``reference``s): the stacked one
        has the widest shape, a narrower replica's slice zero-padded beyond its own part."""
        for name in self.names:
            held = [p[name].detach() for p in self.replica_params if name in p]
            own = [p[name].detach() if name in p else held[0].new_zeros(()).expand_as(held[0])
                   for p in self.replica_params]
            if len({t.shape for t in own}) > 1:
                widest = [max(sizes) for sizes in zip(*(t.shape for t in own))]
                s = torch.nn.Parameter(own[0].new_zeros(len(own), *widest))
                self.own[name] = [tuple(slice(0, n) for n in t.shape) for t in own]
                with torch.no_grad():
                    for k, t in enumerate(own):
                        s[k][self.own[name][k]] = t
            else:
                s = torch.nn.Parameter(torch.stack(own))
            _set_param(self.model, name, s)
            self.stacked.append(s)
            for k, p in enumerate(self.replica_params):
                if name not in p:
                    continue
                part = self.own.get(name)  # the solo parameter is now a view of its slice
                p[name].data = s.data[k] if part is None else s.data[k][part[k]]

    def part(self, name: str, k: int) -> tuple[Any, ...] | None:
        """Index of replica ``k``'s own part of the stacked parameter ``name`` (and of anything
        stacked like it, e.g. AdamW moments): ``(k,)``, or ``(k, rows...)`` where the replicas'
        shapes differ; None where replica ``k`` has no such parameter."""
        if name not in self.replica_params[k]:
            return None
        own = self.own.get(name)
        return (k,) if own is None else (k, *own[k])

    def release(self) -> None:
        """Give every solo parameter its own storage again (checkpoints save only its slice), and
        a solo run the buffers its pass changed (the ``dubois_code`` attender's batch count)."""
        for p in self.replica_params:
            for name in p:
                p[name].data = p[name].data.clone()
                p[name].grad = None
        if self.buffers:  # each replica's own slice of the stacked buffers, as its pass left them
            for k, r in enumerate(self.runs):
                own = dict(r.model.named_buffers())
                for name, b in self.buffers:
                    own[name].copy_(b[k])
        elif len(self.runs) == 1:
            solo = dict(self.runs[0].model.named_buffers())
            for name, b in self.model.named_buffers():
                solo[name].copy_(b)

    def distribute_grads(self) -> None:
        for i, name in enumerate(self.names):
            g = self.stacked[i].grad
            part = self.own.get(name)
            for k, p in enumerate(self.replica_params):
                if name in p:
                    p[name].grad = None if g is None else g[k] if part is None else g[k][part[k]]


def _pad(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
    return F.pad(x, (0, width - x.shape[1]), value=value)


def batch_nll(
    model: torch.nn.Module, params: dict[str, torch.Tensor] | None, src: torch.Tensor,
    src_len: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, noise: torch.Tensor | None,
    pad: int, k: int, check: bool = True, teacher_forced: bool = True, keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Summed token NLL (k,) of a batch of k replicas' rows, teacher forced (or free-running,
    ``teacher_forced=False``), with the dropout noise given (or, ``keep``, its float multiplier:
    :func:`~locattn.models.functional.dropout_keep`, the same mask). ``params``: the parameters to
    run the model with (a subset of the pack's replicas), None for its own. ``check=False`` leaves
    out the input checks (compiled path)."""
    args = (src, src_len, tgt_in)
    kwargs = {"noise": noise, "check": check, "teacher_forced": teacher_forced}
    if keep is not None:
        kwargs["dropout_keep"] = keep
    if params is None:
        logits = model(*args, **kwargs).logits  # (k*B, T, V)
    else:
        logits = torch.func.functional_call(model, params, args, kwargs).logits
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=pad, reduction="none",
    ).view(k, -1).sum(1)


RECOMPILE_LIMIT = 256
"""Compiled graphs kept per process: one per batch shape (rows, source and target length)."""


def compiled_batch_nll() -> Callable[..., torch.Tensor]:
    """:func:`batch_nll` under torch.compile (``train_path="compiled"``): the whole forward in one
    graph and its backward in another, C++ kernels from inductor. ``dynamic=False``: the graph,
    hence every rounding, depends on the batch shape only, never on which shapes came first, so
    a resumed run computes what the uninterrupted one did. :func:`packed_train_epoch` pads every
    batch of a run to one shape (:func:`~locattn.training.compiles.fixed_train_shape`, rows to
    the batch size), so a run compiles once. Graphs are cached on disk by inductor
    (``TORCHINDUCTOR_CACHE_DIR``, default /tmp/torchinductor_$USER; a study sets it to a folder
    its trials share): a later process with the same shapes loads them instead of compiling.

    Dynamo's recompile limits are raised on every call, in the calling thread: torch keeps its
    config per thread, and a Ray actor reused for a second trial trains it in a new thread, where
    the default limit (8 shapes) would stop the run with FailOnRecompileLimitHit."""
    prepare_compile()
    return functools.partial(_compiled_nll(), check=False)


def prepare_compile() -> None:
    """What every compiled training step needs first, in the calling thread: a C++ compiler for
    inductor's CPU kernels (a clear error where there is none) and dynamo's recompile limits
    raised to :data:`RECOMPILE_LIMIT` (torch keeps them per thread)."""
    if shutil.which(torch._inductor.config.cpp.cxx[1] or "g++") is None:
        raise RuntimeError("train_path='compiled' needs a C++ compiler for inductor's CPU kernels "
                           "(g++ not found; apt-get install g++), or train_path='eager'")
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    torch._dynamo.config.accumulated_recompile_limit = max(
        torch._dynamo.config.accumulated_recompile_limit, RECOMPILE_LIMIT
    )
    raise_on_recompile_limit()
    aot_step.enabled()  # a bad LOCATTN_SAVED_STEP stops the run before it trains


@functools.cache
def _compiled_nll() -> Callable[..., torch.Tensor]:
    """The one compiled :func:`batch_nll` of the process (its graphs serve every thread), saved
    to disk so that a later process loads it instead of tracing it again
    (:class:`~locattn.training.aot_step.SavedStep`)."""
    return SavedStep(batch_nll, dynamic=False, fullgraph=True,
                     options={"post_grad_custom_post_pass": product_pass()})  # fewer matrix kernels


def fixed_shape_inputs(
    b: Any, S: int, T: int, rows: int, pad: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A training batch padded to ``rows`` x source length ``S`` x target length ``T`` (the
    compiled path's one shape): (src, src_len, tgt_in, tgt_out). Padded positions are masked as
    in any batch (sources by length, targets by ``<pad>``, which the loss ignores); filler rows
    repeat the first row's source and input with an all-``<pad>`` target, so they add exact zeros
    to the loss and its gradient."""
    fill = rows - b.src.shape[0]
    src, src_len, tgt_in, tgt_out = _pad(b.src, S, pad), b.src_len, _pad(b.tgt_in, T, pad), _pad(b.tgt_out, T, pad)
    if fill > 0:
        src = torch.cat([src, src[:1].expand(fill, -1)])  # (rows, S)
        src_len = torch.cat([src_len, src_len[:1].expand(fill)])  # (rows,)
        tgt_in = torch.cat([tgt_in, tgt_in[:1].expand(fill, -1)])  # (rows, T)
        tgt_out = torch.cat([tgt_out, tgt_out.new_full((fill, T), pad)])  # (rows, T)
    return src, src_len, tgt_in, tgt_out


def packed_train_epoch(runs: list[Any], epoch: int, *, exact: bool = True) -> list[float]:
    """One training pass of every run in ``runs`` at once; per run its token-weighted mean loss.

    ``exact=False`` pads every batch to the pack's longest instead of grouping equal shapes:
    faster when lengths vary a lot, equal to the solo runs only up to chaotic growth of
    rounding differences.

    Raises :class:`ReplicaFailed` (wrapping ``NonFiniteLossError``) when a replica's loss is not
    finite; the other replicas' parameters and optimizers have then moved part-way into the epoch.
    """
    cfg0 = runs[0].cfg
    pad = runs[0].ids["pad_id"]
    pack = ParamPack(runs)
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
    forced = [  # per run and batch: teacher-forced or free-running
        teacher_forcing_draws(r.cfg.seed, epoch, r.cfg.optim.teacher_forcing_ratio,
                              -(-len(r.train_split) // cfg0.optim.batch_size))
        for r in runs
    ]
    K = len(runs)
    loss_sums = [torch.zeros((), dtype=torch.float64, device=runs[0].device) for _ in runs]
    n_tokens = [0] * K
    params = [[p for p in r.model.parameters() if p.requires_grad] for r in runs]
    compiled = cfg0.train_path == "compiled"
    nll_fn = compiled_batch_nll() if compiled else batch_nll
    fixed = [fixed_train_shape(r.train_split) for r in runs] if compiled else []
    if compiled:
        for r in runs:
            r.compile_watch.start_epoch(epoch)
    drop = model.dropout_p > 0
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
                # a group runs one forward: teacher-forced and free-running replicas run apart
                key = (b.src.shape[1], b.tgt_in.shape[1], forced[k][step - 1]) if exact else forced[k][step - 1]
                if exact and b.src.shape[0] != cfg0.optim.batch_size:
                    key = ("alone", k)  # an epoch's last, partial batch: see above
                if compiled:
                    # inductor's kernels for K replicas round differently from those for one
                    # (2e-7 in a first epoch's loss, measured), so each replica runs the solo graph
                    key = ("alone", k)
                groups.setdefault(key, []).append(k)
            loss_parts: list[torch.Tensor] = [None] * K  # type: ignore[list-item]
            for idx in groups.values():
                group = [batches[k] for k in idx]
                rows = sum(b.src.shape[0] for b in group)  # k*B
                if compiled:  # alone, at one shape for every batch of the run (rows to the batch size), so one graph
                    S, T = fixed[idx[0]]
                    src, src_len, tgt_in, tgt_out = fixed_shape_inputs(group[0], S, T, cfg0.optim.batch_size, pad)
                else:
                    S = max(b.src.shape[1] for b in group)
                    T = max(b.tgt_in.shape[1] for b in group)
                    src = torch.cat([_pad(b.src, S, pad) for b in group])  # (k*B, S)
                    src_len = torch.cat([b.src_len for b in group])  # (k*B,)
                    tgt_in = torch.cat([_pad(b.tgt_in, T, pad) for b in group])  # (k*B, T)
                    tgt_out = torch.cat([_pad(b.tgt_out, T, pad) for b in group])  # (k*B, T)
                noise.generators = [gens[k] for k in idx]
                noise.trim = [S - b.src.shape[1] for b in group]
                sub = None
                if len(idx) < K:
                    sel = torch.tensor(idx, device=src.device)
                    sub = {name: p.index_select(0, sel) for name, p in zip(pack.names, pack.stacked)}
                    sub.update({name: b.index_select(0, sel.to(b.device))
                                for name, b in (*pack.switches, *pack.buffers)})
                elif compiled:  # the same call as a packed replica's, so the same graph and kernels
                    sub = dict(zip(pack.names, pack.stacked))
                # drawn for the batch's own rows (the generators' stream does not depend on the padding)
                u = noise.uniform(src.new_empty(model.dropout_shape(src[:rows]), dtype=torch.float32)) if drop else None
                tf = forced[idx[0]][step - 1]
                if compiled:
                    if u is not None and rows < src.shape[0]:  # filler rows: kept (their loss is 0)
                        u = torch.cat([u, u.new_ones(src.shape[0] - rows, *u.shape[1:])])
                    # the mask enters the graph as its float multiplier: a bool mask made inside
                    # would be stored and reloaded by inductor's kernels, which is slow on CPU
                    keep = None if u is None else dropout_keep(u, model.dropout_p)
                    nll = runs[idx[0]].compile_watch.call(
                        nll_fn, batch_nll, model, sub, src, src_len, tgt_in, tgt_out, None, pad, 1,
                        teacher_forced=tf, keep=keep)  # (1,)
                else:
                    nll = nll_fn(model, sub, src, src_len, tgt_in, tgt_out, u, pad, len(idx),
                                 teacher_forced=tf)  # (k,)
                if pack.buffers and len(idx) < K:  # what the group's pass wrote into its buffers
                    with torch.no_grad():
                        for name, b in pack.buffers:
                            b.index_copy_(0, sel.to(b.device), sub[name])
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
                    f"seed={r.cfg.seed}{'; packed run' if len(runs) > 1 else ''})"
                ))
            for s in pack.stacked:
                s.grad = None
            losses.sum().backward()
            if compiled:
                for r in runs:
                    r.compile_watch.step_done()
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
    """A solo run's training pass (:meth:`Seq2SeqRun.train_epoch`): a pack of one."""
    try:
        return packed_train_epoch([run], run.epoch)[0]
    except ReplicaFailed as failed:
        raise failed.error from None


class ReplicaFailed(Exception):
    """A replica's loss became non-finite; ``index`` is its position in the pack."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.index, self.error = index, error


__all__ = [
    "ParamPack", "ReplicaFailed", "batch_nll", "compiled_batch_nll", "epoch_dropout_noise",
    "fixed_shape_inputs", "packed_train_epoch", "prepare_compile", "solo_train_epoch", "teacher_forcing_draws",
]
