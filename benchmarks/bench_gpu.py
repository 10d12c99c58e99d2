"""Seed-epochs per second of OneStep/Copy (train 10k + dev 2k) on one GPU: packs of K runs
through the graphed step, against a solo trial and the reference code on the same device.

    python benchmarks/bench_gpu.py [--device cuda] [--ks 1,8,64,256] [--train-size 10000]
        [--dev-size 2000] [--epochs 2] [--precision fp32] [--reference PATH] [--profile] [--quick]

Per K: K runs (seeds 0..K-1) in one :class:`locattn.training.graphed.GraphedStep`. The first
epoch records the CUDA graphs (reported apart, as "first"); the next ``--epochs`` are timed:
the training pass plus teacher-forced dev scoring (each replica as a pack of one, which keeps
packed == solo), synchronised: what ``train_packed`` does per epoch before its per-replica
bookkeeping. seed-epochs/s = K x epochs
/ wall seconds. Solo: one epoch of one eager run (``Seq2SeqRun.train_epoch`` + ``dev_scores``)
on the same device, i.e. one unpacked trial. Reference: the OneStep model and agent of
JRC1995/MonotonicLocationAttention (a checkout at ``--reference PATH``, e.g. from the fetch
tool) trained for one epoch on the same examples, batches and device, plus its dev forward.

Per K also greedy decoding of the dev split as the graphed path scores (test and greedy dev)
splits: the K replicas in one :class:`locattn.training.decode.PackedGreedy` (graphs recorded
on the first pass, reported apart, then one replayed pass timed), against the eager
``greedy_decode`` of replica 0 alone; replica 0's tokens must equal that eager decode.

Equivalence: replica 0 (seed 0) has the same epoch losses in every pack (the graphed path
packs bit for bit); the script exits 1 when it does not. ``--train-path compiled`` runs the
step's forward, backward and update under torch.compile inside the captured graph (the fusion
lever: eager, the step is about 1,900 kernels at K = 64); inductor's kernels for K replicas
round differently from those for one, so there the difference is reported, not a failure. Without CUDA (or ``--device cpu``)
the same code runs uncaptured and every result line is marked CPU: those numbers say nothing
about a GPU. Targets on one H100: >= 50 seed-epochs/s, >= 30x a solo trial (unmeasured until a
GPU run). ``--quick``: K = 1, 8 on 200 train / 40 dev examples, one timed epoch.

``--cases copy/onestep,scan/content,...`` benchmarks other task/variant cells the same way
(the reference code only for copy/onestep). ``--calibrate [PATH]`` (CUDA only) then writes one
cost-model row per case and K to ``PATH`` (default ``study/cost/cost_calibration.json``), keyed by
the device (``h100`` for an H100, :func:`study.cost.calibration.device_key`) and replacing that
device's rows of the same cell and K, other rows kept: the pack's training and dev-scoring wall
seconds per epoch, divided by K, per 1,000 tokens; test = the pack's replayed greedy decode of
the dev split, the same way; startup = the first epoch's extra seconds (graph capture) / K.
With ``--train-path compiled`` the rows carry ``path: compiled`` (startup then holds the
compile): they price ``--train-path compiled`` runs, the eager rows stay.
``study launch --dry-run`` then prices graphed GPU packs per seed-epoch (study/cost/pricing.py), at
the pack size the memory model lets a trial's runs reach on that device (study/cost/packs.py).
A GPU session fills the README's H100 column with (then ``bench_cost.py --readme-table``)::

    python benchmarks/bench_gpu.py --ks 1,8,64,256 --calibrate \
        --cases copy/onestep,copy/content,copy/birope,copy/mix_onestep
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._common import Timing, machine_line, parse_args, peak_rss_mb, timed  # noqa: E402
from locattn.config import make_run_config  # noqa: E402
from locattn.training.decode import PackedGreedy  # noqa: E402
from locattn.training.evaluate import greedy_decode, split_caps  # noqa: E402
from locattn.tasks import list_tasks, load_task  # noqa: E402
from locattn.train import Seq2SeqRun  # noqa: E402
from locattn.training.graphed import GraphedStep, graphed_dev_scores  # noqa: E402
from locattn.variants import list_variants  # noqa: E402
from study.cost.calibration import (CALIBRATION_FILE, Calibration, Rate, calibration_from_dict,  # noqa: E402
                               calibration_to_dict, device_key, merge_rates)
from study.cost.pricing import split_ktok, variant_family  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(device: torch.device, fn: Any) -> tuple[Timing, Any]:
    """(wall and CPU seconds, result) of ``fn()``, the device synchronised before and after."""
    sync(device)
    with timed() as t:
        out = fn()
        sync(device)
    return t, out


def run_reference(path: Path, data: Any, device: torch.device, batch_size: int) -> Timing:
    """Seconds of one reference epoch (training pass + dev forward) of its OneStep model on
    ``data``'s Copy splits: its own model, loss, AdamW and clipping (agents/seq2seq_agent.py)."""
    sys.path.insert(0, str(path))
    if importlib.util.find_spec("nltk") is None:  # the agent imports it for an edit distance not used here
        sys.modules["nltk"] = types.ModuleType("nltk")
    configs = importlib.import_module("configs.copy_configs")
    framework = importlib.import_module("models.seq2seq_framework")
    agent_mod = importlib.import_module("agents.seq2seq_agent")
    vocab = data.vocab
    cfg = vars(configs.BiGRU_OneStep_config())
    pad = vocab.pad_id
    cfg.update({"vocab2idx": dict(vocab.stoi), "vocab_len": len(vocab), "PAD_id": pad,
                "UNK_id": vocab.unk_id, "SOS_id": vocab.sos_id, "EOS_id": vocab.eos_id,
                "generate": False, "max_decode_len": 500, "DataParallel": False})
    torch.manual_seed(0)
    model = framework.seq2seq_framework(None, cfg).to(device)
    agent = agent_mod.seq2seq_agent(model, cfg, device)

    def batches(split: str, size: int) -> list[dict[str, Any]]:
        exs = data.splits[split]
        out = []
        for at in range(0, len(exs), size):
            part = exs[at:at + size]
            src = [list(vocab.encode(e.src)) for e in part]
            trg = [list(vocab.encode(e.tgt)) + [vocab.eos_id] for e in part]
            S, T = max(map(len, src)), max(map(len, trg))
            out.append({
                "src": [list(e.src) for e in part], "trg": [list(e.tgt) + ["<eos>"] for e in part],
                "src_vec": torch.tensor([s + [pad] * (S - len(s)) for s in src]),
                "ptr_src_vec": torch.tensor([s + [pad] * (S - len(s)) for s in src]),
                "src_mask": torch.tensor([[1] * len(s) + [0] * (S - len(s)) for s in src]),
                "trg_vec": torch.tensor([t + [pad] * (T - len(t)) for t in trg]),
                "labels": torch.tensor([t + [pad] * (T - len(t)) for t in trg]),
                "trg_mask": torch.tensor([[1] * len(t) + [0] * (T - len(t)) for t in trg]),
                "max_oov_num": 0,
            })
        return out

    train, dev = batches("train", batch_size), batches("dev", 256)

    def epoch() -> None:
        for b in train:
            item = agent.run(dict(b), train=True)
            agent.backward(item["loss"])
            agent.step()
        with torch.no_grad():
            for b in dev:
                agent.run(dict(b), train=False)

    return measure(device, epoch)[0]


