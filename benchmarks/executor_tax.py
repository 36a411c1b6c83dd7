#!/usr/bin/env python3
"""What remat's executor costs by itself (issue 34, "no executor tax"). A
script, not a test: it prints a table.

Two comparisons, each on the same schedule, so that only the way it runs
differs:

- **Eager, every block recomputed** (Hugging Face's checkpointing):
  ``model.gradient_checkpointing_enable()`` (``torch.utils.checkpoint``,
  non-reentrant, around every block) against ``remat.torch.apply`` forced onto
  the same schedule (``F_ck`` every block, each recorded again before its
  backward: the ``sequential`` baseline with one segment per block).
- **Compiled, nothing recomputed**: ``torch.compile(model)`` against
  ``remat.torch.apply(model, memory=<huge>)`` then ``torch.compile``: store-all.
  It records every block, so from its fifth step it runs inside the model's
  graph (the script checks it does); the table says what is left of the
  executor's profiling and first steps once a plan is final.

Model: the Llama shape of issue 34 (8 layers, hidden 256, 8 heads / 4 KV,
intermediate 688, vocabulary 8,000), batch 2, sequence 256, random weights,
dropout off, one thread. Every variant runs one step per round, rounds
interleaved; a ratio is the median over rounds of the two variants' times in
the same round (paired).

    python benchmarks/executor_tax.py [--rounds 15] [--layers 8]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import transformers

import remat
import remat.torch as rt

sys.path.insert(0, os.path.dirname(__file__))
from compiled_curve import llama

apply_module = __import__("remat.torch.apply", fromlist=["apply"])


def make(layers: int) -> Any:
    torch.manual_seed(0)
    return llama(layers).train()


def every_block_recomputed(layers: int) -> None:
    """remat's solver, for the plans made below, returns Hugging Face's schedule:
    each block checkpointed, recorded again before its backward."""
    solve = remat.solve

    def forced(chain: remat.Chain, memory: Any, **kwargs: Any) -> remat.Schedule:
        # The baseline keeps its last segment (the last block and the head)
        # whole, as checkpoint_sequential does; HF checkpoints the last block too.
        d = json.loads(solve(chain, 1 << 62, algorithm="sequential", segments=len(chain)).to_json())
        ops = d["operations"]
        first = ops.index({"op": "F_all", "stage": layers})
        ops[first] = {"op": "F_ck", "stage": layers}
        ops.insert(ops.index({"op": "B", "stage": layers}), {"op": "F_all", "stage": layers})
        return remat.Schedule.from_json(json.dumps(d))  # the figures are the baseline's; only the operations run

    apply_module.remat.solve = forced  # the apply module's view of remat.solve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 1024
    ids = torch.randint(0, 8000, (2, 256), generator=torch.Generator().manual_seed(1))

    def step(model: Any, run: Callable[..., Any]) -> float:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        run(ids, labels=ids).loss.backward()
        return time.perf_counter() - t0

    variants: dict[str, tuple[Any, Callable[..., Any]]] = {}
    m = make(args.layers)
    variants["eager plain"] = (m, m)
    m = make(args.layers)
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    variants["eager torch.utils.checkpoint, every block"] = (m, m)
    m = make(args.layers)
    plan = rt.apply(m, memory=1 << 40, policies=())
    variants["eager remat, every block"] = (m, m)
    m = make(args.layers)
    variants["compiled plain"] = (m, torch.compile(m))
    m = make(args.layers)
    stored = rt.apply(m, memory=1 << 40)
    variants["compiled remat, store-all"] = (m, torch.compile(m))
    original = remat.solve
    every_block_recomputed(args.layers)
    try:
        for _ in range(3):  # plans, then runs the final plan
            step(*variants["eager remat, every block"])
    finally:
        apply_module.remat.solve = original
    for model, run in variants.values():
        for _ in range(6):  # a compiled plan is final from its fifth step
            step(model, run)
    assert plan.schedule is not None and stored.schedule is not None
    L = args.layers
    reruns = sum(1 for k, l in plan.schedule.operations if k != "B" and l <= L) - L
    assert reruns == L, plan.schedule
    assert (
        stored.compiled
        and stored._in_graph
        and sum(1 for k, l in stored.schedule.operations if k != "B" and l <= L) == L
    )
    load = [os.getloadavg()[0]]
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for k, (model, run) in variants.items():
            times[k].append(step(model, run))
    load.append(os.getloadavg()[0])

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    print(
        f"{datetime.date.today()} {platform.node()} {os.cpu_count()} cores, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, load {load[0]:.1f} / {load[1]:.1f}, {args.rounds} rounds, "
        f"Llama shape {args.layers} layers, batch 2, sequence 256"
    )
    print()
    print("| variant | step (median) | x its reference (paired median) |")
    print("|---|---|---|")
    refs = {
        "eager torch.utils.checkpoint, every block": "eager plain",
        "eager remat, every block": "eager torch.utils.checkpoint, every block",
        "compiled remat, store-all": "compiled plain",
    }
    for k in variants:
        ref = refs.get(k)
        r = f"{ratio(k, ref):.3f} x {ref}" if ref else ""
        print(f"| {k} | {statistics.median(times[k]) * 1e3:.1f} ms | {r} |")
    print()
    print(f"remat's every-block schedule: {plan.schedule}")


if __name__ == "__main__":
    main()
