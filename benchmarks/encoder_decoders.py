#!/usr/bin/env python3
"""Encoder-decoders under remat against Hugging Face's own checkpointing (issue 35).

For each of the census' encoder-decoders (T5, BART, Marian, Pegasus, Whisper;
4 + 4 layers of width 64, random weights from their configs, batch 4,
sequence 64, on the CPU, train mode):

1. plain training's peak;
2. ``model.gradient_checkpointing_enable()``'s peak (every encoder and decoder
   layer recomputed);
3. remat's smallest budget: ``apply(model, memory=1)`` raises, on the step that
   has measured the parts outside the stacks, the ``InfeasibleError`` that
   names the smallest budget for the whole step; a fresh copy then trains at
   exactly that budget, and its measured peak, its prediction and whether
   its loss and gradients equal plain training's bit for bit are reported.

Peaks are ``remat.torch.LiveBytes``' (parameter gradients excluded), one step
after two warm-up steps, each step from the same seeds (census.py's ``step``).

    PYTHONPATH=python .venv/bin/python benchmarks/encoder_decoders.py [--only t5,bart]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import warnings

import torch
from census import Case, encoder_decoders, same_gradients, step

import remat
import remat.torch as rt


def smallest(case: Case) -> int:
    """The smallest budget for the whole step that remat names."""
    probe = case.make()
    rt.apply(probe, memory=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            try:
                step(probe, case.inputs(False), case.loss)
            except remat.InfeasibleError as e:
                if e.min_budget is not None:
                    return int(e.min_budget)
                raise
    raise RuntimeError(f"{case.name}: memory=1 did not raise")


def row(case: Case) -> dict[str, object]:
    main = case.inputs(False)
    plain = case.make()
    step(plain, main, case.loss)
    plain_loss, plain_peak = step(plain, main, case.loss)
    hf = case.make()
    hf.gradient_checkpointing_enable()  # type: ignore[operator]
    step(hf, main, case.loss)
    _, hf_peak = step(hf, main, case.loss)
    least = smallest(case)
    ours = case.make()
    plan = rt.apply(ours, memory=least)
    for _ in range(2):
        step(ours, main, case.loss)
    loss, peak = step(ours, main, case.loss)
    grads, _ = same_gradients(plain, ours)
    return {
        "model": case.name,
        "stacks": plan.where,
        "plain": plain_peak,
        "hf": hf_peak,
        "budget": least,
        "measured": peak,
        "predicted": plan.peak_memory,
        "equal": bool(torch.equal(loss, plain_loss)) and grads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names (t5,bart,marian,pegasus,whisper)")
    args = parser.parse_args()
    cases = encoder_decoders()
    if args.only:
        wanted = {n.strip() for n in args.only.split(",")}
        cases = [c for c in cases if c.name in wanted]
    print(
        f"encoder-decoders, {datetime.date.today()}, {platform.machine()}, {torch.get_num_threads()} thread(s), "
        f"torch {torch.__version__}"
    )
    print()
    print(
        "| model | stacks | plain KiB | HF checkpointing KiB | remat's smallest budget KiB | remat measured KiB "
        "| predicted KiB | measured / HF | loss and gradients equal plain |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        r = row(case)
        k = [f"{int(r[n]) / 1024:,.1f}" for n in ("plain", "hf", "budget", "measured", "predicted")]  # type: ignore[call-overload]
        share = int(r["measured"]) / int(r["hf"])  # type: ignore[call-overload]
        print(f"| {r['model']} | `{r['stacks']}` | {' | '.join(k)} | {share:.3f} | {'yes' if r['equal'] else 'NO'} |")


if __name__ == "__main__":
    main()
