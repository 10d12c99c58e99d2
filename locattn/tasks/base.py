"""Data types shared by every task: examples, the vocabulary, padded batches, task data."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence

import torch

PAD, SOS, EOS, UNK = "<pad>", "<sos>", "<eos>", "<unk>"
SPECIALS: tuple[str, ...] = (PAD, SOS, EOS, UNK)

#: Gold attention value meaning "no gold source position for this step" (and padding).
NO_ATTN = -1


@dataclass(frozen=True)
class Example:
    """One seq2seq example.

    ``attn`` holds the gold source-token index (0-based into ``src``) per target step. It has
    ``len(tgt)`` entries when the task defines no gold for the ``<eos>`` step (copy family),
    or ``len(tgt) + 1`` when it does (Long Lookup Tables: ``<eos>`` attends the final ``.``).
    An entry of ``-1`` means the step has no well-defined gold position (PosRetrieve's
    separators); ``attn is None`` when the task has no gold attention at all.
    """

    src: tuple[str, ...]
    tgt: tuple[str, ...]
    attn: tuple[int, ...] | None = None


class Vocab:
    """Token <-> id map shared by source and target: pad=0, sos=1, eos=2, unk=3, then tokens."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos: list[str] = list(SPECIALS)
        for tok in tokens:
            if tok in SPECIALS:
                continue
            if tok in self.itos:
                raise ValueError(f"Vocab: duplicate token {tok!r}")
            self.itos.append(tok)
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}

    pad_id = 0
    sos_id = 1
    eos_id = 2
    unk_id = 3

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self.itos[4:12]}{'...' if len(self) > 12 else ''})"

    @property
    def tokens(self) -> list[str]:
        """Task tokens (without the four specials), in id order."""
        return self.itos[len(SPECIALS):]

    def encode(self, tokens: Sequence[str], *, add_eos: bool = False) -> list[int]:
        """Ids of ``tokens`` (unknown tokens map to ``unk_id``), optionally followed by eos."""
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> tuple[str, ...]:
        """Tokens of ``ids``; stops at the first eos (if asked) and drops pad and sos."""
        out: list[str] = []
        for i in ids:
            i = int(i)
            if i == self.eos_id and stop_at_eos:
                break
            if i in (self.pad_id, self.sos_id):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        return tuple(out)


@dataclass(frozen=True)
class Batch:
    """Padded tensors for a list of examples.

    src (B,S) long padded with pad_id; src_len (B,); tgt (B,T) long = target ids, then <eos>,
    then pad; tgt_len (B,) counts <eos>; attn (B,T) long gold source index per target step,
    -1 where undefined and on padding, or None when no example has gold attention.
    """

    src: torch.Tensor
    src_len: torch.Tensor
    tgt: torch.Tensor
    tgt_len: torch.Tensor
    attn: torch.Tensor | None
    sos_id: int = 1

    @property
    def tgt_in(self) -> torch.Tensor:
        """Teacher-forcing decoder input (B,T): [<sos>, y_1 .. y_{T-1}]."""
        sos = torch.full_like(self.tgt[:, :1], self.sos_id)
        return torch.cat([sos, self.tgt[:, :-1]], dim=1)

    def to(self, device: str | torch.device) -> "Batch":
        """Copy of the batch on ``device``."""
        return Batch(
            src=self.src.to(device),
            src_len=self.src_len.to(device),
            tgt=self.tgt.to(device),
            tgt_len=self.tgt_len.to(device),
            attn=None if self.attn is None else self.attn.to(device),
            sos_id=self.sos_id,
        )


def encode_examples(examples: Sequence[Example], vocab: Vocab) -> Batch:
    """Pad ``examples`` into a :class:`Batch` (see its docstring for shapes)."""
    if not examples:
        raise ValueError("encode_examples: empty list of examples")
    b = len(examples)
    s = max(len(ex.src) for ex in examples)
    t = max(len(ex.tgt) for ex in examples) + 1  # + <eos>
    src = torch.full((b, s), vocab.pad_id, dtype=torch.long)  # (B,S)
    tgt = torch.full((b, t), vocab.pad_id, dtype=torch.long)  # (B,T)
    has_attn = any(ex.attn is not None for ex in examples)
    attn = torch.full((b, t), NO_ATTN, dtype=torch.long) if has_attn else None  # (B,T)
    src_len = torch.empty(b, dtype=torch.long)
    tgt_len = torch.empty(b, dtype=torch.long)
    for i, ex in enumerate(examples):
        src_ids = vocab.encode(ex.src)
        tgt_ids = vocab.encode(ex.tgt, add_eos=True)
        src[i, : len(src_ids)] = torch.tensor(src_ids, dtype=torch.long)
        tgt[i, : len(tgt_ids)] = torch.tensor(tgt_ids, dtype=torch.long)
        src_len[i] = len(src_ids)
        tgt_len[i] = len(tgt_ids)
        if attn is not None and ex.attn is not None and len(ex.attn) > 0:
            attn[i, : len(ex.attn)] = torch.tensor(ex.attn, dtype=torch.long)
    return Batch(src=src, src_len=src_len, tgt=tgt, tgt_len=tgt_len, attn=attn, sos_id=vocab.sos_id)


