"""remat.torch with compiled blocks (issue 34): each block runs graphs compiled
by inductor in every run the schedule makes of it, the budget holds under
``torch.compile`` by the allocator's count, and gradients equal compiled plain
training (``fallback_random`` on, so that compiled code draws the eager random
numbers; fusion reorders floating-point sums, so within 1e-5 relative).

Plans here are forced (fixed schedules) or checked for what holds for any
plan: nothing asserted follows from measured time."""

from __future__ import annotations

import copy
import functools
import inspect
import os
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

import remat
import remat.torch as rt
from remat.torch.compiled import CompiledBlocks, compile_options
from remat.torch.executor import Executor, Program
from remat.torch.memory import AllocatorTrace
from remat.torch.policies import resolve_policies
from remat.torch.profile import _signature
from remat.torch.stages import Call, carried_output

torch.set_num_threads(1)
transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    """Dynamo gives up on a code object after ``recompile_limit`` entries, and
    transformers' forwards share one (its deprecation wrapper): after many
    models in one process it would run the next one eagerly."""
    import torch._dynamo

    torch._dynamo.reset()


@pytest.fixture
def eager_random() -> Iterator[None]:
    """Compiled code draws random numbers as eager code does (one aten call per
    random operator), so compiled plain and compiled remat can be compared."""
    import torch._inductor.config as inductor

    before = inductor.fallback_random
    inductor.fallback_random = True
    try:
        yield
    finally:
        inductor.fallback_random = before


def close(a: torch.Tensor, b: torch.Tensor, what: str, rtol: float = 1e-5) -> None:
    torch.testing.assert_close(
        a, b, rtol=rtol, atol=rtol * float(b.detach().abs().max()) + 1e-8, msg=lambda m: f"{what}: {m}"
    )


def llama() -> nn.Module:
    config = transformers.LlamaConfig(
        num_hidden_layers=4,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=160,
        vocab_size=512,
        attention_dropout=0.1,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).train()


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=512, n_positions=128)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).train()  # dropout 0.1 everywhere


IDS = torch.randint(0, 512, (2, 48), generator=torch.Generator().manual_seed(1))


def step(run: Callable[..., Any], model: nn.Module, seed: int = 7) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = run(IDS, labels=IDS).loss
    loss.backward()
    return loss.detach()


def recomputes(plan: rt.AppliedPlan) -> bool:
    assert plan.schedule is not None
    L = len(plan.modules)
    ops = plan.schedule.operations_with_options
    return sum(1 for k, l, _ in ops if k != "B" and l <= L) > L or any(o for _, _, o in ops)


# -- a compiled block under saved-tensor hooks -----------------------------------


class Mlp(nn.Module):
    def __init__(self, d: int = 32, p: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.drop(self.fc2(torch.nn.functional.gelu(self.fc1(x)))))


