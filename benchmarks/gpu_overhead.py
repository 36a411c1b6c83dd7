#!/usr/bin/env python3
"""The executor's own cost per training step on a CUDA device, at a small batch.

For DenseNet-121 and ResNet-152 (the stages of ``gpu_measure.py``) at batch 16 it
times, every variant once per round, forward + backward of: the plain module,
``remat.torch.Checkpointed`` with the store-all schedule (no recomputation: the
difference is the executor itself), and the same without RNG capture
(``preserve_rng=False``). Next to each, the CPU time to issue the step (before
the final synchronisation): when it equals the step time, the GPU waits on the
CPU, and Python's per-stage work adds to the step. Then a CPU profile of one
executor step.

    python benchmarks/gpu_overhead.py        # about 20 s on an H200
"""

from __future__ import annotations

import statistics
import time

import torch
from gpu_measure import Device, make_optimizer, networks
from torch import nn

import remat.torch as rt


def main() -> None:
    dev = torch.device("cuda")
    for name in ("densenet121", "resnet152"):
        net = networks(False)[name]
        model = nn.Sequential(*[m for _, m in net.build()]).to(dev).train()
        opt = make_optimizer(model, Device(dev))
        x, t = net.inputs(16, dev, torch.Generator().manual_seed(0))
        chain = rt.profile(model, x, repeat=2)
        variants: dict[str, nn.Module] = {
            "plain": model,
            "executor store-all": rt.Checkpointed(model, 1 << 50, chain=chain, algorithm="store-all"),
            "executor store-all, no RNG": rt.Checkpointed(
                model, 1 << 50, chain=chain, algorithm="store-all", preserve_rng=False
            ),
        }
        full: dict[str, list[float]] = {v: [] for v in variants}
        issue: dict[str, list[float]] = {v: [] for v in variants}
        for rnd in range(9):  # round 0 warms up
            for v, f in variants.items():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                net.criterion(f(x), t).backward()  # type: ignore[no-untyped-call, unused-ignore]
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                opt.zero_grad(set_to_none=False)
                if rnd:
                    full[v].append((t2 - t0) * 1e3)
                    issue[v].append((t1 - t0) * 1e3)
        print(f"{name}, batch 16: forward + backward, ms (median of 8) | CPU time to issue it")
        for v in variants:
            print(f"  {v:28} {statistics.median(full[v]):7.1f} | {statistics.median(issue[v]):7.1f}")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            net.criterion(variants["executor store-all"](x), t).backward()  # type: ignore[no-untyped-call, unused-ignore]
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=6))


if __name__ == "__main__":
    main()
