"""remat.torch.max_batch and largest_fitting: the search, what a size that
fits guarantees (checked here independently, on a tiny GPT-2), and the model
left as it was given."""

from __future__ import annotations

import logging
import re
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch_models import gpt2, steady_profiles

import remat
import remat.torch as rt
from remat.torch.memory import AllocatorTrace

SEQ = 64
VOCAB = 512


@pytest.fixture(autouse=True)
def _steady() -> Iterator[None]:
    """Plans solved from steady times (torch_models.steady): which schedule a
    budget gets, and so its measured peak, does not change with the load."""
    with steady_profiles():
        yield


def make_inputs(n: int) -> dict[str, Any]:
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(n))
    return {"input_ids": ids, "labels": ids}


def step(model: nn.Module, n: int) -> None:
    model.zero_grad(set_to_none=True)
    model(**make_inputs(n)).loss.backward()


def measured_peak(model: nn.Module, n: int) -> int:
    """One step's peak as the CPU allocator saw it, parameter gradients excluded."""
    model.zero_grad(set_to_none=True)
    inputs = make_inputs(n)
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        model(**inputs).loss.backward()
        end = trace.mark()
    model.zero_grad(set_to_none=True)
    return trace.peak(0, end)


def trained_peak(model: nn.Module, n: int, memory: int) -> int | None:
    """A fresh plan's measured peak at size n after three steps; None when
    remat finds no schedule. The plan is removed afterwards."""
    plan = rt.apply(model, memory=memory)
    try:
        for _ in range(3):
            step(model, n)
        return measured_peak(model, n)
    except remat.InfeasibleError:
        return None
    finally:
        plan.remove()
        model.zero_grad(set_to_none=True)


# -- largest_fitting --------------------------------------------------------


def counted(limit: int) -> tuple[list[int], Any]:
    calls: list[int] = []

    def fits(n: int) -> bool:
        calls.append(n)
        return n <= limit

    return calls, fits


def test_largest_fitting_finds_the_exact_size_in_logarithmic_calls() -> None:
    calls, fits = counted(37)
    assert rt.largest_fitting(fits) == 37
    # Doubling 1..64 (7 calls), then bisecting between 32 and 64 (5 calls).
    assert calls == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    for bound in (1, 2, 3, 99, 1000, 65535):
        calls, fits = counted(bound)
        assert rt.largest_fitting(fits) == bound
        assert len(calls) == len(set(calls))  # each size asked once
        assert len(calls) <= 2 * (bound.bit_length() + 1), (bound, calls)


def test_largest_fitting_gives_zero_when_start_does_not_fit() -> None:
    calls, fits = counted(37)
    assert rt.largest_fitting(fits, start=38) == 0
    assert calls == [38]


def test_largest_fitting_stops_at_the_limit() -> None:
    calls, fits = counted(10**9)
    assert rt.largest_fitting(fits, limit=100) == 100
    assert calls == [1, 2, 4, 8, 16, 32, 64, 100]
    calls, fits = counted(10**9)
    assert rt.largest_fitting(fits, start=3, limit=3) == 3
    assert calls == [3]
    calls, fits = counted(99)
    assert rt.largest_fitting(fits, start=5, limit=100) == 99  # 5..80, 100 fails, then bisects
    assert calls[:6] == [5, 10, 20, 40, 80, 100]


def test_largest_fitting_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"start must be at least 1, got 0"):
        rt.largest_fitting(lambda n: True, start=0)
    with pytest.raises(ValueError, match=r"limit must be at least start=8, got 4"):
        rt.largest_fitting(lambda n: True, start=8, limit=4)
    with pytest.raises(TypeError, match=r"start must be an int, got True"):
        rt.largest_fitting(lambda n: True, start=True)
    with pytest.raises(TypeError, match=r"fits must be a callable"):
        rt.largest_fitting(3)  # type: ignore[arg-type]


