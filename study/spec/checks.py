"""The vocabulary of a study spec (its keys and limits), :class:`SpecError` and the value checks
every part of the spec parser shares. Standard library only (and the hint of locattn.cliparse).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from locattn.cliparse import did_you_mean  # re-exported: the spec checks' hint

TOP_KEYS = {
    "name": "default study name (str)",
    "description": "free text (str)",
    "tables": ("report tables the study regenerates: registered table ids, or a table of its own (a "
               "mapping: id, metric, splits, and optionally rows, tasks, published, stat, title)"),
    "grid": "grid axes: task, variant, ablation, or any dotted config path -> list of values",
    "hparams": "per-cell selection hyperparameters (dotted path -> list), chosen later by dev",
    "search": "Optuna-searched axes (mapping)",
    "seeds": "replicate axis: an int n (seeds 0..n-1) or a list of ints",
    "overrides": "fixed dotted config overrides for every trial (mapping)",
    "resources": "per-trial resources: cpus, gpus (mapping)",
    "max_concurrent": "maximum trials running at once (int, 0 = as many as resources allow)",
    "max_failures": "retries of a failed trial before it is recorded as failed (int)",
    "pack_seeds": "train the seeds of a cell (and hparams point) in one trial as one packed model (bool)",
    "pack": "axes trained together in one trial as one packed model: seeds and/or hparams axes "
            "such as optim.lr (list; default with resources.gpus > 0: seeds and every packable "
            "hparams axis)",
    "profiles": "named profiles (smoke, quick, paper, ...) of overrides to the keys above",
    "default_profile": "profile used when --profile is not given (str)",
    "cost": "cost model for --dry-run: seconds_per_1k_examples (float)",
    "keep": "what a finished run keeps on disk: model (default), results, all (study.spec.retention)",
    "plugins": "importable module names of plugins (attenders, tasks, variants) imported on the "
               "driver and in every trial before any config resolves (list of str)",
}
PROFILE_KEYS = {
    "overrides",
    "seeds",
    "grid",
    "hparams",
    "search",
    "resources",
    "max_concurrent",
    "max_failures",
    "pack_seeds",
    "pack",
    "cost",
    "description",
    "keep",
}
SEARCH_KEYS = {
    "space": "dotted path -> {type: loguniform|uniform|int|categorical, low, high | choices}",
    "num_samples": "search points per cell (int)",
    "sampler": "tpe | random | gp (str)",
    "sampler_seed": "seed of the sampler (int)",
    "metric": "per-seed final metric aggregated (median over seeds) for the sampler (str)",
    "mode": "max | min",
}
SPACE_TYPES = ("loguniform", "uniform", "int", "categorical")
SAMPLERS = ("tpe", "random", "gp")
#: ``search.mode``: whether the sampler maximises or minimises ``search.metric``.
MODES = ("max", "min")
RESOURCE_KEYS = {"cpus", "gpus"}
COST_KEYS = {"seconds_per_1k_examples"}
SPECIAL_AXES = ("task", "variant", "ablation")
#: A study name (``--name``, a spec's ``name``, ``<name>-<profile>``) is one directory under
#: the root: no separators, no '..', no leading dot, nothing a URI would read as syntax.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Deepest nesting a spec may have; PyYAML composes recursively, so deeper input would end in a
#: RecursionError (the shipped specs nest 5 levels).
MAX_YAML_DEPTH = 50
#: Most seeds a spec may list or count (``seeds: n``), and the largest seed value (numpy's seeds
#: are 32-bit).
MAX_SEEDS = 10_000_000
MAX_SEED = 2**32 - 1
#: Largest integer any spec field or override may hold (a C ``int64``: torch, Ray and SQLite).
MAX_INT = 2**63 - 1
#: Most cells a grid may have (the product of its axis lengths, checked before any cell is
#: built) and most (cell, hparams point) configs a spec may resolve: the paper's largest study
#: has a few hundred; 10^6 cells took a dry run 12 minutes and 10^9 ran out of memory.
MAX_CELLS = 20_000
#: Largest spec file read (the shipped specs are a few kB; a 100 MB one took 69 s and 550 MB).
MAX_SPEC_BYTES = 1 << 20
#: The documented range of each numeric config field a spec can set, checked on every
#: resolved config: ``dotted key: (least, greatest)`` (a list field: each item). Any other
#: number is finite and at most :data:`MAX_INT` (an int) or :data:`MAX_FLOAT` in magnitude.
NUMERIC_RANGES: dict[str, tuple[float, float]] = {
    "seed": (0, MAX_SEED),
    "optim.epochs": (1, 10_000_000),
    "optim.batch_size": (1, 1 << 20),
    "optim.lr": (0.0, 1e15),  # wide: the NaN-loss tests diverge a run with lr 1e12
    "optim.patience": (0, 100_000),
    "task.train_size": (0, 100_000_000),
    "task.dev_size": (0, 100_000_000),
    "task.test_size": (0, 100_000_000),
    "task.test_lengths": (1, 100_000),
}
MAX_FLOAT = 1e12



class SpecError(ValueError):
    """An invalid study spec; the message names the file, the key and the valid choices."""


def check_study_name(name: Any, where: str) -> None:
    """Refuse a study name that is not one plain directory name (it would write outside the
    root, or be read as URI syntax); ``where`` names its source (``--name``, ``<file>: name``)."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise SpecError(f"{where} {name!r}: a study name is one directory under --root, made of "
                        "letters, digits, '.', '_' and '-' (no '/', no '..', not starting with '.')")


