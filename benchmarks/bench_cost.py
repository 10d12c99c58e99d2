"""Calibrate the cost model (study/cost/): seconds per 1,000 tokens per task x variant family.

    taskset -c 0 python benchmarks/bench_cost.py [--out study/cost/cost_calibration.json] [--quick]
                                                 [--tasks copy,scan] [--repeats 2]

For every (task, variant family) that a committed spec's ``paper`` profile uses, it takes that
spec's first cell of the pair (so the model size, batch size and dev scoring are the spec's),
cuts the data to a few hundred examples, and times in CPU seconds (process time, one thread):
training epochs, the per-epoch dev scoring with its checkpoint, and greedy scoring of every
test split; divided by the tokens of what it timed they are the rates. Start-up per run is a
fresh Python's ``import torch, locattn.train`` plus loading the full data and building the run.
Raffel & Ellis run a few hundred updates at the spec's first T0. CFQ has no data on these
machines: it is timed on synthetic files of the assumed shape (``CFQ_ASSUMED_TOKENS``).

The study's own start-up (Ray, the store, Tune) is not timed here: it is the 12-14 s before
``Tuner.fit`` that ``benchmarks/bench_study_scale.py`` measures (:data:`STUDY_STARTUP`).
Only this machine's CPU is measured: the table has no GPU rows, and a plan says so (a GPU run
needs wall-clock timing with device synchronisation).
``--quick`` times three tasks at tiny sizes and writes nothing unless ``--out`` is given.
``--tasks`` with ``--out`` naming an existing table replaces those tasks' rows and keeps the
others (the re-measure's command, machine and load go under the table's ``meta["cpu"]``).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._common import machine_line, parse_args, timed  # noqa: E402
from locattn.config import TRAIN_PATHS, make_run_config  # noqa: E402
from locattn.tasks import load_task  # noqa: E402
from locattn.train import NullRecorder, Seq2SeqRun  # noqa: E402
from locattn.training.regression import score, train_regression  # noqa: E402
from locattn.models import build_regressor  # noqa: E402
from study.cost import (CALIBRATION_FILE, CFQ_ASSUMED_TOKENS, Calibration, Rate,  # noqa: E402
                        calibration_from_dict, calibration_to_dict, cost_task, load_calibration,
                        merge_rates, run_cost, run_shape, split_ktok, variant_family)
from study.spec import SpecError, read_yaml, resolve_spec  # noqa: E402

STUDY_STARTUP = 13.0  # bench_study_scale.py: 12-14 s of fixed start-up before Tuner.fit


def spec_keys(tasks: set[str] | None) -> dict[tuple[str, str], tuple[str, object]]:
    """(task key, family) -> (spec file, its first cell of that pair), over every spec's paper
    profile. The task key is :func:`study.cost.cost_task`'s (variable-length Raffel has its own)."""
    keys: dict[tuple[str, str], tuple[str, object]] = {}
    for path in sorted((ROOT / "ablations").glob("*.yaml")):
        try:
            spec = resolve_spec(read_yaml(path), path=str(path), profile="paper")
        except SpecError as exc:
            print(f"skip {path.name}: {exc}", file=sys.stderr)
            continue
        for cell in spec.cells:
            cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
            key = cost_task(cfg.task)
            if tasks and key not in tasks:
                continue
            keys.setdefault((key, variant_family(cfg.model)), (path.name, cell))
    return keys