# -- max_batch on a tiny GPT-2 ----------------------------------------------


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_max_batch_finds_the_largest_batch_that_trains_within_the_budget() -> None:
    model = gpt2()
    memory = measured_peak(model, 4)  # plain training's peak at batch 4
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.random.get_rng_state()
    log = logging.getLogger("remat.torch")
    records, level = Records(), log.level
    log.addHandler(records)
    log.setLevel(logging.INFO)
    try:
        found = rt.max_batch(model, make_inputs, memory, limit=64)
    finally:
        log.removeHandler(records)
        log.setLevel(level)

    # Checkpointing fits more than plain's batch of 4 in plain's peak at 4.
    assert 4 < found.size < 64, found
    assert found.memory == memory
    assert found.measured_peak is not None and found.predicted_peak is not None
    assert found.measured_peak <= memory and found.predicted_peak <= memory
    assert found.predicted_step_time is not None and found.predicted_step_time > 0
    assert found.explain.startswith("remat on GPT2LMHeadModel: 4 blocks of transformer.h")
    outcomes = dict(found.tried)
    assert len(outcomes) == len(found.tried)  # each size probed once
    assert outcomes[found.size] == "fits"
    assert outcomes[found.size + 1] != "fits"  # the size just above was tried, and failed
    pattern = r"fits|infeasible: .+|measured .+ above the budget"
    assert all(re.fullmatch(pattern, o) for o in outcomes.values()), found.tried
    assert [n for n, _ in found.tried][:4] == [1, 2, 4, 8]  # doubling from start=1
    assert len(records.messages) == len(found.tried)
    assert all(f"size {n}: {o}" in m for (n, o), m in zip(found.tried, records.messages))
    text = str(found)
    assert f": {found.size}\n" in text and "tried: 1: fits" in text

    # The model as it was given: the same parameters, no gradients, no plan,
    # the global generator where it was.
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(rng, torch.random.get_rng_state())
    assert not model._forward_pre_hooks and not model._forward_hooks
    assert all("forward" not in m.__dict__ for m in model.modules())

    # Checked here, independently: a fresh plan at that size trains within the
    # budget, and one at the size above does not (no schedule, or above it).
    peak = trained_peak(model, found.size, memory)
    assert peak is not None and peak <= memory, (peak, memory)
    above = trained_peak(model, found.size + 1, memory)
    assert above is None or above > memory, (above, memory)


def test_max_batch_with_a_loss_runs_four_steps_a_probe() -> None:
    model = gpt2()
    calls: list[int] = []

    def loss(m: nn.Module, inputs: Any) -> torch.Tensor:
        calls.append(inputs["input_ids"].shape[0])
        out: torch.Tensor = m(**inputs).loss
        return out

    found = rt.max_batch(model, make_inputs, "64MiB", loss=loss, start=2, limit=2)
    assert found.size == 2 and found.tried == ((2, "fits"),)
    assert calls == [2, 2, 2, 2]  # three steps, then the measured one


def test_max_batch_gives_zero_when_start_does_not_fit() -> None:
    model = gpt2()
    found = rt.max_batch(model, make_inputs, "1MiB", start=4)
    assert found.size == 0
    assert found.measured_peak is None and found.predicted_peak is None and found.predicted_step_time is None
    assert len(found.tried) == 1 and found.tried[0][0] == 4
    assert found.tried[0][1].startswith("infeasible: "), found.tried
    assert str(found).startswith("nothing fits in 1.00 MiB; tried 4: infeasible: ")
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_the_docstring_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    doc = rt.max_batch.__doc__ or ""
    example = doc.split("Example::\n", 1)[1].split("\n    Args:", 1)[0]
    scope: dict[str, Any] = {"__name__": "__example__"}
    exec(compile(textwrap.dedent(example), "max_batch's example", "exec"), scope)
    found = scope["found"]
    assert isinstance(found, rt.Capacity) and found.size >= 1
    assert found.measured_peak is not None and found.measured_peak <= 8 << 20
    assert f"largest size within 8.00 MiB (8388608 bytes): {found.size}\n" in capsys.readouterr().out


# -- errors -------------------------------------------------------------------


def test_max_batch_rejects_a_share_and_bad_arguments() -> None:
    model = gpt2()
    asked: list[int] = []

    def inputs(n: int) -> dict[str, Any]:
        asked.append(n)
        return make_inputs(n)

    with pytest.raises(ValueError, match=r"memory='60%'.*pass the budget as bytes or a size"):
        rt.max_batch(model, inputs, "60%")
    with pytest.raises(ValueError, match=r"start must be at least 1, got 0"):
        rt.max_batch(model, inputs, "8MiB", start=0)
    with pytest.raises(ValueError, match=r"limit must be at least start=4, got 2"):
        rt.max_batch(model, inputs, "8MiB", start=4, limit=2)
    with pytest.raises(TypeError, match=r"make_inputs must be a callable.*got 3"):
        rt.max_batch(model, 3, "8MiB")  # type: ignore[arg-type]
    assert asked == []  # rejected before any probe


def test_max_batch_without_a_loss_says_to_pass_one() -> None:
    model = gpt2()

    def no_labels(n: int) -> dict[str, Any]:
        return {"input_ids": make_inputs(n)["input_ids"]}

    with pytest.raises(TypeError, match=r"no \.loss tensor.*pass loss="):
        rt.max_batch(model, no_labels, "64MiB", limit=2)
    # The probe's plan is gone: the model can be planned again.
    rt.apply(model, memory="64MiB").remove()
    assert all(p.grad is None for p in model.parameters())
