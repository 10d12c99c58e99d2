"""Task configuration: which task, and the sizes and lengths of its splits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """Which task to build and how big its splits are.

    Defaults are the papers' splits (Ray Chowdhury & Caragea 2023, §2): train 10,000
    examples of length 5-10, dev 2,000 of length 10-15, 2,000 per test length.
    """

    name: str = "copy"
    """Task key; see ``locattn.tasks.list_tasks()``."""
    data_seed: int = 0
    """Seed of the data generator. Independent of the run seed: every run of a study
    sees the same data, as in the papers."""
    train_size: int = 10_000
    """Training examples (generated tasks)."""
    dev_size: int = 2_000
    """Development examples (generated tasks)."""
    test_size: int = 2_000
    """Examples per test split (generated tasks)."""
    train_lengths: tuple[int, int] = (5, 10)
    """Inclusive (min, max) source length of train and IID test examples."""
    dev_lengths: tuple[int, int] = (10, 15)
    """Inclusive (min, max) source length of dev examples."""
    test_lengths: tuple[int, ...] = (15, 20, 25, 30, 50, 100)
    """One test split ``len<k>`` per length, plus ``iid``."""
    data_dir: str | None = None
    """Directory of user-supplied files (Long Lookup Tables TSVs, SCAN, CFQ). Operational."""
    variant: str = ""
    """Task-specific sub-variant, e.g. ``noisy`` for lookup tables or ``add`` for Raffel."""
    t0: int = 50
    """Raffel & Ellis: minimum sequence length T0 (lengths in [T0, 1.1 T0))."""
    variable_length: bool = False
    """Raffel & Ellis: draw one length per batch from [50, 10000] instead of around T0."""
