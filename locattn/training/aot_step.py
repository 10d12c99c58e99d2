"""The compiled training step, saved to disk whole so that a later process does not trace it again.

``torch.compile`` caches inductor's kernels on disk, but every new process still runs dynamo over
the unrolled step (the encoder, every decoder step and its attender): about 10 CPU-s per process
for Copy/OneStepAttn on one CPU core, more than two of its epochs. :class:`SavedStep` wraps the
compiled :func:`~locattn.training.epoch.batch_nll` with ``torch.compile(...).aot_compile``
(torch >= 2.10): the first process with a given step compiles it and writes the compiled function
(dynamo's bytecode, its guards, the forward and backward graphs) to
``$TORCHINDUCTOR_CACHE_DIR/locattn_steps/<key>.bin``; a later one loads that file.

The key names everything the traced graph depends on: the torch and Python versions, the source
of this package and of every module class in the model (a plugin's too), every plain attribute of
every submodule (the variant's switches), the parameters' names, shapes and dtypes, and each
argument's shape, dtype and value. The saved guards are checked on every call as well; a call
that fails them, a file that does not load, or a torch without ``aot_compile`` runs the ordinary
``torch.compile`` function instead (with one warning), so a stale or foreign file costs a compile,
never a wrong number.

On by default; ``LOCATTN_SAVED_STEP=0`` turns it off. One collision inside torch had to be
closed first. AOTAutograd's cache cannot key a graph that calls a custom ``autograd.Function``
(:class:`~locattn.models.functional.LeakyReLUFromOutput`: ``autograd_function_apply``); under
``aot_compile`` it then keys the entry with a nonce, ``str(random.random())``, drawn from
Python's global ``random``, which every run seeds
(:func:`~locattn.training.checkpoint.seed_everything`). Seed 0 draws 0.8444218515250481 in
every process, so a Ray trial's own ``aot_compile`` for sources of length 3 found in
``$TORCHINDUCTOR_CACHE_DIR/aotautograd/0.8444218515250481`` the graphs the test process had
compiled for sources of length 4 (inductor's ``assert_size_stride`` stopped it; a graph for the
same shapes but another switch would have run with no error). :class:`SavedStep` compiles with
``random`` seeded from the OS and puts the caller's state back afterwards, so the nonce is
unique and the run's random stream is the same whether its step was compiled or loaded.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import random
import sys
import tempfile
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable

import torch

STEP_DIR = "locattn_steps"
"""Folder under inductor's cache folder that holds the saved steps."""

ENV_SWITCH = "LOCATTN_SAVED_STEP"

loads = 0
"""Saved steps this process loaded from disk (counted as compiles by the compile watch)."""

_PLAIN = (bool, int, float, str, type(None))


def enabled() -> bool:
    """Whether saved steps are on (``LOCATTN_SAVED_STEP`` unset or 1; 0 turns them off) and torch
    has ``aot_compile``.

    Raises ValueError naming the variable for a value other than 0, 1 or unset."""
    value = os.environ.get(ENV_SWITCH, "1")
    if value not in ("0", "1"):
        raise ValueError(f"{ENV_SWITCH}={value!r}: expected 0 (off) or 1 "
                         "(save the compiled step, the default)")
    return value == "1" and hasattr(torch._dynamo, "aot_compile")


_COMPILE_LOCK = threading.Lock()


