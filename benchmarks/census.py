#!/usr/bin/env python3
"""A census of remat.torch.apply on many architectures (issue 35's acceptance).

Every model is built small from its config with random weights (nothing is
downloaded), on the CPU, in train mode, and trained at ``memory="50%"`` of
storing everything. For each model:

1. two copies from the same seed: A (plain) and B (remat);
2. a plain step on A (every step: ``torch.manual_seed(7)`` and NumPy's and
   Python's seeds first, ``torch.use_deterministic_algorithms(True)`` where the
   model allows it), twice: the second is measured;
3. ``plan = remat.torch.apply(B, memory="50%")``, a first step (profiles,
   solves, measures the parts outside the stack), more warm-up steps while the
   plan is not settled (at most three in all, as ``plan_on`` does), then the
   predicted peak (``plan.peak_memory``) and the whole step's budget are read,
   and a measured step runs on B (the steps before it are not measured by the
   census: remat measures them with a profiler of its own);
4. gradients of A and B compared with ``torch.equal`` (and the losses);
5. two steps at a second shape (another sequence length, or batch for images
   and fixed-length inputs) without a new profile (``plan.profiles`` must stay
   1), the second one's measured peak against the plan's prediction for it.

The budget is the whole step's, as ``plan.explain()``'s "budget:" line writes
it (``memory='50%' of storing everything (X) = Y``: Y, exactly). Peaks are
the allocator's (``torch.profiler``'s memory events, read by
``remat.torch.memory.AllocatorTrace``: what every operator allocates,
workspaces included, parameter gradients excluded as remat's budget
excludes them), above what the step starts with; ``--live-bytes`` reads
``remat.torch.LiveBytes``' live tensor bytes instead (the census' measure
before 2026-11-28). A failure of one model (an exception, a timeout) is
recorded and the census goes on.

    PYTHONPATH=python .venv/bin/python benchmarks/census.py [--json FILE] [--only a,b] [--timeout 120]
        [--larger-second] [--steady] [--live-bytes] [--list]

Inputs: batch 4, sequence 64 (images 64x64, audio 8000 samples); the second
shape batch 2 / sequence 48 / 6000 samples (``--larger-second``: 8 / 96 / 12000).
A model whose 50% has no schedule (``InfeasibleError``) runs again at the
smallest budget the error names (up to three times: it rises as the first
steps measure the parts outside the stack), and its row says so.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import logging
import platform
import random
import re
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

import remat
import remat.torch as rt

torch.set_num_threads(1)

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
SEED = 7
BATCH, SEQ = 4, 64
# The second shape: smaller, so that a fixed budget (the runs at the smallest
# one) fits it too; --larger-second: 8, 96 and 12000 audio samples.
BATCH2, SEQ2, SAMPLES, SAMPLES2 = 2, 48, 8000, 6000
VOCAB = 256


@dataclass
class Case:
    """A model to build (same weights for every call), its inputs and loss."""

    name: str
    family: str
    make: Callable[[], nn.Module]
    inputs: Callable[[bool], Inputs]  # False: the main shape; True: the second one
    second: str  # the second shape in words
    loss: Callable[[Any], torch.Tensor] = field(default=lambda out: default_loss(out))


def default_loss(out: Any) -> torch.Tensor:
    """The model's ``loss`` where it has one, else ``x.float().square().mean()``
    of its main output tensor."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    return main_tensor(out).float().square().mean()


def main_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    sample = getattr(out, "sample", None)  # diffusers
    if isinstance(sample, torch.Tensor):
        return sample
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for v in out:
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                return v
    raise TypeError(f"no output tensor in {type(out).__name__}")


