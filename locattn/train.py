"""One training run: the public entry point ``train(cfg, out_dir)`` and what it returns.

The implementation lives in :mod:`locattn.training`, one floor per module (see its docstring);
this module names what users, the CLI, studies and benchmarks import. Besides ``train``: its
results and recorders, the run folder's file names, the trainer checkpoint as a caller that
keeps or moves it needs it (:func:`find_checkpoint`, :func:`remove_checkpoint`,
:func:`file_sha256`, :data:`CHECKPOINT_DIR`), and :data:`DEFAULT_UPDATES`, the updates per
epoch of a regression run that sets none (a cost model prices it).
"""

from __future__ import annotations

from locattn.training.attention import attention_record, longest_split, write_attention
from locattn.training.checkpoint import CheckpointMismatchError, file_sha256, find_checkpoint, remove_checkpoint
from locattn.training.compiles import share_compile_cache
from locattn.training.files import CHECKPOINT_DIR
from locattn.training.recorders import JsonlRecorder, MultiRecorder, NullRecorder, Recorder
from locattn.training.results import (
    ATTENTION_JSON,
    ATTENTION_PNG,
    BEST_MODEL_FILE,
    CONFIG_FILE,
    RESULT_FILE,
    NonFiniteLossError,
    RunResult,
    is_new_best,
    load_result,
    load_run_config,
)
from locattn.training.regression import DEFAULT_UPDATES
from locattn.training.run import train
from locattn.training.scoring import score_test_splits, split_metrics
from locattn.training.seq2seq import Seq2SeqRun

__all__ = [
    "ATTENTION_JSON",
    "ATTENTION_PNG",
    "BEST_MODEL_FILE",
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "CheckpointMismatchError",
    "DEFAULT_UPDATES",
    "JsonlRecorder",
    "MultiRecorder",
    "NonFiniteLossError",
    "NullRecorder",
    "RESULT_FILE",
    "Recorder",
    "RunResult",
    "Seq2SeqRun",
    "attention_record",
    "file_sha256",
    "find_checkpoint",
    "is_new_best",
    "load_result",
    "load_run_config",
    "share_compile_cache",
    "longest_split",
    "remove_checkpoint",
    "score_test_splits",
    "split_metrics",
    "train",
    "write_attention",
]
