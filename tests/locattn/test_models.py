"""Seq2Seq and regressor behaviour, parametrised over every preset in the registry."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from locattn import registry
from locattn.models import apply_size, build_model, build_regressor
from locattn.models.encoder import GRUWeights, SourceEncoder
from locattn.variants import get_variant, list_variants

PAD, SOS, EOS, V = 0, 1, 2, 13
# The package's own presets: an installed plugin (.ci/run installs examples/locattn-localp) adds
# variants whose attenders keep their own rules (local-p weights do not sum to 1, as in Luong et al.).
SEQ2SEQ = [k for k in list_variants() if get_variant(k).kind == "seq2seq"
           and registry.entries("variant")[k].builtin]
REGRESSORS = [k for k in list_variants() if get_variant(k).kind == "regressor"]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def make(key: str, seed: int = 0, **size):
    torch.manual_seed(seed)
    cfg = get_variant(key)
    if size:
        from dataclasses import replace
        cfg = replace(cfg, **size)
    return build_model(cfg, V, pad_id=PAD, sos_id=SOS, eos_id=EOS)


def batch(seed: int = 0, lengths=(7, 3, 1, 5), T: int = 6):
    g = torch.Generator().manual_seed(seed)
    B, S = len(lengths), max(lengths)
    src = torch.randint(3, V, (B, S), generator=g)
    src_len = torch.tensor(lengths)
    src[torch.arange(S).unsqueeze(0) >= src_len.unsqueeze(1)] = PAD
    tgt = torch.randint(3, V, (B, T), generator=g)
    tgt_in = torch.cat((torch.full((B, 1), SOS), tgt[:, :-1]), dim=1)
    return src, src_len, tgt_in, tgt


def valid_mask(model, src_len, L):
    n = src_len + 2 * model.source_offset
    return torch.arange(L).unsqueeze(0) < n.unsqueeze(1)  # (B, L)


@pytest.mark.parametrize("key", SEQ2SEQ)
def test_shapes_normalisation_padding_and_trace(key):
    model = make(key).train()
    src, src_len, tgt_in, _ = batch()
    out = model(src, src_len, tgt_in, trace=True)
    B, T = tgt_in.shape
    L = src.shape[1] + 2 * model.source_offset
    assert out.logits.shape == (B, T, V)
    assert torch.isfinite(out.logits).all()
    w = out.trace.weights
    assert w.shape == (B, T, L)
    mask = valid_mask(model, src_len, L).unsqueeze(1).expand_as(w)
    assert torch.allclose(w.sum(-1), torch.ones(B, T), atol=1e-5)
    assert (w[~mask] == 0).all()
    assert (w >= 0).all()
    att = get_variant(key).attention
    is_loc = att.family in ("location", "dubois_code")
    for name in ("mu", "sigma", "step"):
        value = getattr(out.trace, name)
        assert (value is not None) == is_loc
        if is_loc:
            assert value.shape == (B, T) and torch.isfinite(value).all()
    assert (out.trace.mix_gate is not None) == (att.family == "dubois_code" or is_loc and att.mode == "mix")
    if out.trace.mix_gate is not None:
        assert ((out.trace.mix_gate > 0) & (out.trace.mix_gate < 1)).all()
        # a Mix attender's final attention is not its location attention
        assert not torch.allclose(w, out.trace.location_weights, atol=1e-4)
    assert (out.trace.dir_gate is not None) == (att.direction == "mixed")
    if out.trace.dir_gate is not None:
        assert out.trace.dir_gate.shape == (B,)


@pytest.mark.parametrize("key", SEQ2SEQ)
def test_every_parameter_gets_a_gradient(key):
    model = make(key).eval()  # eval: no dropout zeros; the check is about graph connectivity
    if get_variant(key).attention.family == "dubois_code":
        # In evaluation mu is rounded (no gradient) and sigma = max(Linear(o), 0.27) is flat where
        # it clamps; in training past the first 5 % of batches (a constant sigma) mu is rounded
        # softly, and a sigma bias of 1 keeps sigma above the clamp.
        model.train()
        model.attender.calls.fill_(10)
        with torch.no_grad():
            model.attender.sigma.bias.fill_(1.0)
    src, src_len, tgt_in, tgt = batch(lengths=(7, 4, 2, 6), T=6)
    logits = model(src, src_len, tgt_in).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    zero = [n for n, p in model.named_parameters() if p.grad is not None and not p.grad.abs().sum() > 0]
    assert not missing, f"no gradient: {missing}"
    # The reference's MonoAttn gate starts at p = 20: sigmoid(20) == 1.0 in float32, so its
    # gradient is exactly zero (that MonoAttn is RMonoAttn; REFERENCE §2). Only that gate may be.
    att = get_variant(key).attention
    frozen = ["attender.mono_gate"] if att.step == "mono" and att.mono_gate_init == 20.0 else []
    assert zero == frozen, f"zero gradient: {zero}"


@pytest.mark.parametrize("key", SEQ2SEQ)
def test_teacher_forcing_equals_stepwise_decoding(key):
    model = make(key).eval()
    src, src_len, tgt_in, _ = batch(seed=1)
    with torch.no_grad():
        full = model(src, src_len, tgt_in, trace=True)
        state = model.start(src, src_len)
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            step_logits, state, attn = model.step(state, tgt_in[:, t])
            logits.append(step_logits)
            weights.append(attn.weights)
    assert torch.allclose(full.logits, torch.stack(logits, 1), atol=1e-5)
    assert torch.allclose(full.trace.weights, torch.stack(weights, 1), atol=1e-6)


@pytest.mark.parametrize("key", ["content", "onestep", "mix_mono_pr", "birope", "dubois_mix"])
def test_greedy_stops_per_sequence_and_matches_teacher_forcing(key):
    model = make(key, seed=3).eval()
    # make <eos> likely so that sequences finish at different steps
    with torch.no_grad():
        model.out_bias[EOS] = 2.5
    src, src_len, _, _ = batch(seed=4, lengths=(7, 3, 1, 5, 6, 2))
    cap = torch.tensor([9, 9, 9, 2, 9, 9])
    g = model.greedy(src, src_len, cap, trace=True)
    B, T = g.tokens.shape
    assert T <= 9 and g.trace.weights.shape[:2] == (B, T)
    for b in range(B):
        n = int(g.lengths[b])
        row = g.tokens[b].tolist()
        assert 1 <= n <= int(cap[b])
        assert all(tok == PAD for tok in row[n:])
        eos_at = [i for i, tok in enumerate(row[:n]) if tok == EOS]
        assert eos_at in ([], [n - 1])
        if not eos_at:
            assert n == int(cap[b]) or n == T
    assert int(g.lengths[3]) <= 2
    # feeding the greedy tokens back teacher-forced reproduces them (argmax) where emitted
    tgt_in = torch.cat((torch.full((B, 1), SOS), g.tokens[:, :-1].clamp(min=0)), dim=1)
    with torch.no_grad():
        logits = model(src, src_len, tgt_in).logits
    emitted = torch.arange(T).unsqueeze(0) < g.lengths.unsqueeze(1)
    assert (logits.argmax(-1)[emitted] == g.tokens[emitted]).all()


def test_greedy_int_cap_and_all_finish_early():
    model = make("content").eval()
    with torch.no_grad():
        model.out_bias[EOS] = 1e4  # always <eos> first
    src, src_len, _, _ = batch()
    g = model.greedy(src, src_len, 50)
    assert g.tokens.shape == (4, 1)
    assert (g.tokens[:, 0] == EOS).all() and (g.lengths == 1).all()
    with pytest.raises(ValueError, match="max_len"):
        model.greedy(src, src_len, 0)


def test_source_offset():
    assert make("onestep").source_offset == 1
    assert make("dubois_location").source_offset == 0


@pytest.mark.parametrize("kind, layers", [("bigru", 1), ("bigru", 2), ("gru_residual", 1), ("gru_residual", 2)])
def test_encoder_recurrence_equals_packed_nn_gru(kind, layers):
    torch.manual_seed(0)
    enc = SourceEncoder(kind=kind, boundaries="start_end", embedding_size=12, hidden_size=10,
                        num_layers=layers)
    x, lengths = torch.randn(5, 7, 12), torch.tensor([7, 1, 4, 2, 7])
    got = enc(x, lengths)
    xb, L = enc._add_boundaries(x, lengths)
    packed = pack_padded_sequence(xb, L, batch_first=True, enforce_sorted=False)
    rnn = torch.nn.GRU(12, enc.rnn.hidden_size, num_layers=layers, batch_first=True,
                       bidirectional=kind == "bigru")
    rnn.load_state_dict(enc.rnn.state_dict())  # the same parameter names and shapes
    out, h_n = rnn(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=xb.shape[1])
    if enc.residual is not None:
        out = out + enc.residual(xb) * got.mask.unsqueeze(-1)
    D = 2 if kind == "bigru" else 1
    cls = h_n.view(layers, D, 5, -1).permute(0, 2, 1, 3).reshape(layers, 5, -1)
    assert torch.allclose(got.outputs, out, atol=1e-5)
    assert torch.allclose(got.cls, cls, atol=1e-5)
    # START at 0 and END right after each source
    assert torch.equal(xb[:, 0], enc.start.expand(5, -1))
    assert torch.equal(xb[torch.arange(5), lengths + 1], enc.end.expand(5, -1))


@pytest.mark.parametrize("layers, bidirectional", [(1, True), (2, True), (2, False)])
def test_gru_weights_initialise_as_nn_gru(layers, bidirectional):
    """Same names, order and draws as nn.GRU: a seed gives the same weights and the same RNG after."""
    torch.manual_seed(3)
    ref = torch.nn.GRU(12, 10, num_layers=layers, bidirectional=bidirectional)
    after_ref = torch.rand(3)
    torch.manual_seed(3)
    ours = GRUWeights(12, 10, layers, bidirectional)
    assert torch.equal(torch.rand(3), after_ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for name, value in ref.state_dict().items():
        assert torch.equal(ours.state_dict()[name], value), name


def test_decoder_cell_equals_nn_grucell():
    model = make("content").eval()
    src, src_len, _, _ = batch()
    state = model.start(src, src_len)
    prev = torch.tensor([SOS] * 4)
    with torch.no_grad():
        _, new, attn = model.step(state, prev)
        context = torch.bmm(attn.weights.unsqueeze(1), state.memory.values).squeeze(1)
        x = torch.cat((model.embedding(prev), context), -1)
        expected = model.cells[0](x, state.hidden[0])
    assert torch.allclose(new.hidden[0], expected, atol=1e-5)


@pytest.mark.parametrize("key", ["mix_onestep", "content"])
def test_cfq_size_two_layers(key):
    torch.manual_seed(0)
    cfg = apply_size(get_variant(key), "cfq")
    model = build_model(cfg, V, pad_id=PAD, sos_id=SOS, eos_id=EOS)
    src, src_len, tgt_in, tgt = batch(T=4)
    out = model(src, src_len, tgt_in)
    assert out.logits.shape == (4, 4, V)
    assert len(model.cells) == 2 and model.cells[1].hidden_size == 256
    assert model.value_in.out_features == 512 and model.embedding.embedding_dim == 128
    out.logits.sum().backward()
    assert model.cells[1].weight_hh.grad.abs().sum() > 0


@pytest.mark.parametrize("key", ["relative", "birope", "onestep", "mix_mono_pr", "dubois_transformer",
                                 "dubois_transformer_xl", "locattn_s", "dubois_location"])
def test_source_length_1000(key):
    model = make(key).eval()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, V, (2, 1000), generator=g)
    src_len = torch.tensor([1000, 640])
    src[1, 640:] = PAD
    tgt_in = torch.tensor([[SOS, 5, 6], [SOS, 7, 8]])
    with torch.no_grad():
        out = model(src, src_len, tgt_in, trace=True)
    assert torch.isfinite(out.logits).all()
    w = out.trace.weights
    assert w.shape == (2, 3, 1000 + 2 * model.source_offset)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3), atol=1e-4)
    assert (w[1, :, 640 + 2 * model.source_offset:] == 0).all()


@pytest.mark.parametrize(
    "args, match",
    [
        (lambda s, n, t: (s.float(), n, t), "src must be a \\(B, S\\) int64"),
        (lambda s, n, t: (s[0], n, t), "src must be a \\(B, S\\) int64"),
        (lambda s, n, t: (s, n[:2], t), "src_len must be a \\(B,\\)"),
        (lambda s, n, t: (s, n.int(), t), "src_len must be a \\(B,\\)"),
        (lambda s, n, t: (s, n + 5, t), "src_len values must be in \\[1, S=7\\]"),
        (lambda s, n, t: (s, n * 0, t), "src_len values must be in"),
        (lambda s, n, t: (s, n, t[:2]), "tgt_in must be a \\(B, T\\) int64"),
        (lambda s, n, t: (s, n, t.float()), "tgt_in must be a \\(B, T\\) int64"),
        (lambda s, n, t: (s, n, t[:, :0]), "at least one step"),
    ],
)
def test_bad_input_raises_clear_value_error(args, match):
    model = make("onestep")
    src, src_len, tgt_in, _ = batch()
    with pytest.raises(ValueError, match=match):
        model(*args(src, src_len, tgt_in))


def test_build_model_rejects_regressor_config_and_bad_ids():
    with pytest.raises(ValueError, match="kind='seq2seq'"):
        build_model(get_variant("ffattn"), V, pad_id=PAD, sos_id=SOS, eos_id=EOS)
    with pytest.raises(ValueError, match="eos_id=99"):
        build_model(get_variant("content"), V, pad_id=PAD, sos_id=SOS, eos_id=99)


# ----------------------------------------------------------------- Raffel & Ellis regressors


def test_regressor_parameter_counts():
    counts = {k: sum(p.numel() for p in build_regressor(get_variant(k)).parameters()) for k in REGRESSORS}
    assert counts == {"ffattn": 10_602, "mean": 10_501}


@pytest.mark.parametrize("key", REGRESSORS)
def test_regressor_variable_lengths_and_length_1000(key):
    torch.manual_seed(0)
    model = build_regressor(get_variant(key))
    x = torch.rand(3, 1000, 2)
    lengths = torch.tensor([1000, 50, 1])
    y, w = model(x, lengths)
    assert y.shape == (3,) and w.shape == (3, 1000) and torch.isfinite(y).all()
    assert torch.allclose(w.sum(-1), torch.ones(3), atol=1e-5)
    assert (w[1, 50:] == 0).all() and (w[2, 1:] == 0).all() and w[2, 0] == 1
    # padding content does not change the prediction
    x2 = x.clone()
    x2[1, 50:] = 7.0
    assert torch.allclose(model(x2, lengths)[0], y)
    if key == "mean":
        assert torch.allclose(w[1, :50], torch.full((50,), 1 / 50))
    else:
        assert not torch.allclose(w[1, :50], torch.full((50,), 1 / 50))
    y.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_regressor_bad_input():
    model = build_regressor(get_variant("ffattn"))
    with pytest.raises(ValueError, match="x must be a \\(B, T, 2\\)"):
        model(torch.rand(2, 5, 3), torch.tensor([5, 5]))
    with pytest.raises(ValueError, match="floating-point"):
        model(torch.ones(2, 5, 2, dtype=torch.long), torch.tensor([5, 5]))
    with pytest.raises(ValueError, match="lengths must be a \\(2,\\) int64"):
        model(torch.rand(2, 5, 2), torch.tensor([5.0, 5.0]))
    with pytest.raises(ValueError, match="lengths must be in \\[1, T=5\\]"):
        model(torch.rand(2, 5, 2), torch.tensor([6, 5]))
    with pytest.raises(ValueError, match="kind='regressor'"):
        build_regressor(get_variant("content"))


def test_decoder_starts_from_e_cls():
    model = make("mix_onestep").eval()
    src, src_len, _, _ = batch()
    state = model.start(src, src_len)
    enc = model.encoder(model.embedding(src), src_len)
    H = enc.cls.shape[-1] // 2
    # e_cls = [forward state at the last valid position; backward state at position 0]
    fwd_last = enc.outputs[torch.arange(4), src_len + 1, :H]
    bwd_first = enc.outputs[:, 0, H:]
    assert torch.allclose(state.hidden[0], torch.cat((fwd_last, bwd_first), -1), atol=1e-6)
