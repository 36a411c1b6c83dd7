"""profile() measures what the model defines, exactly where the sizes are known."""

from __future__ import annotations

import gc
import importlib
import json
import math
import weakref
from typing import Any

import pytest
import torch
from torch import nn
from torch_models import cnn

import remat
import remat.torch as rt

F32 = 4


def stages(chain: remat.Chain) -> list[dict]:
    return chain.to_dict()["stages"]


def test_linear_stages_have_exact_sizes() -> None:
    # The example: a 256x1024 Linear at batch 256 keeps only its output
    # (its input and weight are not its own activations).
    batch = 256
    model = nn.Sequential(
        nn.Linear(256, 1024),  # saves its input and weight: nothing of its own
        nn.Sequential(nn.Linear(1024, 512), nn.ReLU()),  # ReLU saves its output
        nn.Sequential(nn.Linear(512, 128), nn.Linear(128, 64)),  # the second saves the first's output
        nn.GELU(),  # saves its input (the previous output): nothing of its own
    )
    x = torch.randn(batch, 256)
    chain = rt.profile(model, x, repeat=1)
    s = stages(chain)
    assert chain.to_dict()["input_size"] == batch * 256 * F32
    assert s[0]["output_size"] == s[0]["saved_size"] == 1_048_576
    assert s[1]["output_size"] == s[1]["saved_size"] == batch * 512 * F32
    assert s[2]["output_size"] == batch * 64 * F32
    assert s[2]["saved_size"] == batch * (128 + 64) * F32
    assert s[3]["output_size"] == s[3]["saved_size"] == batch * 64 * F32
    for stage in s:
        assert stage["gradient_size"] == stage["output_size"]
    # Without autograd the intermediate of stage 3 lives until the second Linear ends.
    assert s[2]["forward_overhead"] == batch * 128 * F32
    # Stage 1's backward: its input's gradient is delta^0 (not overhead), its
    # weight and bias gradients are transient until accumulated into .grad,
    # in the room of a^1, which the model counts through B^1 (in abar^1) while
    # a step has freed it (stage 2's backward was its last reader).
    assert s[0]["backward_overhead"] == (1024 * 256 + 1024) * F32 - s[0]["output_size"]


