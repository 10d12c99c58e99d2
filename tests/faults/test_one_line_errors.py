"""A study's bad input and unusable surroundings are one line, in seconds, and leave the study
resumable: a spec's validation gaps, names outside the root and YAML bombs, a local Ray that
cannot start, unusable launch arguments, absurd sizes, a corrupt ``study.json``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
pytest.importorskip("ray")
pytest.importorskip("mlflow")

from study.driver.launch import launch  # noqa: E402
from study.recording.folder import StudyError  # noqa: E402
from study.spec import SpecError, load_spec  # noqa: E402
from tests.faults.fault_helpers import ENV, TINY, study_cli, write_spec  # noqa: E402


def test_spec_validation_gaps_are_refused(tmp_path: Path) -> None:
    base = {"name": "v", "grid": {"task": ["copy"], "variant": ["onestep"]},
            "profiles": {"smoke": {}}, "default_profile": "smoke"}

    def refused(body: dict | None = None, text: str | None = None) -> str:
        path = tmp_path / "v.yaml"
        if text is not None:
            path.write_bytes(text.encode() if isinstance(text, str) else text)
        else:
            path.write_text(yaml.safe_dump(body))
        with pytest.raises(SpecError) as info:
            load_spec(path)
        msg = str(info.value)
        assert "\n" not in msg and str(path) in msg
        return msg

    assert "optim.lr=inf is not a finite number" in refused({**base, "overrides": {"optim.lr": float("inf")}})
    assert "optim.epochs=1.5: expected an integer" in refused({**base, "overrides": {"optim.epochs": 1.5}})
    msg = refused({**base, "tables": ["nosuch"]})
    assert "unknown table 'nosuch'" in msg and "rc_table2" in msg
    msg = refused(text="name: v\nseeds: 3\nseeds: 5\ngrid: {task: [copy], variant: [onestep]}\n")
    assert "duplicate key 'seeds' (lines 2 and 3)" in msg
    (tmp_path / "bin.yaml").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(SpecError, match="not a text") as info:
        load_spec(tmp_path / "bin.yaml")
    assert "\n" not in str(info.value)


def test_spec_names_stay_under_the_root_and_bombs_are_refused(tmp_path: Path) -> None:
    """#27 items 5, 8, 12: names from the spec, duplicates, aliases, nesting, huge numbers and a
    variant of the wrong kind are all one line at validation, before anything is created."""
    base = {"name": "v", "grid": {"task": ["copy"], "variant": ["onestep"]},
            "profiles": {"smoke": {}}, "default_profile": "smoke"}

    def refused(body: dict | None = None, text: str | None = None) -> str:
        path = tmp_path / "v.yaml"
        path.write_text(text if text is not None else yaml.safe_dump(body))
        with pytest.raises(SpecError) as info:
            load_spec(path)
        msg = str(info.value)
        assert "\n" not in msg and str(path) in msg and len(msg) < 500
        return msg

    assert "name: '..': a study name is one directory" in refused({**base, "name": ".."})
    assert "name: 'x?y'" in refused({**base, "name": "x?y"})  # would cut a tracking URI short
    msg = refused({**base, "profiles": {"/../../escaped": {}}, "default_profile": "/../../escaped"})
    assert "profiles: '/../../escaped': a study name is one directory" in msg
    assert "grid.variant: 'onestep' is listed twice" in refused(
        {**base, "grid": {"task": ["copy"], "variant": ["onestep", "onestep"]}})
    assert "hparams.optim.lr: 0.001 is listed twice" in refused({**base, "hparams": {"optim.lr": [1e-3, 0.001]}})
    assert "grid.optim.epochs: 2 is listed twice" in refused(
        {**base, "grid": {**base["grid"], "optim.epochs": [2, 3, 2]}})
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi"))
    started = time.monotonic()
    assert "line 3: YAML alias *a: a spec may not use aliases" in refused(text="name: v\n" + bomb)
    assert "nested deeper than 50 levels" in refused(text="name: v\nseeds: " + "[" * 50_000 + "]" * 50_000)
    assert time.monotonic() - started < 30  # refused while reading, not after expanding
    assert "seeds: expected an integer from 1 to 10,000,000, got an integer of about 31 digits" in refused(
        {**base, "seeds": 10**30})
    assert "seeds[]: expected an integer from 0 to 4,294,967,295" in refused({**base, "seeds": [0, 2**40]})
    assert "optim.epochs=an integer of about 31 digits: out of its range 1 to 10,000,000" in refused(
        {**base, "overrides": {"optim.epochs": 10**30}})
    msg = refused({**base, "grid": {"task": ["copy"], "variant": ["ffattn"]}})
    assert "task 'copy' is a seq2seq task, but variant 'ffattn' has model.kind='regressor'" in msg
    msg = refused({**base, "grid": {"task": ["raffel_add"], "variant": ["onestep"]}})
    assert "task 'raffel_add' is a regression task" in msg


def test_a_local_ray_that_cannot_start_is_one_line_and_the_study_resumes(tmp_path: Path) -> None:
    """A private Ray that cannot start (here its temp directory is a file, as a full or read-only
    /tmp would be) stops the launch with exit status 2 and one line naming the cause and the
    resume command, not Ray's traceback; the study is kept and resumes once Ray can start."""
    spec = write_spec(tmp_path, "noray")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    bad = study_cli("launch", str(spec), "--root", str(tmp_path / "s"), env={**ENV, "RAY_TMPDIR": str(blocker)})
    assert bad.returncode == 2, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert "Traceback" not in bad.stderr, bad.stderr[-3000:]
    err = bad.stderr.strip().splitlines()[-1]
    study = tmp_path / "s" / "noray-smoke"
    assert "a private local Ray did not start (NotADirectoryError:" in err, err
    assert f"RAY_TMPDIR moves it), then `study resume {study}`: the study is kept" in err, err
    assert not any((study / "runs").glob("*/result.json"))
    good = study_cli("resume", str(study))
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    assert len(list((study / "runs").glob("*/result.json"))) == 1


