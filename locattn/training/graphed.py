"""Floor 3, device path: the packed training pass as one static-shape step (``optim.train_step:
graphed``), captured as CUDA graphs on a GPU and run uncaptured on CPU.

These models are launch-bound (about 2,900 small ops per batch), so a GPU fills only with many
replicas in one process and the per-step launches recorded once. The eager pass
(:mod:`locattn.training.epoch`) cannot be captured: it trims every batch to its own lengths,
groups replicas by shape, and runs K optimizers, K clips and a finiteness check (a host sync)
per step. :class:`GraphedStep` keeps everything static instead:

* the training split lives on the device, padded, with one all-padding row that fills an
  epoch's last, partial batch up to the batch size (it adds no token and no gradient);
* each step's batch is gathered on the device from an index row (the replicas' own data
  orders, uploaded once per epoch), padded to the split's longest source and target: one
  static shape, so one graph serves every step. (Buckets chosen from the pack's longest per
  step were tried first: a replica then saw other paddings and dropout-mask shapes in a pack
  than alone, and at K = 8 on 2,000 examples its losses differed from its solo run. Padding
  to one shape costs compute where lengths vary a lot, and keeps packed == solo exact.)
* one optimizer (:class:`StackedAdamW`) updates the stacked (K, ...) parameters with a
  per-replica learning rate, weight decay and gradient-norm clip, as tensor ops;
* losses, token counts and the first non-finite step per replica accumulate on the device and
  are read once per epoch (a replica whose loss turned non-finite fails then, alone).

Each replica's weights, AdamW moments and step count are copied out of the pack at the end of
every epoch into its own :class:`~locattn.training.seq2seq.Seq2SeqRun` (the solo checkpoint
format) and in again at the start, so scheduling, early stopping, checkpoints and resume stay
per replica. Within this path a packed replica equals its solo run bit for bit (the same padded
shapes, per-element operations and float64 per-replica sums). Against the eager path it is
another sample of the same training: dropout masks are drawn at the padded shape, so the runs
agree (to 1e-4 in the first epoch's loss) only while every batch reaches the split's longest
lengths (``test_graphed.py``).

``train_path: compiled`` (operational, as for the eager step) runs the step's forward and loss
as one torch.compile graph (its backward another) and the stacked AdamW update as a third:
inductor's fused kernels (Triton on a GPU, C++ on a CPU) in place of about 2,900 small ops.
Dropout noise is then drawn before the compiled forward from the same per-replica generators
(the same numbers, so the same masks). The same function, rounded otherwise: one step's losses
agree with the uncompiled step's within 1e-5, and a compiled pack's replica equals its compiled
solo run only to rounding (inductor's kernels for K replicas differ from those for one).

A pack shrinks when a replica stops (early stopping, its last epoch, a failure). The compiled
step's graphs are per pack size, and compiling them again for the smaller pack costs minutes; on
a GPU (:func:`pads_shrinking_packs`) the step keeps its size instead: a stopped replica's slot
stays in the pack, frozen (learning rate 0, so its weights do not move; never copied out, its
losses never read), and the other replicas train as in the smaller pack, to the bit on the
uncompiled path (``test_graphed.py``). On a CPU the frozen slots' compute costs about what
a recompile saves, so the pack is rebuilt.

On CPU (or with ``capture=False``) the very same step runs without capture: that fallback is
what the CPU tests exercise. What only a GPU can show (capture, replay, memory, speed) is in
the ``gpu`` tests and ``benchmarks/bench_gpu.py``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from locattn.models.functional import dropout_keep
from locattn.training.data import epoch_order
from locattn.training.epoch import ParamPack, ReplicaFailed, epoch_dropout_noise, prepare_compile
from locattn.training.evaluate import DevScores
from locattn.training.graph_passes import product_pass
from locattn.training.results import NonFiniteLossError

def pick_pack_size(free_bytes: int, bytes_per_replica: int, *, fixed_bytes: int = 0,
                   headroom: float = 0.1, limit: int | None = None, total_bytes: int | None = None,
                   share: float = 1.0) -> int:
    """How many replicas fit one device: ``(budget * (1 - headroom) - fixed) // per replica``,
    at least 1 (a lone replica is tried even where it may not fit), at most ``limit``.

    ``free_bytes`` is the device's free memory, ``bytes_per_replica`` the measured growth of the
    peak memory per added replica (:func:`measure_bytes_per_replica`), ``fixed_bytes`` what
    does not grow with the pack (the split on the device, the CUDA context). The budget is
    ``min(free, share * total)`` with ``total_bytes`` (the device's memory) and ``share`` the
    fraction of the device this run was given (``RunConfig.gpu_share``): the first of four
    trials with a quarter GPU each sizes itself to a quarter, not to all that is free."""
    if bytes_per_replica <= 0:
        raise ValueError(f"bytes_per_replica must be > 0, got {bytes_per_replica!r}")
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"headroom must be in [0, 1), got {headroom!r}")
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    if share < 1.0 and total_bytes is None:
        raise ValueError("a share of the device needs total_bytes (the device's memory)")
    budget = free_bytes if total_bytes is None else min(free_bytes, share * total_bytes)
    usable = budget * (1.0 - headroom) - fixed_bytes
    k = max(1, int(usable // bytes_per_replica))
    return min(k, limit) if limit is not None else k


def per_replica_sum(x: torch.Tensor) -> torch.Tensor:
    """(K, N) -> (K,) row sums in float64, so that a replica's sum does not depend on K.

    A float32 row sum takes another order once K reaches the CPU's vector width (the kernel
    then reduces across rows); float64 sums of float32 terms are exact while the terms span
    fewer than 2**20 in magnitude (token losses), and otherwise round far below float32."""
    return x.double().sum(1)


class StackedAdamW:
    """``torch.optim.AdamW`` plus ``clip_grad_norm_`` for K replicas' stacked parameters.

    ``params`` are (K, ...) tensors; ``lr``, ``weight_decay``, ``clip`` are (K,) per replica.
    Per replica k: its gradient norm over all its slices, the clip coefficient
    ``min(1, clip / (norm + 1e-6))``, then the decoupled-weight-decay Adam update with bias
    corrections from its own step count. All tensor ops, no host read: capturable. It equals
    torch's fused AdamW and clipping up to rounding (the norm is summed in another order)."""

    def __init__(self, params: Sequence[torch.Tensor], *, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        K = self.params[0].shape[0]
        dev = self.params[0].device
        self.beta1, self.beta2 = betas
        self.eps = eps
        # per-replica scalars in float64, as torch computes them in Python floats (the bias
        # correction 1 - 0.999**t loses 1e-5 of its value in float32)
        self.lr = torch.zeros(K, dtype=torch.float64, device=dev)
        self.weight_decay = torch.zeros(K, dtype=torch.float64, device=dev)
        self.clip = torch.zeros(K, dtype=torch.float64, device=dev)
        self.step_count = torch.zeros(K, dtype=torch.float64, device=dev)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self, update: Callable[..., None] | None = None) -> None:
        """One update of every replica; ``update`` replaces :func:`stacked_adamw_update` (its
        compiled form, :func:`compiled_adamw_update`)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        (update or stacked_adamw_update)(self.params, grads, self.exp_avg, self.exp_avg_sq, self.lr,
                                         self.weight_decay, self.clip, self.step_count,
                                         self.beta1, self.beta2, self.eps)


def _per(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x.view(-1, *([1] * (like.dim() - 1)))  # (K, 1, ...)


def stacked_adamw_update(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avg: list[torch.Tensor],
                         exp_avg_sq: list[torch.Tensor], lr: torch.Tensor, weight_decay: torch.Tensor,
                         clip: torch.Tensor, step_count: torch.Tensor, beta1: float, beta2: float,
                         eps: float) -> None:
    """:meth:`StackedAdamW.step` on its tensors, in place: per replica the gradient-norm clip,
    then the decoupled-weight-decay Adam update with bias corrections from its own step count."""
    K = step_count.shape[0]
    sq = torch.stack([per_replica_sum(g.reshape(K, -1).double().pow(2)) for g in grads]).sum(0)  # (K,)
    coef = (clip / (sq.sqrt() + 1e-6)).clamp(max=1.0).float()  # (K,)
    step_count += 1
    bc1 = 1 - beta1 ** step_count  # (K,) float64
    bc2_sqrt = (1 - beta2 ** step_count).sqrt().float()  # (K,)
    step_size = (lr / bc1).float()  # (K,)
    decay = (1 - lr * weight_decay).float()  # (K,)
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        g = g * _per(coef, g)
        p.mul_(_per(decay, p))
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / _per(bc2_sqrt, v)).add_(eps)
        p.sub_(_per(step_size, p) * m / denom)


@functools.cache
def compiled_adamw_update() -> Callable[..., None]:
    """:func:`stacked_adamw_update` under torch.compile: one graph per pack shape, its in-place
    updates fused into a few kernels (``train_path: compiled``)."""
    return torch.compile(stacked_adamw_update, dynamic=False, fullgraph=True)


def step_nll(model: torch.nn.Module, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor,
             tgt_out: torch.Tensor, keep: torch.Tensor | None, pad: int, K: int) -> torch.Tensor:
    """(K, B*T) token NLL of a graphed step's batch, teacher forced, with the dropout mask given
    as its float multiplier ``keep`` (:func:`~locattn.models.functional.dropout_keep` of the
    uniform noise, the same mask to the bit; None without dropout): no generator, no bool mask
    and no input check, so torch.compile traces it into one graph whose kernels read floats only."""
    logits = model(src, src_len, tgt_in, check=False, dropout_keep=keep).logits  # (K*B, T, V)
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=pad, reduction="none",
    ).view(K, -1)


@functools.cache
def compiled_step_nll() -> Callable[..., torch.Tensor]:
    """:func:`step_nll` under torch.compile (``train_path: compiled``). ``dynamic=False``: a
    graph per pack shape, so a resumed run computes what the uninterrupted one did."""
    return torch.compile(step_nll, dynamic=False, fullgraph=True,
                         options={"post_grad_custom_post_pass": product_pass()})  # fewer matrix kernels


@contextlib.contextmanager
def deterministic_compile(device: torch.device) -> Iterator[None]:
    """:func:`deterministic_lowering` on a CUDA device, nothing on a CPU (one thread's kernels
    add in order there, and the CPU's compiled runs keep the kernels they were recorded with).
    The compiled graphed step runs every call inside it: dynamo guards the
    deterministic-algorithms flag, so a call outside would compile the step again."""
    if device.type != "cuda":
        yield
        return
    with deterministic_lowering():
        yield


@contextlib.contextmanager
def deterministic_lowering() -> Iterator[None]:
    """Inductor lowers, and the step runs, under deterministic algorithms while inside.

    Without it, inductor lowers the backward's accumulating ``index_put`` (the embeddings' and
    the gathers' gradients: ``index_put`` and ``_unsafe_masked_index_put_accumulate`` in the AOT
    backward graph of the graphed step) to atomic adds, whose float32 sums take another order on
    every call on a GPU, and it picks kernel configs by timing them; two runs of the same compiled
    step then differ in the last bits, and a captured graph cannot replay the uncaptured step bit
    for bit. Inside: aten's deterministic kernels for those ops (inductor reads
    ``torch.are_deterministic_algorithms_enabled()`` when it lowers them),
    ``torch._inductor.config.deterministic`` where this torch has it (no timing-picked configs),
    uninitialised memory left unfilled (as outside the mode: no extra fill kernels) and, unless
    set, ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS's deterministic workspace; without it the
    mode warns at every matrix product). ``warn_only``: an op with no deterministic kernel warns
    instead of raising. Everything is put back on exit."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    det = torch.utils.deterministic
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              det.fill_uninitialized_memory)
    inductor = torch._inductor.config
    patch = inductor.patch(deterministic=True) if hasattr(inductor, "deterministic") else contextlib.nullcontext()
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = False
    try:
        with patch:
            yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        det.fill_uninitialized_memory = before[2]


