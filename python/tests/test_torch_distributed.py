"""remat.torch.apply under torch.distributed on the CPU (gloo, two processes):
DDP and FSDP2 around an applied Hugging Face model give the gradients of one
process on the whole batch."""

from __future__ import annotations

import os
import socket
import tempfile
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import remat.torch as rt

transformers = pytest.importorskip("transformers")


def make() -> Any:
    config = transformers.GPT2Config(
        n_layer=4, n_embd=64, n_head=4, vocab_size=256, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).train()


IDS = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(1))


def reference() -> dict[str, torch.Tensor]:
    model = make()
    model(IDS, labels=IDS).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def worker(rank: int, world: int, port: int, wrap: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        model = make()
        plan = rt.apply(model, memory="40%" if wrap == "ddp" else "70%")
        if wrap == "ddp":
            wrapped: Any = torch.nn.parallel.DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import fully_shard

            for block in model.transformer.h:
                fully_shard(block)
            wrapped = fully_shard(model)
        ids = IDS.chunk(world)[rank]
        for _ in range(2):  # the first step measures, the second runs the final plan
            model.zero_grad(set_to_none=True)
            wrapped(ids, labels=ids).loss.backward()
        grads = full_gradients(model)  # every rank: FSDP2 gathers them together
        if rank == 0:
            torch.save({"grads": grads, "recomputed": recomputed(plan)}, out)
    finally:
        dist.destroy_process_group()
    _exit_without_teardown()


def recomputed(plan: rt.AppliedPlan) -> int:
    """How much the plan recomputes. Below storing everything every plan
    does: an extra forward, or a block recorded under an option, which its
    backward reruns. Which of the two the solver picks follows the measured
    times (counting extra forwards alone failed under load, issue 36)."""
    assert plan.schedule is not None
    L = len(plan.modules)
    ops = plan.schedule.operations_with_options
    return sum(1 for k, l, _ in ops if k != "B" and l <= L) - L + sum(1 for _, _, o in ops if o)


def full_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Each parameter's gradient, whole (FSDP2's are sharded DTensors)."""
    grads = {}
    for n, p in model.named_parameters():
        g = p.grad
        if g is not None:
            grads[n] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    return grads


def _exit_without_teardown() -> None:
    """Ends a worker that finished its work without the interpreter's
    teardown: once in about twelve runs of the whole suite a gloo worker
    aborted there, after its last step and the process group's end
    ("terminate called without an active exception", no Python frame left:
    a C++ thread's destructor at exit, 2026-11-28). What the test checks is
    written before this; a worker that raised never gets here."""
    os._exit(0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("wrap", ["ddp", "fsdp2"])
def test_data_parallel_gradients_equal_one_process(wrap: str) -> None:
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "grads.pt")
        mp.spawn(worker, args=(2, free_port(), wrap, out), nprocs=2, join=True)
        got = torch.load(out)
    assert got["recomputed"] > 0
    want = reference()
    assert got["grads"].keys() == want.keys()
    for n, g in want.items():
        torch.testing.assert_close(got["grads"][n], g, rtol=1e-5, atol=1e-7, msg=n)


def make_t5() -> Any:
    config = transformers.T5Config(
        vocab_size=64,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=3,
        num_decoder_layers=3,
        num_heads=4,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.T5ForConditionalGeneration(config).train()


SRC = torch.randint(1, 64, (4, 12), generator=torch.Generator().manual_seed(2))
TGT = torch.randint(1, 64, (4, 10), generator=torch.Generator().manual_seed(3))


def t5_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        from torch.distributed.fsdp import fully_shard

        model = make_t5()
        # 70%: on 2 of about 12 CI runs the first step measured the backward
        # of the part before the stack at 309 KiB where it measures 172 KiB,
        # above 60%'s 275 KiB budget (InfeasibleError on one rank); the cause
        # is not found (docs/pytorch.md, "DDP, FSDP2"). Blocks still run again.
        plan = rt.apply(model, memory="70%")
        for block in [*model.encoder.block, *model.decoder.block]:
            fully_shard(block)
        wrapped = fully_shard(model)
        src, tgt = SRC.chunk(world)[rank], TGT.chunk(world)[rank]
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            wrapped(input_ids=src, labels=tgt).loss.backward()
        grads = full_gradients(model)  # every rank: FSDP2 gathers them together
        if rank == 0:
            torch.save({"grads": grads, "stacks": [w for w, _ in plan.stacks], "recomputed": recomputed(plan)}, out)
    finally:
        dist.destroy_process_group()
    _exit_without_teardown()


def test_fsdp2_around_an_encoder_decoder_plans_both_stacks() -> None:
    """T5 under FSDP2 (each block of both stacks and the model): the decoder's
    input is seen by running the model's forward once more up to its last
    block, which reshards each block after its forward; remat puts back what
    was gathered when it began. Both stacks are planned together, and the
    gradients equal one process's on the whole batch. Before, several stacks
    under FSDP2 raised an error naming one stack to plan instead."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "grads.pt")
        mp.spawn(t5_worker, args=(2, free_port(), out), nprocs=2, join=True)
        got = torch.load(out)
    assert got["stacks"] == ["encoder.block", "decoder.block"] and got["recomputed"] > 0
    model = make_t5()
    model(input_ids=SRC, labels=TGT).loss.backward()
    want = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert got["grads"].keys() == want.keys()
    for n, g in want.items():
        torch.testing.assert_close(got["grads"][n], g, rtol=1e-5, atol=1e-6, msg=n)


def test_fsdp2_state_of_another_release_is_read_or_left_alone() -> None:
    """remat reads FSDP2's private state to put it back after the forward it
    runs inside a step's (``_fsdp_state_kept``): a list of parameter groups
    in recent releases, one group in older ones. Where neither is there, it
    reads nothing, and that forward is not run under FSDP2 (each block is
    profiled with the first one's side inputs, as before)."""
    import importlib

    apply_module = importlib.import_module("remat.torch.apply")

    class Recent:
        _fsdp_param_groups = ("a", "b")

    class Older:
        _fsdp_param_group = "a"

    class Unknown:
        pass

    def module(state: object) -> torch.nn.Module:
        m = torch.nn.Module()
        m._get_fsdp_state = lambda: state  # type: ignore[method-assign,assignment]
        return m

    assert apply_module._fsdp_groups(module(Recent()))[1] == ["a", "b"]
    assert apply_module._fsdp_groups(module(Older()))[1] == ["a"]
    assert apply_module._fsdp_groups(module(Unknown())) is None
    assert apply_module._fsdp_groups(torch.nn.Linear(1, 1)) is None
