"""How the study launcher scales with the number of trials (Ray Tune + MLflow, no training).

A study of N trials (one cell, N seeds) whose trainable is :func:`fake_train`: the signature of
``locattn.train.train``, three reported epochs of deterministic fake metrics through the
recorder (with an epoch checkpoint each), a tiny ``result.json``, no model. Everything else is
the real thing: ``study.driver.launch``, Ray Tune, the driver's MLflow recorder and the SQLite store.

Per N it measures, in a fresh driver process (joining a Ray started here, 2 CPUs, loopback):

    wall            launch() call to return (trials, record, Tune state); per trial = wall / N
    fit             time inside Tuner.fit
    late/early      seconds per trial in the last 20 % of trial starts / in the first 20 %
                    (> 1: the driver slows down as the study grows)
    driver peak RSS VmRSS of the driver sampled every 0.25 s (and getrusage ru_maxrss)
    store           bytes of mlflow.db + artifacts/ (and tune/ for Tune's own state)
    resume at 50 %  a second study of N: kill -9 its driver once N/2 trials have finished, then
                    time `study resume` to completion and to the first newly started trial

    python benchmarks/bench_study_scale.py --n 250 500 1000 2000 [--no-resume] [--root DIR]

At most 2 trials run at once (1 CPU each); the trials themselves are idle almost all the
time, so the cost measured is the driver's (about one core). It exits 1 when a study has errors
or its record is not exactly N finished runs of 3 epochs each (after the resume too).
``--quick``: N = 10.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STARTS_FILE = "starts.txt"
FAKE_EPOCHS = 3


# ---------------------------------------------------------------------------- the trainable


def fake_metrics(seed: int, epoch: int) -> dict[str, float]:
    """Deterministic epoch metrics of a run that does not train (the record's epoch metric names)."""
    jitter = (seed % 97) * 1e-3
    return {
        "train_loss": 2.0 / epoch + jitter,
        "dev_loss": 2.2 / epoch + jitter,
        "dev_score": min(1.0, 0.3 * epoch + (seed % 10) * 0.01),
        "dev_seq_acc": min(1.0, 0.3 * epoch + (seed % 10) * 0.01),
        "lr": 1e-3,
        "epoch_seconds": 0.001,
    }


def fake_train(cfg: Any, out_dir: str | Path, *, recorder: Any = None, resume: bool = True) -> Any:
    """Same interface as ``locattn.train.train``: ``cfg.optim.epochs`` fake epochs, no model.

    Each epoch writes ``out_dir/checkpoint/state.json`` (epoch + history) before calling
    ``recorder.on_epoch``; ``resume=True`` continues after the checkpoint's epoch. The start
    time of every attempt is appended to ``out_dir/starts.txt`` (read by the benchmark).
    """
    from locattn.config import config_to_dict, run_identity
    from locattn.train import RunResult

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / STARTS_FILE, "a") as fh:
        fh.write(f"{time.time():.6f}\n")
    (out_dir / "result.json").unlink(missing_ok=True)
    ckpt = out_dir / "checkpoint"
    state_file = ckpt / "state.json"
    state: dict[str, Any] = {"epoch": 0, "history": []}
    if resume and state_file.is_file():
        state = json.loads(state_file.read_text())
    elif ckpt.exists():
        shutil.rmtree(ckpt)
    ckpt.mkdir(exist_ok=True)
    for epoch in range(state["epoch"] + 1, cfg.optim.epochs + 1):
        metrics = fake_metrics(cfg.seed, epoch)
        state = {"epoch": epoch, "history": state["history"] + [{"epoch": epoch, **metrics}]}
        tmp = ckpt / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, state_file)
        if recorder is not None:
            recorder.on_epoch(epoch, metrics, ckpt)
    history = state["history"]
    best = max(history, key=lambda h: h["dev_score"])
    result = RunResult(
        run_identity=run_identity(cfg), config=config_to_dict(cfg), kind="seq2seq",
        dev_scoring=cfg.optim.dev_scoring, history=history, best_epoch=int(best["epoch"]),
        best_selection_score=float(best["dev_score"]), epochs_run=len(history), stop_reason="max_epochs",
        test={"len15": {"seq_acc": float(best["dev_score"]), "n": 1.0}},
        wall_seconds=0.001 * len(history),
    )
    (out_dir / "result.json").write_text(json.dumps(result.to_dict()) + "\n")
    if recorder is not None:
        recorder.on_end(result)
    return result


# ---------------------------------------------------------------------------- driver side


class RssSampler:
    """Peak VmRSS of this process, sampled in a thread (plus the samples' load averages)."""

    def __init__(self, every: float = 0.25) -> None:
        self.every = every
        self.peak_kb = 0
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss_kb(self) -> int:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, self._rss_kb())
            if n % 20 == 0:
                self.loads.append(os.getloadavg()[0])
            n += 1
            self._stop.wait(self.every)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kb = max(self.peak_kb, self._rss_kb())


