"""remat.torch.apply on models people train, built from their configs with
random weights (nothing is downloaded): Hugging Face GPT-2 and Llama,
torchvision ResNet-50 and DenseNet-121. One call, the training loop unchanged,
loss and gradients bit-identical to plain training, memory as predicted."""

from __future__ import annotations

import importlib
import unittest.mock
import warnings
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import pytest
import torch
from torch import nn
from torch_models import (
    IDS,
    allocator_peak,
    allocator_step,
    assert_same_gradients,
    gpt2,
    llama,
    lm_step,
    steady_profiles,
)

import remat
import remat.torch as rt

transformers = pytest.importorskip("transformers")
torchvision = pytest.importorskip("torchvision")

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _steady() -> Iterator[None]:
    """Every plan here is solved from steady times (torch_models.steady): the
    tests compare a plan's predicted peak with the measured one, and a plan
    solved from measured times changes with the machine's load."""
    with steady_profiles():
        yield


@pytest.fixture
def deterministic() -> Any:
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_hf_model_in_one_call(make: Callable[[], nn.Module], deterministic: Any) -> None:
    plain, ours = make(), make()
    keys = list(ours.state_dict())
    plan = rt.apply(ours, memory="50%")
    assert plan.where in ("transformer.h", "model.layers") and len(plan.modules) == 4
    lm_step(ours)  # profiles, solves, measures the embeddings, head and loss
    lp, plain_peak = lm_step(plain)
    lo, peak = lm_step(ours)
    assert torch.equal(lp, lo)
    assert_same_gradients(plain, ours)
    assert list(ours.state_dict()) == keys
    assert plan.schedule is not None and plan.peak_memory is not None
    # What the executor holds is what the model counts, head and loss included
    # (and the gradient of the tied word embeddings, which autograd holds until
    # the embeddings' backward).
    predicted = plan.peak_memory
    assert abs(peak - predicted) <= 0.02 * predicted, (peak, predicted)
    assert peak < 0.6 * plain_peak
    assert "blocks of" in plan.explain()
    plan.remove()
    assert all("forward" not in m.__dict__ for m in plan.modules)


def test_a_budget_is_met_or_the_error_names_the_smallest(deterministic: Any) -> None:
    # HF's all-or-nothing switch: its measured peak as remat's budget. On this
    # tiny model remat's smallest budget may lie above it (the model counts one
    # forward overhead for recording and plain forwards alike; see
    # docs/pytorch.md), and the error then says what fits.
    hf = llama()
    hf.gradient_checkpointing_enable()
    _, hf_peak = lm_step(hf)
    ours = llama()
    plan = rt.apply(ours, memory=hf_peak)
    try:
        lm_step(ours)
        budget = hf_peak
    except remat.InfeasibleError as e:
        assert e.min_budget > hf_peak
        plan.remove()
        ours = llama()
        budget = int(e.min_budget) + 2 * (1 << 20)  # the stack's minimum plus what lies outside it
        plan = rt.apply(ours, memory=budget)
        lm_step(ours)
    _, peak = lm_step(ours)
    assert plan.peak_memory is not None and plan.peak_memory <= budget
    assert peak <= budget


def test_a_longer_sequence_is_profiled_again_and_its_peak_holds() -> None:
    """GPT-2 with attention dropout (its T x T scores are saved), profiled at
    32 tokens and run at 64: scaled by the elements between blocks, that plan
    was predicted low (the scores grow with the square of the length). A
    longer sequence is profiled again, so the prediction holds (within 2%
    low, 3% high); a shorter one after it reuses that profile, predicted
    high, never low."""
    ours = gpt2()
    plan = rt.apply(ours, memory="60%")
    for _ in range(2):
        lm_step(ours, IDS[:, :32])
    assert plan.profiles == 1
    for _ in range(2):
        _, peak = lm_step(ours)
    assert plan.profiles == 2
    predicted = plan.peak_memory
    # Never more than 2% low; up to 3% high, where the head whole measured by
    # itself (at 32 tokens, scaled) is above what the step measured after the
    # stack: it is a floor of that part (see the GPT-Neo test below).
    assert predicted is not None and 0.97 * predicted <= peak <= 1.02 * predicted, (peak, predicted)
    for _ in range(2):
        _, peak = lm_step(ours, IDS[:, :48])
    assert plan.profiles == 2
    assert plan.peak_memory is not None and peak <= plan.peak_memory


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_a_shorter_sequence_is_read_off_a_fit_of_its_square(make: Callable[[], nn.Module]) -> None:
    """Decoders with attention dropout (their T x T scores and masks are
    saved), profiled at 64 tokens and run at 40 with no new profile. Scaled
    by the elements between blocks, the scores were predicted 1.6 times as
    large as they are, and the census' decoders and encoders 5-8% high. The
    first step also profiles the stack at 32 tokens, and each size is read off
    ``c + a t + b t^2`` through the two: the step holds its budget, never
    above the prediction, within 2% of it, by the allocator."""
    model = make()
    with steady_profiles():
        plan = rt.apply(model, memory="60%")
        for _ in range(3):
            allocator_step(model)
        assert plan.profiles == 1
        entry = plan._last[0] if plan._last is not None else None
        assert entry is not None and entry.shorter is not None
        # The captures keep no block input from one step to the next.
        assert plan._captured_first is None
        short = IDS[:, :40]
        allocator_step(model, short)  # the plan at 40 tokens, solved
        peak = allocator_step(model, short)
    current = plan._current()
    assert plan.profiles == 1 and current is not None and plan.peak_memory is not None
    assert peak <= current.total, (peak, current.total)
    # High by at most 2% and what of the head's weights' gradients the step's
    # peak may not hold: their bytes are kept whole in the head's scaled peak,
    # as the head's figures were measured on one step (before, every
    # parameter outside the stack was: 4.3% high here on Llama).
    head = plan._head_gradients
    assert 0 < head < sum(p.numel() * p.element_size() for p in model.parameters())
    assert peak <= plan.peak_memory <= 1.02 * peak + head * (1 - 40 / 64), (peak, plan.peak_memory, head)


@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_a_sequence_below_half_is_sized_at_its_own_length(make: Callable[[], nn.Module]) -> None:
    """Below half the profiled length the fit through T and T/2 reads every
    size at least at its linear scaling (a constant part, a weight's
    gradient, would be read low past the two lengths): GPT-2 and Llama at 12
    to 28 of 64 tokens measured 0.81-0.87 of their predictions. Such a length
    has its stacks' sizes profiled on the step's own inputs (once each, not a
    new profile of the times), and its first step measures the parts
    outside the stack: the next step holds within 1% of its prediction, never
    above it, by the allocator."""
    model = make()
    with steady_profiles():
        plan = rt.apply(model, memory="60%")
        for _ in range(2):
            allocator_step(model)
        entry = plan._last[0] if plan._last is not None else None
        assert entry is not None and entry.shorter is not None and not entry.sized
        for length in (28, 16):
            short = IDS[:, :length]
            model.zero_grad(set_to_none=True)
            model(input_ids=short, labels=short).loss.backward()  # sized, and measured by remat
            peak = allocator_step(model, short)
            assert plan.profiles == 1 and plan.peak_memory is not None
            assert 0.99 * plan.peak_memory <= peak <= plan.peak_memory, (length, peak, plan.peak_memory)
        assert len(entry.sized) == 2
        allocator_step(model, IDS[:, :40])  # above half: the fit, not sized
        assert len(entry.sized) == 2


def test_an_encoder_decoder_counts_the_gradient_of_the_encoders_output() -> None:
    """BART plans its decoder; every decoder block reads the encoder's output
    (cross-attention), whose gradient autograd accumulates through the
    decoder's backward. The plan sets its bytes aside (before, it was left out
    and five encoder-decoders of the census measured 1.2-1.9% above their
    smallest budget): the budget holds by the allocator, the prediction is
    within 2%, and the gradients are plain training's bit for bit."""
    import transformers

    config = transformers.BartConfig(
        d_model=64,
        encoder_layers=2,
        decoder_layers=4,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        vocab_size=256,
        max_position_embeddings=128,
    )

    def make() -> nn.Module:
        torch.manual_seed(0)
        return transformers.BartForConditionalGeneration(config).train()

    ids = IDS % 256
    plain, ours = make(), make()
    budget = int(0.6 * allocator_step(plain, ids))
    plan = rt.apply(ours, memory=budget)
    for _ in range(2):
        torch.manual_seed(7)
        ours.zero_grad(set_to_none=True)
        ours(input_ids=ids, labels=ids).loss.backward()
    peak = allocator_step(ours, ids)
    encoder_output = ids.numel() * config.d_model * 4
    assert f"the gradients of the blocks' side inputs {remat.format_size(encoder_output)}" in plan.explain()
    assert plan.peak_memory is not None and peak <= budget
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)
    assert_same_gradients(plain, ours)


