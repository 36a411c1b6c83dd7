#!/usr/bin/env python3
"""remat.torch.apply against Hugging Face's own gradient checkpointing, on
GPT-2 and a Llama-shaped model built from configs (random weights, nothing
downloaded). A script, not a test: it prints a table.

Variants, each a fresh model from the same seed, trained with the loop
unchanged (``model(ids, labels=ids).loss.backward()``):

- ``plain``: no recomputation;
- ``hf``: ``model.gradient_checkpointing_enable()`` (every block recomputed);
- ``remat @ hf``: ``remat.torch.apply(model, memory=<hf's measured peak>)``,
  with its default recording options (each block measured under
  ``Policy.SAVE_MATMULS`` and ``Policy.SAVE_INPUT``, chosen per block by the
  solver: issue 24);
- ``remat @ hf, no options``: the same with ``policies=()`` (blocks recorded
  whole or not at all, remat before issue 24);
- ``remat @ 80% hf``: remat with options at 80% of it (or the smallest budget
  that fits, reported, when 80% is below it; ``--no-80`` leaves it out);
- with ``--above 1.25``: remat with and without options at 125% of it.

Besides the measured step, each remat variant's *predicted* overhead is
printed: the schedule's makespan less storing everything, on the chain remat
profiled, against HF's on the same chain (per-block checkpointing runs every
block's forward once more: the sum of the blocks' forward times).

Peaks are LiveBytes' (live tensor bytes on the CPU, parameter gradients
excluded, as remat's budget counts them) on the second step (the first
measures and plans); step times are medians of ``--rounds`` rounds in which
every variant runs one step (interleaved, so a busy machine slows them alike).
Gradients of every variant are compared with plain's.

    python benchmarks/hf_models.py [--model gpt2|llama] [--batch 4] [--seq 128] [--rounds 5] [--repeat 5]
                                   [--above X] [--no-80]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import transformers

import remat
import remat.torch as rt


def config(name: str, layers: int | None) -> tuple[Any, Any]:
    if name == "gpt2":  # GPT-2 small's shape
        c = transformers.GPT2Config(resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
        if layers:
            c.n_layer = layers
        return transformers.GPT2LMHeadModel, c
    c = transformers.LlamaConfig(  # a Llama shape at GPT-2 small's width
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=layers or 12,
        num_attention_heads=12,
        num_key_value_heads=4,
        vocab_size=32000,
        attention_dropout=0.1,
    )
    return transformers.LlamaForCausalLM, c


def apply_fitting(
    make: Callable[[], Any], step: Callable[[Any], None], budget: int, **kwargs: Any
) -> tuple[Any, rt.AppliedPlan, str | None]:
    """A fresh model under ``remat.torch.apply(memory=budget, **kwargs)`` after
    two steps (the first profiles and plans). Where the budget is infeasible,
    a fresh model at the smallest budget the error names, and a note saying so.
    Returns the model, its plan and the note (None when the budget fitted)."""
    m = make()
    plan = rt.apply(m, memory=budget, **kwargs)
    try:
        step(m)
        step(m)
        return m, plan, None
    except remat.InfeasibleError as e:
        plan.remove()
        fits = int(e.min_budget)
        m = make()
        plan = rt.apply(m, memory=fits, **kwargs)
        step(m)
        step(m)
        return m, plan, f"{remat.format_size(budget)} infeasible; ran at {remat.format_size(fits)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--layers", type=int, default=None, help="blocks (default: the config's)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per block when remat profiles (default 5)")
    ap.add_argument(
        "--above",
        type=float,
        default=None,
        help="also remat with and without options at this multiple of HF's peak (e.g. 1.25)",
    )
    ap.add_argument("--no-80", action="store_true", help="leave out remat at 80%% of HF's peak")
    args = ap.parse_args()
    load_before = os.getloadavg()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    cls, cfg = config(args.model, args.layers)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=torch.Generator().manual_seed(1))

    def make() -> Any:
        torch.manual_seed(0)
        return cls(cfg).train()

    def step(model: Any) -> None:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        model(ids, labels=ids).loss.backward()

    def peak(model: Any) -> int:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        with rt.LiveBytes() as live:
            live.exclude_parameter_gradients(model.parameters())
            loss = model(ids, labels=ids).loss
            loss.backward()
            del loss
        return live.peak

    models: dict[str, Any] = {"plain": make(), "hf": make()}
    models["hf"].gradient_checkpointing_enable()
    peaks = {name: peak(m) for name, m in models.items()}
    plans: dict[str, rt.AppliedPlan] = {}
    notes: dict[str, str] = {}
    remats: list[tuple[str, int, Any]] = [
        ("remat @ hf", peaks["hf"], rt.DEFAULT_POLICIES),
        ("remat @ hf, no options", peaks["hf"], ()),
    ]
    if args.above:
        pct = f"{100 * args.above:.0f}% hf"
        remats.append((f"remat @ {pct}", int(args.above * peaks["hf"]), rt.DEFAULT_POLICIES))
        remats.append((f"remat @ {pct}, no options", int(args.above * peaks["hf"]), ()))
    if not args.no_80:
        remats.append(("remat @ 80% hf", int(0.8 * peaks["hf"]), rt.DEFAULT_POLICIES))
    for name, budget, policies in remats:
        m, plan, note = apply_fitting(make, step, budget, policies=policies, repeat=args.repeat)
        if note:
            notes[name] = note
        models[name], plans[name] = m, plan
        peaks[name] = peak(m)
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, m in models.items():
            t0 = time.perf_counter()
            step(m)
            times[name].append(time.perf_counter() - t0)
    ref = models["plain"]
    load_after = os.getloadavg()
    print(
        f"{args.model} ({cfg.num_hidden_layers} blocks), batch {args.batch}, sequence {args.seq}, CPU, "
        f"{args.threads} thread(s), torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, load (1/5/15 min) {' '.join(f'{x:.1f}' for x in load_before)} before, "
        f"{' '.join(f'{x:.1f}' for x in load_after)} after, {args.rounds} rounds"
    )
    print(
        f"{'variant':<24}{'peak':>12}{'predicted':>12}{'step s':>9}{'x plain':>9}{'x hf':>8}"
        f"{'pred. ovh ms':>14}{'x hf pred':>11}  gradients"
    )

    def per_round(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    for name, m in models.items():
        same = all(torch.equal(p.grad, q.grad) for p, q in zip(ref.parameters(), m.parameters()))
        plan = plans.get(name)
        predicted = plan.peak_memory if plan is not None else None
        med = statistics.median(times[name])
        ovh = ovh_hf = ""
        first = plans.get("remat @ hf")
        if name == "hf" and first is not None and first.chain is not None:
            ovh, ovh_hf = f"{sum(st.forward_time for st in first.chain.stages):.1f}", "1.000"
        if plan is not None and plan.chain is not None and plan.schedule is not None:
            # Predicted overheads on the chain this plan profiled: remat's schedule
            # and HF's (every block's forward once more).
            over = plan.schedule.makespan - plan.chain.store_all_time
            hf_over = sum(st.forward_time for st in plan.chain.stages)
            ovh, ovh_hf = f"{over:.1f}", f"{over / hf_over:.3f}"
        print(
            f"{name:<24}{remat.format_size(peaks[name]):>12}"
            f"{remat.format_size(predicted) if predicted else '':>12}{med:>9.3f}{per_round(name, 'plain'):>9.3f}"
            f"{per_round(name, 'hf'):>8.3f}{ovh:>14}{ovh_hf:>11}  {'identical' if same else 'DIFFER'}"
        )
    for name, note in notes.items():
        print(f"{name}: {note}")
    for name, plan in plans.items():
        print(f"\n{name}:\n{plan.explain()}")


if __name__ == "__main__":
    main()
