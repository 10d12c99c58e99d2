"""``locattn train`` as a researcher types it: bad operational flags, a task without its data and a
malformed data file are each one line, a non-zero exit, no traceback, and leave nothing behind;
``--set`` takes a list both ways; the test splits show their progress."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from locattn.config import make_run_config, parse_override
from tests.locattn.test_cli import run_main

TINY = ["--set", "task.train_size=64", "--set", "task.dev_size=16", "--set", "task.test_size=8",
        "--set", "task.test_lengths=[15]", "--threads", "1", "--epochs", "1"]


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--threads", "0"], "--threads 0: need at least 1 thread"),
        (["--device", "tpu"], "--device 'tpu' is not a device here; valid: cpu, cuda, cuda:N, mps"),
        (["--seed", "-1"], "--seed -1: a seed must be >= 0"),
        (["--epochs", "0"], "--epochs 0: need at least 1 epoch"),
    ],
)
def test_train_refuses_bad_operational_flags_in_one_line(tmp_path: Path, capsys, flags, needle) -> None:
    out_dir = tmp_path / "run"
    code, out, err = run_main(["train", "--task", "copy", "--variant", "onestep",
                               "--out", str(out_dir), *flags], capsys)
    assert code == 2
    assert err.strip().splitlines() == [f"locattn train: error: {needle}"]
    assert not out_dir.exists()


def test_train_cfq_without_data_names_the_override_and_leaves_nothing(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "cfq"
    code, _, err = run_main(["train", "--task", "cfq", "--variant", "onestep",
                             "--out", str(out_dir)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("locattn train: error: task 'cfq'")
    assert "--set task.data_dir=DIR" in lines[0] and "train.tsv" in lines[0]
    assert "TaskConfig" not in lines[0]
    assert not out_dir.exists()  # no config.json left behind


def test_train_malformed_data_file_is_one_line_naming_the_file(tmp_path: Path, capsys) -> None:
    data = tmp_path / "scan"
    data.mkdir()
    (data / "tasks_train_length.txt").write_text("IN: jump OUT: I_JUMP\nnot a pair\n")
    (data / "tasks_test_length.txt").write_text("IN: walk OUT: I_WALK\n")
    out_dir = tmp_path / "run"
    code, _, err = run_main(["train", "--task", "scan", "--variant", "onestep", "--out", str(out_dir),
                             "--set", f"task.data_dir={data}"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"{data / 'tasks_train_length.txt'}:2" in lines[0] and "'not a pair'" in lines[0]
    assert not out_dir.exists()


# --------------------------------------------------------------------------- --set lists


@pytest.mark.parametrize("text", ["task.test_lengths=30,100", "task.test_lengths=[30,100]",
                                  "task.test_lengths=[30, 100]", "task.test_lengths= [30, 100] "])
def test_set_accepts_the_comma_and_the_bracketed_list(text: str) -> None:
    key, value = parse_override(text)
    assert make_run_config(task="copy", overrides={key: value}).task.test_lengths == (30, 100)


def test_set_list_error_names_the_accepted_forms(capsys) -> None:
    code, _, err = run_main(["train", "--task", "copy", "--variant", "onestep",
                             "--set", "task.test_lengths=[30,x]"], capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        "locattn train: error: task.test_lengths: expected an integer, got 'x' "
        "(write a list as 30,100 or [30, 100])"]


# --------------------------------------------------------------------------- progress


def test_train_shows_progress_while_scoring_the_test_splits(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "run"
    code, out, err = run_main(["train", "--task", "copy", "--variant", "onestep", "--out", str(out_dir),
                               "--cache-dir", str(tmp_path / "cache"), *TINY], capsys)
    assert code == 0, err
    assert "scoring test splits" in err
    # The bar counts the splits actually scored (iid and len15) and ends on "done".
    assert "2/2" in err and "done" in err
    assert json.loads((out_dir / "result.json").read_text())["test"].keys() == {"iid", "len15"}
    code, out, err = run_main(["train", "--task", "copy", "--variant", "onestep", "--out",
                               str(tmp_path / "quiet"), "--cache-dir", str(tmp_path / "cache"),
                               "--no-progress", *TINY], capsys)
    assert code == 0 and "scoring" not in err


def test_score_test_splits_reports_each_split_then_the_end(tmp_path: Path) -> None:
    from locattn.train import train

    calls: list[tuple[str, int, int]] = []

    class Rec:
        def on_epoch(self, epoch, metrics, checkpoint_dir):
            pass

        def on_test_split(self, split, done, total):
            calls.append((split, done, total))

        def on_end(self, result):
            pass

    cfg = make_run_config(task="copy", variant="onestep", overrides={
        "task.train_size": 64, "task.dev_size": 16, "task.test_size": 8,
        "task.test_lengths": [15, 30], "optim.epochs": 1, "cache_dir": str(tmp_path / "cache")})
    train(cfg, tmp_path / "run", recorder=Rec())
    assert calls == [("iid", 0, 3), ("len15", 1, 3), ("len30", 2, 3), ("", 3, 3)]
