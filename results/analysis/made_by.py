"""What the analysis scripts share: their command line's common arguments, and their output, to
stdout or to a file headed by the command that made it
(``<!-- made by: python results/analysis/<script> <args> -->``), which ``tests/paper/test_results.py``
reruns for every committed ``results/analysis/*.md``."""

from __future__ import annotations

import argparse
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


def analysis_parser(doc: str, threshold_help: str, *, splits: bool = False) -> argparse.ArgumentParser:
    """A script's parser (described by the first paragraph of its ``doc``, which may wrap) with
    the arguments every analysis takes: the record, ``--threshold`` and ``--out``; with
    ``splits``, also ``--splits`` and ``--metric`` (read them back with :func:`split_list`)."""
    ap = argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()), allow_abbrev=False)
    ap.add_argument("record", type=Path, help="results/record/<study> (holds mlflow.db)")
    if splits:
        ap.add_argument("--splits", required=True, help="comma-separated test splits, e.g. len15,len30,len100")
        ap.add_argument("--metric", default="seq_acc", help="metric per split (default seq_acc)")
    ap.add_argument("--threshold", type=float, default=90.0, help=threshold_help)
    ap.add_argument("--out", type=Path, help="write the Markdown here instead of stdout")
    return ap


def split_list(text: str) -> list[str]:
    """The splits of a ``--splits`` value, in its order, blanks dropped."""
    return [s.strip() for s in text.split(",") if s.strip()]
