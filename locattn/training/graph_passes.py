"""Rewrites of the compiled training step's graphs that cut its matrix kernels.

Two rewrites, run by inductor on the forward and the backward graph after its own passes
(:func:`product_pass`, given as ``torch.compile(..., options={"post_grad_custom_post_pass": ...})``):

* **One product per weight gradient.** A weight used at every step of a recurrence (the decoder
  cell's W_hh, the attender's controller, the value gates, the encoder cell's W_hh) gets, in the
  backward graph, one small product per step and a chain of additions:
  dW = X_1 Y_1 + X_2 Y_2 + ... + X_T Y_T, each X_t (G, M, B) and Y_t (G, B, N) with B the batch
  rows. The products do not depend on each other, so they are one product over the concatenated
  contraction axis, dW = [X_1 ... X_T] [Y_1; ...; Y_T], (G, M, T·B) x (G, T·B, N), as cuDNN's
  recurrent layers compute their weight gradients (:func:`merge_weight_gradients`).
* **The bias after the product.** An out-of-place ``baddbmm(bias, x, y)`` copies its bias into
  the result before the product (a kernel of its own); ``bmm(x, y) + bias`` lets inductor add the
  bias inside the elementwise kernel that reads the result (:func:`split_biased_products`).

Both change the order of additions, so the compiled step stays within the compiled path's fp32
tolerance of the eager step, not to the bit; the rewrite depends on the graph only, so runs,
resumed runs, packs and solo runs of one shape compute the same numbers. On Copy/OneStepAttn
(batch 32, source 10, target 11) the backward graph's products fall from 103 to 62 and its
CPU time per call by a tenth (``benchmarks/time_inductor_kernels.py``; the performance docs).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import sys
from collections import defaultdict
from typing import Any

import torch

aten = torch.ops.aten

#: Single-input ops that may stand between a product and the addition it feeds: applied again,
#: with the same arguments, to the merged product.
_WRAPPERS = {aten.permute.default, aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_PRODUCTS = {aten.bmm.default: 3, aten.mm.default: 2}  # op -> operand rank
_ADD = aten.add.Tensor


def _is_add(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is _ADD and len(node.args) == 2 and not node.kwargs


def _terms(root: torch.fx.Node) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """The leaves of the addition tree under ``root`` (its inner additions used only inside the
    tree), and the inner additions themselves."""
    leaves, inner, stack = [], [], [root]
    while stack:
        node = stack.pop()
        if _is_add(node) and (node is root or len(node.users) == 1):
            inner.append(node)
            stack.extend(a for a in reversed(node.args) if isinstance(a, torch.fx.Node))
            if not all(isinstance(a, torch.fx.Node) for a in node.args):  # a scalar term: leave it
                return [], []
        else:
            leaves.append(node)
    return leaves, inner


def _product_of(leaf: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """(the product, its wrappers from the product outwards) when ``leaf`` is a product under
    single-use wrappers and nothing else reads them; else None."""
    wrappers = []
    node = leaf
    while node.op == "call_function" and node.target in _WRAPPERS:
        if len(node.users) != 1:  # read beyond the sum too: it must stay
            return None
        wrappers.append(node)
        node = node.args[0]  # type: ignore[assignment]
        if not isinstance(node, torch.fx.Node):
            return None
    if node.op != "call_function" or node.target not in _PRODUCTS or len(node.users) != 1:
        return None
    if node.kwargs or any("val" not in a.meta for a in node.args if isinstance(a, torch.fx.Node)):
        return None
    return node, wrappers[::-1]


def _group_key(product: torch.fx.Node, wrappers: list[torch.fx.Node]) -> tuple[Any, ...]:
    x, y = (a.meta["val"] for a in product.args)  # type: ignore[union-attr]
    return (product.target, tuple(x.shape), tuple(y.shape), x.dtype, y.dtype, x.device,
            tuple((w.target, tuple(w.args[1:])) for w in wrappers))  # type: ignore[union-attr]


def _fake(node: torch.fx.Node, target: Any, args: tuple[Any, ...]) -> None:
    """Set ``node.meta['val']``: ``target`` run on the fake values of ``args``."""
    vals = torch.fx.node.map_arg(args, lambda a: a.meta["val"])
    flat = [v for v in torch.utils._pytree.tree_leaves(vals) if isinstance(v, torch.Tensor)]
    with torch._guards.detect_fake_mode(flat) or contextlib.nullcontext():
        node.meta["val"] = target(*vals)


def _call(graph: torch.fx.Graph, target: Any, *args: Any) -> torch.fx.Node:
    node = graph.call_function(target, args)
    _fake(node, target, args)
    return node


def merge_weight_gradients(graph: torch.fx.Graph) -> int:
    """In every addition tree of ``graph`` (a weight's gradient summed over the steps, or an
    activation's over the maps that read it): the terms that are a product (``bmm`` or ``mm``,
    possibly under permutes and views) read by nothing else, grouped by shapes and wrappers, each
    group of two or more replaced by one product of the concatenations. In place; returns the
    products removed."""
    removed = 0
    roots = [n for n in graph.nodes if _is_add(n)
             and not any(_is_add(u) and len(n.users) == 1 for u in n.users)]
    for root in roots:
        leaves, inner = _terms(root)
        groups: dict[tuple[Any, ...], list[tuple[torch.fx.Node, torch.fx.Node, list[torch.fx.Node]]]] = defaultdict(list)
        for leaf in leaves:
            found = _product_of(leaf)
            if found is not None:
                groups[_group_key(*found)].append((leaf, *found))
        merged = {key: members for key, members in groups.items() if len(members) >= 2}
        if not merged:
            continue
        rest = [leaf for leaf in leaves if not any(leaf is m[0] for ms in merged.values() for m in ms)]
        with graph.inserting_before(root):
            terms = list(rest)
            for members in merged.values():
                product, wrappers = members[0][1], members[0][2]
                rank = _PRODUCTS[product.target]  # type: ignore[index]
                xs = [m[1].args[0] for m in members]
                ys = [m[1].args[1] for m in members]
                x = _call(graph, aten.cat.default, xs, rank - 1)  # (G, M, T*B): the contraction axis
                y = _call(graph, aten.cat.default, ys, rank - 2)  # (G, T*B, N)
                out = _call(graph, product.target, x, y)
                for w in wrappers:
                    out = _call(graph, w.target, out, *w.args[1:])
                terms.append(out)
                removed += len(members) - 1
            total = terms[0]
            for term in terms[1:]:
                total = _call(graph, _ADD, total, term)
        root.replace_all_uses_with(total)
        dead = inner + [n for ms in merged.values() for _, product, wrappers in ms for n in (product, *wrappers)]
        while dead:  # the old tree and its products, each once nothing reads it
            node = next((n for n in dead if not n.users), None)
            if node is None:
                raise RuntimeError(f"merge_weight_gradients: {dead[0]} is still read after the rewrite")
            dead.remove(node)
            graph.erase_node(node)
    return removed


def split_biased_products(graph: torch.fx.Graph) -> int:
    """Every ``baddbmm(bias, x, y)`` with unit ``alpha`` and ``beta`` of ``graph`` replaced by
    ``bmm(x, y) + bias``. In place; returns the products rewritten."""
    done = 0
    for node in list(graph.nodes):
        if not (node.op == "call_function" and node.target is aten.baddbmm.default and not node.kwargs
                and len(node.args) == 3 and all("val" in a.meta for a in node.args if isinstance(a, torch.fx.Node))):
            continue
        bias, x, y = node.args
        with graph.inserting_before(node):
            product = _call(graph, aten.bmm.default, x, y)
            total = _call(graph, _ADD, product, bias)
        node.replace_all_uses_with(total)
        graph.erase_node(node)
        done += 1
    return done


def rewrite_products(graph: torch.fx.Graph) -> tuple[int, int]:
    """Both rewrites on ``graph``, in place: (weight-gradient products merged away, biased
    products split)."""
    split = split_biased_products(graph)
    merged = merge_weight_gradients(graph)
    if split or merged:
        graph.lint()
    return merged, split


@functools.cache
def product_pass() -> Any:
    """:func:`rewrite_products` as an inductor post-grad pass (a ``CustomGraphPass``), for
    ``torch.compile(..., options={"post_grad_custom_post_pass": product_pass()})``. Its ``uuid``
    (the digest of this module's source) keys inductor's caches, so an edited pass recompiles.
    Built on first use: inductor's import costs about a second, which an eager run does not pay."""
    from torch._inductor.custom_graph_pass import CustomGraphPass  # inductor: about a second to import, not for eager runs

    digest = hashlib.sha256(inspect.getsource(sys.modules[__name__]).encode()).hexdigest()

    class ProductPass(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            rewrite_products(graph)

        def uuid(self) -> str:
            return digest

    return ProductPass()


__all__ = ["merge_weight_gradients", "product_pass", "rewrite_products", "split_biased_products"]
