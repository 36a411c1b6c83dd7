"""A copy or a pickle of a model remat runs is the plain model: its outputs
and gradients are its own (round 5: ``copy.deepcopy`` of an applied model ran
the original's blocks, with the original's weights, and its gradients landed
on the original's parameters; ``torch.save`` failed with a bare
``PicklingError``). And ``remove()`` puts back only what its own plan
installed."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable

import pytest
import torch
import torch_models
from torch import nn

import remat.torch as rt

pytest.importorskip("transformers")


def llama() -> nn.Module:
    return torch_models.llama(hidden_size=32, intermediate_size=64, attention_dropout=0.0)


IDS = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(1))


def train(model: nn.Module, steps: int = 3) -> torch.Tensor:
    loss = torch.zeros(())
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        loss = model(IDS, labels=IDS).loss
        loss.backward()
    return loss.detach()


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "duplicate",
    [copy.deepcopy, lambda m: torch.load(save(m), weights_only=False)],
    ids=["deepcopy", "torch.save"],
)
def test_a_copy_of_an_applied_model_runs_its_own_weights(duplicate: Callable[[nn.Module], nn.Module]) -> None:
    model = llama()
    plan = rt.apply(model, memory="50%")
    train(model)  # planned, the loss in chunks where the plan says so
    twin = duplicate(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)  # the copy's weights differ from the original's now
    model.zero_grad(set_to_none=True)
    loss = twin(IDS, labels=IDS).loss
    loss.backward()
    assert all(p.grad is None for p in model.parameters()), "the copy's gradients landed on the original"
    # The copy is the plain model: the same loss and gradients as a plain model
    # with its weights.
    plain = llama()
    plain.load_state_dict(twin.state_dict())
    plain.config.use_cache = False
    expected = plain(IDS, labels=IDS).loss
    expected.backward()
    assert torch.equal(loss.detach(), expected.detach())
    for name, g in grads(plain).items():
        assert torch.equal(dict(twin.named_parameters())[name].grad, g), name
    # The original still trains under its plan.
    train(model, 1)
    assert plan.schedule is not None and "memory='50%'" in repr(plan)


def save(model: nn.Module) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return buffer


def test_remove_twice_leaves_a_later_plan_in_place() -> None:
    """``remove()`` called again after a new plan was applied stripped the new
    plan's forwards: every step ran plainly under a plan that still reported
    its budget (+61%)."""
    model = llama()
    first = rt.apply(model, memory="50%")
    train(model, 1)
    first.remove()
    second = rt.apply(model, memory="50%")
    first.remove()
    train(model)
    assert second.schedule is not None and second.peak_memory is not None
    assert all("forward" in block.__dict__ for block in model.model.layers)
    second.remove()
    assert not any("forward" in block.__dict__ or "__reduce_ex__" in block.__dict__ for block in model.model.layers)
