"""Hugging Face's recorded outputs (``output_router_logits``,
``output_attentions``, ``output_hidden_states``) hold the model's own calls
only, on every step, the profiling ones included (round 5: Mixtral returned
58 router logits for 4 layers, a wrong auxiliary loss, then its backward
failed with a bare AssertionError; ``output_attentions=True`` gave 58 maps)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_models
from torch import nn

import remat.torch as rt

torch.set_num_threads(1)
transformers = pytest.importorskip("transformers")

IDS = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
LAYERS = 4


def mixtral() -> nn.Module:
    config = transformers.MixtralConfig(
        num_hidden_layers=LAYERS,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=256,
        num_local_experts=4,
        num_experts_per_tok=2,
        output_router_logits=True,
    )
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(config).train()


def llama() -> nn.Module:
    # Eager attention: SDPA returns no attention maps.
    return torch_models.llama(
        hidden_size=32, intermediate_size=64, vocab_size=256, attention_dropout=0.0, attn_implementation="eager"
    )


@pytest.mark.parametrize(
    ("make", "asks", "field"),
    [
        (mixtral, {}, "router_logits"),
        (llama, {"output_attentions": True}, "attentions"),
        (llama, {"output_hidden_states": True}, "hidden_states"),
    ],
    ids=["router_logits", "attentions", "hidden_states"],
)
def test_recorded_outputs_are_the_models_own_on_every_step(
    make: Callable[[], nn.Module], asks: dict[str, bool], field: str
) -> None:
    plain, ours = make(), make()
    plain.config.use_cache = False
    plan = rt.apply(ours, memory="60%")
    for _ in range(3):  # the first steps profile and measure
        found = []
        for m in (plain, ours):
            m.zero_grad(set_to_none=True)
            torch.manual_seed(3)
            out = m(IDS, labels=IDS, **asks)
            out.loss.backward()
            found.append(out)
        expected, got = found
        assert len(getattr(got, field)) == len(getattr(expected, field)) >= LAYERS
        for a, b in zip(getattr(got, field), getattr(expected, field)):
            assert torch.equal(a, b)
        assert torch.equal(got.loss, expected.loss)
        for (name, p), q in zip(ours.named_parameters(), plain.parameters()):
            assert (p.grad is None) == (q.grad is None), name
            assert p.grad is None or torch.equal(p.grad, q.grad), name
    assert plan.schedule is not None
