#!/usr/bin/env python3
"""VGG-11 under remat.torch.apply: which stack the plan is on, and the step's
peak against the budget and plain training (issue 56: the stack where the
memory is). torchvision's VGG-11 from its constructor (random weights, nothing
downloaded), on the CPU, one thread; peaks by the allocator above the step's
start, parameter gradients left out.

    .venv/bin/python benchmarks/stack_choice.py [--batch 16] [--size 224] [--memory 50%]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

import remat.torch as rt
from remat.torch.memory import AllocatorTrace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))
from torch_models import steady_profiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--memory", default="50%")
    a = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(a.batch, 3, a.size, a.size, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 10, (a.batch,), generator=torch.Generator().manual_seed(2))

    def make() -> nn.Module:
        torch.manual_seed(0)
        return torchvision.models.vgg11(num_classes=10).train()

    def step(model: nn.Module, measured: bool = False) -> int:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        if not measured:
            nn.functional.cross_entropy(model(x), y).backward()
            return 0
        with AllocatorTrace() as trace:
            trace.exclude_parameter_gradients(model.parameters())
            nn.functional.cross_entropy(model(x), y).backward()
            end = trace.mark()
        return trace.peak(0, end)

    start = time.perf_counter()
    plain = make()
    step(plain)
    stored = step(plain, measured=True)
    model = make()
    with steady_profiles():  # the plan does not depend on the machine's load
        plan = rt.apply(model, memory=a.memory)
        for _ in range(3):
            step(model)
        peak = step(model, measured=True)
    step(plain)
    same = all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), plain.parameters()))
    mib = 1 << 20
    print(plan.explain().splitlines()[0])
    print(plan.explain().splitlines()[1])
    print(
        f"plain {stored / mib:.1f} MiB; remat {peak / mib:.1f} MiB ({peak / stored:.3f} of plain), "
        f"predicted {(plan.peak_memory or 0) / mib:.1f} MiB; gradients bit-identical: {same}; "
        f"{time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
