"""Every benchmark in benchmarks/ runs end to end with ``--quick`` (the ``bench`` tier).

Each script runs as a fresh process, as a user would run it, with its work directory (where it
takes one) under the test's tmp_path. ``--quick`` only shrinks the sizes; the script's own checks
still apply (it exits non-zero when one fails), and each test also looks for a line of numbers
that shows it measured something. The runs are deselected by default; ``.ci/run`` runs them:

    python -m pytest -m bench tests/benchmarks/test_benchmarks_quick.py
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.test_postgres_store import postgres_bin

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 480  # seconds; a quick run takes 5-140 s on a loaded 2-core machine
#: Longer limits: bench_chaos --quick took about 290 s at load 10-26 (real drivers killed and resumed).
TIMEOUTS = {"bench_chaos.py": 1000, "bench_whole_run.py": 1200}
#: bench_whole_run --quick took 7.7 min at load 11: a cold compile (fresh inductor cache) in it.

F = r"\d+\.\d+"  # a measured number

# script, work-directory flag (or None), modules it needs, lines its output must contain
CASES = [
    ("bench_whole_run.py", None, (), [
        rf"^eager\s+1 epochs: cpu\s+{F} s\s+wall\s+{F} s",
        rf"^compiled cold\s+1 epochs: cpu\s+{F} s.*; compiles 1 \({F} s wall\)$",
        rf"^compiled warm\s+2 epochs: cpu\s+{F} s.*\]; compiles 1 \({F} s wall\)$",
        r"^compiled warm: (wins from|never wins)",
    ]),
    ("bench_epoch.py", None, (), [
        r"^copy/onestep: train 1000, dev 200; per seed-epoch",
        r"^recopy/mono: train 1000, dev 200; per seed-epoch",
        r"^lookup/mix_locattn: train \d+, dev \d+; per seed-epoch",
        rf"^eager K=1\s+{F} \(\s*{F}\)\s+{F} \(\s*{F}\)\s+{F} \(\s*{F}\)\s+{F}",
        rf"^greedy scoring of all Copy test splits \(7 splits, 1400 examples, with attnLoss\): "
        rf"wall {F} s, cpu {F} s",
    ]),
    ("bench_cost.py", None, (), [
        rf"^process start-up \(import torch, locattn\.train\): {F} CPU s",
        r"^cfq\s+content\s+rc_table3_cfq\.yaml\s+48/24/6(\s+[0-9.e+-]+){4}$",
        r"^copy\s+location\s+rc_table2\.yaml\s+48/24/6(\s+[0-9.e+-]+){4}$",
        r"^raffel_add\s+feedforward\s+raffel_table1\.yaml\s+24x100/24/24(\s+[0-9.e+-]+){4}$",
        r"^9 rows; loadavg now",
    ]),
    ("bench_dev.py", None, (), [
        rf"^copy/mix_onestep_pr: dev 200 examples, batch 256, graphed \| now cpu {F} s \(wall {F}\) \| "
        rf"two passes cpu {F} s \(wall {F}\) \| x{F} \| gate now {F}, own pass {F}$",
        rf"^copy/onestep: dev 200 examples, batch 256, graphed \| now cpu {F} s \(wall {F}\)$",
    ]),
    ("bench_eval.py", None, (), [
        rf"^  len100\s+n=50\s+cpu\s+{F} s\s+wall\s+{F} s",
        rf"^total: cpu {F} s, wall {F} s, maxrss \d+ MB",
    ]),
    ("bench_gpu.py", None, (), [
        r"^device: (CPU \(no CUDA here\): .* these numbers are CPU numbers|.*; graphs captured)",
        rf"^\[(CPU|GPU)\] solo eager trial: epoch wall {F} s \(cpu {F} s\) -> {F} seed-epochs/s$",
        rf"^\[(CPU|GPU)\] K=8\s+graphed: first epoch {F} s, then wall {F} s \(cpu {F} s\) per epoch -> "
        rf"{F} seed-epochs/s, x{F} a solo trial \| .* \| seed 0 losses equal to K=1: True$",
    ]),
    ("bench_gpu_memory.py", None, (), [
        rf"^copy/onestep K=1 batch 32x10x11: measured step peak {F} MiB, saved {F} MiB \(peak/saved {F}\), "
        rf"model {F} MiB \(model/measured (0\.9[89]|1\.0\d|1\.10)\d*\)$",
    ]),
    ("bench_gpu_session.py", "--out", (), [
        r'^\{"kind": "equality", "path": "eager", .*"max_rel_diff": 0\.0, "must_be_equal": true, "ok": true',
        r'^\{"kind": "equality", "path": "graphed", .*"max_rel_diff": 0\.0, "must_be_equal": true, "ok": true',
        r'^\{"kind": "memory", "model_mib_per_replica": [0-9.]+, .*"device_gib": 0\.05, "largest_k": 2',
        rf'^\{{"kind": "throughput", "path": "graphed", "K": 2, "first_epoch_s": {F}, "epoch_s": {F}, '
        rf'"seed_epochs_per_s": {F}',
        r'^\{"kind": "throughput", "path": "graphed", "K": 4096, "skipped": "a pack of 4,096 needs ~[0-9.]+ GiB '
        r'by the memory model .*the largest K that fits is 2; K=2 measured"',
        r"^wrote 9 rows to ",
    ]),
    ("bench_kernels.py", None, (), [
        r"^copy/onestep eager    K=1    kernels per training batch:\s+[1-9]\d* \(batch 32 x src \d+ x tgt \d+;",
        r"^copy/onestep eager    K=4    kernels per training batch:\s+[1-9]\d* \(batch 128 x src \d+ x tgt \d+;",
    ]),
    ("bench_regressor.py", None, (), [
        rf"^ffattn T=200\s+B=20: eager wall {F} s \(cpu {F}\) \| fused wall {F} s \(cpu {F}\) \| x{F} cpu, "
        rf"x{F} wall \| max rel grad diff [0-9.e+-]+$",
        rf"^mean\s+scoring 16 sequences padded to \d+: eager wall {F} s \(cpu {F}\) \| fused wall {F} s",
    ]),
    ("bench_packed.py", None, (), [
        rf"^copy/onestep: 2 solo epochs cpu {F} s \(wall {F}\) -> {F} seed-epochs/core-s \| packed "
        rf"cpu {F} s \(wall {F}\) -> {F} seed-epochs/core-s \| speed-up x{F} \| "
        r"max \|loss solo - packed\| [0-9.e+-]+ \|",
    ]),
    # every table of every spec: a size (400 runs) at which each cell of each table has a run
    ("bench_reports.py", "--dir", ("mlflow", "polars"), [
        r"^store: 412 runs \(incl\. 12 parents\) in 12 studies, one per spec",
        r"^tables: 11 of 11 \(dubois_interp, .*, rc_table9\); largest study rc_table7-paper: \d+ runs$",
        rf"^reports build \(CLI, a fresh process per study, 12 studies, 42 files\): best {F} s",
        rf"^in-process: read\+aggregate of \S+ \(first call, imports included\) {F} s; full build_reports "
        rf"of every study {F} s",
        rf"^MLflow MlflowClient\.search_runs, all 412 runs in pages of 1000: {F} s",
    ]),
    ("bench_reports_postgres.py", "--dir", ("mlflow", "polars", "psycopg"), [
        rf"^PostgreSQL store: 412 runs copied in {F} s \(127\.0\.0\.1:\d+/mlflow\)",
        rf"^reports build --tracking-uri postgresql://\.\.\. \(CLI, a fresh process per study, 12 studies, "
        rf"42 files\): best {F} s",
        rf"^reports build --tracking-uri sqlite:///\.\.\. \(SQLite twin, same runs\) \(CLI, .*\): best {F} s",
        r"^tables from Postgres == tables from the SQLite twin \(provenance source aside\): True$",
    ]),
    ("bench_study_overhead.py", "--root", ("mlflow", "ray"), [
        r'^ "finished": 2,$',
        r'^ "errors": 0,$',
        rf'^ "mean_train_seconds_per_trial": {F},$',
        rf'^ "wall_seconds": {F},$',
        r'^ "overhead_fraction": -?[0-9.]+,$',
    ]),
    ("bench_study_packed.py", "--root", ("mlflow", "ray"), [
        rf"^\| one trial per seed \| 2 \| {F} \| {F} \|$",
        rf"^\| packed, one trial \| 1 \| {F} \| {F} \|$",
        rf"^speed-up x{F}; every seed's recorded metrics identical in both studies: True$",
    ]),
    ("bench_study_scale.py", "--root", ("mlflow", "ray"), [
        rf'^\{{"n": 10, "wall_s": {F}, "fit_s": {F}, "per_trial_ms": {F}',
        r'"record": \{"runs": 10, "finished": 10, "duplicates": 0, "train_loss_points": 30\}',
        rf'"finished_at_kill": \d+, "resume_wall_s": {F}',
        r'"resume_record": \{"runs": 10, "finished": 10, "duplicates": 0, "train_loss_points": 30\}',
    ]),
    ("bench_bad_inputs.py", "--root", ("mlflow", "ray"), [
        r"^setup: a study, its export and a worker's run folder in \d+\.\d+ s$",
        r"^total\s+18\s+18\s+0\s+0\s+0$",
        r"^every bad input answered in one line, nothing lost$",
    ]),
    ("bench_chaos.py", "--root", ("mlflow", "ray"), [
        r"^reference study: 4 runs, \d+ s$",
        r"^cycles \d+, injected \{'driver_kills': \d+, 'worker_kills': \d+, 'early_kills': [1-9]\d*, .*\}, "
        r"\d+ studies, [1-9]\d* finished runs",
        r"^lost 0  duplicated 0  gaps 0  mismatched vs uninterrupted 0  "
        r"epochs retrained \d+ of [1-9]\d* \(\d+ %\)$",
    ]),
]


def run_quick(script: str, extra: list[str]) -> tuple[int, str, str]:
    """``python benchmarks/<script> --quick <extra>`` in its own process group (killed whole on
    timeout); returns (returncode, stdout, stderr)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / script), "--quick", *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUTS.get(script, TIMEOUT))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{script} --quick ran past {TIMEOUTS.get(script, TIMEOUT)} s\n{out[-3000:]}\n{err[-3000:]}")
    return proc.returncode, out, err


