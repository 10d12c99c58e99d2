"""Models: the recurrent seq2seq model with its attenders, and the Raffel & Ellis regressors.

``build_model(cfg, vocab_size, pad_id=, sos_id=, eos_id=) -> Seq2Seq`` and
``build_regressor(cfg)``; configs in :mod:`locattn.models.config`, named presets in
:mod:`locattn.variants`.

Configs import without torch (so listing variants or building a report table is cheap); the
modules, which need torch, load on first access.
"""

from importlib import import_module
from typing import Any

from locattn.models.config import SIZE_PRESETS, AttentionConfig, ModelConfig, apply_size

_LAZY = {
    "FeedForwardAttention": "locattn.models.regressor",
    "MeanPooling": "locattn.models.regressor",
    "build_regressor": "locattn.models.regressor",
    "AttentionTrace": "locattn.models.seq2seq",
    "DecoderState": "locattn.models.seq2seq",
    "GreedyOutput": "locattn.models.seq2seq",
    "Seq2Seq": "locattn.models.seq2seq",
    "Seq2SeqOutput": "locattn.models.seq2seq",
    "build_model": "locattn.models.seq2seq",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'locattn.models' has no attribute {name!r}")


__all__ = ["AttentionConfig", "ModelConfig", "SIZE_PRESETS", "apply_size", *_LAZY]