class _Widening(nn.Module):
    """A stack whose blocks each take side inputs of their own: block i's
    ``scale`` has its own width and ``tokens`` its own sequence length (as
    Swin's stages take their own ``input_dimensions``), so block 1's side
    inputs fail every later block. The model's forward draws from NumPy and
    torch before the stack (as Wav2Vec2's SpecAugment masks do)."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32, 64, 32)) -> None:
        super().__init__()
        self.scales = nn.ParameterList(nn.Parameter(torch.rand(w)) for w in widths[1:])
        self.blocks = nn.ModuleList(_WideningBlock(a, b) for a, b in zip(widths, widths[1:]))
        self.inp = nn.Linear(4, widths[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import numpy

        h = self.inp(x) * float(numpy.random.rand() + 0.5)
        h = torch.nn.functional.dropout(h, 0.1, self.training)
        for i, (block, scale) in enumerate(zip(self.blocks, self.scales)):
            h = block(h, scale=scale * (i + 1), tokens=h.shape[1])
        return h.square().mean()


class _WideningBlock(nn.Module):
    def __init__(self, a: int, b: int) -> None:
        super().__init__()
        self.fc = nn.Linear(a, b)

    def forward(self, h: torch.Tensor, *, scale: torch.Tensor, tokens: int) -> torch.Tensor:
        y = torch.nn.functional.gelu(self.fc(h)) * scale
        return torch.nn.functional.dropout(y.reshape(-1, tokens, y.shape[-1]), 0.1, self.training)


def _live_step(model: nn.Module, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, int]:
    """One step from fixed torch and NumPy states: the loss and the peak of
    live bytes (parameter gradients excluded)."""
    import numpy

    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    numpy.random.seed(7)
    with rt.LiveBytes() as live:
        live.exclude_parameter_gradients(model.parameters())
        out = model(*args, **kwargs)
        loss = out if isinstance(out, torch.Tensor) else out.loss
        loss.backward()
        value = loss.detach()
        del loss, out
    return value, live.peak


def test_blocks_with_side_inputs_of_their_own_are_profiled_on_their_own_calls() -> None:
    """Each block is profiled with its own side inputs, seen by running the
    model's forward once more up to the last block (nothing saved, every random
    generator put back). Before, every block got the first block's, and
    block 2's profile failed on the first block's ``scale``. Now it trains:
    gradients and loss bit-identical to plain training (the extra forward
    moved neither torch's nor NumPy's generator), within its budget, as
    predicted."""
    x = torch.randn(4, 16, 4)

    def make() -> nn.Module:
        torch.manual_seed(0)
        return _Widening().train()

    plain, ours = make(), make()
    plain_loss, plain_peak = _live_step(plain, x)
    with steady_profiles():
        plan = rt.apply(ours, memory=int(0.7 * plain_peak), blocks=ours.blocks)
        for _ in range(2):
            _live_step(ours, x)
    loss, peak = _live_step(ours, x)
    assert torch.equal(loss, plain_loss)
    assert_same_gradients(plain, ours)
    assert plan.peak_memory is not None and plan.budget is not None
    assert peak <= int(0.7 * plain_peak), (peak, plain_peak)
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)
    assert plan.profiles == 1


def test_hf_swin_stages_train_with_their_own_input_dimensions() -> None:
    """Hugging Face Swin: the stack is its 4 stages, each called with its own
    ``input_dimensions`` (halved per stage). Before, the profile ran stage 2
    with stage 1's and failed ("shape '[4, 32, 32, 32]' is invalid"); now the
    census model trains at the smallest budget 50% names, within it, as
    predicted, with plain training's gradients bit for bit."""
    import transformers

    config = transformers.SwinConfig(
        image_size=64,
        patch_size=2,
        embed_dim=16,
        depths=[1, 1, 2, 1],
        num_heads=[1, 2, 2, 4],
        window_size=4,
        num_labels=10,
    )

    def make() -> nn.Module:
        torch.manual_seed(0)
        return transformers.SwinForImageClassification(config).train()

    g = torch.Generator().manual_seed(4)
    images = torch.randn(4, 3, 64, 64, generator=g)
    labels = torch.randint(0, 10, (4,), generator=g)
    plain, ours = make(), make()
    plain_loss, plain_peak = _live_step(plain, pixel_values=images, labels=labels)
    budget = int(0.6 * plain_peak)
    with steady_profiles():
        plan = rt.apply(ours, memory=budget)
        for _ in range(2):
            _live_step(ours, pixel_values=images, labels=labels)
    loss, peak = _live_step(ours, pixel_values=images, labels=labels)
    assert plan.where == "swin.encoder.layers" and len(plan.blocks) == 4
    assert torch.equal(loss, plain_loss)
    assert_same_gradients(plain, ours)
    assert plan.peak_memory is not None
    assert peak <= budget, (peak, budget)
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)


def _planned_lm_peak(model: nn.Module, ids: torch.Tensor, memory: int | str) -> tuple[rt.AppliedPlan, int]:
    """``model`` (a causal LM) applied at ``memory`` on steady figures (the
    plan follows no measured time), three steps, then a step's peak by the
    allocator."""
    with steady_profiles():
        plan = rt.apply(model, memory=memory)
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()
        return plan, allocator_step(model, ids)


def _at_the_smallest_budget(
    make: Callable[[], nn.Module], step: Callable[[nn.Module], object]
) -> tuple[rt.AppliedPlan, nn.Module, int | str]:
    """A fresh ``make()`` applied at 50%, or at the smallest budget each
    InfeasibleError names (as a user would raise ``memory=``), three steps
    run on steady figures; the plan, the model and the memory it runs at."""
    memory: int | str = "50%"
    with steady_profiles():
        for _ in range(4):
            model = make()
            plan = rt.apply(model, memory=memory)
            try:
                for _ in range(3):
                    step(model)
                return plan, model, memory
            except remat.InfeasibleError as e:
                assert e.min_budget is not None
                memory = int(e.min_budget)
    pytest.fail(f"no budget found: {memory}")


def test_gpt_neo_under_the_input_option_is_predicted_within_2_percent() -> None:
    """GPT-Neo at 50% of storing everything: three blocks recorded under the
    input option. The step measured 5.9% above the prediction (3,283,560 B
    against 3,101,184 B), its peak in the head's backward
    (``_log_softmax_backward_data``): the first step's measurement of the part
    after the stack credited the head with 256 KiB it did not free, the
    attention weights the third block returns, which the model's loop holds
    through the last block's call and drops as the forward returns."""
    import transformers

    config = transformers.GPTNeoConfig(
        num_layers=4,
        hidden_size=64,
        num_heads=4,
        attention_types=[[["global", "local"], 2]],
        window_size=16,
        max_position_embeddings=128,
        vocab_size=256,
    )
    torch.manual_seed(0)
    model = transformers.GPTNeoForCausalLM(config).train()
    ids = IDS % 256
    plan, peak = _planned_lm_peak(model, ids, "50%")
    assert plan.peak_memory is not None
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)


def test_bloom_counts_its_tied_gradient_and_not_the_attention_weights_as_room() -> None:
    """Bloom at 50%: the head's backward leaves the tied embedding's gradient
    (64 KiB, held by autograd until the embeddings' backward) for the whole
    stack's backward, and frees the attention weights the third block
    returned (256 KiB, held by the model's loop through the last block's
    call), which the chain never counted. Crediting that freeing to the head
    hid the tied gradient: with blocks' backwards measured as they run, the
    step measured 2.2% above its prediction."""
    import transformers

    config = transformers.BloomConfig(n_layer=4, hidden_size=64, n_head=4, vocab_size=256)
    torch.manual_seed(0)
    model = transformers.BloomForCausalLM(config).train()
    ids = IDS % 256
    budget = allocator_step(model, ids) // 2
    plan, peak = _planned_lm_peak(model, ids, budget)
    assert plan.peak_memory is not None
    assert peak <= budget, (peak, budget)
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)


def test_opt_sets_aside_the_embeddings_inputs_for_the_forward_only() -> None:
    """OPT at 50%: its token and position embeddings (128 KiB, made before the
    stack and held by the model's code until its forward returns) are gone
    by the stack's backward, more than the head leaves (its tied gradient,
    64 KiB). The budget set all that is before the stack aside for the whole
    step, and OPT was predicted 3.3% high; now what is gone is counted in the
    forward phase only, and the prediction is within 2% (32 B low on the
    allocator's count, 2026-11-28)."""
    import transformers

    config = transformers.OPTConfig(
        num_hidden_layers=4,
        hidden_size=64,
        ffn_dim=128,
        num_attention_heads=4,
        word_embed_proj_dim=64,
        max_position_embeddings=128,
        vocab_size=256,
    )
    torch.manual_seed(0)
    model = transformers.OPTForCausalLM(config).train()
    ids = IDS % 256
    budget = allocator_step(model, ids) // 2
    plan, peak = _planned_lm_peak(model, ids, budget)
    assert plan.peak_memory is not None
    assert plan._last is not None and plan._last[0].outside is not None and plan._last[0].outside.released > 0
    assert peak <= budget, (peak, budget)
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)


