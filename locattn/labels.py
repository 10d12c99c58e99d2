"""The paper name of a task, torch-free: read from the task registry, where each task registers
its label (the built-ins' in :mod:`locattn.tasks.config`, a plugin's with its
:func:`locattn.register_task`).

A module of its own, importing only the standard-library :mod:`locattn.registry`, so that
``reports`` can title figures and tables with the papers' names without importing
:mod:`locattn.tasks`' loaders (which import torch). The variants' paper names are
:data:`locattn.variants.PAPER_LABELS`.
"""

from typing import Mapping

from locattn import registry

#: Task key -> its paper name: a live view of the registered tasks (the built-ins first).
TASK_LABELS: Mapping[str, str] = registry.View("task")


def task_label(key: str) -> str:
    """The paper's name of a task key (its registered label); the key itself when no task is
    registered under it."""
    try:
        return registry.get("task", key).label
    except registry.UnknownNameError:
        return key
