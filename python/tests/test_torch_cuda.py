"""remat.torch on a CUDA device: what only a GPU shows (skipped without one).

Run on a GPU machine: ``pytest python/tests/test_torch_cuda.py``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_models import steady

import remat
import remat.torch as rt

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_parameter_gradients_are_not_backward_overhead() -> None:
    # Four 2048x2048 Linears as one stage, at batch 8: their weight gradients
    # (16 MiB each) belong to the parameters, outside the budget; the backward's
    # transient memory holds one of them at a time, while it is computed, before
    # it is added into .grad. Before the fix the CUDA peak kept all four: >= 64 MiB.
    dev = torch.device("cuda")
    stage = nn.Sequential(*(nn.Linear(2048, 2048) for _ in range(4)))
    model = nn.Sequential(stage, nn.ReLU()).to(dev)
    chain = rt.profile(model, torch.randn(8, 2048, device=dev), repeat=2)
    weight = 2048 * 2048 * 4
    assert chain.stages[0].backward_overhead < 2 * weight
    assert all(p.grad is None for p in model.parameters())  # left as it was


@cuda
def test_out_of_memory_is_not_a_bad_input() -> None:
    dev = torch.device("cuda")
    total = torch.cuda.get_device_properties(dev).total_memory
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64)).to(dev)
    # A batch twice the device: the allocator refuses, and says so.
    x = torch.randn(1, 64, device=dev).expand(total // (64 * 4) * 2, 64)
    with pytest.raises(torch.OutOfMemoryError):
        rt.profile(model, x, repeat=1)


@cuda
def test_memory_auto_within_a_per_process_cap() -> None:
    dev = torch.device("cuda")
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(dev).total_memory
    cap = 2 << 30
    blocks = [nn.Sequential(nn.Linear(1024, 1024), nn.GELU()) for _ in range(8)]
    model = nn.Sequential(*blocks).to(dev)
    torch.cuda.set_per_process_memory_fraction(cap / total, dev.index or 0)
    try:
        ours = rt.Checkpointed(model, "auto")
        x = torch.randn(4096, 1024, device=dev)
        budget, note = ours.auto_budget(dev, x.numel() * 4)
        assert "per-process cap" in note
        assert budget < cap
        ours(x).sum().backward()
        assert ours.schedule is not None and ours.schedule.peak_memory <= budget
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, dev.index or 0)


@cuda
def test_predicted_peak_is_the_measured_one() -> None:
    # The executor's measured peak (max_memory_allocated above parameters,
    # gradients and the batch, plus the batch) against the simulator's, at half
    # of the store-all peak: within 3% (cuBLAS workspaces, the unit gradient of the sum).
    dev = torch.device("cuda")
    torch.manual_seed(0)
    blocks = [
        nn.Sequential(nn.LayerNorm(1024), nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)) for _ in range(8)
    ]
    model = nn.Sequential(*blocks).to(dev)
    x = torch.randn(2048, 1024, device=dev)
    chain = steady(rt.profile(model, x, repeat=2))  # a plan that does not follow the GPU's clocks
    store_all = remat.solve(chain, 1 << 60, algorithm="store-all").peak_memory
    ours = rt.Checkpointed(model, store_all // 2, chain=chain)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    ours(x).sum().backward()  # warm-up: kernels and workspaces
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    ours(x).sum().backward()
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated(dev) - base + x.numel() * 4
    assert ours.schedule is not None
    predicted = ours.schedule.peak_memory
    assert abs(measured - predicted) <= 0.03 * predicted, (measured, predicted)
