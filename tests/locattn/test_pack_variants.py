"""Every ablation of a cell in one pack: Table 4's OneStepAttn, -Step 2 (``reference: gated``, two
more step-head rows), -Step 3 and -Sigmoid x 2 seeds train as one packed model, each replica
equal to its solo run to the bit (per-epoch losses, final parameters, optimizer state); an
interrupted variant pack resumes exactly, packed or solo, from either kind of checkpoint;
Table 7's four Mix arms (MonoAttn's gate parameter included) are one pack too, and variants
whose parameter sets differ otherwise are refused in one line naming why
(the launch and export of that cell: tests/study/test_pack_variants_study.py).

The default-tier checks drive :class:`~locattn.training.seq2seq.Seq2SeqRun` objects through the
training pass and the per-epoch bookkeeping (dev scores, checkpoint) without test decoding and
the attention figure, which cost most of a tiny whole run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from locattn.config import make_run_config, run_identity
from locattn.packable import CANNOT_PACK, check_packable, pack_groups
from locattn.tasks import load_task
from locattn.training.epoch import packed_train_epoch, solo_train_epoch
from locattn.training.files import CHECKPOINT_DIR
from locattn.training.recorders import NullRecorder
from locattn.training.seq2seq import Seq2SeqRun

ONESTEP_ROW = ["onestep", "onestep_no_step2", "onestep_no_step3", "onestep_no_sigmoid"]
"""Table 4's OneStep row: the variants of one cell that differ only in ablation switches."""
SEEDS = (0, 1)
EPOCHS = 2
OVERRIDES = {"task.train_size": 72, "task.dev_size": 16, "task.test_size": 8, "task.test_lengths": [15],
             "optim.epochs": EPOCHS}
"""72 examples: batches of 32, 32 and 8, so full and partial batches, and batches of different
lengths that train in subsets of the pack (each with its own switches)."""


def configs(tmp: Path, variants: list[str] = ONESTEP_ROW, seeds: tuple[int, ...] = SEEDS, **extra) -> list:
    over = {**OVERRIDES, "task.test_lengths": tuple(OVERRIDES["task.test_lengths"]), "num_threads": 1,
            "cache_dir": str(tmp / "cache"), **extra}
    return [make_run_config(task="copy", variant=v, seed=s, overrides=over) for v in variants for s in seeds]


def new_runs(cfgs: list, root: Path) -> list[Seq2SeqRun]:
    torch.set_num_threads(cfgs[0].num_threads)  # as train() and train_packed() do
    data = load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)
    return [Seq2SeqRun(c, data, root / f"{c.variant}-{c.seed}") for c in cfgs]


def epoch(runs: list[Seq2SeqRun], bookkeeping: bool = True) -> list[float]:
    """One epoch of ``runs`` as one pack (one run: its solo pass), then each run's bookkeeping
    (dev scores, scheduler, checkpoint), as ``train_packed`` and ``train`` do."""
    for r in runs:
        r.epoch += 1
    losses = packed_train_epoch(runs, runs[0].epoch) if len(runs) > 1 else [solo_train_epoch(runs[0])]
    if bookkeeping:
        for r, loss in zip(runs, losses):
            r.end_epoch(loss, 0.0, NullRecorder())
    return losses


def restored(run: Seq2SeqRun, root: Path) -> Seq2SeqRun:
    """The run as a new process sees it: a fresh object continued from its checkpoint on disk."""
    fresh = Seq2SeqRun(run.cfg, run.data, root)
    fresh.restore(run.out_dir / CHECKPOINT_DIR)
    return fresh


def assert_same_state(a: Seq2SeqRun, b: Seq2SeqRun) -> None:
    """Equal parameters and AdamW state, to the bit (a narrower replica's state has its own
    shape: the packed head's padding rows never reach it)."""
    pa, pb = a.model.state_dict(), b.model.state_dict()
    assert pa.keys() == pb.keys()
    for name in pa:
        assert pa[name].shape == pb[name].shape and torch.equal(pa[name], pb[name]), (a.cfg.variant, name)
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        sa, sb = a.optimizer.state[p], b.optimizer.state[q]
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(sa[key], sb[key]), (a.cfg.variant, key)


