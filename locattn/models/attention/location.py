"""Gaussian location attention and its descendants (Dubois et al. 2020, secs. 5.1-5.2;
Ray Chowdhury & Caragea 2023, secs. 4.3 and 5, App. B).

Per decoding step t with query h_{t-1} (shapes (B,) unless noted):

* l_t = Linear(h_{t-1}) (``controller="linear"``, Ray Chowdhury), or Dubois's weighter
  l_t = omega_t = GRU(relu(W_resize h_{t-1}), omega_{t-1}) (``controller="gru"``).
* [s_t, rho_t] = W l_t (no bias); sigma_t = (relu(s_t) + min_sigma) / L       (RC eq. 10, Dubois)
* step_t = act(rho_t0), act one of sigmoid(beta·x) (OneStep), softstair (LocAttn, -Step 3),
  x (-Sigmoid), s·relu(x) + (1-s)·sigmoid(beta·x) with s = sigmoid(p) (MonoAttn as the reference
  code computes it, ``mono_gate_on="relu"``) or s·sigmoid(beta·x) + (1-s)·relu(x) (RC eq. 19,
  ``mono_gate_on="sigmoid"``), relu (RMonoAttn).
* mu_t from the reference mode, with stepsize = 1 / max(1, L-1) and pa_{t-1} the previous
  attended position (0 at t = 0):
    previous:  mu = step·stepsize + pa                                          (OneStep, Mono)
    gated:     mu = clamp(step·stepsize + sigmoid(rho1)·pa + sigmoid(rho2))     (LocAttn, Dubois)
    initial:   mu = clamp(step·stepsize + pa + [t = 0]·sigmoid(rho1))           (LocAttn S)
  with clamp(x) = max(0.01x, min(x, 1 + 0.01x)) (RC eq. 8).
* lambda_tj = g_tj / (sum_j g_tj + L·1e-20) with g_tj = exp(-(p_j - mu)^2 / 2 sigma^2) over valid j
  (RC eqs. 6, 9; ``location_norm="sum"``, the reference code's normalisation, L the padded
  attention width). Where every g underflows, lambda is all zero: no context, pa_t = 0, no
  gradient. ``location_norm="softmax"`` takes a softmax of the masked log-density instead: the
  same number where the sum is normal, the nearest boundary where the reference attends nothing.
  ``location_norm="l1"`` (Dubois's code): lambda = g / max(sum_j g_tj, 1e-12).
* Head initialisation (``rho_init``): the bias-free sigma row is U(-b, b), b = sqrt(6/(d+1)); the k
  rho rows share b = sqrt(6/(k(d+1))) (``grouped``: the reference draws them as one Xavier-uniform
  (1, d, k) tensor) or each get sqrt(6/(d+1)) (``per_row``).
* ``mode="mix"``: alpha = m·lambda + (1-m)·softmax(content), m = sigmoid(beta_mix·Linear(h_{t-1}))
  (RC eqs. 15-16 with m on the location term; Dubois sec. 5.2). Otherwise alpha = lambda.
* pa_t = sum_j w_tj p_j with w = alpha, or w = lambda for ``pa_from="location"`` (PR).

Every switch is resolved in ``__init__`` (bound methods, module presence); ``forward`` has no
string branches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from locattn.models.attention.base import Attender, AttnStep, SourceMemory
from locattn.models.attention.content import ContentScorer
from locattn.models.config import (
    PACKABLE_STEPS,
    ContentScore,
    Controller,
    ControllerInit,
    LocationNorm,
    Mode,
    MonoGateOn,
    PaFrom,
    Reference,
    RhoInit,
    StepActivation,
)
from locattn.models.functional import gru_update, leaky_clamp, linear, per_row, softstair

N_RHO = {"previous": 1, "initial": 2, "gated": 3}
NORM_EPS = 1e-20
"""Added per position to the density sum by the reference's normalisation (``location_norm="sum"``)."""
L1_EPS = 1e-12
"""Lower bound of the density sum under ``location_norm="l1"`` (Dubois's ``F.normalize(p=1)``)."""


