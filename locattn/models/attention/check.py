"""A plugin attender tried on a tiny dry batch before any run trains it (``study launch``).

:func:`attender_problem` builds the attender of a run's :class:`~locattn.models.config.ModelConfig`
as the model would, calls it on a batch of two sources (lengths 5 and 3) for two steps, alone and
as a pack of two replicas (:mod:`locattn.models.attention.replicas`), and says in one line what
does not fit the attender interface: a target that cannot be called as
``target(cfg, *, query_size, key_size, dim, total_batches)``, a target that does not return an
``nn.Module``, a ``forward`` that does not return ``(AttnStep, state)``, attention weights that
are not a (B, L) float tensor, zero on padding, or a diagnostic of the wrong shape.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from locattn import registry
from locattn.models.attention.base import MAP, ROW, AttnStep, SourceMemory, diagnostics
from locattn.models.attention.replicas import call_replicas, join_rows

B, L = 2, 5
"""The dry batch: two sources, attention length 5 (the second row padded after 3)."""
ROW_FIELDS = tuple(name for name, d in diagnostics().items() if d.shape == ROW)
"""AttnStep diagnostics of shape (B,)."""
MAP_FIELDS = tuple(name for name, d in diagnostics().items() if d.shape == MAP)
"""AttnStep diagnostics of shape (B, L)."""


def dry_memory(hidden: int, rows: int = B, seed: int = 0) -> SourceMemory:
    """A :class:`SourceMemory` of ``rows`` sources (lengths alternating 5 and 3), keys and values
    (rows, L, hidden) drawn from N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([float(L), 3.0] * (rows // 2) + [float(L)] * (rows % 2))  # (rows,)
    mask = torch.arange(L)[None, :] < lengths[:, None]  # (rows, L)
    stepsize = 1.0 / (lengths - 1).clamp(min=1)
    return SourceMemory(
        keys=torch.randn(rows, L, hidden, generator=g), values=torch.randn(rows, L, hidden, generator=g),
        mask=mask, score_bias=torch.zeros(rows, L).masked_fill(~mask, float("-inf")),
        positions=torch.arange(L, dtype=torch.float32)[None, :] * stepsize[:, None] * mask,
        lengths=lengths, stepsize=stepsize,
    )


def _shape(x: Any) -> str:
    if isinstance(x, Tensor):
        return f"a {str(x.dtype).replace('torch.', '')} tensor of shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


def step_problem(out: Any, rows: int, mask: Tensor) -> str:
    """What is wrong with one ``forward`` result for ``rows`` rows; ``""`` when nothing."""
    if not (isinstance(out, tuple) and len(out) == 2):
        got = f"a tuple of {len(out)}" if isinstance(out, tuple) else _shape(out)
        return f"forward must return (AttnStep, state), got {got}"
    attn = out[0]
    if not isinstance(attn, AttnStep):
        return f"forward must return (AttnStep, state); its first item is {_shape(attn)}"
    w = attn.weights
    if not isinstance(w, Tensor) or tuple(w.shape) != (rows, L) or not w.is_floating_point():
        return f"AttnStep.weights must be a float (B, L) = ({rows}, {L}) tensor, got {_shape(w)}"
    if not bool(torch.isfinite(w).all()):
        return "AttnStep.weights has non-finite values on the dry batch"
    if bool((w.detach()[~mask] != 0).any()):
        return "AttnStep.weights must be zero on padding (add memory.score_bias before a softmax)"
    for name, want in [(n, (rows,)) for n in ROW_FIELDS] + [(n, (rows, L)) for n in MAP_FIELDS]:
        value = getattr(attn, name)
        if value is not None and (not isinstance(value, Tensor) or tuple(value.shape) != want):
            return f"AttnStep.{name} must be None or a tensor of shape {want}, got {_shape(value)}"
    return ""


def _call(attender: nn.Module, method: str, memory: SourceMemory) -> Any:
    fn = getattr(attender, method, None)
    return fn(memory) if fn is not None else None


def _solo(attender: nn.Module, query: Tensor, memory: SourceMemory, weights: list[Tensor]) -> str:
    """Two steps of ``attender`` as it is; each step's weights appended to ``weights``."""
    cache, state = _call(attender, "prepare", memory), _call(attender, "initial_state", memory)
    for t in (0, 1):
        out = attender(query, memory, cache, state, t)
        problem = step_problem(out, query.shape[0], memory.mask)
        if problem:
            return problem
        weights.append(out[0].weights)
        state = out[1]
    return ""


def _packed(attender: nn.Module, queries: list[Tensor], memories: list[SourceMemory],
            solo: list[list[Tensor]]) -> str:
    """The same two steps as a pack of two replicas (both copies of ``attender``), replica k on
    ``queries[k]`` and ``memories[k]``, run per replica through torch.func as a pack runs an
    ordinary module: replica k's weights must be ``solo[k]``, those of the attender alone on
    its batch (a recurrent quantity kept on ``self`` would couple them)."""
    pack = copy.deepcopy(attender)
    for name, p in list(pack.named_parameters()) + list(pack.named_buffers()):
        *path, leaf = name.split(".")
        owner = pack
        for part in path:
            owner = getattr(owner, part)
        stacked = torch.stack([p.detach(), p.detach()])
        setattr(owner, leaf, nn.Parameter(stacked) if isinstance(p, nn.Parameter) else stacked)
    rows = SourceMemory(**{f: torch.cat([getattr(m, f) for m in memories])
                           for f in SourceMemory.__dataclass_fields__})
    q2 = torch.cat(queries)
    try:
        cache = call_replicas(pack, "prepare", (rows,))
        state = call_replicas(pack, "initial_state", (rows,))
        for t in (0, 1):
            attn, state = call_replicas(pack, "forward", (q2, rows), (cache, state), (t,))
            joined = join_rows(attn)
            problem = step_problem((joined, state), q2.shape[0], rows.mask)
            if problem:
                return f"as a pack of 2 replicas: {problem}"
            expected = torch.cat([solo[0][t], solo[1][t]])
            if not torch.allclose(joined.weights, expected, rtol=1e-4, atol=1e-5):
                return (f"as a pack of 2 replicas (torch.func.vmap), step {t}'s weights differ from "
                        f"the attender's alone (by {float((joined.weights - expected).abs().max()):.3g}); "
                        "keep recurrent quantities in state (tensors, None, or tuples, lists, dicts, "
                        "dataclasses or objects of them), never on self")
    except Exception as exc:  # noqa: BLE001 - reported in one line
        return (f"as a pack of 2 replicas (torch.func.vmap): {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300]}; a pack runs the module once per replica under "
                "vmap: no host reads (.item(), float(tensor)) or data-dependent Python branches")
    return ""


def attender_problem(model_cfg: Any) -> str:
    """Why the attender of ``model_cfg`` (a seq2seq :class:`~locattn.models.config.ModelConfig`)
    cannot train, in one line; ``""`` when it builds and answers the dry batch, alone and (an
    ordinary module) as a pack of two."""
    cfg = model_cfg.attention
    entry = registry.get("attender", cfg.family, where="attention.family")
    try:
        target = entry.load()
    except registry.PluginError as exc:
        return str(exc)
    problem = registry.attender_signature_problem(target)
    if problem:
        return problem
    H = model_cfg.hidden_size
    try:
        with torch.random.fork_rng(devices=[]):
            attender = target(cfg, query_size=H, key_size=H, dim=H, total_batches=1)
    except Exception as exc:  # noqa: BLE001 - reported in one line
        return f"{registry.ATTENDER_CALL} raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    if not isinstance(attender, nn.Module):
        return f"{registry.ATTENDER_CALL} must return a torch.nn.Module, got {_shape(attender)}"
    attender.train()
    with torch.random.fork_rng(devices=[]):  # the caller's random stream stays where it was
        return _dry_batch(attender, H, bool(entry.meta.get("stacked")))


def _dry_batch(attender: nn.Module, H: int, stacked: bool) -> str:
    memories = [dry_memory(H, seed=0), dry_memory(H, seed=1)]
    queries = [torch.randn(B, H, generator=torch.Generator().manual_seed(k + 2)) for k in (0, 1)]
    with torch.no_grad():
        solo: list[list[Tensor]] = [[], []]
        try:
            for k in (0, 1):
                problem = _solo(copy.deepcopy(attender), queries[k], memories[k], solo[k])
                if problem:
                    return problem
        except Exception as exc:  # noqa: BLE001 - reported in one line
            return f"the dry batch raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        if stacked:
            return ""
        return _packed(attender, queries, memories, solo)


__all__ = ["attender_problem", "dry_memory", "step_problem"]
