#!/usr/bin/env python3
"""How large a batch fits a memory budget: remat (its plans with the loss as a
loss option, :func:`remat.torch.max_batch`) against Hugging Face's gradient
checkpointing (every block recomputed, the head and the loss whole), searched
the same way (:func:`remat.torch.largest_fitting`: doubling, then bisecting),
each size really trained and its peak measured by the allocator
(``torch.profiler`` memory events, parameter gradients left out). A script,
not a test: it prints a markdown table.

Models (random init from configs, nothing downloaded), fp32 on the CPU:

- ``llama``: a Llama shape with Llama 3's vocabulary, 128,256 (hidden 256, 4
  layers, 8 heads / 4 KV heads, intermediate 688), sequence 512;
- ``gpt2``: GPT-2 small (12 layers, hidden 768, vocabulary 50,257), sequence 256.

The budget is 1.01 x HF checkpointing's measured peak at ``--at`` sequences
(1 by default; the 1% because at exactly HF's peak remat's plan, HF's own
schedule, measured 2 KiB above its prediction on GPT-2 small): the batch HF
fits there is about that; remat's is what its plans fit in the same bytes.

    python benchmarks/max_batch.py [--models llama gpt2] [--at 1] [--limit 16]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from typing import Any

import torch
import transformers

import remat
import remat.torch as rt
from remat.torch.memory import AllocatorTrace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chunked_loss import model_of  # benchmarks/, beside this script


def make(name: str) -> tuple[Any, int, int]:
    """(the model, its vocabulary, the sequence length)."""
    torch.manual_seed(0)
    if name == "llama":
        return model_of(128256, 4), 128256, 512  # chunked_loss.py's model
    config = transformers.GPT2Config(use_cache=False)  # GPT-2 small
    return transformers.GPT2LMHeadModel(config).train(), config.vocab_size, 256


def hf_peak(model: Any, ids: torch.Tensor) -> int:
    model.zero_grad(set_to_none=True)
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        model(ids, labels=ids).loss.backward()
        end = trace.mark()
    model.zero_grad(set_to_none=True)
    return trace.peak(0, end)


def run(name: str, at: int, limit: int) -> None:
    t0 = time.perf_counter()
    model, vocab, seq = make(name)

    def ids(n: int) -> torch.Tensor:
        return torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(n))

    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    hf_peak(model, ids(at))
    budget = int(hf_peak(model, ids(at)) * 1.01)

    def hf_fits(n: int) -> bool:
        return hf_peak(model, ids(n)) <= budget

    hf = rt.largest_fitting(hf_fits, start=at, limit=limit)
    model.gradient_checkpointing_disable()
    found = rt.max_batch(model, lambda n: {"input_ids": ids(n), "labels": ids(n)}, budget, start=at, limit=limit)
    print(
        f"| {name} | {remat.format_size(budget)} ({at}) | {hf} | {found.size} | "
        f"{remat.format_size(found.measured_peak) if found.measured_peak else '-'} |",
        flush=True,
    )
    print(f"\n{name}: {time.perf_counter() - t0:.0f} s; remat's plan at {found.size}:\n{found.explain}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["llama", "gpt2"])
    ap.add_argument("--at", type=int, default=1, help="the batch whose HF-checkpointing peak is the budget")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--limit",
        type=int,
        default=16,
        help="the largest batch tried (each of max_batch's probes profiles afresh, its first step running the head "
        "whole: on a 24 GiB machine the 128K-vocabulary model cannot go much past 16)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {args.threads} threads, load {os.getloadavg()[0]:.1f}\n"
    )
    print("| model | budget (1.01 x HF ckpt's peak at batch) | HF ckpt's largest batch | remat's | its measured peak |")
    print("|---|---|---|---|---|")
    for name in args.models:
        run(name, args.at, args.limit)


if __name__ == "__main__":
    main()
