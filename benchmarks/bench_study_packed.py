"""Seeds packed into one trial vs one trial per seed, through the real study launcher.

Two studies of the same cell (Copy / OneStep by default) and the same K seeds, one with
``pack_seeds: true`` (one trial trains the K seeds as one packed model) and one without (K
trials). Both run one trial at a time on one CPU (``max_concurrent: 1``, ``cpus: 1``), so the
launch's wall time is the core-seconds the training used (plus the driver's small share).
Prints wall seconds, seed-epochs per core-second, the speed-up, and whether every seed's
recorded metrics are identical in the two studies (they should be: packing is exact). Peak
memory of one training process, solo or packed, is what ``bench_packed.py`` prints. It exits 1
when a study has errors or the two records differ. ``--quick``: 2 seeds x 1 epoch on 200
examples (dev 50).

``--ablation onestep,onestep_no_step2,onestep_no_step3,onestep_no_sigmoid`` (Table 4's Copy row)
compares instead one study of every variant (``pack_seeds``) launched twice: with one trial per
cell, as before (its pack of seeds), against the launcher's ablation packs, which put the cells
that differ only in ablation switches into one trial (``StudySpec.cell_packs``: -Step 2 stays
alone). It also prints the CPU seconds of
the driver and every process under it (Ray's workers included; sampled every 0.2 s), so that
the rate does not rest on wall time alone on a loaded machine.

    python benchmarks/bench_study_packed.py [--k 5] [--epochs 3] [--train-size 3200] [--quick]
                                            [--ablation V1,V2,...]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback

from benchmarks._common import parse_args  # noqa: E402


def write_spec(root: Path, name: str, args: argparse.Namespace, pack: bool,
               variants: list[str] | None = None) -> Path:
    spec = {
        "name": name,
        "grid": {"task": [args.task], "variant": variants or [args.variant]},
        "seeds": args.k,
        "pack_seeds": pack,
        "overrides": {"task.train_size": args.train_size, "task.dev_size": args.dev_size,
                      "task.test_size": 100, "task.test_lengths": [15], "optim.epochs": args.epochs,
                      "optim.patience": args.epochs},
        "resources": {"cpus": 1},
        "max_concurrent": 1,
        "max_failures": 0,
        "profiles": {"bench": {}},
        "default_profile": "bench",
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


class TreeCpu:
    """CPU seconds (user + system) of this process and every process under it, from a thread
    that samples them every ``every`` s: a process that ends between two samples loses at most
    that interval's CPU."""

    def __init__(self, every: float = 0.2) -> None:
        import psutil  # here: only the --ablation comparison needs it

        self.psutil, self.every = psutil, every
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.base = self.sample()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def sample(self) -> dict[int, float]:
        me = self.psutil.Process()
        out = {}
        for proc in [me, *me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                out[proc.pid] = t.user + t.system
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                pass
        for pid, cpu in out.items():
            self.seen[pid] = max(cpu, self.seen.get(pid, 0.0))
        return out

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.sample()

    def seconds(self) -> float:
        """CPU seconds used since this object was made; stops the sampling."""
        self.sample()
        self.stop.set()
        self.thread.join()
        return sum(cpu - self.base.get(pid, 0.0) for pid, cpu in self.seen.items())


def histories(db: Path) -> dict[str, dict[str, list]]:
    """seed (``cell|seed`` when the study has several cells) -> metric -> [(step, value)] of
    every trial run."""
    con = sqlite3.connect(db)
    try:
        seeds = dict(con.execute("SELECT run_uuid, value FROM tags WHERE key='locattn.seed'"))
        cells = dict(con.execute("SELECT run_uuid, value FROM tags WHERE key='locattn.cell'"))
        if len(set(cells.values())) > 1:
            seeds = {run: f"{cells[run]}|{seed}" for run, seed in seeds.items()}
        out: dict[str, dict[str, list]] = {}
        for run, key, step, value in con.execute(
                "SELECT run_uuid, key, step, value FROM metrics ORDER BY step, timestamp"):
            if run in seeds and key != "epoch_seconds":
                out.setdefault(seeds[run], {}).setdefault(key, []).append((step, value))
        return out
    finally:
        con.close()


def work_dir(args: argparse.Namespace, prefix: str) -> Path:
    """``--root`` (made) or a new temporary directory; prints the machine and its load first."""
    root = Path(args.root or tempfile.mkdtemp(prefix=prefix)).resolve()
    root.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"machine: nproc={os.cpu_count()} loadavg(1,5,15)={load[0]:.2f},{load[1]:.2f},{load[2]:.2f}")
    return root


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=5, help="seeds of the cell")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-size", type=int, default=3200)
    p.add_argument("--dev-size", type=int, default=500)
    p.add_argument("--task", default="copy")
    p.add_argument("--variant", default="onestep")
    p.add_argument("--root", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--ablation", default=None, help="variants of the task: one study per variant "
                   "against one study of all (comma-separated)")
    args = parse_args(p, {"k": 2, "epochs": 1, "train_size": 200, "dev_size": 50}, argv)
    if args.ablation:
        return ablation(args)

    from study.driver.launch import launch
    from study.driver.process import init_ray

    root = work_dir(args, "bench_packed_study_")
    print(f"cell {args.task}/{args.variant}, {args.k} seeds x {args.epochs} epochs, train "
          f"{args.train_size}, dev {args.dev_size}; one trial at a time on one CPU; work dir {root}")
    init_ray()
    rows = {}
    for label, pack in (("one trial per seed", False), ("packed, one trial", True)):
        name = "packed" if pack else "solo"
        spec = write_spec(root, name, args, pack)
        t0 = time.perf_counter()
        summary = launch(spec, root=root / "studies", progress_seconds=600, out=open(os.devnull, "w"))
        wall = time.perf_counter() - t0
        assert summary.errors == 0, summary
        seed_epochs = args.k * args.epochs
        rows[name] = {"label": label, "wall": wall, "trials": summary.trials,
                      "rate": seed_epochs / wall,
                      "db": root / "studies" / f"{name}-bench" / "mlflow.db"}
    solo_h, packed_h = histories(rows["solo"]["db"]), histories(rows["packed"]["db"])
    identical = solo_h == packed_h
    print()
    print("| study | trials | wall s (= core-s) | seed-epochs / core-s |")
    print("|---|---|---|---|")
    for r in rows.values():
        print(f"| {r['label']} | {r['trials']} | {r['wall']:.1f} | {r['rate']:.3f} |")
    print()
    print(f"speed-up x{rows['packed']['rate'] / rows['solo']['rate']:.2f}; every seed's recorded "
          f"metrics identical in both studies: {identical}")
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "db"} for k, v in rows.items()}))
    if not identical or len(solo_h) != args.k:
        print(f"FAILED: the packed study's record differs from the solo one, or not every seed "
              f"is recorded ({len(solo_h)} of {args.k})", file=sys.stderr)
        return 1
    return 0


