"""Source encoders and direction mixing.

* START/END (Ray Chowdhury App. E / REFERENCE §1): learned vectors placed before the first and
  after the last embedded source token, so L_b = S_b + 2 and p_j = j / max(1, L_b - 1) puts START
  at 0 and END at 1. With ``source_boundaries="none"`` L_b = S_b.
* ``bigru``: bidirectional GRU, hidden/2 units per direction, packed by length. Per layer,
  e_cls = [last forward state; first backward state] (the backward GRU's final state), which also
  initialises that decoder layer.
* ``gru_residual`` (Dubois et al. §6.3): unidirectional GRU; outputs e = GRU(x) + P x, with P the
  identity when embedding and hidden sizes agree and a bias-free linear map otherwise;
  e_cls = the last state.
* Direction mixing (Ray Chowdhury eqs. 17-18): e_dir = g·e + (1-g)·reverse(e),
  g = sigmoid(beta·Linear(e_cls)), once per sequence. ``reverse`` flips the whole valid span
  [0, L_b) of each sequence and leaves padding in place; with START/END the two boundary
  encodings swap ends, so attention over the reversed view still begins at a boundary vector at
  position 0 and ends at one at position L_b - 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from locattn.models.config import Boundaries, EncoderKind


@dataclass(frozen=True)
class Encoded:
    """Encoder output on the attention axis."""

    outputs: Tensor
    """(B, L, d) encoder outputs (zero on padding), before dropout."""
    cls: Tensor
    """(num_layers, B, d) per-layer sequence summary e_cls; the last layer's is the paper's."""
    lengths: Tensor
    """(B,) long, L_b."""
    mask: Tensor
    """(B, L) bool, True on valid positions."""


class SourceEncoder(nn.Module):
    """Embedded source (B, S, E) + lengths -> :class:`Encoded`."""

    def __init__(
        self,
        *,
        kind: EncoderKind,
        boundaries: Boundaries,
        embedding_size: int,
        hidden_size: int,
        num_layers: int,
    ) -> None:
        super().__init__()
        self.num_layers = num_layers
        if boundaries == "start_end":
            self.start = nn.Parameter(torch.randn(embedding_size))
            self.end = nn.Parameter(torch.randn(embedding_size))
        else:
            self.start = self.end = None
        self.bidirectional = kind == "bigru"
        per_direction = hidden_size // 2 if self.bidirectional else hidden_size
        self.rnn = nn.GRU(
            embedding_size, per_direction, num_layers=num_layers, batch_first=True,
            bidirectional=self.bidirectional,
        )
        self.residual: nn.Module | None = None
        if kind == "gru_residual":
            self.residual = (
                nn.Identity() if embedding_size == hidden_size
                else nn.Linear(embedding_size, hidden_size, bias=False)
            )

    def _add_boundaries(self, x: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
        if self.start is None:
            return x, src_len
        B, S, E = x.shape
        start = self.start.expand(B, 1, E)
        x = torch.cat((start, x, x.new_zeros(B, 1, E)), dim=1)  # (B, S+2, E)
        is_end = torch.arange(S + 2, device=x.device).unsqueeze(0) == (src_len + 1).unsqueeze(1)
        x = torch.where(is_end.unsqueeze(-1), self.end, x)  # END right after each source
        return x, src_len + 2

    def forward(self, embedded: Tensor, src_len: Tensor) -> Encoded:  # type: ignore[override]
        x, lengths = self._add_boundaries(embedded, src_len)  # (B, L, E), (B,)
        B, L, _ = x.shape
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=L)  # (B, L, d)
        mask = torch.arange(L, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, L)
        if self.residual is not None:
            out = out + self.residual(x) * mask.unsqueeze(-1)
        if self.bidirectional:
            # h_n: (layers*2, B, d/2); the backward final state is the state at position 0.
            cls = h_n.view(self.num_layers, 2, B, -1).permute(0, 2, 1, 3).reshape(
                self.num_layers, B, -1
            )  # (layers, B, d)
        else:
            cls = h_n  # (layers, B, d)
        return Encoded(outputs=out, cls=cls, lengths=lengths, mask=mask)


class DirectionMixer(nn.Module):
    """e_dir = g·e + (1-g)·reverse(e), g = sigmoid(beta·Linear(e_cls)) (Ray Chowdhury eqs. 17-18)."""

    def __init__(self, size: int, temperature: float) -> None:
        super().__init__()
        self.gate = nn.Linear(size, 1)
        self.temperature = temperature

    def forward(  # type: ignore[override]
        self, e: Tensor, cls: Tensor, lengths: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """e (B, L, d), cls (B, d), lengths (B,), mask (B, L) -> (e_dir (B, L, d), g (B,))."""
        g = torch.sigmoid(self.temperature * self.gate(cls)).squeeze(-1)  # (B,)
        j = torch.arange(e.shape[1], device=e.device).unsqueeze(0)  # (1, L)
        index = torch.where(mask, lengths.unsqueeze(1) - 1 - j, j)  # (B, L): flip valid span
        reversed_e = e.gather(1, index.unsqueeze(-1).expand_as(e))  # (B, L, d)
        gg = g.view(-1, 1, 1)
        return gg * e + (1.0 - gg) * reversed_e, g
