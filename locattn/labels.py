"""Paper names of the tasks, written once (Ray Chowdhury & Caragea 2023; Dubois et al. 2020;
Raffel & Ellis 2016).

A module of its own, importing only the standard-library :mod:`locattn.registry`, so that ``reports`` can title figures and tables with the
papers' names without importing :mod:`locattn.tasks` (which imports torch). The variants' paper
names are :data:`locattn.variants.PAPER_LABELS`.
"""

from locattn import registry

#: Task key -> the paper's name for it. ``locattn.tasks.TASK_LABELS`` is this dict.
TASK_LABELS: dict[str, str] = {
    "copy": "Copy", "reverse_copy": "Reverse Copy", "recopy": "ReCopy",
    "reverse_recopy": "Reverse ReCopy", "inv_recopy": "Inv ReCopy",
    "inv_reverse_recopy": "Inv Reverse ReCopy", "dedupe": "DeDupe", "posretrieve": "PosRetrieve",
    "lookup": "Lookup", "reverse_lookup": "Reverse Lookup", "noisy_lookup": "Noisy Lookup",
    "scan": "SCAN (length split)", "cfq": "CFQ (length split)",
    "raffel_add": "Addition (Raffel & Ellis)", "raffel_mul": "Multiplication (Raffel & Ellis)",
}


def task_label(key: str) -> str:
    """The paper's name of a task key (a plugin's: its registered label); the key itself when it
    has none."""
    if key in TASK_LABELS:
        return TASK_LABELS[key]
    try:
        return registry.get("task", key).label
    except registry.UnknownNameError:
        return key