def gen(offset: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(1 + offset)


def built(factory: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(0)
        return factory().train()

    return make


# -- Hugging Face ----------------------------------------------------------------


def hf(cls: str, config: str, **kwargs: Any) -> Callable[[], nn.Module]:
    def factory() -> nn.Module:
        import transformers

        c = getattr(transformers, config)(**kwargs)
        return cast(nn.Module, getattr(transformers, cls)(c))

    return built(factory)


def token_inputs(labels: bool = True, extra: dict[str, Any] | None = None) -> Any:
    def inputs(second: bool) -> Inputs:
        n = SEQ2 if second else SEQ
        ids = torch.randint(3, VOCAB, (BATCH, n), generator=gen(n))
        kw: dict[str, Any] = {"input_ids": ids}
        if labels:
            kw["labels"] = ids
        kw.update(extra or {})
        return (), kw

    return inputs


def image_inputs(size: int = 64, labels: int | None = None, key: str = "pixel_values", channels: int = 3) -> Any:
    def inputs(second: bool) -> Inputs:
        b = BATCH2 if second else BATCH
        x = torch.randn(b, channels, size, size, generator=gen(b))
        kw: dict[str, Any] = {key: x}
        if labels is not None:
            kw["labels"] = torch.randint(0, labels, (b,), generator=gen(b + 1))
        return (), kw

    return inputs


def positional_image(size: int = 64) -> Any:
    def inputs(second: bool) -> Inputs:
        b = BATCH2 if second else BATCH
        return (torch.randn(b, 3, size, size, generator=gen(b)),), {}

    return inputs


LM = {"vocab_size": VOCAB}
LLAMA_LIKE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    **LM,
}


def decoders() -> list[Case]:
    lm = token_inputs()
    second = f"seq {SEQ2}"
    specs: list[tuple[str, str, str, dict[str, Any]]] = [
        ("gpt2", "GPT2LMHeadModel", "GPT2Config", {"n_layer": 4, "n_embd": 64, "n_head": 4, "n_positions": 128, **LM}),
        (
            "gpt-neo",
            "GPTNeoForCausalLM",
            "GPTNeoConfig",
            {
                "num_layers": 4,
                "hidden_size": 64,
                "num_heads": 4,
                "attention_types": [[["global", "local"], 2]],
                "window_size": 16,
                "max_position_embeddings": 128,
                **LM,
            },
        ),
        (
            "gpt-j",
            "GPTJForCausalLM",
            "GPTJConfig",
            {"n_layer": 4, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "n_positions": 128, **LM},
        ),
        ("bloom", "BloomForCausalLM", "BloomConfig", {"n_layer": 4, "hidden_size": 64, "n_head": 4, **LM}),
        (
            "opt",
            "OPTForCausalLM",
            "OPTConfig",
            {
                "num_hidden_layers": 4,
                "hidden_size": 64,
                "ffn_dim": 128,
                "num_attention_heads": 4,
                "word_embed_proj_dim": 64,
                "max_position_embeddings": 128,
                **LM,
            },
        ),
        ("llama", "LlamaForCausalLM", "LlamaConfig", {**LLAMA_LIKE, "attention_dropout": 0.1}),
        ("mistral", "MistralForCausalLM", "MistralConfig", {**LLAMA_LIKE, "sliding_window": 16}),
        ("qwen2", "Qwen2ForCausalLM", "Qwen2Config", LLAMA_LIKE),
        ("qwen3", "Qwen3ForCausalLM", "Qwen3Config", {**LLAMA_LIKE, "head_dim": 16}),
        ("phi3", "Phi3ForCausalLM", "Phi3Config", {**LLAMA_LIKE, "pad_token_id": 0}),
        ("phi", "PhiForCausalLM", "PhiConfig", LLAMA_LIKE),
        ("gemma", "GemmaForCausalLM", "GemmaConfig", {**LLAMA_LIKE, "head_dim": 16}),
        (
            "gemma2",
            "Gemma2ForCausalLM",
            "Gemma2Config",
            {**LLAMA_LIKE, "head_dim": 16, "sliding_window": 16, "query_pre_attn_scalar": 16},
        ),
        ("stablelm", "StableLmForCausalLM", "StableLmConfig", LLAMA_LIKE),
        ("starcoder2", "Starcoder2ForCausalLM", "Starcoder2Config", LLAMA_LIKE),
        ("olmo", "OlmoForCausalLM", "OlmoConfig", {**LLAMA_LIKE, "pad_token_id": 0}),
        (
            "falcon",
            "FalconForCausalLM",
            "FalconConfig",
            {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, **LM},
        ),
        (
            "gpt-neox",
            "GPTNeoXForCausalLM",
            "GPTNeoXConfig",
            {
                "hidden_size": 64,
                "num_hidden_layers": 4,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "max_position_embeddings": 128,
                **LM,
            },
        ),
        (
            "codegen",
            "CodeGenForCausalLM",
            "CodeGenConfig",
            {"n_layer": 4, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "n_positions": 128, "n_ctx": 128, **LM},
        ),
        (
            "mixtral (MoE)",
            "MixtralForCausalLM",
            "MixtralConfig",
            {**LLAMA_LIKE, "num_local_experts": 4, "num_experts_per_tok": 2},
        ),
        (
            "qwen2-moe (MoE)",
            "Qwen2MoeForCausalLM",
            "Qwen2MoeConfig",
            {
                **LLAMA_LIKE,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 64,
                "shared_expert_intermediate_size": 64,
            },
        ),
    ]
    return [Case(n, "HF decoder", hf(cls, cfg, **kw), lm, second) for n, cls, cfg, kw in specs]


ENCODER = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 128,
    **LM,
}


