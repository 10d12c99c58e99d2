"""DeDupe follows the reference generator (REFERENCE §4; JRC1995/MonotonicLocationAttention,
preprocess/process_dedupe.py): n independent draws, each a digit repeated 1, 3 or 5 times; equal
neighbouring draws merge into longer runs; the target collapses consecutive duplicates; the
source ends with ``<eos>`` (the reference appends it to DeDupe sources only).

The hand-computed facts used below:
- every repeat count is odd, so m draws of one digit make a run of length r iff m <= r <= 5m and
  r = m (mod 2); a source with runs r_1..r_k is n draws iff n = len(source) (mod 2) and
  sum_i m_min(r_i) <= n <= len(source), with m_min(r) the smallest such m;
- with n = 2 there are 90 * 9 = 810 sources of two different digits and 10 * 5 = 50 of one digit
  (run lengths 2, 4, 6, 8, 10), so 860 distinct sources from 900 draw vectors;
- a neighbouring pair of draws is equal with probability 1/10, so n draws collapse to a target of
  mean length 1 + 0.9 (n - 1) (90.1 for n = 100), and a source has mean length 3n.
"""

from __future__ import annotations

import itertools

import pytest

from locattn.tasks import TaskConfig, load_task
from locattn.tasks import algorithmic as alg

SMALL = dict(train_size=300, dev_size=60, test_size=40, test_lengths=(15, 30, 100))


def runs(xs) -> list[int]:
    """Lengths of the runs of equal consecutive items."""
    return [len(list(g)) for _, g in itertools.groupby(xs)]


