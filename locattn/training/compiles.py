"""Floor 2 of a training run: counting torch.compile's compiles, so that a run can report them.

The compiled training step (``train_path="compiled"``) runs every batch of a run at one fixed
shape (:func:`fixed_train_shape`), so dynamo compiles its graph once per process, in the first
epoch. :class:`CompileWatch` counts the compiles around each compiled call (dynamo's
``counters["stats"]["unique_graphs"]``: a graph compiled, or loaded from inductor's disk cache,
both count; ``counters["frames"]`` stayed empty under torch 2.13 for a full-graph compile) and their seconds (wall seconds of the calls that compiled: the batch's own compute,
tens of milliseconds, is in them too). A compile in a later epoch of the same process is a
warning naming dynamo's recompile reason; a call past dynamo's recompile limit raises
``FailOnRecompileLimitHit`` (:func:`raise_on_recompile_limit`), and the caller warns and runs
that run's remaining batches eagerly instead of letting dynamo fall back silently.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from locattn.training import aot_step


def compiled_frames() -> int:
    """Graphs dynamo has compiled in this process so far (cache loads included), and saved
    compiled steps loaded from disk (:mod:`locattn.training.aot_step`)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) + aot_step.loads


def last_recompile_reason() -> str:
    """Dynamo's reason for its latest compile ('' for a first compile or when unknown)."""
    metrics = torch._dynamo.utils.get_compilation_metrics()
    return (metrics[-1].recompile_reason or "") if metrics else ""


def raise_on_recompile_limit() -> None:
    """Make dynamo raise ``FailOnRecompileLimitHit`` at its recompile limit instead of running
    the function eagerly without a word (torch keeps this config per thread: call it in the
    thread that trains)."""
    torch._dynamo.config.fail_on_recompile_limit_hit = True


@dataclass
class CompileWatch:
    """Compiles of one run's compiled training step: ``compiles`` and ``compile_seconds`` of the
    current epoch (reset by :meth:`start_epoch`), ``epochs`` trained so far in this process, and
    ``eager`` once dynamo's recompile limit sent the run to the eager step."""

    label: str
    compiles: int = 0
    compile_seconds: float = 0.0
    epochs: int = 0
    epoch: int = 0
    eager: bool = False
    compiling_since: float | None = None

    def start_epoch(self, epoch: int) -> None:
        """Reset the per-epoch counts before training epoch ``epoch``."""
        self.compiles, self.compile_seconds, self.epoch = 0, 0.0, epoch
        self.epochs += 1

    def call(self, fn: Callable[..., Any], fallback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with its compiles counted; ``fallback`` (the eager step) when
        the run went eager, or from the call at which dynamo hit its recompile limit on (with a
        warning naming the limit and the reason)."""
        if self.eager:
            return fallback(*args, **kwargs)
        before, start = compiled_frames(), time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        except torch._dynamo.exc.FailOnRecompileLimitHit as hit:
            self.eager = True
            warnings.warn(f"{self.label}: epoch {self.epoch}: torch.compile hit dynamo's recompile limit "
                          f"(torch._dynamo.config.recompile_limit="
                          f"{torch._dynamo.config.recompile_limit}; {hit}); the run's remaining "
                          f"batches train eagerly", RuntimeWarning, stacklevel=2)
            return fallback(*args, **kwargs)
        new = compiled_frames() - before
        if new:
            self.compiles += new
            self.compiling_since = start  # AOTAutograd compiles the backward at its first call
            if self.epochs > 1:
                reason = last_recompile_reason()
                warnings.warn(f"{self.label}: epoch {self.epoch}: torch.compile compiled again after "
                              f"the first epoch ({new} graph(s); reason: {reason or 'unknown'})",
                              RuntimeWarning, stacklevel=2)
        return out

    def step_done(self) -> None:
        """After the step's backward: a step that compiled adds its seconds (forward, backward
        and their compiles) to ``compile_seconds``."""
        if self.compiling_since is not None:
            self.compile_seconds += time.perf_counter() - self.compiling_since
            self.compiling_since = None

    def metrics(self) -> dict[str, float]:
        """This epoch's ``compiles`` and ``compile_seconds`` (epoch metrics of the run record)."""
        return {"compiles": float(self.compiles), "compile_seconds": self.compile_seconds}


def fixed_train_shape(split: Any) -> tuple[int, int]:
    """(source length, target length) every training batch of ``split`` (an
    :class:`~locattn.training.data.EncodedSplit`) is padded to on the compiled path: the split's
    longest, so that one graph serves every batch of every epoch."""
    return int(split.src_len_np.max()), int(split.tgt_len_np.max())


SHARED_CACHE_VAR = "LOCATTN_SHARED_INDUCTOR_CACHE"
"""Set beside ``TORCHINDUCTOR_CACHE_DIR`` when :func:`share_compile_cache` chose the folder."""


def share_compile_cache(folder: str | os.PathLike[str]) -> str:
    """Point inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``) at ``folder`` (a study's
    folder: every trial on the machine then loads the graphs the first one compiled), unless the
    user set the variable; returns the cache folder in effect. Call it before the first compile
    of the process (inductor writes its default into the variable on first use)."""
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current is None or current == os.environ.get(SHARED_CACHE_VAR):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.environ[SHARED_CACHE_VAR] = os.fspath(folder)
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


__all__ = ["CompileWatch", "SHARED_CACHE_VAR", "share_compile_cache", "compiled_frames", "fixed_train_shape", "last_recompile_reason",
           "raise_on_recompile_limit"]
