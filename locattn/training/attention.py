"""Floor 2 of a training run: the attention trace of one test example (``attention.json``/``.png``),
and the Mix gate's mean over a split (a per-epoch metric of the Mix variants)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from locattn.models.attention.base import diagnostics
from locattn.training.results import ATTENTION_JSON, ATTENTION_PNG


def longest_split(data: Any) -> str | None:
    """The test split with the longest sources on average (e.g. ``len100``)."""
    best, best_len = None, -1.0
    for name in data.test_splits:
        examples = data.splits[name]
        if examples:
            mean_len = sum(len(ex.src) for ex in examples) / len(examples)
            if mean_len > best_len:
                best, best_len = name, mean_len
    return best


def _trace_list(value: Any) -> Any:
    if value is None:
        return None
    arr = value.detach().float().cpu().numpy()
    return np.round(arr, 5).tolist()


@torch.no_grad()
def attention_record(
    model: torch.nn.Module, data: Any, split: str, index: int, device: str | torch.device
) -> dict[str, Any]:
    """Greedy-decode one example with ``trace=True``: weights and traces as JSON-safe lists."""
    if split not in data.splits:
        raise ValueError(f"unknown split {split!r}; valid: {list(data.splits)}")
    examples = data.splits[split]
    if not 0 <= index < len(examples):
        raise ValueError(f"index {index} out of range for split {split!r} ({len(examples)} examples)")
    ex = examples[index]
    vocab = data.vocab
    model.eval()
    src = torch.tensor([vocab.encode(ex.src)], dtype=torch.long, device=device)  # (1, S)
    src_len = torch.tensor([len(ex.src)], dtype=torch.long, device=device)  # (1,)
    cap = int(data.decode_cap(len(ex.src)))
    out = model.greedy(src, src_len, cap, trace=True)
    n = int(out.lengths[0])
    tokens = out.tokens[0, :n].tolist()
    tr = out.trace
    weights = tr.weights[0, :n]  # (T, L)
    record: dict[str, Any] = {
        "split": split,
        "index": index,
        "src": list(ex.src),
        "gold": list(ex.tgt),
        "pred": list(vocab.decode(tokens)),
        "correct": list(vocab.decode(tokens)) == list(ex.tgt) and vocab.eos_id in tokens,
        "source_offset": int(getattr(model, "source_offset", 0)),
        "weights": np.round(weights.float().cpu().numpy(), 4).tolist(),
    }
    recorded = {name: d for name, d in diagnostics().items() if d.traced and d.recorded}
    for key in [name for name, d in recorded.items() if d.recorded_with is None] + ["blocks"]:  # blocks: (T, 3)
        value = getattr(tr, key, None)
        record[key] = None if value is None else _trace_list(value[0, :n])
    for key, d in recorded.items():  # e.g. a Mix's both halves, (T, L) each, when it has them
        if d.recorded_with is not None and getattr(tr, d.recorded_with, None) is not None:
            record[key] = _trace_list(getattr(tr, key)[0, :n])
    dir_gate = getattr(tr, "dir_gate", None)
    record["dir_gate"] = None if dir_gate is None else float(dir_gate.reshape(-1)[0])
    return record


def write_attention(record: dict[str, Any], out_dir: Path, png_name: str = ATTENTION_PNG) -> Path:
    """Write ``attention.json`` and draw ``attention.png`` in ``out_dir``."""
    from locattn.plot import draw_attention  # matplotlib only when a figure is drawn

    (out_dir / ATTENTION_JSON).write_text(json.dumps(record) + "\n")
    title = f"{record['split']} #{record['index']}" + ("" if record["correct"] else " (wrong)")
    return draw_attention(record, out_dir / png_name, title=title)


__all__ = ["attention_record", "longest_split", "write_attention"]
