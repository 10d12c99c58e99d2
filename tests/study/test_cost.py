"""The cost model (study/cost/) on hand-made calibration rows: shapes, rates, fallbacks, plan,
and the ETA's arithmetic."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from locattn.config import make_run_config
from study import cost
from study.plan import slices
from study.cost import pricing as runcost
from study.cost import (Calibration, CellCost, Rate, RunCost, TrialProgress, blend_ratio, eta_seconds,
                        format_eta, run_cost, run_shape, trial_left, variant_family)
from study.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]


def rate(task: str, family: str, train: float = 1.0, dev: float = 0.5, test: float = 2.0,
         startup: float = 3.0, device: str = "cpu") -> Rate:
    return Rate(device=device, task=task, family=family, train=train, dev=dev, test=test, startup=startup)


CAL = Calibration(rates=(rate("copy", "location"), rate("copy", "content", train=3.0, startup=5.0),
                         rate("scan", "location", train=2.0), rate("raffel_add", "feedforward", train=0.01)),
                  study_startup=10.0)


def cfg(task: str, variant: str, **overrides):
    return make_run_config(task=task, variant=variant, overrides=overrides)


def test_variant_family_keys() -> None:
    assert variant_family(cfg("copy", "onestep").model) == "location"
    assert variant_family(cfg("copy", "mix_onestep").model) == "location+mix"
    assert variant_family(cfg("copy", "content").model) == "content"
    assert variant_family(cfg("copy", "birope").model) == "positional"
    assert variant_family(cfg("lookup", "dubois_mix").model) == "gru_residual/location+mix"
    assert variant_family(cfg("raffel_add", "ffattn").model) == "feedforward"


def test_shape_counts_tokens_of_each_split() -> None:
    # Copy of length k: source k and target k tokens; 100 train examples of length 5 = 1,000 tokens.
    s = run_shape(cfg("copy", "onestep", **{"task.train_size": 100, "task.dev_size": 10,
                                            "task.test_size": 20, "task.train_lengths": [5, 5],
                                            "task.dev_lengths": [7, 7], "task.test_lengths": [10]}))
    assert s.train == pytest.approx(1.0)
    assert s.dev == pytest.approx(10 * 14 / 1000)
    assert s.test == pytest.approx((20 * 10 + 20 * 20) / 1000)  # iid (length 5) + len10
    assert not s.assumed


def test_shape_of_a_huge_generated_split_is_sampled_and_scaled() -> None:
    small = run_shape(cfg("copy", "onestep", **{"task.train_size": 20_000, "task.train_lengths": [5, 5]}))
    huge = run_shape(cfg("copy", "onestep", **{"task.train_size": 10**9, "task.train_lengths": [5, 5]}))
    assert small.train == pytest.approx(20_000 * 10 / 1000)
    assert huge.train == pytest.approx(10**9 * 10 / 1000)


def test_shape_raffel_follows_t0_and_updates() -> None:
    small = run_shape(cfg("raffel_add", "ffattn", **{"task.t0": 50}))
    big = run_shape(cfg("raffel_add", "ffattn", **{"task.t0": 500}))
    # 1,000 updates x batch 100 sequences of mean length (50 + 55) / 2 per epoch
    assert small.train == pytest.approx(1000 * 100 * 52.5 / 1000)
    assert big.train == pytest.approx(1000 * 100 * 525 / 1000)
    assert small.dev == pytest.approx(1000 * 52.5 / 1000)  # paper protocol: the test set each epoch


def test_variable_length_raffel_is_priced_by_its_own_rows() -> None:
    # lengths 50-10000 cost 2-3x per token what T0 = 50 does: one table row must not price both
    var = cfg("raffel_add", "ffattn", **{"task.variable_length": True, "optim.epochs": 1})
    fixed = cfg("raffel_add", "ffattn", **{"optim.epochs": 1})
    assert cost.cost_task(var.task) == "raffel_add@variable"
    assert cost.cost_task(fixed.task) == "raffel_add"
    assert cost.cost_task(cfg("copy", "onestep").task) == "copy"
    # without a row of its own: the family's median, and the plan says so (not "measured")
    assert run_cost(var, CAL).how == "family"
    assert run_cost(fixed, CAL).how == "measured"
    cal = Calibration(rates=CAL.rates + (rate("raffel_add@variable", "feedforward", train=0.03),))
    rc = run_cost(var, cal)
    assert rc.how == "measured"
    assert rc.epoch == pytest.approx(run_shape(var).train * 0.03 + run_shape(var).dev * 0.5)
    assert run_cost(fixed, cal).epoch == pytest.approx(run_cost(fixed, CAL).epoch)


def test_a_train_path_is_priced_by_its_own_rows_else_by_eager_ones_and_says_so(tmp_path: Path) -> None:
    fused = replace(rate("raffel_add", "feedforward", train=0.004), path="fused")
    cal = Calibration(rates=CAL.rates + (fused,))
    eager_run = cfg("raffel_add", "ffattn", **{"optim.epochs": 1})
    fused_run = replace(eager_run, train_path="fused")
    assert run_cost(eager_run, cal).epoch == pytest.approx(run_cost(eager_run, CAL).epoch)  # eager: eager rows
    rc = run_cost(fused_run, cal)
    assert rc.how == "measured" and not rc.assumed
    assert rc.epoch == pytest.approx(run_shape(fused_run).train * 0.004 + run_shape(fused_run).dev * 0.5)
    mean_run = replace(cfg("raffel_add", "mean", **{"optim.epochs": 1}), train_path="fused")
    r, how = cal.rate("cpu", "raffel_add", "mean", path="fused")  # the task has a fused row: its median
    assert how == "task" and r.path == "fused" and r.train == pytest.approx(0.004)
    assert run_cost(mean_run, cal).epoch == pytest.approx(run_cost(fused_run, cal).epoch)
    # a path the table has no row of for this task or family: the eager rows, and an ASSUMED line
    compiled = replace(cfg("copy", "mono", **{"optim.epochs": 1}), train_path="compiled")
    rc = run_cost(compiled, cal)
    eager = run_cost(cfg("copy", "mono", **{"optim.epochs": 1}), cal)
    assert rc.how == "measured" and rc.epoch == pytest.approx(eager.epoch)
    assert rc.assumed.startswith("--train-path compiled priced at eager rates (no compiled row for task copy); "
                                 "--train-path compiled: +")
    assert rc.startup == pytest.approx(eager.startup + runcost.COMPILE_LOAD_CPU_SECONDS)  # its graph's load
    # ... unless whole runs of its task's shapes and its graph were measured: eager's rows times the
    # measured compiled/eager epoch ratio (study.cost.pricing.COMPILED_WHOLE_RUNS)
    onestep = replace(cfg("reverse_copy", "onestep_no_step2", **{"optim.epochs": 1}), train_path="compiled")
    ratio = runcost.compiled_whole_run(onestep).epoch_ratio  # Copy's, at the largest size measured
    assert ratio == max(r.epoch_ratio for r in runcost.COMPILED_WHOLE_RUNS[("copy", "onestep")]
                        if r.train_size == max(x.train_size for x in runcost.COMPILED_WHOLE_RUNS[("copy", "onestep")]))
    eager = run_cost(cfg("reverse_copy", "onestep_no_step2", **{"optim.epochs": 1}), cal)
    assert run_cost(onestep, cal).epoch == pytest.approx(eager.epoch * ratio)
    assert "times the compiled/eager epoch ratio" in run_cost(onestep, cal).assumed
    # another task of a family with fused rows: eager rows too (a path's gain depends on the lengths)
    var = replace(cfg("raffel_add", "ffattn", **{"task.variable_length": True, "optim.epochs": 1}), train_path="fused")
    assert cal.priced_path("cpu", "raffel_add@variable", "feedforward", "fused") == "eager"
    assert "no fused row for task raffel_add@variable" in run_cost(var, cal).assumed
    # rows of two paths merge side by side, and the path survives the JSON
    again = cost.merge_rates(cal, [replace(fused, train=0.005)], {"command": "x"})
    assert sorted(r.train for r in again.rates if r.task == "raffel_add") == [0.005, 0.01]
    assert again.meta["cpu/fused"] == {"command": "x"}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cost.calibration_to_dict(again)))
    assert sorted(cost.load_calibration(path).rates, key=repr) == sorted(again.rates, key=repr)
    assert [row.get("path") for row in cost.calibration_to_dict(again)["rates"] if row["task"] == "raffel_add"] == [None, "fused"]


def test_dry_run_prices_the_launch_train_path() -> None:
    spec = load_spec(ROOT / "ablations" / "raffel_variable.yaml", profile="quick")
    eager = spec.plan(2)
    fused = spec.plan(2, "fused")
    hours = [float(text.split("CPU time = ")[1].split(" CPU-hours")[0]) for text in (eager, fused)]
    cost_lines = [[ln for ln in text.splitlines() if ln.startswith("cost")] for text in (eager, fused)]
    assert all("--train-path fused" in ln for ln in cost_lines[1])
    assert not any("--train-path" in ln for ln in cost_lines[0])
    assert hours[1] < hours[0] / 1.5, hours  # the committed table's fused rows (bench_cost --train-path fused)
    # an eager plan names the measured saving; a plan already on it, or one no fused row prices, does not
    faster = [ln for ln in eager.splitlines() if ln.startswith("faster")]
    assert len(faster) == 1 and faster[0].startswith("faster   --train-path fused: ~"), faster
    assert not any(ln.startswith("faster") for ln in fused.splitlines())
    fixed = load_spec(ROOT / "ablations" / "raffel_table1.yaml", profile="quick").plan(2)
    copy = load_spec(ROOT / "ablations" / "rc_table2.yaml", profile="smoke").plan(2)
    assert "faster" not in fixed and "faster" not in copy


def test_shape_cfq_without_files_uses_official_sizes_and_says_so() -> None:
    s = run_shape(cfg("cfq", "content", **{"task.data_dir": "/nonexistent/cfq"}))
    assert s.train == pytest.approx(100_654 * cost.CFQ_ASSUMED_TOKENS / 1000)
    assert "assumed" in s.assumed


def test_run_cost_arithmetic() -> None:
    c = cfg("copy", "onestep", **{"task.train_size": 100, "task.dev_size": 10, "task.test_size": 20,
                                  "task.train_lengths": [5, 5], "task.dev_lengths": [7, 7],
                                  "task.test_lengths": [10], "optim.epochs": 3})
    rc = run_cost(c, CAL)
    assert rc.how == "measured"
    assert rc.epoch == pytest.approx(1.0 * 1.0 + 0.14 * 0.5)
    assert rc.test == pytest.approx(0.6 * 2.0)
    assert rc.total == pytest.approx(3.0 + 3 * 1.07 + 1.2)
    assert rc.left(1) == pytest.approx(2 * 1.07 + 1.2)
    assert rc.left(0, started=False) == pytest.approx(rc.total)


def test_fallbacks_task_then_family_then_flat_then_unmeasured() -> None:
    # a family the task lacks: the task's median over its families (location 1.0, content 3.0)
    r, how = CAL.rate("cpu", "copy", "positional")
    assert how == "task" and r.train == pytest.approx(2.0) and r.startup == pytest.approx(4.0)
    # a task with no row: the family's median over tasks (copy 1.0, scan 2.0)
    r, how = CAL.rate("cpu", "lookup", "location")
    assert how == "family" and r.train == pytest.approx(1.5)
    assert CAL.rate("cpu", "dedupe", "positional") == (None, "unmeasured")
    flat = run_cost(cfg("dedupe", "birope", **{"optim.epochs": 2}), CAL, "cpu", 1.3)
    assert flat.how == "flat" and flat.epoch == pytest.approx(12 * 1.3)
    assert CAL.rate("h100", "copy", "location") == (None, "unmeasured")
    assert run_cost(cfg("copy", "onestep"), CAL, "h100") is None


def test_calibration_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cost.calibration_to_dict(CAL)))
    back = cost.load_calibration(path)
    assert back.rates == tuple(sorted(CAL.rates, key=lambda r: (r.device, r.task, r.family)))
    assert back.study_startup == 10.0
    assert cost.load_calibration(tmp_path / "missing.json").rates == ()


def test_study_cost_weights_cells_and_plan_says_unmeasured_gpu(tmp_path: Path) -> None:
    body = {"name": "t", "grid": {"task": ["copy", "scan"], "variant": ["onestep"]}, "seeds": 2,
            "overrides": {"optim.epochs": 2, "task.train_size": 100, "task.dev_size": 50,
                          "task.test_size": 10, "task.test_limit": 10},
            "profiles": {"smoke": {}}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body))
    spec = load_spec(path, "smoke")
    cells = cost.cell_costs(spec, CAL)
    assert [c.runs for c in cells] == [2, 2]
    copy, scan = (c.cost for c in cells)
    assert scan.epoch > 10 * copy.epoch  # SCAN trains ~16k examples at twice the rate: not a flat cost
    assert cost.study_seconds(cells) == pytest.approx(2 * copy.total + 2 * scan.total)
    assert cost.wall_seconds(cells, 2, 10.0) == pytest.approx(10.0 + max(cost.study_seconds(cells) / 2,
                                                                           scan.total))
    lines = cost.plan_lines(spec, 2, CAL)
    total = cost.study_seconds(cells)
    assert lines[0].startswith("cost     ~") and f"= {total / 3600:,.1f} CPU-hours" in lines[0]
    assert any(ln.startswith("cost     H100: unmeasured") for ln in lines)


def test_committed_calibration_prices_every_paper_profile() -> None:
    cal = cost.load_calibration()
    assert "cpu" in cal.devices()
    for path in sorted((ROOT / "ablations").glob("*.yaml")):
        spec = load_spec(path, "paper")
        cells = cost.cell_costs(spec, cal)
        assert {c.cost.how for c in cells} == {"measured"}, path.name
        assert cost.study_seconds(cells) > 0


# ---------------------------------------------------------------------------- ETA

CHEAP = RunCost(startup=2.0, epoch=1.0, epochs=4, test=1.0, how="measured")
DEAR = RunCost(startup=2.0, epoch=10.0, epochs=4, test=5.0, how="measured")


def test_trial_left() -> None:
    assert trial_left(TrialProgress(cost=CHEAP)) == pytest.approx(2 + 4 + 1)
    assert trial_left(TrialProgress(cost=CHEAP, started=True, epochs_done=3)) == pytest.approx(1 + 1)
    assert trial_left(TrialProgress(cost=CHEAP, finished=True, epochs_done=2)) == 0.0
    # a search point training 2 seeds in turn, 5 of its 8 epochs done: 3 epochs, 1 test left
    assert trial_left(TrialProgress(cost=CHEAP, runs=2, started=True, epochs_done=5)) == pytest.approx(3 + 1)


def test_eta_weights_trials_by_cost() -> None:
    # Same number of trials left, but the dear ones cost 10x per epoch: the ETA says so.
    cheap_left = [TrialProgress(cost=CHEAP) for _ in range(4)]
    dear_left = [TrialProgress(cost=DEAR) for _ in range(4)]
    assert eta_seconds(cheap_left, slots=2) == pytest.approx(4 * 7 / 2)
    assert eta_seconds(dear_left, slots=2) == pytest.approx(4 * 47 / 2)
    # one long trial bounds the wall time from below, however many slots
    assert eta_seconds([TrialProgress(cost=DEAR), TrialProgress(cost=CHEAP)], slots=8) == pytest.approx(47)
    # nothing left: 0, and printed as done, never "ETA ?"
    assert eta_seconds([TrialProgress(cost=DEAR, finished=True)], slots=2) == 0.0
    assert format_eta(0.0, done=True) == "done"
    assert format_eta(float("nan"), done=False) == "ETA 0m00s"
    assert format_eta(3725, done=False) == "ETA 1h02m05s"


def test_blend_ratio_moves_from_model_to_measurement() -> None:
    assert blend_ratio(0.0, 0.0, 0) == 1.0
    assert blend_ratio(20.0, 10.0, 4, prior_epochs=4) == pytest.approx((4 + 4 * 2) / 8)
    assert blend_ratio(2000.0, 1000.0, 400, prior_epochs=4) == pytest.approx(2.0, rel=0.01)
    assert eta_seconds([TrialProgress(cost=CHEAP)], 1, ratio=1.5) == pytest.approx(1.5 * 7)
    assert CellCost(cell="c", runs=1, cost=CHEAP).cost.total == 2 + 4 + 1


# ---------------------------------------------------------------------------- slices


@pytest.mark.parametrize("text,seconds", [("9m", 540), ("1h30m", 5400), ("90s", 90), ("2.5h", 9000),
                                          ("600", 600), ("10:00", 600), ("1:00:00", 3600),
                                          ("1-02:00:00", 93600)])
def test_parse_time_limit(text: str, seconds: float) -> None:
    assert slices.parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["", "9x", "0", "-5m", "m9", "1:2:3:4"])
def test_parse_time_limit_refuses_with_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected a positive duration such as 9m"):
        slices.parse_time_limit(text)


def test_stop_after_leaves_a_margin() -> None:
    assert slices.stop_after(540) == pytest.approx(540 - 54)
    assert slices.stop_after(3600) == pytest.approx(3600 - 60)
    assert slices.stop_after(20) == pytest.approx(18)


def test_study_eta_counts_unseen_trials_and_blends_measured_epochs() -> None:
    eta = cost.StudyEta(costs={"cheap": CHEAP, "dear": DEAR}, expected={"cheap": 2, "dear": 1}, slots=1)
    # nothing created yet: every expected trial, start-up included
    assert eta.left([]) == pytest.approx(2 * 7 + 47)
    # one cheap trial finished, the dear one half-way: the other cheap one is still to come
    seen = [("cheap", 4, True, True), ("dear", 2, True, False)]
    assert eta.left(seen) == pytest.approx(7 + 2 * 10 + 5)
    assert eta.eta(seen) == pytest.approx(eta.left(seen))  # no epoch measured: the model as is
    for _ in range(4):
        eta.observe("dear", 20.0)  # twice the model's 10 s
    assert eta.ratio() == pytest.approx(1.5)
    assert eta.eta(seen) == pytest.approx(1.5 * eta.left(seen))
    assert eta.eta([("cheap", 4, True, True), ("cheap", 4, True, True), ("dear", 4, True, True)]) == 0.0


def test_study_eta_prices_the_study_train_path() -> None:
    from study.trial.descriptor import TrialDescriptor

    fused = replace(rate("raffel_add@variable", "feedforward", train=0.001), path="fused")
    cal = Calibration(rates=(rate("raffel_add@variable", "feedforward", train=0.002), fused))
    overrides = {"task.variable_length": True, "optim.epochs": 2}

    def trial(path: str) -> TrialDescriptor:
        return TrialDescriptor(study="s", cell="task=raffel_add,variant=ffattn", task="raffel_add",
                               variant="ffattn", overrides=overrides, hparams={}, seeds=(0,),
                               study_dir="/nonexistent", cpus=1, gpus=0, metric="m",
                               train_path=path)

    (e,), (f,) = (list(cost.study_eta([trial(p)], 1, cal).costs.values()) for p in ("eager", "fused"))
    shape = run_shape(cfg("raffel_add", "ffattn", **overrides))
    assert e.epoch == pytest.approx(shape.train * 0.002 + shape.dev * 0.5)
    assert f.epoch == pytest.approx(shape.train * 0.001 + shape.dev * 0.5)


def test_study_eta_blends_start_ups_too() -> None:
    eta = cost.StudyEta(costs={"cheap": CHEAP}, expected={"cheap": 1}, slots=1)
    eta.observe("cheap", 6.0, startup=True)  # the model says 2 s of start-up
    eta.observe("cheap", 3.0)  # and 1 s per epoch
    assert eta.ratio() == pytest.approx((4 + 9 / 3 * 2) / 6)


# ---------------------------------------------------------------------------- GPU rows (synthetic)

# Hand-made GPU rows: NOT measurements (no GPU has run). Rates are one run's share of a pack.
H100 = rate("copy", "location", train=0.8, dev=0.4, test=1.6, startup=0.8, device="h100")
GPU = Calibration(rates=CAL.rates + tuple(replace(H100, pack=k, train=0.8 / k, dev=0.4 / k, test=1.6 / k,
                                                  startup=0.8 / k) for k in (1, 8, 64)),
                  study_startup=10.0)


def gpu_spec(tmp_path: Path, **changes):
    body = {"name": "g", "grid": {"task": ["copy"], "variant": ["onestep"]}, "seeds": 4,
            "hparams": {"optim.lr": [1e-3, 3e-4]},
            "overrides": {"optim.epochs": 2, "task.train_size": 100, "task.dev_size": 50,
                          "task.test_size": 10, "task.test_limit": 10, "optim.train_step": "graphed"},
            "resources": {"cpus": 1, "gpus": 1}, "profiles": {"smoke": {}}, **changes}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body))
    return load_spec(path, "smoke")


def test_a_gpu_row_prices_graphed_packs_per_seed_epoch(tmp_path: Path) -> None:
    # a trial packs 4 seeds x 2 lrs = 8 runs on a whole GPU: the rows of packs of 8
    spec = gpu_spec(tmp_path)
    assert cost.gpu_pack(spec) == 8
    cells = cost.cell_costs(spec, GPU, "h100")
    (cell,) = cells
    one = run_cost(make_run_config(task="copy", variant="onestep", overrides=spec.cells[0].overrides), GPU, "h100",
                   pack=8)
    assert cell.runs == 8 and cell.cost == one and one.how == "measured"
    shape = run_shape(make_run_config(task="copy", variant="onestep", overrides=spec.cells[0].overrides))
    assert one.epoch == pytest.approx((shape.train * 0.8 + shape.dev * 0.4) / 8)
    assert one.startup == pytest.approx(0.1)
    total = 8 * one.total
    lines = cost.plan_lines(spec, 2, GPU)
    gpu_line = next(ln for ln in lines if "GPU time" in ln)
    assert total < 120 and f"~{total:.0f} s GPU time (one NVIDIA H100; " in gpu_line
    assert "per seed-epoch of graphed packs of 8 runs" in gpu_line and "were the runs" not in gpu_line
    # a quarter GPU per trial: four packs of 8 share the device -> the rows of 8 (none of 32)
    assert cost.gpu_pack(gpu_spec(tmp_path, resources={"cpus": 1, "gpus": 0.25})) == 32
    # a lone seed per trial on a whole GPU: only the K = 1 row applies
    solo = gpu_spec(tmp_path, seeds=1, hparams={}, pack_seeds=False)
    assert cost.gpu_pack(solo) == 1
    assert cost.cell_costs(solo, GPU, "h100") is None  # not packed: GPU trials not calibrated
    # a CPU spec: priced as graphed packs of the largest K measured, and says so
    cpu = gpu_spec(tmp_path, resources={"cpus": 1}, overrides={"optim.epochs": 2, "task.train_size": 100})
    assert cost.cell_costs(cpu, GPU, "h100")[0].cost.epoch == pytest.approx(
        run_cost(make_run_config(task="copy", variant="onestep", overrides=cpu.cells[0].overrides), GPU, "h100",
                 pack=64).epoch)
    assert any("graphed packs of 64 runs, were the runs so trained" in ln for ln in cost.plan_lines(cpu, 2, GPU))


def test_a_gpu_with_rows_is_unmeasured_where_no_graphed_pack_trains(tmp_path: Path) -> None:
    eager = gpu_spec(tmp_path, overrides={"optim.epochs": 2, "task.train_size": 100})
    assert cost.cell_costs(eager, GPU, "h100") is None
    assert any(ln.startswith("cost     H100: unmeasured (one NVIDIA H100: GPU trials that are not graphed packs")
               for ln in cost.plan_lines(eager, 2, GPU))
    ff = gpu_spec(tmp_path, grid={"task": ["raffel_add"], "variant": ["ffattn"]}, hparams={}, resources={"cpus": 1})
    assert any("raffel_add/ffattn cannot train as a graphed pack" in ln for ln in cost.plan_lines(ff, 2, GPU))
    # without GPU rows, as before
    assert any(ln.startswith("cost     H100: unmeasured (one NVIDIA H100: no calibration row")
               for ln in cost.plan_lines(gpu_spec(tmp_path), 2, CAL))


def test_gpu_rows_merge_into_the_table_and_round_trip(tmp_path: Path) -> None:
    assert cost.device_key("NVIDIA H100 80GB HBM3") == "h100"
    assert cost.device_key("NVIDIA A100-SXM4-40GB") == "a100"
    new = rate("copy", "location", train=0.5, device="h100")
    merged = cost.merge_rates(GPU, [new], {"device": "NVIDIA H100 80GB HBM3"})
    assert [r for r in merged.rates if r.device == "h100" and r.pack == 1] == [new]  # replaced
    assert len(merged.rates) == len(GPU.rates) and merged.meta["h100"] == {"device": "NVIDIA H100 80GB HBM3"}
    assert [r for r in merged.rates if r.device == "cpu"] == [r for r in GPU.rates if r.device == "cpu"]
    body = cost.calibration_to_dict(merged)
    assert all("pack" not in row for row in body["rates"] if row["device"] == "cpu")  # the CPU rows' format holds
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(body))
    back = cost.load_calibration(path)
    assert sorted(back.rates, key=repr) == sorted(merged.rates, key=repr)
    assert back.rate("h100", "copy", "location", pack=10)[0].pack == 8
    r, how = back.rate("h100", "scan", "location", pack=100)  # another task: the family's rows of K = 64
    assert how == "family" and r.pack == 64 and r.train == pytest.approx(0.8 / 64, rel=1e-3)
    with pytest.raises(ValueError, match="one device"):
        cost.merge_rates(GPU, [new, rate("copy", "location")])


def test_bench_gpu_writes_rows_per_pack_from_its_timings(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_gpu import calibration_row, main, write_calibration

    row = calibration_row("h100", "copy", "location", 64, train_ktok=150.0, dev_ktok=30.0,
                          train_s=1.5, dev_s=0.3, decode_s=0.6, first_extra_s=12.8)
    assert (row.pack, row.device) == (64, "h100")
    assert row.train == pytest.approx(1.5 / 64 / 150) and row.dev == pytest.approx(0.3 / 64 / 30)
    assert row.test == pytest.approx(0.6 / 64 / 30) and row.startup == pytest.approx(0.2)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cost.calibration_to_dict(CAL)))
    write_calibration(path, [row], {"device": "synthetic"})
    back = cost.load_calibration(path)
    assert set(back.rates) == set(CAL.rates) | {replace(row, **{k: float(f"{getattr(row, k):.4g}")
                                                                 for k in ("train", "dev", "test", "startup")})}
    assert main(["--device", "cpu", "--calibrate", str(path)]) == 2  # CPU numbers never become GPU rows


def test_the_eta_counts_an_epochs_compile_seconds_as_start_up() -> None:
    """A compiled run's first epoch holds its compile (``compile_seconds``): the ETA prices
    that as start-up, so the epochs after it are not projected at the compile's cost."""
    import io
    from types import SimpleNamespace

    from study.trial.descriptor import TrialDescriptor
    from study.recording.progress import ProgressLine

    desc = TrialDescriptor(study="s", study_dir="/tmp/s", cell="c", task="copy", variant="onestep",
                           overrides={}, hparams={}, seeds=(0,), cpus=1, metric="m")
    eta = cost.StudyEta(costs={cost.eta_key(desc): CHEAP}, expected={cost.eta_key(desc): 1}, slots=1)
    line = ProgressLine(study="s", total_trials=1, epochs_per_trial=4,
                        counts=lambda ts: {"done": 0, "running": 1, "failed": 0, "pending": 0},
                        seconds=0.0, out=io.StringIO(), eta=eta)
    trial = SimpleNamespace(trial_id="t0", status="RUNNING", config={"trial": desc.to_dict()})
    line.on_trial_result(0, [trial], trial, {"kind": "epoch", "seed": 0, "epoch": 1,
                                             "epoch_seconds": 13.0, "compile_seconds": 10.0})
    assert eta.measured == pytest.approx(3.0) and eta.epochs == 1  # not yet started: no start-up seen
    line.on_trial_start(0, [trial], trial)
    line.started["t0"] -= 20.0  # started 20 s before its first epoch ended
    line.on_trial_result(0, [trial], trial, {"kind": "epoch", "seed": 0, "epoch": 1,
                                             "epoch_seconds": 13.0, "compile_seconds": 10.0})
    # the epoch 3 s, its start-up 20 - 13 + 10 = 17 s: the compile went to start-up
    assert eta.measured == pytest.approx(3.0 + 3.0 + 17.0, abs=0.5) and eta.epochs == 3
