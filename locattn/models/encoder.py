"""Source encoders and direction mixing.

* START/END (Ray Chowdhury & Caragea, App. E): learned vectors placed before the first and
  after the last embedded source token, so L_b = S_b + 2 and p_j = j / max(1, L_b - 1) puts START
  at 0 and END at 1. With ``source_boundaries="none"`` L_b = S_b.
* ``bigru``: bidirectional GRU, hidden/2 units per direction, run by length. Per layer,
  e_cls = [last forward state; first backward state] (the backward GRU's final state), which also
  initialises that decoder layer.
* ``gru_residual`` (Dubois sec. 6.3): unidirectional GRU; outputs e = GRU(x) + P x, with P the
  identity when embedding and hidden sizes agree and a bias-free linear map otherwise;
  e_cls = the last state.
* Direction mixing (Ray Chowdhury eqs. 17-18): e_dir = g·e + (1-g)·reverse(e),
  g = sigmoid(beta·Linear(e_cls)), once per sequence. ``reverse`` flips the whole valid span
  [0, L_b) of each sequence and leaves padding in place; with START/END the two boundary
  encodings swap ends, so attention over the reversed view still begins at a boundary vector at
  position 0 and ends at one at position L_b - 1.

Speed: the GRU parameters live in :class:`GRUWeights` (an ``nn.GRU``'s parameter names, shapes,
order and initialisation, without the module: dynamo will not trace through an ``nn.GRU``, not
even to read its weights, so holding one would break every compiled graph at the encoder). The
recurrence is run here: input maps for all steps and both directions in one product, then one
batched (directions x batch) step per position, with the backward direction run over each
sequence's reversed valid span and states frozen past each length. This equals a packed
``nn.GRU`` (a test checks it) and is several times faster on CPU than the packed call.
"""

from __future__ import annotations

from dataclasses import dataclass

import math

import torch
from torch import Tensor, nn

from locattn.models.config import Boundaries, EncoderKind
from locattn.models.functional import linear, per_row, take_rows


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