def encoders() -> list[Case]:
    mlm = token_inputs()
    second = f"seq {SEQ2}"
    specs: list[tuple[str, str, str, dict[str, Any]]] = [
        ("bert", "BertForMaskedLM", "BertConfig", ENCODER),
        ("roberta", "RobertaForMaskedLM", "RobertaConfig", {**ENCODER, "max_position_embeddings": 130}),
        (
            "distilbert",
            "DistilBertForMaskedLM",
            "DistilBertConfig",
            {"dim": 64, "n_layers": 4, "n_heads": 4, "hidden_dim": 128, "max_position_embeddings": 128, **LM},
        ),
        ("albert", "AlbertForMaskedLM", "AlbertConfig", {**ENCODER, "embedding_size": 32}),
        ("electra", "ElectraForMaskedLM", "ElectraConfig", {**ENCODER, "embedding_size": 32}),
        (
            "deberta-v2",
            "DebertaV2ForMaskedLM",
            "DebertaV2Config",
            {**ENCODER, "relative_attention": True, "position_buckets": 32, "pos_att_type": ["p2c", "c2p"]},
        ),
    ]
    return [Case(n, "HF encoder", hf(cls, cfg, **kw), mlm, second) for n, cls, cfg, kw in specs]


SEQ2SEQ = {
    "d_model": 64,
    "encoder_layers": 4,
    "decoder_layers": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "max_position_embeddings": 128,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 1,
    **LM,
}


def whisper_inputs(second: bool) -> Inputs:
    b = BATCH2 if second else BATCH
    feats = torch.randn(b, 16, 64, generator=gen(b))  # 2 x max_source_positions frames
    labels = torch.randint(3, VOCAB, (b, 24), generator=gen(b + 1))
    return (), {"input_features": feats, "labels": labels}


def encoder_decoders() -> list[Case]:
    s2s = token_inputs()
    second = f"seq {SEQ2}"
    t5 = {
        "d_model": 64,
        "d_ff": 128,
        "num_layers": 4,
        "num_decoder_layers": 4,
        "num_heads": 4,
        "d_kv": 16,
        "decoder_start_token_id": 0,
        "pad_token_id": 0,
        "eos_token_id": 1,
        **LM,
    }
    whisper = {
        **SEQ2SEQ,
        "num_mel_bins": 16,
        "max_source_positions": 32,
        "max_target_positions": 64,
        "suppress_tokens": None,
        "begin_suppress_tokens": None,
    }
    whisper.pop("max_position_embeddings")
    return [
        Case("t5", "HF encoder-decoder", hf("T5ForConditionalGeneration", "T5Config", **t5), s2s, second),
        Case("bart", "HF encoder-decoder", hf("BartForConditionalGeneration", "BartConfig", **SEQ2SEQ), s2s, second),
        Case("marian", "HF encoder-decoder", hf("MarianMTModel", "MarianConfig", **SEQ2SEQ), s2s, second),
        Case(
            "pegasus",
            "HF encoder-decoder",
            hf("PegasusForConditionalGeneration", "PegasusConfig", **SEQ2SEQ),
            s2s,
            second,
        ),
        Case(
            "whisper",
            "HF encoder-decoder",
            hf("WhisperForConditionalGeneration", "WhisperConfig", **whisper),
            whisper_inputs,
            f"batch {BATCH2}",
        ),
    ]


def wav2vec2_inputs(second: bool) -> Inputs:
    n = SAMPLES2 if second else SAMPLES
    audio = torch.randn(BATCH, n, generator=gen(n))
    labels = torch.randint(1, 32, (BATCH, 10), generator=gen(n + 1))
    return (), {"input_values": audio, "labels": labels}


def clip_inputs(second: bool) -> Inputs:
    b = BATCH2 if second else BATCH
    ids = torch.randint(3, VOCAB, (b, 16), generator=gen(b))
    pixels = torch.randn(b, 3, 64, 64, generator=gen(b + 1))
    return (), {"input_ids": ids, "pixel_values": pixels, "return_loss": True}


def clip() -> nn.Module:
    import transformers

    text = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
    config = transformers.CLIPConfig(
        text_config={**text, "vocab_size": VOCAB, "max_position_embeddings": 32},
        vision_config={**text, "image_size": 64, "patch_size": 8},
        projection_dim=32,
    )
    return transformers.CLIPModel(config)


