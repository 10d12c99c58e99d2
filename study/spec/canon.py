"""Canonical config values: one value, one spelling. A value a spec (grid axis, ``hparams``,
search choice, override), ``--set`` or ``--only`` gives a config field is put in the form of the
field's type (:class:`locattn.config.RunConfig`'s annotations) before it is compared, hashed
into a cell id or run key, or recorded: ``1`` for a float field is ``1.0``, ``'3e-4'`` (YAML 1.1
reads an exponent without a dot as text) is ``0.0003``, ``2.0`` for an int field is ``2``, a list
field is a list of its items' canonical values. Two spellings of one value are then equal, so an
axis that lists both is refused as a duplicate, and a value written either way plans one cell.

Only lossless conversions are made: a value that does not fit its field (``1.5`` for an int,
``'abc'`` for a float, a non-finite number) is left as given, for the config checks to refuse with
their own message. A value of a field the config does not know (a plugin's ``options``, a
misspelt path) is left as given. A value already of its field's type is returned as it is, so
every committed spec keeps its cell ids and run keys (``test_run_keys.py``).
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import is_dataclass
from typing import Any, Literal, Mapping

from locattn.config import RunConfig
from locattn.renamed import RENAMED_FIELDS

_BOOL_TEXT = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.lru_cache(maxsize=4096)
def field_type(key: str) -> Any:
    """The annotated type of the :class:`RunConfig` field at dotted ``key`` (a former path of
    :data:`locattn.renamed.RENAMED_FIELDS` names its current field), or None when ``key`` names
    no typed field (a misspelt path, a key inside a plugin's ``options`` mapping)."""
    tp: Any = RunConfig
    for part in RENAMED_FIELDS.get(key, key).split("."):
        if not is_dataclass(tp):
            return None
        tp = _hints(tp).get(part)
        if tp is None:
            return None
    return tp


def type_name(tp: Any) -> str:
    """A short name of a field type for a message: ``float``, ``int``, ``list of int``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        return "list of " + (type_name(args[0]) if args else "values")
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    return getattr(tp, "__name__", str(tp))


def canonical(key: str, value: Any) -> Any:
    """``value`` in the canonical form of the config field at dotted ``key`` (see the module
    docstring); ``value`` itself when it already has that form, does not fit, or ``key`` names no
    typed field."""
    tp = field_type(key) if isinstance(key, str) else None
    return value if tp is None else canonical_of(tp, value)


def canonical_of(tp: Any, value: Any) -> Any:
    """``value`` in the canonical form of type ``tp`` (float, int, bool, str, a Literal, an
    Optional, a tuple annotation: a list), else ``value`` as given."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return canonical_of(rest[0], value) if len(rest) == 1 else value
    if origin is tuple:
        items = value
        if isinstance(value, str):  # the form --set takes for a list: 30,100 or [30, 100]
            items = [v.strip() for v in value.strip().strip("[]()").split(",") if v.strip()]
        if not isinstance(items, (list, tuple)):
            return value
        if len(args) == 2 and args[1] is Ellipsis:
            return [canonical_of(args[0], v) for v in items]
        if len(args) == len(items):
            return [canonical_of(a, v) for a, v in zip(args, items)]
        return value
    if tp is float:
        return _as_float(value)
    if tp is int:
        return _as_int(value)
    if tp is bool:
        if isinstance(value, str) and value.strip().lower() in _BOOL_TEXT:
            return _BOOL_TEXT[value.strip().lower()]
        return value
    return value


def _number(value: Any) -> Any:
    """A finite int or float from a number or its text (``'3e-4'``, ``' 2 '``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, (int, float)) else None


def _as_float(value: Any) -> Any:
    number = _number(value)
    if number is None:
        return value
    try:
        as_float = float(number)
    except OverflowError:  # an int beyond float's range: the range check refuses it
        return value
    return as_float if isinstance(number, float) or int(as_float) == number else value


def _as_int(value: Any) -> Any:
    number = _number(value)
    if isinstance(number, float):
        return int(number) if number.is_integer() else value
    return value if number is None else number


def canonical_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A dotted ``key -> value`` mapping (overrides, ``--set``) with each value canonical."""
    return {k: canonical(k, v) for k, v in values.items()}

