"""Registries of attenders, tasks, variants and metrics: names, labels and docs (standard library only).

Every built-in attention family, task, variant preset and metric registers here through the same
public functions a plugin calls, so there is no privileged list::

    import locattn
    locattn.register_attender("localp", "my_pkg.attn:build", label="Local-p",
                              doc="Luong et al. (2015) local-p attention", options=check_options)
    locattn.register_variant("localp", label="Local-p", parent="content",
                             delta={"attention.family": "localp"})

A registration is plain data: a name, a paper-style label, a docstring and, for attenders, tasks
and metrics, a *target*, the object itself or a lazy ``"module:attr"`` path imported on first
use. So the registry, and every config check that reads it, needs no torch.

Plugins are found two ways: installed distributions that declare an
entry point in the group ``locattn.plugins`` (loaded on the first lookup that misses, and by every
listing), and module names that a study spec's ``plugins:`` key or ``--plugin`` names
(:func:`import_plugins`). A plugin that fails to import raises :class:`PluginError`, one line
naming the plugin and the cause.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.metadata
import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping

KINDS = ("attender", "task", "variant", "metric", "table")
"""The kinds of registered objects."""
ENTRY_POINT_GROUP = "locattn.plugins"
"""The entry-point group an installed plugin distribution declares (its value: a module, or
``module:function`` called with no arguments)."""
BUILTIN = "locattn"
"""The plugin name of the built-ins (their targets live in the ``locattn`` package)."""

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class PluginError(Exception):
    """A plugin that cannot be imported or registers something wrong; the message is one line
    naming the plugin (or the registered name) and the cause."""


class UnknownNameError(KeyError, ValueError):
    """An unregistered name; the message lists the valid names and a close match."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True)
class Entry:
    """One registered object: its kind, name, paper-style label, docstring and target."""

    kind: str
    """One of :data:`KINDS`."""
    name: str
    """The key configs and specs use (``attention.family``, ``task.name``, ``variant``)."""
    label: str
    """The paper-style name tables and figures print."""
    doc: str
    """What it is, with its source (a paper or a repository)."""
    target: Any = None
    """The object (a factory, a loader, a function) or a lazy ``"module:attr"`` path; None for
    a variant, which is data."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Kind-specific data: attenders ``model_kind``, ``packable``, ``stacked``, ``options``; tasks ``kind``,
    ``defaults``, ``data_version``; variants ``parent``, ``delta``."""

    @property
    def module(self) -> str:
        """The module its target lives in (for a variant: the module that registered it)."""
        if isinstance(self.target, str):
            return self.target.partition(":")[0]
        if self.kind == "table":  # a table is data: its module is the one that registered it
            return str(self.meta.get("registered_by", ""))
        if self.target is not None:
            return getattr(self.target, "__module__", "") or ""
        return str(self.meta.get("registered_by", ""))

    @property
    def plugin(self) -> str:
        """The top-level package it comes from: :data:`BUILTIN` for the built-ins."""
        return self.module.split(".")[0]

    @property
    def builtin(self) -> bool:
        """True for the package's own registrations."""
        return self.plugin == BUILTIN

    def load(self) -> Any:
        """The target, imported on first use when it is a ``"module:attr"`` path."""
        if not isinstance(self.target, str):
            return self.target
        module, _, attr = self.target.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - any failure is the plugin's, reported in one line
            raise PluginError(f"{self.kind} {self.name!r}: cannot load {self.target!r}: "
                              f"{type(exc).__name__}: {_one_line(exc)}") from exc
        return obj


_ENTRIES: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
_ENTRY_POINTS_LOADED = [False]
#: The torch-free module that registers each kind's built-ins, imported on the kind's first
#: lookup, so a reader of the registry (the reports' tolerances, ``study status``) sees them
#: whatever it imported before.
BUILTIN_MODULES = {"metric": "locattn.metric_names", "task": "locattn.tasks.config",
                   "table": "locattn.table_defs"}


def _builtins(kind: str) -> None:
    module = BUILTIN_MODULES.get(kind)
    if module is not None and module not in sys.modules:
        importlib.import_module(module)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _caller_module() -> str:
    frame = inspect.currentframe()
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return str(frame.f_globals.get("__name__", "")) if frame is not None else ""


