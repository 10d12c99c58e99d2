"""Attender maths: hand-computed activations, naive references, neutral-switch equivalences."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from locattn.models import build_model
from locattn.models.attention import AttnStep, SourceMemory
from locattn.models.attention.location import LocationAttender
from locattn.models.config import derive
from locattn.models.encoder import DirectionMixer
from locattn.models.functional import leaky_clamp, rotary_tables, rotate, sinusoid, softstair
from locattn.variants import LOCATION_FAMILY, get_variant

PAD, SOS, EOS, V = 0, 1, 2, 11


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def make(cfg, seed=0):
    torch.manual_seed(seed)
    return build_model(cfg, V, pad_id=PAD, sos_id=SOS, eos_id=EOS).eval()


def batch(seed=0, lengths=(6, 2, 4), T=5):
    g = torch.Generator().manual_seed(seed)
    B, S = len(lengths), max(lengths)
    src = torch.randint(3, V, (B, S), generator=g)
    src_len = torch.tensor(lengths)
    src[torch.arange(S).unsqueeze(0) >= src_len.unsqueeze(1)] = PAD
    tgt_in = torch.cat((torch.full((B, 1), SOS), torch.randint(3, V, (B, T - 1), generator=g)), 1)
    return src, src_len, tgt_in


# ----------------------------------------------------------------- exact values


def test_softstair_exact_values():
    x = torch.tensor([0.5, 1.0, 2.75, -0.25, 3.5, 0.0], dtype=torch.float64)
    expected = torch.tensor([
        0.0 + sig(0.0),             # 0.5
        1.0 + sig(-10.0),           # 1.0  -> 1.0000454
        2.0 + sig(5.0),             # 2.75 -> 2.9933071
        -1.0 + sig(5.0),            # -0.25: floor -1, frac 0.75 -> -0.0066929
        3.0 + sig(0.0),             # 3.5
        0.0 + sig(-10.0),           # 0.0  -> 0.0000454
    ], dtype=torch.float64)
    assert torch.allclose(softstair(x), expected, atol=1e-12)
    assert abs(float(softstair(torch.tensor(2.75))) - 2.9933071490757) < 1e-6


def test_leaky_clamp_exact_values():
    x = torch.tensor([0.5, 0.0, 1.0, 2.0, -1.0, 1.5, -3.0], dtype=torch.float64)
    expected = torch.tensor([0.5, 0.0, 1.0, 1.02, -0.01, 1.015, -0.03], dtype=torch.float64)
    assert torch.allclose(leaky_clamp(x), expected, atol=1e-12)


def test_sinusoid_and_rotary_any_length():
    pos = torch.tensor([-3, 0, 5000])
    pe = sinusoid(pos, 8)
    assert pe.shape == (3, 8)
    assert torch.allclose(pe[1], torch.tensor([0.0, 1.0] * 4))
    assert abs(float(pe[0, 0]) - math.sin(-3.0)) < 1e-6 and abs(float(pe[0, 1]) - math.cos(-3.0)) < 1e-6
    # rotation preserves norms, and q_t.k_j depends only on j - t
    cos, sin = rotary_tables(torch.arange(1200), 8)
    q, k = torch.randn(8), torch.randn(8)
    a = rotate(q, cos[3], sin[3]) @ rotate(k, cos[10], sin[10])
    b = rotate(q, cos[1103], sin[1103]) @ rotate(k, cos[1110], sin[1110])
    assert abs(float(a - b)) < 1e-3
    assert torch.allclose(rotate(q, cos[999], sin[999]).norm(), q.norm(), atol=1e-5)


def test_mu_rules_hand_computed():
    step, pa, stepsize = torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([0.25])
    rho = torch.tensor([[0.0, 0.0, -1e4]])  # sigmoid gates: 0.5 and 0
    assert torch.allclose(LocationAttender._mu_previous(step, rho, pa, stepsize, 3), torch.tensor([0.75]))
    # gated: clamp(1*0.25 + 0.5*0.5 + 0) = 0.5
    assert torch.allclose(LocationAttender._mu_gated(step, rho, pa, stepsize, 3), torch.tensor([0.5]))
    # gated, overshoot: clamp(4*0.25 + 1*0.5 + 1) = clamp(2.5) = 1.025
    big = torch.tensor([[0.0, 1e4, 1e4]])
    assert torch.allclose(
        LocationAttender._mu_gated(torch.tensor([4.0]), big, pa, stepsize, 3), torch.tensor([1.025])
    )
    # initial: the sigmoid(rho1) term only at t = 0
    rho2 = torch.tensor([[0.0, 0.0]])
    assert torch.allclose(LocationAttender._mu_initial(step, rho2, pa * 0, stepsize, 0), torch.tensor([0.75]))
    assert torch.allclose(LocationAttender._mu_initial(step, rho2, pa, stepsize, 1), torch.tensor([0.75]))
    assert torch.allclose(LocationAttender._mu_initial(step, rho2, pa * 0, stepsize, 1), torch.tensor([0.25]))


def _location(step: str, **kw) -> LocationAttender:
    args = dict(query_size=4, key_size=4, dim=4, reference="previous", step=step, step_temperature=5.0,
                mono_gate_init=0.0, mono_gate_on="relu", location_norm="sum", rho_init="grouped",
                mode="location", mix_temperature=5.0, pa_from="attention",
                content_score="scaled_dot", controller="linear", controller_size=64, sigma_min=0.27)
    args.update(kw)
    return LocationAttender(**args)


@pytest.mark.parametrize(
    "step, x, expected",
    [
        ("sigmoid", 0.2, sig(1.0)),
        ("softstair", 1.25, 1.0 + sig(-5.0)),
        ("raw", -0.7, -0.7),
        ("relu", -0.7, 0.0),
        ("relu", 0.7, 0.7),
        ("mono", 1.0, 0.5 * 1.0 + 0.5 * sig(5.0)),
        ("mono", -1.0, 0.5 * 0.0 + 0.5 * sig(-5.0)),
    ],
)
def test_step_activations_hand_computed(step, x, expected):
    att = _location(step)
    assert abs(float(att._step(torch.tensor([x])).detach()) - expected) < 1e-6


def test_mono_gate_init_sets_the_relu_weight():
    att = _location("mono", mono_gate_init=20.0)
    # s = sigmoid(20) == 1.0 in float32: exactly the ReLU step (the reference code's start)
    assert float(att._step(torch.tensor([-0.3]))) == 0.0
    assert float(att._step(torch.tensor([0.3]))) == pytest.approx(0.3)


# ----------------------------------------------------------------- naive references


def test_location_lambda_equals_normalised_gaussian_density():
    model = make(get_variant("mix_locattn"))
    src, src_len, tgt_in = batch()
    with torch.no_grad():
        tr = model(src, src_len, tgt_in, trace=True).trace
    L = tr.weights.shape[-1]
    n = (src_len + 2).double()
    p = torch.arange(L).double().unsqueeze(0) / (n - 1).unsqueeze(1)  # (B, L)
    mask = torch.arange(L).unsqueeze(0) < (src_len + 2).unsqueeze(1)
    mu, sigma = tr.mu.double(), tr.sigma.double()  # (B, T)
    pdf = torch.exp(-((p.unsqueeze(1) - mu.unsqueeze(-1)) ** 2) / (2 * sigma.unsqueeze(-1) ** 2))
    pdf = pdf * mask.unsqueeze(1)
    lam = pdf / pdf.sum(-1, keepdim=True)
    assert torch.allclose(tr.location_weights.double(), lam, atol=1e-5)
    m = tr.mix_gate.unsqueeze(-1)
    content = (tr.weights - m * tr.location_weights) / (1 - m)
    assert torch.allclose(content.sum(-1), torch.ones_like(tr.mix_gate), atol=1e-4)
    # sigma = (relu(.) + 0.27) / L  >=  0.27 / L
    assert (tr.sigma >= 0.27 / (src_len + 2).unsqueeze(1) - 1e-7).all()


def test_location_pa_feeds_next_mu_and_pr_uses_lambda():
    for key, source in (("onestep", "weights"), ("mix_onestep", "weights"), ("mix_onestep_pr", "location_weights")):
        model = make(get_variant(key), seed=2)
        src, src_len, tgt_in = batch(seed=2)
        with torch.no_grad():
            tr = model(src, src_len, tgt_in, trace=True).trace
        L = tr.weights.shape[-1]
        n = (src_len + 2).float()
        p = (torch.arange(L).float().unsqueeze(0) / (n - 1).unsqueeze(1))
        p = p * (torch.arange(L).unsqueeze(0) < (src_len + 2).unsqueeze(1))
        pa = (getattr(tr, source) * p.unsqueeze(1)).sum(-1)  # (B, T)
        stepsize = (1 / (n - 1)).unsqueeze(1)
        assert torch.allclose(tr.mu[:, 0], tr.step[:, 0] * stepsize[:, 0], atol=1e-6)  # pa_{-1} = 0
        assert torch.allclose(tr.mu[:, 1:], pa[:, :-1] + tr.step[:, 1:] * stepsize, atol=1e-5), key


def test_relative_scores_equal_naive_formula():
    model = make(get_variant("relative"), seed=1)
    with torch.no_grad():
        model.attender.u.normal_()
        model.attender.v.normal_()
    src, src_len, tgt_in = batch()
    state = model.start(src, src_len)
    with torch.no_grad():
        for _ in range(3):  # advance to t = 3
            _, state, _ = model.step(state, tgt_in[:, 0])
        att = model.attender
        step, _ = att(state.hidden[-1], state.memory, state.cache, state.attn_state, state.t)
        q = att.query(state.hidden[-1])  # (B, d)
        k = att.key(state.memory.keys)  # (B, L, d)
        L, d = k.shape[1], k.shape[2]
        R = sinusoid(torch.arange(L) - state.t, d)  # (L, d)
        pos = (q + att.v) @ att.rel(R).t()  # (B, L)
        scores = (torch.einsum("bd,bld->bl", q + att.u, k) + pos) / math.sqrt(d)
        scores = scores.masked_fill(~state.memory.mask, float("-inf"))
    assert state.t == 3
    assert torch.allclose(step.weights, torch.softmax(scores, -1), atol=1e-6)


@pytest.mark.parametrize("key", ["content", "dubois_multiplicative", "dubois_additive", "birope", "dubois_transformer"])
def test_content_style_scores_equal_naive_formula(key):
    model = make(get_variant(key), seed=1)
    src, src_len, tgt_in = batch()
    state = model.start(src, src_len)
    with torch.no_grad():
        _, state, _ = model.step(state, tgt_in[:, 0])
        _, state, _ = model.step(state, tgt_in[:, 1])
        att = model.attender
        h, e, t = state.hidden[-1], state.memory.keys, state.t
        step, _ = att(h, state.memory, state.cache, state.attn_state, t)
        L = e.shape[1]
        if key == "content":
            s = att.scorer
            scores = torch.einsum("bd,bld->bl", s.query(h), s.key(e)) / math.sqrt(s.query.out_features)
        elif key == "dubois_multiplicative":
            scores = torch.einsum("bd,bld->bl", att.scorer.query(h), e)
        elif key == "dubois_additive":
            s = att.scorer
            scores = s.energy(torch.tanh(s.key(e) + s.query(h).unsqueeze(1))).squeeze(-1)
        elif key == "birope":
            d = att.dim
            cq, sq = rotary_tables(torch.tensor(float(t)), d)
            ck, sk = rotary_tables(torch.arange(L), d)
            scores = torch.einsum("bd,bld->bl", rotate(att.query(h), cq, sq), rotate(att.key(e), ck, sk))
            scores = scores / math.sqrt(d)
        else:  # absolute sinusoids
            d = att.dim
            k = att.key(e) + sinusoid(torch.arange(L), d)
            q = att.query(h) + sinusoid(torch.tensor(t), d)
            scores = torch.einsum("bd,bld->bl", q, k) / math.sqrt(d)
        scores = scores.masked_fill(~state.memory.mask, float("-inf"))
    assert torch.allclose(step.weights, torch.softmax(scores, -1), atol=1e-6)


@pytest.mark.parametrize("positions", ["rotary", "absolute", "relative"])
def test_position_terms_are_made_on_the_query_device(positions):
    """Bi-ROPE's and the absolute sinusoids' per-step term follow the inputs' device (a CPU
    table beside CUDA inputs broke Bi-ROPE on the H200); the meta device stands in for CUDA."""
    from types import SimpleNamespace

    from locattn.models.attention.positional import PositionalAttender

    att = PositionalAttender(positions, key_size=6, query_size=5, dim=4).to("meta")
    memory = SimpleNamespace(keys=torch.empty(2, 7, 6, device="meta"),
                             score_bias=torch.empty(2, 7, device="meta"))
    step, _ = att(torch.empty(2, 5, device="meta"), memory, att.prepare(memory), None, 3)
    assert step.weights.device.type == "meta" and step.weights.shape == (2, 7)


# ----------------------------------------------------------------- neutral switches


def _load_shared(child, parent):
    """Copy ``child``'s parameters into ``parent``; return the child-only parameter names."""
    child_sd, parent_sd = child.state_dict(), parent.state_dict()
    assert set(parent_sd) <= set(child_sd)
    parent.load_state_dict({k: child_sd[k] for k in parent_sd})
    return sorted(set(child_sd) - set(parent_sd))


