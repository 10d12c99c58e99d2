"""Raffel & Ellis (2016) regression runs: addition and multiplication problems.

Training (Raffel & Ellis): MSE loss with Adam (no clipping, no LR schedule), batch
``optim.batch_size`` (100 for these tasks), an "epoch" of ``optim.updates_per_epoch`` updates
(1,000) on freshly sampled batches, at most ``optim.epochs`` epochs. Accuracy is the fraction of
sequences with |y_hat - y| < 0.04.

Which held-out split drives the run is ``eval.regression_protocol``:

- ``paper`` (Raffel & Ellis sec. 2.1, the default): the fixed test set is scored after every epoch
  (epoch metrics ``test_loss``, ``test_score``); the run stops at the first epoch with 100 %
  test accuracy (``epochs_to_100``) or at the budget; the reported model is the last epoch's, and
  its test accuracy is ``test.test.accuracy``. There is no dev set: ``best_selection_score`` and
  ``best_epoch`` hold that last epoch's test accuracy and number, and ``dev_scoring`` is
  ``test_accuracy`` so that no reader takes them for a dev score.
- ``dev``: the fixed dev set is scored after every epoch (``dev_loss``, ``dev_score``); stopping
  and ``epochs_to_100`` read dev; the best model by dev accuracy (ties replace it) is scored on
  the test set once, at the end.

Training batches of epoch e are sampled from a generator seeded by (seed, e), so data order
restores on resume without saved sampler state.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from locattn.config import RunConfig, config_to_dict, run_identity
from locattn.metrics import raffel_accuracy
from locattn.models import build_regressor
from locattn.training import checkpoint as ckpt
from locattn.training.recorders import Recorder
from locattn.training.results import BEST_MODEL_FILE, NonFiniteLossError, RunResult, is_new_best

#: Updates per epoch of a regression run that sets no ``optim.updates_per_epoch`` (0).
DEFAULT_UPDATES = 1_000


def batch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of epoch ``epoch``'s training batches: a pure function of (seed, epoch)."""
    return np.random.default_rng(np.random.SeedSequence([seed, epoch, 0x7A11E1]))


@torch.no_grad()
def score(model: torch.nn.Module, split: Any, batch_size: int, device: torch.device
          ) -> tuple[float, float]:
    """(MSE, Raffel accuracy) of ``model`` on a fixed regression split."""

    model.eval()
    preds, golds = [], []
    for x, lengths, y in split.batches(batch_size):
        y_hat, _ = model(x.to(device), lengths.to(device))  # (B,)
        preds.append(y_hat.double().cpu())
        golds.append(y.double())
    y_hat, y = torch.cat(preds), torch.cat(golds)
    return float(F.mse_loss(y_hat, y)), raffel_accuracy(y_hat, y)


def train_regression(
    cfg: RunConfig, data: Any, out_dir: Path, *, recorder: "Recorder",
    checkpoint: Path | None,
) -> RunResult:
    """Run the regression protocol; see the module docstring."""
    o = cfg.optim
    paper = cfg.eval.regression_protocol == "paper"
    held_out = "test" if paper else "dev"  # the split scored after every epoch
    device = torch.device(cfg.device)
    updates = o.updates_per_epoch or DEFAULT_UPDATES
    ckpt.seed_everything(cfg.seed)
    model = build_regressor(cfg.model, fused=cfg.train_path == "fused").to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=o.lr, weight_decay=o.weight_decay)
    s: dict[str, Any] = {
        "epoch": 0, "best_state": None, "best_score": None, "best_epoch": 0,
        "history": [], "stop_reason": None, "epochs_to_100": None,
    }
    if checkpoint is not None:
        saved = ckpt.load_state(checkpoint)  # CPU: RNG states must stay CPU tensors
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        ckpt.set_rng_state(saved["rng"])
        s = {k: saved[k] for k in s}

    while s["stop_reason"] is None and s["epoch"] < o.epochs:
        s["epoch"] += 1
        epoch = s["epoch"]
        start = time.perf_counter()
        model.train()
        rng = batch_rng(cfg.seed, epoch)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for step in range(1, updates + 1):
            x, lengths, y = data.sample_batch(rng, o.batch_size)
            y_hat, _ = model(x.to(device), lengths.to(device))  # (B,)
            loss = F.mse_loss(y_hat, y.to(device))
            if not torch.isfinite(loss.detach()):
                raise NonFiniteLossError(
                    f"non-finite training loss ({loss.detach().item()}) at epoch {epoch}, "
                    f"batch {step} (task={cfg.task.name}, variant={cfg.variant}, lr={o.lr})"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach().double()
        held_loss, held_acc = score(model, data.splits[held_out], o.dev_batch_size, device)
        if paper:  # the reported model is the last epoch's (best_state None: keep the model)
            s["best_score"], s["best_epoch"] = held_acc, epoch
        elif is_new_best(held_acc, s["best_score"], o.tie_tolerance):
            s["best_score"], s["best_epoch"] = held_acc, epoch
            s["best_state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if held_acc >= 1.0 and s["epochs_to_100"] is None:
            s["epochs_to_100"] = epoch
            if o.stop_at_100:
                s["stop_reason"] = "reached_100"
        if s["stop_reason"] is None and epoch >= o.epochs:
            s["stop_reason"] = "max_epochs"
        metrics = {
            "train_loss": float(loss_sum) / updates,
            f"{held_out}_loss": held_loss,
            f"{held_out}_score": held_acc,
            "lr": float(optimizer.param_groups[0]["lr"]),
            "epoch_seconds": time.perf_counter() - start,
        }
        s["history"].append({"epoch": epoch, **metrics})
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "rng": ckpt.rng_state(),
                 "data_order": {"kind": "pure(seed, epoch)", "next_epoch": epoch + 1}, **s}
        path = ckpt.save_checkpoint(out_dir, ckpt.checkpoint_meta(cfg, epoch), state)
        recorder.on_epoch(epoch, metrics, path)

    start = time.perf_counter()
    if s["best_state"] is not None:
        model.load_state_dict(s["best_state"])
    torch.save(model.state_dict(), out_dir / BEST_MODEL_FILE)
    test: dict[str, dict[str, float]] = {}
    for name in data.test_splits:
        _, acc = score(model, data.splits[name], o.dev_batch_size, device)
        test[name] = {"accuracy": acc, "n": float(len(data.splits[name]))}
    seconds = sum(h["epoch_seconds"] for h in s["history"]) + time.perf_counter() - start
    return RunResult(
        run_identity=run_identity(cfg),
        config=config_to_dict(cfg),
        kind="regression",
        dev_scoring="test_accuracy" if paper else "accuracy",
        history=s["history"],
        best_epoch=s["best_epoch"],
        best_selection_score=float(s["best_score"]) if s["best_score"] is not None else float("nan"),
        epochs_run=s["epoch"],
        stop_reason=s["stop_reason"] or "max_epochs",
        test=test,
        epochs_to_100=s["epochs_to_100"],
        wall_seconds=seconds,
    )
