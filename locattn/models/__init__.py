"""Models: the recurrent seq2seq model with its attenders, and the Raffel & Ellis regressors.

``build_model(cfg, vocab_size, pad_id=, sos_id=, eos_id=) -> Seq2Seq`` and
``build_regressor(cfg)``; configs in :mod:`locattn.models.config`, named presets in
:mod:`locattn.variants`.
"""

from locattn.models.config import AttentionConfig, ModelConfig, SIZE_PRESETS, apply_size
from locattn.models.regressor import FeedForwardAttention, MeanPooling, build_regressor
from locattn.models.seq2seq import (
    AttentionTrace,
    DecoderState,
    GreedyOutput,
    Seq2Seq,
    Seq2SeqOutput,
    build_model,
)

__all__ = [
    "AttentionConfig",
    "AttentionTrace",
    "DecoderState",
    "FeedForwardAttention",
    "GreedyOutput",
    "MeanPooling",
    "ModelConfig",
    "SIZE_PRESETS",
    "Seq2Seq",
    "Seq2SeqOutput",
    "apply_size",
    "build_model",
    "build_regressor",
]
