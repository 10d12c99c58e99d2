"""``study launch --set KEY=VALUE`` (issue 42): a budget or any dotted config field changed on
the command line, validated with the spec, saved in study.json and part of the study's spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from study.cli import main as study_main
from study.driver.summary import resume_command
from study.spec import apply_sets, parse_sets
from study.recording.ui import ui_command

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "ablations" / "rc_table2.yaml")


def _launch(capsys, *args: str) -> tuple[int, str, str]:
    code = study_main(["launch", SPEC, "--profile", "smoke", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_set_changes_the_budget_of_the_plan(tmp_path: Path, capsys) -> None:
    code, out, _ = _launch(capsys, "--dry-run", "--root", str(tmp_path))
    assert code == 0 and "up to 2 epochs per run" in out
    code, out, err = _launch(capsys, "--dry-run", "--root", str(tmp_path), "--set", "optim.epochs=3",
                             "--set", "task.train_size=32")
    assert code == 0, err
    assert "up to 3 epochs per run" in out


@pytest.mark.parametrize("item, words", [
    ("optim.epoch=3", ["unknown config key 'optim.epoch'", "'epochs'"]),
    ("optim.epochs=1.5", ["optim.epochs"]),
    ("optim.epochs", ["--set 'optim.epochs': expected KEY=VALUE"]),
])
def test_a_bad_set_is_one_line_and_creates_nothing(tmp_path: Path, capsys, item, words) -> None:
    code, out, err = _launch(capsys, "--root", str(tmp_path), "--set", item)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert all(w in lines[0] for w in words), lines[0]
    assert not any(tmp_path.iterdir())


def test_sets_go_last_into_the_chosen_profile() -> None:
    raw = {"overrides": {"optim.lr": 1e-3}, "default_profile": "quick",
           "profiles": {"smoke": {"overrides": {"optim.epochs": 2}}, "quick": {"seeds": 3}}}
    sets = parse_sets(["optim.epochs=3", "optim.lr=3e-4", "task.test_lengths=[15, 30]", "x.name=abc"])
    assert sets == {"optim.epochs": 3, "optim.lr": 3e-4, "task.test_lengths": [15, 30], "x.name": "abc"}
    smoke = apply_sets(raw, "smoke", {"optim.epochs": 3})
    assert smoke["profiles"]["smoke"]["overrides"] == {"optim.epochs": 3}
    assert apply_sets(raw, None, {"optim.epochs": 3})["profiles"]["quick"]["overrides"] == {"optim.epochs": 3}
    assert apply_sets({"overrides": {"optim.lr": 1e-3}}, None, {"optim.lr": 0.1})["overrides"] == {"optim.lr": 0.1}
    assert raw["profiles"]["smoke"]["overrides"] == {"optim.epochs": 2}  # not changed in place


@pytest.mark.slow
def test_a_launch_records_its_sets_and_other_sets_are_another_study(tmp_path: Path, capsys) -> None:
    code, _, err = _launch(capsys, "--root", str(tmp_path), "--set", "optim.epochs=1")
    assert code == 0, err
    meta = json.loads((tmp_path / "rc_table2-smoke" / "study.json").read_text())
    assert meta["set"] == {"optim.epochs": 1}
    assert meta["resolved"]["overrides"]["optim.epochs"] == 1
    configs = list((tmp_path / "rc_table2-smoke" / "runs").glob("*/config.json"))
    assert len(configs) == 4
    for cfg in configs:
        assert json.loads(cfg.read_text())["optim"]["epochs"] == 1
    code, _, err = _launch(capsys, "--root", str(tmp_path), "--set", "optim.epochs=2")
    # refused beside the finished runs, naming the field, its old and new value, and another name
    assert code == 2 and ("has 4 finished run(s) under overrides.optim.epochs: 1, and this launch "
                          "asks for overrides.optim.epochs: 2") in err, err
    assert "--name rc_table2-smoke-2 --set optim.epochs=2" in err, err


def test_the_printed_resume_command_names_the_cluster_it_joined(tmp_path: Path) -> None:
    d = tmp_path / "studies" / "t2"
    assert resume_command(d, None, None) == f"study resume {d}"
    assert resume_command(d, 1, "auto") == f"study resume {d} --max-concurrent 1 --address auto"
    assert resume_command(d, None, "ray://head:10001").endswith(" --address ray://head:10001")


def test_study_ui_runs_mlflow_server_without_a_line_per_request(tmp_path: Path) -> None:
    """uvicorn's access log printed 104 lines for two page loads; with --no-access-log a real
    server answered seven requests with no line (measured by hand: 0 'GET ' lines)."""
    cmd = ui_command(f"sqlite:///{tmp_path / 'mlflow.db'}", "127.0.0.1", 5000)
    assert cmd[:4] == [cmd[0], "-m", "mlflow", "server"]
    assert "--uvicorn-opts=--no-access-log" in cmd


TINY = ("name: tiny\ndescription: two runs\ntables: []\ngrid: {task: [copy], variant: [onestep]}\n"
        "seeds: 2\noverrides: {task.train_size: 32, task.dev_size: 8, task.test_size: 8, "
        "task.test_lengths: [15], optim.epochs: 1}\nresources: {cpus: 1}\nmax_failures: 0\n")


def _tiny_study(tmp_path: Path, finished: int = 0) -> Path:
    """studies/tiny/study.json as a launch writes it (nothing trained yet), and, with
    ``finished``, a store where that many of its runs finished."""
    from record.layout import study_paths
    from reports.synth import SynthRun, write_bulk_sql
    from study.recording.folder import write_meta
    from study.driver.launch import new_meta
    from study.spec import read_yaml, resolve_spec

    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(TINY)
    raw = read_yaml(spec_path)
    paths = study_paths("tiny", tmp_path / "studies")
    paths.dir.mkdir(parents=True)
    write_meta(paths, new_meta(resolve_spec(raw, path=str(spec_path)), spec_path, raw, paths, "tiny",
                               only=None, seeds=None, sets=None, train_path=None, tracking_uri=None))
    if finished:
        write_bulk_sql(paths.db, "tiny", [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=2)
                                          for s in range(finished)])
    return paths.dir


def _resume(capsys, study: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # MLflow's lines while the test made its store
    code = study_main(["resume", str(study), *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("item, words", [
    ("optim.epoch=3", ["unknown config key 'optim.epoch'", "'epochs'"]),
    ("optim.epochs=1.5", ["optim.epochs"]),
    ("optim.epochs", ["--set 'optim.epochs': expected KEY=VALUE"]),
])
def test_a_bad_resume_set_is_one_line_and_changes_nothing(tmp_path: Path, capsys, item, words) -> None:
    study = _tiny_study(tmp_path)
    before = (study / "study.json").read_bytes()
    code, out, err = _resume(capsys, study, "--set", item)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert all(w in lines[0] for w in words), lines[0]
    assert (study / "study.json").read_bytes() == before
    assert sorted(p.name for p in study.iterdir()) == ["study.json"]


def test_a_resume_set_that_would_pool_old_and_new_runs_is_refused_naming_the_change(
        tmp_path: Path, capsys) -> None:
    study = _tiny_study(tmp_path, finished=2)
    before = (study / "study.json").read_bytes()
    code, out, err = _resume(capsys, study, "--set", "optim.epochs=3")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "changes study 'tiny''s spec (overrides.optim.epochs: 1 -> 3)" in lines[0], lines[0]
    assert "2 of its runs finished under the old values" in lines[0], lines[0]
    assert "--name tiny-2 --set optim.epochs=3`" in lines[0], lines[0]
    assert (study / "study.json").read_bytes() == before


@pytest.mark.slow
def test_a_resume_set_changes_the_runs_it_trains_says_so_and_is_recorded(tmp_path: Path, capsys,
                                                                         monkeypatch) -> None:
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    study = _tiny_study(tmp_path)
    code, out, err = _resume(capsys, study, "--set", "optim.epochs=2", "--max-concurrent", "1")
    assert code == 0, err[-2000:]
    assert ("[study tiny] --set changes its spec (overrides.optim.epochs: 1 -> 2): the runs from here "
            "on train under the new values") in out, out
    meta = json.loads((study / "study.json").read_text())
    assert meta["set"] == {"optim.epochs": 2} and meta["resolved"]["overrides"]["optim.epochs"] == 2
    configs = list((study / "runs").glob("*/config.json"))
    assert len(configs) == 2
    assert all(json.loads(c.read_text())["optim"]["epochs"] == 2 for c in configs)


def _started_run(study: Path, seed: int, **overrides) -> Path:
    """runs/<key>/config.json of tiny's copy/onestep run ``seed`` as its trainer writes it when
    the run starts (locattn.training.run), under the spec's values (and ``overrides``)."""
    from locattn.config import config_to_dict, make_run_config
    from study.spec.keys import run_key

    values = {"task.train_size": 32, "task.dev_size": 8, "task.test_size": 8, "task.test_lengths": [15],
              "optim.epochs": 1, **overrides}
    folder = study / "runs" / run_key("tiny", "task=copy,variant=onestep", {}, seed)
    folder.mkdir(parents=True)
    cfg = make_run_config(task="copy", variant="onestep", seed=seed, overrides=values)
    (folder / "config.json").write_text(json.dumps(config_to_dict(cfg), indent=1) + "\n")
    return folder


