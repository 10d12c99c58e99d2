"""Floor 2 of a training run: greedy scoring of every test split with every metric."""

from __future__ import annotations

from typing import Any

import torch

from locattn import metrics as M
from locattn import registry
from locattn.config import RunConfig
from locattn.training.data import EncodedSplit
from locattn.training.evaluate import greedy_decode, split_caps
from locattn.training.examples import split_examples


def score_test_splits(
    model: torch.nn.Module, data: Any, cfg: RunConfig, ids: dict[str, int], *,
    on_test_split: Any = None, keep_examples: dict[str, Any] | None = None,
    decoded: dict[str, Any] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Greedy-decode every test split; per-split metrics and accuracy by output length.

    ``decoded``: splits already decoded (by name; :mod:`locattn.training.decode`), not decoded again.

    ``on_test_split(split, done, total)``, when given, is called before each split (``done``
    splits scored of ``total``) and once more at the end with ``done == total``: the
    ``on_test_split`` of a recorder that has one (the command line's progress bar)."""
    test: dict[str, dict[str, float]] = {}
    by_length: dict[str, dict[str, float]] = {}
    device = next(model.parameters()).device
    names = [n for n in data.test_splits if data.splits[n]]
    for done, name in enumerate(names):
        if on_test_split is not None:
            on_test_split(name, done, len(names))
        examples = data.splits[name]
        split = EncodedSplit(examples, data.vocab, **ids, device=device)
        want_attn = split.attn is not None
        done_split = (decoded or {}).get(name) or greedy_decode(
            model, split, split_caps(split, data.decode_cap), cfg.optim.dev_batch_size,
            want_attention=want_attn, attn_steps=cfg.eval.attn_loss_steps,
            attn_decode=cfg.eval.attn_loss_decode,
        )
        test[name], by_length[name] = split_metrics(split, done_split, task=data.name)
        if keep_examples is not None:  # examples.json: first wrong / right predictions (cfg.outputs)
            keep_examples[name] = split_examples(
                data.splits[name], done_split.pred, done_split.ended, split.tgt_ids,
                lambda p: [data.vocab.itos[i] for i in p],
                n_wrong=cfg.outputs.n_wrong, n_right=cfg.outputs.n_right,
            )
    if on_test_split is not None:
        on_test_split("", len(names), len(names))
    return test, by_length


def split_metrics(split: EncodedSplit, decoded: Any, *, task: str | None = None
                  ) -> tuple[dict[str, float], dict[str, float]]:
    """Metrics of one decoded split, and accuracy by gold length.

    Every metric registered as computed from predictions (:func:`locattn.register_metric`) that
    applies to a seq2seq task ``task`` (None: metrics for any task) is called as
    ``fn(pred, gold, eos_id=)``: ``pred`` the B greedy outputs, each ending with its first
    ``<eos>`` when it emitted one, ``gold`` the B targets each ending with ``<eos>``, ragged
    lists of ids. Then attnLoss (when the decode computed it) and ``n``, the split's size.
    Returns ({metric key: value}, {gold length: accuracy})."""
    eos = split.eos_id
    pred = [p + [eos] if e else p for p, e in zip(decoded.pred, decoded.ended)]
    gold = [g + [eos] for g in split.tgt_ids]
    out: dict[str, float] = {}
    for entry in registry.split_metrics_for("seq2seq", task):
        out[str(entry.meta["key"])] = _compute(entry, pred, gold, eos)
    if decoded.attn_loss is not None:
        out["attn_loss"] = float(decoded.attn_loss)
    out["n"] = float(len(split))
    correct = M.seq_correct(pred, gold, eos_id=eos)
    by_len = M.accuracy_by_length(correct, [len(g) for g in split.tgt_ids])
    return out, {str(k): float(v) for k, v in sorted(by_len.items())}


def _compute(entry: registry.Entry, pred: list[list[int]], gold: list[list[int]], eos: int) -> float:
    """One registered metric on one split; a plugin's failure or a non-number is one line
    naming the metric and its module."""
    try:
        value = entry.load()(pred, gold, eos_id=eos)
        return float(value)
    except registry.PluginError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin metric's failure, reported in one line
        raise registry.PluginError(
            f"metric {entry.name!r} ({entry.module}) failed: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())}; it is called as fn(pred, gold, eos_id=) and returns "
            "a number (locattn.register_metric)") from exc


__all__ = ["score_test_splits", "split_metrics"]
