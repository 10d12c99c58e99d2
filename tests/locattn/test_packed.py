"""Packed runs (locattn.packed): each replica is its solo run, checkpoints and failures per replica."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from locattn import get_variant, list_variants
from locattn.config import make_run_config
from locattn.packed import PACKABLE_FAMILIES, check_packable, train_packed
from locattn.train import NonFiniteLossError, RunResult, train

TINY = {
    "task.train_size": 160,
    "task.dev_size": 40,
    "task.test_size": 16,
    "task.test_lengths": (15, 30),
    "optim.epochs": 2,
    "num_threads": 1,
}


def cfg(tmp: Path, variant: str = "onestep", seed: int = 0, **extra):
    over = {**TINY, "cache_dir": str(tmp / "cache"), **extra}
    return make_run_config(task="copy", variant=variant, seed=seed, overrides=over)


def without_time(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if k != "epoch_seconds"} for h in history]


def assert_same_run(solo: RunResult, packed: RunResult) -> None:
    """Solo training is a pack of one and replicas with batches of different shapes are never
    padded together (exact mode), so every kernel sees the same operands: equal to the bit.
    (Tolerances would not do: these runs are chaotic enough that a last-bit difference in one
    step becomes a different run within an epoch.)"""
    assert packed.run_identity == solo.run_identity
    assert without_time(packed.history) == without_time(solo.history)
    assert packed.best_epoch == solo.best_epoch and packed.epochs_run == solo.epochs_run
    assert packed.stop_reason == solo.stop_reason
    assert packed.test == solo.test and packed.by_length == solo.by_length


def test_each_replica_equals_its_solo_run_different_seeds(tmp_path: Path) -> None:
    # train_size 200: the seeds' last batches (8 examples) and some others differ in length
    cfgs = [cfg(tmp_path, seed=s, **{"task.train_size": 200}) for s in (0, 1, 2)]
    solos = [train(c, tmp_path / f"solo{c.seed}") for c in cfgs]
    calls: list[tuple[int, int]] = []

    class Spy:
        def __init__(self, k: int) -> None:
            self.k = k

        def on_epoch(self, epoch, metrics, checkpoint_dir):
            assert (checkpoint_dir / "meta.json").is_file()
            calls.append((self.k, epoch))

        def on_end(self, result):
            calls.append((self.k, -1))

    packed = train_packed(cfgs, [tmp_path / f"pack{c.seed}" for c in cfgs], [Spy(k) for k in range(3)])
    for solo, pk in zip(solos, packed):
        assert isinstance(pk, RunResult)
        assert_same_run(solo, pk)
    # the runs really differ from each other, and every recorder heard its own run
    assert len({round(r.history[0]["train_loss"], 6) for r in packed}) == 3
    assert sorted(calls) == sorted([(k, e) for k in range(3) for e in (1, 2, -1)])
    for c in cfgs:  # same output files as a solo run
        out = tmp_path / f"pack{c.seed}"
        for name in ("config.json", "result.json", "best_model.pt", "checkpoint/meta.json"):
            assert (out / name).is_file(), name
        assert json.loads((out / "result.json").read_text())["run_identity"] == packed[c.seed].run_identity


def test_partial_last_batches_stay_exact_over_epochs(tmp_path: Path) -> None:
    # train_size 300: every epoch ends with a batch of 12; in epoch 2 the three seeds' last
    # batches have the same shape. Packed together those rounded differently from the solo
    # runs (1e-8 in epoch 2, growing after); they now train alone and the runs stay equal.
    cfgs = [cfg(tmp_path, seed=s, **{"task.train_size": 300, "optim.epochs": 3}) for s in (0, 1, 2)]
    solos = [train(c, tmp_path / f"solo{c.seed}") for c in cfgs]
    packed = train_packed(cfgs, [tmp_path / f"pack{c.seed}" for c in cfgs])
    for solo, pk in zip(solos, packed):
        assert_same_run(solo, pk)


def test_replicas_with_different_learning_rates_and_mix_attention(tmp_path: Path) -> None:
    lrs = (1e-3, 3e-3, 3e-4)
    cfgs = [cfg(tmp_path, "mix_onestep", seed=0, **{"optim.lr": lr}) for lr in lrs]
    solos = [train(c, tmp_path / f"solo{i}") for i, c in enumerate(cfgs)]
    packed = train_packed(cfgs, [tmp_path / f"pack{i}" for i in range(3)])
    for solo, pk, lr in zip(solos, packed, lrs):
        assert pk.history[0]["lr"] == lr
        assert_same_run(solo, pk)


def test_a_seeds_by_learning_rates_pack_and_optimizer_variants_equal_solo_runs(tmp_path: Path) -> None:
    """Seeds x learning rates in one pack, plus replicas whose clipping, weight decay and epoch
    budget differ (each replica keeps its own optimizer): every one equals its solo run."""
    grid = [{"optim.lr": lr, "seed": s} for lr in (1e-3, 3e-3) for s in (0, 1)]
    grid += [{"optim.lr": 1e-3, "seed": 0, "optim.clip": 0.5, "optim.weight_decay": 0.01},
             {"optim.lr": 1e-3, "seed": 1, "optim.epochs": 1}]
    cfgs = [cfg(tmp_path, seed=g.pop("seed"), **g) for g in grid]
    check_packable(cfgs)
    solos = [train(c, tmp_path / f"solo{i}") for i, c in enumerate(cfgs)]
    packed = train_packed(cfgs, [tmp_path / f"pack{i}" for i in range(len(cfgs))])
    for solo, pk in zip(solos, packed):
        assert_same_run(solo, pk)
    assert [r.epochs_run for r in packed] == [2, 2, 2, 2, 2, 1]
    assert len({r.history[-1]["train_loss"] for r in packed}) == len(cfgs)  # all really differ


class Stop(Exception):
    """Raised by :class:`StopAtEpoch`: the interruption of a training run."""


class StopAtEpoch:
    """A recorder that stops the run after epoch ``n`` (its checkpoint is written first)."""

    def __init__(self, n: int = 1) -> None:
        self.n = n

    def on_epoch(self, epoch, metrics, checkpoint_dir):
        if epoch == self.n:
            raise Stop

    def on_end(self, result):
        pass


def test_interrupted_pack_resumes_exactly_and_solo_resumes_a_packed_checkpoint(tmp_path: Path) -> None:
    cfgs = [cfg(tmp_path, seed=s) for s in (3, 4)]
    full = train_packed(cfgs, [tmp_path / f"full{k}" for k in range(2)])
    outs = [tmp_path / f"cut{k}" for k in range(2)]
    with pytest.raises(Stop):
        train_packed(cfgs, outs, [None, StopAtEpoch()])
    # replica 0 finished epoch 1 (checkpoint written) before replica 1's recorder stopped the pack
    resumed = train_packed(cfgs, outs)
    for a, b in zip(full, resumed):
        assert without_time(b.history) == without_time(a.history)
        assert b.test == a.test
    # a packed checkpoint is a solo checkpoint: the solo trainer continues it
    with pytest.raises(Stop):
        train_packed(cfgs[:1], [tmp_path / "mixed"], [StopAtEpoch()])
    solo = train(cfgs[0], tmp_path / "mixed")
    assert without_time(solo.history) == without_time(full[0].history)
    assert solo.test == full[0].test


def test_a_diverging_replica_fails_alone(tmp_path: Path) -> None:
    cfgs = [cfg(tmp_path, seed=0, **{"optim.epochs": 1}),
            cfg(tmp_path, seed=0, **{"optim.epochs": 1, "optim.lr": 1e15})]
    solo = train(cfgs[0], tmp_path / "solo")
    ok, bad = train_packed(cfgs, [tmp_path / "ok", tmp_path / "bad"])
    assert isinstance(bad, NonFiniteLossError)
    assert "epoch 1, batch" in str(bad) and f"lr={1e15}" in str(bad)
    assert not (tmp_path / "bad" / "result.json").exists()
    assert isinstance(ok, RunResult)
    assert_same_run(solo, ok)


def test_only_one_cell_can_be_packed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="model.attention.mode"):
        check_packable([cfg(tmp_path, "onestep"), cfg(tmp_path, "mix_onestep", seed=1)])
    with pytest.raises(ValueError, match="optim.batch_size"):
        check_packable([cfg(tmp_path), cfg(tmp_path, seed=1, **{"optim.batch_size": 16})])
    check_packable([cfg(tmp_path, "relative"), cfg(tmp_path, "relative", seed=1)])  # all families pack
    with pytest.raises(ValueError, match="differ in seed or in one of"):
        check_packable([cfg(tmp_path), cfg(tmp_path)])
    with pytest.raises(ValueError, match="one out_dir"):
        train_packed([cfg(tmp_path)], [])


SEQ2SEQ_VARIANTS = [k for k in list_variants() if get_variant(k).kind == "seq2seq"
                    and get_variant(k).attention.family in PACKABLE_FAMILIES]


@pytest.mark.parametrize("variant", SEQ2SEQ_VARIANTS)
def test_packed_model_rows_equal_solo_models(tmp_path: Path, variant: str) -> None:
    """Forward pass only, dropout off, unequal source lengths: padding does not leak. Every
    variant, because solo training runs as a pack of one."""
    from locattn.models import build_model
    from locattn.packed import ParamPack

    torch.manual_seed(0)
    c = cfg(tmp_path, variant)

    class R:  # the attributes ParamPack reads from a run
        def __init__(self, seed: int) -> None:
            torch.manual_seed(seed)
            self.model = build_model(c.model, 12, pad_id=0, sos_id=1, eos_id=2).eval()

    runs = [R(s) for s in (0, 1)]
    pack = ParamPack(runs)
    src = [torch.randint(3, 12, (4, 5)), torch.randint(3, 12, (4, 9))]
    src_len = [torch.tensor([5, 3, 5, 1]), torch.tensor([9, 9, 2, 7])]
    tgt = [torch.randint(3, 12, (4, 6)), torch.randint(3, 12, (4, 3))]
    with torch.no_grad():
        solo = [r.model(s, n, t).logits for r, s, n, t in zip(runs, src, src_len, tgt)]
        pad = lambda x, w: torch.nn.functional.pad(x, (0, w - x.shape[1]))  # noqa: E731
        packed = pack.model.eval()(
            torch.cat([pad(s, 9) for s in src]), torch.cat(src_len), torch.cat([pad(t, 6) for t in tgt])
        ).logits
    pack.release()
    assert torch.allclose(packed[:4, :6], solo[0], atol=1e-5)
    assert torch.allclose(packed[4:, :3], solo[1], atol=1e-5)
    assert not math.isclose(float(solo[0][0, 0, 0]), float(solo[1][0, 0, 0]))


def test_an_ablation_pack_equals_each_solo_run(tmp_path: Path) -> None:
    """Table 4's OneStepAttn, -Step 3 (softstair) and -Sigmoid (raw step) have the same parameter
    shapes and differ only in switches: one pack trains them, with a fourth replica that differs
    in location_norm and step_temperature, and each replica equals its solo run to the bit
    (train_size 200: the replicas' batches differ in length, so subsets of the pack run together
    with their own switches)."""
    extra = {"task.train_size": 200}
    cfgs = [cfg(tmp_path, "onestep", 0, **extra), cfg(tmp_path, "onestep_no_step3", 1, **extra),
            cfg(tmp_path, "onestep_no_sigmoid", 2, **extra),
            cfg(tmp_path, "onestep", 3, **extra, **{"model.attention.location_norm": "softmax",
                                                    "model.attention.step_temperature": 2.0})]
    check_packable(cfgs)
    solos = [train(c, tmp_path / f"solo{k}") for k, c in enumerate(cfgs)]
    packed = train_packed(cfgs, [tmp_path / f"packed{k}" for k in range(len(cfgs))])
    for s, p in zip(solos, packed):
        assert_same_run(s, p)
    assert len({round(r.history[-1]["train_loss"], 6) for r in packed}) == 4  # four different runs


def test_packs_refuse_switches_that_change_a_shape_or_the_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"differs from cfgs\[0\] in \['model.attention.mode'\] \(.*content scorer"):
        check_packable([cfg(tmp_path, "onestep"), cfg(tmp_path, "mix_onestep")])
    with pytest.raises(ValueError, match=r"in \['model.attention.direction'\] \(.*direction gate"):
        check_packable([cfg(tmp_path, "onestep"), cfg(tmp_path, "locattn", 1)])
    with pytest.raises(ValueError, match=r"on train_path=eager \(.*train_path='compiled'"):
        check_packable([cfg(tmp_path, "onestep", **{"train_path": "compiled"}),
                        cfg(tmp_path, "onestep_no_step3", **{"train_path": "compiled"})])


PACK_A_PLUGIN = """
import json, sys
from pathlib import Path
import locattn_localp  # registers `localp` (stacked=True) in this process only
from locattn.config import make_run_config
from locattn.packed import check_packable, train_packed
from locattn.train import train
tmp, over = Path(sys.argv[1]), json.loads(sys.argv[2])
cfgs = [make_run_config(task="copy", variant="localp", seed=s, overrides=over) for s in (0, 1, 2)]
check_packable(cfgs)
solos = [train(c, tmp / f"solo{c.seed}") for c in cfgs]
packed = train_packed(cfgs, [tmp / f"pack{c.seed}" for c in cfgs])
keep = lambda r: {"identity": r.run_identity, "best_epoch": r.best_epoch, "epochs": r.epochs_run,
                  "stop": r.stop_reason, "test": r.test, "by_length": r.by_length,
                  "history": [{k: v for k, v in h.items() if k != "epoch_seconds"} for h in r.history]}
