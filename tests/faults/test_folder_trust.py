"""Every folder a study receives is data, never code (issue 45): a study folder, an export
folder or a run folder from elsewhere is read, and nothing in it is imported or called, no path
in it reaches outside it, and a bad one is refused in one line. Real folders, real commands
(``study`` and ``python -m locattn.offline`` in subprocesses, run from inside the folder).
The ones that need a trained worker folder or a Ray are in the ``faults`` tier; the kinds are
replayed together by ``benchmarks/bench_bad_inputs.py`` (the ``bench`` tier)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback; before ray is imported
pytest.importorskip("ray")
pytest.importorskip("mlflow")

from record.layout import META_FILE  # noqa: E402
from study.spec import SpecError  # noqa: E402
from study.cli import main as study  # noqa: E402
from tests.study.test_study import SMOKE, write_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: A module that leaves a marker file when anything imports it.
EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\ndef train(*a, **k):\n    pass\n"


def plant(folder: Path, name: str = "evil_mod") -> Path:
    """``folder/<name>.py``, which writes ``folder/<name>.ran`` when imported; the marker's path."""
    marker = folder / f"{name}.ran"
    (folder / f"{name}.py").write_text(EVIL.format(marker=str(marker)))
    return marker


def run_in(cwd: Path, *argv: str, timeout: float = 300, capped: bool = False) -> subprocess.CompletedProcess:
    """A command run from inside ``cwd`` (as a user who cd'ed into a folder they were sent).
    ``capped``: its files are capped at :data:`FILE_SIZE_CAP` (the commands that copy what a
    folder holds; not the ones that start Ray, whose object store is a larger file in /dev/shm and
    which a cap stops at start-up)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=cap_file_size if capped else None)


#: Largest file a command under test may write: the import tests link ``/dev/zero`` and make
#: sparse files, so a regression would otherwise fill the shared disk (it dies by SIGXFSZ).
FILE_SIZE_CAP = 2 << 30


def cap_file_size() -> None:
    """``preexec_fn`` of :func:`run_in`: cap every file the child writes at :data:`FILE_SIZE_CAP`."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_CAP, FILE_SIZE_CAP))


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


@pytest.fixture
def exported(tmp_path: Path, capsys) -> tuple[Path, Path]:
    """(study folder, export folder) of a one-run grid study nothing ran in."""
    spec = write_spec(tmp_path, "trust", grid={"task": ["copy"], "variant": ["onestep"]}, overrides=SMOKE)
    root, export = tmp_path / "s", tmp_path / "export"
    assert study(["export", str(spec), "--root", str(root), "--out", str(export)]) == 0
    capsys.readouterr()
    return root / "trust-smoke", export


