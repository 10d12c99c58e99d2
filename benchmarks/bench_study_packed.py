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

    python benchmarks/bench_study_packed.py [--k 5] [--epochs 3] [--train-size 3200] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback

from benchmarks._common import parse_args  # noqa: E402


def write_spec(root: Path, name: str, args: argparse.Namespace, pack: bool) -> Path:
    spec = {
        "name": name,
        "grid": {"task": [args.task], "variant": [args.variant]},
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


def histories(db: Path) -> dict[str, dict[str, list]]:
    """seed -> metric -> [(step, value)] of every trial run."""
    con = sqlite3.connect(db)
    try:
        seeds = dict(con.execute("SELECT run_uuid, value FROM tags WHERE key='locattn.seed'"))
        out: dict[str, dict[str, list]] = {}
        for run, key, step, value in con.execute(
                "SELECT run_uuid, key, step, value FROM metrics ORDER BY step, timestamp"):
            if run in seeds and key != "epoch_seconds":
                out.setdefault(seeds[run], {}).setdefault(key, []).append((step, value))
        return out
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=5, help="seeds of the cell")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-size", type=int, default=3200)
    p.add_argument("--dev-size", type=int, default=500)
    p.add_argument("--task", default="copy")
    p.add_argument("--variant", default="onestep")
    p.add_argument("--root", default=None, help="work directory (default: a temporary one)")
    args = parse_args(p, {"k": 2, "epochs": 1, "train_size": 200, "dev_size": 50}, argv)

    from study.launch import init_ray, launch

    root = Path(args.root or tempfile.mkdtemp(prefix="bench_packed_study_")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"machine: nproc={os.cpu_count()} loadavg(1,5,15)={load[0]:.2f},{load[1]:.2f},{load[2]:.2f}")
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
        assert summary["errors"] == 0, summary
        seed_epochs = args.k * args.epochs
        rows[name] = {"label": label, "wall": wall, "trials": summary["trials"],
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


if __name__ == "__main__":
    sys.exit(main())
