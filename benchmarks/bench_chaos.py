"""Chaos benchmark: N random faults / ``study resume`` cycles of a real small study.

A small real study (Copy, two variants x two seeds, tiny data, ``--epochs`` epochs each) is
launched in a driver subprocess, which starts its own private local Ray. Each cycle waits until
the study has trained at least one more epoch, waits a random 0-``--max-wait`` seconds more,
then either ``kill -9``s the driver alone (its Ray helpers are left behind, as after a real
crash) and runs ``study resume``, or (one cycle in four) ``kill -9``s the trial's Ray worker,
which Tune retries from its checkpoint while the driver runs on. Along the way it injects:

    early kills            every new study's driver is killed 0-1.5 s after its mlflow.db
                           appears (while MLflow migrates the new store), then resumed
    one store deletion     mlflow.db (and its -wal/-shm) is deleted under a running driver
    one corrupt checkpoint the newest intact Tune checkpoint of an unfinished trial gets 32
                           zeroed bytes in its state.pt (same size), after a kill
    one edited state       a same-size digit edit of the newest trial_state.json (its epoch
                           history), after a kill

When a study finishes before the N cycles are done, it is checked and a fresh one is started.
At the end it prints, over every study:

    lost        expected runs missing from the store, or not finished
    duplicated  run keys with more than one run, and epoch steps or final metrics logged twice
    gaps        epoch steps missing between 1 and the run's epochs_run
    mismatched  runs whose epoch metrics or final metrics differ from an uninterrupted study of
                the same spec (bit-equal expected; ``--no-reference`` skips that study)
    retrained   epochs seen trained more than once: a run's trainer checkpoint of one epoch
                written again (polled every 0.1 s, so a lower bound: a write overwritten between
                two polls goes unseen), of the epochs the finished runs report

Every kind of fault (driver kill, worker kill, early kill, store deletion, corrupt checkpoint,
edited state) is injected at least once: the store deletion, the first worker kill and the file
faults are due by set cycles, and when one could not be injected by the last cycle (its target
did not exist then: no trial worker, no intact checkpoint) the chaos goes on for up to
``--extra-cycles`` more cycles until it is.

It exits 1, and says why, when anything was lost, duplicated, missing or mismatched, or when a
kind of fault was never injected. ``--quick``: 2 cycles (plus the extra ones every kind of
fault needs) of studies of 2 epochs on 32 examples, waiting at most 1 s before a kill.

    python benchmarks/bench_chaos.py --cycles 20 [--epochs 12] [--seed 0] [--root DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from benchmarks._common import parse_args  # noqa: E402
from record import schema  # noqa: E402
from study_helpers import trial_run_rows  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(REPO), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
           RAY_USAGE_STATS_ENABLED="0", TUNE_GLOBAL_CHECKPOINT_S="1")


def write_spec(path: Path, name: str, epochs: int, train_size: int) -> None:
    import yaml

    spec = {
        "name": name, "seeds": 2, "resources": {"cpus": 1}, "max_failures": 4, "max_concurrent": 2,
        "grid": {"task": ["copy"], "variant": ["onestep", "content"]},
        "overrides": {"task.train_size": train_size, "task.dev_size": 16, "task.test_size": 16,
                      "task.test_lengths": [15], "optim.epochs": epochs},
        "profiles": {"smoke": {}}, "default_profile": "smoke",
    }
    path.write_text(yaml.safe_dump(spec))


def record(db: Path) -> dict[str, Any]:
    """Trial runs of a store: key -> list of {status, tags, steps, finals}."""
    out: dict[str, list] = {}
    if not db.is_file():
        return out
    for r in trial_run_rows(db):
        runs = {"status": r["status"], "tags": r["tags"], "steps": {}, "finals": {}}
        for k, points in r["metrics"].items():
            runs["steps" if k in schema.EPOCH_METRICS else "finals"][k] = points
        out.setdefault(r["tags"][schema.RUN_KEY], []).append(runs)
    return out


def check(db: Path, expected_runs: int, reference: dict | None) -> dict[str, int]:
    """Lost / duplicated / gap / mismatch counts of one finished study."""
    rec = record(db)
    c = {"runs": 0, "lost": 0, "duplicated": 0, "gaps": 0, "mismatched": 0, "epochs_final": 0}
    finished = 0
    for runs in rec.values():
        c["duplicated"] += len(runs) - 1
        run = runs[0]
        if run["tags"].get(schema.STATUS) != schema.STATUS_FINISHED:
            continue
        finished += 1
        n = int(dict(run["finals"].get("epochs_run", [(0, 0)]))[0])
        c["epochs_final"] += n
        for key, points in run["steps"].items():
            steps = [s for s, _ in points]
            c["duplicated"] += len(steps) - len(set(steps))
            c["gaps"] += len(set(range(1, n + 1)) - set(steps))
        c["duplicated"] += sum(len(v) - 1 for v in run["finals"].values())
        if reference is not None:
            ident = (run["tags"][schema.CELL], run["tags"][schema.SEED])
            ref = reference.get(ident)
            mine = ({k: sorted(v) for k, v in run["steps"].items() if k != "epoch_seconds"},
                    {k: sorted(v) for k, v in run["finals"].items()})
            c["mismatched"] += int(ref is None or ref != mine)
    c["runs"] = finished
    c["lost"] = expected_runs - finished
    return c


def reference_metrics(db: Path) -> dict:
    out = {}
    for runs in record(db).values():
        run = runs[0]
        out[(run["tags"][schema.CELL], run["tags"][schema.SEED])] = (
            {k: sorted(v) for k, v in run["steps"].items() if k != "epoch_seconds"},
            {k: sorted(v) for k, v in run["finals"].items()})
    return out


class EpochCounter(threading.Thread):
    """Polls every run directory's trainer checkpoint and counts distinct epoch writes."""

    def __init__(self, root: Path) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.seen: set[tuple[str, int, int]] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for meta in self.root.glob("chaos*-smoke/runs/*/checkpoint/meta.json"):
                try:
                    epoch = int(json.loads(meta.read_text())["epoch"])
                    self.seen.add((str(meta.parent.parent), epoch, meta.stat().st_mtime_ns))
                except (OSError, ValueError, KeyError):
                    pass
            time.sleep(0.1)

    def retrained(self) -> int:
        """Epochs seen written more than once: for each run's epoch, its distinct writes - 1.
        (Counting writes minus the finished runs' epochs went negative on a loaded machine,
        where a 32-example epoch can be written and overwritten between two polls.)"""
        writes: dict[tuple[str, int], int] = {}
        for d, e, _ in self.seen:
            writes[d, e] = writes.get((d, e), 0) + 1
        return sum(n - 1 for n in writes.values())