def dubois_init_weighter(resize: nn.Linear, weighter: nn.GRUCell) -> None:
    """Dubois's initialisation of the resize layer and weighter GRU (``controller_init="dubois"``).

    Resize weight Xavier-uniform (bias left at PyTorch's default); for each gate block (reset,
    update, new) of the GRU, input weights Xavier-uniform and recurrent weights orthogonal; the
    reset-gate biases of both the input and the recurrent part set to -1 (Dubois's code:
    ``seq2seq/util/initialization.py::linear_init``, ``init_basernn``, ``init_gru``).
    """
    with torch.no_grad():
        nn.init.xavier_uniform_(resize.weight)
        h = weighter.hidden_size
        for i in range(0, 3 * h, h):
            nn.init.xavier_uniform_(weighter.weight_ih[i:i + h])
            nn.init.orthogonal_(weighter.weight_hh[i:i + h])
        weighter.bias_ih[:h].fill_(-1.0)
        weighter.bias_hh[:h].fill_(-1.0)


def head_bounds(d: int, n_rho: int, rho_init: RhoInit) -> tuple[float, float]:
    """(sigma row bound, rho rows bound) of the U(-b, b) head initialisation for input size d."""
    sigma = math.sqrt(6.0 / (d + 1))
    return sigma, (math.sqrt(6.0 / (n_rho * (d + 1))) if rho_init == "grouped" else sigma)


@dataclass(frozen=True)
class LocationState:
    """Recurrent state of a location attender between steps."""

    pa: Tensor
    """(B,) previous attended position pa_{t-1} (from alpha, or lambda under PR)."""
    weighter: Tensor | None
    """(B, C) Dubois weighter GRU state, None for the linear controller."""