class _Residual(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


def test_a_residual_backward_is_measured_as_it_runs_between_two_stages() -> None:
    """B^l of a residual block inside a chain: autograd alone holds the
    gradient the next stage hands it, so it sums the two branches' gradients
    into that buffer in place. A profile whose caller held that gradient saw a
    new buffer instead, one activation more (Llama-shaped decoders were
    predicted 2.2% high)."""
    torch.manual_seed(0)
    model = nn.Sequential(_Residual(64), _Residual(64), _Residual(64))
    x = torch.randn(256, 64)
    before, s = stages(rt.profile(model, x, repeat=1))[:2]
    seen: dict[str, int] = {}
    with rt.LiveBytes() as live:
        live.exclude_parameter_gradients(model.parameters())
        h1 = model[0](x.clone().requires_grad_(True))
        h2 = model[1](h1)
        out = model[2](h2)

        def starts(_g: torch.Tensor) -> None:
            seen["start"] = live.current
            live.reset_peak()

        def ends(_g: torch.Tensor) -> None:
            seen["took"] = live.peak - seen["start"]

        h2.register_hook(starts)
        h1.register_hook(ends)
        del h1, h2
        out.sum().backward()
    # The model's B^2 (docs/model.md): what is stored before it, abar^2 (a^2
    # included, which the step freed already: block 3's backward was its last
    # reader), plus delta^1 and the transient.
    assert seen["took"] == s["output_size"] + before["gradient_size"] + s["backward_overhead"]


@pytest.mark.parametrize("head", ["select", "pointwise"])
def test_a_backward_is_measured_with_the_gradient_laid_out_as_a_step_makes_it(head: str) -> None:
    """torchvision's ViT block returns its output laid out sequence before
    batch (``nn.MultiheadAttention(batch_first=True)`` transposes); a step's
    gradient for it is row-major, whether the head selects a token or the
    loss is pointwise on the output. Profiled with ``ones_like(output)``,
    the block's backward first copied that gradient into a row-major buffer,
    which no step does: each backward was predicted one activation high (the
    census' small ViT 0.986 of its prediction, 0.964 at half the batch)."""
    from torchvision.models.vision_transformer import EncoderBlock

    from remat.torch.memory import AllocatorTrace

    torch.manual_seed(0)
    model = nn.Sequential(*(EncoderBlock(4, 64, 256, 0.0, 0.0) for _ in range(3)))
    x = torch.randn(4, 65, 64)
    with torch.no_grad():
        assert not model[0](x).is_contiguous()
    before, s, last = stages(rt.profile(model, x, repeat=1))
    trace = AllocatorTrace()
    marks: dict[str, int] = {}
    with trace:
        trace.exclude_parameter_gradients(model.parameters())
        h1 = model[0](x.clone().requires_grad_(True))
        h2 = model[1](h1)
        out = model[2](h2)
        out.register_hook(lambda _g: marks.setdefault("B3", trace.mark()) and None)
        h2.register_hook(lambda _g: marks.setdefault("B2", trace.mark()) and None)
        h1.register_hook(lambda _g: marks.setdefault("end", trace.mark()) and None)
        del h1, h2
        loss = out[:, 0].sum() if head == "select" else out.square().mean()
        del out
        loss.backward()
    # B^l (docs/model.md): what is stored before it, abar^l (a^l included,
    # which the step freed already), plus delta^{l-1} and the transient.
    assert trace.peak(marks["B2"], marks["end"]) == s["output_size"] + before["gradient_size"] + s["backward_overhead"]
    assert trace.peak(marks["B3"], marks["B2"]) == last["output_size"] + s["gradient_size"] + last["backward_overhead"]


def test_chain_is_a_normal_chain_file_with_metadata() -> None:
    case = cnn()
    chain = rt.profile(case.make(), case.x, repeat=2)
    d = json.loads(json.dumps(chain.to_dict()))
    again = remat.Chain.from_dict(d)
    assert again.to_dict() == chain.to_dict()
    meta = d["metadata"]
    assert meta["device"] == "cpu" and meta["dtype"] == "float32"
    assert meta["batch"] == case.x.shape[0] and meta["input_shape"] == list(case.x.shape)
    assert len(chain) == len(case.make())
    for s in d["stages"]:
        assert s["forward_time"] > 0 and s["backward_time"] > 0
        assert s["saved_size"] >= s["output_size"] > 0


def test_profile_leaves_the_module_as_it_was() -> None:
    case = cnn()
    model = case.make()
    model[0][0].weight.grad = torch.ones_like(model[0][0].weight)
    buffers = [b.clone() for b in model.buffers()]
    torch.manual_seed(9)
    expected_next = torch.rand(4)
    torch.manual_seed(9)
    rt.profile(model, case.x, repeat=2)
    assert torch.equal(torch.rand(4), expected_next)  # the RNG stream is untouched
    assert all(torch.equal(a, b) for a, b in zip(buffers, model.buffers()))  # BN statistics
    assert torch.equal(model[0][0].weight.grad, torch.ones_like(model[0][0].weight))
    assert all(p.grad is None for n, p in model.named_parameters() if n != "0.0.weight")


def test_not_a_sequence() -> None:
    with pytest.raises(TypeError, match="needs a sequence of stages"):
        rt.profile(nn.Linear(4, 4), torch.randn(2, 4))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="at least one stage"):
        rt.profile(nn.Sequential(), torch.randn(2, 4))


def test_wrong_shape_sample_names_the_stage_and_shape() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(16, 2))
    with pytest.raises(ValueError, match=r"stage 1 \(Linear\) failed on an input of shape \(3, 7\)"):
        rt.profile(model, torch.randn(3, 7))
    with pytest.raises(ValueError, match=r"stage 3 \(Linear\) failed on an input of shape \(3, 8\)"):
        rt.profile(model, torch.randn(3, 8))


