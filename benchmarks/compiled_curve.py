#!/usr/bin/env python3
"""Compiled remat against everything torch.compile users can do at a memory
budget (issue 34). A script, not a test: it prints a table and writes a JSON
file (and a PNG plot with ``--plot``, which needs matplotlib).

For each model (random weights from configs, nothing downloaded):

- ``llama``: 8 layers, hidden 256, 8 heads / 4 KV heads, intermediate 688,
  vocabulary 8,000; batch 2, sequence 256;
- ``gpt2``: 8 layers, n_embd 256, 4 heads, vocabulary 8,000, dropout 0.1;
  batch 2, sequence 256;
- ``resnet50``: torchvision's ResNet-50, 64x64 images, batch 8.

the peers, each ``torch.compile``d:

- ``compile``: torch.compile's default (its partitioner's own recomputation);
- ``budget 0.9`` .. ``budget 0.1``: ``torch._functorch.config.activation_memory_budget``
  (the knapsack over the joint graph), set while that variant compiles;
- ``hf ckpt``: Hugging Face's ``gradient_checkpointing_enable()`` (the HF
  models), or ``torch.utils.checkpoint`` around every block (ResNet-50);
- ``sac``: every block under non-reentrant checkpoint with torchtitan's
  selective policy (keep the matrix products' and attention's outputs;
  ``addmm`` too, GPT-2's).

and compiled remat at each budget from 40% to 100% of compiled plain's peak in
10% steps: ``remat.torch.apply(model, memory=budget)`` then
``torch.compile(model)`` (its blocks compiled, each recording option a compiled
variant of its own).

Peaks are the allocator's (``torch.profiler`` memory events, parameter
gradients left out once accumulated, as remat's budget counts them) above what
the step starts with, on a step after the plan is final (remat profiles on its
first step and measures the parts outside the stack on its second). Step
times: every variant runs one step per round, rounds interleaved, so a busy
machine slows them alike; a variant's ``x plain`` is the median over rounds of
its time over compiled plain's in the same round.

    python benchmarks/compiled_curve.py [--models llama,gpt2,resnet50] [--rounds 7] [--json out.json]
                                        [--plot out.png] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import remat
import remat.torch as rt
from remat.torch.memory import AllocatorTrace

SHARES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4)
BUDGETS = (0.9, 0.7, 0.5, 0.3, 0.1)


# -- models -----------------------------------------------------------------------


def llama(layers: int = 8) -> nn.Module:
    """The Llama shape of issue 34 (random weights, no key/value cache)."""
    import transformers

    config = transformers.LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=256,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=688,
        vocab_size=8000,
        use_cache=False,
    )
    return transformers.LlamaForCausalLM(config)


class Case:
    """A model, its input, and one training step's loss."""

    def __init__(self, name: str) -> None:
        self.name = name
        torch.manual_seed(0)
        if name in ("llama", "gpt2"):
            import transformers

            if name == "llama":
                self.model: nn.Module = llama()
            else:
                config = transformers.GPT2Config(
                    n_layer=8,
                    n_embd=256,
                    n_head=4,
                    vocab_size=8000,
                    resid_pdrop=0.1,
                    embd_pdrop=0.1,
                    attn_pdrop=0.1,
                    use_cache=False,
                )
                self.model = transformers.GPT2LMHeadModel(config)
            self.ids = torch.randint(0, 8000, (2, 256), generator=torch.Generator().manual_seed(1))
            self.blocks = list(self.model.model.layers if name == "llama" else self.model.transformer.h)
        else:
            import torchvision

            self.model = torchvision.models.resnet50(num_classes=100)
            self.x = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(1))
            self.y = torch.randint(0, 100, (8,), generator=torch.Generator().manual_seed(2))
            m: Any = self.model
            self.blocks = [b for layer in (m.layer1, m.layer2, m.layer3, m.layer4) for b in layer]
        self.model.train()

    def fresh(self) -> nn.Module:
        return copy.deepcopy(self.model)

    def loss(self, run: Callable[..., Any]) -> torch.Tensor:
        if self.name in ("llama", "gpt2"):
            return run(self.ids, labels=self.ids).loss
        return nn.functional.cross_entropy(run(self.x), self.y)


