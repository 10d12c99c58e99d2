"""locattn: location-based attention for length generalisation (torch only)."""

from locattn.variants import PAPER_LABELS, get_variant, list_variants

__all__ = ["PAPER_LABELS", "get_variant", "list_variants"]
__version__ = "0.1.0"
