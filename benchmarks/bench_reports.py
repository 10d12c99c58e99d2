"""Benchmark: `reports build` on a synthetic 10,000-run study store.

Creates the SQLite schema with MLflow itself, bulk-inserts runs with SQL (reports.synth), then
times (1) the `reports build` command (a fresh process: imports included) for every table in
md, latex and csv, (2) build_reports() in-process, and (3) MLflow's own MlflowClient.search_runs
reading the same runs page by page, for comparison. Prints the numbers, and exits 1 when a
build does not write every table in every format or MLflow does not read back every run.
``--quick``: 300 runs of 2 epochs, one repeat.

    python benchmarks/bench_reports.py [--runs 10000] [--epochs 10] [--dir /tmp/bench_reports]
                                       [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import parse_args  # noqa: E402
from reports.synth import SynthRun, write_bulk_sql  # noqa: E402
from reports.tables import TABLES  # noqa: E402

COPY_SPLITS = ("iid", "len15", "len20", "len25", "len30", "len50", "len100")
LOOKUP_SPLITS = (
    "heldout_inputs", "heldout_compositions", "heldout_tables", "new_compositions",
    *(f"longer_{k}_{i}" for k in ("seen", "incremental", "new") for i in range(1, 6)),
)


def _splits(task: str) -> tuple[str, ...]:
    if task in ("lookup", "reverse_lookup", "noisy_lookup"):
        return LOOKUP_SPLITS
    if task in ("scan", "cfq", "raffel_add", "raffel_mul"):
        return ("test",)
    return COPY_SPLITS


def _units() -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    units: dict[tuple, None] = {}
    for t in TABLES.values():
        for c in t.columns:
            for task in c.tasks:
                for v in t.rows:
                    units[(task, v, c.params)] = None
    return list(units)


def synth_runs(n_runs: int, epochs: int, seed: int = 0) -> list[SynthRun]:
    rng = np.random.default_rng(seed)
    units = _units()
    n_seeds = 5
    n_lr = max(1, math.ceil(n_runs / (len(units) * n_seeds)))
    lrs = [10 ** (-3 - 0.5 * i) for i in range(n_lr)]
    runs: list[SynthRun] = []
    # Learning rates outermost, so every cell gets runs even when n_runs cuts the last sweep.
    for lr in lrs:
        for task, variant, params in units:
            for s in range(n_seeds):
                if len(runs) >= n_runs:
                    return runs
                raffel = task.startswith("raffel")
                m: dict[str, float] = {"best_selection_score": float(rng.uniform()),
                                       "best_epoch": float(rng.integers(1, 100)),
                                       "epochs_run": 100.0}
                for sp in _splits(task):
                    if raffel:
                        m[f"test.{sp}.accuracy"] = float(rng.uniform(0.8, 1))
                        continue
                    acc = float(rng.uniform())
                    m[f"test.{sp}.seq_acc"] = acc
                    m[f"test.{sp}.seq_acc_be"] = min(1.0, acc + 0.1)
                    m[f"test.{sp}.edit_distance"] = float(rng.uniform(0, 50))
                    m[f"test.{sp}.n"] = 2000.0
                    if "lookup" in task:
                        m[f"test.{sp}.attn_loss"] = float(rng.uniform(0, 20))
                if raffel and rng.uniform() < 0.7:
                    m["epochs_to_100"] = float(rng.integers(1, 30))
                hist = {k: tuple(float(x) for x in rng.uniform(size=epochs)) for k in
                        ("train_loss", "dev_loss", "dev_score", "dev_seq_acc", "lr", "epoch_seconds")}
                status = "finished" if rng.uniform() > 0.02 else str(rng.choice(["running", "failed"]))
                runs.append(SynthRun(task=task, variant=variant, seed=s, hparams={"optim.lr": lr},
                                     metrics=m, params=dict(params), status=status,
                                     history=hist if epochs else {}))
    return runs



def time_reports_build(cmd: list[str], env: dict[str, str], repeat: int, what: str) -> list[float]:
    """Run a ``reports build`` command ``repeat`` times as a fresh process; print and return the
    wall times (a failure stops the benchmark with its stderr)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        times.append(time.perf_counter() - t)
        if proc.returncode != 0:
            raise SystemExit(f"{what} failed:\n{proc.stderr}")
    n_files = len(proc.stdout.split())
    print(f"{what} (CLI, fresh process, {len(TABLES)} tables x 3 formats = {n_files} files): "
          f"best {min(times):.2f} s, all {', '.join(f'{x:.2f}' for x in times)}")
    if n_files != 3 * len(TABLES):
        raise SystemExit(f"{what} wrote {n_files} files, not {3 * len(TABLES)}:\n{proc.stdout}")
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=10, help="per-epoch history rows per metric")
    ap.add_argument("--dir", default="/tmp/bench_reports")
    ap.add_argument("--repeat", type=int, default=3)
    args = parse_args(ap, {"runs": 300, "epochs": 2, "repeat": 1}, argv)

    study_dir = Path(args.dir) / "studies" / "bench"
    shutil.rmtree(study_dir, ignore_errors=True)
    study_dir.mkdir(parents=True)
    db = study_dir / "mlflow.db"

    t = time.perf_counter()
    runs = synth_runs(args.runs, args.epochs)
    n = write_bulk_sql(db, "bench", runs, tables=sorted(TABLES))
    t_write = time.perf_counter() - t
    print(f"store: {n} runs (incl. parent), {db.stat().st_size / 1e6:.1f} MB, "
          f"written in {t_write:.1f} s -> {db}")

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "reports.cli", "build", str(study_dir), "--format",
           "md,latex,csv", "--out", str(study_dir / "out")]
    time_reports_build(cmd, env, args.repeat, "reports build")

    probe = ("import time; t = time.perf_counter(); import locattn.variants, sys; "
             "print(f'{time.perf_counter() - t:.2f} {\"torch\" in sys.modules}')")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         cwd=ROOT).stdout.split()
    print(f"  of which importing locattn.variants (for PAPER_LABELS) in a fresh process: {out[0]} s"
          f" (imports torch: {out[1]})")

    from reports.build import build_reports, collect

    t = time.perf_counter()
    collect(study_dir)
    t_cold = time.perf_counter() - t
    t = time.perf_counter()
    build_reports(study_dir, None, None, ("md", "latex", "csv"), study_dir / "out2")
    t_warm = time.perf_counter() - t
    print(f"in-process: read+aggregate (first call, imports included) {t_cold:.2f} s; "
          f"full build_reports {t_warm:.2f} s")

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("bench")
    t = time.perf_counter()
    token, got = None, 0
    while True:
        page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
        got += len(page)
        token = page.token
        if not token:
            break
    t_mlflow = time.perf_counter() - t
    print(f"MLflow MlflowClient.search_runs, all {got} runs in pages of 1000: {t_mlflow:.2f} s "
          "(reading only, no aggregation)")
    if got != n:
        raise SystemExit(f"MLflow read back {got} runs of the {n} written")


if __name__ == "__main__":
    main()
