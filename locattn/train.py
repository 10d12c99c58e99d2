"""One training run: ``train(cfg, out_dir)`` (docs/architecture.md §5, REFERENCE §3).

Protocol (defaults of :class:`~locattn.config.OptimConfig`): AdamW, lr 1e-3, no weight decay,
batch 32, gradient-norm clip 5, ReduceLROnPlateau halving after 4 epochs of dev plateau (mode
max on the dev score), up to 100 epochs, early stop after more than 50 epochs without a new
best (the reference's ``impatience > patience``); neither the scheduler nor the patience count
sees epochs before ``optim.schedule_from_epoch`` (the reference skips its first epoch). The best model is kept by dev score; a score
within ``tie_tolerance`` of the best replaces it (reference). Loss: token-level mean NLL over
target tokens, ``<eos>`` included, padding excluded.

After every completed epoch the full state goes to ``out_dir/checkpoint/`` atomically, and only
then is ``recorder.on_epoch`` called. Data order is a pure function of (seed, epoch) and the
global RNGs are restored, so a resumed run ends exactly where an uninterrupted one does (same
machine, same thread count). After training every test split is decoded greedily from the best
model, with the task's cap (never the gold length).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from locattn.config import (
    RunConfig,
    config_to_dict,
    identity_dict,
    run_config_from_dict,
    run_identity,
)
from locattn.training import checkpoint as ckpt
from locattn.training.data import EncodedSplit
from locattn.training.evaluate import greedy_decode, split_caps, teacher_forced
from locattn.training.examples import EXAMPLES_JSON, check_trace_choice, split_examples
from locattn.training.recorders import JsonlRecorder, MultiRecorder, NullRecorder, Recorder

CONFIG_FILE = "config.json"
RESULT_FILE = "result.json"
BEST_MODEL_FILE = "best_model.pt"
ATTENTION_JSON = "attention.json"
ATTENTION_PNG = "attention.png"

__all__ = [
    "CheckpointMismatchError",
    "JsonlRecorder",
    "MultiRecorder",
    "NonFiniteLossError",
    "NullRecorder",
    "Recorder",
    "RunResult",
    "load_result",
    "train",
]

CheckpointMismatchError = ckpt.CheckpointMismatchError


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite (the message names the epoch and batch)."""


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """What one run produced. ``result.json`` is :meth:`to_dict`."""

    run_identity: str
    """:func:`locattn.config.run_identity` of the config."""
    config: dict[str, Any]
    """Resolved config (``config_to_dict``)."""
    kind: str
    """``seq2seq`` or ``regression``."""
    dev_scoring: str
    """How the dev score was computed (``teacher_forced`` or ``greedy``; regression: ``accuracy``)."""
    history: list[dict[str, float]]
    """One dict per epoch: ``epoch`` and the §6 epoch metrics."""
    best_epoch: int
    """Epoch (from 1) of the selected model."""
    best_dev_score: float
    """Dev score of the selected model."""
    epochs_run: int
    """Completed epochs."""
    stop_reason: str
    """``max_epochs``, ``early_stopping`` or ``reached_100`` (regression)."""
    test: dict[str, dict[str, float]]
    """Per test split: ``seq_acc, seq_acc_be, edit_distance, [attn_loss], n`` (regression:
    ``accuracy, n``)."""
    by_length: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per test split: gold output length (without ``<eos>``, as a string) -> sequence accuracy."""
    epochs_to_100: int | None = None
    """Regression: first epoch with 100 % dev accuracy (None if never)."""
    wall_seconds: float = 0.0
    """Sum of the epoch times plus the final test scoring time."""

    def final_metrics(self) -> dict[str, float]:
        """The §6 final metrics: ``best_dev_score, best_epoch, epochs_run, test.<split>.<m>``."""
        out: dict[str, float] = {
            "best_dev_score": float(self.best_dev_score),
            "best_epoch": float(self.best_epoch),
            "epochs_run": float(self.epochs_run),
        }
        if self.epochs_to_100 is not None:
            out["epochs_to_100"] = float(self.epochs_to_100)
        for split, metrics in self.test.items():
            for name, value in metrics.items():
                out[f"test.{split}.{name}"] = float(value)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (``result.json``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunResult":
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def load_result(out_dir: str | Path) -> RunResult:
    """The :class:`RunResult` stored in ``out_dir/result.json``."""
    path = Path(out_dir) / RESULT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: the run in {out_dir} has not finished")
    return RunResult.from_dict(json.loads(path.read_text()))


def load_run_config(out_dir: str | Path) -> RunConfig:
    """The resolved config saved in ``out_dir/config.json``."""
    path = Path(out_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: {out_dir} is not a locattn run directory")
    return run_config_from_dict(json.loads(path.read_text()))


# --------------------------------------------------------------------------- entry point


def train(
    cfg: RunConfig,
    out_dir: str | Path,
    *,
    recorder: Recorder | None = None,
    resume: bool = True,
) -> RunResult:
    """Train one run, score its test splits, and write ``out_dir``.

    ``resume=True`` continues from ``out_dir/checkpoint`` when present (refusing with
    :class:`CheckpointMismatchError` if it belongs to another config); ``resume=False`` deletes
    any checkpoint and starts over.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    recorder = recorder if recorder is not None else NullRecorder()
    torch.set_num_threads(cfg.num_threads)
    identity = run_identity(cfg)

    found = ckpt.find_checkpoint(out_dir)
    if found is not None and not resume:
        ckpt.remove_checkpoint(out_dir)
        found = None
    if found is not None:
        ckpt.check_identity(found, identity, identity_dict(cfg))
    (out_dir / CONFIG_FILE).write_text(json.dumps(config_to_dict(cfg), indent=1) + "\n")
    (out_dir / RESULT_FILE).unlink(missing_ok=True)

    from locattn.tasks import load_task

    data = load_task(cfg.task, cache_dir=cfg.cache_dir)
    if data.kind == "regression":
        from locattn.training.regression import train_regression

        result = train_regression(cfg, data, out_dir, recorder=recorder, checkpoint=found)
    else:
        result = _Seq2SeqRun(cfg, data, out_dir).run(recorder, found)
    (out_dir / RESULT_FILE).write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    recorder.on_end(result)
    return result


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and Python's global RNGs."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def checkpoint_meta(cfg: RunConfig, epoch: int) -> dict[str, Any]:
    """The readable part of a checkpoint."""
    return {
        "epoch": epoch,
        "run_identity": run_identity(cfg),
        "identity": identity_dict(cfg),
        "config": config_to_dict(cfg),
    }