def saved(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> list[tuple[Any, ...]]:
    metas: list[tuple[Any, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        metas.append((tuple(t.shape), t.dtype))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn(x)
    y.sum().backward()
    return metas


def test_a_compiled_block_hands_its_saved_tensors_to_the_hooks_the_same_every_run() -> None:
    block = Mlp()
    blocks = CompiledBlocks({}, _signature)
    compiled = blocks.variant(block, None)
    x = torch.randn(8, 32, requires_grad=True)
    eager = saved(block, x)
    first = saved(lambda t: compiled(block, t), x)
    again = saved(lambda t: compiled(block, t), x)
    # The partitioner recomputes cheap pointwise work in the backward: fewer saved.
    assert 0 < len(first) < len(eager)
    assert first == again
    # Selective variants save less again, and the input-only one nothing but inputs.
    matmuls, nothing = resolve_policies([rt.Policy.SAVE_MATMULS, rt.Policy.SAVE_INPUT])
    sac = saved(lambda t: blocks.variant(block, matmuls)(block, t), x)
    bare = saved(lambda t: blocks.variant(block, nothing)(block, t), x)
    size = {m for m in bare}
    assert size <= {(tuple(x.shape), x.dtype)} | {(tuple(p.shape), p.dtype) for p in block.parameters()}
    assert len(sac) <= len(first)


def test_identical_blocks_share_one_compiled_function_and_kinds_get_their_own() -> None:
    blocks = CompiledBlocks({}, _signature)
    a, b, c = Mlp(), Mlp(), Mlp(d=16)
    assert blocks.variant(a, None) is blocks.variant(b, None)
    assert blocks.variant(a, None) is not blocks.variant(c, None)
    # Dynamo caches per code object: each kind its own.
    code = lambda f: f._torchdynamo_orig_callable.__code__  # noqa: E731
    assert code(blocks.variant(a, None)) is not code(blocks.variant(c, None))
    assert len(blocks) == 2


def test_a_stack_of_more_blocks_than_dynamos_recompile_limit_compiles_once_per_variant() -> None:
    """Twelve identical blocks with compile=True: every block's variant is one
    compiled graph, never one per block. Each block had a forward with a code
    object of its own, on which Dynamo guards; past its recompile_limit (8)
    the rest ran eagerly (found on a GPU: the step 13% slower, 6% above the
    predicted peak)."""
    import torch._dynamo.utils as dynamo_utils

    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=12,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        use_cache=False,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).train()
    ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    plan = rt.apply(model, memory="45%", compile=True)
    try:
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(ids, labels=ids).loss.backward()
        kinds = {o for k, _, o in plan.schedule.operations_with_options if k == "F_all"} if plan.schedule else set()
        graphs = dynamo_utils.counters["stats"]["unique_graphs"]
        # At most one graph per option the plan runs and the profile measured
        # (3 options), far below one per block.
        assert 1 <= graphs <= 3 + len(kinds) < 8, (graphs, kinds)
    finally:
        plan.remove()
        torch._dynamo.reset()


def llama16() -> nn.Module:
    """Sixteen blocks: twice Dynamo's ``recompile_limit`` (8)."""
    config = transformers.LlamaConfig(
        num_hidden_layers=16,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=512,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).train()


def block_graphs(model: nn.Module) -> int:
    """How many compiled entries Dynamo holds for the forward remat installed
    on the model's blocks (one code object for every block of a plan)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    code = model.model.layers[0].forward.__code__
    assert code.co_name.startswith("remat_block_of_"), code.co_name
    return len(_debug_get_cache_entry_list(code))


def test_sixteen_blocks_and_three_plans_compile_one_graph_per_kind_of_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing a compiled block's wrapper reads tells one block from another:
    a plan's blocks share their graphs, one per recording option, however many
    blocks and plans a process holds. On transformers 5.25 the wrapper was
    guarded on the block's index (``stages[0] == 2``): recompiled for every
    block, and past ``recompile_limit`` its blocks ran eagerly (an in-graph plan
    then measured above its budget). Dynamo is told to fail rather than give
    up on a code object, so a limit hit is an error here."""
    import importlib

    import torch._dynamo.config as dynamo_config

    # Any in-graph plan within the budget is taken, however slow: what is
    # tested is how its blocks compile.
    monkeypatch.setattr(importlib.import_module("remat.torch.apply"), "_IN_GRAPH_GAIN", 10.0)
    torch._dynamo.reset()
    plans: list[tuple[nn.Module, rt.AppliedPlan]] = []
    with dynamo_config.patch(fail_on_recompile_limit_hit=True), steady_profiles():
        try:
            # Inside torch.compile's graph: a plan that stores everything and
            # one whose blocks run two options; then compiled blocks of
            # remat's own (compile=True), run by the executor.
            for kwargs in (
                {"memory": 1 << 40},
                {"memory": "90%", "policies": (rt.SAVE_MATMULS, rt.SAVE_INPUT)},
                {"memory": "45%", "compile": True},
            ):
                model = llama16()
                plan = rt.apply(model, **kwargs)  # type: ignore[arg-type]
                run = model if kwargs.get("compile") else torch.compile(model, backend="aot_eager")
                for _ in range(5):
                    step(run, model)
                plans.append((model, plan))
            for model, plan in plans[:2]:
                assert plan._in_graph and plan._verified is not None, plan.explain()
                kinds = {o for o, _ in plan._in_graph.values()}
                # One graph per recording option its blocks run, and at most one
                # from the steps before (the wrapper up to the executor's break).
                assert 1 <= block_graphs(model) <= len(kinds) + 1, (block_graphs(model), kinds)
            assert len({o for o, _ in plans[1][1]._in_graph.values()}) > 1, plans[1][1]._in_graph
            model, plan = plans[2]
            assert plan.schedule is not None
            assert block_graphs(model) <= 1  # compiled blocks: the executor runs them, the wrapper breaks at once
        finally:
            for _, plan in plans:
                plan.remove()
            torch._dynamo.reset()


def test_compile_argument_is_checked() -> None:
    assert compile_options(None) is None and compile_options(False) is None
    assert compile_options(True) == {}
    assert compile_options({"mode": "max-autotune-no-cudagraphs"}) == {"mode": "max-autotune-no-cudagraphs"}
    with pytest.raises(ValueError, match="'modes'"):
        rt.apply(gpt2(), memory="50%", compile={"modes": "x"})
    with pytest.raises(TypeError, match="compile must be"):
        rt.apply(gpt2(), memory="50%", compile="yes")  # type: ignore[arg-type]


# -- the executor runs the compiled variants --------------------------------------


def run_forced(
    stages: list[nn.Module], ops: list[tuple[str, int, int]], x: torch.Tensor, compiled: bool, seed: int = 3
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Runs ``ops`` on ``stages`` (options: SAVE_MATMULS as 1, SAVE_INPUT as 2)
    and returns the output and the gradients of the input and parameters."""
    policies = resolve_policies([rt.Policy.SAVE_MATMULS, rt.Policy.SAVE_INPUT])
    blocks = CompiledBlocks({}, _signature)
    variants = [[blocks.variant(s, p) for p in [None, *policies]] for s in stages]
    ex = Executor(
        stages,
        Program(len(stages), ops),
        options=[[None, *policies] for _ in stages],
        compiled=[[lambda *a, f=f, s=s, **k: f(s, *a, **k) for f in v] for s, v in zip(stages, variants)]
        if compiled
        else None,
    )
    torch.manual_seed(seed)
    xl = x.detach().requires_grad_(True)
    step = ex.begin()
    h = xl
    for l in range(1, len(stages) + 1):
        h = carried_output(ex.call(step, l, Call((h,), {}, 0)), lambda: "stage")
    # Not h.square().sum(): through the last LayerNorm (weight 1, bias 0) its
    # gradient cancels to rounding noise, which fusion changes by 1%.
    h.mul(torch.randn(h.shape, generator=torch.Generator().manual_seed(4))).sum().backward()
    assert xl.grad is not None
    return h.detach(), [xl.grad, *[p.grad for s in stages for p in s.parameters()]]  # type: ignore[list-item]


def store_all_of(ops: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Storing everything, each stage recorded with the option ``ops`` records
    it with: the same compiled graphs run first, so the same random numbers."""
    option = {l: o for k, l, o in ops if k == "F_all"}
    L = max(l for _, l, _ in ops) - 1
    return [("F_all", l, option.get(l, 0)) for l in range(1, L + 2)] + [("B", l, 0) for l in range(L + 1, 0, -1)]


def stages(p: float) -> list[nn.Module]:
    torch.manual_seed(0)
    return [Mlp(32, p) for _ in range(4)]


def ops_of(notation: str) -> list[tuple[str, int, int]]:
    """``"F_ck^1 F_all^4[1] B^4"`` as operations with options."""
    found = re.findall(r"(F_all|F_ck|F_none|B)\^(\d+)(?:\[(\d+)\])?", notation)
    return [(k, int(l), int(o or 0)) for k, l, o in found]


@pytest.mark.parametrize(
    "ops",
    [
        # F_ck / F_none first runs (holders filled by the compiled rerun), a
        # forward-phase option, backward-phase options and plain recomputations.
        ops_of("F_ck^1 F_none^2 F_ck^3 F_all^4[1] F_all^5 B^5 B^4 F_all^3[2] B^3 F_ck^1 F_all^2[1] B^2 F_all^1 B^1"),
        ops_of("F_ck^1 F_none^2 F_none^3 F_all^4 F_all^5 B^5 B^4 F_ck^1 F_ck^2 F_all^3[1] B^3")
        + ops_of("F_all^2[2] B^2 F_all^1[1] B^1"),
    ],
    ids=["mixed", "checkpoints"],
)
def test_recomputations_replay_the_first_runs_random_numbers(ops: list[tuple[str, int, int]]) -> None:
    # Dropout at 0.5: a recomputation with another mask would change every
    # gradient. Each schedule runs the same compiled graphs first as storing
    # everything does; its recomputations (the first run's graph again, a
    # selective variant's backward) give the first run's values to the bit.
    x = torch.randn(6, 32, generator=torch.Generator().manual_seed(2))
    want_y, want = run_forced(stages(0.5), store_all_of(ops), x, compiled=True)
    got_y, got = run_forced(stages(0.5), ops, x, compiled=True)
    assert torch.equal(want_y, got_y)
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), f"gradient {i}"


def test_compiled_schedule_equals_the_eager_schedule(eager_random: None) -> None:
    ops = ops_of("F_ck^1 F_none^2 F_ck^3 F_all^4[1] F_all^5 B^5 B^4 F_all^3[2] B^3 F_ck^1 F_all^2[1] B^2 F_all^1 B^1")
    x = torch.randn(6, 32, generator=torch.Generator().manual_seed(2))
    want_y, want = run_forced(stages(0.3), ops, x, compiled=False)
    got_y, got = run_forced(stages(0.3), ops, x, compiled=True)
    close(got_y, want_y, "output")
    for i, (a, b) in enumerate(zip(got, want)):
        close(a, b, f"gradient {i}")


# -- apply under torch.compile ------------------------------------------------------


@pytest.mark.parametrize("make", [llama, pytest.param(gpt2, marks=pytest.mark.slow)], ids=["llama", "gpt2"])
@pytest.mark.parametrize("how", ["torch.compile(model)", "compile=True"])
def test_gradients_equal_compiled_plain_training(make: Callable[[], nn.Module], how: str, eager_random: None) -> None:
    plain = make()
    compiled_plain = torch.compile(plain)
    memory: int | str = "35%"
    for _ in range(3):  # down to a budget the whole step fits, as a user would
        ours = copy.deepcopy(plain)
        plan = rt.apply(ours, memory=memory, compile=True if how == "compile=True" else None)
        run = torch.compile(ours) if how == "torch.compile(model)" else ours
        try:
            for _ in range(3):  # profiles; measures the parts outside the stack (compiled); planned with them
                step(run, ours)
            break
        except remat.InfeasibleError as e:
            assert e.min_budget is not None
            memory = int(e.min_budget)
    for seed in (1, 2, 3):
        want = step(compiled_plain, plain, seed)
        got = step(run, ours, seed)
        close(got, want, "loss")
        for (n, p), q in zip(plain.named_parameters(), ours.parameters()):
            assert p.grad is not None and q.grad is not None, n
            close(q.grad, p.grad, n)
    assert plan.compiled
    assert recomputes(plan), plan.explain()
    assert "compiled" in plan.explain() or "inside torch.compile's graph" in plan.explain()


@pytest.mark.slow
def test_eager_and_compiled_forwards_get_plans_of_their_own() -> None:
    model = gpt2()
    plan = rt.apply(model, memory="50%")
    step(model, model)
    assert not plan.compiled and plan.profiles == 1
    step(torch.compile(model), model)
    assert plan.compiled and plan.profiles == 2


def test_no_grad_under_torch_compile_runs_the_blocks_plainly() -> None:
    model = gpt2().eval()
    want = model(IDS).logits
    plan = rt.apply(model, memory="50%")
    with torch.no_grad():
        got = torch.compile(model)(IDS).logits
    close(got, want, "logits")
    assert plan.schedule is None  # nothing was planned: no training step ran


def measured_step(run: Callable[..., Any], model: nn.Module) -> int:
    """The step's peak by the allocator above what it starts with, parameter
    gradients left out from their allocation (remat's budget does not count
    them; a compiled backward holds those it returns until its graph ends)."""
    model.zero_grad(set_to_none=True)
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters(), from_allocation=True)
        run(IDS, labels=IDS).loss.backward()
        end = trace.mark()
    return trace.peak(0, end)


def compiled_store_all_peak(make: Callable[[], nn.Module]) -> int:
    """The peak of a step storing everything under torch.compile, by the
    allocator: what the budgets of the tests below are shares of."""
    model = make()
    rt.apply(model, memory=1 << 40)
    run = torch.compile(model)
    for _ in range(3):
        step(run, model)
    return measured_step(run, model)


@pytest.mark.parametrize("make", [llama, pytest.param(gpt2, marks=pytest.mark.slow)], ids=["llama", "gpt2"])
def test_the_budget_holds_under_torch_compile_by_the_allocators_count(make: Callable[[], nn.Module]) -> None:
    # Before compiled blocks, a budget planned eagerly ran 25% over it under
    # torch.compile, silently: the step's parts outside the stack were measured
    # by a dispatch mode that compiled code does not go through.
    from torch_models import steady_profiles

    whole = compiled_store_all_peak(make)
    for share in (0.6, 0.4):
        model = make()
        budget = int(share * whole)
        with steady_profiles():  # fixed times: the same plan on any machine, loaded or not
            plan = rt.apply(model, memory=budget)
            run = torch.compile(model)
            try:
                # Profile (and compile), measure the parts outside the stack,
                # plan; a plan inside the graph has its first step measured.
                for _ in range(6):
                    step(run, model)
            except remat.InfeasibleError as e:
                assert e.min_budget is not None and e.min_budget > budget
                continue
        peaks = [measured_step(run, model) for _ in range(2)]
        predicted, chain = plan.peak_memory, plan.chain_peak_memory
        assert predicted is not None and chain is not None and plan.compiled
        # The plan's first compiled step was measured, and its peak is what
        # the plan states from then on (explain() says so).
        assert plan._verified is not None and predicted == plan._verified[0], plan.explain()
        assert "its first compiled step, measured" in plan.explain()
        for peak in peaks:
            assert peak <= budget, (peak, budget, plan.explain())
            assert peak == predicted, (peak, plan.explain())
            if not plan._in_graph:
                # The executor's compiled blocks: as the chain predicts them.
                # Inside the graph the compiler keeps tensors the blocks share.
                assert abs(peak - chain) <= 0.02 * chain, (peak, chain, plan.explain())


@pytest.mark.slow
def test_an_in_graph_plan_measured_below_its_prediction_is_solved_higher_once() -> None:
    """An in-graph plan whose first step measures well below the chain's
    prediction (torchvision's ResNet-50: 104.09 MiB against 118.99) is solved
    that much higher, once; the plan solved higher is measured in turn, and
    where it is above the budget the plan measured within it comes back. Here
    the first plan's first measurement is told, before its step runs, to be
    half the budget below the prediction (what a step of this toy measures
    varies from run to run: a real one was once above the budget, which
    another path answers, tested below), so the plan solved higher holds more
    than its budget and the first comes back: every step after within the
    budget, as stated."""
    from torch_models import steady_profiles

    whole = compiled_store_all_peak(gpt2)
    model = gpt2()
    budget = int(0.7 * whole)
    with steady_profiles():
        plan = rt.apply(model, memory=budget)
        run = torch.compile(model)
        for _ in range(8):  # until an in-graph plan waits for its first step's measurement
            step(run, model)
            plan.explain()
            pending = plan._current()
            if plan._verifying and pending is not None and pending.in_graph is not None:
                break
        first = plan._current()
        assert first is not None and first.in_graph is not None and plan._verifying, plan.explain()
        assert not plan._in_graph_raised and plan._in_graph_tries == 0, plan.explain()
        predicted = first.stack_peak + first.total - first.budget
        plan._verified_in_graph(predicted - int(0.50 * first.total))
        assert plan._in_graph_raised and plan._in_graph_excess < 0
        raised = plan._current()
        assert raised is not None and raised is not first and plan._in_graph_fallback is first
        assert raised.schedule.operations_with_options != first.schedule.operations_with_options
        after_raised = None
        for _ in range(8):
            step(run, model)
            plan.explain()
            if after_raised is None and plan._in_graph_tries == 2:
                after_raised = plan._current()  # the plan solved higher ran and was measured
            if not (plan._measure is not None or plan._verifying or plan._verifying_executor):
                break
    # Half the budget higher, it held more than the budget: the first came back.
    assert after_raised is first, plan.explain()
    final = plan._current()
    assert final is not None and plan._in_graph_fallback is None
    peaks = [measured_step(run, model) for _ in range(2)]
    for peak in peaks:
        assert peak <= final.total and peak == plan.peak_memory, (peak, final.total, plan.explain())


@pytest.mark.slow
def test_a_step_that_adds_into_grad_is_measured_again() -> None:
    """A compiled plan's verified step gave the parameters their first
    gradients, left out from their allocation (each is one the step leaves
    in .grad). A step that adds into .grad (gradient accumulation) holds the
    new gradients as transients until its backward graph ends, a whole
    model's graph all of them: remat measures the first such step again and
    the budget holds for it, measured the same way."""
    from torch_models import steady_profiles

    whole = compiled_store_all_peak(gpt2)
    model = gpt2()
    budget = int(0.5 * whole)

    def pending() -> bool:
        return plan._measure is not None or plan._verifying or plan._verifying_executor

    with steady_profiles():
        plan = rt.apply(model, memory=budget)
        run = torch.compile(model)
        for _ in range(4):
            step(run, model)
        for _ in range(8):  # until the final plan's first step is measured
            if not pending():
                break
            step(run, model)
    plan.explain()  # reads the last measurement
    assert plan._verified is not None and plan._verified_fresh, (plan._verified, plan.explain())
    first = plan._verified

    def accumulating() -> int:
        with AllocatorTrace() as trace:
            trace.exclude_parameter_gradients(model.parameters(), from_allocation=True)
            torch.manual_seed(7)
            run(IDS, labels=IDS).loss.backward()
            end = trace.mark()
        return trace.peak(0, end)

    fresh_peak = measured_step(run, model)
    assert all(p.grad is not None for p in model.parameters())
    for _ in range(6):  # .grad kept: each step adds into it
        torch.manual_seed(7)
        run(IDS, labels=IDS).loss.backward()
        plan.explain()
        if not pending():
            break
    assert plan._verified is not first and not plan._verified_fresh, (first, plan._verified, plan.explain())
    assert plan._accumulating and "steps add into .grad" in plan.explain(), plan.explain()
    # The new gradients counted, as transients (at least what the same step
    # took when they became .grad), and within the budget.
    peak = accumulating()
    assert fresh_peak <= peak <= budget, (fresh_peak, peak, budget, plan.explain())
    assert plan.peak_memory is not None and peak <= plan.peak_memory, (peak, plan.explain())


# -- autograd's semantics with compiled blocks ---------------------------------------

import test_torch_semantics as semantics  # noqa: E402
from torch_models import steady_profiles  # noqa: E402

SEMANTICS = [
    getattr(semantics, name)
    for name in dir(semantics)
    if name.startswith("test_") and getattr(semantics, name).__code__.co_argcount == 0
]

#: Scenarios compiled blocks cannot run, each with the error that says so.
CANNOT = {
    # AOTAutograd's compiled backward is not differentiable again.
    "test_create_graph_gives_a_gradient_penalty_with_its_graph": "create_graph",
    # A compiled backward reuses its saved tensors' buffers (donated buffers)
    # unless torch._functorch.config.donated_buffer is off; torch says so.
    "test_retain_graph_and_a_second_backward": "donated_buffer=False",
    "test_two_losses_through_one_forward": "donated_buffer=False",
}

#: Scenarios that fail with compiled blocks, and why: known limits, written
#: down in docs/pytorch.md, reported as expected failures (not run).
DIFFERS = {
    # The block's own hooks fire once per run (outside its graph: see
    # test_compiled_blocks_fire_their_hooks_once_per_run); the test registers
    # a hook on a module inside the block after the block's graph compiled
    # (its budget search ran a step), and Dynamo does not see hooks added
    # after compiling (torch._dynamo.config.skip_nnmodule_hook_guards).
    "test_a_blocks_hooks_fire_once_per_run_of_it": "hooks added inside a block after its graph compiled",
}


class _Near(types.ModuleType):
    """``torch`` for the semantics tests, with ``equal`` meaning equal within the
    reordering of floating-point sums that fusion brings."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def equal(a: torch.Tensor, b: torch.Tensor) -> bool:
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not (a.is_floating_point() or a.is_complex()):
            return bool(torch.equal(a, b))
        return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5 * (float(b.abs().max()) if b.numel() else 0.0)))


@pytest.mark.parametrize("test", SEMANTICS, ids=[t.__name__.removeprefix("test_") for t in SEMANTICS])
def test_semantics_with_compiled_blocks(
    test: Callable[[], None], monkeypatch: pytest.MonkeyPatch, eager_random: None
) -> None:
    """test_torch_semantics.py again, every block run by its compiled graphs."""
    original = rt.apply
    applied: list[rt.AppliedPlan] = []

    def compiled_apply(*args: Any, **kwargs: Any) -> rt.AppliedPlan:
        kwargs.setdefault("compile", True)
        plan = original(*args, **kwargs)
        applied.append(plan)
        return plan

    def applied_where_it_fits(model: nn.Module, memory: int | str = "35%") -> rt.AppliedPlan:
        # semantics.applied, where compiled blocks fit: they keep other tensors
        # than eager ones (a compiled block's unrecorded first run holds its
        # saved set until it returns), so "35%" may be below what any schedule
        # needs; take the budget the error names, as a user would. Three
        # steps: the profile, the rest of the step measured, and the final
        # plan's own step measured by the allocator (each may name a larger one).
        for _ in range(4):
            plan = compiled_apply(model, memory=memory)
            try:
                for _ in range(3):
                    torch.manual_seed(99)
                    model(semantics.X).square().sum().backward()
                    model.zero_grad(set_to_none=True)
                plan._current()  # reads the last step's measurement
            except remat.InfeasibleError as e:
                plan.remove()
                assert e.min_budget is not None
                memory = int(e.min_budget)
                continue
            if plan.schedule is None:
                plan.remove()
                assert plan._infeasible is not None and plan._infeasible.min_budget is not None
                memory = int(plan._infeasible.min_budget)
                continue
            assert semantics.recomputes(plan), "the test needs recomputation"
            return plan
        pytest.fail(f"no budget found for {model}")

    monkeypatch.setattr(semantics.rt, "apply", compiled_apply)
    monkeypatch.setattr(semantics, "applied", applied_where_it_fits)
    monkeypatch.setattr(semantics, "torch", _Near())
    name = test.__name__
    if name in DIFFERS:
        pytest.xfail(DIFFERS[name])
    if name in CANNOT:
        with pytest.raises(RuntimeError, match=CANNOT[name]):
            test()
        return
    test()
    if "apply(" in inspect.getsource(test) or "applied(" in inspect.getsource(test):
        ran = [p for p in applied if p.schedule is not None]
        assert all(p.compiled for p in ran)


def test_compiled_blocks_fire_their_hooks_once_per_run(eager_random: None) -> None:
    """A compiled block's graph runs its forward alone: its forward hooks and
    pre-hooks run outside it, once for the model's call of the block and once
    for each recomputation (around the graph, eagerly), as for an eager block;
    a hook on a module inside it (registered before the block compiled) runs
    inside the graph as often. Before, the first run fired the block's hooks
    twice (the model's call, then the graph's)."""
    ours = semantics.make()
    counts = semantics.count_hooks(ours)
    with steady_profiles():
        plan = rt.apply(ours, memory="45%", compile=True)
        for _ in range(2):
            for k in counts:
                counts[k] = [0] * len(ours.blocks)
            semantics.run(ours, lambda m, x: m(x).square().sum().backward())
    assert plan.compiled and semantics.recomputes(plan)
    assert counts["pre"] == counts["post"] == counts["inner"], counts
    assert sum(counts["inner"]) > len(ours.blocks), counts  # the step ran some block again


# -- plans that run inside torch.compile's graph -------------------------------------


def counting_backend(calls: list[int]) -> Any:
    """Inductor, with each run of a compiled graph noted (its size)."""
    from torch._inductor.compile_fx import compile_fx

    def backend(gm: Any, example_inputs: Any) -> Any:
        compiled = compile_fx(gm, example_inputs)
        size = len(gm.graph.nodes)

        def run(*args: Any) -> Any:
            calls.append(size)
            return compiled(*args)

        return run

    return backend


def in_graph_plan(
    make: Callable[[], nn.Module], memory: int | str, backend: Any = "inductor", policies: Any = rt.DEFAULT_POLICIES
) -> tuple[nn.Module, Any, rt.AppliedPlan]:
    model = make()
    plan = rt.apply(model, memory=memory, policies=policies)
    run = torch.compile(model, backend=backend)
    # Profile (and compile), measure the parts outside the stack, then the
    # first in-graph step measures its own peak; from the fifth on it stays.
    for _ in range(5):
        step(run, model)
    return model, run, plan


@pytest.mark.slow
def test_a_plan_that_records_every_block_runs_inside_the_graph_without_a_break(eager_random: None) -> None:
    # Storing everything records every block (option 0) on steady times (a
    # compiled option may measure faster than option 0, and under load one
    # did: the step then ran that option's graph, 116 nodes against plain's
    # 348), and it runs as torch.compile's own graph: the graphs a step runs
    # are compiled plain's, node for node.
    ours: list[int] = []
    with steady_profiles():
        model, run, plan = in_graph_plan(llama, 1 << 40, counting_backend(ours))
    assert plan._in_graph and plan._verified is not None and plan._verified[0] <= plan._verified[1]
    assert "inside torch.compile's graph" in plan.explain()
    plain = llama()
    plain.config.use_cache = False  # as remat (and Hugging Face checkpointing) trains: no key/value cache
    theirs: list[int] = []
    compiled_plain = torch.compile(plain, backend=counting_backend(theirs))
    step(compiled_plain, plain)
    for seed in (1, 2):
        theirs.clear()
        ours.clear()
        want = step(compiled_plain, plain, seed)
        got = step(run, model, seed)
        assert ours == theirs  # the same graphs: no graph break of remat's
        close(got, want, "loss")
        for (n, p), q in zip(plain.named_parameters(), model.parameters()):
            assert p.grad is not None and q.grad is not None, n
            close(q.grad, p.grad, n)


def test_options_inside_the_graph_keep_the_budget_and_the_prediction() -> None:
    from torch_models import steady_profiles

    whole = compiled_store_all_peak(llama)
    with steady_profiles():  # fixed times: the same plan on any machine
        model, run, plan = in_graph_plan(llama, int(0.8 * whole))
    assert plan._in_graph, plan.explain()
    options = [o for o, _ in plan._in_graph.values()]
    assert any(options), plan.explain()  # some block is recorded under a policy, inside the graph
    predicted, budget = plan.chain_peak_memory, plan._verified[1] if plan._verified else None
    assert predicted is not None and budget is not None
    measured_first = plan._verified[0]
    assert plan.peak_memory == measured_first
    for _ in range(2):
        peak = measured_step(run, model)
        assert peak <= budget, (peak, budget)
        assert peak == measured_first  # what remat measured and acted on is what runs
        # One graph for the whole model: its partitioner keeps a few tensors
        # the blocks share (the attention mask, expanded, for the blocks'
        # recomputations), which the chain's per-block figures do not count:
        # measured +64 KiB (3%) on these 4 toy blocks (docs/pytorch.md); and
        # a block under SAVE_ATTENTION keeps a little less inside it than
        # compiled alone (-26 KiB, 1.2%, where every block was under it).
        assert abs(peak - predicted) <= 0.05 * predicted, (peak, predicted)


def test_an_in_graph_plan_over_its_budget_is_solved_again_below_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from torch_models import steady_profiles

    # Any in-graph plan below the budget by the excess is taken, however much
    # slower than the fastest plan: what is tested is the solve below the
    # budget, not whether the gain threshold lets its plan in (with the
    # excess the whole slack of the budget, it did not after other tests).
    monkeypatch.setattr(importlib.import_module("remat.torch.apply"), "_IN_GRAPH_GAIN", 10.0)
    with steady_profiles():  # fixed times: the same plans on any machine
        # Not SAVE_ATTENTION: with it, on a CI run, the solve below the first
        # plan's peak found no plan inside the graph (the executor took over),
        # so there was nothing to test; these two options are the test's.
        # 90% of what remat counts for storing everything, not of a compiled
        # step's measured peak: that measured 1.62, 1.92 and 2.83 MB in three
        # processes, and at 90% of 1.92 MB no plan inside the graph was lower
        # than the first (1 run in 5, on the code of 2026-11-28 too).
        model, run, plan = in_graph_plan(llama, "90%", policies=(rt.SAVE_MATMULS, rt.SAVE_INPUT))
        assert plan._in_graph and plan._last is not None, plan.explain()
        entry, numel, _ = plan._last
        before = entry.by_numel[numel]
        predicted = before.schedule.peak_memory + before.total - before.budget
        # As if the graph had held one byte more than the step's budget.
        plan._verified_in_graph(before.total + 1)
        assert plan._in_graph and plan._verifying and not plan._in_graph_refused, (
            plan._executor_excess,
            plan._in_graph_excess,
            plan.explain(),
        )
        assert plan._in_graph_excess == before.total + 1 - predicted
        again = entry.by_numel[numel]
        assert again.in_graph is not None and again.total == before.total
        # The new plan leaves room for what the graph held above the old one's prediction.
        assert again.schedule.peak_memory + plan._in_graph_excess <= before.budget
        assert again.schedule.makespan >= before.schedule.makespan
        for _ in range(2):  # measured inside the graph (read at the next step): below the budget, it stays
            step(run, model)
    assert plan._in_graph and not plan._verifying and plan._verified is not None
    assert plan._verified[0] <= plan._verified[1] == before.total
    assert "below the budget" in plan.explain()
    for _ in range(2):
        assert measured_step(run, model) <= before.total


@pytest.mark.slow
def test_in_graph_plans_that_measure_no_lower_are_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan solved lower inside the graph that measures no lower than the
    one before is the last in-graph plan: the executor runs the fastest plan
    at once (GPT-2 at half its compiled peak compiled three whole graphs,
    6.5 s each, measured 71.35, 72.93 and 71.37 MiB against a 67.2 MiB
    budget)."""
    import importlib

    from torch_models import steady_profiles

    apply = importlib.import_module("remat.torch.apply")
    monkeypatch.setattr(apply, "_IN_GRAPH_GAIN", 10.0)
    monkeypatch.setattr(apply, "_IN_GRAPH_TRIES", 10)  # only measuring no lower ends the tries
    whole = compiled_store_all_peak(llama)
    with steady_profiles():
        model, run, plan = in_graph_plan(llama, int(0.9 * whole))
        assert plan._in_graph and plan._last is not None, plan.explain()
        entry, numel, _ = plan._last
        total = entry.by_numel[numel].total
        tries = plan._in_graph_tries
        plan._verified_in_graph(total + 2)  # as if the graph held two bytes above the budget
        assert plan._in_graph and not plan._in_graph_refused, plan.explain()
        plan._verified_in_graph(total + 1)  # the plan solved lower measured lower: tried again
        assert plan._in_graph and not plan._in_graph_refused, plan.explain()
        plan._verified_in_graph(total + 1)  # and then no lower
        assert not plan._in_graph and plan._in_graph_refused
        assert plan._in_graph_tries == tries + 3
        current = plan._current()
        assert current is not None and current.in_graph is None
        step(run, model)
        step(run, model)
    assert "remat's executor runs the blocks" in plan.explain()


def test_an_in_graph_plan_over_its_budget_goes_back_to_the_executor() -> None:
    model, run, plan = in_graph_plan(llama, 1 << 40)
    assert plan._in_graph
    # As if the graph had held more than the step's budget on its first step.
    plan._verifying = True
    step(run, model)  # measured
    plan._verified_in_graph(1 << 50)
    assert not plan._in_graph and plan._in_graph_refused
    # Planned again at once, for the executor: the fastest plan, not the in-graph one.
    assert plan.schedule is not None and plan._current() is not None and plan._current().in_graph is None
    step(run, model)  # planned again, by remat's executor
    step(run, model)
    assert "remat's executor runs the blocks" in plan.explain()


@pytest.mark.slow
def test_blocks_whose_shapes_change_run_inside_the_graph_too(eager_random: None) -> None:
    # ResNet's stages change the activation's shape from block to block: each
    # block finds its own part of the plan by the elements of its input.
    torchvision = pytest.importorskip("torchvision")

    def resnet() -> nn.Module:
        torch.manual_seed(0)
        return torchvision.models.resnet18(num_classes=10).train()

    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    y = torch.randint(0, 10, (4,), generator=torch.Generator().manual_seed(4))

    def loss_of(run: Callable[..., Any], model: nn.Module, seed: int = 7) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        loss = nn.functional.cross_entropy(run(x), y)
        loss.backward()
        return loss.detach()

    model = resnet()
    plan = rt.apply(model, memory=1 << 40)
    run = torch.compile(model)
    for _ in range(5):
        loss_of(run, model)
    assert len(plan._in_graph) == len(plan.modules), plan.explain()
    plain = resnet()
    compiled_plain = torch.compile(plain)
    close(loss_of(run, model), loss_of(compiled_plain, plain), "loss")
    for (n, p), q in zip(plain.named_parameters(), model.parameters()):
        assert p.grad is not None and q.grad is not None, n
        # Twenty BatchNorm backwards amplify fusion's reordered sums: the
        # first convolution's gradient differs by up to 3e-5 of its largest.
        close(q.grad, p.grad, n, rtol=1e-4)


class ConvBlock(nn.Module):
    """A residual block of two convolutions (torchvision's BasicBlock, 64
    channels): inductor lays its input out channels-last."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64)
        self.conv2, self.bn2 = nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


@pytest.mark.slow
def test_one_graphs_blocks_are_predicted_without_the_input_copy_a_block_compiled_alone_saves() -> None:
    # Compiled alone, a block of convolutions saves a channels-last copy of its
    # input beside the input; in one model's graph every activation is laid
    # out once and no block saves such a copy. ResNet-50's in-graph plans were
    # predicted 15 MiB (12%) above what they measured (docs/pytorch.md).
    from remat.torch.apply import _in_graph_chain
    from remat.torch.profile import profile_calls

    torch.manual_seed(0)
    blocks = [ConvBlock().train() for _ in range(3)]
    x = torch.randn(8, 64, 16, 16, generator=torch.Generator().manual_seed(1))
    kinds = CompiledBlocks({}, kind=lambda m: 0)
    chain, found = profile_calls(
        blocks,
        Call((x,), {}, 0),
        repeat=1,
        policies=[rt.SAVE_INPUT],
        compiled=lambda i, p: functools.partial(kinds.variant(blocks[i], p), blocks[i]),
    )
    policy = resolve_policies([rt.SAVE_INPUT])[0]

    def whole(n: int) -> int:
        """Bytes a graph of the first n blocks, each under SAVE_INPUT, keeps
        for its backward, its output included, by the allocator."""

        def run(h: torch.Tensor) -> torch.Tensor:
            for b in blocks[:n]:
                h = torch.utils.checkpoint.checkpoint(b, h, use_reentrant=False)
            return h

        graph = torch.compile(run)
        h = x.detach().requires_grad_()
        graph(h)  # compiles
        with AllocatorTrace() as trace:
            y = graph(h)
            end = trace.mark()
        del y
        return trace.alive(end)

    assert policy.keeps_nothing
    inside = _in_graph_chain(chain, found.input_copies).to_dict()["stages"]
    alone = chain.to_dict()["stages"]
    kept = [whole(n) for n in (1, 2, 3)]
    # Block 2's and 3's figures under SAVE_INPUT (option 1) as one graph keeps them,
    # to within 1% (a channels-last copy of a weight the graph keeps once).
    for l in (2, 3):
        in_graph = kept[l - 1] - kept[l - 2]
        assert abs(inside[l - 1]["options"][0]["saved_size"] - in_graph) <= 0.01 * in_graph, (l, inside, kept)
    # What the correction is: the profile of a block alone sees the copy (on
    # this inductor: where it lays no copy out, both figures are the same).
    copy = found.input_copies[1][1] * x.numel() * x.element_size()
    assert alone[1]["options"][0]["saved_size"] - inside[1]["options"][0]["saved_size"] == round(copy)


def test_an_option_faster_than_keeping_everything_is_the_plan_with_memory_to_spare(
    monkeypatch: pytest.MonkeyPatch, eager_random: None
) -> None:
    # Compiled, keeping less can be faster (inductor fuses the recomputation
    # into the backward's kernels): with each block's options 0.5 ms faster
    # than option 0 (fixed times, as a compiled GPT-2 block measured), the
    # plan with all the memory it wants records every block under an option,
    # inside the graph, and trains as compiled plain.
    import torch_models

    steady = torch_models.steady

    def faster(chain: remat.Chain) -> remat.Chain:
        d = steady(chain).to_dict()
        for s in d["stages"]:
            for o in s.get("options") or []:
                o["recompute_time"] = -0.5
        return remat.Chain.from_dict(d)

    monkeypatch.setattr(torch_models, "steady", faster)
    with torch_models.steady_profiles():
        model, run, plan = in_graph_plan(llama, 1 << 40)
    assert plan._in_graph, plan.explain()
    assert all(o > 0 for o, _ in plan._in_graph.values()), plan.explain()
    assert "for -0.500 ms" in plan.explain()
    s, c = plan.schedule, plan._current()
    assert s is not None and c is not None
    d = c.chain.to_dict()
    store_all = sum(p["forward_time"] + p["backward_time"] for p in [*d["stages"], d["loss"]])
    assert s.makespan == pytest.approx(store_all - 0.5 * len(plan.modules))  # each block 0.5 ms less
    plain = llama()
    plain.config.use_cache = False
    compiled_plain = torch.compile(plain)
    step(compiled_plain, plain)
    want = step(compiled_plain, plain, 3)
    got = step(run, model, 3)
    close(got, want, "loss")
    for (n, p), q in zip(plain.named_parameters(), model.parameters()):
        assert p.grad is not None and q.grad is not None, n
        close(q.grad, p.grad, n)


def test_a_program_that_ends_after_a_measured_step_exits_cleanly(tmp_path: Any) -> None:
    # A compiled plan's second step is measured by the allocator and read at
    # the plan's next use; a program that ends first left torch.profiler
    # running, and C++'s teardown of it after Python's crashed the process
    # (a segmentation fault on 2 of 4 runs). remat stops it at exit.
    script = tmp_path / "two_steps.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import atexit, sys
            import torch

            def at_exit():  # registered before remat's own: runs after it
                print("profiler running at exit:", torch.autograd.profiler._is_profiler_enabled, flush=True)

            atexit.register(at_exit)
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            torch.set_num_threads(1)
            import remat.torch as rt
            from test_torch_compiled import llama, step

            model = llama()
            plan = rt.apply(model, memory="50%")
            run = torch.compile(model)
            for _ in range(2):
                step(run, model)
            assert any(t.open for t in rt.memory._OPEN), "the second step's measurement is read at the third"
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), *sys.path) if p))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    assert "profiler running at exit: False" in out.stdout, out.stdout


def test_a_compiled_plan_the_executor_runs_is_measured_and_solved_again_below_its_budget() -> None:
    # A compiled plan the executor runs is predicted from each block's
    # compiled variants measured alone; its first step is measured by the
    # allocator, and one above its budget (torchvision's ResNet-50 at 40%:
    # 61.08 MiB against 59.02) is solved again below it by the difference.
    from torch_models import steady_profiles

    model = llama()
    with steady_profiles():  # fixed times: the same plans on any machine
        plan = rt.apply(model, memory="60%", compile=True)
        # Profiled, the rest of the step measured, then the final plan's first
        # step measured, each read at the plan's next use.
        for _ in range(4):
            step(model, model)
            if plan._current() is not None and plan._verified is not None:
                break
        assert plan._verified is not None, plan.explain()
        assert not plan._verifying_executor and plan._executor_excess == 0
        measured, total = plan._verified
        assert measured <= total, plan.explain()
        assert plan._last is not None
        entry, numel, _ = plan._last
        before = entry.by_numel[numel]
        assert before.in_graph is None and entry.compiled
        # As if the step had taken 4 KiB above the budget.
        plan._verified_executor(before.total + 4096)
        assert plan._executor_excess == 4096 and plan._verifying_executor
        again = entry.by_numel[numel]
        assert again.total == before.total and again.budget == before.budget - 4096
        assert again.schedule.peak_memory <= again.budget
        for _ in range(2):  # measured again: below the budget, it stays
            step(model, model)
        assert plan._current() is not None
    assert not plan._verifying_executor and plan._verified is not None
    assert plan._verified[0] <= plan._verified[1] == before.total
    assert "below the budget: earlier plans' compiled steps took that much above it" in plan.explain()
    # The last plan allowed still above its budget: no further plan, a warning that says what to do.
    import importlib

    plan._executor_tries = importlib.import_module("remat.torch.apply")._EXECUTOR_TRIES - 1
    excess = plan._executor_excess
    with pytest.warns(RuntimeWarning, match=r"above its budget .* lower memory= by the difference"):
        plan._verified_executor(before.total + 4096)
    assert plan._executor_excess == excess and not plan._verifying_executor


@pytest.mark.slow
def test_a_compiled_step_of_another_shape_with_as_many_tokens_is_planned_for_its_shape(eager_random: None) -> None:
    """Under torch.compile(model), an in-graph plan made at 2 x 48 tokens was
    looked up by (block, elements) and ran at 1 x 96 (round 5: +72% at 1 x 256
    after 4 x 64). The new shape's step starts as any step does: remat
    profiles it and its executor runs a plan made for it, with the gradients
    of compiled plain training."""
    import importlib

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(importlib.import_module("remat.torch.apply"), "_IN_GRAPH_GAIN", 10.0)
    try:
        with steady_profiles():
            model, run, plan = in_graph_plan(llama, "90%", policies=(rt.SAVE_MATMULS, rt.SAVE_INPUT))
            assert plan._in_graph and plan.profiles == 1, plan.explain()
            other = IDS.reshape(1, -1)  # as many tokens, another length
            plain = llama()
            plain.config.use_cache = False
            compiled_plain = torch.compile(plain)
            for seed in (1, 2):
                for m, r in ((plain, compiled_plain), (model, run)):
                    m.zero_grad(set_to_none=True)
                    torch.manual_seed(seed)
                    r(other, labels=other).loss.backward()
        assert plan.profiles == 2, plan.explain()  # profiled at its own shape, not run on the other's plan
        for (name, p), q in zip(model.named_parameters(), plain.parameters()):
            assert p.grad is not None and q.grad is not None, name
            close(p.grad, q.grad, name)
    finally:
        monkeypatch.undo()
