"""The plugin's metric: token accuracy, computed from the greedy outputs and the targets.

Called by the trainer once per test split as ``token_acc(pred, gold, eos_id=)``
(:func:`locattn.register_metric`): ``pred`` and ``gold`` are B lists of token ids, each gold row
ending with ``eos_id``, each output row with its first ``eos_id`` (or cut at the decode cap).
Plain Python: a metric needs no torch.
"""

from __future__ import annotations


def token_acc(pred: list[list[int]], gold: list[list[int]], *, eos_id: int) -> float:
    """Fraction of gold target tokens (``<eos>`` included) that the output has at the same
    position, pooled over the split: partial credit where sequence accuracy gives none."""
    right = total = 0
    for p, g in zip(pred, gold):
        total += len(g)
        right += sum(a == b for a, b in zip(p, g))
    return right / total if total else float("nan")
