"""Raffel & Ellis regressor training steps: the eager path against the fused one.

    python benchmarks/bench_regressor.py [--lengths 50 500 5000 10000] [--batch 100] [--repeats 3]
                                         [--threads 1] [--device cpu] [--quick]

Per model (feed-forward attention, unweighted mean) and length T: one training step (forward,
backward, Adam) on a batch of ``--batch`` sequences of length T, as the variable-length runs take
them (``raffel_variable.yaml``: T from 50 to 10,000, one T per batch, D = 100), on each
``train_path``; then a scoring pass over 256 sequences of mixed lengths (50-10,000, padded to the
longest, as the fixed test set is scored). Prints wall and CPU seconds per step (the repeat with
the least CPU time), the speed-up and the largest relative gradient difference between the two
paths. ``--quick`` runs T = 200 on a batch of 20, once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks._common import best, machine_line, parse_args, timed  # noqa: E402
from locattn.config import make_run_config  # noqa: E402
from locattn.models import build_regressor  # noqa: E402
from locattn.tasks import raffel  # noqa: E402


def step_time(model: torch.nn.Module, batch: tuple, repeats: int, device: torch.device):
    """(best timing of one training step, the gradients of the last one)."""
    x, lengths, y = (t.to(device) for t in batch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    timings = []
    for _ in range(repeats + 1):  # the first one warms the allocator
        with timed() as t:
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x, lengths)[0], y)
            loss.backward()
            grads = [p.grad.detach().clone() for p in model.parameters()]
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
        timings.append(t)
    return best(timings[1:]), grads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[50, 500, 5000, 10000])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--eval-size", type=int, default=256)
    args = parse_args(parser, {"lengths": [200], "batch": 20, "repeats": 1, "eval_size": 16}, argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(machine_line(), f"device={device}", flush=True)
    rng = np.random.default_rng(0)
    for variant in ("ffattn", "mean"):
        cfg = make_run_config(task="raffel_add", variant=variant).model
        for T in args.lengths:
            batch = raffel.sample_sequences(rng, np.full(args.batch, T), "add")
            res = {}
            for fused in (False, True):
                torch.manual_seed(0)
                model = build_regressor(cfg, fused=fused).to(device)
                res[fused] = step_time(model, batch, args.repeats, device)
            (te, ge), (tf, gf) = res[False], res[True]
            diff = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(gf, ge))
            print(f"{variant:6s} T={T:<6d} B={args.batch}: eager wall {te.wall:.3f} s (cpu {te.cpu:.3f}) | "
                  f"fused wall {tf.wall:.3f} s (cpu {tf.cpu:.3f}) | x{te.cpu / max(tf.cpu, 1e-9):.2f} cpu, "
                  f"x{te.wall / max(tf.wall, 1e-9):.2f} wall | max rel grad diff {diff:.1e}", flush=True)
        lengths = rng.integers(50, 10_001 if not args.quick else 301, args.eval_size)
        x, lengths, _ = (t.to(device) for t in raffel.sample_sequences(rng, lengths, "add"))
        line = []
        for fused in (False, True):
            model = build_regressor(cfg, fused=fused).to(device).eval()
            with torch.no_grad(), timed() as t:
                model(x, lengths)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            line.append(f"{'fused' if fused else 'eager'} wall {t.wall:.3f} s (cpu {t.cpu:.3f})")
        print(f"{variant:6s} scoring {args.eval_size} sequences padded to {int(lengths.max())}: "
              + " | ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
