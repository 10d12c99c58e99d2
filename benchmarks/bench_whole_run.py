"""What a user pays for whole runs: ``locattn train`` processes, eager against compiled.

    python benchmarks/bench_whole_run.py [--case copy/onestep] [--train 2000] [--dev 500]
                                         [--test 500] [--epochs 10] [--reference DIR] [--quick]
                                         [--inductor-cache DIR]

Each contender is a fresh ``python -m locattn train`` process (one thread), timed as a whole:
CPU seconds of the process and its children (``getrusage(RUSAGE_CHILDREN)``: inductor's g++ and
compile workers included once reaped), and wall seconds. Every contender runs twice, for 1 epoch
and for ``--epochs``, so a run costs ``fixed + epochs x marginal`` with

    marginal = (cpu(epochs) - cpu(1)) / (epochs - 1)     fixed = cpu(1) - marginal

Contenders: ``eager``; ``compiled cold`` (an empty inductor cache: it compiles); ``compiled
warm`` (the same cache again: it loads, as every later trial of a study does, since a study's
trials share one cache). Cold runs only for 1 epoch: its long run is warm's plus the extra cost
of its first (cpu(E) cold = cpu(E) warm + cpu(1) cold - cpu(1) warm). From the fixed and marginal costs: the run length (epochs) from which
compiled costs less than eager. Each compiled run also reports its ``compiles`` and
``compile_seconds`` (its history's epoch metrics). With ``--reference DIR`` (a checkout of
JRC1995/MonotonicLocationAttention, not part of this project) the reference code's
training loop runs as a process the same way on the same data (1 epoch and ``--epochs``; its
loop has no test scoring, so compare its marginal epoch, not its whole run; Copy/OneStepAttn
only). ``--quick``: tiny sizes and 2 epochs, to check the script runs. ``--inductor-cache DIR``:
the compiled runs use DIR as it is (not emptied; it must already hold the case's graph, else the
first "warm" run compiles, which its ``compile_seconds`` shows) and the cold contender is skipped,
for a run at a size where a cold compile would take most of the time budget.

The default sizes are a ``quick``-profile study run (``ablations/rc_table4.yaml``: train 2,000,
dev 500, test 500, 10 epochs). The machine is shared: report ``uptime`` beside the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import machine_line, parse_args  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

REFERENCE_LOOP = """
import sys, time
sys.path.insert(0, {bench!r})
from bench_epoch import reference
from locattn.config import make_run_config
from locattn.tasks import load_task
import torch
torch.set_num_threads(1)
cfg = make_run_config(task="copy", variant="onestep", overrides={overrides!r})
epoch = reference({ref!r}, load_task(cfg.task, cache_dir={cache!r}))
for n in range({epochs}):
    epoch(n)
