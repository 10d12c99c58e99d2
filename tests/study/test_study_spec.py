"""Study specs: validation errors name the file, the key and the valid choices; plans expand."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from study.cli import main
from study.spec import SpecError, load_spec, parse_seeds, resolve_spec, run_key, widens

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "ablations").glob("*.yaml"))

BASE = {
    "name": "t",
    "grid": {"task": ["copy"], "variant": ["onestep"]},
    "seeds": 2,
    "profiles": {"smoke": {"overrides": {"optim.epochs": 1}}},
}


def write(tmp_path: Path, body: dict) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def bad(tmp_path: Path, **changes) -> str:
    body = {**BASE, **changes}
    path = write(tmp_path, body)
    with pytest.raises(SpecError) as info:
        load_spec(path, "smoke")
    msg = str(info.value)
    assert str(path) in msg  # every message names the file
    return msg


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_shipped_specs_validate(spec: Path, profile: str) -> None:
    s = load_spec(spec, profile)
    assert s.n_trials() > 0 and s.n_runs() >= s.n_trials()
    assert s.profile == profile
    if profile == "paper" and spec.stem in ("rc_table2", "rc_table4", "search_lr"):
        assert len(s.seeds) == 5  # Ray Chowdhury & Caragea's budget: 5 seeds, 100 epochs
        cfgs = s.resolved["overrides"]
        assert cfgs["optim.epochs"] == 100


def test_unknown_top_key(tmp_path: Path) -> None:
    msg = bad(tmp_path, gird={"task": ["copy"]})
    assert "gird" in msg and "grid" in msg and "valid" in msg


def test_unknown_variant_lists_valid(tmp_path: Path) -> None:
    msg = bad(tmp_path, grid={"task": ["copy"], "variant": ["onestepp"]})
    assert "grid.variant" in msg and "'onestepp'" in msg and "'onestep'" in msg and "'mono'" in msg


def test_unknown_task_lists_valid(tmp_path: Path) -> None:
    msg = bad(tmp_path, grid={"task": ["kopy"], "variant": ["onestep"]})
    assert "grid.task" in msg and "'kopy'" in msg and "'reverse_copy'" in msg


def test_empty_grid_axis(tmp_path: Path) -> None:
    msg = bad(tmp_path, grid={"task": [], "variant": ["onestep"]})
    assert "grid.task" in msg and "empty" in msg


def test_bad_types(tmp_path: Path) -> None:
    assert "seeds" in bad(tmp_path, seeds="five")
    assert "grid.variant" in bad(tmp_path, grid={"task": ["copy"], "variant": "onestep"})
    msg = bad(tmp_path, resources={"cpus": "two"})
    assert "resources.cpus" in msg
    msg = bad(tmp_path, resources={"cpu": 1})
    assert "resources.cpu" in msg and "cpus" in msg


def test_unknown_config_path_and_value(tmp_path: Path) -> None:
    msg = bad(tmp_path, overrides={"optim.lrr": 0.1})
    assert "lrr" in msg and "optim" in msg and "'lr'" in msg
    msg = bad(tmp_path, hparams={"optim.lr": [0.001, "fast"]})
    assert "optim.lr" in msg


def test_unknown_profile_and_profile_key(tmp_path: Path) -> None:
    path = write(tmp_path, BASE)
    with pytest.raises(SpecError, match=r"profile.*'huge'.*valid: \['smoke'\]"):
        load_spec(path, "huge")
    msg = bad(tmp_path, profiles={"smoke": {"epochs": 3}})
    assert "profiles.smoke.epochs" in msg and "overrides" in msg


def test_bad_search(tmp_path: Path) -> None:
    space = {"optim.lr": {"type": "logunif", "low": 1e-4, "high": 1e-2}}
    msg = bad(tmp_path, search={"space": space})
    assert "search.space.optim.lr.type" in msg and "loguniform" in msg
    space = {"optim.lr": {"type": "loguniform", "low": 1e-2, "high": 1e-4}}
    assert "low < high" in bad(tmp_path, search={"space": space})
    space = {"optim.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}
    msg = bad(tmp_path, search={"space": space, "sampler": "grid"})
    assert "search.sampler" in msg and "tpe" in msg


def test_expansion_and_keys(tmp_path: Path) -> None:
    body = {**BASE, "grid": {"task": ["copy", "reverse_copy"], "variant": ["onestep", "mono"],
                             "model.attention.sigma_min": [0.27]},
            "hparams": {"optim.lr": [1e-3, 3e-4]}, "seeds": [0, 7]}
    s = load_spec(write(tmp_path, body), "smoke")
    trials = s.grid_trials()
    assert len(s.cells) == 4 and len(trials) == 4 * 2 * 2 == s.n_trials()
    assert s.cells[0].cell == "task=copy,variant=onestep,model.attention.sigma_min=0.27"
    keys = {run_key("t", t.cell, t.hparams, t.seeds[0]) for t in trials}
    assert len(keys) == len(trials)  # deterministic and distinct
    assert run_key("t", trials[0].cell, trials[0].hparams, 0) == run_key(
        "t", trials[0].cell, dict(reversed(list(trials[0].hparams.items()))), 0)


def test_dry_run_prints_plan(capsys: pytest.CaptureFixture) -> None:
    assert main(["launch", str(ROOT / "ablations/rc_table2.yaml"), "--profile", "paper",
                 "--dry-run", "--root", "/tmp/unused"]) == 0
    out = capsys.readouterr().out
    assert "cells    48" in out and "240 Tune trials, 240 MLflow runs" in out and "CPU-hours" in out


def test_cli_bad_spec_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = write(tmp_path, {**BASE, "grid": {"task": ["copy"], "variant": ["nope"]}})
    assert main(["launch", str(path), "--profile", "smoke", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "grid.variant" in err and "valid" in err


def test_only_restricts_a_grid_axis(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    body = {**BASE, "grid": {"task": ["copy", "reverse_copy", "lookup"], "variant": ["onestep", "mono"]}}
    path = write(tmp_path, body)
    s = load_spec(path, "smoke", only={"task": ["lookup", "copy"]})
    assert [c.cell for c in s.cells] == [
        "task=copy,variant=onestep", "task=copy,variant=mono",
        "task=lookup,variant=onestep", "task=lookup,variant=mono",
    ]  # spec order kept, not --only order
    assert s.resolved["only"] == {"task": ["lookup", "copy"]}
    assert s.resolved != load_spec(path, "smoke").resolved  # a subset is another study
    with pytest.raises(SpecError, match=r"'copyy' is not a value of grid.task; valid: \['copy'"):
        load_spec(path, "smoke", only={"task": ["copyy"]})
    with pytest.raises(SpecError, match=r"--only seed: not a grid axis.*\['task', 'variant'\]"):
        load_spec(path, "smoke", only={"seed": ["1"]})
    assert main(["launch", str(path), "--profile", "smoke", "--dry-run", "--only", "task"]) == 2
    assert "expected AXIS=V1,V2" in capsys.readouterr().err


def test_widens_only_when_the_grid_grows_and_nothing_else_changes(tmp_path: Path) -> None:
    body = {**BASE, "grid": {"task": ["copy", "reverse_copy", "lookup"], "variant": ["onestep", "mono"]}}
    path = write(tmp_path, body)
    narrow = load_spec(path, "smoke", only={"task": ["copy"]}).resolved
    wider = load_spec(path, "smoke", only={"task": ["lookup", "copy"]}).resolved
    full = load_spec(path, "smoke").resolved
    assert widens(narrow, wider) and widens(narrow, full) and widens(wider, full)
    assert not widens(full, narrow) and not widens(wider, narrow)  # narrowing is another study
    assert not widens(narrow, narrow)
    other_axis = load_spec(path, "smoke", only={"task": ["lookup"]}).resolved
    assert not widens(narrow, other_axis)  # not a superset: copy would leave the study
    changed = write(tmp_path, {**body, "overrides": {"optim.lr": 3e-4}})
    assert not widens(narrow, load_spec(changed, "smoke").resolved)  # another override: a new study
    searched = write(tmp_path, {**body, "search": {"num_samples": 2, "space": {
        "optim.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}}})
    assert not widens(load_spec(searched, "smoke", only={"task": ["copy"]}).resolved,
                      load_spec(searched, "smoke").resolved)


def test_more_seeds_widen_a_study_and_other_seeds_do_not(tmp_path: Path) -> None:
    """--seeds in place of the profile's: more seeds (a superset) grow the study, fewer or other
    seeds are another study, and a spec that packs its seeds into one trial never grows them."""
    body = {**BASE, "grid": {"task": ["copy", "lookup"], "variant": ["onestep"]}}
    raw = yaml.safe_load(write(tmp_path, body).read_text())

    def resolved(seeds=None, only=None, spec=raw):
        return resolve_spec(spec, path="spec.yaml", profile="smoke", only=only, seeds=seeds).resolved

    five = resolved(5)
    assert five["seeds"] == [0, 1, 2, 3, 4] and resolved()["seeds"] == [0, 1]
    assert widens(resolved(), five) and widens(five, resolved(10)) and widens(five, resolved([0, 1, 2, 3, 4, 7]))
    assert widens(resolved(only={"task": ["copy"]}), five)  # more cells and more seeds at once
    assert not widens(five, resolved())  # fewer seeds: another study
    assert not widens(five, resolved([5, 6, 7, 8, 9]))  # other seeds: another study
    packed = {**raw, "pack_seeds": True}
    assert not widens(resolved(spec=packed), resolved(5, spec=packed))
    assert widens(resolved(only={"task": ["copy"]}, spec=packed), resolved(spec=packed))  # cells still grow


@pytest.mark.parametrize("text, expected", [(None, None), ("10", 10), ("5,6, 7", [5, 6, 7])])
def test_parse_seeds_reads_a_count_or_a_list(text, expected) -> None:
    assert parse_seeds(text) == expected


@pytest.mark.parametrize("text, fault", [("x", "expected a count n"), ("0", "a count must be >= 1"),
                                         ("1,1", "a seed is listed twice"), ("-1", "expected a count n"),
                                         ("3,", "expected a count n")])
def test_parse_seeds_names_the_bad_value(text, fault) -> None:
    with pytest.raises(SpecError, match=f"--seeds {text!r}: {fault}"):
        parse_seeds(text)


def test_pack_seeds_expands_one_trial_per_point(tmp_path: Path) -> None:
    body = {**BASE, "grid": {"task": ["copy"], "variant": ["onestep", "mix_onestep"]},  # cells that do not pack
            "hparams": {"optim.lr": [1e-3, 3e-4]}, "seeds": 3, "pack_seeds": True}
    s = load_spec(write(tmp_path, body), "smoke")
    trials = s.grid_trials()
    assert s.n_trials() == len(trials) == 2 * 2 and s.n_runs() == 2 * 2 * 3
    assert all(t.seeds == (0, 1, 2) for t in trials)
    assert s.resolved["pack_seeds"] is True
    assert "packed" in s.plan()
    # Unpacked specs resolve exactly as before the key existed (recorded studies still resume).
    unpacked = load_spec(write(tmp_path, {**body, "pack_seeds": False}), "smoke")
    assert "pack_seeds" not in unpacked.resolved and unpacked.n_trials() == 2 * 2 * 3


def test_pack_seeds_rejects_bad_values_and_unpackable_models(tmp_path: Path) -> None:
    msg = bad(tmp_path, pack_seeds="yes")
    assert "pack_seeds" in msg and "'yes'" in msg
    msg = bad(tmp_path, grid={"task": ["raffel_add"], "variant": ["ffattn"]}, pack_seeds=True)
    assert "pack_seeds" in msg and "task=raffel_add,variant=ffattn" in msg and "'location'" in msg


def test_task_data_is_checked_before_launch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from study.spec import check_task_data, require_task_data

    cfq = {**BASE, "grid": {"task": ["cfq"], "variant": ["mix_onestep"]}}
    spec = load_spec(write(tmp_path, {**cfq, "overrides": {"task.data_dir": "data/cfq"}}), "smoke")
    (problem,) = check_task_data(spec)
    assert "task.data_dir='data/cfq' is a relative path" in problem and "absolute" in problem

    data = tmp_path / "cfq"
    data.mkdir()
    for split in ("train", "dev", "test"):
        (data / f"{split}.tsv").write_text("Who edited M0 ?\tSELECT DISTINCT ?x0 WHERE { ?x0 edited M0 }\n")
    (data / "dev.tsv").write_text("a line without the tab\n")
    path = write(tmp_path, {**cfq, "overrides": {"task.data_dir": str(data)}})
    spec = load_spec(path, "smoke")
    with pytest.raises(SpecError) as info:
        require_task_data(spec)
    msg = str(info.value)
    assert str(path) in msg and "task=cfq,variant=mix_onestep" in msg and f"{data / 'dev.tsv'}:1" in msg
    # --dry-run reports the problem instead of failing
    assert main(["launch", str(path), "--profile", "smoke", "--dry-run"]) == 0
    assert "data     PROBLEM" in capsys.readouterr().out

    (data / "dev.tsv").write_text("Who edited M0 ?\tSELECT DISTINCT ?x0 WHERE { ?x0 edited M0 }\n")
    assert check_task_data(load_spec(path, "smoke")) == []
    # generated tasks need nothing
    assert check_task_data(load_spec(write(tmp_path, BASE), "smoke")) == []