def test_two_towers_are_found_in_the_order_the_model_calls_them() -> None:
    """CLIP and SigLIP run their vision tower, then their text tower: both
    are found as one plan's stacks, in that order (their forward's code names
    them so). With the text tower alone CLIP's smallest budget was 92% of
    plain training's peak (the census' CLIP); with both, about 55% there, and
    50% here, with plain training's gradients, as predicted."""
    text = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    clip_config = transformers.CLIPConfig(
        text_config={**text, "vocab_size": 64, "max_position_embeddings": 16},
        vision_config={**text, "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    siglip_config = transformers.SiglipConfig(
        text_config={**text, "vocab_size": 64, "max_position_embeddings": 16},
        vision_config={**text, "image_size": 32, "patch_size": 8},
    )
    siglip = transformers.SiglipModel(siglip_config)
    assert [w for w, _ in rt.find_stacks(siglip)] == ["vision_model.encoder.layers", "text_model.encoder.layers"]

    def make() -> nn.Module:
        torch.manual_seed(0)
        return transformers.CLIPModel(clip_config).train()

    g = torch.Generator().manual_seed(5)
    batch = {
        "input_ids": torch.randint(0, 64, (4, 16), generator=g),
        "pixel_values": torch.randn(4, 3, 32, 32, generator=g),
        "return_loss": True,
    }
    plain = make()
    assert [w for w, _ in rt.find_stacks(plain)] == ["vision_model.encoder.layers", "text_model.encoder.layers"]
    plain_loss, plain_peak = _live_step(plain, **batch)
    plan, ours, memory = _at_the_smallest_budget(make, lambda m: _live_step(m, **batch))
    with steady_profiles():
        loss, peak = _live_step(ours, **batch)
    assert len(plan.stacks) == 2
    assert peak <= 0.6 * plain_peak, (peak, plain_peak, memory)
    assert plan.peak_memory is not None and abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory
    assert torch.equal(loss, plain_loss)
    assert_same_gradients(plain, ours)


def test_a_unet_plans_its_down_and_up_blocks_together() -> None:
    """A diffusers U-Net's up blocks read the skip connections its down blocks
    made: both are found, down then up, as one plan's stacks (the middle
    block between them a stage recorded once). With the up blocks alone the
    census' U-Net named 77% of plain training's peak as its smallest budget;
    with both, 60%. At the smallest budget here the step trains within it,
    as predicted, with plain training's gradients."""
    diffusers = pytest.importorskip("diffusers")

    def make() -> nn.Module:
        torch.manual_seed(0)
        return diffusers.UNet2DModel(  # type: ignore[no-any-return]
            sample_size=16,
            in_channels=3,
            out_channels=3,
            layers_per_block=1,
            block_out_channels=(8, 16),
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"),
            norm_num_groups=4,
            attention_head_dim=4,
        ).train()

    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    t = torch.tensor(10)

    def run(m: nn.Module) -> torch.Tensor:
        m.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        loss = m(x, t).sample.square().mean()
        loss.backward()
        return loss.detach()

    def step(m: nn.Module) -> tuple[torch.Tensor, int]:
        """A step's loss and its peak by the allocator (parameter gradients excluded)."""
        from remat.torch.memory import AllocatorTrace

        with AllocatorTrace() as trace:
            trace.exclude_parameter_gradients(m.parameters())
            loss = run(m)
            end = trace.mark()
        return loss, trace.peak(0, end)

    plain = make()
    assert [w for w, _ in rt.find_stacks(plain)] == ["down_blocks", "up_blocks"]
    skips: list[list[torch.Tensor]] = []
    hooks = [
        b.register_forward_pre_hook(
            lambda _, a, kw: skips.append(list(kw.get("res_hidden_states_tuple", a[1:2] and a[1]))), with_kwargs=True
        )
        for b in plain.up_blocks
    ]
    out: list[torch.Tensor] = []
    hooks.append(plain.down_blocks[-1].register_forward_hook(lambda _, a, y: out.append(y[0])))
    plain_loss, plain_peak = step(plain)
    for h in hooks:
        h.remove()
    plan, ours, memory = _at_the_smallest_budget(make, run)
    with steady_profiles():
        loss, peak = step(ours)
    assert len(plan.stacks) == 2 and plan.peak_memory is not None
    assert peak <= plan.peak_memory and (memory == "50%" or peak <= memory), (peak, memory)
    # The skip connections' gradients held from the up block that reads each
    # to the down block that made it (set aside for the whole step, they made
    # the census' U-Net's prediction 8.6% high, this one's 7.2%). Not counted
    # at all before (they come as a tuple), the step's peak was in an up
    # block's backward, 870 KiB above the chain's figure for it there. The
    # last up block's backward counted those it makes twice (its profile's
    # transient and the running gradient): 6.2% high. Measured once, this
    # step ran 3,136 B above its prediction, in the up block after it, whose
    # backward the skip connections' buffers outlive (each gradient a slice
    # of a concatenation's): counted then, 4.1% high. What was left: the
    # last up block's backward frees its saved tensors before it makes its
    # gradients, and the rest of each concatenation's buffer, counted in the
    # running gradient, was in its measured peak too: taken off as what that
    # backward frees (docs/model.md, "The four operations"), 0.999.
    assert 0 <= plan.peak_memory - peak <= 0.01 * plan.peak_memory, (peak, plan.peak_memory)
    # The skip connections' gradients (nested in a tuple) are counted, the
    # time embedding's too. Of the skip connections remat keeps all but the
    # stack's input (conv_in's output, held by every schedule) and the down
    # blocks' output (the middle block's input, which the chain holds).
    nbytes = [t.numel() * t.element_size() for ts in skips for t in ts]
    temb = 2 * plain.time_embedding.linear_2.out_features * 4
    conv_in = 2 * plain.conv_in.out_channels * 16 * 16 * 4
    down = out[0].numel() * out[0].element_size()
    note = plan.explain()
    assert f"the gradients of the blocks' side inputs {remat.format_size(sum(nbytes) + temb)}" in note, note
    assert f"remat keeps to run blocks again {remat.format_size(sum(nbytes) - conv_in - down)}" in note, note
    assert peak < 0.75 * plain_peak, (peak, plain_peak)
    assert torch.equal(loss, plain_loss)
    assert_same_gradients(plain, ours)


def test_a_side_inputs_gradient_is_held_from_its_last_reader_to_its_maker() -> None:
    """Where in the backward the chain holds each side input's gradient
    (docs/model.md, "Side inputs"): from the backward of the last block that
    reads it to that of the block that made it, in the running gradients
    delta^k; in the forward phase nowhere (set aside for the whole step
    before, the census' U-Net was predicted 8.6% high)."""
    from remat.torch.apply import _SideGradients
    from remat.torch.stages import Call

    def grad(n: int) -> torch.Tensor:
        return torch.zeros(n, requires_grad=True).clone()  # 4 bytes an element, not a leaf

    x = grad(1)
    made, out, outside = grad(10), grad(100), grad(1000)
    found = _SideGradients()
    found.stack_input(x)
    # Stage 1 returns its output and an intermediate; stage 2 reads the
    # output (merged into delta^1 by B^2) and stage 4 too; stage 3 reads the
    # intermediate (used up by B^1); stages 2 and 3 read a tensor made
    # before the stack (held down to delta^0); stage 4 reads the stack's input.
    found.returned(1, (out, made), out)
    found.add(Call.of((grad(1), out), {"extra": outside}), 2)
    found.add(Call.of((grad(1), made), {"extra": outside}), 3)
    found.add(Call.of((grad(1), out), {"extra": x}), 4)
    f = found.figures(4)
    assert found.total == 4 * (10 + 100 + 1000 + 1)
    #          delta^0   delta^1          delta^2                delta^3
    assert f.held == [4000, 4000 + 40 + 4, 4000 + 40 + 400 + 4, 400 + 4, 0]
    # Counted in delta^k and delta^{k-1} while B^k runs (alive once then).
    assert f.twice == [0, 4000, 4000 + 40 + 4, 400 + 4, 0]
    # Out of place where a block after it read the same tensor.
    assert f.summed == [0, 0, 4000 + 400, 0, 0]


def test_a_new_sequence_length_reuses_the_profile() -> None:
    ours = gpt2()
    plan = rt.apply(ours, memory="60%")
    lm_step(ours)
    first = plan.chain
    for length in (32, 48, 64):
        lm_step(ours, IDS[:, :length])
    assert plan.profiles == 1
    assert plan.chain is not None and first is not None
    assert plan.chain.input_size == first.input_size  # back at 64 tokens: the same plan
    lm_step(ours, IDS[:, :32])
    assert plan.chain.input_size * 2 == first.input_size


def test_generate_runs_without_remat() -> None:
    ours = gpt2()
    rt.apply(ours, memory="50%")
    lm_step(ours)
    ours.eval()
    out = ours.generate(IDS[:1, :8], max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 12)


def vision_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, measured: bool = True) -> int:
    """A step and its peak by the allocator (parameter gradients excluded);
    not measured (0) where remat measures the step itself (two profilers
    cannot nest)."""
    from remat.torch.memory import AllocatorTrace

    model.zero_grad(set_to_none=True)
    if not measured:
        nn.functional.cross_entropy(model(x), y).backward()
        return 0
    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        del loss
        end = trace.mark()
    return trace.peak(0, end)


