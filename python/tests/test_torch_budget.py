"""``memory=``, read the same way by ``apply``, ``Checkpointed`` and
``max_batch``: one validator (``remat.torch.budget.check_memory``), errors that
name the caller, the argument and its value."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import remat.torch as rt
from remat.torch.budget import MemoryArgumentError, check_memory, share_of


def make() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(6)))


@pytest.mark.parametrize(("written", "share"), [(".5%", 0.005), ("50.%", 0.5), ("50%", 0.5), (" 62.5 % ", 0.625)])
def test_shares_are_read_as_the_command_line_reads_them(written: str, share: float) -> None:
    # ".5%" and "50.%" were refused as "this takes bytes or a size".
    assert check_memory(written) == written and share_of(written) == share
    rt.apply(make(), memory=written)


def test_a_share_written_with_a_trailing_point_plans_as_the_plain_share() -> None:
    peaks = []
    for written in ("90%", "90.%"):
        model = make()
        plan = rt.apply(model, memory=written)
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(torch.randn(32, 64, generator=torch.Generator().manual_seed(0))).sum().backward()
        assert plan.schedule is not None
        peaks.append(plan.schedule.peak_memory)
    assert peaks[0] == peaks[1]


def test_a_budget_beyond_any_device_is_refused_at_apply_naming_memory() -> None:
    # apply(memory=2**70) was accepted and failed inside the forward with a
    # bytes-range message naming neither memory= nor apply.
    for bad in (2**70, "2000000TiB"):
        with pytest.raises(ValueError, match=r"apply: memory=.*above 1 EiB.*memory='100%'"):
            rt.apply(make(), memory=bad)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (-3, "memory must be positive"),
        (0, "memory must be positive"),
        ("0%", "a share must be above 0%"),
        ("150%", "at most 100%"),
        (1.5, "memory must be bytes"),
        (True, "memory must be bytes"),
        ("lots", "memory='lots'"),
    ],
)
def test_bad_memory_is_both_a_value_and_a_type_error(bad: object, message: str) -> None:
    with pytest.raises(MemoryArgumentError, match=message) as info:
        rt.apply(make(), memory=bad)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert str(info.value).startswith("apply: ")


def test_max_batch_reads_memory_with_the_same_validator() -> None:
    def inputs(n: int) -> torch.Tensor:
        return torch.randn(n, 64)

    for bad, message in ((1.5, "max_batch: memory must be bytes"), (2**70, "max_batch: memory=.*above 1 EiB")):
        with pytest.raises(MemoryArgumentError, match=message):
            rt.max_batch(make(), inputs, memory=bad)  # type: ignore[arg-type]
