"""Long Lookup Tables (Liska et al. 2018; Dubois et al. 2020, sec. 6.1) and their variants.

Eight random bijections t1..t8 on 3-bit strings. A source ``000 t1 t2 .`` asks for the
target ``000 t1(000) t2(t1(000))``; the gold attention is the source index of the table
applied at each step (step 0 attends the input) and the ``<eos>`` step attends the ``.``,
so ``len(attn) == len(tgt) + 1``.

Generation follows the published construction (facts from the Long Lookup Tables
generator, re-implemented here):

- t7 and t8 are held out: in training they appear only alone (unary rows).
- train pool: every composition of 2-3 tables from t1..t6 with every input, plus the
  4-table compositions of t1..t6 except 50 held-out compositions (``heldout_compositions``)
  and, per remaining 4-composition, 2 random inputs (``heldout_inputs``).
- ``validation`` = 5 % (rounded up) of the pool; train = the rest + the 64 unary rows
  (9,081 rows).
- ``heldout_tables``: 4-compositions mixing t1..t6 with t7/t8; ``new_compositions``: 4-
  compositions of t7/t8 only.
- ``longer_{seen,incremental,new}_i`` (i = 1..5): 4+i tables, built by appending one more
  table to the previous level's (sampled) compositions; a level keeps at most 625
  compositions (5,000 rows) per kind.
- every test file holds at most 5,000 rows, shuffled.

Differences from the original script: the validation split is a plain seeded random 5 %
(not stratified by table), and the random draws differ (numpy Generator with the data
seed). Counts match the canonical files.

Variants (separate task keys):
- ``reverse_lookup``: tables listed right to left before the input (``t2 t1 000 .``), target
  unchanged, gold attention ``k .. 0`` then the ``.``.
- ``noisy_lookup``: m ~ U{0..9} random tables (any of t1..t8), then ``!``, between the input
  and the real tables (``000 t5 t3 ! t1 t2 .``). Gold attention: 0 for the input, then the
  positions of the real tables, then ``.``. (Dubois et al.'s Table 2 also lists the ``!``
  position in some rows; we do not: one gold index per target step.)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from pathlib import Path

import numpy as np

from locattn.tasks.base import (
    DECODE_SLACK,
    Example,
    TaskData,
    Vocab,
    check_example,
    check_tokens,
    numbered_lines,
    require_examples,
)
from locattn.tasks.config import TaskConfig

GENERATOR_VERSION = 1
N_TABLES = 8
N_HELDOUT_TABLES = 2
N_HELDOUT_COMPOSITIONS = 50
N_HELDOUT_INPUTS = 2
MAX_TRAIN_COMPOSITION = 4
N_LONGER = 5
BOUND_TEST = 5000
VALIDATION_FRACTION = 0.05
MAX_NOISE = 9

BITS = tuple(format(v, "03b") for v in range(8))
TABLE_NAMES = tuple(f"t{i + 1}" for i in range(N_TABLES))

TEST_SPLITS: list[str] = (
    ["heldout_inputs", "heldout_compositions", "heldout_tables", "new_compositions"]
    + [f"longer_seen_{i}" for i in range(1, N_LONGER + 1)]
    + [f"longer_incremental_{i}" for i in range(1, N_LONGER + 1)]
    + [f"longer_new_{i}" for i in range(1, N_LONGER + 1)]
)

Composition = tuple[int, ...]
Row = tuple[Composition, int]  # (tables applied left to right, input value)


def tokens(name: str) -> tuple[str, ...]:
    """Vocabulary tokens of a lookup task."""
    extra = ("!",) if name == "noisy_lookup" else ()
    return BITS + TABLE_NAMES + (".",) + extra


def _make_tables(rng: np.random.Generator) -> list[list[int]]:
    tables: list[list[int]] = []
    while len(tables) < N_TABLES:
        perm = rng.permutation(8).tolist()
        if perm not in tables:
            tables.append(perm)
    return tables


def _kind(comp: Composition) -> str:
    """seen (only t1..t6), new (only t7/t8) or incremental (both)."""
    held = [t >= N_TABLES - N_HELDOUT_TABLES for t in comp]
    return "new" if all(held) else ("seen" if not any(held) else "incremental")


def _rows(comps: list[Composition]) -> list[Row]:
    return [(c, x) for c in comps for x in range(8)]


def _shuffled(rows: list[Row], rng: np.random.Generator, bound: int | None = None) -> list[Row]:
    order = rng.permutation(len(rows))
    out = [rows[i] for i in order]
    return out if bound is None else out[:bound]


def _example(row: Row, tables: list[list[int]], name: str, rng: np.random.Generator | None) -> Example:
    comp, x = row
    values = [x]
    for t in comp:
        values.append(tables[t][values[-1]])
    tgt = tuple(BITS[v] for v in values)
    names = [TABLE_NAMES[t] for t in comp]
    k = len(comp)
    if name == "lookup":
        src = (BITS[x], *names, ".")
        attn = tuple(range(k + 1)) + (k + 1,)
    elif name == "reverse_lookup":
        src = (*names[::-1], BITS[x], ".")
        attn = tuple(range(k, -1, -1)) + (k + 1,)
    else:  # noisy_lookup
        assert rng is not None
        m = int(rng.integers(0, MAX_NOISE + 1))
        noise = [TABLE_NAMES[int(t)] for t in rng.integers(0, N_TABLES, size=m)]
        src = (BITS[x], *noise, "!", *names, ".")
        attn = (0,) + tuple(m + 2 + j for j in range(k)) + (m + 2 + k,)
    return Example(src, tgt, attn)


def generate_rows(seed: int) -> tuple[list[list[int]], dict[str, list[Row]]]:
    """The tables and the (composition, input) rows of every split."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, GENERATOR_VERSION, 77]))
    tables = _make_tables(rng)
    train_tables = range(N_TABLES - N_HELDOUT_TABLES)

    unary = _rows([(t,) for t in range(N_TABLES)])
    short = [c for k in range(2, MAX_TRAIN_COMPOSITION)
             for c in itertools.product(train_tables, repeat=k)]
    longest = list(itertools.product(range(N_TABLES), repeat=MAX_TRAIN_COMPOSITION))
    seen4 = [c for c in longest if _kind(c) == "seen"]
    seen4 = [seen4[i] for i in rng.permutation(len(seen4))]
    heldout_comps = seen4[-N_HELDOUT_COMPOSITIONS:]
    kept = seen4[:-N_HELDOUT_COMPOSITIONS]
    heldout_inputs: list[Row] = []
    pool: list[Row] = _rows(short)
    for c in kept:
        drop = set(rng.choice(8, size=N_HELDOUT_INPUTS, replace=False).tolist())
        for x in range(8):
            (heldout_inputs if x in drop else pool).append((c, x))

    pool = _shuffled(pool, rng)
    n_val = math.ceil(VALIDATION_FRACTION * len(pool))
    splits: dict[str, list[Row]] = {
        "train": _shuffled(unary + pool[n_val:], rng),
        "dev": pool[:n_val],
        "heldout_inputs": _shuffled(heldout_inputs, rng, BOUND_TEST),
        "heldout_compositions": _shuffled(_rows(heldout_comps), rng, BOUND_TEST),
        "heldout_tables": _shuffled(_rows([c for c in longest if _kind(c) == "incremental"]),
                                    rng, BOUND_TEST),
        "new_compositions": _shuffled(_rows([c for c in longest if _kind(c) == "new"]),
                                      rng, BOUND_TEST),
    }
    prev: list[Composition] = longest
    max_comps = round(BOUND_TEST / 8)
    for i in range(1, N_LONGER + 1):
        candidates = [c + (u,) for c in prev for u in range(N_TABLES)]
        level: list[Composition] = []
        for kind in ("seen", "incremental", "new"):
            comps = [c for c in candidates if _kind(c) == kind]
            if len(comps) * 8 > BOUND_TEST:
                comps = [comps[j] for j in rng.choice(len(comps), size=max_comps, replace=False)]
            splits[f"longer_{kind}_{i}"] = _shuffled(_rows(comps), rng, BOUND_TEST)
            level += comps
        prev = level
    return tables, splits


