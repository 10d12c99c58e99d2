"""CFQ length split (Keysers et al. 2020; ``query_complexity_split``), from local files.

These machines cannot download CFQ, so the user supplies the split in ``TaskConfig.data_dir``:

    train.tsv | train.jsonl           (100,654 pairs in the official split)
    dev.tsv   | dev.jsonl             (validation; 9,512)  -- validation.* also accepted
    test.tsv  | test.jsonl            (9,512)

``.tsv``: one ``question<TAB>query`` per line, no header. ``.jsonl``: one JSON object per
line with string fields ``question`` and ``query``. Text is split on whitespace, so supply
the usual pre-tokenised form (punctuation separated). The vocabulary is built from the
training split (other tokens map to ``<unk>``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from locattn.tasks.base import (DECODE_SLACK, Example, TaskData, Vocab, check_tokens, numbered_lines,
                                require_examples)
from locattn.tasks.config import TaskConfig

SPLIT_FILES = {
    "train": ("train",),
    "dev": ("dev", "validation"),
    "test": ("test",),
}


def expected_files_message(data_dir: str | None) -> str:
    return (
        f"cfq: put the CFQ length split (query_complexity_split) in TaskConfig.data_dir "
        f"(now {data_dir!r}) as train.tsv, dev.tsv and test.tsv ('question<TAB>query' per line, "
        f"no header) or train.jsonl, dev.jsonl and test.jsonl ({{\"question\": ..., \"query\": ...}} "
        f"per line); validation.* is accepted for dev"
    )


def _read(path: Path) -> list[Example]:
    out: list[Example] = []
    jsonl = path.suffix == ".jsonl"
    for where, line in numbered_lines(path):
        if jsonl:
            try:
                obj = json.loads(line)
                q, s = obj["question"], obj["query"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"{where}: expected a JSON object with 'question' and 'query' ({exc})"
                ) from None
        else:
            cols = line.split("\t")
            if len(cols) != 2:
                raise ValueError(f"{where}: expected 'question<TAB>query', got {line[:80]!r}")
            q, s = cols
        ex = Example(tuple(str(q).split()), tuple(str(s).split()))
        if not ex.src or not ex.tgt:
            raise ValueError(f"{where}: empty question or query")
        check_tokens(ex, where)
        out.append(ex)
    return require_examples(out, path)


def load_dir(cfg: TaskConfig) -> TaskData:
    if not cfg.data_dir or not Path(cfg.data_dir).is_dir():
        raise FileNotFoundError(expected_files_message(cfg.data_dir))
    data_dir = Path(cfg.data_dir)
    paths: dict[str, Path] = {}
    for split, stems in SPLIT_FILES.items():  # check every file exists before parsing any
        path = next((data_dir / f"{s}{ext}" for s in stems for ext in (".tsv", ".jsonl")
                     if (data_dir / f"{s}{ext}").is_file()), None)
        if path is None:
            raise FileNotFoundError(f"missing {split} file in {data_dir}. " + expected_files_message(cfg.data_dir))
        paths[split] = path
    splits = {split: _read(path) for split, path in paths.items()}
    ratio = max(len(e.tgt) / len(e.src) for e in splits["train"])

    def cap(src_len: int) -> int:
        # twice the largest query/question length ratio seen in training (test queries are longer)
        return math.ceil(2 * ratio * src_len) + 1 + DECODE_SLACK

    tokens = sorted({t for e in splits["train"] for t in e.src + e.tgt})
    return TaskData(name="cfq", kind="seq2seq", vocab=Vocab(tokens), splits=splits,
                    test_splits=["test"], decode_cap_fn=cap, has_attention=False,
                    notes={"files": expected_files_message(cfg.data_dir)})