def _register(kind: str, name: str, target: Any, label: str, doc: str,
              meta: dict[str, Any]) -> Entry:
    if not isinstance(name, str) or not _NAME.match(name):
        raise PluginError(f"register_{kind}: name {name!r} must be lower-case letters, digits and "
                          "underscores, starting with a letter")
    if not isinstance(label, str) or not label:
        raise PluginError(f"register_{kind}({name!r}): label must be a non-empty string")
    if isinstance(target, str) and ":" not in target:
        raise PluginError(f"register_{kind}({name!r}): target {target!r} must be an object or a "
                          "'module:attr' path")
    meta.setdefault("registered_by", _caller_module())
    entry = Entry(kind=kind, name=name, label=label, doc=inspect.cleandoc(doc or ""),
                  target=target, meta=MappingProxyType(meta))
    old = _ENTRIES[kind].get(name)
    if old is not None:
        if (old.target, old.label, dict(old.meta)) == (entry.target, entry.label, dict(entry.meta)):
            return old  # the same module imported twice (a driver, then a worker's re-import)
        raise PluginError(f"{kind} {name!r} is already registered by {old.module or old.plugin!r}; "
                          "pick another name")
    _ENTRIES[kind][name] = entry
    return entry


def register_attender(name: str, target: Any, *, label: str, doc: str = "",
                      model_kind: str = "seq2seq", packable: bool = True, stacked: bool = False,
                      options: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
                      ) -> Entry:
    """Register an attention family ``name`` (the value of ``model.attention.family``).

    ``target`` (an object or a lazy ``"module:attr"`` path) is called as
    ``target(cfg, query_size=, key_size=, dim=, total_batches=)`` with the run's
    :class:`locattn.models.config.AttentionConfig` and returns the attender, an ``nn.Module``
    (:class:`locattn.models.attention.Attender` documents its methods); a target object whose
    signature cannot take that call is refused here, a lazy one when a launch loads it.
    ``options``, a torch-free function, checks ``model.attention.options`` at config time: it
    returns the options (with defaults filled in or not) or raises ``ValueError``; without it an
    attender takes no options. ``packable`` (default True): K runs of one cell may train as one
    pack (``pack_seeds``, ``pack``, a GPU spec); False trains every run solo. ``stacked``: the
    modules are written for stacked (K, ...) parameters, every weight applied through
    :mod:`locattn.models.functional` (the built-ins' fast path); by default the attender is an
    ordinary module and a pack runs it per replica through ``torch.func``.
    ``model_kind``: ``seq2seq`` or ``regressor``.
    """
    if model_kind not in ("seq2seq", "regressor"):
        raise PluginError(f"register_attender({name!r}): model_kind={model_kind!r}; valid: "
                          "['seq2seq', 'regressor']")
    if not isinstance(target, str) and model_kind == "seq2seq":
        problem = attender_signature_problem(target)
        if problem:
            raise PluginError(f"register_attender({name!r}): {problem}")
    return _register("attender", name, target, label, doc,
                     {"model_kind": model_kind, "packable": bool(packable), "stacked": bool(stacked),
                      "options": options})


ATTENDER_CALL = "target(cfg, *, query_size, key_size, dim, total_batches)"
"""How a seq2seq attender's target is called (:func:`register_attender`)."""


def attender_signature_problem(target: Any) -> str:
    """Why ``target`` cannot be called as :data:`ATTENDER_CALL`, in one line; ``""`` when it can
    (or when its signature cannot be read, as for some builtins)."""
    if not callable(target):
        return f"target {target!r} is not callable; expected a class or function called as {ATTENDER_CALL}"
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return ""
    try:
        sig.bind(None, query_size=1, key_size=1, dim=1, total_batches=1)
    except TypeError as exc:
        what = getattr(target, "__qualname__", repr(target))
        return (f"target {what}{sig} cannot be called as {ATTENDER_CALL} ({_one_line(exc)}); "
                "give its __init__ that signature")
    return ""