def spec_error(path: str, key: str, msg: str, valid: Any = None) -> SpecError:
    """The :class:`SpecError` ``<file>: <key>: <msg>[; valid: <choices>]``."""
    text = f"{path}: {key}: {msg}"
    if valid is not None:
        text += f"; valid: {valid}"
    return SpecError(text)


def check_mapping(path: str, key: str, value: Any) -> dict:
    """A mapping value as a dict, else a :class:`SpecError` naming the key."""
    if not isinstance(value, Mapping):
        raise spec_error(path, key, f"expected a mapping, got {type(value).__name__} {value!r}")
    for k in value:  # YAML reads `1:` as an int key, `~:` as None
        if not isinstance(k, str) or not k:
            raise spec_error(path, key, f"key {short_repr(k)} is not a name (a dotted config path or a spec key)")
    return dict(value)


def check_list(path: str, key: str, value: Any) -> list:
    """A non-empty list value, else a :class:`SpecError` naming the key."""
    if not isinstance(value, list):
        raise spec_error(path, key, f"expected a list, got {type(value).__name__} {value!r}")
    if not value:
        raise spec_error(path, key, "empty list: the grid would have no trials")
    return value


def check_int(path: str, key: str, value: Any, minimum: int = 0, maximum: int = MAX_INT) -> int:
    """An integer in ``[minimum, maximum]`` (not a bool), else a :class:`SpecError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise spec_error(path, key, f"expected an integer from {minimum} to {maximum:,}, got {short_repr(value)}")
    return value


def short_repr(value: Any) -> str:
    """``repr`` cut to 80 characters, so a huge value stays a one-line message."""
    if isinstance(value, int) and value.bit_length() > 64:  # str() of a huge int is slow or refused
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def spelling(value: Any) -> str:
    """How a message shows one spelling of a value: text as written (YAML reads ``3e-4`` as
    text), anything else as its repr; cut to 80 characters like :func:`short_repr`."""
    text = value if isinstance(value, str) else short_repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_number(path: str, key: str, value: Any, minimum: float = 0.0) -> float:
    """A finite number ``>= minimum`` as a float, else a :class:`SpecError`."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > MAX_INT
            or not math.isfinite(value) or value < minimum):
        raise spec_error(path, key, f"expected a finite number >= {minimum}, got {short_repr(value)}")
    return float(value)



def check_range(where: str, key: str, value: Any) -> None:
    """A :class:`SpecError` naming ``key``, its value and its range unless the number (or each
    item of a list) lies in :data:`NUMERIC_RANGES`' range for ``key`` (or, for another key, is
    at most :data:`MAX_INT` / :data:`MAX_FLOAT` in magnitude); anything not a number passes."""
    for v in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise SpecError(f"{where}: {key}={v!r} is not a finite number")
        bound = MAX_INT if isinstance(v, int) else MAX_FLOAT
        least, most = NUMERIC_RANGES.get(key, (-bound, bound))
        if not least <= v <= most:
            raise SpecError(f"{where}: {key}={short_repr(v)}: out of its range {least:,} to {most:,}")


def check_unique(path: str, key: str, texts: list[str], values: list, canonical: list | None = None) -> None:
    """Refuse an axis listing one value twice: ``texts[i]`` is how a cell id or run key would
    print ``values[i]``'s canonical form (``canonical[i]``; :mod:`study.spec.canon`), so two
    spellings of one value (``3e-4`` and ``0.0003``, ``1`` and ``1.0`` of a float field) are a
    duplicate too, and the message names both spellings."""
    for i, text in enumerate(texts):
        first = texts.index(text)
        if first == i:
            continue
        a, b = values[first], values[i]
        if repr(a) == repr(b):  # one spelling, twice
            raise spec_error(path, key, f"{short_repr(a)} is listed twice in {short_repr(values)}: both would be "
                                  "the same runs; list each value once")
        same = (canonical or values)[i]
        raise spec_error(path, key, f"{spelling(a)} and {spelling(b)} are one value, "
                                    f"{short_repr(same)}: both would be the same runs; list it once")
