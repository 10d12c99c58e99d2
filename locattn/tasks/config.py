"""Task configuration: which task, and the sizes and lengths of its splits (no torch).

The built-in tasks register here (:func:`locattn.register_task`), with their paper labels,
defaults, data versions and loaders (:data:`TASK_LOADERS`), exactly as a plugin registers its own;
``load_task`` loads every task through its registry entry, and the loaders import lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from locattn import registry

#: Every built-in task key ``load_task`` accepts -> the paper's name for it (Ray Chowdhury &
#: Caragea 2023; Dubois et al. 2020; Raffel & Ellis 2016), in the order ``list_tasks()`` reports
#: them. A plugin task's name is its registered label (:func:`locattn.labels.task_label`).
TASK_LABELS: dict[str, str] = {
    "copy": "Copy",
    "reverse_copy": "Reverse Copy",
    "recopy": "ReCopy",
    "reverse_recopy": "Reverse ReCopy",
    "inv_recopy": "Inv ReCopy",
    "inv_reverse_recopy": "Inv Reverse ReCopy",
    "dedupe": "DeDupe",
    "posretrieve": "PosRetrieve",
    "lookup": "Lookup",
    "reverse_lookup": "Reverse Lookup",
    "noisy_lookup": "Noisy Lookup",
    "scan": "SCAN (length split)",
    "cfq": "CFQ (length split)",
    "raffel_add": "Addition (Raffel & Ellis)",
    "raffel_mul": "Multiplication (Raffel & Ellis)",
}
#: Every built-in task key, in that order.
TASK_KEYS: tuple[str, ...] = tuple(TASK_LABELS)
#: Version of each task's examples: bumped when the same TaskConfig starts to yield different
#: data (a generator fix), so runs on the old and the new data never share a run identity
#: (``locattn.config.identity_dict`` adds it as ``task.data_version`` from version 2 on).
#: DeDupe: 2 lets equal neighbouring draws merge (the reference generator), 3 ends each source
#: with ``<eos>`` as the reference does. Raffel & Ellis: 2 samples lengths in [T0, 1.1 T0].
DATA_VERSIONS: dict[str, int] = {
    **{name: 1 for name in TASK_KEYS}, "dedupe": 3, "raffel_add": 2, "raffel_mul": 2,
}

#: The generated probing task keys (Ray Chowdhury & Caragea 2023).
ALGORITHMIC: tuple[str, ...] = ("copy", "reverse_copy", "recopy", "reverse_recopy", "inv_recopy",
                                "inv_reverse_recopy", "dedupe", "posretrieve")
#: The Long Lookup Tables task keys.
LOOKUP_TASKS: tuple[str, ...] = ("lookup", "reverse_lookup", "noisy_lookup")
#: The Raffel & Ellis regression task keys.
RAFFEL: tuple[str, ...] = ("raffel_add", "raffel_mul")

#: Per-task overrides of the copy-task defaults, as dotted RunConfig keys. The config layer
#: (or a study spec) applies them; ``load_task`` itself uses whatever TaskConfig it is given.
#: - lookup*: sizes are fixed by the Long Lookup Tables construction (train_size etc. unused);
#:   Lookup and Reverse Lookup move 500 rows of longer_seen_1 into dev, as the reference does.
#: - scan: dev_size is carved out of the 16,990 length-split training commands.
#: - raffel_*: fixed dev/test sets of 1,000 sequences (Raffel & Ellis, sec. 3); batch 100,
#:   an "epoch" of 1,000 updates (Raffel & Ellis).
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    # the reference's Lookup dev set: validation + 500 rows of longer_seen_1 (its process_llt.py)
    "lookup": {"task.dev_from_long1": 500},
    "reverse_lookup": {"task.dev_from_long1": 500},
    "scan": {"task.dev_size": 1_000},
    "cfq": {"optim.batch_size": 128},
    "raffel_add": {"task.dev_size": 1_000, "task.test_size": 1_000,
                   "optim.batch_size": 100, "optim.updates_per_epoch": 1_000},
    "raffel_mul": {"task.dev_size": 1_000, "task.test_size": 1_000,
                   "optim.batch_size": 100, "optim.updates_per_epoch": 1_000},
}

#: Each built-in task's loader (a lazy ``module:function`` of :mod:`locattn.tasks.load`, called as
#: ``loader(cfg, cache_dir=, use_cache=)``): what its registry entry loads.
TASK_LOADERS: dict[str, str] = {
    **{name: "locattn.tasks.load:load_algorithmic" for name in ALGORITHMIC},
    **{name: "locattn.tasks.load:load_lookup" for name in LOOKUP_TASKS},
    "scan": "locattn.tasks.load:load_scan",
    "cfq": "locattn.tasks.load:load_cfq",
    **{name: "locattn.tasks.load:load_raffel" for name in RAFFEL},
}

for _name in TASK_KEYS:
    registry.register_task(
        _name, TASK_LOADERS[_name], label=TASK_LABELS[_name],
        doc="Built-in task (docs/architecture.md §2).",
        kind="regression" if _name in RAFFEL else "seq2seq",
        defaults=TASK_DEFAULTS.get(_name, {}), data_version=DATA_VERSIONS[_name],
    )


def unknown_task_message(name: str) -> str:
    """Error text for an unknown task key: the valid keys plus a close match if any."""
    return registry.unknown_message("task", name, "TaskConfig.name")


def task_defaults(name: str) -> Mapping[str, Any]:
    """The registered task's own dotted ``RunConfig`` defaults (``{}`` for most tasks)."""
    return registry.get("task", name, where="task.name").meta["defaults"]


def data_version(name: str) -> int:
    """The registered task's data version (part of the run identity from 2 on)."""
    return int(registry.get("task", name, where="task.name").meta["data_version"])


