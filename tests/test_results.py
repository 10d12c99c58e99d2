"""The committed result tables (results/<study>/) are what `reports build` makes of the
committed study records (results/record/<study>/mlflow.db), byte for byte, with the
options the manifest names (`--table`, `--compare`, `--solved`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.build import build_reports

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
RECORDS = sorted(p.parent for p in (RESULTS / "record").glob("*/mlflow.db"))


def test_results_have_a_record_and_a_manifest() -> None:
    assert RECORDS, f"no study record under {RESULTS / 'record'}"
    manifest = json.loads((RESULTS / "manifest.json").read_text())
    assert sorted(manifest) == sorted(r.name for r in RECORDS)


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_committed_tables_regenerate_byte_for_byte(record: Path, tmp_path: Path) -> None:
    manifest = json.loads((RESULTS / "manifest.json").read_text())[record.name]
    written = build_reports(record, study=record.name, tables=manifest.get("tables"),
                            formats=("md", "latex", "csv"),
                            out_dir=tmp_path, compare=manifest["compare"],
                            solved_at=manifest.get("solved"))
    assert sorted(p.name for p in written) == sorted(manifest["files"])
    for path in written:
        committed = RESULTS / record.name / path.name
        assert committed.read_bytes() == path.read_bytes(), f"{committed} differs from a rebuild"
