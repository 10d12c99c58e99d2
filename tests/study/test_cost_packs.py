"""A GPU study's packs against the device's memory (study/cost/packs.py, the memory model of
locattn.training.memory): the dry run says whether a trial's runs fit one pack, else the packs
of the largest K that fits they train as, and the cost model prices the GPU's runs at that K;
compiled GPU rows price --train-path compiled runs. The calibration rows here are hand-made,
not measurements."""

from __future__ import annotations

from pathlib import Path

import yaml

from locattn.config import make_run_config
from study import cost
from study.cost import Calibration, Rate, packs
from study.spec import load_spec


def spec(tmp: Path, seeds: int = 4, gpus: float = 1.0, pack: bool = True, **over):
    body = {"name": "g", "grid": {"task": ["copy"], "variant": ["onestep"]}, "seeds": seeds,
            "overrides": {"optim.epochs": 2, "task.train_size": 100, "task.dev_size": 50, "task.test_size": 10,
                          "task.test_limit": 10, "optim.train_step": "graphed", **over},
            "resources": {"cpus": 1, "gpus": gpus}, "pack_seeds": pack, "profiles": {"smoke": {}}}
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(body))
    return load_spec(path, "smoke")


def row(pack: int, path: str = "eager", device: str = "h100") -> Rate:
    return Rate(device=device, task="copy", family="location", pack=pack, path=path, train=1.0 / pack,
                dev=0.5 / pack, test=1.0 / pack, startup=0.1)


GPU = Calibration(rates=tuple(row(k) for k in (1, 8, 64)) + (row(8, "compiled"),))


def test_a_trial_that_fits_is_one_pack_and_says_so(tmp_path: Path) -> None:
    s = spec(tmp_path)
    lines = packs.pack_lines(s, {"h100": packs.DEVICE_MEMORY["h100"]})
    (line,) = lines
    assert line.startswith("pack     H100 (80 GB): a trial's 4 runs fit as one pack (the largest K that fits is ")
    assert cost.priced_pack(s, "h100") == 4


def test_an_oversized_trial_trains_as_packs_of_the_largest_k_that_fits(tmp_path: Path) -> None:
    # 40 seeds on 1 % of an H100 (0.8 GB): the memory model fits about 20 replicas of ~35 MiB
    s = spec(tmp_path, seeds=40, gpus=0.01)
    fit, cell = packs.largest_pack(s, packs.DEVICE_MEMORY["h100"])
    assert 1 < fit < 40 and cell == s.cells[0].cell
    (line,) = packs.pack_lines(s, {"h100": packs.DEVICE_MEMORY["h100"]})
    n = -(-40 // fit)
    assert f"a trial's 40 runs train as {n} packs of at most {-(-40 // n)}, one after another" in line
    assert f"the largest K that fits is {fit:,}" in line and "by the memory model" in line
    assert "0.01 of 74.5 GiB" in line and "run identities" in line
    # the cost model prices those runs at the packs they train in: the rows of K <= fit
    assert cost.priced_pack(s, "h100") == fit
    cells = cost.cell_costs(s, GPU, "h100")
    one = make_run_config(task="copy", variant="onestep", overrides=s.cells[0].overrides)
    assert cells is not None and cells[0].cost.epoch == cost.run_cost(one, GPU, "h100", pack=fit).epoch
    plan = cost.plan_lines(s, 2, GPU)
    assert any(ln.startswith("pack     H100") for ln in plan)
    assert any("graphed packs of 8 runs" in ln for ln in plan)  # the largest row at most fit (8 < fit < 64)


def test_compiled_gpu_rows_price_compiled_runs_and_eager_rows_the_rest(tmp_path: Path) -> None:
    s = spec(tmp_path, seeds=8)
    eager = cost.cell_costs(s, GPU, "h100")[0].cost
    compiled = cost.cell_costs(s, GPU, "h100", "compiled")[0].cost
    assert compiled.how == "measured" and not compiled.assumed
    assert eager.epoch == compiled.epoch  # the hand-made rows are equal: the compiled one was used
    lines = cost.plan_lines(s, 2, GPU, train_path="compiled")
    assert any(ln.startswith("cost     ") and "one NVIDIA H100, --train-path compiled" in ln for ln in lines)
    without = Calibration(rates=tuple(row(k) for k in (1, 8)))
    assumed = cost.cell_costs(s, without, "h100", "compiled")[0].cost.assumed
    assert "--train-path compiled priced at eager rates (no compiled row for task copy)" in assumed


def test_a_cpu_spec_gets_no_pack_line_and_its_packs_are_priced_as_solo_runs(tmp_path: Path) -> None:
    s = spec(tmp_path, gpus=0)
    assert packs.pack_lines(s, {"h100": packs.DEVICE_MEMORY["h100"]}) == []
    assert cost.priced_pack(s, "h100") is None
    cpu = Calibration(rates=(Rate(device="cpu", task="copy", family="location", train=1.0, dev=0.5, test=1.0,
                                  startup=3.0),))
    lines = cost.plan_lines(s, 2, cpu)
    assert "         ASSUMED a packed trial's runs at their solo rates, one core each (an upper bound: a pack " \
           "trains them in one process; no CPU pack row in cost_calibration.json)" in lines
    unpacked = spec(tmp_path, gpus=0, pack=False)
    assert not unpacked.packed and not any("packed trial" in ln for ln in cost.plan_lines(unpacked, 2, cpu))
