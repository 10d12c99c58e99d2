"""Per-epoch wall time of the training loop, and greedy test-scoring time.

    python benchmarks/bench_epoch.py [--threads 1] [--quick]

Measures, on the papers' split sizes (train 10k, dev 2k, test 2k per split):
  * one epoch = training pass + teacher-forced dev scoring, for OneStep on Copy, Mix LocAttn on
    Lookup, and Mono on ReCopy;
  * greedy decoding of every Copy test split (iid, len15 .. len100) with the OneStep model
    after its epoch (a trained model stops at <eos>, as in real runs).
The reference code needs about 14-18 s per Copy epoch and 80 s per ReCopy epoch on 2 cores
(REFERENCE §3). ``--quick`` uses 1/10 of the sizes (smoke mode).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from locattn.config import make_run_config  # noqa: E402
from locattn.tasks import load_task  # noqa: E402
from locattn.train import _Seq2SeqRun, score_test_splits  # noqa: E402

CASES = (("copy", "onestep"), ("lookup", "mix_locattn"), ("recopy", "mono"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="1/10 of the split sizes")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    scale = 10 if args.quick else 1
    sizes = {"task.train_size": 10_000 // scale, "task.dev_size": 2_000 // scale,
             "task.test_size": 2_000 // scale, "num_threads": args.threads}
    rows = []
    copy_run = None
    with tempfile.TemporaryDirectory() as tmp:
        for task, variant in CASES:
            cfg = make_run_config(task=task, variant=variant, seed=0, overrides=sizes)
            data = load_task(cfg.task, cache_dir=cfg.cache_dir)
            run = _Seq2SeqRun(cfg, data, Path(tmp))
            run.epoch = 1
            t0 = time.perf_counter()
            loss = run.train_epoch()
            t1 = time.perf_counter()
            _, dev_acc = run.dev_scores()
            t2 = time.perf_counter()
            rows.append((f"{task} / {variant}", len(run.train_split), len(run.dev_split),
                         t1 - t0, t2 - t1, t2 - t0, loss, dev_acc))
            if task == "copy":
                copy_run = run
        assert copy_run is not None
        t0 = time.perf_counter()
        test, _ = score_test_splits(copy_run.model, copy_run.data, copy_run.cfg, copy_run.ids)
        greedy_seconds = time.perf_counter() - t0

    print(f"threads={args.threads}  torch={torch.__version__}")
    print(f"{'case':<26} {'train':>6} {'dev':>5} {'train s':>8} {'dev s':>6} {'epoch s':>8} "
          f"{'loss':>7} {'dev acc':>8}")
    for name, n_train, n_dev, tr, dv, ep, loss, acc in rows:
        print(f"{name:<26} {n_train:>6} {n_dev:>5} {tr:>8.1f} {dv:>6.1f} {ep:>8.1f} "
              f"{loss:>7.3f} {100 * acc:>7.1f}%")
    n_test = sum(int(m["n"]) for m in test.values())
    print(f"greedy scoring of all Copy test splits ({len(test)} splits, {n_test} examples, "
          f"with attnLoss): {greedy_seconds:.1f} s")
    print("  " + ", ".join(f"{s}={100 * m['seq_acc']:.1f}%" for s, m in test.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
