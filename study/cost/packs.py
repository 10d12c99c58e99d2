"""How large a GPU study's packs can be: the largest K that fits a device, by the memory model.

A GPU trial trains its runs as one graphed pack (:mod:`locattn.training.graphed`); a pack needs
``fixed + K x per_replica`` bytes (:mod:`locattn.training.memory`, from the config alone: the
weights and their copies, the data, a step's activations). Where a trial's runs do not fit the
device's share (``resources.gpus`` below 1 is a share of one device), the trial trains them as
several packs of at most the largest K that fits, one after another
(:func:`locattn.training.packed.train_packed` sizes its packs so at run time, from the device
it finds). Packing is operational: the runs, their identities and their results stay the same.

The dry run prints one line per device of :data:`DEVICE_MEMORY` (and the machine's own CUDA
device, when it has one): whether every trial fits as one pack, and if not, the packs it
becomes and why; the cost model then prices the GPU's runs at that pack size. Imports
``locattn`` only.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from locattn.config import make_run_config
from study.cost.calibration import device_key
from study.cost.sampling import SAMPLE_EXAMPLES, sample_data

if TYPE_CHECKING:
    from locattn.config import RunConfig
    from study.spec import StudySpec

GIB = 1 << 30
#: The memory of the GPUs a plan sizes packs for, in bytes: the makers' figures (NVIDIA H100
#: SXM 80 GB, H200 141 GB), not a measurement; the CUDA context and the allocator's rounding are
#: inside the memory model's headroom.
DEVICE_MEMORY = {"h100": 80 * 10**9, "h200": 141 * 10**9}


@lru_cache(maxsize=256)
def _cell_memory(task: Any, model: Any, batch_size: int) -> Any:
    """:class:`~locattn.training.memory.PackMemory` of a cell's pack (data built or read once per
    task, a generated split larger than :data:`study.cost.sampling.SAMPLE_EXAMPLES` sampled and its
    bytes scaled)."""
    from locattn.packed import pack_memory, split_bytes  # torch: off `study --help`

    try:
        data = sample_data(task)
    except (OSError, ValueError):  # data a plan cannot build here (CFQ without its files)
        return None
    vocab, train, dev = data.vocab, data.splits["train"], data.splits["dev"]
    ids = dict(pad_id=vocab.pad_id, sos_id=vocab.sos_id, eos_id=vocab.eos_id)
    scale = {n: max(1.0, getattr(task, f"{n}_size") / max(1, len(split)))
             for n, split in (("train", train), ("dev", dev)) if len(split) >= SAMPLE_EXAMPLES}
    S = max(len(e.src) for e in train)
    T = max(len(e.tgt) for e in train) + 1
    n_train = int(len(train) * scale.get("train", 1.0))
    data_bytes = int(split_bytes(train) * scale.get("train", 1.0) + split_bytes(dev) * scale.get("dev", 1.0))
    cfg = make_run_config(task=task.name, variant="onestep")
    cfg = replace(cfg, model=model, optim=replace(cfg.optim, batch_size=batch_size))
    return pack_memory(cfg, len(vocab), ids, (batch_size, S, T), n_train, data_bytes)


def cell_memory(cfg: RunConfig) -> Any:
    """The pack memory model of a resolved seq2seq ``RunConfig``'s cell (cached per task, model
    and batch size); None when its data cannot be built here."""
    return _cell_memory(cfg.task, cfg.model, cfg.optim.batch_size)


def runs_per_trial(spec: StudySpec) -> int:
    """Runs one trial of ``spec`` trains together (its pack): the study's runs over its trials."""
    return max(1, spec.n_runs() // max(1, spec.n_trials()))


def device_share(spec: StudySpec) -> float:
    """The fraction of one device a trial gets (``resources.gpus``, at most 1)."""
    return min(1.0, spec.gpus) if spec.gpus > 0 else 1.0


def largest_pack(spec: StudySpec, device_bytes: int) -> tuple[int, str] | None:
    """(the largest K every cell's pack fits on a device of ``device_bytes``, the cell that
    limits it) for a GPU spec whose trials pack; None otherwise (a CPU spec, trials that do not
    pack, or a cell whose model the memory model does not cover)."""
    if spec.gpus <= 0 or not spec.packed:
        return None
    best: tuple[int, str] | None = None
    for cell in spec.cells:
        cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
        if cfg.model.kind != "seq2seq":
            return None
        mem = cell_memory(cfg)
        if mem is None:
            return None
        k = mem.largest_k(device_bytes, share=device_share(spec))
        if best is None or k < best[0]:
            best = (k, cell.cell)
    return best


def pack_lines(spec: StudySpec, devices: dict[str, int]) -> list[str]:
    """One plan line per device (key -> bytes): whether a trial's pack fits it, else how many
    packs of which size the trial trains instead and why (the memory model's figures)."""
    lines = []
    runs = runs_per_trial(spec)
    for device, total in devices.items():
        found = largest_pack(spec, total)
        if found is None:
            continue
        fit, cell = found
        label = f"pack     {device.upper()} ({total / 10**9:.0f} GB)"
        cfg = next(make_run_config(task=c.task, variant=c.variant, overrides=c.overrides)
                   for c in spec.cells if c.cell == cell)
        mem = cell_memory(cfg)
        if runs <= fit:
            lines.append(f"{label}: a trial's {runs:,} runs fit as one pack (the largest K that fits is "
                         f"{fit:,}, for {cell}; {mem.per_replica / 2**20:.1f} MiB a replica by the memory model)")
            continue
        n = math.ceil(runs / fit)
        size = math.ceil(runs / n)
        lines.append(f"{label}: a trial's {runs:,} runs train as {n} packs of at most {size:,}, one after "
                     f"another: for {cell}, {mem.why(runs, total, share=device_share(spec))} "
                     "(operational: the same runs and run identities)")
    return lines


def pack_cap(spec: StudySpec, device: str) -> int | None:
    """The runs one pack of ``spec`` holds on ``device`` (a :data:`DEVICE_MEMORY` key), the
    memory model's largest K where a trial's runs do not fit; None when unknown."""
    total = DEVICE_MEMORY.get(device)
    found = largest_pack(spec, total) if total is not None else None
    if found is None:
        return None
    return min(runs_per_trial(spec), found[0])


def local_cuda_memory() -> dict[str, int]:
    """{device key: total bytes} of this machine's first CUDA device, or {} without one."""
    import torch  # heavy: off `study --help`

    if not torch.cuda.is_available():
        return {}

    props = torch.cuda.get_device_properties(0)
    return {f"{device_key(props.name)} here": int(props.total_memory)}


__all__ = ["DEVICE_MEMORY", "GIB", "cell_memory", "device_share", "largest_pack", "local_cuda_memory",
           "pack_cap", "pack_lines", "runs_per_trial"]
