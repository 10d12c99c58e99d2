"""``study`` as a researcher types it: run names that lead with what differs, one-line refusals of
bad names, concurrency and unknown studies (a non-zero exit, no traceback, nothing written), help
for every option, a fast ``study status``, ``study ui``'s port and URL, ``study report``, and a
real launch's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.locattn.test_cli import run_main


def test_run_names_lead_with_what_differs() -> None:
    from study.recording.naming import abbreviate, run_name, short_value, split_cell

    assert run_name(task="copy", variant="onestep", seed=3, hparams={"optim.lr": 1e-3}) == \
        "1step·copy·s3·lr=1e-3"
    assert run_name(task="raffel_add", variant="ffattn", seed=2, hparams={"optim.lr": 0.01},
                    cell="task=raffel_add,variant=ffattn,task.t0=50") == \
        "ffattn·raffel-add·s2·lr=0.01·t0=50"
    assert run_name(task="copy", variant="mono", seed=4,
                    cell="task=copy,variant=mono,ablation=no_gate") == "mono·copy·s4·ablation=no_gate"
    assert [abbreviate(k) for k in ("onestep_no_step2", "mix_locattn_s_pr", "dubois_transformer_xl",
                                    "inv_reverse_recopy")] == \
        ["-step2", "mix-loc-s-pr", "transformer-xl", "inv-rev-recopy"]
    assert [short_value(v) for v in (0.001, 3e-4, 2.5e-3, 0.5, 100.0, 1e-5, True, [15, 30])] == \
        ["1e-3", "3e-4", "2.5e-3", "0.5", "100", "1e-5", "true", "15,30"]
    assert split_cell("task=copy,variant=x,task.test_lengths=(15,30)") == \
        {"task": "copy", "variant": "x", "task.test_lengths": "(15,30)"}


def test_every_spec_cell_names_variant_task_and_seed_within_30_characters_and_apart() -> None:
    """Every (variant, task) pair of every profile of every spec in ablations/, at its largest
    seed: the abbreviated variant, task and seed fit the UI's first 30 characters, and no two
    variants (or tasks) abbreviate alike."""
    from locattn.tasks import list_tasks
    from locattn.variants import list_variants
    from study.recording.naming import SEP, abbreviate, run_name
    from study.spec import load_spec, read_yaml

    pairs: set[tuple[str, str, int]] = set()
    for path in sorted((Path(__file__).resolve().parents[2] / "ablations").glob("*.yaml")):
        for profile in [None, *read_yaml(path).get("profiles", {})]:
            spec = load_spec(path, profile)
            pairs |= {(c.variant, c.task, max(spec.seeds)) for c in spec.cells}
    assert len(pairs) > 100
    for variant, task, seed in pairs:
        name = run_name(task=task, variant=variant, seed=seed, hparams={"optim.lr": 1e-3})
        assert len(name.rsplit(SEP, 1)[0]) <= 30, name
    for keys in (list(list_variants()), list_tasks()):
        assert len({abbreviate(k) for k in keys}) == len(keys)


# --------------------------------------------------------------------------- study: CLI refusals


def _study(argv: list[str], capsys) -> tuple[int, str, str]:
    from study.cli import main

    return run_main(argv, capsys, entry=main)


SPEC = str(Path(__file__).resolve().parents[2] / "ablations" / "rc_table2.yaml")


@pytest.mark.parametrize("argv, needle", [
    (["launch", SPEC, "--name", "../../x"], "--name '../../x': a study name is one directory"),
    (["launch", SPEC, "--name", "/etc/x"], "--name '/etc/x': a study name is one directory"),
    (["launch", SPEC, "--name", ".hidden"], "--name '.hidden'"),
    (["launch", SPEC, "--max-concurrent", "-1"], "--max-concurrent -1: must be >= 0"),
])
def test_launch_refuses_bad_names_and_concurrency(tmp_path: Path, capsys, argv, needle) -> None:
    code, _, err = _study([*argv, "--root", str(tmp_path / "studies")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("study launch: ") and needle in lines[0]
    assert not (tmp_path / "studies").exists() and not Path("/etc/x").exists()


def test_resume_refuses_negative_concurrency_before_touching_the_study(tmp_path: Path, capsys) -> None:
    d = make_study(tmp_path / "studies")
    before = {p: p.stat().st_mtime_ns for p in d.iterdir()}
    code, _, err = _study(["resume", str(d), "--max-concurrent", "-1"], capsys)
    lines = [ln for ln in err.strip().splitlines() if "mlflow.store" not in ln]  # (the store's creation)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("study resume: ")
    assert "--max-concurrent -1: must be >= 0" in lines[0]
    assert {p: p.stat().st_mtime_ns for p in d.iterdir()} == before  # nothing written, no lock taken


def test_the_dry_run_plans_with_the_given_concurrency(tmp_path: Path, capsys) -> None:
    argv = ["launch", SPEC, "--profile", "smoke", "--dry-run", "--root", str(tmp_path)]
    code, out, _ = _study([*argv, "--max-concurrent", "1"], capsys)
    assert code == 0 and "max concurrent 1;" in out and "at 1 concurrent" in out, out
    code, out, _ = _study(argv, capsys)  # the spec's: 0, as many as the CPUs allow
    assert code == 0 and "max concurrent auto;" in out, out


def make_study(root: Path, name: str = "rc_table2-smoke", *, statuses=None) -> Path:
    """A study directory as ``study launch`` leaves it: study.json + a real MLflow SQLite store."""
    from reports.synth import SynthRun, write_bulk_sql

    d = root / name
    d.mkdir(parents=True)
    statuses = statuses or {("onestep", 0): "finished", ("onestep", 1): "running",
                            ("content", 0): "finished", ("content", 1): "failed"}
    runs = [SynthRun(task="copy", variant=v, seed=s, status=st, n_seeds=2,
                     metrics={"best_selection_score": 0.5, "test.len15.seq_acc": 0.25}
                     if st == "finished" else {})
            for (v, s), st in statuses.items()]
    write_bulk_sql(d / "mlflow.db", name, runs, tables=["rc_table2"])
    meta = {"name": name, "spec_path": SPEC, "profile": "smoke", "only": {}, "raw": {},
            "resolved": {"name": "rc_table2", "grid": {"task": ["copy"], "variant": ["onestep", "content"]},
                         "hparams": {}, "search": None, "seeds": [0, 1]},
            "tracking_uri": f"sqlite:///{d / 'mlflow.db'}", "train_fn": "locattn.train:train"}
    (d / "study.json").write_text(json.dumps(meta))
    return d


def test_unknown_study_names_the_closest_one(tmp_path: Path, capsys) -> None:
    root = tmp_path / "studies"
    make_study(root)
    capsys.readouterr()  # MLflow's own lines while it created the store
    for cmd in ("status", "ui", "report", "resume"):
        code, _, err = _study([cmd, "rc_table2-smok", "--root", str(root)], capsys)
        assert code == 2, (cmd, err)
        assert err.strip().splitlines() == [
            f"study {cmd}: no study 'rc_table2-smok' (did you mean rc_table2-smoke?); "
            f"studies under {root.resolve()}: rc_table2-smoke"]


def test_every_option_of_every_subcommand_has_help() -> None:
    from study.cli import parser as study_parser
    from reports.cli import parser as reports_parser
    from locattn.cli import build_parser

    for top in (study_parser(), reports_parser(), build_parser()):
        for action in top._actions:
            for name, sub in getattr(action, "choices", None).items() if action.choices and \
                    isinstance(action.choices, dict) else []:
                for a in sub._actions:
                    if a.dest != "help":
                        assert a.help, f"{top.prog} {name}: {a.option_strings or a.dest} has no help"


# --------------------------------------------------------------------------- study status


def test_status_is_fast_marks_dead_driver_trials_stale_and_imports_nothing_heavy(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    root = tmp_path / "studies"
    d = make_study(root)
    code = ("import sys; from study.cli import main; rc = main(['status', 'rc_table2-smoke', "
            f"'--root', {str(root)!r}]); "
            "print('heavy:', sorted(m for m in ('torch', 'ray', 'mlflow') if m in sys.modules)); "
            "sys.exit(rc)")

    def status() -> str:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2])
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    # A driver that died (its PID no longer exists on this host): its running run is stale.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (d / "study.lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    out = status()
    lines = out.splitlines()
    assert lines[0].split() == ["cell", "done", "running", "stale", "failed", "missing"]
    assert lines[1].split()[:6] == ["task=copy,variant=onestep", "1", "0", "1", "0", "0"]
    assert "stale seeds [1]" in lines[1]
    assert lines[2].split()[:6] == ["task=copy,variant=content", "1", "0", "0", "1", "0"]
    assert lines[3].split() == ["total", "2", "0", "1", "1", "0"]
    assert f"driver PID {dead.pid} on {socket.gethostname()} is dead" in lines[4]
    # the resume command works when pasted: under --root, the study's folder, not its bare name
    resume = lines[4].split("resumable: ", 1)[1].split()
    assert resume[:2] == ["study", "resume"] and Path(resume[2]).resolve() == d.resolve(), lines[4]
    assert lines[-1] == "heavy: []"
    # then the per-cell numbers (study.recording.cell_results): the finished seed of each cell, 25 % at len15
    assert lines[7].split() == ["task=copy,variant=onestep", "len15", "25.0", "0/1"]
    assert lines[8].split() == ["task=copy,variant=content", "len15", "25.0", "0/1"]

    # A live driver: the same run counts as running.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (d / "study.lock").write_text(json.dumps({"pid": live.pid, "host": socket.gethostname()}))
        lines = status().splitlines()
        assert lines[1].split()[:6] == ["task=copy,variant=onestep", "1", "1", "0", "0", "0"]
        assert f"driver PID {live.pid} on {socket.gethostname()} is running" in lines[4]
    finally:
        live.kill()
        live.wait()
    # No lock holder at all (a driver empties the lock when it exits): stale too.
    (d / "study.lock").write_text("")
    assert status().splitlines()[1].split()[:6] == ["task=copy,variant=onestep", "1", "0", "1", "0", "0"]


# --------------------------------------------------------------------------- study ui


def test_ui_refuses_a_taken_or_invalid_port_in_one_line(tmp_path: Path, capsys) -> None:
    import socket

    root = tmp_path / "studies"
    make_study(root)
    capsys.readouterr()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, out, err = _study(["ui", "rc_table2-smoke", "--root", str(root), "--port", str(port)], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"study ui: port {port} on 127.0.0.1 is already in use (another MLflow UI?); pick a free "
        "one with --port"]
    for bad in ("0", "70000", "-5"):
        code, _, err = _study(["ui", "rc_table2-smoke", "--root", str(root), "--port", bad], capsys)
        assert code == 2 and err.strip().splitlines() == [f"study ui: --port {bad}: a TCP port is 1-65535"]


def test_ui_url_opens_the_study_experiment_on_its_trial_runs(tmp_path: Path) -> None:
    from urllib.parse import unquote

    from study.recording.ui import experiment_url

    d = make_study(tmp_path / "studies")
    url = experiment_url("http://127.0.0.1:5000", f"sqlite:///{d / 'mlflow.db'}", "rc_table2-smoke")
    assert url.startswith("http://127.0.0.1:5000/#/experiments/1/runs?")
    assert "searchFilter=tags.locattn.role = 'trial'" in unquote(url)
    assert "orderByKey=attributes.run_name" in url
    # A store it cannot read here (a server): the plain address.
    assert experiment_url("http://h:1", "http://server:5000", "x") == "http://h:1"


# --------------------------------------------------------------------------- study report, reports list


def test_study_report_is_reports_build_by_name(tmp_path: Path, capsys) -> None:
    from reports.cli import parser as reports_parser
    from study.cli import parser as study_parser

    def options(p, name):
        sub = next(a for a in p._actions if isinstance(a.choices, dict)).choices[name]
        return {s for a in sub._actions for s in a.option_strings}

    build = options(reports_parser(), "build") - {"--tracking-uri", "--study"}
    assert build <= options(study_parser(), "report")
    root = tmp_path / "studies"
    d = make_study(root)
    capsys.readouterr()
    out = tmp_path / "out"
    code, stdout, err = _study(["report", "rc_table2-smoke", "--root", str(root), "--table", "rc_table2",
                                "--format", "md,csv", "--compare", "--out", str(out)], capsys)
    assert code == 0, err
    paths = [ln for ln in stdout.splitlines() if ln.startswith(str(out))]  # then agreement lines
    assert paths == [str(out / "rc_table2.md"), str(out / "rc_table2.csv")]
    assert "paper" in (out / "rc_table2.md").read_text().lower()
    code, _, err = _study(["report", "rc_table2-smoke", "--root", str(root), "--table", "nosuch"], capsys)
    assert code == 2 and err.startswith("study report: ") and "rc_table2" in err
    assert not (d / "reports" / "nosuch.md").exists()


def test_reports_list_takes_the_study_directory(tmp_path: Path, capsys) -> None:
    from reports.cli import main as reports_main

    d = make_study(tmp_path / "studies")
    capsys.readouterr()
    code, out, err = run_main(["list", str(d)], capsys, entry=reports_main)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "study rc_table2-smoke declares: rc_table2"
    assert any(ln.startswith("* rc_table2 ") for ln in lines)
    assert any(ln.startswith("  rc_table4 ") for ln in lines)
    code, _, err = run_main(["list", str(tmp_path / "nope")], capsys, entry=reports_main)
    assert code == 2 and "does not exist" in err




def test_a_real_launch_names_runs_by_what_differs_and_prints_no_token_line(tmp_path: Path) -> None:
    """One tiny study through the real launcher, local Ray and SQLite MLflow store."""
    import sqlite3
    import subprocess
    import sys

    from tests.study_helpers import launch_tiny

    proc, root = launch_tiny(tmp_path, "hparams: {optim.lr: [1.0e-3]}\n", "--progress-seconds", "30")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Token authentication" not in proc.stdout + proc.stderr
    con = sqlite3.connect(root / "tiny" / "mlflow.db")
    names = sorted(n for (n,) in con.execute(
        "SELECT r.name FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        "WHERE t.key = 'locattn.role' AND t.value = 'trial'"))
    con.close()
    assert names == ["1step·copy·s0·lr=1e-3", "1step·copy·s1·lr=1e-3"]
    out = subprocess.run([sys.executable, "-m", "study.cli", "status", "tiny", "--root", str(root)],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2]).stdout
    lines = out.splitlines()
    driver = lines.index("no driver running")  # then the per-cell numbers (study.recording.cell_results)
    assert lines[driver - 1].split() == ["total", "2", "0", "0", "0", "0"]
    assert lines[driver + 3].split()[:2] == ["task=copy,variant=onestep", "len15"]
