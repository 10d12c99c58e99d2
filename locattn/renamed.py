"""Names that changed: a config field's former dotted path -> its current one. Standard library
only, so that the run record (:mod:`record.schema`) reads it without loading the config layer.

:mod:`locattn.config` applies it (a spec, a saved ``study.json`` or ``config.json`` naming a
former path loads as the current one; run identities keep the former path); :mod:`record.schema`
renames a record's params by it. This module is its one owner.
"""

from __future__ import annotations

import types
from typing import Mapping

#: Config fields whose dotted path changed: former path -> current path. A :class:`RunConfig`
#: mapping or override set that names a field by its former path (a spec, a saved ``study.json``
#: or ``config.json``) loads as if it named the current one, and
#: :func:`locattn.config.identity_dict` keys the field by its former path, so the run identities
#: made before the change stand.
RENAMED_FIELDS: Mapping[str, str] = types.MappingProxyType({
    "optim.attn_loss_steps": "eval.attn_loss_steps",
    "optim.attn_loss_decode": "eval.attn_loss_decode",
    "optim.raffel_protocol": "eval.regression_protocol",
})
