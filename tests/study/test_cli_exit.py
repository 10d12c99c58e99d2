"""``study`` as a program (:func:`study.cli.program`): its exit status is :func:`study.cli.main`'s,
and what it printed reaches a pipe, also when it leaves through ``os._exit`` because Ray's C++
core is loaded (a launch or resume skips the interpreter's teardown, where a driver aborted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# (PYTHONUNBUFFERED off: with it, stdout is written through and a missing flush goes unseen)
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "PYTHONPATH": str(ROOT),
       "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def program(argv: list[str], load_ray: bool) -> subprocess.CompletedProcess:
    """``program()`` in a fresh interpreter with ``argv``, stdout and stderr pipes (block-buffered:
    what was not flushed before ``os._exit`` is lost), Ray's C++ core loaded first or not."""
    code = ("import sys\n" + ("import ray._raylet\n" if load_ray else "")
            + f"sys.argv = ['study', *{argv!r}]\n"
            + "from study.cli import program\nprogram()\n")
    return subprocess.run([sys.executable, "-c", code], env=ENV, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("load_ray", [True, False], ids=["ray-core-loaded", "plain"])
def test_program_keeps_mains_status_and_its_output(tmp_path: Path, load_ray: bool) -> None:
    plan = program(["launch", "ablations/rc_table2.yaml", "--profile", "smoke", "--root", str(tmp_path),
                    "--dry-run"], load_ray)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "rc_table2-smoke" in plan.stdout and "trials" in plan.stdout, plan.stdout[-2000:]
    assert not (tmp_path / "rc_table2-smoke").exists()  # a dry run writes nothing

    bad = program(["status", "no-such-study", "--root", str(tmp_path)], load_ray)
    assert bad.returncode == 2, (bad.returncode, bad.stdout, bad.stderr)
    assert "study status: " in bad.stderr and "no-such-study" in bad.stderr, bad.stderr


def test_a_closed_pipe_is_not_a_traceback() -> None:
    """``study status ... | head -1``: the reader goes away; the rest is dropped quietly."""
    res = subprocess.run(f"{sys.executable} -m study.cli status results/record/rc_table10-quick | head -1",
                         shell=True, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.stdout.startswith("cell "), res.stdout
    assert "Traceback" not in res.stderr and "BrokenPipeError" not in res.stderr, res.stderr


def test_a_closed_pipe_is_not_a_traceback_for_reports_either() -> None:
    """``reports list | head -1`` printed a BrokenPipeError traceback (breaker, by hand). ``true``
    leaves before the interpreter has started, so the write always finds the pipe closed (with
    ``head`` it races: the listing fits the pipe's buffer)."""
    res = subprocess.run(f"{sys.executable} -m reports.cli list results/record/rc_table10-quick | true",
                         shell=True, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in res.stderr and "BrokenPipeError" not in res.stderr, res.stderr
