"""Multi-digit addition with a length split: ``a + b`` -> the digits of a+b.

Source ``d d d + d d d`` (both operands of n digits, most significant first, the first digit
nonzero), target the digits of the sum (n or n+1 of them). Training operands have n in
``train_lengths``, dev in ``dev_lengths``; ``iid`` tests the training lengths and ``len<k>``
tests n = k. No gold attention. The data are a function of the ``TaskConfig`` alone (seeded by
``data_seed`` and the split name), regenerated on every load (it takes milliseconds).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from locattn.tasks import Example, TaskData, Vocab

TOKENS = [str(d) for d in range(10)] + ["+"]


def _operand(rng: random.Random, n: int) -> str:
    return str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(n - 1))


def _split(rng: random.Random, size: int, lengths: tuple[int, int], seen: set[str]) -> list[Example]:
    out: list[Example] = []
    tries = 0
    while len(out) < size and tries < 50 * size:
        tries += 1
        n = rng.randint(lengths[0], lengths[1])
        a, b = _operand(rng, n), _operand(rng, n)
        key = f"{a}+{b}"
        if key in seen:
            continue
        seen.add(key)
        out.append(Example(src=(*a, "+", *b), tgt=tuple(str(int(a) + int(b)))))
    return out


def load(cfg: Any, *, cache_dir: str | Path | None = None, use_cache: bool = True) -> TaskData:
    """The task's splits for ``cfg`` (a :class:`locattn.tasks.TaskConfig`): train, dev, iid and
    one ``len<k>`` per ``cfg.test_lengths``, sources unique across splits."""
    seen: set[str] = set()
    splits: dict[str, list[Example]] = {}
    plan = [("train", cfg.train_size, cfg.train_lengths), ("dev", cfg.dev_size, cfg.dev_lengths),
            ("iid", cfg.test_size, cfg.train_lengths)]
    plan += [(f"len{k}", cfg.test_size, (k, k)) for k in cfg.test_lengths]
    for name, size, lengths in plan:
        splits[name] = _split(random.Random(f"{cfg.data_seed}:{name}"), size, tuple(lengths), seen)
    return TaskData(
        name=cfg.name, kind="seq2seq", vocab=Vocab(TOKENS), splits=splits,
        test_splits=["iid"] + [f"len{k}" for k in cfg.test_lengths],
        decode_cap_fn=lambda src_len: src_len // 2 + 2 + 5, has_attention=False,
        notes={"length": "n = digits per operand", "split": "train 5-10 digits, tests longer"},
    )
