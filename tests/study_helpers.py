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
