"""Kernels a GPU would launch per training batch, counted on the CPU: the graphed pack's step
(:class:`locattn.training.graphed.GraphedStep`, uncaptured) on its eager and compiled paths.

    python benchmarks/bench_kernels.py [--cases copy/onestep] [--ks 1,64] [--paths eager,compiled]
        [--train-size 1000] [--inductor-cache DIR] [--out FILE.json] [--quick]

A GPU step of these models is launch-bound: each computing operator is at least one kernel
launch of a few microseconds, for tensors of a few kilobytes. What the step costs a GPU is
therefore first the number of kernels it dispatches, and that number does not depend on the
device: it is the step's operator sequence. This script profiles one training batch (forward,
backward, the stacked AdamW update) with ``torch.profiler`` on the CPU and counts its
*kernels*: the lowest computing operators of the trace, i.e. every ``aten::`` operator that is
not a view, metadata or allocation operator (:data:`NOT_KERNELS`) and has no computing operator
beneath it (``aten::mm`` counts once, not again as the ``aten::matmul`` above it), plus, on the
compiled path, every kernel inductor generated (profiled by name with
``torch._inductor.config.cpp.enable_kernel_profile``). A product with a bias (``baddbmm``,
``addmm``) counts twice: the copy of its bias into the result and the product, which has no
event of its own beneath its operator (:data:`PRODUCTS`). The CUDA build of the same step replays
this sequence, minus the CPU-only kernels inductor would fuse differently into Triton; a CUDA
graph (``optim.train_step: graphed`` on a GPU) launches it with one call, but the device still
runs every kernel of it, one after another.

Per case, path and K the script prints one line: kernels per batch, the batch's shape, the
ratio to the eager step of the same K, and the costliest operator names by count; ``--out``
writes every row as JSON. Counting is exact and repeatable (it is not a timing): the numbers
do not depend on the machine's load. The compiled path compiles first (cold: minutes on a CPU;
``--inductor-cache DIR`` reuses a warm cache). ``--quick``: the eager path, K = 1 and 4, on 200
training examples.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import machine_line, parse_args  # noqa: E402

#: ``aten::`` operators that launch no kernel of their own on a GPU: views, metadata, allocation,
#: dtype/device no-ops and the composite operators whose work is done by the operators beneath
#: them (counted there).
NOT_KERNELS = frozenset({
    "aten::as_strided", "aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::reshape",
    "aten::resolve_conj", "aten::resolve_neg", "aten::t", "aten::transpose", "aten::permute",
    "aten::expand", "aten::expand_as", "aten::view_as", "aten::slice", "aten::select", "aten::narrow",
    "aten::unsqueeze", "aten::squeeze", "aten::unbind", "aten::split", "aten::chunk", "aten::flatten",
    "aten::unflatten", "aten::detach", "aten::alias", "aten::lift_fresh", "aten::result_type",
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resize_", "aten::set_",
    "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::dim", "aten::size",
    "aten::stride", "aten::contiguous", "aten::to", "aten::_to_copy", "aten::clone",
    "aten::scalar_tensor", "aten::zeros", "aten::ones", "aten::full", "aten::new_empty",
    "aten::new_zeros", "aten::zeros_like", "aten::ones_like", "aten::full_like", "aten::linear",
    "aten::matmul", "aten::dropout", "aten::_has_compatible_shallow_copy_type", "aten::new_empty_strided",
})

#: Products that launch their own matrix kernel beneath the operators they call: an out-of-place
#: ``baddbmm``/``addmm`` first copies its bias into the result (an ``aten::copy_`` event), then runs
#: the product itself, which has no event of its own; both are kernels.
PRODUCTS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv",
                      "aten::mv", "aten::dot"})


def is_kernel(name: str) -> bool:
    """Whether a profiler event of this name computes: an ``aten::`` operator outside
    :data:`NOT_KERNELS`, or a kernel inductor generated (``..._cpp_fused_...``, ``triton_...``)."""
    if "cpp_fused" in name or name.startswith("triton_"):
        return True
    return name.startswith("aten::") and name not in NOT_KERNELS


def kernel_events(events: Iterable[Any]) -> list[Any]:
    """The lowest computing events of a ``torch.profiler`` trace: :func:`is_kernel` and no
    computing event beneath (so a composite operator is counted by its parts, once). A dtype
    conversion (``aten::to``) inside a computing operator is left out with what it calls: it
    wraps a Python scalar argument on the host, which a GPU kernel takes as an argument."""
    def walk(e: Any, inside: bool) -> list[Any]:
        if inside and e.name in ("aten::to", "aten::_to_copy"):
            return []
        computes = is_kernel(e.name)
        below = [k for c in e.cpu_children for k in walk(c, inside or computes)]
        if e.name in PRODUCTS:  # its own product kernel, and what it launched before it
            return [e] + below
        return [e] if computes and not below else below

    return [k for e in events if e.cpu_parent is None for k in walk(e, False)]


def count_batch(task: str, variant: str, path: str, K: int, train_size: int, tmp: Path) -> dict[str, Any]:
    """Profile one training batch of a graphed pack of ``K`` seeds of ``task``/``variant`` on
    ``path`` (eager or compiled; compiled: after a first, compiling batch) and count its kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from locattn.config import make_run_config
    from locattn.tasks import load_task
    from locattn.train import Seq2SeqRun
    from locattn.training.graphed import GraphedStep

    if path == "compiled":
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True  # before the compile: kernels named in the trace
    over = {"task.train_size": train_size, "task.dev_size": 40, "task.test_size": 10, "num_threads": 1,
            "optim.train_step": "graphed", "train_path": path}
    cfgs = [make_run_config(task=task, variant=variant, seed=s, overrides=over) for s in range(K)]
    data = load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)
    runs = [Seq2SeqRun(c, data, tmp / f"{task}-{variant}-{path}-k{K}-{c.seed}") for c in cfgs]
    step = GraphedStep(runs, capture=False)
    step.load(1)
    rows = torch.from_numpy(step.epoch_rows(1))
    step.idx.copy_(rows[0])
    t0 = time.perf_counter()
    step._body()  # warm-up; on the compiled path, the compile
    first = time.perf_counter() - t0
    step.idx.copy_(rows[1 % len(rows)])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step._body()
    kernels = kernel_events(prof.events())
    names = Counter(e.name for e in kernels)
    src = step.src_all[step.idx]
    tgt = step.tgt_all[step.idx]
    return {"case": f"{task}/{variant}", "path": path, "K": K, "kernels": len(kernels),
            "batch": [int(src.shape[0]), int(src.shape[1]), int(tgt.shape[1])],
            "first_batch_s": round(first, 2), "top": names.most_common(8)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="copy/onestep", help="task/variant cells (comma-separated)")
    parser.add_argument("--ks", default="1,64", help="pack sizes (comma-separated)")
    parser.add_argument("--paths", default="eager,compiled", help="train paths: eager, compiled")
    parser.add_argument("--train-size", type=int, default=1000)
    parser.add_argument("--inductor-cache", metavar="DIR", default=None,
                        help="TORCHINDUCTOR_CACHE_DIR for the compiled path (a warm cache skips the compile)")
    parser.add_argument("--out", type=Path, default=None, help="also write every row to this JSON file")
    args = parse_args(parser, {"ks": "1,4", "paths": "eager", "train_size": 200}, argv,
                      what="the eager path, K = 1 and 4, on 200 training examples")
    from locattn.tasks import list_tasks
    from locattn.variants import list_variants

    cases = [tuple(c.split("/", 1)) for c in args.cases.split(",") if c]
    for case in cases:
        if len(case) != 2 or case[0] not in list_tasks() or case[1] not in list_variants():
            parser.error(f"--cases {'/'.join(case)}: not TASK/VARIANT (tasks: {', '.join(list_tasks())}; "
                         "variants: `locattn variants`)")
    paths = [p for p in args.paths.split(",") if p]
    for p in paths:
        if p not in ("eager", "compiled"):
            parser.error(f"--paths {p}: not a train path (eager, compiled)")
    ks = [int(k) for k in args.ks.split(",")]
    if args.inductor_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(args.inductor_cache).resolve())
    import torch

    torch.set_num_threads(1)
    print(machine_line(), flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for task, variant in cases:
            eager: dict[int, int] = {}
            for path in paths:
                for K in ks:
                    row = count_batch(task, variant, path, K, args.train_size, Path(tmp))
                    rows.append(row)
                    if path == "eager":
                        eager[K] = row["kernels"]
                    ratio = (f"; {eager[K] / row['kernels']:.1f}x fewer than eager"
                             if path != "eager" and K in eager else "")
                    top = ", ".join(f"{n} {c}" for n, c in row["top"])
                    print(f"{task}/{variant} {path:<8s} K={K:<4d} kernels per training batch: "
                          f"{row['kernels']:>6d} (batch {row['batch'][0]} x src {row['batch'][1]} x tgt "
                          f"{row['batch'][2]}; first batch {row['first_batch_s']:.2f} s){ratio} | {top}",
                          flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": machine_line(), "rows": rows}, indent=1) + "\n")
        print(f"wrote {len(rows)} rows to {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
