"""Row labels: the papers' names for variant keys, looked up once (the lowest floor of ``reports``).

A study launched with this code records its cells' labels in its parent run
(``locattn.labels``, :func:`study.spec.plugins.labels_tag`): :class:`StudyLabels` prints those first,
so a spec-only plugin's rows carry its own labels in a process that never imports it.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping

from locattn.labels import task_label
from locattn.variants import PAPER_LABELS


def paper_label(key: str) -> str:
    """Row label: the paper's name for a variant key (``locattn.variants.PAPER_LABELS``)."""
    return PAPER_LABELS.get(key, key)


class StudyLabels:
    """Variant and task labels of one study: the ones its launch recorded, else the registry's
    (built-ins and installed plugins), else the key itself."""

    def __init__(self, recorded: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self._recorded = {kind: dict((recorded or {}).get(kind) or {}) for kind in ("task", "variant")}

    @classmethod
    def from_tags(cls, tags: Iterable[str | None]) -> StudyLabels:
        """From the ``locattn.labels`` tag values of a study's parent runs (None and bad JSON,
        as an older store has, are skipped)."""
        merged: dict[str, dict[str, str]] = {"task": {}, "variant": {}}
        for tag in tags:
            try:
                data = json.loads(tag) if tag else {}
            except ValueError:
                continue
            for kind in merged:
                got = data.get(kind) if isinstance(data, dict) else None
                if isinstance(got, dict):
                    merged[kind].update({str(k): str(v) for k, v in got.items()})
        return cls(merged)

    def variant(self, key: str) -> str:
        """The variant's label (``onestep`` -> ``OneStepAttn``)."""
        return self._recorded["variant"].get(key) or paper_label(key)

    def task(self, key: str) -> str:
        """The task's label (``reverse_copy`` -> ``Reverse Copy``)."""
        return self._recorded["task"].get(key) or task_label(key)


__all__ = ["StudyLabels", "paper_label"]
