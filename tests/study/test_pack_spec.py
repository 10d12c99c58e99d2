"""``pack:`` in study specs: which axes a trial trains together, and how a packed trial's runs
(seeds x hparams points) are named, configured and recorded. Pure Python, no Ray (the end to
end kill/resume of an lr x seed pack is in test_study.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from locattn.config import identity_dict
from study.spec import SpecError, load_spec, run_key
from study.trial.trainable import TrialDescriptor

BASE = {
    "name": "t",
    "grid": {"task": ["copy"], "variant": ["onestep", "mix_onestep"]},
    "hparams": {"optim.lr": [1e-3, 3e-4], "optim.batch_size": [16, 32]},
    "seeds": 3,
    "profiles": {"smoke": {"overrides": {"optim.epochs": 1}}},
}


def load(tmp_path: Path, **changes):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    return load_spec(path, "smoke")


def refused(tmp_path: Path, **changes) -> str:
    with pytest.raises(SpecError) as info:
        load(tmp_path, **changes)
    assert str(tmp_path / "spec.yaml") in str(info.value)
    return str(info.value)


def descriptors(spec) -> list[TrialDescriptor]:
    """Each trial's descriptor as the worker reads it: through the JSON of its Tune config."""
    common = dict(study=spec.name, study_dir="/tmp/x", cpus=1, gpus=spec.gpus, metric="best_selection_score",
                  pack=spec.pack_seeds)
    return [TrialDescriptor.of(json.loads(json.dumps({"trial": TrialDescriptor(
                cell=t.cell, task=t.task, variant=t.variant, overrides=t.overrides, hparams=t.hparams,
                seeds=t.seeds, points=t.points, **common).to_dict()})))
            for t in spec.grid_trials()]


def test_packing_seeds_and_learning_rates_keeps_every_run_and_its_key(tmp_path: Path) -> None:
    plain = load(tmp_path)
    packed = load(tmp_path, pack=["seeds", "optim.lr"])
    assert packed.resolved["pack"] == ["optim.lr"] and packed.resolved["pack_seeds"] is True
    assert "pack" not in plain.resolved and "pack_seeds" not in plain.resolved
    # 2 cells x 2 batch sizes; each trial trains 2 lrs x 3 seeds
    assert packed.n_trials() == len(packed.grid_trials()) == 4
    assert packed.n_runs() == plain.n_runs() == plain.n_trials() == 2 * 4 * 3
    assert "pack     ['optim.lr']" in packed.plan()
    runs_plain = {k for d in descriptors(plain) for _, k in d.run_keys}
    runs_packed = [k for d in descriptors(packed) for _, k in d.run_keys]
    assert sorted(runs_packed) == sorted(runs_plain)  # the same run keys: the same runs

    t = descriptors(packed)[0]
    assert t.packed
    assert [(m.seed, m.hparams["optim.lr"]) for m in t.members] == [(s, lr) for lr in (1e-3, 3e-4) for s in (0, 1, 2)]
    for m in t.members:
        assert m.key == run_key(t.study, t.cell, m.hparams, m.seed)
        assert t.member(m.key) == m
        cfg = t.run_config(m.key)
        assert (cfg.seed, cfg.optim.lr, cfg.optim.batch_size) == (m.seed, m.hparams["optim.lr"],
                                                                  m.hparams["optim.batch_size"])
        assert t.run_config(m.key) is cfg  # resolved once per trial
    from locattn.packed import check_packable

    check_packable([t.run_config(m.key) for m in t.members])


def test_a_descriptor_round_trips_through_json_and_applies_the_sampled_values(tmp_path: Path) -> None:
    t = descriptors(load(tmp_path, pack=["seeds", "optim.lr"]))[0]
    assert TrialDescriptor.of(json.loads(json.dumps({"trial": t.to_dict()}))) == t
    sampled = TrialDescriptor.of({"trial": t.to_dict(), "search": {"optim.clip": 2.5}})
    assert [m.hparams["optim.clip"] for m in sampled.members] == [2.5] * len(t.members)
    assert {m.key for m in sampled.members}.isdisjoint(m.key for m in t.members)  # other runs
    assert sampled.run_config(sampled.members[-1].key).optim.clip == 2.5
    old = {**t.to_dict(), "metric": "best_dev_score"}  # a trial file written before the rename
    assert TrialDescriptor.of({"trial": old}).metric == "best_selection_score"
    with pytest.raises(KeyError, match="cell"):
        TrialDescriptor.of({"trial": {k: v for k, v in t.to_dict().items() if k != "cell"}})


