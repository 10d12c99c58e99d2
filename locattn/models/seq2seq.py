"""The recurrent encoder-decoder of Ray Chowdhury & Caragea (App. E), with any attender.

Per sequence: embed (shared vocabulary) -> [START; x; END] -> encoder -> dropout on e ->
(optional direction mixing e_dir) -> values W_o·leaky_relu(W_v e) precomputed once.
Per step t (0-based), with h_{t-1} the top decoder state before the update (h_{-1} = e_cls):

    alpha_t = attender(h_{t-1})                      # (B, L)
    c_t     = sum_j alpha_tj W_o v_j                 # (B, H), the bias-free output map folded in
    h_t     = GRUCell([emb(y_{t-1}); c_t], h_{t-1})  # stacked cells for num_layers > 1
    logits  = (W_p h_t) E^T + b                      # tied to the embedding E

Speed: the first cell's input map is split, W_ih [emb; c] = W_e emb + W_c c. W_e emb(y) is
computed for all teacher-forced steps at once, and since c_t is linear in the values,
W_c c_t = sum_j alpha_tj (W_c W_o v_j) with W_c W_o v precomputed per sequence, so a step costs
one (B, L)x(B, L, 3H) product instead of two dense maps (for short sources; see
``FOLD_VALUE_GATES_MAX_LEN``). The cell itself is the standard GRU
update (same parameters as ``nn.GRUCell``; a test checks the two agree).

``forward`` is teacher forced (tgt_in = [<sos>, y_1 .. y_{T-1}]), or free-running for the
same number of steps (``teacher_forced=False``, training with a teacher forcing ratio); ``greedy`` decodes until each
sequence emits <eos> or reaches its caller-given cap, finished sequences emitting ``pad_id``.
``start``/``step`` expose one decoding step for external decoders and for tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any

import torch
from torch import Tensor, nn

from locattn.models.attention import AttnStep, SourceMemory, attender_is_stacked, build_attender
from locattn.models.attention.base import stack_steps, traced_fields
from locattn.models.attention.replicas import call_replicas, join_rows
from locattn.models.attention.location import building_block_weights
from locattn.models.config import ModelConfig
from locattn.models.encoder import DirectionMixer, SourceEncoder
from locattn.models.functional import (
    DropoutNoise, apply_dropout, dropout_with, embed, gru_update, leaky_relu, linear,
)


FOLD_VALUE_GATES_MAX_LEN = 32
"""Attention lengths up to which the value gates W_c W_o v are precomputed per sequence (one
small product per step); longer sources form the context first (the (B, L, 3H) gate tensor no
longer fits in cache, and reading it per step costs more than the extra (B, H) x (H, 3H) map).
The rule depends only on shapes, so teacher forcing and stepwise decoding agree."""


AttentionTrace = make_dataclass(
    "AttentionTrace",
    traced_fields() + [("blocks", "Tensor | None", field(default=None)),
                       ("dir_gate", "Tensor | None", field(default=None))],
    frozen=True,
    namespace={"__module__": __name__, "__doc__": """Per-step attention diagnostics. Fields are None
    where the attender has no such quantity.

    ``weights`` (B, T, L): the final attention; axis L starts at ``Seq2Seq.source_offset`` for
    source token 0. Then each traced :class:`AttnStep` diagnostic under its own name, stacked
    over the steps (:func:`locattn.models.attention.base.traced_fields`): (B, T) for a (B,) one
    (``mu``, ``sigma``, ``step``, ``mix_gate``), (B, T, L) for a (B, L) one
    (``location_weights``, ``content_weights``). ``blocks`` (B, T, 3): the weights of the
    building blocks (1/(L-1), pa_{t-1}, 1) in mu (location family; ``building_block_weights``).
    ``dir_gate`` (B,): the direction gate g (1 = forward)."""},
)


@dataclass(frozen=True)
class Seq2SeqOutput:
    logits: Tensor
    """(B, T, V)."""
    trace: AttentionTrace | None
    """Set when called with ``trace=True``."""


@dataclass(frozen=True)
class GreedyOutput:
    tokens: Tensor
    """(B, T') long; ``pad_id`` after a sequence has finished."""
    lengths: Tensor
    """(B,) long: emitted tokens, <eos> included when emitted."""
    trace: AttentionTrace | None
    """Set when called with ``trace=True`` (rows after a sequence finished are still computed)."""


@dataclass(frozen=True)
class DecoderState:
    """Everything one decoding step needs; returned anew by :meth:`Seq2Seq.step`."""

    memory: SourceMemory
    cache: Any
    attn_state: Any
    hidden: tuple[Tensor, ...]
    """Per-layer decoder states, each (B, H)."""
    t: int
    dir_gate: Tensor | None
    value_gates: Tensor | None
    """(B, L, 3H) W_c W_o v: the first cell's input gates contributed by each source position.
    None for long sources (L > ``FOLD_VALUE_GATES_MAX_LEN``): there the step forms the context
    c_t = alpha_t values (B, H) and maps it with W_c, reading 3x less memory per step."""


def _stack_trace(steps: list[AttnStep], dir_gate: Tensor | None, cfg: ModelConfig) -> AttentionTrace:
    stacked = stack_steps(steps)
    step, rho = stacked["step"], stacked["rho"]
    blocks = None
    if step is not None and rho is not None:
        blocks = building_block_weights(cfg.attention.reference, step, rho)  # (B, T, 3)
    traced = {name: value for name, value in stacked.items() if name in AttentionTrace.__dataclass_fields__}
    return AttentionTrace(**traced, blocks=blocks, dir_gate=dir_gate)


class Seq2Seq(nn.Module):
    """GRU encoder-decoder with a pluggable attender. Build it with :func:`build_model`."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, *, pad_id: int, sos_id: int, eos_id: int,
                 total_batches: int = 1):
        super().__init__()
        if cfg.kind != "seq2seq":
            raise ValueError(f"Seq2Seq needs kind='seq2seq', got kind={cfg.kind!r}")
        for name, value in (("pad_id", pad_id), ("sos_id", sos_id), ("eos_id", eos_id)):
            if not 0 <= value < vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary [0, {vocab_size})")
        E, H = cfg.embedding_size, cfg.hidden_size
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.pad_id, self.sos_id, self.eos_id = pad_id, sos_id, eos_id
        self.source_offset = 1 if cfg.source_boundaries == "start_end" else 0
        self.embedding = nn.Embedding(vocab_size, E)
        self.encoder = SourceEncoder(
            kind=cfg.encoder, boundaries=cfg.source_boundaries, embedding_size=E,
            hidden_size=H, num_layers=cfg.num_layers,
        )
        self.dropout_p = cfg.dropout
        self.direction = (
            DirectionMixer(H, cfg.attention.direction_temperature)
            if cfg.attention.direction == "mixed" else None
        )
        self.value_in = nn.Linear(H, cfg.value_size)
        self.value_out = nn.Linear(cfg.value_size, H, bias=False)
        self.attender = build_attender(cfg.attention, query_size=H, key_size=H, dim=H,
                                       total_batches=total_batches)
        self.attender_stacked = attender_is_stacked(cfg.attention.family)
        """Whether the attender is written for stacked (K, ...) parameters (the built-ins:
        :mod:`locattn.models.functional`); an ordinary module is not."""
        self.replicated_attender = False
        """Set on a pack's copy (:class:`~locattn.training.epoch.ParamPack`) of a model whose
        attender is an ordinary module: its parameters and buffers carry a leading replica axis,
        and every call runs it per replica (:mod:`locattn.models.attention.replicas`)."""
        self.cells = nn.ModuleList(
            [nn.GRUCell(E + H, H)] + [nn.GRUCell(H, H) for _ in range(cfg.num_layers - 1)]
        )
        self.out_proj = nn.Linear(H, E)
        self.out_bias = nn.Parameter(torch.zeros(vocab_size))
        self.noise: DropoutNoise | None = None
        """Dropout masks from explicit generators (set by the trainer); None: global RNG."""
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """Reference initialisation (JRC1995/MonotonicLocationAttention, GRUEncoderDecoder and the
        attention modules): embedding kaiming-normal with mode fan_out (std sqrt(2/V)); Xavier-uniform
        weights for the value MLP, the value/output maps and the output projection; biases, GRUs and
        the direction gate keep PyTorch's defaults. Attenders initialise their own layers."""
        nn.init.kaiming_normal_(self.embedding.weight, mode="fan_out")
        for layer in (self.value_in, self.value_out, self.out_proj):
            nn.init.xavier_uniform_(layer.weight)

    # ------------------------------------------------------------------ validation
    def _check(self, src: Tensor, src_len: Tensor, tgt_in: Tensor | None = None) -> None:
        if not isinstance(src, Tensor) or src.dim() != 2 or src.dtype != torch.long:
            raise ValueError(
                f"src must be a (B, S) int64 tensor of token ids, got "
                f"{getattr(src, 'dtype', type(src).__name__)} of shape {tuple(getattr(src, 'shape', ()))}"
            )
        B, S = src.shape
        if (not isinstance(src_len, Tensor) or src_len.dim() != 1 or src_len.shape[0] != B
                or src_len.dtype != torch.long):
            raise ValueError(
                f"src_len must be a (B,) = ({B},) int64 tensor, got "
                f"{getattr(src_len, 'dtype', type(src_len).__name__)} of shape "
                f"{tuple(getattr(src_len, 'shape', ()))}"
            )
        if B == 0 or S == 0:
            raise ValueError(f"src must be non-empty, got shape {tuple(src.shape)}")
        lo, hi = int(src_len.min()), int(src_len.max())
        if lo < 1 or hi > S:
            raise ValueError(f"src_len values must be in [1, S={S}], got min {lo}, max {hi}")
        if tgt_in is not None:
            if (not isinstance(tgt_in, Tensor) or tgt_in.dim() != 2 or tgt_in.shape[0] != B
                    or tgt_in.dtype != torch.long):
                raise ValueError(
                    f"tgt_in must be a (B, T) int64 tensor with B={B}, got "
                    f"{getattr(tgt_in, 'dtype', type(tgt_in).__name__)} of shape "
                    f"{tuple(getattr(tgt_in, 'shape', ()))}"
                )
            if tgt_in.shape[1] == 0:
                raise ValueError("tgt_in must have at least one step (the <sos> column)")

    # ------------------------------------------------------------------ pieces
    def start(self, src: Tensor, src_len: Tensor) -> DecoderState:
        """Encode the source; the returned state is ready for the first :meth:`step`."""
        self._check(src, src_len)
        return self._start(src, src_len, None)

    def dropout_shape(self, src: Tensor) -> tuple[int, int, int]:
        """Shape (B, L, d) of the encoder outputs that dropout masks for a (B, S) ``src``."""
        return src.shape[0], src.shape[1] + 2 * self.source_offset, self.cfg.hidden_size

    def _start(self, src: Tensor, src_len: Tensor, noise: Tensor | None,
               keep: Tensor | None = None) -> DecoderState:
        """:meth:`start` without the checks; ``noise`` (U(0, 1) of :meth:`dropout_shape`), when
        given, replaces the draw from ``self.noise``: the same mask for the same numbers.
        ``keep`` (:func:`~locattn.models.functional.dropout_keep` of such noise) is the
        multiplier itself, the same mask to the bit."""
        enc = self.encoder(embed(src, self.embedding.weight), src_len)
        if keep is not None:
            e = enc.outputs * keep
        elif noise is None:
            e = dropout_with(enc.outputs, self.dropout_p, self.training, self.noise)  # (B, L, d)
        else:
            e = apply_dropout(enc.outputs, noise, self.dropout_p)
        dir_gate = None
        if self.direction is not None:
            e, dir_gate = self.direction(e, enc.cls[-1], enc.lengths, enc.mask)
        # (B, L, V); dropout is on e only (Ray Chowdhury & Caragea's reference code)
        hidden_v = leaky_relu(linear(e, self.value_in.weight, self.value_in.bias))
        values = linear(hidden_v, self.value_out.weight)  # (B, L, H)
        lengths = enc.lengths.to(e.dtype)  # (B,)
        stepsize = 1.0 / torch.clamp(lengths - 1.0, min=1.0)  # (B,)
        positions = torch.arange(e.shape[1], device=e.device, dtype=e.dtype).unsqueeze(0)
        positions = (positions * stepsize.unsqueeze(1)) * enc.mask  # (B, L)
        value_gates = None
        if values.shape[1] <= FOLD_VALUE_GATES_MAX_LEN:
            value_gates = linear(values, self.cells[0].weight_ih[..., self.cfg.embedding_size :])
        memory = SourceMemory(
            keys=e, values=values, mask=enc.mask, positions=positions, lengths=lengths,
            score_bias=torch.zeros_like(positions).masked_fill(~enc.mask, float("-inf")),
            stepsize=stepsize,
        )
        return DecoderState(
            memory=memory,
            cache=self._attend("prepare", memory),
            attn_state=self._attend("initial_state", memory),
            hidden=tuple(enc.cls.unbind(0)),
            t=0,
            dir_gate=dir_gate,
            value_gates=value_gates,
        )

    def _attend(self, method: str, memory: SourceMemory, *step: Any) -> Any:
        """The attender's ``prepare(memory)``, ``initial_state(memory)`` or ``forward(query,
        memory, cache, state, t)`` (``step`` = query, cache, state, t): called as it is, or per
        replica under ``torch.func.vmap`` on a pack's copy of an ordinary module."""
        att = self.attender
        if not self.replicated_attender:
            if method == "forward":
                query, cache, attn_state, t = step
                return att(query, memory, cache, attn_state, t)
            fn = getattr(att, method, None)  # a plain module may leave out prepare / initial_state
            return fn(memory) if fn is not None else None
        if method != "forward":
            return call_replicas(att, method, (memory,))
        query, cache, attn_state, t = step
        attn, new_state = call_replicas(att, "forward", (query, memory), (cache, attn_state), (t,))
        return join_rows(attn), new_state

    def _embed_gates(self, emb: Tensor) -> Tensor:
        """W_e emb + b_ih of the first cell: (..., E) -> (..., 3H)."""
        cell = self.cells[0]
        return linear(emb, cell.weight_ih[..., : self.cfg.embedding_size], cell.bias_ih)

    def _advance(self, state: DecoderState, emb_gates: Tensor) -> tuple[DecoderState, AttnStep]:
        """One step given W_e emb(y_{t-1}) + b_ih (B, 3H)."""
        h0 = state.hidden[0]
        attn, attn_state = self._attend(
            "forward", state.memory, state.hidden[-1], state.cache, state.attn_state, state.t
        )
        if state.value_gates is not None:
            gi = torch.baddbmm(
                emb_gates.unsqueeze(1), attn.weights.unsqueeze(1), state.value_gates
            ).squeeze(1)  # (B, 3H) = W_e emb + b_ih + W_c c_t
        else:
            context = torch.bmm(attn.weights.unsqueeze(1), state.memory.values).squeeze(1)  # (B, H)
            w_c = self.cells[0].weight_ih[..., self.cfg.embedding_size :]
            gi = emb_gates + linear(context, w_c)  # (B, 3H)
        cell = self.cells[0]
        gh = linear(h0, cell.weight_hh, cell.bias_hh)  # (B, 3H)
        x = gru_update(gi, gh, h0)  # (B, H)
        hidden = [x]
        for cell, h in zip(self.cells[1:], state.hidden[1:]):
            x = gru_update(
                linear(x, cell.weight_ih, cell.bias_ih), linear(h, cell.weight_hh, cell.bias_hh), h
            )
            hidden.append(x)
        new = DecoderState(
            memory=state.memory, cache=state.cache, attn_state=attn_state, hidden=tuple(hidden),
            t=state.t + 1, dir_gate=state.dir_gate, value_gates=state.value_gates,
        )
        return new, attn

    def logits(self, hidden: Tensor) -> Tensor:
        """Tied output layer: (..., H) -> (..., V)."""
        projected = linear(hidden, self.out_proj.weight, self.out_proj.bias)  # (..., E)
        return linear(projected, self.embedding.weight, self.out_bias)

    def step(self, state: DecoderState, prev_tokens: Tensor) -> tuple[Tensor, DecoderState, AttnStep]:
        """Feed y_{t-1} (B,) -> (logits (B, V), next state, this step's attention)."""
        state, attn = self._advance(state, self._embed_gates(embed(prev_tokens, self.embedding.weight)))
        return self.logits(state.hidden[-1]), state, attn

    # ------------------------------------------------------------------ decoding
    def forward(  # type: ignore[override]
        self, src: Tensor, src_len: Tensor, tgt_in: Tensor, *, trace: bool = False,
        noise: Tensor | None = None, check: bool = True, teacher_forced: bool = True,
        dropout_keep: Tensor | None = None,
    ) -> Seq2SeqOutput:
        """Teacher-forced logits (B, T, V) for tgt_in = [<sos>, y_1 .. y_{T-1}].

        ``teacher_forced=False`` runs the decoder free for T steps instead: step t > 0 is fed
        the argmax of step t-1's logits (no gradient through the choice), also after an emitted
        ``<eos>``; only ``tgt_in[:, 0]`` (``<sos>``) is read. That is Dubois et al.'s training
        decoder for a batch that draws no teacher forcing (``optim.teacher_forcing_ratio``).

        ``noise`` (U(0, 1) of :meth:`dropout_shape`) replaces the dropout draw from
        ``self.noise``; with it and ``check=False`` the forward has no data-dependent branch and
        no generator, so torch.compile traces it into one graph (the caller checks the inputs).
        ``dropout_keep`` (:func:`~locattn.models.functional.dropout_keep` of such noise) gives the
        mask as its float multiplier instead (the same values to the bit): the compiled step
        passes it, so that no bool mask crosses its kernels."""
        if check:
            self._check(src, src_len, tgt_in)
        state = self._start(src, src_len, noise, dropout_keep)
        if not teacher_forced:
            return self._free_running(state, tgt_in, trace)
        emb_gates = self._embed_gates(embed(tgt_in, self.embedding.weight))  # (B, T, 3H)
        tops, steps = [], []
        for gates_t in emb_gates.unbind(1):  # unbind: one gradient stack, not T zero-fills
            state, attn = self._advance(state, gates_t)
            tops.append(state.hidden[-1])
            steps.append(attn)
        logits = self.logits(torch.stack(tops, dim=1))  # (B, T, V)
        return Seq2SeqOutput(logits=logits, trace=_stack_trace(steps, state.dir_gate, self.cfg) if trace else None)

    def _free_running(self, state: DecoderState, tgt_in: Tensor, trace: bool) -> Seq2SeqOutput:
        """:meth:`forward` fed its own argmax: ``tgt_in.shape[1]`` steps from ``tgt_in[:, 0]``."""
        gate_table = self._embed_gates(self.embedding.weight)  # (V, 3H); packed: (K, V, 3H)
        gates_t = embed(tgt_in[:, 0], gate_table)  # (B, 3H)
        logits, steps = [], []
        for _ in range(tgt_in.shape[1]):
            state, attn = self._advance(state, gates_t)
            logits.append(self.logits(state.hidden[-1]))  # (B, V)
            steps.append(attn)
            gates_t = embed(logits[-1].detach().argmax(-1), gate_table)
        return Seq2SeqOutput(
            logits=torch.stack(logits, dim=1),
            trace=_stack_trace(steps, state.dir_gate, self.cfg) if trace else None,
        )

    @torch.no_grad()
    def greedy(
        self, src: Tensor, src_len: Tensor, max_len: Tensor | int, *, trace: bool = False,
        stop_at_eos: bool = True,
    ) -> GreedyOutput:
        """Greedy decoding until <eos> or ``max_len`` (int, or (B,) long per sequence). With
        ``stop_at_eos=False`` each sequence runs exactly its ``max_len`` steps, fed its own
        predictions, ``<eos>`` included (Dubois et al.'s gold-length evaluation)."""
        state = self.start(src, src_len)
        B = src.shape[0]
        cap = torch.as_tensor(max_len, dtype=torch.long, device=src.device).expand(B)  # (B,)
        if int(cap.min()) < 1:
            raise ValueError(f"max_len must be >= 1 for every sequence, got min {int(cap.min())}")
        prev = torch.full((B,), self.sos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        lengths = torch.zeros(B, dtype=torch.long, device=src.device)
        # W_e emb(y) + b_ih for every token y, once: each step then looks its gates up
        # instead of embedding and mapping B tokens (one (B, E) x (E, 3H) product per step)
        gate_table = self._embed_gates(self.embedding.weight)  # (V, 3H); packed: (K, V, 3H)
        tokens, steps = [], []
        for t in range(int(cap.max())):
            state, attn = self._advance(state, embed(prev, gate_table))
            logits = self.logits(state.hidden[-1])  # (B, V)
            tok = logits.argmax(-1).masked_fill(finished, self.pad_id)  # (B,)
            lengths = lengths + (~finished).long()
            tokens.append(tok)
            steps.append(attn)
            finished = finished | (cap <= t + 1)
            if stop_at_eos:
                finished = finished | (tok == self.eos_id)
            prev = tok
            if bool(finished.all()):
                break
        return GreedyOutput(
            tokens=torch.stack(tokens, dim=1), lengths=lengths,
            trace=_stack_trace(steps, state.dir_gate, self.cfg) if trace else None,
        )


def build_model(model_cfg: ModelConfig, vocab_size: int, *, pad_id: int, sos_id: int, eos_id: int,
                total_batches: int = 1) -> Seq2Seq:
    """The seq2seq model for ``model_cfg`` (``kind="seq2seq"``). ``total_batches``: the training
    batches the run will take at most, read by attenders with a training schedule
    (``dubois_code``); a loaded checkpoint brings its own."""
    return Seq2Seq(model_cfg, vocab_size, pad_id=pad_id, sos_id=sos_id, eos_id=eos_id,
                   total_batches=total_batches)


__all__ = ["AttentionTrace", "DecoderState", "GreedyOutput", "Seq2Seq", "Seq2SeqOutput", "build_model"]
