"""The driver's progress line: trials done, running, failed and pending, elapsed time and ETA.

A Tune callback of its own beside the recorder (``study.recording.record_callback.RecordCallback``), which it asks
how many trials are really done: Tune marks a trial stopped by Ctrl-C as terminated too. On a
terminal a second line names the running runs with their epoch and dev score
(``running: 1step·copy·s0 ep 3/10 dev 45.2%``); not on a pipe or in a log, whose lines stay
as they were.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Callable, TextIO

from study.cost import StudyEta, eta_key, format_eta
from study.recording.naming import run_name
from study.trial.trainable import TrialDescriptor

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

try:  # the callback must subclass Tune's Callback; study is only used with Ray installed
    from ray.tune import Callback as _TuneCallback
except ImportError:  # pragma: no cover
    _TuneCallback = object  # type: ignore[assignment,misc]

#: Trials list -> counts ``done``, ``running``, ``failed``, ``pending`` (the recorder's).
TrialCounter = Callable[[list], dict[str, int]]


class ProgressLine(_TuneCallback):
    """Tune callback: one line every ``seconds`` (and at a failure and at the end), e.g.
    ``[study s] 3/8 done, 2 running, 0 failed, 3 pending | elapsed 1m05s | ETA 2m10s``.

    With ``eta`` (:class:`study.cost.StudyEta`) the ETA weighs each trial by its predicted cost
    (start-up, epochs, test scoring), scaled by the epochs and start-ups this driver measured:
    ``ETA 2m10s (1m48s of work x1.20)``, and ``done`` when nothing is left. ``over(trial)`` says
    a trial's runs are all finished (or failed for good) in the record. Without ``eta`` it
    divides the trials left by the rate since this driver started.
    """

    def __init__(self, *, study: str, total_trials: int, epochs_per_trial: int,
                 counts: TrialCounter, seconds: float = 10.0, out: TextIO | None = None,
                 t0: float | None = None, eta: StudyEta | None = None,
                 over: Callable[[Trial], bool] | None = None) -> None:
        self.study = study
        self.total_trials = total_trials
        self.epochs_per_trial = epochs_per_trial
        self.counts = counts
        self.seconds = seconds
        self.out = out
        self.t0 = t0 if t0 is not None else time.time()
        """When the driver started: the origin of the elapsed time."""
        self.last = time.time()
        self.fraction: dict[str, float] = {}  # Tune trial id -> fraction done
        self.units_at_start: float | None = None
        self.t_units = self.t0
        self.eta = eta
        self.over = over or (lambda trial: False)
        self.started: dict[str, float] = {}  # Tune trial id -> when it (re)started
        self.running: dict[str, str] = {}  # Tune trial id -> its run's name, epoch and dev score

    # Pickled into Tune's tuner state (and replaced on restore): keep only the settings.
    def __getstate__(self) -> dict:
        return {"study": self.study, "total_trials": self.total_trials,
                "epochs_per_trial": self.epochs_per_trial, "seconds": self.seconds, "eta": None,
                "running": {}}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.started[trial.trial_id] = time.time()

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info: Any) -> None:
        took = result.get("epoch_seconds")
        if self.eta is not None and result.get("kind") == "epoch" and isinstance(took, (int, float)):
            key = eta_key(TrialDescriptor.of(trial.config))
            compiling = float(result.get("compile_seconds") or 0.0)  # train_path=compiled: start-up, not epoch
            self.eta.observe(key, float(took) - compiling)
            started = self.started.pop(trial.trial_id, None)
            if started is not None:  # its start-up: from its start to its first epoch, less that epoch
                self.eta.observe(key, time.time() - started - float(took) + compiling, startup=True)
        if result.get("kind") == "epoch" and result.get("seed") is not None:
            self.fraction[trial.trial_id] = trial_fraction(trial, int(result["seed"]), int(result["epoch"]),
                                                           self.epochs_per_trial)
            self.running[trial.trial_id] = running_label(TrialDescriptor.of(trial.config).alone(result.get("run_key")), result,
                                                         self.epochs_per_trial)
            self.line(trials)
        elif result.get("kind") == "seed_final":
            self.fraction[trial.trial_id] = 0.0
            self.line(trials)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.line(trials, force=True)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        self.line(trials, force=True)

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        self.line(trials)

    def line(self, trials: list[Trial], force: bool = False) -> None:
        """Print the line if ``seconds`` passed since the last one (or ``force``)."""
        now = time.time()
        if not force and now - self.last < self.seconds:
            return
        self.last = now
        c = self.counts(trials)
        total = max(self.total_trials, len(trials))
        units = c["done"] + c["failed"] + sum(
            self.fraction.get(t.trial_id, 0.0) for t in trials if t.status == "RUNNING"
        )
        if self.units_at_start is None:
            self.units_at_start = units
            self.t_units = now
        rate = (units - self.units_at_start) / max(1e-9, now - self.t_units)
        pending = max(c["pending"], total - c["done"] - c["running"] - c["failed"])
        finished = c["running"] == 0 and pending == 0
        if finished:
            eta = "done"
        elif self.eta is not None:
            seen = [(key, self.fraction.get(t.trial_id, 0.0) * self.eta.runs_per_trial
                     * self.eta.costs[key].epochs, t.status != "PENDING", self.over(t))
                    for t in trials if (key := eta_key(TrialDescriptor.of(t.config))) in self.eta.costs]
            eta = (f"{format_eta(self.eta.eta(seen), False)} "
                   f"({hms(self.eta.left(seen))} of work x{self.eta.ratio():.2f})")
        else:
            eta = f"ETA {hms((total - units) / rate if rate > 0 else float('nan'))}"
        out = self.out or sys.stdout
        print(f"[study {self.study}] {c['done']}/{total} done, {c['running']} running, "
              f"{c['failed']} failed, {pending} pending | elapsed {hms(now - self.t0)}"
              f" | {eta}", file=out, flush=True)
        labels = [self.running[t.trial_id] for t in trials
                  if t.status == "RUNNING" and t.trial_id in self.running]
        if labels and not finished and getattr(out, "isatty", lambda: False)():
            more = f" | +{len(labels) - MAX_RUNNING} more" if len(labels) > MAX_RUNNING else ""
            print(f"  running: {' | '.join(labels[:MAX_RUNNING])}{more}", file=out, flush=True)


#: Running runs named on the terminal's second progress line.
MAX_RUNNING = 6


def running_label(trial: TrialDescriptor, result: dict, epochs: int) -> str:
    """``1step·copy·s0 ep 3/10 dev 45.2%`` for an epoch result of a trial."""
    name = run_name(task=trial.task, variant=trial.variant, seed=int(result["seed"]), cell=trial.cell)
    dev = result.get("dev_score")
    return (f"{name} ep {int(result['epoch'])}/{epochs}"
            + (f" dev {100 * dev:.1f}%" if isinstance(dev, (int, float)) else ""))


def trial_fraction(trial: Trial, seed: int, epoch: int, epochs_per_trial: int) -> float:
    """How much of a trial is done after ``epoch`` of ``seed``: seeds one after another, or
    together when the trial trains them packed."""
    desc = TrialDescriptor.of(trial.config)
    seeds = desc.seeds
    per = max(1, epochs_per_trial)
    if desc.packed:  # the seeds advance together
        return min(1.0, epoch / per)
    index = seeds.index(seed) if seed in seeds else 0
    return min(1.0, (index + min(epoch, per) / per) / len(seeds))


def hms(seconds: float) -> str:
    """``1h02m03s``, ``2m03s``; ``?`` for NaN or infinity."""
    if seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
