#!/usr/bin/env python3
"""Below every peer's floor: remat with the head and the loss as a loss option
(whole, or in chunks of tokens, never all the logits at once) against
Hugging Face's checkpointing, on a language model whose vocabulary dominates
the step (issue 37). A script, not a test: it prints a markdown table.

The model (random init from a config, nothing downloaded): a Llama shape with
Llama 3's vocabulary, 128,256 (hidden 256, 4 layers, 8 heads / 4 KV heads,
intermediate 688), batch 4, sequence 512, fp32, on the CPU. Variants, each a
fresh copy of one model, the training loop unchanged
(``model(ids, labels=ids).loss.backward()``):

- ``plain``: no recomputation;
- ``hf ckpt``: ``gradient_checkpointing_enable()`` (every block recomputed);
- ``remat @ hf``: ``remat.torch.apply(model, memory=<hf ckpt's measured peak>)``;
- ``remat @ hf, head whole``: the same with ``chunked_loss=False`` (remat before
  loss options);
- ``remat floor``: remat at the smallest budget it names (asked for 1 byte,
  then at what each error names, until a plan fits).

Peak: the allocator's (``torch.profiler`` memory events), parameter gradients
left out, above what the step starts with, on a step after the plan is final.
Step: the median over ``--rounds`` interleaved rounds of each variant's time
over plain's in the same round. Loss and gradients: the largest relative
difference from plain's.

    python benchmarks/chunked_loss.py [--rounds 5] [--vocab 128256] [--batch 4] [--seq 512] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import statistics
import time
from typing import Any

import torch
import transformers

import remat
import remat.torch as rt
from remat.torch.memory import AllocatorTrace


def model_of(vocab: int, layers: int) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=256,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=688,
        vocab_size=vocab,
        use_cache=False,
        tie_word_embeddings=False,
    )
    return transformers.LlamaForCausalLM(config).train()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(1))
    base = model_of(args.vocab, args.layers)

    def step(m: Any) -> float:
        m.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        out = m(ids, labels=ids)
        loss = out.loss
        del out
        loss.backward()
        m.last_loss = float(loss.detach())
        return time.perf_counter() - t0

    def peak(m: Any) -> int:
        m.zero_grad(set_to_none=True)
        with AllocatorTrace() as trace:
            trace.exclude_parameter_gradients(m.parameters())
            loss = m(ids, labels=ids).loss
            loss.backward()
            end = trace.mark()
        return trace.peak(0, end)

    models: dict[str, Any] = {}
    plans: dict[str, rt.AppliedPlan] = {}
    notes: dict[str, str] = {}
    models["plain"] = copy.deepcopy(base)
    hf = copy.deepcopy(base)
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    models["hf ckpt"] = hf
    for m in models.values():
        step(m)
    peaks = {n: peak(m) for n, m in models.items()}

    def remat_at(name: str, memory: int, **kw: Any) -> None:
        for _ in range(4):
            m = copy.deepcopy(base)
            plan = rt.apply(m, memory=memory, **kw)
            try:
                for _ in range(3):
                    step(m)
            except remat.InfeasibleError as e:
                plan.remove()
                assert e.min_budget is not None and e.min_budget > memory, e
                memory = int(e.min_budget)
                continue
            models[name], plans[name] = m, plan
            peaks[name] = peak(m)
            return
        notes[name] = "no budget the errors named fitted"

    remat_at("remat @ hf", peaks["hf ckpt"])
    remat_at("remat @ hf, head whole", peaks["hf ckpt"], chunked_loss=False)
    remat_at("remat floor", 1)
    times: dict[str, list[float]] = {n: [] for n in models}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for n, m in models.items():
            times[n].append(step(m))
    load.append(os.getloadavg()[0])
    ref = models["plain"]
    print(
        f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {args.threads} threads, load {load[0]:.1f} / {load[1]:.1f}, "
        f"{args.rounds} rounds"
    )
    print(
        f"\nLlama shape, vocabulary {args.vocab:,}, {args.layers} layers, batch {args.batch}, sequence {args.seq}, "
        "fp32, CPU\n"
    )
    print(
        "| variant | peak | of hf ckpt's | predicted | x plain | loss rel. diff | max grad rel. diff | head and loss |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n, m in models.items():
        x = statistics.median(a / b for a, b in zip(times[n], times["plain"]))
        grad, where = max(
            (float((p.grad - q.grad).abs().max() / q.grad.abs().max().clamp(min=1e-30)), name)
            for (name, p), q in zip(m.named_parameters(), ref.parameters())
            if q.grad is not None
        )
        loss = abs(m.last_loss - ref.last_loss) / abs(ref.last_loss)
        plan = plans.get(n)
        predicted = remat.format_size(plan.peak_memory) if plan and plan.peak_memory else ""
        head = ""
        if plan is not None:
            head = "whole" if plan.loss_chunks in (None, 1) else f"{plan.loss_chunks} chunks"
        print(
            f"| {n} | {remat.format_size(peaks[n])} | {peaks[n] / peaks['hf ckpt'] * 100:.1f}% | {predicted} | "
            f"{x:.3f} | {loss:.2g} | {grad:.3g}{f' ({where})' if grad else ''} | {head} |"
        )
    for n, note in notes.items():
        print(f"- {n}: {note}")
    for n, plan in plans.items():
        print(f"\n{n}:\n{plan.explain()}")


if __name__ == "__main__":
    main()
