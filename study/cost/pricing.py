"""The cost model itself (:mod:`study.cost` explains it): the tokens a run processes
(:class:`Shape`), its predicted seconds on a device (:class:`RunCost`), and a study's cells,
thread-seconds and wall time. Imports ``locattn`` only, inside the functions that build data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from locattn.config import make_run_config
from locattn.models.config import packable_families
from study.cost.calibration import Calibration
from study.cost.packs import pack_cap
from study.cost.sampling import SAMPLE_EXAMPLES, sample_data

if TYPE_CHECKING:
    from locattn.config import RunConfig
    from locattn.models.config import ModelConfig
    from locattn.tasks.config import TaskConfig
    from study.spec import StudySpec

#: CFQ's official split sizes (``query_complexity_split``), used when its files are absent.
CFQ_SIZES = {"train": 100_654, "dev": 9_512, "test": 9_512}
#: Tokens per CFQ example (question + SPARQL query) when its files are absent: an ASSUMPTION,
#: not a measurement (no CFQ data on these machines); a plan that uses it says so.
CFQ_ASSUMED_TOKENS = 80
#: CPU seconds a compiled run (``train_path: compiled``) adds to its start-up when its saved step
#: is in the study's shared cache (it loads it), and when it is not (a cold compile): the fixed
#: costs of whole Copy/OneStepAttn runs at 10,000 examples over eager's
#: (benchmarks/bench_whole_run.py), the larger of two runs: 7.0 and 127.4 on an AMD EPYC at load
#: 3-4 (saved step, before the product rewrites), 2.3 and 83.6 on an Intel Xeon at load 0.3-1.0
#: (with both rewrites of the compiled step).
COMPILE_LOAD_CPU_SECONDS = 7.0
COMPILE_COLD_CPU_SECONDS = 127.0

#: Tasks priced by one task measured in :data:`COMPILED_WHOLE_RUNS`: the reverse variants draw the
#: same lengths as their base task; the inverse ReCopy tasks swap source and target lengths, and
#: are assumed (not measured) to cost as ReCopy does.
COMPILED_TASK_SHAPES = {
    "copy": "copy", "reverse_copy": "copy",
    "lookup": "lookup", "reverse_lookup": "lookup",
    "recopy": "recopy", "reverse_recopy": "recopy", "inv_recopy": "recopy", "inv_reverse_recopy": "recopy",
}
#: Variants whose compiled graph is a variant's measured in :data:`COMPILED_WHOLE_RUNS`:
#: OneStepAttn's ablation switches keep every operation and shape (they gate values).
COMPILED_VARIANT_GRAPHS = {"onestep": "onestep", "onestep_no_step2": "onestep",
                           "onestep_no_step3": "onestep", "onestep_no_sigmoid": "onestep"}


@dataclass(frozen=True)
class CompiledRun:
    """Whole-run costs of ``train_path: compiled`` against eager, one thread on a CPU, measured
    at one data size."""

    train_size: int
    """Training examples per epoch it was measured at (dev and test a fifth of it or more)."""
    cold_extra: float
    """CPU seconds a run that compiles cold adds to eager's fixed cost (start-up and test)."""
    epoch_ratio: float
    """The compiled marginal epoch's CPU seconds over eager's (below 1: compiled is faster)."""


#: Measured by ``benchmarks/bench_whole_run.py`` (the performance docs give the commands, the
#: machine, its load and every contender's numbers), keyed by (:data:`COMPILED_TASK_SHAPES`
#: value, :data:`COMPILED_VARIANT_GRAPHS` value), one entry per train size measured: of several
#: runs at one size, the least favourable to compiled. The gain depends on the size and the task:
#: Copy at 2,000 examples gained nothing per epoch. Lookup's training split is 9,081 examples
#: whatever ``task.train_size`` says, so its one entry (size 0) covers every size.
COMPILED_WHOLE_RUNS: dict[tuple[str, str], tuple[CompiledRun, ...]] = {
    ("copy", "onestep"): (CompiledRun(train_size=2000, cold_extra=141.6, epoch_ratio=0.99),
                          CompiledRun(train_size=10000, cold_extra=127.4, epoch_ratio=0.50)),
    ("lookup", "onestep"): (CompiledRun(train_size=0, cold_extra=106.7, epoch_ratio=0.49),),
    ("recopy", "onestep"): (CompiledRun(train_size=2000, cold_extra=233.1, epoch_ratio=0.30),
                            CompiledRun(train_size=10000, cold_extra=278.9, epoch_ratio=0.61)),
}
#: Task fields that leave a run's training batches as measured: the split sizes (the rows are
#: per size) and what only the test splits read (a fixed cost, not the epoch).
_SIZE_FIELDS = ("train_size", "dev_size", "test_size", "test_lengths", "test_limit", "data_seed")