def calibration_row(device: str, task: str, family: str, K: int, *, train_ktok: float, dev_ktok: float,
                    train_s: float, dev_s: float, decode_s: float, first_extra_s: float,
                    path: str = "eager") -> Rate:
    """One cost-model row from one pack of ``K`` runs: per run (the pack's wall seconds / K) and
    per 1,000 tokens. ``train_s``/``dev_s``: wall seconds of one epoch's training pass and dev
    scoring; ``decode_s``: one replayed greedy decode of the dev split (the test rate);
    ``first_extra_s``: what the first epoch took beyond a timed one (graph capture, and on the
    ``compiled`` ``path`` the compile). A ``compiled`` row prices runs of ``--train-path
    compiled`` only; the eager rows stay."""
    return Rate(device=device, task=task, family=family, pack=K, path=path,
                train=train_s / K / train_ktok, dev=dev_s / K / dev_ktok, test=decode_s / K / dev_ktok,
                startup=max(0.0, first_extra_s) / K)


def write_calibration(path: Path, rows: list[Rate], meta: dict[str, Any]) -> Calibration:
    """Merge ``rows`` (one device) into the calibration table at ``path`` and write it."""
    body = json.loads(path.read_text()) if path.is_file() else {}
    cal = merge_rates(calibration_from_dict(body), rows, meta)
    path.write_text(json.dumps(calibration_to_dict(cal), indent=1) + "\n")
    return cal


