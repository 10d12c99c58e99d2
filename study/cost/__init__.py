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

The parts, lowest first: :mod:`study.cost.calibration` (the table), :mod:`study.cost.pricing` (the
model), :mod:`study.cost.eta` (a running study's ETA). This package's ``__init__`` prints a dry-run's cost lines
(:func:`plan_lines`) and re-exports the public names of the parts. Imports ``locattn`` only (no
Ray, no MLflow): ``study.spec`` builds its dry-run plan from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from locattn.config import TRAIN_PATHS, make_run_config
from study.cost.calibration import (CALIBRATION_FILE, DEVICES, Calibration, Rate, calibration_from_dict,
                               calibration_to_dict, device_key, load_calibration, merge_rates)
from study.cost.eta import (PRIOR_EPOCHS, StudyEta, TrialProgress, blend_ratio, eta_key, eta_seconds, format_eta,
                       study_eta, trial_left)
from study.cost.packs import DEVICE_MEMORY, local_cuda_memory, pack_cap, pack_lines
from study.cost.pricing import (CFQ_ASSUMED_TOKENS, CFQ_SIZES, SAMPLE_EXAMPLES, CellCost, RunCost, Shape, cell_costs,
                                cost_task, gpu_pack, gpu_unpriced, priced_pack, run_cost, run_shape, split_ktok, study_seconds, variant_family, wall_seconds)

if TYPE_CHECKING:
    from study.spec import StudySpec

__all__ = [
    "CALIBRATION_FILE", "CFQ_ASSUMED_TOKENS", "CFQ_SIZES", "DEVICES", "PRIOR_EPOCHS", "SAMPLE_EXAMPLES",
    "Calibration", "CellCost", "Rate", "RunCost", "Shape", "StudyEta", "TrialProgress", "blend_ratio",
    "calibration_from_dict", "calibration_to_dict", "cell_costs", "cost_task", "device_key", "eta_key", "eta_seconds",
    "format_eta", "gpu_pack", "pack_cap", "pack_lines", "priced_pack", "gpu_unpriced", "load_calibration", "merge_rates", "plan_lines", "run_cost", "run_shape", "split_ktok", "study_eta", "study_seconds",
    "trial_left", "variant_family", "wall_seconds",
]


def plan_lines(spec: StudySpec, slots: int, cal: Calibration | None = None, train_path: str | None = None
               ) -> list[str]:
    """The dry-run's cost lines: thread-hours and wall time per device, how each cell was
    priced, and any assumption; runs priced on ``train_path`` (None: eager)."""
    cal = cal if cal is not None else load_calibration()
    threads = max(1.0, spec.cpus)
    lines = []
    devices = {**DEVICES, **{d: f"one {d.upper()}" for d in cal.devices() if d not in DEVICES}}
    on_path = f", --train-path {train_path}" if train_path not in (None, "eager") else ""
    sized = {**{d: DEVICE_MEMORY[d] for d in devices if d in DEVICE_MEMORY}, **local_cuda_memory()}
    lines.extend(pack_lines(spec, sized))
    for device, label in devices.items():
        label += on_path
        cells = cell_costs(spec, cal, device, train_path)
        if cells is None:
            why = _gpu_why(spec, cal, device)
            lines.append(f"cost     {device.upper()}: unmeasured ({label}: "
                         f"{why or 'no calibration row in ' + CALIBRATION_FILE.name})")
            continue
        gpu = device != "cpu"
        total = study_seconds(cells) * (1.0 if gpu else threads)  # a GPU row is a run's share of the device
        startup = sum(c.runs * c.cost.startup for c in cells) + sum(
            c.runs * c.cost.test for c in cells)
        unit = "GPU" if gpu else "CPU"
        hours = f" = {total / 3600:,.1f} {unit}-hours" if total >= 360 else ""
        if gpu:
            packs = sorted({r.pack for r in cal.rates if r.device == device
                            and (priced_pack(spec, device) is None or r.pack <= priced_pack(spec, device))})
            lines.append(
                f"cost     ~{_duration(total)} {unit} time{hours} ({label}; per seed-epoch of graphed "
                f"packs of {packs[-1]} runs{'' if spec.gpus > 0 else ', were the runs so trained'}; upper "
                f"bound: every epoch of the budget; {_duration(startup)} of it capture and test scoring)")
        else:
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
        if not gpu and spec.packed and not any(r.device == "cpu" and r.pack > 1 for r in cal.rates):
            lines.append("         ASSUMED a packed trial's runs at their solo rates, one core each (an upper "
                         f"bound: a pack trains them in one process; no CPU pack row in {CALIBRATION_FILE.name})")
        if device == "cpu" and train_path in (None, "eager"):
            lines.extend(_faster_paths(spec, cal, threads, total))
    return lines


def _faster_paths(spec: StudySpec, cal: Calibration, threads: float, eager_total: float) -> list[str]:
    """A line per train path that every cell's model takes and the table prices for every
    cell's task, when it is cheaper than eager: what ``--train-path`` would save."""
    out = []
    kinds = {make_run_config(task=c.task, variant=c.variant, overrides=c.overrides).model.kind for c in spec.cells}
    for path in sorted({r.path for r in cal.rates if r.device == "cpu"} - {"eager"}):
        if not all(path in TRAIN_PATHS[k] for k in kinds):
            continue
        cells = cell_costs(spec, cal, "cpu", path)
        if cells is None or any(c.cost.assumed for c in cells):
            continue  # a cell priced at eager rates: no measured saving to show
        total = study_seconds(cells) * threads
        if total < eager_total:
            out.append(f"faster   --train-path {path}: ~{_duration(total)} CPU time, x{eager_total / total:.1f} "
                       "(the same runs, measured rows of that path; not part of any run's identity)")
    return out


def _gpu_why(spec: StudySpec, cal: Calibration, device: str) -> str:
    """Why a device with rows still cannot price ``spec`` (empty when it has no rows)."""
    if device == "cpu" or device not in cal.devices():
        return ""
    for cell in spec.cells:
        why = gpu_unpriced(spec, make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides))
        if why:
            return why
    return f"no row of a pack of at most {priced_pack(spec, device)} runs"


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
