"""K replicas of an ordinary ``nn.Module`` attender, run as one through :mod:`torch.func`.

The built-in attenders are written for stacked parameters: every weight is applied through
:mod:`locattn.models.functional`, so a pack of K replicas is one model whose parameters carry a
leading K axis. A plugin attender is an ordinary module (``nn.Linear``, ``nn.LayerNorm``,
buffers, any ``torch.nn`` layer) and knows nothing of that axis. In a pack (and in a solo run's
training pass, a pack of one) its parameters and buffers are stacked to (K, ...) as
``torch.func.stack_module_state`` stacks them, and each call runs the module once per replica
under ``torch.func.vmap`` with ``torch.func.functional_call``, PyTorch's own route for model
ensembles: replica k sees its own parameters and buffers, unstacked, and only its own B rows of
the (K*B, ...) batch. So nothing the module does (a batch mean, a ``LayerNorm``, an in-place
buffer update) mixes the replicas.

What crosses the call: ``query`` and ``memory`` (a :class:`SourceMemory`, every field (K*B, ...))
are split to (K, B, ...); ``cache`` and ``state`` (what ``prepare``, ``initial_state`` and
``forward`` returned) stay in the replica layout (K, ...) between calls, because only the
attender reads them; the returned :class:`AttnStep`'s tensors are joined back to (K*B, ...). Any
tensors nested in tuples, lists, dicts, named tuples, dataclasses or the attributes of other
objects cross; other values (None, numbers, strings) pass through as they are. Random ops inside the module draw independently per
replica from the global generator (``randomness="different"``), so an attender that draws its
own randomness does not equal its solo run in a pack.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from torch import Tensor, nn


class _Slot:
    """Where a tensor was, in a template of a nested value (:func:`split`)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def split(value: Any, tensors: list[Tensor]) -> Any:
    """``value`` with every tensor it holds (in tuples, lists, dicts, named tuples, dataclass
    fields, other objects' attributes) appended to ``tensors`` and replaced by its slot;
    :func:`join` is the inverse."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return _Slot(len(tensors) - 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = {f.name: split(getattr(value, f.name), tensors) for f in dataclasses.fields(value)}
        return ("dataclass", value, parts)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return ("namedtuple", type(value), [split(v, tensors) for v in value])
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [split(v, tensors) for v in value])
    if isinstance(value, dict):
        return ("dict", type(value), {k: split(v, tensors) for k, v in value.items()})
    if isinstance(value, PLAIN) or not hasattr(value, "__dict__") or isinstance(value, (type, nn.Module)):
        return ("const", value)
    # any other object (a state class of the plugin's own): its attributes, as a dataclass's fields
    return ("object", value, {k: split(v, tensors) for k, v in vars(value).items()})


PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
"""Values that cross a replicated call as they are."""


def join(template: Any, tensors: list[Tensor] | tuple[Tensor, ...]) -> Any:
    """The value :func:`split` took apart, with ``tensors`` in its slots."""
    if isinstance(template, _Slot):
        return tensors[template.index]
    kind = template[0]
    if kind == "const":
        return template[1]
    if kind in ("dataclass", "object"):
        out = copy.copy(template[1])
        for name, part in template[2].items():
            object.__setattr__(out, name, join(part, tensors))  # frozen dataclasses too
        return out
    if kind == "namedtuple":
        return template[1](*(join(p, tensors) for p in template[2]))
    if kind in ("tuple", "list"):
        items = [join(p, tensors) for p in template[1]]
        return tuple(items) if kind == "tuple" else items
    return template[1]((k, join(v, tensors)) for k, v in template[2].items())


class _Method(nn.Module):
    """The attender as a module whose ``forward`` is one of its methods, so that
    :func:`torch.func.functional_call` can run ``prepare`` and ``initial_state`` too."""

    def __init__(self, inner: nn.Module, method: str) -> None:
        super().__init__()
        self.inner = inner
        self.method = method

    def forward(self, *args: Any) -> Any:  # type: ignore[override]
        fn = getattr(self.inner, self.method, None)
        if fn is None:  # an attender without prepare / initial_state: nothing to carry
            return None
        return fn(*args)


METHODS = ("prepare", "initial_state", "forward")


def method_modules(module: nn.Module) -> dict[str, nn.Module]:
    """{method: the module as a module whose ``forward`` is that method}, made once and kept in
    ``module.__dict__`` (not a submodule: no parameter or state-dict entry of its own), so that
    a compiled step never builds a module while it traces."""
    found = module.__dict__.get("_replica_methods")
    if found is None or next(iter(found.values())).inner is not module:  # a deepcopy's own
        found = {m: _Method(module, m) for m in METHODS}
        module.__dict__["_replica_methods"] = found
    return found


def replica_count(module: nn.Module) -> int | None:
    """K, the leading axis of the stacked parameters (or buffers) of a packed generic attender;
    None when it has neither (a parameter-free module runs as it is)."""
    for t in module.parameters():
        return int(t.shape[0])
    for t in module.buffers():
        return int(t.shape[0])
    return None


def call_replicas(module: nn.Module, method: str, per_row: tuple[Any, ...],
                  carried: tuple[Any, ...] = (), const: tuple[Any, ...] = ()) -> Any:
    """``module.<method>(*per_row, *carried, *const)`` once per replica, under ``vmap``.

    ``module``'s parameters and buffers are stacked (K, ...). ``per_row``: values whose tensors
    hold the K replicas' rows one after another (K*B, ...), split to (K, B, ...); ``carried``:
    values already in the replica layout (K, ...) (an earlier call's cache and state);
    ``const``: values every replica takes as they are (the step ``t``). Returns the method's
    value with every tensor in the replica layout (K, ...)."""
    K = replica_count(module)
    if K is None:
        fn = getattr(module, method) if method != "forward" else module
        return fn(*per_row, *carried, *const)
    tensors: list[Tensor] = []
    template = split((per_row, carried), tensors)
    n_rows = _count_slots(template[1][0])  # ("tuple", [per_row part, carried part])
    inputs = [t.unflatten(0, (K, -1)) if i < n_rows else t for i, t in enumerate(tensors)]
    params = {f"inner.{n}": p for n, p in module.named_parameters()}
    buffers = {f"inner.{n}": b for n, b in module.named_buffers()}
    wrapper = method_modules(module)[method]
    out_template: list[Any] = []

    def one(p: dict[str, Tensor], b: dict[str, Tensor], *ts: Tensor) -> tuple[Tensor, ...]:
        rows, carry = join(template, ts)
        out = torch.func.functional_call(wrapper, (p, b), (*rows, *carry, *const), strict=False)
        found: list[Tensor] = []
        out_template.append(split(out, found))
        return tuple(found)

    outs = torch.func.vmap(one, randomness="different")(params, buffers, *inputs)
    return join(out_template[-1], outs)


def _count_slots(template: Any) -> int:
    """How many tensors a template of :func:`split` holds."""
    if isinstance(template, _Slot):
        return 1
    kind = template[0]
    if kind == "const":
        return 0
    parts: Any = template[2] if kind in ("dataclass", "object", "namedtuple", "dict") else template[1]
    values = parts.values() if isinstance(parts, dict) else parts
    return sum(_count_slots(v) for v in values)


def join_rows(value: Any) -> Any:
    """``value`` with every tensor's replica axes (K, B, ...) joined back to (K*B, ...)."""
    tensors: list[Tensor] = []
    template = split(value, tensors)
    return join(template, [t.flatten(0, 1) for t in tensors])


__all__ = ["call_replicas", "join", "join_rows", "replica_count", "split"]
