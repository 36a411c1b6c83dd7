"""The head and the loss in chunks of tokens (issue 37; docs/model.md, "Ways to
compute the loss"): chunked_cross_entropy against the whole computation, and
apply() choosing a loss option below the floor of the head computed whole."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch_models import steady_profiles

import remat
import remat.torch as rt
from remat.torch.head import CausalLMHead, chunked_cross_entropy
from remat.torch.memory import AllocatorTrace

transformers = pytest.importorskip("transformers")

VOCAB = 4000


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


# -- the function ------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [1, 2, 3, 7, 64, 1000])
@pytest.mark.parametrize("items", [None, 123])
def test_chunked_cross_entropy_is_the_whole_loss_and_its_gradients(chunks: int, items: int | None) -> None:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 21, 16, generator=g, requires_grad=True)
    weight = torch.randn(97, 16, generator=g, requires_grad=True)
    bias = torch.randn(97, generator=g, requires_grad=True)
    targets = torch.randint(0, 97, (3, 21), generator=g)
    targets[0, :5] = -100  # padding, as Hugging Face's labels mark it
    logits = nn.functional.linear(hidden, weight, bias).view(-1, 97)
    if items is None:
        whole = nn.functional.cross_entropy(logits, targets.view(-1))
    else:
        whole = nn.functional.cross_entropy(logits, targets.view(-1), reduction="sum") / items
    expected = torch.autograd.grad(whole, [hidden, weight, bias])
    loss = chunked_cross_entropy(hidden, weight, targets, bias=bias, chunks=chunks, num_items_in_batch=items)
    got = torch.autograd.grad(loss, [hidden, weight, bias])
    assert abs(float(loss.detach()) - float(whole)) <= 1e-6 * abs(float(whole))
    for a, b in zip(got, expected):
        assert rel(a, b) <= 1e-6


def test_chunked_cross_entropy_leaves_out_frozen_weights() -> None:
    hidden = torch.randn(8, 4, requires_grad=True)
    weight = torch.randn(10, 4)  # frozen (a LoRA-style fine-tune)
    targets = torch.randint(0, 10, (8,))
    chunked_cross_entropy(hidden, weight, targets, chunks=3).backward()
    assert hidden.grad is not None and weight.grad is None


def test_a_second_backward_through_the_chunked_loss_is_an_error_not_zero_gradients() -> None:
    hidden = torch.randn(8, 4, requires_grad=True)
    loss = chunked_cross_entropy(hidden, torch.randn(10, 4), torch.randint(0, 10, (8,)), chunks=3)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="used by an earlier backward"):
        loss.backward()


@pytest.mark.parametrize("chunks", [0, -1, 1.5, True])
def test_a_bad_number_of_chunks_is_named(chunks: Any) -> None:
    with pytest.raises(ValueError, match="chunks must be a positive int"):
        chunked_cross_entropy(torch.randn(4, 2), torch.randn(3, 2), torch.zeros(4, dtype=torch.long), chunks=chunks)


def test_targets_that_do_not_match_the_tokens_are_named() -> None:
    with pytest.raises(ValueError, match="targets has 5 elements for 4 tokens"):
        chunked_cross_entropy(torch.randn(4, 2), torch.randn(3, 2), torch.zeros(5, dtype=torch.long))


def test_the_backward_holds_one_chunk_of_logits_not_all() -> None:
    """By the allocator: the chunked loss's forward and backward hold far less
    than the whole logits (tokens x vocabulary x 4 bytes)."""
    hidden = torch.randn(512, 32, requires_grad=True)
    weight = torch.randn(VOCAB, 32, requires_grad=True)
    targets = torch.randint(0, VOCAB, (512,))
    whole_logits = 512 * VOCAB * 4
    with AllocatorTrace() as trace:
        chunked_cross_entropy(hidden, weight, targets, chunks=16).backward()
        end = trace.mark()
    # One chunk of logits (1/16), the weight's gradient and the hidden's.
    bound = whole_logits / 16 + weight.numel() * 4 + hidden.numel() * 4 + 65536
    assert trace.peak(0, end) <= bound < whole_logits


# -- apply() -----------------------------------------------------------------------


def llama(tied: bool = False) -> nn.Module:
    config = transformers.LlamaConfig(
        num_hidden_layers=3,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).train()


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(n_layer=3, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=128)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).train()


IDS = torch.randint(0, VOCAB, (2, 128), generator=torch.Generator().manual_seed(1))


def step(model: nn.Module, ids: torch.Tensor = IDS, **kwargs: Any) -> tuple[float, Any]:
    """A step measured by the allocator: (its peak above the start, the output)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)  # the same dropout masks in every model's step
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        out = model(ids, labels=ids, **kwargs)
        loss = out.loss
        out.loss = None
        loss.backward()
        out.loss = loss.detach()
        end = trace.mark()
    return trace.peak(0, end), out