def generate(cfg: TaskConfig) -> dict[str, list[Example]]:
    """All splits ("train", "dev", then TEST_SPLITS) of ``cfg.name``; deterministic in the seed."""
    tables, rows = generate_rows(cfg.data_seed)
    noise_rng = np.random.default_rng(np.random.SeedSequence([cfg.data_seed, GENERATOR_VERSION, 99]))
    rng = noise_rng if cfg.name == "noisy_lookup" else None
    order = ["train", "dev"] + TEST_SPLITS
    return {s: [_example(r, tables, cfg.name, rng) for r in rows[s]] for s in order}


def _decode_cap(src_len: int) -> int:
    # the target has one token per source token except the final "." (and noise, "!")
    return src_len - 1 + 1 + DECODE_SLACK


NOTES = {
    "dev": "the generator's 5% validation split",
    "eos_attention": "<eos> attends the final '.': len(attn) == len(tgt) + 1",
    "sizes": "fixed by the construction; TaskConfig sizes/lengths are not used",
}


def task_data(name: str, splits: dict[str, list[Example]], vocab_tokens: list[str]) -> TaskData:
    """Wrap generated or loaded splits."""
    tests = [s for s in splits if s not in ("train", "dev")]
    return TaskData(
        name=name, kind="seq2seq", vocab=Vocab(vocab_tokens), splits=splits, test_splits=tests,
        decode_cap_fn=_decode_cap, has_attention=all(
            e.attn is not None for e in splits["train"][:100]), notes=dict(NOTES),
    )