def task_kind(name: str) -> str:
    """``seq2seq`` or ``regression``: what the registered task ``name`` yields."""
    return str(registry.get("task", name, where="task.name").meta["kind"])


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """Which task to build and how big its splits are.

    Defaults are the papers' splits (Ray Chowdhury & Caragea 2023, sec. 2): train 10,000
    examples of length 5-10, dev 2,000 of length 10-15, 2,000 per test length.
    Sizes and lengths apply to the generated probing tasks (copy ... posretrieve).
    Long Lookup Tables, SCAN and CFQ have sizes fixed by their own construction
    (SCAN uses ``dev_size`` for the dev set it carves out of train); Raffel & Ellis uses
    ``dev_size``/``test_size`` for its fixed held-out sets. See ``locattn.tasks.TASK_DEFAULTS``.
    """

    name: str = "copy"
    """Task key, a registered task (``locattn list tasks``): a built-in or a plugin's."""
    data_seed: int = 0
    """Seed of the data generator. Independent of the run seed: every run of a study
    sees the same data, as in the papers."""
    train_size: int = 10_000
    """Training examples (generated tasks)."""
    dev_size: int = 2_000
    """Development examples (generated tasks; SCAN: examples carved out of train)."""
    test_size: int = 2_000
    """Examples per test split (generated tasks; Raffel: size of the fixed test set)."""
    train_lengths: tuple[int, int] = (5, 10)
    """Inclusive (min, max) task length of train and IID test examples. The task length is
    the length of the digit sequence X (for the inverse tasks: of the target; for DeDupe: the
    number of draws, each repeated 1, 3 or 5 times)."""
    dev_lengths: tuple[int, int] = (10, 15)
    """Inclusive (min, max) task length of dev examples."""
    test_lengths: tuple[int, ...] = (15, 20, 25, 30, 50, 100)
    """One test split ``len<k>`` per length, plus ``iid``."""
    test_limit: int = 0
    """Score at most this many examples per test split (a seeded subsample, same for every run);
    0 scores them all. For quick looks and smoke runs of tasks whose test sets are fixed in size
    (Long Lookup Tables, SCAN, CFQ)."""
    dev_from_long1: int = 0
    """Long Lookup Tables: move this many seeded-random rows of ``longer_seen_1`` into the dev set
    (they leave that test split). The reference does this with 500 for Lookup and Reverse Lookup
    (``locattn.tasks.TASK_DEFAULTS``), so model selection, the LR schedule and early stopping see
    extrapolation; 0 keeps the dev set to the in-distribution validation file."""
    data_dir: str | None = None
    """Directory of user-supplied files (Long Lookup Tables TSVs, SCAN, CFQ). Operational."""
    variant: str = ""
    """Reserved for task-specific sub-variants; must be empty. Variants are separate task
    keys (``reverse_lookup``, ``noisy_lookup``, ``raffel_add``, ``raffel_mul``)."""
    t0: int = 50
    """Raffel & Ellis: minimum sequence length T0 (lengths in the closed interval [T0, 1.1 T0])."""
    variable_length: bool = False
    """Raffel & Ellis: draw one length per batch from [50, 10000] instead of around T0."""

    def __post_init__(self) -> None:
        if not registry.has("task", self.name):
            raise ValueError(unknown_task_message(self.name))
        if self.variant:
            raise ValueError(
                f"TaskConfig.variant={self.variant!r}: sub-variants are separate task keys; "
                f"leave variant empty. Valid task keys: {list(registry.entries('task'))}"
            )
        if self.data_seed < 0:
            raise ValueError(f"TaskConfig.data_seed must be >= 0, got {self.data_seed}")
        for field_name in ("train_size", "dev_size", "test_size"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"TaskConfig.{field_name} must be a positive int, got {value!r}")
        if not isinstance(self.test_limit, int) or self.test_limit < 0:
            raise ValueError(
                f"TaskConfig.test_limit must be an int >= 0 (0 = all), got {self.test_limit!r}")
        for field_name in ("train_lengths", "dev_lengths"):
            value = getattr(self, field_name)
            if len(value) != 2:
                raise ValueError(f"TaskConfig.{field_name} must be (min, max), got {value!r}")
            lo, hi = value
            if lo < 1:
                raise ValueError(f"TaskConfig.{field_name}: min length must be >= 1, got {value!r}")
            if lo > hi:
                raise ValueError(f"TaskConfig.{field_name}: min > max in {value!r}")
        if not isinstance(self.dev_from_long1, int) or self.dev_from_long1 < 0:
            raise ValueError(
                f"TaskConfig.dev_from_long1 must be an int >= 0, got {self.dev_from_long1!r}")
        if self.dev_from_long1 and self.name not in LOOKUP_TASKS:
            raise ValueError(
                f"TaskConfig.dev_from_long1={self.dev_from_long1} applies only to the Long Lookup "
                f"Tables tasks {list(LOOKUP_TASKS)}, not to {self.name!r}; leave it at 0")
        if not self.test_lengths:  # a run with no test split would have nothing to report
            raise ValueError("task.test_lengths=[]: it takes a non-empty list of test lengths, each >= 1 "
                             "(e.g. [15, 30, 100])")
        if any(k < 1 for k in self.test_lengths):
            raise ValueError(f"TaskConfig.test_lengths must all be >= 1, got {self.test_lengths!r}")
        if len(set(self.test_lengths)) != len(self.test_lengths):
            raise ValueError(f"TaskConfig.test_lengths has duplicates: {self.test_lengths!r}")
        if self.t0 < 20 or self.t0 > 100_000:
            raise ValueError(f"TaskConfig.t0 must be in [20, 100000], got {self.t0}")
