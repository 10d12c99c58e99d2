"""Helpers shared by the tests that drive real study processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable


def start_private_ray(attempts: int = 3) -> Any:
    """``study.driver.process.init_ray()`` (a private local Ray), tried up to ``attempts`` times: on a
    loaded machine (CI beside a study, two pytest-xdist workers starting Ray at once) a GCS or
    raylet start-up can time out once, and a module-scoped fixture that fails then errors every
    test of its file. The product's own one-line StudyError is raised if the last try fails."""
    from study.recording.folder import StudyError  # here: the helpers' other users need no study import
    from study.driver.process import init_ray  # the same

    for attempt in range(1, attempts + 1):
        try:
            return init_ray()
        except StudyError:
            if attempt == attempts:
                raise
            time.sleep(5 * attempt)


def wait_for(pred: Callable[[], Any], timeout: float, what: str, proc: Any = None,
             log: Path | None = None) -> Any:
    """Poll ``pred`` until it returns something true (returned), a watched driver ``proc`` exits
    (AssertionError with its log tail), or ``timeout`` seconds pass (AssertionError)."""
    def context() -> str:
        tail = log.read_text()[-3000:] if log is not None and log.is_file() else ""
        last = getattr(pred, "last", None)
        return (f"; last progress {last}" if last is not None else "") + (f":\n{tail}" if tail else "")

    t0 = time.time()
    while time.time() - t0 < timeout:
        value = pred()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"driver exited ({proc.returncode}) before {what}{context()}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}{context()}")


def trial_run_rows(db: Path) -> list[dict]:
    """Every active trial run of a SQLite store: ``{run_id, status, tags, metrics: {key: [(step,
    value)]}}``
    with metrics in step order (the one reader behind the tests' and bench_chaos's views)."""
    import sqlite3

    from record import schema

    con = sqlite3.connect(db, timeout=30)
    try:
        runs: dict[str, dict] = {}
        for run_id, status in con.execute("SELECT run_uuid, status FROM runs WHERE lifecycle_stage='active'"):
            runs[run_id] = {"run_id": run_id, "status": status, "tags": {}, "metrics": {}}
        for run_id, k, v in con.execute("SELECT run_uuid, key, value FROM tags"):
            if run_id in runs:
                runs[run_id]["tags"][k] = v
        for run_id, k, step, v in con.execute(
                "SELECT run_uuid, key, step, value FROM metrics ORDER BY step, timestamp"):
            if run_id in runs:
                runs[run_id]["metrics"].setdefault(k, []).append((step, v))
    finally:
        con.close()
    return [r for r in runs.values() if r["tags"].get(schema.ROLE) == schema.ROLE_TRIAL]


def duplicate_metric_rows(db: Path) -> list[tuple]:
    """(run id, key, step, rows) of every (run, key, step) with more than one metric row in a
    SQLite store: the record holds at most one."""
    import sqlite3

    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute("SELECT run_uuid, key, step, COUNT(*) FROM metrics GROUP BY run_uuid, key, step "
                           "HAVING COUNT(*) > 1").fetchall()
    finally:
        con.close()


def launch_tiny(tmp_path: Path, extra: str = "", *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """``study launch`` of a tiny spec ``tiny`` (Copy, OneStepAttn, 2 seeds, 1 epoch; ``extra``:
    more spec lines) in a real subprocess with local Ray; returns the process and the studies
    root. Ray's token mode is left to the launcher (unset)."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        "name: tiny\ndescription: two runs\ntables: []\n"
        f"grid: {{task: [copy], variant: [onestep]}}\n{extra}seeds: 2\n"
        "overrides: {task.train_size: 32, task.dev_size: 8, task.test_size: 8, "
        "task.test_lengths: [15], optim.epochs: 1}\nresources: {cpus: 1}\nmax_failures: 0\n")
    root = tmp_path / "studies"
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, "-m", "study.cli", "launch", str(spec), "--root", str(root),
                           *args], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=600)
    return proc, root