def compiled_whole_run(cfg: RunConfig) -> CompiledRun | None:
    """The measured :class:`CompiledRun` of a resolved ``RunConfig``, or None: not measured for
    its task and variant, a model, batch size, teacher forcing or training lengths other than
    the ones measured (its variant's and task's defaults), or a training split smaller than every
    size measured. Between two sizes measured, the less favourable of the two to compiled."""
    key = (COMPILED_TASK_SHAPES.get(cfg.task.name), COMPILED_VARIANT_GRAPHS.get(cfg.variant))
    rows = COMPILED_WHOLE_RUNS.get(key, ())  # type: ignore[arg-type]
    if not rows:
        return None
    base = make_run_config(task=cfg.task.name, variant=cfg.variant)
    if (cfg.model != base.model or replace(cfg.task, **{f: getattr(base.task, f) for f in _SIZE_FIELDS}) != base.task
            or (cfg.optim.batch_size, cfg.optim.teacher_forcing_ratio)
            != (base.optim.batch_size, base.optim.teacher_forcing_ratio)):
        return None
    size = cfg.task.train_size
    below = [r for r in rows if r.train_size <= size]
    above = [r for r in rows if r.train_size > size]
    if not below:
        return None
    at = max(below, key=lambda r: r.train_size)
    if at.train_size == size or not above:
        return at
    nxt = min(above, key=lambda r: r.train_size)
    return CompiledRun(train_size=size, cold_extra=max(at.cold_extra, nxt.cold_extra),
                       epoch_ratio=max(at.epoch_ratio, nxt.epoch_ratio))


def variant_family(model: ModelConfig) -> str:
    """A model config's cost family: the attention family, ``+mix`` for mixed location
    attention, prefixed by the encoder when it is not the default BiGRU (``gru_residual/content``)."""
    att = model.attention
    name = att.family + ("+mix" if att.family == "location" and att.mode == "mix" else "")
    return name if model.encoder == "bigru" else f"{model.encoder}/{name}"


#: Suffix of the calibration task key of a variable-length Raffel & Ellis task (lengths 50 to
#: 10,000): a token there costs 2-3x one at T0 = 50 (memory-bound tensors, held-out batches padded
#: to their longest sequence), so it has rows of its own.
VARIABLE_SUFFIX = "@variable"


def cost_task(task: TaskConfig) -> str:
    """The calibration table's task key of a ``TaskConfig``: its name, with
    :data:`VARIABLE_SUFFIX` for a variable-length Raffel & Ellis task."""
    if task.name.startswith("raffel_") and task.variable_length:
        return task.name + VARIABLE_SUFFIX
    return task.name


@dataclass(frozen=True, kw_only=True)
class Shape:
    """Thousands of tokens a run processes."""

    train: float
    """Trained per epoch."""
    dev: float
    """Scored per epoch (Raffel & Ellis: the held-out split of ``eval.regression_protocol``)."""
    test: float
    """Scored once, after the last epoch."""
    assumed: str = ""
    """Non-empty when the token counts rest on an assumption (CFQ without its files)."""


def split_ktok(examples: Iterable[Any]) -> float:
    """Thousands of tokens in a list of seq2seq examples (source + target lengths)."""
    return sum(len(e.src) + len(e.tgt) for e in examples) / 1000.0


def run_shape(cfg: RunConfig) -> Shape:
    """The :class:`Shape` of a resolved ``RunConfig`` (builds or reads its data, cached)."""
    o = cfg.optim
    return _shape(cfg.task, o.updates_per_epoch, o.batch_size, cfg.eval.regression_protocol)


@lru_cache(maxsize=256)
def _shape(task: Any, updates_per_epoch: int, batch_size: int, protocol: str) -> Shape:
    from locattn.tasks import load_task  # here: builds data, which `study --help` never needs

    if task.name.startswith("raffel_"):
        # torch, as above
        from locattn.tasks.raffel import length_range
        from locattn.train import DEFAULT_UPDATES

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
        data = sample_data(task)
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


