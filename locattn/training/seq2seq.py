"""Floor 4 of a training run: the seq2seq run object (solo, or one replica of a pack)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from locattn.config import RunConfig, config_to_dict, run_identity
from locattn.models import build_model
from locattn.training import checkpoint as ckpt
from locattn.training.attention import attention_record, longest_split, write_attention
from locattn.training.compiles import CompileWatch
from locattn.training.data import EncodedSplit
from locattn.training.epoch import solo_train_epoch
from locattn.training.evaluate import DevScores, greedy_decode, split_caps, teacher_forced
from locattn.training.decode import graphed_greedy_dev_accuracy, graphed_test_decodes
from locattn.training.graphed import graphed_dev_scores, solo_graphed_epoch
from locattn.training.examples import EXAMPLES_JSON, check_trace_choice
from locattn.training.recorders import Recorder
from locattn.training.results import BEST_MODEL_FILE, RunResult, is_new_best
from locattn.training.scoring import score_test_splits


class Seq2SeqRun:
    """One seq2seq run's state and steps, kept together so a resume restores one object.

    ``Seq2SeqRun(cfg, data, out_dir)`` builds the model (seeded by ``cfg.seed``), AdamW,
    ReduceLROnPlateau and the encoded train/dev splits. Then:

    * :meth:`run` trains epoch by epoch until ``optim.epochs`` or early stopping and returns
      :meth:`finish`; :meth:`train_epoch` is one training pass (a pack of one);
    * :meth:`end_epoch` is the per-epoch bookkeeping after a training pass, solo or packed
      (dev scores, scheduler, best model, early stopping, checkpoint, then the recorder);
    * :meth:`state` / :meth:`restore` are the checkpoint contents;
    * :meth:`finish` loads the best model, scores every test split and writes the run's files.

    :func:`locattn.training.run.train` drives one; :func:`locattn.training.packed.train_packed`
    drives several of one cell; benchmarks use it to time single epochs.
    """

    def __init__(self, cfg: RunConfig, data: Any, out_dir: Path) -> None:
        self.cfg, self.data, self.out_dir = cfg, data, out_dir
        self.device = torch.device(cfg.device)
        vocab = data.vocab
        self.ids = dict(pad_id=vocab.pad_id, sos_id=vocab.sos_id, eos_id=vocab.eos_id)
        self.train_split = EncodedSplit(data.splits["train"], vocab, **self.ids, device=self.device)
        self.dev_split = EncodedSplit(data.splits["dev"], vocab, **self.ids, device=self.device)
        ckpt.seed_everything(cfg.seed)
        o = cfg.optim
        total_batches = math.ceil(o.epochs * len(self.train_split) / o.batch_size)  # as Dubois's code counts
        self.model = build_model(cfg.model, len(vocab), **self.ids, total_batches=total_batches).to(self.device)
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
        # the compiled step's compiles in this process (train_path=compiled; epoch metrics)
        self.compile_watch = CompileWatch(label=f"{cfg.task.name}/{cfg.variant} seed {cfg.seed} ({out_dir})")
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

        Runs as a pack of one (:func:`locattn.training.epoch.solo_train_epoch`): a solo run and the
        same run inside a pack of K execute the same kernels and draw the same dropout masks.
        """
        if self.cfg.optim.train_step == "graphed":  # the device path: locattn.training.graphed
            return solo_graphed_epoch(self)
        return solo_train_epoch(self)

    def dev_scores(self) -> DevScores:
        """Dev loss, dev sequence accuracy under ``optim.dev_scoring`` and, for a Mix model, the
        mean mix gate of the teacher-forced pass."""
        o = self.cfg.optim
        if o.train_step == "graphed":  # scored as a pack of one (locattn.training.decode)
            scores = graphed_dev_scores([self])[0]
            if o.dev_scoring == "teacher_forced":
                return scores
            cache = self.__dict__.setdefault("greedy_cache", {})
            return scores._replace(acc=graphed_greedy_dev_accuracy([self], cache)[0])
        scores = teacher_forced(self.model, self.dev_split, o.dev_batch_size,
                                mix_gate=self.cfg.model.attention.mode == "mix")
        if o.dev_scoring == "teacher_forced":
            return scores
        if self._dev_caps is None:
            self._dev_caps = split_caps(self.dev_split, self.data.decode_cap)
        decoded = greedy_decode(self.model, self.dev_split, self._dev_caps, o.dev_batch_size)
        hits = sum(
            e and p == g for p, e, g in zip(decoded.pred, decoded.ended, self.dev_split.tgt_ids)
        )
        return scores._replace(acc=hits / len(self.dev_split))

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

    def end_epoch(self, train_loss: float, train_seconds: float, recorder: Recorder,
                  dev: DevScores | None = None) -> None:
        """After an epoch's training pass (solo or packed): dev scores (``dev`` when the pack
        scored them already), scheduler, best model, early stopping, history, then the
        checkpoint, and only then the recorder."""
        o = self.cfg.optim
        start = time.perf_counter()
        scores = dev if dev is not None else self.dev_scores()
        dev_loss, dev_acc = scores.loss, scores.acc
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
        }
        if scores.mix_gate is not None:  # how much a Mix run relies on location: a gate stuck at 0 or 1 does not mix
            metrics["mix_gate"] = scores.mix_gate
        if self.compile_watch.epochs and self.compile_watch.epoch == self.epoch:  # compiled this epoch
            metrics.update(self.compile_watch.metrics())
        metrics["epoch_seconds"] = train_seconds + time.perf_counter() - start
        self.history.append({"epoch": self.epoch, **metrics})
        path = ckpt.save_checkpoint(self.out_dir, ckpt.checkpoint_meta(self.cfg, self.epoch), self.state())
        recorder.on_epoch(self.epoch, metrics, path)

    def load_best(self) -> None:
        """Put the best model's weights (by dev score) into ``model``."""
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)

    def finish(self, on_test_split: Any = None, decoded: dict[str, Any] | None = None) -> RunResult:
        """Score the best model on every test split and write the run's files. ``decoded``: test
        splits its pack decoded already (by name); under ``optim.train_step: graphed`` the rest
        are decoded as a pack of one (:func:`~locattn.training.decode.graphed_test_decodes`)."""
        start = time.perf_counter()
        self.load_best()
        torch.save(self.model.state_dict(), self.out_dir / BEST_MODEL_FILE)
        if decoded is None and self.cfg.optim.train_step == "graphed":
            decoded = graphed_test_decodes([self])[0]
        saved: dict[str, Any] = {}
        test, by_length = score_test_splits(self.model, self.data, self.cfg, self.ids,
                                            on_test_split=on_test_split, keep_examples=saved,
                                            decoded=decoded)
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
            best_selection_score=float(self.best_score if self.best_score is not None else math.nan),
            epochs_run=self.epoch,
            stop_reason=self.stop_reason or "max_epochs",
            test=test,
            by_length=by_length,
            wall_seconds=seconds,
        )


__all__ = ["Seq2SeqRun"]
