"""Cost model: what a study's runs cost, from epochs measured per task, variant family and device.

A run costs

    start-up + epochs x (train tokens x train rate + dev tokens x dev rate) + test tokens x test rate

in seconds of one thread, where a split's *tokens* are the sum of its examples' source and target
lengths (Raffel & Ellis: sequence length T, ``optim.updates_per_epoch x optim.batch_size``
sequences per epoch). Token counts come from the task config itself (the data is built or read,
which takes well under a second per task), so the model follows the data size (CFQ), the lengths
(T0, test lengths) and ``task.test_limit``. The rates are per 1,000 tokens, one row per
(device, task, variant family), in :data:`CALIBRATION_FILE`, which ``benchmarks/bench_cost.py``
writes from short epochs it times. A (task, family) with no row takes the task's median over
its families, then the family's median over tasks, then the spec's flat
``cost.seconds_per_1k_examples``; the plan says which.

The epochs are the budget, so the cost is an upper bound (no early stopping). The ETA of a
running study (:func:`eta_seconds`) scales the model by what the study's own epochs measure
(:func:`blend_ratio`), and charges only what is left.

Imports ``locattn`` only (no Ray, no MLflow): ``study.spec`` builds its dry-run plan from here.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

#: The committed calibration table (``benchmarks/bench_cost.py --out`` rewrites it).
CALIBRATION_FILE = Path(__file__).with_name("cost_calibration.json")
#: Devices a plan prices. A device with no row in the table is printed as unmeasured.
DEVICES = {"cpu": "this CPU, one core per run", "h100": "one NVIDIA H100"}
#: CFQ's official split sizes (``query_complexity_split``), used when its files are absent.
CFQ_SIZES = {"train": 100_654, "dev": 9_512, "test": 9_512}
#: Tokens per CFQ example (question + SPARQL query) when its files are absent: an ASSUMPTION,
#: not a measurement (no CFQ data on these machines); a plan that uses it says so.
CFQ_ASSUMED_TOKENS = 80
#: A generated split larger than this is priced from a sample of this many examples.
SAMPLE_EXAMPLES = 20_000
#: Pseudo-epochs of weight the model's prediction keeps against a study's measured epochs.
PRIOR_EPOCHS = 4.0


# ---------------------------------------------------------------------------- calibration


@dataclass(frozen=True, kw_only=True)
class Rate:
    """One calibration row: seconds of one thread per 1,000 tokens, and start-up per run."""

    device: str
    """``cpu`` (one core of the machine the bench ran on) or a GPU name (``h100``)."""
    task: str
    """Task key."""
    family: str
    """Variant family (:func:`variant_family`)."""
    train: float
    """Training seconds per 1,000 training tokens (forward, backward, optimizer step)."""
    dev: float
    """Per-epoch scoring seconds per 1,000 dev tokens (Raffel: the held-out split), checkpoint
    included."""
    test: float
    """End-of-run seconds per 1,000 test tokens (greedy decoding of every test split)."""
    startup: float
    """Seconds before a run's first epoch: a fresh process's imports, the data, the model."""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The calibration table: its rows and how they were measured."""

    rates: tuple[Rate, ...]
    """One row per (device, task, family) measured."""
    study_startup: float = 0.0
    """Seconds a study spends before its first trial starts (Ray, the store, Tune)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Where the rows come from: command, machine, load average, date."""

    def devices(self) -> list[str]:
        """Devices with at least one row."""
        return sorted({r.device for r in self.rates})

    def rate(self, device: str, task: str, family: str) -> tuple[Rate | None, str]:
        """The row for (device, task, family) and how it was found: ``measured``, ``task``
        (the task's median over its measured families), ``family`` (the family's median over
        tasks), or (None, ``unmeasured``) when the device has no row at all."""
        rows = [r for r in self.rates if r.device == device]
        for r in rows:
            if r.task == task and r.family == family:
                return r, "measured"
        for how, match in (("task", [r for r in rows if r.task == task]),
                           ("family", [r for r in rows if r.family == family])):
            if match:
                return _median_rate(match, device, task, family), how
        return None, "unmeasured"


