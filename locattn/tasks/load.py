"""Loading a task's data: ``load_task`` (any registered task, through its registry entry) and
the loaders the built-in tasks register (:mod:`locattn.tasks.config`), one per family. Imports torch through the task modules; ``locattn.tasks`` loads
this module on first use of a name it defines."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from locattn import registry
from locattn.tasks import algorithmic as alg
from locattn.tasks import cache as _cache
from locattn.tasks import cfq, lookup, raffel, scan
from locattn.tasks.base import (
    NO_ATTN,
    Batch,
    Example,
    TaskData,
    Vocab,
    check_example,
    encode_examples,
)
from locattn.tasks.config import ALGORITHMIC, LOOKUP_TASKS as LOOKUP, TASK_KEYS, TaskConfig, unknown_task_message


def _cache_params(cfg: TaskConfig, version: int) -> dict[str, Any]:
    """Everything that determines a generated dataset (data_dir excluded: operational)."""
    return {
        "generator_version": version,
        "name": cfg.name,
        "data_seed": cfg.data_seed,
        "train_size": cfg.train_size,
        "dev_size": cfg.dev_size,
        "test_size": cfg.test_size,
        "train_lengths": list(cfg.train_lengths),
        "dev_lengths": list(cfg.dev_lengths),
        "test_lengths": list(cfg.test_lengths),
    }


def _cached(cfg: TaskConfig, version: int, cache_dir: str | Path | None, use_cache: bool,
            make: Any) -> tuple[dict[str, list[Example]], list[str]]:
    params = _cache_params(cfg, version)
    path = _cache.cache_path(cache_dir, cfg.name, params)
    if use_cache:
        hit = _cache.load(path, params)
        if hit is not None:
            return hit
    splits, tokens = make()
    if use_cache:
        _cache.save(path, params, splits, tokens)
    return splits, tokens


def load_task(cfg: TaskConfig, *, cache_dir: str | Path | None = None,
              use_cache: bool = True) -> Any:
    """Build or load the task ``cfg.name``.

    Generated tasks are cached under ``cache_dir`` (default ``~/.cache/locattn``); a second
    call reads the cache. Tasks read from ``cfg.data_dir`` are parsed directly (no cache).
    Returns :class:`TaskData` (seq2seq) or ``RegressionTaskData`` (Raffel & Ellis).
    ``cfg.dev_from_long1`` then moves rows of ``longer_seen_1`` into dev (Long Lookup Tables), and
    ``cfg.test_limit`` subsamples each seq2seq test split (the cache holds the full splits).
    """
    if not isinstance(cfg, TaskConfig):
        raise TypeError(f"load_task expects a TaskConfig, got {type(cfg).__name__}")
    data = registry.get("task", cfg.name, where="task.name").load()(
        cfg, cache_dir=cache_dir, use_cache=use_cache)
    if cfg.dev_from_long1:
        data = lookup.move_long1_to_dev(data, cfg.dev_from_long1, seed=cfg.data_seed)
    if cfg.test_limit and data.kind == "seq2seq":
        data = limit_test_splits(data, cfg.test_limit, seed=cfg.data_seed)
    return data


def limit_test_splits(data: TaskData, limit: int, *, seed: int) -> TaskData:
    """``data`` with each test split cut to at most ``limit`` examples: a seeded subsample
    that keeps the split's order."""
    splits = dict(data.splits)
    for name in data.test_splits:
        examples = splits[name]
        if len(examples) > limit:
            keep = sorted(random.Random(f"{seed}:{name}").sample(range(len(examples)), limit))
            splits[name] = [examples[i] for i in keep]
    return dataclasses.replace(data, splits=splits)


def load_algorithmic(cfg: TaskConfig, *, cache_dir: str | Path | None, use_cache: bool) -> TaskData:
    """The registered loader of the generated probing tasks (Copy ... PosRetrieve): generates
    ``cfg.name``'s splits, or reads them from the cache."""
    name = cfg.name
    alg.check_feasible(cfg)

    def make() -> tuple[dict[str, list[Example]], list[str]]:
        return alg.generate(cfg), list(alg.RULES[name].tokens)

    splits, tokens = _cached(cfg, alg.GENERATOR_VERSION, cache_dir, use_cache, make)
    return TaskData(
        name=name, kind="seq2seq", vocab=Vocab(tokens), splits=splits,
        test_splits=alg.test_splits(cfg), decode_cap_fn=alg.decode_cap(name),
        has_attention=alg.RULES[name].has_attention, notes=dict(alg.NOTES),
    )


def load_lookup(cfg: TaskConfig, *, cache_dir: str | Path | None, use_cache: bool) -> TaskData:
    """The registered loader of the Long Lookup Tables tasks: reads ``cfg.data_dir`` when set,
    else generates (or reads from the cache) Dubois et al.'s construction."""
    if cfg.data_dir:
        return lookup.load_dir(cfg)

    def make() -> tuple[dict[str, list[Example]], list[str]]:
        return lookup.generate(cfg), list(lookup.tokens(cfg.name))

    splits, tokens = _cached(cfg, lookup.GENERATOR_VERSION, cache_dir, use_cache, make)
    return lookup.task_data(cfg.name, splits, tokens)


def load_scan(cfg: TaskConfig, *, cache_dir: str | Path | None, use_cache: bool) -> TaskData:
    """The registered loader of SCAN's length split: reads ``cfg.data_dir`` when set, else
    generates it (or reads it from the cache)."""
    if cfg.data_dir:
        return scan.load_dir(cfg)

    def make() -> tuple[dict[str, list[Example]], list[str]]:
        splits = scan.generate(cfg)
        return splits, scan.tokens_of(splits["train"])

    splits, tokens = _cached(cfg, scan.GENERATOR_VERSION, cache_dir, use_cache, make)
    return scan.task_data(splits, tokens)


def load_cfq(cfg: TaskConfig, *, cache_dir: str | Path | None, use_cache: bool) -> TaskData:
    """The registered loader of CFQ's length split, read from ``cfg.data_dir`` (never cached)."""
    return cfq.load_dir(cfg)


def load_raffel(cfg: TaskConfig, *, cache_dir: str | Path | None, use_cache: bool) -> Any:
    """The registered loader of Raffel & Ellis's addition and multiplication tasks
    (``RegressionTaskData``)."""
    return raffel.load(cfg)


def load_builtin(cfg: TaskConfig, *, cache_dir: str | Path | None, use_cache: bool) -> Any:
    """The built-in task ``cfg.name``'s data through its registry entry (its loader above, as
    :mod:`locattn.tasks.config` registers it); :class:`ValueError` for a name that is not a
    built-in task."""
    if cfg.name not in TASK_KEYS:  # TaskConfig validates too; kept for configs built oddly
        raise ValueError(unknown_task_message(cfg.name))
    return registry.get("task", cfg.name, where="task.name").load()(
        cfg, cache_dir=cache_dir, use_cache=use_cache)


__all__ = [
    "NO_ATTN",
    "Batch",
    "Example",
    "TaskData",
    "Vocab",
    "check_example",
    "encode_examples",
    "limit_test_splits",
    "load_algorithmic",
    "load_builtin",
    "load_cfq",
    "load_lookup",
    "load_raffel",
    "load_scan",
    "load_task",
]
