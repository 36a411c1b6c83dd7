"""The stack where the memory is: found by parameters, checked on the first
step by what each stack's blocks keep for the backward (issue 56: VGG-11's
``classifier`` holds most parameters, its ``features`` the activations; the
plan was made on the classifier, and at any budget stored everything)."""

from __future__ import annotations

import torch
from torch import nn
from torch_models import steady_profiles

import remat.torch as rt
from remat.torch.memory import AllocatorTrace

torch.set_num_threads(1)


class SmallVgg(nn.Module):
    """VGG's layout: ``features`` (convolutions: the activations), then
    ``classifier`` (linear layers: most of the parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(16, 16, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((4, 4))
        self.classifier = nn.Sequential(
            nn.Linear(32 * 16, 1024),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(1024, 1024),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(1024, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def make() -> SmallVgg:
    torch.manual_seed(0)
    return SmallVgg().train()


X = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(1))
Y = torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(2))


def step(model: nn.Module, measured: bool = False) -> int:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    if not measured:
        nn.functional.cross_entropy(model(X), Y).backward()
        return 0
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        nn.functional.cross_entropy(model(X), Y).backward()
        end = trace.mark()
    return trace.peak(0, end)


def test_the_stack_that_keeps_the_activations_is_planned() -> None:
    plain = make()
    step(plain)
    stored = step(plain, measured=True)
    model = make()
    with steady_profiles():
        plan = rt.apply(model, memory=int(0.85 * stored))
        assert plan.where == "classifier"  # by parameters, before any step
        for _ in range(3):
            step(model)
        peak = step(model, measured=True)
    assert plan.where == "features", plan.explain()
    assert "features keeps" in plan.explain() and "found first by its parameters" in plan.explain()
    assert plan.peak_memory is not None
    assert peak <= int(0.85 * stored), (peak, stored)
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory
    step(plain)
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        assert p.grad is not None and q.grad is not None, name
        assert torch.equal(p.grad, q.grad), name


def test_a_stack_named_with_blocks_is_kept() -> None:
    model = make()
    plan = rt.apply(model, memory="100%", blocks="classifier")
    for _ in range(2):
        step(model)
    assert plan.where == "classifier"
