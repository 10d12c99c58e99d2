"""The OneStep row of Table 4 through the study layer: a spec whose cell holds OneStepAttn, -Step 2,
-Step 3 and -Sigmoid x 2 seeds on Copy plans one trial (the dry run says so), ``study export`` writes
one packed trial, and (``slow``: a real local Ray and MLflow store) the launch trains one Tune
trial whose runs are each recorded equal to the solo run (tests/locattn/test_pack_variants.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from locattn.config import run_config_from_dict, run_identity
from locattn.packable import check_packable
from tests.locattn.test_pack_variants import ONESTEP_ROW, OVERRIDES, SEEDS, solo  # noqa: F401 - the fixture


def write_spec(tmp_path: Path, name: str, **body) -> Path:
    spec = {"name": name, "grid": {"task": ["copy"], "variant": ONESTEP_ROW}, "seeds": len(SEEDS),
            "resources": {"cpus": 1}, "max_failures": 0, "profiles": {"smoke": {}}, "default_profile": "smoke",
            "overrides": OVERRIDES, **body}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_spec_of_the_onestep_row_plans_one_trial_and_exports_one_pack(tmp_path: Path, capsys) -> None:
    pytest.importorskip("mlflow")
    from study.cli import main as study
    from study.spec import load_spec

    path = write_spec(tmp_path, "t4", pack=["seeds"])
    spec = load_spec(path, None)
    assert spec.cell_packs() == [(0, 1, 2, 3)] and spec.n_trials() == 1 and spec.n_runs() == 8
    assert ("  - pack 1: task=copy,variant=onestep + task=copy,variant=onestep_no_step2 + "
            "task=copy,variant=onestep_no_step3 + task=copy,variant=onestep_no_sigmoid "
            "(4 cells x 2 runs = 8 runs per trial)") in spec.plan()
    assert load_spec(write_spec(tmp_path, "t4plain"), None).n_trials() == 8  # a spec that does not pack
    export = tmp_path / "export"
    assert study(["export", str(path), "--root", str(tmp_path / "s"), "--out", str(export)]) == 0
    assert "exported 1 trials (8 runs)" in capsys.readouterr().out
    (trial,) = json.loads((export / "manifest.json").read_text())["trials"]
    assert trial["packed"] and len(trial["runs"]) == 8
    cfgs = [run_config_from_dict(r["config"]) for r in trial["runs"]]
    check_packable(cfgs)  # the offline worker trains them as one pack (locattn.offline)
    assert sorted((c.variant, c.seed) for c in cfgs) == sorted((v, s) for v in ONESTEP_ROW for s in SEEDS)


@pytest.mark.slow
def test_the_onestep_row_launches_as_one_ray_trial_each_run_equal_to_solo(solo, tmp_path: Path, capsys) -> None:
    """A real local Ray and MLflow store: the 4 variants x 2 seeds train in one Tune trial, and
    each run's record (identity, every epoch's losses and dev scores) is its solo run's."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    pytest.importorskip("ray")
    pytest.importorskip("mlflow")
    import ray
    from record import layout, schema
    from study.driver.launch import launch
    from tests.study_helpers import start_private_ray, trial_run_rows

    started = start_private_ray()
    try:
        path = write_spec(tmp_path, "t4", pack=["seeds"])
        root = tmp_path / "s"
        dry = launch(path, root=root, dry_run=True)
        assert dry.n_trials == 1 and dry.n_runs == 8
        assert "trials   1 Tune trials, 8 MLflow runs" in capsys.readouterr().out
        summary = launch(path, root=root, progress_seconds=60)
        assert summary.trials == 1 and summary.errors == 0
    finally:
        if started:
            ray.shutdown()
    study_dir = root / "t4-smoke"
    rows = trial_run_rows(study_dir / "mlflow.db")
    assert len(rows) == 8
    by_run = {(r.cfg.variant, str(r.cfg.seed)): r for r in solo}
    trials = set()
    for row in rows:
        tags = row["tags"]
        twin = by_run[(tags[schema.VARIANT], tags[schema.SEED])]
        folder = study_dir / layout.RUNS_DIR / tags[schema.RUN_KEY]
        assert json.loads((folder / layout.RESULT_FILE).read_text())["run_identity"] == run_identity(twin.cfg)
        trials.add(tuple(json.loads((folder / layout.TRIAL_FILE).read_text())["tune_trials"]))
        for key in ("train_loss", "dev_loss", "dev_score"):
            assert row["metrics"][key] == [(h["epoch"], h[key]) for h in twin.history], (tags[schema.VARIANT], key)
    assert len(trials) == 1 and len(next(iter(trials))) == 1  # one Tune trial trained all eight
