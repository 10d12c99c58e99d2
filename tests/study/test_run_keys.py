"""Run identities do not move: the run keys of every committed record are what the study code
plans from the spec saved with it, and the run keys every committed spec plans (each profile)
are the ones recorded in ``tests/data/run_keys.json``. A change to how a spec is read (canonical
values, duplicate checks) that would rename a run fails here, naming the record or spec.

``tests/data/run_keys.json`` was written by :func:`planned_digest` on every committed spec and
profile; a spec whose plan changes on purpose (a new profile, a new grid value) is rewritten by
``python tests/study/test_run_keys.py --write``, an edit a reviewer sees.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import sqlite3
import sys
from pathlib import Path

import pytest

from record import schema
from record.layout import META_FILE, STORE_FILE
from record.store import ARCHIVE_SUFFIX
from study.trial.descriptor import TrialDescriptor
from study.spec.keys import run_key
from study.spec import StudySpec, read_yaml, resolve_spec

ROOT = Path(__file__).resolve().parents[2]
RECORDS = sorted(p.parent for p in (ROOT / "results" / "record").glob(f"*/{META_FILE}"))
SPECS = sorted((ROOT / "ablations").glob("*.yaml"))
GOLDEN = Path(__file__).parents[1] / "data" / "run_keys.json"


def planned_keys(spec: StudySpec, study: str) -> dict[str, str]:
    """Run key -> cell id of every run a grid study plans, built as ``study.plan.tuner.plan_trials``
    builds its trials (one :class:`TrialDescriptor` per grid trial, packs included); a search
    study's cells with their grid hparams points (its sampled values are not known before it runs)."""
    if spec.search is not None:
        return {run_key(study, c.cell, hp, s): c.cell for c in spec.cells for hp in spec.hparam_points()
                for s in spec.seeds}
    out: dict[str, str] = {}
    for t in spec.grid_trials():
        desc = TrialDescriptor(study=study, study_dir="/nonexistent", cpus=1.0, metric="best_selection_score",
                               cell=t.cell, task=t.task, variant=t.variant, overrides=t.overrides,
                               hparams=t.hparams, seeds=t.seeds, points=t.points, cells=t.cells)
        out.update({m.key: m.cell.cell for m in desc.members})
    return out


def stored_trial_runs(record: Path, tmp: Path) -> list[dict[str, str]]:
    """The tags (study, run key, cell, hparams, seed) of every active trial run of a committed
    record's store, read from its compressed ``mlflow.db.xz`` (unpacked under ``tmp``)."""
    db = tmp / f"{record.name}.db"
    db.write_bytes(lzma.decompress((record / f"{STORE_FILE}{ARCHIVE_SUFFIX}").read_bytes()))
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT t.run_uuid, t.key, t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            "WHERE r.lifecycle_stage = 'active' AND t.key IN (?, ?, ?, ?, ?, ?)",
            (schema.ROLE, schema.STUDY, schema.RUN_KEY, schema.CELL, schema.HPARAMS, schema.SEED)).fetchall()
    finally:
        con.close()
    runs: dict[str, dict[str, str]] = {}
    for run_id, key, value in rows:
        runs.setdefault(run_id, {})[key] = value
    return [r for r in runs.values() if r.get(schema.ROLE) == schema.ROLE_TRIAL]


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_a_committed_record_keeps_its_run_keys(record: Path, tmp_path: Path) -> None:
    meta = json.loads((record / META_FILE).read_text())
    spec = resolve_spec(meta["raw"], path=meta["spec_path"], profile=meta["profile"],
                        only=meta.get("only") or None, seeds=meta["resolved"]["seeds"])
    # the spec rebuilds to the very resolved spec the study saved (a resume compares them), as text
    assert json.dumps(spec.resolved, sort_keys=True) == json.dumps(meta["resolved"], sort_keys=True)
    planned = planned_keys(spec, meta["name"])
    runs = stored_trial_runs(record, tmp_path)
    assert runs, f"{record}: no trial runs in its store"
    for run in runs:
        key = run[schema.RUN_KEY]
        assert run[schema.STUDY] == meta["name"], key
        assert run_key(run[schema.STUDY], run[schema.CELL], json.loads(run[schema.HPARAMS]),
                       int(run[schema.SEED])) == key, f"{record.name}: tags of run {key} hash to another key"
        assert planned.get(key) == run[schema.CELL], (
            f"{record.name}: run {key} ({run[schema.CELL]}, {run[schema.HPARAMS]}, seed "
            f"{run[schema.SEED]}) is not a run its spec plans now")


def spec_profiles(path: Path) -> list[str | None]:
    """Every profile of a committed spec (None: a spec without profiles)."""
    return list(read_yaml(path).get("profiles") or {}) or [None]


def planned_digest(path: Path, profile: str | None) -> dict[str, object]:
    """What ``tests/data/run_keys.json`` holds for one spec and profile: the runs planned, the
    cells, and the sha1 of the sorted ``run key cell`` lines (study name ``<name>-<profile>``)."""
    spec = resolve_spec(read_yaml(path), path=str(path), profile=profile)
    planned = planned_keys(spec, f"{spec.name}-{spec.profile}" if spec.profile else spec.name)
    text = "\n".join(f"{k} {c}" for k, c in sorted(planned.items()))
    return {"runs": len(planned), "cells": len(spec.cells), "sha1": hashlib.sha1(text.encode()).hexdigest()}


CASES = [(p, prof) for p in SPECS for prof in spec_profiles(p)]


@pytest.mark.parametrize("path,profile", CASES, ids=[f"{p.stem}:{prof}" for p, prof in CASES])
def test_a_committed_spec_plans_the_run_keys_it_planned(path: Path, profile: str | None) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert planned_digest(path, profile) == golden[f"{path.stem}:{profile}"], (
        f"{path.name} profile {profile}: its planned run keys changed")


def test_the_golden_file_covers_every_committed_spec_and_profile() -> None:
    assert sorted(json.loads(GOLDEN.read_text())) == sorted(f"{p.stem}:{prof}" for p, prof in CASES)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps({f"{p.stem}:{prof}": planned_digest(p, prof) for p, prof in CASES},
                                 indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({len(CASES)} spec profiles)")
