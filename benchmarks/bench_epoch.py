"""Seconds per training epoch (train 10k + teacher-forced dev 2k), side by side with the reference.

    python benchmarks/bench_epoch.py [--reference DIR] [--paths eager,compiled] [--k 1,5]
                                     [--threads 1] [--repeats 2] [--quick] [--no-eval]
                                     [--cases copy/onestep,lookup/mix_locattn,recopy/mono]

Contenders per case: this project's training on each ``--paths`` (``RunConfig.train_path``
``eager``/``compiled``, or ``graphed``: ``optim.train_step: graphed``, the device path's
static-shape step, uncaptured on CPU, and ``graphed_compiled``: that step with
``train_path: compiled``) at each pack size ``--k`` (K = 1: a solo run; K > 1:
seeds 0..K-1 trained as one pack, dev scored per seed), and for ``copy/onestep`` with ``--reference DIR`` the reference code
(JRC1995/MonotonicLocationAttention, a checkout at DIR, not part of this project) on the same
data: its BiGRU OneStep config, model, agent and collater, and its Trainer's loop (forward,
backward, clip + AdamW per batch of 32; teacher-forced dev under no_grad with its per-batch
decoding and accuracy). It needs only torch; its unused ``nltk``/``jsonlines`` imports are
stubbed.

Every contender first runs one untimed epoch (reported as ``first``: wall and CPU seconds
including compiler subprocesses, i.e. what the compiled path pays to compile or to load its
graphs from inductor's cache), then ``--repeats`` rounds time one epoch of each contender in
turn, so load changes hit all alike. Reported: CPU seconds of the process (the minimum over
rounds; noise only adds time) of the training pass and the dev pass per seed, wall beside it,
and ``x ref``: the reference's epoch CPU seconds over this contender's per seed. With
evaluation it also greedy-decodes every Copy test split (7 x 2,000 examples, lengths up to 100)
with the eager OneStep model, and, for each graphed K, decodes them for the K replicas as the
graphed path scores tests (:mod:`locattn.training.decode`: one batched pass) against K eager
decodes (``greedy_decode`` per replica), per seed. ``--quick`` uses 1/10 of the sizes, the eager path, K = 1 and one
repeat.
"""

from __future__ import annotations

import argparse
import importlib
import random
import resource
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._common import Timing, machine_line, parse_args, peak_rss_mb, timed  # noqa: E402
from locattn.config import make_run_config  # noqa: E402
from locattn.tasks import load_task  # noqa: E402
from locattn.train import Seq2SeqRun, score_test_splits  # noqa: E402
from locattn.training.data import EncodedSplit  # noqa: E402
from locattn.training.decode import graphed_test_decodes  # noqa: E402
from locattn.training.epoch import packed_train_epoch  # noqa: E402
from locattn.training.evaluate import greedy_decode, split_caps  # noqa: E402
from locattn.training.graphed import graphed_dev_scores, graphed_train_epoch  # noqa: E402

CASES = "copy/onestep,lookup/mix_locattn,recopy/mono"


@dataclass
class Contender:
    """One way of training a case: ``epoch(n)`` runs epoch n and returns (train, dev) Timings."""

    name: str
    seeds: int
    epoch: Callable[[int], tuple[Timing, Timing]]
    first: tuple[float, float] = (0.0, 0.0)
    rounds: list[tuple[Timing, Timing]] = field(default_factory=list)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ours(cfgs: list[Any], data: Any, tmp: Path) -> tuple[Callable[[int], tuple[Timing, Timing]], list[Seq2SeqRun]]:
    """Epoch function of this project's runs ``cfgs`` (one: solo; several: one pack)."""
    runs = [Seq2SeqRun(cfg, data, tmp / f"{cfg.train_path}-{cfg.optim.train_step}-{len(cfgs)}-{cfg.seed}")
            for cfg in cfgs]
    graphed = cfgs[0].optim.train_step == "graphed"
    cache: dict[Any, Any] = {}  # the graphed step, kept across epochs as train_packed keeps it

    def epoch(n: int) -> tuple[Timing, Timing]:
        for r in runs:
            r.epoch = n
        with timed() as t_train:
            if graphed:
                graphed_train_epoch(runs, n, cache)
            elif len(runs) == 1:
                runs[0].train_epoch()
            else:
                packed_train_epoch(runs, n)
        with timed() as t_dev:
            if graphed:
                graphed_dev_scores(runs)
            else:
                for r in runs:
                    r.dev_scores()
        return t_train, t_dev

    return epoch, runs