class LocationAttender(Attender):
    """Location (and Mix) attention; all ablations are constructor arguments."""

    def __init__(
        self,
        *,
        query_size: int,
        key_size: int,
        dim: int,
        reference: Reference,
        step: StepActivation,
        step_temperature: float,
        mono_gate_init: float,
        mono_gate_on: MonoGateOn,
        location_norm: LocationNorm,
        rho_init: RhoInit,
        mode: Mode,
        mix_temperature: float,
        pa_from: PaFrom,
        content_score: ContentScore,
        controller: Controller,
        controller_size: int,
        sigma_min: float,
        controller_init: ControllerInit = "torch",
    ) -> None:
        super().__init__()
        self.sigma_min = sigma_min
        self.step_temperature = step_temperature
        if controller == "linear":
            self.controller = nn.Linear(query_size, dim)
            self.resize = self.weighter = None
            l_size = dim
        else:
            self.controller = None
            self.resize = nn.Linear(query_size, controller_size)
            self.weighter = nn.GRUCell(controller_size, controller_size)
            l_size = controller_size
        # [sigma logit, rho_0..]: bias-free dot products w·l_t (Ray Chowdhury & Caragea,
        # eqs. 10, 13).
        n_rho = N_RHO[reference]
        self.heads = nn.Linear(l_size, 1 + n_rho, bias=False)
        sigma_bound, rho_bound = head_bounds(l_size, n_rho, rho_init)
        with torch.no_grad():
            self.heads.weight[:1].uniform_(-sigma_bound, sigma_bound)
            self.heads.weight[1:].uniform_(-rho_bound, rho_bound)
        if self.controller is not None:
            nn.init.xavier_uniform_(self.controller.weight)  # reference: Xavier weight, default bias
        elif controller_init == "dubois":
            dubois_init_weighter(self.resize, self.weighter)
        self.mono_gate = (
            nn.Parameter(torch.tensor(float(mono_gate_init))) if step == "mono" else None
        )
        self._step = {
            "sigmoid": self._step_sigmoid,
            "softstair": softstair,
            "raw": self._step_raw,
            "mono": self._step_mono_relu if mono_gate_on == "relu" else self._step_mono_sigmoid,
            "relu": torch.relu,
        }[step]
        self._normalise = {
            "sum": self._norm_sum, "softmax": self._norm_softmax, "l1": self._norm_l1,
        }[location_norm]
        self._mu = {
            "previous": self._mu_previous,
            "gated": self._mu_gated,
            "initial": self._mu_initial,
        }[reference]
        if mode == "mix":
            self.mix_gate = nn.Linear(query_size, 1)
            nn.init.xavier_uniform_(self.mix_gate.weight)
            self.mix_temperature = mix_temperature
            self.content = ContentScorer(
                content_score, key_size=key_size, query_size=query_size, dim=dim
            )
        else:
            self.mix_gate = None
            self.content = None
        self.pa_from_location = pa_from == "location"
        self._pa_source = self._pa_from_location if self.pa_from_location else self._pa_from_weights
        self._heads = self._heads_one
        # a pack of replicas with different switches (:meth:`pack_switches`); None: one value
        for name in ("replica_step", "replica_norm", "replica_step_temperature", "replica_reference",
                     "replica_pa_from"):
            self.register_buffer(name, None, persistent=False)
        self._step_kinds: tuple[str, ...] = ()
        self._norm_kinds: tuple[str, ...] = ()
        self._reference_kinds: tuple[str, ...] = ()

    def pack_switches(self, steps: list[str], norms: list[str], step_temperatures: list[float],
                      references: list[str] | None = None, pa_froms: list[str] | None = None,
                      mono_gate_ons: list[str] | None = None) -> None:
        """Give a packed attender (K replicas stacked, :class:`~locattn.training.epoch.ParamPack`)
        each replica's own step activation, ``location_norm``, ``step_temperature``, ``reference``
        and ``pa_from``. A switch whose K values differ becomes a (K,) buffer; ``forward`` then
        computes each activation, normalisation, mu or pa source present and keeps, row by row,
        the replica's own (``torch.where``: the row's value and gradient are those of its solo
        run to the bit).

        ``reference`` changes the step head's row count (1 + :data:`N_RHO`: 2 for ``previous``,
        3 ``initial``, 4 ``gated``): the packed ``heads.weight`` is (K, widest, d), a narrower
        replica's slice zero-padded below its own rows (``ParamPack`` hands it back only its own
        rows' gradient). Each replica's head output is computed by a product of its own width,
        ``heads.weight[:, :width]``, since a product with more output rows rounds differently
        (a (B, d) x (d, 4) product's first two columns are not those of (B, d) x (d, 2) on MKL).

        MonoAttn (``step: mono``, each replica its own ``mono_gate_on``) has a parameter the
        other steps lack, ``mono_gate``: the packed one is (K,), a zero in the slots of the other
        replicas, which neither read it nor receive its gradient (``ParamPack``).
        Raises ``ValueError`` naming the switch and value."""
        device = self.heads.weight.device  # the packed model's: the switches select among its rows
        ons = mono_gate_ons if mono_gate_ons is not None else ["relu"] * len(steps)
        kinds = [f"mono_{on}" if s == "mono" else s for s, on in zip(steps, ons)]
        if len(set(kinds)) > 1:
            bad = [s for s in steps if s not in PACKABLE_STEPS]
            if bad:
                raise ValueError(f"model.attention.step={bad[0]!r} cannot share a pack with other steps; "
                                 f"packable steps: {list(PACKABLE_STEPS)}")
            self._step_kinds = tuple(dict.fromkeys(kinds))
            self.replica_step = torch.tensor([self._step_kinds.index(k) for k in kinds], device=device)
            self._step = self._step_per_replica
        if len(set(norms)) > 1:
            self._norm_kinds = tuple(dict.fromkeys(norms))
            self.replica_norm = torch.tensor([self._norm_kinds.index(n) for n in norms], device=device)
            self._normalise = self._norm_per_replica
        if len(set(step_temperatures)) > 1:
            self.replica_step_temperature = torch.tensor(step_temperatures, dtype=torch.float32, device=device)
        if references is not None and len(set(references)) > 1:
            bad = [r for r in references if r not in N_RHO]
            if bad:
                raise ValueError(f"model.attention.reference={bad[0]!r}; valid: {list(N_RHO)}")
            self._reference_kinds = tuple(dict.fromkeys(references))
            self.replica_reference = torch.tensor([self._reference_kinds.index(r) for r in references], device=device)
            self._mu = self._mu_per_replica
            self._heads = self._heads_per_width
        if pa_froms is not None and len(set(pa_froms)) > 1:
            self.replica_pa_from = torch.tensor([p == "location" for p in pa_froms], device=device)
            self._pa_source = self._pa_source_per_replica

    def _step_per_replica(self, x: Tensor) -> Tensor:
        code = per_row(self.replica_step, x.shape[0], 0)  # (B,)
        out = x
        for i, kind in enumerate(self._step_kinds):
            value = {"sigmoid": self._step_sigmoid, "softstair": softstair, "raw": self._step_raw,
                     "relu": torch.relu, "mono_relu": self._step_mono_relu,
                     "mono_sigmoid": self._step_mono_sigmoid}[kind](x)
            out = value if i == 0 else torch.where(code == i, value, out)
        return out

    def _norm_per_replica(self, log_density: Tensor, memory: SourceMemory) -> Tensor:
        code = per_row(self.replica_norm, log_density.shape[0], 0).unsqueeze(1)  # (B, 1)
        out = log_density
        for i, kind in enumerate(self._norm_kinds):
            value = {"sum": self._norm_sum, "softmax": self._norm_softmax, "l1": self._norm_l1}[kind](
                log_density, memory)
            out = value if i == 0 else torch.where(code == i, value, out)
        return out

    def _heads_per_width(self, l_t: Tensor) -> Tensor:
        """(K*B, widest) head outputs of replicas of different widths (:meth:`pack_switches`):
        each replica's rows from the product of its own width, zero-padded to the widest."""
        weight = self.heads.weight  # (K, widest, d), packed
        widest = weight.shape[1]
        code = per_row(self.replica_reference, l_t.shape[0], 0).unsqueeze(1)  # (K*B, 1)
        out = linear(l_t, weight)  # (K*B, widest)
        for i, kind in enumerate(self._reference_kinds):
            width = 1 + N_RHO[kind]
            if width < widest:
                own = F.pad(linear(l_t, weight[:, :width]), (0, widest - width))  # (K*B, widest)
                out = torch.where(code == i, own, out)
        return out

    def _heads_one(self, l_t: Tensor) -> Tensor:
        return linear(l_t, self.heads.weight, self.heads.bias)  # (B, 1 + n_rho)

    def _mu_per_replica(self, step: Tensor, rho: Tensor, pa: Tensor, stepsize: Tensor, t: int) -> Tensor:
        code = per_row(self.replica_reference, step.shape[0], 0)  # (B,)
        out = step
        for i, kind in enumerate(self._reference_kinds):
            value = {"previous": self._mu_previous, "gated": self._mu_gated, "initial": self._mu_initial}[kind](
                step, rho, pa, stepsize, t)
            out = value if i == 0 else torch.where(code == i, value, out)
        return out

    # -- the weights pa_t is taken from: lambda (PR) or alpha
    @staticmethod
    def _pa_from_location(lam: Tensor, weights: Tensor) -> Tensor:
        return lam

    @staticmethod
    def _pa_from_weights(lam: Tensor, weights: Tensor) -> Tensor:
        return weights

    def _pa_source_per_replica(self, lam: Tensor, weights: Tensor) -> Tensor:
        location = per_row(self.replica_pa_from, lam.shape[0], 0).unsqueeze(1)  # (B, 1)
        return torch.where(location, lam, weights)

    # -- step activations
    def _beta(self, x: Tensor) -> Tensor | float:
        """The step temperature for the rows of ``x`` (B,): a float, or (B,) in a pack of
        replicas with different temperatures."""
        if self.replica_step_temperature is None:
            return self.step_temperature
        return per_row(self.replica_step_temperature, x.shape[0], 0)

    def _step_sigmoid(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self._beta(x) * x)

    @staticmethod
    def _step_raw(x: Tensor) -> Tensor:
        return x

    def _step_mono_relu(self, x: Tensor) -> Tensor:
        s = torch.sigmoid(per_row(self.mono_gate, x.shape[0], 0))  # () or (B,) when packed
        return s * torch.relu(x) + (1.0 - s) * torch.sigmoid(self._beta(x) * x)

    def _step_mono_sigmoid(self, x: Tensor) -> Tensor:
        s = torch.sigmoid(per_row(self.mono_gate, x.shape[0], 0))  # () or (B,) when packed
        return s * torch.sigmoid(self._beta(x) * x) + (1.0 - s) * torch.relu(x)

    # -- lambda from the log-density (B, L)
    @staticmethod
    def _norm_sum(log_density: Tensor, memory: SourceMemory) -> Tensor:
        g = torch.exp(log_density) * memory.mask  # (B, L); 0 on padding and where it underflows
        return g / (g.sum(-1, keepdim=True) + NORM_EPS * g.shape[-1])

    @staticmethod
    def _norm_l1(log_density: Tensor, memory: SourceMemory) -> Tensor:
        g = torch.exp(log_density) * memory.mask  # (B, L)
        return g / g.sum(-1, keepdim=True).clamp_min(L1_EPS)

    @staticmethod
    def _norm_softmax(log_density: Tensor, memory: SourceMemory) -> Tensor:
        return torch.softmax(log_density + memory.score_bias, dim=-1)

    # -- mu from (step, rho, pa)
    @staticmethod
    def _mu_previous(step: Tensor, rho: Tensor, pa: Tensor, stepsize: Tensor, t: int) -> Tensor:
        return step * stepsize + pa

    @staticmethod
    def _mu_gated(step: Tensor, rho: Tensor, pa: Tensor, stepsize: Tensor, t: int) -> Tensor:
        gates = torch.sigmoid(rho[:, 1:3])  # (B, 2)
        return leaky_clamp(step * stepsize + gates[:, 0] * pa + gates[:, 1])

    @staticmethod
    def _mu_initial(step: Tensor, rho: Tensor, pa: Tensor, stepsize: Tensor, t: int) -> Tensor:
        mu = step * stepsize + pa
        if t == 0:
            mu = mu + torch.sigmoid(rho[:, 1])
        return leaky_clamp(mu)

    # -- interface
    def prepare(self, memory: SourceMemory) -> Tensor | None:
        return None if self.content is None else self.content.prepare(memory.keys)

    def initial_state(self, memory: SourceMemory) -> LocationState:
        B = memory.keys.shape[0]
        pa = memory.keys.new_zeros(B)
        weighter = None
        if self.weighter is not None:
            weighter = memory.keys.new_zeros(B, self.weighter.hidden_size)
        return LocationState(pa=pa, weighter=weighter)

    def forward(  # type: ignore[override]
        self, query: Tensor, memory: SourceMemory, cache: Any, state: LocationState, t: int
    ) -> tuple[AttnStep, LocationState]:
        if self.controller is not None:
            l_t = linear(query, self.controller.weight, self.controller.bias)  # (B, d)
            weighter = None
        else:
            w = self.weighter
            x = F.relu(linear(query, self.resize.weight, self.resize.bias))  # (B, C)
            weighter = gru_update(
                linear(x, w.weight_ih, w.bias_ih), linear(state.weighter, w.weight_hh, w.bias_hh),
                state.weighter,
            )  # (B, C)
            l_t = weighter
        heads = self._heads(l_t)  # (B, 1 + n_rho); a pack of several widths: (B, widest)
        sigma = (torch.relu(heads[:, 0]) + self.sigma_min) / memory.lengths  # (B,)
        rho = heads[:, 1:]  # (B, n_rho)
        step = self._step(rho[:, 0])  # (B,)
        mu = self._mu(step, rho, state.pa, memory.stepsize, t)  # (B,)
        log_density = -((memory.positions - mu.unsqueeze(1)) ** 2) / (
            2.0 * sigma.unsqueeze(1) ** 2
        )  # (B, L)
        lam = self._normalise(log_density, memory)  # (B, L) == pdf / sum(pdf) where it is normal
        mix_gate = content = None
        weights = lam
        if self.content is not None:
            gate = linear(query, self.mix_gate.weight, self.mix_gate.bias)  # (B, 1)
            mix_gate = torch.sigmoid(self.mix_temperature * gate).squeeze(-1)  # (B,)
            scores = self.content(query, cache) + memory.score_bias  # (B, L)
            content = torch.softmax(scores, dim=-1)  # (B, L)
            m = mix_gate.unsqueeze(1)
            weights = m * lam + (1.0 - m) * content
        pa_source = self._pa_source(lam, weights)
        pa = (pa_source * memory.positions).sum(-1)  # (B,)
        out = AttnStep(
            weights=weights, mu=mu, sigma=sigma, step=step, mix_gate=mix_gate,
            location_weights=lam, content_weights=content, rho=rho,
        )
        return out, LocationState(pa=pa, weighter=weighter)


