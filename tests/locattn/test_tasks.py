"""Generated probing tasks: rules, uniqueness, determinism, caching, bad input."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json

import numpy as np
import pytest
import torch

from locattn.tasks import (
    TaskConfig,
    encode_examples,
    list_tasks,
    load_task,
)
from locattn.tasks import algorithmic as alg
from locattn.tasks import cache as task_cache
from locattn.tasks.base import Vocab, check_example

ALG = list(alg.RULES)
SMALL = dict(train_size=300, dev_size=60, test_size=40, test_lengths=(15, 30))


def small(name: str, **kw) -> TaskConfig:
    return TaskConfig(name=name, **{**SMALL, **kw})


def split_digest(task) -> str:
    blob = json.dumps(
        {k: [[list(e.src), list(e.tgt), e.attn] for e in v] for k, v in task.splits.items()},
        separators=(",", ":"),
    ).encode()
    return hashlib.sha256(blob).hexdigest()


def expand(xs):
    return [x for x in xs for _ in range(alg.num2repeat(int(x)))]


def test_list_tasks_has_every_family():
    keys = list_tasks()
    for k in ALG + ["lookup", "reverse_lookup", "noisy_lookup", "scan", "cfq",
                    "raffel_add", "raffel_mul"]:
        assert k in keys


def test_num2repeat_table():
    assert [alg.num2repeat(d) for d in range(10)] == [1, 1, 1, 1, 3, 3, 3, 5, 5, 5]


@pytest.mark.parametrize("name", ALG)
def test_splits_sizes_lengths_and_uniqueness(name, tmp_path):
    task = load_task(small(name), cache_dir=tmp_path)
    assert list(task.splits) == ["train", "dev", "iid", "len15", "len30"]
    assert task.test_splits == ["iid", "len15", "len30"]
    assert [len(v) for v in task.splits.values()] == [300, 60, 40, 40, 40]
    # task length = len(X): the source for copy-like tasks, the target for inv_*; DeDupe's is
    # its number of draws, which the example does not show (tests/locattn/test_dedupe.py checks it)
    measure = (lambda e: len(e.tgt)) if name.startswith("inv") else (lambda e: len(e.src))
    for split, (lo, hi) in [("train", (5, 10)), ("dev", (10, 15)), ("iid", (5, 10)),
                            ("len15", (15, 15)), ("len30", (30, 30))]:
        lengths = {measure(e) for e in task.splits[split]}
        if name != "dedupe":
            assert min(lengths) >= lo and max(lengths) <= hi, (split, lengths)
    if name != "dedupe":
        assert len({measure(e) for e in task.splits["train"]}) == 6  # all lengths 5..10 drawn
    all_sources = [e.src for v in task.splits.values() for e in v]
    assert len(set(all_sources)) == len(all_sources)  # unique within and across splits
    assert task.vocab.itos[:4] == ["<pad>", "<sos>", "<eos>", "<unk>"]
    assert task.vocab.itos[4:14] == [str(d) for d in range(10)]
    for split, exs in task.splits.items():
        for i, e in enumerate(exs):
            check_example(e, f"{name}/{split}/{i}")
            assert all(t in task.vocab.stoi for t in e.src + e.tgt)


@pytest.mark.parametrize("name", ALG)
def test_rules_on_every_example(name, tmp_path):
    task = load_task(small(name), cache_dir=tmp_path)
    for e in task.splits["train"] + task.splits["len15"]:
        s, t = list(e.src), list(e.tgt)
        if name == "copy":
            assert t == s and e.attn == tuple(range(len(s)))
        elif name == "reverse_copy":
            assert t == s[::-1] and [s[a] for a in e.attn] == t
        elif name == "recopy":
            assert t == expand(s) and [s[a] for a in e.attn] == t
            assert list(e.attn) == sorted(e.attn)
        elif name == "reverse_recopy":
            assert t == expand(s)[::-1] and [s[a] for a in e.attn] == t
        elif name == "inv_recopy":
            assert s == expand(t) and e.attn is None
        elif name == "inv_reverse_recopy":
            assert s == expand(t)[::-1] and e.attn is None
        elif name == "dedupe":
            assert s[-1] == "<eos>"  # the reference ends DeDupe sources with <eos>
            s = s[:-1]
            runs = [s[0]] + [b for a, b in zip(s, s[1:]) if a != b]
            assert t == runs  # runs may be any length: equal draws merge (tests/locattn/test_dedupe.py)
        elif name == "posretrieve":
            n = len(s)
            assert len(t) == 4 * n
            for i, x in enumerate(s):
                item = t[4 * i: 4 * i + 4]
                want = s[int(x)] if int(x) < n else "n/a"
                assert item == [x, ":", want, ";"]
                assert e.attn[4 * i] == i and e.attn[4 * i + 1] == -1
                assert e.attn[4 * i + 2] == (int(x) if int(x) < n else -1)


def test_paper_examples():
    # Ray Chowdhury & Caragea, Table 1 and Table 5 (4 7 9 8).
    ex = alg.RULES["recopy"].build([4, 7, 9, 8])
    assert ex.tgt == tuple("444777779999988888")
    assert alg.RULES["inv_reverse_recopy"].build([4, 7, 9, 8]).src == tuple("888889999977777444")
    assert alg.RULES["reverse_recopy"].build([4, 7, 9, 8]).tgt == tuple("888889999977777444")
    pr = alg.RULES["posretrieve"].build([5, 4, 2, 7, 9, 6, 9, 5, 7, 3])
    assert " ".join(pr.tgt[:8]) == "5 : 6 ; 4 : 9 ;"
    assert pr.attn[:4] == (0, -1, 5, -1)


@pytest.mark.parametrize("name", ["copy", "inv_recopy", "dedupe"])
def test_same_seed_same_bytes_other_seed_differs(name, tmp_path):
    a = load_task(small(name), cache_dir=tmp_path / "a")
    b = load_task(small(name), use_cache=False)
    c = load_task(small(name, data_seed=1), use_cache=False)
    cached = load_task(small(name), cache_dir=tmp_path / "a")  # read back from the cache
    assert split_digest(a) == split_digest(b) == split_digest(cached)
    assert list(cached.splits) == ["train", "dev", "iid", "len15", "len30"]
    assert split_digest(a) != split_digest(c)
    files = sorted((tmp_path / "a" / "tasks").glob("*.json.gz"))
    assert len(files) == 1


def test_cache_is_used_and_keyed(tmp_path):
    cfg = small("recopy")
    first = load_task(cfg, cache_dir=tmp_path)
    (path,) = (tmp_path / "tasks").glob("recopy-*.json.gz")
    # Rewrite the cache with a marked example (valid checksum): a second load must return it.
    params = json.loads(gzip.decompress(path.read_bytes()).partition(b"\n")[2])["params"]
    marked = {k: list(v) for k, v in first.splits.items()}
    marked["train"][0] = type(marked["train"][0])(("9",), ("9", "9", "9", "9", "9"), (0,) * 5)
    task_cache.save(path, params, marked, first.vocab.tokens)
    second = load_task(cfg, cache_dir=tmp_path)
    assert second.splits["train"][0].src == ("9",)
    # a different seed is a different cache file
    load_task(small("recopy", data_seed=3), cache_dir=tmp_path)
    assert len(list((tmp_path / "tasks").glob("recopy-*.json.gz"))) == 2


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupted_cache_is_detected_and_regenerated(tmp_path, damage):
    cfg = small("copy")
    good = split_digest(load_task(cfg, cache_dir=tmp_path))
    (path,) = (tmp_path / "tasks").glob("copy-*.json.gz")
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    else:  # valid gzip, payload altered -> checksum mismatch
        text = gzip.decompress(raw)
        path.write_bytes(gzip.compress(text.replace(b'"7"', b'"8"', 1).replace(b"7 ", b"8 ", 1)))
    with pytest.warns(UserWarning, match="unreadable"):
        again = load_task(cfg, cache_dir=tmp_path)
    assert split_digest(again) == good
    # and the file was rewritten correctly
    assert task_cache.load(path, json.loads(gzip.decompress(path.read_bytes()).partition(b"\n")[2])["params"]) is not None
    assert not list((tmp_path / "tasks").glob("*.tmp"))


def test_encode_examples_shapes_and_padding(tmp_path):
    task = load_task(small("reverse_recopy"), cache_dir=tmp_path)
    exs = task.splits["train"][:4]
    batch = encode_examples(exs, task.vocab)
    s = max(len(e.src) for e in exs)
    t = max(len(e.tgt) for e in exs) + 1
    assert batch.src.shape == (4, s) and batch.tgt.shape == (4, t) and batch.attn.shape == (4, t)
    assert batch.src.dtype == torch.long
    for i, e in enumerate(exs):
        assert batch.src_len[i] == len(e.src) and batch.tgt_len[i] == len(e.tgt) + 1
        assert batch.tgt[i, len(e.tgt)] == task.vocab.eos_id
        assert (batch.tgt[i, len(e.tgt) + 1:] == task.vocab.pad_id).all()
        assert (batch.src[i, len(e.src):] == task.vocab.pad_id).all()
        assert batch.attn[i, : len(e.tgt)].tolist() == list(e.attn)
        assert (batch.attn[i, len(e.tgt):] == -1).all()  # eos step and padding
        assert task.vocab.decode(batch.tgt[i]) == e.tgt
    assert batch.tgt_in[:, 0].eq(task.vocab.sos_id).all()
    assert torch.equal(batch.tgt_in[:, 1:], batch.tgt[:, :-1])
    inv = load_task(small("inv_recopy"), cache_dir=tmp_path)
    assert encode_examples(inv.splits["train"][:2], inv.vocab).attn is None


def test_vocab_encode_decode_unknown():
    v = Vocab(["a", "b"])
    assert v.encode(["a", "zz", "b"], add_eos=True) == [4, 3, 5, 2]
    assert v.decode([1, 4, 5, 2, 4]) == ("a", "b")
    assert v.decode([4, 2, 5], stop_at_eos=False) == ("a", "<eos>", "b")
    with pytest.raises(ValueError, match="duplicate"):
        Vocab(["a", "a"])


def test_decode_cap_depends_on_source_only(tmp_path):
    task = load_task(small("recopy"), cache_dir=tmp_path)
    for e in task.splits["len30"]:
        assert task.decode_cap(len(e.src)) >= len(e.tgt) + 1
    assert task.decode_cap(10) == 5 * 10 + 1 + 5


def test_unknown_task_lists_keys_and_suggests():
    with pytest.raises(ValueError) as err:
        TaskConfig(name="reverse_cpy")
    msg = str(err.value)
    assert "'reverse_copy'" in msg and "Did you mean" in msg and "posretrieve" in msg


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(train_lengths=(10, 5)), "train_lengths"),
        (dict(dev_lengths=(0, 3)), "dev_lengths"),
        (dict(test_lengths=(15, -1)), "test_lengths"),
        (dict(train_size=0), "train_size"),
        (dict(variant="noisy"), "variant"),
    ],
)
def test_invalid_config_names_field(kw, field):
    with pytest.raises(ValueError, match=field):
        TaskConfig(name="copy", **kw)


def test_too_few_distinct_sources_rejected_before_generating(tmp_path):
    # lengths 1-2 have only 10 + 100 distinct digit strings
    cfg = TaskConfig(name="copy", train_lengths=(1, 2), train_size=500, dev_size=10,
                     test_size=10, test_lengths=(3,))
    with pytest.raises(ValueError, match="train_size/train_lengths.*only 110"):
        load_task(cfg, cache_dir=tmp_path)
    assert not (tmp_path / "tasks").exists()
    # feasible alone but not together with the iid test drawn from the same lengths
    cfg = TaskConfig(name="copy", train_lengths=(1, 2), train_size=100, dev_size=10,
                     dev_lengths=(3, 3), test_size=50, test_lengths=(4,))
    with pytest.raises(ValueError, match="together"):
        load_task(cfg, cache_dir=tmp_path)


def test_tight_capacity_is_filled_exactly(tmp_path):
    # 110 distinct sources at lengths 1-2: train 80 + iid 30 uses all of them
    cfg = TaskConfig(name="copy", train_lengths=(1, 2), train_size=80, dev_size=5,
                     dev_lengths=(3, 3), test_size=30, test_lengths=(4,))
    task = load_task(cfg, cache_dir=tmp_path)
    srcs = {e.src for e in task.splits["train"] + task.splits["iid"]}
    assert len(srcs) == 110


# ----------------------------------------------------------------------------- Long Lookup Tables

from locattn.tasks import lookup as lk  # noqa: E402


@pytest.fixture(scope="module")
def lookups(tmp_path_factory):
    d = tmp_path_factory.mktemp("lookup_cache")
    return {n: load_task(TaskConfig(name=n), cache_dir=d)
            for n in ("lookup", "reverse_lookup", "noisy_lookup")}


def test_lookup_split_sizes_match_canonical(lookups):
    task = lookups["lookup"]
    sizes = {k: len(v) for k, v in task.splits.items()}
    assert sizes["train"] == 9081
    assert sizes["dev"] == 475  # 5 % of the 9,492-row pool, rounded up
    assert sizes["heldout_inputs"] == (6**4 - 50) * 2
    assert sizes["heldout_compositions"] == 50 * 8
    assert sizes["heldout_tables"] == 5000
    assert sizes["new_compositions"] == 2**4 * 8
    for i in range(1, 6):
        assert sizes[f"longer_seen_{i}"] == 5000
        assert sizes[f"longer_incremental_{i}"] == 5000
        assert sizes[f"longer_new_{i}"] == min(2 ** (4 + i) * 8, 5000)
    assert task.test_splits == lk.TEST_SPLITS
    assert list(task.splits)[:2] == ["train", "dev"]


def _tables_of(e):
    return [t for t in e.src if t.startswith("t")]


def test_lookup_semantics_and_attention(lookups):
    task = lookups["lookup"]
    mapping: dict[tuple[str, str], str] = {}
    for split, exs in task.splits.items():
        for e in exs:
            tabs = _tables_of(e)
            assert e.src[0] == e.tgt[0] and e.src[-1] == "."
            assert len(e.tgt) == len(tabs) + 1 and len(e.attn) == len(e.tgt) + 1
            assert e.attn == tuple(range(len(e.src)))
            for j, t in enumerate(tabs):
                key = (t, e.tgt[j])
                assert mapping.setdefault(key, e.tgt[j + 1]) == e.tgt[j + 1]  # one function
                assert e.src[e.attn[j + 1]] == t
    # 8 tables x 8 inputs, each a bijection
    assert len(mapping) == 64
    for t in lk.TABLE_NAMES:
        assert len({mapping[(t, b)] for b in lk.BITS}) == 8
    # t7/t8 only alone in training; lengths of longer_seen_1/3/5 are 7/9/11 tokens
    for e in task.splits["train"]:
        tabs = _tables_of(e)
        if len(tabs) > 1:
            assert not {"t7", "t8"} & set(tabs)
    assert {len(e.src) for e in task.splits["longer_seen_1"]} == {7}
    assert {len(e.src) for e in task.splits["longer_seen_3"]} == {9}
    assert {len(e.src) for e in task.splits["longer_seen_5"]} == {11}
    assert all({"t7", "t8"} & set(_tables_of(e)) and set(_tables_of(e)) - {"t7", "t8"}
               for e in task.splits["heldout_tables"])
    assert all(set(_tables_of(e)) <= {"t7", "t8"} for e in task.splits["longer_new_2"])
    train_srcs = {e.src for e in task.splits["train"]}
    for split in ("dev", "heldout_inputs", "heldout_compositions"):
        assert not train_srcs & {e.src for e in task.splits[split]}
    assert task.decode_cap(len(task.splits["longer_seen_5"][0].src)) >= 10 + 1


def test_reverse_and_noisy_lookup(lookups):
    base, rev, noisy = (lookups[k] for k in ("lookup", "reverse_lookup", "noisy_lookup"))
    for a, b, c in zip(base.splits["longer_seen_2"], rev.splits["longer_seen_2"],
                       noisy.splits["longer_seen_2"]):
        assert a.tgt == b.tgt == c.tgt
        k = len(a.tgt) - 1
        assert b.src == tuple(reversed(a.src[1:-1])) + (a.src[0], ".")
        assert b.attn == tuple(range(k, -1, -1)) + (k + 1,)
        assert [b.src[i] for i in b.attn[1:-1]] == list(a.src[1:-1])
        bang = c.src.index("!")
        assert c.src[0] == a.src[0] and c.src[bang + 1:] == a.src[1:]
        assert c.attn == (0,) + tuple(range(bang + 1, len(c.src)))
    noise = [n.src.index("!") - 1 for n in noisy.splits["train"]]
    assert min(noise) == 0 and max(noise) == 9
    assert "!" in noisy.vocab.stoi and "!" not in base.vocab.stoi


def test_lookup_deterministic_in_seed():
    a = lk.generate_rows(0)
    b = lk.generate_rows(0)
    c = lk.generate_rows(1)
    assert a == b and a[0] != c[0]


# ----------------------------------------------------------------------------- SCAN

from locattn.tasks import scan as scan_mod  # noqa: E402


def test_scan_grammar_counts_and_length_split(tmp_path):
    pairs = scan_mod.all_commands()
    assert len(pairs) == 20910 and len({c for c, _ in pairs}) == 20910
    n_train = sum(len(a) <= 22 for _, a in pairs)
    n_test = sum(24 <= len(a) <= 48 for _, a in pairs)
    assert (n_train, n_test) == (16990, 3920)
    task = load_task(TaskConfig(name="scan", dev_size=1000), cache_dir=tmp_path)
    assert [len(task.splits[s]) for s in ("train", "dev", "test")] == [15990, 1000, 3920]
    assert max(len(e.tgt) for e in task.splits["train"] + task.splits["dev"]) == 22
    assert min(len(e.tgt) for e in task.splits["test"]) == 24
    assert max(len(e.tgt) for e in task.splits["test"]) == 48
    assert not {e.src for e in task.splits["train"]} & {e.src for e in task.splits["dev"]}
    assert task.test_splits == ["test"]
    for e in task.splits["test"]:
        assert task.decode_cap(len(e.src)) >= len(e.tgt) + 1


@pytest.mark.parametrize(
    "command, actions",
    [
        ("turn opposite left", "I_TURN_LEFT I_TURN_LEFT"),
        ("walk around left", "I_TURN_LEFT I_WALK " * 4),
        ("look and run right", "I_LOOK I_TURN_RIGHT I_RUN"),
        ("jump after walk twice", "I_WALK I_WALK I_JUMP"),
        ("turn around right thrice", "I_TURN_RIGHT " * 12),
        ("run opposite right after look left", "I_TURN_LEFT I_LOOK I_TURN_RIGHT I_TURN_RIGHT I_RUN"),
    ],
)
def test_scan_interpretation(command, actions):
    table = dict(scan_mod.all_commands())
    assert table[tuple(command.split())] == tuple(actions.split())


# ----------------------------------------------------------------------------- Raffel & Ellis

from locattn.tasks import raffel  # noqa: E402


@pytest.mark.parametrize("op", ["add", "mul"])
def test_raffel_sequences_follow_the_rules(op):
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 56, size=64)
    x, n, y = raffel.sample_sequences(rng, lengths, op)
    assert x.shape == (64, int(lengths.max()), 2) and x.dtype == torch.float32
    for b in range(64):
        t = int(n[b])
        vals, mark = x[b, :t, 0], x[b, :t, 1]
        assert mark[0] == -1 and mark[t - 1] == -1
        ones = torch.nonzero(mark == 1).flatten().tolist()
        assert len(ones) == 2
        assert 1 <= ones[0] <= 9 or 1 <= ones[1] <= 9
        assert all(1 <= i <= t // 2 - 1 for i in ones)  # N2 <= T/2-2, +1 after a collision
        assert ((mark == 0).sum() == t - 4)
        assert (x[b, t:] == 0).all()
        lo = -1 if op == "add" else 0
        assert vals.min() >= lo and vals.max() <= 1
        a, c = float(vals[ones[0]]), float(vals[ones[1]])
        want = 0.5 + (a + c) / 4 if op == "add" else a * c
        assert float(y[b]) == pytest.approx(want, abs=1e-6)


def test_raffel_task_lengths_sampler_and_fixed_sets():
    fixed = load_task(TaskConfig(name="raffel_add", t0=100, dev_size=50, test_size=70))
    assert fixed.kind == "regression" and fixed.lengths == (100, 110)  # [T0, 1.1 T0], closed
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a, b = fixed.sample_batch(g1, 32), fixed.sample_batch(g2, 32)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert a[1].min() >= 100 and a[1].max() <= 110
    c = fixed.sample_batch(g1, 32)  # the generator advanced: a different batch
    assert not torch.equal(a[2], c[2])
    assert len(fixed.splits["dev"]) == 50 and len(fixed.splits["test"]) == 70
    x, n, y = fixed.splits["test"].tensors
    again = load_task(TaskConfig(name="raffel_add", t0=100, dev_size=50, test_size=70))
    assert torch.equal(again.splits["test"].tensors[0], x)
    assert not torch.equal(fixed.splits["dev"].tensors[2][:50], y[:50])
    sizes = [len(bb[2]) for bb in fixed.splits["test"].batches(32)]
    assert sizes == [32, 32, 6]

    var = load_task(TaskConfig(name="raffel_mul", variable_length=True))
    xb, nb, yb = var.sample_batch(np.random.default_rng(1), 8)
    assert len(set(nb.tolist())) == 1 and 50 <= int(nb[0]) <= 10000
    assert xb.shape[1] == int(nb[0])


def test_raffel_big_batch_is_fast():
    import time

    task = load_task(TaskConfig(name="raffel_mul", t0=10000))
    start = time.perf_counter()
    x, n, y = task.sample_batch(torch.Generator().manual_seed(0), 100)
    elapsed = time.perf_counter() - start
    assert x.shape[0] == 100 and x.shape[1] >= 10000
    assert elapsed < 2.0, elapsed  # vectorised: ~0.1 s on a 2-core CPU


# ----------------------------------------------------------------------------- concurrency


def _load_digest(args):
    cache_dir, seed = args
    import torch as _torch

    _torch.set_num_threads(1)
    return split_digest(load_task(small("recopy", data_seed=seed), cache_dir=cache_dir))


def test_concurrent_loads_share_one_cache_file(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        digests = pool.map(_load_digest, [(str(tmp_path), 7)] * 4)
    assert len(set(digests)) == 1
    files = list((tmp_path / "tasks").iterdir())
    assert len(files) == 1 and files[0].name.endswith(".json.gz")  # no temp files left
    assert _load_digest((str(tmp_path), 7)) == digests[0]


def test_cache_files_are_byte_identical_across_directories(tmp_path):
    load_task(small("posretrieve"), cache_dir=tmp_path / "a")
    load_task(small("posretrieve"), cache_dir=tmp_path / "b")
    (fa,) = (tmp_path / "a" / "tasks").iterdir()
    (fb,) = (tmp_path / "b" / "tasks").iterdir()
    assert fa.name == fb.name and fa.read_bytes() == fb.read_bytes()


def test_test_limit_subsamples_test_splits_only(tmp_path) -> None:
    from locattn.tasks import load_task
    from locattn.tasks.config import TaskConfig

    base = TaskConfig(name="copy", train_size=50, dev_size=20, test_size=40, test_lengths=(15,))
    full = load_task(base, cache_dir=tmp_path)
    cut = load_task(dataclasses.replace(base, test_limit=7), cache_dir=tmp_path)
    again = load_task(dataclasses.replace(base, test_limit=7), cache_dir=tmp_path)
    assert cut.splits["train"] == full.splits["train"] and cut.splits["dev"] == full.splits["dev"]
    for name in full.test_splits:
        assert len(cut.splits[name]) == 7
        assert set(cut.splits[name]) <= set(full.splits[name])
        positions = [full.splits[name].index(e) for e in cut.splits[name]]
        assert positions == sorted(positions)  # order kept
        assert cut.splits[name] == again.splits[name]  # same subsample every time
    with pytest.raises(ValueError, match="TaskConfig.test_limit"):
        TaskConfig(name="copy", test_limit=-1)