def register_task(name: str, target: Any, *, label: str, doc: str = "", kind: str = "seq2seq",
                  defaults: Mapping[str, Any] | None = None, data_version: int = 1) -> Entry:
    """Register a task ``name`` (the value of ``task.name``).

    ``target`` (an object or a lazy ``"module:attr"`` path) is called as
    ``target(cfg, cache_dir=, use_cache=)`` with the run's :class:`locattn.tasks.TaskConfig`
    and returns a :class:`locattn.tasks.TaskData` (``kind`` ``seq2seq``) or a regression task
    (``kind`` ``regression``). ``defaults`` are dotted ``RunConfig`` overrides applied before a
    spec's (``{"task.dev_size": 1000}``). ``data_version``: bump it when the same config starts
    to yield other examples; from 2 on it is part of the run identity.
    """
    if kind not in ("seq2seq", "regression"):
        raise PluginError(f"register_task({name!r}): kind={kind!r}; valid: ['seq2seq', 'regression']")
    if not isinstance(data_version, int) or data_version < 1:
        raise PluginError(f"register_task({name!r}): data_version must be an int >= 1")
    return _register("task", name, target, label, doc,
                     {"kind": kind, "defaults": MappingProxyType(dict(defaults or {})),
                      "data_version": data_version})


def register_variant(name: str, *, label: str, parent: str | None = None,
                     delta: Mapping[str, Any] | None = None, doc: str = "") -> Entry:
    """Register a named model preset: ``parent``'s model (None: ``ModelConfig()``) with the dotted
    ``delta`` applied (``{"attention.family": "localp", "attention.options": {"width": 5}}``).
    The parent and the delta are checked when the preset is first built
    (:func:`locattn.get_variant`); options for an attender already registered without an
    ``options`` function are refused here."""
    family = (delta or {}).get("attention.family")
    if (delta or {}).get("attention.options") and isinstance(family, str):
        att = _ENTRIES["attender"].get(family)
        if att is not None and att.meta["options"] is None:
            raise PluginError(f"register_variant({name!r}): delta sets attention.options="
                              f"{dict(delta['attention.options'])!r}, but attender {family!r} "
                              f"(from {att.module or att.plugin!r}) takes no options; register it "
                              "with options= (a function that checks them) or drop them")
    return _register("variant", name, None, label, doc,
                     {"parent": parent, "delta": MappingProxyType(dict(delta or {}))})


@dataclass(frozen=True)
class Tolerance:
    """How close a reproduction must come to a published number to agree with it (the
    agreement counts of ``reports --compare``), in the metric's displayed unit (percent for a
    ``percent`` metric).

    ``kind``: ``points``, ``|ours - paper| <= amount``; ``relative``,
    ``|ours - paper| <= amount * |paper|``; ``factor``, the larger of the two at most ``amount``
    times the smaller (a count from 1 up); ``per_token``, ``|ours - paper| <= amount * length``
    with ``length`` the column's target length in tokens, or ``<= fallback`` for a column
    without one. ``rule``: the sentence reports print beside the count.
    """

    kind: str
    amount: float
    rule: str = ""
    fallback: float | None = None

    KINDS = ("points", "relative", "factor", "per_token")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise PluginError(f"Tolerance kind={self.kind!r}; valid: {list(self.KINDS)}")
        if not isinstance(self.amount, (int, float)) or not self.amount > 0:
            raise PluginError(f"Tolerance({self.kind!r}) amount={self.amount!r} must be a number > 0")
        if self.kind == "per_token" and self.fallback is None:
            raise PluginError("Tolerance('per_token') needs a fallback for columns without a length")

    def agrees(self, paper: float, diff: float, *, length: float | None = None) -> bool:
        """Whether ours, ``paper + diff``, agrees with ``paper`` (both in the displayed unit);
        ``length``: the column's target length in tokens (``per_token``), None when unknown."""
        if self.kind == "points":
            return abs(diff) <= self.amount
        if self.kind == "relative":
            return abs(diff) <= self.amount * abs(paper)
        if self.kind == "factor":
            ours = paper + diff
            return max(ours, paper) <= self.amount * min(ours, paper)
        if length is None:
            return abs(diff) <= float(self.fallback or 0.0)
        return abs(diff) <= self.amount * float(length)


#: The default agreement tolerance of a metric that names none: 10 in its displayed unit
#: (10 points of a percent metric).
DEFAULT_TOLERANCE = Tolerance("points", 10.0, "within 10 points (accuracy in %)")
METRIC_SCALES = ("percent", "raw")
"""``percent``: a fraction in [0, 1] in the record, shown x 100 in tables; ``raw``: shown as is."""
METRIC_RECORDS = ("split", "run", "artifact")
"""Where a metric is recorded: ``split``, MLflow metric ``test.<split>.<key>`` per test split;
``run``, metric ``<key>`` once per run; ``artifact``, in the run's ``result.json`` only."""
RESERVED_METRIC_KEYS = ("n",)
"""Keys of a split's record that are not metrics (``n``: the split's example count)."""