def fake_cfq(folder: Path, n: dict[str, int]) -> str:
    """CFQ-shaped synthetic files (question 10-25 tokens, query 40-100: about CFQ_ASSUMED_TOKENS)."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(60)]
    for split, count in n.items():
        with open(folder / f"{split}.tsv", "w") as fh:
            for _ in range(count):
                q = " ".join(rng.choice(words) for _ in range(rng.randint(10, 25)))
                s = " ".join(rng.choice(words) for _ in range(rng.randint(40, 100)))
                fh.write(f"{q}\t{s}\n")
    return str(folder)


def process_startup(repeats: int) -> float:
    """CPU seconds of a fresh ``python -c 'import torch, locattn.train'`` (least of ``repeats``)."""
    out = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import torch, locattn.train"], check=True, cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return min(out)


def time_seq2seq(cfg, sizes: dict[str, int], repeats: int, tmp: Path) -> dict[str, float]:
    with timed() as t_load:
        data = load_task(cfg.task, use_cache=False)
    splits = {name: (rows[: sizes["train"]] if name == "train" else
                     rows[: sizes["dev"]] if name == "dev" else rows[: sizes["test"]])
              for name, rows in data.splits.items()}
    small = replace(data, splits=splits)
    with timed() as t_build:
        run = Seq2SeqRun(cfg, small, tmp)
    trains, devs = [], []
    for _ in range(repeats):
        run.epoch += 1
        with timed() as t_train:
            loss = run.train_epoch()
        with timed() as t_dev:
            run.end_epoch(loss, 0.0, NullRecorder())
        trains.append(t_train.cpu)
        devs.append(t_dev.cpu)
    with timed() as t_test:
        run.finish()
    test_ktok = sum(split_ktok(splits[n]) for n in data.test_splits)
    return {"train": min(trains) / split_ktok(splits["train"]), "dev": min(devs) / split_ktok(splits["dev"]),
            "test": t_test.cpu / test_ktok, "load": t_load.cpu + t_build.cpu,
            "examples": f"{len(splits['train'])}/{len(splits['dev'])}/{len(splits[data.test_splits[0]])}"}


def time_regression(cfg, updates: int, n: int, repeats: int, tmp: Path) -> dict[str, float]:
    cfg = replace(cfg, task=replace(cfg.task, dev_size=n, test_size=n),
                  optim=replace(cfg.optim, updates_per_epoch=updates, epochs=repeats, stop_at_100=False))
    with timed() as t_load:
        data = load_task(cfg.task, use_cache=False)
        model = build_regressor(cfg.model, fused=cfg.train_path == "fused")
    with timed() as t_score:
        score(model, data.splits["test"], cfg.optim.dev_batch_size, torch.device(cfg.device))
    with timed() as t_run:
        train_regression(cfg, data, tmp, recorder=NullRecorder(), checkpoint=None)
    shape = run_shape(cfg)
    train_s = max(1e-6, t_run.cpu - (repeats + 1) * t_score.cpu) / repeats
    return {"train": train_s / shape.train, "dev": t_score.cpu / shape.test,
            "test": t_score.cpu / shape.test, "load": t_load.cpu, "examples": f"{updates}x{cfg.optim.batch_size}/{n}/{n}"}


def check_records(folder: Path, cal: Calibration) -> None:
    """Per committed record: its runs' measured epoch seconds (median over runs of the last
    epoch's wall time, as recorded) against this model's and the old flat model's epoch cost."""
    import statistics

    from reports.runset import read_runs, resolve_source  # here: polars, only for --check-records

    print(f"check against committed records in {folder} (measured: median wall epoch_seconds of "
          "the last epoch, 2 trials at a time on this 2-core machine; model: one thread, no load)")
    print(f"{'record':<24} {'task':<20} {'runs':>4} {'measured s':>10} {'model s':>8} {'ratio':>6} "
          f"{'flat s':>7} {'ratio':>6}")
    for meta_path in sorted(folder.glob("*/study.json")):
        meta = json.loads(meta_path.read_text())
        try:
            spec = resolve_spec(meta["raw"], path=meta["spec_path"], profile=meta["profile"] or None,
                                only=meta.get("only") or None)
        except SpecError as exc:
            print(f"{meta_path.parent.name:<24} skipped: {exc}")
            continue
        uri, name = resolve_source(meta_path.parent, study=meta["name"])
        runs = read_runs(uri, name, metric_keys=["epoch_seconds"])
        measured = dict(zip(runs.runs["run_id"].to_list(), runs.runs["cell"].to_list()))
        by_cell: dict[str, list[float]] = {}
        for run_id, value in zip(runs.metrics["run_id"].to_list(), runs.metrics["value"].to_list()):
            by_cell.setdefault(measured.get(run_id), []).append(value)
        by_task: dict[str, list[tuple[float, float, float]]] = {}
        for cell in spec.cells:
            if cell.cell not in by_cell:
                continue
            cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
            model = run_cost(cfg, cal, "cpu", spec.seconds_per_1k_examples)
            flat = run_cost(cfg, Calibration(rates=()), "cpu", spec.seconds_per_1k_examples)
            for value in by_cell[cell.cell]:
                by_task.setdefault(cell.task, []).append((value, model.epoch, flat.epoch))
        for task, rows in sorted(by_task.items()):
            m, p, f = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"{meta_path.parent.name:<24} {task:<20} {len(rows):>4} {m:>10.2f} {p:>8.2f} {m / p:>6.2f} "
                  f"{f:>7.2f} {m / f:>6.2f}", flush=True)


