"""The compiled step's product rewrites (locattn/training/graph_passes.py): fewer products, the
same gradients within fp32 rounding."""

from __future__ import annotations

import shutil

import pytest
import torch

from locattn.training import graph_passes

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="inductor's CPU kernels need g++")


def _recorded_pass(seen: list[tuple[int, int]]):
    """The project's pass, recording what it rewrote in each graph (no inductor cache: uuid None)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Recorded(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            seen.append(graph_passes.rewrite_products(graph))

        def uuid(self) -> None:
            return None

    return Recorded()


def _recurrence(w_hh: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A tanh recurrence over x (T, G, B, H) with one weight (G, H, H) used at every step."""
    h = torch.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = torch.tanh(torch.baddbmm(b, h, w_hh) + x[t])
    return h.square().sum()


def test_a_weight_used_at_every_step_gets_one_gradient_product_and_the_same_gradient() -> None:
    torch.manual_seed(0)
    T, G, B, H = 6, 2, 8, 16
    w = (torch.randn(G, H, H) / H**0.5).requires_grad_()
    b = torch.randn(G, 1, H).requires_grad_()
    x = torch.randn(T, G, B, H).requires_grad_()
    _recurrence(w, b, x).backward()
    eager = [t.grad.clone() for t in (w, b, x)]
    for t in (w, b, x):
        t.grad = None
    seen: list[tuple[int, int]] = []
    torch._dynamo.reset()
    compiled = torch.compile(_recurrence, fullgraph=True, dynamic=False,
                             options={"post_grad_custom_post_pass": _recorded_pass(seen),
                                      "fx_graph_cache": False})
    compiled(w, b, x).backward()
    forward, backward = seen
    assert forward == (0, T)  # every baddbmm split into its product and an addition
    assert backward[0] >= T - 1  # dW_hh: T products summed became one
    for got, want in zip((w.grad, b.grad, x.grad), eager):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_merged_product_is_the_sum_of_the_products_it_replaces() -> None:
    """On an FX graph alone: sum_t a_t^T b_t as one product of the concatenations."""
    torch.manual_seed(1)
    a = [torch.randn(2, 5, 3) for _ in range(4)]
    c = [torch.randn(2, 5, 7) for _ in range(4)]

    def f(*xs: torch.Tensor) -> torch.Tensor:
        terms = [torch.bmm(xs[i].transpose(1, 2), xs[4 + i]) for i in range(4)]
        return terms[0] + terms[1] + terms[2] + terms[3]

    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(f, tracing_mode="fake")(*a, *c)
    before = sum(n.target is torch.ops.aten.bmm.default for n in gm.graph.nodes)
    removed = graph_passes.merge_weight_gradients(gm.graph)
    gm.recompile()
    after = sum(n.target is torch.ops.aten.bmm.default for n in gm.graph.nodes)
    assert (before, removed, after) == (4, 3, 1)
    torch.testing.assert_close(gm(*a, *c), f(*a, *c), rtol=1e-6, atol=1e-6)


def test_products_read_elsewhere_or_of_other_shapes_are_left_alone() -> None:
    torch.manual_seed(2)
    x, y, z = torch.randn(2, 4, 3), torch.randn(2, 3, 5), torch.randn(2, 3, 6)

    def f(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.bmm(x, y)  # read twice: not merged
        q = torch.bmm(x, z)[..., :5]  # another shape
        return p + q + torch.bmm(x, y * 2), p

    from torch.fx.experimental.proxy_tensor import make_fx

    def g(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.bmm(x, y).permute(0, 2, 1)  # a view read twice: not merged
        return p + torch.bmm(x, y * 2).permute(0, 2, 1), p

    gm = make_fx(g, tracing_mode="fake")(x, y, z)
    assert graph_passes.merge_weight_gradients(gm.graph) == 0
    gm.recompile()
    for got, want in zip(gm(x, y, z), g(x, y, z)):
        torch.testing.assert_close(got, want)
    gm = make_fx(f, tracing_mode="fake")(x, y, z)
    assert graph_passes.merge_weight_gradients(gm.graph) == 0
    gm.recompile()
    for got, want in zip(gm(x, y, z), f(x, y, z)):
        torch.testing.assert_close(got, want)


def test_the_pass_keys_inductor_caches_by_its_source() -> None:
    uuid = graph_passes.product_pass().uuid()
    assert isinstance(uuid, str) and len(uuid) == 64
    assert graph_passes.product_pass() is graph_passes.product_pass()
