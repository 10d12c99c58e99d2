"""Floor 3, device path: greedy decoding of a pack at static shapes, captured as CUDA graphs on
a GPU and run eagerly on CPU.

Used for test scoring (and greedy dev scoring) under ``optim.train_step: graphed``.
:func:`~locattn.training.evaluate.greedy_decode` decodes one model batch by batch, each batch
trimmed to its own lengths, and stops when every row has ended: a host read per step, and
shapes that change from batch to batch. :class:`PackedGreedy` decodes K replicas (runs of one
cell) in one pass instead:

* the K replicas' weights are stacked (:class:`~locattn.training.epoch.ParamPack`): one
  forward per step serves all K, row block k being replica k;
* every batch has ``batch_size`` rows (a short last batch is filled with a one-token row of cap
  1), its source padded to a length bucket (a multiple of :data:`BUCKET`), and it runs a fixed
  number of steps: its largest cap rounded up to the bucket. Rows that ended emit ``<pad>``, as
  in the eager decode, so the outputs are the same; only the early stop is gone;
* a split's index rows go to the device once, each batch's inputs are gathered there, and the
  tokens come back once per split: no host sync per step or per batch;
* with ``capture`` (default on CUDA) each (source bucket, step bucket) shape records one CUDA
  graph on first use and replays it; weights are copied in place (:meth:`PackedGreedy.load`), so
  the graphs stay valid from one epoch's dev scoring to the next. Without capture (CPU) the very
  same step runs eagerly: that fallback is what the CPU tests compare with
  :func:`~locattn.training.evaluate.greedy_decode`, token for token.

On splits with gold attention the step also keeps each step's attention weights and pools the
attention loss over the emitted steps (``eval.attn_loss_decode: emitted``; the padded source
positions weigh exactly 0, so it equals the eager loss up to the rounding of its sums). The
``gold_length`` evaluation runs a second, free decode per batch: those splits are decoded by
:func:`~locattn.training.evaluate.greedy_decode`, replica by replica.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from locattn.metrics import attn_loss_terms
from locattn.models.functional import embed
from locattn.training.data import EncodedSplit
from locattn.training.epoch import ParamPack
from locattn.training.evaluate import Decoded, split_caps

BUCKET = 8
"""Source lengths and step counts are rounded up to a multiple of this: one graph per bucket."""


def _no_check(*args: Any, **kwargs: Any) -> None:
    """The model's input checks read lengths back to the host (a sync a capture refuses)."""


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class PackedGreedy:
    """Greedy decoding of ``runs`` (:class:`~locattn.training.seq2seq.Seq2SeqRun` of one cell)
    in one batched pass; see the module docstring. Their current weights are loaded now; call
    :meth:`load` again after they change (reuses every recorded graph)."""

    def __init__(self, runs: list[Any], batch_size: int, *, capture: bool | None = None) -> None:
        self.runs, self.K, self.B = runs, len(runs), batch_size
        self.device = runs[0].device
        self.capture = (self.device.type == "cuda") if capture is None else capture
        if self.capture and self.device.type != "cuda":
            raise ValueError(f"CUDA graph capture needs a CUDA device, got {self.device}")
        pack = ParamPack(runs)
        pack.release()  # the solo parameters keep their own storage; load() copies them in
        self.names, self.stacked, self.part = pack.names, pack.stacked, pack.part
        self.model = pack.model.eval()
        self.model._check = _no_check
        self.model.noise = None
        self.graphs: dict[tuple[int, int, bool], Any] = {}
        self.pool: Any = None  # one memory pool for every graph (see _run)
        self.buffers: dict[tuple[int, int, bool], dict[str, torch.Tensor]] = {}

    @torch.no_grad()
    def load(self) -> None:
        """Copy every replica's current weights into the pack, in place."""
        for k, r in enumerate(self.runs):
            params = dict(r.model.named_parameters())
            for i, name in enumerate(self.names):
                at = self.part(name, k)  # None: a parameter this replica lacks (its slot stays zero)
                if at is not None:
                    self.stacked[i][at].copy_(params[name])

    # ---------------------------------------------------------------- one static shape

    def _static(self, S: int, T: int, trace: bool) -> dict[str, torch.Tensor]:
        buf = self.buffers.get((S, T, trace))
        if buf is None:
            rows, dev = self.K * self.B, self.device
            L = S + 2 * int(getattr(self.model, "source_offset", 0))
            buf = self.buffers[(S, T, trace)] = {
                "src": torch.zeros(rows, S, dtype=torch.long, device=dev),
                "src_len": torch.ones(rows, dtype=torch.long, device=dev),
                "cap": torch.ones(rows, dtype=torch.long, device=dev),
                "tokens": torch.zeros(rows, T, dtype=torch.long, device=dev),
                "lengths": torch.zeros(rows, dtype=torch.long, device=dev),
            }
            if trace:  # (rows, T, L) attention weights per step
                buf["weights"] = torch.zeros(rows, T, L, dtype=torch.float32, device=dev)
        return buf

    @torch.no_grad()
    def _body(self, buf: dict[str, torch.Tensor]) -> None:
        """``Seq2Seq.greedy`` for the rows in ``buf`` at its fixed number of steps: device work only."""
        m = self.model
        src, cap = buf["src"], buf["cap"]
        rows, T = buf["tokens"].shape
        state = m._start(src, buf["src_len"], None)
        prev = torch.full((rows,), m.sos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(rows, dtype=torch.bool, device=src.device)
        lengths = torch.zeros(rows, dtype=torch.long, device=src.device)
        gate_table = m._embed_gates(m.embedding.weight)  # (K, V, 3H)
        tokens, weights = [], []
        for t in range(T):
            state, attn = m._advance(state, embed(prev, gate_table))
            if "weights" in buf:
                weights.append(attn.weights)
            tok = m.logits(state.hidden[-1]).argmax(-1).masked_fill(finished, m.pad_id)  # (rows,)
            lengths = lengths + (~finished).long()
            tokens.append(tok)
            finished = finished | (cap <= t + 1) | (tok == m.eos_id)
            prev = tok
        buf["tokens"].copy_(torch.stack(tokens, dim=1))
        buf["lengths"].copy_(lengths)
        if weights:
            buf["weights"].copy_(torch.stack(weights, dim=1))

    def _run(self, S: int, T: int, trace: bool) -> dict[str, torch.Tensor]:
        """Decode the rows already in the (S, T, trace) buffers: replay its graph (recorded on
        first use), or run the step eagerly without capture (or where recording failed)."""
        key = (S, T, trace)
        buf = self._static(*key)
        if not self.capture:
            self._body(buf)
            return buf
        graph = self.graphs.get(key)
        if graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up, as capture requires
                self._body(buf)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # one pool for all shapes: a graph's outputs go to buffers made outside it, so nothing
            # it allocates outlives its replay, and the graphs replay one at a time on one stream
            self.pool = self.pool if self.pool is not None else torch.cuda.graph_pool_handle()
            try:
                with torch.cuda.graph(graph, pool=self.pool):
                    self._body(buf)
            except RuntimeError as err:  # e.g. a host read inside an attender
                warnings.warn(f"greedy decoding could not be captured ({err}); it runs uncaptured",
                              RuntimeWarning, stacklevel=2)
                self.capture = False
                self._body(buf)
                return buf
            self.graphs[key] = graph
        graph.replay()
        return buf

    # ---------------------------------------------------------------- a split

    @torch.no_grad()
    def decode(self, split: EncodedSplit, caps: np.ndarray, *, want_attention: bool = False,
               attn_steps: str = "with_eos") -> list[Decoded]:
        """Greedy outputs of ``split`` for every replica (``caps`` (N,) from the task), in split
        order: what :func:`greedy_decode` gives each replica with ``attn_decode="emitted"``."""
        n, K, B = len(split), self.K, self.B
        trace = want_attention and split.attn is not None
        batches = split.sorted_batches(B)
        # the split plus a filler row (index n: one token, cap 1) on the device, and every
        # batch's index row (filled up to B with n) uploaded at once
        src_all = F.pad(split.src, (0, 0, 0, 1), value=split.pad_id)
        len_all = F.pad(split.src_len, (0, 1), value=1)
        cap_all = torch.from_numpy(np.append(caps, 1)).to(self.device)
        idx_np = np.full((len(batches), B), n, dtype=np.int64)
        for j, index in enumerate(batches):
            idx_np[j, : len(index)] = index
        idx_all = torch.from_numpy(idx_np).to(self.device)
        outs = []
        for j, index in enumerate(batches):
            S = min(_round_up(int(split.src_len_np[index].max()), BUCKET), src_all.shape[1])
            T = _round_up(int(caps[index].max()), BUCKET)
            buf = self._static(S, T, trace)
            idx = idx_all[j].repeat(K)  # (K*B,) replica k's rows are block k
            buf["src"].copy_(src_all[idx, :S])
            buf["src_len"].copy_(len_all[idx])
            buf["cap"].copy_(cap_all[idx])
            buf = self._run(S, T, trace)
            outs.append((buf["tokens"].clone(), buf["lengths"].clone(),
                         buf["weights"].clone() if trace else None))
        eos, offset = split.eos_id, int(getattr(self.model, "source_offset", 0))
        pred = [[[] for _ in range(n)] for _ in range(K)]
        ended = [[False] * n for _ in range(K)]
        sq_err, n_steps = [0.0] * K, [0] * K
        for index, (tokens, lengths, weights) in zip(batches, outs):  # read back after all ran
            if trace:
                gold = split.attn[torch.as_tensor(index, device=split.device)].cpu()  # (b, T)
                w, ln = weights.cpu().view(K, B, *weights.shape[1:]), lengths.cpu().view(K, B)
                for k in range(K):
                    total, scored = attn_loss_terms(w[k, : len(index)], gold, source_offset=offset,
                                                    lengths=ln[k, : len(index)], steps=attn_steps)
                    sq_err[k] += total
                    n_steps[k] += scored
            tokens, lengths = tokens.view(K, B, -1).tolist(), lengths.view(K, B).tolist()
            for k in range(K):
                for row, i in enumerate(index.tolist()):
                    seq = tokens[k][row][: lengths[k][row]]
                    if seq and seq[-1] == eos:
                        ended[k][i] = True
                        seq = seq[:-1]
                    pred[k][i] = seq
        return [Decoded(pred=pred[k], ended=ended[k],
                        attn_loss=sq_err[k] / n_steps[k] if trace and n_steps[k] else None)
                for k in range(K)]


def graphed_test_decodes(runs: list[Any], *, capture: bool | None = None) -> list[dict[str, Decoded]]:
    """Per run, its greedy outputs of every test split (what
    :func:`~locattn.training.scoring.score_test_splits` decodes), the K runs decoded together
    (their current weights: load the best model first). Splits with gold attention under
    ``eval.attn_loss_decode: gold_length`` are left out (the caller's :func:`greedy_decode`
    scores them)."""
    if not runs:
        return []
    data, cfg = runs[0].data, runs[0].cfg
    decoder = PackedGreedy(runs, cfg.optim.dev_batch_size, capture=capture)
    out: list[dict[str, Decoded]] = [{} for _ in runs]
    for name in data.test_splits:
        if not data.splits[name]:
            continue
        split = EncodedSplit(data.splits[name], data.vocab, **runs[0].ids, device=runs[0].device)
        if split.attn is not None and cfg.eval.attn_loss_decode != "emitted":
            continue
        decoded_k = decoder.decode(split, split_caps(split, data.decode_cap), want_attention=True,
                                   attn_steps=cfg.eval.attn_loss_steps)
        for k, decoded in enumerate(decoded_k):
            out[k][name] = decoded
    return out


def graphed_greedy_dev_accuracy(runs: list[Any], cache: dict[Any, PackedGreedy] | None = None) -> list[float]:
    """Greedy dev sequence accuracy of every run (what ``Seq2SeqRun.dev_scores`` computes under
    ``optim.dev_scoring: greedy``), the runs decoded together; the decoder (and its graphs) is
    kept in ``cache`` while the same runs are scored together."""
    key = tuple(id(r) for r in runs)
    decoder = cache.get(key) if cache is not None else None
    if decoder is None:
        decoder = PackedGreedy(runs, runs[0].cfg.optim.dev_batch_size)
        if cache is not None:
            cache.clear()
            cache[key] = decoder
    else:
        decoder.load()
    split = runs[0].dev_split
    caps = split_caps(split, runs[0].data.decode_cap)
    return [
        sum(e and p == g for p, e, g in zip(d.pred, d.ended, split.tgt_ids)) / len(split)
        for d in decoder.decode(split, caps)
    ]


__all__ = ["BUCKET", "PackedGreedy", "graphed_greedy_dev_accuracy", "graphed_test_decodes"]
