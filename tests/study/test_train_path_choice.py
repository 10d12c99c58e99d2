"""A new study takes the compiled path where it pays even compiling cold, and says so (issue 43,
Build item 3): ``study.cost.paths``."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest

from locattn.config import OptimConfig, make_run_config
from study.cost import load_calibration
from study.cost.paths import break_even_epochs, choose_train_path, fewest_epochs
from study.cost.pricing import COMPILED_WHOLE_RUNS, CompiledRun, compiled_whole_run, run_cost
from study.driver.launch import launch
from study.driver.summary import DryRunPlan
from study.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
TABLE4 = ROOT / "ablations" / "rc_table4.yaml"


@pytest.mark.parametrize("epochs, patience, schedule_from, fewest", [
    (100, 50, 2, 52),   # the paper budget: best at epoch 1, then 51 counted epochs without a better one
    (10, 5, 2, 7),      # the quick profile
    (3, 50, 2, 3),      # the budget first
    (100, 50, 1, 52),   # epoch 1 is always a new best, so counting it changes nothing
    (100, 0, 1, 2),
    (100, 3, 10, 13),   # nothing counts before epoch 10
])
def test_fewest_epochs_is_the_budget_or_early_stoppings_earliest_stop(epochs, patience, schedule_from, fewest,
                                                                       tmp_path):
    optim = replace(OptimConfig(), epochs=epochs, patience=patience, schedule_from_epoch=schedule_from)
    assert fewest_epochs(optim) == fewest
    # ... and a run whose dev score gets worse after epoch 1 stops exactly there
    cfg = make_run_config(task="copy", variant="onestep", overrides={
        "optim.epochs": epochs, "optim.patience": patience, "optim.schedule_from_epoch": schedule_from,
        "task.train_size": 8, "task.dev_size": 4, "task.test_size": 4, "task.test_lengths": [5]})
    assert _epochs_until_stop(cfg, tmp_path) == fewest


def _epochs_until_stop(cfg, out: Path) -> int:
    """Epochs the trainer's own bookkeeping (``Seq2SeqRun.end_epoch``: scheduler, best model,
    early stopping) runs when every dev score after the first is worse than the first."""
    from locattn.tasks import load_task
    from locattn.training.evaluate import DevScores
    from locattn.training.seq2seq import Seq2SeqRun

    class Quiet:
        def on_epoch(self, *args) -> None:
            pass

    run = Seq2SeqRun(cfg, load_task(cfg.task, cache_dir=str(out / "data")), out)
    while run.stop_reason is None:
        run.epoch += 1
        run.end_epoch(0.0, 0.0, Quiet(), dev=DevScores(loss=float(run.epoch), acc=1.0 / run.epoch))
    return run.epoch


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


def test_a_cell_takes_the_measurement_of_its_size_and_the_less_favourable_between_sizes():
    rows = sorted(COMPILED_WHOLE_RUNS[("recopy", "onestep")], key=lambda r: r.train_size)
    small, big = rows[0], rows[-1]
    assert small.epoch_ratio != big.epoch_ratio  # ReCopy's gain is not monotone in the size

    def at(size: int, **more):
        return compiled_whole_run(make_run_config(task="inv_reverse_recopy", variant="onestep_no_step3",
                                                  overrides={"task.train_size": size, **more}))

    assert at(small.train_size) == small and at(big.train_size) == big and at(big.train_size * 2) == big
    between = at((small.train_size + big.train_size) // 2)
    assert between.epoch_ratio == max(small.epoch_ratio, big.epoch_ratio)
    assert between.cold_extra == max(small.cold_extra, big.cold_extra)
    assert at(small.train_size - 1) is None  # below every size measured: no claim
    # batches other than those measured: no claim either
    assert at(big.train_size, **{"model.hidden_size": 64}) is None
    assert at(big.train_size, **{"optim.batch_size": 64}) is None
    assert at(big.train_size, **{"task.train_lengths": [3, 9]}) is None
    assert at(big.train_size, **{"task.test_lengths": [15]}) == big  # the test splits are a fixed cost
    # Lookup's split is 9,081 examples whatever train_size says: one row for every size
    assert compiled_whole_run(make_run_config(task="lookup", variant="onestep",
                                              overrides={"task.train_size": 2000})) is not None
    for key, measured_rows in COMPILED_WHOLE_RUNS.items():
        for measured in measured_rows:
            assert 0.0 < measured.epoch_ratio <= 1.0 and measured.cold_extra > 0.0, key


def test_the_path_line_never_contradicts_itself():
    """n* is rounded up before it is compared and printed: Lookup alone at the paper's size with a
    patience that makes the fewest epochs land next to its break-even."""
    spec = load_spec(TABLE4, profile="paper", only={"task": ["lookup"]})
    choice = choose_train_path(spec, compiler="/usr/bin/g++")
    needed = int(choice.why.split("from ")[1].split(" epochs")[0].replace(",", ""))
    for patience in range(needed - 4, needed + 2):
        spec = load_spec(TABLE4, profile="paper", only={"task": ["lookup"]})
        spec = replace(spec, cells=tuple(replace(c, overrides={**c.overrides, "optim.patience": patience})
                                         for c in spec.cells))
        choice = choose_train_path(spec, compiler="/usr/bin/g++")
        fewest = patience + 2
        assert (choice.path == "compiled") == (fewest >= needed), (patience, choice)
        if choice.path == "eager":
            assert f"may stop after {fewest}" in choice.why and f"from {needed} epochs" in choice.why


def test_dry_run_prints_the_choice_and_prices_compiled_cheaper(tmp_path):
    out = io.StringIO()
    summary = launch(TABLE4, profile="paper", root=tmp_path, dry_run=True, out=out)
    text = out.getvalue()
    assert isinstance(summary, DryRunPlan) and not (tmp_path / "rc_table4-paper").exists()
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
    from record.layout import study_paths
    from study.recording.folder import load_meta, write_meta
    from study.driver.launch import new_meta
    from study.spec import read_yaml, resolve_spec

    # study.json as a launch of this spec writes it (the dry run reads all of it: its refusal of
    # another spec), saved with the eager path where a new study would take the compiled one
    raw = read_yaml(TABLE4)
    paths = study_paths("rc_table4-paper", tmp_path)
    paths.dir.mkdir()
    write_meta(paths, new_meta(resolve_spec(raw, path=str(TABLE4), profile="paper"), TABLE4, raw, paths,
                               "rc_table4-paper", only=None, seeds=None, sets=None, train_path="eager",
                               tracking_uri=None))
    out = io.StringIO()
    launch(TABLE4, profile="paper", root=tmp_path, dry_run=True, out=out)
    assert not any(ln.startswith("path ") for ln in out.getvalue().splitlines())
    assert load_meta(paths).train_path == "eager"
