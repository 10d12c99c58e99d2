"""Gaussian location attention and its descendants (Dubois §5.1-5.2; Ray Chowdhury §4.3, §5, App. B).

Per decoding step t with query h_{t-1} (shapes (B,) unless noted):

* l_t = Linear(h_{t-1}) (``controller="linear"``, Ray Chowdhury), or Dubois's weighter
  l_t = omega_t = GRU(relu(W_resize h_{t-1}), omega_{t-1}) (``controller="gru"``).
* [s_t, rho_t] = W l_t (no bias); sigma_t = (relu(s_t) + min_sigma) / L       (RC eq. 10, Dubois)
* step_t = act(rho_t0), act one of sigmoid(beta·x) (OneStep), softstair (LocAttn, -Step 3),
  x (-Sigmoid), s·relu(x) + (1-s)·sigmoid(beta·x) with s = sigmoid(p) (MonoAttn, RC eq. 19 with
  the gate on the ReLU term as in the reference code), relu (RMonoAttn).
* mu_t from the reference mode, with stepsize = 1 / max(1, L-1) and pa_{t-1} the previous
  attended position (0 at t = 0):
    previous:  mu = step·stepsize + pa                                          (OneStep, Mono)
    gated:     mu = clamp(step·stepsize + sigmoid(rho1)·pa + sigmoid(rho2))     (LocAttn, Dubois)
    initial:   mu = clamp(step·stepsize + pa + [t = 0]·sigmoid(rho1))           (LocAttn S)
  with clamp(x) = max(0.01x, min(x, 1 + 0.01x)) (RC eq. 8).
* lambda_tj = exp(-(p_j - mu)^2 / 2 sigma^2) over valid j, divided by its sum (RC eqs. 6, 9).
  It is computed as a softmax of the masked log-density, which is the same number but stays
  finite when every density value underflows (tiny sigma far from mu at long lengths).
* ``mode="mix"``: alpha = m·lambda + (1-m)·softmax(content), m = sigmoid(beta_mix·Linear(h_{t-1}))
  (RC eqs. 15-16 with m on the location term; Dubois §5.2). Otherwise alpha = lambda.
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
from locattn.models.config import ContentScore, Controller, Mode, PaFrom, Reference, StepActivation
from locattn.models.functional import gru_update, leaky_clamp, linear, per_row, softstair

N_RHO = {"previous": 1, "initial": 2, "gated": 3}


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
        mode: Mode,
        mix_temperature: float,
        pa_from: PaFrom,
        content_score: ContentScore,
        controller: Controller,
        controller_size: int,
        sigma_min: float,
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
        # [sigma logit, rho_0..]: bias-free dot products w·l_t (RC eqs. 10, 13; REFERENCE §2).
        # Reference init: Xavier-uniform on a (heads=1, d, 1) tensor per output, i.e.
        # U(-b, b) with b = sqrt(6 / (d + 1)).
        self.heads = nn.Linear(l_size, 1 + N_RHO[reference], bias=False)
        bound = math.sqrt(6.0 / (l_size + 1))
        nn.init.uniform_(self.heads.weight, -bound, bound)
        if self.controller is not None:
            nn.init.xavier_uniform_(self.controller.weight)  # reference: Xavier weight, default bias
        self.mono_gate = (
            nn.Parameter(torch.tensor(float(mono_gate_init))) if step == "mono" else None
        )
        self._step = {
            "sigmoid": self._step_sigmoid,
            "softstair": softstair,
            "raw": self._step_raw,
            "mono": self._step_mono,
            "relu": torch.relu,
        }[step]
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

    # -- step activations
    def _step_sigmoid(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.step_temperature * x)

    @staticmethod
    def _step_raw(x: Tensor) -> Tensor:
        return x

    def _step_mono(self, x: Tensor) -> Tensor:
        s = torch.sigmoid(per_row(self.mono_gate, x.shape[0], 0))  # () or (B,) when packed
        return s * torch.relu(x) + (1.0 - s) * torch.sigmoid(self.step_temperature * x)

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
        heads = linear(l_t, self.heads.weight, self.heads.bias)  # (B, 1 + n_rho)
        sigma = (torch.relu(heads[:, 0]) + self.sigma_min) / memory.lengths  # (B,)
        rho = heads[:, 1:]  # (B, n_rho)
        step = self._step(rho[:, 0])  # (B,)
        mu = self._mu(step, rho, state.pa, memory.stepsize, t)  # (B,)
        log_density = -((memory.positions - mu.unsqueeze(1)) ** 2) / (
            2.0 * sigma.unsqueeze(1) ** 2
        )  # (B, L)
        lam = torch.softmax(log_density + memory.score_bias, dim=-1)  # (B, L) == pdf / sum(pdf)
        mix_gate = None
        weights = lam
        if self.content is not None:
            gate = linear(query, self.mix_gate.weight, self.mix_gate.bias)  # (B, 1)
            mix_gate = torch.sigmoid(self.mix_temperature * gate).squeeze(-1)  # (B,)
            scores = self.content(query, cache) + memory.score_bias  # (B, L)
            content = torch.softmax(scores, dim=-1)  # (B, L)
            m = mix_gate.unsqueeze(1)
            weights = m * lam + (1.0 - m) * content
        pa_source = lam if self.pa_from_location else weights
        pa = (pa_source * memory.positions).sum(-1)  # (B,)
        out = AttnStep(
            weights=weights, mu=mu, sigma=sigma, step=step, mix_gate=mix_gate,
            location_weights=lam,
        )
        return out, LocationState(pa=pa, weighter=weighter)