def m_min(r: int) -> int:
    """Fewest draws of 1/3/5 repeats that make a run of length r."""
    m = -(-r // 5)
    return m if (r - m) % 2 == 0 else m + 1


def can_be_n_draws(src, n: int) -> bool:
    return n % 2 == len(src) % 2 and sum(m_min(r) for r in runs(src)) <= n <= len(src)


def test_the_papers_table5_example() -> None:
    # 4x3, 7x3, 7x1, 9x5, 8x5: five draws, two equal neighbours make a run of four 7s.
    ex = alg.RULES["dedupe"].build([4, 7, 7, 9, 8, 1, 1, 0, 2, 2])
    assert ex.src == tuple("44477779999988888") + ("<eos>",)
    assert ex.tgt == tuple("4798") and ex.attn is None
    assert runs(ex.src[:-1]) == [3, 4, 5, 5]


@pytest.mark.parametrize("choices, src, tgt", [
    ([4, 4, 7, 1, 0, 2], "444477777", "47"),           # 3 draws, run of 4, target of 2
    ([3, 3, 3, 0, 0, 0], "333", "3"),                   # 3 draws of 1: target of 1
    ([3, 3, 3, 2, 2, 2], "333333333333333", "3"),       # 5 + 5 + 5 = a run of 15
    ([5, 5, 1, 1], "555555", "5"),                      # run of 6
    ([1, 2, 1, 0, 1, 2], "122211111", "121"),         # no merge across a different digit
])
def test_hand_computed_draws(choices, src, tgt) -> None:
    ex = alg.RULES["dedupe"].build(choices)
    assert ex.src[-1] == "<eos>" and "".join(ex.src[:-1]) == src and "".join(ex.tgt) == tgt
    assert alg.collapse(ex.src[:-1]) == list(ex.tgt)


def test_collapse() -> None:
    assert alg.collapse([]) == []
    assert alg.collapse("aabbba") == ["a", "b", "a"]
    assert alg.collapse([7]) == [7]


def test_draws_are_uniform_digits_and_uniform_repeats() -> None:
    # The choice vector is n digits (10 options) then n repeat indices (3 options), each drawn
    # uniformly, as the reference's random.choice(vocab) and random.choice([3, 5, 1]).
    assert alg.RULES["dedupe"].radices(4) == [10] * 4 + [3] * 4
    assert sorted(alg.REPEATS) == [1, 3, 5]


def test_generated_data_has_merged_runs_and_short_targets(tmp_path) -> None:
    task = load_task(TaskConfig(name="dedupe", **SMALL), cache_dir=tmp_path)
    every = [e for v in task.splits.values() for e in v]
    for e in every:
        assert e.src[-1] == "<eos>" and "<eos>" not in e.src[:-1]
        assert list(e.tgt) == alg.collapse(e.src[:-1]) and e.attn is None
    assert all(t in task.vocab.stoi for e in every for t in e.src)
    train_runs = {r for e in task.splits["train"] for r in runs(e.src[:-1])}
    assert train_runs - {1, 3, 5}, "no run other than 1, 3 or 5 long: equal draws never merged"
    assert {2, 4, 6} & train_runs
    # fixed-length splits: the source is exactly n draws, and some targets are shorter than n
    for split, n in (("len15", 15), ("len30", 30), ("len100", 100)):
        exs = task.splits[split]
        assert all(can_be_n_draws(e.src[:-1], n) for e in exs), split
        assert any(len(e.tgt) < n for e in exs), split
        assert all(len(e.tgt) <= n for e in exs)
    # ranged splits: some n in the range fits every source
    for split, (lo, hi) in (("train", (5, 10)), ("dev", (10, 15)), ("iid", (5, 10))):
        for e in task.splits[split]:
            assert any(can_be_n_draws(e.src[:-1], n) for n in range(lo, hi + 1)), (split, e)
    # 40 sources of 100 draws: mean target 90.1 (std of the mean ~0.5), mean source 300 (~2.6)
    len100 = task.splits["len100"]
    mean_tgt = sum(len(e.tgt) for e in len100) / len(len100)
    mean_src = sum(len(e.src) - 1 for e in len100) / len(len100)
    assert 88.0 <= mean_tgt <= 92.2, mean_tgt
    assert 288.0 <= mean_src <= 312.0, mean_src
    sources = [e.src for e in every]
    assert len(set(sources)) == len(sources)


def test_sources_are_unique_not_draws_and_running_out_is_a_clear_error() -> None:
    # Two draws: 900 draw vectors but 860 distinct sources (module docstring).
    sources = {alg.dedupe_source(list(c)) for c in itertools.product(range(10), range(10),
                                                                       range(3), range(3))}
    assert len(sources) == 860
    kw = dict(train_lengths=(2, 2), dev_lengths=(3, 3), test_lengths=(5,), dev_size=10,
              test_size=10)
    # train and the IID test both have length 2: together they can take all 860, not 861
    ok = alg.generate(TaskConfig(name="dedupe", train_size=850, **kw))
    assert {e.src for e in ok["train"] + ok["iid"]} == {tuple(alg.DIGITS[d] for d in s) + ("<eos>",)
                                                        for s in sources}
    with pytest.raises(ValueError, match=r"test_size/train_lengths \(task 'dedupe', split 'iid'\)"
                                         r": only 9 more distinct sources of task length 2, 10 "
                                         r"were asked for"):
        alg.generate(TaskConfig(name="dedupe", train_size=851, **kw))


def test_other_tasks_keep_their_bytes() -> None:
    # The DeDupe changes bumped GENERATOR_VERSION (cache key) but not the seed: every other task
    # gives the bytes it gave under version 1 (digests taken before the change), including the
    # tight path that enumerates the space.
    import hashlib
    import json

    def digest(splits) -> str:
        blob = json.dumps({k: [[list(e.src), list(e.tgt), e.attn] for e in v]
                           for k, v in splits.items()}, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    small = dict(train_size=300, dev_size=60, test_size=40, test_lengths=(15, 30))
    want = {"copy": "db923770ce70186f", "reverse_copy": "036861c397e2b265",
            "recopy": "b1a80bd68f011e1c", "reverse_recopy": "1767addecd79f9b8",
            "inv_recopy": "eac9be0c0827cb91", "inv_reverse_recopy": "aaca593274085666",
            "posretrieve": "7f40afb92af076c7"}
    assert alg.GENERATOR_VERSION == 3 and alg.SEED_VERSION == 1
    for name, d in want.items():
        assert digest(alg.generate(TaskConfig(name=name, **small))) == d, name
    tight = dict(train_size=500, dev_size=300, test_size=50, train_lengths=(2, 3),
                 dev_lengths=(3, 4), test_lengths=(4,))
    assert digest(alg.generate(TaskConfig(name="copy", **tight))) == "ad50aacd1034acaa"
    assert digest(alg.generate(TaskConfig(name="posretrieve", **tight))) == "5ab8b13af168a5d8"