def is_new_best(score: float, best: float | None, tolerance: float) -> bool:
    """Reference rule: a better score, or one within ``tolerance`` of the best, replaces it."""
    return best is None or score > best or abs(score - best) < tolerance


# --------------------------------------------------------------------------- seq2seq


class _Seq2SeqRun:
    """State and steps of one seq2seq run (kept together so resume restores one object)."""

    def __init__(self, cfg: RunConfig, data: Any, out_dir: Path) -> None:
        from locattn.models import build_model

        self.cfg, self.data, self.out_dir = cfg, data, out_dir
        self.device = torch.device(cfg.device)
        vocab = data.vocab
        self.ids = dict(pad_id=vocab.pad_id, sos_id=vocab.sos_id, eos_id=vocab.eos_id)
        self.train_split = EncodedSplit(data.splits["train"], vocab, **self.ids, device=self.device)
        self.dev_split = EncodedSplit(data.splits["dev"], vocab, **self.ids, device=self.device)
        seed_everything(cfg.seed)
        self.model = build_model(cfg.model, len(vocab), **self.ids).to(self.device)
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(  # fused: one kernel per step, not ~12 ops per tensor
            self.model.parameters(), lr=o.lr, weight_decay=o.weight_decay, fused=True
        )
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self.optimizer, mode="max", factor=o.plateau_factor, patience=o.plateau_patience
        )
        self.epoch = 0
        self.best_score: float | None = None
        self.best_epoch = 0
        self.best_state: dict[str, torch.Tensor] | None = None
        self.bad_epochs = 0
        self.history: list[dict[str, float]] = []
        self.stop_reason: str | None = None
        self._dev_caps: np.ndarray | None = None
        check_trace_choice(cfg.outputs.trace_split, cfg.outputs.trace_index, data)  # fail early

    # ---------------------------------------------------------------- checkpoint

    def state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": ckpt.rng_state(),
            "data_order": {"kind": "pure(seed, epoch)", "seed": self.cfg.seed,
                           "next_epoch": self.epoch + 1},
            "best_state": self.best_state,
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "history": self.history,
            "stop_reason": self.stop_reason,
        }

    def restore(self, checkpoint_dir: Path) -> None:
        s = ckpt.load_state(checkpoint_dir)  # CPU: RNG states must stay CPU tensors
        self.model.load_state_dict(s["model"])
        self.optimizer.load_state_dict(s["optimizer"])
        self.scheduler.load_state_dict(s["scheduler"])
        self.epoch = s["epoch"]
        self.best_state = s["best_state"]
        self.best_score = s["best_score"]
        self.best_epoch = s["best_epoch"]
        self.bad_epochs = s["bad_epochs"]
        self.history = s["history"]
        self.stop_reason = s["stop_reason"]
        ckpt.set_rng_state(s["rng"])

    # ---------------------------------------------------------------- one epoch

    def train_epoch(self) -> float:
        """One pass over the training split; returns the token-weighted mean loss.

        Runs as a pack of one (:func:`locattn.packed.solo_train_epoch`): a solo run and the same
        run inside a pack of K execute the same kernels and draw the same dropout masks.
        """
        from locattn.packed import solo_train_epoch

        return solo_train_epoch(self)

    def dev_scores(self) -> tuple[float, float]:
        """(dev loss, dev sequence accuracy under ``optim.dev_scoring``)."""
        o = self.cfg.optim
        dev_loss, tf_acc = teacher_forced(self.model, self.dev_split, o.dev_batch_size)
        if o.dev_scoring == "teacher_forced":
            return dev_loss, tf_acc
        if self._dev_caps is None:
            self._dev_caps = split_caps(self.dev_split, self.data.decode_cap)
        decoded = greedy_decode(self.model, self.dev_split, self._dev_caps, o.dev_batch_size)
        hits = sum(
            e and p == g for p, e, g in zip(decoded.pred, decoded.ended, self.dev_split.tgt_ids)
        )
        return dev_loss, hits / len(self.dev_split)

    # ---------------------------------------------------------------- the run

    def run(self, recorder: Recorder, checkpoint_dir: Path | None) -> RunResult:
        o = self.cfg.optim
        if checkpoint_dir is not None:
            self.restore(checkpoint_dir)
        while self.stop_reason is None and self.epoch < o.epochs:
            self.epoch += 1
            start = time.perf_counter()
            train_loss = self.train_epoch()
            self.end_epoch(train_loss, time.perf_counter() - start, recorder)
        return self.finish(on_test_split=getattr(recorder, "on_test_split", None))

    def end_epoch(self, train_loss: float, train_seconds: float, recorder: Recorder) -> None:
        """After an epoch's training pass (solo or packed): dev scores, scheduler, best model,
        early stopping, history, then the checkpoint, and only then the recorder."""
        o = self.cfg.optim
        start = time.perf_counter()
        dev_loss, dev_acc = self.dev_scores()
        lr = float(self.optimizer.param_groups[0]["lr"])
        counts = self.epoch >= o.schedule_from_epoch  # the reference skips its first epoch
        # optim.select_on: higher is better for both (the scheduler runs in mode "max")
        signal = dev_acc if o.select_on == "dev_acc" else -dev_loss
        if counts:
            self.scheduler.step(signal)
        if is_new_best(signal, self.best_score, o.tie_tolerance):
            self.best_score, self.best_epoch, self.bad_epochs = signal, self.epoch, 0
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        elif counts:
            self.bad_epochs += 1
        if self.bad_epochs > o.patience:
            self.stop_reason = "early_stopping"
        elif self.epoch >= o.epochs:
            self.stop_reason = "max_epochs"
        metrics = {
            "train_loss": train_loss,
            "dev_loss": dev_loss,
            "dev_score": dev_acc,
            "dev_seq_acc": dev_acc,
            "lr": lr,
            "epoch_seconds": train_seconds + time.perf_counter() - start,
        }
        self.history.append({"epoch": self.epoch, **metrics})
        path = ckpt.save_checkpoint(self.out_dir, checkpoint_meta(self.cfg, self.epoch), self.state())
        recorder.on_epoch(self.epoch, metrics, path)

    def finish(self, on_test_split: Any = None) -> RunResult:
        start = time.perf_counter()
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        torch.save(self.model.state_dict(), self.out_dir / BEST_MODEL_FILE)
        saved: dict[str, Any] = {}
        test, by_length = score_test_splits(self.model, self.data, self.cfg, self.ids,
                                            on_test_split=on_test_split, keep_examples=saved)
        (self.out_dir / EXAMPLES_JSON).write_text(json.dumps(saved) + "\n")
        outputs = self.cfg.outputs
        traced = outputs.trace_split or longest_split(self.data)
        if traced is not None:
            record = attention_record(self.model, self.data, traced, outputs.trace_index, self.device)
            write_attention(record, self.out_dir)
        seconds = sum(h["epoch_seconds"] for h in self.history) + time.perf_counter() - start
        return RunResult(
            run_identity=run_identity(self.cfg),
            config=config_to_dict(self.cfg),
            kind="seq2seq",
            dev_scoring=self.cfg.optim.dev_scoring,
            history=self.history,
            best_epoch=self.best_epoch,
            best_dev_score=float(self.best_score if self.best_score is not None else math.nan),
            epochs_run=self.epoch,
            stop_reason=self.stop_reason or "max_epochs",
            test=test,
            by_length=by_length,
            wall_seconds=seconds,
        )