def trained_epochs(study: Path) -> int:
    """Epochs trained so far by the study (newest trainer checkpoint or result per run)."""
    total = 0
    for run in (study / "runs").glob("*"):
        result = run / "result.json"
        meta = run / "checkpoint" / "meta.json"
        try:
            if result.is_file():
                total += int(json.loads(result.read_text())["epochs_run"])
            elif meta.is_file():
                total += int(json.loads(meta.read_text())["epoch"])
        except (OSError, ValueError, KeyError):
            pass
    return total


def newest_intact_checkpoint(study: Path) -> Path | None:
    """The trainer checkpoint directory of the newest intact Tune trial checkpoint, if any."""
    from study.trial.trainable import staged_runs

    best = None
    for path in study.glob("tune/trial_*/checkpoint_*"):
        for epoch, run in staged_runs(path).values():
            rank = (epoch, path.stat().st_mtime)
            if best is None or rank > best[0]:
                best = (rank, run)
    return best[1] if best else None


def edit_newest_state(study: Path) -> Path | None:
    """A same-size digit edit of the newest complete trial_state.json's epoch history."""
    from study.trial.trainable import STATE_FILE, read_complete, staged_runs

    best = None
    for path in study.glob("tune/trial_*/checkpoint_*"):
        for epoch, _ in staged_runs(path).values():
            if best is None or epoch > best[0]:
                best = (epoch, path)
    if best is None or read_complete(best[1]) is None:
        return None
    state = best[1] / STATE_FILE
    text = state.read_text()
    at = text.find('"dev_loss": ')
    if at < 0:
        return None
    at += len('"dev_loss": ')
    digit = text[at]
    if not digit.isdigit():
        return None
    state.write_text(text[:at] + str((int(digit) + 1) % 10) + text[at + 1:])
    return state


