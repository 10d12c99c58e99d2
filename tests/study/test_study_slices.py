"""End to end: the ETA weighs trials by their predicted cost, and ``--time-limit`` slices a study
into pieces whose record equals one uninterrupted run's (real Ray, real MLflow, real training)."""

from __future__ import annotations

import io
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback; before ray is imported
pytest.importorskip("ray")
pytest.importorskip("mlflow")

from record import schema  # noqa: E402
from study import cost  # noqa: E402
from study.plan import slices  # noqa: E402
from study.driver.signals import limit_text  # noqa: E402
from study.driver.launch import launch  # noqa: E402
from study.spec import load_spec  # noqa: E402
from tests.study_helpers import trial_run_rows  # noqa: E402
from tests.study.test_study import ray_address, write_spec  # noqa: E402,F401 - the module's Ray and spec writer

ROOT = Path(__file__).resolve().parents[2]
TINY = {"task.dev_size": 32, "task.test_size": 16, "task.test_lengths": [15]}
LINE = re.compile(r"\] (\d+)/(\d+) done, (\d+) running, .*\| (done|ETA (\S+) \((\S+) of work x([0-9.]+)\))$")


def seconds(hms: str) -> int:
    m = re.fullmatch(r"(?:(\d+)h)?(\d+)m(\d+)s", hms)
    return int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + int(m.group(3))


def test_eta_weights_cells_by_cost(ray_address, tmp_path: Path) -> None:
    # Two cells, one trial each, run one after the other: the second trains 50x the examples.
    spec_path = write_spec(tmp_path, "eta", grid={"task": ["copy"], "variant": ["onestep"],
                                                  "task.train_size": [40, 2000]},
                           overrides={**TINY, "optim.epochs": 3}, max_concurrent=1)
    spec = load_spec(spec_path, "smoke")
    cheap, dear = (c.cost for c in cost.cell_costs(spec, cost.load_calibration()))
    assert dear.total > 3 * cheap.total  # the model tells the cells apart

    out = io.StringIO()
    summary = launch(spec_path, root=tmp_path / "s", address=ray_address, progress_seconds=0, out=out)
    assert summary.errors == 0 and summary.runs.finished == 2
    lines = [m.groups() for m in map(LINE.search, out.getvalue().splitlines()) if m]
    assert lines, out.getvalue()
    assert "ETA ?" not in out.getvalue()
    assert lines[-1][0] == "2" and lines[-1][3] == "done"  # the last line: done, never "ETA ?"
    work = [(int(done), seconds(left)) for done, _, _, tail, _, left, _ in lines if tail != "done"]
    # Work left never grows; with nothing done it is at most both trials, at least the dear one.
    assert [w for _, w in work] == sorted((w for _, w in work), reverse=True)
    first_half = [w for d, w in work if d == 0]
    assert first_half and int(dear.total) <= first_half[0] <= int(cheap.total + dear.total) + 1
    # Once the cheap trial is done, what is left is the dear one's (or less): far more than the
    # half an ETA that weighs trials alike would leave.
    assert all(w <= int(dear.total) + 1 for d, w in work if d == 1)
    assert dear.total / (cheap.total + dear.total) > 0.75
    # One trial at a time: the ETA is the work left scaled by the measured ratio (rounding aside).
    for done, _, _, tail, eta, left, ratio in lines:
        if tail != "done":
            assert abs(seconds(eta) - float(ratio) * seconds(left)) <= float(ratio) + 1
    assert any(float(r) != 1.0 for *_, r in lines if r is not None)  # measured epochs moved it


def record(db: Path) -> dict[str, dict]:
    """run key -> every metric but wall time, (step, value) in step order."""
    out = {}
    for r in trial_run_rows(db):
        out[r["tags"][schema.RUN_KEY]] = {
            k: v for k, v in r["metrics"].items() if k not in ("epoch_seconds",)}
    return out


