"""A running study's ETA: the cost model's remaining work per trial (:mod:`study.cost.pricing`),
scaled by the epochs the study itself has measured (:func:`blend_ratio`), and charged only for
what is left. The progress line (:mod:`study.recording.progress`) prints it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from locattn.config import make_run_config
from study.cost.calibration import Calibration, load_calibration
from study.cost.pricing import RunCost, run_cost

if TYPE_CHECKING:
    from study.trial.descriptor import TrialDescriptor

#: Pseudo-epochs of weight the model's prediction keeps against a study's measured epochs.
PRIOR_EPOCHS = 4.0


@dataclass(frozen=True, kw_only=True)
class TrialProgress:
    """What the progress printer knows of one Tune trial."""

    cost: RunCost
    """Predicted cost of one of its runs."""
    runs: int = 1
    """Runs it trains one after the other (a search point's seeds; packed: 1)."""
    epochs_done: float = 0.0
    """Epochs finished, summed over its runs."""
    started: bool = False
    """Whether it has started (its start-up is paid)."""
    finished: bool = False
    """Whether it is done (finished or given up)."""


def blend_ratio(measured_seconds: float, predicted_seconds: float, measured_epochs: int,
                prior_epochs: float = PRIOR_EPOCHS) -> float:
    """Measured / predicted time of the epochs a study has run, shrunk toward 1 (the model)
    by ``prior_epochs`` pseudo-epochs: 1.0 before any epoch, the measured ratio in the limit."""
    if measured_epochs <= 0 or predicted_seconds <= 0 or measured_seconds <= 0:
        return 1.0
    ratio = measured_seconds / predicted_seconds
    return (prior_epochs + measured_epochs * ratio) / (prior_epochs + measured_epochs)


def trial_left(t: TrialProgress) -> float:
    """Predicted seconds a trial still needs: its start-up if not started, the rest of its
    epoch budget, and the test scoring of every run not yet through its budget (0 when
    finished). An early-stopped run is charged until the trial reports it finished."""
    if t.finished:
        return 0.0
    budget = t.runs * t.cost.epochs
    rest = max(0.0, budget - t.epochs_done)
    tests = max(1, t.runs - int(t.epochs_done // max(1, t.cost.epochs)))
    return (0.0 if t.started else t.cost.startup) + rest * t.cost.epoch + tests * t.cost.test


def eta_seconds(trials: Sequence[TrialProgress], slots: int, ratio: float = 1.0) -> float:
    """Wall seconds until every trial is done, with ``slots`` running at once: the larger of
    the remaining work spread over the slots and the longest remaining trial, scaled by
    ``ratio`` (:func:`blend_ratio`). 0.0 when nothing is left."""
    left = [trial_left(t) for t in trials]
    if not any(left):
        return 0.0
    return ratio * max(sum(left) / max(1, slots), max(left))


def format_eta(seconds: float, done: bool) -> str:
    """``ETA 1m05s``; ``done`` when nothing is left (never ``ETA ?``)."""
    if done:
        return "done"
    if seconds != seconds or seconds == float("inf"):
        seconds = 0.0
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return "ETA " + (f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s")


def eta_key(trial: TrialDescriptor) -> str:
    """The key a trial (a ``study.trial.descriptor.TrialDescriptor``) is priced under: its cell and
    its selection hyperparameters (an ``optim.epochs`` hparam changes the cost)."""
    return trial.cell + "|" + json.dumps(trial.hparams, sort_keys=True, default=str)


def study_eta(trials: Sequence[Any], slots: int, cal: Calibration | None = None) -> "StudyEta":
    """A :class:`StudyEta` for the trial descriptors a driver session runs (each priced on this
    CPU, on the study's train path; a trial of a search point or packed seeds trains
    ``len(seeds)`` runs)."""
    cal = cal if cal is not None else load_calibration()
    costs: dict[str, RunCost] = {}
    expected: dict[str, int] = {}
    runs = 1
    for t in trials:
        key = eta_key(t)
        if key not in costs:
            cfg = make_run_config(task=t.task, variant=t.variant, overrides=t.overrides)
            if getattr(t, "train_path", "eager") != "eager":
                cfg = replace(cfg, train_path=t.train_path)
            costs[key] = run_cost(cfg, cal, "cpu", 1.3)
        expected[key] = expected.get(key, 0) + 1
        runs = max(runs, len(t.seeds))
    return StudyEta(costs=costs, expected=expected, runs_per_trial=runs, slots=max(1, slots))


@dataclass(kw_only=True)
class StudyEta:
    """A running study's ETA: the model's remaining work per trial, scaled by the study's own
    measured epochs (:func:`blend_ratio`). The progress printer feeds it epochs
    (:meth:`observe`) and asks it for the ETA of the trials it sees (:meth:`eta`)."""

    costs: dict[str, RunCost]
    """Predicted cost of one run, per cell id."""
    expected: dict[str, int]
    """Trials per cell this driver session runs (Tune creates them lazily)."""
    runs_per_trial: int = 1
    """Runs a trial trains one after the other (a search point's seeds; 1 for grid or packed)."""
    slots: int = 1
    """Trials at once."""
    measured: float = 0.0
    """Measured seconds of the epochs observed."""
    predicted: float = 0.0
    """The model's seconds for the same epochs."""
    epochs: int = 0
    """Epochs (and start-ups) observed."""

    def observe(self, cell: str, epoch_seconds: float, startup: bool = False) -> None:
        """One epoch of ``cell`` took ``epoch_seconds`` (wall, as recorded); with ``startup``,
        a trial of ``cell`` took that long from its start to its first epoch."""
        cost = self.costs.get(cell)
        if cost is not None and epoch_seconds > 0:
            self.measured += epoch_seconds
            self.predicted += cost.startup if startup else cost.epoch
            self.epochs += 1

    def ratio(self) -> float:
        """Measured over predicted, shrunk toward 1 while few epochs are measured."""
        return blend_ratio(self.measured, self.predicted, self.epochs)

    def trials(self, seen: Sequence[tuple[str, float, bool, bool]]) -> list[TrialProgress]:
        """``seen`` as (cell, epochs done, started, finished) per Tune trial, plus one
        not-started trial per expected trial Tune has not created yet."""
        out, count = [], dict.fromkeys(self.expected, 0)
        for cell, done, started, finished in seen:
            if cell in self.costs:
                out.append(TrialProgress(cost=self.costs[cell], runs=self.runs_per_trial,
                                         epochs_done=done, started=started, finished=finished))
                count[cell] = count.get(cell, 0) + 1
        for cell, n in self.expected.items():
            out.extend(TrialProgress(cost=self.costs[cell], runs=self.runs_per_trial)
                       for _ in range(max(0, n - count.get(cell, 0))))
        return out

    def left(self, seen: Sequence[tuple[str, float, bool, bool]]) -> float:
        """The model's seconds of work left (unscaled, summed over trials)."""
        return sum(trial_left(t) for t in self.trials(seen))

    def eta(self, seen: Sequence[tuple[str, float, bool, bool]]) -> float:
        """Wall seconds left (:func:`eta_seconds` with the measured ratio)."""
        return eta_seconds(self.trials(seen), self.slots, self.ratio())

