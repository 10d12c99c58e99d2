"""Generated probing tasks: the copy family, DeDupe and PosRetrieve
(Ray Chowdhury & Caragea 2023).

Every task draws a digit sequence X (tokens "0".."9") whose length n is the *task length*
(TaskConfig.train_lengths etc.), then maps it to (source, target, gold attention):

| key                 | source              | target                      | gold attention          |
|---------------------|---------------------|-----------------------------|-------------------------|
| copy                | X                   | X                           | i                       |
| reverse_copy        | X                   | reversed X                  | n-1-i                   |
| recopy              | X                   | each x repeated r(x) times  | index of the repeated x |
| reverse_recopy      | X                   | reversed ReCopy target      | same, reversed          |
| inv_recopy          | ReCopy expansion    | X                           | None                    |
| inv_reverse_recopy  | reversed expansion  | X                           | None                    |
| dedupe              | n draws (1/3/5) eos | the draws, runs collapsed   | None                    |
| posretrieve         | X                   | ``x : X[x] ;`` per x        | i, -1, x (or -1), -1    |

r(x) = num2repeat(x): 1 for x <= 3, 3 for 4 <= x <= 6, 5 for x >= 7.

Tokens are the ten digits: the HTML text of Ray Chowdhury & Caragea repeats each maths
glyph ("444 777" is "4 7"; "0-9" renders as "00-999"), and their Table 10 shows single
digits.

Choices that the papers leave open, fixed here:
- For the inverse tasks the task length is the length of X, i.e. of the *target*
  (Ray Chowdhury & Caragea's Table 10 shows Inv ReCopy outputs of the test length with
  much longer inputs). The source is 1-5 times longer.
- DeDupe follows the reference generator (``preprocess/process_dedupe.py`` of
  JRC1995/MonotonicLocationAttention): n independent draws, each a uniform digit repeated a
  uniform choice of 1, 3 or 5 times (independent of the digit, unlike ReCopy). Equal
  neighbouring draws are allowed and merge into one longer run (2, 4, 6 ...; the paper's
  Table 5 example has a run of 4). The target is the source with consecutive duplicates
  collapsed, so it can be shorter than n. The task length is n, the number of draws, as in the
  reference's length splits; since every repeat count is odd, n has the parity of the source
  length. Different draws can give the same source, so DeDupe sources are made unique by the
  source itself, not by the draws. As in the reference (and for DeDupe only), the source ends
  with the token ``<eos>``; the task length, runs and target concern the digits before it.
- Inverse tasks and DeDupe have no gold attention: any token of a run is a valid position.
- PosRetrieve: the target has 4 tokens per source item: ``x``, ``:``, ``X[x]`` or ``n/a``,
  ``;``. Separators have no gold position (-1).
- No task defines gold attention for the ``<eos>`` step (the model's END vector is not a
  source token), so ``len(attn) == len(tgt)``.
- Task lengths are drawn uniformly from the split's range; sources are unique within a split
  *and across all splits* (the IID test never repeats a training source).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from locattn.tasks.base import DECODE_SLACK, EOS, NO_ATTN, Example
from locattn.tasks.config import TaskConfig

GENERATOR_VERSION = 3
"""Part of every cached dataset's key. 2: DeDupe follows the reference (equal neighbouring draws
merge); 3: DeDupe sources end with ``<eos>``, as the reference's. The other tasks give the same
bytes as under version 1 (see :data:`SEED_VERSION`)."""
SEED_VERSION = 1
"""Mixed into the generator's seed. Kept at 1 so that a version bump that changes one task
leaves every other task's data as it was."""
DIGITS: tuple[str, ...] = tuple(str(d) for d in range(10))
REPEATS: tuple[int, ...] = (1, 3, 5)
"""DeDupe: how many times a draw is repeated, chosen uniformly (reference: ``random.choice``)."""


def num2repeat(d: int) -> int:
    """ReCopy repetition count of digit ``d`` (Ray Chowdhury & Caragea's num2repeat)."""
    return 1 if d <= 3 else (3 if d <= 6 else 5)


