"""Issue 27's hostile Python calls: each is a ValueError (or TypeError)
naming the argument and the value, never an OverflowError, an abort of the
interpreter or a hang."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import remat

ROOT = Path(__file__).resolve().parents[2]
FC6 = ROOT / "chains" / "rotor-fc6.json"
STAGE = {"forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 100}


def chain_of(stages: int) -> remat.Chain:
    return remat.Chain.from_json(json.dumps({"name": "t", "input_size": 1000, "stages": [STAGE] * stages}))


def test_min_memory_on_a_100000_stage_chain_is_a_value_error_not_an_abort() -> None:
    # Run in a child: an abort (a failed 80 GB allocation) would take pytest down.
    code = (
        "import json, remat\n"
        f"stage = {STAGE!r}\n"
        "chain = remat.Chain.from_json(json.dumps({'name': 't', 'input_size': 1000, 'stages': [stage] * 100000}))\n"
        "try:\n"
        "    remat.min_memory(chain)\n"
        "except ValueError as e:\n"
        "    print('ValueError:', e)\n"
    )
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ValueError:" in out.stdout and "100000-stage chain" in out.stdout, out.stdout
    assert time.monotonic() - start < 60


def test_min_memory_of_a_modest_chain_still_answers() -> None:
    chain = chain_of(20)
    assert remat.min_memory(chain) == remat.min_memory(chain, "exhaustive" if len(chain) <= 12 else "floating")


@pytest.mark.parametrize("slots", [-1, 0, 2**64, -(2**70)])
def test_out_of_range_slots_are_value_errors_naming_slots(slots: int) -> None:
    fc6 = remat.Chain.load(FC6)
    calls = [
        lambda: remat.solve(fc6, "90MiB", "persistent", slots=slots),
        lambda: remat.min_memory(fc6, "persistent", slots=slots),
        lambda: remat.compare(fc6, "90MiB", slots=slots),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=f"slots must be at least 1 and at most .*, got {slots}$"):
            call()


@pytest.mark.parametrize("slots", [1.5, "500", True, None])
def test_slots_of_another_type_are_type_errors(slots: object) -> None:
    fc6 = remat.Chain.load(FC6)
    if slots is None:
        # None is the default.
        assert remat.solve(fc6, "90MiB", "persistent", slots=slots).slot_size is not None  # type: ignore[arg-type]
        return
    with pytest.raises(TypeError, match="slots must be a whole number"):
        remat.solve(fc6, "90MiB", "persistent", slots=slots)  # type: ignore[arg-type]


@pytest.mark.parametrize("segments", [-1, 2**64])
def test_out_of_range_segments_are_value_errors_naming_segments(segments: int) -> None:
    fc6 = remat.Chain.load(FC6)
    with pytest.raises(ValueError, match=f"segments must be at least 0 and at most .*, got {segments}$"):
        remat.solve(fc6, "90MiB", "sequential", segments=segments)


@pytest.mark.parametrize("value", [-1, 2**64])
def test_format_size_out_of_range_is_a_value_error_naming_bytes(value: int) -> None:
    with pytest.raises(ValueError, match=f"bytes must be at least 0 and at most 18446744073709551615, got {value}$"):
        remat.format_size(value)
    assert remat.format_size(2**64 - 1).endswith("B")


def test_an_exact_memory_above_the_machine_is_a_value_error() -> None:
    fc6 = remat.Chain.load(FC6)
    for call in [
        lambda: remat.solve(fc6, "90MiB", exact_memory=2**60),
        lambda: remat.min_memory(fc6, "persistent", exact_memory="1000TiB"),
        lambda: remat.compare(fc6, "90MiB", exact_memory=2**64 - 1),
    ]:
        with pytest.raises(ValueError, match=r"exact_memory: exact memory .* is more than this machine can give"):
            call()
    assert remat.solve(fc6, "90MiB", exact_memory="64MiB").peak_memory <= 90 << 20


@pytest.mark.parametrize(
    "notation", ["F_none^1..18446744073709551615", "F_all^1..100000000 B^2..1", "F_ck^1..16777216 F_ck^1"]
)
def test_a_huge_notation_run_is_a_value_error(notation: str) -> None:
    fc6 = remat.Chain.load(FC6)
    start = time.monotonic()
    with pytest.raises(ValueError, match="at most 16777216"):
        remat.simulate(fc6, notation)
    assert time.monotonic() - start < 20


def _aot_grads(fn: Any, inputs: list[Any], partition_fn: Any) -> tuple[Any, list[Any]]:
    """The output and input gradients of ``fn`` compiled by AOTAutograd with
    ``partition_fn`` (no-op compilers)."""
    torch = pytest.importorskip("torch")
    from functorch.compile import aot_function, make_boxed_func

    def nop(gm: Any, _inputs: Any) -> Any:
        return make_boxed_func(gm)

    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = aot_function(fn, fw_compiler=nop, bw_compiler=nop, partition_fn=partition_fn)(*leaves)
    grads = torch.autograd.grad(out.sum(), leaves)
    return out.detach(), [g.detach() for g in grads]


def test_the_partitioner_budget_says_what_it_bounds_and_count_inputs_bounds_everything() -> None:
    torch = pytest.importorskip("torch")
    from remat.torch import RematSolverError, partitioner

    def fn(x: Any, y: Any) -> Any:
        return ((x * y).sigmoid() * x).sin()

    torch.manual_seed(0)
    inputs = [torch.randn(256, 384), torch.randn(256, 384)]
    one = 256 * 384 * 4  # 393,216 bytes: one tensor
    x, y = (t.detach().clone().requires_grad_(True) for t in inputs)
    eager = torch.autograd.grad(fn(x, y).sum(), [x, y])

    # By default the budget bounds the activations; the inputs saved on top are
    # reported so that a caller can count them (issue 27: 786,432 bytes saved
    # under 393,216, and nothing said so).
    part = partitioner(memory=one)
    _, grads = _aot_grads(fn, inputs, part)
    (record,) = part.partitions
    assert record["activation_bytes"] <= one
    assert record["saved_bytes"] == record["activation_bytes"] + record["input_bytes"]
    assert record["input_bytes"] == 2 * one, record
    for a, b in zip(grads, eager):
        torch.testing.assert_close(a, b)

    # count_inputs=True: the budget bounds everything saved.
    with pytest.raises(RematSolverError, match="the inputs this region must save take 786432 bytes"):
        _aot_grads(fn, inputs, partitioner(memory=one, count_inputs=True))
    for budget in (3 * one, 4 * one, 10 * one):
        part = partitioner(memory=budget, count_inputs=True)
        _, grads = _aot_grads(fn, inputs, part)
        (record,) = part.partitions
        assert record["saved_bytes"] <= budget, record
        for a, b in zip(grads, eager):
            torch.testing.assert_close(a, b)


def test_train_mode_batchnorm_under_a_small_budget_trains_as_eager() -> None:
    torch = pytest.importorskip("torch")
    from functorch.compile import aot_module, make_boxed_func

    from remat.torch import partitioner

    def nop(gm: Any, _inputs: Any) -> Any:
        return make_boxed_func(gm)

    def net() -> Any:
        torch.manual_seed(0)
        layers: list[Any] = []
        for i in range(3):
            layers += [torch.nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers).train()

    from remat.torch import RematSolverError

    x = torch.randn(4, 3, 16, 16)
    eager = net()
    eager(x).sum().backward()

    def train(memory: int) -> Any:
        compiled = net()
        aot_module(compiled, fw_compiler=nop, bw_compiler=nop, partition_fn=partitioner(memory=memory))(
            x
        ).sum().backward()
        return compiled

    # BatchNorm's functional op reads the running statistics that AOTAutograd
    # updates in place after the forward: it is never recomputed, so 0 bytes is
    # infeasible with the smallest budget named...
    with pytest.raises(RematSolverError, match="the smallest that fits needs") as refused:
        train(0)
    smallest = int(str(refused.value).split("needs ")[1].split(" ")[0])
    # ...and at that budget, the least memory, training matches eager (it used
    # to fail with "modified by an inplace operation").
    compiled = train(smallest)
    for a, b in zip(compiled.parameters(), eager.parameters()):
        torch.testing.assert_close(a.grad, b.grad)
    for a, b in zip(compiled.buffers(), eager.buffers()):
        torch.testing.assert_close(a, b)


def hostile_calls(rng: random.Random, calls: list[tuple[str, Any]], hostile: list[Any], n: int) -> Counter[str]:
    """Makes ``n`` calls, each a random one of ``calls`` with a random value of
    ``hostile``; counts the outcomes. Any exception other than ValueError (with
    a message), TypeError or InfeasibleError fails the test."""
    counts: Counter[str] = Counter()
    for _ in range(n):
        name, call = rng.choice(calls)
        value = rng.choice(hostile)
        try:
            call(value)
            counts["returned"] += 1
        except remat.InfeasibleError:
            counts["InfeasibleError"] += 1
        except ValueError as e:
            assert str(e), (name, value)
            counts["ValueError"] += 1
        except TypeError:
            counts["TypeError"] += 1
        except Exception as e:  # anything else is the failure being looked for
            pytest.fail(f"{name}({value!r}) raised {type(e).__name__}: {e}")
    return counts


def test_hostile_arguments_to_the_python_api_are_value_or_type_errors() -> None:
    """A fuzz of the core API's arguments: every call returns, or raises
    ValueError, TypeError or InfeasibleError (never OverflowError, another
    exception or an abort). Prints the count of each outcome."""
    rng = random.Random(27)
    fc6 = remat.Chain.load(FC6)
    hostile: list[object] = [
        -1, 0, 1, 2, 7, 500, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**64), 10**30,
        1.5, float("nan"), float("inf"), True, None, "", "90MiB", "-1", "1e999", "0x10", "1 GiB", "nan",
        [], {}, object(),
    ]  # fmt: skip
    calls: list[tuple[str, Any]] = [
        ("solve.memory", lambda v: remat.solve(fc6, v, "chen-sqrt")),
        ("solve.slots", lambda v: remat.solve(fc6, "90MiB", "persistent", slots=v)),
        ("solve.segments", lambda v: remat.solve(fc6, "90MiB", "sequential", segments=v)),
        ("solve.exact_memory", lambda v: remat.solve(fc6, "90MiB", "persistent", exact_memory=v)),
        ("solve.algorithm", lambda v: remat.solve(fc6, "90MiB", v)),
        ("min_memory.slots", lambda v: remat.min_memory(fc6, "persistent", slots=v)),
        ("min_memory.algorithm", lambda v: remat.min_memory(fc6, v)),
        ("compare.memory", lambda v: remat.compare(fc6, v, algorithms=["chen-sqrt"])),
        ("compare.slots", lambda v: remat.compare(fc6, "90MiB", slots=v, algorithms=["persistent"])),
        ("simulate.memory", lambda v: remat.simulate(fc6, "F_all^1..7 B^7..1", v)),
        ("simulate.schedule", lambda v: remat.simulate(fc6, v)),
        ("format_size", remat.format_size),
        ("parse_size", remat.parse_size),
    ]
    counts = hostile_calls(rng, calls, hostile, 1500)
    print("python fuzz outcomes:", dict(sorted(counts.items())))
    assert sum(counts.values()) == 1500
    assert counts["ValueError"] > 0 and counts["returned"] > 0


def test_partitioner_on_a_torchvision_resnet50_in_train_mode() -> None:
    # Issue 27's reproducer: at 38 and 50 MiB this failed with "modified by an
    # inplace operation" (BatchNorm's running statistics updated by a rerun).
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    from functorch.compile import aot_module, make_boxed_func

    from remat.torch import partitioner

    def nop(gm: Any, _inputs: Any) -> Any:
        return make_boxed_func(gm)

    def net() -> Any:
        torch.manual_seed(0)
        return torchvision.models.resnet50(num_classes=10).train()

    x = torch.randn(2, 3, 64, 64)
    eager = net()
    eager(x).sum().backward()
    compiled = net()
    run = aot_module(compiled, fw_compiler=nop, bw_compiler=nop, partition_fn=partitioner(memory=38 << 20))
    run(x).sum().backward()
    for a, b in zip(compiled.parameters(), eager.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    for a, b in zip(compiled.buffers(), eager.buffers()):
        torch.testing.assert_close(a, b)


# Issue 36, the fourth round: micro-batches in flight, recorded figures, sizes.

FC6_IN_FLIGHT = {"memory": "200MiB", "in_flight": 3}


@pytest.mark.parametrize("value", [-1, 0, 2**64, remat.MAX_IN_FLIGHT + 1, -(2**70)])
def test_replay_rank_peak_out_of_range_is_a_value_error_naming_in_flight(value: int) -> None:
    replay = remat.simulate(remat.Chain.load(FC6), "F_all^1..7 B^7..1")
    most = remat.MAX_IN_FLIGHT
    with pytest.raises(ValueError, match=f"in_flight must be at least 1 and at most {most}, got {value}$"):
        replay.rank_peak(value)
    for wrong in [1.5, "3", True]:
        with pytest.raises(TypeError, match="in_flight must be a whole number"):
            replay.rank_peak(wrong)  # type: ignore[arg-type]
    # Exact, never saturated.
    assert replay.rank_peak(most) == replay.peak_memory + (most - 1) * replay.residue


def test_schedule_from_json_refuses_a_residue_its_operations_do_not_have() -> None:
    fc6 = remat.Chain.load(FC6)
    schedule = remat.solve(fc6, **FC6_IN_FLIGHT)  # type: ignore[arg-type]
    data = json.loads(schedule.to_json())
    residue, peak = data["residue"], data["peak_memory"]
    # Read back with its chain: the replay's figures, so the rank peak is the operations' own.
    again = remat.Schedule.from_json(schedule.to_json(), chain=fc6)
    assert again.rank_peak == peak + 2 * residue == schedule.rank_peak
    data["residue"] = 1000
    edited = json.dumps(data)
    with pytest.raises(ValueError, match=f"`residue` is 1000, but its operations replay at {residue}"):
        remat.Schedule.from_json(edited, chain=fc6)
    for given in [edited, remat.Schedule.from_json(edited)]:
        with pytest.raises(ValueError, match="`residue` is 1000"):
            remat.simulate(fc6, given)
    # Fields that contradict each other are refused without a chain.
    data["residue"] = peak + 1
    with pytest.raises(ValueError, match=f"`residue` {peak + 1} is above `peak_memory` {peak}"):
        remat.Schedule.from_json(json.dumps(data))
    del data["residue"]
    with pytest.raises(ValueError, match="`in_flight` is 3 but `residue` is missing"):
        remat.Schedule.from_json(json.dumps(data))
    data["in_flight"] = remat.MAX_IN_FLIGHT + 1
    with pytest.raises(ValueError, match="`in_flight` 1048577 is more than remat plans for"):
        remat.Schedule.from_json(json.dumps(data))


def test_simulate_judges_a_schedule_planned_for_micro_batches_by_its_rank_peak() -> None:
    # Issue 36: `simulate(memory=)` checked the peak alone: a rank peak of
    # 204,895,370 bytes "fitted" 150 MiB.
    fc6 = remat.Chain.load(FC6)
    schedule = remat.solve(fc6, **FC6_IN_FLIGHT)  # type: ignore[arg-type]
    assert schedule.peak_memory <= 150 << 20 < schedule.rank_peak
    with pytest.raises(remat.InfeasibleError, match="with 3 micro-batches in flight") as e:
        remat.simulate(fc6, schedule, memory="150MiB")
    assert e.value.min_budget == schedule.rank_peak and e.value.budget == 150 << 20
    for given in [schedule, schedule.to_json()]:
        replay = remat.simulate(fc6, given, memory="200MiB")
        assert replay.in_flight == 3 and replay.rank_peak() == schedule.rank_peak == replay.rank_peak(3)
    # in_flight= judges it for another count; notation has none of its own.
    assert remat.simulate(fc6, schedule, memory="150MiB", in_flight=1).in_flight == 1
    with pytest.raises(remat.InfeasibleError):
        remat.simulate(fc6, str(schedule), memory="150MiB", in_flight=3)


def test_in_flight_past_the_limit_the_command_line_shares_is_a_value_error() -> None:
    fc6 = remat.Chain.load(FC6)
    assert remat.MAX_IN_FLIGHT == 2**20
    over = remat.MAX_IN_FLIGHT + 1
    calls = [
        lambda: remat.solve(fc6, "1GiB", in_flight=over),
        lambda: remat.min_memory(fc6, in_flight=over),
        lambda: remat.simulate(fc6, "F_all^1..7 B^7..1", in_flight=over),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=f"in_flight must be at least 1 and at most 1048576, got {over}"):
            call()
    # The most allowed is planned for; a rank peak past 2**64 - 1 bytes fits no budget.
    huge = remat.Chain.from_dict({"name": "huge", "input_size": 2**50, "stages": [STAGE]})
    with pytest.raises(remat.InfeasibleError) as e:
        remat.solve(huge, 2**64 - 1, "persistent", in_flight=remat.MAX_IN_FLIGHT)
    assert e.value.min_budget is None


@pytest.mark.parametrize("value", [2**64 - 1, 2**64 - 2, 2**63, 2**63 - 1, 1048575, 1023, 0])
def test_every_size_format_size_prints_reads_back(value: int) -> None:
    # Issue 36: parse_size(format_size(2**64 - 1)) was "more than ...".
    back = remat.parse_size(remat.format_size(value))
    assert abs(back - value) <= value * 0.005
    assert remat.parse_size(remat.format_size(2**64 - 1)) == 2**64 - 1


def test_hostile_in_flight_arguments_are_value_or_type_errors() -> None:
    """Round 4's fuzz of the micro-batch arguments: every call returns or
    raises ValueError, TypeError or InfeasibleError. Prints the counts."""
    rng = random.Random(36)
    fc6 = remat.Chain.load(FC6)
    replay = remat.simulate(fc6, "F_all^1..7 B^7..1")
    planned = remat.solve(fc6, **FC6_IN_FLIGHT).to_json()  # type: ignore[arg-type]
    hostile: list[object] = [
        -1, 0, 1, 2, 3, 8, 2**20, 2**20 + 1, 2**63, 2**64 - 1, 2**64, -(2**64), 10**30,
        1.5, float("nan"), True, None, "", "3", [], object(),
    ]  # fmt: skip
    calls: list[tuple[str, Any]] = [
        ("Replay.rank_peak", lambda v: replay.rank_peak(v)),
        ("solve.in_flight", lambda v: remat.solve(fc6, "200MiB", "chen-sqrt", in_flight=v)),
        ("simulate.in_flight", lambda v: remat.simulate(fc6, planned, memory="200MiB", in_flight=v)),
        ("min_memory.in_flight", lambda v: remat.min_memory(fc6, "chen-sqrt", in_flight=v)),
        (
            "Schedule.from_json",
            lambda v: remat.Schedule.from_json(planned.replace('"in_flight": 3', f'"in_flight": {v}')),
        ),
    ]
    counts = hostile_calls(rng, calls, hostile, 600)
    print("python in-flight fuzz outcomes:", dict(sorted(counts.items())))
    assert sum(counts.values()) == 600
    assert counts["ValueError"] > 0 and counts["returned"] > 0 and counts["TypeError"] > 0
