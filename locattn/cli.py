"""Command line: ``locattn train | attention | list | variants | tasks``.

Errors in the command line (unknown flag, task, variant, or ``--set`` key) print one line
naming the valid choices and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from locattn import metric_names, registry
from locattn.cliparse import EXIT_USAGE, Parser, did_you_mean, parse
from locattn.labels import task_label
from locattn.tasks import config as _task_config
from locattn.variants import PAPER_LABELS, list_variants

#: The modules whose import registers the built-ins (torch-free), listed by ``locattn list``.
BUILTIN_REGISTRARS = (metric_names, _task_config)


class UsageError(Exception):
    """A problem with the command line (reported in one line, exit 2)."""


# The imports inside functions below keep torch (locattn.tasks, locattn.config, locattn.train,
# locattn.models), tqdm and numpy (locattn.plot) off the path of ``locattn --help``.


def _task_labels() -> dict[str, str]:
    return {name: e.label for name, e in registry.entries("task").items()}


def _task_names() -> list[str]:
    return list(registry.entries("task"))


def _variant_labels(pattern: str = "*") -> dict[str, str]:
    return dict(list_variants(pattern))


def _epilog() -> str:
    lines = ["tasks (key: paper label):"]
    lines += [f"  {k:<24} {label}" for k, label in _task_labels().items()]
    lines += ["", "variants (key: paper label):"]
    lines += [f"  {k:<24} {label}" for k, label in _variant_labels().items()]
    lines += [
        "",
        "examples:",
        "  locattn train --task copy --variant onestep --seed 0 --epochs 3",
        "  locattn train --task reverse_copy --variant birelative --set optim.lr=3e-4 "
        "--set task.train_size=2000",
    ]
    return "\n".join(lines)


def build_parser() -> Parser:
    """The ``locattn`` parser with its sub-commands."""
    parser = Parser(prog="locattn", description="Location attention for length generalisation.")
    sub = parser.add_subparsers(dest="command", metavar="{train,attention,list,variants,tasks}",
                                parser_class=Parser)
    sub.required = True

    p = sub.add_parser(
        "train",
        help="train one run and score its test splits",
        description="Train one run (task x variant x seed), then score every test split greedily.",
        epilog=_epilog,  # called only for 'train --help': listing tasks imports torch
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--task", required=True, metavar="TASK", help="task key (listed below)")
    p.add_argument("--variant", required=True, metavar="VARIANT",
                   help="variant preset key (listed below)")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.add_argument("--epochs", type=int, default=None, help="maximum epochs (optim.epochs)")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default runs/<task>-<variant>-s<seed>)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, e.g. optim.lr=3e-4 (repeatable)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (num_threads, >= 1; default 1)")
    p.add_argument("--device", default=None,
                   help="torch device: cpu, cuda, cuda:N or mps (default cpu)")
    p.add_argument("--cache-dir", default=None, help="dataset cache directory")
    p.add_argument("--fresh", action="store_true",
                   help="delete an existing checkpoint in --out and start over")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                   help="import this module first: a plugin registering attenders, tasks or "
                        "variants (repeatable; installed plugins load on their own)")

    a = sub.add_parser("attention", help="draw the attention of one test example of a trained run",
                       description="Draw one example's attention heatmap with mu/sigma/gate traces.")
    a.add_argument("--run", type=Path, required=True, help="a run directory written by 'train'")
    a.add_argument("--split", default=None, help="split name (default: the longest test split)")
    a.add_argument("--index", type=int, default=0, help="example index in the split (default 0)")
    a.add_argument("--out", type=Path, default=None,
                   help="PNG path (default <run>/attention-<split>-<index>.png)")

    li = sub.add_parser("list", help="list registered attenders, tasks, variants, metrics or tables",
                        description="List what is registered: the built-ins and every plugin "
                                    "(installed ones, and those --plugin names).")
    li.add_argument("kind", choices=[k + "s" for k in registry.KINDS],
                    help="what to list")
    li.add_argument("pattern", nargs="?", default="*", help="glob pattern on names, e.g. 'mix*'")
    li.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                    help="import this plugin module first (repeatable)")
    v = sub.add_parser("variants", help="list variant presets with their paper labels")
    v.add_argument("pattern", nargs="?", default="*", help="glob pattern, e.g. 'mix*'")
    sub.add_parser("tasks", help="list tasks")
    return parser


# --------------------------------------------------------------------------- train


#: Device strings ``--device`` accepts (torch device types this project runs on).
DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?|mps")


def check_operational(args: argparse.Namespace) -> None:
    """Refuse a negative seed, fewer than one thread or an unknown device (UsageError)."""
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed {args.seed}: a seed must be >= 0")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads {args.threads}: need at least 1 thread")
    if args.epochs is not None and args.epochs < 1:
        raise UsageError(f"--epochs {args.epochs}: need at least 1 epoch")
    if args.device is not None:
        if not DEVICE_PATTERN.fullmatch(args.device):
            raise UsageError(f"--device {args.device!r} is not a device here; valid: cpu, cuda, "
                             "cuda:N, mps")
        import torch  # only to check a device that was asked for

        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise UsageError(f"--device {args.device}: CUDA is not available on this machine "
                             f"(torch {torch.__version__}); use --device cpu")
        if args.device == "mps" and not torch.backends.mps.is_available():
            raise UsageError("--device mps: MPS is not available on this machine; use --device cpu")


def check_task_files(task: Any) -> None:
    """Load a task that reads files (CFQ, or any ``task.data_dir``) once, before a run directory
    is written, so a missing or malformed file is one line naming it (as ``study launch`` does)."""
    if not task.data_dir and task.name != "cfq":
        return  # generated data: nothing the user can get wrong here
    from locattn.tasks import load_task  # torch: see above
    from locattn.tasks.cfq import expected_files_message

    if task.name == "cfq" and not task.data_dir:
        text = expected_files_message(None).replace("in TaskConfig.data_dir (now None) ", "in DIR ")
        raise UsageError("task 'cfq' has no data here: pass --set task.data_dir=DIR, a local copy; "
                         + text.removeprefix("cfq: "))
    try:
        load_task(task, use_cache=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"task data: {str(exc).splitlines()[0]}") from None


def resolve_train_config(args: argparse.Namespace) -> Any:
    """RunConfig from the parsed ``train`` arguments; UsageError naming valid choices."""
    # locattn.config imports torch (through the metrics): kept here, off the path of --help.
    from locattn.config import apply_overrides, make_run_config, parse_override

    check_operational(args)
    tasks = _task_names()
    if args.task not in tasks:
        raise UsageError(f"unknown task {args.task!r}{did_you_mean(args.task, tasks)}; "
                         f"valid tasks: {', '.join(tasks)}")
    variants = _variant_labels()
    if args.variant not in variants:
        raise UsageError(f"unknown variant {args.variant!r}{did_you_mean(args.variant, variants)}; "
                         f"valid variants: {', '.join(variants)}")
    overrides: dict[str, Any] = {}
    try:
        for text in args.overrides:
            key, value = parse_override(text)
            overrides[key] = value
        cfg = make_run_config(task=args.task, variant=args.variant, seed=args.seed,
                              overrides=overrides)
        operational: dict[str, Any] = {}
        if args.epochs is not None:
            operational["optim.epochs"] = args.epochs
        if args.threads is not None:
            operational["num_threads"] = args.threads
        if args.device is not None:
            operational["device"] = args.device
        if args.cache_dir is not None:
            operational["cache_dir"] = args.cache_dir
        from locattn.training import aot_step  # imports torch, so not at the top: `locattn --help` stays light

        aot_step.enabled()  # a bad LOCATTN_SAVED_STEP: one line, before anything is written
        return apply_overrides(cfg, operational)
    except ValueError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None


class ProgressRecorder:
    """A tqdm bar over epochs showing the training loss and dev score."""

    def __init__(self, total: int, initial: int, desc: str) -> None:
        from tqdm import tqdm  # 40 ms: only when a bar is shown

        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="epoch", dynamic_ncols=True)
        self.scoring: Any = None

    def on_epoch(self, epoch: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        self.bar.set_postfix(loss=f"{metrics['train_loss']:.4f}",
                             dev=f"{100 * metrics['dev_score']:.1f}%", refresh=False)
        self.bar.update(1)

    def on_test_split(self, split: str, done: int, total: int) -> None:
        """Greedy scoring of the test splits after training: one bar step per split."""
        if self.scoring is None:
            from tqdm import tqdm  # see __init__

            self.bar.close()
            self.scoring = tqdm(total=total, initial=done, desc="scoring test splits",
                                unit="split", dynamic_ncols=True)
        if done:
            self.scoring.update(done - self.scoring.n)
        self.scoring.set_postfix_str(split if done < total else "done", refresh=True)

    def on_end(self, result: Any) -> None:
        self.bar.close()
        if self.scoring is not None:
            self.scoring.close()


def format_table(result: Any) -> str:
    """Per-split table of test metrics in percent."""
    if result.kind == "regression":
        rows = [f"{'split':<24} {'acc %':>8} {'n':>7}"]
        for split, m in result.test.items():
            rows.append(f"{split:<24} {100 * m['accuracy']:>8.2f} {int(m['n']):>7}")
        if result.epochs_to_100 is not None:
            rows.append(f"epochs to 100%: {result.epochs_to_100}")
        return "\n".join(rows)
    rows = [f"{'split':<24} {'seqAcc %':>9} {'seqAccBE %':>10} {'n':>6}"]
    for split, m in result.test.items():
        rows.append(f"{split:<24} {100 * m['seq_acc']:>9.2f} {100 * m['seq_acc_be']:>10.2f} "
                    f"{int(m['n']):>6}")
    return "\n".join(rows)


def cmd_train(args: argparse.Namespace) -> int:
    from locattn.train import CheckpointMismatchError, NonFiniteLossError, train  # torch
    from locattn.training import checkpoint as ckpt
    from locattn.training.recorders import JsonlRecorder, MultiRecorder

    cfg = resolve_train_config(args)
    check_task_files(cfg.task)
    out = args.out or Path("runs") / f"{cfg.task.name}-{cfg.variant}-s{cfg.seed}"
    initial = 0
    found = None if args.fresh else ckpt.find_checkpoint(out)
    if found is not None:
        initial = int(ckpt.read_meta(found).get("epoch", 0))
    if args.fresh:
        (out / "metrics.jsonl").unlink(missing_ok=True)
    recorders: list[Any] = [JsonlRecorder(out / "metrics.jsonl")]
    if not args.no_progress:
        recorders.append(ProgressRecorder(cfg.optim.epochs, min(initial, cfg.optim.epochs),
                                          f"{cfg.task.name}/{cfg.variant}/s{cfg.seed}"))
    if found is not None:
        print(f"resuming from {found} (epoch {initial})", file=sys.stderr)
    try:
        result = train(cfg, out, recorder=MultiRecorder(*recorders), resume=not args.fresh)
    except CheckpointMismatchError as exc:
        for r in recorders:
            if isinstance(r, ProgressRecorder):
                r.bar.close()
        print(f"locattn train: error: {exc} Pass --fresh to discard it.", file=sys.stderr)
        return EXIT_USAGE
    except NonFiniteLossError as exc:
        print(f"locattn train: error: {exc}", file=sys.stderr)
        return 1
    print(format_table(result))
    print(f"best epoch {result.best_epoch} (dev {100 * result.best_selection_score:.2f}%, "
          f"{result.dev_scoring}); {result.epochs_run} epochs, {result.wall_seconds:.1f}s")
    print(f"wrote {out}")
    return 0


# --------------------------------------------------------------------------- attention


def cmd_attention(args: argparse.Namespace) -> int:
    import torch  # torch and numpy: see the note at _task_labels

    from locattn.models import build_model
    from locattn.plot import draw_attention
    from locattn.tasks import load_task
    from locattn.train import BEST_MODEL_FILE, attention_record, load_run_config, longest_split

    try:
        cfg = load_run_config(args.run)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    weights = args.run / BEST_MODEL_FILE
    if not weights.is_file():
        raise UsageError(f"{weights} does not exist: the run has not finished training")
    torch.set_num_threads(cfg.num_threads)
    data = load_task(cfg.task, cache_dir=cfg.cache_dir)
    if data.kind != "seq2seq":
        raise UsageError(f"task {cfg.task.name!r} is a regression task; no attention to draw")
    split = args.split or longest_split(data)
    if split not in data.splits:
        raise UsageError(f"unknown split {split!r}; valid splits: {', '.join(data.splits)}")
    v = data.vocab
    model = build_model(cfg.model, len(v), pad_id=v.pad_id, sos_id=v.sos_id, eos_id=v.eos_id)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    try:
        record = attention_record(model, data, split, args.index, "cpu")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = args.out or args.run / f"attention-{split}-{args.index}.png"
    title = (f"{task_label(cfg.task.name)} / {PAPER_LABELS.get(cfg.variant, cfg.variant)}: "
             f"{split} #{args.index}")
    title += "" if record["correct"] else " (wrong)"
    draw_attention(record, out, title=title)
    print(f"wrote {out}")
    return 0


# --------------------------------------------------------------------------- listings


def cmd_variants(args: argparse.Namespace) -> int:
    labels = _variant_labels(args.pattern)
    if not labels:
        raise UsageError(f"no variant matches {args.pattern!r}; valid: {', '.join(_variant_labels())}")
    for key, label in labels.items():
        print(f"{key:<28} {label}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """One line per registered object: name, label, where it comes from, first line of its doc."""
    rows = [e for name, e in registry.entries(args.kind[:-1]).items()
            if fnmatch.fnmatchcase(name, args.pattern)]
    if not rows:
        raise UsageError(f"no {args.kind[:-1]} matches {args.pattern!r}; valid: "
                         f"{', '.join(registry.entries(args.kind[:-1]))}")
    for e in rows:
        doc = e.doc.splitlines()[0] if e.doc else ""
        origin = "built-in" if e.builtin else f"plugin {e.plugin}"
        print(f"{e.name:<28} {e.label:<28} {origin:<20} {doc}".rstrip())
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    for name, label in _task_labels().items():
        print(f"{name:<28} {label}")
    return 0


COMMANDS = {"train": cmd_train, "attention": cmd_attention, "list": cmd_list,
            "variants": cmd_variants, "tasks": cmd_tasks}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``locattn`` console script."""
    args = parse(build_parser(), argv)
    try:
        registry.import_plugins(getattr(args, "plugins", []), source="--plugin")
        return COMMANDS[args.command](args)
    except registry.PluginError as exc:
        print(f"locattn {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"locattn {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
