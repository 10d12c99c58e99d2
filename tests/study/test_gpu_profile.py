"""The ``gpu`` profile of the paper's specs: the paper's budget, packed and graphed on a GPU; it
dry-runs on a CPU, stops before any trial on a machine without a GPU, and a tiny study of it
packs its seeds on the GPU (``-m gpu``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from study.cli import main as study_main
from tests.locattn.test_cli import run_main

ROOT = Path(__file__).resolve().parents[2]


GPU_SPECS = ("rc_table2", "rc_table4", "rc_table7")


@pytest.mark.parametrize("stem", GPU_SPECS)
def test_the_gpu_profile_is_the_paper_budget_packed_and_graphed_on_a_gpu(stem: str) -> None:
    from locattn.config import make_run_config
    from study.spec import load_spec

    gpu, paper = (load_spec(ROOT / "ablations" / f"{stem}.yaml", p) for p in ("gpu", "paper"))
    assert (gpu.gpus, gpu.pack_seeds) == (1.0, True)  # a GPU per trial packs its seeds on its own
    assert [c.cell for c in gpu.cells] == [c.cell for c in paper.cells]
    assert gpu.seeds == paper.seeds and gpu.hparams == paper.hparams
    for g, p in zip(gpu.cells, paper.cells):
        assert g.overrides == {**p.overrides, "optim.train_step": "graphed"}
        cfg = make_run_config(task=g.task, variant=g.variant, overrides=g.overrides)
        assert (cfg.optim.train_step, cfg.optim.epochs) == ("graphed", 100)


def test_the_gpu_profile_dry_runs_on_a_cpu(tmp_path: Path, capsys) -> None:
    code, out, err = run_main(["launch", str(ROOT / "ablations/rc_table2.yaml"), "--profile", "gpu",
                               "--dry-run", "--root", str(tmp_path)], capsys, study_main)
    assert code == 0, err
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln and not ln.startswith(" ")}
    assert lines["seeds"].endswith("[0, 1, 2, 3, 4] (packed: one trial trains them together)")
    # 6 variants x 8 tasks, OneStepAttn and MonoAttn of a task in one pack (ablation switches)
    assert lines["trials"].split()[:5] == ["trials", "40", "Tune", "trials,", "240"]
    assert "1 CPU, 1 GPU per trial" in lines["budget"]
    assert not any(tmp_path.iterdir())


def _cuda() -> bool:
    import torch  # at collection, for this one skip

    return torch.cuda.is_available()


def tiny_gpu_spec(tmp_path: Path) -> Path:
    """rc_table2's gpu profile (resources, graphed step), cut to one cell, two seeds, two epochs
    of tiny data."""
    import yaml

    raw = yaml.safe_load((ROOT / "ablations/rc_table2.yaml").read_text())
    gpu = raw["profiles"]["gpu"]
    tiny = {**gpu, "grid": {"task": ["copy"], "variant": ["onestep"]}, "seeds": 2,
            "overrides": {**gpu["overrides"], "task.train_size": 64, "task.dev_size": 32,
                          "task.test_size": 32, "task.test_lengths": [15], "optim.epochs": 2}}
    spec = tmp_path / "rc_table2_gpu_tiny.yaml"
    spec.write_text(yaml.safe_dump({**raw, "profiles": {"tiny": tiny}, "default_profile": "tiny"}))
    return spec


@pytest.mark.skipif(_cuda(), reason="a machine with CUDA runs the study instead")
def test_a_gpu_profile_on_a_machine_without_a_gpu_stops_before_any_trial(tmp_path: Path) -> None:
    """Tune would wait forever for a GPU that a private local Ray never gains: the launch stops at
    once with exit status 2, names the spec's resources.gpus and the ways out, and keeps the
    study, which `study status` then reads."""
    import os

    spec = tiny_gpu_spec(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run([sys.executable, "-m", "study.cli", "launch", str(spec), "--root",
                           str(tmp_path / "s")], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()[-1]
    assert f"{spec} (profile tiny): resources.gpus is 1 per trial, but this machine has 0 GPU" in err, err
    assert "nothing ran and the study is kept" in err and "locattn.offline" in err, err
    study = tmp_path / "s" / "rc_table2-tiny"
    assert not any((study / "runs").glob("*/result.json"))
    status = subprocess.run([sys.executable, "-m", "study.cli", "status", str(study)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[1].split() == ["task=copy,variant=onestep", "0", "0", "0", "0", "2"]
    assert "no finished run yet" in status.stdout, status.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA")
def test_a_tiny_study_of_the_gpu_profile_packs_its_seeds_on_the_gpu(tmp_path: Path) -> None:
    """:func:`tiny_gpu_spec`: one trial on the GPU trains both seeds packed; each seed has its MLflow run,
    recorded with the graphed step on cuda."""
    import os
    import sqlite3

    from record import schema
    from tests.study_helpers import trial_run_rows

    spec = tiny_gpu_spec(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run([sys.executable, "-m", "study.cli", "launch", str(spec), "--root",
                           str(tmp_path / "s"), "--progress-seconds", "30"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 of 2 runs finished" in proc.stdout
    db = tmp_path / "s" / "rc_table2-tiny" / "mlflow.db"
    runs = trial_run_rows(db)
    assert sorted(r["tags"][schema.SEED] for r in runs) == ["0", "1"]
    con = sqlite3.connect(db)
    try:
        for r in runs:
            assert r["status"] == "FINISHED" and r["tags"][schema.PACKED_WITH] == "0,1"
            params = dict(con.execute("SELECT key, value FROM params WHERE run_uuid = ?",
                                      (r["run_id"],)))
            assert (params["optim.train_step"], params["device"]) == ("graphed", "cuda"), params
            assert r["metrics"]["epochs_run"][-1][1] == 2
    finally:
        con.close()
