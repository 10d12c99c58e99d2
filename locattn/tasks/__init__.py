"""Tasks: generated probing tasks, Long Lookup Tables, SCAN, CFQ, Raffel & Ellis, and plugins'.

```python
list_tasks() -> list[str]
load_task(cfg: TaskConfig, *, cache_dir=None) -> TaskData | RegressionTaskData
encode_examples(examples, vocab) -> Batch
```

The names, labels, defaults and configs import without torch (:mod:`locattn.tasks.config`, where
the built-in tasks register); the data side (:mod:`locattn.tasks.load`, torch) loads on first
access of one of its names.
"""

from importlib import import_module
from typing import Any

from locattn import registry
from locattn.tasks.config import RAFFEL, TASK_DEFAULTS, TaskConfig
from locattn.tasks.config import TASK_LABELS  # noqa: F401 - re-exported: the built-in tasks' paper names

_LAZY = ("NO_ATTN", "Batch", "Example", "TaskData", "Vocab", "check_example", "encode_examples",
         "limit_test_splits", "load_builtin", "load_task", "ALGORITHMIC", "LOOKUP")


def list_tasks() -> list[str]:
    """All registered task keys: the built-ins, then plugins' (:func:`locattn.register_task`)."""
    return list(registry.entries("task"))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module("locattn.tasks.load"), name)
    raise AttributeError(f"module 'locattn.tasks' has no attribute {name!r}")


__all__ = [
    "NO_ATTN",
    "RAFFEL",
    "TASK_DEFAULTS",
    "TASK_LABELS",
    "Batch",
    "Example",
    "TaskConfig",
    "TaskData",
    "Vocab",
    "encode_examples",
    "list_tasks",
    "load_builtin",
    "load_task",
]