@contextlib.contextmanager
def matmul_precision(precision: str, device: torch.device) -> Iterator[None]:
    """``fp32``: as is. ``tf32``: TF32 matmuls (a GPU's tensor cores) while inside. ``bf16``:
    bfloat16 autocast of the forward pass while inside. The previous setting comes back after."""
    if precision == "fp32":
        yield
        return
    if precision == "tf32":
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before)
        return
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        yield


def _no_check(*args: Any, **kwargs: Any) -> None:
    """The packed copy's input checks read lengths back to the host (a sync, which a capture
    refuses); the graphed step's gathered inputs are valid by construction."""


class GraphedStep:
    """K replicas (:class:`~locattn.training.seq2seq.Seq2SeqRun` of one cell, at one epoch)
    trained by one static-shape step; see the module docstring.

    ``capture`` (default: when the device is CUDA) records the step's CUDA graph on first use
    and replays it; without it the same step runs eagerly. Reuse one object across
    epochs while the replicas stay the same (the graph stays valid: every buffer is updated in
    place)."""

    def __init__(self, runs: list[Any], *, capture: bool | None = None) -> None:
        self.runs = runs
        cfg = runs[0].cfg
        self.device = runs[0].device
        self.capture = (self.device.type == "cuda") if capture is None else capture
        if self.capture and self.device.type != "cuda":
            raise ValueError(f"CUDA graph capture needs a CUDA device, got {self.device}")
        self.precision = cfg.optim.precision
        self.K, self.B = len(runs), cfg.optim.batch_size
        split = runs[0].train_split
        self.pad, self.sos = split.pad_id, split.sos_id
        self.n = len(split)
        # the split on the device plus one all-padding row (index n) that fills partial batches
        self.src_all = F.pad(split.src, (0, 0, 0, 1), value=self.pad)  # (N+1, S_max)
        self.len_all = F.pad(split.src_len, (0, 1), value=1)  # (N+1,)
        self.tgt_all = F.pad(split.tgt, (0, 0, 0, 1), value=self.pad)  # (N+1, T_max)

        pack = ParamPack(runs)  # the stacked model; the solo parameters keep their own storage
        pack.release()
        self.model = pack.model.train()
        self.model._check = _no_check
        self.names = pack.names
        self.part = pack.part  # replica k's own part of a stacked tensor (a pack of ablation switches)
        self.stacked = pack.stacked
        self.buffers = pack.buffers  # an ordinary-module attender's, per replica (K, ...)
        self.opt = StackedAdamW(self.stacked)
        self.compiled = runs[0].cfg.train_path == "compiled"
        if self.compiled:
            prepare_compile()
        # dropout: one generator per replica, reseeded each epoch as the eager pass seeds it
        noise = epoch_dropout_noise([r.cfg.seed for r in runs], 0, self.device)
        self.gens = noise.generators
        self.model.noise = noise
        # device-side inputs and accumulators, updated in place (graph-safe)
        self.idx = torch.zeros(self.K * self.B, dtype=torch.long, device=self.device)
        self.loss_sum = torch.zeros(self.K, dtype=torch.float64, device=self.device)
        self.first_bad = torch.zeros(self.K, dtype=torch.long, device=self.device)
        self.step_no = torch.zeros((), dtype=torch.long, device=self.device)
        self.graph: Any = None
        self.live = list(range(self.K))  # the slots that train (the others are frozen)
        self.live_mask = torch.ones(self.K, dtype=torch.bool, device=self.device)

    def fits(self, runs: list[Any], pad: bool) -> bool:
        """Whether this step can train ``runs``: its own replicas, or (``pad``) some of them."""
        mine = [id(r) for r in self.runs]
        ids = [id(r) for r in runs]
        return ids == mine or (pad and set(ids) <= set(mine) and len(set(ids)) == len(ids))

    @torch.no_grad()
    def keep(self, runs: list[Any]) -> None:
        """Train only ``runs`` (some of this step's replicas) from now on: the other slots are
        frozen (learning rate and weight decay 0, so an update leaves their weights as they
        are). A live replica's weights and zero moments are put in first, so that a frozen slot
        stays finite even after its replica failed on a non-finite loss (0 x NaN is NaN)."""
        slot = {id(r): k for k, r in enumerate(self.runs)}
        live = [slot[id(r)] for r in runs]
        if live == self.live:
            return
        gone = sorted(set(self.live) - set(live))
        for k in gone:
            for p, m, v in zip(self.stacked, self.opt.exp_avg, self.opt.exp_avg_sq):
                p[k].copy_(p[live[0]])
                m[k].zero_()
                v[k].zero_()
            self.live_mask[k] = False
        for k in live:  # a slot may train again (load() copies its replica's state in each epoch)
            self.live_mask[k] = True
        self.live = live

    # ---------------------------------------------------------------- in and out of the pack

    @torch.no_grad()
    def load(self, epoch: int) -> None:
        """Copy every live replica's weights, AdamW state and learning rate into the pack (a
        frozen slot gets learning rate and weight decay 0), reseed dropout for ``epoch`` and zero
        the accumulators."""
        for k in range(self.K):
            if not self.live_mask[k]:
                self.opt.lr[k] = 0.0  # frozen: the update multiplies by 1 - 0 and subtracts 0
                self.opt.weight_decay[k] = 0.0
                continue
            r = self.runs[k]
            params = dict(r.model.named_parameters())
            group = r.optimizer.param_groups[0]
            self.opt.lr[k] = group["lr"]
            self.opt.weight_decay[k] = group["weight_decay"]
            self.opt.clip[k] = r.cfg.optim.clip
            steps = 0.0
            for i, name in enumerate(self.names):
                at = self.part(name, k)
                if at is None:  # a parameter this replica lacks: its slot stays zero
                    continue
                p = params[name]
                self.stacked[i][at].copy_(p)
                state = r.optimizer.state.get(p) or {}
                for mine, key in ((self.opt.exp_avg[i], "exp_avg"), (self.opt.exp_avg_sq[i], "exp_avg_sq")):
                    if key in state:
                        mine[at].copy_(state[key])
                    else:
                        mine[at].zero_()
                steps = float(state["step"]) if "step" in state else 0.0
            self.opt.step_count[k] = steps
            own = dict(r.model.named_buffers())
            for name, b in self.buffers:
                b[k].copy_(own[name])
        fresh = epoch_dropout_noise([r.cfg.seed for r in self.runs], epoch, self.device).generators
        for g, f in zip(self.gens, fresh):
            g.set_state(f.get_state())
        self.loss_sum.zero_()
        self.first_bad.zero_()
        self.step_no.zero_()

    @torch.no_grad()
    def store(self) -> None:
        """Copy every live replica's slice back into its own model and AdamW state (solo format)."""
        steps = self.opt.step_count.cpu()
        for k in self.live:
            r = self.runs[k]
            params = dict(r.model.named_parameters())
            for i, name in enumerate(self.names):
                at = self.part(name, k)
                if at is None:
                    continue
                p = params[name]
                p.copy_(self.stacked[i][at])
                p.grad = None
                r.optimizer.state[p] = {
                    "step": torch.tensor(float(steps[k]), dtype=torch.float32, device=p.device),
                    "exp_avg": self.opt.exp_avg[i][at].clone(),
                    "exp_avg_sq": self.opt.exp_avg_sq[i][at].clone(),
                }
            own = dict(r.model.named_buffers())
            for name, b in self.buffers:
                own[name].copy_(b[k])

    # ---------------------------------------------------------------- the step

    def _body(self) -> None:
        """One training step on the batch at ``self.idx``: all device work."""
        for p in self.stacked:
            p.grad = None
        idx = self.idx
        src = self.src_all[idx]  # (K*B, S)
        src_len = self.len_all[idx]  # (K*B,)
        tgt_out = self.tgt_all[idx]  # (K*B, T)
        sos = torch.full_like(tgt_out[:, :1], self.sos)
        tgt_in = torch.cat([sos, tgt_out[:, :-1]], dim=1)  # (K*B, T)
        if self.compiled:
            model = self.model
            keep = (dropout_keep(model.noise.uniform(src.new_empty(model.dropout_shape(src), dtype=torch.float32)),
                                 model.dropout_p)
                    if model.dropout_p > 0 else None)  # the numbers the uncompiled forward draws, as a multiplier
            with deterministic_compile(self.device), matmul_precision(self.precision, self.device):
                nll = compiled_step_nll()(model, src, src_len, tgt_in, tgt_out, keep, self.pad, self.K)
        else:
            with matmul_precision(self.precision, self.device):
                logits = self.model(src, src_len, tgt_in).logits  # (K*B, T, V)
            nll = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=self.pad,
                reduction="none",
            ).view(self.K, -1)  # (K, B*T)
        n_tok = (tgt_out != self.pad).view(self.K, -1).sum(1)  # (K,)
        loss = nll.sum(1) / n_tok  # (K,) token-level mean per replica
        with deterministic_compile(self.device) if self.compiled else contextlib.nullcontext():
            loss.sum().backward()  # the compiled backward, lowered at its first call
            self.opt.step(compiled_adamw_update() if self.compiled else None)
        with torch.no_grad():
            self.step_no += 1
            # summed in float64: exact for these float32 terms, so in any order. (A float32 sum
            # over dim 1 of a (K, N) tensor takes another order from K = 8 on, when the CPU
            # kernel vectorises across rows: replica 0's loss then differed from its solo run.)
            self.loss_sum += per_replica_sum(nll.detach())
            bad = ~torch.isfinite(loss.detach()) & (self.first_bad == 0) & self.live_mask
            self.first_bad.copy_(torch.where(bad, self.step_no, self.first_bad))

    def _graph(self) -> Any:
        """The CUDA graph of the step, recorded on first use; None (and capture
        off from then on, with a warning) where this torch cannot record the replicas' own
        dropout generators in a graph.

        A warm-up step runs first on a side stream (as capture requires); it trains, so every
        piece of state it touches is saved before and put back after."""
        if self.graph is not None:
            return self.graph
        graph = torch.cuda.CUDAGraph()
        register = getattr(graph, "register_generator_state", None)
        if register is None and self.model.dropout_p > 0:
            warnings.warn(f"torch {torch.__version__} cannot record per-replica dropout generators in a "
                          "CUDA graph (no CUDAGraph.register_generator_state): the graphed step runs "
                          "uncaptured", RuntimeWarning, stacklevel=2)
            self.capture = False
            return None
        saved = [t.detach().clone() for t in self._state_tensors()]
        rng = [g.get_state() for g in self.gens]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._body()
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():
            for t, s in zip(self._state_tensors(), saved):
                t.copy_(s)
        for g, s in zip(self.gens, rng):
            g.set_state(s)
        if register is not None:
            for g in self.gens:
                register(g)
        for p in self.stacked:
            p.grad = None
        with torch.cuda.graph(graph):
            self._body()
        self.graph = graph
        return graph

    def _state_tensors(self) -> list[torch.Tensor]:
        return [*self.stacked, *self.opt.exp_avg, *self.opt.exp_avg_sq, self.opt.step_count,
                self.loss_sum, self.first_bad, self.step_no, *(b for _, b in self.buffers)]

    def epoch_rows(self, epoch: int) -> np.ndarray:
        """Index rows (steps, K*B) of ``epoch``: replica k's batch i is its solo run's batch i,
        filled up to the batch size with the all-padding row."""
        orders = [epoch_order(r.cfg.seed, epoch, self.n).numpy() for r in self.runs]
        steps = -(-self.n // self.B)
        rows = np.full((steps, self.K, self.B), self.n, dtype=np.int64)
        for k, order in enumerate(orders):
            flat = rows[:, k, :].reshape(-1)
            flat[: self.n] = order
            rows[:, k, :] = flat.reshape(steps, self.B)
        return rows.reshape(steps, self.K * self.B)

    def train_epoch(self, epoch: int) -> list[float]:
        """One training pass of every replica; per replica its token-weighted mean loss.

        Raises :class:`~locattn.training.epoch.ReplicaFailed` after the pass when a replica's
        loss became non-finite at some step (its batch number in the message); the other
        replicas' states are then at the end of the epoch, not stored."""
        self.load(epoch)
        rows = torch.from_numpy(self.epoch_rows(epoch)).to(self.device)  # one upload per epoch
        for row in rows:
            self.idx.copy_(row, non_blocking=True)
            graph = self._graph() if self.capture else None
            if graph is not None:
                graph.replay()
            else:
                self._body()
        first_bad = self.first_bad.cpu().tolist()  # the epoch's one read-back
        for i, k in enumerate(self.live):
            if first_bad[k]:
                step, r = first_bad[k], self.runs[k]
                raise ReplicaFailed(i, NonFiniteLossError(
                    f"non-finite training loss at epoch {epoch}, batch {step} "
                    f"(task={r.cfg.task.name}, variant={r.cfg.variant}, lr={r.cfg.optim.lr}, "
                    f"seed={r.cfg.seed}; graphed packed run)"
                ))
        self.store()
        sums = self.loss_sum.cpu().tolist()
        tokens = int(self.runs[0].train_split.tgt_len_np.sum())
        return [sums[k] / tokens for k in self.live]


def pads_shrinking_packs(runs: list[Any]) -> bool:
    """Whether a graphed pack of ``runs`` keeps its size when replicas stop (their slots
    frozen) rather than being rebuilt smaller: when its step is compiled on a GPU, where a
    recompile costs minutes and a frozen slot almost nothing."""
    return runs[0].cfg.train_path == "compiled" and runs[0].device.type == "cuda"


def graphed_train_epoch(runs: list[Any], epoch: int, cache: dict[Any, GraphedStep] | None = None,
                        *, pad: bool | None = None) -> list[float]:
    """:meth:`GraphedStep.train_epoch` for ``runs``, reusing the step in ``cache`` while the
    same replicas train together (the graph is recorded once, not once per epoch), or while
    ``runs`` are some of them and ``pad`` (default :func:`pads_shrinking_packs`): the stopped
    replicas' slots are frozen."""
    if cache is None:
        return GraphedStep(runs).train_epoch(epoch)
    pad = pads_shrinking_packs(runs) if pad is None else pad
    step = next(iter(cache.values()), None)
    if step is None or not step.fits(runs, pad):
        cache.clear()  # a different group: the old graph's memory goes back
        step = cache[tuple(id(r) for r in runs)] = GraphedStep(runs)
    step.keep(runs)
    return step.train_epoch(epoch)


def graphed_dev_scores(runs: list[Any]) -> list[DevScores]:
    """Teacher-forced dev scores of every run of a graphed pack (a Mix run's with its mean mix
    gate): what :func:`~locattn.training.evaluate.teacher_forced` computes, each replica scored
    as a pack of one, as its solo run scores itself. (One packed forward over all replicas at the
    dev batch size, 256 rows each, rounded differently from a pack of one: 2e-9 of a dev loss at
    K = 4. Packed dev scoring would save K - 1 passes on a GPU, at the price of packed != solo.)"""
    return [_pack_dev_scores([run])[0] for run in runs]


@torch.no_grad()
def _pack_dev_scores(runs: list[Any]) -> list[DevScores]:
    """Teacher-forced dev scores of ``runs`` in one packed forward per dev batch."""
    pack = ParamPack(runs)
    pack.release()
    model = pack.model.eval()
    model._check = _no_check
    split, K = runs[0].dev_split, len(runs)
    mix = runs[0].cfg.model.attention.mode == "mix"  # the gate comes from the same forward
    nll = torch.zeros(K, dtype=torch.float64, device=split.device)
    gate = torch.zeros(K, dtype=torch.float64, device=split.device)
    correct = torch.zeros(K, dtype=torch.long, device=split.device)
    n_tokens = 0
    for index in split.sorted_batches(runs[0].cfg.optim.dev_batch_size):
        b = split.batch(index)
        tgt_out = b.tgt_out.repeat(K, 1)  # (K*B, T)
        out = model(b.src.repeat(K, 1), b.src_len.repeat(K), b.tgt_in.repeat(K, 1), trace=mix)
        logits = out.logits  # (K*B, T, V)
        nll += per_replica_sum(F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=split.pad_id,
            reduction="none",
        ).view(K, -1))
        hit = (logits.argmax(-1) == tgt_out) | (tgt_out == split.pad_id)  # (K*B, T)
        correct += hit.all(dim=1).view(K, -1).sum(1)
        if mix:  # the scored steps' gate per replica (0 at padding, exactly)
            gate += per_replica_sum((out.trace.mix_gate * (tgt_out != split.pad_id)).view(K, -1))
        n_tokens += b.n_tokens
    return [DevScores(float(a) / n_tokens, int(c) / len(split), float(g) / n_tokens if mix else None)
            for a, c, g in zip(nll.tolist(), correct.tolist(), gate.tolist())]