def blocks_of(case: Case, model: nn.Module) -> list[nn.Module]:
    if case.name == "llama":
        return list(model.model.layers)  # type: ignore[union-attr,arg-type]
    if case.name == "gpt2":
        return list(model.transformer.h)  # type: ignore[union-attr,arg-type]
    m: Any = model
    return [b for layer in (m.layer1, m.layer2, m.layer3, m.layer4) for b in layer]


# -- peers ---------------------------------------------------------------------------


def budget_backend(budget: float) -> Callable[..., Any]:
    """Inductor with ``activation_memory_budget`` set while it partitions. A
    backend object of its own per variant: Dynamo's cache entries are per
    backend, so two variants of one model class never share a graph."""
    from torch._inductor.compile_fx import compile_fx

    def backend(gm: Any, example_inputs: Any) -> Any:
        with torch._functorch.config.patch(activation_memory_budget=budget):
            return compile_fx(gm, example_inputs)

    return backend


def inductor_backend() -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx

    def backend(gm: Any, example_inputs: Any) -> Any:
        return compile_fx(gm, example_inputs)

    return backend


_SAVE = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,  # GPT-2's Conv1D: its matrix products are addmm
    torch.ops.aten.max.default,
    torch.ops.aten.convolution.default,
    *(
        getattr(torch.ops.aten, n).default
        for n in (
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_cudnn_attention",
        )
        if hasattr(torch.ops.aten, n)
    ),
}


def titan_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    """torchtitan's selective policy, as ``torch.compile`` can trace it: keep the
    outputs of matrix products, convolutions and attention, recompute the rest
    (torchtitan's op-level default also recomputes every second ``mm``, by a
    counter the policy mutates, which Dynamo cannot trace inside checkpoint)."""
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def titan_contexts() -> Any:
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(titan_policy)


def checkpointed(blocks: list[nn.Module], selective: bool) -> None:
    """Every block's forward under non-reentrant checkpoint (selective or not),
    written as a function Dynamo traces into its checkpoint operator."""
    from torch.utils.checkpoint import checkpoint

    def wrap(forward: Callable[..., Any]) -> Callable[..., Any]:
        if selective:

            def sac(*args: Any, **kwargs: Any) -> Any:
                return checkpoint(forward, *args, use_reentrant=False, context_fn=titan_contexts, **kwargs)

            return sac

        def full(*args: Any, **kwargs: Any) -> Any:
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)

        return full

    for b in blocks:
        b.forward = wrap(b.forward)  # type: ignore[method-assign]


def peers(case: Case) -> dict[str, tuple[nn.Module, Callable[..., Any]]]:
    """name -> (model, the compiled callable)."""
    found: dict[str, tuple[nn.Module, Callable[..., Any]]] = {}
    m = case.fresh()
    found["compile"] = (m, torch.compile(m, backend=inductor_backend()))
    for b in BUDGETS:
        m = case.fresh()
        found[f"budget {b}"] = (m, torch.compile(m, backend=budget_backend(b)))
    m = case.fresh()
    if case.name in ("llama", "gpt2"):
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # type: ignore[operator]
    else:
        checkpointed(blocks_of(case, m), selective=False)
    found["hf ckpt" if case.name != "resnet50" else "ckpt"] = (m, torch.compile(m, backend=inductor_backend()))
    m = case.fresh()
    checkpointed(blocks_of(case, m), selective=True)
    found["sac"] = (m, torch.compile(m, backend=inductor_backend()))
    return found


# -- measuring -----------------------------------------------------------------------


def step(case: Case, model: nn.Module, run: Callable[..., Any]) -> float:
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    case.loss(run).backward()
    return time.perf_counter() - t0


def peak(case: Case, model: nn.Module, run: Callable[..., Any]) -> int:
    model.zero_grad(set_to_none=True)
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters(), from_allocation=True)
        case.loss(run).backward()
        end = trace.mark()
    return trace.peak(0, end)