def move_long1_to_dev(data: TaskData, n: int, *, seed: int) -> TaskData:
    """``data`` with ``n`` seeded-random rows of ``longer_seen_1`` appended to the dev split and
    removed from that test split (the reference code's Lookup protocol: its ``process_llt.py``)."""
    long1 = data.splits.get("longer_seen_1")
    if not long1:
        raise ValueError(
            f"{data.name}: task.dev_from_long1={n} needs the test split longer_seen_1, which is "
            f"missing; add longer_seen_1.tsv to task.data_dir or set task.dev_from_long1=0")
    if n >= len(long1):
        raise ValueError(
            f"{data.name}: task.dev_from_long1={n} would take all {len(long1)} rows of "
            f"longer_seen_1; it must be smaller than that split")
    order = list(range(len(long1)))
    random.Random(f"{seed}:dev_from_long1").shuffle(order)
    moved = set(order[:n])
    splits = dict(data.splits)
    splits["dev"] = list(data.splits["dev"]) + [long1[i] for i in order[:n]]
    splits["longer_seen_1"] = [ex for i, ex in enumerate(long1) if i not in moved]
    notes = dict(data.notes)
    notes["dev"] = f"{notes.get('dev', 'validation')} + {n} seeded-random rows of longer_seen_1"
    return dataclasses.replace(data, splits=splits, notes=notes)


# ----------------------------------------------------------------------------- loading files


def _find(data_dir: Path, stem: str) -> Path | None:
    for candidate in (data_dir / f"{stem}.tsv", data_dir / stem):
        if candidate.is_file():
            return candidate
    return None


