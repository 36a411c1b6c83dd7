"""Pipeline parallelism: remat's per-rank plans against uniform per-block
checkpointing on every rank, at the same largest rank peak.

A GPT-2-shaped model (random weights, no dropout) is split into P stages run by
P processes on the CPU (gloo) with ``torch.distributed.pipelining``'s
``ScheduleGPipe`` or ``Schedule1F1B``. Two variants train it:

- **uniform**: every block recomputed, as Hugging Face's
  ``gradient_checkpointing_enable()`` does (each block under
  ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``), on every
  rank;
- **remat**: :func:`remat.torch.pipeline.apply_stage` on each rank, with the
  budget set to the uniform variant's largest measured rank peak, so that no
  rank goes above what the uniform pipeline needs on its fullest rank; each
  rank's plan counts the micro-batches it holds at once.

Per rank it prints the in-flight count, the budget, remat's predicted and
measured peaks (LiveBytes: live tensor bytes, parameter gradients left out)
and the uniform variant's, and the medians of the step time over interleaved
rounds (each round one step of each variant, the order alternating; a step's
time is its slowest rank's; a rank's time is from the barrier before the step
to its own last operation, waiting on its neighbours included).

    python benchmarks/pipeline.py --stages 2 --schedule 1f1b --rounds 7
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import remat
import remat.torch as rt
from remat.torch.pipeline import StagePlan, apply_stage


class Block(nn.Module):
    """GPT-2's block: pre-norm causal attention and a 4x GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Checkpointed(nn.Module):
    """A block recomputed in its backward (HF's gradient checkpointing)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=False)  # type: ignore[no-any-return]


class Stage(nn.Module):
    """Stage k of P: embeddings on the first, an equal share of the blocks,
    the final norm and LM head on the last."""

    def __init__(self, a: argparse.Namespace, k: int, p: int, *, uniform: bool) -> None:
        super().__init__()
        torch.manual_seed(0)  # the same weights on every rank and variant
        blocks = [Block(a.width, a.heads) for _ in range(a.layers)]
        per = a.layers // p
        self.first, self.last = k == 0, k == p - 1
        if self.first:
            self.wte, self.wpe = nn.Embedding(a.vocab, a.width), nn.Embedding(a.seq, a.width)
        mine = blocks[k * per : (k + 1) * per]
        self.h = nn.ModuleList(Checkpointed(b) if uniform else b for b in mine)
        if self.last:
            self.ln_f, self.head = nn.LayerNorm(a.width), nn.Linear(a.width, a.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))
        for block in self.h:
            x = block(x)
        if self.last:
            x = self.head(self.ln_f(x))
        return x


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def worker(rank: int, a: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.stages)
    torch.set_num_threads(1)
    try:
        run(rank, a)
    except BaseException:
        # Say which rank failed: the others only see their peer's connection close.
        traceback.print_exc()
        sys.stderr.write(f"rank {rank} failed (above)\n")
        raise
    finally:
        dist.destroy_process_group()


def run(rank: int, a: argparse.Namespace) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    p, m = a.stages, a.microbatches
    cls = ScheduleGPipe if a.schedule == "gpipe" else Schedule1F1B
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, a.vocab, (m * a.batch, a.seq), generator=g)
    target = torch.roll(ids, -1, dims=1)

    def pipeline(module: nn.Module) -> Any:
        stage = PipelineStage(module, rank, p, torch.device("cpu"))
        return cls(stage, n_microbatches=m, loss_fn=loss_fn)

    own: dict[str, list[float]] = {"uniform": [], "remat": []}

    def step(schedule: Any, module: nn.Module, name: str = "") -> float:
        module.zero_grad(set_to_none=True)
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            schedule.step(ids, return_outputs=False)
        elif rank == p - 1:
            schedule.step(target=target, return_outputs=False)
        else:
            schedule.step(return_outputs=False)
        elapsed = torch.tensor([time.perf_counter() - t0])
        if name:
            own[name].append(float(elapsed))  # this rank's own: until its last operation
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the step ends when its slowest rank does
        return float(elapsed)

    def peak(schedule: Any, module: nn.Module) -> int:
        with rt.LiveBytes() as live:
            live.exclude_parameter_gradients(module.parameters())
            step(schedule, module)
        return live.peak

    uniform = Stage(a, rank, p, uniform=True)
    u_sched = pipeline(uniform)
    step(u_sched, uniform)  # warm-up (the stage's shapes, buffers)
    u_peak = peak(u_sched, uniform)
    largest = torch.tensor([u_peak])
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    budget = int(largest)

    mine = Stage(a, rank, p, uniform=False)
    example = ids[: a.batch] if rank == 0 else torch.zeros(a.batch, a.seq, a.width)

    def plan(memory: int) -> StagePlan:
        return apply_stage(
            mine,
            memory,
            cls,
            rank,
            p,
            m,
            example_args=(example,),
            loss_fn=loss_fn,
            example_target=target[: a.batch],
            policies=() if a.no_options else rt.DEFAULT_POLICIES,
        )

    # At the uniform pipeline's largest rank peak; where remat's model finds no
    # plan there, at the smallest budget it names (reported as such).
    # (The smallest named depends on what the calibration measures at it,
    # so it is tried again, up to a few times.)
    smallest, memory = None, budget
    for attempt in range(4):
        try:
            sp = plan(memory)
            break
        except remat.InfeasibleError as e:
            if e.min_budget is None or attempt == 3:
                raise
            smallest = memory = max(int(e.min_budget), memory + 1)
    r_sched = pipeline(mine)
    step(r_sched, mine)
    r_peak = peak(r_sched, mine)

    times: dict[str, list[float]] = {"uniform": [], "remat": []}
    for r in range(a.rounds):
        order = [("uniform", u_sched, uniform), ("remat", r_sched, mine)]
        for name, sched, module in order if r % 2 == 0 else order[::-1]:
            times[name].append(step(sched, module, name))

    schedule = sp.plan.schedule
    L = len(sp.plan.modules)
    ops = schedule.operations if schedule is not None else []
    forwards = [sum(1 for k, j in ops if j == l and k != "B") for l in range(1, L + 1)]
    kept = [l for l, f in enumerate(forwards, 1) if f == 1]
    row = {
        "rank": rank,
        "in_flight": sp.in_flight,
        "budget": budget,
        "smallest": smallest,
        "predicted": sp.predicted_peak,
        "measured": r_peak,
        "uniform": u_peak,
        "blocks": L,
        "run_once": kept,
        "times": times,
        "own_uniform": statistics.median(own["uniform"]),
        "own_remat": statistics.median(own["remat"]),
    }
    rows: list[Any] = [None] * p
    dist.all_gather_object(rows, row)
    if rank == 0:
        report(a, rows)


def fmt(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def report(a: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    print(
        f"{a.schedule}, {a.stages} stages, {a.microbatches} micro-batches of {a.batch} x {a.seq} tokens, "
        f"{a.layers} blocks of width {a.width}, {a.rounds} rounds"
    )
    print(
        "| rank | in flight | budget | remat predicted | remat measured | uniform measured | blocks run once "
        "| time remat | time uniform |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        once = f"{len(r['run_once'])} of {r['blocks']}"
        budget = fmt(r["budget"])
        if r["smallest"] is not None:
            budget = f"{budget}: infeasible, ran at remat's smallest {fmt(r['smallest'])}"
        print(
            f"| {r['rank']} | {r['in_flight']} | {budget} | {fmt(r['predicted'])} | {fmt(r['measured'])} "
            f"| {fmt(r['uniform'])} | {once} | {r['own_remat'] * 1000:.1f} ms | {r['own_uniform'] * 1000:.1f} ms |"
        )
    t = rows[0]["times"]
    u, rm = statistics.median(t["uniform"]), statistics.median(t["remat"])
    ratio = statistics.median(x / y for x, y in zip(t["remat"], t["uniform"]))
    print(
        f"step: uniform {u * 1000:.1f} ms, remat {rm * 1000:.1f} ms (median of {a.rounds}); "
        f"remat / uniform {ratio:.3f} (median of per-round ratios); largest rank peak: uniform "
        f"{fmt(max(r['uniform'] for r in rows))}, remat {fmt(max(r['measured'] for r in rows))}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--schedule", choices=["gpipe", "1f1b"], default="1f1b")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2, help="sequences per micro-batch")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-options", action="store_true", help="policies=(): blocks recorded whole or not at all")
    a = ap.parse_args()
    if a.layers % a.stages:
        ap.error("--layers must be a multiple of --stages")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    mp.spawn(worker, args=(a, port), nprocs=a.stages, join=True)


if __name__ == "__main__":
    main()
