#!/usr/bin/env python3
"""The executor's own cost: remat.torch against the plain module and against
``checkpoint_sequential``, on many small stages where Python overhead shows.
A script, not a test (machines are noisy): it prints paired medians.

The model: 64 stages of Linear(64) + Tanh, batch 32, one thread, on the CPU
(the issue-23 setting). Variants, run round-robin (one step of each per round,
so a busy machine slows them alike):

- ``plain``: the module itself;
- ``remat store-all``: ``Checkpointed`` at a budget where nothing is
  recomputed (the executor's bookkeeping only);
- ``remat half``: ``Checkpointed`` at half of store-all's predicted peak;
- ``checkpoint_sequential K``: PyTorch's, with the fewest segments whose
  measured peak is no larger than ``remat half``'s.

Reported: the median step time of each and its ratio to plain (the median of
the per-round ratios), and each one's measured peak (LiveBytes, input batch
included, parameter gradients excluded).

    python benchmarks/executor_overhead.py [--rounds 200] [--stages 64]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

import remat
import remat.torch as rt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=200, help="rounds of one step per variant (default 200)")
    ap.add_argument("--stages", type=int, default=64, help="Linear+Tanh stages (default 64)")
    ap.add_argument("--width", type=int, default=64, help="features per stage (default 64)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    args = ap.parse_args()
    torch.set_num_threads(1)

    def make() -> nn.Sequential:
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Sequential(nn.Linear(args.width, args.width), nn.Tanh()) for _ in range(args.stages)])

    x = torch.randn(args.batch, args.width, requires_grad=True)
    plain = make()
    chain = rt.profile(plain, x, repeat=3)
    store_all = remat.simulate(chain, remat.solve(chain, 1 << 50, algorithm="store-all")).peak_memory
    full = rt.Checkpointed(make(), 1 << 50, chain=chain)
    half = rt.Checkpointed(make(), store_all // 2, chain=chain)

    def stepper(model: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            model(x).sum().backward()

        return step

    def peak(step: Callable[[], None], params: nn.Module) -> int:
        with rt.LiveBytes() as live:
            live.exclude_parameter_gradients(params.parameters())
            step()
        return live.peak + x.numel() * x.element_size()

    variants: dict[str, tuple[Callable[[], None], nn.Module]] = {
        "plain": (stepper(plain), plain),
        "remat store-all": (stepper(full), full),
        "remat half": (stepper(half), half),
    }
    for _ in range(2):  # plan, warm up
        for step, _m in variants.values():
            step()
    half_peak = peak(*variants["remat half"])
    seq = make()
    for k in range(2, args.stages + 1):
        step_k = stepper(lambda t, k=k: checkpoint_sequential(seq, k, t, use_reentrant=False))
        if peak(step_k, seq) <= half_peak:
            variants[f"checkpoint_sequential {k}"] = (step_k, seq)
            break
    peaks = {name: peak(step, m) for name, (step, m) in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (step, _m) in variants.items():
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    base = times["plain"]
    print(
        f"{args.stages} stages of Linear({args.width})+Tanh, batch {args.batch}, 1 thread, {args.rounds} rounds, "
        f"torch {torch.__version__}"
    )
    print(f"{'variant':<28}{'median ms':>10}{'x plain':>9}{'peak':>12}")
    for name, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, base))
        print(f"{name:<28}{statistics.median(ts) * 1e3:>10.3f}{ratio:>9.3f}{remat.format_size(peaks[name]):>12}")


if __name__ == "__main__":
    main()
