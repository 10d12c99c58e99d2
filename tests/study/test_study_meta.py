""":class:`study.recording.meta.StudyMeta`: the typed study, read from and written to ``study.json`` in
one place; every committed record reads into it and writes back the same document."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from study.recording.meta import DEFAULT_TRAIN_PATH, StudyMeta
from study.recording.migrate import FORMAT_KEY, FORMAT_VERSION, upgrade_meta

ROOT = Path(__file__).resolve().parents[2]
RECORDS = sorted((ROOT / "results" / "record").glob("*/study.json"))


@pytest.mark.parametrize("path", RECORDS, ids=[p.parent.name for p in RECORDS])
def test_every_committed_study_json_reads_and_writes_back_the_same_document(path: Path) -> None:
    doc, _ = upgrade_meta(json.loads(path.read_text()))
    meta = StudyMeta.from_json(doc)
    assert meta.to_json() == doc
    assert meta.name == doc["name"] and meta.tracking_uri == doc["tracking_uri"]
    assert meta.train_path == doc.get("train_path", DEFAULT_TRAIN_PATH)


def test_a_new_study_writes_only_the_keys_it_sets_in_order_and_reads_back_equal() -> None:
    meta = StudyMeta(name="s", spec_path="/a/s.yaml", profile="quick", raw={"grid": {}}, resolved={"seeds": [0]},
                     tracking_uri="sqlite:////a/s/mlflow.db", created=1.5)
    doc = meta.to_json()
    assert list(doc) == ["name", "spec_path", "profile", "only", "raw", "resolved", "tracking_uri", "created",
                         FORMAT_KEY]
    assert doc[FORMAT_KEY] == FORMAT_VERSION and doc["only"] == {}
    assert StudyMeta.from_json(json.loads(json.dumps(doc))) == meta
    chosen = meta.replace(seeds=[3, 4], sets={"optim.epochs": 2}, train_path="compiled", plugin_sources={"p": "h"})
    assert {k: chosen.to_json()[k] for k in ("seeds", "set", "train_path", "plugin_sources")} == {
        "seeds": [3, 4], "set": {"optim.epochs": 2}, "train_path": "compiled", "plugin_sources": {"p": "h"}}
    assert StudyMeta.from_json(chosen.to_json()) == chosen
    assert "train_path" not in chosen.replace(train_path=DEFAULT_TRAIN_PATH).to_json()  # the default is not saved


def test_a_key_this_code_does_not_know_is_kept_and_the_study_is_frozen() -> None:
    doc = {"name": "s", "spec_path": "s.yaml", "profile": None, "only": {}, "raw": {}, "resolved": {},
           "tracking_uri": "sqlite:///x.db", "note": "kept", FORMAT_KEY: FORMAT_VERSION}
    meta = StudyMeta.from_json(doc)
    assert meta.extra == {"note": "kept"} and meta.to_json() == doc
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.name = "t"  # type: ignore[misc]


def test_each_operational_choice_has_one_default_which_launch_resume_and_the_cli_take() -> None:
    import dataclasses
    import inspect

    from study.cli import parser
    from study.driver.launch import launch, resume
    from study.recording.meta import DriverOptions

    defaults = DriverOptions()
    assert [f.name for f in dataclasses.fields(DriverOptions)] == ["address", "max_concurrent", "progress_seconds"]
    for fn in (launch, resume):
        params = inspect.signature(fn).parameters
        for name in ("address", "max_concurrent", "progress_seconds"):
            assert params[name].default == getattr(defaults, name), (fn.__name__, name)
        assert params["time_limit"].default is None and params["train_path"].default is None  # none given
    for command in (["launch", "spec.yaml"], ["resume", "s"]):
        args = parser().parse_args(command)
        assert (args.address, args.max_concurrent, args.progress_seconds, args.time_limit, args.train_path) == (
            defaults.address, defaults.max_concurrent, defaults.progress_seconds, None, None)


@pytest.mark.parametrize("train_path", [DEFAULT_TRAIN_PATH, "compiled"])
def test_study_json_and_a_trial_descriptor_save_the_train_path_by_one_rule(train_path: str) -> None:
    """Both saved documents name the train path only when it is not the default, and read an
    absent one as the default (locattn.config.train_path_entry / saved_train_path)."""
    from study.trial.descriptor import TrialDescriptor
    meta = StudyMeta(name="s", spec_path="s.yaml", profile=None, raw={}, resolved={}, tracking_uri="sqlite:///x.db",
                     train_path=train_path)
    trial = TrialDescriptor(study="s", study_dir="/tmp/s", cell="c", task="copy", variant="onestep", overrides={},
                            hparams={}, seeds=(0,), cpus=1.0, metric="dev_acc", train_path=train_path)
    docs = {"study.json": meta.to_json(), "trial": trial.to_dict()}
    saved = {name: doc.get("train_path") for name, doc in docs.items()}
    assert saved == dict.fromkeys(docs, None if train_path == DEFAULT_TRAIN_PATH else train_path)
    assert StudyMeta.from_json(docs["study.json"]).train_path == train_path
    assert TrialDescriptor.of({"trial": docs["trial"]}).train_path == train_path