"""


def run_process(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds of the process and its reaped children, wall seconds) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"bench_whole_run: {' '.join(args[:6])} ... failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def train_args(case: str, out: Path, cache: Path, epochs: int, sizes: dict[str, object], path: str) -> list[str]:
    task, variant = case.split("/")
    args = [sys.executable, "-m", "locattn", "train", "--task", task, "--variant", variant, "--epochs",
            str(epochs), "--threads", "1", "--no-progress", "--out", str(out), "--cache-dir", str(cache),
            "--set", f"train_path={path}", "--set", "optim.patience=1000"]
    for key, value in sizes.items():
        args += ["--set", f"{key}={value}"]
    return args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="copy/onestep", help="task/variant")
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--dev", type=int, default=500)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--reference", default=None, help="a checkout of the reference code")
    parser.add_argument("--inductor-cache", default=None, help="reuse this inductor cache; skip the cold contender")
    a = parse_args(parser, {"train": 96, "dev": 32, "test": 16, "epochs": 2}, what="Copy of length 3")
    sizes: dict[str, object] = {"task.train_size": a.train, "task.dev_size": a.dev, "task.test_size": a.test}
    if a.quick:
        sizes.update({"task.train_lengths": "3,3", "task.dev_lengths": "3,3", "task.test_lengths": "4",
                      "optim.batch_size": 16, "optim.dev_batch_size": 16})
    if a.reference and a.case != "copy/onestep":
        parser.error(f"--reference runs the reference's Copy/OneStepAttn only, not --case {a.case}")
    if a.inductor_cache and not Path(a.inductor_cache).is_dir():
        parser.error(f"--inductor-cache {a.inductor_cache}: not a directory")
    print(machine_line())
    print(f"{a.case}: train {a.train}, dev {a.dev}, test {a.test}; whole `locattn train` processes, one "
          f"thread; CPU s = process + reaped children; each contender at 1 and {a.epochs} epochs", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench_whole_run."))
    data_cache = work / "data"
    base_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    base_env.setdefault("LOCATTN_SAVED_STEP", "1")  # the saved compiled step (the default): set it to 0 to compare
    inductor = Path(a.inductor_cache) if a.inductor_cache else work / "inductor"
    contenders = [("eager", "eager", None), ("compiled cold", "compiled", "cold"), ("compiled warm", "compiled", "warm")]
    if a.inductor_cache:  # the given cache is kept as it is: no cold run
        contenders.remove(("compiled cold", "compiled", "cold"))
    rows: dict[str, dict[str, float]] = {}
    for epochs in (1, a.epochs):
        if epochs > 1:  # warm before cold: cold's long run is derived from warm's
            contenders.sort(key=lambda c: c[2] == "cold")
        for name, path, cache in contenders:
            if cache == "cold" and epochs > 1:  # a second cold compile would only repeat cpu(1)'s
                r = rows[name]
                r[f"cpu{epochs}"] = rows["compiled warm"][f"cpu{epochs}"] + r["cpu1"] - rows["compiled warm"]["cpu1"]
                continue
            env = dict(base_env)
            if cache is not None:
                if cache == "cold":  # an empty cache for every cold run
                    for old in inductor.glob("*"):
                        subprocess.run(["rm", "-rf", str(old)], check=True)
                env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
            out = work / f"{name.replace(' ', '_')}_{epochs}"
            cpu, wall = run_process(train_args(a.case, out, data_cache, epochs, sizes, path), env)
            hist = json.loads((out / "result.json").read_text())["history"]
            compiles = sum(h.get("compiles", 0.0) for h in hist)
            compile_s = sum(h.get("compile_seconds", 0.0) for h in hist)
            epochs_wall = ", ".join(f"{h['epoch_seconds']:.1f}" for h in hist)
            rows.setdefault(name, {})[f"cpu{epochs}"] = cpu
            extra = f"; compiles {compiles:.0f} ({compile_s:.1f} s wall)" if path == "compiled" else ""
            print(f"{name:14s} {epochs:>3d} epochs: cpu {cpu:8.2f} s  wall {wall:8.2f} s  "
                  f"epochs wall s [{epochs_wall}]{extra}", flush=True)
        if a.reference:
            code = REFERENCE_LOOP.format(bench=str(ROOT / "benchmarks"), ref=a.reference,
                                         overrides={k: v for k, v in sizes.items() if k.startswith("task.")},
                                         cache=str(data_cache), epochs=epochs)
            cpu, wall = run_process([sys.executable, "-c", code], base_env)
            rows.setdefault("reference", {})[f"cpu{epochs}"] = cpu
            print(f"{'reference':14s} {epochs:>3d} epochs: cpu {cpu:8.2f} s  wall {wall:8.2f} s  (train + dev "
                  f"loop, no test scoring)", flush=True)
    print(machine_line().replace("machine:", "after:"))
    E = a.epochs
    print(f"\n{'contender':14s} {'whole run cpu s':>16s} {'fixed cpu s':>12s} {'marginal epoch':>15s}")
    cost = {}
    for name, r in rows.items():
        marginal = (r[f"cpu{E}"] - r["cpu1"]) / (E - 1)
        fixed = r["cpu1"] - marginal
        cost[name] = (fixed, marginal)
        print(f"{name:14s} {r[f'cpu{E}']:16.2f} {fixed:12.2f} {marginal:15.2f}")
    (fe, me) = cost["eager"]
    for name in [n for n in ("compiled cold", "compiled warm") if n in cost]:
        fc, mc = cost[name]
        if mc < me:
            print(f"{name}: wins from {max(1.0, (fc - fe) / (me - mc)):.1f} epochs on "
                  f"(x{me / mc:.2f} per marginal epoch; whole {E}-epoch run x{rows['eager'][f'cpu{E}'] / rows[name][f'cpu{E}']:.2f})")
        else:
            print(f"{name}: never wins (marginal epoch {mc:.2f} >= eager {me:.2f} CPU s)")
    if "reference" in cost:
        mr = cost["reference"][1]
        for name in ("eager", "compiled warm"):
            print(f"marginal epoch vs the reference: {name} x{mr / cost[name][1]:.2f}")
        ref = rows["reference"][f"cpu{E}"]
        for name in [n for n in ("eager", "compiled cold", "compiled warm") if n in rows]:
            print(f"whole {E}-epoch run vs the reference: {name} x{ref / rows[name][f'cpu{E}']:.2f}")


if __name__ == "__main__":
    main()
