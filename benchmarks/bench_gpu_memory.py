"""The pack memory model (locattn.training.memory) against what real graphed steps allocate on
this CPU: per case, the model's step bytes (a meta-device count of the tensors autograd saves,
times TRANSIENT_FACTOR) beside torch's ``MemTracker`` peak of one real step above the weights,
at K = 1 and 3, and the measured peak over the saved bytes (the factor the model rounds up).

    python benchmarks/bench_gpu_memory.py [--cases copy/onestep,copy/content,...] [--train-size 200]
        [--set optim.batch_size=64 ...] [--quick]

The CUDA allocator's rounding and context are not measured here (no GPU): ``bench_gpu_session.py``
sets the model beside a GPU's peak. ``--quick``: copy/onestep at K = 1 only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402

from benchmarks._common import machine_line, parse_args  # noqa: E402
from locattn.config import make_run_config  # noqa: E402
from locattn.tasks import load_task  # noqa: E402
from locattn.training.graphed import GraphedStep  # noqa: E402
from locattn.training.memory import TRANSIENT_FACTOR, run_pack_memory  # noqa: E402
from locattn.training.seq2seq import Seq2SeqRun  # noqa: E402


def step_peak(runs: list[Seq2SeqRun]) -> int:
    """MemTracker's peak bytes of one steady-state graphed step of ``runs``, weights left out."""
    step = GraphedStep(runs)
    step.idx.zero_()
    step._body()  # the first step creates the gradients
    tracker = MemTracker()
    with tracker:
        step._body()
    peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    return int(peak["Total"] - sum(v for k, v in peak.items()
                                   if k != "Total" and k.value in ("Parameter", "Buffer")))


def value(text: str) -> object:
    try:
        return int(text)
    except ValueError:
        return float(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="copy/onestep,copy/content,copy/mix_onestep_pr,lookup/onestep")
    parser.add_argument("--ks", default="1,3")
    parser.add_argument("--train-size", type=int, default=200)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every case (e.g. optim.batch_size=64)")
    args = parse_args(parser, {"cases": "copy/onestep", "ks": "1"}, argv, what="copy/onestep at K = 1")
    over = {"task.train_size": args.train_size, "task.dev_size": 20, "task.test_size": 10,
            "optim.train_step": "graphed", "num_threads": 1}
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep:
            parser.error(f"--set {item}: expected KEY=VALUE")
        over[key] = value(text)
    torch.set_num_threads(1)
    print(machine_line(), f"| TRANSIENT_FACTOR {TRANSIENT_FACTOR}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            task, _, variant = case.partition("/")
            cfg = make_run_config(task=task, variant=variant, seed=0, overrides=over)
            data = load_task(cfg.task, cache_dir=str(Path(tmp) / "cache"))
            mem = run_pack_memory(cfg, data)
            for K in (int(k) for k in args.ks.split(",")):
                runs = [Seq2SeqRun(cfg, data, Path(tmp) / f"{case}-{K}-{k}") for k in range(K)]
                measured = step_peak(runs)
                print(f"{case} K={K} batch {'x'.join(map(str, mem.shape))}: measured step peak "
                      f"{measured / 2**20:.2f} MiB, saved {K * mem.saved_bytes / 2**20:.2f} MiB "
                      f"(peak/saved {measured / (K * mem.saved_bytes):.3f}), model {K * mem.step_bytes / 2**20:.2f} "
                      f"MiB (model/measured {K * mem.step_bytes / measured:.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