def child(args: argparse.Namespace) -> None:
    """One driver: launch (or resume) a study, then write its measurements to --out-json."""
    from study.driver.launch import launch, resume

    profiler = None
    if args.profile_out:
        import cProfile

        profiler = cProfile.Profile()
    t0 = time.perf_counter()
    with RssSampler() as rss:
        if profiler:
            profiler.enable()
        if args.child == "launch":
            summary = launch(args.spec, root=args.study_root, name=args.name, address=args.address,
                             max_concurrent=2, trainer=fake_train, progress_seconds=30.0)
        else:
            summary = resume(Path(args.study_root) / args.name, address=args.address,
                             progress_seconds=30.0, trainer=fake_train)
        if profiler:
            profiler.disable()
    wall = time.perf_counter() - t0
    if profiler:
        profiler.dump_stats(args.profile_out)
    out = {
        "wall": wall,
        "t_start": time.time() - wall,
        "fit": summary.fit_seconds,
        "trials": summary.trials,
        "errors": summary.errors,
        "peak_rss_mb": rss.peak_kb / 1024,
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load_mean": sum(rss.loads) / max(1, len(rss.loads)),
    }
    Path(args.out_json).write_text(json.dumps(out))


def write_spec(path: Path, n: int) -> None:
    import yaml

    spec = {
        "name": "scale",
        "grid": {"task": ["copy"], "variant": ["onestep"]},
        "seeds": n,
        "overrides": {"optim.epochs": FAKE_EPOCHS, "optim.patience": FAKE_EPOCHS},
        "resources": {"cpus": 1},
        "max_concurrent": 2,
        "max_failures": 0,
        "profiles": {"bench": {}},
        "default_profile": "bench",
    }
    path.write_text(yaml.safe_dump(spec))


def dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def starts(study_dir: Path) -> list[float]:
    """Start times of every trainer attempt of the study (from the runs' starts.txt)."""
    out: list[float] = []
    for p in (study_dir / "runs").glob(f"*/{STARTS_FILE}"):
        out += [float(x) for x in p.read_text().split()]
    return sorted(out)


def n_finished(study_dir: Path) -> int:
    runs = study_dir / "runs"
    return sum(1 for _ in runs.glob("*/result.json")) if runs.is_dir() else 0


def record_check(study_dir: Path) -> dict[str, int]:
    """Trial runs in the store, finished ones, and duplicate run keys (must be 0)."""
    import sqlite3

    con = sqlite3.connect(study_dir / "mlflow.db")
    try:
        rows = con.execute(
            "SELECT t.value, r.status FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            "WHERE t.key = 'locattn.run_key' AND r.run_uuid IN "
            "(SELECT run_uuid FROM tags WHERE key = 'locattn.role' AND value = 'trial')"
        ).fetchall()
        steps = con.execute(
            "SELECT COUNT(*) FROM metrics WHERE key = 'train_loss'").fetchone()[0]
    finally:
        con.close()
    keys = [k for k, _ in rows]
    return {"runs": len(rows), "finished": sum(1 for _, s in rows if s == "FINISHED"),
            "duplicates": len(keys) - len(set(keys)), "train_loss_points": steps}


def run_child(mode: str, root: Path, name: str, spec: Path, address: str, log: Path,
              profile: str | None = None, kill_at: int | None = None) -> dict[str, Any]:
    out_json = root / f"{name}.{mode}.json"
    out_json.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--spec", str(spec),
           "--study-root", str(root), "--name", name, "--address", address,
           "--out-json", str(out_json)]
    if profile:
        cmd += ["--profile-out", profile]
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    t0 = time.time()
    with open(log, "a") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        if kill_at is None:
            proc.wait()
            res = json.loads(out_json.read_text()) if out_json.is_file() else {}
            res["process_wall"] = time.time() - t0
            res["returncode"] = proc.returncode
            return res
        study_dir = root / name
        while proc.poll() is None and n_finished(study_dir) < kill_at:
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)  # kill -9 the driver
        proc.wait()
    return {"killed_after": time.time() - t0, "finished_at_kill": n_finished(root / name)}


def wait_cpus(n: float, timeout: float = 120) -> None:
    import ray

    end = time.time() + timeout
    while time.time() < end and ray.available_resources().get("CPU", 0) < n:
        time.sleep(0.5)


