"""Packed runs: K replicas (seeds, learning rates, ablation switches) trained in one process as
one vectorized model.

The public names of :mod:`locattn.training.packed` (the driver), :mod:`locattn.training.epoch`
(the shared training pass) and :mod:`locattn.packable` (which runs pack: the judge and the
grouping, without torch); see those modules.
"""

from __future__ import annotations

from locattn.packable import SWITCH_FIELDS, check_packable, pack_groups
from locattn.training.epoch import (
    ParamPack,
    ReplicaFailed,
    epoch_dropout_noise,
    packed_train_epoch,
    solo_train_epoch,
)
from locattn.training.packed import PACKABLE_FAMILIES, PACKABLE_FIELDS, train_packed

__all__ = [
    "PACKABLE_FAMILIES",
    "PACKABLE_FIELDS",
    "ParamPack",
    "ReplicaFailed",
    "SWITCH_FIELDS",
    "check_packable",
    "epoch_dropout_noise",
    "pack_groups",
    "packed_train_epoch",
    "solo_train_epoch",
    "train_packed",
]