@pytest.mark.faults  # drivers stopped by their deadline; 5-15 minutes on a loaded 2-core machine
@pytest.mark.timeout(3000)  # up to 13 drivers in a row (a slice that trained nothing is retried longer)
def test_three_time_limited_slices_equal_one_uninterrupted_run(ray_address, tmp_path: Path) -> None:
    epochs = 20
    body = dict(grid={"task": ["copy"], "variant": ["onestep", "content"]},
                overrides={**TINY, "task.train_size": 960, "optim.epochs": epochs}, max_concurrent=1)
    spec = write_spec(tmp_path, "slice", **body)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def driver(args: list[str], root: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "study.cli", *args, "--root", str(root),
                               "--address", ray_address, "--progress-seconds", "5"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    t0 = time.time()
    whole = driver(["launch", str(spec)], tmp_path / "whole")
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]

    # The slices' limits come from what the uninterrupted run measured, not from fixed seconds
    # (on a loaded 2-core machine a driver's start-up alone took from 20 s to over 3 minutes):
    # its start-up (launch to the first epoch in the record) and its training (first to last
    # epoch, with the overheads between epochs, which epoch_seconds leaves out). The first
    # slice gets the start-up plus half the training, the middle of the window in which it
    # trains some epochs and not all; a slice that trained nothing (the machine got slower)
    # gets half as long again next time, and the last slice runs without a limit.
    con = sqlite3.connect(tmp_path / "whole" / "slice-smoke" / "mlflow.db")
    first_ms, last_ms = con.execute("SELECT min(timestamp), max(timestamp) FROM metrics "
                                    "WHERE key = 'train_loss'").fetchone()
    (slowest,) = con.execute("SELECT max(value) FROM metrics WHERE key = 'epoch_seconds'").fetchone()
    con.close()
    startup = max(first_ms / 1000 - t0, 5.0)
    training = max((last_ms - first_ms) / 1000, 1.0)
    limit = int(startup + training / 2) + 1
    # The deadline stops the trials gracefully: the epoch under way ends and the state is saved,
    # then Ray shuts down; allow that a few slow epochs and another start-up's worth.
    grace = 3 * slowest + startup + 15
    db = tmp_path / "sliced" / "slice-smoke" / "mlflow.db"

    def trained() -> int:  # epochs in the record (a finished run's checkpoint is pruned)
        return sum(len(r["metrics"].get("train_loss", [])) for r in trial_run_rows(db)) if db.exists() else 0

    def sliced_run(limit: int) -> tuple[list, list, list, list]:
        codes, outs, limits, progress = [], [], [], []
        for i in range(6):
            last = len(codes) >= 2 and any(0 < t < 2 * epochs for t in progress) or i == 5
            args = (["launch", str(spec)] if i == 0 else ["resume", "slice-smoke"]) + (
                [] if last else ["--time-limit", f"{limit}s"])
            t = time.monotonic()
            done = driver(args, tmp_path / "sliced")
            codes.append(done.returncode)
            outs.append(done.stdout + done.stderr)
            limits.append(None if last else limit)
            if last:
                break
            assert done.returncode in (slices.EXIT_TIME_LIMIT, 0), outs[-1][-3000:]
            if done.returncode == 0:  # (the machine got faster: nothing left to slice)
                limits[-1] = -(time.monotonic() - t)  # (how long the whole study took here)
                break
            assert time.monotonic() - t < limit + grace, (limit, grace)  # stopped near its limit
            # the printed command carries the --address this driver joined (e6f4632)
            assert re.search(re.escape(f"continue with `study resume {tmp_path / 'sliced' / 'slice-smoke'} ")
                             + r"(--address \S+ )?" + re.escape(f"--time-limit {limit_text(limit)}`"),
                             done.stdout), done.stdout[-2000:]
            progress.append(trained())
            if progress[-1] == (progress[-2] if len(progress) > 1 else 0):
                limit = int(limit * 1.5)  # it trained nothing this time
        return codes, outs, limits, progress

    # A second attempt from scratch when the load swung so far that no slice stopped part-way
    # (one trained nothing, the next everything): the check below would have nothing to check.
    for attempt in range(2):
        shutil.rmtree(tmp_path / "sliced", ignore_errors=True)
        codes, outs, limits, progress = sliced_run(limit)
        if any(0 < t < 2 * epochs for t in progress):
            break
        if limits[-1] is not None and limits[-1] < 0:  # one slice did it all, in -limits[-1] s
            limit = max(int(-limits[-1] * 0.6), 5)
    # At least one slice stopped by its limit part-way (the record then had to be continued),
    # and the last one finished the study.
    assert any(0 < t < 2 * epochs for t in progress), (progress, limits, outs[0][-3000:])
    assert codes[0] == slices.EXIT_TIME_LIMIT and codes[-1] == 0, (codes, limits, outs[-1][-3000:])

    uninterrupted = record(tmp_path / "whole" / "slice-smoke" / "mlflow.db")
    sliced = record(tmp_path / "sliced" / "slice-smoke" / "mlflow.db")
    assert len(sliced) == 2 and sliced.keys() == uninterrupted.keys()
    for key, metrics in uninterrupted.items():
        assert sliced[key] == metrics  # every epoch's and every final metric, exactly
        assert [s for s, _ in metrics["train_loss"]] == list(range(1, epochs + 1))