def descendants(pid: int) -> list[int]:
    """PIDs of every process under ``pid`` (from /proc: psutil is not a dependency here)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def trial_workers(driver: int) -> list[int]:
    """PIDs of the Ray worker processes running trials under a driver (by PID, never by name)."""
    out = []
    for pid in descendants(driver):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith("ray::") and ("ImplicitFunc" in title or "run_trial" in title):
            out.append(pid)
    return out


def early_kill(spec: Path, study: Path, root: Path, log: Path, rng: random.Random) -> bool:
    """Launch a new study and ``kill -9`` its driver 0-1.5 s after its mlflow.db appears."""
    db = study / "mlflow.db"
    proc = run_driver(["launch", str(spec), "--root", str(root)], log)
    t = time.time()
    while proc.poll() is None and not db.exists() and time.time() - t < 300:
        time.sleep(0.01)
    if proc.poll() is not None:
        return False
    time.sleep(rng.uniform(0, 1.5))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return True


def all_finished(tail: str) -> bool:
    """Whether a driver's last lines say every run of its study finished: at the end of a run
    ("4 of 4 runs finished, 0 failed, 0 not finished"), or on a resume that found nothing left to
    train ("every trial is already finished in the record (4 of 4 runs finished, 0 failed)",
    after a deleted store was re-recorded from the run directories)."""
    return bool(re.search(r"\b(\d+) of \1 runs finished, 0 failed(, 0 not finished|\))", tail))


def run_driver(args: list[str], log: Path) -> subprocess.Popen:
    out = log.open("ab")
    return subprocess.Popen([sys.executable, "-m", "study.cli", *args, "--progress-seconds", "5"],
                            env=ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--train-size", type=int, default=160)
    ap.add_argument("--max-wait", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--extra-cycles", type=int, default=12,
                    help="cycles past --cycles while a kind of fault has not been injected yet")
    a = parse_args(ap, {"cycles": 2, "epochs": 2, "train_size": 32, "max_wait": 1.0}, argv)
    rng = random.Random(a.seed)
    root = (a.root or Path(tempfile.mkdtemp(prefix="chaos-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "drivers.log"
    print(f"root {root}; {a.cycles} cycles; epochs {a.epochs}; train {a.train_size}; seed {a.seed}", flush=True)
    t0 = time.time()

    reference = None
    if not a.no_reference:
        spec = root / "ref.yaml"
        write_spec(spec, "ref", a.epochs, a.train_size)
        res = subprocess.run([sys.executable, "-m", "study.cli", "launch", str(spec), "--root", str(root),
                              "--progress-seconds", "30"], env=ENV, capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"reference study failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
        reference = reference_metrics(root / "ref-smoke" / "mlflow.db")
        print(f"reference study: {len(reference)} runs, {time.time() - t0:.0f} s", flush=True)

    counter = EpochCounter(root)
    counter.start()
    # When each kind of fault is due (the first worker kill, the store deletion, the corrupt
    # checkpoint); 2 cycles (--quick) fit them all: a worker kill, then a deletion and a kill.
    worker_at = max(0, a.cycles // 2 - 1)
    delete_at = max(1, a.cycles // 3)
    corrupt_at = max(1, (2 * a.cycles) // 3)
    totals = {"studies": 0, "runs": 0, "lost": 0, "duplicated": 0, "gaps": 0, "mismatched": 0,
              "epochs_final": 0}
    study_no = 0
    cycle = 0
    injected = {"driver_kills": 0, "worker_kills": 0, "early_kills": 0, "store_deleted": 0,
                "checkpoint_corrupted": 0, "state_edited": 0}
    studies: list[Path] = []

    def new_study() -> tuple[Path, Path]:
        nonlocal study_no
        study_no += 1
        spec = root / f"chaos{study_no}.yaml"
        write_spec(spec, f"chaos{study_no}", a.epochs, a.train_size)
        studies.append(root / f"chaos{study_no}-smoke")
        return spec, root / f"chaos{study_no}-smoke"

    def start(spec: Path, study: Path) -> subprocess.Popen:
        """A new study: killed early while its store is created, then resumed."""
        if early_kill(spec, study, root, log, rng):
            injected["early_kills"] += 1
            print(f"early kill -9 of {study.name} while its store was created", flush=True)
            return run_driver(["resume", str(study)], log)
        return run_driver(["launch", str(spec), "--root", str(root)], log)

    def missing() -> list[str]:
        return [k for k, n in injected.items() if not n]

    exits = 0  # driver exits in a row without a finished study
    spec, study = new_study()
    t_chaos = time.time()
    proc = start(spec, study)
    while cycle < a.cycles or (missing() and cycle < a.cycles + a.extra_cycles):
        before = trained_epochs(study)
        while proc.poll() is None and trained_epochs(study) <= before:
            time.sleep(0.1)
        if proc.poll() is None:
            time.sleep(rng.uniform(0, a.max_wait))
        if proc.poll() is None and cycle >= delete_at and not injected["store_deleted"]:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{study / 'mlflow.db'}{suffix}").unlink(missing_ok=True)
            injected["store_deleted"] += 1
            print(f"cycle {cycle}: deleted {study / 'mlflow.db'} under the running driver", flush=True)
            time.sleep(rng.uniform(0, a.max_wait))
        due = cycle >= worker_at and not injected["worker_kills"]  # (the first one is not left to chance)
        workers = trial_workers(proc.pid) if proc.poll() is None and (due or rng.random() < 0.25) else []
        if workers:
            victim = rng.choice(workers)
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:  # it ended by itself meanwhile: not a kill
                continue
            cycle += 1
            injected["worker_kills"] += 1
            print(f"cycle {cycle}: kill -9 of trial worker {victim} at {trained_epochs(study)} "
                  "epochs trained", flush=True)
            continue
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            cycle += 1
            exits = 0
            injected["driver_kills"] += 1
            print(f"cycle {cycle}: kill -9 at {trained_epochs(study)} epochs trained", flush=True)
            if cycle >= delete_at and not injected["state_edited"]:
                time.sleep(2)
                edited = edit_newest_state(study)
                if edited is not None:
                    injected["state_edited"] += 1
                    print(f"cycle {cycle}: edited a digit of {edited}", flush=True)
            if cycle >= corrupt_at and not injected["checkpoint_corrupted"]:
                time.sleep(2)  # the killed driver's trial actors die with it
                ckpt = newest_intact_checkpoint(study)
                if ckpt is not None:
                    state = ckpt / "state.pt"
                    blob = bytearray(state.read_bytes())
                    blob[64:96] = bytes(32)
                    state.write_bytes(bytes(blob))
                    injected["checkpoint_corrupted"] += 1
                    print(f"cycle {cycle}: corrupted {state}", flush=True)
            proc = run_driver(["resume", str(study)], log)
            continue
        # The driver exited by itself: finished (or crashed after the store went away).
        if proc.returncode == 0 and all_finished(log.read_text()[-4000:]):
            c = check(study / "mlflow.db", 4, reference)
            for k in totals:
                totals[k] += c.get(k, 0)
            totals["studies"] += 1
            print(f"study {study.name} finished after cycle {cycle}: {c}", flush=True)
            spec, study = new_study()
            proc = start(spec, study)
        else:
            exits += 1
            print(f"cycle {cycle}: driver exited {proc.returncode}; resuming", flush=True)
            if exits >= 3:  # resume after resume fails: the study is lost, not retried forever
                print(f"study {study.name} does not resume:\n{log.read_text()[-1500:]}", flush=True)
                totals["lost"] += 4
                totals["studies"] += 1
                spec, study = new_study()
                proc = start(spec, study)
            else:
                proc = run_driver(["resume", str(study)], log)
            continue
        exits = 0
    # Let the last study finish undisturbed.
    if proc.poll() is None:
        proc.wait()
    if proc.returncode != 0 or not all_finished(log.read_text()[-4000:]):
        proc = run_driver(["resume", str(study)], log)
        proc.wait()
    c = check(study / "mlflow.db", 4, reference)
    for k in totals:
        totals[k] += c.get(k, 0)
    totals["studies"] += 1
    counter.stop.set()
    counter.join()
    retrained = counter.retrained()
    print(f"last study {study.name}: {c}")
    extra = max(0, cycle - a.cycles)
    print(f"\ncycles {min(cycle, a.cycles)}, injected {injected}, {totals['studies']} studies, "
          f"{totals['runs']} finished runs, {time.time() - t_chaos:.0f} s of chaos"
          + (f"; {extra} extra cycles to inject every kind of fault" if extra else ""))
    print(f"lost {totals['lost']}  duplicated {totals['duplicated']}  gaps {totals['gaps']}  "
          f"mismatched vs uninterrupted {totals['mismatched'] if reference is not None else 'n/a'}  "
          f"epochs retrained {retrained} of {totals['epochs_final']} "
          f"({100 * retrained / max(1, totals['epochs_final']):.0f} %)")
    bad = {k: totals[k] for k in ("lost", "duplicated", "gaps", "mismatched") if totals[k]}
    if not totals["runs"]:
        bad["finished runs"] = 0
    if missing():
        print(f"NOT INJECTED in {cycle} cycles: {', '.join(missing())}", flush=True)
        bad["faults not injected"] = missing()
    if bad:
        print(f"FAILED: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