print(json.dumps({"solo": [keep(r) for r in solos], "packed": [keep(r) for r in packed]}))
"""


def test_a_plugin_attender_written_for_stacked_parameters_trains_packed_equal_to_solo(tmp_path: Path) -> None:
    """The worked example's local-p attender (examples/locattn-localp), registered with
    ``stacked=True`` (the built-ins' fast path): three seeds trained as one pack equal their solo
    runs to the bit, losses, metrics and every parameter. In a subprocess, so this pytest process
    keeps its registry as other tests expect it. (An ordinary module: tests/locattn/test_plain_attender.py.)"""
    root = Path(__file__).resolve().parents[2]
    over = {**TINY, "task.train_size": 200, "cache_dir": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", PACK_A_PLUGIN, str(tmp_path), json.dumps(over)], capture_output=True,
        text=True, timeout=600, cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "examples" / "locattn-localp")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs["packed"] == runs["solo"]
    assert len({r["history"][-1]["train_loss"] for r in runs["packed"]}) == 3  # three different runs
    for seed in (0, 1, 2):
        solo = torch.load(tmp_path / f"solo{seed}" / "best_model.pt", weights_only=True)
        packed = torch.load(tmp_path / f"pack{seed}" / "best_model.pt", weights_only=True)
        assert "attender.w_p.weight" in solo and solo.keys() == packed.keys()
        assert all(torch.equal(solo[k], packed[k]) for k in solo)