class OutOfMemory(nn.Module):
    """A stage whose forward runs out of device memory (as a CUDA one does)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_out_of_memory_keeps_its_type() -> None:
    # A caller searching for the largest batch catches torch.OutOfMemoryError;
    # reported as a bad input (ValueError) it could not tell the two apart.
    model = nn.Sequential(nn.Linear(8, 8), OutOfMemory())
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        rt.profile(model, torch.randn(3, 8))
    ours = rt.Checkpointed(
        model, "1MiB", chain=rt.profile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.randn(3, 8))
    )
    with pytest.raises(torch.OutOfMemoryError):
        ours(torch.randn(3, 8))


class FailsOnRecording(nn.Module):
    """A ReLU stage (which saves its own output) that runs out of memory in its
    first recording forward, after the ReLU; keeps weak references to its outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 64)
        self.outputs: list[weakref.ref[torch.Tensor]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.linear(x))
        if torch.is_grad_enabled():
            self.outputs.append(weakref.ref(y))
            raise torch.OutOfMemoryError("CUDA out of memory")
        return y


def test_out_of_memory_while_recording_frees_the_stage() -> None:
    # Seen on an H200: every failed profile left its stage's saved tensors
    # allocated (GiBs after a few tries at too large a batch).
    stage = FailsOnRecording()
    with pytest.raises(torch.OutOfMemoryError):
        rt.profile(nn.Sequential(nn.Linear(64, 64), stage), torch.randn(512, 64))
    gc.collect()
    assert stage.outputs and all(r() is None for r in stage.outputs)


class Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x * 2


def test_non_tensor_output_is_a_type_error() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Pair(), nn.Linear(4, 4))
    with pytest.raises(TypeError, match=r"stage 2 \(Pair\) returned a tuple; every stage must return one tensor"):
        rt.profile(model, torch.randn(2, 4))


def test_sample_must_be_a_tensor_and_repeat_positive() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(TypeError, match=r"sample_input must be a torch\.Tensor, got list"):
        rt.profile(model, [[1.0] * 4])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeat must be at least 1, got 0"):
        rt.profile(model, torch.randn(2, 4), repeat=0)


def test_what_does_not_grow_with_the_batch_is_measured_and_kept_when_scaled() -> None:
    """A batch norm saves its per-channel statistics whatever the batch: a
    profile scaled to half the batch predicted such a block's saved bytes
    low (4 CNNs of the census measured 0.1-1.4% above their plan's budget at
    half the batch). The profile measures each stage on half its batch too,
    and the scaled chain reads each size off the line through the two."""
    from remat.torch.profile import profile_calls
    from remat.torch.stages import Call

    apply_module = importlib.import_module("remat.torch.apply")
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
    x = torch.randn(8, 8, 12, 12)
    chain, found = profile_calls([block], Call.of((x,), {}), repeat=1)
    fixed = found.fixed[0]
    assert fixed is not None
    assert fixed["saved_size"] == 2 * 16 * F32  # the batch norm's mean and inverse deviation
    half, _ = profile_calls([block], Call.of((x[:4],), {}), repeat=1)
    scaled = stages(apply_module._scaled(chain, 0.5, [], found.fixed))[0]
    measured = stages(half)[0]
    assert scaled["saved_size"] == measured["saved_size"]
    for k in ("output_size", "forward_overhead", "recording_overhead", "backward_overhead"):
        assert scaled[k] >= measured[k], k
    # Scaled whole, as before: the statistics halve, and the prediction is low.
    assert stages(apply_module._scaled(chain, 0.5))[0]["saved_size"] < measured["saved_size"]