def test_a_resume_set_on_runs_started_under_the_old_values_is_refused_naming_them(
        tmp_path: Path, capsys) -> None:
    """A killed study's unfinished runs hold checkpoints of the old config: resumed under a
    --set that changes their identity, every one failed (CheckpointMismatchError, retried,
    exit 1) and the study could never finish, nor go back (breaker, by hand: rc_table2 smoke,
    kill -9, resume --set optim.epochs=30). Now one line names them and both ways out, with the
    study's own --set carried into the launch command; study.json is untouched."""
    from study.recording.folder import load_meta, write_meta
    from record.layout import study_paths

    study = _tiny_study(tmp_path)
    paths = study_paths("tiny", tmp_path / "studies")
    write_meta(paths, load_meta(paths).replace(sets={"task.dev_size": 8}))
    folder = _started_run(study, 0)
    before = (study / "study.json").read_bytes()
    code, out, err = _resume(capsys, study, "--set", "optim.epochs=3")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert (f"changes study 'tiny''s spec (overrides.optim.epochs: 1 -> 3), but 1 of its runs started under "
            f"the old values (runs/{folder.name})") in lines[0], lines[0]
    assert f"`study resume {study}` without --set finishes them" in lines[0], lines[0]
    assert "--name tiny-2 --set task.dev_size=8 --set optim.epochs=3`" in lines[0], lines[0]
    assert (study / "study.json").read_bytes() == before