@pytest.mark.parametrize("name", ["resnet50", "densenet121"])
def test_torchvision_model_with_no_hand_split(name: str, deterministic: Any) -> None:
    def make() -> nn.Module:
        torch.manual_seed(0)
        return getattr(torchvision.models, name)(num_classes=10).train()

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 64, 64, generator=g), torch.randint(0, 10, (4,), generator=g)
    plain, ours = make(), make()
    plan = rt.apply(ours, memory="50%")
    assert plan.where == {"resnet50": "layer1..layer4", "densenet121": "features"}[name]
    vision_step(ours, x, y, measured=False)
    for _ in range(2):
        vision_step(plain, x, y)
    peak = vision_step(ours, x, y)
    assert_same_gradients(plain, ours)
    for (bn, a), b in zip(plain.named_buffers(), ours.buffers()):
        assert torch.equal(a, b), bn  # BatchNorm statistics moved once per step
    assert plan.peak_memory is not None and plan.schedule is not None
    assert peak <= plan.peak_memory
    assert peak >= 0.94 * plan.peak_memory, (peak, plan.peak_memory)
    assert plan.schedule.peak_memory <= remat.simulate(plan.chain, plan.schedule).peak_memory  # type: ignore[arg-type]


def test_sequential_with_an_in_place_first_op_profiles_and_trains() -> None:
    # nn.Sequential(*resnet.children()) has ReLU(inplace=True) as a stage of its own.
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=10).train()
    stages = nn.Sequential(*list(net.children())[:-1], nn.Flatten(), net.fc)
    torch.manual_seed(0)
    net2 = torchvision.models.resnet18(num_classes=10).train()
    plain = nn.Sequential(*list(net2.children())[:-1], nn.Flatten(), net2.fc)
    x = torch.randn(2, 3, 32, 32)
    chain = rt.profile(stages, x, repeat=1)
    ours = rt.Checkpointed(stages, remat.min_memory(chain, "auto"), chain=chain)
    for m in (plain, ours):
        torch.manual_seed(3)
        m(x).square().sum().backward()
    assert_same_gradients(plain, stages)


@pytest.mark.slow
def test_torch_compile_after_apply() -> None:
    # Two eager steps, then the model compiled: the compiled forward gets a plan
    # of its own, its blocks run compiled (test_torch_compiled.py has the rest).
    import torch._dynamo
    import torch._inductor.config as inductor

    # Dynamo gives up on a code object after recompile_limit entries, and
    # transformers' forwards share one (its deprecation wrapper): a process
    # that compiled many models before runs this one eagerly.
    torch._dynamo.reset()
    plain, ours = gpt2(), gpt2()
    plan = rt.apply(ours, memory="50%")
    for _ in range(2):  # measure, then plan with the outside parts
        lm_step(ours)
    assert not plan.compiled and plan.profiles == 1
    compiled = torch.compile(ours)
    lm_step(plain)
    with unittest.mock.patch.object(inductor, "fallback_random", True):  # eager random numbers, compiled
        for _ in range(2):
            ours.zero_grad(set_to_none=True)
            torch.manual_seed(7)
            compiled(IDS, labels=IDS).loss.backward()
    assert plan.compiled and plan.profiles == 2
    for p, q in zip(plain.parameters(), ours.parameters()):
        assert p.grad is not None and q.grad is not None
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_a_budget_below_the_embeddings_backward_names_it() -> None:
    # Tied embeddings of a large vocabulary and little else: after the stack's
    # backward, the embedding gradient, the head's pending one and their sum
    # are the step's peak, which no schedule of the blocks can lower.
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=8192, n_positions=16)
    ids = IDS[:1, :8]

    def make() -> nn.Module:
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(config).train()

    roomy = make()
    plan = rt.apply(roomy, memory=1 << 40)
    assert plan.pending_gradients == 8192 * 32 * 4  # the tied word embeddings
    for _ in range(2):
        _, peak = lm_step(roomy, ids)
    floor = plan.peak_memory
    assert floor is not None and floor >= 2 * plan.pending_gradients  # the embeddings' backward
    assert abs(peak - floor) <= 0.02 * floor
    tight = make()
    rt.apply(tight, memory=floor - 4096)
    with pytest.raises(remat.InfeasibleError, match=r"the backward of the part before transformer\.h") as info:
        lm_step(tight, ids)  # measures the parts outside the stack
        lm_step(tight, ids)  # planned with them
    assert info.value.min_budget is not None and info.value.min_budget > floor - 4096


@pytest.mark.parametrize("when", ["before", "after"])
def test_hf_gradient_checkpointing_is_taken_over(when: str) -> None:
    """Hugging Face's own checkpointing, turned on before apply() or after it
    (as the Trainer does with gradient_checkpointing=True), would checkpoint
    each block inside remat's schedule: remat turns it off with a warning,
    the step runs the blocks as the plan says, and remove() turns it back on."""
    model = gpt2()
    # transformers 5 renamed it (the old name warns); the Trainer calls either.
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    if when == "before":
        enable()
    runs = [0]
    # A pre-hook: non-reentrant checkpointing stops a recomputation early, before the forward hook.
    model.transformer.h[1].mlp.register_forward_pre_hook(lambda *_: runs.__setitem__(0, runs[0] + 1))

    def step() -> int:
        runs[0] = 0
        lm_step(model)
        return runs[0]

    with pytest.warns(UserWarning, match="gradient checkpointing is on") if when == "before" else nullcontext():
        plan = rt.apply(model, memory="50%")
    step()  # profiles, solves, measures
    assert plan.schedule is not None
    ops = plan.schedule.operations_with_options
    # Block 2's runs as the schedule says: each forward, and the rerun at the
    # start of its backward of a forward recorded under an option.
    scheduled = sum(1 for k, l, _ in ops if k != "B" and l == 2) + sum(
        1 for k, l, o in ops if k == "F_all" and l == 2 and o
    )
    assert step() == scheduled
    if when == "after":
        enable()
        with pytest.warns(UserWarning, match=r"remat's plan replaces it"):
            assert step() == scheduled
    assert step() == scheduled
    flags = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    assert flags and not any(m.gradient_checkpointing for m in flags)
    plan.remove()
    assert all(m.gradient_checkpointing for m in flags)
    assert step() == 2  # HF's checkpointing again: the forward and its recomputation


def _held_step(model: nn.Module) -> tuple[torch.Tensor, int]:
    """A step of the usual loop, which holds the output through the backward
    (``out = model(...); out.loss.backward()``), as plan_on() counts it."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    with rt.LiveBytes() as live:
        live.exclude_parameter_gradients(model.parameters())
        out = model(IDS, labels=IDS)
        out.loss.backward()
        value = out.loss.detach()
        del out
    return value, live.peak


def test_a_plan_before_training_predicts_the_first_step(deterministic: Any) -> None:
    """apply(..., example_inputs=) plans without a training step: gradients,
    buffers and the RNG as they were; the first training step then runs that
    plan (no second profile) at the predicted peak, with plain's gradients."""
    plain, ours = gpt2(), gpt2()
    for p in ours.parameters():
        p.grad = torch.full_like(p, 3.0)  # a user's accumulated gradient: left alone
    state = {k: v.clone() for k, v in ours.state_dict().items()}
    rng = torch.get_rng_state()
    plan = rt.apply(ours, memory="50%", example_inputs={"input_ids": IDS, "labels": IDS})
    assert torch.equal(rng, torch.get_rng_state())
    assert all(p.grad is not None and bool((p.grad == 3.0).all()) for p in ours.parameters())
    assert all(torch.equal(v, ours.state_dict()[k]) for k, v in state.items())
    predicted, schedule, time = plan.peak_memory, str(plan.schedule), plan.step_time
    assert predicted is not None and time is not None and time > 0
    assert "predicted peak" in plan.explain()
    lp, _ = _held_step(plain)
    lo, peak = _held_step(ours)
    assert plan.profiles == 1 and str(plan.schedule) == schedule and plan.peak_memory == predicted
    assert torch.equal(lp, lo)
    assert_same_gradients(plain, ours)
    assert abs(peak - predicted) <= 0.02 * predicted, (peak, predicted)
    assert peak <= plan.memory if isinstance(plan.memory, int) else True