STUDY = ("-c", "import sys; from study.cli import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.parametrize("command", [("resume", "."), ("status", "."), ("migrate", ".")])
def test_a_study_json_naming_a_trainer_is_refused_and_nothing_beside_it_runs(exported, command) -> None:
    study_dir, _ = exported
    meta = json.loads((study_dir / META_FILE).read_text())
    (study_dir / META_FILE).write_text(json.dumps({**meta, "format": 1, "train_fn": "evil_mod:train"}))
    marker = plant(study_dir)
    done = run_in(study_dir, *STUDY, *command)
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_line(done)
    assert "train_fn 'evil_mod:train'" in line and "nothing of it was imported" in line
    assert not marker.exists()


def test_a_study_json_with_the_former_default_trainer_still_reads_and_migrate_drops_it(exported,
                                                                                       capsys) -> None:
    study_dir, _ = exported
    meta = json.loads((study_dir / META_FILE).read_text())
    assert "train_fn" not in meta  # a new study names no trainer
    (study_dir / META_FILE).write_text(json.dumps({**meta, "format": 1, "train_fn": "locattn.train:train"}))
    assert study(["status", str(study_dir)]) == 0
    assert study(["migrate", str(study_dir)]) == 0
    assert "train_fn dropped" in capsys.readouterr().out
    assert "train_fn" not in json.loads((study_dir / META_FILE).read_text())


def test_a_manifest_naming_a_trainer_is_refused_and_nothing_beside_it_runs(exported, tmp_path: Path) -> None:
    _, export = exported
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["trials"][0]["trial"]["train_fn"] = "evil_mod:train"
    (export / "manifest.json").write_text(json.dumps(manifest))
    marker = plant(export)
    done = run_in(export, "-m", "locattn.offline", ".", "--out", str(tmp_path / "R"), "--device", "cpu")
    assert done.returncode not in (0, 75), done.stdout[-2000:]
    line = one_line(done)
    assert "train_fn 'evil_mod:train'" in line and "nothing of it was imported" in line
    assert not marker.exists() and not (tmp_path / "R").exists()


#: A driver that starts its private Ray as a study does and asks a worker what it can import.
PROBE = ("import importlib.util, ray\n"
         "from study.driver.process import init_ray\n"
         "init_ray()\n"
         "try:\n"
         "    probe = ray.remote(lambda: [importlib.util.find_spec(m) is not None for m in ('evil_mod', 'locattn')])\n"
         "    print('found', *ray.get(probe.remote()))\n"
         "finally:\n"
         "    ray.shutdown()\n")


@pytest.mark.faults
def test_the_drivers_working_directory_is_not_on_the_workers_path(tmp_path: Path) -> None:
    folder = tmp_path / "sent"
    folder.mkdir()
    marker = plant(folder)
    done = run_in(folder, "-c", PROBE)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "found False True" in done.stdout, done.stdout[-2000:]  # locattn from the code, evil_mod nowhere
    assert not marker.exists()


def worker(export: Path, runs: Path) -> subprocess.CompletedProcess:
    return run_in(export, "-m", "locattn.offline", str(export), "--out", str(runs), "--device", "cpu")


def tamper(export: Path, **run: object) -> dict:
    """The export's manifest with its first run's entries replaced by ``run``; the manifest."""
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["trials"][0]["runs"][0].update(run)
    (export / "manifest.json").write_text(json.dumps(manifest))
    return manifest


@pytest.mark.parametrize("key", ["../victim", "/tmp", "0123456789abcdeg", "0123456789ABCDEF", 7])
def test_a_manifest_run_key_outside_its_format_is_refused_before_anything_is_written(exported, tmp_path: Path,
                                                                                    key) -> None:
    _, export = exported
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "important.txt").write_text("keep me")
    manifest = tamper(export, key=key)
    manifest["drop_finished"] = ["important.txt"]
    (export / "manifest.json").write_text(json.dumps(manifest))
    runs = tmp_path / "R"
    done = worker(export, runs)
    assert done.returncode not in (0, 75)
    line = one_line(done)
    assert "trials[0].runs[0].key" in line and "16 hex digits" in line
    assert (victim / "important.txt").read_text() == "keep me"
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink"])
def test_a_seed_folder_outside_the_export_is_refused_and_nothing_of_it_copied(exported, tmp_path: Path,
                                                                              where) -> None:
    _, export = exported
    secret = tmp_path / "home" / ".ssh"
    secret.mkdir(parents=True)
    (secret / "id_rsa").write_text("PRIVATE KEY")
    if where == "absolute":
        folder = str(secret)
    elif where == "dotdot":
        folder = "../home/.ssh"
    else:
        (export / "runs" / "link").symlink_to(secret)
        folder = "runs/link"
    manifest = tamper(export, folder=folder)
    runs = tmp_path / "R"
    done = worker(export, runs)
    assert done.returncode not in (0, 75)
    assert "trials[0].runs[0].folder" in one_line(done) and "is outside" in one_line(done)
    assert not list(runs.rglob("id_rsa")) if runs.exists() else True
    assert manifest["trials"][0]["runs"][0]["key"]


