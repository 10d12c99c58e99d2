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
   path, a pack may round otherwise: the difference is reported. On CUDA, per graphed path, the
   captured graph against the same step uncaptured (two epochs of a pack of 2): bit-equal, or the
   script exits 1 (the check the compiled path failed on an H200 before it was lowered under
   deterministic algorithms, :func:`locattn.training.graphed.deterministic_compile`).
2. **Memory**: the memory model of the cell's pack (:mod:`locattn.training.memory`: MiB a
   replica, fixed bytes, the largest K that fits the device), and on CUDA the measured growth per
   replica of one uncaptured step (:func:`locattn.training.graphed.measure_bytes_per_replica`,
   one run repeated) beside the part of the model that probe sees. The device's memory is its reported total on CUDA, ``--device-memory`` GiB
   otherwise (none: nothing is skipped for memory).
3. **Throughput**, per path and K: one first epoch (graph capture and compile included, reported
   apart), then one timed training epoch; seed-epochs/s = K / that epoch's wall seconds (training
   pass only: dev scoring and test decoding are not timed here; ``bench_gpu.py`` times them). A
   K the memory model says does not fit (the graphed pack's model, on every path: an eager pack
   holds the same weights, moments and data) is skipped, and the row says why; the largest K that
   fits is measured in its place unless it was measured already. A K whose estimated time (the
   previous K's rate scaled by K, plus its compile on the compiled path) would pass the deadline
   is skipped, and the row says so. On CUDA each row has its peak memory beside the model's.

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
from locattn.training.graphed import GraphedStep, measure_bytes_per_replica  # noqa: E402
from locattn.training.memory import run_pack_memory, unprobed_bytes  # noqa: E402
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
                 tmp: Path, data: Any = None, seeds: list[int] | None = None, capture: bool | None = None) -> None:
        seeds = list(range(K)) if seeds is None else seeds
        cfgs = [make_run_config(task=task, variant=variant, seed=s, overrides=overrides(path, train_size, device))
                for s in seeds]
        self.data = data if data is not None else load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)
        tag = "-".join(map(str, seeds)) if len(seeds) <= 4 else f"k{len(seeds)}"
        self.runs = [Seq2SeqRun(c, self.data, tmp / f"{path}-{tag}-{c.seed}") for c in cfgs]
        self.path, self.device = path, device
        self.step = GraphedStep(self.runs, capture=capture) if path != "eager" else None

    def epoch(self, n: int) -> list[float]:
        """One training pass of every run (epoch ``n``); per run its mean loss. Synchronised."""
        for r in self.runs:
            r.epoch = n
        out = self.step.train_epoch(n) if self.step is not None else packed_train_epoch(self.runs, n)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return out


def row_gib(report: dict[str, Any]) -> float:
    """The device's memory in GiB, as the report's memory row gives it."""
    return next(r["device_gib"] for r in report["rows"] if r["kind"] == "memory")


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


def replay(task: str, variant: str, path: str, device: torch.device, tmp: Path) -> dict[str, Any]:
    """CUDA only: a pack of seeds 0 and 1 whose step is captured and replayed against the same
    pack's step run uncaptured, two epochs on 200 examples: bit-equal or not ok."""
    losses = []
    for capture in (False, True):
        pack = Pack(task, variant, path, 2, 200, device, tmp / f"replay-{capture}", capture=capture)
        losses.append(pack.epoch(1) + pack.epoch(2))
    diff = rel_diff(losses[1], losses[0])
    return {"kind": "replay", "path": path, "uncaptured": losses[0], "captured": losses[1],
            "max_rel_diff": diff, "must_be_equal": True, "ok": diff == 0.0}


