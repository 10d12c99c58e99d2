"""Floor 5 of a training run: ``train(cfg, out_dir)`` (the protocol of
Ray Chowdhury & Caragea's reference code).

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
from pathlib import Path

import torch

from locattn.config import RunConfig, config_to_dict, identity_dict, run_identity
from locattn.tasks import load_task
from locattn.training import checkpoint as ckpt
from locattn.training.recorders import NullRecorder, Recorder
from locattn.training.regression import train_regression
from locattn.training.results import CONFIG_FILE, RESULT_FILE, RunResult
from locattn.training.seq2seq import Seq2SeqRun


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

    data = load_task(cfg.task, cache_dir=cfg.cache_dir)
    if data.kind == "regression":
        result = train_regression(cfg, data, out_dir, recorder=recorder, checkpoint=found)
    else:
        result = Seq2SeqRun(cfg, data, out_dir).run(recorder, found)
    (out_dir / RESULT_FILE).write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    recorder.on_end(result)
    return result


__all__ = ["train"]