def hf_peak(make: Any) -> int:
    m = make()
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    step(m)
    return int(step(m)[0])


@pytest.mark.parametrize("make", [llama, gpt2, lambda: llama(tied=True)], ids=["llama", "gpt2", "llama-tied"])
def test_below_the_whole_heads_floor_the_plan_chunks_and_trains_like_plain(make: Any) -> None:
    """At 60% of HF checkpointing's peak (every block recomputed; the head
    whole is most of it) no plan with the head whole fits, so remat computes
    it in chunks: the budget holds by the allocator, the prediction is the
    measurement within 2%, the loss and every gradient are plain training's
    within 1e-6 relative, the output has no logits and explain() says why."""
    budget = int(0.6 * hf_peak(make))
    plain = make()
    _, expected = step(plain)
    m = make()
    with steady_profiles():
        plan = rt.apply(m, memory=budget)
        for _ in range(3):
            peak, out = step(m)
    assert plan.loss_chunks is not None and plan.loss_chunks > 1
    assert out.logits is None
    assert "chunks of tokens" in plan.explain() and "logits are None" in plan.explain()
    assert plan.peak_memory is not None
    assert peak <= budget
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory
    assert abs(float(out.loss) - float(expected.loss)) <= 1e-6 * abs(float(expected.loss))
    for (name, p), q in zip(m.named_parameters(), plain.parameters()):
        assert p.grad is not None and q.grad is not None, name
        assert rel(p.grad, q.grad) <= 1e-5, name


