"""Raffel & Ellis (2016) to the paper's protocol (REFERENCE §4; issue 18 item 2, issue 11 item 6):

- lengths drawn from the closed interval [T0, 1.1 T0];
- weights N(0, std = 1/sqrt(fan_in)), zero biases (``model.regressor_init=paper``; ``torch`` keeps
  PyTorch's default);
- ``eval.regression_protocol=paper``: the test set is scored after every epoch, the run stops at 100 %
  test accuracy, ``epochs_to_100`` counts test epochs, and the report picks a cell's learning rate
  by that test result; ``dev`` keeps the dev-selected protocol, labelled as such.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from locattn.config import make_run_config
from locattn.models import build_regressor
from locattn.models.regressor import FeedForwardAttention
from locattn.tasks import TaskConfig, load_task
from locattn.tasks import raffel
from locattn.variants import get_variant

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------- lengths


@pytest.mark.parametrize("t0, hi", [(50, 55), (100, 110), (1000, 1100), (25, 27), (33, 36),
                                    (20, 22)])
def test_length_range_is_the_closed_interval(t0: int, hi: int) -> None:
    # hand-computed: the largest integer <= 1.1 T0 (33 -> 36.3 -> 36; 25 -> 27.5 -> 27)
    assert raffel.length_range(TaskConfig(name="raffel_add", t0=t0)) == (t0, hi)


def test_sampled_lengths_reach_1_1_t0() -> None:
    task = load_task(TaskConfig(name="raffel_add", t0=50, dev_size=200, test_size=1000))
    _, lengths, _ = task.sample_batch(np.random.default_rng(0), 600)
    assert set(lengths.tolist()) == {50, 51, 52, 53, 54, 55}  # 55 = 1.1 * 50 included
    _, test_lengths, _ = task.splits["test"].tensors
    assert int(test_lengths.min()) == 50 and int(test_lengths.max()) == 55
    var = load_task(TaskConfig(name="raffel_mul", variable_length=True))
    assert var.lengths == (50, 10_000)


# ------------------------------------------------------------------------------ initialisation


def _linears(model: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


@pytest.mark.parametrize("variant", ["ffattn", "mean"])
def test_paper_init_per_layer(variant: str) -> None:
    cfg = get_variant(variant)
    assert cfg.regressor_init == "paper"  # the default
    torch.manual_seed(0)
    layers = _linears(build_regressor(cfg))
    want = {"inp": 2, "mid": 100, "out": 100} | ({"energy": 100} if variant == "ffattn" else {})
    assert {n: m.in_features for n, m in layers.items()} == want
    pooled = []
    for name, m in layers.items():
        assert torch.count_nonzero(m.bias) == 0, name
        w = m.weight.detach().double().flatten()
        z = w * math.sqrt(m.in_features)  # N(0, 1) under std = 1/sqrt(fan_in)
        n = z.numel()
        # the sample std of n normal draws has relative error ~ 1/sqrt(2n): allow 4 of those
        assert abs(float(z.std()) - 1.0) < 4 / math.sqrt(2 * n) + 1e-9, (name, float(z.std()))
        assert abs(float(z.mean())) < 4 / math.sqrt(n), name
        pooled.append(z)
    z = torch.cat(pooled)
    # Gaussian, not uniform: ~4.55 % of N(0, 1) lies beyond 2; a uniform of std 1 has none there
    beyond = float((z.abs() > 2).double().mean())
    assert 0.035 < beyond < 0.057, beyond


def test_variance_reading_would_fail_the_std_check() -> None:
    # Reading 1/sqrt(N) as the variance would give std N**-0.25: 0.316 for N = 100, not 0.1.
    torch.manual_seed(0)
    mid = build_regressor(get_variant("ffattn")).mid.weight.detach()
    assert abs(float(mid.std()) - 0.1) < 0.005
    assert abs(float(mid.std()) - 100 ** -0.25) > 0.2


def test_torch_init_is_the_old_construction() -> None:
    cfg = dataclasses.replace(get_variant("ffattn"), regressor_init="torch")
    torch.manual_seed(3)
    built = build_regressor(cfg).state_dict()
    torch.manual_seed(3)
    plain = FeedForwardAttention(input_channels=2, hidden_size=100).state_dict()
    assert built.keys() == plain.keys()
    assert all(torch.equal(built[k], plain[k]) for k in built)
    assert torch.count_nonzero(built["mid.bias"]) > 0  # PyTorch's biases are not zero


def test_regressor_init_is_refused_for_seq2seq() -> None:
    with pytest.raises(ValueError, match=r"regressor_init='torch' applies only to "
                                         r"kind='regressor' \(got kind='seq2seq'\)"):
        make_run_config(task="copy", variant="onestep",
                        overrides={"model.regressor_init": "torch"})
    with pytest.raises(ValueError, match=r"model.regressor_init='xavier'; valid: \['paper', 'torch'\]"):
        make_run_config(task="raffel_add", variant="ffattn",
                        overrides={"model.regressor_init": "xavier"})


# ------------------------------------------------------------------------------------ protocol


def _cfg(protocol: str, **over):
    # T0 = 20 and held-out sets of 30: reaches 100 % within 8 short epochs (seed 0: test at
    # epoch 7, dev at epoch 5), in a few seconds
    base = {"task.t0": 20, "optim.batch_size": 50, "optim.updates_per_epoch": 60,
            "optim.epochs": 8, "optim.lr": 1e-2, "task.dev_size": 30, "task.test_size": 30,
            "num_threads": 1, "eval.regression_protocol": protocol}
    return make_run_config(task="raffel_add", variant="ffattn", seed=0, overrides={**base, **over})


def test_protocol_default_and_bad_value() -> None:
    assert make_run_config(task="raffel_add", variant="ffattn").eval.regression_protocol == "paper"
    with pytest.raises(ValueError, match=r"eval.regression_protocol='test'; valid: \['paper', 'dev'\]"):
        _cfg("test")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same seed and training under both protocols (a few seconds each)."""
    from locattn.train import train

    base = tmp_path_factory.mktemp("raffel")
    return {p: train(_cfg(p), base / p) for p in ("paper", "dev")}


