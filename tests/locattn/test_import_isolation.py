"""locattn must import with ray, optuna and mlflow unimportable (docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib, pkgutil, sys

BLOCKED = ("ray", "optuna", "mlflow")

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Blocker())
for name in BLOCKED:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"blocker failed for {name}")

import locattn
# __main__ modules run their program when imported; every other module is imported.
names = ["locattn"] + [
    m.name for m in pkgutil.walk_packages(locattn.__path__, "locattn.")
    if not m.name.endswith(".__main__")
]
for name in names:
    importlib.import_module(name)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
if leaked:
    raise SystemExit(f"leaked: {leaked}")
print("IMPORTED", len(names), " ".join(names))
"""


def test_every_locattn_module_imports_without_ray_optuna_mlflow():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("IMPORTED")][-1]
    names = line.split()[2:]
    assert int(line.split()[1]) == len(names)
    for expected in ("locattn.variants", "locattn.models.seq2seq", "locattn.models.attention.location"):
        assert expected in names
