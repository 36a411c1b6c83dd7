#!/usr/bin/env python3
"""Step time of remat's schedules against PyTorch's checkpoint_sequential, at equal
measured memory. A script, not a test: it prints a table and optionally JSON.

For each model and each budget (a fraction of the store-all peak the simulator
predicts), it runs one training step (forward + backward) with

- ``remat``: ``remat.torch.Checkpointed(model, budget)`` (solver ``auto``),
- ``remat sequential``: remat's model of ``checkpoint_sequential`` (the fastest
  segment count that fits), run by the same executor,
- ``checkpoint_sequential``: PyTorch's own, with the fewest segments whose
  measured peak is no larger than remat's (with K segments every stage but the
  last segment's is recomputed, so fewer segments are faster),
- ``plain``: the module without recomputation,

and reports each one's measured peak and median step time. Peaks are counted
on the CPU by ``remat.torch.LiveBytes`` (live tensor bytes, the input batch
added, parameter gradients excluded, as remat's budget counts them) and on a
GPU by ``torch.cuda.max_memory_allocated`` above what was allocated before the
step (parameters and the input batch), next to the predicted peak. Step times
are medians of ``--rounds`` rounds in which every variant runs once, so a busy
machine slows them alike.

    python benchmarks/torch_bench.py                 # CPU
    python benchmarks/torch_bench.py --device cuda   # GPU, if there is one
    OMP_NUM_THREADS=1 python benchmarks/torch_bench.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

import remat
import remat.torch as rt

Runner = Callable[[torch.Tensor], torch.Tensor]


class Residual(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def models(
    device: torch.device, scale: int
) -> dict[str, tuple[Callable[[], nn.Sequential], torch.Tensor, torch.Tensor]]:
    """name -> (factory, input, class targets). ``scale`` multiplies the batch."""
    g = torch.Generator().manual_seed(0)

    def mlp() -> nn.Sequential:
        torch.manual_seed(0)
        w = 512
        blocks = [
            Residual(nn.Sequential(nn.BatchNorm1d(w), nn.ReLU(), nn.Linear(w, w), nn.Dropout(0.1))) for _ in range(24)
        ]
        return nn.Sequential(*blocks, nn.Linear(w, 10))

    def cnn() -> nn.Sequential:
        torch.manual_seed(0)
        c = 32
        blocks: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())]
        blocks += [
            Residual(nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.Dropout2d(0.05)))
            for _ in range(12)
        ]
        blocks.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)))
        return nn.Sequential(*blocks)

    def transformer() -> nn.Sequential:
        torch.manual_seed(0)
        d = 128
        blocks: list[nn.Module] = [
            nn.TransformerEncoderLayer(d, 4, dim_feedforward=4 * d, dropout=0.1, batch_first=True) for _ in range(8)
        ]
        blocks.append(nn.Sequential(nn.Flatten(), nn.Linear(64 * d, 10)))
        return nn.Sequential(*blocks)

    b = scale
    return {
        "residual-mlp-24": (mlp, torch.randn(256 * b, 512, generator=g), torch.randint(0, 10, (256 * b,), generator=g)),
        "conv-bn-13": (cnn, torch.randn(16 * b, 3, 32, 32, generator=g), torch.randint(0, 10, (16 * b,), generator=g)),
        "transformer-8": (
            transformer,
            torch.randn(16 * b, 64, 128, generator=g),
            torch.randint(0, 10, (16 * b,), generator=g),
        ),
    }


def step(fn: Runner, params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor) -> None:
    for p in params:
        p.grad = None
    nn.functional.cross_entropy(fn(x), y).backward()


def peak(fn: Runner, params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor) -> int:
    """Measured peak of one step, in bytes, counted as remat's budget counts."""
    if x.device.type == "cuda":
        for p in params:
            p.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated() - x.numel() * x.element_size()
        torch.cuda.reset_peak_memory_stats()
        step(fn, params, x, y)
        torch.cuda.synchronize()
        # Parameter gradients stay allocated after the step: leave them out.
        grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
        return torch.cuda.max_memory_allocated() - base - grads
    with rt.LiveBytes() as live:
        live.exclude_parameter_gradients(params)
        step(fn, params, x, y)
    return live.peak + x.numel() * x.element_size()


def step_ms(fn: Runner, params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor) -> float:
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    step(fn, params, x, y)
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def mib(n: float) -> str:
    return f"{n / 2**20:8.2f}"


