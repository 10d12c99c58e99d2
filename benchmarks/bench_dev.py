"""CPU seconds of one run's per-epoch dev work (``Seq2SeqRun.dev_scores``), and for a Mix run the
same work with the mix gate read by a second pass instead of from the scoring forward.

    python benchmarks/bench_dev.py [--cases copy/mix_onestep_pr,copy/onestep] [--train-step graphed]
                                   [--dev-size 2000] [--repeats 5] [--threads 1] [--quick]

Per case, one untrained run of the paper's model (its dev split: ``--dev-size`` examples at
``optim.dev_batch_size``). ``now``: what ``Seq2SeqRun.end_epoch`` spends on dev after an epoch's
training pass (a Mix run's ``mix_gate`` is read from the scoring forward). ``two passes``, Mix
runs only: the scoring pass, then a traced pass of its own for the gate. The
minimum over ``--repeats`` (noise only adds time) of this process's CPU seconds, wall beside it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._common import best, machine_line, parse_args, timed  # noqa: E402
from locattn.config import make_run_config  # noqa: E402
from locattn.tasks import load_task  # noqa: E402
from locattn.training.seq2seq import Seq2SeqRun  # noqa: E402


@torch.no_grad()
def gate_pass(run: Seq2SeqRun) -> float:
    """The mean mix gate from a traced pass of its own (the former second dev pass)."""
    run.model.eval()
    split, total, n = run.dev_split, torch.zeros((), dtype=torch.float64), 0
    for index in split.sorted_batches(run.cfg.optim.dev_batch_size):
        b = split.batch(index)
        gate = run.model(b.src, b.src_len, b.tgt_in, trace=True).trace.mix_gate  # (B, T)
        total += gate[b.tgt_out != split.pad_id].double().sum()
        n += b.n_tokens
    return float(total) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="copy/mix_onestep_pr,copy/onestep", help="task/variant, comma-separated")
    ap.add_argument("--train-step", choices=("eager", "graphed"), default="graphed",
                    help="optim.train_step of the runs (graphed scores dev as a pack of one)")
    ap.add_argument("--dev-size", type=int, default=2000, help="task.dev_size (the paper's: 2,000)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = parse_args(ap, {"dev_size": 200, "repeats": 2}, argv, "a 200-example dev split")
    torch.set_num_threads(args.threads)
    print(machine_line())
    tmp = Path(tempfile.mkdtemp(prefix="bench_dev-"))
    for case in args.cases.split(","):
        task, variant = case.split("/")
        over = {"task.dev_size": args.dev_size, "task.train_size": 64, "cache_dir": str(tmp / "cache"),
                "device": "cpu", "num_threads": args.threads}
        if args.train_step == "graphed":
            over["optim.train_step"] = "graphed"
        cfg = make_run_config(task=task, variant=variant, seed=0, overrides=over)
        run = Seq2SeqRun(cfg, load_task(cfg.task, cache_dir=cfg.cache_dir), tmp / case.replace("/", "-"))
        mix = cfg.model.attention.mode == "mix"
        contenders = {"now": run.dev_scores}
        if mix:
            contenders["two passes"] = lambda: (run.dev_scores(), gate_pass(run))
        for work in contenders.values():
            work()  # untimed: first-call costs
        times: dict[str, list] = {name: [] for name in contenders}
        for _ in range(args.repeats):  # each round times every contender, so load changes hit all alike
            for name, work in contenders.items():
                with timed() as t:
                    work()
                times[name].append(t)
        line = f"{case}: dev {len(run.dev_split)} examples, batch {cfg.optim.dev_batch_size}, {args.train_step}"
        for name in contenders:
            t = best(times[name])
            line += f" | {name} cpu {t.cpu:.3f} s (wall {t.wall:.3f})"
        if mix:
            line += f" | x{best(times['two passes']).cpu / best(times['now']).cpu:.2f}"
            gate = run.dev_scores().mix_gate
            line += f" | gate now {gate:.9f}, own pass {gate_pass(run):.9f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
