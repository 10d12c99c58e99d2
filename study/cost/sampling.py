"""The data a plan reads: one sample of a task's splits, shared by the token counts
(:mod:`study.cost.pricing`) and the pack sizes (:mod:`study.cost.packs`). Imports ``locattn``
only, inside the function that builds data.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from locattn.tasks.config import TaskConfig

#: A generated split larger than this is priced, and its packs sized, from a sample of this many
#: examples (its counts then scaled up).
SAMPLE_EXAMPLES = 20_000


@lru_cache(maxsize=64)
def sample_data(task: TaskConfig) -> Any:
    """A generated task's data (a ``TaskConfig``'s) with every split at most
    :data:`SAMPLE_EXAMPLES` examples, built once per task config. SCAN and Lookup ignore the
    sizes."""
    from locattn.tasks import load_task  # builds data, which `study --help` never needs

    return load_task(replace(task, **{f"{k}_size": min(getattr(task, f"{k}_size"), SAMPLE_EXAMPLES)
                                      for k in ("train", "dev", "test")}))


__all__ = ["SAMPLE_EXAMPLES", "sample_data"]