def run_cost(cfg: RunConfig, cal: Calibration, device: str = "cpu",
             flat_seconds_per_1k_examples: float | None = None, pack: int | None = None) -> RunCost | None:
    """Predicted :class:`RunCost` of a resolved ``RunConfig`` on ``device``; None when the
    table has no row for that device and no flat fallback is given. ``pack``: at most this
    many runs share the device (a GPU's rows are per run of a pack, :class:`Rate.pack`)."""
    shape = run_shape(cfg)
    task, family, path = cost_task(cfg.task), variant_family(cfg.model), cfg.train_path
    rate, how = cal.rate(device, task, family, pack, path)
    # compiled on a CPU with no compiled row: eager's rows, times the epoch ratio of whole runs where measured
    scaled = compiled_whole_run(cfg) if path == "compiled" and device == "cpu" and rate is not None \
        and rate.path != path else None
    if rate is not None and rate.path != path:
        shape = replace(shape, assumed="; ".join(filter(None, [shape.assumed, (
            f"--train-path {path}: epochs priced at eager rates times the compiled/eager epoch ratio of whole "
            "runs measured on the task's shapes (COMPILED_WHOLE_RUNS, study/cost/pricing.py)" if scaled is not None
            else f"--train-path {path} priced at eager rates (no {path} row for task {task})")])))
    if rate is None:
        if flat_seconds_per_1k_examples is None:
            return None
        # The old flat model: seconds per 1,000 train + dev examples per epoch; no start-up, no test.
        per_epoch = (cfg.task.train_size + cfg.task.dev_size) / 1000.0 * flat_seconds_per_1k_examples
        return RunCost(startup=0.0, epoch=per_epoch, epochs=cfg.optim.epochs, test=0.0, how="flat",
                       assumed=shape.assumed)
    startup, epoch = rate.startup, shape.train * rate.train + shape.dev * rate.dev
    if path == "compiled" and device == "cpu":  # its graph: loaded from the study's shared cache
        startup += COMPILE_LOAD_CPU_SECONDS
        if scaled is not None:
            epoch *= scaled.epoch_ratio
        shape = replace(shape, assumed="; ".join(filter(None, [shape.assumed, (
            f"--train-path compiled: +{COMPILE_LOAD_CPU_SECONDS:.0f} s per run to load its graph from the "
            f"study's inductor cache; the first run of a shape compiles it (~{COMPILE_COLD_CPU_SECONDS:.0f} "
            f"CPU-s for Copy, not priced)")])))
    return RunCost(startup=startup, epoch=epoch, epochs=cfg.optim.epochs, test=shape.test * rate.test,
                   how=how, assumed=shape.assumed)


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


def gpu_pack(spec: StudySpec) -> int | None:
    """How many runs at most share one GPU in ``spec``'s study: a trial's runs (its pack) times
    the trials one device holds (``1 / resources.gpus``); None for a CPU spec, priced as if its
    runs trained as graphed packs of any size the table has."""
    if spec.gpus <= 0:
        return None
    per_trial = max(1, spec.n_runs() // max(1, spec.n_trials()))
    return per_trial * max(1, int(1.0 / spec.gpus + 1e-9)) if spec.gpus < 1 else per_trial


def priced_pack(spec: StudySpec, device: str) -> int | None:
    """The pack size a GPU's rows price ``spec``'s runs at: :func:`gpu_pack`, capped where the
    memory model says a trial's runs do not fit ``device`` as one pack
    (:func:`study.cost.packs.pack_cap`: they train as several packs of the largest K that fits)."""
    pack, cap = gpu_pack(spec), pack_cap(spec, device)
    if cap is None:
        return pack
    return cap if pack is None else min(pack, cap)


def gpu_unpriced(spec: StudySpec, cfg: RunConfig) -> str:
    """Why a GPU's rows (graphed packs, ``benchmarks/bench_gpu.py --calibrate``) cannot price
    the cell of ``cfg`` in ``spec``, or "" when they can: the model must pack, and a GPU spec
    must pack its trials and train them with ``optim.train_step: graphed``."""
    if cfg.model.kind != "seq2seq" or cfg.model.attention.family not in packable_families():
        return f"{cfg.task.name}/{cfg.variant} cannot train as a graphed pack"
    if spec.gpus > 0 and not (spec.packed and cfg.optim.train_step == "graphed"):
        return "GPU trials that are not graphed packs are not calibrated"
    return ""


def cell_costs(spec: StudySpec, cal: Calibration, device: str = "cpu", train_path: str | None = None
               ) -> list[CellCost] | None:
    """Per-cell run costs of a :class:`study.spec.StudySpec` on ``device``, or None when the
    device is unmeasured. Cells that no row covers fall back to the spec's flat rate. Runs are
    priced on ``train_path`` (None: eager; :meth:`Calibration.rate`).

    A GPU (any device but ``cpu``) prices its runs per seed-epoch of a graphed pack, from the
    rows of the largest pack size it was measured at that the study's packs reach
    (:func:`gpu_pack`); None when a cell cannot be priced so (:func:`gpu_unpriced`)."""
    per_cell = spec.n_runs() // max(1, len(spec.cells))
    out = []
    for cell in spec.cells:
        cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
        if train_path not in (None, "eager"):
            cfg = replace(cfg, train_path=train_path)
        if device != "cpu":
            if gpu_unpriced(spec, cfg):
                return None
            cost = run_cost(cfg, cal, device, None, priced_pack(spec, device))
            if cost is None:
                return None
            out.append(CellCost(cell=cell.cell, runs=per_cell, cost=cost))
            continue
        flat = spec.seconds_per_1k_examples
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