#: Longest source or target, in tokens, that a data file may hold. The models have no
#: positional limit, but attention and the decoder's state grow with length (a 10 MB line took
#: a node's 23 GB): the longest in the papers' data is a few hundred tokens (CFQ queries).
MAX_TOKENS = 2_000
#: Longest line, in characters, read from a data file (room for MAX_TOKENS long tokens).
MAX_LINE_CHARS = 100_000


def numbered_lines(path: Path) -> Iterator[tuple[str, str]]:
    """``(where, line)`` for each non-blank line of a UTF-8 text file, ``where`` being
    ``"<path>:<line number>"`` for error messages; line endings stripped. A byte that is not
    UTF-8, or a line longer than :data:`MAX_LINE_CHARS`, raises ValueError naming the line."""
    with open(path, "rb") as f:
        lineno = 0
        while True:
            raw = f.readline(4 * MAX_LINE_CHARS + 1)  # bounded: never a whole 10 MB line
            if not raw:
                return
            lineno += 1
            where = f"{path}:{lineno}"
            if len(raw) > 4 * MAX_LINE_CHARS:
                raise ValueError(f"{where}: line longer than {MAX_LINE_CHARS:,} characters")
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}: not UTF-8 text (byte {raw[exc.start]:#04x} at column "
                                 f"{exc.start + 1}); save the file as UTF-8") from None
            if len(line) > MAX_LINE_CHARS:
                raise ValueError(f"{where}: line longer than {MAX_LINE_CHARS:,} characters")
            if line.strip():
                yield where, line


def check_tokens(ex: Example, where: str) -> None:
    """Raise ValueError (naming ``where``) if a source or target holds a reserved token
    (``<pad>``, ``<sos>``, ``<eos>``: the model would read it as padding or a sequence boundary)
    or is longer than :data:`MAX_TOKENS`."""
    for side, toks in (("source", ex.src), ("target", ex.tgt)):
        bad = next((t for t in toks if t in (PAD, SOS, EOS)), None)
        if bad is not None:
            raise ValueError(f"{where}: the {side} holds the reserved token {bad!r}; reserved: "
                             f"{[PAD, SOS, EOS]} (a trailing '<eos>' is dropped where the format "
                             "allows one)")
        if len(toks) > MAX_TOKENS:
            raise ValueError(f"{where}: the {side} has {len(toks):,} tokens; at most {MAX_TOKENS:,}")


def require_examples(examples: list, path: Path) -> list:
    """``examples``, or ValueError naming ``path`` when it holds none."""
    if not examples:
        raise ValueError(f"{path}: no examples (the file is empty or blank)")
    return examples


def check_example(ex: Example, where: str) -> None:
    """Raise ValueError (naming ``where``) if the gold attention does not fit the example."""
    if ex.attn is None:
        return
    if len(ex.attn) not in (len(ex.tgt), len(ex.tgt) + 1):
        raise ValueError(
            f"{where}: gold attention has {len(ex.attn)} entries, expected {len(ex.tgt)} "
            f"(one per target token) or {len(ex.tgt) + 1} (plus the <eos> step)"
        )
    for a in ex.attn:
        if not (a == NO_ATTN or 0 <= a < len(ex.src)):
            raise ValueError(
                f"{where}: gold attention index {a} is outside the source (length {len(ex.src)})"
            )


@dataclass
class TaskData:
    """A loaded task.

    Seq2seq tasks: ``splits`` maps "train", "dev", then the test splits to lists of
    :class:`Example`. Regression tasks (Raffel & Ellis) use :class:`RegressionTaskData`.
    """

    name: str
    """Task key."""
    kind: Literal["seq2seq", "regression"]
    """Which trainer path applies."""
    vocab: Vocab
    """Shared source/target vocabulary."""
    splits: dict[str, Any]
    """"train", "dev", then the test splits (paper order)."""
    test_splits: list[str]
    """Test split names in paper order."""
    decode_cap_fn: Callable[[int], int] = field(repr=False, default=lambda n: n + 1)
    """Greedy-decoding cap per source length (see :meth:`decode_cap`)."""
    has_attention: bool = False
    """Whether the examples carry gold attention."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Documented choices for this task (dev split, lengths, gold attention)."""

    def decode_cap(self, src_len: int) -> int:
        """Maximum number of greedy decoding steps, ``<eos>`` included, for a source of
        ``src_len`` tokens. Depends only on the task's rule and the source length, never on
        the gold target: the largest target the task can produce, + 1 for ``<eos>``, + 5."""
        return int(self.decode_cap_fn(int(src_len)))

    def __repr__(self) -> str:
        sizes = {k: len(v) for k, v in self.splits.items()}
        return f"TaskData({self.name!r}, kind={self.kind!r}, vocab={len(self.vocab)}, splits={sizes})"


DECODE_SLACK = 5
"""Extra greedy steps beyond the longest target a task can produce (lets over-generation show
in edit distance)."""