def _aot_compile(compiled: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``compiled.aot_compile((args, kwargs))`` with Python's ``random`` seeded from the OS for its
    duration and the caller's state restored afterwards (also when it raises).

    AOTAutograd cannot key a graph that calls a custom ``autograd.Function``; under aot_compile
    it keys the cache entry with ``str(random.random())`` instead and still writes and looks it
    up on disk. Drawn from a seeded ``random``, that nonce is the same in every process with the
    same seed, and the lookup returns whatever graph an earlier compile wrote under it: another
    batch shape (inductor's size assertion fails) or, for the same shapes, another function
    (nothing fails). One compile at a time in the process, so no other SavedStep's compile draws
    from the caller's state while it is swapped out."""
    with _COMPILE_LOCK:
        state = random.getstate()
        random.seed()  # os.urandom
        try:
            return compiled.aot_compile((args, kwargs))
        finally:
            random.setstate(state)


@functools.cache
def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable:" + path


@functools.cache
def _package_digest() -> str:
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(_file_digest(str(f)).encode())
    return h.hexdigest()


_MODULE_DESCS: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()


def _module_desc(model: torch.nn.Module) -> str:
    """The model's part of the key, once per model object (a switch changed later fails the
    saved step's guards, so it still cannot run a wrong graph)."""
    desc = _MODULE_DESCS.get(model)
    if desc is None:
        desc = _MODULE_DESCS[model] = repr(_describe_module(model))
    return desc


def _describe_module(model: torch.nn.Module) -> list[Any]:
    out: list[Any] = []
    for name, m in model.named_modules():
        cls = type(m)
        try:
            src = _file_digest(inspect.getsourcefile(cls) or "")
        except TypeError:
            src = "builtin"
        attrs = sorted((k, repr(v)) for k, v in vars(m).items()
                       if isinstance(v, _PLAIN) or (isinstance(v, tuple) and all(isinstance(x, _PLAIN) for x in v)))
        out.append((name, cls.__module__, cls.__qualname__, src, attrs))
    out.append([(n, tuple(p.shape), str(p.dtype), p.requires_grad) for n, p in model.named_parameters()])
    out.append([(n, tuple(b.shape), str(b.dtype)) for n, b in model.named_buffers()])
    return out


def _arg_desc(x: Any) -> Any:
    """A hashable description of one argument (tuples all the way down)."""
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), x.stride(), str(x.dtype), x.device.type, x.requires_grad)
    if isinstance(x, torch.nn.Module):
        return ("module", _module_desc(x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _arg_desc(v)) for k, v in sorted(x.items())))
    if isinstance(x, (list, tuple)):
        return ("seq", tuple(_arg_desc(v) for v in x))
    if isinstance(x, _PLAIN):
        return ("value", repr(x))
    raise TypeError(f"saved step: no key for an argument of type {type(x).__name__}")


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What of a call the graph depends on, hashable: the in-process lookup of every batch."""
    return tuple(_arg_desc(a) for a in args), tuple(sorted((k, _arg_desc(v)) for k, v in kwargs.items()))


def _file_key(fn: Callable[..., Any], signature: tuple[Any, ...]) -> str:
    desc = (torch.__version__, sys.version, _package_digest(), fn.__module__, fn.__qualname__, signature)
    return hashlib.sha256(repr(desc).encode()).hexdigest()


def step_key(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The file name (a sha256) of the saved step for ``fn(*args, **kwargs)``."""
    return _file_key(fn, _signature(args, kwargs))


def _cache_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir  # inductor loads only when a step compiles
    return Path(cache_dir()) / STEP_DIR


class SavedStep:
    """``fn`` under ``torch.compile(fn, **options)``, each distinct call signature compiled once
    and saved to disk (or loaded from there). Callable as ``fn`` is; returns what ``fn`` returns.

    ``compiled``: the ordinary ``torch.compile`` function, used where a saved step cannot be."""

    def __init__(self, fn: Callable[..., Any], **options: Any) -> None:
        self.fn = fn
        self.compiled = torch.compile(fn, **options)
        self.steps: dict[tuple[Any, ...], Any] = {}  # by call signature: a step, or False
        self.warned = False

    def _fallback(self, why: str, *args: Any, **kwargs: Any) -> Any:
        if not self.warned:
            self.warned = True
            warnings.warn(f"saved compiled step not used ({why}); compiling it in this process",
                          RuntimeWarning, stacklevel=3)
        return self.compiled(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not enabled():
            return self.compiled(*args, **kwargs)
        try:
            signature = _signature(args, kwargs)
        except TypeError as e:
            return self._fallback(str(e), *args, **kwargs)
        step = self.steps.get(signature)
        if step is None:  # the file's key (a digest of the code too) only on a miss
            step = self.steps[signature] = self._load_or_compile(_file_key(self.fn, signature), args, kwargs)
        if step is False:
            return self.compiled(*args, **kwargs)
        if not step.guard_check(*args, **kwargs):
            self.steps[signature] = False
            return self._fallback("its guards failed", *args, **kwargs)
        return step(*args, **kwargs)

    def _load_or_compile(self, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        global loads
        path = _cache_dir() / f"{key}.bin"
        if path.is_file():
            try:
                with path.open("rb") as f:
                    step = torch.compiler.load_compiled_function(f)
                step.disable_guard_check()  # checked by the caller, once a call
                loads += 1
                return step
            except Exception as e:  # a truncated or foreign file: compile afresh and replace it
                warnings.warn(f"saved compiled step {path} did not load ({type(e).__name__}: {e}); "
                              "compiling it again", RuntimeWarning, stacklevel=3)
        try:
            step = _aot_compile(self.compiled, args, kwargs)
        except Exception as e:
            warnings.warn(f"saved compiled step: aot_compile failed ({type(e).__name__}: {e}); "
                          "using torch.compile in this process", RuntimeWarning, stacklevel=3)
            return False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            os.close(fd)
            step.save_compiled_function(tmp)
            os.replace(tmp, path)  # whole or not at all, also with trials racing
        except Exception as e:  # a full disk or a read-only cache: this process still has it
            warnings.warn(f"saved compiled step: could not write {path} ({type(e).__name__}: {e})",
                          RuntimeWarning, stacklevel=3)
        step.disable_guard_check()
        return step


__all__ = ["ENV_SWITCH", "STEP_DIR", "SavedStep", "enabled", "step_key"]
