"""The researcher's loop through the three command lines: flags that must be spelled out, "did you
mean" for paths, listings that name every exhibit, ``study runs``, a usable report of a search
study, ``study ui`` of a moved or a server study, the numbers on screen, a run per cell with its
seeds' medians, a signal in a launch's first second, a fast ``locattn --help``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from locattn.cli import main as locattn_main
from reports.cli import main as reports_main
from record.summary import RunCounts
from reports.synth import SynthRun, write_bulk_sql
from study.cli import main as study_main
from tests.locattn.test_cli import run_main

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- abbreviations


@pytest.mark.parametrize("main, argv, prefix, hint", [
    (locattn_main, ["train", "--task", "copy", "--variant", "onestep", "--epoch", "1"],
     "locattn train: error: unrecognized arguments: --epoch 1", "did you mean --epochs?"),
    (study_main, ["launch", "ablations/rc_table2.yaml", "--prof", "smoke", "--dry-r"],
     "study launch: error: unrecognized arguments: --prof smoke --dry-r",
     "did you mean --profile for --prof, --dry-run for --dry-r?"),
    (reports_main, ["build", "studies/x", "--tab", "rc_table2"],
     "reports build: error: unrecognized arguments: --tab rc_table2", "did you mean --table?"),
])
def test_abbreviated_flags_exit_2_naming_the_full_one(capsys, main, argv, prefix, hint) -> None:
    code, out, err = run_main(argv, capsys, main)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(prefix) and hint in line


def test_locattn_help_keeps_torch_off_and_train_help_still_lists_tasks() -> None:
    code = ("import sys, io, contextlib; from locattn.cli import main\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try: main(['--help'])\n"
            "    except SystemExit: pass\n"
            "print('torch' in sys.modules, 'train' in buf.getvalue())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.split() == ["False", "True"], proc.stderr
    code = code.replace("['--help']", "['train', '--help']").replace("'train' in", "'reverse_copy' in")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    # the task listing comes from the torch-free registry (locattn.registry): still no torch
    assert proc.stdout.split() == ["False", "True"], proc.stderr


def test_study_help_has_no_markup_and_lists_every_command(capsys) -> None:
    code, out, _ = run_main(["--help"], capsys, study_main)
    assert code == 0 and "``" not in out
    for cmd in ("launch", "resume", "status", "runs", "ui", "report"):
        assert cmd in out
    assert "study launch ablations/rc_table2.yaml --profile smoke" in out


# --------------------------------------------------------------------------- did you mean


def test_mistyped_spec_path_names_the_closest_spec(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    for typed, hint in (("ablations/rc_tabel2.yaml", "ablations/rc_table2.yaml"),
                        ("rc_table2", "ablations/rc_table2.yaml"),
                        ("ablations/serch_lr.yaml", "ablations/search_lr.yaml")):
        code, out, err = run_main(["launch", typed, "--dry-run", "--root", str(tmp_path)], capsys,
                                  study_main)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [
            f"study launch: {typed}: no such spec file (did you mean {hint}?)"]
    code, _, err = run_main(["launch", "zzzz/qqq.yaml", "--root", str(tmp_path)], capsys, study_main)
    assert code == 2 and err.strip() == "study launch: zzzz/qqq.yaml: no such spec file"
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("compressed", [False, True], ids=["mlflow.db", "mlflow.db.xz"])
def test_mistyped_report_folder_names_the_closest_study(tmp_path: Path, capsys, compressed) -> None:
    d = _search_study(tmp_path / "search_lr-smoke")
    if compressed:  # a committed record (results/record/<study>/) holds only mlflow.db.xz
        _compress(d / "mlflow.db")
    capsys.readouterr()
    typed = str(tmp_path / "search_lr-smok")
    for argv, prog in ((["build", typed], "reports build"), (["list", typed], "reports list")):
        code, out, err = run_main(argv, capsys, reports_main)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [
            f"{prog}: study directory {typed!r} does not exist (did you mean "
            f"{tmp_path / 'search_lr-smoke'}?) (expected studies/<name>/ containing mlflow.db or "
            f"mlflow.db.xz)"]


def _compress(db: Path) -> None:
    """Replace a SQLite store by its ``.xz`` archive, as a committed record holds it."""
    import lzma

    db.with_name(db.name + ".xz").write_bytes(lzma.compress(db.read_bytes()))
    db.unlink()


# --------------------------------------------------------------------------- listings


def test_reports_list_and_table_help_name_the_exhibits(capsys) -> None:
    code, out, _ = run_main(["list"], capsys, reports_main)
    assert code == 0
    ids = [ln.split()[0] for ln in out.splitlines()]
    assert "rc_table10" in ids and "dubois_fig9" in ids and "rc_table2" in ids
    assert ids == sorted(ids)
    code, out, _ = run_main(["build", "--help"], capsys, reports_main)
    assert code == 0 and "rc_table10" in out and "dubois_fig9" in out


def test_study_runs_maps_each_folder_to_its_run(tmp_path: Path, capsys) -> None:
    from tests.study.test_study_cli import make_study

    root = tmp_path / "studies"
    d = make_study(root)
    capsys.readouterr()
    trial = {"cell": "task=copy,variant=onestep", "task": "copy", "variant": "onestep",
             "hparams": {"optim.lr": 0.001}, "seeds": [0, 1]}
    for key, seed, files in (("aaaa000011112222", 1, {"checkpoint/meta.json": {"epoch": 3}}),
                             ("bbbb000011112222", 0, {"result.json": {}}),
                             ("cccc000011112222", 2, {})):
        run = d / "runs" / key
        (run / "checkpoint").mkdir(parents=True)
        (run / "trial.json").write_text(json.dumps({"trial": trial, "seed": seed, "search": {}}))
        for name, body in files.items():
            (run / name).write_text(json.dumps(body))
    (d / "runs" / "dddd000011112222").mkdir()  # a folder whose trial.json was never written
    code, out, err = run_main(["runs", "rc_table2-smoke", "--root", str(root)], capsys, study_main)
    assert code == 0, err
    rows = [ln.split("  ") for ln in out.splitlines()]
    rows = [[c.strip() for c in r if c.strip()] for r in rows]
    assert rows[0] == ["folder", "state", "run", "cell"]
    assert rows[1] == ["dddd000011112222", "started", "?", "?"]
    assert rows[2] == ["bbbb000011112222", "finished", "1step·copy·s0·lr=1e-3",
                       "task=copy,variant=onestep"]
    assert rows[3] == ["aaaa000011112222", "epoch 3", "1step·copy·s1·lr=1e-3",
                       "task=copy,variant=onestep"]
    assert rows[4][:2] == ["cccc000011112222", "started"]
    assert rows[5] == [f"4 run folder(s) under {d / 'runs'}"]


# --------------------------------------------------------------------------- search study report


def _search_study(d: Path) -> Path:
    """A search study's store: two learning rates for OneStep (the first wins on dev), one for
    Mono, three seeds each, and no table declared (search_lr's ``tables: []``)."""
    runs = []
    for variant, points in (("onestep", {1e-3: (0.9, 0.95, 1.0), 3e-4: (0.5, 0.6, 0.4)}),
                            ("mono", {1e-3: (0.2, 0.3, 0.1)})):
        for lr, devs in points.items():
            for seed, dev in enumerate(devs):
                runs.append(SynthRun(task="copy", variant=variant, seed=seed,
                                     hparams={"optim.lr": lr}, n_seeds=3,
                                     metrics={"best_selection_score": dev, "best_epoch": 3,
                                              "test.len15.seq_acc": dev, "test.len100.seq_acc": dev / 2}))
    d.mkdir(parents=True)
    write_bulk_sql(d / "mlflow.db", d.name, runs, tables=[])
    meta = {"name": d.name, "spec_path": str(ROOT / "ablations/search_lr.yaml"), "profile": "smoke",
            "only": {}, "raw": {}, "resolved": {}, "tracking_uri": f"sqlite:///{d / 'mlflow.db'}",
            "train_fn": "locattn.train:train"}
    (d / "study.json").write_text(json.dumps(meta))
    return d


def test_study_report_of_a_search_study_gives_best_hparams_and_medians(tmp_path: Path, capsys) -> None:
    root = tmp_path / "studies"
    d = _search_study(root / "search_lr-smoke")
    capsys.readouterr()
    code, out, err = run_main(["report", "search_lr-smoke", "--root", str(root)], capsys, study_main)
    assert code == 0, err
    assert out.split() == [str(d / "reports" / f"summary.{ext}") for ext in ("md", "tex", "csv")]
    md = (d / "reports" / "summary.md").read_text()
    table = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert table[0] == "| Cell | Chosen hparams | Dev % | Points | len15.seq_acc | len100.seq_acc |"
    assert table[1] == "| task=copy,variant=onestep | lr=0.001 | 95.0 | 2 | 95.0 (3/3) | 47.5 (0/3) |"
    assert table[2] == "| task=copy,variant=mono | lr=0.001 | 20.0 | 1 | 20.0 (0/3) | 10.0 (0/3) |"
    csv = (d / "reports" / "summary.csv").read_text().splitlines()
    assert csv[4].startswith("cell,hparams,dev,n_points,n,n_expected,test.len15.seq_acc.median")
    assert ",95.0,2,3,3,95.0,3,47.5,0," in csv[5]  # then the intervals (tests/reports/test_reports_intervals.py)
    tex = (d / "reports" / "summary.tex").read_text()
    assert r"task=copy,variant=onestep & lr=0.001 & 95.0 & 2 & 95.0 (3/3) & 47.5 (0/3) \\" in tex


def test_study_report_of_a_moved_compressed_record_reads_the_folders_own_store(tmp_path: Path,
                                                                                capsys) -> None:
    # as results/record/<study>/ copied elsewhere: study.json names the store where the study was
    # launched (gone), the folder holds mlflow.db.xz
    d = _search_study(tmp_path / "copy" / "search_lr-smoke")
    old = tmp_path / "studies" / "search_lr-smoke" / "mlflow.db"
    meta = json.loads((d / "study.json").read_text())
    (d / "study.json").write_text(json.dumps({**meta, "tracking_uri": f"sqlite:///{old}"}))
    _compress(d / "mlflow.db")
    capsys.readouterr()
    code, out, err = run_main(["report", str(d), "--format", "md"], capsys, study_main)
    assert code == 0, err
    assert out.split() == [str(d / "reports" / "summary.md")]
    assert "| task=copy,variant=onestep | lr=0.001 | 95.0 | 2 |" in (d / "reports" / "summary.md").read_text()
    assert not (tmp_path / "studies").exists()  # nothing created at the stale path


def test_reports_build_from_a_tracking_uri_defaults_its_out_folder(tmp_path: Path, capsys,
                                                                    monkeypatch) -> None:
    d = _search_study(tmp_path / "store" / "search_lr-smoke")
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["build", "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}",
                               "--study", "search_lr-smoke", "--format", "md"], capsys, reports_main)
    assert code == 0, err
    assert out.split() == ["search_lr-smoke-reports/summary.md"]
    assert (tmp_path / "search_lr-smoke-reports" / "summary.md").is_file()
    code, _, err = run_main(["build", "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}"], capsys,
                            reports_main)
    assert code == 2 and err.strip() == ("reports build: --tracking-uri needs --study NAME (the "
                                         "study's MLflow experiment)")


