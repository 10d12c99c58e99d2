"""Greedy decoding of a pack at static shapes (locattn.training.decode), used for test and greedy
dev scoring under ``optim.train_step: graphed``.

On CPU the decoder runs its step without capture (the fallback); it must decode exactly what the
eager :func:`greedy_decode` gives each replica alone: token for token, the same ended flags and
so the same accuracies. The attention loss is compared to 1e-6 relative (the padded source
positions weigh 0, but the softmax sums run over a wider row). The ``gpu`` test checks captured
== uncaptured on CUDA.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from locattn.config import make_run_config
from locattn.packed import train_packed
from locattn.tasks import load_task
from locattn.train import train
from locattn.training.data import EncodedSplit
from locattn.training.decode import PackedGreedy
from locattn.training.evaluate import greedy_decode, split_caps
from locattn.training.scoring import split_metrics
from locattn.training.seq2seq import Seq2SeqRun
from tests.locattn.test_packed import TINY, assert_same_run

GRAPHED = {"optim.train_step": "graphed"}


def cfg(tmp: Path, seed: int = 0, device: str = "cpu", **extra):
    over = {**TINY, "task.train_size": 200, "task.test_size": 40, "cache_dir": str(tmp / "cache"),
            "device": device, **GRAPHED, **extra}
    return make_run_config(task="copy", variant="onestep", seed=seed, overrides=over)


def trained_runs(tmp: Path, seeds=(0, 1, 2), device: str = "cpu") -> list[Seq2SeqRun]:
    runs = []
    for s in seeds:
        c = cfg(tmp, seed=s, device=device, **{"optim.lr": 3e-3})
        run = Seq2SeqRun(c, load_task(c.task, cache_dir=c.cache_dir), tmp / f"r{s}")
        for _ in range(2):
            run.epoch += 1
            run.train_epoch()
        runs.append(run)
    return runs


def test_the_packed_decoder_decodes_what_the_eager_greedy_decode_gives(tmp_path: Path) -> None:
    runs = trained_runs(tmp_path)
    data = runs[0].data
    # batch 16: several batches per split, a short last batch (filler rows), several buckets
    decoder = PackedGreedy(runs, 16)
    assert decoder.capture is False  # CPU: the uncaptured fallback
    compared = 0
    for name in data.test_splits:
        split = EncodedSplit(data.splits[name], data.vocab, **runs[0].ids)
        caps = split_caps(split, data.decode_cap)
        mine = decoder.decode(split, caps, want_attention=True)
        for run, got in zip(runs, mine):
            ref = greedy_decode(run.model, split, caps, 16, want_attention=True)
            assert got.pred == ref.pred and got.ended == ref.ended
            assert split_metrics(split, got)[1] == split_metrics(split, ref)[1]
            got_m, ref_m = split_metrics(split, got)[0], split_metrics(split, ref)[0]
            assert got_m.pop("attn_loss") == pytest.approx(ref_m.pop("attn_loss"), rel=1e-6, abs=1e-12)
            assert got_m == ref_m
            compared += len(split)
    assert compared == 3 * 40 * len(data.test_splits)
    # the replicas decode differently (a pack is not K copies of replica 0)
    dev = runs[0].dev_split
    outs = decoder.decode(dev, split_caps(dev, data.decode_cap))
    assert outs[0].pred != outs[1].pred


def test_reloaded_weights_decode_like_a_fresh_decoder(tmp_path: Path) -> None:
    runs = trained_runs(tmp_path, seeds=(0, 1))
    dev, data = runs[0].dev_split, runs[0].data
    caps = split_caps(dev, data.decode_cap)
    decoder = PackedGreedy(runs, 16)
    before = decoder.decode(dev, caps)
    for run in runs:
        run.epoch += 1
        run.train_epoch()
    decoder.load()
    after = decoder.decode(dev, caps)
    assert [d.pred for d in after] == [d.pred for d in PackedGreedy(runs, 16).decode(dev, caps)]
    assert [d.pred for d in after] != [d.pred for d in before]


def test_packed_greedy_scoring_equals_solo_scoring(tmp_path: Path) -> None:
    """Test splits (and greedy dev scores) of a graphed pack are decoded in one batched pass; each
    replica's record equals its solo run's exactly, and its test accuracy equals the eager
    decode of its best model."""
    cfgs = [cfg(tmp_path, seed=s, **{"optim.dev_scoring": "greedy", "optim.lr": 3e-3}) for s in (0, 1, 2)]
    solos = [train(c, tmp_path / f"solo{c.seed}") for c in cfgs]
    packed = train_packed(cfgs, [tmp_path / f"pack{c.seed}" for c in cfgs])
    for solo, pk in zip(solos, packed):
        assert_same_run(solo, pk)
    data = load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)
    run = Seq2SeqRun(cfgs[1], data, tmp_path / "probe")
    run.model.load_state_dict(torch.load(tmp_path / "pack1" / "best_model.pt"))
    for name in data.test_splits:
        split = EncodedSplit(data.splits[name], data.vocab, **run.ids)
        ref = greedy_decode(run.model, split, split_caps(split, data.decode_cap), cfgs[1].optim.dev_batch_size)
        assert packed[1].test[name]["seq_acc"] == split_metrics(split, ref)[0]["seq_acc"]


def test_gold_length_attention_splits_are_left_to_the_eager_decode(tmp_path: Path) -> None:
    from locattn.training.decode import graphed_test_decodes

    def decoded_splits(**extra) -> list[set[str]]:
        c = cfg(tmp_path, **extra)
        run = Seq2SeqRun(c, load_task(c.task, cache_dir=c.cache_dir), tmp_path / "r")
        return [set(d) for d in graphed_test_decodes([run])]

    every = decoded_splits()
    assert every[0] and every[0] == set(load_task(cfg(tmp_path).task, cache_dir=str(tmp_path / "cache")).test_splits)
    assert decoded_splits(**{"eval.attn_loss_decode": "gold_length"}) == [set()]  # Copy: all have gold attention


def test_capture_needs_cuda(tmp_path: Path) -> None:
    c = cfg(tmp_path)
    run = Seq2SeqRun(c, load_task(c.task, cache_dir=c.cache_dir), tmp_path)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        PackedGreedy([run], 16, capture=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_captured_decoding_equals_the_eager_decode_on_the_gpu(tmp_path: Path) -> None:
    runs = trained_runs(tmp_path, device="cuda")
    data = runs[0].data
    captured = PackedGreedy(runs, 16)
    assert captured.capture
    for name in data.test_splits:
        split = EncodedSplit(data.splits[name], data.vocab, **runs[0].ids, device="cuda")
        caps = split_caps(split, data.decode_cap)
        got = captured.decode(split, caps, want_attention=True)
        again = captured.decode(split, caps, want_attention=True)  # replayed graphs
        plain = PackedGreedy(runs, 16, capture=False).decode(split, caps, want_attention=True)
        assert captured.graphs  # recorded, not fallen back
        for run, g, a, p in zip(runs, got, again, plain):
            ref = greedy_decode(run.model, split, caps, 16)
            assert g.pred == a.pred == p.pred == ref.pred and g.ended == ref.ended
            assert g.attn_loss == a.attn_loss == p.attn_loss