def test_a_figure_larger_on_half_the_batch_is_read_there() -> None:
    """A backward whose workspace grows as the batch shrinks (ConvNeXt-tiny's
    last blocks under the allocator: 264 KiB more at half the batch) has a
    line through its two figures that rises as the batch shrinks: the part
    that does not grow is above the whole batch's figure, and the chain
    scaled to half the batch reads the half batch's figure, no lower (it
    read the whole batch's, and the census' second shape measured 0.7% above
    its budget). An option keeps at most its own figure."""
    from remat.torch.profile import fixed_parts

    apply_module = importlib.import_module("remat.torch.apply")
    fixed = fixed_parts({"backward_overhead": 1000}, {"backward_overhead": 1100}, 0.5)
    assert fixed["backward_overhead"] == 1200
    assert fixed_parts({"backward_overhead": 1000}, {"backward_overhead": 600}, 0.5)["backward_overhead"] == 200
    chain = remat.Chain.from_dict(
        {
            "name": "one",
            "input_size": 100,
            "stages": [
                {
                    "forward_time": 1,
                    "backward_time": 1,
                    "output_size": 100,
                    "saved_size": 400,
                    "backward_overhead": 1000,
                    "options": [{"saved_size": 200, "recompute_time": 0.5, "backward_overhead": 300}],
                }
            ],
        }
    )
    half = stages(apply_module._scaled(chain, 0.5, [], [fixed]))[0]
    assert half["backward_overhead"] == 1100
    assert half["options"][0]["backward_overhead"] == 300  # its own figure, kept: no more
    # An option measured on half the batch reads its own line, which may rise
    # too (ResNet-50's last blocks under "matmuls": 136 KiB above the line
    # their stage's capped figure gave, a step 0.6% over its budget).
    own = fixed_parts({"backward_overhead": 300}, {"backward_overhead": 350}, 0.5)
    half = stages(apply_module._scaled(chain, 0.5, [], [dict(fixed, options=[own])]))[0]
    assert half["backward_overhead"] == 1100
    assert half["options"][0]["backward_overhead"] == 350


def test_options_are_measured_on_half_the_batch_too() -> None:
    """A stage's options get their own line through two batch sizes, as the
    stage does: profiled at batch 8, each option's figures scaled to batch 4
    are at least what the option measures at batch 4 on its own."""
    from remat.torch.policies import SAVE_MATMULS
    from remat.torch.profile import Call, profile_calls

    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()) for _ in range(2)]
    x = torch.randn(8, 8, 12, 12)

    def profiled(inp: torch.Tensor) -> tuple[remat.Chain, Any]:
        return profile_calls(blocks, Call((inp,), {}, 0), repeat=1, policies=[SAVE_MATMULS])

    chain, found = profiled(x)
    assert all(f is not None and len(f.get("options") or []) == 1 for f in found.fixed), found.fixed
    apply_module = importlib.import_module("remat.torch.apply")
    scaled = stages(apply_module._scaled(chain, 0.5, [], found.fixed))
    small = stages(profiled(x[:4])[0])
    for a, b in zip(scaled, small):
        assert "options" in a and "options" in b
        for k in ("saved_size", "forward_overhead", "backward_overhead"):
            assert a["options"][0][k] >= b["options"][0][k], (k, a["options"][0], b["options"][0])


def test_an_options_recompute_time_eager_is_floored_and_compiled_may_be_negative() -> None:
    from remat.torch.profile import _recompute_time

    # Eager: the fastest under the option less the fastest of option 0, never
    # below the floor (its share of the forward's work): noise that makes an
    # option look free or faster is not believed.
    assert _recompute_time([12.0, 11.0, 13.0], [10.0, 10.5, 9.0], compiled=False, floor=0.5, backward_time=4) == 2.0
    assert _recompute_time([9.0, 9.5, 9.2], [10.0, 10.5, 9.6], compiled=False, floor=0.5, backward_time=4) == 0.5
    # Compiled: the median of the rounds' paired differences, either sign: a
    # round run under load slows both variants alike.
    assert _recompute_time([8.0, 18.0, 8.5], [10.0, 19.0, 10.0], compiled=True, floor=0.5, backward_time=4) == -1.5
    assert _recompute_time([12.0, 30.0, 11.0], [10.0, 10.0, 10.0], compiled=True, floor=0.5, backward_time=4) == 2.0
    # ... never taking B^l's time to 0 or below (the chain would refuse it).
    assert _recompute_time([1.0, 1.0, 1.0], [10.0, 10.0, 10.0], compiled=True, floor=0.5, backward_time=4) == -3.6


