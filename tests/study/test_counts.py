"""One count everywhere: ``study status`` counts a run as finished when its folder holds its
``result.json`` although the record still says running (a driver killed between the two), as
``study resume`` does (it records such a run from its folder and does not train it again); the
report header says what it counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from record.layout import RESULT_FILE, RUNS_DIR  # noqa: E402
from reports.synth import SynthRun, write_bulk_sql  # noqa: E402
from study.cli import main as study  # noqa: E402
from study.recording.status import keyed_trial_runs  # noqa: E402
from tests.study.test_study import SMOKE, write_spec  # noqa: E402


def _killed_study(tmp_path: Path, capsys) -> Path:
    """A two-seed study whose driver died with both runs marked running in the record, after
    seed 0 wrote its result.json (the state ``kill -9`` of the driver left in rc_table2-smoke)."""
    spec = write_spec(tmp_path, "k9", seeds=2, grid={"task": ["copy"], "variant": ["onestep"]}, overrides=SMOKE)
    root = tmp_path / "s"
    assert study(["export", str(spec), "--root", str(root), "--out", str(tmp_path / "export")]) == 0
    study_dir = root / "k9-smoke"
    runs = [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=2, status="running") for s in range(2)]
    write_bulk_sql(study_dir / "mlflow.db", "k9-smoke", runs)
    (key,) = [k for _, seed, _, k in keyed_trial_runs(f"sqlite:///{study_dir / 'mlflow.db'}", "k9-smoke") if seed == 0]
    (study_dir / RUNS_DIR / key).mkdir(parents=True)
    (study_dir / RUNS_DIR / key / RESULT_FILE).write_text(json.dumps({"best_epoch": 2}))
    capsys.readouterr()
    return study_dir


def test_status_counts_a_run_finished_in_its_folder_as_done_as_resume_does(tmp_path: Path, capsys) -> None:
    study_dir = _killed_study(tmp_path, capsys)
    assert study(["status", str(study_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    cells = {ln.split()[0]: ln.split()[1:6] for ln in out if ln.startswith(("task=", "total"))}
    # done, running, stale, failed, missing: seed 0 finished (resume records it), seed 1 stale
    assert cells["task=copy,variant=onestep"] == ["1", "0", "1", "0", "0"], out
    assert cells["total"] == ["1", "0", "1", "0", "0"], out
    assert "1 run(s) stopped with it, resumable" in "\n".join(out)
    # study runs names the same folder finished
    assert study(["runs", str(study_dir)]) == 0
    assert " finished " in capsys.readouterr().out
