"""A mistyped variant, task or table name gets the closest valid name in its one-line error
(issue 42): the valid lists run to 33 names, too long to scan for a typo."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from locattn.cli import main as locattn_main
from reports.tables import get_table
from study.cli import main as study_main

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, edit) -> Path:
    spec = yaml.safe_load((ROOT / "ablations" / "rc_table2.yaml").read_text())
    edit(spec)
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("edit, hint", [
    (lambda s: s["profiles"]["smoke"]["grid"].update(variant=["onestepp"]), "grid.variant: unknown variant 'onestepp' (did you mean onestep?)"),
    (lambda s: s["profiles"]["smoke"]["grid"].update(task=["reverse_cpy"]), "grid.task: unknown task 'reverse_cpy' (did you mean reverse_copy?)"),
    (lambda s: s.update(tables=["rc_tabel2"]), "tables: unknown table 'rc_tabel2' (did you mean rc_table2?)"),
])
def test_a_spec_typo_names_the_closest_valid_name(tmp_path: Path, capsys, edit, hint) -> None:
    path = _spec(tmp_path, edit)
    code = study_main(["launch", str(path), "--profile", "smoke", "--dry-run", "--root", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and hint in err[0], err


@pytest.mark.parametrize("args, hint", [
    (["--task", "copy", "--variant", "onestepp"], "unknown variant 'onestepp' (did you mean onestep?)"),
    (["--task", "reverse_cpy", "--variant", "onestep"], "unknown task 'reverse_cpy' (did you mean reverse_copy?)"),
])
def test_locattn_train_names_the_closest_task_or_variant(tmp_path: Path, capsys, args, hint) -> None:
    code = locattn_main(["train", *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and hint in err[0], err
    assert not (tmp_path / "run").exists()


def test_an_unknown_table_id_names_the_closest_one() -> None:
    with pytest.raises(ValueError, match=r"unknown table id 'rc_tabel2' \(did you mean rc_table2\?\)"):
        get_table("rc_tabel2")