def bench(case_name: str, rounds: int) -> dict[str, Any]:
    case = Case(case_name)
    variants = peers(case)
    for m, run in variants.values():
        step(case, m, run)  # compiles
        step(case, m, run)
    plain_peak = peak(case, *variants["compile"])
    remats: dict[str, tuple[nn.Module, Callable[..., Any], rt.AppliedPlan, int]] = {}
    errors: dict[str, str] = {}
    for share in SHARES:
        budget = int(share * plain_peak)
        m = case.fresh()
        plan = rt.apply(m, memory=budget)
        run = torch.compile(m, backend=inductor_backend())
        name = f"remat {round(share * 100)}%"
        try:
            step(case, m, run)  # compiles, profiles, solves
            # Measures the parts outside the stack (then the final plan), whose
            # first step is measured by the allocator (inside the graph or by
            # the executor) and solved again below the budget if above it (up
            # to six plans): until then the plan may change.
            for _ in range(6):
                step(case, m, run)
            for _ in range(8):
                if not (plan._verifying or plan._verifying_executor or plan._measure is not None):
                    break
                step(case, m, run)
        except remat.InfeasibleError as e:
            errors[name] = f"infeasible: smallest {e.min_budget}"
            continue
        remats[name] = (m, run, plan, budget)
    everyone: dict[str, tuple[nn.Module, Callable[..., Any]]] = dict(variants)
    everyone.update({k: (v[0], v[1]) for k, v in remats.items()})
    peaks = {k: peak(case, m, run) for k, (m, run) in everyone.items()}
    load = [os.getloadavg()[0]]
    times: dict[str, list[float]] = {k: [] for k in everyone}
    for _ in range(rounds):
        for k, (m, run) in everyone.items():
            times[k].append(step(case, m, run))
    load.append(os.getloadavg()[0])
    base = times["compile"]
    rows: dict[str, dict[str, Any]] = {}
    for k in everyone:
        rows[k] = {
            "peak": peaks[k],
            "step_s": statistics.median(times[k]),
            "x_plain": statistics.median(a / b for a, b in zip(times[k], base)),
        }
    for k, (_, _, plan, budget) in remats.items():
        rows[k].update(
            budget=budget,
            # Once a compiled plan's first step is measured, remat states that
            # measurement as the plan's peak; the chain's own prediction beside it.
            predicted=plan.peak_memory,
            chain_predicted=plan.chain_peak_memory,
            schedule=str(plan.schedule),
            compiled=plan.compiled,
            in_graph=bool(plan._in_graph),
        )
    curve = []
    peer_names = list(variants)
    for share in SHARES:
        budget = int(share * plain_peak)
        fits = [p for p in peer_names if rows[p]["peak"] <= budget]
        best = min(fits, key=lambda p: rows[p]["x_plain"]) if fits else None
        name = f"remat {round(share * 100)}%"
        curve.append(
            {
                "share": share,
                "budget": budget,
                "best_peer": best,
                "best_peer_x": rows[best]["x_plain"] if best else None,
                "remat": name if name in rows else None,
                "remat_x": rows[name]["x_plain"] if name in rows else None,
                "remat_error": errors.get(name),
            }
        )
    return {
        "model": case_name,
        "first_steps": first_steps(case_name, plain_peak),
        "plain_peak": plain_peak,
        "rows": rows,
        "curve": curve,
        "load": load,
        "rounds": rounds,
    }


def first_step(model: str, variant: str) -> dict[str, float]:
    """The first five steps of one variant in a fresh process (nothing
    compiled yet): torch.compile's own, or compiled remat at half of compiled
    plain's peak (its first step compiles, profiles and solves; its second
    measures the parts outside the stack; where the plan runs inside the graph,
    the third compiles that graph and the fourth measures its peak)."""
    case = Case(model)
    m = case.fresh()
    if variant == "remat":
        peak = json.loads(os.environ["REMAT_PLAIN_PEAK"])
        rt.apply(m, memory=int(0.5 * peak))
    run = torch.compile(m)
    return {f"step{i + 1}_s": step(case, m, run) for i in range(5)}