def test_a_plan_before_training_keeps_batchnorm_statistics() -> None:
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(2, 3, 64, 64)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    # Its convolutions' backward workspaces (the allocator's count) make 91%
    # of storing everything its smallest budget at this batch.
    plan = rt.apply(model, memory="95%", example_inputs=x, example_loss=lambda out: out.square().mean())
    assert plan.schedule is not None and plan.peak_memory is not None
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())  # running stats, batches tracked


def test_a_plan_before_training_names_what_is_wrong() -> None:
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(2, 3, 64, 64)
    with pytest.raises(TypeError, match=r"example_loss="):
        rt.apply(model, memory="90%", example_inputs=x)  # logits, not a loss
    assert all("forward" not in m.__dict__ for m in model.modules())  # left as it was
    with pytest.raises(TypeError, match=r"example_inputs must be a tensor"):
        rt.apply(model, memory="90%", example_inputs=[x])
    with pytest.raises(ValueError, match=r"example_inputs=, which is missing"):
        rt.apply(model, memory="90%", example_loss=lambda out: out.sum())
    with pytest.raises(remat.InfeasibleError) as e:
        rt.apply(model, memory=10_000, example_inputs=x, example_loss=lambda out: out.sum())
    assert e.value.min_budget > 10_000
    assert all("forward" not in m.__dict__ for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    with torch.no_grad(), pytest.raises(RuntimeError, match=r"call it with gradients enabled"):
        rt.apply(model, memory="90%", example_inputs=x, example_loss=lambda out: out.sum())
    frozen = torchvision.models.resnet18(num_classes=10).requires_grad_(False)
    with pytest.raises(RuntimeError, match=r"does not require a gradient: is the model frozen\?"):
        rt.apply(frozen, memory="90%", example_inputs=x, example_loss=lambda out: out.sum())
    assert all("forward" not in m.__dict__ for m in frozen.modules())


def test_the_smallest_budget_is_named_once_and_is_enough() -> None:
    """Below what the stack alone needs, the first step runs it at its least to
    measure the rest of the step (with a warning); the next step names the
    smallest budget for the whole step, and that budget trains, its peak at
    most the budget by the allocator. Before, the first step named the
    stack's own figure, which the whole step could not meet (ResNet-18:
    9,965,576 B named, then 12,587,536 B)."""
    x = torch.randn(2, 3, 64, 64)

    def make() -> nn.Module:
        torch.manual_seed(0)
        return torchvision.models.resnet18(num_classes=10)

    model = make()
    with steady_profiles():
        plan = rt.apply(model, memory=200_000)
        with pytest.warns(UserWarning, match="this first step runs it at that"):
            model(x).square().mean().backward()
        with pytest.raises(remat.InfeasibleError) as e:
            model(x).square().mean().backward()
        plan.remove()
        least = e.value.min_budget
        assert least is not None and least > 200_000
        model = make()
        plan = rt.apply(model, memory=int(least))
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            # Tensor bytes, as the eager profile counts them on the CPU (the
            # allocator also sees oneDNN's convolution workspaces there).
            with rt.LiveBytes() as live:
                live.exclude_parameter_gradients(model.parameters())
                model(x).square().mean().backward()
    assert plan.schedule is not None
    assert live.peak <= least, (live.peak, least)


def albert() -> nn.Module:
    config = transformers.AlbertConfig(
        vocab_size=512,
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )
    torch.manual_seed(0)
    return transformers.AlbertForMaskedLM(config).train()


def test_one_layer_called_n_times_is_n_stages(deterministic: Any) -> None:
    """ALBERT calls one shared layer group num_hidden_layers times: remat finds
    the six calls as six stages (it used to find no stack), recomputes some,
    and trains with plain's loss and gradients to the bit, dropout included,
    at the predicted peak within 2%; remove() leaves the model as it was."""
    plain, ours = albert(), albert()
    plan = rt.apply(ours, memory="50%")
    assert len(plan.modules) == 6 and len({id(m) for m in plan.modules}) == 1
    assert "6 calls of 1 shared group" in plan.where
    lm_step(ours)
    lp, plain_peak = lm_step(plain)
    lo, peak = lm_step(ours)
    assert torch.equal(lp, lo)
    assert_same_gradients(plain, ours)
    assert plan.schedule is not None and plan.peak_memory is not None
    ops = plan.schedule.operations_with_options
    assert sum(1 for k, l, _ in ops if k != "B" and l <= 6) > 6 or any(o for _, _, o in ops)
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)
    assert peak < 0.6 * plain_peak
    plan.remove()
    assert all("forward" not in m.__dict__ for m in ours.modules())


def test_a_layer_of_ones_own_called_n_times_is_named_n_times() -> None:
    class Looped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 16))
            self.head = nn.Linear(16, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(5):
                x = x + self.layer(x)
            return self.head(x)

    def make() -> Looped:
        torch.manual_seed(0)
        return Looped()

    x = torch.randn(32, 16)
    plain, ours = make(), make()
    # 70%: the layer's summed gradient (alive through the backward, set aside)
    # is large beside this small model's activations, and each block's input
    # is the model's x + layer(x), not the block before's output (below).
    plan = rt.apply(ours, memory="70%", blocks=[ours.layer] * 5)
    assert len(plan.modules) == 5
    for m in (plain, ours):
        for _ in range(2):
            m.zero_grad(set_to_none=True)
            m(x).square().sum().backward()
    assert plan.schedule is not None
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(plain.parameters(), ours.parameters()))  # type: ignore[arg-type]
    # A rerun of block l-1 gives layer(x), not block l's input: blocks 1-4 are
    # never run plain (it gave wrong gradients where a plan ran them so).
    ops = plan.schedule.operations_with_options
    assert not [op for op in ops if op[0] in ("F_ck", "F_none") and op[1] <= 4], ops
    assert "blocks 2-5 take what the model's code makes of the block before's output" in plan.explain()


def test_a_block_input_the_profile_did_not_see_made_by_the_model_raises_then_plans() -> None:
    """Where the model's forward cannot run again to show each block's call
    (FSDP2, or a forward that fails so), the step finds a block whose input
    is not the block before's output as it runs: it raises if its plan would
    remake that input by running the block before again, and the next step
    plans with it, its gradients plain training's."""

    class Looped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(
                nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 16)) for _ in range(4)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = x + layer(x)
            return x

    def make() -> Looped:
        torch.manual_seed(0)
        return Looped()

    x = torch.randn(32, 16)
    plain, ours = make(), make()
    with steady_profiles():
        plan = rt.apply(ours, memory="70%", blocks="layers")
        plan._capture = lambda: None  # type: ignore[method-assign]
        raised = 0
        for _ in range(4):
            ours.zero_grad(set_to_none=True)
            try:
                ours(x).square().sum().backward()
            except RuntimeError as e:
                assert "does not take block" in str(e) and "run the step again" in str(e), e
                raised += 1
    plain.zero_grad(set_to_none=True)
    plain(x).square().sum().backward()
    assert raised == 1  # the first step's plan recomputed across them (steady figures: always so)
    assert plan.schedule is not None and plan._last is not None and plan._last[0].derived == {2, 3, 4}
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(plain.parameters(), ours.parameters()))  # type: ignore[arg-type]


def test_wav2vec2_with_layerdrop_trains_as_plain() -> None:
    """Wav2Vec2 leaves layers out of training steps at random (LayerDrop,
    0.3 here): each left-out layer is the identity for that step and the
    plan holds; over 8 seeds (about two layers of six left out per step) the
    gradients are plain training's to the bit. It used to fail on 2 seeds of
    10 with "block 3 ran when block 2 was expected"."""
    config = transformers.Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=6,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        vocab_size=20,
        layerdrop=0.3,
        mask_time_prob=0.0,
    )

    def make() -> nn.Module:
        torch.manual_seed(0)
        return transformers.Wav2Vec2ForCTC(config).train()

    x = torch.randn(2, 4000, generator=torch.Generator().manual_seed(1))
    labels = torch.randint(1, 20, (2, 20), generator=torch.Generator().manual_seed(2))
    plain, ours = make(), make()
    plan = rt.apply(ours, memory="50%")
    assert plan.where == "wav2vec2.encoder.layers"
    left_out = 0
    for seed in range(8):
        for m in (plain, ours):
            m.zero_grad(set_to_none=True)
            torch.manual_seed(seed)
            m(x, labels=labels).loss.backward()
        # A layer left out has no gradient, in both.
        for (name, p), q in zip(plain.named_parameters(), ours.parameters()):
            assert (p.grad is None) == (q.grad is None), name
            assert p.grad is None or torch.equal(p.grad, q.grad), name
        left_out += sum(
            1 for layer in ours.wav2vec2.encoder.layers if layer.feed_forward.output_dense.weight.grad is None
        )
    assert left_out > 0
    assert plan.schedule is not None
    ops = plan.schedule.operations_with_options
    assert sum(1 for k, l, _ in ops if k != "B" and l <= 6) > 6 or any(o for _, _, o in ops)


