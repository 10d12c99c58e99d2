"""End to end: the ETA weighs trials by their predicted cost, and ``--time-limit`` slices a study
into pieces whose record equals one uninterrupted run's (real Ray, real MLflow, real training)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback; before ray is imported
pytest.importorskip("ray")
pytest.importorskip("mlflow")

from record import schema  # noqa: E402
from study import cost, slices  # noqa: E402
from study.launch import launch  # noqa: E402
from study.spec import load_spec  # noqa: E402
from study_helpers import trial_run_rows  # noqa: E402
from test_study import ray_address, write_spec  # noqa: E402,F401 - the module's Ray and spec writer

ROOT = Path(__file__).resolve().parent.parent
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
    assert summary["errors"] == 0 and summary["runs_finished"] == 2
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


@pytest.mark.faults  # drivers stopped by their deadline; about 5 minutes on a loaded 2-core machine
def test_three_time_limited_slices_equal_one_uninterrupted_run(ray_address, tmp_path: Path) -> None:
    epochs = 20
    body = dict(grid={"task": ["copy"], "variant": ["onestep", "content"]},
                overrides={**TINY, "task.train_size": 320, "optim.epochs": epochs}, max_concurrent=1)
    spec = write_spec(tmp_path, "slice", **body)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def driver(args: list[str], root: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "study.cli", *args, "--root", str(root),
                               "--address", ray_address, "--progress-seconds", "5"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    t0 = time.monotonic()
    whole = driver(["launch", str(spec)], tmp_path / "whole")
    wall = time.monotonic() - t0
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]

    # A slice gets under half the uninterrupted wall time, which the driver's start-up (about
    # 20 s here) also spends: the training (2 x 20 epochs) must outlast it for a slice to train.
    limit = max(20, int(wall * 0.45))
    db = tmp_path / "sliced" / "slice-smoke" / "mlflow.db"
    codes, outs = [], []
    for i in range(3):
        args = (["launch", str(spec)] if i == 0 else ["resume", "slice-smoke"]) + (
            ["--time-limit", f"{limit}s"] if i < 2 else [])
        t = time.monotonic()
        done = driver(args, tmp_path / "sliced")
        codes.append(done.returncode)
        outs.append(done.stdout + done.stderr)
        if i == 0:  # the first slice trained some epochs (checkpointed), not all
            trained = sum(json.loads(m.read_text())["epoch"]
                          for m in db.parent.glob("runs/*/checkpoint/meta.json"))
            assert 0 < trained < 2 * epochs, (trained, outs[0][-3000:])
        if i < 2 and done.returncode == slices.EXIT_TIME_LIMIT:
            assert time.monotonic() - t < limit + 15  # stopped near its limit (process start aside)
            assert f"continue with `study resume {tmp_path / 'sliced' / 'slice-smoke'} --time-limit {limit}s`" \
                in done.stdout, done.stdout[-2000:]
    assert codes[0] == slices.EXIT_TIME_LIMIT, outs[0][-3000:]
    assert codes[1] in (slices.EXIT_TIME_LIMIT, 0) and codes[2] == 0, outs[-1][-3000:]

    uninterrupted = record(tmp_path / "whole" / "slice-smoke" / "mlflow.db")
    sliced = record(tmp_path / "sliced" / "slice-smoke" / "mlflow.db")
    assert len(sliced) == 2 and sliced.keys() == uninterrupted.keys()
    for key, metrics in uninterrupted.items():
        assert sliced[key] == metrics  # every epoch's and every final metric, exactly
        assert [s for s, _ in metrics["train_loss"]] == list(range(1, epochs + 1))
