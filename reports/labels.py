"""Row labels: the papers' names for variant keys, looked up once (the lowest floor of ``reports``)."""

from __future__ import annotations

from locattn.variants import PAPER_LABELS


def paper_label(key: str) -> str:
    """Row label: the paper's name for a variant key (``locattn.variants.PAPER_LABELS``)."""
    return PAPER_LABELS.get(key, key)


__all__ = ["paper_label"]
