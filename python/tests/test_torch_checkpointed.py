"""Checkpointed must be indistinguishable from the plain module: same loss, same
parameter and input gradients, same BatchNorm statistics, same RNG draws, for
every solver and baseline at budgets from its smallest feasible one up."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn
from torch_models import Case, cnn, mlp, steady, transformer

import remat
import remat.torch as rt

ALGORITHMS = [
    "auto",
    "persistent",
    "floating",
    "exhaustive",
    "sequential",
    "revolve",
    "chen-sqrt",
    "chen-greedy",
    "store-all",
]
CASES = {"mlp": mlp(), "cnn": cnn(), "transformer": transformer()}
_chains: dict[str, remat.Chain] = {}


def chain_of(case: Case) -> remat.Chain:
    """One measured chain per model (profiling is the slow part), with steady
    times: the plans solved from it, and so which stages they rerun, do not
    change with the machine's load."""
    if case.name not in _chains:
        _chains[case.name] = steady(rt.profile(case.make(), case.x, repeat=1))
    return _chains[case.name]


def min_budget(chain: remat.Chain, algorithm: str) -> int:
    """The smallest budget `algorithm` meets, from the error a budget of 1 byte gives."""
    with pytest.raises(remat.InfeasibleError) as info:
        remat.solve(chain, 1, algorithm=algorithm)
    return int(info.value.min_budget)