def reference(ref_dir: str, data: Any) -> Callable[[int], tuple[Timing, Timing]]:
    """Epoch function of the reference code (see the module docstring) on ``data``."""
    sys.path.insert(0, ref_dir)
    for name in ("nltk", "jsonlines"):  # imported at the top of its modules, unused here
        sys.modules.setdefault(name, types.ModuleType(name))
    configs = importlib.import_module("configs.copy_configs")
    framework = importlib.import_module("models.seq2seq_framework").seq2seq_framework
    agent_cls = importlib.import_module("agents.seq2seq_agent").seq2seq_agent
    collater_cls = importlib.import_module("collaters.seq2seq_collater").seq2seq_collater
    obj = configs.BiGRU_OneStep_config()
    config = {a: getattr(obj, a) for a in dir(obj) if not a.startswith("__")}
    stoi = data.vocab.stoi
    config.update(dataset="copy", model_type="seq2seq", device=torch.device("cpu"), vocab2idx=stoi,
                  vocab_len=len(stoi), PAD_id=stoi["<pad>"], UNK_id=stoi["<unk>"], SEP_id=None,
                  SOS_id=stoi["<sos>"], EOS_id=stoi["<eos>"], generate=False,
                  idx2vocab={i: t for t, i in stoi.items()})

    def samples(split: str) -> list[dict[str, Any]]:
        out = []
        for ex in data.splits[split]:
            src, trg = list(ex.src), list(ex.tgt) + ["<eos>"]
            ids = [stoi[t] for t in src]
            out.append({"src": src, "trg": trg, "src_vec": ids, "ptr_src_vec": list(ids),
                        "trg_vec": [stoi[t] for t in trg], "oov_num": 0})
        return out

    torch.manual_seed(0)
    random.seed(0)
    agent = agent_cls(model=framework(data=None, config=config), config=config, device=torch.device("cpu"))
    loaders = [
        torch.utils.data.DataLoader(
            samples(split), batch_size=config[f"{split}_batch_size"], shuffle=split == "train",
            num_workers=0,
            collate_fn=collater_cls(PAD=stoi["<pad>"], config=config, train=split == "train").collate_fn,
        )
        for split in ("train", "dev")
    ]

    def epoch(n: int) -> tuple[Timing, Timing]:
        with timed() as t_train:
            for batches in loaders[0]:
                for batch in batches:
                    item = agent.run(batch, train=True)
                    agent.backward(item["loss"])
                    agent.step()
        with timed() as t_dev:
            with torch.no_grad():
                for batches in loaders[1]:
                    for batch in batches:
                        agent.run(batch, train=False)
        return t_train, t_dev

    return epoch


MATMULS = ("aten::mm", "aten::bmm", "aten::baddbmm", "aten::addmm")


