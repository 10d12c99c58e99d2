"""A replay of bad inputs and folder faults: each must be answered with one line and lose
nothing.

It makes one real study (``study export`` of a one-run copy study) and one real worker
folder (``python -m locattn.offline`` stopped by its deadline), then feeds the commands bad
inputs of every kind built so far, each on a fresh copy of what it tampers with:

    spec      spec files: size, nesting, keys, grid bombs
    value     numbers out of their documented range, seeds, non-finite values
    cli       bad command-line arguments
    meta      a tampered study.json (types, trainer names, nesting, garbage, formats)
    import    import folders: symlinks, special files, sparse files, foreign keys
    manifest  tampered export manifests (keys, folders, trainers, shapes)
    uri       secrets in a tracking URI
    runs      run folders that link out of the study (``study runs``, ``study resume``)
    fault     cheap faults: a truncated study.json, a store that is down

Each answer is classified: ``one-line`` (a non-zero exit, one line on stderr, no traceback),
``traceback`` (a Python traceback, or more than one line), ``accepted`` (exit 0: the bad
input went through); and ``lost`` when the study folder, the worker's folder or a file
outside them changed. It prints one line per kind and the totals

    kind      cases  one-line  traceback  accepted  lost

and exits 1 unless every case is one-line and nothing is lost. ``--quick``: the same kinds,
fewer cases of each (the first two).

    python benchmarks/bench_bad_inputs.py [--root DIR] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
STUDY = [sys.executable, "-c", "import sys; from study.cli import main; sys.exit(main(sys.argv[1:]))"]
WORKER = [sys.executable, "-m", "locattn.offline"]
SMOKE = {"task.train_size": 200, "task.dev_size": 32, "task.test_size": 32, "task.test_lengths": [15],
         "optim.epochs": 40}


def run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PGPASSWORD", None), env.pop("PGUSER", None)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def digest(*folders: Path) -> str:
    """Names, sizes and contents of every file under ``folders`` (links as their target)."""
    h = hashlib.sha256()
    for folder in folders:
        for p in sorted(folder.rglob("*")) if folder.exists() else []:
            if p.name.endswith((".lock", ".log")) or "__pycache__" in p.parts:
                continue
            h.update(str(p.relative_to(folder)).encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def classify(done: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    if "Traceback" in done.stderr or (done.returncode != 0 and len(lines) != 1):
        return "traceback"
    return "accepted" if done.returncode == 0 else "one-line"


def spec_file(base: Path, body: str) -> Path:
    path = base / f"bad{time.monotonic_ns()}.yaml"
    path.write_text(body)
    return path


def spec(overrides: str = "", grid: str = "{task: [copy], variant: [onestep]}", seeds: str = "1") -> str:
    return (f"name: b\nseeds: {seeds}\nresources: {{cpus: 1}}\ngrid: {grid}\n"
            + (f"overrides:\n  {overrides}\n" if overrides else ""))


def cases(base: Path, study_dir: Path, export: Path, runs: Path) -> dict[str, list[tuple[str, Callable[[], list[str]]]]]:
    """kind -> [(name, a function that tampers a fresh copy and returns the command)]."""
    root = base / "roots"

    def launch(body: str, *args: str) -> Callable[[], list[str]]:
        return lambda: [*STUDY, "launch", str(spec_file(base, body)), "--root", str(root), "--dry-run", *args]

    def meta(command: str = "status", **fields: Any) -> Callable[[], list[str]]:
        def make() -> list[str]:
            m = json.loads((study_dir / "study.json").read_text())
            (study_dir / "study.json").write_text(json.dumps({**m, **fields}))
            return [*STUDY, command, str(study_dir)]
        return make

    def truncated(command: str) -> Callable[[], list[str]]:
        def make() -> list[str]:
            text = (study_dir / "study.json").read_text()
            (study_dir / "study.json").write_text(text[: len(text) // 2])
            return [*STUDY, command, str(study_dir)]
        return make

    def linked_out(what: str, command: str) -> Callable[[], list[str]]:
        def make() -> list[str]:
            elsewhere = base / "elsewhere"
            (elsewhere / "0123456789abcdef").mkdir(parents=True)
            (elsewhere / "0123456789abcdef" / "trial.json").write_text("{}")
            shutil.rmtree(study_dir / "runs", ignore_errors=True)
            if what == "runs":
                (study_dir / "runs").symlink_to(elsewhere)
            else:
                (study_dir / "runs").mkdir()
                (study_dir / "runs" / "0123456789abcdef").symlink_to(elsewhere / "0123456789abcdef")
            return [*STUDY, command, str(study_dir)]
        return make

    def meta_text(text: str, command: str = "status") -> Callable[[], list[str]]:
        def make() -> list[str]:
            (study_dir / "study.json").write_text(text)
            return [*STUDY, command, str(study_dir)]
        return make

    def manifest(change: Callable[[dict], None]) -> Callable[[], list[str]]:
        def make() -> list[str]:
            m = json.loads((export / "manifest.json").read_text())
            change(m)
            (export / "manifest.json").write_text(json.dumps(m))
            return [*WORKER, str(export), "--out", str(base / "R"), "--device", "cpu"]
        return make

    def first_run(**entries: Any) -> Callable[[dict], None]:
        return lambda m: m["trials"][0]["runs"][0].update(entries)

    def imported(change: Callable[[Path], None]) -> Callable[[], list[str]]:
        def make() -> list[str]:
            (folder,) = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")]
            change(folder)
            return [*STUDY, "import", str(study_dir), str(runs)]
        return make

    secret = base / "secret.txt"
    secret.write_text("PRIVATE")
    return {
        "spec": [
            ("2 MB spec", launch(spec() + "description: |\n" + ("  " + "x" * 1000 + "\n") * 2000)),
            ("10^6-cell grid", launch(spec(grid="{task: [copy], variant: [onestep], optim.lr: [%s], optim.clip: [%s]}"
                                           % (",".join(str(1e-5 * (i + 1)) for i in range(1000)),
                                              ",".join(str(i + 1.0) for i in range(1000)))))),
            ("nested 100 deep", launch(spec() + "description: " + "[" * 100 + "]" * 100 + "\n")),
            ("key 1:", launch(spec("1: 2"))),
            ("key ~:", launch(spec("~: 2"))),
            ("list as a key", launch(spec("? [a]\n  : 2"))),
            ("NUL bytes", launch("name: b\x00\n")),
        ],
        "value": [
            ("epochs .inf", launch(spec("optim.epochs: .inf"))),
            ("epochs 5000 digits", launch(spec("optim.epochs: " + "9" * 5000))),
            ("lr 1e308", launch(spec("optim.lr: 1.0e308"))),
            ("batch 2^63-1", launch(spec(f"optim.batch_size: {2**63 - 1}"))),
            ("epochs 10^12", launch(spec("optim.epochs: 1000000000000"))),
            ("test_lengths [1e9]", launch(spec("task.test_lengths: [1000000000]"))),
            ("seed Infinity", launch(spec(seeds="[.inf]"))),
            ("lr nan", launch(spec("optim.lr: .nan"))),
            ("clip .inf", launch(spec("optim.clip: .inf"))),
            ("train_size -1", launch(spec("task.train_size: -1"))),
            ("seed 5000 digits", launch(spec(seeds="[" + "9" * 5000 + "]"))),
            ("batch 1e308", launch(spec("optim.batch_size: 1.0e308"))),
        ],
        "cli": [
            ("--address ray://[::1", launch(spec(), "--address", "ray://[::1")),
            ("--time-limit 10^20 h", launch(spec(), "--time-limit", "99999999999999999999h")),
            ("--name ../x", launch(spec(), "--name", "../escaped")),
            ("export --name /abs", lambda: [*STUDY, "export", str(spec_file(base, spec())), "--root", str(root),
                                           "--name", str(base / "abs_study"), "--out", str(base / "E1")]),
            ("export --out a file", lambda: [*STUDY, "export", str(study_dir), "--out", str(secret)]),
            ("worker --deadline nan", lambda: [*WORKER, str(export), "--out", str(base / "R"), "--deadline", "nan"]),
            ("worker --out a file", lambda: [*WORKER, str(export), "--out", str(secret)]),
        ],
        "meta": [
            ("train_fn evil_mod:train", meta(format=1, train_fn="evil_mod:train")),
            ("tracking_uri 5", meta(tracking_uri=5)),
            ("name a list", meta(name=["x"])),
            ("format 99", meta(format=99)),
            ("nested 200,000 deep", meta_text("[" * 200_000 + "]" * 200_000)),
            ("garbage, migrate", meta_text("garbage{", "migrate")),
            ("a list, resume", meta_text("[1, 2]", "resume")),
            ("tracking_uri a mapping, resume", meta("resume", tracking_uri={"a": 1})),
            ("name ../x, resume", meta("resume", name="../x")),
        ],
        "import": [
            ("link to /etc", imported(lambda f: (f / "checkpoint" / "x").symlink_to("/etc"))),
            ("link to a secret", imported(lambda f: (f / "checkpoint" / "x").symlink_to(secret))),
            ("link to /dev/zero", imported(lambda f: (f / "checkpoint" / "x").symlink_to("/dev/zero"))),
            ("FIFO", imported(lambda f: os.mkfifo(f / "checkpoint" / "x"))),
            ("3 GB sparse", imported(lambda f: open(f / "checkpoint" / "x", "wb").truncate(3 << 30))),
            ("run folder a link", imported(lambda f: (shutil.move(f, base / "moved"), f.symlink_to(base / "moved")))),
            ("trial.json garbage", imported(lambda f: (f / "trial.json").write_text("{"))),
            ("link to its parent", imported(lambda f: (f / "checkpoint" / "x").symlink_to(".."))),
            ("dangling link", imported(lambda f: (f / "x").symlink_to(base / "nowhere"))),
        ],
        "manifest": [
            ("key ../victim", manifest(first_run(key="../victim"))),
            ("key /tmp", manifest(first_run(key="/tmp"))),
            ("folder absolute", manifest(first_run(folder=str(base)))),
            ("folder ../", manifest(first_run(folder="../"))),
            ("train_fn evil", manifest(lambda m: m["trials"][0]["trial"].update(train_fn="evil_mod:train"))),
            ("trials not a list", manifest(lambda m: m.update(trials={"a": 1}))),
            ("run not an object", manifest(lambda m: m["trials"][0]["runs"].append(7))),
            ("config not an object", manifest(first_run(config=3))),
            ("drop_finished a number", manifest(lambda m: m.update(drop_finished=3))),
            ("format 2", manifest(lambda m: m.update(format=2))),
            ("key a number", manifest(first_run(key=7))),
            ("runs missing", manifest(lambda m: m["trials"][0].pop("runs"))),
            ("key missing", manifest(lambda m: m["trials"][0]["runs"][0].pop("key"))),
        ],
        "uri": [
            ("query password", launch(spec(), "--tracking-uri", "postgresql://127.0.0.1:1/m?user=u&password=S3CRET")),
            ("sslpassword", launch(spec(), "--tracking-uri", "postgresql://127.0.0.1:1/m?sslpassword=S3CRET")),
            ("fragment", launch(spec(), "--tracking-uri", "postgresql://127.0.0.1:1/m#S3CRET")),
            ("http token", launch(spec(), "--tracking-uri", "http://127.0.0.1:1/?token=S3CRET")),
            ("userinfo and query", launch(spec(), "--tracking-uri",
                                          "postgresql://u:S3CRET@127.0.0.1:1/m?password=S3CRET")),
            ("mysql query password", launch(spec(), "--tracking-uri", "mysql://127.0.0.1:1/m?password=S3CRET")),
        ],
        "runs": [
            ("run folder links out, runs", linked_out("run", "runs")),
            ("runs/ links out, resume", linked_out("runs", "resume")),
            ("run folder links out, resume", linked_out("run", "resume")),
        ],
        "fault": [
            ("truncated study.json, status", truncated("status")),
            ("postgres down, resume", meta("resume", tracking_uri="postgresql://127.0.0.1:1/mlflow")),
            ("truncated study.json, resume", truncated("resume")),
        ],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=None, help="work folder (default: a temporary one)")
    p.add_argument("--quick", action="store_true", help="the first two cases of each kind")
    args = p.parse_args()
    work = args.root or Path(tempfile.mkdtemp(prefix="bench_bad_inputs_"))
    work.mkdir(parents=True, exist_ok=True)
    import yaml

    t0 = time.time()
    spec_path = work / "good.yaml"
    spec_path.write_text(yaml.safe_dump({"name": "good", "seeds": 1, "resources": {"cpus": 1},
                                         "grid": {"task": ["copy"], "variant": ["onestep"]}, "overrides": SMOKE}))
    pristine = work / "pristine"
    done = run([*STUDY, "export", str(spec_path), "--root", str(pristine / "s"), "--out", str(pristine / "export")],
               work)
    assert done.returncode == 0, done.stderr[-2000:]
    done = run([*WORKER, str(pristine / "export"), "--out", str(pristine / "runs"), "--device", "cpu",
                "--deadline", "2"], work)
    assert done.returncode == 75, done.stderr[-2000:]
    print(f"setup: a study, its export and a worker's run folder in {time.time() - t0:.1f} s", flush=True)
    totals = {"cases": 0, "one-line": 0, "traceback": 0, "accepted": 0, "lost": 0}
    print(f"{'kind':<9} {'cases':>5} {'one-line':>8} {'traceback':>9} {'accepted':>8} {'lost':>4}")
    kinds = cases(work, Path(), Path(), Path())  # names only
    bad: list[str] = []
    for kind in kinds:
        row = dict.fromkeys(totals, 0)
        for i in range(len(kinds[kind]) if not args.quick else 2):
            case = work / f"case_{kind}_{i}"
            shutil.rmtree(case, ignore_errors=True)
            shutil.copytree(pristine, case, symlinks=True)
            study_dir, export, runs = case / "s" / "good", case / "export", case / "runs"
            name, make = cases(case, study_dir, export, runs)[kind][i]
            victim = case / "victim"
            victim.mkdir()
            (victim / "important.txt").write_text("keep")
            cmd = make()
            outside = digest(victim) + digest(case / "secret.txt")
            before_runs = digest(study_dir / "runs")
            done = run(cmd, case)
            verdict = classify(done)
            lost = (digest(victim) + digest(case / "secret.txt") != outside
                    or digest(study_dir / "runs") != before_runs
                    or "S3CRET" in done.stdout + done.stderr
                    or any(b"S3CRET" in f.read_bytes() for f in (case / "roots").rglob("*") if f.is_file()))
            row["cases"] += 1
            row[verdict] += 1
            row["lost"] += int(lost)
            if verdict != "one-line" or lost:
                tail = (done.stderr.strip().splitlines() or [""])[-1][:160]
                bad.append(f"  {kind}/{name}: {verdict}{', lost' if lost else ''} (exit {done.returncode}): {tail}")
            shutil.rmtree(case, ignore_errors=True)
        print(f"{kind:<9} {row['cases']:>5} {row['one-line']:>8} {row['traceback']:>9} {row['accepted']:>8} "
              f"{row['lost']:>4}", flush=True)
        for k in totals:
            totals[k] += row[k]
    print(f"{'total':<9} {totals['cases']:>5} {totals['one-line']:>8} {totals['traceback']:>9} "
          f"{totals['accepted']:>8} {totals['lost']:>4}")
    print("\n".join(bad) or "every bad input answered in one line, nothing lost")
    print(f"{time.time() - t0:.1f} s; loadavg {os.getloadavg()[0]:.2f}")
    if args.root is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
