"""Shapes of as many tokens at another length are planned for their own
length (round 5: below half the profiled length, 2 x 128 after 4 x 64 was
planned on 4 x 64's sizes and parts outside the stack, 17% over)."""

from __future__ import annotations

import pytest
import torch
import torch_models
from torch import nn
from torch_models import allocator_peak, steady_profiles

import remat.torch as rt

pytest.importorskip("transformers")


def llama() -> nn.Module:
    # Eager attention: T x T scores and a T x T mask, what grows faster than the tokens.
    return torch_models.llama(
        intermediate_size=160, attention_dropout=0.0, max_position_embeddings=512, attn_implementation="eager"
    )


def step(model: nn.Module, batch: int, length: int, measured: bool = False) -> int:
    ids = torch.randint(0, 512, (batch, length), generator=torch.Generator().manual_seed(length))
    if measured:
        return torch_models.allocator_step(model, ids)
    model.zero_grad(set_to_none=True)
    model(ids, labels=ids).loss.backward()
    return 0


def test_as_many_tokens_at_another_length_are_predicted_for_that_length() -> None:
    model = llama()
    with steady_profiles():
        plan = rt.apply(model, memory="50%")
        predicted = {}
        for batch, length in ((1, 256), (4, 32), (2, 64)):  # the last two: 128 tokens each, below half of 256
            step(model, batch, length)
            step(model, batch, length)  # a new shape's first step measures what lies outside the stack
            peak = step(model, batch, length, measured=True)
            assert plan.peak_memory is not None
            predicted[batch, length] = plan.peak_memory
            assert peak <= plan.peak_memory, (batch, length, peak / plan.peak_memory)
            assert plan.peak_memory - peak <= 0.02 * plan.peak_memory, (batch, length, peak / plan.peak_memory)
    assert predicted[2, 64] > predicted[4, 32]  # T x T parts: twice the length, twice their bytes


def test_a_padding_mask_after_unpadded_batches_is_planned_with_the_mask() -> None:
    """Unpadded batches, then one of the same shape with a padding mask: SDPA
    leaves its causal path and a mask is made, which the unpadded plan did
    not count (round 5: 4% above its prediction). A block's side inputs,
    which are there and of what kind, are part of what a plan is made for."""
    model = torch_models.llama(intermediate_size=160, attention_dropout=0.0, max_position_embeddings=512)
    ids = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(3))
    padded = torch.ones_like(ids)
    padded[:2, 40:] = 0
    with steady_profiles():
        plan = rt.apply(model, memory="50%")
        for mask in (None, padded):
            inputs = {"input_ids": ids, "labels": ids} | ({} if mask is None else {"attention_mask": mask})
            for _ in range(2):  # a new kind of step's first measures what lies outside the stack
                model.zero_grad(set_to_none=True)
                model(**inputs).loss.backward()
            peak = torch_models.allocator_step(model, ids, attention_mask=mask)
            assert plan.peak_memory is not None and plan.budget is not None
            assert peak <= plan.peak_memory <= plan.budget, (mask is not None, peak / plan.peak_memory)
            assert plan.peak_memory - peak <= 0.02 * plan.peak_memory, (mask is not None, peak / plan.peak_memory)


class SequenceFirst(nn.Module):
    """``nn.TransformerEncoder`` as PyTorch builds it by default: its blocks
    take (sequence, batch, features); dropout on, so attention's T x T scores
    are kept (SDPA's math path)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128)
        self.encoder = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        self.head = nn.Linear(64, 100)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids.t())))


def test_sequence_first_blocks_are_planned_for_each_length() -> None:
    """Sequence-first blocks: dimension 0 of their input is the sequence, and
    a longer one was taken for a larger batch, sized by scaling the first
    profile linearly (round 5, here: 1.17x, 1.60x, 2.46x the budget on the
    first step at 64, 128, 256 tokens a row). Every step within the budget,
    the first at a new length included."""
    torch.manual_seed(0)
    model = SequenceFirst()

    with steady_profiles():
        plan = rt.apply(model, memory=7 * 2**20)
        for batch, length in ((8, 32), (4, 64), (1, 256)):
            ids = torch.randint(0, 100, (batch, length), generator=torch.Generator().manual_seed(length))
            first = allocator_peak(model, ids)
            assert plan.budget is not None and first <= plan.budget, (length, first / plan.budget)
            allocator_peak(model, ids)
            steady = allocator_peak(model, ids)
            assert plan.peak_memory is not None
            assert steady <= plan.peak_memory <= plan.budget, (length, steady / plan.peak_memory)
            assert plan.peak_memory - steady <= 0.02 * plan.peak_memory, (length, steady / plan.peak_memory)
    assert "take their sequence first (TransformerEncoderLayer 1's self_attn" in plan.explain()