def decode_line(on: str, K: int, runs: list[Any], device: torch.device) -> tuple[bool, float]:
    """Print the greedy decoding of the dev split by the pack of ``runs`` (captured on a GPU)
    against replica 0's eager decode; whether replica 0's tokens equal the eager ones, and the
    replayed decode's wall seconds."""
    split, run = runs[0].dev_split, runs[0]
    caps = split_caps(split, run.data.decode_cap)
    decoder = PackedGreedy(runs, run.cfg.optim.dev_batch_size)
    first, _ = measure(device, lambda: decoder.decode(split, caps))
    again, out = measure(device, lambda: decoder.decode(split, caps))
    eager, ref = measure(device, lambda: greedy_decode(run.model, split, caps, run.cfg.optim.dev_batch_size))
    same = out[0].pred == ref.pred and out[0].ended == ref.ended
    print(f"[{on}] K={K:<4d} greedy decode of dev ({len(split)}): first {first.wall:.2f} s, then wall "
          f"{again.wall:.2f} s (cpu {again.cpu:.2f} s) -> {K * len(split) / again.wall:.0f} sequences/s; "
          f"eager replica 0 alone {eager.wall:.2f} s; replica 0 tokens equal eager: {same}", flush=True)
    return same, again.wall


def profile_kernels(device: torch.device, fn: Any, K: int, rows: int = 25) -> None:
    """Print where one more training epoch of the pack of ``K`` spends its time: torch.profiler's
    operators and kernels, by device time on a GPU (kernels replayed inside the CUDA graph
    included), by CPU time otherwise. Untimed: the epoch's numbers above stand without it."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        fn()
        sync(device)
    key = "device_time_total" if device.type == "cuda" else "cpu_time_total"
    try:
        table = prof.key_averages().table(sort_by=key, row_limit=rows)
    except (AttributeError, KeyError, ValueError):  # an older torch names it cuda_time_total
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows)
    print(f"profile of one training epoch, K={K}, by {key}:\n{table}", flush=True)


def rel_diff(a: list[float], b: list[float]) -> float:
    """The largest relative difference between two runs' epoch losses."""
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def bench_case(task: str, variant: str, args: argparse.Namespace, device: torch.device, ks: list[int],
               tmp: Path, key: str, on_row: Any = None) -> tuple[bool, list[Rate]]:
    """The solo trial and every pack size of one task/variant cell: (failed, calibration rows).
    ``on_row(row)`` gets each pack size's row as soon as it is measured (a time-boxed session
    keeps the rows of the pack sizes it reached)."""
    on = "GPU" if device.type == "cuda" else "CPU"
    over = {"task.train_size": args.train_size, "task.dev_size": args.dev_size, "task.test_size": 10,
            "num_threads": args.threads, "device": str(device)}
    graphed = {**over, "optim.train_step": "graphed", "optim.precision": args.precision,
               "train_path": args.train_path}
    cfg0 = make_run_config(task=task, variant=variant, seed=0, overrides=graphed)
    data = load_task(cfg0.task, cache_dir=cfg0.cache_dir)
    train_ktok, dev_ktok = split_ktok(data.splits["train"]), split_ktok(data.splits["dev"])
    print(f"{task}/{variant}: train {len(data.splits['train'])} ({train_ktok:.1f}k tokens), dev "
          f"{len(data.splits['dev'])} ({dev_ktok:.1f}k tokens), batch {cfg0.optim.batch_size}, "
          f"precision {args.precision}, train path {args.train_path}; {args.epochs} timed epoch(s) per K "
          f"after the first", flush=True)
    failed = False
    rows: list[Rate] = []
    solo_cfg = make_run_config(task=task, variant=variant, seed=0, overrides=over)
    solo = Seq2SeqRun(solo_cfg, data, tmp / f"{task}-{variant}-solo")
    solo.epoch = 1
    solo.train_epoch()  # warm-up (allocator, kernels)
    solo.epoch = 2
    solo_t, _ = measure(device, lambda: (solo.train_epoch(), solo.dev_scores()))
    solo_rate = 1.0 / solo_t.wall
    print(f"[{on}] solo eager trial: epoch wall {solo_t.wall:.2f} s (cpu {solo_t.cpu:.2f} s) -> "
          f"{solo_rate:.3f} seed-epochs/s", flush=True)
    base: list[float] | None = None
    for K in ks:
        cfgs = [make_run_config(task=task, variant=variant, seed=s, overrides=graphed) for s in range(K)]
        runs = [Seq2SeqRun(c, data, tmp / f"{task}-{variant}-k{K}-{c.seed}") for c in cfgs]
        step = GraphedStep(runs)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        first, out = measure(device, lambda: (step.train_epoch(1), graphed_dev_scores(runs)))
        losses = [out[0][0]]
        trains, devs = [], []
        for e in range(2, 2 + args.epochs):
            t, _ = measure(device, lambda: step.train_epoch(e))
            d, out = measure(device, lambda: graphed_dev_scores(runs))
            losses.append(out[0][0])
            trains.append(t)
            devs.append(d)
        seconds = sum(t.wall for t in trains + devs)
        cpu = sum(t.cpu for t in trains + devs)
        rate = K * args.epochs / seconds
        same = base is None or losses == base
        drift = "" if same else f" (largest relative difference {rel_diff(losses, base):.1e})"
        base = losses if base is None else base
        failed |= not same and args.train_path == "eager"  # compiled kernels differ with K
        mem = (f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB peak"
               if device.type == "cuda" else f"maxrss {peak_rss_mb():.0f} MB")
        print(f"[{on}] K={K:<4d} graphed: first epoch {first.wall:.2f} s, then wall {seconds / args.epochs:.2f} s "
              f"(cpu {cpu / args.epochs:.2f} s) per epoch -> {rate:.3f} seed-epochs/s, "
              f"x{rate / solo_rate:.2f} a solo trial | {mem} | "
              f"seed 0 losses equal to K={ks[0]}: {same}{drift}", flush=True)
        if args.profile and K == max(ks):
            profile_kernels(device, lambda: step.train_epoch(2 + args.epochs), K)
        same_tokens, decode_s = decode_line(on, K, runs, device)
        failed |= not same_tokens
        rows.append(calibration_row(
            key, task, variant_family(cfg0.model), K, train_ktok=train_ktok, dev_ktok=dev_ktok,
            train_s=sum(t.wall for t in trains) / args.epochs, dev_s=sum(d.wall for d in devs) / args.epochs,
            decode_s=decode_s, first_extra_s=first.wall - seconds / args.epochs, path=args.train_path))
        if on_row is not None:
            on_row(rows[-1])
        del step, runs
    if args.reference is not None and (task, variant) == ("copy", "onestep"):
        ref = run_reference(args.reference, data, device, cfg0.optim.batch_size)
        print(f"[{on}] reference code (JRC1995/MonotonicLocationAttention OneStep): epoch wall "
              f"{ref.wall:.2f} s (cpu {ref.cpu:.2f} s) -> {1.0 / ref.wall:.3f} seed-epochs/s", flush=True)
    elif (task, variant) == ("copy", "onestep"):
        print("reference code: not run (give --reference PATH to a checkout)", flush=True)
    return failed, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--ks", default="1,8,64,256", help="pack sizes (comma-separated)")
    parser.add_argument("--cases", default="copy/onestep", help="task/variant cells (comma-separated)")
    parser.add_argument("--train-size", type=int, default=10_000)
    parser.add_argument("--dev-size", type=int, default=2_000)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per K, after the first")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    parser.add_argument("--reference", type=Path, default=None,
                        help="a checkout of JRC1995/MonotonicLocationAttention to time on the same device")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="after the timed epochs of the largest K, profile one more epoch and print "
                             "its top operators and kernels (where a pack's step time goes)")
    parser.add_argument("--calibrate", type=Path, nargs="?", const=CALIBRATION_FILE, default=None,
                        metavar="PATH", help="write this device's cost-model rows to PATH "
                        f"(default {CALIBRATION_FILE.relative_to(CALIBRATION_FILE.parents[1])}; CUDA only)")
    parser.add_argument("--train-path", default="eager", choices=["eager", "compiled"],
                        help="compiled: the graphed step's forward, backward and update under "
                             "torch.compile, captured as one CUDA graph (replica 0's losses then "
                             "differ across K by rounding: reported, not a failure); with --calibrate "
                             "its rows carry path compiled and price --train-path compiled runs only")
    args = parse_args(parser, {"ks": "1,8", "train_size": 200, "dev_size": 40, "epochs": 1}, argv,
                      what="K = 1, 8 on 200 train / 40 dev examples")
    cases = [tuple(c.split("/", 1)) for c in args.cases.split(",") if c]
    for case in cases:  # before any device time is spent
        if len(case) != 2 or case[0] not in list_tasks() or case[1] not in list_variants():
            parser.error(f"--cases {'/'.join(case)}: not TASK/VARIANT (tasks: {', '.join(list_tasks())}; "
                         "variants: `locattn variants`)")
    device = torch.device(args.device)
    if args.calibrate is not None and device.type != "cuda":
        print("--calibrate needs a CUDA device: the uncaptured graphed step on a CPU says nothing about a "
              "GPU (CPU rows come from benchmarks/bench_cost.py)", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        print(f"device: {name}; graphs captured", flush=True)
    else:
        name = "cpu"
        print("device: CPU (no CUDA here): the graphed step runs uncaptured; these numbers are CPU "
              "numbers and say nothing about a GPU", flush=True)
    ks = [int(k) for k in args.ks.split(",")]
    failed = False
    meta = {"command": "python benchmarks/bench_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "device": name, "machine": machine_line(), "precision": args.precision,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "units": "wall seconds per 1,000 tokens of one run in a graphed pack of `pack` runs (the "
                     "pack's seconds / K); test: greedy decoding of the dev split; startup: graph "
                     "capture only (process start-up and data not timed)"}

    def on_row(row: Rate) -> None:  # written as measured: the timings stand whether or not packs agree
        write_calibration(args.calibrate, [row], meta)
        print(f"wrote the {row.device} row of {row.task}/{row.family}, pack {row.pack}, to {args.calibrate}",
              flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        broken = []
        for task, variant in cases:
            try:
                bad, _ = bench_case(task, variant, args, device, ks, Path(tmp), device_key(name),
                                    on_row if args.calibrate is not None else None)
            except Exception:  # one broken cell must not cost the others their (device) time
                traceback.print_exc()
                broken.append(f"{task}/{variant}")
                continue
            failed |= bad
    print(machine_line(), flush=True)  # the load average after, beside the one before
    if broken:
        print(f"FAILED: {', '.join(broken)} raised (traceback above)", file=sys.stderr)
    if failed:
        print("FAILED: replica 0's losses differ between pack sizes, or its decoded tokens from "
              "its eager decode", file=sys.stderr)
    if failed or broken:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