@pytest.mark.parametrize("x", LOCATION_FAMILY)
@pytest.mark.parametrize("pr", ["", "_pr"])
def test_mix_with_gate_pinned_to_location_equals_parent(x, pr):
    mix = make(get_variant(f"mix_{x}{pr}"), seed=5)
    parent = make(get_variant(x), seed=6)
    extra = _load_shared(mix, parent)
    assert extra and all(n.startswith(("attender.mix_gate.", "attender.content.")) for n in extra)
    src, src_len, tgt_in = batch(seed=5)
    with torch.no_grad():
        unpinned = mix(src, src_len, tgt_in).logits
        mix.attender.mix_gate.bias.fill_(1e4)  # m = sigmoid(5e4) == 1: location only
        pinned = mix(src, src_len, tgt_in, trace=True)
        reference = parent(src, src_len, tgt_in).logits
    assert (pinned.trace.mix_gate == 1).all()
    assert torch.allclose(pinned.logits, reference, atol=1e-5)
    assert not torch.allclose(unpinned, reference, atol=1e-3)  # unpinned, it really mixes


@pytest.mark.parametrize("child, parent_delta", [
    ("birelative", {"attention.direction": "forward"}),
    ("birope", {"attention.direction": "forward"}),
    ("onestep", {"attention.direction": "forward"}),
])
def test_direction_gate_pinned_forward_equals_unmixed_parent(child, parent_delta):
    model = make(get_variant(child), seed=7)
    parent_cfg = derive(get_variant(child), parent_delta)
    if child == "birelative":
        assert parent_cfg == get_variant("relative")
    parent = make(parent_cfg, seed=8)
    extra = _load_shared(model, parent)
    assert extra == ["direction.gate.bias", "direction.gate.weight"]
    src, src_len, tgt_in = batch(seed=7)
    with torch.no_grad():
        unpinned = model(src, src_len, tgt_in).logits
        model.direction.gate.bias.fill_(1e4)
        pinned = model(src, src_len, tgt_in, trace=True)
        reference = parent(src, src_len, tgt_in).logits
    assert (pinned.trace.dir_gate == 1).all()
    assert torch.allclose(pinned.logits, reference, atol=1e-5)
    assert not torch.allclose(unpinned, reference, atol=1e-3)