def test_the_fit_along_the_sequence_reads_a_square() -> None:
    """:func:`_at_length` on figures that are ``c + a t + b t^2``: between the
    two profiled lengths a stage's sizes are never below the curve, and above
    it by at most c/8; past the shorter length never below it either (the
    figure at T scaled as without a fit bounds it there). A curve without a
    constant is read exactly. Options and times scale with the length, and a
    stage whose output the two profiles do not cut alike scales linearly."""
    apply_module = importlib.import_module("remat.torch.apply")

    def curve(t: float) -> int:
        return round(1000 + 40 * t + 3 * t * t)

    def stage(t: int) -> dict[str, Any]:
        return {
            "forward_time": 1.0 * t,
            "backward_time": 2.0 * t,
            "output_size": 16 * t,
            "saved_size": curve(t),
            "backward_overhead": curve(t),
            "options": [{"saved_size": 16 * t, "recompute_time": 0.5 * t, "backward_overhead": 8 * t}],
        }

    def chain(t: int, second_cut: bool = True) -> remat.Chain:
        other = stage(t) if second_cut else dict(stage(64), saved_size=curve(t))
        return remat.Chain.from_dict({"name": "fit", "input_size": 16 * t, "stages": [stage(t), other]})

    full, half = chain(64), chain(32).to_dict()
    for t in (60, 48, 40, 32):
        got = stages(apply_module._at_length(full, half, t / 64, [1000, 1000]))
        for k in ("saved_size", "backward_overhead"):
            assert curve(t) <= got[0][k] <= curve(t) + 1000 / 8 + 1
        assert got[0]["output_size"] == 16 * t  # no constant: exact
        assert got[0]["options"][0]["saved_size"] == 16 * t and got[0]["forward_time"] == t
    for t in (24, 16, 8):
        got = stages(apply_module._at_length(full, half, t / 64, [1000, 1000]))
        assert got[0]["saved_size"] >= curve(t) and got[0]["backward_overhead"] >= curve(t)
    uncut = stages(apply_module._at_length(full, chain(32, second_cut=False).to_dict(), 0.5))
    assert uncut[1]["saved_size"] == math.ceil(curve(64) / 2)


def test_the_inputs_cut_for_half_the_sequence() -> None:
    """The model's inputs the first step runs again at half the sequence: the
    tensors whose second dimension is the blocks' length (ids, mask,
    labels), else a raw signal longer than it (Wav2Vec2's samples, which its
    convolutions turn into fewer frames); none for an image."""
    halved = importlib.import_module("remat.torch.apply")._halved_inputs
    ids, mask = torch.zeros(2, 64, dtype=torch.long), torch.ones(2, 64)
    args, kwargs = halved(((ids,), {"attention_mask": mask, "labels": ids, "other": torch.zeros(2, 3)}), 64)
    assert args[0].shape == (2, 32) and kwargs["attention_mask"].shape == (2, 32) and kwargs["labels"].shape == (2, 32)
    assert kwargs["other"].shape == (2, 3)
    args, _ = halved(((torch.zeros(2, 8000),), {}), 399)
    assert args[0].shape == (2, 4000)
    assert halved(((torch.zeros(2, 3, 64, 64),), {}), 197) is None


def test_the_outside_scales_with_the_larger_of_the_two_ratios() -> None:
    """The parts outside the stack grow with the model's inputs where those
    grow faster than the activation between blocks (Wav2Vec2's feature
    extractor: 6,000 of 8,000 samples make 299 of 399 frames; scaled by the
    frames, its saved activations were predicted 17 KiB low)."""
    outside_type = importlib.import_module("remat.torch.apply")._Outside
    measured = outside_type(pre=8000, post_peak=4000, post_after=0, activation=399, inputs=8000)
    assert measured.scaled(299).pre == math.ceil(8000 * 299 / 399)  # inputs unknown: by the frames
    assert measured.scaled(299, inputs=6000).pre == 6000
    assert measured.scaled(299, inputs=6000).inputs == 6000


