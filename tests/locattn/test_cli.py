"""The ``locattn`` command line: listings, one-line usage errors, a tiny run, the attention plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from locattn.cli import main
from locattn.tasks import list_tasks
from locattn.variants import list_variants

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "task.train_size=200", "--set", "task.dev_size=40", "--set", "task.test_size=12",
        "--set", "task.test_lengths=15,30", "--threads", "1", "--no-progress"]


def run_main(argv: list[str], capsys: pytest.CaptureFixture, entry=main) -> tuple[int, str, str]:
    try:
        code = entry(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return int(code), out, err


def test_train_help_lists_tasks_and_variants(capsys) -> None:
    code, out, _ = run_main(["train", "--help"], capsys)
    assert code == 0
    for task in list_tasks():
        assert task in out
    for key, label in list_variants().items():
        assert key in out and label in out
    assert "--set KEY=VALUE" in out and "--fresh" in out


@pytest.mark.parametrize(
    "argv, needle, valid",
    [
        (["train", "--task", "copyy", "--variant", "onestep"], "unknown task 'copyy'", "reverse_copy"),
        (["train", "--task", "copy", "--variant", "one"], "unknown variant 'one'", "mix_mono_pr"),
        (["train", "--task", "copy", "--variant", "onestep", "--set", "optim.lrr=1"],
         "'optim.lrr'; valid keys under optim", "'lr'"),
        (["train", "--task", "copy", "--variant", "onestep", "--set", "optim.lr"],
         "not of the form key=value", "optim.lr=3e-4"),
        (["train", "--task", "copy", "--variant", "onestep", "--set", "optim.dev_scoring=x"],
         "optim.dev_scoring='x'", "greedy"),
        (["train", "--task", "copy", "--variant", "onestep", "--bogus"],
         "unrecognized arguments: --bogus", "--variant"),
        (["train", "--task", "copy"], "the following arguments are required: --variant", "--variant"),
        (["trian"], "invalid choice: 'trian'", "train"),
    ],
)
def test_usage_errors_are_one_line_naming_choices(capsys, argv, needle, valid) -> None:
    code, out, err = run_main(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0] and valid in lines[0]
    assert "Traceback" not in err and out == ""


def test_module_entry_point_exits_2_without_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "locattn", "train", "--task", "nope",
                           "--variant", "onestep"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.startswith("locattn train: error: unknown task 'nope'; valid tasks: copy")
    assert "Traceback" not in proc.stderr


def test_listings(capsys) -> None:
    code, out, _ = run_main(["tasks"], capsys)
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == list_tasks()
    assert "Reverse ReCopy" in out and "Multiplication (Raffel & Ellis)" in out
    code, out, _ = run_main(["variants", "mix_mono*"], capsys)
    assert code == 0
    assert out.splitlines() == [f"{k:<28} {v}" for k, v in list_variants("mix_mono*").items()]
    assert "Mix MonoAttn PR" in out
    code, _, err = run_main(["variants", "zzz*"], capsys)
    assert code == 2 and "no variant matches 'zzz*'" in err


def test_train_then_attention_then_refuse_other_config(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "run"
    base = ["train", "--task", "copy", "--variant", "onestep", "--seed", "0", "--epochs", "2",
            "--out", str(out_dir), "--cache-dir", str(tmp_path / "cache"), *TINY]
    code, out, err = run_main(base, capsys)
    assert code == 0, err
    result = json.loads((out_dir / "result.json").read_text())
    lines = out.splitlines()
    assert lines[0].split() == ["split", "seqAcc", "%", "seqAccBE", "%", "n"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:4]}
    assert list(rows) == ["iid", "len15", "len30"]
    for split, cols in rows.items():
        assert float(cols[0]) == pytest.approx(100 * result["test"][split]["seq_acc"], abs=0.01)
        assert float(cols[1]) == pytest.approx(100 * result["test"][split]["seq_acc_be"], abs=0.01)
        assert int(cols[2]) == 12
    assert f"wrote {out_dir}" in out
    assert len((out_dir / "metrics.jsonl").read_text().splitlines()) == 3

    png = tmp_path / "att.png"
    code, out, err = run_main(["attention", "--run", str(out_dir), "--split", "len15",
                               "--index", "2", "--out", str(png)], capsys)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 100_000
    code, _, err = run_main(["attention", "--run", str(out_dir), "--split", "len99"], capsys)
    assert code == 2 and "unknown split 'len99'" in err and "len30" in err
    code, _, err = run_main(["attention", "--run", str(out_dir), "--index", "500"], capsys)
    assert code == 2 and "index 500 out of range" in err

    # A different config into the same directory is refused (with --fresh offered) ...
    code, out, err = run_main([*base, "--set", "optim.lr=3e-4"], capsys)
    assert code == 2 and "different run config" in err and "--fresh" in err
    assert "optim.lr: 0.001 -> 0.0003" in err
    # ... and accepted with --fresh.
    code, out, err = run_main([*base, "--set", "optim.lr=3e-4", "--fresh"], capsys)
    assert code == 0, err
    assert json.loads((out_dir / "config.json").read_text())["optim"]["lr"] == 3e-4
