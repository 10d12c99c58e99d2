"""The second worked example, examples/locattn-localm: local-m attention written as plain PyTorch
(nn.Linear, nn.LayerNorm, a buffer) trains through `study launch` beside OneStepAttn, solo
(profile smoke) and with each cell's seeds as one pack (profile smoke_packed, `pack: [seeds]`),
the packed seeds equal the solo ones, and the report shows it under its own label. (The fast,
in-process packed-equals-solo check is tests/locattn/test_plain_attender.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from record import schema
from tests.plugin_helpers import fake_install
from tests.study_helpers import trial_run_rows
from tests.study.test_plugins_study import run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "locattn-localm"



def results(study: Path) -> dict[tuple[str, int], dict]:
    out = {}
    for path in sorted((study / "runs").glob("*/result.json")):
        result = json.loads(path.read_text())
        cfg = result["config"]
        out[(cfg["variant"], cfg["seed"])] = result
    return out


@pytest.mark.slow
def test_the_plain_pytorch_example_trains_solo_and_packed_beside_onestep_and_reports(tmp_path):
    paths = [EXAMPLE, fake_install(tmp_path / "site", "localm")]
    listed = run(["locattn", "list", "attenders", "localm"], paths)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[:4] == ["localm", "Local-m", "plugin", "locattn_localm"]
    root = tmp_path / "studies"
    for profile in ("smoke", "smoke_packed"):
        proc = run(["study.cli", "launch", str(EXAMPLE / "spec.yaml"), "--profile", profile,
                    "--root", str(root)], paths)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    solo, packed = root / "locattn-localm-smoke", root / "locattn-localm-smoke_packed"
    rows = trial_run_rows(packed / "mlflow.db")
    assert sorted((r["tags"][schema.VARIANT], r["tags"][schema.SEED], r["tags"].get(schema.PACKED_WITH),
                   r["status"]) for r in rows) == [
        (v, s, "0,1", "FINISHED") for v in ("localm", "onestep") for s in ("0", "1")]
    a, b = results(solo), results(packed)
    assert sorted(a) == sorted(b) == [("localm", 0), ("localm", 1), ("onestep", 0), ("onestep", 1)]
    for key in a:  # each packed seed is its solo run (fp32 tolerance)
        for h_solo, h_packed in zip(a[key]["history"], b[key]["history"], strict=True):
            assert h_packed["train_loss"] == pytest.approx(h_solo["train_loss"], rel=1e-5), key
            assert h_packed["dev_loss"] == pytest.approx(h_solo["dev_loss"], rel=1e-5), key
    assert a[("localm", 0)]["config"]["model"]["attention"]["options"] == {"window": 2}
    report = run(["study.cli", "report", str(packed)], paths)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    grid = (packed / "reports" / "grid.md").read_text()
    assert "| Variant | Copy iid.seq_acc | Copy len15.seq_acc |" in grid
    assert "\n| Local-m | " in grid and "\n| OneStepAttn | " in grid


def test_the_plain_pytorch_example_registers_without_torch():
    code = ("import sys\nclass B:\n    def find_spec(self, n, p=None, t=None):\n"
            "        if n.split('.')[0] == 'torch': raise ImportError('blocked')\n"
            "sys.meta_path.insert(0, B())\nimport locattn_localm\n"
            "from locattn.config import make_run_config\n"
            "print(make_run_config(task='copy', variant='localm').model.attention.options)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{EXAMPLE}"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "{'window': 2}"
