"""What a launch refuses, its dry run refuses: one check (:func:`study.recording.folder.check_study_folder`,
:func:`study.driver.relaunch.refuse_other_spec`) for both, one line, exit 2, nothing created."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("mlflow")

from reports.synth import SynthRun, write_bulk_sql  # noqa: E402
from study.cli import main as study  # noqa: E402
from tests.study.test_study import SMOKE, write_spec  # noqa: E402


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("dry", [["--dry-run"], []], ids=["dry_run", "launch"])
def test_a_study_name_longer_than_a_directory_name_is_one_line_naming_the_limit(tmp_path: Path, capsys,
                                                                                 dry) -> None:
    spec = write_spec(tmp_path, "n", grid={"task": ["copy"], "variant": ["onestep"]}, overrides=SMOKE)
    root = tmp_path / "s"
    assert study(["launch", str(spec), "--root", str(root), "--name", "a" * 300, *dry]) == 2
    err = _one_line(capsys)
    assert "--name 'aaaaaaaaaaaaaaaaaaaaaaaa'... is 300 bytes long: a study name is one directory name, " \
           "at most 255 bytes" in err, err
    # a spec whose own name makes the folder name too long: the same line, naming the spec
    long = tmp_path / "long.yaml"
    long.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), "name": "b" * 300}))
    assert study(["launch", str(long), "--root", str(root), *dry]) == 2
    assert f"{long}: name and profile 'bbbbbbbbbbbbbbbbbbbbbbbb'... is 306 bytes long" in _one_line(capsys)
    assert not root.exists()


@pytest.mark.parametrize("dry", [["--dry-run"], []], ids=["dry_run", "launch"])
def test_a_root_that_is_a_file_is_refused_by_the_dry_run_as_by_the_launch(tmp_path: Path, capsys, dry) -> None:
    spec = write_spec(tmp_path, "r", grid={"task": ["copy"], "variant": ["onestep"]}, overrides=SMOKE)
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    for root in (afile, afile / "under"):
        assert study(["launch", str(spec), "--root", str(root), *dry]) == 2
        err = _one_line(capsys)
        assert f"--root {root}: {afile} is a file, not a directory" in err, err
        assert "free at" not in err
    assert afile.read_text() == "not a folder"


@pytest.mark.parametrize("dry", [["--dry-run"], []], ids=["dry_run", "launch"])
def test_a_relaunch_with_another_budget_beside_finished_runs_says_so_and_names_another_name(
        tmp_path: Path, capsys, dry) -> None:
    spec = write_spec(tmp_path, "b", seeds=2, grid={"task": ["copy"], "variant": ["onestep"]}, overrides=SMOKE)
    root = tmp_path / "s"
    assert study(["export", str(spec), "--root", str(root), "--out", str(tmp_path / "export")]) == 0
    write_bulk_sql(root / "b-smoke" / "mlflow.db", "b-smoke",
                   [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=2) for s in range(2)])
    capsys.readouterr()
    before = sorted(p.name for p in (root / "b-smoke").iterdir())
    assert study(["launch", str(spec), "--root", str(root), "--set", "optim.epochs=4", *dry]) == 2
    err = _one_line(capsys)
    assert (f"study 'b-smoke' at {root / 'b-smoke'} has 2 finished run(s) under overrides.optim.epochs: 2, "
            f"and this launch asks for overrides.optim.epochs: 4 ({spec}, profile smoke, --only (none)): its 2 runs "
            "would be planned beside them") in err, err
    assert f"`study launch {spec} --name b-smoke-2 --set optim.epochs=4`" in err, err
    assert sorted(p.name for p in (root / "b-smoke").iterdir()) == before