class GRUWeights(nn.Module):
    """The parameters of ``nn.GRU(input_size, hidden_size, num_layers, bidirectional=...)`` and
    nothing else: the same names (``weight_ih_l0``, ``bias_hh_l1_reverse``, ...), shapes,
    registration order and initialisation (every parameter U(-1/sqrt(H), 1/sqrt(H)), drawn in that
    order), so a seed gives the same weights and checkpoints load either way (a test checks it)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bidirectional = bidirectional
        D = 2 if bidirectional else 1
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else hidden_size * D
            for sfx in ("", "_reverse")[:D]:
                for name, shape in (("weight_ih", (3 * hidden_size, in_size)),
                                    ("weight_hh", (3 * hidden_size, hidden_size)),
                                    ("bias_ih", (3 * hidden_size,)), ("bias_hh", (3 * hidden_size,))):
                    self.register_parameter(f"{name}_l{layer}{sfx}", nn.Parameter(torch.empty(shape)))
        bound = 1.0 / math.sqrt(hidden_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)


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
            # zero-initialised, as in the reference code
            self.start = nn.Parameter(torch.zeros(embedding_size))
            self.end = nn.Parameter(torch.zeros(embedding_size))
        else:
            self.start = self.end = None
        self.bidirectional = kind == "bigru"
        per_direction = hidden_size // 2 if self.bidirectional else hidden_size
        self.rnn = GRUWeights(embedding_size, per_direction, num_layers, self.bidirectional)
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
        start = per_row(self.start, B, 1).expand(B, E).unsqueeze(1)  # (B, 1, E)
        end = per_row(self.end, B, 1).expand(B, E).unsqueeze(1)  # (B, 1, E)
        x = torch.cat((start, x, x.new_zeros(B, 1, E)), dim=1)  # (B, S+2, E)
        is_end = torch.arange(S + 2, device=x.device).unsqueeze(0) == (src_len + 1).unsqueeze(1)
        x = torch.where(is_end.unsqueeze(-1), end, x)  # END right after each source
        return x, src_len + 2

    def _layer_weights(self, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per-direction weights stacked on a leading group axis G = K x D (solo: K = 1)."""
        suffixes = ("", "_reverse") if self.bidirectional else ("",)

        def get(name: str) -> Tensor:
            ws = [getattr(self.rnn, f"{name}_l{layer}{sfx}") for sfx in suffixes]
            packed = ws[0].dim() == (3 if name.startswith("weight") else 2)
            stacked = torch.stack(ws, dim=1 if packed else 0)  # (K, D, ...) or (D, ...)
            return stacked.flatten(0, 1) if packed else stacked

        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def _recurrence(self, x: Tensor, lengths: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, L, E) -> (outputs (B, L, d) zero on padding, final states (layers, B, d)).

        A packed model (K replicas, rows grouped by replica) runs all K x D recurrences as one
        batched recurrence over groups g = (k, d) of B / K rows each.
        """
        KB, L, _ = x.shape
        D = 2 if self.bidirectional else 1
        j = torch.arange(L, device=x.device).unsqueeze(0)
        flip = torch.where(mask, lengths.unsqueeze(1) - 1 - j, j)  # (B, L) reverses valid spans
        finals = []
        inp = x
        for layer in range(self.num_layers):
            w_ih, w_hh, b_ih, b_hh = self._layer_weights(layer)  # (G, 3H, In) (G, 3H, H) ...
            G, H = w_hh.shape[0], w_hh.shape[2]
            K = G // D
            B = KB // K
            seqs = [inp]
            if D == 2:
                seqs.append(take_rows(inp, flip))
            seq = torch.stack(seqs).transpose(1, 2)  # (D, L, KB, In)
            if K == 1:
                seq_g = seq.reshape(D, L * B, -1)
                valid = mask.t().unsqueeze(-1).unbind(0)  # L x (B, 1)
                out_mask = mask.unsqueeze(-1)  # (B, L, 1)
            else:
                seq_g = seq.view(D, L, K, B, -1).permute(2, 0, 1, 3, 4).reshape(G, L * B, -1)
                m = mask.view(K, 1, B, L).expand(K, D, B, L).reshape(G, B, L)
                valid = m.permute(2, 0, 1).unsqueeze(-1).unbind(0)  # L x (G, B, 1)
                out_mask = m.unsqueeze(-1)  # (G, B, L, 1)
            gi = (seq_g @ w_ih.transpose(1, 2) + b_ih.unsqueeze(1)).view(
                G, L, B, 3 * H
            ).transpose(0, 1).unbind(0)  # L x (G, B, 3H); unbind keeps backward O(L)
            w_hh_t = w_hh.transpose(1, 2)  # (G, H, 3H)
            b_hh = b_hh.unsqueeze(1)  # (G, 1, 3H)
            h = x.new_zeros(G, B, H)
            outs = []
            for t in range(L):
                gh = torch.baddbmm(b_hh, h, w_hh_t)  # (G, B, 3H)
                g = gi[t]  # (G, B, 3H)
                rz = torch.sigmoid(g[..., : 2 * H] + gh[..., : 2 * H])
                n = torch.tanh(g[..., 2 * H :] + rz[..., :H] * gh[..., 2 * H :])
                h_new = n + rz[..., H:] * (h - n)  # (G, B, H)
                h = torch.where(valid[t], h_new, h)  # frozen past each length
                outs.append(h_new)
            out = torch.stack(outs, dim=2) * out_mask  # (G, B, L, H)
            if K > 1:
                out = out.view(K, D, B, L, H).transpose(0, 1).reshape(D, KB, L, H)
                h = h.view(K, D, B, H).transpose(0, 1).reshape(D, KB, H)
            if D == 2:
                back = take_rows(out[1], flip)  # un-reverse
                out = torch.cat((out[0], back), dim=-1)  # (B, L, 2H)
            else:
                out = out[0]
            finals.append(h.permute(1, 0, 2).reshape(KB, D * H))  # [forward; backward]
            inp = out
        return inp, torch.stack(finals)

    def forward(self, embedded: Tensor, src_len: Tensor) -> Encoded:  # type: ignore[override]
        x, lengths = self._add_boundaries(embedded, src_len)  # (B, L, E), (B,)
        L = x.shape[1]
        mask = torch.arange(L, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, L)
        out, cls = self._recurrence(x, lengths, mask)  # (B, L, d), (layers, B, d)
        if self.residual is not None:
            res = x if isinstance(self.residual, nn.Identity) else linear(x, self.residual.weight)
            out = out + res * mask.unsqueeze(-1)
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
        g = torch.sigmoid(self.temperature * linear(cls, self.gate.weight, self.gate.bias)).squeeze(-1)
        j = torch.arange(e.shape[1], device=e.device).unsqueeze(0)  # (1, L)
        index = torch.where(mask, lengths.unsqueeze(1) - 1 - j, j)  # (B, L): flip valid span
        reversed_e = take_rows(e, index)  # (B, L, d)
        gg = g.view(-1, 1, 1)
        return gg * e + (1.0 - gg) * reversed_e, g
