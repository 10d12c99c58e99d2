"""Packed runs: K replicas (seeds, learning rates, ablation switches) trained in one process as
one vectorized model.

The public names of :mod:`locattn.training.packed` (the driver), :mod:`locattn.training.epoch`
(the shared training pass), :mod:`locattn.training.memory` (the device memory of a graphed
pack) and :mod:`locattn.packable` (which runs pack: the judge and the
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
from locattn.training.memory import PackMemory, pack_memory, run_pack_memory, split_bytes
from locattn.training.packed import PACKABLE_FAMILIES, PACKABLE_FIELDS, train_packed

__all__ = [
    "PACKABLE_FAMILIES",
    "PACKABLE_FIELDS",
    "PackMemory",
    "ParamPack",
    "ReplicaFailed",
    "SWITCH_FIELDS",
    "check_packable",
    "epoch_dropout_noise",
    "pack_groups",
    "pack_memory",
    "packed_train_epoch",
    "run_pack_memory",
    "solo_train_epoch",
    "split_bytes",
    "train_packed",
]
