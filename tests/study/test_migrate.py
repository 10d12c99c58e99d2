"""The record format: ``study.json`` carries one, a folder of an older format is read through
:mod:`study.recording.migrate`, and ``study migrate`` upgrades it in place. Every committed record
(results/record/<study>/) migrates on a copy, and the copy still rebuilds its committed tables
byte for byte; a study of the oldest format migrates and resumes without retraining."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from record.layout import META_FILE, STORE_FILE, StudyPaths
from record.store import ARCHIVE_SUFFIX
from reports.build import build_reports
from study.cli import main as study_main
from study.driver.process import StudyLock
from study.recording.folder import load_meta
from study.recording.migrate import FORMAT_VERSION, LEGACY_TRAIN_FN, upgrade_meta

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
RECORDS = sorted(p.parent for p in (RESULTS / "record").glob(f"*/{META_FILE}"))


def copy_record(record: Path, into: Path) -> Path:
    """What a clone holds of a committed record: study.json, the compressed store and, where the
    record keeps them, its artifacts (read beside the store once the recorded artifact root is
    gone: on a fresh machine it always is)."""
    out = into / record.name
    out.mkdir(parents=True)
    shutil.copy(record / META_FILE, out / META_FILE)
    shutil.copy(record / (STORE_FILE + ARCHIVE_SUFFIX), out / (STORE_FILE + ARCHIVE_SUFFIX))
    if (record / "artifacts").is_dir():
        shutil.copytree(record / "artifacts", out / "artifacts")
    return out


def test_a_format_0_study_json_gets_explicit_keys_and_the_format() -> None:
    old = {"name": "s", "spec_path": "/x.yaml", "profile": "smoke", "raw": {}, "resolved": {},
           "tracking_uri": "sqlite:////x/mlflow.db"}
    new, log = upgrade_meta(old)
    assert new == {**old, "only": {}, "format": FORMAT_VERSION}
    assert "format" not in old and "only" not in old  # the caller's dict is left as it was
    assert log == ["format 0 -> 1: only: {} (the whole grid)", "format 1 -> 2: format number only"]
    assert upgrade_meta(new) == (new, [])


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_every_committed_record_migrates_and_still_rebuilds_byte_for_byte(record: Path, tmp_path: Path,
                                                                          capsys) -> None:
    study = copy_record(record, tmp_path)
    before = json.loads((study / META_FILE).read_text())
    current = before.pop("format", 0) == FORMAT_VERSION  # records made since carry the format
    assert study_main(["migrate", str(study)]) == 0
    after = json.loads((study / META_FILE).read_text())
    assert after.pop("format") == FORMAT_VERSION
    assert before.pop("train_fn", LEGACY_TRAIN_FN) == LEGACY_TRAIN_FN  # format 2 drops the default trainer
    assert after == before  # committed records already name only: the format and train_fn only
    out = capsys.readouterr().out
    assert "(already current)" in out if current else f"record format {FORMAT_VERSION}" in out
    migrated = (study / META_FILE).read_bytes()
    assert study_main(["migrate", str(study)]) == 0  # a second time changes nothing
    assert (study / META_FILE).read_bytes() == migrated
    assert "(already current)" in capsys.readouterr().out

    manifest = json.loads((RESULTS / "manifest.json").read_text())[record.name]
    written = build_reports(study, study=record.name, tables=manifest.get("tables"),
                            formats=("md", "latex", "csv"), out_dir=tmp_path / "out",
                            compare=manifest["compare"], solved_at=manifest.get("solved"))
    assert sorted(p.name for p in written) == sorted(manifest["files"])
    for path in written:
        assert (RESULTS / record.name / path.name).read_bytes() == path.read_bytes(), path.name


def test_migrate_sets_a_pickled_searcher_state_aside_and_refuses_a_newer_format(tmp_path: Path,
                                                                                capsys) -> None:
    study = copy_record(RECORDS[0], tmp_path)
    tune = study / "tune"
    tune.mkdir()
    (tune / "searcher-state-2025-12-31_00-00-00.pkl").write_bytes(pickle.dumps({"items": []}))
    assert study_main(["migrate", str(study)]) == 0
    assert not tune.exists() and len(list(study.glob("tune.legacy-*"))) == 1
    assert "pickled searcher state" in capsys.readouterr().out

    meta = json.loads((study / META_FILE).read_text())
    (study / META_FILE).write_text(json.dumps({**meta, "format": FORMAT_VERSION + 1}))
    assert study_main(["migrate", str(study)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"{study / META_FILE}: format {FORMAT_VERSION + 1}: written by a newer locattn" in err


def test_migrate_never_runs_under_a_driver(tmp_path: Path, capsys) -> None:
    study = copy_record(RECORDS[0], tmp_path)
    before = (study / META_FILE).read_bytes()
    lock = StudyLock(StudyPaths(dir=study), open(os.devnull, "w")).acquire()
    try:
        assert study_main(["migrate", str(study)]) == 2
    finally:
        lock.release()
    assert "is already running" in capsys.readouterr().err
    assert (study / META_FILE).read_bytes() == before


def test_load_meta_reads_a_format_0_folder_in_the_current_format(tmp_path: Path) -> None:
    study = copy_record(RECORDS[0], tmp_path)
    meta = json.loads((study / META_FILE).read_text())
    del meta["only"]
    meta.pop("format", None)  # (records made since format 1 carry it; a format-0 folder has none)
    (study / META_FILE).write_text(json.dumps(meta))
    loaded = load_meta(StudyPaths(dir=study))
    doc = loaded.to_json()
    assert doc["format"] == FORMAT_VERSION and loaded.only == {} and "train_fn" not in doc
    assert "format" not in json.loads((study / META_FILE).read_text())  # reading writes nothing


def test_a_launch_writes_the_format_and_a_format_0_study_migrates_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("optuna")
    # here, not at the top: the rest of this file runs without Ray
    import ray
    from tests.study.test_study import SMOKE, trial_runs, write_spec
    from study.driver.launch import launch, resume
    from tests.study_helpers import start_private_ray

    started = start_private_ray()  # init_ray, retried under load
    try:
        spec = write_spec(tmp_path, "fmt", grid={"task": ["copy"], "variant": ["content"]},
                          overrides={**SMOKE, "optim.epochs": 1})
        assert launch(spec, root=tmp_path, progress_seconds=60).errors == 0
        study = tmp_path / "fmt-smoke"
        meta = json.loads((study / META_FILE).read_text())
        assert meta["format"] == FORMAT_VERSION
        assert "train_fn" not in meta  # the code chooses the trainer (format 2)
        for key in ("format", "only"):  # what the oldest study.json lacks
            del meta[key]
        (study / META_FILE).write_text(json.dumps(meta))
        assert study_main(["migrate", str(study)]) == 0
        assert json.loads((study / META_FILE).read_text()) == {
            **meta, "only": {}, "format": FORMAT_VERSION}
        summary = resume(study, progress_seconds=60)
        assert summary.errors == 0
        assert len(trial_runs(study / STORE_FILE)) == 1  # nothing retrained or duplicated
    finally:
        if started:
            ray.shutdown()
