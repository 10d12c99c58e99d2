"""The record format of a study folder, and its upgrades.

``study.json`` carries ``format``: :data:`FORMAT_VERSION` for a folder this code writes; absent
means format 0, so every ``study.json`` has a format. Every difference between an older format
and the current one is handled here, in :data:`MIGRATIONS`, and nowhere else: a study's
``study.json`` is upgraded in memory when it is read (:func:`upgrade_meta`), so the driver, the
status command and the reports see one format; ``study migrate`` (:func:`study.recording.folder.migrate`)
writes the upgrade to disk. Standard library only.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from locattn.folders import LEGACY_TRAIN_FN  # (format 2 names no trainer; 0 and 1 only this one)

#: The record format this code reads and writes.
FORMAT_VERSION = 2
#: ``study.json``'s key for it.
FORMAT_KEY = "format"


def _to_1(doc: dict[str, Any]) -> list[str]:
    """Format 0 -> 1: the optional keys a launch has always written get explicit values, so
    readers need no defaults of their own (``train_fn`` too, until format 2 dropped it)."""
    done = []
    if "only" not in doc:
        doc["only"] = {}
        done.append("only: {} (the whole grid)")
    return done


def _to_2(doc: dict[str, Any]) -> list[str]:
    """Format 1 -> 2: ``train_fn`` is gone (the code chooses the trainer). The default value is
    dropped; any other is refused (:class:`FormatError`): it was never imported from here."""
    if "train_fn" not in doc:
        return []
    value = doc.pop("train_fn")
    if value != LEGACY_TRAIN_FN:
        raise FormatError(f"train_fn {value!r}: a study folder does not choose its trainer (only "
                          f"{LEGACY_TRAIN_FN!r}, the one every study runs, is read; a custom trainer "
                          "is an installed plugin); nothing of it was imported")
    return [f"train_fn dropped (the code chooses the trainer: {LEGACY_TRAIN_FN})"]


#: ``MIGRATIONS[n]`` upgrades a ``study.json`` of format ``n`` to ``n + 1`` in place and says
#: what it changed, one item per change.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], list[str]]] = {0: _to_1, 1: _to_2}


class FormatError(ValueError):
    """A ``study.json`` whose format this code cannot read (newer, or not a format number)."""


def meta_format(doc: dict[str, Any]) -> int:
    """The record format of a ``study.json`` (0 when it has no ``format`` key)."""
    version = doc.get(FORMAT_KEY, 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise FormatError(f"{FORMAT_KEY}: {version!r} is not a record format (0 to {FORMAT_VERSION})")
    if version > FORMAT_VERSION:
        raise FormatError(f"{FORMAT_KEY} {version}: written by a newer locattn (this one reads formats "
                          f"0 to {FORMAT_VERSION}); upgrade locattn to use this study")
    return version


def upgrade_meta(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``doc`` upgraded to :data:`FORMAT_VERSION` (a copy; ``doc`` itself is unchanged), and
    what each step changed, as ``"format n -> n+1: <change>"`` lines."""
    version = meta_format(doc)
    out = copy.deepcopy(doc)
    log = []
    while version < FORMAT_VERSION:
        changes = MIGRATIONS[version](out)
        log.extend(f"format {version} -> {version + 1}: {c}" for c in changes or ["format number only"])
        version += 1
    out[FORMAT_KEY] = FORMAT_VERSION
    return out, log