def _expand(x: list[int]) -> tuple[list[int], list[int]]:
    """ReCopy expansion of ``x`` and, per expanded token, the index of its source digit."""
    out: list[int] = []
    idx: list[int] = []
    for i, d in enumerate(x):
        r = num2repeat(d)
        out.extend([d] * r)
        idx.extend([i] * r)
    return out, idx


def _s(xs: list[int]) -> tuple[str, ...]:
    return tuple(DIGITS[d] for d in xs)


@dataclass(frozen=True)
class Rule:
    """How one task turns a choice vector into an example."""

    radices: Callable[[int], list[int]]
    """Per task length n, the number of options of each choice (mixed-radix digits)."""
    build: Callable[[list[int]], Example]
    """Choice vector -> example. Injective in the source unless ``key`` is given."""
    max_tgt: Callable[[int], int]
    """Longest target the task can produce for a source of the given length."""
    tokens: tuple[str, ...]
    """Task tokens (vocabulary order)."""
    has_attention: bool
    """Whether examples carry gold attention."""
    key: Callable[[list[int]], tuple] | None = None
    """What makes a source unique when ``build`` is not injective in the source (DeDupe: the
    source itself, since different draws can give the same source); None: the choice vector.
    With a key, :func:`capacity` is only an upper bound on the distinct sources."""


def _copy(c: list[int]) -> Example:
    return Example(_s(c), _s(c), tuple(range(len(c))))


def _reverse_copy(c: list[int]) -> Example:
    n = len(c)
    return Example(_s(c), _s(c[::-1]), tuple(range(n - 1, -1, -1)))


def _recopy(c: list[int]) -> Example:
    out, idx = _expand(c)
    return Example(_s(c), _s(out), tuple(idx))


def _reverse_recopy(c: list[int]) -> Example:
    out, idx = _expand(c)
    return Example(_s(c), _s(out[::-1]), tuple(idx[::-1]))


def _inv_recopy(c: list[int]) -> Example:
    out, _ = _expand(c)
    return Example(_s(out), _s(c), None)


def _inv_reverse_recopy(c: list[int]) -> Example:
    out, _ = _expand(c)
    return Example(_s(out[::-1]), _s(c), None)


def collapse(xs: Iterable) -> list:
    """``xs`` with every run of equal consecutive items replaced by one item (DeDupe's target)."""
    out: list = []
    for x in xs:
        if not out or out[-1] != x:
            out.append(x)
    return out


