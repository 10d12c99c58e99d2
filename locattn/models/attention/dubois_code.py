"""The Location attender as Dubois's code computes it (``attention.family="dubois_code"``).

Dubois et al. (ACL 2020) describe their attender (sec. 5); the code their experiment driver imports
(specialized-attention-mini, branch ``nips``: ``seq2seq/attention/attender.py``, ``location.py``,
``seq2seq/util/torchextend.py``, ``helpers.py``, with the arguments of ``seq2seq/main.py``)
computes something else in several places. This module follows the code, per decoding step t
with query h (the decoder output, (B, H)) and n the source length (every position j at
p_j = j / (n - 1)):

* weighter: o_t = GRU(relu(W_r h), o_{t-1}), o_{-1} a learned vector (U(-0.05, 0.05)); resize
  and GRU initialised as ``controller_init="dubois"``.
* building blocks: [w, r, b] = 0.5·Linear(o_t) + (1, 0, 0.1);
  perc = snap(sigmoid(r + log(7/3))) (0.7 at r = 0; snapped to 0 or 1 within 0.01, the gradient
  passing straight through); bias = plateau_{[0, 1]}(b); once the run has trained
  ``prepare`` batches, w = plateau_{[-1, 1]}(w).
  mu = bias at t = 0, else mu = perc·(Σ_j alpha_{t-1, j} p_j) + (1 - perc)·bias + w / (n - 1),
  alpha_{t-1} the previous *mixed* attention.
* mu is rounded to a source position: in evaluation round(mu·(n-1)) / (n-1); in training, from
  ``prepare`` batches on, a relaxed-Bernoulli ("soft Concrete") draw between floor and ceiling
  with probability 0.001 + 0.998·frac(mu·(n-1)), temperature annealed 1 → 0.5 over the next
  ``2·prepare`` batches (the forward value moves, the gradient is that of mu plus the sample's).
  Then a leaky clamp: [-0.01, 1.01] with slope 0.1 in training, [0, 1] with slope 0.01 in
  evaluation.
* sigma: for the first ``prepare`` training batches a constant annealed linearly from 5 to 0.82
  (no gradient); after that max(Linear(o_t), 0.41 / 1.5). The Gaussian uses sigma / n.
* lambda = g / max(Σ_j g_j, 1e-12), g_j = exp(-(p_j - mu)² / (2 (sigma/n)²)) over valid j.
* mixing by the location confidence: m = 0.999·exp(-sigma² + (0.41/1.5)²) (sigma before / n); for
  the first ``prepare`` training batches m = 0.7. alpha = m·lambda + (1 - m)·softmax(k_j·h / sqrt(H))
  (the code's ``scaledot``: no parameters).

``prepare`` is 5 % of the run's training batches, ceil(0.05 · ceil(epochs · N / batch)), as the
code's ``rate_prepare_pos``, ``rate_start_round`` and ``rate_attmix_wait`` (all 0.05, temperature
over ``anneal_temp_round`` = 0.1). The attender counts the training batches it has seen in a
buffer (``calls``), so a resumed run continues the schedule.

Not carried over: the L1 penalty the code adds to the loss when mu
leaves [-0.01, 1.01] (capped at 1 % of the batch loss); the content attention here masks padded
source positions (the code's softmax also covers padding in mixed-length batches, which its
length-bucketed batches make rare); positions use max(1, n - 1) where the code divides by n - 1.
``results/analysis/dubois_code_parity.py`` runs it beside the code's attender (3e-7 apart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from locattn.models.attention.base import Attender, AttnStep, SourceMemory
from locattn.models.attention.location import L1_EPS, dubois_init_weighter
from locattn.models.functional import gru_update, linear

PREPARE_RATE = 0.05
"""Share of the training batches in "preparation" (``rate_prepare_pos``, ``rate_start_round``,
``rate_attmix_wait`` of the code's ``train``/``get_seq2seq_model``)."""
ROUND_ANNEAL_RATE = 0.1
"""Share of the training batches over which the rounding temperature anneals (``anneal_temp_round``)."""
MIN_SIGMA = 0.41
HARD_MIN_SIGMA = MIN_SIGMA / 1.5
INITIAL_SIGMA = 5.0
FINAL_ANNEALED_SIGMA = 2 * MIN_SIGMA
PREPARE_MIX = 0.7
"""The location share while the mixer waits (``dflt_perc_loc``)."""
BLOCK_SCALE = (0.5, 0.5, 0.5)
BLOCK_OFFSET = (1.0, 0.0, 0.1)
"""Building-block weights = scale·Linear(o) + offset, for (single step, previous mean, bias)."""
PERC_BIAS = math.log(0.7 / 0.3)
"""``ProbabilityConverter(initial_probability=0.7)``: sigmoid(0 + bias) = 0.7."""
SNAP = 1e-2
"""``plateau_eps`` of the converter: probabilities within it of 0 or 1 are set to 0 or 1."""
PLATEAU_EPS = 1e-4
PLATEAU_LENGTH = 0.2
ROUND_MIN_P = 1e-3
HIDDEN0_BOUND = 0.05


def snap(x: Tensor, values: tuple[float, ...], eps: float) -> Tensor:
    """x with the entries within ``eps`` of one of ``values`` replaced by it; gradient identity."""
    out = x.detach().clone()
    for v in values:
        out = torch.where((out - v).abs() < eps, torch.full_like(out, v), out)
    return x + (out - x.detach())


def plateau(x: Tensor, low: float, high: float) -> Tensor:
    """The code's ``PlateauAct([low, high])``: low + (high - low)·sigmoid(t·(x - mid)), snapped to
    ``low``/``high`` within 1e-4, and outside (low - 0.2, high + 0.2) a leaky clamp to [low, high]
    (slope 0.01). t makes the sigmoid reach 1e-4 of each plateau 0.1 from the ends."""
    height = high - low
    t = -math.log(PLATEAU_EPS / (height - PLATEAU_EPS)) / (height / 2 - PLATEAU_LENGTH / 2)
    out = snap(low + height * torch.sigmoid(t * (x - (low + high) / 2)), (low, high), PLATEAU_EPS)
    clamped = torch.maximum(low + 0.01 * (x - low), torch.minimum(x, high + 0.01 * (x - high)))
    inside = (x > low - PLATEAU_LENGTH) & (x < high + PLATEAU_LENGTH)
    return torch.where(inside, out, clamped)


def soft_concrete_round(x: Tensor, temperature: float) -> Tensor:
    """floor(x) + a relaxed-Bernoulli draw with probability 0.001 + 0.998·frac(x); the value's
    gradient is x's plus the draw's (the code's ``ConcreteRounder(is_hard=False)``)."""
    floor = x.detach().floor()
    p = ROUND_MIN_P + (1 - 2 * ROUND_MIN_P) * (x - floor)
    sample = torch.distributions.RelaxedBernoulli(torch.tensor(temperature, device=x.device), probs=p).rsample()
    return floor + sample - x.detach() + x


def schedule_batches(total_batches: int) -> tuple[int, int]:
    """(prepare, anneal) in training batches for a run of ``total_batches``."""
    return math.ceil(PREPARE_RATE * total_batches), math.ceil(ROUND_ANNEAL_RATE * total_batches)


@dataclass(frozen=True)
class DuboisCodeState:
    """Recurrent state between steps."""

    weighter: Tensor
    """(B, C) weighter GRU state."""
    previous: Tensor | None
    """(B, L) the previous step's mixed attention; None before the first step."""


class DuboisCodeAttender(Attender):
    """Dubois's code's location attender and its confidence mixing (module docstring)."""

    def __init__(
        self, *, query_size: int, key_size: int, controller_size: int, total_batches: int,
    ) -> None:
        super().__init__()
        if key_size != query_size:
            raise ValueError(f"the code's parameter-free scaled dot needs key_size == query_size, got "
                             f"{key_size} and {query_size}")
        self.content_scale = 1.0 / math.sqrt(query_size)
        self.resize = nn.Linear(query_size, controller_size)
        self.weighter = nn.GRUCell(controller_size, controller_size)
        dubois_init_weighter(self.resize, self.weighter)
        self.hidden0 = nn.Parameter(torch.empty(controller_size).uniform_(-HIDDEN0_BOUND, HIDDEN0_BOUND))
        self.blocks = nn.Linear(controller_size, 3)
        self.sigma = nn.Linear(controller_size, 1)
        nn.init.xavier_uniform_(self.blocks.weight)
        nn.init.xavier_uniform_(self.sigma.weight)
        self.register_buffer("block_scale", torch.tensor(BLOCK_SCALE))
        self.register_buffer("block_offset", torch.tensor(BLOCK_OFFSET))
        # the schedule: training batches seen (this one included) and the run's total
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("total_batches", torch.tensor(max(1, int(total_batches)), dtype=torch.long))

    # -- the schedule (python numbers: read once per batch in initial_state)
    def _phase(self) -> dict[str, Any]:
        calls = int(self.calls)
        prepare, anneal = schedule_batches(int(self.total_batches))
        rounding = self.training and calls >= prepare
        return {
            "t0": calls,
            "annealed_sigma": (INITIAL_SIGMA + (FINAL_ANNEALED_SIGMA - INITIAL_SIGMA) * calls / prepare
                               if calls <= prepare else None),
            "plateau_step": calls >= prepare,
            "mix_fixed": self.training and calls < prepare,
            "round_temperature": (1.0 + (0.5 - 1.0) * min(calls - prepare + 1, anneal) / anneal
                                  if rounding else None),
        }

    def prepare(self, memory: SourceMemory) -> Tensor:
        return memory.keys * self.content_scale  # (B, L, H)

    def initial_state(self, memory: SourceMemory) -> DuboisCodeState:
        if self.training:
            self.calls += 1  # one training batch (the code's n_training_calls)
        self.phase = self._phase()
        B = memory.keys.shape[0]
        return DuboisCodeState(weighter=self.hidden0.expand(B, -1), previous=None)

    def forward(  # type: ignore[override]
        self, query: Tensor, memory: SourceMemory, cache: Any, state: DuboisCodeState, t: int
    ) -> tuple[AttnStep, DuboisCodeState]:
        phase = self.phase
        w = self.weighter
        x = F.relu(linear(query, self.resize.weight, self.resize.bias))  # (B, C)
        o = gru_update(linear(x, w.weight_ih, w.bias_ih), linear(state.weighter, w.weight_hh, w.bias_hh),
                       state.weighter)  # (B, C)
        raw = linear(o, self.blocks.weight, self.blocks.bias) * self.block_scale + self.block_offset  # (B, 3)
        bias = plateau(raw[:, 2], 0.0, 1.0)  # (B,)
        gaps = (memory.lengths - 1).clamp_min(1)  # (B,) n - 1
        if t == 0:
            step = torch.zeros_like(bias)
            perc = torch.zeros_like(bias)
            mu = bias
        else:
            step = plateau(raw[:, 0], -1.0, 1.0) if phase["plateau_step"] else raw[:, 0]
            perc = snap(torch.sigmoid(raw[:, 1] + PERC_BIAS), (0.0, 1.0), SNAP)
            previous_mean = (state.previous * memory.positions).sum(-1)  # (B,)
            mu = perc * previous_mean + (1 - perc) * bias + step / gaps
        if not self.training:
            mu = torch.round(mu * gaps) / gaps
            mu = torch.maximum(0.01 * mu, torch.minimum(mu, 1 + 0.01 * (mu - 1)))
        else:
            if phase["round_temperature"] is not None:
                mu = soft_concrete_round(mu * gaps, phase["round_temperature"]) / gaps
            mu = torch.maximum(-0.01 + 0.1 * (mu + 0.01), torch.minimum(mu, 1.01 + 0.1 * (mu - 1.01)))
        if phase["annealed_sigma"] is not None:
            sigma = torch.full_like(mu, phase["annealed_sigma"])
        else:
            sigma = linear(o, self.sigma.weight, self.sigma.bias).squeeze(-1).clamp_min(HARD_MIN_SIGMA)
        scaled = sigma / memory.lengths  # (B,)
        g = torch.exp(-((memory.positions - mu.unsqueeze(1)) ** 2) / (2.0 * scaled.unsqueeze(1) ** 2))
        g = g * memory.mask  # (B, L)
        lam = g / g.sum(-1, keepdim=True).clamp_min(L1_EPS)
        if phase["mix_fixed"]:
            m = torch.full_like(mu, PREPARE_MIX)
        else:
            m = (1 - 1e-3) * torch.exp(-sigma ** 2 + HARD_MIN_SIGMA ** 2)  # (B,)
        scores = torch.bmm(cache, query.unsqueeze(-1)).squeeze(-1)  # (B, L): k·h / sqrt(H)
        content = torch.softmax(scores + memory.score_bias, dim=-1)  # (B, L)
        weights = m.unsqueeze(1) * lam + (1 - m.unsqueeze(1)) * content
        out = AttnStep(
            weights=weights, mu=mu, sigma=scaled, step=step, mix_gate=m,
            location_weights=lam, content_weights=content,
        )
        return out, DuboisCodeState(weighter=o, previous=weights)
