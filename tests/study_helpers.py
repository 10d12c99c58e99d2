"""Helpers shared by the tests that drive real study processes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable


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