def dedupe_source(c: list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """DeDupe source of choice vector ``c`` = (d_1..d_n, r_1..r_n): d_i repeated REPEATS[r_i] times.

    >>> dedupe_source([4, 4, 7, 1, 0, 2])   # draws 4x3, 4x1, 7x5: one run of 4
    (4, 4, 4, 4, 7, 7, 7, 7, 7)
    """
    n = len(c) // 2
    src: list[int] = []
    for d, r in zip(c[:n], c[n:]):
        src.extend([d] * REPEATS[r])
    return tuple(src)


def _dedupe(c: list[int]) -> Example:
    src = dedupe_source(c)
    return Example(_s(list(src)) + (EOS,), _s(collapse(src)), None)


def _posretrieve(c: list[int]) -> Example:
    n = len(c)
    tgt: list[str] = []
    attn: list[int] = []
    for i, x in enumerate(c):
        inside = x < n
        tgt += [DIGITS[x], ":", DIGITS[c[x]] if inside else "n/a", ";"]
        attn += [i, NO_ATTN, x if inside else NO_ATTN, NO_ATTN]
    return Example(_s(c), tuple(tgt), tuple(attn))


def _digits(n: int) -> list[int]:
    return [10] * n


RULES: dict[str, Rule] = {
    "copy": Rule(_digits, _copy, lambda s: s, DIGITS, True),
    "reverse_copy": Rule(_digits, _reverse_copy, lambda s: s, DIGITS, True),
    "recopy": Rule(_digits, _recopy, lambda s: 5 * s, DIGITS, True),
    "reverse_recopy": Rule(_digits, _reverse_recopy, lambda s: 5 * s, DIGITS, True),
    "inv_recopy": Rule(_digits, _inv_recopy, lambda s: s, DIGITS, False),
    "inv_reverse_recopy": Rule(_digits, _inv_reverse_recopy, lambda s: s, DIGITS, False),
    "dedupe": Rule(lambda n: [10] * n + [len(REPEATS)] * n, _dedupe, lambda s: s, DIGITS, False,
                   key=dedupe_source),
    "posretrieve": Rule(_digits, _posretrieve, lambda s: 4 * s, DIGITS + (":", ";", "n/a"), True),
}


def capacity(rule: Rule, n: int) -> int:
    """Number of distinct choice vectors of task length ``n``: the number of distinct sources, or
    an upper bound on it for a rule with a ``key`` (DeDupe)."""
    return int(np.prod([int(r) for r in rule.radices(n)], dtype=object))


def split_plan(cfg: TaskConfig) -> list[tuple[str, str, tuple[int, int], int]]:
    """(split name, TaskConfig fields that set it, (min, max) length, size), in build order."""
    lo, hi = cfg.train_lengths
    plan = [
        ("train", "train_size/train_lengths", cfg.train_lengths, cfg.train_size),
        ("dev", "dev_size/dev_lengths", cfg.dev_lengths, cfg.dev_size),
        ("iid", "test_size/train_lengths", (lo, hi), cfg.test_size),
    ]
    for k in cfg.test_lengths:
        plan.append((f"len{k}", "test_size/test_lengths", (k, k), cfg.test_size))
    return plan


def check_feasible(cfg: TaskConfig) -> None:
    """Reject, before generating, sizes that exceed the number of distinct sources."""
    rule = RULES[cfg.name]
    plan = split_plan(cfg)
    for split, fields_, (lo, hi), size in plan:
        cap = sum(capacity(rule, n) for n in range(lo, hi + 1))
        if size > cap:
            raise ValueError(
                f"TaskConfig {fields_}: split {split!r} asks for {size} unique sources of "
                f"length {lo}-{hi}, but task {cfg.name!r} has only {cap} distinct sources there"
            )
    # Splits are disjoint by source. By Hall's theorem they fit iff every group of splits
    # asks for no more than the sources at the union of their lengths.
    caps = {n: capacity(rule, n) for _, _, (lo, hi), _ in plan for n in range(lo, hi + 1)}
    for mask in range(1, 1 << len(plan)):
        group = [p for j, p in enumerate(plan) if mask >> j & 1]
        if len(group) < 2:
            continue
        lengths = {n for _, _, (lo, hi), _ in group for n in range(lo, hi + 1)}
        need = sum(size for *_, size in group)
        cap = sum(caps[n] for n in lengths)
        if need > cap:
            names = ", ".join(f"{g[0]} ({g[1]})" for g in group)
            raise ValueError(
                f"TaskConfig sizes/lengths: splits {names} together need {need} unique sources "
                f"but task {cfg.name!r} has only {cap} at lengths {sorted(lengths)}; reduce the "
                f"sizes or widen the lengths"
            )


def _decode_index(index: int, radices: list[int]) -> list[int]:
    out = []
    for r in reversed(radices):
        index, rem = divmod(index, r)
        out.append(rem)
    return out[::-1]


_MAX_IDLE_ROUNDS = 200  # sampling rounds in a row that found no new source before giving up


def _draw(rule: Rule, n: int, need: int, used: set[tuple[int, ...]], taken: int,
          rng: np.random.Generator, where: str) -> list[tuple[int, ...]]:
    """``need`` new choice vectors of task length ``n`` whose keys are not in ``used``.

    ``taken``: choice vectors of length ``n`` drawn by earlier splits. ``where`` names the split
    and its TaskConfig fields for the error raised when the sources run out (only possible for a
    rule with a ``key``, whose :func:`capacity` is an upper bound).
    """
    radices = rule.radices(n)
    cap = capacity(rule, n)
    got: list[tuple[int, ...]] = []
    if cap <= 1_000_000 and 4 * (need + taken) > cap:
        # Tight: enumerate the space in random order (sampling without replacement).
        candidates = (tuple(_decode_index(int(i), radices)) for i in rng.permutation(cap))
        _take_unused(candidates, used, got, need, rule.key)
    else:
        high = np.asarray(radices, dtype=np.int64)
        idle = 0
        while len(got) < need and idle < _MAX_IDLE_ROUNDS:
            m = int((need - len(got)) * 1.1) + 8
            draws = rng.integers(0, high, size=(m, len(radices)))  # (m, len(radices))
            before = len(got)
            _take_unused((tuple(row) for row in draws.tolist()), used, got, need, rule.key)
            idle = idle + 1 if len(got) == before else 0
    if len(got) < need:
        raise ValueError(
            f"TaskConfig {where}: only {len(got)} more distinct "
            f"sources of task length {n}, {need} were asked for; reduce the sizes or widen the lengths"
        )
    return got


def _take_unused(candidates: Iterable[tuple[int, ...]], used: set, got: list, need: int,
                 key: Callable[[list[int]], tuple] | None) -> None:
    """Append candidates whose key is not in ``used`` to ``got`` (and the key to ``used``) until
    ``got`` has ``need``. ``key`` None: a candidate is its own key."""
    for c in candidates:
        if len(got) >= need:
            return
        k = c if key is None else key(c)
        if k not in used:
            used.add(k)
            got.append(c)


def generate(cfg: TaskConfig) -> dict[str, list[Example]]:
    """All splits of a generated probing task; deterministic in ``cfg``."""
    rule = RULES[cfg.name]
    check_feasible(cfg)
    rng = np.random.default_rng(np.random.SeedSequence([cfg.data_seed, SEED_VERSION]))
    # Keys of the sources drawn so far, over all splits and lengths (choice vectors of different
    # lengths never collide; DeDupe sources of different draw counts can), and per task length
    # how many choice vectors were drawn.
    used: set[tuple[int, ...]] = set()
    taken: dict[int, int] = {}
    splits: dict[str, list[Example]] = {}
    for split, fields_, (lo, hi), size in split_plan(cfg):
        lengths = np.arange(lo, hi + 1)
        counts = np.bincount(rng.integers(0, len(lengths), size=size), minlength=len(lengths))
        counts = counts.astype(object)
        room = [capacity(rule, int(n)) - taken.get(int(n), 0) for n in lengths]
        excess = 0
        for j in range(len(lengths)):
            if counts[j] > room[j]:
                excess += counts[j] - room[j]
                counts[j] = room[j]
        for j in range(len(lengths)):  # move any excess to lengths with room, shortest first
            take = min(excess, room[j] - counts[j])
            counts[j] += take
            excess -= take
        if excess:
            raise ValueError(
                f"TaskConfig {fields_}: not enough distinct sources left for split {split!r} "
                f"(length {lo}-{hi}) after the earlier splits; reduce the sizes or widen lengths"
            )
        choices: list[tuple[int, ...]] = []
        for j, n in enumerate(lengths):
            if counts[j]:
                choices += _draw(rule, int(n), int(counts[j]), used, taken.get(int(n), 0), rng,
                                 f"{fields_} (task {cfg.name!r}, split {split!r})")
                taken[int(n)] = taken.get(int(n), 0) + int(counts[j])
        order = rng.permutation(len(choices))
        splits[split] = [rule.build(list(choices[i])) for i in order]
    return splits


def decode_cap(name: str) -> Callable[[int], int]:
    """Greedy cap for task ``name``: longest possible target + <eos> + slack."""
    rule = RULES[name]
    return lambda src_len: rule.max_tgt(src_len) + 1 + DECODE_SLACK


def test_splits(cfg: TaskConfig) -> list[str]:
    """Test split names in paper order."""
    return ["iid"] + [f"len{k}" for k in cfg.test_lengths]


NOTES = {
    "length": "task length n = len(X); for inv_* that is the target length; for dedupe the "
              "number of draws (the target can be shorter)",
    "uniqueness": "sources unique within and across splits",
    "eos_attention": "no gold attention for the <eos> step (len(attn) == len(tgt))",
    "dedupe": "n uniform digit draws, each repeated 1/3/5 times uniformly; equal neighbouring "
              "draws merge; target = the draws with consecutive duplicates collapsed; the source "
              "ends with <eos> (reference)",
    "posretrieve": "tokens x : X[x]|n/a ; per item; separators have gold -1",
}