def test_learning_rates_alone_pack_one_trial_per_seed(tmp_path: Path) -> None:
    spec = load(tmp_path, pack=["optim.lr"])
    assert not spec.pack_seeds and spec.n_trials() == 2 * 2 * 3
    t = descriptors(spec)[0]
    assert t.packed and [s for s, _ in t.run_keys] == [0, 0]
    # an unpacked trial's descriptor is what it was before packs of hparams existed
    old = descriptors(load(tmp_path))[0].to_dict()
    assert "points" not in old and old["pack"] is False


def test_pack_refuses_unknown_axes_contradictions_and_search(tmp_path: Path) -> None:
    msg = refused(tmp_path, pack=["optim.batch_size"])
    assert "'optim.batch_size'" in msg and "may not differ" in msg and "['seeds', 'optim.lr']" in msg
    msg = refused(tmp_path, pack=["optim.clip"])
    assert "not an hparams axis" in msg
    msg = refused(tmp_path, pack="seeds")
    assert "expected a list" in msg
    msg = refused(tmp_path, pack=["optim.lr"], pack_seeds=True)
    assert "contradicts" in msg
    msg = refused(tmp_path, hparams={"optim.lr": [1e-3]}, pack=["optim.lr"],
                  search={"space": {"optim.clip": {"type": "uniform", "low": 1, "high": 5}}, "num_samples": 2})
    assert "only in grid studies" in msg
    msg = refused(tmp_path, grid={"task": ["raffel_add"], "variant": ["ffattn"]}, pack=["seeds"])
    assert "cannot be packed" in msg


def test_a_gpu_spec_packs_on_its_own_unless_told(tmp_path: Path) -> None:
    gpu = load(tmp_path, resources={"cpus": 1, "gpus": 1})
    assert gpu.pack_seeds and gpu.pack_axes == ("optim.lr",) and gpu.n_trials() == 4
    told = load(tmp_path, resources={"cpus": 1, "gpus": 1}, pack_seeds=False)
    assert not told.packed and told.n_trials() == 2 * 4 * 3
    # a model the packed trainer cannot train: a GPU spec then runs its trials unpacked
    ff = load(tmp_path, resources={"cpus": 1, "gpus": 1}, grid={"task": ["raffel_add"], "variant": ["ffattn"]},
              hparams={"optim.lr": [1e-3]})
    assert not ff.packed
    cpu = load(tmp_path)
    assert not cpu.packed


def test_a_trials_gpu_share_reaches_its_run_config_and_not_its_identity(tmp_path: Path) -> None:
    from locattn.config import run_identity

    shared = descriptors(load(tmp_path, resources={"cpus": 1, "gpus": 0.25}))[0]
    whole = descriptors(load(tmp_path, resources={"cpus": 1, "gpus": 2}))[0]
    cpu = descriptors(load(tmp_path, pack=["seeds", "optim.lr"]))[0]
    key = shared.members[0].key
    a, b, c = (d.run_config(key) for d in (shared, whole, cpu))
    assert (a.device, a.gpu_share) == ("cuda", 0.25)
    assert (b.device, b.gpu_share) == ("cuda", 1.0)  # one device per trial: at most all of it
    assert (c.device, c.gpu_share) == ("cpu", 1.0)
    assert run_identity(a) == run_identity(b) == run_identity(c)


def test_a_trial_s_train_path_travels_with_it_and_names_the_same_runs(tmp_path: Path) -> None:
    """``study launch/resume --train-path compiled`` reaches every run's RunConfig through the
    trial's JSON, and changes no run key or run identity; an eager trial's JSON is unchanged."""
    spec = load(tmp_path)
    t = spec.grid_trials()[0]
    made = {path: TrialDescriptor(cell=t.cell, task=t.task, variant=t.variant, overrides=t.overrides,
                                  hparams=t.hparams, seeds=t.seeds, points=t.points, study=spec.name,
                                  study_dir="/tmp/x", cpus=1, metric="best_selection_score",
                                  train_path=path)
            for path in ("eager", "compiled")}
    assert "train_path" not in made["eager"].to_dict()
    assert made["compiled"].to_dict()["train_path"] == "compiled"
    read = {path: TrialDescriptor.of(json.loads(json.dumps({"trial": d.to_dict()}))) for path, d in made.items()}
    assert read["compiled"].train_path == "compiled" and read["eager"].train_path == "eager"
    assert read["compiled"].run_keys == read["eager"].run_keys
    for _, key in read["eager"].run_keys:
        eager, compiled = read["eager"].run_config(key), read["compiled"].run_config(key)
        assert (eager.train_path, compiled.train_path) == ("eager", "compiled")
        assert identity_dict(compiled) == identity_dict(eager)