def solo_graphed_epoch(run: Any) -> float:
    """A solo run's graphed training pass: a pack of one (its step kept on the run, so its
    graph is recorded once)."""
    cache = run.__dict__.setdefault("graphed_cache", {})
    try:
        return graphed_train_epoch([run], run.epoch, cache)[0]
    except ReplicaFailed as failed:
        raise failed.error from None


def measure_bytes_per_replica(run: Any, *, probe: int = 2) -> tuple[int, int]:
    """(bytes per replica, fixed bytes) of the graphed step for ``run``'s cell on its CUDA device:
    the peak memory of one uncaptured step (the split's longest shape) with 1 and with
    ``1 + probe`` copies of ``run`` (then thrown away; ``run`` is not trained). The probe's
    replicas are one run, so its growth per replica holds the stacked weights, their gradients
    and moments and the step's activations, not what each further run holds of its own
    (:func:`locattn.training.memory.unprobed_bytes` adds that)."""
    if run.device.type != "cuda":
        raise ValueError(f"measuring device memory needs a CUDA run, got {run.device}")
    peaks = []
    for k in (1, 1 + probe):
        torch.cuda.synchronize(run.device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(run.device)
        base = torch.cuda.memory_allocated(run.device)
        step = GraphedStep([run] * k, capture=False)
        step.idx.zero_()
        step._body()
        torch.cuda.synchronize(run.device)
        peaks.append(torch.cuda.max_memory_allocated(run.device) - base)
        del step
    per = max(1, math.ceil((peaks[1] - peaks[0]) / probe))
    return per, max(0, peaks[0] - per)


__all__ = ["GraphedStep", "StackedAdamW", "compiled_adamw_update", "compiled_step_nll", "deterministic_compile",
           "deterministic_lowering", "graphed_train_epoch",
           "pads_shrinking_packs",
           "per_replica_sum", "stacked_adamw_update", "step_nll",
           "graphed_dev_scores", "matmul_precision", "measure_bytes_per_replica", "pick_pack_size", "solo_graphed_epoch"]
