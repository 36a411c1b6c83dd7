#!/usr/bin/env python3
"""remat.torch.apply against Hugging Face's own gradient checkpointing, on
GPT-2 and a Llama-shaped model built from configs (random weights, nothing
downloaded). A script, not a test: it prints a table.

Variants, each a fresh model from the same seed, trained with the loop
unchanged (``model(ids, labels=ids).loss.backward()``):

- ``plain``: no recomputation;
- ``hf``: ``model.gradient_checkpointing_enable()`` (every block recomputed);
- ``remat @ hf``: ``remat.torch.apply(model, memory=<hf's measured peak>)``;
- ``remat @ 80% hf``: the same at 80% of it (or the smallest budget that
  fits, reported, when 80% is below it).

Peaks are LiveBytes' (live tensor bytes on the CPU, parameter gradients
excluded, as remat's budget counts them) on the second step (the first
measures and plans); step times are medians of ``--rounds`` rounds in which
every variant runs one step (interleaved, so a busy machine slows them alike).
Gradients of every variant are compared with plain's.

    python benchmarks/hf_models.py [--model gpt2|llama] [--batch 4] [--seq 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--layers", type=int, default=None, help="blocks (default: the config's)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
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
    for name, budget in (("remat @ hf", peaks["hf"]), ("remat @ 80% hf", int(0.8 * peaks["hf"]))):
        m = make()
        plan = rt.apply(m, memory=budget)
        try:
            step(m)
            step(m)
        except remat.InfeasibleError as e:
            plan.remove()
            m = make()
            fits = int(e.min_budget)
            notes[name] = f"{remat.format_size(budget)} infeasible; ran at {remat.format_size(fits)}"
            plan = rt.apply(m, memory=fits)
            step(m)
            step(m)
        models[name], plans[name] = m, plan
        peaks[name] = peak(m)
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, m in models.items():
            t0 = time.perf_counter()
            step(m)
            times[name].append(time.perf_counter() - t0)
    ref = models["plain"]
    print(
        f"{args.model} ({cfg.num_hidden_layers} blocks), batch {args.batch}, sequence {args.seq}, CPU, "
        f"{args.threads} thread(s), torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(f"{'variant':<16}{'peak':>12}{'predicted':>12}{'step s':>9}{'x plain':>9}  gradients")
    base = statistics.median(times["plain"])
    for name, m in models.items():
        same = all(torch.equal(p.grad, q.grad) for p, q in zip(ref.parameters(), m.parameters()))
        predicted = plans[name].peak_memory if name in plans else None
        med = statistics.median(times[name])
        print(
            f"{name:<16}{remat.format_size(peaks[name]):>12}"
            f"{remat.format_size(predicted) if predicted else '':>12}{med:>9.3f}{med / base:>9.3f}  "
            f"{'identical' if same else 'DIFFER'}"
        )
    for name, note in notes.items():
        print(f"{name}: {note}")
    for name, plan in plans.items():
        print(f"\n{name}:\n{plan.explain()}")


if __name__ == "__main__":
    main()
