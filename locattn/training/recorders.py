"""Recorders: how a training run reports progress without importing a tracking library.

``train`` calls ``on_epoch`` after each completed epoch (once that epoch's checkpoint is on
disk) and ``on_end`` once with the final result. A recorder may also have
``on_test_split(split, done, total)``, called while the test splits are scored after training,
and ``on_pack_epoch()``, which the packed trainer (``locattn.packed.train_packed``) calls on the
recorder of every replica of a group once each of them has saved and reported the epoch (a
study saves one checkpoint of the whole pack there instead of one per replica). ``study`` plugs Ray Tune / MLflow in here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from locattn.training.results import RunResult


@runtime_checkable
class Recorder(Protocol):
    """Receives per-epoch metrics and the final result of one run."""

    def on_epoch(self, epoch: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        """Epoch ``epoch`` (from 1) finished; its checkpoint is complete in ``checkpoint_dir``."""
        ...

    def on_end(self, result: "RunResult") -> None:
        """The run finished and its test splits are scored."""
        ...


class NullRecorder:
    """The default: records nothing."""

    def on_epoch(self, epoch: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        pass

    def on_end(self, result: "RunResult") -> None:
        pass


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class JsonlRecorder:
    """Appends one JSON line per epoch and one for the end of the run to ``path``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")

    def on_epoch(self, epoch: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        self._write(
            {
                "event": "epoch",
                "epoch": epoch,
                "metrics": {k: _json_safe(v) for k, v in metrics.items()},
                "checkpoint_dir": str(checkpoint_dir),
            }
        )

    def on_end(self, result: "RunResult") -> None:
        self._write({"event": "end", "metrics": result.final_metrics()})


class MultiRecorder:
    """Forwards every call to several recorders, in order."""

    def __init__(self, *recorders: Recorder) -> None:
        self.recorders = recorders

    def on_epoch(self, epoch: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        for r in self.recorders:
            r.on_epoch(epoch, metrics, checkpoint_dir)

    def on_test_split(self, split: str, done: int, total: int) -> None:
        """Forwarded to the recorders that have this optional hook (test-scoring progress)."""
        for r in self.recorders:
            hook = getattr(r, "on_test_split", None)
            if hook is not None:
                hook(split, done, total)

    def on_end(self, result: "RunResult") -> None:
        for r in self.recorders:
            r.on_end(result)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records a :class:`JsonlRecorder` wrote."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
