"""A study as ``study.json`` saves it: :class:`StudyMeta`, the one typed value every ``study``
module takes, read from and written to JSON here and nowhere else; and :class:`DriverOptions`,
how one launch or resume runs (never saved but its train path).

The file's record format (``format``) and the upgrade of an older one are :mod:`study.recording.migrate`'s:
:meth:`StudyMeta.from_json` takes a document already upgraded to :data:`FORMAT_VERSION`, and
:meth:`StudyMeta.to_json` writes that version. The file itself is read, checked and written
atomically by :mod:`study.recording.folder`. Standard library, ``locattn.config`` and ``study.recording.migrate`` only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from locattn.config import (  # the training step a study takes unless it chose another, saved only then
    DEFAULT_TRAIN_PATH, saved_train_path, train_path_entry)
from study.recording.migrate import FORMAT_KEY, FORMAT_VERSION

#: study.json's keys, in the order they are written. ``set`` is :attr:`StudyMeta.sets`.
KNOWN_KEYS = ("name", "spec_path", "profile", "only", "seeds", "set", "train_path", "raw", "resolved",
              "tracking_uri", "plugin_sources", "created")


@dataclass(frozen=True, kw_only=True)
class StudyMeta:
    """What a study saved at launch (and its later launches, resumes and migrations changed).

    Frozen: a change is a new value (:meth:`replace`) written by :func:`study.recording.folder.write_meta`.
    The optional keys are written only when they differ from their default, so a study saved
    before a key existed reads and writes back the same document.
    """

    #: The study's name: its folder under ``--root`` and its MLflow experiment.
    name: str
    #: The spec file it was launched from (absolute when launched by ``study launch``).
    spec_path: str
    #: The spec's profile (None: the spec has none).
    profile: str | None
    #: The spec's YAML as read at the last launch, with ``--set`` applied: what a resume rebuilds.
    raw: dict[str, Any]
    #: The resolved spec (:attr:`study.spec.StudySpec.resolved`), compared by a relaunch.
    resolved: dict[str, Any]
    #: Where the study records its runs: an MLflow tracking URI, without credentials.
    tracking_uri: str
    #: ``--only``: grid axis -> the values run ({}: the whole grid).
    only: dict[str, list] = field(default_factory=dict)
    #: ``--seeds`` in place of the profile's: a count or a list (None: the profile's).
    seeds: int | list[int] | None = None
    #: ``--set KEY=VALUE`` overrides given at launch or resume (dotted key -> value).
    sets: dict[str, Any] = field(default_factory=dict)
    #: How the runs' training step runs (``--train-path``): operational, no part of a run's identity.
    train_path: str = DEFAULT_TRAIN_PATH
    #: A hash of each plugin's source (module -> hash) at launch: a resume refuses changed code.
    plugin_sources: dict[str, str] = field(default_factory=dict)
    #: When it was launched (seconds since the epoch; None in a document that lacks it).
    created: float | None = None
    #: Keys of the document this code does not know, written back as they were.
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StudyMeta:
        """The study of a ``study.json`` document in the current record format (read through
        :func:`study.recording.migrate.upgrade_meta`; its ``format`` key is not kept)."""
        extra = {k: v for k, v in doc.items() if k not in KNOWN_KEYS and k != FORMAT_KEY}
        return cls(name=doc["name"], spec_path=doc["spec_path"], profile=doc["profile"], raw=doc["raw"],
                   resolved=doc["resolved"], tracking_uri=doc["tracking_uri"], only=doc.get("only") or {},
                   seeds=doc.get("seeds"), sets=doc.get("set") or {},
                   train_path=saved_train_path(doc),
                   plugin_sources=doc.get("plugin_sources") or {}, created=doc.get("created"), extra=extra)

    def to_json(self) -> dict[str, Any]:
        """The ``study.json`` document, in the current record format: the keys in
        :data:`KNOWN_KEYS` order, the optional ones only when set, then :attr:`extra`, then ``format``."""
        doc: dict[str, Any] = {"name": self.name, "spec_path": self.spec_path, "profile": self.profile,
                               "only": self.only}
        if self.seeds is not None:
            doc["seeds"] = self.seeds
        if self.sets:
            doc["set"] = dict(self.sets)
        doc.update(train_path_entry(self.train_path))
        doc.update(raw=self.raw, resolved=self.resolved, tracking_uri=self.tracking_uri)
        if self.plugin_sources:
            doc["plugin_sources"] = self.plugin_sources
        if self.created is not None:
            doc["created"] = self.created
        return {**doc, **self.extra, FORMAT_KEY: FORMAT_VERSION}

    def replace(self, **changes: Any) -> StudyMeta:
        """A copy with ``changes`` (field name -> value)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, kw_only=True)
class DriverOptions:
    """The operational choices of one launch or resume (``study launch``/``resume``'s options):
    none is part of the study or of a run's identity. Each field's default is the one default of
    that choice (:func:`study.driver.launch.launch`, :func:`study.driver.launch.resume` and the command line take it).
    The time limit (a deadline taken when the call starts) and the train path (saved in the
    study's :class:`StudyMeta`) are not here: neither has a default but "none given"."""

    #: The Ray cluster to join (``auto``, ``ray://head:10001``); None: a private local Ray on 127.0.0.1.
    address: str | None = None
    #: Most trials at once; None: the spec's ``max_concurrent`` (0: as many as the CPUs allow).
    max_concurrent: int | None = None
    #: Seconds between progress lines.
    progress_seconds: float = 10.0
