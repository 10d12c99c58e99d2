"""Prediction examples of a finished run (``examples.json``): what the qualitative exhibits read.

Per test split, the first ``n_wrong`` wrong and the first ``n_right`` right greedy predictions in
split order, as tokens, with the first position where the prediction leaves the gold. Ray
Chowdhury & Caragea's Table 10 (failure examples) is drawn from these.
"""

from __future__ import annotations

from typing import Any, Sequence

from locattn.training.files import EXAMPLES_JSON


def first_error(pred: Sequence[Any], gold: Sequence[Any], ended: bool) -> int | None:
    """Index of the first output position where ``pred`` (before ``<eos>``) leaves ``gold``.

    None when the prediction is right (equal and ``<eos>`` emitted). A prediction that stops
    early errs at ``len(pred)`` (its ``<eos>`` where the gold goes on); one that runs past the
    gold, or never emits ``<eos>``, errs at ``len(gold)``.
    """
    n = min(len(pred), len(gold))
    for i in range(n):
        if pred[i] != gold[i]:
            return i
    if len(pred) == len(gold):
        return None if ended else len(gold)
    return n


def check_trace_choice(split: str, index: int, data: Any) -> None:
    """Refuse an ``outputs.trace_split`` / ``outputs.trace_index`` that names no test example,
    before training starts (ValueError naming the value and the valid choices)."""
    if not split:
        return
    if split not in data.test_splits:
        raise ValueError(f"outputs.trace_split={split!r} is not a test split of task "
                         f"{getattr(data, 'name', '?')!r}; valid: {list(data.test_splits)}")
    size = len(data.splits[split])
    if index >= size:
        raise ValueError(f"outputs.trace_index={index} is out of range for split {split!r} "
                         f"({size} examples; valid: 0..{size - 1})")


def split_examples(
    examples: Sequence[Any],
    pred_ids: Sequence[Sequence[int]],
    ended: Sequence[bool],
    gold_ids: Sequence[Sequence[int]],
    decode: Any,
    *,
    n_wrong: int,
    n_right: int,
) -> dict[str, Any]:
    """The saved examples of one split.

    ``examples`` are the split's :class:`~locattn.tasks.base.Example` s; ``pred_ids`` /
    ``ended`` the greedy predictions (ids before ``<eos>``) and whether ``<eos>`` was emitted;
    ``gold_ids`` the gold ids without ``<eos>``; ``decode`` maps ids to tokens. Returns
    ``{"n", "n_wrong", "wrong": [...], "right": [...]}``, each item
    ``{"index", "src", "gold", "pred", "ended", "first_error"}``.
    """
    wrong: list[dict[str, Any]] = []
    right: list[dict[str, Any]] = []
    n_bad = 0
    for i, (ex, p, e, g) in enumerate(zip(examples, pred_ids, ended, gold_ids)):
        err = first_error(list(p), list(g), bool(e))
        n_bad += err is not None
        bucket, limit = (wrong, n_wrong) if err is not None else (right, n_right)
        if len(bucket) < limit:
            bucket.append({
                "index": i,
                "src": list(ex.src),
                "gold": list(ex.tgt),
                "pred": list(decode(p)),
                "ended": bool(e),
                "first_error": err,
            })
    return {"n": len(examples), "n_wrong": n_bad, "wrong": wrong, "right": right}


__all__ = ["EXAMPLES_JSON", "check_trace_choice", "first_error", "split_examples"]
