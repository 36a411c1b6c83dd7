#!/usr/bin/env python3
"""remat measured on a real GPU: chains, predicted against measured memory, throughput.

For each network (torchvision ResNet-50/101/152 and DenseNet-121 split into
the stages ``remat zoo`` uses, and a GPT-2-small-style transformer of our own),
on one CUDA device, in fp32 (PyTorch's defaults: TF32 convolutions, fp32
matmuls), this script

1. measures the chain with ``remat.torch.profile`` (the criterion measured the
   same way, as the chain's loss stage) and writes it to ``--chains`` with the
   GPU, dtype, batch, torch version and this command in its metadata;
2. compares every stage with the zoo's roofline estimate (``--zoo DIR`` holding
   ``remat zoo NAME --device h100`` files at the same batch): errors of times
   and sizes;
3. trains a few steps with ``remat.torch.Checkpointed`` at three budgets and
   sets ``torch.cuda.max_memory_allocated`` above what the step starts with
   (parameters, gradients, Adam's state; the input batch added back, as the
   model counts it) against the simulator's predicted peak, and the
   allocator's reserved peak next to it;
4. times remat against the fastest ``checkpoint_sequential`` K whose measured
   peak is no larger than remat's, and the plain module (whole steps: forward,
   backward, fused Adam; every variant once per round);
5. under a fixed memory cap (``torch.cuda.set_per_process_memory_fraction``:
   parameters, gradients and Adam's state plus the plain module's measured
   activation peak at the base batch, rounded up to a GiB), finds by binary
   search the largest batch each method trains: store-all (plain),
   ``checkpoint_sequential`` (best K, K = 1 included) and remat (the batch's
   chain, solved within what the cap leaves less a 3, 7 or 12% margin), each
   at most 10% slower per sample than the plain module at the same batch (timed
   with the cap lifted), and at any overhead. Every probe is a real run; one
   that runs out of memory is a "no".

Each network runs in its own process (memory a failed run might leave behind
cannot shrink the next network's cap). ``results.json`` (every figure, probe by
probe) and ``results.md`` (the tables) are written to ``--out`` after each
network, so a run cut short keeps what it finished. ``--zoo-report`` prints
step 2's table from chain files, without a GPU.

    python benchmarks/gpu_measure.py --out /tmp/gpu --zoo zoo/ --chains chains/measured
    python benchmarks/gpu_measure.py --zoo-report --chains chains/measured --zoo zoo/
    python benchmarks/gpu_measure.py --out /tmp/gpu --models resnet50 --quick   # a smoke test

Without a GPU it runs on the CPU at toy sizes (``--device cpu --quick``): the
code paths, not the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

import remat
import remat.torch as rt

MiB = 1 << 20
GiB = 1 << 30
Criterion = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Runner = Callable[[torch.Tensor], torch.Tensor]


# -- networks as chains of stages ---------------------------------------------------------------


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


class DenseLayerCat(nn.Module):
    """torchvision's dense layer returns only its new features; as a chain stage it
    returns ``cat([input, new features])`` (Rotor's DenseNet, as ``remat zoo``)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.layer(x)], 1)


def relu_after(m: nn.Module) -> nn.Module:
    return nn.Sequential(m, nn.ReLU(inplace=True))


def resnet(name: str) -> list[tuple[str, nn.Module]]:
    import torchvision.models as tv  # type: ignore[import-not-found, unused-ignore]

    model = getattr(tv, name)()
    stages: list[tuple[str, nn.Module]] = [
        ("conv1", model.conv1),
        ("bn1", relu_after(model.bn1)),
        ("maxpool", model.maxpool),
    ]
    for i in range(1, 5):
        for j, block in enumerate(getattr(model, f"layer{i}")):
            stages.append((f"layer{i}.{j}", block))
    return [*stages, ("avgpool", model.avgpool), ("flatten", Flatten()), ("fc", model.fc)]


def densenet(name: str) -> list[tuple[str, nn.Module]]:
    import torchvision.models as tv  # type: ignore[import-not-found, unused-ignore]

    model = getattr(tv, name)()
    f = model.features
    stages: list[tuple[str, nn.Module]] = [("conv0", f.conv0), ("norm0", relu_after(f.norm0)), ("pool0", f.pool0)]
    for child_name, child in f.named_children():
        if child_name.startswith("denseblock"):
            stages += [(f"{child_name}.{n}", DenseLayerCat(layer)) for n, layer in child.named_children()]
        elif child_name.startswith("transition"):
            stages += [
                (f"{child_name}.norm", relu_after(child.norm)),
                (f"{child_name}.conv", child.conv),
                (f"{child_name}.pool", child.pool),
            ]
    return [
        *stages,
        ("norm5", relu_after(f.norm5)),
        ("avgpool", nn.AdaptiveAvgPool2d((1, 1))),
        ("flatten", Flatten()),
        ("classifier", model.classifier),
    ]


class GptEmbed(nn.Module):
    """Token and position embeddings, then dropout (GPT-2's ``wte + wpe``)."""

    def __init__(self, vocab: int, seq: int, d: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.size(1), device=ids.device)
        out: torch.Tensor = self.drop(self.wte(ids) + self.wpe(pos))
        return out


class GptBlock(nn.Module):
    """A GPT-2 block as Hugging Face's eager attention runs it: pre-LayerNorm,
    causal softmax attention with the scores kept, tanh-GELU MLP, dropout 0.1."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.attn_drop = nn.Dropout(0.1)
        self.resid_drop = nn.Dropout(0.1)
        self.mlp_drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // h)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = torch.where(causal, scores, torch.finfo(scores.dtype).min)
        att = self.attn_drop(scores.softmax(dim=-1))
        ctx = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.resid_drop(self.attn_proj(ctx))
        y: torch.Tensor = x + self.mlp_drop(
            self.mlp_proj(nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        )
        return y


def gpt2(
    layers: int = 12, d: int = 768, heads: int = 12, vocab: int = 50257, seq: int = 1024
) -> list[tuple[str, nn.Module]]:
    embed = GptEmbed(vocab, seq, d)
    head = nn.Linear(d, vocab, bias=False)
    head.weight = embed.wte.weight  # tied, as GPT-2's
    blocks: list[tuple[str, nn.Module]] = [(f"h.{i}", GptBlock(d, heads)) for i in range(layers)]
    return [("embed", embed), *blocks, ("ln_f", nn.LayerNorm(d)), ("lm_head", head)]


def lm_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """GPT-2's shifted cross-entropy (the shift copies the logits, as Hugging Face's)."""
    shift = logits[..., :-1, :].contiguous()
    return nn.functional.cross_entropy(shift.view(-1, shift.size(-1)), ids[..., 1:].reshape(-1))


def class_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, target)


@dataclass
class Net:
    """A network of the study: how to build it and its inputs at any batch."""

    name: str  # also the --models key
    zoo: str  # the zoo's file name in --zoo (without .json)
    build: Callable[[], list[tuple[str, nn.Module]]]
    criterion: Criterion
    batch: int
    image: int = 224
    seq: int = 1024
    vocab: int = 50257
    grain: int = 8  # batch step of the max-batch search

    @property
    def text(self) -> bool:
        return self.name.startswith("gpt2")

    def inputs(self, batch: int, device: torch.device, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if self.text:
            ids = torch.randint(0, self.vocab, (batch, self.seq), generator=g).to(device)
            return ids, ids
        x = torch.randn(batch, 3, self.image, self.image, generator=g).to(device)
        return x, torch.randint(0, 1000, (batch,), generator=g).to(device)

    def label(self, batch: int | None = None) -> str:
        b = self.batch if batch is None else batch
        return f"{self.name}-s{self.seq}-b{b}" if self.text else f"{self.name}-{self.image}-b{b}"


def networks(quick: bool) -> dict[str, Net]:
    """The study's networks; ``quick`` shrinks images, sequences and batches (a smoke test)."""
    image, batch, seq, tb = (64, 8, 128, 2) if quick else (224, 64, 1024, 8)
    nets = [
        Net("resnet50", "resnet50", lambda: resnet("resnet50"), class_loss, batch, image=image),
        Net("resnet101", "resnet101", lambda: resnet("resnet101"), class_loss, batch, image=image),
        Net("resnet152", "resnet152", lambda: resnet("resnet152"), class_loss, batch, image=image),
        Net("densenet121", "densenet121", lambda: densenet("densenet121"), class_loss, batch, image=image),
        Net("gpt2", "gpt2", lambda: gpt2(layers=12 if not quick else 2, seq=seq), lm_loss, tb, seq=seq, grain=1),
    ]
    if quick:
        for n in nets:
            n.grain = max(1, n.batch // 4)
    return {n.name: n for n in nets}


# -- one training step, measured -------------------------------------------------------------


class Device:
    """Synchronisation, memory counters and timers of the device (CUDA, or the CPU
    with :class:`remat.torch.LiveBytes`, for dry runs)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def free_cache(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def name(self) -> str:
        return torch.cuda.get_device_name(self.device) if self.cuda else "cpu"


@dataclass
class Step:
    peak: int  # bytes: the step's activation peak as the model counts it
    ms: float  # the whole step: forward, backward, optimizer
    reserved: int = 0  # bytes the caching allocator reserved at most, counted the same way


def train_step(
    dev: Device, fn: Runner, opt: torch.optim.Optimizer, x: torch.Tensor, t: torch.Tensor, crit: Criterion
) -> Step:
    """One step; the peak is ``max_memory_allocated`` during forward and backward above
    what was allocated before it (parameters, gradients, optimizer state, the batch),
    plus the batch itself (remat's model counts the input a^0)."""
    x_bytes = x.numel() * x.element_size()
    dev.sync()
    t0 = time.perf_counter()
    if dev.cuda:
        base = torch.cuda.memory_allocated(dev.device)
        torch.cuda.reset_peak_memory_stats(dev.device)
        crit(fn(x), t).backward()  # type: ignore[no-untyped-call, unused-ignore]
        dev.sync()
        peak = torch.cuda.max_memory_allocated(dev.device) - base + x_bytes
        reserved = torch.cuda.max_memory_reserved(dev.device) - base + x_bytes
    else:
        params = [p for g in opt.param_groups for p in g["params"]]
        with rt.LiveBytes() as live:
            live.exclude_parameter_gradients(params)
            crit(fn(x), t).backward()  # type: ignore[no-untyped-call, unused-ignore]
        peak = live.peak + x_bytes
    opt.step()
    opt.zero_grad(set_to_none=False)
    dev.sync()
    return Step(peak, (time.perf_counter() - t0) * 1e3, reserved if dev.cuda else peak)


def steps(
    dev: Device, fn: Runner, opt: torch.optim.Optimizer, x: torch.Tensor, t: torch.Tensor, crit: Criterion, n: int
) -> tuple[int, float]:
    """A warm-up step, then ``n`` steps: the largest peak and the median time."""
    train_step(dev, fn, opt, x, t, crit)
    runs = [train_step(dev, fn, opt, x, t, crit) for _ in range(n)]
    return max(r.peak for r in runs), statistics.median(r.ms for r in runs)


def make_optimizer(model: nn.Module, dev: Device) -> torch.optim.Optimizer:
    """Adam with its state and the gradients allocated now (zero gradients leave the
    weights as they are), so that a step allocates no persistent memory."""
    params = [p for p in model.parameters() if p.requires_grad]
    # Fused on a GPU: one kernel for all parameters, no per-parameter Python loop
    # (which made small-batch steps CPU-bound) and no temporaries.
    opt = torch.optim.Adam(params, lr=1e-4, fused=dev.cuda or None)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    return opt


def segmented(model: nn.Sequential, k: int) -> Runner:
    """PyTorch's ``checkpoint_sequential`` with ``k`` segments (non-reentrant)."""
    return lambda inp: checkpoint_sequential(model, k, inp, use_reentrant=False)  # type: ignore[no-untyped-call, unused-ignore]


def persistent_bytes(model: nn.Module) -> int:
    """Parameters, their gradients and Adam's two moments."""
    return 4 * sum(p.numel() * p.element_size() for p in model.parameters())


# -- the study -----------------------------------------------------------------------------


def measure_chain(
    net: Net, model: nn.Sequential, x: torch.Tensor, t: torch.Tensor, repeat: int, command: str, names: list[str]
) -> remat.Chain:
    """``remat.torch.profile`` of the stages, and of the criterion as the loss stage."""
    chain = rt.profile(model, x, repeat=repeat, name=net.label()).to_dict()
    for stage, name in zip(chain["stages"], names):
        stage["name"] = name
    with torch.no_grad():
        out = model(x)

    class Loss(nn.Module):
        def forward(self, logits: torch.Tensor) -> torch.Tensor:
            return net.criterion(logits, t)

    loss = rt.profile(nn.Sequential(Loss()), out, repeat=repeat).to_dict()["stages"][0]
    loss["name"] = "loss"
    del out
    chain["loss"] = loss
    meta = chain["metadata"]
    meta.update(
        {
            "generator": "benchmarks/gpu_measure.py: measured with remat.torch.profile (times: medians of CUDA-event "
            "timed runs; sizes: saved-tensor hooks and the CUDA allocator's peaks)",
            "network": net.name,
            "gpu": torch.cuda.get_device_name(x.device) if x.device.type == "cuda" else "cpu",
            "dtype": "fp32 (TF32 convolutions, fp32 matmuls: PyTorch's defaults)",
            "batch": x.shape[0],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if x.device.type == "cuda" else None,  # type: ignore[no-untyped-call, unused-ignore]
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "command": command,
        }
    )
    return remat.Chain.from_dict(chain)


def zoo_error(measured: remat.Chain, zoo: remat.Chain) -> dict[str, Any]:
    """Stage by stage (matched by name): measured against estimated times and sizes."""
    est = {s.name: s for s in zoo.stages}
    rows = []
    for s in measured.stages:
        e = est.get(s.name)
        if e is None:
            continue
        rows.append((s, e))
    tm = sum(s.forward_time + s.backward_time for s, _ in rows)
    te = sum(e.forward_time + e.backward_time for _, e in rows)
    scale = te / tm if tm else 1.0

    def rel(m: float, e: float) -> float:
        return abs(m - e) / e if e else (0.0 if m == 0 else math.inf)

    # A stage the roofline gives no time (flatten, a view) has no relative error: left out.
    per_stage_time = [
        rel((s.forward_time + s.backward_time) * scale, e.forward_time + e.backward_time) for s, e in rows
    ]
    saved = [rel(s.saved_size, e.saved_size) for s, e in rows]
    sa_m = remat.solve(measured, 1 << 60, algorithm="store-all").peak_memory
    sa_e = remat.solve(zoo, 1 << 60, algorithm="store-all").peak_memory
    return {
        "stages_matched": len(rows),
        "stages": len(measured),
        "time_total_measured_ms": tm,
        "time_total_estimated_ms": te,
        "time_ratio": tm / te if te else None,
        "forward_ratio": sum(s.forward_time for s, _ in rows) / max(1e-12, sum(e.forward_time for _, e in rows)),
        "backward_ratio": sum(s.backward_time for s, _ in rows) / max(1e-12, sum(e.backward_time for _, e in rows)),
        # After scaling the measured times to the estimate's total: the error in the
        # shares of time the solvers use (only ratios of times matter to them).
        "time_share_err_median": statistics.median(v for v in per_stage_time if math.isfinite(v)),
        "time_share_err_max": max(v for v in per_stage_time if math.isfinite(v)),
        "output_size_exact": sum(s.output_size == e.output_size for s, e in rows),
        "saved_ratio": sum(s.saved_size for s, _ in rows) / max(1, sum(e.saved_size for _, e in rows)),
        "saved_err_median": statistics.median(saved),
        "saved_err_max": max(saved),
        "store_all_peak_measured_chain": sa_m,
        "store_all_peak_zoo_chain": sa_e,
        "per_stage": [
            {
                "name": s.name,
                "fwd_ms": [s.forward_time, e.forward_time],
                "bwd_ms": [s.backward_time, e.backward_time],
                "output": [s.output_size, e.output_size],
                "saved": [s.saved_size, e.saved_size],
                "fwd_overhead": [s.forward_overhead, e.forward_overhead],
                "bwd_overhead": [s.backward_overhead, e.backward_overhead],
            }
            for s, e in rows
        ],
    }


def scaled(chain: remat.Chain, factor: float) -> remat.Chain:
    """The chain at ``factor`` times its batch: sizes and times in proportion (what a
    convolution or matmul does once the GPU is busy)."""
    d = chain.to_dict()
    d["input_size"] = int(d["input_size"] * factor)
    for s in [*d["stages"], d["loss"]]:
        for key in ("forward_time", "backward_time"):
            s[key] = s[key] * factor
        for key in ("output_size", "saved_size", "gradient_size", "forward_overhead", "backward_overhead"):
            if key in s:
                s[key] = int(s[key] * factor)
    return remat.Chain.from_dict(d)


def oom_safe(dev: Device, fn: Callable[..., Any], *args: Any) -> Any | None:
    """``fn(*args)``, or None when the device runs out of memory (cache emptied afterwards)."""
    try:
        return fn(*args)
    except torch.OutOfMemoryError:
        pass
    # Here, outside the except block, the traceback and the tensors its frames held are gone.
    dev.free_cache()
    return None


def study(net: Net, dev: Device, args: argparse.Namespace, command: str) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    named = net.build()
    # Module names cannot hold dots; the chain's stage names are the zoo's (layer1.0).
    model = nn.Sequential(OrderedDict((n.replace(".", "_"), m) for n, m in named)).to(dev.device).train()
    stages = list(model)
    L = len(stages)
    x, t = net.inputs(net.batch, dev.device, g)
    opt = make_optimizer(model, dev)
    res: dict[str, Any] = {"network": net.name, "label": net.label(), "batch": net.batch, "stages": L}
    t0 = time.perf_counter()

    # 1. the measured chain
    chain = measure_chain(net, model, x, t, args.repeat, command, [n for n, _ in named])
    res["profile_s"] = time.perf_counter() - t0
    if args.chains:
        path = Path(args.chains) / f"{net.label()}-{args.gpu_tag}-fp32.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        chain.save(path)
        res["chain_file"] = str(path)
    res["chain"] = chain.to_dict()
    store_all = remat.solve(chain, 1 << 60, algorithm="store-all")
    lowest = remat.min_memory(chain)
    res["store_all_predicted"] = store_all.peak_memory
    res["min_memory"] = lowest
    print(
        f"  profiled in {res['profile_s']:.1f} s: store-all {store_all.peak_memory / MiB:.0f} MiB, "
        f"min {lowest / MiB:.0f} MiB",
        flush=True,
    )

    # 2. against the zoo
    if args.zoo:
        zpath = Path(args.zoo) / f"{net.zoo}.json"
        if zpath.exists():
            res["zoo"] = zoo_error(chain, remat.Chain.load(zpath))
            z = res["zoo"]
            print(
                f"  zoo: time measured/estimated {z['time_ratio']:.2f}, "
                f"share error median {z['time_share_err_median']:.0%}, "
                f"saved {z['saved_ratio']:.3f}",
                flush=True,
            )

    # 3. plain, and checkpoint_sequential at every K: measured peaks
    plain_peak, plain_ms = steps(dev, model, opt, x, t, net.criterion, 1)
    res["plain"] = {"peak": plain_peak, "ms": plain_ms}

    def segments(k: int) -> Runner:
        return segmented(model, k)

    seq_peak: dict[int, int] = {}
    for k in range(2, L + 1):
        seq_peak[k] = train_step(dev, segments(k), opt, x, t, net.criterion).peak
    seq_peak[1] = plain_peak
    res["sequential_peaks"] = seq_peak
    seq_model = {k: remat.solve(chain, 1 << 60, algorithm="sequential", segments=k).makespan for k in seq_peak}

    # 4. three budgets: predicted against measured peaks
    rows = []
    remat_runs: dict[float, rt.Checkpointed] = {}
    for f in args.fractions:
        budget = int(lowest + f * (store_all.peak_memory - lowest))
        ck = rt.Checkpointed(model, budget, chain=chain)
        plan = ck.plan(x)
        dev.free_cache()  # so that the reserved peak is this schedule's
        runs = [train_step(dev, ck, opt, x, t, net.criterion) for _ in range(2)]
        peak = max(r.peak for r in runs)
        ops = plan.schedule.operations
        rows.append(
            {
                "fraction": f,
                "budget": budget,
                "algorithm": plan.schedule.algorithm,
                "recomputed": sum(1 for o in ops if o[0] != "B" and o[1] <= L) - L,
                "predicted": plan.schedule.peak_memory,
                "measured": peak,
                "ratio": peak / plan.schedule.peak_memory,
                # What a cap must allow: the allocator's reserved peak (fragmentation).
                "reserved": max(r.reserved for r in runs),
                "model_ms": plan.schedule.makespan,
                "overhead_predicted": plan.schedule.makespan / store_all.makespan - 1,
            }
        )
        remat_runs[f] = ck
        # The checkpoint_sequential K to race against: among those whose measured
        # peak is no larger, the three remat's model of it says are fastest.
        fits = [k for k, p in seq_peak.items() if p <= peak]
        rows[-1]["seq_candidates"] = sorted(fits, key=lambda k: seq_model[k])[:3]

    # 5. time: every variant once per round, so that drifts (clocks, other load) hit all alike
    variants: dict[str, Runner] = {"plain": model}
    variants.update({f"remat {f}": ck for f, ck in remat_runs.items()})
    for k in sorted({k for r in rows for k in r["seq_candidates"] if k != 1}):
        variants[f"K={k}"] = segments(k)
    for fn in variants.values():
        train_step(dev, fn, opt, x, t, net.criterion)  # warm-up
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.steps):
        for v, fn in variants.items():
            times[v].append(train_step(dev, fn, opt, x, t, net.criterion).ms)
    med = {v: statistics.median(ts) for v, ts in times.items()}
    res["plain"]["ms"] = med["plain"]
    seq_ms = {int(v[2:]): m for v, m in med.items() if v.startswith("K=")}
    seq_ms[1] = med["plain"]
    for row in rows:
        ms = med[f"remat {row['fraction']}"]
        row["ms"] = ms
        cands = row.pop("seq_candidates")
        if cands:
            best = min(cands, key=lambda k: seq_ms[k])
            row.update(seq_k=best, seq_peak=seq_peak[best], seq_ms=seq_ms[best], gain=seq_ms[best] / ms - 1)
        print(
            f"  budget {row['budget'] / MiB:8.0f} MiB: predicted {row['predicted'] / MiB:8.0f}, "
            f"measured {row['measured'] / MiB:8.0f} ({row['ratio']:.3f}), {ms:.1f} ms"
            + (
                f"; checkpoint_sequential K={row['seq_k']} {row['seq_peak'] / MiB:.0f} MiB {row['seq_ms']:.1f} ms, "
                f"gain {row['gain']:+.1%}"
                if "gain" in row
                else "; no K fits"
            ),
            flush=True,
        )
    del remat_runs, variants
    res["budgets"] = rows
    res["sequential_ms"] = seq_ms
    res["times"] = times
    res["elapsed_s"] = time.perf_counter() - t0
    if args.max_batch and dev.cuda:
        res["max_batch"] = max_batch(net, model, [n for n, _ in named], opt, dev, args, plain_peak, seq_peak)
    res["elapsed_s"] = time.perf_counter() - t0
    return res


def max_batch(
    net: Net,
    model: nn.Sequential,
    names: list[str],
    opt: torch.optim.Optimizer,
    dev: Device,
    args: argparse.Namespace,
    plain_peak: int,
    seq_peak: dict[int, int],
) -> dict[str, Any]:
    """The largest batch each method trains within a fixed memory cap: at most 10%
    slower per sample than the plain module at the same batch (timed with the cap
    lifted), and at any overhead. Each probe is a real run under the cap; running
    out of memory is a "no"."""
    total = torch.cuda.get_device_properties(dev.device).total_memory
    fixed = persistent_bytes(model)
    cap = math.ceil((fixed + plain_peak) / GiB) * GiB
    g = torch.Generator().manual_seed(1)
    plain_ms: dict[int, float | None] = {}
    out: dict[str, Any] = {"cap": cap, "persistent": fixed, "probes": []}
    L = len(model)

    def capped(on: bool) -> None:
        dev.free_cache()
        torch.cuda.set_per_process_memory_fraction(cap / total if on else 1.0, torch.cuda.current_device())

    def plain_time(b: int) -> float | None:
        """The plain module's step at batch b, the cap lifted (the reference)."""
        if b not in plain_ms:
            capped(False)
            x, t = net.inputs(b, dev.device, g)
            r = oom_safe(dev, steps, dev, model, opt, x, t, net.criterion, 2)
            plain_ms[b] = None if r is None else r[1]
            del x, t
            capped(True)
        return plain_ms[b]

    # checkpoint_sequential's segment counts: within 10%, those remat's model of it
    # puts within 20% of store-all, fastest first; at any overhead, the three with
    # the smallest measured peaks at the base batch.
    base = measure_chain(net, model, *net.inputs(net.batch, dev.device, g), 1, "", names)
    sa_ms = remat.solve(base, 1 << 60, algorithm="store-all").makespan
    seq_model = {k: remat.solve(base, 1 << 60, algorithm="sequential", segments=k).makespan for k in range(2, L + 1)}
    fast_ks = sorted((k for k in seq_model if seq_model[k] <= 1.2 * sa_ms), key=lambda k: seq_model[k])[:3]
    small_ks = sorted((k for k in seq_peak if k > 1), key=lambda k: seq_peak[k])[:3]
    out["sequential_k_tried"] = {"within_10pct": fast_ks, "any": small_ks}

    def probe(method: str, b: int) -> bool:
        within = not method.endswith("any")
        ref = plain_time(b) if within else None
        x, t = net.inputs(b, dev.device, g)
        info: dict[str, Any] = {"method": method, "batch": b, "plain_ms": ref}
        ok = False

        def fast(ms: float) -> bool:
            return not within or (ref is not None and ms <= 1.1 * ref)

        if method == "store-all":
            if likely_fits(plain_peak, b):
                r = oom_safe(dev, steps, dev, model, opt, x, t, net.criterion, 2)
                if r is not None:
                    info["ms"], ok = r[1], True
        elif method.startswith("checkpoint_sequential"):
            # K = 1 is the plain module: checkpoint_sequential at its best includes it.
            for k in [1, *fast_ks] if within else [1, *small_ks]:
                if not likely_fits(seq_peak[k], b):
                    continue
                r = oom_safe(dev, steps, dev, segmented(model, k), opt, x, t, net.criterion, 2)
                if r is None:
                    continue
                info["k"], info["ms"], ok = k, r[1], k == 1 or fast(r[1])
                if ok:
                    break
        else:
            # remat: the batch's chain measured under the cap, then the fastest schedule
            # within what the cap leaves (the batch itself counts in the budget), with
            # a margin of 3%, 7%, then 12% for the allocator's fragmentation.
            measured = oom_safe(dev, measure_chain, net, model, x, t, 2, "", names)
            if measured is None:
                # Measuring needs more than the schedule may (a stage's forward and
                # backward at once, the criterion's logits): the base chain, scaled.
                measured, info["chain"] = scaled(base, b / net.batch), "scaled"
            if measured is not None:
                avail = cap - torch.cuda.memory_allocated(dev.device) + x.numel() * x.element_size()
                for margin in (0.03, 0.07, 0.12):
                    budget = int(avail * (1 - margin))
                    try:
                        ck = rt.Checkpointed(model, budget, chain=measured)
                        ck.plan(x)
                    except remat.InfeasibleError:
                        break
                    assert ck.schedule is not None
                    r = oom_safe(dev, steps, dev, ck, opt, x, t, net.criterion, 2)
                    del ck
                    if r is None:
                        continue
                    info["budget"], info["margin"], info["ms"], ok = budget, margin, r[1], fast(r[1])
                    break
            del measured
        info["ok"] = ok
        out["probes"].append(info)
        del x, t
        dev.free_cache()
        info["leaked"] = torch.cuda.memory_allocated(dev.device) - baseline
        print(
            f"    {method:27} batch {b:4}: {'yes' if ok else 'no '} {info.get('ms', '')}"
            + (f" (leaked {info['leaked'] / MiB:.0f} MiB)" if info["leaked"] > 0 else ""),
            flush=True,
        )
        return ok

    def likely_fits(peak_at_base: int, b: int) -> bool:
        """Whether a run whose activation peak at the base batch was ``peak_at_base``
        should fit at batch b (peaks grow with the batch): runs that would not are
        not tried (each failure costs a run, and a failure may leave memory behind:
        every probe's "leaked" says whether one did)."""
        return fixed + peak_at_base * b / net.batch <= 1.02 * cap

    capped(True)
    baseline = torch.cuda.memory_allocated(dev.device)
    out["baseline_allocated"] = baseline
    # remat first: a leak (remat.torch.profile had one, fixed) would only hurt remat.
    for method in ("store-all", "remat", "remat any", "checkpoint_sequential", "checkpoint_sequential any"):
        top = (8 if method.endswith("any") else 4) * net.batch
        grid = [net.grain * i for i in range(1, top // net.grain + 1)]
        lo, hi = -1, len(grid)  # grid[lo] fits (or none does), grid[hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if probe(method, grid[mid]):
                lo = mid
            else:
                hi = mid
        out[method] = grid[lo] if lo >= 0 else 0
        if (time.perf_counter() - args.started) > args.time_limit:
            break
    capped(False)
    return out


# -- report -----------------------------------------------------------------------------


def zoo_table(results: list[dict[str, Any]]) -> list[str]:
    """The markdown table of measured chains against the zoo's estimates."""
    lines = [
        "Measured chain against `remat zoo --device h100` (the roofline estimate):",
        "",
        "| network | stages | measured / estimated time | stage time-share error (median / max) "
        "| output sizes exact | saved bytes measured / estimated (median error) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        z = r.get("zoo")
        if z:
            lines.append(
                f"| {r['label']} | {r['stages']} | {z['time_ratio']:.2f} (fwd {z['forward_ratio']:.2f}, "
                f"bwd {z['backward_ratio']:.2f}) | {z['time_share_err_median']:.0%} / {z['time_share_err_max']:.0%} "
                f"| {z['output_size_exact']}/{z['stages_matched']} "
                f"| {z['saved_ratio']:.3f} ({z['saved_err_median']:.1%}) |"
            )
    return lines


def markdown(results: list[dict[str, Any]], head: dict[str, Any]) -> str:
    lines = [
        f"{head['gpu']}, torch {head['torch']}, CUDA {head['cuda']}, fp32, {head['date']}; `{head['command']}`",
        "",
        *zoo_table(results),
    ]
    lines += [
        "",
        "Predicted against measured activation peak (MiB), and step time against the fastest `checkpoint_sequential` "
        "whose measured peak is no larger (whole steps, medians):",
        "",
        "| network | budget | predicted | measured | measured / predicted | reserved / predicted | remat ms "
        "| checkpoint_sequential | its peak | its ms | remat's gain | plain ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for b in r["budgets"]:
            seq = (
                f"K={b['seq_k']} | {b['seq_peak'] / MiB:.0f} | {b['seq_ms']:.1f} | {b['gain']:+.1%}"
                if "gain" in b
                else "no K fits | | |"
            )
            lines.append(
                f"| {r['label']} | {b['budget'] / MiB:.0f} | {b['predicted'] / MiB:.0f} | {b['measured'] / MiB:.0f} "
                f"| {b['ratio']:.3f} | {b['reserved'] / b['predicted']:.3f} | {b['ms']:.1f} | {seq} "
                f"| {r['plain']['ms']:.1f} |"
            )
    mb = [r for r in results if "max_batch" in r]
    if mb:
        lines += [
            "",
            "Largest batch within a fixed memory cap (parameters, gradients, Adam state and the plain module's "
            "activations at the base batch, rounded up to a GiB), at most 10% slower per sample than the plain "
            "module at that batch, and at any overhead:",
            "",
            "| network | cap | store-all | checkpoint_sequential | remat | checkpoint_sequential, any overhead "
            "| remat, any overhead |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in mb:
            m = r["max_batch"]
            lines.append(
                f"| {r['label']} | {m['cap'] / GiB:.0f} GiB | {m.get('store-all', '-')} "
                f"| {m.get('checkpoint_sequential', '-')} | {m.get('remat', '-')} "
                f"| {m.get('checkpoint_sequential any', '-')} | {m.get('remat any', '-')} |"
            )
    return "\n".join(lines) + "\n"


def zoo_report(chains: Path, zoo: Path, nets: dict[str, Net]) -> list[str]:
    """The zoo table for every measured chain in ``chains`` whose network has an
    estimate in ``zoo`` (``NAME.json``); runs anywhere, no GPU."""
    results = []
    for path in sorted(chains.glob("*.json")):
        chain = remat.Chain.load(path)
        network = (chain.metadata or {}).get("network", "")
        net = nets.get(network)
        estimate = zoo / f"{net.zoo}.json" if net else None
        if estimate is None or not estimate.exists():
            continue
        results.append({"label": chain.name, "stages": len(chain), "zoo": zoo_error(chain, remat.Chain.load(estimate))})
    return zoo_table(results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for results.json and results.md (required unless --zoo-report)")
    ap.add_argument(
        "--zoo-report",
        action="store_true",
        help="no GPU: print the measured chains of --chains against the estimates in --zoo, and exit",
    )
    ap.add_argument(
        "--models",
        default="resnet50,resnet101,resnet152,densenet121,gpt2",
        help="comma-separated networks to measure (default: all five)",
    )
    ap.add_argument("--zoo", help="folder of `remat zoo NAME --device h100` chains at the same batches (NAME.json)")
    ap.add_argument("--chains", help="folder to write the measured chains to (chains/measured)")
    ap.add_argument("--gpu-tag", default="h200", help="in the chain files' names")
    ap.add_argument("--device", default="cuda", help="torch device to measure on (default: cuda)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per stage measurement when profiling")
    ap.add_argument("--steps", type=int, default=4, help="timed training steps per variant (after one warm-up)")
    ap.add_argument("--fractions", default="0.2,0.5,0.8", help="budgets between the smallest and store-all's peak")
    ap.add_argument(
        "--no-max-batch",
        dest="max_batch",
        action="store_false",
        help="skip the largest-batch search (the longest part)",
    )
    ap.add_argument("--quick", action="store_true", help="toy sizes: a smoke test of the code paths")
    ap.add_argument("--time-limit", type=float, default=480.0, help="seconds; skip what is left after this")
    ap.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--command", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.zoo_report:
        if not (args.chains and args.zoo):
            ap.error("--zoo-report needs --chains (the measured chains) and --zoo (the estimates)")
        print("\n".join(zoo_report(Path(args.chains), Path(args.zoo), networks(False))))
        return
    if not args.out:
        ap.error("--out is required")
    args.fractions = [float(f) for f in args.fractions.split(",")]
    args.started = time.perf_counter()
    dev = Device(torch.device(args.device))
    command = "python benchmarks/gpu_measure.py " + " ".join(sys.argv[1:])
    head = {
        "gpu": dev.name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": command,
        "remat": remat.__version__,
    }
    print(head, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nets = networks(args.quick)
    results: list[dict[str, Any]] = []
    names = args.models.split(",")
    if args.single:
        # A child of the run below: one network, its results to a part file.
        results.append(study(nets[names[0]], dev, args, args.command or command))
        (out / f"part-{names[0]}.json").write_text(json.dumps(results[0], default=str))
        return
    for name in names:
        left = args.time_limit - (time.perf_counter() - args.started)
        if left <= 0:
            print(f"time limit reached: {name} skipped", flush=True)
            continue
        print(f"{name}:", flush=True)
        if dev.cuda:
            # One process per network: memory an earlier network's failed run might
            # leave behind (remat.torch.profile leaked on out-of-memory errors before
            # it was fixed, seen on the H200) must not shrink the next one's cap.
            argv = [*sys.argv[1:], "--models", name, "--single", "--command", command, "--time-limit", str(left)]
            subprocess.run([sys.executable, __file__, *argv], check=False)
            part = out / f"part-{name}.json"
            if not part.exists():
                print(f"{name}: no results (the run failed)", flush=True)
                continue
            results.append(json.loads(part.read_text()))
            part.unlink()
        else:
            results.append(study(nets[name], dev, args, command))
        dev.free_cache()
        (out / "results.json").write_text(json.dumps({"head": head, "results": results}, indent=1, default=str))
        (out / "results.md").write_text(markdown(results, head))
    print(markdown(results, head))


if __name__ == "__main__":
    main()
