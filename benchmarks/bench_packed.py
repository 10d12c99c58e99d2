"""Seed-epochs per core-second: K solo runs vs the same K runs packed into one process.

    python benchmarks/bench_packed.py [--k 5] [--cases copy/onestep] [--train-size 10000]
                                      [--repeats 1] [--threads 1] [--quick]

For each case: K solo training epochs (``Seq2SeqRun.train_epoch``, seeds 0..K-1) and one
packed epoch of the same K runs (``locattn.packed``); training pass only (dev scoring and
test scoring run per replica with the solo code in both cases). Prints CPU and wall seconds,
seed-epochs per core-second for both, the ratio (target >= 3 at K = 5), the largest
difference of the per-replica mean training losses (they are the same runs: it exits 1 when one
is above 1e-6), and peak RSS. ``--quick``: K = 2 on 200 training examples.

``--ablation onestep,onestep_no_step2,onestep_no_step3,onestep_no_sigmoid`` (Copy variants that
differ only in switches, :data:`locattn.packed.SWITCH_FIELDS`) adds two lines: the variants' K
seeds each trained solo, as one pack per variant and as one pack of all of them (training pass,
seed-epochs per core-second); then ``--whole-runs`` of ``--epochs`` epochs each, ``train`` one
run after another against ``train_packed`` of all of them (dev scoring, test scoring, the
attention figure included: what a trial costs), CPU and wall seconds, and whether every run's
history and test metrics are equal.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._common import best, machine_line, parse_args, peak_rss_mb, timed  # noqa: E402
from locattn.config import make_run_config  # noqa: E402
from locattn.packed import packed_train_epoch  # noqa: E402
from locattn.tasks import load_task  # noqa: E402
from locattn.train import Seq2SeqRun  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--cases", default="copy/onestep")
    parser.add_argument("--train-size", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ablation", default=None, help="Copy variants packed together (comma-separated)")
    parser.add_argument("--whole-runs", action="store_true", help="with --ablation: also whole runs, solo vs packed")
    parser.add_argument("--epochs", type=int, default=2, help="epochs of each --whole-runs run")
    args = parse_args(parser, {"k": 2, "train_size": 200}, argv)
    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    print(f"K={args.k} train_size={args.train_size} (training pass only; min of {args.repeats})")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            task, variant = case.split("/")
            over = {"num_threads": args.threads}
            if task != "lookup":
                over.update({"task.train_size": args.train_size, "task.dev_size": 200, "task.test_size": 10})
            cfgs = [make_run_config(task=task, variant=variant, seed=s, overrides=over) for s in range(args.k)]
            data = load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)

            def fresh() -> list[Seq2SeqRun]:
                return [Seq2SeqRun(c, data, Path(tmp) / f"r{c.seed}") for c in cfgs]

            solo_t, pack_t = [], []
            for rep in range(args.repeats):
                runs = fresh()
                with timed() as t:
                    solo_losses = []
                    for r in runs:
                        r.epoch = 1
                        solo_losses.append(r.train_epoch())
                solo_t.append(t)
                runs = fresh()
                for r in runs:
                    r.epoch = 1
                with timed() as t:
                    pack_losses = packed_train_epoch(runs, 1)
                pack_t.append(t)
            s, p = best(solo_t), best(pack_t)
            rate_s = args.k / (s.cpu * args.threads)
            rate_p = args.k / (p.cpu * args.threads)
            diff = max(abs(a - b) for a, b in zip(solo_losses, pack_losses))
            worst = max(worst, diff)
            print(f"{case}: {args.k} solo epochs cpu {s.cpu:.2f} s (wall {s.wall:.2f}) -> "
                  f"{rate_s:.3f} seed-epochs/core-s | packed cpu {p.cpu:.2f} s (wall {p.wall:.2f}) -> "
                  f"{rate_p:.3f} seed-epochs/core-s | speed-up x{rate_p / rate_s:.2f} | "
                  f"max |loss solo - packed| {diff:.2e} | maxrss {peak_rss_mb():.0f} MB", flush=True)
        if args.ablation:
            worst = max(worst, ablation_line(args, Path(tmp)))
    if worst > 1e-6:
        print(f"FAILED: packed and solo training losses differ by {worst:.2e} (> 1e-6)", file=sys.stderr)
        return 1
    return 0


def ablation_line(args: argparse.Namespace, tmp: Path) -> float:
    """One pack per variant against one pack of every variant's K seeds; the largest loss
    difference between the two (the same runs)."""
    variants = args.ablation.split(",")
    over = {"num_threads": args.threads, "task.train_size": args.train_size, "task.dev_size": 200,
            "task.test_size": 10}
    cfgs = [make_run_config(task="copy", variant=v, seed=s, overrides=over) for v in variants for s in range(args.k)]
    data = load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)

    def fresh() -> list[Seq2SeqRun]:
        runs = [Seq2SeqRun(c, data, tmp / f"a{i}") for i, c in enumerate(cfgs)]
        for r in runs:
            r.epoch = 1
        return runs

    solo_t, apart_t, one_t = [], [], []
    for rep in range(args.repeats):
        runs = fresh()
        with timed() as t:
            solo = [r.train_epoch() for r in runs]
        solo_t.append(t)
        runs = fresh()
        with timed() as t:
            apart = [x for v in range(len(variants)) for x in packed_train_epoch(runs[v * args.k:(v + 1) * args.k], 1)]
        apart_t.append(t)
        runs = fresh()
        with timed() as t:
            one = packed_train_epoch(runs, 1)
        one_t.append(t)
    s, a, o = best(solo_t), best(apart_t), best(one_t)
    n = len(cfgs)
    diff = max(abs(x - y) for x, y in zip(apart + solo, one + one))
    print(f"ablation copy/{'+'.join(variants)} x {args.k} seeds: {n} solo cpu {s.cpu:.2f} s (wall {s.wall:.2f}) -> "
          f"{n / (s.cpu * args.threads):.3f} seed-epochs/core-s | {len(variants)} packs cpu {a.cpu:.2f} s "
          f"(wall {a.wall:.2f}) -> {n / (a.cpu * args.threads):.3f} seed-epochs/core-s | one pack cpu "
          f"{o.cpu:.2f} s (wall {o.wall:.2f}) -> {n / (o.cpu * args.threads):.3f} seed-epochs/core-s | "
          f"x{s.cpu / o.cpu:.2f} over solo, x{a.cpu / o.cpu:.2f} over packs per variant | "
          f"max |loss solo or apart - together| {diff:.2e}", flush=True)
    if args.whole_runs:
        diff = max(diff, whole_runs_line(args, tmp, cfgs))
    return diff


def whole_runs_line(args: argparse.Namespace, tmp: Path, cfgs: list) -> float:
    """Whole runs of ``cfgs`` (``--epochs`` each): ``train`` one after another against one
    ``train_packed``; 0 when every run's history (without its seconds) and test metrics are
    equal, else infinity."""
    from dataclasses import replace

    from locattn.packed import train_packed
    from locattn.train import train

    cfgs = [replace(c, optim=replace(c.optim, epochs=args.epochs)) for c in cfgs]
    with timed() as s:
        solo = [train(c, tmp / f"w{i}") for i, c in enumerate(cfgs)]
    with timed() as p:
        packed = train_packed(cfgs, [tmp / f"wp{i}" for i in range(len(cfgs))])

    def key(r) -> tuple:
        return [{k: v for k, v in h.items() if k != "epoch_seconds"} for h in r.history], r.test

    same = all(key(a) == key(b) for a, b in zip(solo, packed))
    print(f"whole runs ({args.epochs} epochs, dev 200, test 10): {len(cfgs)} solo cpu {s.cpu:.2f} s "
          f"(wall {s.wall:.2f}) | one pack cpu {p.cpu:.2f} s (wall {p.wall:.2f}) | x{s.cpu / p.cpu:.2f} cpu, "
          f"x{s.wall / p.wall:.2f} wall | every run equal: {same}", flush=True)
    return 0.0 if same else float("inf")


if __name__ == "__main__":
    sys.exit(main())
