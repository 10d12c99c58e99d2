"""Overhead of the study machinery (Ray Tune + MLflow + launcher) on a real study.

A study of 40 trials (copy task, OneStepAttn, one seed each) whose training takes ~30 s each,
run 2 at a time on a 2-CPU machine (1 CPU per trial). Measured:

    wall      launch() call to return: Ray start, MLflow store, Tune, every trial, the record
    train     sum over trials of the trainer's own time (epochs + test scoring, result.json)
    ideal     train / concurrency: the wall time with zero orchestration cost
    overhead  (wall - ideal) / wall        (target <= 10 %)

Everything that is not inside the training loop counts as overhead, including the trial
process start, imports and dataset generation. ``--scale`` shrinks the number of trials and
the epochs per trial for a shorter run (e.g. ``--scale 0.25``: 10 trials of ~8 s); ``--quick``
runs 2 trials of one epoch on 200 examples (dev and test splits of 50), a smoke test of the
same path. It exits 1 unless every trial finished without error.

    python benchmarks/bench_study_overhead.py [--scale 1.0] [--root /tmp/bench_study] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import parse_args  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="fraction of trials and epochs")
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--epochs", type=int, default=10, help="epochs per trial at scale 1 (~3 s each)")
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--dev-size", type=int, default=500)
    p.add_argument("--test-size", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--root", default=None, help="studies root (default: a temporary directory)")
    args = parse_args(p, {"trials": 2, "epochs": 1, "train_size": 200, "dev_size": 50,
                          "test_size": 50}, argv)

    import yaml

    trials = max(2, round(args.trials * args.scale))
    epochs = max(1, round(args.epochs * args.scale))
    root = Path(args.root or tempfile.mkdtemp(prefix="bench_study_"))
    shutil.rmtree(root / "bench-bench", ignore_errors=True)
    spec = {
        "name": "bench",
        "grid": {"task": ["copy"], "variant": ["onestep"]},
        "seeds": trials,
        "overrides": {"task.train_size": args.train_size, "task.dev_size": args.dev_size,
                      "task.test_size": args.test_size, "task.test_lengths": [15],
                      "optim.epochs": epochs, "optim.patience": epochs},
        "resources": {"cpus": 1},
        "max_concurrent": args.concurrency,
        "max_failures": 0,
        "profiles": {"bench": {}},
        "default_profile": "bench",
    }
    root.mkdir(parents=True, exist_ok=True)
    spec_path = root / "bench.yaml"
    spec_path.write_text(yaml.safe_dump(spec))

    from study.driver.launch import launch

    t0 = time.perf_counter()
    summary = launch(spec_path, root=root, progress_seconds=30.0)
    wall = time.perf_counter() - t0
    results = [json.loads(p.read_text()) for p in (root / "bench-bench" / "runs").glob("*/result.json")]
    train = sum(r["wall_seconds"] for r in results)
    ideal = train / args.concurrency
    out = {
        "trials": trials,
        "finished": len(results),
        "errors": summary.errors,
        "epochs_per_trial": epochs,
        "mean_train_seconds_per_trial": round(train / max(1, len(results)), 2),
        "wall_seconds": round(wall, 1),
        "fit_seconds": round(summary.fit_seconds, 1),
        "ideal_seconds": round(ideal, 1),
        "overhead_fraction": round((wall - ideal) / wall, 4),
        "overhead_fraction_fit_only": round((summary.fit_seconds - ideal) / summary.fit_seconds, 4),
    }
    print(json.dumps(out, indent=1))
    if summary.errors or len(results) != trials:
        print(f"FAILED: {len(results)} of {trials} trials finished, {summary.errors} errors",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
