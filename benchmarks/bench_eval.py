"""Greedy evaluation time: all test splits of Copy (7 x 2,000 examples, lengths up to 100).

    python benchmarks/bench_eval.py [--variant onestep] [--train-epochs 1] [--repeats 2]
                                    [--checkpoint path/to/best_model.pt] [--threads 1]
                                    [--train-size N] [--dev-size N] [--test-size N] [--quick]

Scores every Copy test split with the trainer's own scoring (``score_test_splits``: batched by
source length, task cap per example, never the gold length, attnLoss with the gold attention)
and prints CPU and wall seconds per split and in total (min over repeats), peak RSS and the
machine. The model is trained for ``--train-epochs`` Copy epochs first, or loaded from
``--checkpoint``. A trained model emits the whole target, then <eos>. An untrained one (0
epochs) mostly emits <eos> at once (len100: 1.2 tokens on average), but about 1 % of its
sequences run to their cap, so every batch still decodes all of its steps. Target: <= 5 s per
model. The split sizes are Copy's own unless given; ``--quick`` trains one epoch on 200 examples
and scores test splits of 50, once.
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
from locattn.train import Seq2SeqRun, split_metrics  # noqa: E402
from locattn.training.data import EncodedSplit  # noqa: E402
from locattn.training.evaluate import greedy_decode, split_caps  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="onestep")
    parser.add_argument("--train-epochs", type=int, default=1)
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--train-size", type=int, default=None, help="default: Copy's own")
    parser.add_argument("--dev-size", type=int, default=None, help="default: Copy's own")
    parser.add_argument("--test-size", type=int, default=None, help="per test split; default: Copy's own")
    args = parse_args(parser, {"train_size": 200, "dev_size": 50, "test_size": 50, "train_epochs": 1,
                               "repeats": 1}, argv)
    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    overrides: dict = {"num_threads": args.threads}
    for key in ("train_size", "dev_size", "test_size"):
        if getattr(args, key) is not None:
            overrides[f"task.{key}"] = getattr(args, key)
    cfg = make_run_config(task="copy", variant=args.variant, seed=0, overrides=overrides)
    data = load_task(cfg.task, cache_dir=cfg.cache_dir)
    with tempfile.TemporaryDirectory() as tmp:
        run = Seq2SeqRun(cfg, data, Path(tmp))
        if args.checkpoint:
            run.model.load_state_dict(torch.load(args.checkpoint, map_location=run.device))
        else:
            for epoch in range(1, args.train_epochs + 1):
                run.epoch = epoch
                run.train_epoch()
        model, ids = run.model, run.ids
        splits = {n: EncodedSplit(data.splits[n], data.vocab, **ids, device=run.device)
                  for n in data.test_splits}
        caps = {n: split_caps(s, data.decode_cap) for n, s in splits.items()}
        per_split: dict[str, list] = {n: [] for n in splits}
        totals = []
        for _ in range(args.repeats):
            with timed() as total:
                for name, split in splits.items():
                    with timed() as t:
                        decoded = greedy_decode(model, split, caps[name], cfg.optim.dev_batch_size,
                                                want_attention=split.attn is not None)
                        metrics, _ = split_metrics(split, decoded)
                    per_split[name].append((t, metrics))
            totals.append(total)
    print(f"Copy / {args.variant}, trained {args.train_epochs} epoch(s), dev batch "
          f"{cfg.optim.dev_batch_size}; greedy scoring with attnLoss (min of {args.repeats}):")
    for name, runs in per_split.items():
        t = best([r[0] for r in runs])
        m = runs[-1][1]
        print(f"  {name:<7} n={int(m['n'])}  cpu {t.cpu:6.2f} s  wall {t.wall:6.2f} s  "
              f"seq_acc {100 * m['seq_acc']:5.1f}%")
    t = best(totals)
    print(f"total: cpu {t.cpu:.2f} s, wall {t.wall:.2f} s, maxrss {peak_rss_mb():.0f} MB "
          f"(target <= 5 s per model)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
