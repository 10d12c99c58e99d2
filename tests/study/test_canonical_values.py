"""One value, one identity: a config value is put in its field's canonical form (study.spec.canon)
before a spec compares, hashes or records it. Two spellings of one value on one axis (grid,
``hparams``, a search's choices, ``--only``) are refused naming both; a value spelt another way
(``1`` for a float field, ``3E-4`` read as text) plans the cell and runs of its canonical
spelling; ``--set`` records one form. Over every committed spec and profile: no two cells or
hparams points resolve to the same config, and the spec written with other spellings plans the
same run keys, or, listing both spellings, is refused."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from locattn.config import config_to_dict, make_run_config
from study.cli import main as study_main
from study.spec import SpecError, StudySpec, load_spec, parse_sets, read_yaml, resolve_spec
from study.spec.canon import canonical, field_type
from study.spec.checks import SPECIAL_AXES
from tests.study.test_run_keys import CASES, planned_keys

BASE = {"name": "v", "grid": {"task": ["copy"], "variant": ["onestep"]}, "seeds": 2,
        "overrides": {"task.train_size": 32, "task.dev_size": 16, "task.test_size": 16, "optim.epochs": 1}}


def spec_of(tmp_path: Path, body: dict, text: str | None = None) -> StudySpec:
    path = tmp_path / "v.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(body))
    return load_spec(path)


def refused(tmp_path: Path, body: dict | None = None, text: str | None = None) -> str:
    with pytest.raises(SpecError) as info:
        spec_of(tmp_path, body or {}, text)
    msg = str(info.value)
    assert "\n" not in msg and str(tmp_path / "v.yaml") in msg, msg
    return msg


def runs(spec: StudySpec) -> dict[str, str]:
    return planned_keys(spec, spec.name)


# ---------------------------------------------------------------- the canonical form of a field


@pytest.mark.parametrize("key, given, want", [
    ("optim.lr", 1, 1.0), ("optim.lr", "3e-4", 0.0003), ("optim.lr", "1E-3", 0.001), ("optim.lr", 0.001, 0.001),
    ("optim.epochs", 2.0, 2), ("optim.epochs", "3", 3), ("task.t0", 50, 50),
    ("task.test_lengths", [15.0, 30], [15, 30]), ("task.test_lengths", "15,30", [15, 30]),
    ("task.variable_length", "true", True), ("optim.raffel_protocol", "paper", "paper"),  # a former path
    # not canonical: left as given for the config checks to refuse with their own message
    ("optim.epochs", 1.5, 1.5), ("optim.lr", "abc", "abc"), ("optim.lr", True, True),
    ("optim.lr", float("nan"), "nan"), ("optim.lr", 10**400, 10**400), ("optim.no_such", "1", "1"),
])
def test_a_value_takes_the_form_of_its_fields_type(key: str, given: Any, want: Any) -> None:
    got = canonical(key, given)
    if want == "nan":
        assert got is given
        return
    assert json.dumps(got) == json.dumps(want) and type(got) is type(want), (key, given, got)
    if json.dumps(given) == json.dumps(want) and not isinstance(given, list):
        assert got is given  # a value already canonical comes back as it is: committed keys stand


def test_every_config_path_a_committed_spec_uses_has_a_typed_field() -> None:
    keys = set()
    for path, profile in CASES:
        spec = resolve_spec(read_yaml(path), path=str(path), profile=profile)
        keys |= {k for k in {**spec.resolved["grid"], **spec.resolved["hparams"], **spec.resolved["overrides"]}
                 if k not in SPECIAL_AXES}
    assert keys and all(field_type(k) is not None for k in keys), sorted(k for k in keys if field_type(k) is None)


# ---------------------------------------------------------------- duplicates: refused naming both


@pytest.mark.parametrize("where, text, spellings", [
    ("hparams.optim.lr", "hparams: {optim.lr: [3e-4, 0.0003]}", ["3e-4", "0.0003"]),  # YAML: '3e-4' is text
    ("hparams.optim.lr", "hparams: {optim.lr: [1, 1.0]}", ["1 and 1.0", "one value, 1.0"]),
    ("grid.optim.lr", "grid: {task: [copy], variant: [onestep], optim.lr: [0.001, 1.0e-3, 0.01]}",
     ["0.001 is listed twice"]),
    ("grid.optim.lr", "grid: {task: [copy], variant: [onestep], optim.lr: [0.001, 1E-3]}", ["0.001 and 1E-3"]),
    ("grid.optim.epochs", "grid: {task: [copy], variant: [onestep], optim.epochs: [2, 2.0]}", ["2 and 2.0"]),
    ("grid.task.test_lengths", "grid: {task: [copy], variant: [onestep], task.test_lengths: [[15, 30], [15.0, 30]]}",
     ["[15, 30] and [15.0, 30]"]),
    ("search.space.optim.lr.choices",
     "search: {num_samples: 2, space: {optim.lr: {type: categorical, choices: [0.01, 1, 1.0]}}}", ["1 and 1.0"]),
])
def test_two_spellings_of_one_value_are_refused_naming_both(tmp_path: Path, where: str, text: str,
                                                           spellings: list[str]) -> None:
    body = copy.deepcopy(BASE)
    doc = yaml.safe_load(text)
    body = {**body, **{k: {**body.get(k, {}), **v} for k, v in doc.items()}}
    raw = yaml.safe_dump({k: v for k, v in body.items() if k not in doc})
    msg = refused(tmp_path, text=raw + text + "\n")
    assert f": {where}: " in msg and all(s in msg for s in spellings), msg


def test_a_duplicate_is_exit_2_and_one_line_from_the_command_line(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "v.yaml"
    spec.write_text(yaml.safe_dump(BASE) + "hparams: {optim.lr: [3e-4, 0.0003]}\n")
    code = study_main(["launch", str(spec), "--root", str(tmp_path / "root"), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert str(spec) in err and "hparams.optim.lr" in err and "3e-4 and 0.0003" in err, err
    assert not (tmp_path / "root").exists()


def test_two_ablations_or_values_with_one_config_are_refused(tmp_path: Path) -> None:
    same = {"model.attention.step": "mono"}
    msg = refused(tmp_path, {**BASE, "grid": {**BASE["grid"], "ablation": [
        {"name": "a", "overrides": same}, {"name": "b", "overrides": dict(same)}]}})
    assert "cell task=copy,variant=onestep,ablation=b resolves to the same config as cell " \
           "task=copy,variant=onestep,ablation=a" in msg, msg
    # a grid value the fixed overrides already give, spelt as an ablation: one config, refused
    msg = refused(tmp_path, {**BASE, "grid": {**BASE["grid"], "ablation": [
        {"name": "base", "overrides": {}}, {"name": "one_epoch", "overrides": {"optim.epochs": 1}}]}})
    assert "ablation=one_epoch resolves to the same config as cell task=copy,variant=onestep,ablation=base" in msg


# ---------------------------------------------------------------- other spellings: planned once


def test_an_int_spelling_of_a_float_plans_the_cell_of_the_float(tmp_path: Path) -> None:
    as_int = spec_of(tmp_path, {**BASE, "grid": {**BASE["grid"], "optim.lr": [1]}, "hparams": {"optim.clip": [5]}})
    as_float = spec_of(tmp_path, {**BASE, "grid": {**BASE["grid"], "optim.lr": [1.0]},
                                  "hparams": {"optim.clip": [5.0]}})
    assert [c.cell for c in as_int.cells] == ["task=copy,variant=onestep,optim.lr=1.0"]
    assert runs(as_int) == runs(as_float) and len(runs(as_int)) == 2
    assert as_int.resolved == as_float.resolved and as_int.resolved["hparams"] == {"optim.clip": [5.0]}
    as_text = spec_of(tmp_path, {}, text=yaml.safe_dump({k: v for k, v in BASE.items() if k != "grid"})
                      + "grid: {task: [copy], variant: [onestep], optim.lr: [1e0]}\nhparams: {optim.clip: [5e0]}\n")
    assert runs(as_text) == runs(as_float)


def test_a_search_samples_canonical_choices(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, {**BASE, "search": {"num_samples": 2, "space": {
        "optim.lr": {"type": "categorical", "choices": [0.5, 1]},
        "optim.epochs": {"type": "categorical", "choices": [1.0, 2]}}}})
    assert spec.search.space["optim.lr"]["choices"] == [0.5, 1.0]
    assert [type(c) for c in spec.search.space["optim.epochs"]["choices"]] == [int, int]
    assert spec.resolved["search"]["space"]["optim.lr"]["choices"] == [0.5, 1.0]  # recorded so


def test_set_records_one_form_and_refuses_one_key_set_to_two_values(tmp_path: Path) -> None:
    assert parse_sets(["optim.lr=1"]) == parse_sets(["optim.lr=1.0"]) == {"optim.lr": 1.0}
    assert type(parse_sets(["optim.lr=1"])["optim.lr"]) is float
    assert parse_sets(["optim.epochs=3.0", "optim.epochs=3"]) == {"optim.epochs": 3}  # one value: taken once
    assert parse_sets(["task.test_lengths=15,30"]) == {"task.test_lengths": [15, 30]}
    with pytest.raises(SpecError, match=r"^--set optim.lr: set twice, to 1e-3 and 0.01; give it once$"):
        parse_sets(["optim.lr=1e-3", "optim.lr=0.01"])


def test_only_compares_canonical_values_and_records_the_grids_spelling(tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({**BASE, "grid": {**BASE["grid"], "optim.lr": [0.0003, 0.001], "task.t0": [50]}}))
    spec = load_spec(path, only={"optim.lr": ["3e-4"], "task.t0": ["50.0"]})
    assert [c.cell for c in spec.cells] == ["task=copy,variant=onestep,optim.lr=0.0003,task.t0=50"]
    assert spec.resolved["only"] == {"optim.lr": ["0.0003"], "task.t0": ["50"]}
    assert spec.resolved == load_spec(path, only={"optim.lr": ["0.0003"], "task.t0": ["50"]}).resolved
    with pytest.raises(SpecError, match=r"--only optim.lr: 3e-4 and 0.0003 are one value, 0.0003"):
        load_spec(path, only={"optim.lr": ["3e-4", "0.0003"]})
    with pytest.raises(SpecError, match=r"--only optim.lr: '0.002' is not a value of grid.optim.lr"):
        load_spec(path, only={"optim.lr": ["0.002"]})


def test_an_empty_test_lengths_is_refused_naming_the_key_and_what_it_takes(tmp_path: Path) -> None:
    msg = refused(tmp_path, {**BASE, "overrides": {**BASE["overrides"], "task.test_lengths": []}})
    assert "task.test_lengths=[]: it takes a non-empty list of test lengths, each >= 1" in msg, msg
    with pytest.raises(ValueError, match=r"task.test_lengths=\[\]"):
        make_run_config(task="copy", overrides=parse_sets(["task.test_lengths=[]"]))


# ---------------------------------------------------------------- every committed spec


def respelt(value: Any, tp_key: str) -> Any:
    """Another spelling of a canonical value: a float as exponent text (``3E-4``, as YAML 1.1
    reads an unquoted exponent without a dot), an int of an int field as a float, a list item by item."""
    if isinstance(value, list):
        return [respelt(v, tp_key) for v in value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, float):
        return f"{Decimal(repr(value)):E}"
    return float(value)


def respell(raw: dict, both: bool) -> tuple[dict, int]:
    """``raw`` with every number of its config-path grid axes and hparams (top level and each
    profile) spelt another way, or (``both``) listed in both spellings; and how many were."""
    out, n = copy.deepcopy(raw), 0
    bodies = [out, *[b for b in (out.get("profiles") or {}).values() if isinstance(b, dict)]]
    for body in bodies:
        for part in ("grid", "hparams"):
            for key, values in (body.get(part) or {}).items():
                if key in SPECIAL_AXES or not isinstance(values, list):
                    continue
                other = [respelt(v, key) for v in values]
                n += sum(o != v or type(o) is not type(v) for o, v in zip(other, values))
                body[part][key] = [*values, *other] if both else other
    return out, n


def configs(spec: StudySpec) -> list[str]:
    return [json.dumps(config_to_dict(make_run_config(task=c.task, variant=c.variant,
                                                      overrides={**c.overrides, **hp})), sort_keys=True)
            for c in spec.cells for hp in spec.hparam_points()]


@pytest.mark.parametrize("path,profile", CASES, ids=[f"{p.stem}:{prof}" for p, prof in CASES])
def test_a_committed_spec_holds_each_config_once_and_plans_it_once_however_spelt(path: Path, profile) -> None:
    raw = read_yaml(path)
    spec = resolve_spec(raw, path=str(path), profile=profile)
    cfgs = configs(spec)
    assert len(set(cfgs)) == len(cfgs), f"{path.name}:{profile}: two cells or points hold one config"
    keys = runs(spec)
    assert len(keys) == spec.n_runs() or spec.search is not None  # no two runs share a key
    other, n = respell(raw, both=False)
    if not n:
        return
    assert runs(resolve_spec(other, path=str(path), profile=profile)) == keys
    doubled, _ = respell(raw, both=True)
    with pytest.raises(SpecError, match="are one value|is listed twice"):
        resolve_spec(doubled, path=str(path), profile=profile)