# --------------------------------------------------------------------------- test scoring


def score_test_splits(
    model: torch.nn.Module, data: Any, cfg: RunConfig, ids: dict[str, int], *,
    on_test_split: Any = None, keep_examples: dict[str, Any] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Greedy-decode every test split; per-split metrics and accuracy by output length.

    ``on_test_split(split, done, total)``, when given, is called before each split (``done``
    splits scored of ``total``) and once more at the end with ``done == total``: the
    ``on_test_split`` of a recorder that has one (the command line's progress bar)."""
    from locattn import metrics as M

    test: dict[str, dict[str, float]] = {}
    by_length: dict[str, dict[str, float]] = {}
    device = next(model.parameters()).device
    names = [n for n in data.test_splits if data.splits[n]]
    for done, name in enumerate(names):
        if on_test_split is not None:
            on_test_split(name, done, len(names))
        examples = data.splits[name]
        split = EncodedSplit(examples, data.vocab, **ids, device=device)
        want_attn = split.attn is not None
        decoded = greedy_decode(
            model, split, split_caps(split, data.decode_cap), cfg.optim.dev_batch_size,
            want_attention=want_attn, attn_steps=cfg.optim.attn_loss_steps,
        )
        test[name], by_length[name] = split_metrics(M, split, decoded)
        if keep_examples is not None:  # examples.json: first wrong / right predictions (cfg.outputs)
            keep_examples[name] = split_examples(
                data.splits[name], decoded.pred, decoded.ended, split.tgt_ids,
                lambda p: [data.vocab.itos[i] for i in p],
                n_wrong=cfg.outputs.n_wrong, n_right=cfg.outputs.n_right,
            )
    if on_test_split is not None:
        on_test_split("", len(names), len(names))
    return test, by_length


def split_metrics(M: Any, split: EncodedSplit, decoded: Any) -> tuple[dict[str, float], dict[str, float]]:
    """Metrics of one decoded split via :mod:`locattn.metrics`; and accuracy by gold length."""
    eos = split.eos_id
    pred = [p + [eos] if e else p for p, e in zip(decoded.pred, decoded.ended)]
    gold = [g + [eos] for g in split.tgt_ids]
    correct = M.seq_correct(pred, gold, eos_id=eos)
    out = {
        "seq_acc": float(correct.mean()),
        "seq_acc_be": float(M.seq_acc_be(pred, gold, eos_id=eos)),
        "edit_distance": float(M.edit_distance(pred, gold, eos_id=eos)),
    }
    if decoded.attn_loss is not None:
        out["attn_loss"] = float(decoded.attn_loss)
    out["n"] = float(len(split))
    by_len = M.accuracy_by_length(correct, [len(g) for g in split.tgt_ids])
    return out, {str(k): float(v) for k, v in sorted(by_len.items())}


# --------------------------------------------------------------------------- attention example


def longest_split(data: Any) -> str | None:
    """The test split with the longest sources on average (e.g. ``len100``)."""
    best, best_len = None, -1.0
    for name in data.test_splits:
        examples = data.splits[name]
        if examples:
            mean_len = sum(len(ex.src) for ex in examples) / len(examples)
            if mean_len > best_len:
                best, best_len = name, mean_len
    return best


def _trace_list(value: Any) -> Any:
    if value is None:
        return None
    arr = value.detach().float().cpu().numpy()
    return np.round(arr, 5).tolist()


@torch.no_grad()
def attention_record(
    model: torch.nn.Module, data: Any, split: str, index: int, device: str | torch.device
) -> dict[str, Any]:
    """Greedy-decode one example with ``trace=True``: weights and traces as JSON-safe lists."""
    if split not in data.splits:
        raise ValueError(f"unknown split {split!r}; valid: {list(data.splits)}")
    examples = data.splits[split]
    if not 0 <= index < len(examples):
        raise ValueError(f"index {index} out of range for split {split!r} ({len(examples)} examples)")
    ex = examples[index]
    vocab = data.vocab
    model.eval()
    src = torch.tensor([vocab.encode(ex.src)], dtype=torch.long, device=device)  # (1, S)
    src_len = torch.tensor([len(ex.src)], dtype=torch.long, device=device)  # (1,)
    cap = int(data.decode_cap(len(ex.src)))
    out = model.greedy(src, src_len, cap, trace=True)
    n = int(out.lengths[0])
    tokens = out.tokens[0, :n].tolist()
    tr = out.trace
    weights = tr.weights[0, :n]  # (T, L)
    record: dict[str, Any] = {
        "split": split,
        "index": index,
        "src": list(ex.src),
        "gold": list(ex.tgt),
        "pred": list(vocab.decode(tokens)),
        "correct": list(vocab.decode(tokens)) == list(ex.tgt) and vocab.eos_id in tokens,
        "source_offset": int(getattr(model, "source_offset", 0)),
        "weights": np.round(weights.float().cpu().numpy(), 4).tolist(),
    }
    for key in ("mu", "sigma", "step", "mix_gate", "blocks"):  # blocks: (T, 3)
        value = getattr(tr, key, None)
        record[key] = None if value is None else _trace_list(value[0, :n])
    if getattr(tr, "content_weights", None) is not None:  # Mix: both halves, (T, L) each
        record["location_weights"] = _trace_list(tr.location_weights[0, :n])
        record["content_weights"] = _trace_list(tr.content_weights[0, :n])
    dir_gate = getattr(tr, "dir_gate", None)
    record["dir_gate"] = None if dir_gate is None else float(dir_gate.reshape(-1)[0])
    return record


def write_attention(record: dict[str, Any], out_dir: Path, png_name: str = ATTENTION_PNG) -> Path:
    """Write ``attention.json`` and draw ``attention.png`` in ``out_dir``."""
    from locattn.plot import draw_attention

    (out_dir / ATTENTION_JSON).write_text(json.dumps(record) + "\n")
    title = f"{record['split']} #{record['index']}" + ("" if record["correct"] else " (wrong)")
    return draw_attention(record, out_dir / png_name, title=title)
