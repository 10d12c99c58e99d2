"""Packed runs: K replicas of one cell trained in one process as one vectorized model.

The public names of :mod:`locattn.training.packed` (the driver) and
:mod:`locattn.training.epoch` (the shared training pass); see those modules.
"""

from __future__ import annotations

from locattn.training.epoch import (
    ParamPack,
    ReplicaFailed,
    epoch_dropout_noise,
    packed_train_epoch,
    solo_train_epoch,
)
from locattn.training.packed import PACKABLE_FAMILIES, PACKABLE_FIELDS, SWITCH_FIELDS, check_packable, train_packed

__all__ = [
    "PACKABLE_FAMILIES",
    "PACKABLE_FIELDS",
    "ParamPack",
    "ReplicaFailed",
    "SWITCH_FIELDS",
    "check_packable",
    "epoch_dropout_noise",
    "packed_train_epoch",
    "solo_train_epoch",
    "train_packed",
]