def test_a_saved_copy_of_the_input_is_one_laid_out_anew_not_one_equal_by_its_values() -> None:
    # What one model's graph does not keep (remat.torch.apply's in-graph
    # plans): a copy of a block's input in another layout, as inductor makes
    # for a convolution. A ReLU of an input with no negative values saves a
    # tensor equal to the input, which a graph keeps too.
    from remat.torch.profile import _input_copies

    w = torch.ones((), requires_grad=True)
    x = torch.rand(2, 4, 3, 3, generator=torch.Generator().manual_seed(0))

    def laid_out(h: torch.Tensor) -> torch.Tensor:
        return h.contiguous(memory_format=torch.channels_last) * w  # saves the copy for w's gradient

    def own(h: torch.Tensor) -> torch.Tensor:
        return h * w  # saves the input itself

    def relu(h: torch.Tensor) -> torch.Tensor:
        return torch.relu(h) * 2  # saves relu(h), equal to h here

    def twice(h: torch.Tensor) -> torch.Tensor:
        return laid_out(h) + h.contiguous(memory_format=torch.channels_last) * w

    assert _input_copies(laid_out, x, True) == 1.0
    assert _input_copies(own, x, True) == 0.0
    assert torch.equal(torch.relu(x), x) and _input_copies(relu, x, True) == 0.0
    assert _input_copies(twice, x, True) == 2.0


class _Attention(nn.Module):
    """Attention as its math kernel runs: batched products and a softmax."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        return h + torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v


def test_a_policy_that_keeps_on_a_block_what_one_before_it_keeps_is_not_measured_there() -> None:
    # SAVE_ATTENTION, measured by default on compiled blocks, keeps on a block
    # without attention exactly what SAVE_MATMULS keeps: measuring it would
    # compile the same graph once more (each kind of ResNet-50's bottlenecks).
    from remat.torch.policies import resolve_policies
    from remat.torch.profile import _distinct, _policy_calls, _StageRunner
    from remat.torch.stages import Call

    named = resolve_policies([rt.SAVE_MATMULS, rt.SAVE_ATTENTION, rt.SAVE_INPUT])
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    attention = _Attention()
    # A block with no matrix product: SAVE_MATMULS keeps nothing there, and
    # SAVE_INPUT, which runs without SAC's contexts, is the one measured.
    norm = nn.Sequential(nn.LayerNorm(8), nn.GELU())
    cases = ((mlp, ["matmuls", "input"]), (attention, ["matmuls", "attention", "input"]), (norm, ["input"]))
    for block, names in cases:
        runner = _StageRunner([block], [block], [""], 0, Call((x,), {}, 0))
        assert [p.name for p in _distinct(named, _policy_calls(runner, x, named))] == names


class _Concatenating(nn.Module):
    """A U-Net up block's pattern: the input and a skip connection joined along
    the channels, then a layer; each one's gradient is a slice of the
    concatenation's."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(torch.cat([x, skip], dim=-1)))


def test_a_side_inputs_gradient_that_keeps_a_larger_buffer_is_measured_so() -> None:
    """A side input whose gradient the stage makes as its last reader is held
    in the running gradient delta^{l-1} (docs/model.md, "Side inputs'
    gradients"): the profile leaves it out of the backward's transient and
    reports what it keeps allocated. A slice of the concatenation's gradient
    keeps the whole buffer; while the input's gradient (the other slice)
    lives, the rest of it is that gradient's. Profiled with leaves, the
    gradients were copies into ``.grad`` and the buffer was freed at once: a
    U-Net's step measured 31 KiB above the chain's figure for the block
    after the last up block, whose backward the skip connections' buffers
    outlive."""
    from remat.torch.profile import Call, profile_calls

    torch.manual_seed(0)
    d, n = 64, 32
    block = _Concatenating(d)
    x = torch.randn(n, d)
    skip = torch.randn(n, d, requires_grad=True)
    own = skip.numel() * skip.element_size()
    ptr = skip.untyped_storage().data_ptr()
    call = Call((x, skip), {}, 0)
    _, found = profile_calls([block], call, repeat=1, last=[{ptr}])
    # During delta^{l-1}: its own bytes (the other half is the input's
    # gradient); after it: the whole concatenation's gradient; nothing beyond
    # what the profile took off the backward's peak.
    assert found.side_held == [{ptr: (own, 2 * own, 0)}]
    # Not the last reader: nothing held for it.
    _, other = profile_calls([block], call, repeat=1, last=[set()])
    assert other.side_held == [{}]