# --------------------------------------------------------------------------- Optuna names


def test_optuna_studies_are_named_by_cell() -> None:
    from study.plan.search import group_study_name

    assert group_study_name("search_lr-smoke", {"cell": "task=copy,variant=onestep", "hparams": {}}) \
        == "search_lr-smoke · task=copy,variant=onestep"
    assert group_study_name("s", {"cell": "task=copy,variant=mono", "hparams": {"optim.lr": 0.001}}) \
        == "s · task=copy,variant=mono · optim.lr=0.001"


# --------------------------------------------------------------------------- study ui


def _moved_study(root: Path, old: Path, name: str = "rc_table2-smoke") -> Path:
    """A study folder whose study.json still names the store where it was launched
    (``<old>/<name>/mlflow.db``; that folder exists, empty), as a committed record does."""
    from tests.study.test_study_cli import make_study

    d = make_study(root, name)
    (old / name).mkdir(parents=True)
    meta = json.loads((d / "study.json").read_text())
    meta["tracking_uri"] = f"sqlite:///{old / name / 'mlflow.db'}"
    (d / "study.json").write_text(json.dumps(meta))
    return d


def test_ui_of_a_moved_study_serves_its_own_store_prints_the_url_when_ready_and_stops_on_ctrl_c(
        tmp_path: Path) -> None:
    import os
    import signal
    import socket
    import time
    import urllib.request

    root = tmp_path / "studies"
    _moved_study(root, tmp_path / "old")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = tmp_path / "err.txt"
    with err.open("w") as errf:
        ui = subprocess.Popen([sys.executable, "-m", "study.cli", "ui", "rc_table2-smoke", "--root",
                               str(root), "--port", str(port), "--host", "0.0.0.0"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=errf, text=True, start_new_session=True)
    try:
        first = ui.stdout.readline()  # printed only once /health answers
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
        assert first.startswith(f"MLflow UI for study 'rc_table2-smoke': http://127.0.0.1:{port}/#/"
                                "experiments/1/runs?"), first  # 0.0.0.0 is no address to browse
        base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
        with urllib.request.urlopen(f"{base}/experiments/get-by-name?experiment_name=rc_table2-smoke",
                                    timeout=5) as r:
            assert json.load(r)["experiment"]["name"] == "rc_table2-smoke"  # the folder's own store
        assert list((tmp_path / "old").rglob("*")) == [tmp_path / "old" / "rc_table2-smoke"]
        t0 = time.monotonic()
        os.kill(ui.pid, signal.SIGINT)  # Ctrl-C
        assert ui.wait(timeout=60) == 0
        stopped = time.monotonic() - t0
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
        assert stopped < 30, stopped
        log = err.read_text()
        assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]
        assert "study ui: stopping the MLflow server" in log
    finally:
        try:
            os.killpg(ui.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        ui.wait()


def test_ui_of_a_server_study_prints_the_server_and_of_a_lost_store_refuses(tmp_path: Path,
                                                                              capsys) -> None:
    from tests.study.test_study_cli import make_study

    root = tmp_path / "studies"
    d = make_study(root, "srv")
    meta = json.loads((d / "study.json").read_text())
    (d / "study.json").write_text(json.dumps({**meta, "tracking_uri": "http://u:pw@10.1.2.3:5000"}))
    capsys.readouterr()
    code, out, err = run_main(["ui", "srv", "--root", str(root)], capsys, study_main)
    assert code == 0 and err == ""
    assert out.strip() == ("study 'srv' records to the MLflow server http://10.1.2.3:5000: open it "
                           "there (experiment 'srv'); no local server is needed")
    (d / "mlflow.db").unlink()
    (d / "study.json").write_text(json.dumps({**meta, "tracking_uri": "sqlite:////nonexistent/x/mlflow.db"}))
    code, out, err = run_main(["ui", "srv", "--root", str(root)], capsys, study_main)
    assert code == 2 and out == ""
    assert err.strip() == (f"study ui: no MLflow store at /nonexistent/x/mlflow.db (saved in "
                           f"{d.resolve() / 'study.json'}) and none in the study folder: nothing to show")
    assert not Path("/nonexistent").exists()


def test_the_end_of_a_launch_points_a_server_study_to_its_server(tmp_path: Path) -> None:
    from study.recording.study_store import browse_advice

    # a study on an MLflow server: its URL (``study ui`` there only says to open it)
    assert browse_advice("http://127.0.0.1:5123", tmp_path, "rc_table2-smoke") == \
        "browse it at http://127.0.0.1:5123 (experiment 'rc_table2-smoke')"
    assert browse_advice("https://mlflow.lab.org/", tmp_path, "s") == \
        "browse it at https://mlflow.lab.org/ (experiment 's')"
    for local in (f"sqlite:///{tmp_path / 'mlflow.db'}", "postgresql://u@127.0.0.1:5432/mlflow"):
        assert browse_advice(local, tmp_path, "s") == f"`study ui {tmp_path}` to browse"
    # the last line of a launch says it: the README's server launch checks it end to end
    # (tests/docs/test_readme_commands.py)


# --------------------------------------------------------------------------- numbers on screen


def test_status_of_a_committed_record_counts_its_runs_and_shows_each_cells_number(capsys) -> None:
    record = ROOT / "results" / "record" / "rc_table2-quick-v2"
    saved = json.loads((record / "study.json").read_text())["tracking_uri"]
    assert saved != f"sqlite:///{record / 'mlflow.db'}"  # it moved: study.json names its old path
    code, out, err = run_main(["status", str(record)], capsys, study_main)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[lines.index("no driver running") - 1].split() == ["total", "144", "0", "0", "0", "0"]
    table = lines[lines.index("no driver running") + 2:]
    assert table[0].split() == ["cell", "split", "median", "%", "solved"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in table[1:-1]}
    assert len(rows) == 48
    assert rows["task=copy,variant=relative"] == ["len100", "100.0", "3/3"]
    assert rows["task=inv_recopy,variant=mono"] == ["len100", "70.8", "0/3"]  # README: 97.8/93.8/70.8
    assert rows["task=lookup,variant=content"][0] == "longer_seen_5"
    # the pointer names the folder: a name alone is looked up under studies/ (the test runs from
    # the repository root or elsewhere, so either form of the folder is right)
    assert table[-1].endswith(("Full tables: study report results/record/rc_table2-quick-v2",
                               f"Full tables: study report {record}"))


def test_launch_end_and_status_of_a_search_study_show_the_chosen_point(tmp_path: Path, capsys) -> None:
    from study.cli import show_results
    from study.driver.summary import DryRunPlan, StudySummary

    d = _search_study(tmp_path / "search_lr-smoke")
    capsys.readouterr()
    show_results(StudySummary(name="search_lr-smoke", study_dir=d, tracking_uri="", trials=0, errors=0, skipped=0,
                              wall_seconds=0.0, fit_seconds=0.0, interrupted=False, time_limit=False,
                              runs=RunCounts(expected=6, finished=6, failed=0, unfinished=0)))
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split() for ln in lines[:3]] == [
        ["cell", "split", "median", "%", "solved", "dev", "%", "hparams"],
        ["task=copy,variant=onestep", "len100", "47.5", "0/3", "95.0", "lr=0.001"],
        ["task=copy,variant=mono", "len100", "10.0", "0/3", "20.0", "lr=0.001"]]
    assert "hparams chosen by median dev score" in lines[3]
    assert lines[3].endswith(f"Full tables: study report {d}")  # not under ./studies: its folder
    show_results(DryRunPlan(name="search_lr-smoke", study_dir=d, n_trials=2, n_runs=6, data_problems=(),
                            size_warnings=(), disk_short=False))
    assert capsys.readouterr().out == ""