def strip(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if k != "epoch_seconds"} for h in history]


@pytest.fixture(scope="module")
def solo(tmp_path_factory) -> list[Seq2SeqRun]:
    """The 8 runs of the OneStep row trained alone, epoch by epoch with their bookkeeping."""
    root = tmp_path_factory.mktemp("solo")
    runs = new_runs(configs(root), root)
    for r in runs:
        for _ in range(EPOCHS):
            epoch([r])
    return runs


def test_the_onestep_row_is_one_pack_and_each_replica_is_its_solo_run(solo, tmp_path: Path) -> None:
    cfgs = configs(tmp_path)
    check_packable(cfgs)
    assert pack_groups(cfgs) == [list(range(8))]
    runs = new_runs(cfgs, tmp_path)
    widths = {r.cfg.variant: r.model.attender.heads.weight.shape[0] for r in runs}
    assert widths == {"onestep": 2, "onestep_no_step2": 4, "onestep_no_step3": 2, "onestep_no_sigmoid": 2}
    for _ in range(EPOCHS):
        epoch(runs)
    for s, p in zip(solo, runs):
        assert run_identity(p.cfg) == run_identity(s.cfg)
        assert strip(p.history) == strip(s.history), p.cfg.variant
        assert_same_state(s, p)
    assert len({r.history[-1]["train_loss"] for r in runs}) == 8  # eight different runs


def test_an_interrupted_variant_pack_resumes_exactly_packed_or_solo(solo, tmp_path: Path) -> None:
    """The four variants (seed 0) trained epoch 1 as a pack, then every run continued by a fresh
    object from its checkpoint: the pack resumed as a pack, -Step 2's packed checkpoint resumed
    solo, and OneStepAttn's solo checkpoint resumed inside the pack; each equals the
    uninterrupted solo run."""
    twins = {r.cfg.variant: r for r in solo if r.cfg.seed == 0}
    cut = new_runs(configs(tmp_path, seeds=(0,)), tmp_path / "cut")
    epoch(cut)
    again = [restored(r, tmp_path / "again" / r.out_dir.name) for r in cut]
    epoch(again)
    for r in again:
        assert strip(r.history) == strip(twins[r.cfg.variant].history), r.cfg.variant
        assert_same_state(twins[r.cfg.variant], r)
    step2 = next(r for r in cut if r.cfg.variant == "onestep_no_step2")  # packed checkpoint -> solo
    alone = restored(step2, tmp_path / "alone")
    epoch([alone])
    assert strip(alone.history) == strip(twins["onestep_no_step2"].history)
    assert_same_state(twins["onestep_no_step2"], alone)
    first = new_runs(configs(tmp_path, ["onestep"], (0,)), tmp_path / "first")[0]  # solo checkpoint -> pack
    epoch([first])
    assert cut[0].cfg.variant == "onestep"
    mixed = [restored(first, tmp_path / "mixed0")] + [restored(r, tmp_path / f"mixed{k}")
                                                     for k, r in enumerate(cut[1:], start=1)]
    epoch(mixed)
    for r in mixed:
        assert strip(r.history) == strip(twins[r.cfg.variant].history), r.cfg.variant
        assert_same_state(twins[r.cfg.variant], r)


