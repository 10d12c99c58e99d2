"""Seconds per training epoch (train 10k + teacher-forced dev 2k), and greedy test scoring.

    python benchmarks/bench_epoch.py [--threads 1] [--repeats 2] [--quick] [--no-eval]
                                     [--cases copy/onestep,lookup/mix_locattn,recopy/mono]

Per case it prints wall and CPU seconds of the training pass, of teacher-forced dev scoring
and of the whole epoch (min over ``--repeats`` fresh epochs, by CPU time: the machine is
shared and noise only ever adds time), seed-epochs per core-second (1 / epoch CPU seconds
per thread), and the peak RSS after the case. With evaluation it also greedy-decodes every
Copy test split (7 x 2,000 examples, lengths up to 100) with the OneStep model after its epoch.

The reference code needs about 14-18 s per Copy epoch and 80 s per ReCopy epoch on these
machines (REFERENCE §3); the target here is <= 3 s per Copy epoch on one thread.
``--quick`` uses 1/10 of the sizes (smoke mode) and one repeat.
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
from locattn.tasks import load_task  # noqa: E402
from locattn.train import Seq2SeqRun, score_test_splits  # noqa: E402

CASES = "copy/onestep,lookup/mix_locattn,recopy/mono"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="epochs timed per case (min reported)")
    parser.add_argument("--no-eval", action="store_true", help="skip greedy scoring of Copy tests")
    parser.add_argument("--cases", default=CASES, help=f"comma-separated task/variant (default {CASES})")
    args = parse_args(parser, {"repeats": 1}, argv, what="1/10 of the split sizes")
    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    scale = 10 if args.quick else 1
    sizes = {"task.train_size": 10_000 // scale, "task.dev_size": 2_000 // scale,
             "task.test_size": 2_000 // scale, "num_threads": args.threads}
    print(f"{'case':<24} {'train':>6} {'dev':>5} {'train s':>14} {'dev s':>12} {'epoch s':>14} "
          f"{'seed-ep/core-s':>14} {'loss':>6} {'dev acc':>7} {'maxrss MB':>9}")
    print(f"{'':<24} {'':>6} {'':>5} {'wall / cpu':>14} {'wall / cpu':>12} {'wall / cpu':>14}")
    copy_run = None
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            task, variant = case.split("/")
            cfg = make_run_config(task=task, variant=variant, seed=0, overrides=sizes)
            data = load_task(cfg.task, cache_dir=cfg.cache_dir)
            run = Seq2SeqRun(cfg, data, Path(tmp))
            trains, devs, epochs = [], [], []
            for rep in range(args.repeats):
                run.epoch = rep + 1
                with timed() as t_epoch:
                    with timed() as t_train:
                        loss = run.train_epoch()
                    with timed() as t_dev:
                        _, dev_acc = run.dev_scores()
                trains.append(t_train)
                devs.append(t_dev)
                epochs.append(t_epoch)
            tr, dv, ep = best(trains), best(devs), best(epochs)
            rate = 1.0 / (ep.cpu * args.threads)
            print(f"{case:<24} {len(run.train_split):>6} {len(run.dev_split):>5} "
                  f"{tr.wall:>6.2f} / {tr.cpu:<5.2f} {dv.wall:>5.2f} / {dv.cpu:<4.2f} "
                  f"{ep.wall:>6.2f} / {ep.cpu:<5.2f} {rate:>14.3f} {loss:>6.3f} "
                  f"{100 * dev_acc:>6.1f}% {peak_rss_mb():>9.0f}", flush=True)
            if task == "copy":
                copy_run = run
        if copy_run is not None and not args.no_eval:
            with timed() as t_eval:
                test, _ = score_test_splits(copy_run.model, copy_run.data, copy_run.cfg, copy_run.ids)
            n_test = sum(int(m["n"]) for m in test.values())
            print(f"greedy scoring of all Copy test splits ({len(test)} splits, {n_test} examples, "
                  f"with attnLoss): wall {t_eval.wall:.2f} s, cpu {t_eval.cpu:.2f} s, "
                  f"maxrss {peak_rss_mb():.0f} MB")
            print("  " + ", ".join(f"{s}={100 * m['seq_acc']:.1f}%" for s, m in test.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
