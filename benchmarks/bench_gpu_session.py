"""One time-boxed GPU check for a lent device: packed == solo first, then seed-epochs/s of
Copy/OneStepAttn packs at K = 1, 64, 256 and 1,024 on the eager, graphed and compiled paths,
everything in one JSON file.

    python benchmarks/bench_gpu_session.py [--out gpu_session.json] [--deadline 450]
        [--ks 1,64,256,1024] [--paths eager,graphed,compiled] [--train-size 2000]
        [--case copy/onestep] [--device cuda] [--quick]

Paths (what a study's trial runs, per pack of K seeds of one cell):

- ``eager``: the packed eager pass (:func:`locattn.packed.packed_train_epoch`), the default
  ``optim.train_step``;
- ``graphed``: ``optim.train_step: graphed``, the static-shape step recorded once as a CUDA graph
  and replayed (:class:`locattn.training.graphed.GraphedStep`; uncaptured on a CPU);
- ``compiled``: the graphed step under ``train_path: compiled`` (torch.compile inside the graph).

1. **Equality**, per path, on a small split (200 examples): a pack of 2 seeds against each seed
   trained alone (a pack of one), one epoch; the largest relative difference of the epoch losses.
   Eager and graphed on a CPU are bit-equal (a failure exits 1); on a GPU, and on the compiled
   path, a pack may round otherwise: the difference is reported.
2. **Throughput**, per path and K: one first epoch (graph capture and compile included, reported
   apart), then one timed training epoch; seed-epochs/s = K / that epoch's wall seconds (training
   pass only: dev scoring and test decoding are not timed here; ``bench_gpu.py`` times them).
   On CUDA the largest K that fits is measured first (:func:`locattn.training.graphed.
   measure_bytes_per_replica`, :func:`~locattn.training.graphed.pick_pack_size`); a K above it is
   replaced by that K, and the row says so. A K whose estimated time (from the previous K of the
   path, scaled by K) would pass the deadline is skipped, and the row says so.

Every row goes to ``--out`` as soon as it is measured (a session cut short keeps what it
measured), with the machine line, the device, the torch version and the command. ``--deadline``
(seconds, default 450: under 8 minutes with start-up) bounds the whole script. ``--quick`` (the
CI ``bench`` tier, a CPU dry run): K = 1, 2, the eager and graphed paths, 200 examples; the
compiled path is left out there, since its cold compile takes minutes on a CPU (give
``--paths`` to include it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._common import machine_line, parse_args  # noqa: E402
from locattn.config import make_run_config  # noqa: E402
from locattn.packed import packed_train_epoch  # noqa: E402
from locattn.tasks import list_tasks, load_task  # noqa: E402
from locattn.train import Seq2SeqRun  # noqa: E402
from locattn.training.graphed import GraphedStep, measure_bytes_per_replica, pick_pack_size  # noqa: E402
from locattn.variants import list_variants  # noqa: E402

PATHS = ("eager", "graphed", "compiled")


def overrides(path: str, train_size: int, device: torch.device) -> dict[str, Any]:
    """The config overrides of one path (see the module docstring)."""
    over: dict[str, Any] = {"task.train_size": train_size, "task.dev_size": 40, "task.test_size": 10,
                            "num_threads": 1, "device": str(device)}
    if path in ("graphed", "compiled"):
        over["optim.train_step"] = "graphed"
    if path == "compiled":
        over["train_path"] = "compiled"
    return over


class Pack:
    """K runs (seeds 0..K-1) of one cell on one path, and their training epoch."""

    def __init__(self, task: str, variant: str, path: str, K: int, train_size: int, device: torch.device,
                 tmp: Path, data: Any = None, seeds: list[int] | None = None) -> None:
        seeds = list(range(K)) if seeds is None else seeds
        cfgs = [make_run_config(task=task, variant=variant, seed=s, overrides=overrides(path, train_size, device))
                for s in seeds]
        self.data = data if data is not None else load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)
        tag = "-".join(map(str, seeds)) if len(seeds) <= 4 else f"k{len(seeds)}"
        self.runs = [Seq2SeqRun(c, self.data, tmp / f"{path}-{tag}-{c.seed}") for c in cfgs]
        self.path, self.device = path, device
        self.step = GraphedStep(self.runs) if path != "eager" else None

    def epoch(self, n: int) -> list[float]:
        """One training pass of every run (epoch ``n``); per run its mean loss. Synchronised."""
        for r in self.runs:
            r.epoch = n
        out = self.step.train_epoch(n) if self.step is not None else packed_train_epoch(self.runs, n)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def rel_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def equality(task: str, variant: str, path: str, device: torch.device, tmp: Path) -> dict[str, Any]:
    """A pack of seeds 0 and 1 against each seed alone, one epoch on 200 examples."""
    pack = Pack(task, variant, path, 2, 200, device, tmp)
    packed = pack.epoch(1)
    solo = [Pack(task, variant, path, 1, 200, device, tmp, pack.data, [s]).epoch(1)[0] for s in (0, 1)]
    diff = rel_diff(packed, solo)
    exact = device.type == "cpu" and path != "compiled"
    return {"kind": "equality", "path": path, "packed": packed, "solo": solo, "max_rel_diff": diff,
            "must_be_equal": exact, "ok": (diff == 0.0) if exact else True}


def largest_k(task: str, variant: str, train_size: int, device: torch.device, tmp: Path) -> tuple[int, str]:
    """The largest graphed pack of this cell that fits the device now, and how that was found."""
    run = Pack(task, variant, "graphed", 1, train_size, device, tmp).runs[0]
    per, fixed = measure_bytes_per_replica(run)
    free, total = torch.cuda.mem_get_info(device)
    k = pick_pack_size(free, per, fixed_bytes=fixed)
    return k, (f"{per / 2**20:.1f} MiB per replica, {fixed / 2**20:.0f} MiB fixed, "
               f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free: largest K {k}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--case", default="copy/onestep", help="TASK/VARIANT")
    parser.add_argument("--ks", default="1,64,256,1024", help="pack sizes (comma-separated)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"train paths ({', '.join(PATHS)})")
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--deadline", type=float, default=450.0, help="seconds for the whole script")
    parser.add_argument("--out", type=Path, default=Path("gpu_session.json"))
    args = parse_args(parser, {"ks": "1,2", "paths": "eager,graphed", "train_size": 200, "deadline": 300.0},
                      argv, what="a CPU dry run: K = 1, 2, eager and graphed, 200 examples")
    start = time.perf_counter()
    task, _, variant = args.case.partition("/")
    if task not in list_tasks() or variant not in list_variants():
        parser.error(f"--case {args.case}: not TASK/VARIANT (tasks: {', '.join(list_tasks())}; "
                     "variants: `locattn variants`)")
    paths = [p for p in args.paths.split(",") if p]
    bad = [p for p in paths if p not in PATHS]
    if bad:
        parser.error(f"--paths {','.join(bad)}: not a path ({', '.join(PATHS)})")
    ks = [int(k) for k in args.ks.split(",") if k]
    device = torch.device(args.device)
    torch.set_num_threads(1)
    report: dict[str, Any] = {
        "command": "python benchmarks/bench_gpu_session.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine_line(), "torch": torch.__version__, "case": args.case,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "train_size": args.train_size, "deadline_s": args.deadline, "rows": []}

    def add(row: dict[str, Any]) -> None:
        row["at_s"] = round(time.perf_counter() - start, 1)
        report["rows"].append(row)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(json.dumps(row), flush=True)

    print(report["machine"], f"| device {report['device']}", flush=True)
    if device.type != "cuda":
        print("device: CPU: graphs are not captured; these are CPU numbers and say nothing about a GPU", flush=True)
    failed = False
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for path in paths:
            try:
                row = equality(task, variant, path, device, tmp)
            except Exception as exc:  # one broken path must not cost the others their device time
                row = {"kind": "equality", "path": path, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            failed |= not row["ok"]
            add(row)
        fit: int | None = None
        if device.type == "cuda" and any(p != "eager" for p in paths):
            fit, how = largest_k(task, variant, args.train_size, device, tmp)
            add({"kind": "memory", "largest_k": fit, "how": how})
        for path in paths:
            per_seed_epoch: float | None = None  # seconds of the last measured epoch per replica
            for K in ks:
                left = args.deadline - (time.perf_counter() - start)
                row: dict[str, Any] = {"kind": "throughput", "path": path, "K": K}
                if fit is not None and path != "eager" and K > fit:
                    row["note"] = f"K={K} does not fit: measured K={fit} instead"
                    K = row["K"] = fit
                if per_seed_epoch is not None and per_seed_epoch * K * 2.5 > left:
                    row["skipped"] = (f"about {per_seed_epoch * K * 2.5:.0f} s needed (two epochs at the "
                                      f"previous K's rate), {left:.0f} s left")
                    add(row)
                    continue
                try:
                    pack = Pack(task, variant, path, K, args.train_size, device, tmp)
                    first, _ = timed(lambda: pack.epoch(1))
                    wall, _ = timed(lambda: pack.epoch(2))
                except torch.cuda.OutOfMemoryError as exc:
                    row["error"] = f"out of memory: {str(exc).splitlines()[0]}"
                    add(row)
                    break
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    add(row)
                    break
                per_seed_epoch = wall / K
                row.update(first_epoch_s=round(first, 3), epoch_s=round(wall, 3),
                           seed_epochs_per_s=round(K / wall, 3))
                if device.type == "cuda":
                    row["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
                    torch.cuda.reset_peak_memory_stats(device)
                add(row)
                del pack
    report["wall_s"] = round(time.perf_counter() - start, 1)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {len(report['rows'])} rows to {args.out} in {report['wall_s']} s", flush=True)
    if failed:
        print("FAILED: a pack's losses differ from its solo runs where they must be equal (rows above)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