@pytest.mark.parametrize("argv, needle", [
    (["--tracking-uri", "bogus://x"], "--tracking-uri bogus://x: unknown scheme 'bogus://'"),
    (["--tracking-uri", "file://"], "--tracking-uri file://: MLflow's file store is not supported"),
    (["--tracking-uri", "sqlite:////nonexistent/dir/x.db"],
     "directory /nonexistent/dir does not exist; create it first"),
    (["--tracking-uri", "http://127.0.0.1:1"], "no MLflow server answers at 127.0.0.1:1"),
    (["--tracking-uri", "postgresql://u:secret@127.0.0.1:1/db"], "no postgresql database answers"),
    (["--address", "127.0.0.1:1"], "--address 127.0.0.1:1: no Ray cluster answers at 127.0.0.1:1"),
    (["--progress-seconds", "0"], "--progress-seconds 0.0: expected a number of seconds > 0"),
    (["--progress-seconds", "-5"], "--progress-seconds -5.0: expected"),
    (["--progress-seconds", "nan"], "--progress-seconds nan: expected"),
])
def test_unusable_launch_arguments_are_one_line_in_seconds(tmp_path: Path, capsys, argv, needle) -> None:
    """#27 item 12: a bad store, cluster or interval is refused before anything is created."""
    from study.cli import main

    spec = write_spec(tmp_path, "u")
    started = time.monotonic()
    assert main(["launch", str(spec), "--root", str(tmp_path / "s"), *argv]) == 2
    assert time.monotonic() - started < 60  # seconds, not the minutes of MLflow's or Ray's retries
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "secret" not in err
    assert not (tmp_path / "s").exists() and not Path("/nonexistent").exists()


def test_table_ids_match_the_reports_registry() -> None:
    from locattn import registry
    from reports.tables import EXHIBITS, TABLES

    assert set(registry.entries("table")) == set(TABLES) | set(EXHIBITS)


def test_absurd_sizes_need_confirmation_with_the_dry_run_cost(tmp_path: Path, capsys) -> None:
    spec = write_spec(tmp_path, "huge", seeds=2_000_000)
    with pytest.raises(StudyError) as info:
        launch(spec, root=tmp_path / "s")
    msg = str(info.value)
    assert "2,000,000 runs" in msg and "dry-run cost ~" in msg and "--yes" in msg
    assert not (tmp_path / "s").exists()  # nothing created
    epochs = write_spec(tmp_path, "long", overrides={**TINY, "optim.epochs": 10**6})
    with pytest.raises(StudyError, match="1,000,000 epochs per run"):
        launch(epochs, root=tmp_path / "s")
    summary = launch(spec, root=tmp_path / "s", dry_run=True)
    assert summary.size_warnings and "size     WARNING 2,000,000 runs" in capsys.readouterr().out


def test_corrupt_or_empty_study_json_is_one_line(tmp_path: Path) -> None:
    study = tmp_path / "s" / "x"
    study.mkdir(parents=True)
    for content in ("", '{"name": "x", "raw": {', "[1, 2]"):
        (study / "study.json").write_text(content)
        for cmd in (["status", str(study)], ["resume", str(study)]):
            res = study_cli(*cmd, timeout=120)
            assert res.returncode == 2, res.stderr
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and "study.json" in lines[0], res.stderr
            assert ("empty" if not content else "corrupt") in lines[0]