def measure(n: int, root: Path, address: str, *, do_resume: bool, profile: bool) -> dict[str, Any]:
    spec = root / f"scale{n}.yaml"
    write_spec(spec, n)
    log = root / f"scale{n}.log"
    name = f"full{n}"
    res = run_child("launch", root, name, spec, address, log,
                    profile=str(root / f"{name}.prof") if profile else None)
    d = root / name
    st = starts(d)
    k = max(1, len(st) // 5)
    early = (st[k] - st[0]) / k if len(st) > k else float("nan")
    late = (st[-1] - st[-1 - k]) / k if len(st) > k else float("nan")
    row: dict[str, Any] = {
        "n": n,
        "wall_s": round(res["wall"], 1),
        "fit_s": round(res["fit"], 1),
        "per_trial_ms": round(1000 * res["wall"] / n, 1),
        "early_ms": round(1000 * early, 1),
        "late_ms": round(1000 * late, 1),
        # ms per trial in each tenth of the trial starts: a steady climb means super-linear cost
        "tenths_ms": [round(1000 * (st[min(len(st) - 1, (i + 1) * len(st) // 10)] - st[i * len(st) // 10])
                            / max(1, len(st) // 10)) for i in range(10)] if len(st) >= 20 else [],
        "driver_peak_rss_mb": round(res["peak_rss_mb"], 1),
        "store_mb": round((dir_bytes(d / "mlflow.db") + dir_bytes(d / "artifacts")) / 2**20, 2),
        "mlflow_db_mb": round(dir_bytes(d / "mlflow.db") / 2**20, 2),
        "tune_dir_mb": round(dir_bytes(d / "tune") / 2**20, 2),
        "load_mean": round(res["load_mean"], 2),
        "errors": res["errors"],
        "record": record_check(d),
    }
    if do_resume:
        wait_cpus(2)
        rname = f"kill{n}"
        kill = run_child("launch", root, rname, spec, address, log, kill_at=n // 2)
        wait_cpus(2)
        rd = root / rname
        before = starts(rd)
        t_kill_done = time.time()
        rres = run_child("resume", root, rname, spec, address, log)
        new = [s for s in starts(rd) if s > t_kill_done]
        row.update({
            "finished_at_kill": kill["finished_at_kill"],
            "resume_wall_s": round(rres["wall"], 1),
            "resume_first_trial_s": round(new[0] - rres["t_start"], 1) if new else None,
            "resume_peak_rss_mb": round(rres["peak_rss_mb"], 1),
            "resume_errors": rres["errors"],
            "resume_record": record_check(rd),
            "attempts_before_resume": len(before),
        })
    shutil.rmtree(d / "runs", ignore_errors=True)  # keep the store and logs, drop run dirs
    return row


def machine() -> str:
    model = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    la = os.getloadavg()
    return f"nproc={os.cpu_count()} cpu={model!r} loadavg(1,5,15)={la[0]:.2f},{la[1]:.2f},{la[2]:.2f}"


def record_failures(row: dict[str, Any]) -> list[str]:
    """What is wrong with a measured row's studies: errors, or a record that is not exactly N
    finished runs with FAKE_EPOCHS epoch points each and no duplicate."""
    n, bad = row["n"], []
    want = {"runs": n, "finished": n, "duplicates": 0, "train_loss_points": n * FAKE_EPOCHS}
    for label, errors, rec in (("full", row["errors"], row["record"]),
                               ("resumed", row.get("resume_errors"), row.get("resume_record"))):
        if rec is None:  # --no-resume
            continue
        if errors:
            bad.append(f"{label} study of {n}: {errors} errors")
        if rec != want:
            bad.append(f"{label} study of {n}: record {rec}, expected {want}")
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[5000], help="trial counts to measure")
    p.add_argument("--root", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--no-resume", action="store_true", help="skip the kill -9 / resume measurement")
    p.add_argument("--profile", action="store_true", help="cProfile each full driver (<root>/full<N>.prof)")
    p.add_argument("--json", default=None, help="append each row as a JSON line to this file")
    p.add_argument("--child", choices=["launch", "resume"], help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--study-root", help=argparse.SUPPRESS)
    p.add_argument("--name", help=argparse.SUPPRESS)
    p.add_argument("--address", help=argparse.SUPPRESS)
    p.add_argument("--out-json", help=argparse.SUPPRESS)
    p.add_argument("--profile-out", help=argparse.SUPPRESS)
    sys.path.insert(0, str(REPO))
    from benchmarks._common import parse_args

    args = parse_args(p, {"n": [10]}, argv)
    if args.child:
        child(args)
        return 0

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    from study.driver.process import init_ray

    root = Path(args.root or tempfile.mkdtemp(prefix="bench_scale_")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}", flush=True)
    print(f"work dir: {root}", flush=True)
    init_ray()
    address = ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:"), address
    failures: list[str] = []
    try:
        for n in args.n:
            for name in (f"full{n}", f"kill{n}"):
                shutil.rmtree(root / name, ignore_errors=True)
            row = measure(n, root, address, do_resume=not args.no_resume, profile=args.profile)
            row["machine"] = machine()
            print(json.dumps(row), flush=True)
            failures += record_failures(row)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    finally:
        ray.shutdown()
    for line in failures:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