def hf_vision_and_speech() -> list[Case]:
    images = image_inputs(64, labels=10)
    second = f"batch {BATCH2}"
    vit = {**ENCODER, "image_size": 64, "patch_size": 8, "num_labels": 10}
    for k in ("max_position_embeddings", "vocab_size"):
        vit.pop(k)
    swin = {
        "image_size": 64,
        "patch_size": 2,
        "embed_dim": 16,
        "depths": [1, 1, 2, 1],
        "num_heads": [1, 2, 2, 4],
        "window_size": 4,
        "num_labels": 10,
    }
    convnext = {"hidden_sizes": [8, 16, 32, 64], "depths": [1, 1, 2, 1], "num_labels": 10}
    wav2vec2 = {
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "conv_dim": (32, 32, 32),
        "conv_stride": (5, 2, 2),
        "conv_kernel": (10, 3, 3),
        "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 4,
        "vocab_size": 32,
    }
    return [
        Case("vit (HF)", "HF vision", hf("ViTForImageClassification", "ViTConfig", **vit), images, second),
        Case("swin (HF)", "HF vision", hf("SwinForImageClassification", "SwinConfig", **swin), images, second),
        Case(
            "convnext (HF)",
            "HF vision",
            hf("ConvNextForImageClassification", "ConvNextConfig", **convnext),
            images,
            second,
        ),
        Case(
            "wav2vec2 (CTC)",
            "HF speech",
            hf("Wav2Vec2ForCTC", "Wav2Vec2Config", **wav2vec2),
            wav2vec2_inputs,
            f"{SAMPLES2} samples",
        ),
        Case(
            "wav2vec2 (CTC, LayerDrop off)",
            "HF speech",
            hf("Wav2Vec2ForCTC", "Wav2Vec2Config", **wav2vec2, layerdrop=0.0),
            wav2vec2_inputs,
            f"{SAMPLES2} samples",
        ),
        Case("clip", "HF multimodal", built(clip), clip_inputs, second),
    ]


# -- torchvision, timm, diffusers -------------------------------------------------