@pytest.mark.parametrize("kind", ["file", "dir", "dev"])
def test_a_link_inside_a_seed_folder_is_refused_in_one_line_and_nothing_left(exported, tmp_path: Path,
                                                                              kind) -> None:
    _, export = exported
    manifest = json.loads((export / "manifest.json").read_text())
    run = manifest["trials"][0]["runs"][0]
    seed = export / run["folder"]
    secret = tmp_path / "secret.txt"
    secret.write_text("PRIVATE")
    target = {"file": secret, "dir": Path("/etc"), "dev": Path("/dev/zero")}[kind]
    (seed / "innocent").symlink_to(target)
    runs = tmp_path / "R"
    done = worker(export, runs)
    assert done.returncode not in (0, 75)
    line = one_line(done)
    assert "innocent is a symlink" in line
    assert sorted(p.name for p in runs.iterdir()) == []  # no run folder, no staging folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path, Path]:
    """(study root, study folder, a finished worker's --out, one stopped by its deadline),
    the worker run once for the module: a one-run study of 40 epochs."""
    import shutil

    base = tmp_path_factory.mktemp("trained")
    spec = write_spec(base, "imp", grid={"task": ["copy"], "variant": ["onestep"]},
                      overrides={**SMOKE, "optim.epochs": 40, "task.train_size": 200})
    root, export = base / "s", base / "export"
    assert study(["export", str(spec), "--root", str(root), "--out", str(export)]) == 0
    stopped = base / "stopped"
    done = run_in(export, "-m", "locattn.offline", str(export), "--out", str(stopped), "--device", "cpu",
                  "--deadline", "2")
    assert done.returncode == 75, done.stderr[-3000:]
    further = base / "further"
    shutil.copytree(stopped, further, symlinks=True)
    again = run_in(export, "-m", "locattn.offline", str(export), "--out", str(further), "--device", "cpu",
                   "--deadline", "2")
    assert again.returncode == 75, again.stderr[-3000:]
    return root, root / "imp-smoke", stopped, further


def imported(root: Path, runs: Path) -> subprocess.CompletedProcess:
    return run_in(root, *STUDY, "import", "imp-smoke", str(runs), "--root", str(root), capped=True)