def test_paper_protocol_scores_test_every_epoch_and_stops_on_it(two_runs) -> None:
    r = two_runs["paper"]
    assert r.dev_scoring == "test_accuracy"
    for h in r.history:
        assert set(h) == {"epoch", "train_loss", "test_loss", "test_score", "lr", "epoch_seconds"}
    scores = [h["test_score"] for h in r.history]
    first = next((i + 1 for i, s in enumerate(scores) if s >= 1.0), None)
    assert first is not None, scores  # this configuration reaches 100 % within 8 epochs
    assert r.epochs_to_100 == first == r.epochs_run and r.stop_reason == "reached_100"
    # the reported model is the last epoch's: its test accuracy is the last epoch's score
    assert r.best_epoch == r.epochs_run and r.best_selection_score == scores[-1]
    assert r.test["test"]["accuracy"] == scores[-1] == 1.0
    assert r.final_metrics()["epochs_to_100"] == first


def test_dev_protocol_reads_dev(two_runs) -> None:
    r, p = two_runs["dev"], two_runs["paper"]
    assert r.dev_scoring == "accuracy"
    for h in r.history:
        assert set(h) == {"epoch", "train_loss", "dev_loss", "dev_score", "lr", "epoch_seconds"}
    scores = [h["dev_score"] for h in r.history]
    first = next((i + 1 for i, s in enumerate(scores) if s >= 1.0), None)
    assert r.epochs_to_100 == first
    # training does not depend on the protocol: the same losses epoch for epoch
    n = min(len(r.history), len(p.history))
    assert [h["train_loss"] for h in r.history[:n]] == [h["train_loss"] for h in p.history[:n]]


