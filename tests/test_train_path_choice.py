"""A new study takes the compiled path where it pays even compiling cold, and says so (issue 43,
Build item 3): ``study.cost.paths``."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from locattn.config import OptimConfig, make_run_config
from study.cost import load_calibration
from study.cost.paths import break_even_epochs, choose_train_path, fewest_epochs
from study.cost.run import COMPILED_WHOLE_RUNS, CompiledRun, compiled_whole_run, run_cost
from study.launch import launch
from study.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
TABLE4 = ROOT / "ablations" / "rc_table4.yaml"


@pytest.mark.parametrize("epochs, patience, schedule_from, fewest", [
    (100, 50, 2, 52),   # the paper budget: best at epoch 1, then 51 counted epochs without a better one
    (10, 5, 2, 7),      # the quick profile
    (3, 50, 2, 3),      # the budget first
    (100, 50, 1, 51),   # every epoch counts
])
def test_fewest_epochs_is_the_budget_or_early_stoppings_earliest_stop(epochs, patience, schedule_from, fewest):
    optim = replace(OptimConfig(), epochs=epochs, patience=patience, schedule_from_epoch=schedule_from)
    assert fewest_epochs(optim) == fewest


def test_break_even_follows_the_cells_data_size():
    """n* = cold extra / (eager epoch x (1 - ratio)): five times the data, a fifth of the epochs."""
    cal = load_calibration()
    measured = CompiledRun(train_size=2000, cold_extra=100.0, epoch_ratio=0.5)
    small = make_run_config(task="copy", variant="onestep", overrides={"task.train_size": 2000, "task.dev_size": 500})
    big = make_run_config(task="copy", variant="onestep", overrides={"task.train_size": 10000, "task.dev_size": 2500})
    n_small, n_big = break_even_epochs(small, measured, cal), break_even_epochs(big, measured, cal)
    assert n_small == pytest.approx(100.0 / (run_cost(small, cal).epoch * 0.5))
    assert n_small / n_big == pytest.approx(5.0, rel=0.05)
    assert break_even_epochs(small, CompiledRun(train_size=2000, cold_extra=100.0, epoch_ratio=1.0), cal) is None


def test_table4_takes_compiled_at_the_paper_budget_and_eager_at_the_quick_one():
    paper = choose_train_path(load_spec(TABLE4, profile="paper"), compiler="/usr/bin/g++")
    assert paper.path == "compiled"
    assert "every run trains at least 52 epochs" in paper.why and "--train-path eager keeps eager" in paper.why
    quick = choose_train_path(load_spec(TABLE4, profile="quick"), compiler="/usr/bin/g++")
    # 7 epochs at 2,000 examples: nowhere near break-even (Copy gains nothing per epoch at that size)
    assert quick.path == "eager" and "and a run here may stop after 7" in quick.why


def test_no_compiler_keeps_eager_and_says_why():
    choice = choose_train_path(load_spec(TABLE4, profile="paper"), compiler=None)
    assert choice.path == "eager" and "no C++ compiler was found" in choice.why


def test_gpu_trials_and_unmeasured_cells_stay_eager():
    assert choose_train_path(load_spec(TABLE4, profile="gpu"), compiler="/usr/bin/g++").path == "eager"
    # Table 2 mixes variants whose compiled whole runs were never measured (MonoAttn's compile
    # took 1,238 s wall on Reverse ReCopy): no claim, eager.
    table2 = load_spec(ROOT / "ablations" / "rc_table2.yaml", profile="paper")
    assert any(compiled_whole_run(make_run_config(task=c.task, variant=c.variant)) is None for c in table2.cells)
    assert choose_train_path(table2, compiler="/usr/bin/g++").path == "eager"


def test_a_cell_takes_the_measurement_at_the_largest_size_it_reaches():
    sizes = sorted(r.train_size for r in COMPILED_WHOLE_RUNS[("copy", "onestep")])
    assert len(sizes) >= 2
    for size in sizes:
        at = compiled_whole_run(make_run_config(task="reverse_copy", variant="onestep_no_sigmoid",
                                                overrides={"task.train_size": size + 1}))
        assert at.train_size == size
    smaller = make_run_config(task="copy", variant="onestep", overrides={"task.train_size": sizes[0] - 1})
    assert compiled_whole_run(smaller) is None  # below every size measured: no claim
    for key, rows in COMPILED_WHOLE_RUNS.items():
        for measured in rows:
            assert 0.0 < measured.epoch_ratio <= 1.0 and measured.cold_extra > 0.0, key


def test_dry_run_prints_the_choice_and_prices_compiled_cheaper(tmp_path):
    out = io.StringIO()
    summary = launch(TABLE4, profile="paper", root=tmp_path, dry_run=True, out=out)
    text = out.getvalue()
    assert summary["dry_run"] and not (tmp_path / "rc_table4-paper").exists()
    path_lines = [ln for ln in text.splitlines() if ln.startswith("path ")]
    assert len(path_lines) == 1 and ("compiled, chosen" in path_lines[0] or "no C++ compiler" in path_lines[0])
    eager = io.StringIO()
    launch(TABLE4, profile="paper", root=tmp_path, dry_run=True, out=eager, train_path="eager")
    assert not any(ln.startswith("path ") for ln in eager.getvalue().splitlines())  # asked for: no choice

    def cpu_hours(plan: str) -> float:
        line = next(ln for ln in plan.splitlines() if ln.startswith("cost ") and "CPU-hours" in ln)
        return float(line.split("= ")[1].split(" CPU-hours")[0].replace(",", ""))

    if "compiled, chosen" in path_lines[0]:
        assert cpu_hours(text) < cpu_hours(eager.getvalue())


def test_an_existing_study_keeps_its_saved_path(tmp_path):
    """The choice is made once, for a new study: a relaunch's dry run prints no new choice."""
    study = tmp_path / "rc_table4-paper"
    study.mkdir()
    (study / "study.json").write_text(json.dumps({"name": "rc_table4-paper"}))
    out = io.StringIO()
    launch(TABLE4, profile="paper", root=tmp_path, dry_run=True, out=out)
    assert not any(ln.startswith("path ") for ln in out.getvalue().splitlines())