def torchvision_models() -> list[Case]:
    second = f"batch {BATCH2}"

    def tv(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
        def factory() -> nn.Module:
            import torchvision

            return cast(nn.Module, getattr(torchvision.models, name)(num_classes=10, **kwargs))

        return built(factory)

    def small_vit() -> nn.Module:
        import torchvision

        return cast(
            nn.Module,
            torchvision.models.VisionTransformer(
                image_size=64, patch_size=8, num_layers=6, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10
            ),
        )

    names = [
        "resnet18",
        "resnet50",
        "densenet121",
        "mobilenet_v3_small",
        "efficientnet_b0",
        "efficientnet_v2_s",
        "convnext_tiny",
        "regnet_y_400mf",
    ]
    cases = [Case(n, "torchvision", tv(n), positional_image(), second) for n in names]
    cases.insert(-1, Case("vit_b_16 (small config)", "torchvision", built(small_vit), positional_image(), second))
    return cases


def timm_models() -> list[Case]:
    second = f"batch {BATCH2}"

    def tm(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
        def factory() -> nn.Module:
            import timm

            return timm.create_model(name, pretrained=False, num_classes=10, **kwargs)

        return built(factory)

    return [
        Case(
            "timm vit_tiny", "timm", tm("vit_tiny_patch16_224", img_size=64, patch_size=8), positional_image(), second
        ),
        Case("timm convnext_atto", "timm", tm("convnext_atto"), positional_image(), second),
        Case("timm efficientnet_b0", "timm", tm("efficientnet_b0"), positional_image(), second),
        Case("timm mixer_s16", "timm", tm("mixer_s16_224", img_size=64), positional_image(), second),
    ]


def unet_inputs(second: bool) -> Inputs:
    b = BATCH2 if second else BATCH
    return (torch.randn(b, 3, 32, 32, generator=gen(b)), torch.tensor(10)), {}


def unet() -> nn.Module:
    import diffusers

    return cast(
        nn.Module,
        diffusers.UNet2DModel(  # type: ignore[no-untyped-call]
            sample_size=32,
            in_channels=3,
            out_channels=3,
            layers_per_block=1,
            block_out_channels=(16, 32),
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"),
            norm_num_groups=8,
            attention_head_dim=8,
        ),
    )


def all_cases() -> list[Case]:
    cases = decoders() + encoders() + encoder_decoders() + hf_vision_and_speech() + torchvision_models()
    cases += timm_models()
    cases.append(Case("unet2d (diffusers)", "diffusers", built(unet), unet_inputs, f"batch {BATCH2}"))
    return cases


# -- one model -------------------------------------------------------------------


class Timeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expired(_signum: int, _frame: Any) -> None:
        raise Timeout(f"timed out after {seconds} s")

    before = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


class Caught(logging.Handler):
    """remat's warnings and log records (INFO and up: options dropped while
    profiling) within a case, each first line once."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []
        self._warnings: Any = None
        self._level = logging.NOTSET

    def _add(self, text: str) -> None:
        line = (text.strip().splitlines() or [""])[0][:300]
        if line not in self.messages:
            self.messages.append(line)

    def emit(self, record: logging.LogRecord) -> None:
        self._add(record.getMessage())

    def __enter__(self) -> Caught:
        log = logging.getLogger("remat.torch")
        self._level = log.level
        log.setLevel(logging.INFO)
        log.addHandler(self)
        self._warnings = warnings.catch_warnings(record=True)
        self._caught = self._warnings.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: object) -> None:
        self._warnings.__exit__(*exc)
        for w in self._caught:
            if str(w.message).startswith("remat"):
                self._add(f"{w.category.__name__}: {w.message}")
        log = logging.getLogger("remat.torch")
        log.removeHandler(self)
        log.setLevel(self._level)


#: How a measured step's peak is read: by the allocator (torch.profiler's
#: memory events, what every kernel allocates), or by LiveBytes (a dispatch
#: mode: tensors only, not what an operator allocates inside itself).
MEASURE = "allocator"


def step(
    model: nn.Module, inputs: Inputs, loss_of: Callable[[Any], torch.Tensor], measured: bool = True
) -> tuple[torch.Tensor, int]:
    """One step from a fixed RNG state: the loss and its peak above what the
    step starts with (parameter gradients excluded), by :data:`MEASURE`; not
    measured (0) where ``measured`` is False: a step in which remat measures
    its plan with a profiler of its own, which cannot nest in another."""
    args, kwargs = inputs
    model.zero_grad(set_to_none=True)
    torch.manual_seed(SEED)
    np.random.seed(SEED)  # wav2vec2's SpecAugment masks draw from NumPy
    random.seed(SEED)

    def run() -> torch.Tensor:
        out = model(*args, **kwargs)
        loss = loss_of(out)
        del out
        loss.backward()  # type: ignore[no-untyped-call]
        return loss.detach()

    if not measured:
        return run(), 0
    if MEASURE == "live-bytes":
        with rt.LiveBytes() as live:
            live.exclude_parameter_gradients(model.parameters())
            value = run()
        return value, live.peak
    from remat.torch.memory import AllocatorTrace

    with AllocatorTrace() as trace:
        trace.exclude_parameter_gradients(model.parameters())
        value = run()
        end = trace.mark()
    return value, trace.peak(0, end)


def largest_difference(a: nn.Module, b: nn.Module) -> float:
    """The largest difference between two gradients of a parameter, relative to
    the largest magnitude of plain training's gradient of it."""
    worst = 0.0
    for p, q in zip(a.parameters(), b.parameters()):
        if p.grad is not None and q.grad is not None:
            scale = float(p.grad.abs().max()) or 1.0
            worst = max(worst, float((p.grad - q.grad).abs().max()) / scale)
    return worst


def same_gradients(a: nn.Module, b: nn.Module) -> tuple[bool, str]:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        if p.grad is None and q.grad is None:
            continue
        if p.grad is None or q.grad is None:
            return False, f"{name}: a gradient on one side only"
        if not torch.equal(p.grad, q.grad):
            return False, name
    return True, ""


_BUDGET = re.compile(r"budget: .*? = ([\d.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def whole_budget(plan: rt.AppliedPlan, explain: str) -> int | None:
    """The whole step's budget in bytes: the figure of explain()'s "budget:" line
    (``memory='50%' of storing everything (X) = Y``), exactly where the plan
    holds it."""
    current = getattr(plan, "_current", None)
    planned = current() if callable(current) else None
    total = getattr(planned, "total", None)
    if isinstance(total, int):
        return total
    m = _BUDGET.search(explain)
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else None


def settled(plan: rt.AppliedPlan) -> bool:
    """Whether the next step runs the plan as it is (plan_on()'s test)."""
    check = getattr(plan, "_settled", None)
    return bool(check()) if callable(check) else True


def leftover_modes() -> int:
    """Pops dispatch modes a failed step left on the stack (a plan's LiveBytes)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

    n = len(_get_current_dispatch_mode_stack())
    for _ in range(n):
        _pop_mode()
    return n


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def run_case(case: Case, timeout: int, memory: int | str = "50%") -> dict[str, Any]:
    rec: dict[str, Any] = {"model": case.name, "family": case.family, "second_shape": case.second, "memory": memory}
    phase = "build"
    start = time.perf_counter()
    plan: rt.AppliedPlan | None = None
    a = b = None
    caught = Caught()
    try:
        with time_limit(timeout), caught:
            a, b = case.make(), case.make()
            rec["params"] = sum(p.numel() for p in a.parameters())
            main, other = case.inputs(False), case.inputs(True)
            phase = "plain step"
            step(a, main, case.loss)
            loss_a, rec["plain_peak"] = step(a, main, case.loss)
            phase = "apply"
            plan = rt.apply(b, memory=memory)
            rec["where"], rec["blocks"] = plan.where, len(plan.blocks)
            phase = "first step"
            step(b, main, case.loss, measured=False)
            warm = 1
            while not settled(plan) and warm < 3:
                phase = f"warm-up step {warm + 1}"
                step(b, main, case.loss, measured=False)
                warm += 1
            rec["warmup_steps"] = warm
            phase = "plan"
            predicted = plan.peak_memory
            explain = plan.explain()
            rec["explain"] = explain
            rec["budget"] = whole_budget(plan, explain)
            rec["predicted"] = predicted
            rec["schedule"] = str(plan.schedule)
            phase = "measured step"
            loss_b, rec["measured"] = step(b, main, case.loss)
            rec["predicted_after"] = plan.peak_memory
            rec["loss_chunks"] = plan.loss_chunks
            rec["losses_equal"] = bool(torch.equal(loss_a, loss_b))
            rec["grads_equal"], rec["grads_differ_at"] = same_gradients(a, b)
            if not rec["grads_equal"]:
                # The loss in chunks of tokens sums in another order (docs/pytorch.md).
                rec["largest_difference"] = largest_difference(a, b)
            rec["status"] = "ok"
            if rec["budget"] is not None and rec["measured"] > rec["budget"]:
                rec["status"] = "over budget"
            phase = "second shape"
            try:
                # The plan for this shape is solved in its first step, which
                # remat may measure (a new kind of input is profiled).
                step(b, other, case.loss, measured=False)
                _, rec["measured2"] = step(b, other, case.loss)
                rec["predicted2"] = plan.peak_memory
                rec["budget2"] = whole_budget(plan, plan.explain())
                rec["profiles"] = plan.profiles
            except Exception as e:
                rec["second_error"] = first_line(e)
                rec["second_traceback"] = traceback.format_exc(limit=-6)
                rec["profiles"] = plan.profiles
    except Exception as e:
        rec["status"] = "error"
        rec["phase"] = phase
        rec["error"] = first_line(e)
        rec["error_full"] = str(e)
        rec["infeasible"] = isinstance(e, remat.InfeasibleError)
        if isinstance(e, remat.InfeasibleError):
            rec["min_budget"] = getattr(e, "min_budget", None)
            rec["infeasible_budget"] = getattr(e, "budget", None)
        rec["traceback"] = traceback.format_exc(limit=-6)
    finally:
        rec["left_modes"] = leftover_modes()
        if plan is not None:
            with contextlib.suppress(Exception):
                plan.remove()
        del a, b, plan
        gc.collect()
    rec["seconds"] = round(time.perf_counter() - start, 1)
    rec["remat_messages"] = caught.messages
    explained = [line for line in str(rec.get("explain", "")).splitlines() if " dropped for blocks " in line]
    rec["options_dropped"] = explained or [m for m in caught.messages if "options it cannot run" in m]
    return rec


# -- the report ------------------------------------------------------------------


def kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f}"


def ratio(m: int | None, p: int | None) -> float | None:
    return None if m is None or not p else m / p


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.3f}"


def failure_kind(e: str, infeasible: bool = False) -> str:
    """A failure's kind, from its first line."""
    if infeasible:
        return "no schedule fits (InfeasibleError)"
    if e.startswith("Timeout"):
        return "timeout"
    if "found no stack of blocks" in e:
        return "no stack found (ValueError from find_blocks)"
    if "must run once each, in order" in e:
        return "blocks not run once each, in order (RuntimeError)"
    if "failed on an input of shape" in e:
        return "a block failed while profiled on its input (ValueError)"
    if "deterministic" in e:
        return "deterministic algorithms refused"
    return e.split(":")[0]


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "model",
        "family",
        "stack (where, blocks)",
        "status",
        "grads equal",
        "plain peak KiB",
        "budget KiB",
        "remat measured KiB",
        "predicted KiB",
        "measured/predicted",
        "measured <= budget",
        "second shape: measured/predicted KiB",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        stack = f"`{r['where']}`, {r['blocks']}" if "where" in r else "-"
        grads = "-" if "grads_equal" not in r else ("yes" if r["grads_equal"] else f"**no** ({r['grads_differ_at']})")
        fits = "-" if r.get("measured") is None or r.get("budget") is None else str(r["measured"] <= r["budget"])
        second = "-"
        if r.get("measured2") is not None:
            second = (
                f"{r['second_shape']}: {kib(r['measured2'])} / {kib(r['predicted2'])} = "
                f"{fmt_ratio(ratio(r['measured2'], r['predicted2']))}, profiles {r['profiles']}"
            )
            if r.get("budget2") is not None and r["measured2"] > r["budget2"]:
                second += f", **over its budget** {kib(r['budget2'])}"
        elif r.get("second_error"):
            second = f"{r['second_shape']}: error: {r['second_error'][:120]}".replace("|", "\\|")
        cells = [
            r["model"],
            r["family"],
            stack,
            describe(r),
            grads,
            kib(r.get("plain_peak")),
            kib(r.get("budget")),
            kib(r.get("measured")),
            kib(r.get("predicted")),
            fmt_ratio(ratio(r.get("measured"), r.get("predicted"))),
            fits,
            second,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def min_share(r: dict[str, Any]) -> str:
    at_50 = r["at_50"]
    share = f" = {at_50['min_budget'] / r['plain_peak']:.0%} of plain's peak" if r.get("plain_peak") else ""
    return f"{kib(at_50['min_budget'])} KiB{share}"


def describe(r: dict[str, Any]) -> str:
    """The status cell: ok, over budget, or the error (phase, first line, cut)."""
    status = r["status"] if r["status"] != "error" else f"error ({r['phase']}): {r['error'][:160]}"
    if r.get("at_50"):
        status = f"50% infeasible; at the smallest budget ({min_share(r)}): {status}"
    return status.replace("|", "\\|")


def off(r: dict[str, Any], m: str, p: str) -> bool:
    x = ratio(r.get(m), r.get(p))
    return x is not None and abs(x - 1) > 0.02


def listed(rows: list[dict[str, Any]], what: Callable[[dict[str, Any]], str]) -> str:
    return "".join(f"\n  - {r['model']}: {what(r)}" for r in rows)


def summary(rows: list[dict[str, Any]]) -> str:
    ran = [r for r in rows if r["status"] != "error"]
    errors = [r for r in rows if r["status"] == "error"]
    at_50 = [r for r in rows if r.get("at_50")]
    over = [r for r in ran if r["status"] == "over budget"]
    unequal = [r for r in ran if not r["grads_equal"]]
    off1 = [r for r in ran if off(r, "measured", "predicted")]
    second = [r for r in ran if r.get("measured2") is not None]
    off2 = [r for r in second if off(r, "measured2", "predicted2")]
    second_errors = [r for r in ran if r.get("second_error")]
    dropped = [r for r in rows if r.get("options_dropped")]
    over2 = [r for r in second if r.get("budget2") is not None and r["measured2"] > r["budget2"]]
    reprofiled = [r for r in ran if r.get("profiles") != 1]

    def vs_budget(r: dict[str, Any]) -> str:
        where = "at the smallest budget" if r.get("at_50") else "at 50%"
        return f"{kib(r['measured'])} KiB measured > {kib(r['budget'])} KiB budget ({where})"

    lines = [
        f"- models: {len(rows)}; a measured step ran on {len(ran)}, errors on {len(errors)}",
        f"- ok at 50% (measured <= budget): {sum(r['status'] == 'ok' and not r.get('at_50') for r in rows)}",
        f"- 50% infeasible, run again at the smallest budget the error names: {len(at_50)}"
        + listed(
            at_50,
            lambda r: (
                f"smallest {min_share(r)}; there: {r['status']}"
                + (
                    ""
                    if len(r["at_50"].get("named", [])) < 2
                    else " (named " + " then ".join(f"{kib(n)} KiB" for n in r["at_50"]["named"]) + ")"
                )
            ),
        ),
        f"- of those, the smallest budget named more than once (it rose as the first steps measured more): "
        f"{sum(len(r['at_50'].get('named', [])) > 1 for r in at_50)}",
        f"- over budget (measured > budget): {len(over)}" + listed(over, vs_budget),
        f"- gradients not bit-identical to plain: {len(unequal)}"
        + listed(
            unequal,
            lambda r: (
                f"{r['grads_differ_at']}, at most {r.get('largest_difference', float('nan')):.1e} of the largest"
                + (f" (the loss in {r['loss_chunks']} chunks)" if (r.get("loss_chunks") or 1) > 1 else "")
            ),
        ),
        f"- losses not bit-identical to plain: {sum(not r['losses_equal'] for r in ran)}",
        f"- prediction off by >2% (measured step): {len(off1)}"
        + listed(off1, lambda r: fmt_ratio(ratio(r["measured"], r["predicted"]))),
        f"- second shape: ran on {len(second)}, profiled again (profiles != 1) on {len(reprofiled)}, "
        f"prediction off by >2% on {len(off2)}, errors on {len(second_errors)}"
        + listed(off2, lambda r: fmt_ratio(ratio(r["measured2"], r["predicted2"])))
        + listed(second_errors, lambda r: f"error: {r['second_error']}"),
        f"- second shape over its budget (measured > the plan's budget for that shape): {len(over2)}"
        + listed(over2, lambda r: f"{kib(r['measured2'])} KiB measured > {kib(r['budget2'])} KiB budget"),
        f"- options dropped while profiling (remat's log and explain()): {len(dropped)}"
        + listed(dropped, lambda r: "; ".join(r["options_dropped"])[:300]),
        f"- errors: {len(errors)}",
    ]
    kinds: dict[str, list[dict[str, Any]]] = {}
    for r in errors:
        kinds.setdefault(failure_kind(r["error"], r.get("infeasible", False)), []).append(r)
    for kind, rs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  - {kind}: {len(rs)}")
        lines += [f"    - {r['model']} ({r['phase']}): {r['error']}" for r in rs]
    return "\n".join(lines)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "torchvision", "timm", "diffusers"):
        try:
            out[name] = __import__(name).__version__
        except Exception as e:
            out[name] = f"not available ({first_line(e)})"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the raw figures here")
    parser.add_argument("--only", help="comma-separated model names (or prefixes)")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per model")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument(
        "--larger-second",
        action="store_true",
        help="the second shape larger than the first (batch 8, sequence 96) instead of smaller (2, 48)",
    )
    parser.add_argument(
        "--steady",
        action="store_true",
        help="solve on fixed times (python/tests/torch_models.py's steady_profiles): plans that do not depend on "
        "the machine's load; bytes stay as measured",
    )
    parser.add_argument(
        "--live-bytes",
        action="store_true",
        help="measure peaks with remat.torch.LiveBytes (tensors only) instead of the allocator's events",
    )
    args = parser.parse_args()
    if args.live_bytes:
        global MEASURE
        MEASURE = "live-bytes"
    if args.larger_second:
        global BATCH2, SEQ2, SAMPLES2
        BATCH2, SEQ2, SAMPLES2 = 2 * BATCH, SEQ + SEQ // 2, SAMPLES + SAMPLES // 2
    cases = all_cases()
    if args.only:
        wanted = [w.strip() for w in args.only.split(",")]
        cases = [c for c in cases if any(c.name.startswith(w) for w in wanted)]
    if args.list:
        print("\n".join(f"{c.name} ({c.family})" for c in cases))
        return
    torch.use_deterministic_algorithms(True)
    meta: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} thread(s) of {__import__('os').cpu_count()} CPUs",
        "versions": versions(),
        "memory": "50%",
        "measure": MEASURE,
        "git": git_state(),
    }
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    with steady_times() if args.steady else contextlib.nullcontext():
        census(cases, args.timeout, rows)
    meta["seconds"] = round(time.perf_counter() - start, 1)
    meta["steady"] = args.steady
    meta["shapes"] = {
        "batch": BATCH,
        "seq": SEQ,
        "batch2": BATCH2,
        "seq2": SEQ2,
        "samples": SAMPLES,
        "samples2": SAMPLES2,
    }
    times = "fixed times (--steady)" if args.steady else "measured times"
    print(
        f'remat.torch.apply census, memory="50%", {times}, peaks by {MEASURE}, {meta["date"]}, {meta["machine"]}, '
        f"git {meta['git']},"
    )
    print(", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + "\n")
    print(table(rows))
    print()
    print(summary(rows))
    print(f"\ntotal run time: {meta['seconds']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


def git_state() -> str:
    """The commit, and whether python/remat differs from it (edited meanwhile)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout
        changed = subprocess.run(
            ["git", "status", "--short", "python/remat"], cwd=root, capture_output=True, text=True
        ).stdout.splitlines()
    except OSError as e:
        return f"unknown ({e})"
    state = f"{head.strip()}" + (f", {len(changed)} file(s) of python/remat changed from it" if changed else "")
    used = Path(remat.__file__).resolve().parent
    if used != (root / "python" / "remat").resolve():
        state += f"; remat imported from {used}, not from this checkout"
    return state


def steady_times() -> contextlib.AbstractContextManager[None]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
    from torch_models import steady_profiles

    return cast(contextlib.AbstractContextManager[None], steady_profiles())


def census(cases: list[Case], timeout: int, rows: list[dict[str, Any]]) -> None:
    """Runs every case into ``rows``: again without deterministic algorithms
    where the model refuses them, and at the smallest budget where 50% has no
    schedule."""
    for case in cases:
        r = run_case(case, timeout)
        if r.get("error") and "deterministic" in r.get("error", ""):
            torch.use_deterministic_algorithms(False)
            r = run_case(case, timeout)
            r["deterministic"] = False
            torch.use_deterministic_algorithms(True)
        at_50: dict[str, Any] | None = None
        for _ in range(3):
            if not (r["status"] == "error" and r.get("infeasible") and r.get("min_budget")):
                break
            # No schedule meets 50%: the census runs it again at the smallest
            # budget the error names (it rises as the first steps measure the
            # parts outside the stack), to check the rest (gradients, prediction).
            if at_50 is None:
                at_50 = {k: r.get(k) for k in ("phase", "error", "min_budget", "infeasible_budget", "seconds")}
                at_50["named"] = []
            at_50["named"].append(int(r["min_budget"]))
            r = run_case(case, timeout, int(r["min_budget"]))
        if at_50 is not None:
            at_50["min_budget"] = r["memory"]
            r["at_50"] = at_50
        rows.append(r)
        what = r["status"] if r["status"] != "error" else f"error ({r['phase']}): {r['error']}"
        print(f"{case.name}: {what} [{r['seconds']} s]", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