def _median_rate(rows: Sequence[Rate], device: str, task: str, family: str) -> Rate:
    return Rate(device=device, task=task, family=family,
                **{k: statistics.median(getattr(r, k) for r in rows)
                   for k in ("train", "dev", "test", "startup")})


def calibration_from_dict(body: dict[str, Any]) -> Calibration:
    """Parse the calibration JSON (``{"meta": ..., "study_startup": s, "rates": [...]}``)."""
    return Calibration(rates=tuple(Rate(**row) for row in body.get("rates", [])),
                       study_startup=float(body.get("study_startup", 0.0)),
                       meta=dict(body.get("meta") or {}))


def calibration_to_dict(cal: Calibration) -> dict[str, Any]:
    """Inverse of :func:`calibration_from_dict` (rows sorted, rates rounded to 4 digits)."""
    rows = sorted(cal.rates, key=lambda r: (r.device, r.task, r.family))
    return {"meta": cal.meta, "study_startup": round(cal.study_startup, 2),
            "rates": [{"device": r.device, "task": r.task, "family": r.family,
                       **{k: float(f"{getattr(r, k):.4g}") for k in ("train", "dev", "test", "startup")}}
                      for r in rows]}


@lru_cache(maxsize=4)
def load_calibration(path: str | Path = CALIBRATION_FILE) -> Calibration:
    """The calibration table at ``path`` (the committed one by default); an empty table if the
    file is missing, so a plan still prints (with the flat fallback, and says so)."""
    try:
        return calibration_from_dict(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        return Calibration(rates=())


# ---------------------------------------------------------------------------- what a run does


def variant_family(model: Any) -> str:
    """A model config's cost family: the attention family, ``+mix`` for mixed location
    attention, prefixed by the encoder when it is not the default BiGRU (``gru_residual/content``)."""
    att = model.attention
    name = att.family + ("+mix" if att.family == "location" and att.mode == "mix" else "")
    return name if model.encoder == "bigru" else f"{model.encoder}/{name}"


@dataclass(frozen=True, kw_only=True)
class Shape:
    """Thousands of tokens a run processes."""

    train: float
    """Trained per epoch."""
    dev: float
    """Scored per epoch (Raffel & Ellis: the held-out split of ``optim.raffel_protocol``)."""
    test: float
    """Scored once, after the last epoch."""
    assumed: str = ""
    """Non-empty when the token counts rest on an assumption (CFQ without its files)."""


def split_ktok(examples: Iterable[Any]) -> float:
    """Thousands of tokens in a list of seq2seq examples (source + target lengths)."""
    return sum(len(e.src) + len(e.tgt) for e in examples) / 1000.0


def run_shape(cfg: Any) -> Shape:
    """The :class:`Shape` of a resolved ``RunConfig`` (builds or reads its data, cached)."""
    o = cfg.optim
    return _shape(cfg.task, o.updates_per_epoch, o.batch_size, o.raffel_protocol)


@lru_cache(maxsize=256)
def _shape(task: Any, updates_per_epoch: int, batch_size: int, protocol: str) -> Shape:
    from locattn.tasks import load_task  # here: builds data, which `study --help` never needs

    if task.name.startswith("raffel_"):
        from locattn.tasks.raffel import length_range
        from locattn.training.regression import DEFAULT_UPDATES

        lo, hi = length_range(task)
        mean = (lo + hi) / 2.0
        held = task.test_size if protocol == "paper" else task.dev_size
        return Shape(train=(updates_per_epoch or DEFAULT_UPDATES) * batch_size * mean / 1000.0,
                     dev=held * mean / 1000.0, test=task.test_size * mean / 1000.0)
    if task.name == "cfq":
        try:
            data = load_task(task, use_cache=False)
        except (OSError, ValueError):
            k = CFQ_ASSUMED_TOKENS / 1000.0
            test = CFQ_SIZES["test"] if not task.test_limit else min(task.test_limit, CFQ_SIZES["test"])
            return Shape(train=CFQ_SIZES["train"] * k, dev=CFQ_SIZES["dev"] * k, test=test * k,
                         assumed=f"CFQ files absent: official split sizes, {CFQ_ASSUMED_TOKENS} "
                                 "tokens per example assumed")
        scale = {"train": 1.0, "dev": 1.0, "test": 1.0}
    else:
        # A huge generated split is sampled (SAMPLE_EXAMPLES) and its tokens scaled up, so that a
        # plan never builds millions of examples; SCAN and Lookup ignore the sizes.
        scale = {k: max(1.0, getattr(task, f"{k}_size") / SAMPLE_EXAMPLES) for k in ("train", "dev", "test")}
        data = load_task(replace(task, **{f"{k}_size": min(getattr(task, f"{k}_size"), SAMPLE_EXAMPLES)
                                          for k in scale}))
    return Shape(train=scale["train"] * split_ktok(data.splits["train"]),
                 dev=scale["dev"] * split_ktok(data.splits["dev"]),
                 test=scale["test"] * sum(split_ktok(data.splits[n]) for n in data.test_splits))


@dataclass(frozen=True, kw_only=True)
class RunCost:
    """Predicted seconds of one run (one seed) on one device, one thread."""

    startup: float
    """Before the first epoch."""
    epoch: float
    """Per epoch (training + dev scoring + checkpoint)."""
    epochs: int
    """Epoch budget (``optim.epochs``)."""
    test: float
    """Test scoring after the last epoch."""
    how: str
    """How the rate was found: measured, task, family, flat or unmeasured."""
    assumed: str = ""
    """An assumption the token counts rest on, or empty."""

    @property
    def total(self) -> float:
        """Start-up, every epoch of the budget, and the test splits (an upper bound)."""
        return self.startup + self.epochs * self.epoch + self.test

    def left(self, epochs_done: float, started: bool = True) -> float:
        """Seconds still to go after ``epochs_done`` epochs (start-up only if not started)."""
        rest = max(0.0, self.epochs - epochs_done)
        return (0.0 if started else self.startup) + rest * self.epoch + self.test


def run_cost(cfg: Any, cal: Calibration, device: str = "cpu",
             flat_seconds_per_1k_examples: float | None = None) -> RunCost | None:
    """Predicted :class:`RunCost` of a resolved ``RunConfig`` on ``device``; None when the
    table has no row for that device and no flat fallback is given."""
    shape = run_shape(cfg)
    rate, how = cal.rate(device, cfg.task.name, variant_family(cfg.model))
    if rate is None:
        if flat_seconds_per_1k_examples is None:
            return None
        # The old flat model: seconds per 1,000 train + dev examples per epoch; no start-up, no test.
        per_epoch = (cfg.task.train_size + cfg.task.dev_size) / 1000.0 * flat_seconds_per_1k_examples
        return RunCost(startup=0.0, epoch=per_epoch, epochs=cfg.optim.epochs, test=0.0, how="flat",
                       assumed=shape.assumed)
    return RunCost(startup=rate.startup, epoch=shape.train * rate.train + shape.dev * rate.dev,
                   epochs=cfg.optim.epochs, test=shape.test * rate.test, how=how,
                   assumed=shape.assumed)


# ---------------------------------------------------------------------------- a study


@dataclass(frozen=True, kw_only=True)
class CellCost:
    """One cell's per-run cost and how many runs it has."""

    cell: str
    """Cell id."""
    runs: int
    """Runs (seeds x hparams points x search points) of the cell."""
    cost: RunCost
    """Per run."""


def cell_costs(spec: Any, cal: Calibration, device: str = "cpu") -> list[CellCost] | None:
    """Per-cell run costs of a :class:`study.spec.StudySpec` on ``device``, or None when the
    device is unmeasured. Cells that no row covers fall back to the spec's flat rate."""
    from locattn.config import make_run_config  # here: torch, kept off `study --help`

    per_cell = spec.n_runs() // max(1, len(spec.cells))
    out = []
    for cell in spec.cells:
        cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
        flat = spec.seconds_per_1k_examples if device == "cpu" or device in cal.devices() else None
        cost = run_cost(cfg, cal, device, flat)
        if cost is None:
            return None
        out.append(CellCost(cell=cell.cell, runs=per_cell, cost=cost))
    return out


def study_seconds(cells: Sequence[CellCost]) -> float:
    """Thread-seconds of every run of every cell (upper bound)."""
    return sum(c.runs * c.cost.total for c in cells)


def wall_seconds(cells: Sequence[CellCost], slots: int, study_startup: float = 0.0) -> float:
    """Wall seconds with ``slots`` runs at a time: the study's start-up, then the larger of
    the work spread over the slots and the longest single run."""
    if not cells:
        return study_startup
    longest = max(c.cost.total for c in cells)
    return study_startup + max(study_seconds(cells) / max(1, slots), longest)


def plan_lines(spec: Any, slots: int, cal: Calibration | None = None) -> list[str]:
    """The dry-run's cost lines: thread-hours and wall time per device, how each cell was
    priced, and any assumption."""
    cal = cal if cal is not None else load_calibration()
    threads = max(1.0, spec.cpus)
    lines = []
    for device, label in DEVICES.items():
        cells = cell_costs(spec, cal, device)
        if cells is None:
            lines.append(f"cost     {device.upper()}: unmeasured ({label}: no calibration row in "
                         f"{CALIBRATION_FILE.name})")
            continue
        total = study_seconds(cells) * threads
        startup = sum(c.runs * c.cost.startup for c in cells) + sum(
            c.runs * c.cost.test for c in cells)
        unit = "CPU" if device == "cpu" else "GPU"
        hours = f" = {total / 3600:,.1f} {unit}-hours" if total >= 360 else ""
        lines.append(
            f"cost     ~{_duration(total)} {unit} time{hours} ({label}; upper bound: every epoch of "
            f"the budget; {_duration(startup)} of it start-up and test scoring); "
            f"~{_duration(wall_seconds(cells, slots, cal.study_startup))} wall at {slots} concurrent")
        hows: dict[str, int] = {}
        for c in cells:
            hows[c.cost.how] = hows.get(c.cost.how, 0) + 1
        if set(hows) != {"measured"}:
            lines.append("         priced by " + ", ".join(
                f"{n} cells {_HOW[h]}" for h, n in sorted(hows.items())))
        for assumed in sorted({c.cost.assumed for c in cells if c.cost.assumed}):
            lines.append(f"         ASSUMED {assumed}")
    return lines


_HOW = {"measured": "measured", "task": "from the task's other families",
        "family": "from the family on other tasks", "flat": "at the flat cost.seconds_per_1k_examples"}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# ---------------------------------------------------------------------------- ETA


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


def eta_key(trial: Any) -> str:
    """The key a trial descriptor (``study.trainable.trial_descriptor``) is priced under: its
    cell and its selection hyperparameters (an ``optim.epochs`` hparam changes the cost)."""
    return trial["cell"] + "|" + json.dumps(trial.get("hparams") or {}, sort_keys=True, default=str)


def study_eta(trials: Sequence[Any], slots: int, cal: Calibration | None = None) -> "StudyEta":
    """A :class:`StudyEta` for the trial descriptors a driver session runs (each priced on this
    CPU; a trial of a search point or packed seeds trains ``len(seeds)`` runs)."""
    from locattn.config import make_run_config  # here: torch, kept off `study --help`

    cal = cal if cal is not None else load_calibration()
    costs: dict[str, RunCost] = {}
    expected: dict[str, int] = {}
    runs = 1
    for t in trials:
        key = eta_key(t)
        if key not in costs:
            cfg = make_run_config(task=t["task"], variant=t["variant"], overrides=t["overrides"])
            costs[key] = run_cost(cfg, cal, "cpu", 1.3)
        expected[key] = expected.get(key, 0) + 1
        runs = max(runs, len(t["seeds"]))
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