def test_table7s_mix_arms_are_one_pack_each_replica_its_solo_run(tmp_path: Path) -> None:
    """Mix OneStepAttn, its PR arm (``pa_from: location``), Mix MonoAttn PR (a gate parameter of
    its own, which the other replicas' slots hold as a zero they never read) and Mix RMonoAttn PR
    (a ReLU step) share a pack, each equal to its solo run (one epoch, training pass)."""
    table7 = ["mix_onestep", "mix_onestep_pr", "mix_mono_pr", "mix_rmono_pr"]
    cfgs = configs(tmp_path, table7, (0,))
    assert pack_groups(cfgs) == [[0, 1, 2, 3]]
    packed = new_runs(cfgs, tmp_path / "packed")
    alone = new_runs(cfgs, tmp_path / "alone")
    assert [r.model.attender.mono_gate is not None for r in alone] == [False, False, True, False]
    losses = epoch(packed, bookkeeping=False)
    assert losses == [epoch([r], bookkeeping=False)[0] for r in alone]
    for s, p in zip(alone, packed):
        assert_same_state(s, p)


def test_the_graphed_step_packs_the_onestep_row_each_replica_its_solo_graphed_run(tmp_path: Path) -> None:
    """``optim.train_step: graphed`` (the GPU profiles' step, run uncaptured on a CPU): the four
    variants (seed 0) and Table 7's Mix MonoAttn PR beside Mix OneStepAttn as one static-shape
    step each, every epoch's losses and the parameters equal to each run's solo graphed run."""
    from locattn.training.graphed import graphed_train_epoch

    for variants in (ONESTEP_ROW, ["mix_onestep", "mix_mono_pr"]):
        cfgs = configs(tmp_path, variants, (0,), **{"optim.train_step": "graphed"})
        check_packable(cfgs)
        packed = new_runs(cfgs, tmp_path / "packed")
        alone = new_runs(cfgs, tmp_path / "alone")
        steps: dict = {}
        for e in range(1, EPOCHS + 1):
            for r in packed:
                r.epoch = e
            losses = graphed_train_epoch(packed, e, steps)
            for r in alone:
                r.epoch = e
            assert losses == [r.train_epoch() for r in alone], (variants, e)  # the solo graphed pass
        for s, p in zip(alone, packed):
            assert all(torch.equal(a, b) for a, b in zip(s.model.state_dict().values(), p.model.state_dict().values()))


@pytest.mark.parametrize("variants, reason", [
    (["onestep", "mix_onestep"], CANNOT_PACK["model.attention.mode"]),
    (["onestep", "locattn"], CANNOT_PACK["model.attention.direction"]),
], ids=["mix-beside-location", "mixed-direction-beside-forward"])
def test_variants_that_cannot_pack_are_refused_in_one_line_naming_why(tmp_path: Path, variants, reason) -> None:
    with pytest.raises(ValueError) as err:
        check_packable(configs(tmp_path, variants, (0,)))
    line = str(err.value)
    assert "\n" not in line and reason in line and "packed runs may differ only in" in line


@pytest.mark.parametrize("variants, extra, switches", [
    (ONESTEP_ROW, {}, {"replica_step", "replica_reference"}),
    (["mix_onestep", "mix_onestep_pr", "mix_mono_pr"], {}, {"replica_step", "replica_pa_from"}),
    (["onestep"], {"model.attention.location_norm": "softmax", "model.attention.step_temperature": 2.0},
     {"replica_norm", "replica_step_temperature"}),
], ids=["onestep-row", "mix-arms", "norm-and-temperature"])
def test_a_packs_switches_live_on_its_models_device(tmp_path: Path, variants, extra, switches) -> None:
    """A pack on a GPU keeps each replica's switches beside its weights (``torch.where`` takes no
    CPU mask for CUDA rows); the meta device stands in for a GPU here."""
    from locattn.models import build_model
    from locattn.training.epoch import ParamPack

    cfgs = configs(tmp_path, variants, (0,)) + configs(tmp_path, variants[:1], (1,), **extra)

    class Holder:  # what ParamPack reads from a run
        def __init__(self, cfg) -> None:
            self.cfg = cfg
            self.model = build_model(cfg.model, 12, pad_id=0, sos_id=1, eos_id=2).to("meta")

    pack = ParamPack([Holder(c) for c in cfgs])
    found = {n: b.device.type for n, b in pack.model.attender.named_buffers() if n.startswith("replica_")}
    assert set(found) == switches and set(found.values()) == {"meta"}
