"""Benchmark: `reports build` of every table from synthetic study stores of 10,000 runs.

The studies are what the committed specs make: one per spec that regenerates a table, at its
paper profile, with the spec's cells, cell ids, hparams points and logged params, the metrics
the tables read, and the runs shared in proportion to the runs each spec plans (more seeds than
planned at 10,000). Creates each SQLite schema with MLflow itself, bulk-inserts the runs with SQL
(reports.synth), then times (1) the `reports build` command (a fresh process per study: imports
included) for every table in md, latex and csv, and for the largest study alone, (2)
build_reports() in-process, and (3) MLflow's own MlflowClient.search_runs reading the same runs
page by page, for comparison. Prints the numbers, and exits 1 when a table has no study, a
build does not write each of its tables in every format, or MLflow does not read back every run.
``--quick``: 400 runs (every cell of every table gets one) of 2 epochs, one repeat.

    python benchmarks/bench_reports.py [--runs 10000] [--epochs 10] [--dir /tmp/bench_reports]
                                       [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import parse_args  # noqa: E402
from reports.synth import SynthCell, SynthRun, synth_study, table_metrics, write_bulk_sql  # noqa: E402
from reports.tables import TABLES  # noqa: E402

SPECS = ROOT / "ablations"
FORMATS = ("md", "latex", "csv")
#: ``--quick``: at least one run of every cell of every table's spec (325 cells), so that a table
#: the synthetic studies get wrong fails here as it would at 10,000 runs.
QUICK = {"runs": 400, "epochs": 2, "repeat": 1}


@dataclass(frozen=True)
class SynthStudy:
    """One synthetic study: what one committed spec's study at its ``paper`` profile holds."""

    name: str
    """Study name, ``<spec name>-<profile>`` as ``study launch`` names it."""
    tables: tuple[str, ...]
    """The report tables of the spec (its parent run's ``locattn.tables``), those of :data:`TABLES`."""
    cells: tuple[SynthCell, ...]
    """The cells the spec plans, as the study tags and logs their runs."""

    @property
    def planned(self) -> int:
        """Runs the spec plans: cells x hparams points x seeds."""
        return sum(len(c.points) * len(c.seeds) for c in self.cells)


def spec_studies(tables: Sequence[str]) -> list[SynthStudy]:
    """The studies the committed specs (``ablations/*.yaml``) make for ``tables``: one per spec
    that regenerates one of the tables, at its ``paper`` profile (else its default), each cell
    with its params as the study's writer logs them (its flattened config: a table's column
    params, such as Raffel & Ellis's ``task.t0`` and ``task.variable_length``, are read there),
    its hparams points and seeds. One study per spec, as the specs' studies are: two specs'
    cells in one study can be one cell to a table (Raffel & Ellis's Table 1 and variable-length
    runs on the same task and variant), which no study holds."""
    from locattn.config import config_to_dict, flatten, make_run_config
    from record.writer import param_items
    from study.spec import read_yaml, resolve_spec

    out = []
    for path in sorted(SPECS.glob("*.yaml")):
        raw = read_yaml(path)
        profile = "paper" if "paper" in (raw.get("profiles") or {}) else None
        spec = resolve_spec(raw, path=str(path), profile=profile)
        mine = tuple(t for t in spec.tables if t in tables)
        if spec.search is not None or not mine:
            continue
        cells = []
        for c in spec.cells:
            flat = flatten(config_to_dict(make_run_config(task=c.task, variant=c.variant, overrides=c.overrides)))
            params = {p.key: p.value for p in param_items(flat) if p.key != "seed"}
            cells.append(SynthCell(cell=c.cell, task=c.task, variant=c.variant, params=params,
                                   points=tuple(spec.hparam_points()), seeds=spec.seeds))
        out.append(SynthStudy(name=f"{spec.name}-{spec.profile}" if spec.profile else spec.name,
                              tables=mine, cells=tuple(cells)))
    return out