def register_metric(name: str, target: Any, *, label: str, doc: str = "",
                    direction: str = "max", scale: str = "percent", accuracy: bool = False,
                    tolerance: Tolerance | None = None, task_kind: str = "seq2seq",
                    tasks: tuple[str, ...] | list[str] | None = None, key: str | None = None,
                    record: str = "split", computed_by: str = "predictions") -> Entry:
    """Register a metric ``name``: how it is computed, recorded, compared and shown.

    ``target`` (an object or a lazy ``"module:attr"`` path) computes the metric. With
    ``computed_by="predictions"`` (every plugin metric) the trainer calls it once per test
    split of every seq2seq run, after greedy decoding::

        target(pred, gold, *, eos_id) -> float

    ``pred``: the B greedy outputs, each a list of token ids (the task's vocabulary) ending with
    its first ``eos_id``, or cut at the split's decode cap without one (the model never stopped);
    ``gold``: the B targets, each a list of token ids ending with ``eos_id``. The lists are
    ragged, never padded (``locattn.metrics`` functions also take (B, T) tensors padded with
    ``eos_id``). It returns one number for the split (a mean over its B examples), as a
    fraction in [0, 1] for a ``percent`` metric; ``nan`` where undefined. The trainer records
    it as the MLflow metric ``test.<split>.<key>`` (``key`` defaults to ``name``), so it is in
    the run's ``result.json``, ``study status`` and a table whose ``metric`` names it.
    ``computed_by="trainer"``: a built-in the training loop computes itself (attnLoss from the
    decoder's attention, the Raffel & Ellis accuracy, epochs to 100 %); the target is the
    function it uses.

    ``direction``: ``max`` (higher is better) or ``min``. ``scale``: ``percent`` or ``raw``
    (:data:`METRIC_SCALES`). ``accuracy``: the value is an accuracy in percent (the reports'
    non-trivial agreement count applies: :func:`is_accuracy`). ``tolerance``: how close a
    reproduction must come to a published number (:class:`Tolerance`; default
    :data:`DEFAULT_TOLERANCE`). ``task_kind``: ``seq2seq`` or ``regression``, the tasks it
    applies to; ``tasks``: only these task names (None: every task of the kind). ``record``:
    :data:`METRIC_RECORDS`. Raises :class:`PluginError` on a bad value, naming it.
    """
    where = f"register_metric({name!r})"
    choices = {"direction": (direction, ("max", "min")), "scale": (scale, METRIC_SCALES),
               "task_kind": (task_kind, ("seq2seq", "regression")),
               "record": (record, METRIC_RECORDS),
               "computed_by": (computed_by, ("predictions", "trainer"))}
    for arg, (value, valid) in choices.items():
        if value not in valid:
            raise PluginError(f"{where}: {arg}={value!r}; valid: {list(valid)}")
    if tolerance is not None and not isinstance(tolerance, Tolerance):
        raise PluginError(f"{where}: tolerance must be a locattn.registry.Tolerance, got "
                          f"{type(tolerance).__name__}")
    key = name if key is None else key
    if not isinstance(key, str) or not _NAME.match(key) or key in RESERVED_METRIC_KEYS:
        raise PluginError(f"{where}: key {key!r} must be lower-case letters, digits and "
                          f"underscores, and not one of {list(RESERVED_METRIC_KEYS)}")
    if computed_by == "predictions" and (task_kind, record) != ("seq2seq", "split"):
        raise PluginError(f"{where}: a metric computed from predictions is a seq2seq split metric "
                          "(task_kind='seq2seq', record='split')")
    meta = {"direction": direction, "scale": scale, "accuracy": bool(accuracy),
            "tolerance": tolerance or DEFAULT_TOLERANCE, "task_kind": task_kind,
            "tasks": tuple(tasks) if tasks is not None else None, "key": key, "record": record,
            "computed_by": computed_by}
    registered_by = _caller_module()
    if computed_by == "trainer" and registered_by.split(".")[0] != BUILTIN:
        raise PluginError(f"{where}: computed_by='trainer' is for the built-ins; a plugin metric is "
                          "computed from predictions (computed_by='predictions')")
    for other in _ENTRIES["metric"].values():
        if other.name != name and other.meta.get("key") == key:
            raise PluginError(f"{where}: key {key!r} is already the key of metric {other.name!r}")
    return _register("metric", name, target, label, doc, meta)