def first_steps(model: str, plain_peak: int) -> dict[str, dict[str, float]]:
    import subprocess
    import sys

    found = {}
    for variant in ("compile", "remat"):
        out = subprocess.run(
            [sys.executable, __file__, "--first-step", model, variant, "--threads", str(torch.get_num_threads())],
            env=dict(os.environ, REMAT_PLAIN_PEAK=str(plain_peak)),
            capture_output=True,
            text=True,
        )
        lines = [ln for ln in out.stdout.strip().splitlines() if ln.startswith("{")]
        if not lines:
            raise RuntimeError(f"--first-step {model} {variant} exited {out.returncode}: {out.stderr[-2000:]}")
        found[variant] = json.loads(lines[-1])
        if out.returncode:
            # Its steps ran and were printed; what failed came after them.
            found[variant]["exit_code"] = out.returncode
    return found


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f} MiB"


def table(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [
        f"### {result['model']} (compiled plain's peak {mib(result['plain_peak'])}; load {result['load'][0]:.1f} / "
        f"{result['load'][1]:.1f}; {result['rounds']} rounds)",
        "",
        "| variant | peak | stated (predicted) | the chain's | step | x compiled plain |",
        "|---|---|---|---|---|---|",
    ]
    for k, r in rows.items():
        name = f"{k} (in the graph)" if r.get("in_graph") else k
        lines.append(
            f"| {name} | {mib(r['peak'])} | {mib(r.get('predicted'))} | {mib(r.get('chain_predicted'))} | "
            f"{r['step_s'] * 1e3:.1f} ms | "
            f"{r['x_plain']:.3f} |"
        )
    fs = result["first_steps"]
    lines += [
        "",
        "First steps, each in a fresh process: torch.compile "
        + ", ".join(f"{v:.1f} s" for k, v in fs["compile"].items() if k.startswith("step"))
        + "; compiled remat at 50% "
        + ", ".join(f"{v:.1f} s" for k, v in fs["remat"].items() if k.startswith("step")),
    ]
    lines += [
        "",
        "| budget | best peer that fits | its x | compiled remat | its x | remat over peer |",
        "|---|---|---|---|---|---|",
    ]
    for c in result["curve"]:
        peer = f"{c['best_peer']} ({mib(rows[c['best_peer']]['peak'])})" if c["best_peer"] else "none fits"
        px = f"{c['best_peer_x']:.3f}" if c["best_peer_x"] is not None else "-"
        if c["remat"]:
            r = rows[c["remat"]]
            rm = f"{mib(r['peak'])} (predicted {mib(r.get('predicted'))})"
            rx = f"{c['remat_x']:.3f}"
            gain = f"{(c['best_peer_x'] / c['remat_x'] - 1) * 100:+.1f}%" if c["best_peer_x"] else "only remat fits"
        else:
            rm, rx, gain = c["remat_error"] or "-", "-", "-"
        lines.append(f"| {round(c['share'] * 100)}% ({mib(c['budget'])}) | {peer} | {px} | {rm} | {rx} | {gain} |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, res in zip(axes[0], results):
        rows = res["rows"]
        p = res["plain_peak"]
        for k, r in rows.items():
            if k.startswith("remat"):
                continue
            ax.scatter(r["peak"] / p, r["x_plain"], marker="o")
            ax.annotate(k, (r["peak"] / p, r["x_plain"]), fontsize=7)
        pts = sorted((r["peak"] / p, r["x_plain"]) for k, r in rows.items() if k.startswith("remat"))
        ax.plot([a for a, _ in pts], [b for _, b in pts], "r-^", label="compiled remat")
        ax.set_xlabel("measured peak / compiled plain's")
        ax.set_ylabel("step time / compiled plain's")
        ax.set_title(res["model"])
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="llama,gpt2,resnet50")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--first-step", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # Dynamo gives up on a code object after recompile_limit (8) cache entries
    # and runs it eagerly from then on: this process compiles some twenty
    # variants of one model class (each with a backend of its own), which
    # share transformers' code objects. A user compiles one.
    torch._dynamo.config.recompile_limit = 1024
    torch._dynamo.config.accumulated_recompile_limit = 4096
    if args.first_step:
        print(json.dumps(first_step(*args.first_step)))
        return
    print(
        f"{datetime.date.today()} {platform.node()} {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{args.threads} thread(s), load {os.getloadavg()[0]:.1f}"
    )
    results = []
    for name in args.models.split(","):
        res = bench(name, args.rounds)
        results.append(res)
        print(table(res), flush=True)
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