@pytest.mark.bench
@pytest.mark.timeout(max(TIMEOUTS.values()) + 200)
@pytest.mark.parametrize("script, dir_flag, needs, expected",
                         [pytest.param(*c, id=c[0].removesuffix(".py")) for c in CASES])
def test_benchmark_runs_quick(tmp_path: Path, script: str, dir_flag: str | None,
                              needs: tuple[str, ...], expected: list[str]) -> None:
    for module in needs:
        pytest.importorskip(module)
    if script == "bench_reports_postgres.py" and not (postgres_bin("initdb") and postgres_bin("pg_ctl")):
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (apt-get install postgresql)")
    rc, out, err = run_quick(script, [dir_flag, str(tmp_path / "work")] if dir_flag else [])
    assert rc == 0, f"{script} --quick exited {rc}\n{out[-4000:]}\n{err[-4000:]}"
    missing = [p for p in expected if not re.search(p, out, re.MULTILINE)]
    assert not missing, f"{script} --quick printed no line matching {missing}:\n{out[-4000:]}"


def test_the_quick_report_studies_hold_every_cell_of_every_table() -> None:
    """In the default suite: ``bench_reports.py --quick`` writes the studies the committed specs
    make, and at its size every table has a study and every cell of it a run (the 10,000-run
    store once failed on a table that the quick size never reached)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_reports import QUICK, synth_studies

    from locattn import registry
    from reports.tables import TABLES

    builtin = sorted(t for t in TABLES if registry.entries("table")[t].builtin)  # not a plugin's
    studies = synth_studies(QUICK["runs"], 0)
    assert sorted({t for s, _ in studies for t in s.tables}) == builtin
    assert sum(len(runs) for _, runs in studies) == QUICK["runs"]
    for study, runs in studies:
        assert {r.cell for r in runs} == {c.cell for c in study.cells}, study.name
    variable = next(s for s, _ in studies if s.name == "raffel_variable-paper")
    assert all(c.params["task.variable_length"] == "True" and "task.t0" not in c.cell for c in variable.cells)


def test_every_benchmark_has_a_quick_case() -> None:
    """In the default suite: a new benchmark gets a case (and so a ``--quick``)."""
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert scripts == sorted(c[0] for c in CASES)


@pytest.mark.bench
@pytest.mark.timeout(TIMEOUT + 200)
def test_bench_cost_on_some_tasks_replaces_their_rows_and_keeps_the_others(tmp_path: Path) -> None:
    table = tmp_path / "cal.json"
    committed = json.loads((ROOT / "study" / "cost" / "cost_calibration.json").read_text())
    table.write_text(json.dumps(committed))
    rc, out, err = run_quick("bench_cost.py", ["--tasks", "cfq", "--out", str(table)])
    assert rc == 0, f"bench_cost.py exited {rc}\n{out[-4000:]}\n{err[-4000:]}"
    new = json.loads(table.read_text())

    def rows(body: dict, cfq: bool) -> list[dict]:
        return [r for r in body["rates"] if (r["task"] == "cfq") == cfq]

    assert rows(new, False) == rows(committed, False)  # every other row as it was
    assert [r["family"] for r in rows(new, True)] == [r["family"] for r in rows(committed, True)]
    assert rows(new, True) != rows(committed, True)  # re-measured (4 significant digits)
    assert "--tasks cfq" in new["meta"]["cpu"]["command"]
    assert new["meta"]["command"] == committed["meta"]["command"]


def test_bench_gpu_refuses_an_unknown_case_before_it_measures_anything() -> None:
    """A typo in ``--cases`` is refused up front: on a lent GPU, the cases before it would
    otherwise have spent the device time for nothing."""
    rc, out, err = run_quick("bench_gpu.py", ["--cases", "copy/onestep,copy/nosuch"])
    assert rc == 2 and out == ""
    assert "--cases copy/nosuch: not TASK/VARIANT (tasks: copy, reverse_copy" in err