def budgets(chain: remat.Chain, algorithm: str) -> list[int]:
    """Three budgets: the algorithm's smallest, halfway to storing everything, and
    storing everything (or 1.25x and 1.5x the smallest when that is store-all's)."""
    low = min_budget(chain, algorithm)
    high = max(min_budget(chain, "store-all"), low)
    if high == low:
        return [low, low * 5 // 4, low * 3 // 2]
    return [low, (low + high) // 2, high]


def step(model: nn.Module, case: Case, seed: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """One training step's loss and input gradient, from a fixed RNG state."""
    x = case.x.clone().requires_grad_(True)
    torch.manual_seed(seed)
    loss = case.criterion(model(x), case.target)
    loss.backward()
    assert x.grad is not None
    return loss.detach(), x.grad


def forwards(schedule: remat.Schedule, stages: int) -> int:
    """Number of forward operations on the network's stages (the loss excluded)."""
    return sum(1 for op, l in schedule.operations if op != "B" and l <= stages)


def assert_same_state(plain: nn.Module, ours: nn.Module) -> None:
    for (name, p), q in zip(plain.named_parameters(), ours.parameters()):
        assert p.grad is not None and q.grad is not None, name
        assert torch.equal(p.grad, q.grad), f"{name}: largest difference {(p.grad - q.grad).abs().max()}"
    for (name, b), c in zip(plain.named_buffers(), ours.buffers()):
        assert torch.equal(b, c), f"buffer {name} differs"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case_name", list(CASES))
def test_gradients_equal_the_plain_module(case_name: str, algorithm: str) -> None:
    case = CASES[case_name]
    chain = chain_of(case)
    base = case.make()
    plain = copy.deepcopy(base)
    loss_p, dx_p = step(plain, case)
    after_plain = torch.rand(3)
    for budget in budgets(chain, algorithm):
        module = copy.deepcopy(base)
        ours = rt.Checkpointed(module, budget, algorithm=algorithm, chain=chain)
        loss, dx = step(ours, case)
        # The global RNG ends where the plain step left it (recomputations fork it).
        assert torch.equal(torch.rand(3), after_plain)
        assert ours.schedule is not None
        assert ours.schedule.peak_memory <= budget
        assert torch.equal(loss, loss_p), (budget, loss, loss_p)
        assert torch.equal(dx, dx_p)
        assert_same_state(plain, module)


@pytest.mark.parametrize("case_name", list(CASES))
def test_small_budgets_really_recompute(case_name: str) -> None:
    case = CASES[case_name]
    chain = chain_of(case)
    L = len(chain)
    for algorithm in ["auto", "persistent", "sequential", "revolve"]:
        ours = rt.Checkpointed(case.make(), min_budget(chain, algorithm), algorithm=algorithm, chain=chain)
        step(ours, case)
        assert ours.schedule is not None
        assert forwards(ours.schedule, L) > L, (algorithm, str(ours.schedule))
    store = rt.Checkpointed(case.make(), 1 << 40, algorithm="store-all", chain=chain)
    step(store, case)
    assert store.schedule is not None and forwards(store.schedule, L) == L


class Noise(nn.Module):
    """A stage that draws from the global RNG itself (not through dropout)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x) * torch.randn(1)


def test_rng_using_stage_is_replayed_exactly() -> None:
    def make() -> nn.Sequential:
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Linear(8, 16), Noise(), nn.Tanh(), Noise(), nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 4)
        )

    x = torch.randn(5, 8, requires_grad=True)
    plain = make()
    torch.manual_seed(3)
    out_p = plain(x)
    out_p.square().sum().backward()
    next_p = torch.rand(2)
    chain = rt.profile(make(), x, repeat=1)
    ours_module = make()
    ours = rt.Checkpointed(ours_module, min_budget(chain, "persistent"), algorithm="persistent", chain=chain)
    x2 = x.detach().clone().requires_grad_(True)
    torch.manual_seed(3)
    out = ours(x2)
    out.square().sum().backward()
    assert ours.schedule is not None and forwards(ours.schedule, 7) > 7
    assert torch.equal(out, out_p)
    assert torch.equal(torch.rand(2), next_p)
    assert x.grad is not None and torch.equal(x2.grad, x.grad)
    assert_same_state(plain, ours_module)


def test_rng_state_is_saved_only_for_stages_that_draw_and_run_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Saving the RNG state costs Python time per stage (about 50 us on a GPU);
    # a stage the schedule runs once has nothing to replay.
    from remat.torch.executor import Executor, Step

    steps: list[Step] = []
    original = Executor.begin

    def spy(self: Executor) -> Step:
        steps.append(original(self))
        return steps[-1]

    monkeypatch.setattr(Executor, "begin", spy)
    case = CASES["mlp"]
    chain = chain_of(case)
    ours = rt.Checkpointed(case.make(), min_budget(chain, "persistent"), algorithm="persistent", chain=chain)
    step(ours, case)
    assert ours.schedule is not None
    runs: dict[int, int] = {}
    for kind, l in ours.schedule.operations:
        if kind != "B" and l <= len(chain):
            runs[l] = runs.get(l, 0) + 1
    rerun = sorted(l for l, n in runs.items() if n > 1)
    assert rerun and len(rerun) < len(chain)  # the test needs both kinds
    assert len(steps) == 1
    # Only the dropout stage draws random numbers: of the stages run again,
    # only it has a state to replay.
    draws = [l for l, m in enumerate(ours.module, 1) if isinstance(m, nn.Dropout)]
    assert draws and set(draws) <= set(rerun)
    assert [l for l in range(1, len(chain) + 1) if steps[0].rng[l] is not None] == draws


class Square(torch.autograd.Function):
    """x * x, with a backward that reads ``ctx.saved_tensors`` twice: autograd
    allows it (each read unpacks the saved tensor again)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * ctx.saved_tensors[0] + g * ctx.saved_tensors[0]


class SquareMod(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = Square.apply(x)
        return out


def square_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.Tanh(), SquareMod(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))


@pytest.mark.parametrize("algorithm", ["auto", "revolve"])
def test_a_custom_function_that_reads_its_saved_tensors_twice(algorithm: str) -> None:
    # Issue 36: "the schedule did not recompute tensor 0 of stage 3 (SquareMod)
    # before its backward (a bug in remat)": the executor handed a recomputed
    # tensor out once, and the second read found nothing.
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    plain, module = square_net(), square_net()
    chain = steady(rt.profile(module, x, repeat=1))
    ours = rt.Checkpointed(module, min_budget(chain, algorithm), algorithm=algorithm, chain=chain)
    for m in (plain, ours):  # a retained graph's second backward recomputes, and reads twice, again
        loss = m(x).square().sum()
        loss.backward(retain_graph=True)
        loss.backward()
    assert ours.schedule is not None
    assert sum(1 for k, l in ours.schedule.operations if k != "B" and l == 3) > 1  # SquareMod is recomputed
    assert_same_state(plain, module)


def test_a_custom_function_that_reads_its_saved_tensors_twice_under_apply() -> None:
    # The same through apply(), whose profiling reruns each block under its
    # options (the rerun at the start of its backward fills what it saved).
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.inp = nn.Linear(8, 16)
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.Tanh(), SquareMod()) for _ in range(4))
            self.head = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.inp(x)
            for b in self.blocks:
                h = b(h)
            return self.head(h)

    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    plain, ours = Net(), Net()
    plan = rt.apply(ours, memory="70%", blocks="blocks")
    for m in (plain, ours, ours):  # ours: the measuring first step, then the plan
        m.zero_grad(set_to_none=True)
        m(x).square().sum().backward()
    assert plan.schedule is not None and plan.schedule.peak_memory < remat.min_memory(plan.chain, "store-all")
    assert_same_state(plain, ours)


def test_a_given_chain_runs_each_stage_once_in_the_first_forward() -> None:
    # Issue 36: with a profiled chain given, the first forward ran each stage
    # three times (two probing runs, then its own): the profile already says
    # which stages write into their input, and which draw random numbers is
    # found on the stage's own first run.
    case = CASES["mlp"]
    chain = chain_of(case)
    plain, module = case.make(), case.make()
    calls: Counter[int] = Counter()
    for l, stage in enumerate(module, 1):
        stage.register_forward_pre_hook(lambda m, a, l=l: calls.update([l]))
    ours = rt.Checkpointed(module, min_budget(chain, "persistent"), algorithm="persistent", chain=chain)
    x = case.x.clone()
    torch.manual_seed(11)
    out = ours(x)
    assert calls == Counter(range(1, len(module) + 1))
    case.criterion(out, case.target).backward()
    assert ours.schedule is not None
    assert calls == Counter(l for k, l in ours.schedule.operations if k != "B" and l <= len(module))
    step(plain, case)
    assert_same_state(plain, module)
    # A chain that does not say which stages write into their input (written
    # by hand, or by an older remat): one probing run each, then its own.
    d = chain.to_dict()
    bare = remat.Chain.from_dict(dict(d, metadata={k: v for k, v in d["metadata"].items() if k != "writes_input"}))
    calls.clear()
    rt.Checkpointed(module, min_budget(chain, "persistent"), algorithm="persistent", chain=bare)(x)
    assert calls == Counter(2 * list(range(1, len(module) + 1)))


def test_batchnorm_statistics_move_once_per_step() -> None:
    case = CASES["cnn"]
    chain = chain_of(case)
    plain, module = case.make(), case.make()
    ours = rt.Checkpointed(module, min_budget(chain, "revolve"), algorithm="revolve", chain=chain)
    for _ in range(3):
        step(plain, case)
        step(ours, case)
    assert ours.schedule is not None and forwards(ours.schedule, len(chain)) > len(chain)
    bns = [m for m in module.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and all(int(m.num_batches_tracked) == 3 for m in bns)
    assert_same_state(plain, module)


def test_no_grad_and_eval_are_honoured() -> None:
    case = CASES["cnn"]
    module = case.make()
    ours = rt.Checkpointed(module, 10**9)
    plain = case.make()
    with torch.no_grad():
        torch.manual_seed(0)
        out = ours(case.x)
        torch.manual_seed(0)
        assert torch.equal(out, plain(case.x))
    assert ours.schedule is None and not ours.plans  # nothing to schedule without a backward
    ours.eval()
    plain.eval()
    loss_p, dx_p = step(plain, case)
    loss, dx = step(ours, case)
    assert torch.equal(loss, loss_p) and torch.equal(dx, dx_p)
    assert_same_state(plain, module)
    assert [k[3] for k in ours.plans] == [False]  # planned in eval mode


def test_plans_are_cached_per_input_shape() -> None:
    case = CASES["mlp"]
    ours = rt.Checkpointed(case.make(), 10**9, algorithm="persistent")
    ours(case.x).sum().backward()
    first = ours.schedule
    ours(case.x).sum().backward()
    assert ours.schedule is first and len(ours.plans) == 1
    ours(case.x[:4]).sum().backward()
    assert len(ours.plans) == 2
    assert ours.chain is not None and ours.chain.to_dict()["metadata"]["batch"] == 4


def test_autocast_is_replayed_in_recomputation() -> None:
    case = CASES["mlp"]
    chain = chain_of(case)
    plain, module = case.make(), case.make()
    ours = rt.Checkpointed(module, min_budget(chain, "persistent"), algorithm="persistent", chain=chain)
    for model in (plain, ours):
        torch.manual_seed(1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(case.x)
            assert out.dtype == torch.bfloat16
            loss = case.criterion(out.float(), case.target)
        loss.backward()
    assert ours.schedule is not None and forwards(ours.schedule, len(chain)) > len(chain)
    assert_same_state(plain, module)


def test_explain_shows_budget_schedule_and_prediction() -> None:
    case = CASES["mlp"]
    ours = rt.Checkpointed(case.make(), "1MiB", sample_input=case.x)
    text = ours.explain()
    assert "memory=1048576 bytes (1.00 MiB) as given" in text
    assert str(ours.schedule) in text
    assert "predicted peak" in text


def test_memory_auto_on_cpu_is_a_clear_error() -> None:
    case = CASES["mlp"]
    ours = rt.Checkpointed(case.make(), "auto")
    with pytest.raises(ValueError, match="memory='auto' needs a CUDA device"):
        ours(case.x).sum().backward()


def test_not_a_sequence_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"nn\.Sequential"):
        rt.Checkpointed(nn.Linear(3, 3), 10**6)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stage 2 is a str"):
        rt.Checkpointed([nn.Linear(3, 3), "relu"], 10**6)  # type: ignore[list-item]


def test_budget_below_the_minimum_names_the_smallest_budget() -> None:
    case = CASES["mlp"]
    chain = chain_of(case)
    smallest = min_budget(chain, "auto")
    with pytest.raises(remat.InfeasibleError) as info:
        rt.Checkpointed(case.make(), smallest - 1, chain=chain, sample_input=case.x)
    assert info.value.min_budget == smallest
    assert str(smallest) in str(info.value)
    ours = rt.Checkpointed(case.make(), smallest, chain=chain, sample_input=case.x)
    assert ours.schedule is not None and ours.schedule.peak_memory <= smallest


def test_bad_memory_values_are_value_errors() -> None:
    with pytest.raises(ValueError, match="`lots` is not a size"):
        rt.Checkpointed(nn.Sequential(nn.Linear(2, 2)), "lots")
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="memory"):
            rt.Checkpointed(nn.Sequential(nn.Linear(2, 2)), bad)  # type: ignore[arg-type]


def test_exact_memory_reaches_the_solver() -> None:
    # exact_memory=0: the DP's answer rounded to slots, as remat.solve gives it.
    case = CASES["mlp"]
    chain = chain_of(case)
    budget = min_budget(chain, "persistent") * 3 // 2
    ours = rt.Checkpointed(case.make(), budget, algorithm="persistent", exact_memory=0, chain=chain)
    ours(case.x).sum().backward()
    assert ours.schedule is not None
    want = remat.solve(chain, budget, "persistent", exact_memory=0)
    assert ours.schedule.detail == want.detail and "exact answers are turned off" in (want.detail or "")
    exact = rt.Checkpointed(case.make(), budget, algorithm="persistent", chain=chain)
    exact(case.x).sum().backward()
    assert exact.schedule is not None and exact.schedule.slot_size == 1
    with pytest.raises(ValueError, match="`much` is not a size"):
        rt.Checkpointed(case.make(), budget, exact_memory="much")


def test_chain_with_another_number_of_stages_is_refused() -> None:
    chain = chain_of(CASES["mlp"])
    with pytest.raises(ValueError, match=f"the chain has {len(chain)} stages and the module 2"):
        rt.Checkpointed(nn.Sequential(nn.Linear(32, 4), nn.ReLU()), 10**6, chain=chain)


def test_stages_without_gradient_and_a_list_of_modules() -> None:
    # The first stages have no parameters and the input needs no gradient: their
    # outputs do not require one, so their backwards have nothing to do. The
    # second Linear is frozen. A plain list of modules works like nn.Sequential.
    def make() -> list[nn.Module]:
        torch.manual_seed(0)
        frozen = nn.Linear(16, 16).requires_grad_(False)
        return [nn.ReLU(), nn.Tanh(), nn.Linear(8, 16), frozen, nn.ReLU(), nn.Linear(16, 4)]

    x = torch.randn(6, 8)
    plain = nn.Sequential(*make())
    plain(x).square().sum().backward()
    stages = make()
    chain = rt.profile(stages, x, repeat=1)
    ours = rt.Checkpointed(stages, min_budget(chain, "persistent"), algorithm="persistent", chain=chain)
    ours(x).square().sum().backward()
    assert ours.schedule is not None and forwards(ours.schedule, 6) > 6
    assert stages[3].weight.grad is None
    assert_same_state_partial(plain, ours.module)


def assert_same_state_partial(plain: nn.Module, ours: nn.Module) -> None:
    """Like assert_same_state, for models with frozen parameters."""
    for (name, p), q in zip(plain.named_parameters(), ours.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None and q.grad is not None:
            assert torch.equal(p.grad, q.grad), name


def fake_cuda(
    monkeypatch: pytest.MonkeyPatch,
    *,
    free: int,
    total: int,
    allocated: int = 0,
    reserved: int = 0,
    fraction: float = 1.0,
) -> None:
    """Replaces the CUDA memory queries auto_budget makes (there is no GPU here)."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved)
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device=None: fraction, raising=False)


def test_memory_auto_counts_the_allocators_cached_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a first step PyTorch's caching allocator keeps freed blocks: the driver
    # reports them as used (not in mem_get_info's free), but the allocator reuses
    # them first, so they are available to the activations.
    model = nn.Sequential(nn.Linear(100, 100))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    ours = rt.Checkpointed(model, "auto", optimizer_state_bytes=0)
    fake_cuda(monkeypatch, free=1_000_000, total=8_000_000, allocated=500_000, reserved=3_500_000)
    budget, note = ours.auto_budget(torch.device("cuda", 0))
    available = 1_000_000 + 3_000_000
    assert budget == available - available // 20
    assert "cached by the allocator" in note


def test_memory_auto_respects_the_per_process_fraction(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.cuda.set_per_process_memory_fraction(0.25) on an 8 MB device: the
    # allocator refuses past 2 MB reserved, whatever the device has free.
    model = nn.Sequential(nn.Linear(100, 100))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    ours = rt.Checkpointed(model, "auto", optimizer_state_bytes=0)
    fake_cuda(monkeypatch, free=6_000_000, total=8_000_000, allocated=400_000, reserved=400_000, fraction=0.25)
    budget, note = ours.auto_budget(torch.device("cuda", 0))
    available = 2_000_000 - 400_000
    assert budget == available - available // 20
    assert "per-process cap 0.25" in note
    # A cap above what is free leaves the free memory the limit.
    fake_cuda(monkeypatch, free=1_000_000, total=8_000_000, allocated=400_000, reserved=400_000, fraction=0.9)
    assert ours.auto_budget(torch.device("cuda", 0))[0] == 1_000_000 - 1_000_000 // 20


def test_memory_auto_gives_back_the_input_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # The batch is allocated before the forward, so it is not free, yet the
    # budget counts it (the model's a^0): without it the budget is short by it.
    model = nn.Sequential(nn.Linear(100, 100))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    ours = rt.Checkpointed(model, "auto", optimizer_state_bytes=0)
    fake_cuda(monkeypatch, free=1_000_000, total=8_000_000)
    without = ours.auto_budget(torch.device("cuda", 0))[0]
    budget, note = ours.auto_budget(torch.device("cuda", 0), input_bytes=30_000)
    assert budget == without + 30_000
    assert "the input batch" in note


def test_memory_auto_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU here: the free-memory query is replaced, the arithmetic is real.
    model = nn.Sequential(nn.Linear(100, 100), nn.Linear(100, 10))  # 11110 parameters, 44440 bytes
    model[1].weight.grad = torch.zeros_like(model[1].weight)  # 4000 bytes already allocated
    ours = rt.Checkpointed(model, "auto")
    fake_cuda(monkeypatch, free=2_000_000, total=8_000_000)
    budget, note = ours.auto_budget(torch.device("cuda", 0))
    grads_to_come = 44440 - 4000
    adam = 2 * 44440
    assert budget == 2_000_000 - grads_to_come - adam - 2_000_000 // 20
    assert "Adam: 2 x parameters" in note and "5% fragmentation margin" in note
    ours = rt.Checkpointed(model, "auto", optimizer_state_bytes=0)
    assert ours.auto_budget(torch.device("cuda", 0))[0] == 2_000_000 - grads_to_come - 100_000