def building_block_weights(reference: Reference, step: Tensor, rho: Tensor) -> Tensor:
    """Weights of the building blocks (1/(L-1), pa_{t-1}, 1) in mu, per step (Dubois sec. 5.1).

    ``step`` (B, T) is the activated step, ``rho`` (B, T, n_rho) the raw logits of consecutive
    decoding steps from t = 0; returns (B, T, 3) with mu = clamp(w0·stepsize + w1·pa + w2) (no
    clamp for ``previous``): ``gated`` (w0 = step, sigmoid(rho1), sigmoid(rho2)); ``previous``
    (step, 1, 0); ``initial`` (step, 1, [t = 0]·sigmoid(rho1)).
    """
    ones = torch.ones_like(step)
    if reference == "gated":
        gates = torch.sigmoid(rho[..., 1:3])  # (B, T, 2)
        return torch.stack((step, gates[..., 0], gates[..., 1]), dim=-1)
    if reference == "previous":
        return torch.stack((step, ones, torch.zeros_like(step)), dim=-1)
    if reference == "initial":
        first = torch.zeros_like(step)
        first[:, 0] = torch.sigmoid(rho[:, 0, 1])
        return torch.stack((step, ones, first), dim=-1)
    raise ValueError(f"reference={reference!r}; valid: {list(N_RHO)}")
