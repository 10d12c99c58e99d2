"""The compiled graphed step on a GPU is lowered and run under deterministic algorithms
(locattn.training.graphed.deterministic_compile), so that its captured CUDA graph replays the
uncaptured step bit for bit. Inductor's choice is device-independent where it lowers an
accumulating index_put (the embeddings' gradient): with the mode it calls aten's kernel, without
it it writes a loop of atomic adds (C++ on a CPU, Triton on a GPU, where their order varies).
These tests check that choice on the CPU; the GPU replay itself is the ``gpu`` tests'
(tests/test_graphed.py), unrun here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from locattn.training.graphed import deterministic_compile, deterministic_lowering


def _backward_code(weight: torch.Tensor, idx: torch.Tensor) -> str:
    """The code inductor writes for embedding(idx, weight).sum() and its backward."""
    torch._dynamo.reset()
    fn = torch.compile(lambda w, i: F.embedding(i, w).pow(2).sum(), backend="inductor", fullgraph=True)
    w = weight.clone().requires_grad_(True)

    def run() -> None:
        fn(w, idx).backward()

    _, code = run_and_get_code(run)
    return "\n".join(code)


@pytest.mark.slow  # two small inductor compiles: about 18 s at load 15
def test_the_deterministic_lowering_keeps_atomic_adds_out_of_the_embedding_gradient() -> None:
    # Inductor's C++ writes atomic adds only for a parallel loop: on one thread (what a training
    # run sets, and what an earlier test in this worker may have left) a plain += is race-free.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        _check_the_lowering()
    finally:
        torch.set_num_threads(threads)


def _check_the_lowering() -> None:
    torch.manual_seed(0)
    weight, idx = torch.randn(7, 4), torch.randint(0, 7, (5, 3))
    plain = _backward_code(weight, idx)
    assert "atomic_add" in plain  # the accumulation inductor writes by default (the failing case)
    with deterministic_lowering():
        assert torch.are_deterministic_algorithms_enabled()
        det = _backward_code(weight, idx)
    assert "atomic_add" not in det and "index_put" in det  # aten's deterministic kernel instead
    assert not torch.are_deterministic_algorithms_enabled()  # put back


def test_only_a_cuda_step_runs_in_the_deterministic_mode() -> None:
    fill = torch.utils.deterministic.fill_uninitialized_memory
    with deterministic_compile(torch.device("cpu")):
        assert not torch.are_deterministic_algorithms_enabled()
    with deterministic_compile(torch.device("cuda")):  # the flags only: nothing touches the device
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        if hasattr(torch._inductor.config, "deterministic"):
            assert torch._inductor.config.deterministic is True
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory is fill
