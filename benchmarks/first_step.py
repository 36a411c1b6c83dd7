#!/usr/bin/env python3
"""The first training step under remat.torch.apply, profile and solve included,
against a plain step, and what later steps of other shapes cost. A script,
not a test.

- ResNet-50 (torchvision, random weights), 64x64, batch 8, CPU, at "50%":
  the first step (finding the stack, profiling its distinct blocks, solving,
  measuring the stem and head) and the median of the next ones, beside plain.
- GPT-2 (HF config, 4 blocks, vocabulary 8,000, at "70%"): steps at sequence
  lengths 128, 96, 64, 128: how many times the stack was profiled (once: a
  shorter sequence scales the chain; a longer one than any profiled would be
  profiled again, since attention's scores grow as its square).

    python benchmarks/first_step.py [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchvision
import transformers

import remat.torch as rt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, 64, 64, generator=g), torch.randint(0, 1000, (8,), generator=g)

    def step(m: torch.nn.Module) -> float:
        t0 = time.perf_counter()
        m.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(m(x), y).backward()
        return time.perf_counter() - t0

    torch.manual_seed(0)
    plain = torchvision.models.resnet50().train()
    step(plain)
    torch.manual_seed(0)
    ours = torchvision.models.resnet50().train()
    t0 = time.perf_counter()
    plan = rt.apply(ours, memory="50%")
    step(ours)
    first = time.perf_counter() - t0
    later = [step(ours) for _ in range(5)]
    base = [step(plain) for _ in range(5)]
    print(
        f"ResNet-50 64x64 batch 8, {args.threads} thread(s): first step under remat {first:.2f} s "
        f"(plain step {statistics.median(base):.2f} s, later remat steps {statistics.median(later):.2f} s)"
    )
    print(plan.explain())

    # A vocabulary of 8,000, as the other benchmarks': at GPT-2's own 50,257
    # the embeddings' gradient alone is over 70% of this small model's step.
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=8000)
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(cfg).train()
    plan = rt.apply(lm, memory="70%")
    ids = torch.randint(0, cfg.vocab_size, (4, 128), generator=g)
    for length in (128, 96, 64, 128):
        t0 = time.perf_counter()
        lm(ids[:, :length], labels=ids[:, :length]).loss.backward()
        print(f"GPT-2 sequence {length}: step {time.perf_counter() - t0:.2f} s, profiled {plan.profiles} time(s)")


if __name__ == "__main__":
    main()
