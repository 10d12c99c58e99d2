"""The output of an analysis script: to stdout, or to a file headed by the command that made it
(``<!-- made by: python results/analysis/<script> <args> -->``), which ``tests/test_results.py``
reruns for every committed ``results/analysis/*.md``."""

from __future__ import annotations

import sys
from pathlib import Path

MADE_BY = "made by: "
"""Prefix of the first line of an ``--out`` file, before the command that made it."""


def emit(text: str, out: Path | None, script: str, args: list[str]) -> None:
    """Write ``text`` to ``out`` under its made-by line (``script``: the file name in
    results/analysis; ``args``: the arguments that remake it), or to stdout when ``out`` is None."""
    if out is None:
        sys.stdout.write(text)
        return
    made_by = " ".join(["python", f"results/analysis/{script}", *args])
    out.write_text(f"<!-- {MADE_BY}{made_by} -->\n{text}", encoding="utf-8")
