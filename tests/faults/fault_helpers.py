"""What the fault tests share: a spec on disk, the ``study`` command as a process, a driver started
and killed with its process tree, the runs a store holds, and the driver's own output lines.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
pytest.importorskip("ray")
pytest.importorskip("mlflow")

from record import schema
from tests.study_helpers import trial_run_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = {"task.train_size": 64, "task.dev_size": 16, "task.test_size": 16, "task.test_lengths": [15]}
ENV = dict(os.environ, PYTHONPATH=str(ROOT), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
           RAY_USAGE_STATS_ENABLED="0", TUNE_GLOBAL_CHECKPOINT_S="1")


def write_spec(dirpath: Path, name: str, text: str | None = None, **body) -> Path:
    spec = {"name": name, "seeds": 1, "resources": {"cpus": 1}, "max_failures": 0,
            "max_concurrent": 1, "grid": {"task": ["copy"], "variant": ["onestep"]},
            "overrides": {**TINY, "optim.epochs": 2},
            "profiles": {"smoke": {}}, "default_profile": "smoke", **body}
    path = dirpath / f"{name}.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(spec))
    return path


def study_cli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "study.cli", *args], env=env or ENV,
                          capture_output=True, text=True, timeout=timeout)


def start_driver(*args: str, log: Path, env: dict | None = None) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "study.cli", *args], env=env or ENV,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def trial_runs(db: Path) -> dict[str, dict]:
    """run key -> {status, tags, steps: {metric: [steps]}, final: {metric: [values]}} of trial runs."""
    out: dict[str, dict] = {}
    for r in trial_run_rows(db):
        key = r["tags"][schema.RUN_KEY]
        assert key not in out, f"two runs for key {key}"
        split = {"steps": {}, "final": {}}
        for k, points in r["metrics"].items():
            if k in schema.EPOCH_METRICS:
                split["steps"][k] = [step for step, _ in points]
            else:
                split["final"][k] = [v for _, v in points]
        out[key] = {"status": r["status"], "tags": r["tags"], **split}
    return out


def parent_run(db: Path) -> dict:
    con = sqlite3.connect(db)
    try:
        (run_id, status), = con.execute(
            "SELECT r.run_uuid, r.status FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE t.key = ? AND t.value = ?", (schema.ROLE, schema.ROLE_STUDY)).fetchall()
        tags = dict(con.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (run_id,)).fetchall())
        metrics = dict(con.execute("SELECT key, value FROM metrics WHERE run_uuid = ?", (run_id,)).fetchall())
    finally:
        con.close()
    return {"status": status, "tags": tags, "metrics": metrics}


def checkpoints(study_dir: Path) -> list[tuple[int, Path]]:
    """(epoch, trainer checkpoint dir) of every trainer checkpoint held by an intact Tune trial
    checkpoint."""
    from study.trial.trainable import staged_runs

    out = []
    for path in sorted(study_dir.glob("tune/trial_*/checkpoint_*")):
        out += staged_runs(path).values()
    return sorted(out)


def kill_tree(pid: int) -> None:
    """SIGKILL a driver and every process it started (its whole private Ray), by PID."""
    import psutil

    try:
        procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


#: Lines Ray and MLflow log on their own under load (a slow worker start, a GCS health check, a
#: retried SQLite lock): Ray's "2026-01-01 00:00:00,000\tWARNING file.py:1 -- ..." and
#: "[2026-01-01 00:00:00,000 W 123 456] file.cc:1: ...", MLflow's "2026/01/01 00:00:00 WARNING
#: mlflow...: ...", and lines a Ray process forwards ("(raylet) ...", "(pid=123) ...",
#: "(Trial pid=123) ..."). The one-line checks count what the driver itself says.
_NOISE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(DEBUG|INFO|WARNING|WARN)\b"
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [DIW] \d+ \d+\]"
    r"|\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (DEBUG|INFO|WARNING)\b"
    r"|\((raylet|gcs_server|autoscaler|monitor|dashboard)[^)]*\) "
    r"|\((\w+ )?pid=\d+(, ip=[\d.]+)?\) "
    r"|\s*warnings\.warn\(|\S+\.py:\d+: \w*Warning: )")


def driver_lines(text: str) -> list[str]:
    """The non-empty lines of a driver's output that are neither Ray's nor MLflow's own log
    lines (:data:`_NOISE`), nor MLflow's SQLite lock retries (``mlflow.store.db.utils``)."""
    return [ln for ln in text.splitlines()
            if ln.strip() and not _NOISE.match(ln) and "mlflow.store.db.utils" not in ln]


def has_traceback(text: str) -> bool:
    """Whether the driver itself printed a traceback (a Ray process's forwarded lines aside)."""
    return any(ln.startswith("Traceback (most recent call last)") for ln in driver_lines(text))