def test_scaling_a_profile_keeps_the_weight_gradient_of_a_backward() -> None:
    """A profile scaled to another input size (no new profile) takes up to a
    block's largest weight's bytes of its backward transient as fixed (the
    weight's gradient does not shrink with the batch; docs/census.md measured
    a ResNet-50 planned at batch 4 up to 50% low at batch 2 when every byte
    was scaled): smaller inputs keep that part, larger ones scale it, so
    neither direction predicts it low. A transient below the weight's bytes
    may be the weight's gradient less the room the stage's output left (freed
    before its backward, counted by the chain), a room that shrinks with the
    input (ResNet-50 at batch 2 measured 1.5% above its plan without this)."""
    apply_module = importlib.import_module("remat.torch.apply")
    chain = remat.Chain.from_dict(
        {
            "name": "two",
            "input_size": 100,
            "stages": [
                {
                    "forward_time": 1,
                    "backward_time": 1,
                    "output_size": 100,
                    "saved_size": 400,
                    "backward_overhead": 1000,
                },
                {
                    "forward_time": 1,
                    "backward_time": 1,
                    "output_size": 100,
                    "saved_size": 400,
                    "backward_overhead": 300,
                },
            ],
        }
    )
    fixed = [800, 800]  # the largest weight of each block, in bytes
    half = apply_module._scaled(chain, 0.5, fixed).to_dict()["stages"]
    double = apply_module._scaled(chain, 2.0, fixed).to_dict()["stages"]
    plain_half = apply_module._scaled(chain, 0.5).to_dict()["stages"]
    assert plain_half[0]["backward_overhead"] == 500  # every byte scaled: the old reading
    assert half[0]["backward_overhead"] == 800 + 200 // 2  # the weight's 800 kept, the rest halved
    # All of it could be the weight's (kept), or the weight's 800 less the
    # room of 500 the stage's output left, which halves with it: the larger.
    assert half[1]["backward_overhead"] == 800 - 500 // 2
    assert double[0]["backward_overhead"] == 2000 and double[1]["backward_overhead"] == 600  # scaled up in full
    assert half[0]["saved_size"] == 200  # activations scale as before


