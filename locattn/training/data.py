"""Seq2seq splits pre-encoded to padded tensors once, and batches cut from them.

Data order is a pure function of ``(seed, epoch)``, so a resumed run needs no saved sampler state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A CPU generator seeded from ``(seed, epoch)``; the same pair always gives the same stream."""
    digest = hashlib.sha256(f"locattn-data-order:{seed}:{epoch}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    """Permutation of ``range(n)`` for training epoch ``epoch`` (from 1). (n,) long, CPU."""
    return torch.randperm(n, generator=epoch_generator(seed, epoch))


def encode_tokens(vocab: Any, tokens: Sequence[str]) -> list[int]:
    """Token ids of ``tokens`` under the task vocabulary."""
    return list(vocab.encode(tokens))


@dataclass(frozen=True)
class Batch:
    """One padded batch on the run device."""

    index: torch.Tensor  # (B,) positions in the split
    src: torch.Tensor  # (B, S) long
    src_len: torch.Tensor  # (B,) long
    tgt_in: torch.Tensor  # (B, T) long: <sos>, y_1 .. y_{T-1}
    tgt_out: torch.Tensor  # (B, T) long: y_1 .. y_n, <eos>, then <pad>
    n_tokens: int  # target tokens (incl. <eos>) in the batch


class EncodedSplit:
    """One split as padded tensors: sources, targets with ``<eos>``, gold attention (or None)."""

    def __init__(
        self,
        examples: Sequence[Any],
        vocab: Any,
        *,
        pad_id: int,
        sos_id: int,
        eos_id: int,
        device: str | torch.device = "cpu",
    ) -> None:
        n = len(examples)
        if n == 0:
            raise ValueError("cannot encode an empty split")
        src_ids = [encode_tokens(vocab, ex.src) for ex in examples]
        tgt_ids = [encode_tokens(vocab, ex.tgt) + [eos_id] for ex in examples]
        self.src_len_np = np.array([len(s) for s in src_ids], dtype=np.int64)  # (N,)
        self.tgt_len_np = np.array([len(t) for t in tgt_ids], dtype=np.int64)  # (N,) incl <eos>
        src = torch.full((n, int(self.src_len_np.max())), pad_id, dtype=torch.long)
        tgt = torch.full((n, int(self.tgt_len_np.max())), pad_id, dtype=torch.long)
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
            src[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            tgt[i, : len(t)] = torch.tensor(t, dtype=torch.long)
        self.attn: torch.Tensor | None = None  # (N, T) gold source index per step, -1 = none
        if all(getattr(ex, "attn", None) is not None for ex in examples):
            attn = torch.full(tgt.shape, -1, dtype=torch.long)
            for i, ex in enumerate(examples):
                attn[i, : len(ex.attn)] = torch.tensor(ex.attn, dtype=torch.long)
            self.attn = attn.to(device)
        self.examples = list(examples)
        self.src_tokens = [tuple(ex.src) for ex in examples]
        self.tgt_ids = [t[:-1] for t in tgt_ids]  # without <eos>
        self.device = torch.device(device)
        self.src = src.to(device)  # (N, S)
        self.src_len = torch.from_numpy(self.src_len_np).to(device)  # (N,)
        self.tgt = tgt.to(device)  # (N, T)
        self.pad_id, self.sos_id, self.eos_id = pad_id, sos_id, eos_id

    def __len__(self) -> int:
        return len(self.src_len_np)

    def batch(self, index: torch.Tensor | np.ndarray) -> Batch:
        """The examples at ``index`` (CPU long tensor or int array), trimmed to their max lengths."""
        index_np = index.numpy() if isinstance(index, torch.Tensor) else np.asarray(index)
        s_max = int(self.src_len_np[index_np].max())
        t_max = int(self.tgt_len_np[index_np].max())
        idx = torch.as_tensor(index_np, dtype=torch.long).to(self.device)
        tgt_out = self.tgt[idx, :t_max]  # (B, T)
        sos = torch.full((len(index_np), 1), self.sos_id, dtype=torch.long, device=self.device)
        tgt_in = torch.cat([sos, tgt_out[:, :-1]], dim=1)  # (B, T)
        return Batch(
            index=idx,
            src=self.src[idx, :s_max],
            src_len=self.src_len[idx],
            tgt_in=tgt_in,
            tgt_out=tgt_out,
            n_tokens=int(self.tgt_len_np[index_np].sum()),
        )

    def train_batches(self, order: torch.Tensor, batch_size: int) -> Iterator[Batch]:
        """Consecutive batches of ``order`` (a permutation), the last one possibly smaller."""
        for start in range(0, len(order), batch_size):
            yield self.batch(order[start : start + batch_size])

    def sorted_batches(self, batch_size: int) -> list[np.ndarray]:
        """Index arrays of batches of examples of similar source length (for scoring)."""
        order = np.argsort(self.src_len_np, kind="stable")
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
