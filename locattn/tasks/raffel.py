"""Addition and multiplication problems (Hochreiter & Schmidhuber 1997; Raffel & Ellis 2016).

Each sequence of length T has two channels per step: a value (U[-1, 1] for addition,
U[0, 1] for multiplication) and a marker. The marker is -1 at the first and last step, 1 at
N1 in {1..9} and at N2 in {1..floor(T/2)-2} (N2 moves up by one if it equals N1), 0 elsewhere.
With x1, x2 the values at the two marked steps the target is 0.5 + (x1 + x2) / 4 (addition)
or x1 * x2 (multiplication). Padding steps (t >= T) are all zero.

Lengths: fixed-length runs draw T per sequence from {T0, ..., floor(1.1 T0)}, the integers of
the paper's closed interval [T0, 1.1 T0] (T0 = 50: 50..55); variable-
length runs draw one T per *training batch* from {50, ..., 10000}, and T per sequence in the
fixed dev/test sets. Training batches are sampled on the fly (:meth:`sample_batch`); dev and
test are fixed sets of ``TaskConfig.dev_size`` / ``test_size`` sequences drawn from the data
seed, built on first use and not cached on disk (regenerating is faster than reading).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator, Literal

import numpy as np
import torch

from locattn.tasks.base import Vocab
from locattn.tasks.config import TaskConfig

GENERATOR_VERSION = 2
"""Mixed into the fixed sets' seeds. 2: fixed lengths reach 1.1 T0 (the interval is closed)."""
VARIABLE_RANGE = (50, 10_000)
Op = Literal["add", "mul"]


def length_range(cfg: TaskConfig) -> tuple[int, int]:
    """Inclusive (min, max) sequence length of a run: [T0, floor(1.1 T0)], or [50, 10000]."""
    if cfg.variable_length:
        return VARIABLE_RANGE
    return cfg.t0, (11 * cfg.t0) // 10  # the largest integer <= 1.1 T0, exactly


def sample_sequences(rng: np.random.Generator, lengths: np.ndarray, op: Op
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Vectorised sampler. lengths (B,) int -> x (B,Tmax,2) float32, lengths (B,) long, y (B,) float32."""
    lengths = np.asarray(lengths, dtype=np.int64)
    b, t_max = len(lengths), int(lengths.max())
    if lengths.min() < 12:
        raise ValueError(f"sequence lengths must be >= 12, got {int(lengths.min())}")
    rows = np.arange(b)
    valid = np.arange(t_max)[None, :] < lengths[:, None]  # (B,Tmax)
    if op == "add":
        values = rng.uniform(-1.0, 1.0, size=(b, t_max))
    else:
        values = rng.uniform(0.0, 1.0, size=(b, t_max))
    values = np.where(valid, values, 0.0).astype(np.float32)  # (B,Tmax)
    marker = np.zeros((b, t_max), dtype=np.float32)  # (B,Tmax)
    marker[:, 0] = -1.0
    marker[rows, lengths - 1] = -1.0
    n1 = rng.integers(1, 10, size=b)  # 1..9
    n2 = rng.integers(1, lengths // 2 - 1)  # 1..floor(T/2)-2
    n2 = np.where(n2 == n1, n2 + 1, n2)
    marker[rows, n1] = 1.0
    marker[rows, n2] = 1.0
    x1, x2 = values[rows, n1].astype(np.float64), values[rows, n2].astype(np.float64)
    y = 0.5 + (x1 + x2) / 4.0 if op == "add" else x1 * x2
    x = np.stack([values, marker], axis=-1)  # (B,Tmax,2)
    return (torch.from_numpy(x), torch.from_numpy(lengths.copy()),
            torch.from_numpy(y.astype(np.float32)))


def _np_rng(generator: torch.Generator | np.random.Generator | int) -> np.random.Generator:
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, torch.Generator):
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        return np.random.default_rng(seed)
    return np.random.default_rng(int(generator))


@dataclass
class RegressionSplit:
    """A fixed set of sequences, built on first use. x (N,Tmax,2), lengths (N,), y (N,)."""

    size: int
    seed: tuple[int, ...]
    lo: int
    hi: int
    op: Op

    def __len__(self) -> int:
        return self.size

    @cached_property
    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng(np.random.SeedSequence(list(self.seed)))
        lengths = rng.integers(self.lo, self.hi + 1, size=self.size)
        return sample_sequences(rng, lengths, self.op)

    def batches(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Consecutive batches, each trimmed to its longest sequence."""
        x, lengths, y = self.tensors
        for start in range(0, self.size, batch_size):
            sl = slice(start, start + batch_size)
            t = int(lengths[sl].max())
            yield x[sl, :t], lengths[sl], y[sl]


@dataclass
class RegressionTaskData:
    """Raffel & Ellis task: ``kind == "regression"``; ``splits`` = {"dev", "test"} fixed sets."""

    name: str
    op: Op
    lengths: tuple[int, int]
    variable_length: bool
    splits: dict[str, RegressionSplit]
    kind: Literal["regression"] = "regression"
    vocab: Vocab = field(default_factory=lambda: Vocab([]))
    test_splits: list[str] = field(default_factory=lambda: ["test"])
    has_attention: bool = False

    def sample_batch(self, generator: torch.Generator | np.random.Generator | int, batch_size: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A training batch: x (B,T,2) float32, lengths (B,) long, y (B,) float32.

        Deterministic in the generator's state. Variable-length tasks use one length for the
        whole batch; fixed-length tasks draw a length per sequence in [T0, 1.1 T0].
        """
        rng = _np_rng(generator)
        lo, hi = self.lengths
        if self.variable_length:
            lengths = np.full(batch_size, rng.integers(lo, hi + 1))
        else:
            lengths = rng.integers(lo, hi + 1, size=batch_size)
        return sample_sequences(rng, lengths, self.op)

    def decode_cap(self, src_len: int) -> int:
        raise TypeError(f"{self.name} is a regression task: there is nothing to decode")


def load(cfg: TaskConfig) -> RegressionTaskData:
    op: Op = "add" if cfg.name == "raffel_add" else "mul"
    lo, hi = length_range(cfg)
    base = (cfg.data_seed, GENERATOR_VERSION, 0 if op == "add" else 1, lo, hi)
    splits = {
        "dev": RegressionSplit(cfg.dev_size, base + (1,), lo, hi, op),
        "test": RegressionSplit(cfg.test_size, base + (2,), lo, hi, op),
    }
    return RegressionTaskData(name=cfg.name, op=op, lengths=(lo, hi),
                              variable_length=cfg.variable_length, splits=splits)