class _OneShot(_Widening):
    """Reads its input from an iterator: its forward cannot run twice on the
    same arguments."""

    def forward(self, batches: Iterator[torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        return super().forward(next(batches))


def test_blocks_with_side_inputs_of_their_own_get_an_error_that_says_what_to_do() -> None:
    """Where the model's forward cannot run again to show each block's own
    call, remat warns, profiles every block with the first block's side
    inputs, and a block that cannot take them fails with an error that says
    why and what to do; naming blocks that share their side inputs trains."""
    torch.manual_seed(0)
    model = _OneShot().train()
    x = torch.randn(4, 16, 4)
    rt.apply(model, memory="60%", blocks=model.blocks)
    with (
        pytest.warns(UserWarning, match=r"forward again to see each block's own side inputs failed \(StopIteration"),
        pytest.raises(ValueError, match=r"first block's side inputs .* apply\(\.\.\., blocks=\.\.\.\)"),
    ):
        model(iter([x]))


def _encoder_decoder(kind: str) -> Callable[[], nn.Module]:
    """The census' T5 or BART (4 + 4 layers of width 64), built from its config."""
    import transformers

    if kind == "t5":
        config: Any = transformers.T5Config(
            d_model=64,
            d_ff=128,
            num_layers=4,
            num_decoder_layers=4,
            num_heads=4,
            d_kv=16,
            vocab_size=256,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        )
        cls: Any = transformers.T5ForConditionalGeneration
    else:
        config = transformers.BartConfig(
            d_model=64,
            encoder_layers=4,
            decoder_layers=4,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            vocab_size=256,
            max_position_embeddings=128,
        )
        cls = transformers.BartForConditionalGeneration

    def make() -> nn.Module:
        torch.manual_seed(0)
        return cls(config).train()

    return make


@pytest.mark.parametrize("kind", [pytest.param("t5", marks=pytest.mark.slow), "bart"])
def test_an_encoder_decoder_plans_both_stacks_below_hf_checkpointing(kind: str) -> None:
    """The encoder's and the decoder's stacks are one chain, the model's code
    between them a stage recorded once (docs/model.md, "Several stacks").
    Before, the decoder alone was planned: 50% of storing everything had no
    schedule (the smallest budget was 53-56% of plain's peak) and T5 measured
    above its budget. Now, by the allocator: 50% holds, as predicted, with
    plain training's loss and gradients bit for bit; and the smallest budget
    remat names is met and lies below what HF's own checkpointing measures."""
    make = _encoder_decoder(kind)
    ids = IDS % 256
    plain, ours, probe, hf = make(), make(), make(), make()
    plain_peak = allocator_step(plain, ids)
    hf.gradient_checkpointing_enable()
    hf_peak = allocator_step(hf, ids)
    with steady_profiles():
        plan = rt.apply(ours, memory="50%")
        for _ in range(2):
            ours.zero_grad(set_to_none=True)
            torch.manual_seed(7)
            ours(input_ids=ids, labels=ids).loss.backward()
        peak = allocator_step(ours, ids)
        # The smallest budget, as the error names it, then met.
        rt.apply(probe, memory=1)
        with pytest.warns(UserWarning), pytest.raises(remat.InfeasibleError) as e:
            for _ in range(2):
                allocator_step(probe, ids)
        least = e.value.min_budget
        assert least is not None
        tight = make()
        rt.apply(tight, memory=least)
        for _ in range(2):
            allocator_step(tight, ids)
        tight_peak = allocator_step(tight, ids)
    assert [w for w, _ in plan.stacks] == [
        "encoder.block" if kind == "t5" else "model.encoder.layers",
        "decoder.block" if kind == "t5" else "model.decoder.layers",
    ]
    explained = plan.explain()
    assert "stacks, planned together" in explained and "(measured)" in explained
    assert "of 8 blocks (numbered as the chain's stages)" in explained
    assert plan.budget is not None and plan.peak_memory is not None
    whole = int(0.5 * plain_peak) + plain_peak // 20  # "50%" is of remat's store-all figure, within 5% of plain's
    assert peak <= whole, (peak, plain_peak)
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)
    torch.manual_seed(7)
    ours.zero_grad(set_to_none=True)
    loss = ours(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.manual_seed(7)
    plain.zero_grad(set_to_none=True)
    plain_loss = plain(input_ids=ids, labels=ids).loss
    plain_loss.backward()
    assert torch.equal(loss.detach(), plain_loss.detach())
    assert_same_gradients(plain, ours)
    assert tight_peak <= least, (tight_peak, least)
    assert tight_peak < hf_peak, (tight_peak, hf_peak)


class _TwoStacks(nn.Module):
    """An encoder stack, code between (a norm, the decoder's input), and a
    decoder stack whose blocks read the encoder's output; its input comes from
    an iterator, so its forward cannot run twice."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.enc = nn.ModuleList(nn.Linear(d, d) for _ in range(2))
        self.norm = nn.LayerNorm(d)
        self.dec = nn.ModuleList(_Reading(d) for _ in range(2))

    def forward(self, batches: Iterator[torch.Tensor]) -> torch.Tensor:
        x = next(batches)
        h = x
        for block in self.enc:
            h = torch.tanh(block(h))
        memory = self.norm(h)
        y = x * 2
        for block in self.dec:
            y = block(y, memory=memory)
        return y.square().mean()


class _Reading(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, y: torch.Tensor, *, memory: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(y) + memory)


def test_several_stacks_whose_inputs_cannot_be_seen_get_an_error_that_says_what_to_do() -> None:
    """A later stack's input is seen by running the model's forward once more;
    where that cannot run, the error says so and names one stack to plan."""
    torch.manual_seed(0)
    model = _TwoStacks()
    plan = rt.apply(model, memory="60%", blocks=["enc", "dec"])
    assert plan.stacks == [("enc", 2), ("dec", 2)] and len(plan.blocks) == 4
    with pytest.warns(UserWarning, match="forward again"), pytest.raises(ValueError, match=r"blocks='dec'"):
        model(iter([torch.randn(4, 16)]))


def test_the_executor_refuses_a_schedule_that_runs_the_code_between_stacks_again() -> None:
    """A bridge stage is the model's code: a schedule that does not record it
    once in the forward phase is refused before anything runs."""
    from remat.torch.executor import Executor, Program

    stages = [nn.Linear(2, 2), nn.Identity(), nn.Linear(2, 2)]
    ops = [("F_ck", 1), ("F_ck", 2), ("F_all", 3), ("F_all", 4), ("B", 4), ("B", 3), ("B", 2), ("F_all", 1), ("B", 1)]
    with pytest.raises(ValueError, match="the part between two stacks"):
        Executor(stages, Program(3, ops), bridges=[2])
    recorded = [("F_all", 1), ("F_all", 2), ("F_all", 3), ("F_all", 4), ("B", 4), ("B", 3), ("B", 2), ("B", 1)]
    Executor(stages, Program(3, recorded), bridges=[2])


class _Stage(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(nn.Linear(width, width) for _ in range(depth)))


def test_the_stack_found_holds_at_least_half_the_parameters_of_the_fullest() -> None:
    """Stages of unequal depth, as timm's ConvNeXt has them: the longest list
    (the deep middle stage's six blocks) holds under half the parameters the
    list of stages holds, so the stages are the stack. Before, the six blocks
    were, and the census' timm ConvNeXt had no schedule below 195% of plain
    training's peak; with its stages it trains at 50%."""
    model = nn.Module()
    model.stages = nn.Sequential(_Stage(8, 1), _Stage(16, 6), _Stage(64, 2))
    where, blocks = rt.find_blocks(model)
    assert where == "stages" and len(blocks) == 3
    # Where the longest list holds half or more, it is the one, unless it lies
    # inside one block of a stack of blocks of one class.
    model.stages = nn.Sequential(_Stage(8, 1), _Stage(64, 6), _Stage(64, 2))
    assert rt.find_blocks(model)[0] == "stages"
    model.stages = nn.Sequential(nn.Linear(8, 64), _Stage(64, 6), nn.Linear(64, 8))
    where, blocks = rt.find_blocks(model)
    assert where == "stages.1.blocks" and len(blocks) == 6


def test_a_layer_called_n_times_counts_its_summed_gradient(deterministic: Any) -> None:
    """Autograd sums the gradients of a layer called several times (ALBERT's
    shared group) from the last call's backward to the first's: the sum is
    alive beside every later recomputation and backward. Counted now in those
    operations' transients; left out, the census' ALBERT measured above its
    budget at 50%, and at 40% it is predicted 3.9% low. Plans on fixed times;
    peaks by the allocator."""
    config = transformers.AlbertConfig(
        vocab_size=256,
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
    )

    def make() -> nn.Module:
        torch.manual_seed(0)
        return transformers.AlbertForMaskedLM(config).train()

    ids = IDS % 256
    for memory in ("40%", "50%", "60%"):
        ours = make()
        with steady_profiles():
            plan = rt.apply(ours, memory=memory)
            for _ in range(2):
                allocator_step(ours, ids)
            peak = allocator_step(ours, ids)
        assert plan.peak_memory is not None and plan.budget is not None
        whole = plan.peak_memory - plan.schedule.peak_memory + plan.budget if plan.schedule else None
        assert whole is not None and peak <= whole, (memory, peak, whole)
        assert abs(peak - plan.peak_memory) <= 0.01 * plan.peak_memory, (memory, peak, plan.peak_memory)


class _TiedBlock(nn.Module):
    def __init__(self, shared: nn.Linear) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.tanh(self.fc1(x)))


class _Tied(nn.Module):
    """Six blocks of their own sharing one layer (``fc2``)."""

    def __init__(self) -> None:
        super().__init__()
        shared = nn.Linear(512, 256)
        self.inp = nn.Linear(8, 256)
        self.blocks = nn.ModuleList(_TiedBlock(shared) for _ in range(6))
        self.head = nn.Linear(256, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


@pytest.mark.parametrize(
    "memory",
    [
        "75%",
        pytest.param(
            "60%",
            marks=pytest.mark.xfail(
                strict=True,
                reason="open: 4% over its budget, 256 KiB (an output's or half the shared weight's bytes) unexplained",
            ),
        ),
    ],
)
def test_blocks_sharing_a_layer_count_its_summed_gradient(memory: str) -> None:
    """Blocks of their own sharing a layer: its gradients are summed from the
    last block's backward to the first's, beside the plan's own transients
    (round 5: 1.16x the budget at 60%, 1.10x at 75%). Plans on fixed times;
    peaks by the allocator."""
    torch.manual_seed(0)
    model = _Tied()
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(1))
    with steady_profiles():
        plan = rt.apply(model, memory=memory)
        for _ in range(3):
            allocator_peak(model, x)
        measured = allocator_peak(model, x)
    assert plan.budget is not None and measured <= plan.budget, measured / plan.budget


def test_a_small_stack_is_found_over_the_layers_inside_one_of_its_blocks() -> None:
    """A two-block T5 decoder: its first block's three layers hold more than
    half its parameters and are more, but they lie inside one block of a stack
    of blocks of one class, which is the one found (the census' preliminary
    run got ``decoder.block.0.layer``, which failed while profiled)."""
    config = transformers.T5Config(num_layers=2, d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=64)
    t5 = transformers.T5ForConditionalGeneration(config)
    assert [(w, len(b)) for w, b in rt.find_stacks(t5)] == [("encoder.block", 2), ("decoder.block", 2)]


def _live_peak(model: nn.Module, x: torch.Tensor) -> int:
    """A step's peak by LiveBytes, parameter gradients excluded (the census')."""
    model.zero_grad(set_to_none=True)
    with rt.LiveBytes() as live:
        live.exclude_parameter_gradients(model.parameters())
        model(x).square().mean().backward()
    return live.peak


def _at_half_the_batch(model: nn.Module, x: torch.Tensor, peak_of: Callable[[nn.Module, torch.Tensor], int]) -> int:
    """A step at half of ``x``'s batch (its plan solved there), then another
    whose peak ``peak_of`` measures."""
    small = x[: len(x) // 2].clone()
    model.zero_grad(set_to_none=True)
    model(small).square().mean().backward()
    return peak_of(model, small)


def test_a_cnn_whose_stem_is_its_first_block() -> None:
    """MobileNet-V3's stack is its ``features``, whose first block reads the
    model's input, made before the step: the chain counts that a^0
    throughout, a step's peak (above what the step starts with) does not.
    It was counted, and the plan was predicted 5.0% high (timm's ConvNeXt
    3.3%; the census of 2026-11-28); now it is set aside as given, and the
    measured peak is the prediction within 2%, within the budget.

    Then at half the batch, no new profile: the classifier's backward holds
    its 2.25 MiB weight's gradient, its bias's and a few scalars, none of
    which shrink with the batch. Only the largest weight was kept unscaled
    there, and the step measured 2 KiB above the scaled prediction and
    0.4 KiB above the plan's budget (the census' second shape); every
    parameter outside the stack is now."""
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(num_classes=10).train()
    x = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with steady_profiles():
        plan = rt.apply(model, memory="50%")
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
        peak = _live_peak(model, x)
        current = plan._current()
        assert plan._last is not None and plan._last[0].outside is not None
        assert plan._last[0].outside.given == x.numel() * x.element_size()
        assert "made before the step" in plan.explain()
        assert current is not None and plan.peak_memory is not None
        assert peak <= current.total, (peak, current.total)
        assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)

        peak = _at_half_the_batch(model, x, _live_peak)
        current = plan._current()
        assert plan.profiles == 1 and current is not None and plan.peak_memory is not None
        assert peak <= current.total, (peak, current.total)
        assert peak <= plan.peak_memory, (peak, plan.peak_memory)


def test_a_resnet_at_half_its_batch_holds_its_budget() -> None:
    """ResNet-50 profiled at batch 4 and run at batch 2, no new profile. Two
    figures were read low there, and the step measured 0.6% above its budget
    (the census' second shape): the options' workspaces, which need not halve
    with the batch (now measured on half the batch, as their stages are), and
    the stem's batch-norm statistics and the loss's scalars, which do not
    shrink (the parts outside the stack keep a part unscaled)."""
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=10).train()
    x = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with steady_profiles(), warnings.catch_warnings():
        # At half the batch 50% has no schedule: it runs at its smallest budget.
        warnings.simplefilter("ignore", RuntimeWarning)
        plan = rt.apply(model, memory="50%")
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
        peak = _at_half_the_batch(model, x, allocator_peak)
    current = plan._current()
    assert plan.profiles == 1 and current is not None and plan.peak_memory is not None
    assert plan._captured_first is None  # no block input kept from the capture (a whole activation)
    assert any("options" in s for s in current.chain.to_dict()["stages"])
    assert peak <= current.total, (peak, current.total)
    assert peak <= plan.peak_memory, (peak, plan.peak_memory)
    assert plan.peak_memory - peak <= 0.02 * peak, (peak, plan.peak_memory)


def test_a_first_step_under_the_users_own_profiler() -> None:
    """remat measures a first step by the allocator's events, which need a
    profiler of its own; where the user's ``torch.profiler`` runs through that
    step (two cannot nest), the blocks and the rest of the step are measured
    by ``LiveBytes`` instead, nothing raises, the step trains with plain
    training's gradients, and the plan holds its budget by that measure."""
    plain, ours = gpt2(), gpt2()
    lm_step(plain)
    with steady_profiles():
        plan = rt.apply(ours, memory="50%")
        with torch.profiler.profile(profile_memory=True):
            lm_step(ours)
        lm_step(ours)
        _, peak = lm_step(ours)
    assert plan.profiles == 1 and plan.peak_memory is not None
    current = plan._current()
    assert current is not None and peak <= current.total, (peak, current.total)
    assert abs(peak - plan.peak_memory) <= 0.02 * plan.peak_memory, (peak, plan.peak_memory)
    lm_step(plain)
    assert_same_gradients(plain, ours)


def test_a_smaller_batch_that_a_share_cannot_fit_runs_within_the_larger_ones_budget() -> None:
    """ResNet-50 at 50% of storing everything, batch 4, then batch 2 (the last
    batch of an epoch): its convolutions' backward workspaces do not shrink
    with the batch, so 50% of storing everything at batch 2 has no schedule.
    Before, that step raised InfeasibleError in the middle of training; now
    it runs at its smallest budget, which is within what batch 4 was planned
    in, with a warning, and its peak by the allocator is within the memory
    batch 4 was planned in. (It measured 0.6% above its own raised budget,
    2026-11-28: the parts outside the stack, scaled to half the batch, hold a
    convolution's workspace that does not shrink; docs/census.md.)"""
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=10).train()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 64, 64, generator=g), torch.randint(0, 10, (4,), generator=g)
    with steady_profiles():
        plan = rt.apply(model, memory="50%")
        for _ in range(3):
            vision_step(model, x, y, measured=False)
        larger = plan._current()
        assert larger is not None
        with pytest.warns(RuntimeWarning, match=r"has no schedule at this smaller input"):
            vision_step(model, x[:2], y[:2], measured=False)
        peak = vision_step(model, x[:2], y[:2])
    smaller = plan._current()
    assert smaller is not None and plan.peak_memory is not None and plan.profiles == 1
    assert "raised to" in plan.explain()
    assert smaller.total <= larger.total
    assert peak <= larger.total, (peak, larger.total)