def memory(task: str, variant: str, train_size: int, device: torch.device, device_gib: float | None,
           tmp: Path) -> tuple[Any, int | None, dict[str, Any]]:
    """(the cell's memory model, the largest K that fits or None, the memory row)."""
    run = Pack(task, variant, "graphed", 1, train_size, device, tmp / "memory").runs[0]
    mem = run_pack_memory(run.cfg, run.data)
    total = None
    if device.type == "cuda":
        total = torch.cuda.mem_get_info(device)[1]
    elif device_gib is not None:
        total = int(device_gib * 2**30)
    row: dict[str, Any] = {"kind": "memory", "model_mib_per_replica": round(mem.per_replica / 2**20, 2),
                           "model_fixed_mib": round(mem.fixed / 2**20, 2), "shape": list(mem.shape)}
    fit = None
    if total is not None:
        fit = mem.largest_k(total)
        row.update(device_gib=round(total / 2**30, 2), largest_k=fit)
    if device.type == "cuda":  # the probe repeats one run: set it beside the part of the model it sees
        per, fixed = measure_bytes_per_replica(run)
        row.update(probe_mib_per_replica=round(per / 2**20, 2), probe_fixed_mib=round(fixed / 2**20, 2),
                   model_probe_mib_per_replica=round((mem.per_replica - unprobed_bytes(mem)) / 2**20, 2))
    return mem, fit, row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--case", default="copy/onestep", help="TASK/VARIANT")
    parser.add_argument("--ks", default="1,64,256,1024", help="pack sizes (comma-separated)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"train paths ({', '.join(PATHS)})")
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--deadline", type=float, default=450.0, help="seconds for the whole script")
    parser.add_argument("--out", type=Path, default=Path("gpu_session.json"))
    parser.add_argument("--device-memory", type=float, default=None, metavar="GIB",
                        help="the device's memory in GiB where it cannot be asked (a CPU): K the memory "
                             "model says do not fit are skipped (CUDA: the device's reported total)")
    args = parse_args(parser, {"ks": "1,2,4096", "paths": "eager,graphed", "train_size": 200, "deadline": 300.0,
                               "device_memory": 0.05},
                      argv, what="a CPU dry run: K = 1, 2, 4096 (skipped by the memory model), eager and "
                                 "graphed, 200 examples")
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
    if not ks or min(ks) < 1:
        parser.error(f"--ks {args.ks}: pack sizes are positive integers")
    if args.device_memory is not None and args.device_memory <= 0:
        parser.error(f"--device-memory {args.device_memory:g}: GiB, above 0")
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
        if device.type == "cuda":
            for path in (p for p in paths if p != "eager"):
                try:
                    row = replay(task, variant, path, device, tmp)
                except Exception as exc:
                    row = {"kind": "replay", "path": path, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
                failed |= not row["ok"]
                add(row)
        mem, fit, row = memory(task, variant, args.train_size, device, args.device_memory, tmp)
        add(row)
        for path in paths:
            per_seed_epoch: float | None = None  # seconds of the last measured epoch per replica
            compile_s = 0.0  # the last first epoch's extra seconds (capture, compile)
            done: set[int] = set()
            for K in ks:
                left = args.deadline - (time.perf_counter() - start)
                row = {"kind": "throughput", "path": path, "K": K}
                if fit is not None and K > fit:
                    why = mem.why(K, int(row_gib(report) * 2**30))
                    if fit in done or fit in ks:
                        row["skipped"] = f"{why}; K={fit} {'measured' if fit in done else 'measured on its own'}"
                        add(row)
                        continue
                    row["note"] = f"{why}: measured K={fit} instead"
                    K = row["K"] = fit
                need = (per_seed_epoch * K * 2.5 + compile_s) if per_seed_epoch is not None else 0.0
                if need > left:
                    row["skipped"] = (f"about {need:.0f} s needed (two epochs at the previous K's rate"
                                      f"{', and its compile' if compile_s else ''}), {left:.0f} s left")
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
                done.add(K)
                per_seed_epoch, compile_s = wall / K, max(0.0, first - wall)
                row.update(first_epoch_s=round(first, 3), epoch_s=round(wall, 3),
                           seed_epochs_per_s=round(K / wall, 3))
                if path != "eager":
                    row["model_gib"] = round(mem.bytes(K) / 2**30, 3)
                if device.type == "cuda":
                    row["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
                    torch.cuda.reset_peak_memory_stats(device)
                add(row)
                del pack
    report["wall_s"] = round(time.perf_counter() - start, 1)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {len(report['rows'])} rows to {args.out} in {report['wall_s']} s", flush=True)
    if failed:
        print("FAILED: a pack's losses differ from its solo runs, or a captured graph's from its "
              "uncaptured step, where they must be equal (rows above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