def ablation(args: argparse.Namespace) -> int:
    """``--ablation``: the same study of every variant (``pack_seeds``) launched twice, one trial
    at a time on one CPU: as before cells packed (one trial per cell: ``StudySpec.cell_packs``
    replaced, for this arm only, by one cell per pack) and as the launcher packs them now."""
    from study.driver.launch import launch  # here, as in main: --help stays light
    from study.driver.process import init_ray  # here, as in main: --help stays light
    from study.spec import load_spec  # the same
    from study.spec.model import StudySpec  # the same

    variants = args.ablation.split(",")
    root = work_dir(args, "bench_ablation_study_")
    print(f"{args.task} x {variants}, {args.k} seeds x {args.epochs} epochs, train {args.train_size}, "
          f"dev {args.dev_size}, test 100; one trial at a time on one CPU; work dir {root}")
    packs = load_spec(write_spec(root, "abl", args, True, variants), None).cell_packs()
    print(f"launcher's packs: {[[variants[i] for i in p] for p in packs]}")
    init_ray()
    own = StudySpec.cell_packs
    rows, records = {}, {}
    for label, name in (("one pack per cell", "cells"), ("ablation packs", "abl")):
        spec = write_spec(root, name, args, True, variants)
        if name == "cells":
            StudySpec.cell_packs = lambda self: [(i,) for i in range(len(self.cells))]
        cpu, t0 = TreeCpu(), time.perf_counter()
        try:
            summary = launch(spec, root=root / "studies", progress_seconds=600, out=open(os.devnull, "w"))
        finally:
            StudySpec.cell_packs = own
        wall, core = time.perf_counter() - t0, cpu.seconds()
        assert summary.errors == 0, summary
        seed_epochs = len(variants) * args.k * args.epochs
        rows[label] = {"trials": summary.trials, "wall": wall, "cpu": core, "rate_cpu": seed_epochs / core,
                       "rate_wall": seed_epochs / wall}
        records[label] = histories(root / "studies" / f"{name}-bench" / "mlflow.db")
    identical = records["one pack per cell"] == records["ablation packs"]
    load = os.getloadavg()
    print()
    print("| launch | trials | wall s | CPU s (driver + Ray) | seed-epochs / CPU-s | seed-epochs / wall-s |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in rows.items():
        print(f"| {label} | {r['trials']} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['rate_cpu']:.3f} | "
              f"{r['rate_wall']:.3f} |")
    a, b = rows["one pack per cell"], rows["ablation packs"]
    print()
    print(f"ablation packs: x{b['rate_cpu'] / a['rate_cpu']:.2f} per CPU-s, x{b['rate_wall'] / a['rate_wall']:.2f} "
          f"per wall-s; every run's recorded metrics identical: {identical}; load at the end "
          f"{load[0]:.2f},{load[1]:.2f},{load[2]:.2f}")
    print(json.dumps(rows))
    n = len(variants) * args.k
    if not identical or len(records["ablation packs"]) != n:
        print(f"FAILED: the two records differ, or not every run is recorded "
              f"({len(records['ablation packs'])} of {n})", file=sys.stderr)
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