# --------------------------------------------------------------------------- cell runs


def _cell_runs(db: Path, study: str) -> dict[str, object]:
    """cell id -> its MLflow run (role ``cell``)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name(study).experiment_id
    return {r.data.tags["locattn.cell"]: r for r in client.search_runs(
        [exp], filter_string="tags.`locattn.role` = 'cell'")}


def test_a_resumed_record_gets_a_run_per_cell_with_its_chosen_points_medians(tmp_path: Path) -> None:
    """The writer opening a record without cell runs (a resume of an older study) writes one
    run per cell: the median over seeds of the chosen point's finals
    (the point with the best median dev score), its hparams and seed count; opening again
    writes no second cell run; reports and the run counts see only the trial runs."""
    from record.writer import RecordWriter
    from reports.runset import read_runs
    from study.recording.naming import cell_name

    lr1, lr3 = {"optim.lr": 1e-3}, {"optim.lr": 3e-3}
    runs = [SynthRun(task="copy", variant="onestep", seed=s, hparams=lr1, n_seeds=3,
                     metrics={"best_selection_score": dev, "test.len100.seq_acc": acc})
            for s, dev, acc in ((0, 0.9, 0.5), (1, 0.8, 0.6), (2, 0.7, 0.1))]
    runs += [SynthRun(task="copy", variant="onestep", seed=s, hparams=lr3, n_seeds=3,
                      metrics={"best_selection_score": 0.2, "test.len100.seq_acc": 0.9}) for s in (0, 1, 2)]
    runs += [SynthRun(task="reverse_copy", variant="onestep_no_step2", seed=s, hparams=lr1, n_seeds=3,
                      metrics={"best_selection_score": 0.5, "test.len100.seq_acc": v})
             for s, v in ((0, 0.25), (1, 0.75))]
    runs.append(SynthRun(task="reverse_copy", variant="onestep_no_step2", seed=2, hparams=lr1,
                         n_seeds=3, status="failed"))
    db = tmp_path / "mlflow.db"
    write_bulk_sql(db, "s", runs, tables=["rc_table2"])
    uri = f"sqlite:///{db}"

    def writer() -> RecordWriter:
        return RecordWriter(tracking_uri=uri, study="s", artifact_location=None,
                            parent_tags={"locattn.n_runs": "9"}, cell_name=cell_name).open()

    w = writer()
    cells = _cell_runs(db, "s")
    assert sorted(cells) == ["task=copy,variant=onestep", "task=reverse_copy,variant=onestep_no_step2"]
    one = cells["task=copy,variant=onestep"]
    assert one.info.run_name == "1step·copy"
    assert one.data.metrics == {"best_selection_score": 0.8, "test.len100.seq_acc": 0.5, "seeds_finished": 3.0,
                                "len100 pct": 50.0, "solved": 0.0}
    assert json.loads(one.data.tags["locattn.hparams"]) == lr1
    assert "mlflow.parentRunId" not in one.data.tags  # top-level: a row of its own in the UI
    two = cells["task=reverse_copy,variant=onestep_no_step2"]
    assert two.info.run_name == "-step2·rev-copy"
    assert two.data.metrics == {"best_selection_score": 0.5, "test.len100.seq_acc": 0.5, "seeds_finished": 2.0,
                                "len100 pct": 50.0, "solved": 0.0}
    assert w.run_counts(9) == RunCounts(expected=9, finished=8, failed=1, unfinished=0)
    w.finish_parent(interrupted=False)
    writer()  # a second resume: the same two cell runs, the same numbers
    again = _cell_runs(db, "s")
    assert {c: r.info.run_id for c, r in again.items()} == {c: r.info.run_id for c, r in cells.items()}
    assert again["task=copy,variant=onestep"].data.metrics == one.data.metrics
    rs = read_runs(uri, "s")
    assert set(rs.runs["role"].to_list()) == {"study", "trial"} and rs.runs.height == 2 + 9
    assert not set(rs.metrics["run_id"].to_list()) & {r.info.run_id for r in cells.values()}


def test_a_real_study_nests_its_seeds_under_a_cell_run_with_their_medians(tmp_path: Path, capsys) -> None:
    """One tiny study through the real launcher: each trial run's parent is its cell's run,
    whose metrics are the medians over its 2 seeds; status counts 2 runs; reports see no cell
    run."""
    from mlflow.tracking import MlflowClient

    from reports.runset import read_runs
    from tests.study_helpers import launch_tiny

    proc, root = launch_tiny(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    db = root / "tiny" / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("tiny").experiment_id
    by_role: dict[str, list] = {}
    for r in client.search_runs([exp]):
        by_role.setdefault(r.data.tags["locattn.role"], []).append(r)
    assert len(by_role["study"]) == 1
    (cell,), trials = by_role["cell"], by_role["trial"]
    assert cell.info.run_name == "1step·copy" and cell.info.status == "FINISHED"
    assert "mlflow.parentRunId" not in cell.data.tags and cell.data.tags["locattn.study"] == "tiny"
    assert sorted(t.info.run_name for t in trials) == ["1step·copy·s0", "1step·copy·s1"]
    assert {t.data.tags["mlflow.parentRunId"] for t in trials} == {cell.info.run_id}
    finals = [k for k in trials[0].data.metrics if k == "best_selection_score" or k.startswith("test.")]
    assert "test.len15.seq_acc" in finals
    for key in finals:
        values = sorted(t.data.metrics[key] for t in trials)
        assert cell.data.metrics[key] == pytest.approx(sum(values) / 2), key
    assert cell.data.metrics["seeds_finished"] == 2.0
    code, out, err = run_main(["status", "tiny", "--root", str(root)], capsys, study_main)
    lines = out.splitlines()
    assert code == 0 and lines[lines.index("no driver running") - 1].split() == \
        ["total", "2", "0", "0", "0", "0"]
    assert set(read_runs(f"sqlite:///{db}", "tiny").runs["role"].to_list()) == {"study", "trial"}


def test_the_ui_view_of_a_record_without_cell_runs_groups_its_seeds_by_cell() -> None:
    """The committed 144-run record predates cell runs: its view groups the trial runs by the
    locattn.cell tag and shows each cell's headline split (len100 for the probing tasks,
    longer_seen_5 for Lookup) beside its selection score, under the name the record holds it by
    (best_dev_score), since MLflow's UI shows the stored names."""
    from study.recording.ui import view_state
    from study.recording.study_store import current_store

    record = ROOT / "results" / "record" / "rc_table2-quick-v2"
    meta = json.loads((record / "study.json").read_text())
    state = view_state(current_store(meta["tracking_uri"], record), meta["name"])
    assert state["searchFilter"] == "tags.locattn.role = 'trial'"
    assert state["groupBy"] == {"aggregateFunction": "average",
                                "groupByKeys": [{"mode": "tag", "groupByData": "locattn.cell"}]}
    assert state["selectedColumns"] == ["metrics.`test.len100.seq_acc`",
                                        "metrics.`test.longer_seen_5.seq_acc`", "metrics.`best_dev_score`"]