def synth_studies(n_runs: int, epochs: int, seed: int = 0) -> list[tuple[SynthStudy, list[SynthRun]]]:
    """Every table's studies (:func:`spec_studies`) with ``n_runs`` runs in all, shared in
    proportion to the runs each spec plans, every cell with at least one run
    (:func:`reports.synth.synth_study`: a share beyond the plan is more seeds). Refuses an
    ``n_runs`` below the number of cells, which would leave a table without runs."""
    studies = spec_studies(sorted(TABLES))
    n_cells = sum(len(s.cells) for s in studies)
    if n_runs < n_cells:
        raise SystemExit(f"--runs {n_runs}: at least {n_cells:,} (one run of every cell of every table's spec)")
    planned = sum(s.planned for s in studies)
    shares = [max(len(s.cells), n_runs * s.planned // planned) for s in studies]
    biggest = shares.index(max(shares))
    shares[biggest] += n_runs - sum(shares)  # what rounding left goes to the largest study
    metrics = table_metrics(TABLES.values())
    return [(s, synth_study(s.cells, metrics, n, epochs=epochs, seed=seed + i))
            for i, (s, n) in enumerate(zip(studies, shares))]


def write_studies(db: Path, n_runs: int, epochs: int) -> list[tuple[SynthStudy, list[SynthRun]]]:
    """Write :func:`synth_studies` into the SQLite store ``db``, one MLflow experiment per study
    (as studies launched with one ``--tracking-uri`` share a store); returns them."""
    studies = synth_studies(n_runs, epochs)
    first = 0
    for s, runs in studies:
        first += write_bulk_sql(db, s.name, runs, tables=s.tables, first_id=first)
    return studies


def build_command(uri: str, study: str, out: Path) -> list[str]:
    """``reports build`` of every table of one study of the store at ``uri``, as a fresh process."""
    return [sys.executable, "-m", "reports.cli", "build", "--tracking-uri", uri, "--study", study,
            "--format", ",".join(FORMATS), "--out", str(out)]


def time_reports_build(cmds: Sequence[tuple[list[str], int]], env: dict[str, str], repeat: int,
                       what: str) -> list[float]:
    """Run ``reports build`` commands (each with the number of files it must write) one after
    another as fresh processes, ``repeat`` times; print and return the wall time of each round,
    all commands together (a failure, or a build that writes another number of files, stops the
    benchmark with its output)."""
    times = []
    n_files = 0
    for _ in range(repeat):
        t = time.perf_counter()
        n_files = 0
        for cmd, want in cmds:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise SystemExit(f"{what} failed: {' '.join(cmd[2:])}\n{proc.stderr}")
            got = len(proc.stdout.split())
            if got != want:
                raise SystemExit(f"{what} wrote {got} files, not {want}: {' '.join(cmd[2:])}\n{proc.stdout}")
            n_files += got
        times.append(time.perf_counter() - t)
    print(f"{what} (CLI, a fresh process per study, {len(cmds)} studies, {n_files} files): "
          f"best {min(times):.2f} s, all {', '.join(f'{x:.2f}' for x in times)}")
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=10, help="per-epoch history rows per metric")
    ap.add_argument("--dir", default="/tmp/bench_reports")
    ap.add_argument("--repeat", type=int, default=3)
    args = parse_args(ap, QUICK, argv)

    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    db = work / "mlflow.db"
    uri = f"sqlite:///{db}"

    t = time.perf_counter()
    studies = write_studies(db, args.runs, args.epochs)
    t_write = time.perf_counter() - t
    n = sum(len(runs) + 1 for _, runs in studies)
    largest, largest_runs = max(studies, key=lambda x: len(x[1]))
    print(f"store: {n} runs (incl. {len(studies)} parents) in {len(studies)} studies, one per spec, "
          f"{db.stat().st_size / 1e6:.1f} MB, written in {t_write:.1f} s -> {db}")
    built = sorted({t for s, _ in studies for t in s.tables})
    print(f"tables: {len(built)} of {len(TABLES)} ({', '.join(built)}); largest study "
          f"{largest.name}: {len(largest_runs)} runs")
    if built != sorted(TABLES):
        raise SystemExit(f"no study builds {sorted(set(TABLES) - set(built))}")

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmds = {s.name: (build_command(uri, s.name, work / "out" / s.name), len(FORMATS) * len(s.tables))
            for s, _ in studies}
    time_reports_build(list(cmds.values()), env, args.repeat, "reports build")
    time_reports_build([cmds[largest.name]], env, args.repeat, f"reports build of the largest study, {largest.name}")

    probe = ("import time; t = time.perf_counter(); import locattn.variants, sys; "
             "print(f'{time.perf_counter() - t:.2f} {\"torch\" in sys.modules}')")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         cwd=ROOT).stdout.split()
    print(f"  of which importing locattn.variants (for PAPER_LABELS) in a fresh process: {out[0]} s"
          f" (imports torch: {out[1]})")

    from reports.build import build_reports, collect

    t = time.perf_counter()
    collect(uri, studies[0][0].name)
    t_cold = time.perf_counter() - t
    t = time.perf_counter()
    for s, _ in studies:
        build_reports(uri, s.name, None, FORMATS, work / "out2" / s.name)
    t_warm = time.perf_counter() - t
    print(f"in-process: read+aggregate of {studies[0][0].name} (first call, imports included) {t_cold:.2f} s; "
          f"full build_reports of every study {t_warm:.2f} s")

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    ids = [client.get_experiment_by_name(s.name).experiment_id for s, _ in studies]
    t = time.perf_counter()
    token, got = None, 0
    while True:
        page = client.search_runs(ids, max_results=1000, page_token=token)
        got += len(page)
        token = page.token
        if not token:
            break
    t_mlflow = time.perf_counter() - t
    print(f"MLflow MlflowClient.search_runs, all {got} runs in pages of 1000: {t_mlflow:.2f} s "
          f"(reading only, no aggregation); load average {os.getloadavg()[0]:.1f}")
    if got != n:
        raise SystemExit(f"MLflow read back {got} runs of the {n} written")


if __name__ == "__main__":
    main()
