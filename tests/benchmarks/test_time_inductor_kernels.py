"""benchmarks/time_inductor_kernels.py refuses what it cannot time in one line (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "time_inductor_kernels.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_no_module_and_a_missing_cache_are_one_line_each(tmp_path: Path) -> None:
    none = run()
    assert none.returncode == 2 and "give inductor output modules" in none.stderr
    missing = run("--cache", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "not a directory" in missing.stderr
    gone = run(str(tmp_path / "absent.py"))
    assert gone.returncode == 2 and "no such module" in gone.stderr
    assert "Traceback" not in none.stderr + missing.stderr + gone.stderr