def parse_tsv(path: Path) -> list[Example]:
    """Read a ``src \\t tgt [\\t attention]`` file (no header). A trailing ``<eos>`` in the target
    is dropped. Malformed lines raise ValueError naming the file and line."""
    out: list[Example] = []
    for where, line in numbered_lines(path):
        cols = line.split("\t")
        if len(cols) not in (2, 3):
            raise ValueError(
                f"{where}: expected 'src<TAB>tgt[<TAB>attention]', got {len(cols)} "
                f"tab-separated columns: {line[:80]!r}"
            )
        src = tuple(cols[0].split())
        tgt = tuple(cols[1].split())
        if tgt and tgt[-1] == "<eos>":
            tgt = tgt[:-1]
        if not src or not tgt:
            raise ValueError(f"{where}: empty source or target: {line[:80]!r}")
        attn = None
        if len(cols) == 3:
            try:
                attn = tuple(int(a) for a in cols[2].split())
            except ValueError:
                raise ValueError(f"{where}: attention column must be integers: {cols[2]!r}") from None
            if len(attn) == len(tgt) + 2 and "!" in src:
                # some noisy-start files also list the "!" position: drop that entry
                bang = src.index("!")
                if bang in attn:
                    attn = tuple(a for i, a in enumerate(attn) if i != attn.index(bang))
        ex = Example(src, tgt, attn)
        check_example(ex, where)
        check_tokens(ex, where)
        out.append(ex)
    return require_examples(out, path)


_LAYOUT = {
    "lookup": "'<input> <tables...> .' (e.g. '000 t1 t2 .')",
    "noisy_lookup": "'<input> <noise tables...> ! <tables...> .' (e.g. '000 t5 ! t1 t2 .')",
    "reverse_lookup": "'<tables right to left...> <input> .' (e.g. 't2 t1 000 .')",
}


def check_layout(name: str, path: Path, examples: list[Example]) -> None:
    """Refuse a file whose sources are laid out for another lookup variant (forward files for
    ``reverse_lookup`` or the reverse), naming the file, the first offending row and the layout
    the task expects."""
    bits = set(BITS)
    for row, ex in enumerate(examples, start=1):
        src = ex.src
        forward = src[0] in bits
        reverse = len(src) >= 3 and src[-2] in bits and src[0] not in bits
        if name == "reverse_lookup" and forward and len(src) > 2:
            seen = "forward Lookup"
        elif name != "reverse_lookup" and reverse:
            seen = "Reverse Lookup"
        else:
            continue
        raise ValueError(
            f"{path}: row {row} source {' '.join(src)!r} looks like {seen} data, but task "
            f"{name!r} expects sources laid out as {_LAYOUT[name]}; point task.data_dir at the "
            f"{name} files (the reference ships each variant as its own set of files)"
        )


def load_dir(cfg: TaskConfig) -> TaskData:
    """Load the standard Long Lookup Tables files from ``cfg.data_dir`` as they are.

    Expected: ``train.tsv`` and ``validation.tsv`` (required), plus any of the test files
    ``heldout_inputs.tsv``, ..., ``longer_new_5.tsv``. The files are used as given, so put the
    variant's files (reverse / noisy) in the directory for those task keys.
    """
    data_dir = Path(cfg.data_dir or "")
    if not data_dir.is_dir():
        raise FileNotFoundError(f"TaskConfig.data_dir={str(data_dir)!r} is not a directory")
    splits: dict[str, list[Example]] = {}
    for stem, split in [("train", "train"), ("validation", "dev")]:
        path = _find(data_dir, stem)
        if path is None:
            raise FileNotFoundError(
                f"{cfg.name}: missing {data_dir / (stem + '.tsv')}; expected the Long Lookup Tables "
                f"files train.tsv, validation.tsv and test files {TEST_SPLITS}"
            )
        splits[split] = parse_tsv(path)
        check_layout(cfg.name, path, splits[split])
    for stem in TEST_SPLITS:
        path = _find(data_dir, stem)
        if path is not None:
            splits[stem] = parse_tsv(path)
            check_layout(cfg.name, path, splits[stem])
    if len(splits) == 2:
        raise FileNotFoundError(f"{cfg.name}: no test files in {data_dir}; expected some of {TEST_SPLITS}")
    known = tokens(cfg.name)
    extra = sorted({t for e in splits["train"] for t in e.src + e.tgt} - set(known))
    return task_data(cfg.name, splits, list(known) + extra)