def test_a_chunked_head_at_a_shorter_sequence_is_never_predicted_low() -> None:
    """The chunked loss makes the head weight's gradient in its forward,
    which does not shrink with the tokens. A small Llama (vocabulary 256, so
    that gradient is a quarter of the logits at 64 tokens) at 50%, chunks
    made a little faster than the head whole: with the chunked head's figures
    scaled as a whole, its plans at 36, 24 and 12 of 64 tokens kept the head
    in chunks and ran 1.3%, 3.2% and 9.0% above their predictions, each
    above its budget. Read with that gradient kept whole, each step holds
    its budget and its prediction, by the allocator."""
    import dataclasses
    import importlib

    # By its name in sys.modules: remat.torch.apply is also the function.
    applied = importlib.import_module("remat.torch.apply")
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        vocab_size=256,
        attention_dropout=0.1,
    )
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(config).train()
    ids = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(1))
    measured = applied.measure_options

    def cheaper_chunks(*args: Any, **kwargs: Any) -> Any:
        return [dataclasses.replace(o, ms=0.5 if o.chunks != 1 else 1.0) for o in measured(*args, **kwargs)]

    def run(x: torch.Tensor, traced: bool = False) -> int:
        """A step that lets go of the output before the backward (the logits
        with it); under the allocator's trace, its peak (remat measures the
        step itself otherwise)."""
        m.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        if not traced:
            m(x, labels=x).loss.backward()
            return 0
        with AllocatorTrace() as trace:
            trace.exclude_parameter_gradients(m.parameters())
            m(x, labels=x).loss.backward()
            end = trace.mark()
        return trace.peak(0, end)

    with steady_profiles(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(applied, "measure_options", cheaper_chunks)
        plan = rt.apply(m, memory="50%")
        for _ in range(3):
            run(ids)
        assert plan.loss_chunks == 4
        for length in (36, 24, 12):
            short = ids[:, :length]
            run(short)  # plans this length (and remat measures it)
            peak = run(short, traced=True)
            current = plan._current()
            assert current is not None and plan.peak_memory is not None
            assert peak <= plan.peak_memory <= current.total, (length, plan.loss_chunks, peak, plan.peak_memory)


def test_without_loss_options_that_budget_is_infeasible() -> None:
    """The same budget with chunked_loss=False: the head whole does not fit,
    and the error names a smallest budget above it."""
    budget = int(0.6 * hf_peak(llama))
    m = llama()
    plan = rt.apply(m, memory=budget, chunked_loss=False)
    with pytest.raises(remat.InfeasibleError) as e:
        for _ in range(3):
            step(m)
    assert e.value.min_budget is not None and e.value.min_budget > budget
    assert plan.loss_chunks in (None, 1)
    # Found in the first step's backward (under the test's own profiler, so
    # measured by a dispatch mode): raised at the next forward, with nothing
    # of remat's measurement left behind to slow or break later steps.
    assert _get_current_dispatch_mode_stack() == []
    assert not torch.autograd.profiler._is_profiler_enabled


def test_with_room_for_the_head_whole_it_stays_whole_and_gradients_are_bit_identical() -> None:
    """Where the head whole fits and chunks are not faster (steady profiles:
    chunks cost more), the model's own forward computes the loss: logits
    returned, gradients equal to plain training bit for bit."""
    plain = llama()
    _, expected = step(plain)
    m = llama()
    with steady_profiles():
        plan = rt.apply(m, memory="100%")
        for _ in range(3):
            _, out = step(m)
    assert plan.loss_chunks == 1
    assert out.logits is not None and torch.equal(out.logits, expected.logits)
    for p, q in zip(m.parameters(), plain.parameters()):
        assert p.grad is not None and q.grad is not None and torch.equal(p.grad, q.grad)


def test_padding_and_the_trainers_item_count_are_the_models_own_loss() -> None:
    """Labels with -100 (padding) and num_items_in_batch (what HF's Trainer
    passes with gradient accumulation) give plain training's loss and
    gradients when the plan chunks."""
    labels = IDS.clone()
    labels[:, :20] = -100
    budget = int(0.6 * hf_peak(llama))

    def run(model: nn.Module) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = model(IDS, labels=labels, num_items_in_batch=torch.tensor(150)).loss
        loss.backward()
        return loss.detach()

    plain = llama()
    expected = run(plain)
    m = llama()
    with steady_profiles():
        plan = rt.apply(m, memory=budget)
        for _ in range(3):
            got = run(m)
    assert plan.loss_chunks is not None and plan.loss_chunks > 1
    assert abs(float(got) - float(expected)) <= 1e-6 * abs(float(expected))
    for p, q in zip(m.parameters(), plain.parameters()):
        assert p.grad is not None and q.grad is not None and rel(p.grad, q.grad) <= 1e-5


class Capped(transformers.LlamaForCausalLM):  # type: ignore[misc]
    """A causal LM whose forward does more than its head and loss_function (as
    Gemma 2's logit soft-capping does)."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = super().forward(*args, **kwargs)
        if out.loss is not None:
            out.loss = out.loss + 0.5
        return out


def test_a_forward_that_does_more_than_its_head_keeps_its_own_loss() -> None:
    torch.manual_seed(0)
    m = Capped(llama().config).train()
    plain = copy.deepcopy(m)
    plan = rt.apply(m, memory="100%")
    for _ in range(3):
        _, out = step(m)
    _, expected = step(plain)
    assert plan.loss_chunks == 1
    assert "is not the model's own" in plan.explain()
    assert float(out.loss) == float(expected.loss)


def test_remove_puts_the_models_forward_back_and_eval_returns_logits() -> None:
    m = llama()
    own = m.forward
    plan = rt.apply(m, memory="60%")
    assert CausalLMHead.of(m) is not None
    with torch.no_grad():
        assert m(IDS).logits.shape == (2, 128, VOCAB)
    plan.remove()
    assert "forward" not in m.__dict__ and m.forward == own
    rt.apply(m, memory="60%").remove()  # not "already applied"


def test_not_a_causal_lm_has_no_loss_options() -> None:
    assert CausalLMHead.of(nn.Sequential(nn.Linear(2, 2))) is None
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64, vocab_size=100
    )
    assert CausalLMHead.of(transformers.BertModel(config)) is None


def test_a_head_with_hooks_of_its_own_stays_whole_and_they_fire_once_a_step() -> None:
    """Chunks read the head's weight and never call it: a head with hooks
    (FSDP's gathering, an adapter's, a user's) keeps its own forward, even
    below the floor of the head whole (where the error says so)."""
    m = llama()
    calls: list[int] = []
    m.lm_head.register_forward_hook(lambda *_: calls.append(1))
    plan = rt.apply(m, memory="100%")
    for _ in range(3):
        step(m)
    assert plan.loss_chunks == 1 and len(calls) == 3
    assert "has hooks or a forward of its own" in plan.explain()


def test_a_model_that_soft_caps_its_logits_keeps_its_own_forward() -> None:
    """Gemma 2 soft-caps its logits before the loss. On random weights the
    logits are too small for the loss to differ, so the check of the loss
    alone would take chunks (found: gradients 5e-5 off plain's); its config
    says so, and remat keeps the model's forward, even below the floor of the
    head whole."""
    config = transformers.Gemma2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
    )
    assert config.final_logit_softcapping
    torch.manual_seed(0)
    plain = transformers.Gemma2ForCausalLM(config).train()
    m = copy.deepcopy(plain)
    plan = rt.apply(m, memory="100%")
    for _ in range(3):
        _, out = step(m)
    _, expected = step(plain)
    assert plan.loss_chunks == 1 and out.logits is not None
    assert "final_logit_softcapping" in plan.explain()
    assert float(out.loss) == float(expected.loss)
    for p, q in zip(m.parameters(), plain.parameters()):
        assert p.grad is not None and q.grad is not None and torch.equal(p.grad, q.grad)


# -- a model of one's own: LossHead --------------------------------------------


class NanoLM(nn.Module):
    """nanoGPT's shape of forward: ``forward(idx, targets)`` computes the
    logits and the cross-entropy itself and returns ``(logits, loss)``."""

    def __init__(self, vocab: int = VOCAB, d: int = 32, layers: int = 3, loss: str = "ce") -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(layers)
        )
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.loss = loss

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[Any, Any]:
        x = self.emb(idx)
        for b in self.blocks:
            x = x + b(x)
        logits = self.lm_head(x)
        if targets is None:
            return logits, None
        flat = logits.view(-1, logits.size(-1))
        if self.loss == "smoothed":  # not the plain cross-entropy: chunks must not be used
            return logits, nn.functional.cross_entropy(flat, targets.view(-1), ignore_index=-1, label_smoothing=0.1)
        return logits, nn.functional.cross_entropy(flat, targets.view(-1), ignore_index=-1)


def nano(loss: str = "ce") -> NanoLM:
    torch.manual_seed(0)
    return NanoLM(loss=loss)


TARGETS = torch.randint(0, VOCAB, (2, 128), generator=torch.Generator().manual_seed(2))
TARGETS[0, :9] = -1  # nanoGPT's padding


def nano_step(model: nn.Module) -> tuple[int, Any]:
    model.zero_grad(set_to_none=True)
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        out = model(IDS, targets=TARGETS)
        loss = out[1]
        loss.backward()
        end = trace.mark()
    return trace.peak(0, end), (out[0], loss.detach())


def test_a_model_of_ones_own_names_its_head_and_the_plan_chunks_it() -> None:
    """LossHead on a nanoGPT-shaped model: at 40% of plain's peak the head
    whole does not fit and the plan chunks; the output keeps its shape with
    None for the logits; the loss and the gradients are plain's within 1e-6
    relative; the budget holds by the allocator and the prediction is the
    measurement within 2%."""
    plain = nano()
    plain_peak, (_, expected) = nano_step(plain)
    m = nano()
    budget = int(0.4 * plain_peak)
    with steady_profiles():
        plan = rt.apply(m, memory=budget, head=rt.LossHead(m.lm_head, targets="targets", ignore_index=-1))
        for _ in range(3):
            peak, (logits, loss) = nano_step(m)
    assert plan.loss_chunks is not None and plan.loss_chunks > 1, plan.explain()
    assert logits is None and "chunks of tokens" in plan.explain()
    assert plan.peak_memory is not None
    assert peak <= budget
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)
    assert abs(float(loss) - float(expected)) <= 1e-6 * abs(float(expected))
    for (name, p), q in zip(m.named_parameters(), plain.parameters()):
        assert p.grad is not None and q.grad is not None, name
        assert rel(p.grad, q.grad) <= 1e-6, name
    with torch.no_grad():
        assert m(IDS)[0].shape == (2, 128, VOCAB)  # inference: the model's own forward, logits included
    plan.remove()
    assert "forward" not in m.__dict__


def test_a_loss_head_whose_loss_is_not_the_plain_cross_entropy_stays_whole() -> None:
    """Label smoothing is not what chunks compute: the first step's check
    finds the loss differs, the model keeps its own forward, explain() says so."""
    m = nano("smoothed")
    with steady_profiles():
        plan = rt.apply(m, memory="100%", head=rt.LossHead(m.lm_head, ignore_index=-1))
        nano_step(m)
        _, (logits, _) = nano_step(m)
    assert logits is not None and plan.loss_chunks == 1
    assert "the gradient of its loss is not the head and cross-entropy" in plan.explain(), plan.explain()


def test_a_loss_head_is_checked() -> None:
    m = nano()
    with pytest.raises(TypeError, match=r"must be the nn\.Linear"):
        rt.LossHead(m.blocks[0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be a remat\.torch\.LossHead"):
        rt.apply(m, memory="50%", head=m.lm_head)  # type: ignore[arg-type]


def test_the_examples_in_the_docstrings_run() -> None:
    import doctest

    import remat.torch.head
    import remat.torch.offload

    for module in (remat.torch.head, remat.torch.offload):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_chunked_gradients_are_as_close_to_exact_as_plain_fp32s() -> None:
    """Where the chunked loss's gradients differ from plain training's (the
    head's weight gradient summed over chunks in another order), which is
    closer? Against the same computation in float64, the chunked one is, for
    the loss and both gradients: the difference from plain is plain's own
    rounding as much as ours (docs/pytorch.md, "The head and the loss in chunks")."""
    g = torch.Generator().manual_seed(0)
    tokens, hidden_size, vocab = 1024, 64, 8192
    hidden = torch.randn(tokens, hidden_size, generator=g)
    weight = torch.randn(vocab, hidden_size, generator=g) * 0.02
    targets = torch.randint(0, vocab, (tokens,), generator=g)

    def run(dtype: torch.dtype, chunks: int | None) -> list[torch.Tensor]:
        h = hidden.to(dtype, copy=True).requires_grad_()
        w = weight.to(dtype, copy=True).requires_grad_()
        if chunks is None:
            loss = nn.functional.cross_entropy(h @ w.T, targets)
        else:
            loss = chunked_cross_entropy(h, w, targets, chunks=chunks)
        loss.backward()
        assert h.grad is not None and w.grad is not None
        return [loss.detach().double(), h.grad.double(), w.grad.double()]

    exact = run(torch.float64, None)
    plain = [rel(a, b) for a, b in zip(run(torch.float32, None), exact)]
    for chunks in (4, 16):
        ours = [rel(a, b) for a, b in zip(run(torch.float32, chunks), exact)]
        assert all(o <= 1.05 * p for o, p in zip(ours, plain)), (chunks, ours, plain)


def test_a_loss_head_whose_output_holds_more_than_loss_and_logits_stays_whole() -> None:
    """An output remat cannot rebuild with the loss in its place (here a third,
    auxiliary item) keeps the model's forward, and explain() says why."""

    class WithAux(NanoLM):
        def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[Any, Any]:
            logits, loss = super().forward(idx, targets)
            return logits, loss, logits.detach().mean(-1)

    torch.manual_seed(0)
    m = WithAux()
    with steady_profiles():
        plan = rt.apply(m, memory="100%", head=rt.LossHead(m.lm_head, ignore_index=-1))
        for _ in range(2):
            m.zero_grad(set_to_none=True)
            m(IDS, targets=TARGETS)[1].backward()
    assert plan.loss_chunks == 1
    assert "the model returns a tuple with more than its loss and logits" in plan.explain(), plan.explain()


def _whole_runs_out(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """Measuring the head whole on ``rows`` sequences runs out of memory, as
    it does on a GPU where it runs beside the step's own head."""
    import remat.torch.head as head_module

    measured = head_module._measure

    def measure(head: Any, hidden: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args[4] == 1 and hidden.shape[0] == rows:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return measured(head, hidden, *args, **kwargs)

    monkeypatch.setattr(head_module, "_measure", measure)


def test_a_head_too_large_to_measure_whole_is_measured_on_part_of_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the head whole runs out of memory being measured, it is measured
    on 1 and 2 of 8 sequences and extrapolated: the peak is the one measured
    on all 8 (the logits and their gradients are linear in the tokens), the
    chunked options are measured as before, and a batch too small to split
    is a clear error."""
    from remat.torch.head import measure_options
    from remat.torch.profile import _Meter

    m = llama()
    head = CausalLMHead.of(m)
    assert head is not None
    hidden = torch.randn(8, 128, 32, generator=torch.Generator().manual_seed(2))
    labels = torch.randint(0, VOCAB, (8, 128), generator=torch.Generator().manual_seed(3))

    def options() -> list[Any]:
        return measure_options(head, hidden, labels, {}, _Meter(hidden.device, list(m.parameters()), allocator=True))

    real = options()
    _whole_runs_out(monkeypatch, 8)
    parts = options()
    assert [o.chunks for o in parts] == [o.chunks for o in real] == [1, 4, 16]
    assert parts[0].estimated and not any(o.estimated for o in real + parts[1:])
    assert abs(parts[0].peak - real[0].peak) <= 0.005 * real[0].peak
    assert [o.peak for o in parts[1:]] == [o.peak for o in real[1:]]
    assert parts[0].loss == parts[1].loss
    hidden = hidden[:2]
    labels = labels[:2]
    _whole_runs_out(monkeypatch, 2)
    with pytest.raises(torch.OutOfMemoryError, match=r"on 2 sequences ran out of device memory.*lower the batch"):
        options()


def test_a_plan_whose_head_was_measured_in_parts_trains_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through apply(): below the whole head's floor the plan chunks,
    the budget holds by the allocator, the prediction is within 2%, and
    explain() says the head whole was measured on part of the batch."""
    ids = torch.randint(0, VOCAB, (8, 32), generator=torch.Generator().manual_seed(1))
    hf = llama()
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    step(hf, ids)
    budget = int(0.6 * step(hf, ids)[0])
    _whole_runs_out(monkeypatch, 8)
    m = llama()
    with steady_profiles():
        plan = rt.apply(m, memory=budget)
        for _ in range(3):
            peak, _ = step(m, ids)
    assert plan.loss_chunks is not None and plan.loss_chunks > 1
    assert "whole (on part of the batch, extrapolated)" in plan.explain()
    assert plan.peak_memory is not None
    assert peak <= budget
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory


@pytest.mark.slow
def test_compiled_blocks_plan_the_head_in_chunks_and_a_compiled_model_keeps_it_whole() -> None:
    """Below the whole head's floor: with compile=True (remat compiles the
    blocks) the plan chunks the head, within the budget by the allocator and
    with plain's loss; under torch.compile(model) the head is in the model's
    graph, so it stays whole and explain() says so and what to do instead."""
    budget = int(0.6 * hf_peak(llama))
    plain = llama()
    _, expected = step(plain)
    m = llama()
    with steady_profiles():
        plan = rt.apply(m, memory=budget, compile=True)
        for _ in range(3):  # the first steps measure by the allocator themselves
            m.zero_grad(set_to_none=True)
            torch.manual_seed(7)
            m(IDS, labels=IDS).loss.backward()
        peak, out = step(m)
    try:
        assert plan.compiled and plan.loss_chunks is not None and plan.loss_chunks > 1
        assert plan.peak_memory is not None and peak <= budget
        assert abs(float(out.loss) - float(expected.loss)) <= 1e-5 * abs(float(expected.loss))
    finally:
        plan.remove()
        torch._dynamo.reset()
    m = llama()
    plan = rt.apply(m, memory=hf_peak(llama))
    compiled = torch.compile(m)
    try:
        for _ in range(3):
            m.zero_grad(set_to_none=True)
            compiled(IDS, labels=IDS).loss.backward()
        assert plan.loss_chunks == 1
        assert "under torch.compile(model) they are in the model's graph; compile=True" in plan.explain()
    finally:
        plan.remove()
        torch._dynamo.reset()


def test_planned_on_a_small_batch_the_first_step_of_a_large_one_never_holds_the_whole_logits() -> None:
    """The first step of a plan measures the head whole beside the model's own
    (whole) head, which may not fit a GPU where the plan does. Planned with
    example_inputs on a quarter of the batch, the first training step at the
    full batch runs the scaled plan (no profile): in chunks, within the
    budget by the allocator, below what the head whole needs there (without
    example_inputs that first step peaks at 5.4 times this budget)."""
    m = llama()
    ids = torch.randint(0, VOCAB, (8, 128), generator=torch.Generator().manual_seed(4))
    whole_logits = ids.numel() * VOCAB * 4
    budget = whole_logits  # the fp32 logits alone would fill it; their gradient and softmax go over
    with steady_profiles():  # the plan (how many chunks) does not follow the machine's load
        plan = rt.apply(m, memory=budget, example_inputs={"input_ids": ids[:2], "labels": ids[:2]})
        peak, _ = step(m, ids)
    assert plan.profiles == 1 and plan.loss_chunks is not None and plan.loss_chunks > 1
    assert plan.peak_memory is not None and peak <= plan.peak_memory <= budget


def test_a_loss_head_naming_what_the_model_lacks_is_refused_at_apply() -> None:
    """A LossHead whose targets argument the forward lacks, or whose head is
    another model's, was accepted and surfaced at the first chunked step as an
    InfeasibleError about the budget."""

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4))
            self.out = nn.Linear(8, 50)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            for b in self.blocks:
                x = b(x)
            return nn.functional.cross_entropy(self.out(x).view(-1, 50), labels.view(-1))

    model = Tiny()
    with pytest.raises(ValueError, match=r"LossHead\(targets='targets'\).*takes no argument 'targets'.*x, labels"):
        rt.apply(model, memory="50%", head=rt.LossHead(model.out))
    with pytest.raises(ValueError, match="not a submodule of Tiny"):
        rt.apply(model, memory="50%", head=rt.LossHead(nn.Linear(8, 50), targets="labels"))
    plan = rt.apply(model, memory="50%", head=rt.LossHead(model.out, targets="labels"))
    plan.remove()


def test_chunked_loss_with_every_target_ignored_is_nan_with_zero_gradients_as_cross_entropy() -> None:
    """All targets ``ignore_index``: cross_entropy's mean is 0/0 (NaN) and its
    gradients are zero; the chunked loss put NaN in every gradient."""
    h = torch.randn(12, 8, requires_grad=True)
    w = torch.randn(50, 8, requires_grad=True)
    t = torch.full((12,), -100)
    whole = nn.functional.cross_entropy(h @ w.T, t)
    whole.backward()
    expected = (h.grad.clone(), w.grad.clone())  # type: ignore[union-attr]
    h.grad, w.grad = None, None
    chunked = rt.chunked_cross_entropy(h, w, t, chunks=3)
    chunked.backward()
    assert torch.isnan(whole) and torch.isnan(chunked)
    assert torch.equal(h.grad, expected[0]) and torch.equal(w.grad, expected[1])  # type: ignore[arg-type]
    assert not h.grad.any()  # type: ignore[union-attr]


def test_chunked_loss_refuses_a_target_out_of_range_as_cross_entropy_does() -> None:
    h, w = torch.randn(6, 8), torch.randn(50, 8)
    for bad in (-1, 50):
        t = torch.tensor([1, 2, bad, 3, -100, 4])
        with pytest.raises(IndexError):
            nn.functional.cross_entropy(h @ w.T, t)
        with pytest.raises(IndexError, match=rf"target {bad} is out of bounds for 50 classes"):
            rt.chunked_cross_entropy(h, w, t, chunks=2)


def test_a_causal_lms_ignore_index_reaches_the_chunked_loss() -> None:
    """``model(ids, labels=..., ignore_index=0)``: Hugging Face's loss skips the
    zeros; once the head was chunked, remat's counted them (loss and gradients
    off by 8.9 relative)."""
    labels = IDS.clone()
    labels[:, ::3] = 0  # a third of the positions are the ignored index
    plain = llama()
    plain.config.use_cache = False
    torch.manual_seed(7)
    expected = plain(IDS, labels=labels, ignore_index=0).loss
    expected.backward()
    m = llama()
    budget = int(0.6 * hf_peak(llama))
    with steady_profiles():
        plan = rt.apply(m, memory=budget)
        for _ in range(3):
            m.zero_grad(set_to_none=True)
            torch.manual_seed(7)
            loss = m(IDS, labels=labels, ignore_index=0).loss
            loss.backward()
    assert plan.loss_chunks is not None and plan.loss_chunks > 1, plan.explain()
    assert abs(float(loss) - float(expected)) <= 1e-6 * abs(float(expected))
    for (name, p), q in zip(m.named_parameters(), plain.parameters()):
        assert p.grad is not None and q.grad is not None, name
        assert rel(p.grad, q.grad) <= 1e-5, name
