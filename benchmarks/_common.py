"""Shared helpers for the benchmark scripts: machine description, timers, peak memory, ``--quick``."""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator


def machine_line() -> str:
    """nproc, CPU model, torch version, threads and the load average now (the machine is shared)."""
    import torch  # here, not at the top: the study and report benchmarks import this module too

    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (
        f"machine: nproc={os.cpu_count()} cpu={model!r} torch={torch.__version__} "
        f"threads={torch.get_num_threads()} loadavg(1,5,15)={load[0]:.2f},{load[1]:.2f},{load[2]:.2f}"
    )


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (getrusage maxrss), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@dataclass
class Timing:
    """Wall and CPU seconds of one timed block (CPU = this process's user+system time)."""

    wall: float = 0.0
    cpu: float = 0.0


@contextmanager
def timed() -> Iterator[Timing]:
    """``with timed() as t: ...`` then ``t.wall``, ``t.cpu``."""
    t = Timing()
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        yield t
    finally:
        t.wall = time.perf_counter() - w0
        t.cpu = time.process_time() - c0


def best(timings: list[Timing]) -> Timing:
    """The repeat with the least CPU time (min of repeats; noise only ever adds time)."""
    return min(timings, key=lambda t: t.cpu)


def parse_args(parser: argparse.ArgumentParser, quick: dict[str, Any], argv: list[str] | None = None,
               what: str = "") -> argparse.Namespace:
    """``parser.parse_args(argv)`` plus ``--quick``: a tiny configuration that runs the same code
    path end to end in seconds (the ``bench`` test tier, test_benchmarks_quick.py).

    ``--quick`` replaces the *defaults* of the arguments named in ``quick`` (dest -> value); a
    flag given on the command line still wins. ``what`` says what the tiny configuration is.
    """
    shown = ", ".join(f"--{k.replace('_', '-')} "
                      f"{' '.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                      for k, v in quick.items())
    parser.add_argument("--quick", action="store_true",
                        help=f"a tiny run of the same code path{': ' + what if what else ''} "
                             f"(defaults {shown}; flags given still win)")
    args = parser.parse_args(argv)
    unknown = set(quick) - set(vars(args))
    if unknown:
        raise ValueError(f"--quick defaults for unknown arguments: {sorted(unknown)}")
    if args.quick:
        parser.set_defaults(**quick)
        args = parser.parse_args(argv)
    return args
