"""Floor 1 of a training run: what it produces, how it fails, and the files it writes.

Of :mod:`locattn.training` it imports only ``files`` (floor 0: the file names).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from locattn.config import RunConfig, run_config_from_dict
from locattn.training.files import (ATTENTION_JSON, ATTENTION_PNG, BEST_MODEL_FILE,  # noqa: F401
                                    CONFIG_FILE, RESULT_FILE)


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite (the message names the epoch and batch)."""


#: Fields of :class:`RunResult` whose name changed: former name -> name. A ``result.json`` that
#: uses the former name still loads; the final metric of the same name is renamed alike in the
#: run record (``record.schema.RENAMED_METRICS``).
RENAMED_RESULT_FIELDS = {"best_dev_score": "best_selection_score"}


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
    """One dict per epoch: ``epoch`` and the run record's epoch metrics
    (``train_loss``, ``dev_loss``, ``dev_score``, ...)."""
    best_epoch: int
    """Epoch (from 1) of the selected model."""
    best_selection_score: float
    """The checkpoint-selection signal of the selected model, higher is better: its dev accuracy,
    or minus its dev loss under ``optim.select_on=dev_loss`` (regression runs under
    ``eval.regression_protocol=paper``: its test accuracy)."""
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
    """Regression: first epoch with 100 % accuracy on the held-out split of
    ``eval.regression_protocol`` (test under ``paper``, dev under ``dev``; None if never)."""
    wall_seconds: float = 0.0
    """Sum of the epoch times plus the final test scoring time."""

    def final_metrics(self) -> dict[str, float]:
        """The run record's final metrics: ``best_selection_score, best_epoch, epochs_run,
        test.<split>.<m>``."""
        out: dict[str, float] = {
            "best_selection_score": float(self.best_selection_score),
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
        """Inverse of :meth:`to_dict`; a field may go by its former name
        (:data:`RENAMED_RESULT_FIELDS`)."""
        data = dict(data)
        for old, new in RENAMED_RESULT_FIELDS.items():
            if old in data:
                if new in data:
                    raise ValueError(f"result keys {old!r} and {new!r} name one field ({old!r} is "
                                     f"its former name)")
                data[new] = data.pop(old)
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


def is_new_best(score: float, best: float | None, tolerance: float) -> bool:
    """Reference rule: a better score, or one within ``tolerance`` of the best, replaces it."""
    return best is None or score > best or abs(score - best) < tolerance


__all__ = [
    "ATTENTION_JSON",
    "ATTENTION_PNG",
    "BEST_MODEL_FILE",
    "CONFIG_FILE",
    "NonFiniteLossError",
    "RESULT_FILE",
    "RunResult",
    "is_new_best",
    "load_result",
    "load_run_config",
]
