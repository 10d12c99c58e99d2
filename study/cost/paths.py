"""Which train path a new study's runs take when ``--train-path`` is not given.

A compiled run (``train_path: compiled``) pays a fixed cost, its compile, and then trains each
epoch faster than eager. :data:`study.cost.pricing.COMPILED_WHOLE_RUNS` holds what whole
``locattn train`` processes measured for a task and variant at one or more training sizes
(``benchmarks/bench_whole_run.py``): the CPU seconds a cold compile adds to eager's fixed cost,
and the compiled epoch's CPU seconds over eager's. A cell takes the measurement of its
training size (:func:`study.cost.pricing.compiled_whole_run`), and breaks even after

    n* = cold extra / (eager epoch x (1 - ratio))

epochs of a single run that compiles cold, with the eager epoch priced by the cost model at the
cell's own data size (:func:`study.cost.pricing.run_cost`). The launcher picks ``compiled`` for a new
study when the fewest epochs any of its runs can train reach the largest n* of its cells (n*
rounded up): a run stops at the budget's ``optim.epochs`` or, at its earliest, when early stopping
ends it (:func:`fewest_epochs`). That is conservative twice over: a study's trials on one machine
share its inductor cache, so only the first run of a shape compiles, and runs that improve train
longer. Eager otherwise, and always for GPU trials (their path is the graphed step), for specs
with a cell not measured (another variant or task, or a model, batch size, teacher forcing or
training lengths other than those measured: :func:`study.cost.pricing.compiled_whole_run`), and where
no C++ compiler is found (inductor's CPU kernels need g++).

The choice is saved in ``study.json`` like a chosen ``--train-path``, so resumes keep it; it is
operational, never part of a run's identity. Standard library and ``locattn`` only.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from locattn.config import DEFAULT_TRAIN_PATH, make_run_config
from study.cost.calibration import Calibration, load_calibration
from study.cost.pricing import CompiledRun, compiled_whole_run, run_cost

if TYPE_CHECKING:
    from locattn.config import OptimConfig, RunConfig
    from study.spec import StudySpec

@dataclass(frozen=True)
class PathChoice:
    """A new study's train path and why."""

    path: str
    """``compiled`` or the default (eager)."""
    why: str
    """One line for the plan (after ``path``); empty when no measurement covers the study (eager)."""


def fewest_epochs(optim: OptimConfig) -> int:
    """The fewest epochs a run of ``optim`` (an ``OptimConfig``) trains: its budget, or early
    stopping's earliest stop. Epoch 1 is always a new best (nothing came before it); then
    ``patience`` + 1 epochs that count (from epoch 2, or ``schedule_from_epoch`` if later) without
    a better dev score stop the run (``locattn.training.seq2seq``)."""
    earliest = optim.patience + max(2, optim.schedule_from_epoch)
    return max(1, min(optim.epochs, earliest))


def break_even_epochs(cfg: RunConfig, measured: CompiledRun, cal: Calibration) -> float | None:
    """Epochs of one run from which compiling cold costs less than eager, for a resolved
    ``RunConfig`` on one CPU thread; None when the cost model cannot price its eager epoch."""
    cost = run_cost(replace(cfg, train_path=DEFAULT_TRAIN_PATH), cal, "cpu")
    if cost is None or cost.epoch <= 0 or measured.epoch_ratio >= 1.0:
        return None
    return measured.cold_extra / (cost.epoch * (1.0 - measured.epoch_ratio))


def choose_train_path(spec: StudySpec, cal: Calibration | None = None, compiler: str | None = "auto") -> PathChoice:
    """The train path a new study of ``spec`` (a :class:`study.spec.StudySpec`) takes without
    ``--train-path`` (this module's rule). ``compiler``: the C++ compiler's path, None when there
    is none; ``"auto"`` looks for ``g++`` on ``PATH``."""
    eager = PathChoice(DEFAULT_TRAIN_PATH, "")
    if spec.gpus > 0:
        return eager
    cal = cal if cal is not None else load_calibration()
    fewest, needed = None, 0.0
    for cell in spec.cells:
        cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
        if cfg.model.kind != "seq2seq" or cfg.optim.train_step != "eager":
            return eager
        measured = compiled_whole_run(cfg)
        n_star = break_even_epochs(cfg, measured, cal) if measured is not None else None
        if n_star is None:
            return eager  # a cell whose compiled whole run was not measured: no claim to make
        runs = fewest_epochs(cfg.optim)
        fewest = runs if fewest is None else min(fewest, runs)
        needed = max(needed, n_star)
    if fewest is None:
        return eager
    needed = math.ceil(needed)
    pays = f"compiling cold costs less than eager from {needed:,} epochs of one run"
    if fewest < needed:
        return PathChoice(DEFAULT_TRAIN_PATH, f"eager: {pays}, and a run here may stop after {fewest} "
                                              "(its budget or early stopping's earliest stop; study/cost/paths.py)")
    why = (f"every run trains at least {fewest} epochs (its budget or early stopping's earliest stop); "
           f"{pays} (study/cost/paths.py, docs/performance.md §4g)")
    compiler = shutil.which("g++") if compiler == "auto" else compiler
    if compiler is None:
        return PathChoice(DEFAULT_TRAIN_PATH, f"eager: compiled would cost less ({why}), but no C++ "
                                              "compiler was found for inductor (apt-get install g++)")
    return PathChoice("compiled", f"compiled, chosen: {why}; needs g++ on every worker; "
                                  "--train-path eager keeps eager")
