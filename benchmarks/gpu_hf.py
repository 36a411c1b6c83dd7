#!/usr/bin/env python3
"""remat.torch.apply on a GPU against Hugging Face's checkpointing and PyTorch's
selective checkpointing, at equal memory: GPT-2-medium and a Llama-1B shape
(random init from configs, bf16, sequence 2048). A script, not a test.

Variants, each a fresh model from the same seed, the training loop unchanged
(``model(ids, labels=ids).loss.backward()``):

- ``plain``: no recomputation;
- ``hf``: ``gradient_checkpointing_enable()`` (every block recomputed);
- ``sac``: the same with PyTorch's selective checkpointing
  (``create_selective_checkpoint_contexts``) and torchtitan's policy: the
  outputs of matmuls and attention are saved, the rest recomputed;
- ``remat @ hf`` / ``remat @ sac``: ``remat.torch.apply(model, memory=<that
  variant's measured peak>)``, each block recorded whole or with one of the
  selective-saving policies (remat's recording options, chosen per block);
- ``remat whole blocks @ ...``: the same with ``policies=()`` (blocks recorded
  whole or not at all, as before options);
- ``remat @ 80% hf``: 80% of HF's peak, or the smallest budget that fits.

Memory is the allocator's (``torch.cuda.max_memory_allocated``) above what a
step starts with: parameters and their gradients (allocated and zeroed before
the step, so the peak counts activations, workspace and the gradients' flow,
as remat's budget does). Step times are medians of ``--rounds`` rounds in
which every variant runs one step (interleaved); tokens/s = batch x sequence /
step. Gradients are compared with plain's (max abs difference).

    python benchmarks/gpu_hf.py [--models gpt2-medium llama-1b] [--batch 8] [--seq 2048] [--rounds 5]
    python benchmarks/gpu_hf.py --device cpu --layers 2 --batch 1 --seq 64 --rounds 1   # smoke test
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import time
import traceback
from typing import Any

import torch
import transformers
from hf_models import apply_fitting  # benchmarks/, beside this script

import remat
import remat.torch as rt


def config(name: str, seq: int) -> tuple[Any, Any]:
    if name == "gpt2-medium":
        c = transformers.GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=max(seq, 1024))
        return transformers.GPT2LMHeadModel, c
    c = transformers.LlamaConfig(  # Llama 3.2 1B's shape
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        max_position_embeddings=max(seq, 2048),
        tie_word_embeddings=True,
    )
    return transformers.LlamaForCausalLM, c


def sac_policy() -> Any:
    """torchtitan's selective-checkpointing policy: save matmul and attention outputs."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}
    for n in (
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention",
    ):
        op = getattr(aten, n, None)
        if op is not None:
            save.add(op.default)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy)


def run_model(name: str, args: argparse.Namespace) -> None:
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    cls, cfg = config(name, args.seq)
    if args.layers:
        cfg.num_hidden_layers = args.layers
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=dev, generator=None)

    def make() -> Any:
        torch.manual_seed(0)
        with dev:
            m = cls(cfg).to(torch.bfloat16).train()
        return m

    def step(model: Any) -> None:
        model.zero_grad(set_to_none=False)
        torch.manual_seed(7)
        model(ids, labels=ids).loss.backward()

    def peak(model: Any) -> int:
        step(model)  # gradients allocated
        if not cuda:  # a smoke test of the script on the CPU
            with rt.LiveBytes() as live:
                live.exclude_parameter_gradients(model.parameters())
                step(model)
            return live.peak
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step(model)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    models: dict[str, Any] = {}
    peaks: dict[str, int] = {}
    plans: dict[str, rt.AppliedPlan] = {}
    notes: dict[str, str] = {}
    models["plain"] = make()
    models["hf"] = make()
    models["hf"].gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        m = make()
        m.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False, "context_fn": sac_policy()}
        )
        models["sac"] = m
    except Exception as e:  # an older transformers without context_fn
        notes["sac"] = f"not run: {e!r}"
    for n, m in list(models.items()):
        try:
            peaks[n] = peak(m)
        except Exception as e:
            notes[n] = f"failed: {e!r}"
            traceback.print_exc()
            del models[n]
    targets = [(f"remat @ {r}", r, 1.0, None) for r in ("hf", "sac")]
    targets += [(f"remat whole blocks @ {r}", r, 1.0, ()) for r in ("hf", "sac")]
    targets.append(("remat @ 80% hf", "hf", 0.8, None))
    for n, ref, share, policies in targets:
        if ref not in peaks or (args.no_options and policies is None):
            continue
        extra: dict[str, Any] = {} if policies is None else {"policies": policies}
        try:
            m, plan, note = apply_fitting(make, step, int(share * peaks[ref]), **extra)
            if note:
                notes[n] = note
            models[n], plans[n] = m, plan
            peaks[n] = peak(m)
        except Exception as e:
            notes[n] = f"failed: {e!r}"
            traceback.print_exc()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    times: dict[str, list[float]] = {n: [] for n in models}
    for _ in range(args.rounds):
        for n, m in models.items():
            sync()
            t0 = time.perf_counter()
            step(m)
            sync()
            times[n].append(time.perf_counter() - t0)
    print(
        f"\n## {name} ({cfg.num_hidden_layers} blocks), bf16, batch {args.batch}, sequence {args.seq}, "
        f"{torch.cuda.get_device_name() if cuda else 'CPU'}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    print("| variant | peak | predicted | step ms | tokens/s | x plain | max abs grad diff vs plain |")
    print("|---|---|---|---|---|---|---|")
    base = statistics.median(times["plain"])
    ref_m = models["plain"]
    for n, m in models.items():
        diff = max(
            (p.grad.float() - q.grad.float()).abs().max().item()
            for p, q in zip(ref_m.parameters(), m.parameters())
            if p.grad is not None
        )
        pred = plans[n].peak_memory if n in plans else None
        med = statistics.median(times[n])
        print(
            f"| {n} | {remat.format_size(peaks[n])} | {remat.format_size(pred) if pred else ''} | {med * 1e3:.1f} | "
            f"{args.batch * args.seq / med:,.0f} | {med / base:.3f} | {diff:.3g} |"
        )
    for n, note in notes.items():
        print(f"- {n}: {note}")
    for n, plan in plans.items():
        print(f"\n{n}:\n{plan.explain()}")
    del models, plans
    if cuda:
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["gpt2-medium", "llama-1b"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=None, help="blocks (default: the shape's)")
    ap.add_argument("--no-options", action="store_true", help="only whole-block remat (remat before issue 24)")
    ap.add_argument("--log", action="store_true", help="print remat.torch's profiling log (the options measured)")
    ap.add_argument("--device", default="cuda", help="cuda (the table) or cpu (a smoke test of the script)")
    args = ap.parse_args()
    if args.log:
        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("remat.torch").setLevel(logging.DEBUG)
    for name in args.models:
        t0 = time.perf_counter()
        try:
            run_model(name, args)
        except Exception:
            traceback.print_exc()
        print(f"({name}: {time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