def bench_model(
    name: str, make: Callable[[], nn.Sequential], x: torch.Tensor, y: torch.Tensor, fractions: list[float], rounds: int
) -> list[dict[str, Any]]:
    device = x.device
    chain = rt.profile(make().to(device), x, repeat=5)
    L = len(chain)
    store_all = remat.solve(chain, 1 << 50, algorithm="store-all").peak_memory
    plain = make().to(device)
    plain_params = list(plain.parameters())
    plain_peak = peak(plain, plain_params, x, y)
    seq_model = make().to(device)
    seq_params = list(seq_model.parameters())

    def segments(k: int) -> Runner:
        return lambda inp: checkpoint_sequential(seq_model, k, inp, use_reentrant=False)

    seq_peaks = {k: peak(segments(k), seq_params, x, y) for k in range(1, L + 1)}
    rows = []
    print(
        f"\n{name}: {L} stages, batch {x.shape[0]}, {device}; store-all predicted {mib(store_all)} MiB, "
        f"plain measured {mib(plain_peak)} MiB"
    )
    print(
        f"{'budget':>9} {'variant':<30} {'predicted':>9} {'measured':>9} {'model ms':>9} {'step ms':>9}"
        "  (MiB; model ms: the chain's makespan of the schedule)"
    )
    store_all_ms = remat.solve(chain, 1 << 50, algorithm="store-all").makespan
    for n, frac in enumerate(fractions):
        budget = int(store_all * frac)
        variants: dict[str, tuple[Runner, list[nn.Parameter], int | None]] = {"plain": (plain, plain_params, None)}
        measured: dict[str, int] = {"plain": plain_peak}
        model_ms: dict[str, float] = {"plain": store_all_ms}
        # The executor's own cost: store-all through it against plain autograd (once per model).
        for algorithm in ("auto", "sequential") + (("store-all",) if n == 0 else ()):
            module = make().to(device)
            try:
                cap = 1 << 50 if algorithm == "store-all" else budget
                model = rt.Checkpointed(module, cap, algorithm=algorithm, chain=chain)
                model.plan(x)
            except remat.InfeasibleError as e:
                print(f"{mib(budget)} remat {algorithm}: infeasible (smallest budget {mib(e.min_budget)} MiB)")
                continue
            label = "remat" if algorithm == "auto" else f"remat {algorithm}"
            params = list(module.parameters())
            assert model.schedule is not None
            variants[label] = (model, params, model.schedule.peak_memory)
            measured[label] = peak(model, params, x, y)
            model_ms[label] = model.schedule.makespan
        if "remat" in measured:
            fits = [k for k, p in seq_peaks.items() if p <= measured["remat"]]
            if fits:
                k = min(fits)
                variants[f"checkpoint_sequential K={k}"] = (segments(k), seq_params, None)
                measured[f"checkpoint_sequential K={k}"] = seq_peaks[k]
                # remat's model of it: the same segments, on the measured chain.
                model_ms[f"checkpoint_sequential K={k}"] = remat.solve(
                    chain, 1 << 50, algorithm="sequential", segments=k
                ).makespan
            else:
                print(f"{mib(budget)} checkpoint_sequential: no K fits remat's measured peak")
        times: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(rounds):
            for v, (fn, ps, _) in variants.items():
                times[v].append(step_ms(fn, ps, x, y))
        for v, (_, _, predicted) in variants.items():
            ms = statistics.median(times[v])
            pred = mib(predicted) if predicted is not None else f"{'-':>8}"
            print(f"{mib(budget)} {v:<30} {pred:>9} {mib(measured[v])} {model_ms[v]:9.1f} {ms:9.1f}")
            rows.append(
                {
                    "model": name,
                    "device": str(device),
                    "budget": budget,
                    "variant": v,
                    "predicted_peak": predicted,
                    "measured_peak": measured[v],
                    "model_ms": model_ms[v],
                    "step_ms": ms,
                    "step_ms_all": times[v],
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=5, help="timed steps per variant (median)")
    ap.add_argument("--fractions", default="0.3,0.5,0.7", help="budgets as fractions of the store-all peak")
    ap.add_argument("--scale", type=int, default=1, help="batch multiplier (e.g. 16 on a GPU)")
    ap.add_argument("--models", default="", help="comma-separated subset of the model names")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    fractions = [float(f) for f in args.fractions.split(",")]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
        + (f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "")
    )
    rows: list[dict[str, Any]] = []
    for name, (make, x, y) in models(device, args.scale).items():
        if args.models and name not in args.models.split(","):
            continue
        rows += bench_model(name, make, x.to(device), y.to(device), fractions, args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
