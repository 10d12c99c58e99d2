"""locattn: location-based attention for length generalisation (torch only).

``register_attender``, ``register_task``, ``register_variant``, ``register_metric`` and ``register_table`` are the
plugin API (:mod:`locattn.registry`, standard library only).
"""

from typing import Any

from locattn.registry import (
    PluginError,
    import_plugins,
    register_attender,
    register_metric,
    register_table,
    register_task,
    register_variant,
)

_VARIANTS = ("PAPER_LABELS", "get_variant", "list_variants")
__all__ = [*_VARIANTS, "PluginError", "import_plugins", "register_attender", "register_metric",
           "register_table", "register_task", "register_variant"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The registry builds every variant's ModelConfig (30-130 ms): load it on first use, so that
    # a light module such as ``locattn.training.files`` (read by ``study status``) stays light.
    if name in _VARIANTS:
        from locattn import variants  # see above

        return getattr(variants, name)
    raise AttributeError(f"module 'locattn' has no attribute {name!r}")
