"""Time each kernel of inductor's compiled modules, call by call, on one thread.

    python benchmarks/time_inductor_kernels.py MODULE.py [MODULE.py ...] [--calls 200] [--top 12]
    python benchmarks/time_inductor_kernels.py --cache DIR     # the two largest modules of a cache

A compiled training step's forward and backward are each one Python module that inductor writes
into its cache (``TORCHINDUCTOR_CACHE_DIR``, e.g. the folder ``bench_whole_run.py`` leaves in its
work directory). Each module carries ``get_args()`` (random inputs of the compiled shapes) and
``call(args)``. This script loads a module, wraps every generated C++ kernel (``cpp_fused_*``) and
every extern product (``extern_kernels.bmm`` etc.) with a CPU-time counter, runs ``call``
``--calls`` times and prints: CPU ms per call, ms inside kernels, the count of products and
fused-kernel calls per call (what a batch dispatches: load-independent), and the costliest
kernels. Integer inputs are set to 3 (valid ids and lengths), floats stay random; the values do
not change the time of these kernels. Timings are CPU seconds, inflated by the machine's load:
compare modules in one run, interleaved (``--rounds``).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import torch


def time_module(path: Path, calls: int) -> tuple[float, float, collections.Counter, dict[str, float]]:
    """(CPU s per call, CPU s per call in kernels, calls per call by kernel, CPU s per call by kernel)."""
    spec = importlib.util.spec_from_file_location(f"inductor_{path.stem}", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)  # type: ignore[union-attr]
    acc: dict[str, float] = collections.defaultdict(float)
    cnt: collections.Counter = collections.Counter()
    clock = time.process_time
    for name in [n for n in dir(m) if n.startswith("cpp_fused")]:
        def timed(*a: Any, _f: Any = getattr(m, name), _n: str = name) -> Any:
            t = clock()
            r = _f(*a)
            acc[_n] += clock() - t
            cnt[_n] += 1
            return r
        setattr(m, name, timed)

    class Extern:
        def __init__(self, ek: Any) -> None:
            self.ek = ek

        def __getattr__(self, op: str) -> Any:
            f = getattr(self.ek, op)

            def timed(*a: Any, **k: Any) -> Any:
                x, y = a[-2], a[-1]
                key = f"{op} {tuple(x.shape)}x{tuple(y.shape)}"
                t = clock()
                r = f(*a, **k)
                acc[key] += clock() - t
                cnt[key] += 1
                return r
            return timed

    m.extern_kernels = Extern(m.extern_kernels)
    args = m.get_args()
    for a in args:
        if a.dtype == torch.int64:
            a.fill_(3)
    m.call(list(args))  # warm
    acc.clear()
    cnt.clear()
    t = clock()
    for _ in range(calls):
        m.call(list(args))
    total = (clock() - t) / calls
    return total, sum(acc.values()) / calls, cnt, {k: v / calls for k, v in acc.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", type=Path)
    parser.add_argument("--cache", type=Path, default=None, help="an inductor cache: its two largest modules")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1, help="time the modules this many times, interleaved")
    parser.add_argument("--top", type=int, default=12)
    a = parser.parse_args(argv)
    mods = list(a.modules)
    if a.cache is not None:
        if not a.cache.is_dir():
            parser.error(f"--cache {a.cache}: not a directory")
        mods += sorted(a.cache.glob("*/*.py"), key=lambda p: p.stat().st_size)[-2:]
    for p in mods:
        if not p.is_file():
            parser.error(f"{p}: no such module")
    if not mods:
        parser.error("give inductor output modules (MODULE.py) or --cache DIR")
    torch.set_num_threads(1)
    for r in range(a.rounds):
        for p in mods:
            total, inside, cnt, by = time_module(p, a.calls)
            products = sum(c for k, c in cnt.items() if not k.startswith("cpp_fused")) // a.calls
            fused = sum(c for k, c in cnt.items() if k.startswith("cpp_fused")) // a.calls
            print(f"round {r} {p}: {total * 1e3:.2f} CPU ms per call, {inside * 1e3:.2f} in kernels; "
                  f"{products} products + {fused} fused-kernel calls", flush=True)
            if r == a.rounds - 1:
                for k, v in sorted(by.items(), key=lambda kv: -kv[1])[: a.top]:
                    print(f"  {v * 1e6:8.1f} us  x{cnt[k] // a.calls:<3d} {k[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
