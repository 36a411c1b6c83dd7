#!/usr/bin/env python3
"""Compiled remat on a GPU against everything torch.compile users can do at a
memory budget (issue 34's GPU item): GPT-2 medium and a Llama-1B shape, random
init from configs, bf16, sequence 2048. A script, not a test: it prints a
markdown table per model and writes them (and a JSON file) to ``--out``.

Variants, each a fresh model from the same seed, each ``torch.compile``d (the
whole model, inductor), the training loop unchanged
(``model(ids, labels=ids).loss.backward()``):

- ``compile``: torch.compile's default (its partitioner's own recomputation);
- ``budget B``: ``torch._functorch.config.activation_memory_budget = B``
  while the variant compiles (the knapsack over the joint graph);
- ``hf ckpt``: HF's ``gradient_checkpointing_enable()`` (non-reentrant, every
  block recomputed) under torch.compile;
- ``sac``: every block under non-reentrant checkpoint with torchtitan's
  selective policy (benchmarks/compiled_curve.py's), under torch.compile;
- ``remat S%``: ``remat.torch.apply(model, memory=S x compiled plain's peak)``
  then ``torch.compile(model)``.

Peak: ``torch.cuda.max_memory_allocated()`` above what a step starts with
(parameters and their gradients allocated), after the variant's plan is final.
Step: median of ``--rounds`` interleaved rounds; tokens/s = batch x sequence /
step; ``x compile`` the median per-round ratio to compiled plain.

A GPU lease is short, so variants are prepared in priority order and a variant
whose compile would not finish before the model's share of ``--deadline`` is
skipped (and named as skipped).

    python benchmarks/gpu_compiled.py --out DIR [--models llama-1b gpt2-medium] [--deadline 480]
    python benchmarks/gpu_compiled.py --device cpu --layers 2 --batch 1 --seq 64 --rounds 1 --out /tmp/x  # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compiled_curve import budget_backend, checkpointed, inductor_backend
from gpu_hf import config

import remat
import remat.torch as rt
from remat.torch.memory import AllocatorTrace

BATCH = {"gpt2-medium": 8, "llama-1b": 4}


def run_model(name: str, args: argparse.Namespace, until: float, out: dict[str, Any]) -> None:
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    cls, cfg = config(name, args.seq)
    if args.layers:
        cfg.num_hidden_layers = args.layers
    if args.vocab:
        cfg.vocab_size = args.vocab
    batch = args.batch or BATCH[name]
    ids = torch.randint(0, cfg.vocab_size, (batch, args.seq), device=dev, generator=None)
    res: dict[str, Any] = {"model": name, "layers": cfg.num_hidden_layers, "batch": batch, "seq": args.seq}
    out[name] = res
    rows: dict[str, dict[str, Any]] = {}
    res["rows"] = rows
    notes: dict[str, str] = {}
    res["notes"] = notes

    def make() -> Any:
        torch.manual_seed(0)
        with dev:
            return cls(cfg).to(torch.bfloat16).train()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def step(model: Any, run: Callable[..., Any]) -> float:
        model.zero_grad(set_to_none=False)
        torch.manual_seed(7)
        sync()
        t0 = time.perf_counter()
        run(ids, labels=ids).loss.backward()
        sync()
        return time.perf_counter() - t0

    def peak(model: Any, run: Callable[..., Any]) -> int:
        step(model, run)  # gradients allocated
        if not cuda:  # the smoke test: the allocator's events
            model.zero_grad(set_to_none=False)
            with AllocatorTrace() as trace:
                run(ids, labels=ids).loss.backward()
                end = trace.mark()
            return trace.peak(0, end)
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step(model, run)
        return torch.cuda.max_memory_allocated() - base

    models: dict[str, tuple[Any, Callable[..., Any]]] = {}
    plans: dict[str, rt.AppliedPlan] = {}
    last_compile = [0.0]

    Built = tuple[Any, Callable[..., Any], rt.AppliedPlan | None]

    def prepare(n: str, build: Callable[..., Built], steps: int) -> None:
        left = until - time.perf_counter()
        if left < 0.8 * last_compile[0]:
            notes[n] = f"skipped: {left:.0f} s left of this model's share of the lease"
            return
        t0 = time.perf_counter()
        try:
            m, run, plan = build()
            for attempt in range(3):
                try:
                    firsts = [step(m, run) for _ in range(steps)]
                    break
                except remat.InfeasibleError as e:
                    # Below remat's floor: the floor is a point worth measuring
                    # (against HF checkpointing's peak). The first step names it
                    # before the parts outside the stack are measured, so the
                    # second may name a higher one.
                    if attempt == 2:
                        raise
                    asked = gib(plan.budget if plan else None)
                    notes[n] = f"{asked} infeasible; ran at the smallest named, {gib(e.min_budget)}"
                    m, run, plan = build(int(e.min_budget))
            rows[n] = {"first_steps_s": firsts}
            models[n] = (m, run)
            if plan is not None:
                plans[n] = plan
            rows[n]["peak"] = peak(m, run)
        except Exception as e:
            notes[n] = f"failed: {type(e).__name__}: {str(e)[:400]}"
            traceback.print_exc()
            models.pop(n, None)
            rows.pop(n, None)
        last_compile[0] = time.perf_counter() - t0
        print(f"  {n}: {last_compile[0]:.0f} s, peak {rows.get(n, {}).get('peak')}", flush=True)

    def peer(patch: Callable[[Any], None] | None, backend: Callable[..., Any]) -> Callable[[], Any]:
        def build() -> Any:
            m = make()
            if patch:
                patch(m)
            return m, torch.compile(m, backend=backend), None

        return build

    def hf(m: Any) -> None:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def blocks(m: Any) -> list[Any]:
        return list(m.model.layers if name == "llama-1b" else m.transformer.h)

    def sac(m: Any) -> None:
        checkpointed(blocks(m), selective=True)

    def with_remat(share: float) -> Callable[..., Any]:
        def build(memory: int | None = None) -> Any:
            m = make()
            plan = rt.apply(m, memory=memory or int(share * rows["compile"]["peak"]))
            return m, torch.compile(m, backend=inductor_backend()), plan

        return build

    queue: list[tuple[str, Callable[..., Any], int]] = [("compile", peer(None, inductor_backend()), 2)]
    remats = [(f"remat {round(s * 100)}%", with_remat(s), 5) for s in args.shares]
    amb = [(f"budget {b}", peer(None, budget_backend(b)), 2) for b in args.budgets]
    queue += [*remats[:1], ("hf ckpt", peer(hf, inductor_backend()), 2), ("sac", peer(sac, inductor_backend()), 2)]
    queue += amb[:1] + remats[1:] + amb[1:]
    for n, build, steps in queue:
        if n != "compile" and "compile" not in rows:
            notes[n] = "not run: compiled plain failed"
            continue
        prepare(n, build, steps)
    times: dict[str, list[float]] = {n: [] for n in models}
    for _ in range(args.rounds):
        for n, (m, run) in models.items():
            times[n].append(step(m, run))
    base = times.get("compile")
    for n in models:
        rows[n]["step_s"] = statistics.median(times[n])
        rows[n]["tokens_s"] = batch * args.seq / rows[n]["step_s"]
        if base:
            rows[n]["x_compile"] = statistics.median(a / b for a, b in zip(times[n], base))
    for n, plan in plans.items():
        if n in rows:
            rows[n].update(
                budget=plan.budget,
                predicted=plan.peak_memory,
                schedule=str(plan.schedule),
                in_graph=bool(plan._in_graph),
                explain=plan.explain(),
            )
    ref = models.get("compile")
    if ref is not None:
        for n, (m, _) in models.items():
            rows[n]["max_abs_grad_diff"] = max(
                (p.grad.float() - q.grad.float()).abs().max().item()
                for p, q in zip(ref[0].parameters(), m.parameters())
                if p.grad is not None and q.grad is not None
            )
    models.clear()
    plans.clear()
    del ref
    if cuda:
        torch.cuda.empty_cache()


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def table(res: dict[str, Any], device: str) -> str:
    rows = res["rows"]
    plain = rows.get("compile", {}).get("peak")
    lines = [
        f"### {res['model']} ({res['layers']} blocks), bf16, batch {res['batch']}, sequence {res['seq']}, {device}",
        "",
        "| variant | peak | of compiled plain's | predicted | step ms | tokens/s | x compile | first steps (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, r in sorted(rows.items(), key=lambda kv: -kv[1].get("peak", 0)):
        share = f"{r['peak'] / plain * 100:.1f}%" if plain and "peak" in r else "-"
        name = f"{n} (in the graph)" if r.get("in_graph") else n
        lines.append(
            f"| {name} | {gib(r.get('peak'))} | {share} | {gib(r.get('predicted'))} | "
            f"{r.get('step_s', float('nan')) * 1e3:.1f} | {r.get('tokens_s', 0):,.0f} | "
            f"{r.get('x_compile', float('nan')):.3f} | {', '.join(f'{t:.1f}' for t in r['first_steps_s'])} |"
        )
    for n, note in res["notes"].items():
        lines.append(f"- {n}: {note}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["llama-1b", "gpt2-medium"])
    ap.add_argument("--batch", type=int, default=None, help="default: 4 (llama-1b), 8 (gpt2-medium)")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shares", type=float, nargs="*", default=[0.6, 0.8, 0.4], help="remat budgets, in order")
    ap.add_argument("--budgets", type=float, nargs="*", default=[0.5, 0.3], help="activation_memory_budget")
    ap.add_argument("--deadline", type=float, default=480.0, help="seconds for all models (shared equally)")
    ap.add_argument("--layers", type=int, default=None, help="blocks (default: the shape's)")
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary (default: the shape's)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True, help="a folder for results.json and tables.md")
    args = ap.parse_args()
    torch._dynamo.config.recompile_limit = 1024
    torch._dynamo.config.accumulated_recompile_limit = 4096
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    dev = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    head = f"{time.strftime('%Y-%m-%d')}, {dev}, torch {torch.__version__}, transformers {transformers.__version__}"
    print(head, flush=True)
    out: dict[str, Any] = {"machine": head}
    for i, name in enumerate(args.models):
        until = t0 + args.deadline * (i + 1) / len(args.models)
        m0 = time.perf_counter()
        try:
            run_model(name, args, until, out)
        except Exception:
            traceback.print_exc()
        print(f"({name}: {time.perf_counter() - m0:.0f} s)", flush=True)
        if name in out:
            print(table(out[name], dev), flush=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(out, f, indent=1, default=str)
        with open(os.path.join(args.out, "tables.md"), "w") as f:
            f.write(head + "\n\n" + "\n\n".join(table(out[n], dev) for n in args.models if n in out) + "\n")
    _ = remat


if __name__ == "__main__":
    main()