def tampered(trained, tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the stopped worker's --out, its one run folder)."""
    import shutil

    runs = tmp_path / "R"
    shutil.copytree(trained[2], runs, symlinks=True)
    (folder,) = [p for p in runs.iterdir() if p.is_dir()]
    return runs, folder


@pytest.mark.faults
@pytest.mark.parametrize("kind", ["dir_link", "file_link", "dev_zero", "fifo", "sparse", "run_link"])
def test_import_copies_only_regular_files_and_names_the_offender_in_one_line(trained, tmp_path: Path,
                                                                              kind) -> None:
    root, study_dir, _, _ = trained
    runs, folder = tampered(trained, tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("PRIVATE")
    offender = folder / "checkpoint" / "extra"
    if kind == "dir_link":
        offender.symlink_to("/etc")
    elif kind == "file_link":
        offender.symlink_to(secret)
    elif kind == "dev_zero":
        offender.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(offender)
    elif kind == "sparse":
        with open(offender, "wb") as fh:
            fh.truncate(3 << 30)  # 3 GB, nothing on disk
    else:  # the run folder itself a link to a folder elsewhere
        import shutil

        elsewhere = tmp_path / "elsewhere"
        shutil.move(folder, elsewhere)
        folder.symlink_to(elsewhere)
        offender = folder
    before = sorted(p.name for p in (study_dir / "runs").iterdir()) if (study_dir / "runs").exists() else []
    done = imported(root, runs)
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_line(done)
    assert str(offender) in line and "nothing imported" in line, line
    after = sorted(p.name for p in (study_dir / "runs").iterdir()) if (study_dir / "runs").exists() else []
    assert after == before  # no staging folder left, no run folder replaced
    assert not list(study_dir.rglob("secret.txt")) and not list(study_dir.rglob("passwd"))


def epoch_of(folder: Path) -> int:
    import torch

    return int(torch.load(folder / "checkpoint" / "state.pt", weights_only=True)["history"][-1]["epoch"])


@pytest.mark.faults
def test_import_never_replaces_a_checkpoint_further_along_with_an_older_one(trained, tmp_path: Path) -> None:
    root, study_dir, stopped, further = trained
    (key,) = [p.name for p in further.iterdir() if p.is_dir()]
    newer, older = epoch_of(further / key), epoch_of(stopped / key)
    assert newer > older
    done = imported(root, further)
    assert done.returncode == 0, done.stderr[-3000:]
    assert epoch_of(study_dir / "runs" / key) == newer
    done = imported(root, stopped)  # the older copy, brought back later
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{key} at epoch {newer} here, {older} in the import" in done.stdout
    assert epoch_of(study_dir / "runs" / key) == newer


@pytest.mark.parametrize("name", ["../escaped_study", "/tmp/abs_study", "two\nlines", "\x1b[31mred", "a/b", ".hidden"])
@pytest.mark.parametrize("command", ["export", "launch"])
def test_every_command_that_makes_a_study_folder_checks_its_name(tmp_path: Path, capsys, name, command) -> None:
    spec = write_spec(tmp_path, "nm", grid={"task": ["copy"], "variant": ["onestep"]}, overrides=SMOKE)
    root = tmp_path / "deep" / "root"
    argv = [command, str(spec), "--root", str(root), "--name", name]
    argv += ["--out", str(tmp_path / "export")] if command == "export" else ["--dry-run"]
    assert study(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--name" in err[0] and "a study name is one directory under --root" in err[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["nm.yaml"]  # no folder made anywhere
    assert not Path("/tmp/abs_study").exists()


SECRET = "S3CRETpw"


def files_holding(folder: Path, needle: str) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and needle.encode() in p.read_bytes())


@pytest.mark.parametrize("uri", [f"postgresql://127.0.0.1:1/mlflow?user=u&password={SECRET}",
                                 f"postgresql://127.0.0.1:1/mlflow?sslmode=disable&PASSWORD={SECRET}&user=u",
                                 f"postgresql://u:{SECRET}@127.0.0.1:1/mlflow",
                                 f"postgresql://127.0.0.1:1/mlflow?sslpassword={SECRET}",
                                 f"postgresql://127.0.0.1:1/mlflow#{SECRET}",
                                 f"http://127.0.0.1:1/?token={SECRET}"])
def test_a_secret_anywhere_in_the_tracking_uri_stays_out_of_the_folder_and_the_output(tmp_path: Path,
                                                                                     uri) -> None:
    spec = write_spec(tmp_path, "sec", grid={"task": ["copy"], "variant": ["onestep"]}, overrides=SMOKE)
    root = tmp_path / "s"
    env_free = {k: v for k, v in os.environ.items() if k not in ("PGUSER", "PGPASSWORD")}
    done = subprocess.run([sys.executable, *STUDY, "launch", str(spec), "--root", str(root), "--tracking-uri", uri],
                          cwd=tmp_path, env={**env_free, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0  # no store answers there
    assert SECRET not in done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-3000:]
    assert files_holding(tmp_path, SECRET) == []  # study.json, Tune's files, logs: none holds it


def test_reports_build_from_a_database_that_refuses_is_one_line_without_the_secret(tmp_path: Path, capsys) -> None:
    """psycopg's refusal is three lines (a hint and SQLAlchemy's background link): reports build
    printed them all; now its first line, after the store with its password masked."""
    from reports.cli import main as reports_main

    code = reports_main(["build", "--tracking-uri", f"postgresql://u:{SECRET}@127.0.0.1:1/mlflow", "--study", "x",
                         "--out", str(tmp_path / "r")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("reports build: cannot open tracking store postgresql://u:***@127.0.0.1:1/mlflow: "
                               "connection failed"), lines[0]
    assert not (tmp_path / "r").exists()


def test_reports_build_from_a_server_that_does_not_answer_is_one_line_without_retries(tmp_path: Path, capsys) -> None:
    """MLflow's client retried a closed port for 4 min 10 s before reports build's one line;
    record.store.reach_server asks /health once first. The password stays masked."""
    from reports.cli import main as reports_main

    port = closed_port()
    code = reports_main(["build", "--tracking-uri", f"http://u:{SECRET}@127.0.0.1:{port}", "--study", "x",
                         "--out", str(tmp_path / "r")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"reports build: cannot reach the MLflow server at http://u:***@127.0.0.1:{port}: "
                               "[Errno 111] Connection refused"), lines[0]
    assert not (tmp_path / "r").exists()


def test_study_ui_passes_a_saved_password_by_environment_never_on_the_command_line(capsys) -> None:
    from study.recording.folder import take_credentials
    from study.recording.ui import ui_command

    saved = f"postgresql://127.0.0.1:5433/mlflow?user=u&password={SECRET}"  # an older study.json's
    with pytest.raises(SpecError, match=r"\?user=\*\*\*&password=\*\*\*: a secret in the store's URI"):
        ui_command(saved, "127.0.0.1", 5000)
    before = {k: os.environ.get(k) for k in ("PGUSER", "PGPASSWORD")}
    os.environ.pop("PGUSER", None), os.environ.pop("PGPASSWORD", None)
    try:
        cmd = ui_command(take_credentials(saved, sys.stderr), "127.0.0.1", 5000)
        assert SECRET not in " ".join(cmd) and "postgresql://127.0.0.1:5433/mlflow" in cmd
        assert os.environ["PGPASSWORD"] == SECRET and os.environ["PGUSER"] == "u"  # the child's environment
    finally:
        for k, v in before.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert SECRET not in capsys.readouterr().err


BIG_INT = "9" * 5000
NUMBERS = [("optim.epochs", ".inf", "cannot convert float infinity"),
           ("optim.epochs", BIG_INT, "cannot be read"),
           ("optim.lr", "1.0e308", "optim.lr=1e+308: out of its range"),
           ("optim.batch_size", str(2**63 - 1), "optim.batch_size=9223372036854775807: out of its range"),
           ("optim.epochs", str(10**12), "optim.epochs=1000000000000: out of its range"),
           ("task.test_lengths", "[1000000000]", "task.test_lengths=1000000000: out of its range"),
           ("task.train_size", "1.0e15", "task.train_size"),
           ("optim.lr", ".nan", "lr must be > 0, got nan")]


def spec_text(overrides: str = "", grid: str = "{task: [copy], variant: [onestep]}", seeds: str = "1") -> str:
    return (f"name: b\nseeds: {seeds}\nresources: {{cpus: 1}}\ngrid: {grid}\n"
            + (f"overrides:\n  {overrides}\n" if overrides else ""))


@pytest.mark.parametrize("key,value,says", NUMBERS, ids=[f"{k}={v[:12]}" for k, v, _ in NUMBERS])
def test_a_number_out_of_its_range_is_one_line_before_any_work(tmp_path: Path, capsys, key, value, says) -> None:
    spec = tmp_path / "b.yaml"
    spec.write_text(spec_text(f"{key}: {value}"))
    assert study(["launch", str(spec), "--root", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and str(spec) in err[0], err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("items", [[1e13, 1], [1, 1e13]])
def test_a_list_items_range_does_not_depend_on_the_items_before_it(items) -> None:
    """A float of a key without a documented range is at most MAX_FLOAT whatever its list holds
    before it (an int item before it once widened the range to MAX_INT for the rest)."""
    from study.spec.checks import SpecError, check_range

    with pytest.raises(SpecError, match=r"model\.widths=10000000000000\.0: out of its range"):
        check_range("b.yaml", "model.widths", items)


@pytest.mark.parametrize("seeds", ["[.inf]", "[-1]", str(10**12), "[4294967296]"])
def test_a_seed_out_of_its_range_is_one_line(tmp_path: Path, capsys, seeds) -> None:
    spec = tmp_path / "b.yaml"
    spec.write_text(spec_text(seeds=seeds))
    assert study(["launch", str(spec), "--root", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seeds" in err[0], err


@pytest.mark.parametrize("axes,says", [
    ({"optim.lr": 1000, "optim.batch_size": 1000}, "1,000,000 cells"),
    ({"optim.lr": 1000, "optim.batch_size": 1000, "optim.clip": 1000}, "1,000,000,000 cells"),
])
def test_a_grid_bomb_is_counted_as_the_product_of_its_axes_before_any_cell_is_built(tmp_path: Path, capsys,
                                                                                   axes, says) -> None:
    import yaml

    grid = {"task": ["copy"], "variant": ["onestep"]}
    grid.update({k: [round(1e-4 * (i + 1), 8) if k != "optim.batch_size" else i + 1 for i in range(n)]
                 for k, n in axes.items()})
    spec = tmp_path / "b.yaml"
    spec.write_text(yaml.safe_dump({"name": "b", "seeds": 1, "grid": grid}))
    assert study(["launch", str(spec), "--root", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "at most 20,000" in err[0], err


def test_an_hparams_product_is_counted_before_any_config_is_resolved(tmp_path: Path, capsys) -> None:
    import yaml

    spec = tmp_path / "b.yaml"
    spec.write_text(yaml.safe_dump({"name": "b", "seeds": 1, "grid": {"task": ["copy"], "variant": ["onestep"]},
                                    "hparams": {"optim.lr": [1e-4 * (i + 1) for i in range(300)],
                                                "optim.batch_size": list(range(1, 301))}}))
    assert study(["launch", str(spec), "--root", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "90,000 configs" in err[0], err


def test_a_spec_file_over_its_size_cap_is_refused_unread(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "b.yaml"
    spec.write_text(spec_text() + "description: |\n" + ("  " + "x" * 1000 + "\n") * 2000)
    assert study(["launch", str(spec), "--root", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a spec file is at most 1,048,576" in err[0], err


DEEP = "[" * 200_000 + "]" * 200_000


def test_json_nested_200000_deep_is_one_line_or_a_folder_read_as_unreadable(exported, capsys) -> None:
    study_dir, export = exported
    meta = (study_dir / META_FILE).read_text()
    (study_dir / META_FILE).write_text(DEEP)
    assert study(["status", str(study_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corrupt" in err[0], err
    (study_dir / META_FILE).write_text(meta)
    run = study_dir / "runs" / "0123456789abcdef"
    run.mkdir(parents=True)
    (run / "trial.json").write_text(DEEP)
    assert study(["runs", str(study_dir)]) == 0  # the folder is listed as unreadable ("?")
    assert "0123456789abcdef" in capsys.readouterr().out
    (export / "manifest.json").write_text(DEEP)
    done = run_in(export, "-m", "locattn.offline", ".", "--out", str(study_dir.parent / "R"))
    assert done.returncode != 0 and "not JSON" in one_line(done)


def test_ctrl_c_ends_a_long_dry_run_at_once(tmp_path: Path) -> None:
    import signal
    import time

    import yaml

    spec = tmp_path / "b.yaml"  # 10,000 cells: the plan takes minutes
    spec.write_text(yaml.safe_dump({"name": "b", "seeds": 1, "grid": {
        "task": ["copy"], "variant": ["onestep"], "optim.lr": [round(1e-5 * (i + 1), 8) for i in range(100)],
        "optim.batch_size": list(range(1, 101))}}))
    proc = subprocess.Popen([sys.executable, *STUDY, "launch", str(spec), "--root", str(tmp_path / "r"), "--dry-run"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # past the imports, into the plan
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)  # before: 43 s after the signal, at the plan's end
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines() == ["study launch --dry-run: stopped by SIGINT; nothing was written"]


@pytest.mark.parametrize("args,says", [
    (["--address", "ray://[::1"], "--address ray://[::1: Invalid IPv6 URL"),
    (["--address", "[::1"], "--address [::1:"),
    (["--time-limit", "99999999999999999999h", "--dry-run"], "at most 366 days"),
    (["--time-limit", "inf", "--dry-run"], "expected a positive duration"),
])
def test_a_bad_launch_argument_is_one_line(tmp_path: Path, capsys, args, says) -> None:
    spec = tmp_path / "b.yaml"
    spec.write_text(spec_text())
    assert study(["launch", str(spec), "--root", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("key", ["1", "~", "2.5"])
def test_an_override_key_that_is_not_a_name_is_one_line(tmp_path: Path, capsys, key) -> None:
    spec = tmp_path / "b.yaml"
    spec.write_text(spec_text(f"{key}: 2"))
    assert study(["launch", str(spec), "--root", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "overrides: key" in err[0] and "is not a name" in err[0], err


def test_export_to_a_file_is_one_line(exported, tmp_path: Path, capsys) -> None:
    study_dir, _ = exported
    target = tmp_path / "a_file"
    target.write_text("mine")
    assert study(["export", str(study_dir), "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a file, not a folder" in err[0], err
    assert target.read_text() == "mine"


@pytest.mark.parametrize("field,value", [("tracking_uri", 5), ("tracking_uri", None), ("name", ["x"]),
                                         ("raw", "text"), ("profile", 3),
                                         # the optional keys were not checked: `only: [1]` was a
                                         # traceback on resume, `set: 5` and `train_path: turbo`
                                         # read as they were (breaker, by hand)
                                         ("only", [1]), ("only", {"task": "copy"}), ("set", 5),
                                         ("train_path", "turbo"), ("seeds", True), ("created", "yesterday"),
                                         ("plugin_sources", {"m": 1})])
@pytest.mark.parametrize("command", ["status", "resume", "migrate"])
def test_a_study_json_field_of_the_wrong_type_is_one_line(exported, capsys, field, value, command) -> None:
    study_dir, _ = exported
    meta = json.loads((study_dir / META_FILE).read_text())
    (study_dir / META_FILE).write_text(json.dumps({**meta, field: value}))
    before = (study_dir / META_FILE).read_bytes()
    assert study([command, str(study_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"corrupt ({field} is" in err[0] and ", expected " in err[0], err
    assert (study_dir / META_FILE).read_bytes() == before


@pytest.mark.parametrize("key", ["[a]", "{a: 1}"])
def test_a_list_or_mapping_as_a_key_is_one_line(tmp_path: Path, capsys, key) -> None:
    spec = tmp_path / "b.yaml"
    spec.write_text(spec_text(f"? {key}\n  : 2"))
    assert study(["launch", str(spec), "--root", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a key is a name" in err[0], err


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_a_worker_deadline_that_is_not_a_duration_is_one_line(exported, tmp_path: Path, value) -> None:
    _, export = exported
    done = run_in(export, "-m", "locattn.offline", ".", "--out", str(tmp_path / "R"), "--deadline", value)
    assert done.returncode == 2
    assert "--deadline" in one_line(done) and not (tmp_path / "R").exists()


@pytest.mark.parametrize("where", ["new_dir", "existing_dir"])
def test_resume_refuses_a_store_study_json_names_that_does_not_exist(exported, tmp_path: Path, where) -> None:
    study_dir, _ = exported
    parent = tmp_path / ("nowhere" if where == "new_dir" else "elsewhere")
    if where == "existing_dir":
        parent.mkdir()
    meta = json.loads((study_dir / META_FILE).read_text())
    (study_dir / META_FILE).write_text(json.dumps({**meta, "tracking_uri": f"sqlite:///{parent / 'mlflow.db'}"}))
    done = run_in(study_dir, *STUDY, "resume", ".")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "does not exist; resume records only into an existing store" in one_line(done)
    assert parent.exists() == (where == "existing_dir") and not (parent / "mlflow.db").exists()


def test_a_command_under_test_cannot_write_a_file_over_the_cap(tmp_path: Path) -> None:
    """The guard the link and sparse-file tests rely on: a child of :func:`run_in` that writes
    past :data:`FILE_SIZE_CAP` is stopped there, not left to fill the disk."""
    big = tmp_path / "big"
    code = (f"import os\nfd = os.open({str(big)!r}, os.O_WRONLY | os.O_CREAT)\n"
            f"os.lseek(fd, {FILE_SIZE_CAP}, 0)\nos.write(fd, b'x')\n")
    done = run_in(tmp_path, "-c", code, capped=True)
    assert done.returncode != 0  # SIGXFSZ, or EFBIG where the signal is ignored
    assert big.stat().st_size <= FILE_SIZE_CAP


@pytest.mark.parametrize("name", ["../x", "/etc", "", "0123456789abcdef/../../x", "ABCDEF0123456789"])
def test_a_run_key_that_is_not_one_names_no_run_folder(tmp_path: Path, name) -> None:
    from locattn.folders import FolderError
    from study.trial.descriptor import run_dir

    with pytest.raises(FolderError, match="run key"):
        run_dir(tmp_path, name)
    assert run_dir(tmp_path, "0123456789abcdef") == tmp_path.resolve() / "runs" / "0123456789abcdef"


@pytest.mark.parametrize("link", ["run_folder", "runs"])
@pytest.mark.parametrize("command", ["runs", "resume"])
def test_a_run_folder_linking_out_of_the_study_is_refused_in_one_line_before_ray(exported, tmp_path: Path,
                                                                                 link, command) -> None:
    """``study runs`` and ``study resume`` read run folders through ``descriptor.run_dir``: a run
    folder (or ``runs/``) that is a link to a folder elsewhere is named, in one line, exit 2, and
    nothing there is read into the record or written; a resume stops before Ray starts."""
    study_dir, _ = exported
    elsewhere = tmp_path / "elsewhere"
    key = "0123456789abcdef"
    (elsewhere / key).mkdir(parents=True)
    (elsewhere / key / "trial.json").write_text("{}")
    runs = study_dir / "runs"
    if runs.exists():
        import shutil

        shutil.rmtree(runs)
    if link == "runs":
        runs.symlink_to(elsewhere)
    else:
        runs.mkdir()
        (runs / key).symlink_to(elsewhere / key)
    before = sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*"))
    done = run_in(study_dir, *STUDY, command, ".")
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_line(done)
    assert "is outside" in line and str(study_dir.resolve()) in line, line
    assert "Ray" not in done.stdout + done.stderr
    assert sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*")) == before


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_driver_waiting_on_an_unreachable_store_says_so_once_per_interval(monkeypatch, capsys) -> None:
    """A tracking server that does not answer: MLflow's client retries (for minutes at its
    defaults; here a few seconds), and the writer says each interval (60 s; here 0.5 s) that
    it is still waiting, naming the store, secrets redacted."""
    import record.writer as writer

    port = closed_port()
    monkeypatch.setattr(writer, "WAIT_NOTICE_SECONDS", 0.5)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    w = writer.RecordWriter(tracking_uri=f"http://u:hunter2@127.0.0.1:{port}", study="waits",
                            artifact_location=None, parent_tags={})
    with pytest.raises(Exception):
        w.open()
    err = capsys.readouterr().err
    notes = [ln for ln in err.splitlines() if "still retrying" in ln]
    assert len(notes) >= 2, err[-3000:]
    assert all(ln.startswith(f"[study waits] the store http://u:***@127.0.0.1:{port}: no answer for ") for ln in notes)
    assert "hunter2" not in err


def test_resume_of_a_database_store_that_cannot_be_opened_is_one_line_naming_what_is_missing(
        exported, monkeypatch) -> None:
    """A Postgres store that is down, or answers without the credentials study.json never keeps
    (after a restart, PGUSER/PGPASSWORD unset): one line, exit 2, in seconds (MLflow alone
    retries for about 100 s and ends in a traceback), the variables that are not set named."""
    study_dir, _ = exported
    meta = json.loads((study_dir / META_FILE).read_text())
    meta["tracking_uri"] = f"postgresql://127.0.0.1:{closed_port()}/mlflow"
    (study_dir / META_FILE).write_text(json.dumps(meta))
    monkeypatch.delenv("PGUSER", raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    done = run_in(study_dir, *STUDY, "resume", ".", timeout=60)
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_line(done)
    assert meta["tracking_uri"] in line and "cannot be opened" in line, line
    assert "PGUSER and PGPASSWORD not set" in line, line
    assert "Traceback" not in done.stdout + done.stderr