def test_the_progress_line_names_the_running_runs_on_a_terminal_only() -> None:
    """On a terminal a second line gives each running run's name, epoch and dev score; a pipe
    or a log gets the one progress line as before."""
    import io
    from types import SimpleNamespace

    from study.recording.progress import ProgressLine
    from study.trial.trainable import TrialDescriptor

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def trial(i: int, variant: str, status: str) -> SimpleNamespace:
        desc = TrialDescriptor(study="s", study_dir="/tmp/s", cell=f"task=copy,variant={variant}", task="copy",
                               variant=variant, overrides={}, hparams={}, seeds=(i,), cpus=1,
                               metric="best_selection_score")
        return SimpleNamespace(trial_id=f"t{i}", status=status, config={"trial": desc.to_dict()})

    trials = [trial(0, "onestep", "RUNNING"), trial(1, "onestep_no_step2", "RUNNING"),
              trial(2, "mono", "PENDING")]
    counts = lambda ts: {"done": 0, "running": 2, "failed": 0, "pending": 1}  # noqa: E731
    for out, expect_second in ((Terminal(), True), (io.StringIO(), False)):
        line = ProgressLine(study="s", total_trials=3, epochs_per_trial=10, counts=counts,
                            seconds=0.0, out=out)
        line.on_trial_result(0, trials, trials[0], {"kind": "epoch", "seed": 0, "epoch": 3,
                                                     "dev_score": 0.4521})
        line.on_trial_result(0, trials, trials[1], {"kind": "epoch", "seed": 1, "epoch": 7})
        lines = out.getvalue().splitlines()
        assert lines[0].startswith("[study s] 0/3 done, 2 running, 0 failed, 1 pending")
        if expect_second:
            assert lines[-1] == "  running: 1step·copy·s0 ep 3/10 dev 45.2% | -step2·copy·s1 ep 7/10"
            assert len(lines) == 4  # two results: a progress line and a running line each
        else:
            assert len(lines) == 2 and not any("running:" in ln for ln in lines)