def metric(name_or_key: str, *, where: str = "") -> Entry:
    """The metric registered as ``name_or_key``, else the one recording under that key (a
    table's ``metric`` is a record key: ``accuracy`` is the Raffel & Ellis metric
    ``raffel_accuracy``); :class:`UnknownNameError` naming the valid names otherwise."""
    found = entries("metric")
    if name_or_key in found:
        return found[name_or_key]
    for entry in found.values():
        if entry.meta.get("key") == name_or_key:
            return entry
    return get("metric", name_or_key, where=where)


def is_accuracy(name_or_key: str) -> bool:
    """Whether the metric (by name or record key) is an accuracy in percent: what the reports'
    non-trivial agreement count and the count of accuracy cells read; False for an
    unregistered name."""
    try:
        return bool(metric(name_or_key).meta.get("accuracy"))
    except UnknownNameError:
        return False


def split_metrics_for(task_kind: str, task: str | None = None) -> list[Entry]:
    """The metrics the trainer computes from predictions for a test split of a task of
    ``task_kind`` named ``task`` (None: any), in registration order (built-ins first)."""
    out = []
    for entry in entries("metric").values():
        m = entry.meta
        if m.get("computed_by") != "predictions" or m.get("task_kind") != task_kind:
            continue
        if task is not None and m.get("tasks") is not None and task not in m["tasks"]:
            continue
        out.append(entry)
    return out


def unregister(kind: str, name: str) -> Entry:
    """Remove the registration ``name`` of ``kind`` and return it: a notebook that re-defines its
    plugin, or a test that registers one for its own duration. :class:`UnknownNameError` when
    it is not registered."""
    entry = get(kind, name)
    del _ENTRIES[kind][name]
    return entry


def register_table(table_id: str, target: Any, *, label: str, doc: str = "",
                   exhibit: bool = False) -> Entry:
    """Register a report table ``table_id`` (what a study spec's ``tables:`` names).

    ``target``: a :class:`locattn.table_defs.TableDef` whose ``id`` is ``table_id`` (rows =
    variants, columns = tasks x test splits, the metric a registered one), or a lazy
    ``"module:attr"`` path to one. ``exhibit``: a
    qualitative exhibit the reports write from the runs' artifacts (target None). ``label``:
    its source (``Ray Chowdhury & Caragea (2023), Table 2``); ``doc``: its title. A study that
    names a plugin's table records its definition (a report needs no plugin to build it)."""
    if exhibit:
        if target is not None:
            raise PluginError(f"register_table({table_id!r}): an exhibit has no target")
    elif target is None:
        raise PluginError(f"register_table({table_id!r}): target must be a TableDef or a "
                          "'module:attr' path to one")
    elif not isinstance(target, str) and getattr(target, "id", table_id) != table_id:
        raise PluginError(f"register_table({table_id!r}): the TableDef's id is {target.id!r}")
    return _register("table", table_id, target, label, doc, {"exhibit": bool(exhibit)})


# --------------------------------------------------------------------------- lookups


