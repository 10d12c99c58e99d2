"""attnLoss pools the chosen steps: with the <eos> step (Dubois's metric code, the default) or
before it (the paper's wording). Hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locattn import metrics as M


def _case() -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows, attention axis START, s0..s3, END (source_offset=1: START = -1, END = 4).

    Row 0: 3 target tokens + <eos>, gold 0 1 2 3 (the <eos> step attends '.', index 3).
    Row 1: 2 target tokens + <eos>, gold 0 1 2, then padding (-1).
    """
    w = torch.zeros(2, 4, 6)
    # row 0: expected indices 0, 1.5, 3, 1.5 -> squared errors 0, 0.25, 1, 2.25
    w[0, 0, 1] = 1.0
    w[0, 1, 2] = w[0, 1, 3] = 0.5
    w[0, 2, 4] = 1.0
    w[0, 3, 0] = w[0, 3, 5] = 0.5
    # row 1: expected indices 0, 2, 0 -> squared errors 0, 1, 4; step 3 is padding
    w[1, 0, 1] = 1.0
    w[1, 1, 3] = 1.0
    w[1, 2, 1] = 1.0
    w[1, 3, 5] = 1.0  # must never count (no gold)
    gold = torch.tensor([[0, 1, 2, 3], [0, 1, 2, -1]])
    return w, gold


def test_with_eos_pools_every_gold_step() -> None:
    w, gold = _case()
    assert M.attn_loss(w, gold, source_offset=1) == pytest.approx((0 + 0.25 + 1 + 2.25 + 0 + 1 + 4) / 7)
    assert M.attn_loss_terms(w, gold, source_offset=1) == (pytest.approx(8.5), 7)


def test_before_eos_drops_each_rows_last_gold_step() -> None:
    w, gold = _case()
    got = M.attn_loss(w, gold, source_offset=1, steps="before_eos")
    assert got == pytest.approx((0 + 0.25 + 1 + 0 + 1) / 5)
    # gold is not modified in place
    assert gold.tolist() == [[0, 1, 2, 3], [0, 1, 2, -1]]


def test_lengths_cut_steps_not_emitted() -> None:
    w, gold = _case()
    # row 1 emitted 2 steps (stopped before its <eos> step): only its steps 0, 1 count
    assert M.attn_loss(w, gold, source_offset=1, lengths=[4, 2]) == pytest.approx(4.5 / 6)
    assert M.attn_loss(w, gold, source_offset=1, lengths=[4, 2], steps="before_eos") == \
        pytest.approx(2.25 / 5)


def test_single_step_rows_before_eos_score_nothing() -> None:
    w = torch.zeros(1, 1, 3)
    w[0, 0, 2] = 1.0
    assert M.attn_loss(w, torch.tensor([[1]]), steps="with_eos") == pytest.approx(1.0)
    assert M.attn_loss_terms(w, torch.tensor([[1]]), steps="before_eos") == (0.0, 0)


def test_unknown_steps_choice_is_refused() -> None:
    w, gold = _case()
    with pytest.raises(ValueError, match=r"steps='before'.*with_eos.*before_eos"):
        M.attn_loss(w, gold, steps="before")


def _tiny_lookup(variant: str, seed: int, **overrides):
    """(config, untrained eval-mode model, vocab, encoded split) of two Lookup rows with gold
    attention, for the greedy_decode tests."""
    from locattn.config import make_run_config
    from locattn.models import build_model
    from locattn.tasks.base import Example, Vocab
    from locattn.training.data import EncodedSplit

    torch.manual_seed(seed)
    vocab = Vocab(["000", "001", "011", "110", "t1", "t2", "."])
    examples = [Example(src=("000", "t1", "t2", "."), tgt=("000", "011", "110"), attn=(0, 1, 2, 3)),
                Example(src=("001", "t2", "."), tgt=("001", "110"), attn=(0, 1, 2))]
    cfg = make_run_config(task="lookup", variant=variant, overrides={
        "model.embedding_size": 8, "model.hidden_size": 16, "model.value_size": 16, **overrides})
    ids = dict(pad_id=vocab.pad_id, sos_id=vocab.sos_id, eos_id=vocab.eos_id)
    model = build_model(cfg.model, len(vocab), **ids).eval()
    return cfg, model, vocab, EncodedSplit(examples, vocab, **ids)


