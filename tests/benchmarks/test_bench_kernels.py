"""The kernel count of benchmarks/bench_kernels.py: what it counts as a kernel, on a real trace."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench_kernels import is_kernel, kernel_events  # noqa: E402


def test_views_and_composites_are_not_kernels_and_their_parts_are_counted_once() -> None:
    a, b = torch.randn(4, 3), torch.randn(3, 5)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        c = a @ b  # aten::matmul -> aten::mm: one kernel
        d = c.reshape(-1)  # a view: no kernel
        e = d * 2 + 1  # aten::mul, aten::add: two kernels (the scalars' host conversions are not)
        f = c.t().contiguous()  # a transposed copy: one kernel (aten::copy_)
    names = sorted(ev.name for ev in kernel_events(prof.events()))
    assert names == ["aten::add", "aten::copy_", "aten::mm", "aten::mul"], names
    assert e.shape == (20,) and f.shape == (5, 4)


def test_a_product_with_a_bias_is_its_bias_copy_and_its_product() -> None:
    bias, h, w = torch.randn(2, 1, 5), torch.randn(2, 4, 3), torch.randn(2, 3, 5)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = torch.baddbmm(bias, h, w)  # copies the bias into the result, then the product
    names = sorted(ev.name for ev in kernel_events(prof.events()))
    assert names == ["aten::baddbmm", "aten::copy_"], names
    assert out.shape == (2, 4, 5)


def test_inductor_kernels_count_and_allocation_does_not() -> None:
    assert is_kernel("graph_0_cpp_fused_add_mul_3")
    assert is_kernel("triton_poi_fused_add_0")
    assert is_kernel("aten::bmm")
    assert not is_kernel("aten::empty_strided")
    assert not is_kernel("aten::new_empty_strided")  # AccumulateGrad's buffer for a strided gradient
    assert not is_kernel("aten::view")
    assert not is_kernel("AddBackward0")  # an autograd node: its kernels are beneath it