def unknown_message(kind: str, name: Any, where: str = "", names: list[str] | None = None) -> str:
    """One line for an unregistered name: what was given, a close match, the valid names."""
    valid = names if names is not None else list(entries(kind))
    close = difflib.get_close_matches(str(name), valid, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    at = f" ({where})" if where else ""
    return f"unknown {kind} {name!r}{at}.{hint} Valid: {', '.join(valid)}"


def get(kind: str, name: str, *, where: str = "") -> Entry:
    """The entry ``name`` of ``kind``; a miss loads installed plugins once, then raises
    :class:`UnknownNameError` naming the valid names (``where``: the config key to name)."""
    _builtins(kind)
    found = _ENTRIES[kind].get(name) if isinstance(name, str) else None
    if found is None and not _ENTRY_POINTS_LOADED[0]:
        load_entry_points()
        found = _ENTRIES[kind].get(name) if isinstance(name, str) else None
    if found is None:
        raise UnknownNameError(unknown_message(kind, name, where))
    return found


def has(kind: str, name: str) -> bool:
    """Whether ``name`` is registered (loading installed plugins on a miss)."""
    try:
        get(kind, name)
    except UnknownNameError:
        return False
    return True


def entries(kind: str, *, discover: bool = True) -> dict[str, Entry]:
    """{name: entry} of ``kind`` in registration order (built-ins first); ``discover`` loads
    installed plugins first."""
    if kind not in KINDS:
        raise UnknownNameError(unknown_message("kind", kind, names=list(KINDS)))
    _builtins(kind)
    if discover and not _ENTRY_POINTS_LOADED[0]:
        load_entry_points()
    return dict(_ENTRIES[kind])


class View(Mapping[str, Any]):
    """A live, read-only {name: ``read(entry)``} view of one kind, in registration order
    (``locattn.variants.PAPER_LABELS``: the variants' labels; ``VARIANT_PARENTS``: their parents)."""

    def __init__(self, kind: str, read: Callable[[Entry], Any] = lambda e: e.label) -> None:
        self._kind, self._read = kind, read

    def __getitem__(self, name: str) -> Any:
        try:
            return self._read(get(self._kind, name))
        except UnknownNameError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(entries(self._kind))

    def __len__(self) -> int:
        return len(entries(self._kind))

    def __repr__(self) -> str:
        return f"View({dict(self)!r})"


# --------------------------------------------------------------------------- plugins


def _source_files(module: Any) -> list[Path]:
    path = getattr(module, "__file__", None)
    if not path:
        return []
    path = Path(path)
    if path.name == "__init__.py":
        return sorted(p for p in path.parent.rglob("*.py") if "__pycache__" not in p.parts)
    return [path]


def source_sha256(module_name: str) -> str:
    """sha256 over the source of an imported module (of every ``.py`` file of a package, by
    relative path and content); ``""`` when it has no source file."""
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    files = _source_files(module)
    if not files:
        return ""
    root = files[0].parent if len(files) == 1 else Path(module.__file__).parent
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def distribution_of(module_name: str) -> tuple[str, str]:
    """(distribution name, version) that installs ``module_name``'s top-level package; ``("", "")``
    for code that is only on ``sys.path``."""
    top = module_name.split(".")[0]
    try:
        dists = importlib.metadata.packages_distributions().get(top, [])
        if dists:
            return dists[0], importlib.metadata.version(dists[0])
    except Exception:  # noqa: BLE001 - broken metadata of an unrelated distribution
        pass
    return "", ""


def provenance(module_name: str) -> dict[str, str]:
    """{"module", "distribution", "version", "sha256"} of a plugin's top-level package."""
    top = module_name.split(".")[0]
    dist, ver = distribution_of(top)
    return {"module": top, "distribution": dist, "version": ver, "sha256": source_sha256(top)}


def import_plugins(modules: list[str] | tuple[str, ...], *, source: str = "plugins") -> None:
    """Import each module (a plugin registers on import); a failure raises :class:`PluginError`
    naming the module, ``source`` (where it was named) and the cause, in one line."""
    for name in modules:
        if not isinstance(name, str) or not re.match(r"^[A-Za-z_][\w.]*$", name):
            raise PluginError(f"{source}: {name!r} is not an importable module name")
        try:
            importlib.import_module(name)
        except PluginError as exc:
            raise PluginError(f"{source}: plugin {name!r}: {exc}") from exc
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a plugin is a failure too
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise PluginError(f"{source}: plugin {name!r} failed to import: "
                              f"{type(exc).__name__}: {_one_line(exc)}") from exc


def load_entry_points() -> None:
    """Import every installed plugin of the group :data:`ENTRY_POINT_GROUP` (once)."""
    _ENTRY_POINTS_LOADED[0] = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if callable(obj) and not inspect.ismodule(obj):
                obj()
        except PluginError as exc:
            raise PluginError(f"entry point {ep.name!r} ({ep.value}): {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - reported in one line
            raise PluginError(f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP} "
                              f"failed: {type(exc).__name__}: {_one_line(exc)}") from exc


def installed_plugins() -> dict[str, str]:
    """{entry point name: its module} of the installed plugins (no import)."""
    return {ep.name: ep.value.partition(":")[0]
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "Entry",
    "KINDS",
    "DEFAULT_TOLERANCE",
    "METRIC_RECORDS",
    "METRIC_SCALES",
    "PluginError",
    "Tolerance",
    "UnknownNameError",
    "View",
    "attender_signature_problem",
    "distribution_of",
    "entries",
    "get",
    "has",
    "import_plugins",
    "installed_plugins",
    "is_accuracy",
    "load_entry_points",
    "metric",
    "provenance",
    "register_attender",
    "register_metric",
    "register_table",
    "register_task",
    "register_variant",
    "source_sha256",
    "split_metrics_for",
    "unknown_message",
    "unregister",
]
