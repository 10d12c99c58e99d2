"""locattn: location-based attention for length generalisation (torch only)."""

from typing import Any

__all__ = ["PAPER_LABELS", "get_variant", "list_variants"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The registry builds every variant's ModelConfig (30-130 ms): load it on first use, so that
    # a light module such as ``locattn.training.files`` (read by ``study status``) stays light.
    if name in __all__:
        from locattn import variants  # see above

        return getattr(variants, name)
    raise AttributeError(f"module 'locattn' has no attribute {name!r}")