def test_greedy_decode_pools_the_configured_steps() -> None:
    """greedy_decode's pooled attnLoss equals the hand pooling of the model's own traces, with
    and without the <eos> step; the choice reaches it from ``eval.attn_loss_steps``."""
    from locattn.training.evaluate import greedy_decode

    cfg, model, vocab, split = _tiny_lookup("dubois_location", 0, **{"eval.attn_loss_steps": "before_eos"})
    assert cfg.eval.attn_loss_steps == "before_eos"
    caps = np.array([6, 6])
    out = model.greedy(split.src, split.src_len, torch.as_tensor(caps), trace=True)
    offset = int(getattr(model, "source_offset", 0))
    for steps in ("with_eos", "before_eos"):
        want = M.attn_loss(out.trace.weights, split.attn, source_offset=offset,
                           lengths=out.lengths, steps=steps)
        got = greedy_decode(model, split, caps, 8, want_attention=True, attn_steps=steps)
        assert got.attn_loss == pytest.approx(want, rel=1e-9), steps
    a = greedy_decode(model, split, caps, 8, want_attention=True, attn_steps="with_eos").attn_loss
    b = greedy_decode(model, split, caps, 8, want_attention=True, attn_steps="before_eos").attn_loss
    assert a != b


def test_gold_length_decode_scores_every_gold_step_of_a_model_that_stops_early() -> None:
    """A model that emits <eos> at once: the emitted decode scores one step per row, the
    gold-length decode (Dubois's evaluation) every gold step, from a decode that ignores <eos>."""
    from locattn.training.evaluate import greedy_decode

    cfg, model, vocab, split = _tiny_lookup("dubois_mix", 1, **{"eval.attn_loss_decode": "gold_length"})
    assert cfg.eval.attn_loss_decode == "gold_length"
    with torch.no_grad():
        model.out_bias[vocab.eos_id] = 1e4  # <eos> wins every step
    caps = np.array([6, 6])
    stopped = model.greedy(split.src, split.src_len, torch.as_tensor(caps), trace=True)
    assert stopped.lengths.tolist() == [1, 1]
    gold_steps = torch.tensor([4, 3])
    full = model.greedy(split.src, split.src_len, gold_steps, trace=True, stop_at_eos=False)
    assert full.lengths.tolist() == [4, 3]
    assert (full.tokens[0] == vocab.eos_id).all()  # it kept going after its own <eos>
    offset = int(getattr(model, "source_offset", 0))
    emitted = greedy_decode(model, split, caps, 8, want_attention=True, attn_decode="emitted")
    gold = greedy_decode(model, split, caps, 8, want_attention=True, attn_decode="gold_length")
    assert emitted.attn_loss == pytest.approx(M.attn_loss(
        stopped.trace.weights, split.attn, source_offset=offset, lengths=stopped.lengths), rel=1e-9)
    assert gold.attn_loss == pytest.approx(M.attn_loss(
        full.trace.weights, split.attn, source_offset=offset), rel=1e-9)
    assert gold.attn_loss != pytest.approx(emitted.attn_loss)  # 7 steps scored, not 2
    assert gold.pred == emitted.pred and gold.ended == emitted.ended  # accuracy reads one decode
    # the run's test scoring takes the choice from the config
    from types import SimpleNamespace

    from locattn.training.scoring import score_test_splits

    data = SimpleNamespace(name=cfg.task.name, test_splits=["t"], splits={"t": split.examples}, vocab=vocab,
                           decode_cap=lambda n: 6)
    ids = dict(pad_id=vocab.pad_id, sos_id=vocab.sos_id, eos_id=vocab.eos_id)
    test, _ = score_test_splits(model, data, cfg, ids)
    assert test["t"]["attn_loss"] == pytest.approx(gold.attn_loss, rel=1e-9)


def test_config_refuses_unknown_choices() -> None:
    from locattn.config import EvalConfig, OptimConfig

    with pytest.raises(ValueError, match=r"eval.attn_loss_steps='all'; valid: \['with_eos', 'before_eos'\]"):
        EvalConfig(attn_loss_steps="all")
    with pytest.raises(ValueError, match=r"optim.select_on='loss'; valid: \['dev_acc', 'dev_loss'\]"):
        OptimConfig(select_on="loss")
    with pytest.raises(ValueError, match=r"eval.attn_loss_decode='all'; valid: \['emitted', 'gold_length'\]"):
        EvalConfig(attn_loss_decode="all")