def matmul_floor(epoch: Callable[[int], tuple[Timing, Timing]], n: int, calls: int = 30) -> str:
    """The matrix products of one epoch timed alone: profile epoch ``n`` (shapes recorded), then
    run each product shape ``calls`` times on fresh contiguous operands and scale by its count.
    What no implementation that keeps these products can go below on this core."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        epoch(n)
    total_cpu = flops = 0.0
    count = 0
    for ev in prof.key_averages(group_by_input_shape=True):
        if ev.key not in MATMULS:
            continue
        two = ev.key in ("aten::mm", "aten::bmm")  # (a, b[, out]) vs (bias, a, b[, ...])
        args = [torch.randn(s) for s in ev.input_shapes[: 2 if two else 3]]
        op = {"aten::mm": torch.mm, "aten::bmm": torch.bmm,
              "aten::baddbmm": torch.baddbmm, "aten::addmm": torch.addmm}[ev.key]
        a, b = (args[0], args[1]) if two else (args[1], args[2])
        for _ in range(3):
            op(*args)
        c0 = time.process_time()
        for _ in range(calls):
            op(*args)
        total_cpu += (time.process_time() - c0) / calls * ev.count
        flops += 2.0 * a.numel() * b.shape[-1] * ev.count
        count += ev.count
    return (f"{count} matrix products, {flops / 1e9:.1f} GFLOP per epoch; alone they take "
            f"{total_cpu:.2f} CPU-s ({flops / 1e9 / max(total_cpu, 1e-9):.0f} GFLOP/s)\n"
            f"    profiled epoch, share of self CPU time: {top_ops(prof)}")


def top_ops(prof: torch.profiler.profile, n: int = 8) -> str:
    """The profiled epoch's self CPU time: its total (profiler overhead included), the share of
    the matrix products together, then the ``n`` costliest ops (compiled kernels appear under
    inductor's graph and kernel names), each as a share of the total."""
    events = [ev for ev in prof.key_averages() if ev.self_cpu_time_total > 0]
    total = sum(ev.self_cpu_time_total for ev in events)
    mm = sum(ev.self_cpu_time_total for ev in events if ev.key in MATMULS)
    events.sort(key=lambda ev: ev.self_cpu_time_total, reverse=True)
    ops = ", ".join(f"{ev.key} {100 * ev.self_cpu_time_total / total:.1f}%" for ev in events[:n])
    return f"{total / 1e6:.2f} s in all; matrix products {100 * mm / total:.1f}%; {ops}"


PATHS = {  # the --paths that are not a train_path alone
    "graphed": {"optim.train_step": "graphed"},
    "graphed_compiled": {"optim.train_step": "graphed", "train_path": "compiled"},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="timed rounds (min reported)")
    parser.add_argument("--no-eval", action="store_true", help="skip greedy scoring of Copy tests")
    parser.add_argument("--cases", default=CASES, help=f"comma-separated task/variant (default {CASES})")
    parser.add_argument("--paths", default="eager,compiled", help="train_path values to time")
    parser.add_argument("--k", default="1", help="comma-separated pack sizes (default 1)")
    parser.add_argument("--floor", action="store_true",
                        help="also time each contender's matrix products alone (one profiled epoch)")
    parser.add_argument("--reference", metavar="DIR",
                        help="checkout of JRC1995/MonotonicLocationAttention, timed on copy/onestep")
    args = parse_args(parser, {"repeats": 1, "paths": "eager", "k": "1"}, argv,
                      what="1/10 of the split sizes, the eager path")
    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    scale = 10 if args.quick else 1
    sizes = {"task.train_size": 10_000 // scale, "task.dev_size": 2_000 // scale,
             "task.test_size": 2_000 // scale, "num_threads": args.threads}
    ks = [int(k) for k in args.k.split(",")]
    copy_run = None
    graphed_runs: dict[int, list[Seq2SeqRun]] = {}  # Copy's graphed packs, by K
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            task, variant = case.split("/")
            data = None
            contenders = []
            if args.reference and case == "copy/onestep":
                data = load_task(make_run_config(task=task, variant=variant, overrides=sizes).task)
                contenders.append(Contender("reference", 1, reference(args.reference, data)))
            for path in args.paths.split(","):
                for k in ks:
                    how = PATHS.get(path, {"train_path": path})
                    cfgs = [make_run_config(task=task, variant=variant, seed=s,
                                            overrides={**sizes, **how}) for s in range(k)]
                    data = data or load_task(cfgs[0].task, cache_dir=cfgs[0].cache_dir)
                    epoch, runs = ours(cfgs, data, Path(tmp))
                    contenders.append(Contender(f"{path} K={k}", k, epoch))
                    if task == "copy" and path == "eager" and k == 1:
                        copy_run = runs[0]
                    if task == "copy" and path.startswith("graphed"):
                        graphed_runs[k] = runs
            n_train, n_dev = len(data.splits["train"]), len(data.splits["dev"])
            for c in contenders:  # the untimed first epoch: compiles (or loads) compiled graphs
                w0, c0 = time.perf_counter(), time.process_time() + _children_cpu()
                c.epoch(1)
                c.first = (time.perf_counter() - w0, time.process_time() + _children_cpu() - c0)
            for rep in range(args.repeats):
                for c in contenders:
                    c.rounds.append(c.epoch(rep + 2))
            print(f"\n{case}: train {n_train}, dev {n_dev}; per seed-epoch, CPU s (wall s), min of "
                  f"{args.repeats}; {machine_line().split('loadavg')[1]}")
            print(f"{'contender':<14} {'train':>14} {'dev':>12} {'epoch':>14} {'seed-ep/core-s':>14} "
                  f"{'x ref':>6} {'first epoch':>18}")
            ref_cpu = None
            for c in contenders:
                i = min(range(len(c.rounds)), key=lambda j: c.rounds[j][0].cpu + c.rounds[j][1].cpu)
                tr, dv = c.rounds[i]
                ep_cpu, ep_wall = (tr.cpu + dv.cpu) / c.seeds, (tr.wall + dv.wall) / c.seeds
                ref_cpu = ep_cpu if c.name == "reference" else ref_cpu
                ratio = f"{ref_cpu / ep_cpu:>6.2f}" if ref_cpu else f"{'-':>6}"
                print(f"{c.name:<14} {tr.cpu / c.seeds:>6.2f} ({tr.wall / c.seeds:>5.2f}) "
                      f"{dv.cpu / c.seeds:>5.2f} ({dv.wall / c.seeds:>4.2f}) {ep_cpu:>6.2f} ({ep_wall:>5.2f}) "
                      f"{1.0 / (ep_cpu * args.threads):>14.3f} {ratio} "
                      f"{c.first[1]:>7.1f} ({c.first[0]:>6.1f})", flush=True)
            if args.floor:
                for c in contenders:
                    if c.name != "reference":
                        print(f"  floor, {c.name}: {matmul_floor(c.epoch, args.repeats + 2)}", flush=True)
        print(f"maxrss {peak_rss_mb():.0f} MB")
        if copy_run is not None and not args.no_eval:
            with timed() as t_eval:
                test, _ = score_test_splits(copy_run.model, copy_run.data, copy_run.cfg, copy_run.ids)
            n_test = sum(int(m["n"]) for m in test.values())
            print(f"greedy scoring of all Copy test splits ({len(test)} splits, {n_test} examples, "
                  f"with attnLoss): wall {t_eval.wall:.2f} s, cpu {t_eval.cpu:.2f} s, "
                  f"maxrss {peak_rss_mb():.0f} MB")
            print("  " + ", ".join(f"{s}={100 * m['seq_acc']:.1f}%" for s, m in test.items()))
        if not args.no_eval:
            for k, runs in graphed_runs.items():
                print(packed_decoding_line(runs), flush=True)
    return 0


def packed_decoding_line(runs: list[Seq2SeqRun]) -> str:
    """Greedy decoding of every Copy test split for the K ``runs``: one batched pass (the graphed
    path's test scoring) against K eager ``greedy_decode`` calls, CPU (wall) s per seed."""
    data, ids, K = runs[0].data, runs[0].ids, len(runs)
    with timed() as t_packed:
        graphed_test_decodes(runs)
    with timed() as t_eager:
        for run in runs:
            for name in data.test_splits:
                split = EncodedSplit(data.splits[name], data.vocab, **ids)
                greedy_decode(run.model, split, split_caps(split, data.decode_cap), run.cfg.optim.dev_batch_size,
                              want_attention=True, attn_steps=run.cfg.eval.attn_loss_steps)
    return (f"greedy decoding of the Copy test splits, K={K}, per seed: packed (graphed path) "
            f"{t_packed.cpu / K:.2f} CPU-s ({t_packed.wall / K:.2f} wall), eager {t_eager.cpu / K:.2f} "
            f"CPU-s ({t_eager.wall / K:.2f} wall): x{t_eager.cpu / max(t_packed.cpu, 1e-9):.2f}")


if __name__ == "__main__":
    sys.exit(main())