def readme_table(cal: Calibration, profile: str = "paper") -> None:
    """Markdown: each spec's ``profile`` priced by the table (README "What a study costs")."""
    from study.cost import cell_costs, study_seconds, wall_seconds

    print(f"| spec (`{profile}`) | runs | epochs per run | CPU-hours, this CPU | wall, 2 cores | one H100 |")
    print("|---|---:|---:|---:|---:|---|")
    for path in sorted((ROOT / "ablations").glob("*.yaml")):
        spec = resolve_spec(read_yaml(path), path=str(path), profile=profile)
        cells = cell_costs(spec, cal)
        epochs = max(c.cost.epochs for c in cells)
        hours = study_seconds(cells) * max(1.0, spec.cpus) / 3600
        wall = wall_seconds(cells, 2, cal.study_startup) / 3600
        wall_text = f"{wall:,.1f} h" if wall < 48 else f"{wall / 24:,.1f} days"
        note = " (CFQ lengths assumed)" if any(c.cost.assumed for c in cells) else ""
        gpu_cells = cell_costs(spec, cal, "h100")  # None: no h100 row, or cells no graphed pack trains
        gpu = "unmeasured" if gpu_cells is None else f"{study_seconds(gpu_cells) / 3600:,.1f} GPU-h"
        print(f"| {path.stem}{note} | {spec.n_runs():,} | {epochs} | {hours:,.1f} | "
              f"{wall_text} | {gpu} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the calibration table here (JSON)")
    parser.add_argument("--tasks", default="",
                        help="comma-separated task keys of the table (default: every task a spec "
                             "uses; variable-length Raffel is raffel_add@variable). With --out "
                             "naming an existing table, only their rows are replaced")
    parser.add_argument("--repeats", type=int, default=2, help="epochs timed per pair (min reported)")
    parser.add_argument("--train", type=int, default=400, help="training examples timed per epoch")
    parser.add_argument("--train-path", choices=("eager", "compiled", "fused"), default="eager",
                        help="time the runs on this RunConfig.train_path; rows are tagged with it and "
                             "price studies launched with that --train-path (cells whose model does "
                             "not take it are skipped). Not eager: needs --tasks and --out naming the "
                             "existing table, whose other rows are kept")
    parser.add_argument("--check-records", metavar="DIR",
                        help="only compare the committed table with the records under DIR (results/record)")
    parser.add_argument("--readme-table", action="store_true",
                        help="only print each spec's paper profile priced by the table (Markdown)")
    args = parse_args(parser, {"tasks": "copy,raffel_add,cfq", "repeats": 1, "train": 48}, argv,
                      what="three tasks at tiny sizes")
    torch.set_num_threads(1)
    machine = machine_line()
    print(machine, flush=True)
    if args.check_records:
        check_records(Path(args.check_records), load_calibration(args.out or CALIBRATION_FILE))
        return 0
    if args.readme_table:
        readme_table(load_calibration(args.out or CALIBRATION_FILE))
        return 0
    sizes = {"train": args.train, "dev": max(16, args.train // 2), "test": max(4, args.train // 8)}
    keys = spec_keys(set(args.tasks.split(",")) - {""} or None)
    boot = process_startup(args.repeats)
    print(f"process start-up (import torch, locattn.train): {boot:.2f} CPU s", flush=True)
    print(f"{'task':<20} {'family':<26} {'spec':<20} {'timed':>13} {'train':>7} {'dev':>7} {'test':>7} "
          f"{'start-up':>8}  (CPU s per 1k tokens; start-up s)")
    rates = []
    with tempfile.TemporaryDirectory() as tmp_root:
        for i, ((task, family), (spec_name, cell)) in enumerate(sorted(keys.items())):
            overrides = {**cell.overrides, "num_threads": 1}
            if cell.task == "cfq":
                folder = Path(tmp_root) / "cfq"
                folder.mkdir(exist_ok=True)
                overrides["task.data_dir"] = fake_cfq(folder, {"train": sizes["train"],
                                                               "dev": sizes["dev"], "test": sizes["test"]})
            cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=overrides)
            if args.train_path not in TRAIN_PATHS[cfg.model.kind]:
                print(f"{task:<20} {family:<26} skipped: a {cfg.model.kind} model does not take "
                      f"--train-path {args.train_path}", flush=True)
                continue
            cfg = replace(cfg, train_path=args.train_path)
            tmp = Path(tmp_root) / f"run{i}"
            tmp.mkdir()
            if cfg.model.kind == "regressor":
                r = time_regression(cfg, max(3, args.train // 2), sizes["dev"], args.repeats, tmp)
            else:
                r = time_seq2seq(cfg, sizes, args.repeats, tmp)
            rate = Rate(device="cpu", task=task, family=family, train=r["train"],
                        dev=r["dev"], test=r["test"], startup=boot + r["load"], path=args.train_path)
            rates.append(rate)
            print(f"{task:<20} {family:<26} {spec_name:<20} {r['examples']:>13} {rate.train:>7.3g} "
                  f"{rate.dev:>7.3g} {rate.test:>7.3g} {rate.startup:>8.2f}", flush=True)
    cal = Calibration(rates=tuple(rates), study_startup=STUDY_STARTUP, meta={
        "command": "taskset -c 0 python benchmarks/bench_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "units": "CPU seconds of one thread per 1,000 tokens (source + target lengths; Raffel: T per "
                 "sequence); startup in seconds per run",
        "study_startup": "docs/scaling.md (12-14 s before Tuner.fit), not timed here",
        "cfq": f"timed on synthetic files of about {CFQ_ASSUMED_TOKENS} tokens per example"})
    load_end = machine_line().rsplit("loadavg(1,5,15)=", 1)[1]
    cal.meta["loadavg_end"] = load_end
    print(f"{len(rates)} rows; loadavg now {load_end}")
    if args.out and args.train_path != "eager" and not (Path(args.out).is_file() and args.tasks):
        print(f"{args.out}: not written: --train-path {args.train_path} rows join an existing table "
              "(--out naming it, with --tasks)", file=sys.stderr)
        return 2
    if args.out:
        if Path(args.out).is_file() and args.tasks:
            # a re-measure of some tasks: every other row is kept; its meta goes under "cpu"
            old = calibration_from_dict(json.loads(Path(args.out).read_text()))
            cal = merge_rates(old, cal.rates, meta=cal.meta)
        elif Path(args.out).is_file():  # other devices' rows (benchmarks/bench_gpu.py --calibrate) are kept
            old = calibration_from_dict(json.loads(Path(args.out).read_text()))
            gpu = tuple(r for r in old.rates if r.device != "cpu")
            cal = Calibration(rates=gpu + cal.rates, study_startup=cal.study_startup,
                              meta={**{d: m for d, m in old.meta.items() if d in {r.device for r in gpu}}, **cal.meta})
        Path(args.out).write_text(json.dumps(calibration_to_dict(cal), indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
