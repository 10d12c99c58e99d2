"""Helpers for tests that kill a real `locattn train` process (tests/locattn/test_resume.py,
tests/locattn/test_compiled.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path


def kill_after_epoch(cmd: list[str], out_dir: Path, epoch: int, *, env: dict, cwd: Path,
                     timeout: float, poll: float = 0.01) -> subprocess.Popen:
    """Start ``cmd`` (a ``locattn train`` writing to ``out_dir``), SIGKILL it as soon as its
    checkpoint records ``epoch`` or later, and return the reaped process. Fails if the run
    ends first or the epoch is not reached within ``timeout`` seconds."""
    victim = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    meta = out_dir / "checkpoint" / "meta.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if meta.is_file() and json.loads(meta.read_text())["epoch"] >= epoch:
            break
        assert victim.poll() is None, "the run ended before it could be killed"
        time.sleep(poll)
    else:
        victim.kill()
        raise AssertionError(f"no checkpoint of epoch {epoch} in {out_dir} within {timeout:g} s")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    return victim
