"""SCAN (Lake & Baroni 2018), length split, generated from its published grammar.

Grammar (all 20,910 commands):

    C -> S | S and S | S after S
    S -> V | V twice | V thrice
    V -> U | X D | X opposite D | X around D      X in {walk, look, run, jump, turn}
    D -> left | right                             U in {walk, look, run, jump}

Interpretation: ``u`` -> I_U; ``turn D`` -> I_TURN_D; ``x D`` -> I_TURN_D [[x]];
``x opposite D`` -> I_TURN_D I_TURN_D [[x]]; ``x around D`` -> (I_TURN_D [[x]]) x 4
(with [[turn]] empty); ``twice``/``thrice`` repeat; ``a and b`` -> [[a]] [[b]];
``a after b`` -> [[b]] [[a]].

Length split: train = the 16,990 commands with at most 22 actions, test = the 3,920 with
24-48 actions. Dev: ``TaskConfig.dev_size`` commands drawn (with the data seed) from the
training commands and removed from train; SCAN has no official dev set.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from locattn.tasks.base import (DECODE_SLACK, Example, TaskData, Vocab, check_tokens, numbered_lines,
                                require_examples)
from locattn.tasks.config import TaskConfig

GENERATOR_VERSION = 1
PRIMITIVES = ("walk", "look", "run", "jump")
DIRECTIONS = ("left", "right")
MAX_TRAIN_ACTIONS = 22
WORDS = PRIMITIVES + ("turn",) + DIRECTIONS + ("opposite", "around", "twice", "thrice", "and", "after")
ACTIONS = ("I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT")
TOKENS = WORDS + ACTIONS


def _verb_phrases() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    out: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for u in PRIMITIVES:
        out.append(((u,), (f"I_{u.upper()}",)))
    for x in PRIMITIVES + ("turn",):
        act = () if x == "turn" else (f"I_{x.upper()}",)
        for d in DIRECTIONS:
            turn = (f"I_TURN_{d.upper()}",)
            out.append(((x, d), turn + act))
            out.append(((x, "opposite", d), turn + turn + act))
            out.append(((x, "around", d), (turn + act) * 4))
    return out


def all_commands() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Every (command, actions) pair of the grammar, in a fixed order (20,910 pairs)."""
    sentences: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for words, acts in _verb_phrases():
        sentences.append((words, acts))
        sentences.append((words + ("twice",), acts * 2))
        sentences.append((words + ("thrice",), acts * 3))
    commands = list(sentences)
    for (w1, a1), (w2, a2) in itertools.product(sentences, repeat=2):
        commands.append((w1 + ("and",) + w2, a1 + a2))
        commands.append((w1 + ("after",) + w2, a2 + a1))
    return commands


def generate(cfg: TaskConfig) -> dict[str, list[Example]]:
    """train / dev / test of the length split."""
    pairs = all_commands()
    train = [Example(c, a) for c, a in pairs if len(a) <= MAX_TRAIN_ACTIONS]
    test = [Example(c, a) for c, a in pairs if len(a) > MAX_TRAIN_ACTIONS]
    if cfg.dev_size >= len(train):
        raise ValueError(
            f"TaskConfig.dev_size={cfg.dev_size}: SCAN carves dev out of {len(train)} training "
            f"commands; use fewer"
        )
    rng = np.random.default_rng(np.random.SeedSequence([cfg.data_seed, GENERATOR_VERSION, 5]))
    train = [train[i] for i in rng.permutation(len(train))]
    test = [test[i] for i in rng.permutation(len(test))]
    return {"train": train[cfg.dev_size:], "dev": train[: cfg.dev_size], "test": test}


def tokens_of(examples: list[Example]) -> list[str]:
    """SCAN tokens in a fixed order, then any others found in ``examples`` (sorted)."""
    seen = {t for e in examples for t in e.src + e.tgt}
    return list(TOKENS) + sorted(seen - set(TOKENS))


def _decode_cap(src_len: int) -> int:
    # at most 6 actions per command word ("x around left thrice": 4 words, 24 actions)
    return 6 * src_len + 1 + DECODE_SLACK


NOTES = {
    "split": "length split: train <= 22 actions, test 24-48",
    "dev": "TaskConfig.dev_size commands carved from train with the data seed",
}


def task_data(splits: dict[str, list[Example]], vocab_tokens: list[str]) -> TaskData:
    return TaskData(name="scan", kind="seq2seq", vocab=Vocab(vocab_tokens), splits=splits,
                    test_splits=["test"], decode_cap_fn=_decode_cap, has_attention=False,
                    notes=dict(NOTES))


# ----------------------------------------------------------------------------- loading files


def parse_pairs(path: Path) -> list[Example]:
    """Read ``IN: <command> OUT: <actions>`` lines (original SCAN) or ``src<TAB>tgt`` lines.
    Malformed lines raise ValueError naming the file and line number."""
    out: list[Example] = []
    for where, line in numbered_lines(path):
        if line.startswith("IN:"):
            body, sep, tgt = line[3:].partition(" OUT:")
            if not sep:
                raise ValueError(f"{where}: 'IN:' line without ' OUT:': {line[:80]!r}")
            src = body
        else:
            cols = line.split("\t")
            if len(cols) != 2:
                raise ValueError(
                    f"{where}: expected 'IN: ... OUT: ...' or 'src<TAB>tgt', got {line[:80]!r}"
                )
            src, tgt = cols
        ex = Example(tuple(src.split()), tuple(tgt.split()))
        if not ex.src or not ex.tgt:
            raise ValueError(f"{where}: empty source or target: {line[:80]!r}")
        check_tokens(ex, where)
        out.append(ex)
    return require_examples(out, path)


TRAIN_FILES = ("tasks_train_length.txt", "train.txt", "train.tsv")
DEV_FILES = ("dev.txt", "dev.tsv", "validation.txt", "validation.tsv")
TEST_FILES = ("tasks_test_length.txt", "test.txt", "test.tsv")


def _first(data_dir: Path, names: tuple[str, ...]) -> Path | None:
    return next((data_dir / n for n in names if (data_dir / n).is_file()), None)


def load_dir(cfg: TaskConfig) -> TaskData:
    """SCAN length split from ``cfg.data_dir``: a train file (one of TRAIN_FILES), a test file
    (TEST_FILES) and optionally a dev file (DEV_FILES); without one, dev is carved from train
    as in :func:`generate`."""
    data_dir = Path(cfg.data_dir or "")
    train_path, test_path = _first(data_dir, TRAIN_FILES), _first(data_dir, TEST_FILES)
    if train_path is None or test_path is None:
        raise FileNotFoundError(
            f"scan: TaskConfig.data_dir={str(data_dir)!r} needs a train file (one of "
            f"{list(TRAIN_FILES)}) and a test file (one of {list(TEST_FILES)}), e.g. SCAN's "
            f"length_split/tasks_train_length.txt and tasks_test_length.txt"
        )
    train = parse_pairs(train_path)
    test = parse_pairs(test_path)
    dev_path = _first(data_dir, DEV_FILES)
    if dev_path is not None:
        dev = parse_pairs(dev_path)
    else:
        if cfg.dev_size >= len(train):
            raise ValueError(f"TaskConfig.dev_size={cfg.dev_size} >= {len(train)} rows in {train_path}")
        rng = np.random.default_rng(np.random.SeedSequence([cfg.data_seed, GENERATOR_VERSION, 5]))
        order = rng.permutation(len(train))
        dev = [train[i] for i in order[: cfg.dev_size]]
        train = [train[i] for i in order[cfg.dev_size:]]
    return task_data({"train": train, "dev": dev, "test": test}, tokens_of(train))
