#!/usr/bin/env python3
"""Train a 24-block residual MLP with half of its activation memory, on the CPU.

The model is what a user writes: residual blocks of Linear, BatchNorm, ReLU and
Dropout in an ``nn.Sequential``. ``remat.torch.Checkpointed`` wraps it with a
budget of half of what storing every activation needs; the training loop does
not change. The script prints:

- the budget, the schedule's predicted peak and the peak measured by counting
  live tensor bytes during a step (``remat.torch.LiveBytes``);
- the step time of the plain model, of remat's schedule, and of PyTorch's
  ``checkpoint_sequential`` with the fastest number of segments whose measured
  peak is no larger than remat's (the same memory);
- the largest difference between remat's gradients and the plain model's (0:
  the same kernels run on the same values, RNG and BatchNorm included).

Run (under a minute on two cores):

    python examples/train_sequential.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

import remat
import remat.torch as rt

BLOCKS, WIDTH, BATCH, STEPS = 24, 256, 128, 5


class Residual(nn.Module):
    """x + Dropout(Linear(ReLU(BatchNorm(x)))): a pre-activation residual block."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, width), nn.Dropout(0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[Residual(WIDTH) for _ in range(BLOCKS)], nn.Linear(WIDTH, 10))


def step(
    model: Callable[[torch.Tensor], torch.Tensor], params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor
) -> float:
    """One forward and backward; returns the loss."""
    for p in params:
        p.grad = None
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.item()


def peak_bytes(
    model: Callable[[torch.Tensor], torch.Tensor], params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor
) -> int:
    """Peak live bytes of one step, the input batch included (as remat's budget counts it),
    parameter gradients excluded (as the budget excludes them)."""
    with rt.LiveBytes() as live:
        live.exclude_parameter_gradients(params)
        step(model, params, x, y)
    return live.peak + x.numel() * x.element_size()


def step_ms(
    model: Callable[[torch.Tensor], torch.Tensor],
    params: list[nn.Parameter],
    x: torch.Tensor,
    y: torch.Tensor,
    n: int = 3,
) -> float:
    """Median wall time of n steps, in ms."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step(model, params, x, y)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def main() -> None:
    # The blocks are small (128 x 256 by 256 x 256 products): one thread runs
    # them about as fast as several, and keeps the timings steady on a busy
    # machine. Remove this line for larger models.
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, WIDTH, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)

    plain = make_model()
    plain_params = list(plain.parameters())
    plain_peak = peak_bytes(plain, plain_params, x, y)

    chain = rt.profile(make_model(), x)
    store_all = remat.solve(chain, 1 << 40, algorithm="store-all").peak_memory
    budget = store_all // 2
    print(f"{BLOCKS} residual blocks, width {WIDTH}, batch {BATCH}, CPU float32")
    print(f"storing every activation: predicted {mib(store_all)}, measured {mib(plain_peak)} (plain model)")
    print(f"budget: half of that, {mib(budget)}")

    module = make_model()
    model = rt.Checkpointed(module, budget, chain=chain)
    params = list(module.parameters())

    # Gradients against the plain model: same weights, same batch, same RNG.
    torch.manual_seed(2)
    step(plain, plain_params, x, y)
    torch.manual_seed(2)
    step(model, params, x, y)
    diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(plain_params, params))  # type: ignore[operator]
    assert model.schedule is not None
    ops = model.schedule.operations
    recomputed = sum(1 for op, l in ops if op != "B" and l <= BLOCKS + 1) - (BLOCKS + 1)
    print(f"schedule ({model.schedule.algorithm}): {len(ops)} operations, {recomputed} stage forwards recomputed")
    print(f"largest gradient difference from the plain model: {diff}")

    measured = peak_bytes(model, params, x, y)
    print(
        f"peak: predicted {mib(model.schedule.peak_memory)}, measured {mib(measured)} "
        f"(the criterion's log-softmax is outside the chain)"
    )

    # checkpoint_sequential at the same memory. With K segments it recomputes
    # every stage but the last segment's, so the fewest segments whose measured
    # peak fits is the fastest choice; peaks are measured for every K.
    seq_model = make_model()
    seq_params = list(seq_model.parameters())

    def segments(k: int) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda inp: checkpoint_sequential(seq_model, k, inp, use_reentrant=False)

    fits = [(k, p) for k in range(1, BLOCKS + 2) if (p := peak_bytes(segments(k), seq_params, x, y)) <= measured]

    # Train a few steps.
    opt = torch.optim.Adam(params, lr=1e-3)
    for i in range(STEPS):
        loss = step(model, params, x, y)
        opt.step()
        print(f"step {i + 1}: loss {loss:.4f}")

    # Step times, interleaved so that a busy machine slows every variant alike.
    variants: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], list[nn.Parameter]]] = {
        "plain": (plain, plain_params),
        "remat": (model, params),
    }
    if fits:
        k, p = fits[0]
        variants[f"checkpoint_sequential ({k} segments, measured peak {mib(p)})"] = (segments(k), seq_params)
    else:
        print("checkpoint_sequential: no segment count fits remat's measured peak")
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(5):
        for name, (fn, ps) in variants.items():
            times[name].append(step_ms(fn, ps, x, y, n=1))
    for name, ts in times.items():
        print(f"step time, {name}: {statistics.median(ts):.1f} ms")


if __name__ == "__main__":
    main()
