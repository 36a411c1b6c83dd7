"""Variable-length training under one plan: a census decoder (GPT-2 by
default) applied at ``memory="50%"``, trained at 64 tokens, then at shorter
and shorter sequences, each length twice: a first step (which plans it, and
may size and measure it) and a second one measured by the allocator against
the plan's predicted peak.

    PYTHONPATH=python .venv/bin/python benchmarks/variable_length.py [--model llama] [--json FILE]

Prints, per length, the measured peak, the prediction, their ratio, and how
long the first step at that length took against the second (what planning
it cost). CPU, one thread; nothing downloaded (the census builds its models
from configs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import census

import remat.torch as rt
from remat.torch.memory import AllocatorTrace

LENGTHS = (64, 60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2", help="a census model's name (default: gpt2)")
    parser.add_argument("--json", type=Path, help="write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cases = {c.name: c for c in census.all_cases()}
    if args.model not in cases:
        parser.error(f"--model {args.model!r}: not a census model; one of {', '.join(sorted(cases))}")
    case = cases[args.model]
    model = case.make()
    plan = rt.apply(model, memory="50%")
    (pos, kw) = case.inputs(False)

    def inputs(length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        def cut(v: Any) -> Any:
            return v[:, :length] if torch.is_tensor(v) and v.dim() == 2 else v

        return tuple(cut(a) for a in pos), {k: cut(v) for k, v in kw.items()}

    def step(a: tuple[Any, ...], k: dict[str, Any]) -> None:
        model.zero_grad(set_to_none=True)
        out = model(*a, **k)
        loss = case.loss(out)
        del out
        loss.backward()

    rows = []
    print(f"{args.model}: length, measured, predicted, measured/predicted, first step s, second step s")
    for length in LENGTHS:
        a, k = inputs(length)
        t0 = time.perf_counter()
        step(a, k)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        with AllocatorTrace() as trace:
            trace.exclude_parameter_gradients(list(model.parameters()))
            step(a, k)
            end = trace.mark()
        second = time.perf_counter() - t0
        measured, predicted = trace.peak(0, end), plan.peak_memory or 0
        ratio = measured / predicted if predicted else float("nan")
        rows.append({"length": length, "measured": measured, "predicted": predicted, "first_s": first})
        print(f"{length:4d} {measured:10d} {predicted:10d} {ratio:7.4f} {first:6.2f} {second:6.2f}")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
