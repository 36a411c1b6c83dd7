#!/usr/bin/env python3
"""Do two profiles of the same model, taken while the machine is busy, give
the same plan? (issue 34: the profile must be robust to load.) A script, not
a test: it prints what each profile measured and the schedule it led to.

For each model and budget, ``--profiles`` fresh copies are planned one after
another (compiled, ``torch.compile(model)`` after ``apply``), each with its own
profile, while ``--busy`` processes spin on the other cores (and share this
one). The figures the solver reads (a block's forward and backward times and
each option's recompute time) and the schedule are printed per profile, and
whether all schedules agree.

    python benchmarks/profile_stability.py [--busy 3] [--profiles 2] [--models llama,gpt2] [--shares 0.5,0.7]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from typing import Any

import torch

import remat.torch as rt

sys.path.insert(0, os.path.dirname(__file__))
from compiled_curve import Case, peak, step


def spin() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", type=int, default=3)
    ap.add_argument("--profiles", type=int, default=2)
    ap.add_argument("--models", default="llama,gpt2")
    ap.add_argument("--shares", default="0.5,0.7")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 1024
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    try:
        for name in args.models.split(","):
            case = Case(name)
            plain = case.fresh()
            run = torch.compile(plain)
            for _ in range(2):
                step(case, plain, run)
            whole = peak(case, plain, run)
            for share in (float(s) for s in args.shares.split(",")):
                schedules = []
                for i in range(args.profiles):
                    m = case.fresh()
                    plan = rt.apply(m, memory=int(share * whole))
                    run = torch.compile(m)
                    for _ in range(3):
                        step(case, m, run)
                    assert plan.chain is not None
                    s: Any = plan.chain.to_dict()["stages"][0]
                    options = ", ".join(f"{o['name']} +{o['recompute_time']:.2f}" for o in s.get("options") or [])
                    print(
                        f"{name} at {share:.0%}, profile {i + 1} (load {os.getloadavg()[0]:.1f}): block 1 forward "
                        f"{s['forward_time']:.2f} ms, backward {s['backward_time']:.2f} ms, options [{options}] ms"
                    )
                    print(f"    {plan.schedule}")
                    schedules.append(str(plan.schedule))
                print(
                    f"{name} at {share:.0%}: {'the same schedule' if len(set(schedules)) == 1 else 'schedules differ'}"
                )
    finally:
        for p in busy:
            p.kill()


if __name__ == "__main__":
    main()