def test_the_regression_runs_record_their_per_epoch_test_metrics() -> None:
    from record import schema

    assert {"test_loss", "test_score"} <= set(schema.EPOCH_METRICS)


# ------------------------------------------------------------------------------------ specs


@pytest.mark.parametrize("stem, dev_profiles", [("raffel_table1", ("quick_dev", "paper_dev")),
                                                 ("raffel_variable", ("paper_dev",))])
def test_specs_default_to_the_paper_protocol_and_name_the_dev_one(stem, dev_profiles) -> None:
    from study.spec import load_spec

    path = ROOT / "ablations" / f"{stem}.yaml"

    def cfgs(profile):
        spec = load_spec(path, profile)
        hp = spec.hparam_points()[0]
        return spec, [make_run_config(task=c.task, variant=c.variant,
                                      overrides={**c.overrides, **hp}) for c in spec.cells]

    for profile in ("smoke", "quick", "paper"):
        _, cs = cfgs(profile)
        assert {c.eval.regression_protocol for c in cs} == {"paper"}, profile
        assert {c.model.regressor_init for c in cs} == {"paper"}
    for profile in dev_profiles:
        spec, cs = cfgs(profile)
        twin, twin_cs = cfgs(profile.removesuffix("_dev"))
        assert {c.eval.regression_protocol for c in cs} == {"dev"}, profile
        # the same cells, learning rates and budget as its twin; only the protocol differs
        assert [c.cell for c in spec.cells] == [c.cell for c in twin.cells]
        assert spec.hparams == twin.hparams
        assert [c.optim.epochs for c in cs] == [c.optim.epochs for c in twin_cs]


# ------------------------------------------------------------------------------------ reports


def _runs(protocol: str | None):
    """T0 = 50: lr 0.001 reaches 100 % in 3 epochs; lr 0.003 never does but ends at 99 % and has
    the higher dev score. T0 = 100: only lr 0.003 ran, 5 epochs."""
    from reports.synth import SynthRun

    extra = {} if protocol is None else {"eval.regression_protocol": protocol}
    runs = []
    for lr, m in ((0.001, {"best_selection_score": 0.95, "epochs_to_100": 3, "test.test.accuracy": 1.0}),
                  (0.003, {"best_selection_score": 0.99, "test.test.accuracy": 0.99})):
        runs.append(SynthRun(task="raffel_add", variant="ffattn", seed=0, n_seeds=1,
                             hparams={"optim.lr": lr}, params={"task.t0": "50", **extra},
                             metrics=m))
    runs.append(SynthRun(task="raffel_add", variant="ffattn", seed=0, n_seeds=1,
                         hparams={"optim.lr": 0.003}, params={"task.t0": "100", **extra},
                         metrics={"best_selection_score": 1.0, "epochs_to_100": 5,
                                  "test.test.accuracy": 1.0}))
    return runs


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """One real MLflow SQLite store with a study per protocol (and one that mixes them)."""
    from reports.synth import write_with_client

    d = tmp_path_factory.mktemp("raffel_reports")
    for name, runs in (("paper", _runs("paper")), ("dev", _runs("dev")), ("legacy", _runs(None)),
                       ("mixed", _runs("paper")[:2] + _runs("dev")[2:])):
        write_with_client(f"sqlite:///{d / 'mlflow.db'}", name, runs, tables=["raffel_table1"])
    return d