def test_direction_mixer_reverses_only_the_valid_span():
    mixer = DirectionMixer(3, 5.0)
    e = torch.arange(2 * 5 * 3, dtype=torch.float32).view(2, 5, 3)
    lengths = torch.tensor([5, 3])
    mask = torch.arange(5).unsqueeze(0) < lengths.unsqueeze(1)
    with torch.no_grad():
        mixer.gate.weight.zero_()
        mixer.gate.bias.fill_(-1e4)  # g = 0: fully reversed
    out, g = mixer(e, torch.randn(2, 3), lengths, mask)
    assert torch.equal(g, torch.zeros(2))
    assert torch.equal(out[0], e[0].flip(0))
    assert torch.equal(out[1, :3], e[1, :3].flip(0))
    assert torch.equal(out[1, 3:], e[1, 3:])  # padding stays in place


# ----------------------------------------------------------------- monotonicity


@pytest.mark.parametrize("key", ["onestep", "mono", "rmono"])
def test_unmixed_onestep_family_never_steps_back(key):
    """mu_t = pa_{t-1} + step_t·stepsize with step_t >= 0 (and <= 1 for OneStep's sigmoid):
    the focus never moves backwards from the previously attended position, for random models and
    inputs (including weights scaled up to saturate)."""
    for seed in range(6):
        model = make(get_variant(key), seed=seed)
        with torch.no_grad():
            for p in model.attender.parameters():
                p.mul_(1 + 3 * (seed % 3))
        src, src_len, tgt_in = batch(seed=seed, lengths=(9, 5, 3, 7), T=12)
        with torch.no_grad():
            tr = model(src, src_len, tgt_in, trace=True).trace
        n = (src_len + 2).float()
        L = tr.weights.shape[-1]
        p = torch.arange(L).float().unsqueeze(0) / (n - 1).unsqueeze(1)
        p = p * (torch.arange(L).unsqueeze(0) < (src_len + 2).unsqueeze(1))
        pa = (tr.weights * p.unsqueeze(1)).sum(-1)  # (B, T)
        prev = torch.cat((torch.zeros(4, 1), pa[:, :-1]), dim=1)
        stepsize = (1 / (n - 1)).unsqueeze(1)
        assert (tr.mu >= prev - 1e-6).all()
        assert (tr.step >= 0).all()
        if key == "onestep":
            assert (tr.mu <= prev + stepsize + 1e-6).all()


def test_onestep_first_step_from_parameters():
    """t = 0 by hand from the weights: sigma = (relu(w_s·l) + 0.27) / L, step = sigmoid(5 rho),
    mu = step / (L - 1) (pa = 0), l = Linear(h_{-1}) with h_{-1} = e_cls."""
    model = make(get_variant("onestep"), seed=11)
    src, src_len, _ = batch(seed=11)
    state = model.start(src, src_len)
    with torch.no_grad():
        _, _, got = model.step(state, torch.full((3,), SOS))
        att = model.attender
        heads = att.heads(att.controller(state.hidden[-1]))  # (B, 2)
        L = (src_len + 2).float()
        sigma = (torch.relu(heads[:, 0]) + 0.27) / L
        step = torch.sigmoid(5 * heads[:, 1])
        mu = step / (L - 1)
    assert torch.allclose(got.sigma, sigma) and torch.allclose(got.step, step)
    assert torch.allclose(got.mu, mu)
