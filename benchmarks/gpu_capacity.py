#!/usr/bin/env python3
"""The largest batch that fits a memory budget on a GPU (issue 37): remat (its
plans, the head and the loss in chunks of tokens as a loss option, offload
offered) against Hugging Face's checkpointing, PyTorch's selective
checkpointing (torchtitan's policy) and torch.compile's activation memory
budget, on the Llama-1B shape (bf16, sequence 2048, random init from a
config), with tokens/s at each one's largest batch. Also the offload option's
overlap: four decoder layers recorded under it, against the same layers
stored whole and against ``torch.autograd.graph.save_on_cpu``. A script, not a
test: it prints markdown as it goes.

Every variant is searched the same way (:func:`remat.torch.largest_fitting`:
doubling, then bisecting), each size really trained and its peak measured:
``torch.cuda.max_memory_allocated()`` above what the step starts with
(parameters and their gradients allocated), at most ``--memory``; running out
of device memory counts as not fitting. remat's search is
:func:`remat.torch.max_batch` (a fresh plan at each size, four steps). No
optimizer step runs. Step times: the median of ``--rounds`` steps at the
size found, one variant after the other.

    python benchmarks/gpu_capacity.py [--memory 24GiB] [--rounds 3] [--seconds 480]
    python benchmarks/gpu_capacity.py --device cpu --tiny --skip compile   # a smoke test of the script
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import transformers
from gpu_hf import config, sac_policy  # benchmarks/, beside this script
from torch import nn

import remat
import remat.torch as rt
from remat.torch.memory import AllocatorTrace
from remat.torch.offload import bandwidth


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dev = torch.device(args.device)
        self.cuda = self.dev.type == "cuda"
        self.end = time.monotonic() + args.seconds
        _, cfg = config("llama-1b", args.seq)
        cfg.use_cache = False
        if args.tiny:
            cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 64, 128, 2
            cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size = 4, 2, 4096
        self.cfg = cfg
        torch.manual_seed(0)
        with self.dev:
            self.model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).train()
        self.budget = remat.parse_size(args.memory)
        self.rows: list[str] = []

    def left(self) -> float:
        return self.end - time.monotonic()

    def ids(self, n: int) -> torch.Tensor:
        g = torch.Generator(device=self.dev).manual_seed(n)
        return torch.randint(0, self.cfg.vocab_size, (n, self.args.seq), device=self.dev, generator=g)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def step(self, model: Any, x: torch.Tensor) -> None:
        model.zero_grad(set_to_none=False)
        out = model(x, labels=x)
        loss = out.loss
        del out
        loss.backward()

    def peak(self, model: Any, n: int) -> int | None:
        """The measured peak of one step at batch n, None when the device ran out."""
        x = self.ids(n)
        try:
            self.step(model, x)  # gradients allocated; a compiled model compiled
            if not self.cuda:
                with AllocatorTrace() as trace:
                    trace.exclude_parameter_gradients(self.model.parameters())
                    self.step(model, x)
                    end = trace.mark()
                return trace.peak(0, end)
            self.sync()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            self.step(model, x)
            self.sync()
            return torch.cuda.max_memory_allocated() - base
        except torch.OutOfMemoryError:
            return None
        finally:
            del x
            gc.collect()
            if self.cuda:
                torch.cuda.empty_cache()

    def largest(self, name: str, model: Any, start: int = 1) -> tuple[int, int | None]:
        peaks: dict[int, int | None] = {}

        def fits(n: int) -> bool:
            peaks[n] = p = self.peak(model, n)
            print(f"  {name} batch {n}: {'out of memory' if p is None else remat.format_size(p)}", flush=True)
            return p is not None and p <= self.budget

        n = rt.largest_fitting(fits, start=start, limit=self.args.limit)
        return n, peaks.get(n)

    def timed(self, model: Any, n: int) -> float:
        x = self.ids(n)
        self.step(model, x)
        times = []
        for _ in range(self.args.rounds):
            self.sync()
            t0 = time.perf_counter()
            self.step(model, x)
            self.sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def row(self, name: str, n: int, peak: int | None, predicted: int | None, s: float | None, note: str = "") -> None:
        tokens = f"{n * self.args.seq / s:,.0f}" if s else ""
        ms = f"{s * 1e3:.0f}" if s else ""
        pred = remat.format_size(predicted) if predicted else ""
        r = f"| {name} | {n} | {remat.format_size(peak) if peak else ''} | {pred} | {ms} | {tokens} | {note} |"
        self.rows.append(r)
        print(r, flush=True)

    def table(self) -> None:
        print(f"\n## Largest batch within {remat.format_size(self.budget)} ({self.args.memory})")
        print("| variant | largest batch | peak | predicted | step ms | tokens/s | note |")
        print("|---|---|---|---|---|---|---|")
        for r in self.rows:
            print(r)
        print(flush=True)

    # -- the variants ---------------------------------------------------------

    def baselines(self) -> int:
        m = self.model
        self.step(m, self.ids(1))
        n, p = self.largest("plain", m)
        self.row("plain", n, p, None, self.timed(m, n) if n else None)
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        hf, p = self.largest("hf", m, start=max(n, 1))
        self.row("HF checkpointing", hf, p, None, self.timed(m, hf) if hf else None)
        m.gradient_checkpointing_disable()
        try:
            m.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False, "context_fn": sac_policy()}
            )
            k, p = self.largest("sac", m, start=max(n, 1))
            self.row("SAC (torchtitan's policy)", k, p, None, self.timed(m, k) if k else None)
        finally:
            m.gradient_checkpointing_disable()
        return hf

    def remat(self, name: str, start: int, limit: int | None = None, **kw: Any) -> int:
        m = self.model
        m.zero_grad(set_to_none=True)
        found = rt.max_batch(
            m, lambda n: {"input_ids": self.ids(n), "labels": self.ids(n)}, self.budget, start=start,
            limit=limit or self.args.limit, **kw,
        )  # fmt: skip
        for n, outcome in found.tried:
            print(f"  {name} batch {n}: {outcome}", flush=True)
        if not found.size:
            self.row(name, 0, None, None, None, "nothing fits")
            return 0
        plan = rt.apply(m, memory=self.budget, **kw)
        try:
            s = self.timed(m, found.size)
            p = self.peak(m, found.size)
            chunks = plan.loss_chunks
            self.row(name, found.size, p, plan.peak_memory, s, f"loss in {chunks} chunks" if chunks else "")
            print(plan.explain(), flush=True)
        finally:
            plan.remove()
            m.zero_grad(set_to_none=True)
        return found.size

    def remat_compiled(self, n: int) -> None:
        """remat with its blocks compiled (``apply(..., compile=True)``) at
        batch n: one size, not a search (each plan compiles afresh)."""
        m = self.model
        m.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        plan = rt.apply(m, memory=self.budget, compile=True)
        try:
            x = self.ids(n)
            for _ in range(3):
                self.step(m, x)
            print(f"  (remat compiled, batch {n}: first steps {time.perf_counter() - t0:.0f} s)", flush=True)
            del x
            p = self.peak(m, n)
            s = self.timed(m, n)
            chunks = plan.loss_chunks
            self.row("remat, blocks compiled", n, p, plan.peak_memory, s, f"loss in {chunks} chunks" if chunks else "")
            print(plan.explain(), flush=True)
        except (remat.InfeasibleError, torch.OutOfMemoryError) as e:
            self.row("remat, blocks compiled", n, None, None, None, f"does not fit: {str(e)[:200]}")
        finally:
            plan.remove()
            m.zero_grad(set_to_none=True)
            torch._dynamo.reset()

    def compiled(self, start: int, amb: float | None) -> None:
        """torch.compile with ``activation_memory_budget=amb`` (None: compile
        over HF's checkpointing), the batch dimension dynamic (one compile)."""
        import torch._dynamo
        import torch._functorch.config as fconfig

        m = self.model
        name = "compile + HF checkpointing" if amb is None else f"compile, activation_memory_budget={amb}"
        old = fconfig.activation_memory_budget
        torch._dynamo.reset()
        if amb is None:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            fconfig.activation_memory_budget = amb
        compiled = torch.compile(m)
        ids = self.ids

        def dynamic(n: int) -> torch.Tensor:
            x = ids(n)
            torch._dynamo.mark_dynamic(x, 0)
            return x

        self.ids = dynamic  # type: ignore[method-assign]
        try:
            t0 = time.perf_counter()
            k, p = self.largest(name, compiled, start=start)
            print(f"  ({name}: search with compiling {time.perf_counter() - t0:.0f} s)", flush=True)
            self.row(name, k, p, None, self.timed(compiled, k) if k else None, "batch dimension dynamic")
        finally:
            self.ids = ids  # type: ignore[method-assign]
            fconfig.activation_memory_budget = old
            m.gradient_checkpointing_disable()
            torch._dynamo.reset()

    def offload(self, n: int, layers: int = 4) -> None:
        """Four decoder layers under remat's executor, each recorded whole
        (option 0) or under the offload option, and under save_on_cpu."""
        m = self.model
        rotary = m.model.rotary_emb

        class Layer(nn.Module):
            def __init__(self, layer: nn.Module) -> None:
                super().__init__()
                self.layer = layer

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                pos = torch.arange(x.shape[1], device=x.device)[None]
                out = self.layer(x, position_embeddings=rotary(x, pos), position_ids=pos)
                return out[0] if isinstance(out, tuple) else out

        stages = [Layer(layer) for layer in m.model.layers[:layers]]
        torch.manual_seed(1)
        x0 = torch.randn(n, self.args.seq, self.cfg.hidden_size, device=self.dev, dtype=torch.bfloat16)
        moved = 0

        def count(t: torch.Tensor) -> torch.Tensor:
            nonlocal moved
            if not isinstance(t, nn.Parameter):
                key = t.untyped_storage().data_ptr()
                if key not in seen:
                    seen.add(key)
                    moved += t.untyped_storage().nbytes()
            return t

        seen: set[int] = {x0.untyped_storage().data_ptr()}
        with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
            y = x0.requires_grad_(True)
            for s in stages:
                y = s(y)
        del y
        x0 = x0.detach()
        speed = bandwidth(self.dev)
        copy_ms = speed.ms(moved)
        L = len(stages)

        def ops(o: int) -> list[tuple[str, int, int]]:
            forward = [("F_all", l, o if l <= L else 0) for l in range(1, L + 2)]
            return forward + [("B", l, 0) for l in range(L + 1, 0, -1)]

        def run(how: str) -> tuple[float, int, list[torch.Tensor]]:
            times, peak = [], 0
            for i in range(self.args.rounds + 1):
                for s in stages:
                    s.zero_grad(set_to_none=True)
                x = x0.clone().requires_grad_(True)
                self.sync()
                base = torch.cuda.memory_allocated() if self.cuda else 0
                if self.cuda:
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                if how == "save_on_cpu":
                    with torch.autograd.graph.save_on_cpu(pin_memory=self.cuda):
                        y = x
                        for s in stages:
                            y = s(y)
                else:
                    y = rt.run_schedule(stages, ops(1 if how == "offload" else 0), x, options=[[rt.Policy.OFFLOAD]] * L)
                y.float().square().mean().backward()
                self.sync()
                if i:
                    times.append(time.perf_counter() - t0)
                if self.cuda:
                    peak = torch.cuda.max_memory_allocated() - base
                del y, x
            grads = [p.grad.clone() for s in stages for p in s.parameters() if p.grad is not None]
            return statistics.median(times), peak, grads

        whole = run("whole")
        print(f"\n## Offload: {L} decoder layers, batch {n}, {remat.format_size(moved)} moved each way")
        print(f"bandwidth: {speed.to_host / 1e6:.1f} GB/s to host, {speed.to_device / 1e6:.1f} GB/s back")
        print("| recorded | fwd+bwd ms | peak | max abs grad diff vs whole | copy ms none hidden | hidden |")
        print("|---|---|---|---|---|---|")
        for how in ("whole", "offload", "save_on_cpu"):
            # whole against a second run of itself: the backward's own noise
            # (bf16 attention backward accumulates in an order that varies).
            t, p, g = run(how)
            diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(whole[2], g))
            hidden = "" if how == "whole" else f"{(whole[0] * 1e3 + copy_ms - t * 1e3) / copy_ms:.0%}"
            print(
                f"| {how} | {t * 1e3:.1f} | {remat.format_size(p)} | {diff:.3g} | "
                f"{'' if how == 'whole' else f'{copy_ms:.1f}'} | {hidden} |",
                flush=True,
            )
        for s in stages:
            s.zero_grad(set_to_none=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memory", default="24GiB", help="the budget for what a step adds (default 24GiB)")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=256, help="the largest batch tried")
    ap.add_argument("--seconds", type=float, default=480, help="skip what would start after this many seconds")
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        help="sections to skip (baselines remat offload compile whole offload-plan compile-hf remat-compiled)",
    )
    ap.add_argument("--start", type=int, default=1, help="the first batch tried where the baselines are skipped")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny model (a smoke test of the script)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    b = Bench(args)
    print(
        f"# {torch.cuda.get_device_name() if b.cuda else 'CPU'}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {b.cfg.num_hidden_layers} layers, sequence {args.seq}",
        flush=True,
    )
    hf, ours = 1, 1

    def section(name: str, need: float, fn: Callable[[], Any]) -> Any:
        if name in args.skip:
            return None
        if b.left() < need:
            print(f"(skipped {name}: {b.left():.0f} s left)", flush=True)
            return None
        t = time.perf_counter()
        try:
            return fn()
        except Exception:
            traceback.print_exc()
            return None
        finally:
            print(f"({name}: {time.perf_counter() - t:.0f} s, {time.perf_counter() - t0:.0f} s in all)", flush=True)
            b.table()

    hf = section("baselines", 0, b.baselines) or args.start
    ours = section("remat", 60, lambda: b.remat("remat (chunked loss, options)", hf)) or args.start
    section("offload", 30, lambda: b.offload(min(2, ours)))
    section("compile", 90, lambda: b.compiled(hf, 0.5))
    section("whole", 60, lambda: b.remat("remat, head and loss whole", hf, chunked_loss=False))
    # Offload keeps a^l as a block not recorded does, so it cannot lower the
    # floor: one size above remat's is tried, to show it.
    section("offload-plan", 40, lambda: b.remat("remat, offload offered", ours, limit=ours + 1, offload=True))
    section("compile-hf", 90, lambda: b.compiled(hf, None))
    section("remat-compiled", 90, lambda: b.remat_compiled(ours))
    print(f"({time.perf_counter() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