@pytest.mark.parametrize("study, cell, greyed, lr, words", [
    ("paper", 3.0, False, 0.001, ("as the paper", "selected on test")),
    ("dev", math.inf, True, 0.003, ("Dev-selected protocol, not the paper's",
                                    "100 % dev accuracy")),
    ("legacy", math.inf, True, 0.003, ("Dev-selected protocol, not the paper's",)),  # older runs
])
def test_report_selects_lr_by_the_recorded_protocol(store, tmp_path, study, cell, greyed, lr,
                                                    words) -> None:
    import json

    from reports.build import build_reports, collect

    (res,) = collect(store, study, ["raffel_table1"]).results
    c = res.cell("ffattn", "raffel_add:t0=50")
    assert c.median == cell and c.greyed is greyed
    if greyed:
        assert c.accuracy_median == pytest.approx(99.0)
    assert json.loads(c.hparams[0]) == {"optim.lr": lr}
    assert res.cell("ffattn", "raffel_add:t0=100").median == 5.0
    assert res.selection == ("test" if study == "paper" else "dev")
    (md,) = build_reports(store, study, ["raffel_table1"], formats=("md",), out_dir=tmp_path)
    text = md.read_text()
    for w in words:
        assert w in text, w
    how = ("by the test result, as the paper" if study == "paper"
           else "by the best median best_selection_score")
    assert how in text


@pytest.mark.parametrize("protocol, lr, acc, how", [
    # paper: lr 0.001 reached 100 % on test; dev would pick 0.003 for its higher selection score
    ("paper", 0.001, 100.0, "chosen per cell by the test result, as the paper"),
    ("dev", 0.003, 99.0, "chosen per cell by the best median best_selection_score over seeds, never by test"),
])
def test_variable_length_report_names_how_it_chose_the_learning_rate(tmp_path, protocol, lr, acc, how) -> None:
    # the table said "never by test" under the paper's protocol, whose selection score is test
    import json

    from reports.build import build_reports, collect
    from reports.synth import SynthRun, write_with_client

    params = {"task.variable_length": "True", "eval.regression_protocol": protocol}
    runs = [SynthRun(task="raffel_add", variant="ffattn", seed=0, n_seeds=1, hparams={"optim.lr": 0.001},
                     params=params, metrics={"best_selection_score": 0.95, "epochs_to_100": 3,
                                             "test.test.accuracy": 1.0}),
            SynthRun(task="raffel_add", variant="ffattn", seed=0, n_seeds=1, hparams={"optim.lr": 0.003},
                     params=params, metrics={"best_selection_score": 0.99, "test.test.accuracy": 0.99})]
    write_with_client(f"sqlite:///{tmp_path / 'mlflow.db'}", "v", runs, tables=["raffel_variable"])
    (res,) = collect(tmp_path, "v", ["raffel_variable"]).results
    c = res.cell("ffattn", "raffel_add:variable")
    assert json.loads(c.hparams[0]) == {"optim.lr": lr} and c.median == pytest.approx(acc)
    (md,) = build_reports(tmp_path, "v", ["raffel_variable"], formats=("md",), out_dir=tmp_path / "out")
    text = md.read_text()
    assert f"Hyperparameters ({how}" in text
    assert ("selected on test" in text) == (protocol == "paper")


def test_report_refuses_mixed_protocols(store) -> None:
    from reports.build import collect
    from reports.runset import ReportsError

    with pytest.raises(ReportsError, match=r"raffel_table1: the runs mix eval.regression_protocol "
                                           r"values \['dev', 'paper'\]"):
        collect(store, "mixed", ["raffel_table1"])


@pytest.mark.parametrize("study, acc", [("paper", 100.0), ("dev", 99.0)])
def test_raffel_figure_plots_the_chosen_learning_rate(store, study, acc) -> None:
    from reports.figures import raffel_frame
    from reports.runset import read_runs

    rs = read_runs(f"sqlite:///{store / 'mlflow.db'}", study,
                   metric_keys=["best_selection_score", "epochs_to_100"], metric_prefixes=["test."],
                   param_keys=["task.t0", "eval.regression_protocol"])
    df = raffel_frame(rs)
    t50 = df.filter(df["t0"] == 50.0)
    assert t50.height == 1 and t50["accuracy"].to_list() == pytest.approx([acc])
    assert df.filter(df["t0"] == 100.0)["accuracy"].to_list() == pytest.approx([100.0])
