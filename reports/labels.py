"""Row labels: the papers' names for variant keys, looked up once (the lowest floor of ``reports``)."""

from __future__ import annotations

_LABELS: dict[str, str] | None = None


def paper_label(key: str) -> str:
    """Row label: the paper's name for a variant key (``locattn.variants.PAPER_LABELS``)."""
    global _LABELS
    if _LABELS is None:
        # imported on first use: locattn.variants pulls in locattn.models, hence torch, which
        # `reports list` and the SQL readers never need
        from locattn.variants import PAPER_LABELS

        _LABELS = dict(PAPER_LABELS)
    return _LABELS.get(key, key)


__all__ = ["paper_label"]