class _Reads(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, s1: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
        return x + self.b(torch.relu(self.a(x * s1 + s2)))


class _SideTwice(nn.Module):
    """Blocks that read one tensor made before them twice, or two chunks of it."""

    def __init__(self, chunks: bool, d: int = 64) -> None:
        super().__init__()
        self.chunks = chunks
        self.pre = nn.Linear(d, 2 * d if chunks else d)
        self.blocks = nn.ModuleList(_Reads(d) for _ in range(4))
        self.head = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.pre(x)
        s1, s2 = c.chunk(2, dim=-1) if self.chunks else (c, c)
        for blk in self.blocks:
            x = blk(x, s1, s2)
        return self.head(x).square().mean()


@pytest.mark.parametrize("chunks", [False, True], ids=["twice", "chunks"])
def test_a_side_input_read_twice_or_in_chunks_is_never_predicted_low(chunks: bool) -> None:
    """A block's profile holds each side input's gradient as the step does
    and takes those the block makes last off its transient; the chain holds
    them per storage. One tensor passed twice was two tensors once detached
    (two gradients taken off, one held), and two chunks of one tensor two
    gradients taken off where the chain held one chunk's: steps measured
    15,872 B above their prediction at 100%, 90% and 70% of storing
    everything. Each budget here: measured by the allocator, within the
    budget and at most the prediction."""
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))

    def make() -> nn.Module:
        torch.manual_seed(0)
        return _SideTwice(chunks)

    with steady_profiles():
        for memory in ("100%", "90%", "70%"):
            m = make()
            plan = rt.apply(m, memory=memory)
            for _ in range(3):
                m.zero_grad(set_to_none=True)
                m(x).backward()
            peak = allocator_peak(m, x, lambda y: y)
            assert plan.peak_memory is not None
            assert peak <= plan.peak_memory, (memory, peak, plan.peak_memory)


class _Masked(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x + self.b(torch.relu(self.a(x)) * mask)


class _Alternating(nn.Module):
    """Blocks that take one of two masks made before the stack by turns, as
    Gemma 2's take its sliding window's mask and the full one; with
    ``inside``, the blocks after the second take a mask the loop makes
    after the first block instead (what the executor keeps, and plain
    training would free after the forward)."""

    def __init__(self, inside: bool, d: int = 64) -> None:
        super().__init__()
        self.inside = inside
        self.pre = nn.Linear(d, d)
        self.blocks = nn.ModuleList(_Masked(d) for _ in range(4))
        self.head = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pre(x)
        masks = [(x.repeat(1, 4) > 0).float(), (x.repeat(1, 4) < 1).float()]
        for i, blk in enumerate(self.blocks):
            mask = masks[i % 2]
            if self.inside and i == 1:
                masks = [(h.detach().repeat(1, 4) > 0).float()] * 2
            h = blk(h, mask)
        return self.head(h).square().mean()


@pytest.mark.parametrize("inside", [False, True], ids=["before", "inside"])
def test_a_side_input_made_before_the_stack_is_not_counted_again_where_a_later_block_reads_it(inside: bool) -> None:
    """A side input only later blocks read is kept by the executor to run
    them again, and counted for the whole step, where the loop made it
    after the first block. One made before the stack is what the step
    holds before it (measured with the outside): Gemma 2's full mask,
    which its second block reads first, was counted twice (its census
    prediction 1.4% high, 2.3% at 48 tokens)."""
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    mask = 4 * x.numel() * x.element_size()

    torch.manual_seed(0)
    m = _Alternating(inside)
    with steady_profiles():
        # Storing everything: a schedule whose prediction has nothing else
        # to be high by (with options, a block recorded under one frees its
        # output at the backward after it, which the chain holds until its own).
        plan = rt.apply(m, memory="100%")
        for _ in range(3):
            m.zero_grad(set_to_none=True)
            m(x).backward()
        peak = allocator_peak(m, x, lambda y: y)
    assert plan.peak_memory is not None
    note = plan.explain()
    kept = f"side inputs made inside a stack that remat keeps to run blocks again {remat.format_size(mask)}"
    assert (kept in note) == inside, note
    assert peak <= plan.peak_memory, (peak, plan.peak_memory)
    assert plan.peak_memory - peak <= 0.01 * plan.peak_memory, (peak, plan.peak_memory)


class _Biased(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        scores = torch.softmax(h @ h.transpose(1, 2) + bias, dim=-1)
        return h + self.fc(scores @ h)


class _Squared(nn.Module):
    """The code before the stack makes a tensor that grows as the square of
    the sequence (a relative-position bias, as DeBERTa's), and the head has
    weights of its own."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.emb = nn.Linear(d, d)
        self.blocks = nn.ModuleList(_Biased(d) for _ in range(4))
        self.head = nn.Linear(d, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        bias = torch.einsum("btd,bsd->bts", x, x)
        for blk in self.blocks:
            h = blk(h, bias)
        return self.head(h).logsumexp(-1).mean()


def test_a_new_shapes_parts_outside_the_stack_are_measured_on_its_first_step() -> None:
    """The parts outside the stack were measured on the first shape's step
    and scaled for every other; what grows as the square of the sequence
    before the stack, and the head's weight gradients (kept whole when
    scaled), were then predicted high at a shorter sequence (DeBERTa-v2 at
    48 of 64 tokens 2.2%, Whisper at half the batch 3.1%). A new shape's
    first step measures them: its next steps are predicted as a plan made
    at that shape would be."""
    g = torch.Generator().manual_seed(1)
    long, short = torch.randn(4, 64, 32, generator=g), torch.randn(4, 40, 32, generator=g)
    torch.manual_seed(0)
    m = _Squared()
    with steady_profiles():
        plan = rt.apply(m, memory="60%")
        for x in (long, long, long, short, short):
            m.zero_grad(set_to_none=True)
            m(x).backward()
        peak = allocator_peak(m, short, lambda y: y)
    assert plan.peak_memory is not None and plan.profiles == 1
    assert peak <= plan.peak_memory, (peak, plan.peak_memory)
    assert plan.peak_memory - peak <= 0.01 * plan.peak_memory, (peak, plan.peak_memory)