# --------------------------------------------------------------------------- early signals


def _catches(pid: int, signum: int) -> bool:
    """Whether the process catches ``signum`` (the ``SigCgt`` mask of /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), 16)
    return bool(mask >> (signum - 1) & 1)


def _loaded(pid: int, *names: str) -> list[str]:
    """Which of ``names`` appear in the process's mapped files (an extension module loaded)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return []
    return [n for n in names if n in maps]


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc/<pid>/status")
@pytest.mark.parametrize("signum", [2, 15], ids=["SIGINT", "SIGTERM"])
def test_a_signal_in_the_first_second_of_a_launch_exits_130_in_one_line(tmp_path: Path,
                                                                         signum: int) -> None:
    import os
    import signal
    import time

    bindir = Path(sys.executable).parent
    root = tmp_path / "studies"
    cmd = [str(bindir / "study"), "launch", str(ROOT / "ablations/rc_table2.yaml"), "--profile",
           "smoke", "--root", str(root)]
    # The interpreter catches SIGINT from its start, SIGTERM never: a caught SIGTERM means
    # study.cli's first handler is in. Signal as soon as it is, while numpy, polars and the
    # rest still load (their extension modules are not mapped yet).
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        t0 = time.monotonic()
        while not _catches(proc.pid, signal.SIGTERM) and proc.poll() is None \
                and time.monotonic() - t0 < 120:
            time.sleep(0.001)
        loaded = _loaded(proc.pid, "numpy", "polars", "torch", "_raylet")
        assert loaded == [], f"the handler came only after {loaded} had loaded"
        os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    name = signal.Signals(signum).name
    assert (proc.returncode, out, err) == (
        130, "", f"study: interrupted ({name}) while starting; nothing was done\n")
    assert not root.exists()  # nothing created

    # At once, with no wait: the signal may come before the interpreter runs (its default
    # action ends the process: -15), else the handler takes it. Never a traceback. (A SIGINT
    # there can also land between the interpreter's own handler and study.cli's, during the
    # interpreter's site imports: a KeyboardInterrupt no code of ours can catch.)
    if signum == signal.SIGTERM:
        proc = subprocess.run(f"exec {' '.join(cmd)} & kill -TERM $!; wait $!", shell=True,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode in (128 + 15, 130), (proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and not root.exists()


def test_the_report_pointer_names_what_study_report_will_find(tmp_path: Path, monkeypatch) -> None:
    from study.commands import report_target

    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies" / "x").mkdir(parents=True)
    (tmp_path / "elsewhere" / "x").mkdir(parents=True)
    assert report_target(tmp_path / "studies" / "x", "x") == "x"
    assert report_target(tmp_path / "elsewhere" / "x", "x") == "elsewhere/x"
    assert report_target(Path("/nonexistent/x"), "x") == "/nonexistent/x"
