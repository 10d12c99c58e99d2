"""The spec's JSON Schema (issue 42): generated from the parser's key tables, printed by
``study schema``, committed as ``ablations/spec.schema.json`` and named by every spec, and it
accepts every committed spec and refuses what the parser refuses."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from study.cli import main as study_main
from study.spec import SpecError, load_spec
from study.spec.checks import PROFILE_KEYS, TOP_KEYS
from study.spec.json_schema import SHAPES, schema_text, spec_schema

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "ablations").glob("*.yaml"))
VALIDATOR = jsonschema.Draft202012Validator(spec_schema())


def test_the_schema_is_valid_and_covers_every_key_of_the_parser() -> None:
    jsonschema.Draft202012Validator.check_schema(spec_schema())
    props = spec_schema()["properties"]
    assert set(props) == set(TOP_KEYS)
    assert set(props["profiles"]["additionalProperties"]["properties"]) == PROFILE_KEYS
    assert not set(TOP_KEYS) - set(SHAPES), "give the new spec key a shape in study/spec/json_schema.py"


def test_study_schema_prints_the_committed_schema(capsys) -> None:
    assert study_main(["schema"]) == 0
    out = capsys.readouterr().out
    assert out == schema_text()
    assert (ROOT / "ablations" / "spec.schema.json").read_text() == out, \
        "regenerate it: study schema > ablations/spec.schema.json"


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_every_committed_spec_names_the_schema_and_validates(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("# yaml-language-server: $schema=spec.schema.json\n")
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(yaml.safe_load(text))]
    assert not errors, errors


BASE = yaml.safe_load((ROOT / "ablations" / "rc_table2.yaml").read_text())


@pytest.mark.parametrize("edit", [
    lambda s: s.update(grids=s.pop("grid")),                                   # a mistyped key
    lambda s: s["profiles"]["smoke"].update(epochs=3),                         # not a profile key
    lambda s: s["profiles"]["smoke"].update(seeds=0),                          # no seeds
    lambda s: s.update(resources={"cpus": 1, "gpu": 1}),                       # mistyped resource
    lambda s: s.update(search={"space": {}, "num_samples": 2, "sampler": "grid"}),  # no such sampler
    lambda s: s.update(keep="nothing"),                                        # no such policy
    lambda s: s.update(name="../x"),                                           # not one folder name
])
def test_what_the_parser_refuses_the_schema_refuses(edit, tmp_path: Path) -> None:
    spec = copy.deepcopy(BASE)
    edit(spec)
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError):
        load_spec(path, "smoke")
    assert list(VALIDATOR.iter_errors(spec))