def test_runs_started_under_other_values_are_those_a_set_gives_another_identity(tmp_path: Path) -> None:
    """An operational field (threads, device) keeps every run's identity: no run is in the way;
    a finished run or a folder without a config is not counted."""
    from study.recording.runs import started_under_other_values

    study = _tiny_study(tmp_path)
    started = _started_run(study, 0)
    finished = _started_run(study, 1)
    (finished / "result.json").write_text("{}\n")
    (study / "runs" / ("0" * 16)).mkdir()  # a run killed before its config was written
    assert started_under_other_values(study, {"num_threads": 1, "device": "cpu"}) == []
    assert started_under_other_values(study, {"optim.epochs": 1}) == []  # the value it has
    assert started_under_other_values(study, {"optim.epochs": 3}) == [started]
    assert started_under_other_values(study, {"model.hidden_size": 16}) == [started]


def test_a_resume_set_of_operational_fields_keeps_the_finished_runs(tmp_path: Path, capsys, monkeypatch) -> None:
    """num_threads and device are not part of a run's identity nor of its metrics: a study whose
    runs finished could not take `--set num_threads=1` (refused: 'its tables would pool them').
    The refused launch command quotes a list value for the shell (it printed
    `--set task.test_lengths=[15, 30]`, two words)."""
    monkeypatch.chdir(tmp_path)  # the synthetic store's experiment has no artifact location: ./mlruns
    study = _tiny_study(tmp_path, finished=2)
    code, out, err = _resume(capsys, study, "--set", "task.test_lengths=[15, 30]")
    assert code == 2 and "--set 'task.test_lengths=[15,30]'`" in err, err
    code, out, err = _resume(capsys, study, "--set", "num_threads=1")
    assert code == 0, err[-2000:]
    assert ("[study tiny] --set changes how its runs train (overrides.num_threads: absent -> 1), not what "
            "they compute: their identities stay, finished runs are kept") in out, out
    assert json.loads((study / "study.json").read_text())["set"] == {"num_threads": 1}
