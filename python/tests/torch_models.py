"""Small networks shared by the remat.torch tests: each returns a fresh model
(same weights for the same seed), a batch and a criterion."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import remat
import remat.torch as rt

# The test models are small: one thread is faster than two on a shared machine,
# and every comparison runs both sides with the same setting.
torch.set_num_threads(1)


@dataclass
class Case:
    """A model factory with an input batch, a target and the loss to train on."""

    name: str
    make: Callable[[], nn.Sequential]
    x: torch.Tensor
    target: torch.Tensor
    criterion: nn.Module


def mlp(width: int = 64, depth: int = 6, batch: int = 16) -> Case:
    """Linear + ReLU blocks and a linear head, with dropout in the middle."""

    def make() -> nn.Sequential:
        torch.manual_seed(1)
        blocks: list[nn.Module] = [nn.Sequential(nn.Linear(32, width), nn.ReLU())]
        for i in range(depth - 2):
            blocks.append(nn.Sequential(nn.Linear(width, width), nn.Tanh() if i % 2 else nn.ReLU()))
            if i == 1:
                blocks.append(nn.Dropout(0.25))
        blocks.append(nn.Linear(width, 10))
        return nn.Sequential(*blocks)

    g = torch.Generator().manual_seed(2)
    x = torch.randn(batch, 32, generator=g)
    return Case("mlp", make, x, torch.randint(0, 10, (batch,), generator=g), nn.CrossEntropyLoss())


def cnn(batch: int = 8) -> Case:
    """Conv + BatchNorm + ReLU + Dropout blocks, then a linear classifier."""

    def block(cin: int, cout: int, p: float) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.Dropout2d(p))

    def make() -> nn.Sequential:
        torch.manual_seed(3)
        return nn.Sequential(
            block(3, 8, 0.1),
            block(8, 8, 0.2),
            nn.MaxPool2d(2),
            block(8, 16, 0.1),
            block(16, 16, 0.0),
            nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(16 * 8 * 8, 10)),
        )

    g = torch.Generator().manual_seed(4)
    x = torch.randn(batch, 3, 16, 16, generator=g)
    return Case("cnn", make, x, torch.randint(0, 10, (batch,), generator=g), nn.CrossEntropyLoss())


def transformer(batch: int = 4, seq: int = 12, d: int = 32, layers: int = 4) -> Case:
    """A chain of transformer encoder blocks (attention + MLP, dropout on) and a head."""

    def make() -> nn.Sequential:
        torch.manual_seed(5)
        blocks: list[nn.Module] = [
            nn.TransformerEncoderLayer(d, 4, dim_feedforward=2 * d, dropout=0.1, batch_first=True)
            for _ in range(layers)
        ]
        blocks.append(nn.Linear(d, d))
        return nn.Sequential(*blocks)

    g = torch.Generator().manual_seed(6)
    x = torch.randn(batch, seq, d, generator=g)
    return Case("transformer", make, x, torch.randn(batch, seq, d, generator=g), nn.MSELoss())


def deep_mlp(width: int = 256, depth: int = 16, batch: int = 256) -> Case:
    """Many equal Linear + ReLU blocks: the shape where recomputation pays most."""

    def make() -> nn.Sequential:
        torch.manual_seed(7)
        blocks = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)]
        return nn.Sequential(*blocks, nn.Linear(width, 10))

    g = torch.Generator().manual_seed(8)
    x = torch.randn(batch, width, generator=g)
    return Case("deep_mlp", make, x, torch.randint(0, 10, (batch,), generator=g), nn.CrossEntropyLoss())


# -- Hugging Face language models (transformers is imported when one is built) --


def gpt2() -> nn.Module:
    """A 4-block GPT-2 from its config (random weights, dropout on), in train mode."""
    import transformers

    config = transformers.GPT2Config(
        n_layer=4, n_embd=64, n_head=4, vocab_size=512, n_positions=128, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).train()


def llama(**config: Any) -> nn.Module:
    """A 4-block Llama from its config (random weights, attention dropout), in
    train mode; ``config`` overrides any ``LlamaConfig`` field."""
    import transformers

    fields: dict[str, Any] = {
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 512,
        "max_position_embeddings": 128,
        "attention_dropout": 0.1,
    }
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**fields, **config})).train()


IDS = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(1))


def lm_step(model: nn.Module, ids: torch.Tensor = IDS) -> tuple[torch.Tensor, int]:
    """One step from a fixed RNG state: the loss and the peak of live bytes
    (parameter gradients excluded, as remat's budget excludes them)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    with rt.LiveBytes() as live:
        live.exclude_parameter_gradients(model.parameters())
        loss = model(ids, labels=ids).loss
        loss.backward()
        value = loss.detach()
        del loss
    return value, live.peak


def allocator_step(model: nn.Module, ids: torch.Tensor = IDS, attention_mask: torch.Tensor | None = None) -> int:
    """One step from a fixed RNG state, its peak measured by the allocator
    (``torch.profiler`` memory events, parameter gradients excluded): what
    compiled code and kernels allocate counts too."""
    from remat.torch.memory import AllocatorTrace

    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        masked = {} if attention_mask is None else {"attention_mask": attention_mask}
        model(input_ids=ids, labels=ids, **masked).loss.backward()
        end = trace.mark()
    return trace.peak(0, end)


def allocator_peak(
    model: nn.Module, x: torch.Tensor, loss: Callable[[Any], torch.Tensor] = lambda y: y.square().mean()
) -> int:
    """One step of ``model`` on ``x`` (its loss ``loss`` of the output; pass
    ``lambda y: y`` for a forward that returns its loss), its peak measured by
    the allocator, parameter gradients excluded."""
    from remat.torch.memory import AllocatorTrace

    model.zero_grad(set_to_none=True)
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        loss(model(x)).backward()
        end = trace.mark()
    return trace.peak(0, end)


def assert_same_gradients(a: nn.Module, b: nn.Module) -> None:
    """Every parameter of ``a`` and ``b`` has a gradient, bit for bit the same."""
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert p.grad is not None and q.grad is not None, name
        assert torch.equal(p.grad, q.grad), name


# -- plans that do not depend on the machine's load ----------------------------


def steady(chain: remat.Chain) -> remat.Chain:
    """``chain`` with fixed times in place of the measured ones: 1 ms for each
    stage's forward, 2 ms for its backward, and for each recording option the
    share of a forward that its saved bytes leave out (an option that keeps
    less recomputes more). The bytes stay as measured (exactly, by LiveBytes),
    so a plan solved from it is the same on a quiet machine and a loaded one.
    """
    d = chain.to_dict()
    for s in d["stages"]:
        s["forward_time"], s["backward_time"] = 1.0, 2.0
        for o in s.get("options") or []:
            o["recompute_time"] = 1.0 - o["saved_size"] / max(1, s["saved_size"])
    return remat.Chain.from_dict(d)


@contextlib.contextmanager
def steady_profiles() -> Iterator[None]:
    """Within it, every chain remat.torch profiles (``profile``, ``apply``,
    ``Checkpointed``) has :func:`steady` times. Tests that assert anything of a
    plan beyond what holds for every plan (its peak against a measured one,
    which blocks it reruns) run under it: a plan solved from measured times
    changes with the machine's load. Works in spawned worker processes too
    (call it there)."""
    # By their names in sys.modules: remat.torch.apply and .profile are also
    # the functions the package exports.
    modules: list[Any] = [importlib.import_module(f"remat.torch.{m}") for m in ("apply", "checkpointed", "profile")]
    measured = modules[-1].profile_calls

    def profile_calls(*args: Any, **kwargs: Any) -> tuple[remat.Chain, Any]:
        chain, found = measured(*args, **kwargs)
        return steady(chain), found

    before = [m.profile_calls for m in modules]
    for m in modules:
        m.profile_calls = profile_calls
    # The loss options of a causal LM's head too: the whole head 1 ms, in
    # chunks 1.5 ms (their bytes as measured).
    measured_head = modules[0].measure_options

    def measure_options(*args: Any, **kwargs: Any) -> Any:
        return [dataclasses.replace(o, ms=1.0 if o.chunks == 1 else 1.5) for o in measured_head(*args, **kwargs)]

    modules[0].measure_options = measure_options
    try:
        yield
    finally:
        modules[0].measure_options = measured_head
        for m, f in zip(modules, before):
            m.profile_calls = f
