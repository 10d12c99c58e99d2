"""reports never imports ray or optuna (docs/architecture.md: reports -> store only)."""

import subprocess
import sys
from pathlib import Path


def test_reports_does_not_import_ray_or_optuna() -> None:
    code = ("import sys, reports.build, reports.cli, reports.figures, reports.synth; "
            "bad = [m for m in ('ray', 'optuna') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
