"""``apply(model, memory=...)``: plan and run a whole model's block stack in place.

Most networks people train are a stack of blocks between an input part and a
head: a Hugging Face model's ``transformer.h`` or ``model.layers`` between the
embeddings and the LM head and loss, torchvision's ``layer1..layer4`` between
the stem and the classifier, DenseNet's ``features``. :func:`apply` finds that
stack (or takes it as ``blocks=``), replaces each block's ``forward`` by one
that runs remat's schedule (the module tree, ``state_dict`` keys, hooks and the
model's own ``forward`` stay as they are), and returns the :class:`AppliedPlan`
that says what it decided; ``plan.remove()`` undoes it.

The budget counts the whole step, not only the stack: what the part before the
stack keeps for its backward (``pre``), and what the part after it (the head,
the loss, and what the training loop holds of them, such as the logits of an
LM) takes from the end of the stack's forward to the start of its backward
(``post``). Both are measured on the first training step, which runs under the
plan made for the stack alone; the plan is solved again with them from the
second step on (``explain()`` shows the figures).

For a Hugging Face causal LM the head and the loss are a loss option
(docs/model.md, "Ways to compute the loss"): measured whole and in chunks of
tokens on the first training step (checked against the model's own loss), and
solved for with the stack, one solve per option; a plan that chunks computes
the loss with :func:`remat.torch.head.chunked_cross_entropy` and returns no
logits (``chunked_loss=False``: the model's forward as it is).

Plans are made per dtype, device, mode and autocast state, and profiled once:
an input of another batch size or a shorter sequence is solved again without
profiling, the measured chain scaled along the batch and read off a fit along
the sequence (a sequence model is also profiled at half its length on its
first step, so that attention's T x T parts shrink as its square); a longer
sequence is profiled again.
"""

from __future__ import annotations

import collections
import contextlib
import fractions
import functools
import inspect
import logging
import math
import random
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils.checkpoint import checkpoint

import remat

from .budget import auto_budget, check_memory, share_of
from .budget import format_bytes as _fmt
from .compiled import CompiledBlocks, compile_options, in_graph_context, own_code
from .copies import leave_out_of_copies, stop_leaving_out
from .executor import Executor, Op, Program, Step, autocast_enabled
from .head import CausalLMHead, HeadOption, LossHead, UserHead, measure_options
from .hf_capture import outputs_not_captured
from .lifetimes import OutputLifetimes, replayed_peak
from .memory import AllocatorTrace, LiveBytes
from .offload import Bandwidth, bandwidth, with_offload
from .policies import COMPILED_DEFAULT_POLICIES, DEFAULT_POLICIES, NamedPolicy, Policy, resolve_policies
from .profile import SIZE_FIELDS, Profiled, _Meter, _signature, preserved_state, profile_calls
from .stages import Call, carried_output, tensors_in
from .unplanned import StepWatch

__all__ = ["AppliedPlan", "apply", "find_blocks", "find_stacks"]


def find_blocks(model: nn.Module) -> tuple[str, list[tuple[str, nn.Module]]]:
    """The longest stack of blocks in ``model``: the children of an
    ``nn.ModuleList`` or ``nn.Sequential``, or of consecutive ``nn.Sequential``
    siblings (torchvision's ``layer1..layer4``), whichever holds the most
    modules, among those holding at least half the parameters the fullest one
    holds (so that timm ConvNeXt's four stages are found, not the eight
    modules inside its third, nor a Mixture-of-Experts layer's experts), and
    not inside one block of another such stack whose blocks are all of one
    class (a two-block decoder, not its first block's layers); ties go to the
    one holding more parameters.

    A model that calls one layer several times in a forward is a stack of
    that many calls, each a stage: Hugging Face's ALBERT (its
    ``num_hidden_layers`` calls of ``num_hidden_groups`` shared layer groups)
    is found so; name any other with ``blocks=[layer] * n``.

    Returns the stack's description (``"transformer.h"``, ``"layer1..layer4"``)
    and its blocks with their qualified names. O(number of modules).

    Raises:
        ValueError: no container of at least two modules was found.
    """
    shared = _shared_layers(model)
    if shared is not None:
        return shared
    found = [
        (len(blocks), sum(p.numel() for _, b in blocks for p in b.parameters()), desc, blocks)
        for desc, blocks in candidate_stacks(model)
    ]
    fullest = max((params for _, params, _, _ in found), default=0)
    held = [c for c in found if 2 * c[1] >= fullest]

    def inside_one_of_a_stack(c: tuple[int, int, str, list[tuple[str, nn.Module]]]) -> bool:
        # Within one block of a stack of blocks of one class (a two-block T5
        # decoder's first block's three layers): that stack is the one.
        for other in held:
            if other is c or len({type(m) for _, m in other[3]}) != 1:
                continue
            for name, _ in other[3]:
                if all(n.startswith(f"{name}.") for n, _ in c[3]):
                    return True
        return False

    best = max(
        (c for c in held if not inside_one_of_a_stack(c)),
        key=lambda c: (c[0], c[1]),
        default=None,
    )
    if best is None:
        raise ValueError(
            f"found no stack of blocks in {type(model).__name__} (no nn.ModuleList or nn.Sequential of two or more "
            "modules); name it with blocks=, e.g. blocks=model.layers"
        )
    return best[2], best[3]


def candidate_stacks(model: nn.Module) -> list[tuple[str, list[tuple[str, nn.Module]]]]:
    """Every stack :func:`find_blocks` considers, in the order of
    ``named_modules``: the children of each ``nn.ModuleList`` or
    ``nn.Sequential`` of two or more, and the children of each run of
    consecutive ``nn.Sequential`` siblings. O(number of modules)."""
    found: list[tuple[str, list[tuple[str, nn.Module]]]] = []

    def consider(desc: str, blocks: list[tuple[str, nn.Module]]) -> None:
        if len(blocks) >= 2:
            found.append((desc, blocks))

    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            consider(name or "(the model)", [(f"{prefix}{n}", c) for n, c in module.named_children()])
        run: list[tuple[str, nn.Sequential]] = []
        for n, child in [*module.named_children(), ("", None)]:
            if isinstance(child, nn.Sequential) and len(child) > 0:
                run.append((n, child))
                continue
            if len(run) > 1:
                blocks = [(f"{prefix}{rn}.{cn}", c) for rn, seq in run for cn, c in seq.named_children()]
                consider(f"{prefix}{run[0][0]}..{prefix}{run[-1][0]}", blocks)
            run = []
    return found


def _disjoint_stacks(
    model: nn.Module, chosen: list[tuple[str, nn.Module]]
) -> list[tuple[str, list[tuple[str, nn.Module]]]]:
    """The candidate stacks that share no module with ``chosen`` (neither
    inside its blocks nor holding them): the stacks a first step may find to
    keep more for the backward (VGG's convolutions against its classifier)."""
    inside = {id(m) for _, b in chosen for m in b.modules()}
    return [
        (where, blocks)
        for where, blocks in candidate_stacks(model)
        if not any(id(m) in inside for _, b in blocks for m in b.modules())
    ]


def _shared_layers(model: nn.Module) -> tuple[str, list[tuple[str, nn.Module]]] | None:
    """Hugging Face ALBERT's stack: layer i of ``num_hidden_layers`` is the
    call of group ``i // (num_hidden_layers // num_hidden_groups)``, as
    ``AlbertTransformer.forward`` calls them."""
    config = getattr(model, "config", None)
    layers, groups = getattr(config, "num_hidden_layers", None), getattr(config, "num_hidden_groups", None)
    if not isinstance(layers, int) or not isinstance(groups, int) or groups < 1 or layers < 2 or layers % groups:
        return None
    for name, module in model.named_modules():
        found = getattr(module, "albert_layer_groups", None)
        if isinstance(found, nn.ModuleList) and len(found) == groups:
            base = f"{name}.albert_layer_groups" if name else "albert_layer_groups"
            per = layers // groups
            return (
                f"{base} ({layers} calls of {groups} shared group{'s' if groups > 1 else ''})",
                [(f"{base}.{i // per}", found[i // per]) for i in range(layers)],
            )
    return None


def find_stacks(model: nn.Module) -> list[tuple[str, list[tuple[str, nn.Module]]]]:
    """The stacks of ``model`` in the order its forward calls them: a Hugging
    Face encoder-decoder (``config.is_encoder_decoder``, with ``get_encoder()``
    and ``get_decoder()``) has two, the encoder's (:func:`find_blocks` of the
    encoder) then the decoder's; a two-tower model (CLIP, SigLIP: a
    ``vision_model`` and a ``text_model``) has two, in the order its
    ``forward``'s code first names them (or the ``get_image_features`` and
    ``get_text_features`` that call them); a U-Net (diffusers': its
    ``down_blocks`` then its ``up_blocks``, which read the skip connections
    the down blocks made) has two; any other model the one
    :func:`find_blocks` finds. Each stack is (where, its blocks with their
    qualified names). O(number of modules), and a parse of ``forward``.

    Raises:
        ValueError: no stack was found.

    # Example

    ```python
    import transformers
    from remat.torch import find_stacks

    config = transformers.T5Config(num_layers=2, d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=64)
    t5 = transformers.T5ForConditionalGeneration(config)
    assert [where for where, _ in find_stacks(t5)] == ["encoder.block", "decoder.block"]
    ```
    """
    config = getattr(model, "config", None)
    get_encoder, get_decoder = getattr(model, "get_encoder", None), getattr(model, "get_decoder", None)
    if getattr(config, "is_encoder_decoder", False) is True and callable(get_encoder) and callable(get_decoder):
        names = {id(m): n for n, m in model.named_modules()}
        try:
            parts = [get_encoder(), get_decoder()]
        except (AttributeError, NotImplementedError, TypeError):
            parts = []
        if (
            len(parts) == 2
            and all(isinstance(m, nn.Module) and names.get(id(m)) for m in parts)
            and parts[0] is not parts[1]
        ):
            stacks = []
            for part in parts:
                try:
                    where, blocks = find_blocks(part)
                except ValueError:
                    break
                base = names[id(part)]
                stacks.append((f"{base}.{where}", [(f"{base}.{n}", m) for n, m in blocks]))
            if len(stacks) == 2:
                return stacks
    towers = _towers(model)
    if towers is not None:
        return towers
    down, up = getattr(model, "down_blocks", None), getattr(model, "up_blocks", None)
    if isinstance(down, nn.ModuleList) and isinstance(up, nn.ModuleList) and len(down) and len(up):
        return [
            ("down_blocks", [(f"down_blocks.{i}", m) for i, m in enumerate(down)]),
            ("up_blocks", [(f"up_blocks.{i}", m) for i, m in enumerate(up)]),
        ]
    return [find_blocks(model)]


#: The attributes a two-tower model's forward names for each tower: the tower
#: itself, and the Hugging Face helper that runs it.
_TOWER_NAMES = {
    "vision_model": ("vision_model", "get_image_features"),
    "text_model": ("text_model", "get_text_features"),
}


def _towers(model: nn.Module) -> list[tuple[str, list[tuple[str, nn.Module]]]] | None:
    """The stacks of a model with a ``vision_model`` and a ``text_model``, in
    the order its ``forward``'s code first names them; None where it has not
    both, its source cannot be read, or a tower has no stack."""
    import ast
    import inspect
    import textwrap

    parts = {k: getattr(model, k, None) for k in _TOWER_NAMES}
    if not all(isinstance(m, nn.Module) for m in parts.values()):
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(type(model).forward)))
    except (OSError, TypeError, SyntaxError):
        return None
    first: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            for tower, names in _TOWER_NAMES.items():
                if node.attr in names:
                    at = (node.lineno, node.col_offset)
                    first[tower] = min(first.get(tower, at), at)
    if len(first) != len(_TOWER_NAMES):
        return None
    stacks = []
    for tower in sorted(first, key=first.__getitem__):
        try:
            where, blocks = find_blocks(parts[tower])  # type: ignore[arg-type]
        except ValueError:
            return None
        stacks.append((f"{tower}.{where}", [(f"{tower}.{n}", m) for n, m in blocks]))
    return stacks


def _resolve_stacks(
    model: nn.Module, blocks: str | nn.Module | Sequence[nn.Module] | Sequence[str] | None
) -> list[tuple[str, list[tuple[str, nn.Module]]]]:
    """The stacks ``blocks`` names (several: a list of dotted names, in the
    order the model calls them), else :func:`find_stacks`'."""
    if blocks is None:
        return find_stacks(model)
    if isinstance(blocks, (list, tuple)) and blocks and all(isinstance(b, str) for b in blocks):
        stacks = [_resolve_blocks(model, b) for b in blocks]
        for where, found in stacks:
            if len(found) < 1:
                raise ValueError(f"blocks={where!r} holds no modules")
        return stacks
    return [_resolve_blocks(model, blocks)]  # type: ignore[arg-type]


def _resolve_blocks(
    model: nn.Module, blocks: str | nn.Module | Sequence[nn.Module] | None
) -> tuple[str, list[tuple[str, nn.Module]]]:
    if blocks is None:
        return find_blocks(model)
    names = {id(m): n for n, m in model.named_modules()}
    if isinstance(blocks, str):
        try:
            container = model.get_submodule(blocks)
        except AttributeError as e:
            raise ValueError(f"blocks={blocks!r}: {e}") from None
        return blocks, [(f"{blocks}.{n}", c) for n, c in container.named_children()]
    if isinstance(blocks, (nn.ModuleList, nn.Sequential)):
        base = names.get(id(blocks))
        if base is None:
            raise ValueError("blocks= is not a submodule of the model")
        return base, [(f"{base}.{n}" if base else n, c) for n, c in blocks.named_children()]
    if isinstance(blocks, (list, tuple)):
        found = []
        for i, b in enumerate(blocks):
            if not isinstance(b, nn.Module):
                raise TypeError(f"blocks[{i}] is a {type(b).__name__}, not an nn.Module")
            if id(b) not in names:
                raise ValueError(f"blocks[{i}] ({type(b).__name__}) is not a submodule of the model")
            found.append((names[id(b)], b))
        return "the given blocks", found
    raise TypeError(
        "blocks must be a dotted name, an nn.ModuleList/nn.Sequential or a list of modules, "
        f"got {type(blocks).__name__}"
    )


def _reset_code(code: Any) -> None:
    """Drops Dynamo's cache and decisions for one code object (where this
    torch has the call: a later trace then starts afresh)."""
    reset = getattr(torch._dynamo, "reset_code", None)
    if reset is not None:
        reset(code)


#: Bytes every plan leaves free below its budget: what the profile's figures
#: may miss of tensors a few bytes large (CLIP's step measured 16 B above a
#: prediction its budget equalled, at its smallest budget, git 8ddccad: a
#: bridge's backward left them).
_MARGIN = 512

#: A forward transient no budget holds: the stages' plain forwards made
#: impossible, for plans that record every block (AppliedPlan._in_graph_plan).
_NO_PLAIN_FORWARD = 1 << 50

#: How far (a share of the step's budget) an in-graph plan's first step may
#: measure below the chain's prediction before remat tries a plan solved
#: that much higher (AppliedPlan._raise_in_graph).
_IN_GRAPH_SLACK = 0.02

#: How much slower (predicted) a plan that runs inside torch.compile's graph may
#: be than the fastest plan of all and still be chosen: what it saves by not
#: running remat's executor between compiled blocks (measured on the Llama shape
#: of benchmarks/compiled_curve.py: the same options per block ran 4.7-5.9%
#: faster inside the graph, 2026-11-27).
_IN_GRAPH_GAIN = 0.05

#: A plan that computes the loss in chunks is kept over one with the head
#: whole only when faster by this share of the step, or when the head whole
#: does not fit (docs/model.md, "Ways to compute the loss").
_CHUNKS_GAIN = 0.05

#: In-graph plans measured (each one step) before the executor's plan is kept:
#: each one above the budget is solved again below it by what the graph held
#: above its prediction.
_IN_GRAPH_TRIES = 3
#: Compiled plans the executor runs, measured in a row above their budget,
#: before remat warns: each is solved lower by what the ones before took
#: above it, twice that from the fourth (a new plan errs otherwise: on
#: ResNet-50 at 50% three plans ended 0.12% above the budget).
_EXECUTOR_TRIES = 6

_log = logging.getLogger("remat.torch")

#: Input shapes (by the elements of the model's inputs) whose first eager
#: step measures the parts outside the stack again, after the first shape's:
#: later ones are read off the first's (scaled, rounded up). Each such step
#: runs under the allocator's trace (about a microsecond an operator).
#: As many as the first shape and the lengths sized anew (_SHAPES_PROFILED)
#: may need, with room for batch sizes: variable-length training measured
#: 0.94-0.98 of its prediction below half the profiled length with 8, where
#: the outside parts of the lengths past the eighth were scaled.
_SHAPES_MEASURED = 16

#: How many sequence lengths below half the profiled one each profile sizes
#: anew on the step's own inputs (one forward and the distinct blocks' sizes
#: each, once): past them, a length is read off the fit and scaled.
_SHAPES_PROFILED = 8

#: The shortest sequence remat also profiles at half its length, to fit the
#: sizes that grow as its square (see AppliedPlan._profile_shorter).
_SHORTEST_FITTED = 8

#: Bytes of a step's scalars that do not shrink with the input (the loss, the
#: seed of its gradient; a CPU allocation of a 0-d tensor is 4 to 8 bytes).
_SCALARS = 64

#: The devices whose blocks get the offload option (``apply(offload=True)``):
#: on the CPU the host is the device, so it would move nothing (tests add "cpu"
#: to run it there).
_OFFLOAD_DEVICES: tuple[str, ...] = ("cuda",)


@dataclass
class _Outside:
    """Memory of the step outside the stack, measured on a training step (bytes)."""

    pre: int = 0  # what the part before the stack keeps, throughout the stack
    post_peak: int = 0  # the most the part after it takes, forward to delta^L
    post_after: int = 0  # what of that stays through the stack's backward
    activation: int = 1  # elements of the activation between blocks then
    pre_backward: int = 0  # the most the step holds from the stack's input gradient to the end

    #: Bytes of the trainable parameters outside the stack: their gradients
    #: are part of the head's and the embeddings' backward peaks, and do not
    #: grow or shrink with the input (see _scaled): an upper bound on what of
    #: those peaks does not scale.
    fixed: int = 0
    #: Of ``pre``, what is gone when the stack's backward starts beyond what
    #: the part after it leaves (the embeddings' inputs, which the model's
    #: code holds until its forward returns): counted in the forward only.
    released: int = 0
    #: Bytes of the stack's input where the caller made it before the step
    #: (the model's own input: a CNN whose stem is its first block). The
    #: chain counts a^0 throughout; the step's peak, measured above what the
    #: step starts with, does not: the step holds that much less than the chain.
    given: int = 0
    #: An upper bound on what of ``pre`` does not grow or shrink with the
    #: input: per-channel statistics (a batch norm saves a mean and an
    #: inverse deviation per channel: at most the 1-D parameters and buffers
    #: outside the stack) and scalars.
    fixed_pre: int = 0
    #: Bytes of the trainable parameters of the part after the stack (the
    #: head; a weight it shares with the embeddings included): what of its
    #: figures does not scale. -1 where not known (``fixed`` then).
    fixed_post: int = -1
    #: Elements of the model's tensor inputs on the measured step (0: not
    #: known): the parts outside the stack grow with them, which may be
    #: faster than with the activation between blocks (Wav2Vec2's
    #: convolutions turn 8,000 samples into 399 frames and 6,000 into 299).
    inputs: int = 0
    #: Of ``post_peak``, the last block's input a^{L-1} that the step freed
    #: before the head's peak and ``post_peak`` counts as held (a plan that
    #: runs the last block without recording, F_none^L, drops it from the
    #: chain there). A plan whose chain still holds a^{L-1} at the head
    #: counts it twice: AppliedPlan._solve's prediction leaves it out once.
    input_dropped: int = 0

    def held(self) -> int:
        """What the step holds beyond the chain, throughout it: the part before
        the stack (less what is gone by its backward) and what the part after
        it leaves through the backward, less the input the caller holds. May
        be negative."""
        return self.pre - self.released + self.post_after - self.given

    def scaled(self, numel: int, inputs: int = 0) -> _Outside:
        """The figures for ``numel`` elements between blocks (and ``inputs``
        elements of the model's inputs, where known): scaled by the larger
        of the two ratios. O(1)."""
        f = numel / self.activation
        if inputs > 0 and self.inputs > 0:
            f = max(f, inputs / self.inputs)

        def peak(v: int, fixed: int = self.fixed) -> int:
            return int(_scaled_keeping(v, fixed, f))

        post = self.fixed if self.fixed_post < 0 else self.fixed_post

        # What is added is rounded up and keeps its part that does not scale
        # (ResNet-50's stem at half the batch: its batch norm's 512 B of
        # statistics; the loss's scalars): predicted low, a step ran 260 B
        # above its budget. What is subtracted is rounded down.
        return _Outside(
            _part_scaled(self.pre, self.fixed_pre, f),
            # The head's own: the embeddings' gradient is not made before the
            # stack's backward (a small Llama at 40 of 64 tokens was predicted
            # 4.3% high with every outside parameter kept whole there).
            peak(self.post_peak, post),
            _part_scaled(self.post_after, post + _SCALARS, f),
            numel,
            peak(self.pre_backward),
            self.fixed,
            int(self.released * f),
            int(self.given * f),
            self.fixed_pre,
            self.fixed_post,
            math.ceil(self.inputs * f),
            int(self.input_dropped * f),
        )


@dataclass
class _BridgeFigures:
    """What the model's code between two stacks held in a training step
    (bytes, with ``numel`` elements of the first stack's input)."""

    held: int  # from its forward to its backward: abar of its stage, the next stack's input included
    transient: int  # beyond that, while it ran
    numel: int
    backward: int = 0  # its backward's transient (0 until measured)


def _as_is(t: Any) -> Any:
    return t


class _BlockSlot:
    """What the forward remat installs on one block reads: the block's stages
    (several where the model calls it several times in a forward) and its
    in-graph plans. A plain object, so that Dynamo, tracing the forward,
    guards on what is read of it (the option a block runs), not on which
    block it is: blocks that run one option share one compiled graph."""

    def __init__(self, stages: list[int]) -> None:
        self.stages = stages
        #: (stage, its input's shape or elements) -> (option, context function).
        self.plans: dict[tuple[int, Any], tuple[int, Any]] = {}
        #: The same for a block called once, by shape or elements alone.
        self.by_size: dict[Any, tuple[int, Any]] = {}

    def set_plans(self, found: dict[tuple[int, Any], tuple[int, Any]]) -> None:
        """Keeps the plans of ``found`` (every block's) that are this block's."""
        self.plans = {(l, n): p for (l, n), p in found.items() if l in self.stages}
        self.by_size = {n: p for (_, n), p in self.plans.items()} if len(self.stages) == 1 else {}

    def stage(self, expected: int | None) -> int:
        """The stage this call of the block is: the one the pass expects next
        where the block is several stages, else its only one."""
        if len(self.stages) > 1 and expected in self.stages:
            assert expected is not None
            return expected
        return self.stages[0]

    def in_graph_plan(self, expected: int | None, shape: tuple[int, ...], numel: int) -> tuple[int, Any] | None:
        """The in-graph plan of this call on an input of ``shape`` (``numel``
        elements), if any: planned by the shape where the plan knew it (the
        blocks whose input is the stack's: 1 x 256 tokens are not 4 x 64, whose
        plan ran them 72% over in round 5), else by elements. A block called
        once looks up without its stage, which stays unread."""
        if len(self.stages) == 1:
            found = self.by_size.get(shape)
            return found if found is not None else self.by_size.get(numel)
        l = self.stage(expected)
        found = self.plans.get((l, shape))
        return found if found is not None else self.plans.get((l, numel))


class _Between(nn.Module):
    """The stage that stands for the model's code between two stacks: run by
    the model, never by remat (its forward is not called)."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("remat: the code between two stacks is the model's own; remat does not run it")


@dataclass
class _Entry:
    """A plan for one kind of input (dtype, device, mode, autocast)."""

    base: remat.Chain  # as profiled
    numel: int  # elements of the carried activation it was profiled with
    shape: tuple[int, ...]  # and its shape
    inplace: list[bool]
    uses_rng: list[bool]
    options: list[list[NamedPolicy | None]]
    compiled: bool = False  # the blocks run compiled (the chain measured their compiled variants)
    in_graph: bool = False  # the model runs under torch.compile: a plan may run inside its graph
    outside: _Outside | None = None
    #: The parts outside the stack measured on a step with ``numel`` elements
    #: between blocks (a shape after the first: see _SHAPES_MEASURED), used
    #: there instead of ``outside`` scaled: what scales as the square of the
    #: sequence (DeBERTa's relative attention's tensors before its stack) or
    #: not at all (the head's parameter gradients, which a scaled figure
    #: keeps whole) is read as it is. DeBERTa-v2 at 48 of 64 tokens was
    #: predicted 2.2% high.
    outside_at: dict[tuple[int, int], _Outside] = field(default_factory=dict)
    #: Bytes of the gradients of the blocks' side inputs that require one (an
    #: encoder's output, read by every decoder block's cross-attention; a
    #: U-Net's skip connections, nested in a tuple), with ``numel`` elements
    #: between blocks: autograd accumulates each from the backward of the last
    #: block that reads it to the first's, beside the schedule.
    side_gradients: int = 0
    #: Where in the backward each of those gradients is held (see
    #: _SideGradients.figures), with ``numel`` elements between blocks.
    side: _SideFigures | None = None
    #: Bytes of the side inputs a stack's later blocks get that its first
    #: block did not (T5's attention biases, made by its first block): the
    #: executor keeps a block's call to run it again, and with it these,
    #: which plain training frees after the forward. Set aside throughout.
    side_kept: int = 0
    #: Those bytes by the stages that read them (``_Kept.by_readers``): a
    #: plan that runs none of a tensor's readers again does not keep it.
    side_kept_readers: list[tuple[frozenset[int], int]] = field(default_factory=list)
    by_numel: dict[int, _Planned] = field(default_factory=dict)
    #: The stacks profiled at half the sequence (see AppliedPlan._profile_shorter),
    #: None where not: shorter sequences then scale linearly.
    shorter: dict[str, Any] | None = None
    #: The stacks' sizes profiled at a sequence below half the first one's
    #: (see _SHAPES_PROFILED), by elements between blocks and length: read as they are
    #: (the times scaled), where the fit through T and T/2 would read every
    #: size at least at its linear scaling, 11-19% high on GPT-2 and Llama.
    sized: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    #: For each plan of ``by_numel`` where ``shorter`` is known, the sequence
    #: length it was solved for (as many elements at another length differ).
    lengths: dict[int, int] = field(default_factory=dict)
    #: The bytes of each bridge stage's output (the next stack's input), with
    #: ``numel`` elements between blocks.
    bridge_outputs: dict[int, int] = field(default_factory=dict)
    #: Options blocks could not run, dropped for them: (block index from 0,
    #: policy name, the error's first line).
    dropped: list[tuple[int, str, str]] = field(default_factory=list)
    #: Per stage, what of each size does not grow with the batch, where the
    #: profile measured it (see remat.torch.profile.fixed_parts).
    fixed: list[dict[str, Any] | None] = field(default_factory=list)
    #: Per stage, for option 0 and each option, the copy of its input its
    #: compiled variant saves, as a share of the input's bytes, which one
    #: model's graph does not make (see remat.torch.profile._input_copies);
    #: 0 for each stack's first block.
    input_copies: list[list[float]] = field(default_factory=list)
    #: Blocks (1-based) whose input is not the block before's output but what
    #: the model's code makes of it (``x = x + layer(x)`` around the blocks):
    #: a rerun of the block before cannot make it (see _with_derived_inputs).
    derived: set[int] = field(default_factory=set)


@dataclass
class _Planned:
    """A solved plan for one number of elements between blocks."""

    chain: remat.Chain
    schedule: remat.Schedule
    executor: Executor
    budget: int  # the stack's
    note: str  # the budget's arithmetic
    total: int  # the whole step's budget
    #: The option each block is recorded with, where the plan runs inside
    #: torch.compile's graph (every block recorded in the forward: see
    #: AppliedPlan._in_graph_plan); None where remat's executor runs it.
    in_graph: tuple[int, ...] | None = None
    #: The loss option: the head and the loss whole (1) or in this many
    #: chunks of tokens (docs/model.md, "Ways to compute the loss").
    chunks: int = 1
    #: The parts outside the stack as this plan's loss option has them (None
    #: before they are measured).
    outside: _Outside | None = None
    #: The stack's predicted peak (the schedule's, less the over-count of
    #: what is gone by the stack's backward in its recomputations); None:
    #: the schedule's.
    peak: int | None = None
    #: A compiled plan's whole step as the allocator measured its first step,
    #: within the budget (see AppliedPlan._verified_in_graph): the chain's
    #: figures are each block's compiled variants measured alone, and one
    #: graph (or many reruns) holds what none of them shows. Later steps of
    #: the plan measure the same (tested). None: not measured (eager plans,
    #: whose prediction holds).
    measured: int | None = None
    #: Of the side inputs the budget set aside as kept (_Entry.side_kept),
    #: the bytes of those whose readers this plan records in the forward
    #: phase and never runs again: its executor does not keep them.
    unkept: int = 0
    #: The chains whose replay of the schedule bounds the step's peak, with
    #: the bytes each adds to the forward phase's forwards
    #: (:func:`replayed_peak`); ``peak`` is the least. Empty where the
    #: prediction is not replayed again (inside the graph, micro-batches in
    #: flight).
    replays: tuple[tuple[remat.Chain, int], ...] = ()
    #: The blocks' outputs a step of this plan freed before the chain stops
    #: counting them, each with the operation from which on (see
    #: :class:`OutputLifetimes`); None until a step has run the plan whole.
    freed: dict[tuple[int, int], int] | None = None

    @property
    def stack_peak(self) -> int:
        return self.schedule.peak_memory if self.peak is None else self.peak

    def lifetimes(self) -> OutputLifetimes | None:
        """What a step of this plan follows of its blocks' outputs; None where
        nothing is left to learn."""
        if self.freed is not None or not self.replays:
            return None
        return OutputLifetimes([(k, l) for k, l, _ in self.schedule.operations_with_options], self.learn)

    def learn(self, seen: OutputLifetimes) -> None:
        """Takes what a step of the plan freed (``seen``) into its predicted
        peak: the least replay without those outputs. O(replays x the
        schedule's replay)."""
        if seen.spoiled or self.freed is not None:
            return
        self.freed = dict(seen.freed)
        if self.freed:
            # Called from a backward's hook: a refinement of the prediction
            # never stops a step (the chain's own figure stands).
            try:
                lower = min(replayed_peak(c, self.schedule, e, self.freed) for c, e in self.replays)
            except (ValueError, RuntimeError) as e:
                _log.debug("the plan's prediction is the chain's: %s", e)
                return
            self.peak = min(self.stack_peak, lower)


class AppliedPlan:
    """What :func:`apply` installed: the stack, its chain and schedule, the
    budget's arithmetic. Behaves as a handle: :meth:`remove` undoes it.

    Attributes:
        model: the model it was applied to.
        blocks: the stack's blocks, as (qualified name, module).
        where: where the stack was found (``"transformer.h"``).
    """

    def __init__(
        self,
        model: nn.Module,
        blocks: list[tuple[str, nn.Module]],
        where: str,
        memory: int | str,
        *,
        algorithm: str,
        slots: int,
        exact_memory: int | None,
        repeat: int,
        preserve_rng: bool,
        optimizer_state_bytes: int | None,
        scale_shapes: bool,
        policies: Sequence[NamedPolicy] = (),
        in_flight: int = 1,
        compiled_policies: Sequence[NamedPolicy] | None = None,
        compile: bool | dict[str, Any] | None = None,
        chunked_loss: bool = True,
        offload: bool = False,
        head: LossHead | None = None,
        stacks: Sequence[tuple[str, int]] | None = None,
        alternatives: Sequence[tuple[str, list[tuple[str, nn.Module]]]] = (),
    ) -> None:
        #: What a plan on another stack is made with (see _choose_stack).
        self._init_kwargs: dict[str, Any] = {
            "algorithm": algorithm,
            "slots": slots,
            "exact_memory": exact_memory,
            "repeat": repeat,
            "preserve_rng": preserve_rng,
            "optimizer_state_bytes": optimizer_state_bytes,
            "scale_shapes": scale_shapes,
            "policies": policies,
            "in_flight": in_flight,
            "compiled_policies": compiled_policies,
            "compile": compile,
            "chunked_loss": chunked_loss,
            "offload": offload,
            "head": head,
        }
        #: Stacks found beside this one that share no module with it: the first
        #: training step measures what each keeps for the backward (see
        #: _choose_stack). Empty where blocks= named the stack.
        self._alternatives = list(alternatives)
        #: Why the plan is on this stack, where a first step chose it.
        self._stack_note: str | None = None
        self.model = model
        self.blocks = blocks
        self.where = where
        #: The stacks, in the order the model calls them: (where, number of
        #: blocks). Several are planned as one chain, a stage standing for the
        #: model's code between two of them (docs/model.md, "Several stacks").
        self.stacks = list(stacks) if stacks is not None else [(where, len(blocks))]
        if sum(n for _, n in self.stacks) != len(blocks) or any(n < 1 for _, n in self.stacks):
            raise ValueError(f"stacks= {self.stacks} do not hold the {len(blocks)} blocks")
        self.memory = memory
        self.algorithm = algorithm
        self.slots = slots
        self.exact_memory = exact_memory
        self.repeat = repeat
        self.preserve_rng = preserve_rng
        self.optimizer_state_bytes = optimizer_state_bytes
        self.scale_shapes = scale_shapes
        #: Micro-batches whose forward residue the device holds at once (pipeline
        #: parallelism, :mod:`remat.torch.pipeline`): the plan bounds
        #: ``(in_flight - 1) x residue + peak``. 1: one step at a time.
        self.in_flight = in_flight
        #: How blocks run: None, compiled when the model runs under
        #: ``torch.compile``; True (or ``torch.compile`` arguments), always
        #: compiled; False, always eager.
        self.compile = compile
        options = compile_options(compile)
        self._blocks = CompiledBlocks(options if options is not None else {}, _signature)
        self._variants: dict[tuple[int, str | None], Callable[..., Any]] = {}
        #: The policies each block is measured under (its recording options).
        self.policies = list(policies)
        #: Those for compiled blocks (COMPILED_DEFAULT_POLICIES where the
        #: defaults were left).
        self.compiled_policies = list(compiled_policies) if compiled_policies is not None else self.policies
        #: Whether eager blocks on a GPU get the offload option (docs/model.md,
        #: "Offload"); the copy bandwidths measured once per device.
        self.offload = offload
        self._bandwidth: dict[torch.device, Bandwidth] = {}
        # The chain's stages: the blocks, with one stage between two stacks.
        self.modules: list[nn.Module] = []
        self.names: list[str] = []
        bridges: list[int] = []
        k = 0
        for i, (where_i, n) in enumerate(self.stacks):
            if i:
                self.modules.append(_Between())
                self.names.append(f"between {self.stacks[i - 1][0]} and {where_i}")
                bridges.append(len(self.modules))
            for name, module in blocks[k : k + n]:
                self.modules.append(module)
                self.names.append(name)
            k += n
        #: The stages (1-based) that stand for the code between two stacks.
        self._bridges = frozenset(bridges)
        #: A module in the blocks that takes its input sequence first (None:
        #: none does): dimension 0 is not the batch, so no shape is sized by
        #: scaling another's (see _sequence_first).
        self._sequence_first = _sequence_first(self.modules)
        #: Whether a shape's sizes may be scaled from another's profile.
        self._scaled_shapes = self.scale_shapes and self._sequence_first is None
        #: What each of them was measured to hold (see _Measure.bridge_ends).
        self._bridge_figures: dict[int, _BridgeFigures] = {}
        self._originals: list[Callable[..., Any]] = []
        self._forward_code: dict[str, types.CodeType] = {}  # the blocks' forwards' (see _make_forward)
        self._had_instance_forward: list[Any] = []
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        self._last: tuple[_Entry, int, torch.device] | None = None
        self._last_shape: tuple[int, ...] | None = None  # the first block's input's, on that step
        self._last_inputs: tuple[Any, ...] | None = None  # the model's inputs' shapes, on that step
        self._step: Step | None = None
        #: What this step follows of its blocks' outputs (see _Planned.freed).
        self._lifetimes: OutputLifetimes | None = None
        self._executor: Executor | None = None
        self._measure: _Measure | _TracedMeasure | _Verify | None = None
        self._compiled_steps = 0  # training forwards under torch.compile so far
        #: Plans that run inside torch.compile's graph: (block, its input's shape,
        #: or its elements where the shape is not the stack input's) -> (its
        #: option, that option's checkpoint context function).
        #: Read by the forwards remat installs while Dynamo traces them.
        self._in_graph: dict[tuple[int, Any], tuple[int, Any]] = {}
        #: Each stage's block's slot (see _BlockSlot): what its forward reads.
        self._slots: dict[int, _BlockSlot] = {}
        #: Whether ``_in_graph`` holds a plan: what the forwards and hooks
        #: Dynamo traces read (a dict read there is guarded on its contents,
        #: so every new plan compiled every block's wrapper again).
        self._in_graph_on = False
        #: The shapes of the model's inputs (see _shapes_of) the in-graph plans
        #: were made for: a step of another shape starts as any step does.
        self._in_graph_inputs: frozenset[tuple[Any, ...]] = frozenset()
        self._verifying = False  # the next compiled step measures the in-graph plan's peak
        # The side inputs of the pass's blocks so far (see _side_inputs).
        self._side = _SideGradients()
        # And of the side inputs the executor keeps (see _Entry.side_kept).
        self._kept = _Kept(self._bridges)
        self._verified: tuple[int, int] | None = None  # (measured peak, the step's budget)
        #: The last verified step started with parameters that had no gradient:
        #: it left out from their allocation the gradients it gave them, which
        #: a step that adds into .grad (accumulation) holds as transients. The
        #: first such step is measured again (see _model_starts).
        self._verified_fresh = False
        #: Steps add into the model's parameters' .grad (gradient
        #: accumulation), seen once and for good: a compiled block's backward
        #: then holds the gradients it returns as transients, which its
        #: profile left out (see _Meter.compiled; _solve adds them).
        self._accumulating = False
        self._in_graph_refused: str | None = None  # why in-graph plans are off for good
        #: What the compiler's one graph held above the chain's prediction, by
        #: measurement: in-graph plans are solved this much below the budget.
        self._in_graph_excess = 0
        self._in_graph_tries = 0  # in-graph plans measured so far (at most _IN_GRAPH_TRIES)
        self._in_graph_over: int | None = None  # the last in-graph plan's peak measured above its budget
        #: A verified in-graph plan kept while one solved higher is measured
        #: (see _verified_in_graph); None when no such try runs.
        self._in_graph_fallback: _Planned | None = None
        self._in_graph_raised = False  # that try was made (once)
        #: The same for a compiled plan the executor runs: its next step's
        #: peak is measured by the allocator (see _verified_executor), and
        #: compiled stacks are solved ``_executor_excess`` below the budget.
        self._verifying_executor = False
        self._executor_excess = 0
        self._executor_tries = 0
        self._infeasible: remat.InfeasibleError | None = None  # what the last re-plan found, for explain()
        self._outside: _Outside | None = None  # the last measurement of the parts outside the stack
        #: The model's inputs' elements of each shape whose outside parts were
        #: measured (see _SHAPES_MEASURED), and whether the measurement under
        #: way is of a shape after the first.
        self._shapes_measured: set[tuple[Any, ...]] = set()
        self._shape_measure = False
        self._hooks: list[Any] = []
        #: The forward installed on each block (by id), and the modules whose
        #: copies leave this plan out (see copies.py).
        self._installed: dict[int, Callable[..., Any]] = {}
        self._copied_out: list[nn.Module] = []
        self._rerunning = False  # a rerun calls the block itself, which must not schedule again
        #: Steps unlike the planned one (two forwards in flight, a retained
        #: graph, create_graph), said once each.
        self._watch = StepWatch(self.where, self._residue_and_peak, self.in_flight)
        # The executor's saved-tensor hooks of the rerun in progress (see _rerun).
        self._rerun_recording: tuple[Callable[[torch.Tensor], Any], Callable[[Any], torch.Tensor]] | None = None
        #: The model's inputs in the forward now running (see _capture), and
        #: while _capture runs, each block's call found so far.
        self._inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._capturing: list[Call | None] | None = None
        #: The caller holds the gradient of the stack's output through the last
        #: block's backward (a pipeline stage that receives it from the next
        #: rank): that backward cannot sum a residual's gradients into it.
        self.output_gradient_held = False
        #: Whether the stack's input is the step's own memory even where the
        #: step did not make it: a pipeline stage's, which the pipeline
        #: received and holds for each micro-batch (see _Outside.given).
        self.input_in_step = False
        #: While _capture runs: the carried output of the block it last ran,
        #: and the blocks whose input was something else.
        self._captured_output: torch.Tensor | None = None
        self._captured_derived: set[int] = set()
        self._captured_first: Call | None = None  # the first block's call, its carried tensor included
        self._captured_kept = _Kept(frozenset())  # the side inputs the last capture found kept (see _Kept)
        #: While _capture runs, the tensors alive at the first block's call
        #: (see _alive_tensors); and where in the calls the last capture found
        #: side inputs that were, which every step's count leaves out.
        self._captured_alive: dict[int, torch.Tensor] = {}
        self._older_side: frozenset[tuple[int, Any]] = frozenset()
        self._captured_side = _SideGradients()  # and their gradients
        #: The compiled graph a compiled recomputation runs inside the module's
        #: call (see _variant), for remat's forward to run once.
        self._body: Callable[..., Any] | None = None
        self._last_carried: torch.Tensor | None = None  # the last block's output in a pass not yet over
        #: The block the model's forward now running must call next (L + 1:
        #: the pass over the stack has ended); None outside the model's forward.
        self._expected: int | None = None
        #: Bytes of the gradients of parameters used in more than one place (tied
        #: weights), which autograd holds until their last use is reached: part
        #: of what the step holds after the stack, shown by explain().
        self.pending_gradients = _tied_bytes(model)
        #: Bytes of each block's largest trainable parameter: its gradient,
        #: made in the block's backward before it is added to ``.grad``, is a
        #: part of the backward's transient that does not grow with the input.
        self._weight_gradients = [
            max((p.numel() * p.element_size() for p in m.parameters() if p.requires_grad), default=0)
            for m in self.modules
        ]
        #: Bytes of each block's trainable parameters: the gradients its
        #: compiled backward returns at once, transients where a step adds
        #: them into .grad (see _accumulating).
        self._block_gradients = [
            sum(p.numel() * p.element_size() for p in m.parameters() if p.requires_grad) for m in self.modules
        ]
        #: Bytes of the trainable parameters more than one stage uses: those of
        #: a module called more than once (ALBERT's shared layer) and those
        #: blocks share (a layer or a weight tied across them). Autograd sums
        #: their gradients from the last use's backward to the first's before
        #: accumulating them, so the sum is alive from the last use's backward
        #: on: counted in the transients of every operation of the stages
        #: before the last (see _with_more_transient). Blocks of their own
        #: that share a weight take one more of its sizes besides (measured:
        #: three at the peak of their backward where blocks with their own
        #: weights take one; ALBERT's one module called n times measured
        #: within 1% with the sum alone): the largest such weight's. Blocks
        #: sharing a layer measured 1.16x their budget with neither counted,
        #: 1.10x with the sum alone (round 5).
        uses = collections.Counter(id(p) for m in self.modules for p in m.parameters() if p.requires_grad)
        owners = collections.Counter(
            id(p) for m in {id(m): m for m in self.modules}.values() for p in m.parameters() if p.requires_grad
        )
        unique = {id(p): p for m in self.modules for p in m.parameters()}
        self._shared_gradients = sum(p.numel() * p.element_size() for k, p in unique.items() if uses[k] > 1) + max(
            (p.numel() * p.element_size() for k, p in unique.items() if owners[k] > 1), default=0
        )
        inside = {id(p) for m in self.modules for p in m.parameters()}
        # All of them, not the largest: a layer's backward makes its weight's
        # and its bias's gradients together, and a step's scalars do not
        # shrink either (MobileNet-V3's classifier at half the batch took 3 KiB
        # above its 2.25 MiB weight's gradient, against 1 KiB at the batch
        # profiled: predicted low, over its budget).
        self._outside_gradients = sum(
            p.numel() * p.element_size() for p in model.parameters() if p.requires_grad and id(p) not in inside
        )
        in_stack = {id(x) for b in self.modules for x in b.modules()}
        self._outside_per_channel = _SCALARS + sum(
            t.numel() * t.element_size()
            for m in model.modules()
            if id(m) not in in_stack
            for t in [*m.parameters(recurse=False), *m.buffers(recurse=False)]
            if t.dim() == 1 and t.is_floating_point() and id(t) not in inside
        )
        self._in_stack = in_stack
        #: Bytes of the trainable parameters of the modules the model's
        #: forward does not call before its last block (the head, a weight it
        #: shares with the embeddings included), found by :meth:`_capture`;
        #: -1 until then (every parameter outside the stack is counted).
        self._head_gradients = -1
        self.profiles = 0  # how many times the stack was profiled (one per kind of input)
        #: The head and the loss as remat may compute them (a Hugging Face
        #: causal LM's), their loss options once measured (the second training
        #: step), the elements between blocks then, and why not, where not.
        self._lm_head: CausalLMHead | UserHead | None = (
            UserHead(model, head) if head is not None else CausalLMHead.of(model) if chunked_loss else None
        )
        self._head_options: list[HeadOption] | None = None
        self._head_numel = 1
        self._head_held = 0  # bytes of logits the loop held through the backward (see _profile_head)
        self._head_refused: str | None = None
        self._had_model_forward: Any = None
        self._head_forward = False  # the model's forward replaced (a plan computes the loss in chunks)
        self._head_seen: list[torch.Tensor] = []  # the head's input in a step that measures the options
        self._head_measuring = False  # the options' own runs of the head, not the step's
        self._head_hook: Any = None  # remat's own forward hook on the head
        #: The modules of Hugging Face's own checkpointing (those with a
        #: ``gradient_checkpointing`` flag) and the flags as the user last set
        #: them: remat's plan replaces that checkpointing (see _take_over_hf).
        self._hf_flags = [m for m in model.modules() if isinstance(getattr(m, "gradient_checkpointing", None), bool)]
        self._hf_user: list[bool] | None = None
        self._install()
        self._take_over_hf()

    # -- installing ---------------------------------------------------------

    def _ours(self, module: nn.Module) -> bool:
        """Whether ``module.forward`` is still the one this plan installed (a
        later plan's, or the user's, is not this plan's to put back)."""
        installed = self._installed.get(id(module))
        return installed is not None and module.__dict__.get("forward") is installed

    def _leave_out_of_copies(self, module: nn.Module, i: int | None, forward: bool = True) -> None:
        """Copies and pickles of ``module`` leave out this plan's hooks and,
        with ``forward``, its forward (block ``i``'s; the model's with ``i``
        None) (see copies.py)."""

        def installed() -> dict[str, Any]:
            if not forward:
                return {}
            if i is not None:
                return {"forward": self._had_instance_forward[i]} if self._ours(module) else {}
            return {"forward": self._had_model_forward} if self._head_forward else {}

        leave_out_of_copies(module, installed, lambda: {h.id for h in self._hooks})
        self._copied_out.append(module)

    def _install(self) -> None:
        first: dict[int, int] = {}  # a module's first stage (0-based): one called several times is several stages
        for i, m in enumerate(self.modules):
            if isinstance(m, _Between):
                self._had_instance_forward.append(None)
                self._originals.append(m.forward)
                continue
            if id(m) in first:
                j = first[id(m)]
                self._had_instance_forward.append(self._had_instance_forward[j])
                self._originals.append(self._originals[j])
                continue
            first[id(m)] = i
            self._had_instance_forward.append(m.__dict__.get("forward"))
            original = m.forward
            self._originals.append(original)
            slot = _BlockSlot([l for l, other in enumerate(self.modules, 1) if other is m])
            for l in slot.stages:
                self._slots[l] = slot
            m.forward = self._make_forward(slot, original)  # type: ignore[method-assign]
            self._installed[id(m)] = m.forward
            self._leave_out_of_copies(m, i)
        starts = torch.compiler.disable(self._model_starts, recursive=True)

        def model_starts(module: nn.Module, args: Any, kwargs: Any) -> None:
            # Traced by Dynamo under torch.compile (which then sees True), then
            # one graph break into the eager measurement; none where the plan
            # runs inside the graph (once its peak is measured), for the
            # shapes of inputs it was planned for: a new shape starts as any
            # step does (its blocks, whose in-graph plan is not found, go to
            # the executor, which profiles and plans it).
            if (
                self._in_graph_on
                and not self._verifying
                and torch.compiler.is_compiling()
                and _shapes_of(args, kwargs) in self._in_graph_inputs
            ):
                return
            starts(torch.compiler.is_compiling(), args, kwargs)

        ends = torch.compiler.disable(self._model_ends, recursive=True)

        def model_ends(module: nn.Module, args: Any, output: Any) -> None:
            if self._in_graph_on and not self._verifying and torch.compiler.is_compiling() and self._expected is None:
                return  # the step ran inside the graph (model_starts was skipped)
            ends(module, args, output)

        self._hooks.append(
            self.model.register_forward_pre_hook(own_code(model_starts, f"remat_starts_{id(self):x}"), with_kwargs=True)
        )
        self._hooks.append(
            self.model.register_forward_hook(own_code(model_ends, f"remat_ends_{id(self):x}"), always_call=True)
        )
        self._leave_out_of_copies(self.model, None)
        if self._lm_head is not None:
            self._leave_out_of_copies(self._lm_head.head, None, forward=False)  # its hooks only
            # The loss options are measured from hooks on a step the model's
            # own forward runs; its forward is replaced only once a plan
            # computes the loss in chunks (see _chunked_forward).
            head = self._lm_head

            def head_input(_m: nn.Module, args: Any, _out: Any) -> None:
                if torch.compiler.is_compiling() or not torch.is_grad_enabled():
                    return
                if self._head_options is None and self._head_refused is None and args and not self._head_measuring:
                    self._head_seen.append(args[0])

            def head_step(_m: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
                if torch.compiler.is_compiling():
                    return
                seen, self._head_seen = self._head_seen, []
                if seen and self._head_options is None and self._head_refused is None:
                    self._profile_head(seen, args, kwargs, output)

            # Each with a code object of its own (own_code): Dynamo traces them.
            self._head_hook = own_code(head_input, f"remat_head_input_{id(self):x}")
            self._hooks.append(head.head.register_forward_hook(self._head_hook))
            step_hook = own_code(head_step, f"remat_head_step_{id(self):x}")
            self._hooks.append(self.model.register_forward_hook(step_hook, with_kwargs=True))
        # A training forward builds no key/value cache (Hugging Face's own
        # checkpointing turns it off too); put back by remove().
        config = getattr(self.model, "config", None)
        self._use_cache = getattr(config, "use_cache", None)
        if self._use_cache:
            config.use_cache = False

    def _make_forward(self, slot: _BlockSlot, original: Callable[..., Any]) -> Callable[..., Any]:
        # ``slot.stages``: the module's stages, more than one where the model
        # calls it several times in a forward (ALBERT's shared layer): each
        # call is the stage the pass over the stack expects next.
        # The executor runs eagerly (Python state, saved-tensor hooks), so
        # Dynamo breaks the graph into it; the blocks it runs are compiled
        # functions of their own when the model runs compiled (Dynamo, tracing
        # this wrapper, sees is_compiling() True) or compile= says so. A rerun
        # and a run without gradients (inference, generate()) are the block
        # itself, which Dynamo traces into the model's graph.
        # Nothing this wrapper reads while Dynamo traces it may tell one block
        # from another, or Dynamo guards on it and compiles the wrapper again
        # for every block (past ``recompile_limit``, 8, the rest ran eagerly:
        # transformers 5.25's Llama, guarded on ``stages[0]``): the block's
        # index is read only inside the executor (``_call``), and the in-graph
        # plan through the block's slot, by the input's shape (or elements),
        # so that blocks with one option share one graph.
        scheduled = torch.compiler.disable(self._call, recursive=True)

        def forward(*args: Any, **kwargs: Any) -> Any:
            if self._capturing is not None:
                return self._captured(slot.stages, original, args, kwargs)
            if self._rerunning or not torch.is_grad_enabled():
                run = original
                if self._body is not None:  # a compiled recomputation (see _variant)
                    run, self._body = self._body, None
                recording, self._rerun_recording = self._rerun_recording, None
                if recording is None:
                    return run(*args, **kwargs)
                try:
                    with torch.autograd.graph.saved_tensors_hooks(*recording):
                        return run(*args, **kwargs)
                finally:
                    self._rerun_recording = recording
            if self._in_graph_on and torch.compiler.is_compiling():
                # A plan that records every block runs inside the model's graph.
                x = carried_output(args[0] if args else next(iter(kwargs.values())), lambda: "")
                numel, shape = x.numel(), tuple(x.shape)
                known = isinstance(numel, int) and all(isinstance(n, int) for n in shape)
                planned = slot.in_graph_plan(self._expected, shape, numel) if known else None
                if planned is not None:
                    option, context = planned
                    if not option:
                        return original(*args, **kwargs)
                    if context is None:
                        return checkpoint(original, *args, use_reentrant=False, **kwargs)
                    return checkpoint(original, *args, use_reentrant=False, context_fn=context, **kwargs)
            return scheduled(slot, original, torch.compiler.is_compiling(), args, kwargs)

        # One code object for every block of the plan: a compiled block calls
        # its module, and Dynamo guards on ``module.forward.__code__``; a code
        # object per block compiled each block again, and past
        # ``recompile_limit`` (8) blocks ran eagerly (measured on a GPU: the
        # step 13% slower and 6% above its predicted peak).
        own = own_code(forward, f"remat_block_of_{type(self.model).__name__}_{id(self):x}", self._forward_code)
        own.__wrapped__ = original  # type: ignore[attr-defined]
        return own

    def _rerun(self, module: nn.Module) -> Callable[..., Any]:
        """How the executor and the profiler call a block: through the module, so
        that its hooks run as in the forward (FSDP2 gathers the block's
        parameters in one), with remat's own forward standing aside."""

        def call(*args: Any, **kwargs: Any) -> Any:
            outer, self._rerunning = self._rerunning, True
            try:
                return self._through_module(module, args, kwargs)
            finally:
                self._rerunning = outer

        return call

    def _through_module(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Calls ``module`` (its hooks, then remat's forward, standing aside)
        with the saved-tensor hooks in force handed to the block's forward
        alone: what the executor records is what the forward saves, as in the
        block's first run (the model's call, whose hooks ran outside that
        forward). A hook computing on the output (a norm to log) saved tensors
        the first run never did (round 5)."""
        recording = torch._C._autograd._top_saved_tensors_default_hooks(False)
        outer, self._rerun_recording = self._rerun_recording, recording
        try:
            if recording is None:
                return module(*args, **kwargs)
            with torch.autograd.graph.saved_tensors_hooks(_as_is, _as_is):
                return module(*args, **kwargs)
        finally:
            self._rerun_recording = outer

    def remove(self) -> None:
        """Puts every block's ``forward`` back; the model is as before :func:`apply`."""
        for m, before in zip(self.modules, self._had_instance_forward):
            if isinstance(m, _Between) or not self._ours(m):
                continue  # put back already, or another plan's now (remove() called twice)
            if before is None:
                m.__dict__.pop("forward", None)
            else:
                m.forward = before  # type: ignore[method-assign]
        self._installed = {}
        for m in self._copied_out:
            stop_leaving_out(m)
        self._copied_out = []
        if self._head_forward:
            if self._had_model_forward is None:
                self.model.__dict__.pop("forward", None)
            else:
                self.model.forward = self._had_model_forward  # type: ignore[method-assign]
            self._head_forward = False
        self._lm_head = None
        self._head_seen = []
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._use_cache:
            self.model.config.use_cache = self._use_cache
            self._use_cache = None
        self._end_measure()
        self._originals = []
        if self._hf_user is not None:
            for m, on in zip(self._hf_flags, self._hf_user):
                m.gradient_checkpointing = on
            self._hf_user = None

    # -- the head and the loss ---------------------------------------------

    def _chunked_forward(self) -> None:
        """Replaces the model's forward by one that computes the head and the
        loss as the plan of the step says (whole or in chunks), once a plan
        chunks. Not before: under torch.compile a forward of remat's between
        the model and its blocks changes how Dynamo splits the step."""
        if self._head_forward or self._lm_head is None:
            return
        self._had_model_forward = self.model.__dict__.get("forward")
        own = self.model.forward

        @functools.wraps(own)
        def forward(*args: Any, **kwargs: Any) -> Any:
            return self._model_forward(own, args, kwargs)

        self.model.forward = forward  # type: ignore[method-assign]
        self._head_forward = True

    def _model_forward(self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The model's forward with the head and the loss as the plan says
        (whole, or in chunks): as the model writes it under torch.compile,
        without gradients or labels, and where the loss options were refused."""
        head = self._lm_head
        if head is None or torch.compiler.is_compiling() or not torch.is_grad_enabled() or self._head_refused:
            return original(*args, **kwargs)
        split = head.split(original, args, kwargs)
        if split is None or not self._head_options:
            return original(*args, **kwargs)
        base_args, labels, loss_kwargs = split
        return head.forward(base_args, labels, loss_kwargs, self._chunks_now)

    def _chunks_now(self) -> int:
        """The loss option of the plan the stack ran under in this step."""
        c = self._current()
        return c.chunks if c is not None else 1

    def _profile_head(self, seen: list[torch.Tensor], args: Any, kwargs: dict[str, Any], out: Any) -> None:
        """Measures each loss option on the last hidden states of a step the
        model's own forward ran (docs/model.md, "Ways to compute the loss"),
        checks that the head and the loss as remat computes them give the
        model's own loss, and plans again with the options."""
        head = self._lm_head
        assert head is not None
        measure = self._measure
        if self._last is None or self._step is not None or isinstance(measure, _Verify):
            return  # no stack ran whole, or a compiled step: measured at a later one
        split = head.split(type(self.model).forward.__get__(self.model), tuple(args), dict(kwargs))
        if split is None:
            return  # no labels (or a call the options cannot make): a later step
        _, labels, loss_kwargs = split
        own = head.own_loss(out)
        if len(seen) != 1 or not isinstance(own, torch.Tensor) or own.numel() != 1:
            self._head_refused = "the head did not run once on the whole sequence with a loss"
            return
        if head.transforms_logits:
            self._head_refused = f"{head.transforms_logits}, which chunks would skip"
            return
        cannot = head.learn(out)
        if cannot:
            self._head_refused = cannot
            return
        m = head.head
        foreign = [h for h in m._forward_hooks.values() if h is not self._head_hook] + list(
            m._forward_pre_hooks.values()
        )
        if foreign or type(m).forward is not nn.Linear.forward or "forward" in m.__dict__:
            # Chunks read the head's weight and never call the module: hooks
            # (FSDP's gathering, an adapter's, a user's) would not run.
            self._head_refused = f"the head {type(m).__name__} has hooks or a forward of its own, which chunks bypass"
            return
        hidden = seen[0]
        with measure.aside() if measure is not None else contextlib.nullcontext():
            # By the allocator where no profiler runs (the step's own trace is
            # paused): what kernels allocate unseen by a dispatch mode counts.
            meter = _Meter(hidden.device, list(self.model.parameters()), allocator=AllocatorTrace.available())
            self._head_measuring = True
            whole_grad: list[torch.Tensor] = []
            try:
                options = measure_options(head, hidden, labels, loss_kwargs, meter, whole_grad=whole_grad)
                # The gradient of the model's own loss to the head's input,
                # against the head and loss as remat computes them: on random
                # weights the logits are near uniform, so a loss that is not
                # the plain cross-entropy (label smoothing, soft-capping) may
                # give the same value, never the same gradient.
                own_grad = (
                    torch.autograd.grad(own, hidden, retain_graph=True, allow_unused=True)[0]
                    if hidden.requires_grad and own.requires_grad
                    else None
                )
            finally:
                self._head_measuring = False
        tol = 1e-4 if hidden.element_size() >= 4 else 2e-2
        if own_grad is not None and whole_grad:
            ours = whole_grad[0]
            off = float((own_grad - ours).abs().max() / ours.abs().max().clamp(min=1e-30))
            if off > tol:
                self._head_refused = (
                    f"the gradient of its loss is not the head and cross-entropy's ({off:.2g} apart): its forward "
                    "does more than its head and loss (label smoothing, logit soft-capping, an auxiliary loss)"
                )
                return
        expected = float(own.detach())
        for o in options:
            if not math.isclose(o.loss, expected, rel_tol=tol, abs_tol=tol):
                self._head_refused = (
                    f"the loss {o.describe()} ({o.loss:.6g}) is not the model's own ({expected:.6g}): its forward "
                    "does more than its head and loss_function (logit soft-capping, an auxiliary loss)"
                )
                return
        self._head_options = options
        self._head_numel = self._last[1]
        # The logits the training loop holds through the backward (the output
        # kept, as ``out = model(...); out.loss.backward()`` keeps it) are in
        # the measured figures of the head whole, and in no chunked option's:
        # alive when the head's backward reaches its input, they are the loop's.
        logits = head.logits_of(out)
        self._head_held = 0
        if isinstance(logits, torch.Tensor) and hidden.requires_grad:
            alive, size = weakref.ref(logits), logits.untyped_storage().nbytes()

            def head_backward_ends(g: torch.Tensor) -> None:
                if alive() is not None:
                    self._head_held = size
                    outside = self._outside
                    if outside is not None and self._last is not None:
                        self._measured_in_backward(lambda: self._measured(outside))

            hidden.register_hook(head_backward_ends)
        if self._outside is not None:
            self._measured(self._outside)  # else the parts outside the stack, measured in this step, plan with them

    def _head_choices(self, numel: int) -> list[tuple[int, int, int, float]]:
        """(chunks, bytes above the whole head's peak, bytes of logits the loop
        held, ms above the whole head's time) of each loss option, for
        ``numel`` elements between blocks."""
        if not self._head_options:
            return [(1, 0, 0, 0.0)]
        f = numel / self._head_numel
        whole = self._head_options[0]
        held = math.ceil(self._head_held * f)
        # The chunked loss makes the head weight's gradient in its forward,
        # which does not shrink with the tokens: each peak is read with up to
        # that much kept whole, the chunked one as high and the whole head's
        # as low as that allows. Scaled as a whole, Llama at 12 of 64 tokens
        # ran its chunked head 8% above its budget (a chunk saves little
        # there, and the gradient costs as much).
        w = max(0, self._head_gradients if self._head_gradients >= 0 else self._outside_gradients)
        low = whole.peak * f - (min(w, whole.peak) * (f - 1) if f > 1 else 0)
        return [
            (o.chunks, 0, 0, 0.0)
            if o.chunks == 1
            else (o.chunks, math.ceil(_scaled_keeping(o.peak, w, f) - low) - held, held, (o.ms - whole.ms) * f)
            for o in self._head_options
        ]

    # -- running ------------------------------------------------------------

    def _compiled(self, compiling: bool) -> bool:
        """Whether blocks run compiled in a forward Dynamo is (or is not) compiling."""
        return bool(self.compile) or (self.compile is None and compiling)

    def _take_over_hf(self) -> None:
        """Turns Hugging Face's own checkpointing off where it is on (set
        before :func:`apply`, or after it by ``gradient_checkpointing_enable()``
        (``activation_checkpointing_enable()`` since transformers 5.24) or
        ``TrainingArguments(gradient_checkpointing=True)``, which the
        Trainer calls when training starts): it would checkpoint each block
        inside remat's schedule, recomputing what the plan keeps, a step slower
        and its memory not the plan's. Warns once; :meth:`remove` puts the
        flags back as the user set them. Cost: one attribute read per module
        with the flag, per training step."""
        on = [bool(m.gradient_checkpointing) for m in self._hf_flags]
        if not any(on):
            return
        if self._hf_user is None:
            warnings.warn(
                f"remat: Hugging Face's gradient checkpointing is on in {type(self.model).__name__} "
                "(gradient_checkpointing_enable() or activation_checkpointing_enable(), or the TrainingArguments "
                "of the same names); remat's "
                "plan replaces it, so remat turned it off while the plan is applied (plan.remove() turns it back "
                "on). Leave it off with remat to silence this warning.",
                stacklevel=3,
            )
        self._hf_user = on
        for m in self._hf_flags:
            m.gradient_checkpointing = False

    def _model_starts(self, compiling: bool, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> None:
        if self._alternatives and torch.is_grad_enabled() and not compiling and not self._entries:
            alternatives, self._alternatives = self._alternatives, []
            if self._choose_stack(alternatives, tuple(args), dict(kwargs or {})):
                return self._model_starts(compiling, args, kwargs)  # the new stack's plan, from this step on
        self._expected = 1
        # Kept for this forward only (see _capture): the model's own inputs.
        self._inputs = (tuple(args), dict(kwargs or {})) if torch.is_grad_enabled() else None
        if self._hf_flags and torch.is_grad_enabled():
            self._take_over_hf()
        if (
            not self._accumulating
            and torch.is_grad_enabled()
            and any(e.compiled for e in self._entries.values())
            and self._accumulates()
        ):
            self._accumulating = True
            for entry in self._entries.values():
                if entry.compiled:
                    entry.by_numel.clear()
        self._end_measure()  # a measurement the last step never finished
        self._shape_measure = False
        # Which shape this step is (see _SHAPES_MEASURED): by the inputs'
        # shapes, not their elements (2 x 64 tokens hold other T x T parts,
        # an eager attention's mask, than 4 x 32).
        elements, shape = self._input_elements(), self._input_shapes()
        if compiling and torch.is_grad_enabled():
            self._compiled_steps += 1
            if self._compiled_steps == 1:
                # Its first step compiles, and compiled code keeps tensors of a
                # first run longer (the logits, until its backward compiles):
                # the second step is measured, as steps after it run.
                return
        if torch.is_grad_enabled() and self._outside is None and self._measure is None:
            # By the allocator wherever compiled code runs: the model's own
            # (torch.compile(model)) or the blocks' (compile=).
            self._measure = _measure(self, compiled=compiling or self._compiled(compiling))
            self._shapes_measured.add(shape)
        elif (
            torch.is_grad_enabled()
            and self._measure is None
            and not compiling
            and not self._compiled(compiling)
            and self.in_flight == 1
            and 0 < elements
            and shape not in self._shapes_measured
            and len(self._shapes_measured) < _SHAPES_MEASURED
            and (self._on_gpu() or AllocatorTrace.available())
        ):
            # A new shape's first step: its parts outside the stack measured
            # for the steps after it (this one plans with the first's, scaled).
            # Not under the user's own profiler: the measurement would be a
            # dispatch mode's (LiveBytes), left on the thread's stack until
            # the plan's next forward, and a compiled forward of any model
            # before that runs eagerly (seen: a test's plan whose last step
            # was a new shape's, under the test's trace, left one, and the
            # next test's torch.compile ran nothing compiled).
            self._shapes_measured.add(shape)
            self._shape_measure = True
            self._measure = _measure(self, compiled=False)
        elif (
            torch.is_grad_enabled()
            and self._measure is None
            and (
                (compiling and self._verifying and self._in_graph)
                or (self._verifying_executor and (compiling or self._compiled(compiling)))
            )
        ):
            # The final plan's first step (inside the graph, or by the executor).
            self._measure = _Verify(self)
        elif (
            torch.is_grad_enabled()
            and self._measure is None
            and self._verified_fresh
            and (compiling or self._compiled(compiling))
            and self._accumulates()
        ):
            # Gradients accumulate into .grad now, where the step verified gave
            # them new: a compiled backward holds what it adds until its graph
            # ends (a whole model's graph: every gradient), which that step
            # could not see. This one is measured as the plan's first was.
            self._verified_fresh = False
            current = self._current()
            if current is not None and current.in_graph is not None and self._in_graph:
                self._verifying = True
            else:
                self._verifying_executor = True
            self._measure = _Verify(self)

    def _on_gpu(self) -> bool:
        """Whether the model's parameters are on a GPU (its steps measured by
        the allocator's statistics). O(the model's parameters)."""
        return torch.cuda.is_available() and any(p.is_cuda for p in self.model.parameters())

    def _accumulates(self) -> bool:
        """Whether a parameter of the model holds a gradient at a step's start.
        O(the model's parameters)."""
        return any(p.grad is not None for p in self.model.parameters() if p.requires_grad)

    def _given_bytes(self, x: torch.Tensor) -> int:
        """The bytes of the stack's input ``x`` that a step's peak leaves out
        where the step did not make it (see :attr:`_Outside.given`): none for
        a pipeline stage's, which the pipeline holds as the rank's memory."""
        return 0 if self.input_in_step else x.numel() * x.element_size()

    def _given(self, x: torch.Tensor) -> bool:
        """Whether ``x`` is (a view of) a tensor the model's forward was given,
        made before the step (see :attr:`_Outside.given`). O(the inputs)."""
        if self._inputs is None:
            return False
        args, kwargs = self._inputs
        ptr = x.untyped_storage().data_ptr()
        return any(
            isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() == ptr for v in [*args, *kwargs.values()]
        )

    def _verified_step(self, peak: int | None) -> None:
        """A step measured by :class:`_Verify`: an in-graph plan's, or a
        compiled plan's that the executor runs."""
        if self._verifying:
            self._verified_in_graph(peak)
        elif self._verifying_executor:
            self._verified_executor(peak)

    def _verified_executor(self, peak: int | None) -> None:
        """The peak of the first step a compiled plan ran by the executor: kept
        if within the step's budget; else solved again below the budget by what
        the step took above it (twice that from the fourth plan), and measured
        again, warning if the last of ``_EXECUTOR_TRIES`` plans is still above.
        The chain's figures are each block's compiled variants measured alone;
        a step of many reruns held more (torchvision's ResNet-50 compiled, at
        40% of plain's peak: 61.08 MiB against a prediction of 58.79 and a
        budget of 59.02)."""
        self._verifying_executor = False
        if peak is None or self._last is None:
            self._verifying_executor = peak is None  # the user's profiler ran: a later step
            return
        entry, numel, device = self._last
        planned = entry.by_numel.get(numel)
        if planned is None or planned.in_graph is not None or not entry.compiled:
            return
        self._verified = (peak, planned.total)
        self._executor_tries += 1
        if peak <= planned.total:
            planned.measured = peak
            return
        if self._executor_tries >= _EXECUTOR_TRIES:
            warnings.warn(
                f"remat: the compiled step measured {_fmt(peak)}, above its budget {_fmt(planned.total)}, after "
                f"{self._executor_tries} plans each solved lower by what the one before took above it; lower "
                "memory= by the difference, or run the blocks eagerly (compile=False)",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self._executor_excess += (peak - planned.total) * (1 if self._executor_tries < _IN_GRAPH_TRIES else 2)
        entry.by_numel[numel] = self._solve(entry, numel, device)
        self._verifying_executor = True

    def _verified_in_graph(self, peak: int | None) -> None:
        """The peak of the first step whose blocks ran inside the graph: kept if
        within the step's budget; else an in-graph plan is solved again below
        the budget by what the graph held above the prediction, and measured
        again (``_IN_GRAPH_TRIES`` plans in all, fewer where a plan solved lower
        measured no lower: what the graph holds at its peak is not the blocks'
        to give), and failing that the executor runs the fastest plan from
        now on."""
        self._verifying = False
        if peak is None or self._last is None:
            return  # not measured (a profiler of the user's): measured again at the next step
        entry, numel, device = self._last
        planned = entry.by_numel.get(numel)
        if planned is None:
            return
        self._verified = (peak, planned.total)
        self._in_graph_tries += 1
        predicted = planned.stack_peak + planned.total - planned.budget
        if peak <= planned.total:
            planned.measured = peak
            self._in_graph_fallback = None
            # Once (two whole graphs compiled at most: the plan solved
            # higher, and this one again where that is above the budget).
            if not self._in_graph_raised and predicted - peak > _IN_GRAPH_SLACK * planned.total:
                self._raise_in_graph(entry, numel, device, planned, peak - predicted)
            return
        fallback, self._in_graph_fallback = self._in_graph_fallback, None
        if fallback is not None:
            # The plan solved higher held more than its budget: back to the
            # one measured within it (measured again as it starts).
            self._in_graph_excess = 0
            entry.by_numel[numel] = fallback
            self._run_in_graph(entry, numel, fallback)
            return
        # The compiler's one graph held more than the chain predicts for the
        # plan (tensors the blocks share, kept across them: the attention
        # mask, expanded): plan again that much lower, and measure again.
        self._in_graph_excess = max(self._in_graph_excess, peak - predicted)
        self._set_in_graph({})
        refused = (
            f"the plan ran inside torch.compile's graph at {_fmt(peak)}, above the step's budget "
            f"{_fmt(planned.total)}: remat's executor runs the blocks from then on"
        )
        before, self._in_graph_over = self._in_graph_over, peak
        if self._in_graph_tries >= _IN_GRAPH_TRIES or (before is not None and peak >= before):
            # GPT-2 at half its compiled peak: three plans, each predicted
            # 4 MiB lower than the one before, measured 71.35, 72.93 and
            # 71.37 MiB (none of its plans' blocks held that peak), each a
            # whole graph compiled again (6.5 s) for nothing.
            self._in_graph_refused = refused
        again = entry.by_numel[numel] = self._solve(entry, numel, device)
        if again.in_graph is not None and not self._in_graph_refused:
            self._run_in_graph(entry, numel, again)
            return
        if not self._in_graph_refused:
            # No plan inside the graph below the budget by the excess: the
            # fastest plan, whose peak the model predicts, by the executor.
            self._in_graph_refused = refused
            entry.by_numel[numel] = self._solve(entry, numel, device)
        self._verifying_executor = entry.compiled

    def _raise_in_graph(self, entry: _Entry, numel: int, device: torch.device, planned: _Planned, excess: int) -> None:
        """An in-graph plan measured ``-excess`` bytes below the chain's
        prediction (torchvision's ResNet-50 compiled: 104.09 MiB against
        118.99 at 100% of compiled plain's peak, a plan chosen to keep less
        than the budget allows): solves again that much higher, once, and
        runs that plan where it differs, measured on its first step; the
        plan kept until then comes back if it is above the budget."""
        self._in_graph_raised = True
        self._in_graph_excess = excess
        again = self._solve(entry, numel, device)
        if again.in_graph is None or again.schedule.operations_with_options == planned.schedule.operations_with_options:
            self._in_graph_excess = 0
            entry.by_numel[numel] = planned
            return
        self._in_graph_fallback = planned
        entry.by_numel[numel] = again
        self._run_in_graph(entry, numel, again)

    def _model_ends(self, _module: nn.Module, _args: Any, output: Any) -> None:
        """A training forward of the model must have run the whole stack, or none
        of it: a pass that stopped before the last block is an error now, not a
        failed recomputation in the backward."""
        if isinstance(self._measure, _Verify):
            self._measure.forward_ends(output)
        expected, self._expected = self._expected, None
        x, self._last_carried = self._last_carried, None
        self._inputs = None
        L = len(self.modules)
        if expected is None or expected in (1, L + 1) or self._step is None or sys.exc_info()[0] is not None:
            return  # the whole stack ran, or none of it, or the forward raised (an always_call hook runs then)
        # The last blocks were skipped (LayerDrop): identities; the step's
        # backward runs the schedule as usual. Its measurement, which waits for
        # the last block's output, is left to a later step.
        step, ex = self._step, self._executor
        self._step = None
        if ex is not None and x is not None:
            ex.skip(step, L + 1, x)
            step.finish()
        self._end_measure()

    def _check_order(self, l: int) -> int | None:
        """Inside the model's forward, block l must come later in the pass over
        the stack than the blocks before it (reversed or repeated blocks raise
        now, naming it; blocks left out are skipped, as LayerDrop does).
        Returns the block the pass expected (None outside the model's forward)."""
        expected = self._expected
        if expected is None:
            return None  # called outside the model's forward: a block alone runs plainly
        L = len(self.modules)
        if l < expected or expected == L + 1:
            what = f"after block {L}, the last" if expected == L + 1 else f"when block {expected} was expected"
            self._out_of_order(f"block {l} of {L} ({self.names[l - 1]}) ran {what}")
        self._expected = l + 1
        return expected

    def _out_of_order(self, what: str) -> None:
        self._step = None
        self._expected = None
        self._end_measure()  # no step follows: leave no LiveBytes behind
        raise RuntimeError(
            f"remat: {what}; the blocks of {self.where} must run once each, in order, in every training forward "
            "(name the right stack with apply(..., blocks=...))"
        )

    def _key(self, call: Call, compiled: bool) -> tuple[Any, ...]:
        x = call.carried
        shape: tuple[int, ...] = (x.dim(),) if self._scaled_shapes else tuple(x.shape)
        key = (shape, x.dtype, x.device, self.model.training, autocast_enabled(x.device.type), compiled)
        # Which side inputs the blocks get, and their kinds: a padding mask
        # that appears after unpadded batches of the same shape takes SDPA
        # off its causal path and materialises a mask (4% above the
        # unpadded step's prediction, round 5), so it is a plan of its own.
        key += tuple((where, t.dim(), t.dtype) for where, t in call.side_items())
        if len(self.stacks) > 1 and x.numel() > 0:
            # The first stack's input says nothing of the later stacks' (T5's
            # target, CLIP's text): a plan made for other inputs ran them
            # unprofiled, +58% to +350% over a byte budget (round 5). Inputs
            # that keep their proportions to the first stack's (a smaller
            # batch, every sequence shorter alike) are sized by scaling as a
            # single stack's; any other is a plan of its own. Inputs of fewer
            # than two dimensions (a U-Net's timestep, class labels) say
            # nothing of a length: left out.
            key += tuple(
                (k, len(s), fractions.Fraction(math.prod(s), x.numel())) for k, s in self._input_shapes() if len(s) >= 2
            )
        return key

    def _input_shapes(self) -> tuple[Any, ...]:
        """The shapes of the tensors the model's forward was given on this
        step, by position and name (() outside a training step's forward)."""
        if self._inputs is None:
            return ()
        return _shapes_of(*self._inputs)

    def _variant(self, i: int, policy: NamedPolicy | None) -> Callable[..., Any]:
        """How the executor calls block i + 1's compiled variant for ``policy``
        (None: option 0), with remat's forward standing aside (as :meth:`_rerun`).
        The compiled graph runs the block's forward alone; a recomputation (in
        a backward) calls the module around it, so that its hooks run once,
        eagerly, as for an eager block; the first run (whose hooks ran in the
        model's call of the block) and the profile's runs call the graph alone."""
        key = (i, policy.name if policy is not None else None)
        found = self._variants.get(key)
        if found is None:
            module = self.modules[i]
            fn = self._blocks.variant(module, policy)

            def call(*args: Any, **kwargs: Any) -> Any:
                outer, self._rerunning = self._rerunning, True
                try:
                    if torch._C._current_graph_task_id() == -1:
                        return fn(module, *args, **kwargs)
                    # The module's call runs its hooks, then remat's forward
                    # (see _make_forward), which runs this body.
                    self._body = functools.partial(fn, module)
                    try:
                        return self._through_module(module, args, kwargs)
                    finally:
                        self._body = None
                finally:
                    self._rerunning = outer

            found = self._variants[key] = call
        return found

    def _call(
        self,
        slot: _BlockSlot,
        original: Callable[..., Any],
        compiling: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        l = slot.stage(self._expected)
        expected = self._check_order(l)
        args, kwargs = _without_cache(args, kwargs)
        call = Call.of(args, kwargs)
        if l == 1 or expected == 1:  # the pass's first block (the ones before it skipped)
            x = call.carried
            if x.numel() == 0 or not (
                x.requires_grad or any(p.requires_grad for m in self.modules for p in m.parameters())
            ):
                # Nothing to plan: no gradient, or an empty batch (which keeps
                # no activations; profiled, every later shape was sized by
                # its zero elements: a bare ZeroDivisionError for good).
                self._step = None
                if x.numel() == 0 and isinstance(self._measure, (_Measure, _TracedMeasure)):
                    self._end_measure()  # nothing of this step to learn from
                return original(*args, **kwargs)
            if isinstance(self._measure, (_Measure, _TracedMeasure)):
                self._measure.stack_starts(x, call.side_tensors())
            try:
                with self._measure.paused() if self._measure is not None else contextlib.nullcontext():
                    ex = self._prepare(call, self._compiled(compiling), compiling and self._compiled(compiling))
            except BaseException:
                self._end_measure()  # no step follows: leave no LiveBytes behind
                raise
            self._executor = ex
            self._watch.forward_starts()
            self._step = ex.begin()
            self._lifetimes = None
            if self._last is not None:
                planned = self._last[0].by_numel.get(self._last[1])
                if planned is not None and planned.executor is ex:
                    self._lifetimes = planned.lifetimes()
                    if self._lifetimes is not None:
                        self._step.on_rerun = self._lifetimes.rerun
        step, ex = self._step, self._executor
        if step is None or ex is None:
            return original(*args, **kwargs)
        if step.next < l and expected is not None:
            # The model's code between two stacks has run (its stage, a
            # bridge), or LayerDrop skipped the blocks between (inside the
            # model's forward only, whose end finishes a pass that skipped its last).
            for b in range(step.next, l):
                if b in self._bridges and isinstance(self._measure, (_Measure, _TracedMeasure)):
                    self._measure.bridge_ends(b, call.carried)
                if b not in self._bridges and self._lifetimes is not None:
                    self._lifetimes.spoil()
            ex.skip(step, l, call.carried)
        if step.next != l:
            self._step = None
            raise RuntimeError(
                f"remat: block {l} of {len(self.modules)} ({self.names[l - 1]}) ran when block {step.next} was "
                f"expected; the blocks of {self.where} must run once each, in order, in every training forward "
                "(name the right stack with apply(..., blocks=...))"
            )
        self._check_input(l, call.carried, ex)
        self._side_inputs(l, call)
        if isinstance(self._measure, (_Measure, _TracedMeasure)) and self._measure.returned:
            # A returned tensor a later block reads (T5's position bias) is a
            # side input: the budget counts it apart.
            read = {t.untyped_storage().data_ptr() for t in call.side_tensors()}
            self._measure.returned = [r for r in self._measure.returned if _ptr(r[0]) not in read]  # type: ignore[assignment]
        life = self._lifetimes
        if life is not None:
            life.forward_starts(l)
            # a^{l-1} as the block takes it: what the model's code made of the
            # block before's output (a residual add's sum, _with_derived_inputs),
            # the stack's input, the output of the code between two stacks. (The
            # last block's output: the head reads it, and the first point after
            # is B^L, whose own figure has it gone.)
            life.follow(l - 1, call.carried)
        y = ex.call(step, l, call)
        out = _carried_or_none(y)
        if life is not None and out is not None and out.grad_fn is not None:
            out.grad_fn.register_prehook(functools.partial(_backward_reached, life, l))  # type: ignore[no-untyped-call]
        self._kept.returned(l, y)
        self._side.returned(l, y, out)
        if isinstance(self._measure, (_Measure, _TracedMeasure)):
            self._measure.block_returned(y)
        if l + 1 in self._bridges and isinstance(self._measure, (_Measure, _TracedMeasure)):
            self._measure.bridge_starts(l + 1, carried_output(y, lambda: self.names[l - 1]), call.carried)
        # The input of blocks skipped after it, should the pass end here.
        self._last_carried = carried_output(y, lambda: "") if l < len(self.modules) else None
        if l == len(self.modules):
            self._step = None
            self._watch.forward_ends(out)
            if isinstance(self._measure, (_Measure, _TracedMeasure)):
                self._measure.stack_ends(y, call.carried)
        return y

    def _residue_and_peak(self) -> tuple[int | None, int | None]:
        """What one forward of the current plan keeps for its backward, and
        its step's predicted peak (for :class:`StepWatch`'s messages). O(the
        schedule's replay)."""
        c = self._current()
        if c is None:
            return None, None
        return int(remat.simulate(c.chain, c.schedule).residue), self.peak_memory

    def _check_input(self, l: int, x: torch.Tensor, ex: Executor) -> None:
        """Whether block ``l`` gets the block before's output (the profile saw
        it where the model's forward could run again, see _capture): where the
        model's code made something else of it and the plan did not know, the
        next step plans with it, and this step raises if its plan remakes
        that input by running the block before again. O(1)."""
        before = self._last_carried
        if l == 1 or l - 1 in self._bridges or before is None or x is before or self._last is None:
            return
        entry = self._last[0]
        if l in entry.derived:
            return
        entry.derived.add(l)
        entry.by_numel.clear()
        program = ex.program
        if program.rerun[l] and l - 1 not in program.keep:
            self._step = None
            raise RuntimeError(
                f"remat: block {l} of {len(self.modules)} ({self.names[l - 1]}) does not take block {l - 1}'s output "
                "but what the model's code made of it (as in x = x + layer(x) around the blocks), and this step's "
                f"plan would remake its input by running block {l - 1} again, which gives the block's output "
                "instead. The next step plans with it (that block recorded in the forward): run the step again; "
                "or name blocks that take each other's outputs (apply(..., blocks=...))"
            )

    def _side_inputs(self, l: int, call: Call) -> None:
        """Counts the gradient bytes of the side inputs of this pass's blocks
        (each storage once): the first block's, and those only later blocks
        get (T5's attention bias, made by its first block and read by the
        others). Where the pass's end finds more than its plan set aside, the
        plan is solved again at the next forward. O(the call's arguments)."""
        if l == 1:
            self._side = _SideGradients()
            self._side.stack_input(call.carried)
            self._kept = _Kept(self._bridges, self._older_side)
        self._side.add(call, l)
        self._kept.add(l, call)
        if l < len(self.modules) or self._last is None:
            return
        entry, numel, _ = self._last
        found = math.ceil(self._side.total * entry.numel / numel)
        kept = math.ceil(self._kept.total * entry.numel / numel)
        figures = self._side.figures(len(self.modules)).scaled(entry.numel / numel)
        merged = figures if entry.side is None else entry.side.merged(figures)
        if found > entry.side_gradients or kept > entry.side_kept or merged != entry.side:
            entry.side_gradients = max(found, entry.side_gradients)
            if kept > entry.side_kept:
                # Another pass's tensors: which the recordings keep is not known.
                entry.side_kept_readers = []
            entry.side_kept = max(kept, entry.side_kept)
            entry.side = merged
            entry.by_numel.clear()

    # -- each block's own call ------------------------------------------------

    def _capture(self, quiet: bool = False, keep_first: bool = False) -> list[Call | None] | None:
        """Each block's own call in this step, without its carried tensor, for
        the profile (blocks whose side inputs differ: Swin's stages, T5's later
        blocks, a U-Net's up blocks): the model's forward run once more from
        its own inputs, up to the last block's call, with nothing saved for a
        backward (a pack hook drops every saved tensor, so it holds what a
        forward without gradients holds, while every tensor still says whether
        it requires a gradient), every buffer, ``.grad`` and random generator
        (torch's, NumPy's, Python's) put back after. None outside the model's
        forward, or where that forward raised (the profile then gives every
        block the first block's side inputs, as before, with a warning unless
        ``quiet``). The first block's whole call (its input included) is
        kept in ``_captured_first`` only where ``keep_first`` asks: it would
        hold an activation from one step to the next. O(one forward)."""
        inputs = self._inputs
        if inputs is None or len(self.modules) < 2 or not _fsdp_state_readable(self.model):
            # FSDP2 whose state remat cannot put back (see _fsdp_state_kept).
            return None
        args, kwargs = inputs
        found: list[Call | None] = [None] * len(self.modules)
        devices = sorted(
            {t.device for t in [*self.model.parameters(), *self.model.buffers()] if t.device.type == "cuda"},
            key=str,
        )
        numpy_state = _numpy_random_state()
        python_state = random.getstate()
        self._capturing = found
        self._captured_output, self._captured_derived, self._captured_first = None, set(), None
        self._captured_kept = _Kept(self._bridges)
        self._captured_side = _SideGradients()
        self._captured_alive = {}
        called: set[int] = set()
        watch = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, _: called.add(id(m)))
        try:
            with (
                preserved_state([self.model], devices),
                _fsdp_state_kept(self.model),
                torch.autograd.graph.saved_tensors_hooks(_drop, _never),
            ):
                self.model.forward(*args, **kwargs)
        except _Captured:
            self._head_gradients = self._not_called(called)
        except Exception as e:  # any failure leaves the profile as it was
            if quiet:
                _log.debug("%s's forward failed again: %s", type(self.model).__name__, e)
                return None
            warnings.warn(
                f"remat: running {type(self.model).__name__}'s forward again to see each block's own side inputs "
                f"failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); every block is profiled "
                "with the first block's side inputs",
                stacklevel=2,
            )
            return None
        finally:
            watch.remove()
            self._capturing = None
            self._captured_output = None
            self._captured_alive = {}  # let go of what was alive at the first block's call
            if not keep_first:
                self._captured_first = None
            random.setstate(python_state)
            _set_numpy_random_state(numpy_state)
        return found

    def _choose_stack(
        self,
        alternatives: list[tuple[str, list[tuple[str, nn.Module]]]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> bool:
        """On the first training step, before anything is planned: the bytes
        each stack's blocks save for the backward, seen on one more forward of
        the model on this step's inputs (every saved tensor dropped as it is
        saved, so it holds what a forward without gradients holds; buffers,
        ``.grad`` and random generators put back). Where another stack keeps
        more than this one (VGG's ``features`` against its ``classifier``,
        chosen by parameters), this plan moves there: True. O(one forward)."""
        stacks = [(self.where, [(n, m) for n, m in zip(self.names, self.modules) if not isinstance(m, _Between)])]
        stacks += alternatives
        saved = [0] * len(stacks)
        seen: set[tuple[int, int]] = set()
        current: list[int] = []  # the stacks whose block runs (a hook returns None: it changes nothing)

        def enters(i: int) -> Callable[..., None]:
            return lambda _m, _a: current.append(i)

        def leaves(_m: nn.Module, _a: Any, _o: Any) -> None:
            if current:
                current.pop()

        hooks = []
        for i, (_, blocks) in enumerate(stacks):
            for _, block in blocks:
                hooks.append(block.register_forward_pre_hook(enters(i)))
                hooks.append(block.register_forward_hook(leaves))

        # Parameters and buffers are held whatever a plan does: not what a block keeps.
        held = {t.untyped_storage().data_ptr() for t in [*self.model.parameters(), *self.model.buffers()]}

        def pack(t: torch.Tensor) -> None:
            if current:
                key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
                if key[0] not in held and key not in seen:  # a storage saved twice (in place) counts once
                    seen.add(key)
                    saved[current[-1]] += key[1]

        devices = sorted({t.device for t in self.model.parameters() if t.device.type == "cuda"}, key=str)
        numpy_state, python_state = _numpy_random_state(), random.getstate()
        outer, self._rerunning = self._rerunning, True  # remat's forwards stand aside
        try:
            with (
                preserved_state([self.model], devices),
                _fsdp_state_kept(self.model),
                outputs_not_captured(),
                torch.autograd.graph.saved_tensors_hooks(pack, _never),
            ):
                self.model.forward(*args, **kwargs)
        except Exception as e:  # the stack stays as found
            _log.debug("%s: no stack chosen by saved bytes (%s)", type(self.model).__name__, e)
            return False
        finally:
            self._rerunning = outer
            for h in hooks:
                h.remove()
            random.setstate(python_state)
            _set_numpy_random_state(numpy_state)
        best = max(range(len(stacks)), key=lambda i: (saved[i], -i))
        if best == 0:
            return False
        where, blocks = stacks[best]
        note = (
            f"{where} keeps {_fmt(saved[best])} for the backward on the first step, {stacks[0][0]} "
            f"{_fmt(saved[0])} (found first by its parameters)"
        )
        _log.info("remat: %s: planning %s: %s", type(self.model).__name__, where, note)
        self.remove()
        self.__init__(  # type: ignore[misc]
            self.model, blocks, where, self.memory, **self._init_kwargs, stacks=[(where, len(blocks))]
        )
        self._stack_note = note
        return True

    def _input_elements(self) -> int:
        """Elements of the tensors the model's forward was given on this step
        (0 outside a training step's forward). O(inputs)."""
        if self._inputs is None:
            return 0
        args, kwargs = self._inputs
        return sum(v.numel() for v in [*args, *kwargs.values()] if isinstance(v, torch.Tensor))

    def _not_called(self, called: set[int]) -> int:
        """Bytes of the trainable parameters (each once) of the modules outside
        the stack that are not in ``called``: those the model's forward runs
        after the stack (a weight shared with a module it called included).
        O(modules)."""
        seen: set[int] = set()
        total = 0
        for m in self.model.modules():
            if id(m) in called or id(m) in self._in_stack:
                continue
            for p in m.parameters(recurse=False):
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    total += p.numel() * p.element_size()
        return total

    def _captured(
        self, stages: list[int], original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """A block's call while :meth:`_capture` runs: noted (its first free
        stage: a module called several times is several), then run as it is;
        the last block's ends the forward."""
        found = self._capturing
        assert found is not None
        l = next((l for l in stages if found[l - 1] is None), stages[-1])
        try:
            call = Call.of(*_without_cache(args, kwargs))
            if l == 1:
                self._captured_first = call
                self._captured_side.stack_input(call.carried)
                self._captured_alive = _alive_tensors()
            else:
                older = _alive_at_start(self._captured_alive, l, call)
                self._captured_kept.older = self._captured_kept.older | older
            self._captured_kept.add(l, call)
            self._captured_side.add(call, l)
            # A later stack's first block: its input is what the profile starts it from.
            found[l - 1] = call if l - 1 in self._bridges else call.without_carried()
            before = self._captured_output
            if l > 1 and l - 1 not in self._bridges and before is not None and call.carried is not before:
                self._captured_derived.add(l)
        except TypeError:
            pass  # no tensor to carry: the real call raises it, naming the block
        if l == len(self.modules):
            raise _Captured
        y = original(*args, **kwargs)
        self._captured_kept.returned(l, y)
        self._captured_side.returned(l, y, _carried_or_none(y))
        try:
            self._captured_output = carried_output(y, lambda: "")
        except TypeError:
            self._captured_output = None
        return y

    # -- planning -----------------------------------------------------------

    def _prepare(self, call: Call, compiled: bool, in_graph: bool = False) -> Executor:
        x = call.carried
        key = (*self._key(call, compiled), in_graph)
        entry = self._entries.get(key)
        if entry is not None and _grown(x.shape, entry.shape):
            # A dimension past the batch grew (a longer sequence, a larger
            # image): what grows faster than the elements between blocks
            # (attention's T x T scores) would be scaled low. Profiled again
            # at this shape, which then serves the shapes within it: scaled
            # down, such parts are over-estimated, never under.
            entry = None
        if entry is None:
            with outputs_not_captured():  # remat's own runs of the blocks: not the model's outputs
                calls = self._capture()
                chain, found, outputs = self._profile(call, calls, compiled)
            self.profiles += 1
            options = found.options
            if self.offload and not compiled and x.device.type in _OFFLOAD_DEVICES:
                speed = self._bandwidth.get(x.device)
                if speed is None:
                    with self._measure.paused() if self._measure is not None else contextlib.nullcontext():
                        speed = self._bandwidth[x.device] = bandwidth(x.device)
                chain, options = with_offload(chain, options, speed)
            entry = _Entry(chain, x.numel(), tuple(x.shape), found.inplace, found.uses_rng, options, compiled, in_graph)
            entry.dropped = list(found.dropped)
            entry.fixed = list(found.fixed)
            entry.input_copies = list(found.input_copies)
            entry.bridge_outputs = outputs
            side = self._pass_side(call, calls)
            entry.side_gradients = side.total
            entry.side = side.figures(len(self.modules), found.side_held)
            entry.side_kept = self._captured_kept.total if calls is not None else 0
            # What a reader's recording keeps, autograd holds whatever the plan.
            saved = set().union(*found.side_saved) if len(found.side_saved) == len(self.modules) else None
            entry.side_kept_readers = (
                self._captured_kept.by_readers(skip=saved) if calls is not None and saved is not None else []
            )
            self._older_side = self._captured_kept.older if calls is not None else frozenset()
            entry.derived = set(self._captured_derived) if calls is not None else set()
            if self._outside is not None:
                entry.outside = self._outside.scaled(entry.numel)
            if not compiled and self._scaled_shapes and x.dim() == 3 and x.shape[1] >= _SHORTEST_FITTED:
                entry.shorter = self._profile_shorter(int(x.shape[1]))
            self._entries[key] = entry
        numel = x.numel()
        length = int(x.shape[1]) if entry.shorter is not None else 0
        planned = entry.by_numel.get(numel)
        if planned is not None and entry.lengths.get(numel, length) != length:
            planned = None  # as many elements, another length: other T x T parts
        if planned is None:
            entry.lengths[numel] = length
            if (
                entry.shorter is not None
                and 0 < 2 * length < entry.shape[1]
                and (numel, length) not in entry.sized
                and len(entry.sized) < _SHAPES_PROFILED
                and self._inputs is not None
            ):
                sizes = self._sizes_on(self._inputs, entry.shape[1], numel)
                if sizes is not None:
                    entry.sized[numel, length] = sizes
            planned = self._solve(entry, numel, x.device)
            entry.by_numel[numel] = planned
        self._last = (entry, numel, x.device)
        self._last_shape = tuple(x.shape)
        self._last_inputs = self._input_shapes() if self._inputs is not None else None
        return planned.executor

    def _profile_shorter(self, length: int) -> dict[str, Any] | None:
        """The stacks profiled at half the sequence (``length // 2``: the
        model's own inputs cut along their second dimension where it is
        ``length``, or a raw signal to half its samples, see
        :func:`_halved_inputs`; run up to the last block to see each block's
        calls), as a chain's dict of sizes (each option's included, times not
        measured): with the whole length's figures, each size is fitted as
        ``a t + b t^2`` (attention's T x T scores, its dropout mask), which
        :func:`_at_length` reads at a shorter sequence. None where the model's
        inputs have no such dimension, its forward fails on them, or its first
        block's input is not shorter with them. O(one forward, and the
        distinct blocks' and options' sizes)."""
        if self._inputs is None:
            return None
        halved = _halved_inputs(self._inputs, length)
        if halved is None:
            return None
        return self._sizes_on(halved, length)

    def _sizes_on(
        self, inputs: tuple[tuple[Any, ...], dict[str, Any]], length: int, numel: int = 0
    ) -> dict[str, Any] | None:
        """The stacks' sizes on the model's ``inputs`` (run up to the last
        block to see each block's calls), as a chain's dict (each option's
        included, times not measured); None where the first block's input is
        not a sequence shorter than ``length`` (with ``numel`` elements where
        given), or the forward or the profile fails. O(one forward, and the
        distinct blocks' and options' sizes)."""
        kept, derived = self._inputs, self._captured_derived
        self._inputs = inputs
        try:
            with outputs_not_captured():
                calls = self._capture(quiet=True, keep_first=True)
        finally:
            self._inputs, self._captured_derived = kept, derived
        first, self._captured_first = self._captured_first, None
        if calls is None or first is None or first.carried.dim() != 3 or not 0 < first.carried.shape[1] < length:
            return None
        if numel and first.carried.numel() != numel:
            return None
        try:
            with outputs_not_captured():
                chain, _, _ = self._profile(first, calls, False, repeat=1, sizes_only=True)
        except Exception as e:  # a refinement: the plan reads the fit without it
            _log.debug("%s at a shorter sequence: not profiled (%s)", type(self.model).__name__, e)
            return None
        return chain.to_dict()

    def _pass_side(self, call: Call, calls: list[Call | None] | None) -> _SideGradients:
        """The side inputs' gradients of the pass that ``calls`` (None: not
        seen, every block given ``call``'s side inputs) were captured from."""
        return self._captured_side if calls is not None else _side_of(call, len(self.modules))

    def _profile(
        self,
        call: Call,
        calls: list[Call | None] | None,
        compiled: bool,
        repeat: int | None = None,
        sizes_only: bool = False,
    ) -> tuple[remat.Chain, Profiled, dict[int, int]]:
        """The chain of the stacks, each profiled from its own first call (the
        first block's ``call``; a later stack's from ``calls``, what the model
        passed it), with a bridge stage between two (docs/model.md, "Several
        stacks"); what else was found; each bridge's output bytes."""
        name = f"{type(self.model).__name__}.{self.where}"
        starts = [1, *(b + 1 for b in sorted(self._bridges))]
        ends = [*sorted(self._bridges), len(self.modules) + 1]
        records: list[dict[str, Any]] = []
        inplace: list[bool] = []
        uses_rng: list[bool] = []
        options: list[list[NamedPolicy | None]] = []
        dropped: list[tuple[int, str, str]] = []
        fixed: list[dict[str, Any] | None] = []
        copies: list[list[float]] = []
        held: list[dict[int, tuple[int, int, int]]] = []
        side_saved: list[set[int]] = []
        outputs: dict[int, int] = {}
        base: dict[str, Any] | None = None
        lasts = self._pass_side(call, calls).last_reads()
        for a, e in zip(starts, ends):
            first = call
            if a > 1:
                given = calls[a - 1] if calls is not None else None
                if given is None or given.carried.numel() == 0:
                    raise ValueError(
                        f"remat: {self.where} are {len(self.stacks)} stacks planned together, and their inputs are "
                        f"seen by running {type(self.model).__name__}'s forward once more up to the last block, which "
                        "did not reach stack "
                        f"{starts.index(a) + 1} here (a forward that cannot run twice: see the "
                        "warning); plan one stack with apply(..., blocks=...), e.g. blocks="
                        f"{self.stacks[-1][0]!r}"
                    )
                first = given

            def variant(i: int, p: NamedPolicy | None, a: int = a) -> Callable[..., Any]:
                return self._variant(i + a - 1, p)

            chain, found = profile_calls(
                self.modules[a - 1 : e - 1],
                first,
                calls=calls[a - 1 : e - 1] if calls is not None else None,
                forwards=self._originals[a - 1 : e - 1],
                names=self.names[a - 1 : e - 1],
                repeat=self.repeat if repeat is None else repeat,
                name=name,
                policies=self.compiled_policies if compiled else self.policies,
                sizes_only=sizes_only,
                compiled=variant if compiled else None,
                around=lambda i, a=a: _gathered(self.modules[i + a - 1]),
                last=[lasts.get(l, set()) for l in range(a, e)],
            )
            d = chain.to_dict()
            if base is None:
                base = d
            else:
                out = int(d["input_size"])
                outputs[a - 1] = out
                records.append(_bridge_stage(self.names[a - 2], out))
                inplace.append(False)
                uses_rng.append(False)
                options.append([None])
                fixed.append(None)
                copies.append([0.0])
                held.append({})
                side_saved.append(set())
            records += d["stages"]
            held += found.side_held or [{} for _ in d["stages"]]
            side_saved += found.side_saved
            inplace += found.inplace
            uses_rng += found.uses_rng
            options += found.options
            fixed += found.fixed or [None] * len(d["stages"])
            # A later stack's first block, as the first's: its input may be laid
            # out anew in one graph too (it comes from outside the stack).
            copies += [[0.0], *found.input_copies[1:]] if found.input_copies else [[0.0]] * len(d["stages"])
            dropped += [(i + a - 1, n, why) for i, n, why in found.dropped]
        assert base is not None
        metadata = dict(base.get("metadata") or {})
        metadata["writes_input"] = [l for l, changes in enumerate(inplace, 1) if changes]
        merged = dict(base, stages=records, metadata=metadata)
        found = Profiled(inplace, uses_rng, options, dropped, fixed, copies, held, side_saved)
        return remat.Chain.from_dict(merged), found, outputs

    def _with_bridges(self, chain: remat.Chain, entry: _Entry, numel: int) -> remat.Chain:
        """``chain`` (scaled to ``numel`` elements between blocks) with each
        bridge stage's figures: as measured on a step (scaled), else its output
        alone, and recorded once (docs/model.md, "Several stacks"). O(stages)."""
        if not self._bridges:
            return chain
        d = chain.to_dict()
        for b in self._bridges:
            out = math.ceil(entry.bridge_outputs.get(b, 0) * numel / entry.numel)
            f = self._bridge_figures.get(b)
            k = numel / f.numel if f is not None else 1.0
            d["stages"][b - 1] = _bridge_stage(
                self.names[b - 1],
                out,
                held=math.ceil(f.held * k) if f is not None else 0,
                transient=math.ceil(f.transient * k) if f is not None else 0,
                backward=math.ceil(f.backward * k) if f is not None else 0,
            )
        return remat.Chain.from_dict(d)

    def _bridge_measured(self, b: int, figures: _BridgeFigures) -> None:
        """Bridge stage ``b`` measured on a step: every plan is solved again."""
        self._bridge_figures[b] = figures
        for entry in self._entries.values():
            entry.by_numel.clear()

    def _solve(self, entry: _Entry, numel: int, device: torch.device, at_least: int = 0) -> _Planned:
        base, factor = entry.base, numel / entry.numel
        length = entry.lengths.get(numel, 0)
        # By elements and length: 2 x 128 tokens are not 4 x 64 (sized by
        # elements alone, they were planned on 4 x 64's sizes: 17% over).
        sized = entry.sized.get((numel, length))
        if sized is not None:
            # Profiled at this very shape: its sizes as they are.
            base, factor = _with_sizes(entry.base, sized, factor), 1.0
        elif entry.shorter is not None and 0 < length < entry.shape[1]:
            # A shorter sequence read off the fit, the rest (the batch) scaled.
            r = length / entry.shape[1]
            base = _at_length(entry.base, entry.shorter, r, self._weight_gradients)
            factor /= r
        stack = _scaled(base, factor, self._weight_gradients, entry.fixed) if abs(factor - 1) > 1e-12 else base
        stack = self._with_bridges(stack, entry, numel)
        stack = _with_derived_inputs(stack, entry.derived)
        outside = entry.outside_at.get((numel, length))
        if outside is None and entry.outside is not None:
            outside = entry.outside.scaled(numel, self._input_elements())
        side = math.ceil(entry.side_gradients * numel / entry.numel)
        kept = math.ceil(entry.side_kept * numel / entry.numel)
        if entry.side is not None:
            stack = _with_side_gradients(stack, entry.side.scaled(numel / entry.numel))
        if entry.compiled and self._accumulating:
            stack = _with_weight_gradients(stack, self._block_gradients)
        stack = _with_more_transient(stack, self._shared_gradients, forwards=True)
        released = outside.released if outside is not None else 0
        bare = stack
        if released:
            # What is before the stack and gone by its backward is set aside
            # for the forward phase only: in the forwards' transients (a
            # recomputation's too, an over-count there, which the predicted
            # peak leaves out: _forward_phase_peak) and the loss's.
            stack = _with_more_transient(stack, released, forwards=True, backwards=False, last=True)
        if self.output_gradient_held:
            stack = _with_held_output_gradient(stack)
            bare = _with_held_output_gradient(bare)
        chain = _with_loss(stack, outside) if outside is not None else stack
        # A share of storing everything is of the step as the model writes it (the head whole).
        budget, note = self._budget(chain, outside, device, side, kept, at_least)
        side = kept + _MARGIN  # set aside from here on
        # in_flight is passed only when above 1, so that a plan of one
        # micro-batch calls the solver exactly as before pipelining.
        extra: dict[str, Any] = {"in_flight": self.in_flight} if self.in_flight != 1 else {}
        # One solve per loss option, the fastest plan that fits kept: exact,
        # since the loss runs once, its forward and backward back to back
        # (docs/model.md, "Ways to compute the loss").
        total = budget + side + (0 if outside is None else outside.held())
        best: tuple[float, int, remat.Chain, remat.Schedule, _Outside | None, int] | None = None
        failed: list[tuple[remat.InfeasibleError, int, int]] = []
        # Under torch.compile the head runs whole (as the model writes it).
        choices = self._head_choices(numel) if outside is not None and not entry.in_graph else [(1, 0, 0, 0.0)]
        # Below the budget by what a compiled step of the executor measured above it.
        below = self._executor_excess if entry.compiled else 0
        for chunks, more, held, ms in choices:
            option, there, room = chain, outside, budget - below
            if chunks != 1 and outside is not None:
                # No logits: none for the loop to hold either (``held``).
                after = max(0, outside.post_after - held)
                there = replace(
                    outside,
                    post_peak=max(after, outside.post_peak + more),
                    post_after=after,
                    pre_backward=max(0, outside.pre_backward - held),
                )
                option = _with_loss(stack, there)
                room = total - there.held() - side - below
            # What a named smallest budget adds to the stack's: the parts
            # outside it, and what a compiled step measured above its plan.
            fixed = side + (0 if there is None else there.held()) + below
            floor = 0 if there is None else there.pre_backward
            if room <= 0 or floor > total:
                # No room for the stack, or less than the part before it takes
                # in its backward: the step needs the outside parts plus the
                # stack's own smallest, and at least that backward's.
                try:
                    remat.solve(option, 1, algorithm=self.algorithm, slots=self.slots, exact_memory=self.exact_memory)
                    stack_least: int | None = 1
                except remat.InfeasibleError as e:
                    stack_least = None if e.min_budget is None else int(e.min_budget)
                err = remat.InfeasibleError(f"no room for {self.where}")
                err.min_budget, err.algorithm = stack_least, self.algorithm
                failed.append((err, fixed, floor))
                continue
            try:
                schedule = remat.solve(
                    option, room, algorithm=self.algorithm, slots=self.slots, exact_memory=self.exact_memory, **extra
                )
            except remat.InfeasibleError as e:
                # The step's smallest: the stack's plus what stays outside it,
                # and at least what the part before the stack takes in its backward.
                failed.append((e, fixed, there.pre_backward if there is not None else 0))
                continue
            cost = schedule.makespan + ms
            # Chunks change the gradients' rounding (bit-identical to plain
            # training no more): taken where the head whole does not fit, or
            # where they are faster by more than the noise of a measurement.
            gain = 0.0 if best is None or best[1] != 1 else _CHUNKS_GAIN * best[0]
            if best is None or cost < best[0] - gain:
                best = (cost, chunks, option, schedule, there, room)
        if best is None and outside is None:
            found = self._provisional(chain, failed, note, extra)
            if found is not None:
                schedule, least_stack = found
                best = (schedule.makespan, 1, chain, schedule, None, least_stack)
                note = f"{note}; the first step ran the stack at its least, {_fmt(least_stack)}, to measure the rest"
        if best is None:
            # The solver speaks of the stack's budget; the user gave the step's.
            named = [max(int(e.min_budget) + fixed, floor) for e, fixed, floor in failed if e.min_budget is not None]
            least = min(named) if named else None
            why = ""
            if least is not None and any(floor == least for _, _, floor in failed):
                why = f" (the backward of the part before {self.where} takes that by itself)"
            err = remat.InfeasibleError(
                f"remat.torch.apply: no schedule of {self.where} fits: {note}; the smallest budget for the whole "
                f"step is {_fmt(least) if least is not None else 'unknown'}"
                f"{f' ({least} bytes)' if least is not None else ''}{why}: raise memory= to at least that"
            )
            err.min_budget, err.algorithm, err.budget = least, failed[0][0].algorithm, total
            larger = max((p.total for n, p in entry.by_numel.items() if n > numel), default=None)
            if least is not None and not at_least and isinstance(self.memory, str) and larger and least <= larger:
                # A share of storing everything at a smaller input (the last
                # batch of an epoch) that a part which does not shrink (a
                # convolution's workspace) makes impossible: the memory a
                # larger input was planned within holds this one.
                warnings.warn(
                    f"remat: memory={self.memory!r} has no schedule at this smaller input ({_fmt(total)}; "
                    f"a part that does not shrink with the input, such as a convolution's workspace, needs "
                    f"more): it runs at its smallest budget, {_fmt(least)}, within the {_fmt(larger)} "
                    "planned for a larger input",
                    RuntimeWarning,
                    stacklevel=5,
                )
                return self._solve(entry, numel, device, at_least=least)
            raise err from failed[0][0]
        _, chunks, chain, schedule, outside, budget = best
        if chunks != 1:
            self._chunked_forward()
        in_graph = None
        if (
            entry.in_graph
            and outside is not None
            and self.in_flight == 1
            and not self._in_graph_refused
            and chunks == 1
        ):
            found = (
                self._in_graph_plan(chain, budget - self._in_graph_excess, schedule, entry.input_copies)
                if budget > self._in_graph_excess
                else None
            )
            if found is not None:
                chain, schedule, in_graph = found
        ex = Executor(
            self.modules,
            Program(len(self.modules), schedule.operations_with_options),
            forwards=[self._rerun(m) for m in self.modules],
            # The model's call of a block ran its hooks already (see _make_forward).
            first_forwards=self._originals,
            preserve_rng=self.preserve_rng,
            names=self.names,
            inplace=entry.inplace,
            uses_rng=entry.uses_rng,
            options=entry.options,
            compiled=[
                [self._variant(i, p) for p in opts] if entry.compiled and i + 1 not in self._bridges else None
                for i, opts in enumerate(entry.options)
            ],
            bridges=sorted(self._bridges),
        )
        self._infeasible = None
        # Each a replay of the schedule whose peak bounds the step's: the
        # least of them is the prediction (see _Planned.replays).
        replays: list[tuple[remat.Chain, int]] = [(chain, 0)]
        if outside is not None and outside.input_dropped and in_graph is None and self.in_flight == 1:
            held = _with_input_held(stack, outside, schedule)
            if held is not None:
                replays.append((held, 0))
        if released and outside is not None and self.in_flight == 1:
            # (With micro-batches in flight, later ones' forwards follow the
            # first loss's backward: the schedule's figure stays.)
            replays.append((_with_loss(bare, outside), released))
        peak = min([schedule.peak_memory] + [replayed_peak(c, schedule, e) for c, e in replays[1:]])
        unkept = 0
        if kept and in_graph is None:
            program = ex.program
            unkept = sum(
                n
                for readers, n in entry.side_kept_readers
                if not any(program.rerun[l] or program.record_option[l] for l in readers)
            )
            unkept = min(kept, math.floor(unkept * numel / entry.numel))
            if unkept:
                note += (
                    f"; of the side inputs set aside as kept, this plan holds {_fmt(kept - unkept)} (it runs "
                    "the blocks that read the rest once)"
                )
        return _Planned(
            chain,
            schedule,
            ex,
            budget,
            note,
            total,
            in_graph,
            chunks,
            outside,
            peak,
            unkept=unkept,
            replays=tuple(replays) if in_graph is None and self.in_flight == 1 else (),
        )

    def _provisional(
        self, chain: remat.Chain, failed: list[tuple[remat.InfeasibleError, int, int]], note: str, extra: dict[str, Any]
    ) -> tuple[remat.Schedule, int] | None:
        """The first step's schedule and the stack's budget for it where the stack alone does not fit the budget
        and the parts outside it are not measured yet: the stack at the least
        memory any schedule needs, so that the step runs and measures them.
        Its figure alone would name a smallest budget the whole step cannot
        meet (the outside parts come on top), and a share of storing
        everything ("40%") is of the whole step once they are measured, which
        may fit where a share of the stack alone did not. The next step plans
        within the budget, or raises the InfeasibleError that names the
        smallest budget for the whole step. Warns."""
        least = [int(e.min_budget) for e, _, _ in failed if e.min_budget is not None]
        if not least:
            return None
        try:
            schedule = remat.solve(
                chain, min(least), algorithm=self.algorithm, slots=self.slots, exact_memory=self.exact_memory, **extra
            )
        except remat.InfeasibleError:
            return None
        warnings.warn(
            f"remat: {note}: the stack alone needs at least {_fmt(min(least))}; this first step runs it at that "
            "(the least any schedule takes) to measure the rest of the step, and the next step plans within the "
            "budget or raises the error naming the smallest budget for the whole step",
            stacklevel=5,
        )
        return schedule, min(least)

    def _in_graph_plan(
        self, chain: remat.Chain, budget: int, best: remat.Schedule, copies: Sequence[Sequence[float]] = ()
    ) -> tuple[remat.Chain, remat.Schedule, tuple[int, ...]] | None:
        """The fastest plan that records every block in the forward, each with
        one of its options (no block's forward runs twice: what an option does
        not keep its own backward recomputes), where it is within
        ``_IN_GRAPH_GAIN`` of the fastest plan of all; with the chain it is
        predicted on (:func:`_in_graph_chain` of ``copies``) and the options of
        each block. Such a plan needs no executor: under torch.compile every
        block runs inside the model's graph, under non-reentrant checkpoint with
        its option's policy, so the compiler fuses across blocks and no graph
        breaks. Found by the same solvers, on the chain with forwards that
        record nothing made impossible (a transient no budget holds)."""
        inside = _in_graph_chain(chain, copies)
        d = inside.to_dict()
        for s in d["stages"]:
            s["forward_overhead"] = _NO_PLAIN_FORWARD
            s.setdefault("recording_overhead", 0)
        try:
            schedule = remat.solve(
                remat.Chain.from_dict(d),
                budget,
                algorithm=self.algorithm,
                slots=self.slots,
                exact_memory=self.exact_memory,
            )
        except (remat.InfeasibleError, ValueError):
            return None
        L = len(self.modules)
        ops = schedule.operations_with_options
        forward = [(k, l, o) for k, l, o in ops if k != Op.B.value]
        if [l for _, l, _ in forward] != list(range(1, L + 2)) or any(k != Op.F_ALL.value for k, _, _ in forward):
            return None
        replay = remat.simulate(inside, schedule)  # with the forwards as they are: the same schedule, the true figures
        if replay.peak_memory > budget or schedule.makespan > (1 + _IN_GRAPH_GAIN) * best.makespan:
            return None
        return inside, schedule, tuple(o for _, _, o in forward[:L])

    def _budget(
        self,
        chain: remat.Chain,
        outside: _Outside | None,
        device: torch.device,
        side: int = 0,
        kept: int = 0,
        at_least: int = 0,
    ) -> tuple[int, str]:
        """The chain's budget: ``memory`` less what the step holds outside the
        stack, ``kept`` and :data:`_MARGIN`. ``side``, the bytes of the
        gradients of the blocks' side inputs, the chain counts itself (see
        _with_side_gradients): named in the note. O(store-all's simulation)
        for a share."""
        fixed = kept + _MARGIN + (0 if outside is None else outside.held())
        fixed_note = (
            "the part before and after the stack not measured yet (first training step)"
            if outside is None
            else f"before the stack {_fmt(outside.pre)} (its own backward {_fmt(outside.pre_backward)}), held after "
            f"it through the backward {_fmt(outside.post_after)}"
        )
        if outside is not None and outside.given:
            fixed_note += f", the stack's input {_fmt(outside.given)} made before the step (not in its peak)"
        if outside is not None and outside.released:
            fixed_note += f", of what is before it {_fmt(outside.released)} gone by the stack's backward"
        if side:
            fixed_note += (
                f", the gradients of the blocks' side inputs {_fmt(side)} (counted in the stack's backward, each from "
                "the last block that reads it to the one that made it)"
            )
        fixed_note += f", a margin of {_fmt(_MARGIN)}"
        if kept:
            fixed_note += (
                f", side inputs made inside a stack that remat keeps to run blocks again {_fmt(kept)} (throughout)"
            )
        m = self.memory
        if isinstance(m, int):
            total, how = m, f"memory={m} bytes ({_fmt(m)})"
        elif m == "auto":
            total, how = auto_budget(self.model, device, 0, self.optimizer_state_bytes)
        else:
            share = share_of(m)
            assert share is not None
            store_all = remat.simulate(chain, remat.solve(chain, 1 << 62, algorithm="store-all")).peak_memory
            whole = max(store_all + fixed, outside.pre_backward if outside is not None else 0)
            total = int(share * whole)
            how = f"memory={m!r} of storing everything ({_fmt(whole)}) = {_fmt(total)}"
        if at_least > total:
            how += f", raised to {_fmt(at_least)}, the least this input needs (within a larger input's budget)"
            total = at_least
        # At most 0 left for the stack, or less than the part before it takes
        # in its backward: _solve names the smallest budget for the step.
        budget = total - fixed
        return budget, f"{how}; {fixed_note}; for the stack {_fmt(budget)}"

    def _measured_pre_backward(self, peak: int, numel: int) -> None:
        """Adds what the part before the stack takes in its backward, measured at
        the end of a step, and plans again with it."""
        if self._shape_measure and self._last is not None:
            found = self._last[0].outside_at.get((numel, self._last[0].lengths.get(numel, 0)))
            if found is not None:
                found.pre_backward = peak
                self._measured(found)
            return
        if self._outside is None or self._last is None:
            return
        self._outside.pre_backward = int(peak * self._outside.activation / numel)
        self._measured(self._outside)

    def _measured_in_backward(self, replan: Callable[[], None]) -> None:
        """A re-plan from inside a backward (a hook, an engine callback): where no
        schedule fits, the error waits for the next forward, which solves again
        and raises it. Raised here, it would abort the backward with remat's
        measurement half done (its dispatch mode left on the stack)."""
        try:
            replan()
        except remat.InfeasibleError as e:
            self._infeasible = e

    def _measured(self, outside: _Outside) -> None:
        """Re-plans with the memory outside the stack, measured on a step (the
        first shape's, or a later one's for its own plans)."""
        if self._last is None:
            return
        entry, numel, device = self._last
        if self._shape_measure:
            ran = entry.by_numel.get(numel)
            if ran is not None and ran.chunks != 1:
                # The head ran in chunks: its figures are the whole head's
                # only on a step that runs it whole (the first shape's).
                return
            entry.outside_at[numel, entry.lengths.get(numel, 0)] = outside
            entry.by_numel[numel] = self._solve(entry, numel, device)
            return
        self._outside = outside
        entry.outside = outside.scaled(entry.numel)
        entry.by_numel.clear()
        planned = entry.by_numel[numel] = self._solve(entry, numel, device)
        self._run_in_graph(entry, numel, planned)
        # A compiled plan the executor runs: its next step is measured.
        self._verifying_executor = entry.compiled and not self._verifying

    def _set_in_graph(self, found: dict[tuple[int, Any], tuple[int, Any]]) -> None:
        """The in-graph plans from now on, given to each block's slot too."""
        if not found:
            self._in_graph_inputs = frozenset()
        self._in_graph = found
        self._in_graph_on = bool(found)
        for slot in {id(s): s for s in self._slots.values()}.values():
            slot.set_plans(found)

    def _run_in_graph(self, entry: _Entry, numel: int, planned: _Planned) -> None:
        """From the next forward, blocks of ``numel`` elements run inside
        torch.compile's graph where the plan allows (the next step's peak is
        measured first: see _Verify)."""
        if planned.in_graph is None or self._in_graph_refused:
            return
        d = planned.chain.to_dict()
        dtype = getattr(torch, str((d.get("metadata") or {}).get("dtype", "float32")), torch.float32)
        size = torch.empty((), dtype=dtype).element_size()
        inputs = [d["input_size"], *(s["output_size"] for s in d["stages"][:-1])]
        found = dict(self._in_graph)
        # One context function per policy: Dynamo guards on the function a
        # block's plan names, so blocks with one option share one graph.
        contexts: dict[str, Any] = {}
        shape = self._last_shape if self._last_shape is not None and math.prod(self._last_shape) == numel else None
        for l, o in enumerate(planned.in_graph, 1):
            policy = entry.options[l - 1][o] if o else None
            if policy is not None and policy.name not in contexts:
                contexts[policy.name] = in_graph_context(policy)
            elements = inputs[l - 1] // size
            # By the step's shape where the block takes the stack's (see _BlockSlot.in_graph_plan).
            key: Any = shape if shape is not None and elements == numel else elements
            found[(l, key)] = (o, None if policy is None else contexts[policy.name])
        if self._last_inputs is not None:
            self._in_graph_inputs = self._in_graph_inputs | {self._last_inputs}
        self._set_in_graph(found)
        self._verifying = True
        self._verified = None
        self._retrace()

    def _retrace(self) -> None:
        """Lets Dynamo trace again the frames between the model and its blocks.
        The executor's graph breaks made it run the loop over the blocks
        eagerly (a graph break in a loop skips its frame for good), so a plan
        that runs inside the graph would otherwise still be a graph per block."""
        names = {m: n for n, m in self.model.named_modules()}
        paths: set[str] = set()
        for name in self.names:
            parts = name.split(".")
            paths.update(".".join(parts[:i]) for i in range(len(parts)))
        for path in sorted(paths):
            try:
                module = self.model.get_submodule(path) if path else self.model
            except AttributeError:
                continue
            if module not in names:
                continue
            fn: Any = type(module).forward
            seen = 0
            while fn is not None and seen < 8:  # decorators' wrappers too (transformers' have several)
                code = getattr(fn, "__code__", None)
                if code is not None:
                    _reset_code(code)
                fn = getattr(fn, "__wrapped__", None)
                seen += 1

    # -- what it decided ----------------------------------------------------

    def _current(self) -> _Planned | None:
        m = self._measure
        if isinstance(m, (_TracedMeasure, _Verify)) and m.done and self._step is None:
            # A measured step has ended: its figures are in the plan from now
            # on. No schedule may fit them: the next forward raises that again.
            try:
                m.settle()
            except remat.InfeasibleError as e:
                self._infeasible = e
        if self._last is None:
            return None
        entry, numel, _ = self._last
        return entry.by_numel.get(numel)

    @property
    def chain(self) -> remat.Chain | None:
        """The chain of the stack for the last input (with the outside parts as
        its loss once measured); None before the first training step."""
        c = self._current()
        return c.chain if c else None

    @property
    def schedule(self) -> remat.Schedule | None:
        """The schedule of the last input; None before the first training step."""
        c = self._current()
        return c.schedule if c else None

    @property
    def loss_chunks(self) -> int | None:
        """The loss option of the last input's plan: 1 where the head and the
        loss run whole, else the number of chunks of tokens they run in
        (``chunked_loss=``); None before the first training step."""
        c = self._current()
        return c.chunks if c else None

    @property
    def compiled(self) -> bool:
        """Whether the blocks of the last input ran compiled (see ``compile=``)."""
        return self._last is not None and self._last[0].compiled

    @property
    def budget(self) -> int | None:
        """The stack's budget in bytes (``memory`` less the outside parts)."""
        c = self._current()
        return c.budget if c else None

    @property
    def peak_memory(self) -> int | None:
        """The predicted peak of the whole step in bytes (the schedule's peak plus
        what the outside parts hold throughout, and the gradients of the
        blocks' side inputs); None before the first step. Under
        torch.compile, once the plan's first step is measured (within its
        budget), that measurement: the chain's prediction of a compiled plan
        is :attr:`chain_peak_memory`."""
        c = self._current()
        if c is not None and c.measured is not None:
            return c.measured
        return self.chain_peak_memory

    @property
    def chain_peak_memory(self) -> int | None:
        """The whole step's peak as the chain predicts it (see
        :attr:`peak_memory`); None before the first step."""
        c = self._current()
        if c is None or self._last is None:
            return None
        outside = c.outside
        # With micro-batches in flight, the rank's peak: (in_flight - 1) x residue + peak.
        schedule = c.schedule
        peak = int(getattr(schedule, "rank_peak", schedule.peak_memory)) if self.in_flight != 1 else c.stack_peak
        if outside is None:
            return peak
        # What the budget set aside: the outside parts, and the side inputs'
        # gradients (held through the stack's backward, counted throughout),
        # less the kept side inputs this plan does not keep. After the
        # stack's backward (B^1) only the part before it runs its own.
        return max(peak + c.total - c.budget - c.unkept, outside.pre_backward)

    @property
    def step_time(self) -> float | None:
        """The predicted time of the step's stack and loss in ms (the
        schedule's makespan on the profiled times: the blocks' forwards,
        recomputations and backwards, and the parts outside the stack as its
        loss once measured); None before a plan."""
        c = self._current()
        return c.schedule.makespan if c else None

    def plan_on(self, example_inputs: Any, example_loss: Callable[[Any], torch.Tensor] | None = None) -> AppliedPlan:
        """Plans on an example batch before training (the pre-flight): runs the
        forward and backward of a first step on it (one, or up to three while
        the measurement of the parts outside the stack settles and the plan
        has not yet seen which of its blocks' outputs a step frees early), as
        the first training step would, then puts back what that touched, so no training
        step was taken: every parameter's ``.grad`` as it was (the optimizer
        sees nothing), the buffers (BatchNorm's running statistics) and the
        RNG states. The output is held through the backward, as
        ``out = model(**batch); out.loss.backward()`` holds it (the logits
        counted): a loop that lets go of it first (the Hugging Face Trainer)
        peaks below the prediction. Afterwards :attr:`peak_memory`, :attr:`step_time`,
        :meth:`explain` hold the plan, and the first training step on a batch
        of that shape runs it without profiling.

        Args:
            example_inputs: how the model is called: a tensor (``model(x)``),
                a tuple (``model(*args)``) or a dict (``model(**kwargs)``), as
                in training (a Hugging Face model's with ``labels``).
            example_loss: the loss of the model's output; default: the
                output's ``loss`` (Hugging Face), or the output itself when it
                is a single number.

        Returns:
            this plan.

        Raises:
            remat.InfeasibleError: no schedule fits the budget (its
                ``min_budget`` is the smallest that does).
            TypeError: ``example_inputs`` of another kind, or an output with
                no loss and no ``example_loss``.
        """
        if isinstance(example_inputs, torch.Tensor):
            args, kwargs = (example_inputs,), {}
        elif isinstance(example_inputs, tuple):
            args, kwargs = example_inputs, {}
        elif isinstance(example_inputs, dict):
            args, kwargs = (), dict(example_inputs)
        else:
            raise TypeError(
                "example_inputs must be a tensor (model(x)), a tuple (model(*args)) or a dict (model(**kwargs)), "
                f"got {type(example_inputs).__name__}"
            )
        if example_loss is not None and not callable(example_loss):
            raise TypeError(f"example_loss must be a function of the model's output, got {example_loss!r}")
        if not torch.is_grad_enabled():
            raise RuntimeError("remat: plan_on() trains a step's forward and backward; call it with gradients enabled")
        params = list(self.model.parameters())
        grads = [p.grad for p in params]
        buffers = [(b, b.detach().clone()) for b in self.model.buffers()]
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self._infeasible = None
        try:
            for _ in range(3):
                for p in params:
                    p.grad = None
                out = self.model(*args, **kwargs)
                loss = _loss_of(out, example_loss)
                loss.backward()
                del out, loss
                if self._settled():
                    break
        finally:
            for p, g in zip(params, grads):
                p.grad = g
            with torch.no_grad():
                for b, v in buffers:
                    b.copy_(v)
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)
        if self._infeasible is not None:
            raise self._infeasible
        return self

    def _settled(self) -> bool:
        """Whether the next training step on the last input would run the plan
        as it is: the parts outside the stack measured, the step's measurement
        over, the loss options (if any) measured or refused, and what a step
        of the plan frees of its blocks' outputs seen (_Planned.freed)."""
        c = self._current()
        return (
            c is not None
            and self._outside is not None
            and self._measure is None
            and (self._lm_head is None or self._head_options is not None or self._head_refused is not None)
            and (c.freed is not None or not c.replays)
        )

    def explain(self) -> str:
        """The plan in words: the stack, the budget's arithmetic, the schedule and
        its predicted peak and time against storing everything."""
        c = self._current()
        head = f"remat on {type(self.model).__name__}: {len(self.blocks)} blocks of {self.where}"
        if self._stack_note is not None:
            head += f" ({self._stack_note})"
        if c is None:
            if self._infeasible is not None:
                return f"{head}; no plan fits the figures the first step measured: {self._infeasible}"
            return (
                f"{head}; no plan yet: run a training step first, or plan before training with plan_on(example_inputs)"
            )
        chain, schedule, note = c.chain, c.schedule, c.note
        d = chain.to_dict()
        ops = schedule.operations_with_options
        L = len(self.modules)
        split = [(k, l) for k, l, _ in ops].index((Op.B.value, L + 1))
        has_options = any(s.get("options") for s in d["stages"])
        store_all = sum(s["forward_time"] + s["backward_time"] for s in d["stages"])
        lines = [
            head,
            f"budget: {note}",
            f"chain: {L} stages on {(d.get('metadata') or {}).get('device', '?')}, profiled {self.profiles} time(s)",
            *self._explain_stacks(d["stages"]),
            _explain_compiled(self, c),
            f"schedule ({schedule.algorithm}): "
            + _explain_forward(ops[:split], L, has_options, d["stages"], self._bridges),
            (
                f"predicted peak {_fmt(self.peak_memory or 0)} (the stack {_fmt(c.stack_peak)}), time "
                if c.measured is None
                else f"peak {_fmt(c.measured)} (its first compiled step, measured; the chain predicts "
                f"{_fmt(self.chain_peak_memory or 0)}, the stack {_fmt(c.stack_peak)}), predicted time "
            )
            + f"{schedule.makespan:.3f} ms against {store_all:.3f} ms storing everything",
        ]
        if has_options:
            lines += _explain_options(d["stages"], ops, self._bridges)
        if self._sequence_first is not None and self.scale_shapes:
            lines.append(
                f"the blocks take their sequence first ({self._sequence_first}): each input shape is profiled "
                "and planned for itself, none sized by scaling another's"
            )
        if self._last is not None and self._last[0].dropped:
            lines += _explain_dropped(self._last[0].dropped)
        if self._last is not None and self._last[0].derived:
            derived = sorted(self._last[0].derived)
            lines.append(
                f"blocks {_ranges(derived)} take what the model's code makes of the block before's output, not that "
                f"output: blocks {_ranges([l - 1 for l in derived])} are recorded in the forward (each with any of its "
                "options), never run again to remake the next one's input"
            )
        lines += self._explain_head(c)
        if self.pending_gradients and self.compiled:
            lines.append(
                f"tied parameters' gradient {_fmt(self.pending_gradients)}, held by autograd from the head's backward "
                "to the embeddings', not counted: a compiled step's parameter gradients are left out from their "
                "allocation (each is one the step leaves in .grad)"
            )
        elif self.pending_gradients:
            lines.append(
                f"of which tied parameters' gradient {_fmt(self.pending_gradients)}: held by autograd from the head's "
                "backward to the embeddings' (counted in the budget: it is not a .grad yet)"
            )
        return "\n".join(lines)

    def _explain_stacks(self, stages: list[dict[str, Any]]) -> list[str]:
        """Where several stacks are one chain: which stages are whose, and what
        each stage between two holds."""
        if not self._bridges:
            return []
        parts, l = [], 1
        for i, (where, n) in enumerate(self.stacks):
            if i:
                b = l - 1
                s = stages[b - 1]
                measured = "measured" if b in self._bridge_figures else "not measured yet: its output alone"
                parts.append(
                    f"stage {b}, the model's code {self.names[b - 1]}, recorded once, holds "
                    f"{_fmt(int(s['saved_size']))} ({measured})"
                )
            parts.append(f"{where}: stages {_ranges(list(range(l, l + n)))}")
            l += n + 1
        return [f"stacks, planned together: {'; '.join(parts)}"]

    def _explain_head(self, c: _Planned) -> list[str]:
        if self._head_refused:
            return [f"head and loss: whole, as the model writes them ({self._head_refused})"]
        if self._lm_head is None:
            return []
        if self._last is not None and self._last[0].in_graph:
            # Measured from hooks on an eager step, run by a forward of remat's
            # that would break the model's graph.
            return [
                "head and loss: whole, as the model writes them (under torch.compile(model) they are in the model's "
                "graph; compile=True instead compiles the blocks and plans the head whole or in chunks)"
            ]
        if not self._head_options or self._last is None:
            return ["head and loss: whole (their options are measured on the first training step)"]
        numel = self._last[1]
        f = numel / self._head_numel
        whole = self._head_options[0]
        measured = ", ".join(
            f"{o.describe()}{' (on part of the batch, extrapolated)' if o.estimated else ''} {_fmt(int(o.peak * f))} "
            f"{o.ms * f:.1f} ms"
            for o in self._head_options
        )
        if c.chunks == 1:
            return [f"head and loss: whole (measured, forward and backward: {measured})"]
        o = next(o for o in self._head_options if o.chunks == c.chunks)
        return [
            f"head and loss: {o.describe()}, never the whole logits (each chunk's gradient made in the forward): "
            f"{_fmt(int((whole.peak - o.peak) * f))} less than whole for {(o.ms - whole.ms) * f:+.1f} ms "
            f"(measured: {measured}); the output's logits are None",
        ]

    def __repr__(self) -> str:
        return f"<remat AppliedPlan: {len(self.blocks)} blocks of {self.where}, memory={self.memory!r}>"

    # -- measuring the outside parts -----------------------------------------

    def _end_measure(self) -> None:
        m = self._measure
        if m is not None:
            try:
                if isinstance(m, (_TracedMeasure, _Verify)) and m.done:
                    m.settle()  # may find no plan fits: raised, after the trace is closed
            finally:
                # Left open, the trace's profiler would run on into the next
                # step, whose measurement would then fall back to a dispatch
                # mode (and break Dynamo under torch.compile).
                m.close()
                if not m.open:
                    self._measure = None


#: The LiveBytes that measure the parts outside a stack (each plan's own).
_MEASURING: weakref.WeakSet[LiveBytes] = weakref.WeakSet()


class _Measure:
    """Memory of one training step outside the stack: from the model's forward
    pre-hook to the stack's input (``pre``), and from the stack's output to its
    gradient (``post``). LiveBytes on the CPU, the allocator's statistics on a
    GPU."""

    def __init__(self, plan: AppliedPlan) -> None:
        self.plan = plan
        self.live: LiveBytes | None = None
        self.device: torch.device | None = None
        self.base = 0
        self.pre = 0
        self.given = 0  # see _Outside.given
        self.inputs = plan._input_elements()  # see _Outside.inputs
        self.at_end = 0
        #: The first block's side inputs counted in ``pre``, weakly, with their bytes.
        self.side: list[tuple[weakref.ref[Any], int]] = []
        #: The tensors blocks returned besides the carried one, weakly, with their bytes.
        self.returned: list[tuple[weakref.ref[Any], int]] = []
        self.numel = 1
        self.open = True
        self.recording = True
        self.input_gradient = False
        self.peak_before = 0
        self.gpu_peak_aside = 0  # the allocator's peak before work set aside (see aside())
        self.borrowed = False
        self.skipped = False
        #: The bridge being measured: (its stage, bytes alive at its start, the
        #: last block's output, and its input's storage, weakly, with its bytes).
        self._bridge_at: tuple[int, int, torch.Tensor, weakref.ref[Any] | None, int] | None = None
        if plan._on_gpu():
            self.device = next(p.device for p in plan.model.parameters() if p.is_cuda)
            self.base = torch.cuda.memory_allocated(self.device)
            return
        modes = _get_current_dispatch_mode_stack()
        # A LiveBytes of another plan's measurement can be left on the stack
        # until its model's next forward or remove() (or for good, when its
        # backward raised): read, it measured this step's parts outside the
        # stack as zero, or with that plan's leftovers and without excluding
        # this model's parameter gradients. A new LiveBytes goes on top of
        # it instead (and leaves first).
        if modes and modes[-1] not in _MEASURING:
            # Another dispatch mode is active: entering ours under it would tangle
            # the mode stack when the two are left. A LiveBytes (someone measuring
            # the step) is read instead; any other mode leaves the parts outside
            # the stack unmeasured (counted as zero).
            top = modes[-1]
            if isinstance(top, LiveBytes):
                self.live, self.borrowed = top, True
                self.base = top.current
            else:
                self.skipped = True
                self.open = False
            return
        self.live = LiveBytes()
        _MEASURING.add(self.live)
        self.live.__enter__()
        self.live.exclude_parameter_gradients(plan.model.parameters())

    def _now(self) -> int:
        if self.live is not None:
            return self.live.current - self.base
        assert self.device is not None
        return torch.cuda.memory_allocated(self.device) - self.base

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stops tracking new tensors (profiling runs inside; its timings must not
        pay for the tracking), then resumes."""
        if self.live is None or not self.open or self.borrowed:
            yield
            return
        modes = _get_current_dispatch_mode_stack()
        if not modes or modes[-1] is not self.live:
            # Another mode above it: leaving would pop that one; pass through instead.
            self.live.tracking = False
            try:
                yield
            finally:
                self.live.tracking = True
            return
        self.live.__exit__(None, None, None)  # also drops the gradient hooks
        try:
            yield
        finally:
            self.live.__enter__()
            self.live.exclude_parameter_gradients(self.plan.model.parameters())

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Work inside (measuring the loss options) that the step's figures leave
        out: untracked on the CPU; on a GPU the peak before it is kept and the
        allocator's peak reset after it."""
        if self.device is None:
            if self.live is not None and self.borrowed:
                was, self.live.tracking = self.live.tracking, False
                try:
                    yield
                finally:
                    self.live.tracking = was
                return
            with self.paused():
                yield
            return
        before = torch.cuda.max_memory_allocated(self.device)
        try:
            yield
        finally:
            torch.cuda.reset_peak_memory_stats(self.device)
            self.gpu_peak_aside = max(self.gpu_peak_aside, before)

    def stack_starts(self, x: torch.Tensor, side: Sequence[torch.Tensor] = ()) -> None:
        made = self.live.tracks(x) if self.live is not None else not self.plan._given(x)
        own = x.untyped_storage().nbytes() if made else 0
        self.pre = max(0, self._now() - own)
        self.given = 0 if made else self.plan._given_bytes(x)
        counted = [t for t in side if self.live is None or self.live.tracks(t)]
        self.side = [(ref, n) for _, ref, n in _side_storages(x, counted)]
        self.numel = x.numel()
        self.input_gradient = x.requires_grad
        if x.requires_grad:
            x.register_hook(self._input_gradient_arrives)

    def block_returned(self, y: object) -> None:
        """Notes what a block returned besides the carried tensor (see
        :meth:`stack_ends`)."""
        if not self.open or (self.live is not None and not self.live.tracking):
            return
        for t in _returned_besides(y):
            if self.live is None or self.live.tracks(t):
                self.returned.append((weakref.ref(t.untyped_storage()), t.untyped_storage().nbytes()))

    def bridge_starts(self, b: int, y: torch.Tensor, last_input: torch.Tensor) -> None:
        """The block before bridge stage ``b`` returned ``y`` (its input was
        ``last_input``): the model's code between the stacks runs from here
        to the next stack's first call (:meth:`bridge_ends`)."""
        if not self.open or (self.live is not None and not self.live.tracking):
            return
        # The input weakly: the caller lets go of it, and this must not keep it.
        tracked = last_input is not y and (self.live is None or self.live.tracks(last_input))
        ref = weakref.ref(last_input.untyped_storage()) if tracked else None
        self._bridge_at = (b, self._now(), y, ref, last_input.untyped_storage().nbytes() if tracked else 0)
        self._reset_peak()

    def bridge_ends(self, b: int, x: torch.Tensor) -> None:
        """The next stack's first block is called with ``x``: what the code
        between held (its stage's abar), its transient, and later, from the
        gradient of ``x`` to that of the last block's output, its backward's."""
        at, self._bridge_at = self._bridge_at, None
        if at is None or at[0] != b or not self.open:
            return
        _, start, y, ref, size = at
        now, peak = self._now(), self._peak()
        # The caller lets go of the last block's input after it returns; the
        # chain frees it earlier (F_none), so its freeing is not room the
        # code between made.
        dropped = size if ref is not None and ref() is None else 0
        figures = _BridgeFigures(max(0, now + dropped - start), max(0, peak - now), self.numel)
        self.plan._bridge_measured(b, figures)
        if not (x.requires_grad and y.requires_grad):
            return
        began: list[int] = []

        def backward_starts(_g: torch.Tensor) -> None:
            if self.live is not None and not self.live.tracking:
                return
            began.append(self._now())
            self._reset_peak()

        def backward_ends(_g: torch.Tensor) -> None:
            if not began or (self.live is not None and not self.live.tracking):
                return
            figures.backward = max(0, self._peak() - began[0])
            self.plan._bridge_measured(b, figures)

        x.register_hook(backward_starts)
        y.register_hook(backward_ends)

    def _reset_peak(self) -> None:
        if self.live is not None:
            self.peak_before = max(self.peak_before, self.live.peak)
            self.live.reset_peak()
        else:
            assert self.device is not None
            torch.cuda.reset_peak_memory_stats(self.device)
            self.gpu_peak_aside = 0

    def _peak(self) -> int:
        if self.live is not None:
            peak = self.live.peak - self.base
            # A borrowed LiveBytes keeps its own peak over the whole window.
            self.live.peak = max(self.live.peak, self.peak_before)
            return peak
        assert self.device is not None
        return max(torch.cuda.max_memory_allocated(self.device), self.gpu_peak_aside) - self.base

    def _input_gradient_arrives(self, g: torch.Tensor) -> None:
        """delta^0: the part before the stack runs its backward now, to the end of
        the backward (a callback the engine runs then)."""
        if not self.open:
            return
        self._reset_peak()

        def backward_ends() -> None:
            peak = self._peak()
            if self.live is not None and not self.borrowed:
                self.live.tracking = False  # left at the next forward: see gradient_arrives
            self.plan._measured_in_backward(lambda: self.plan._measured_pre_backward(max(0, peak), self.numel))

        torch.autograd.Variable._execution_engine.queue_callback(backward_ends)

    def stack_ends(self, y: object, last_input: torch.Tensor) -> None:
        out = y if isinstance(y, torch.Tensor) else None
        if out is None and isinstance(y, (tuple, list)) and y and isinstance(y[0], torch.Tensor):
            out = y[0]
        if out is None or not out.requires_grad:
            self.close()
            return
        self.at_end = self._now()
        self._reset_peak()
        grad_bytes = out.numel() * out.element_size()

        # at_end counts two tensors that are the chain's, not the head's, and
        # are usually gone by the time delta^L arrives: a^L, which the head's
        # backward frees (the chain frees it itself: B^{L+1} deletes a plain
        # a^L, an abar^L goes at B^L), and a^{L-1}, which the caller holds
        # while the last block returns and drops right after (the chain
        # dropped it at F_none^L; where the plan keeps it, it stays). Their
        # freeing is not room the head makes: credited to it, the prediction
        # came out one or two activations low.
        def chain_held(t: torch.Tensor) -> tuple[weakref.ref[Any], int] | None:
            if self.live is not None and not self.live.tracks(t):
                return None  # not in at_end
            return weakref.ref(t.untyped_storage()), t.untyped_storage().nbytes()

        output = chain_held(out)
        same = last_input.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
        before = None if same else chain_held(last_input)
        # Nor is the freeing of what blocks returned besides the carried
        # tensor, which the chain never counted: the model's loop holds the
        # block before's attention weights through the last block's call
        # (Bloom, GPT-Neo) and drops them as the forward returns, in every
        # step. Credited to the head, the prediction came out that much low.
        returned = _distinct_alive(self.returned, out, last_input)
        self.returned = []
        # The blocks' side inputs made before the stack (an attention mask),
        # freed by then in this step, are kept by the executor in a step that
        # runs blocks again: never counted as released.
        side = [(ref, n) for ref, n in self.side if ref() is not None]

        def freed(held: tuple[weakref.ref[Any], int] | None) -> int:
            return held[1] if held is not None and held[0]() is None else 0

        def gradient_arrives(g: torch.Tensor) -> None:
            if not (self.open and self.recording):
                return
            peak = self._peak()
            now = self._now()
            # a^{L-1} went before the head ran, so before its peak too; a^L,
            # freed in the head's backward, is counted as the chain says.
            dropped = freed(before) + sum(n for ref, n in returned if ref() is None)
            dropped += sum(freed(held) for held in side)
            # What stays includes the gradient of a weight the head shares with
            # the embeddings (an LM's tied word embeddings), which autograd holds
            # until the embeddings' backward adds theirs: real memory of the step
            # (not yet a .grad), so the budget counts it.
            raw = now + freed(output) + dropped - self.at_end - grad_bytes
            # A net figure: without the allocator's history (a GPU's
            # statistics, LiveBytes) what the head made and left is not read
            # apart from what it freed, as _TracedMeasure reads it (made()).
            post_after = max(0, raw)
            post_peak = max(post_after, peak + dropped - self.at_end)
            # Not left here: the engine restores the thread's dispatch modes
            # when the backward ends, so LiveBytes stops tracking now and is
            # left at the next forward (the model's pre-hook) or by remove().
            self.recording = False
            if self.live is not None and not self.borrowed and not self.input_gradient:
                self.live.tracking = False
            # More freed than left (raw < 0): of what was before the stack.
            released = min(self.pre, max(0, -raw))
            outside = _Outside(
                self.pre,
                post_peak,
                post_after,
                self.numel,
                fixed=self.plan._outside_gradients,
                released=released,
                given=self.given,
                fixed_pre=self.plan._outside_per_channel,
                fixed_post=self.plan._head_gradients,
                inputs=self.inputs,
                input_dropped=min(freed(before), max(0, post_peak - post_after)),
            )
            self.plan._measured_in_backward(lambda: self.plan._measured(outside))

        out.register_hook(gradient_arrives)

    def close(self) -> None:
        """Leaves the measuring mode, where it is the innermost one (leaving it
        from under another mode would pop that one instead); otherwise it stops
        tracking and is left at a later forward or by ``remove()``."""
        if not self.open:
            return
        if self.live is not None and not self.borrowed:
            self.live.tracking = False
            modes = _get_current_dispatch_mode_stack()
            if not modes or modes[-1] is not self.live:
                return  # not on top now: a later forward tries again
            self.live.__exit__(None, None, None)
        self.open = False
        if self.plan._measure is self:
            self.plan._measure = None


class _TracedMeasure:
    """:class:`_Measure` by the CPU allocator's events (:class:`AllocatorTrace`),
    for a step whose code runs compiled: a dispatch mode does not see what
    inductor's kernels allocate. The same figures, marked during the step and
    read after its backward: the profiler cannot be stopped inside a backward
    (the engine puts the thread's profiler state back when the backward ends),
    so the trace ends at the plan's next use (the next forward, ``explain()``,
    ``remove()``), which then solves again with them."""

    def __init__(self, plan: AppliedPlan, compiled: bool = False) -> None:
        self.plan = plan
        self.trace = AllocatorTrace()
        self.open = True
        self.numel = 1
        self.own = 0
        self.given = 0  # see _Outside.given
        self.inputs = plan._input_elements()  # see _Outside.inputs
        self.grad_bytes = 0
        self.m_start = self.m_end = self.m_grad = self.m_in = None
        self.p_input: int | None = None
        self.held: tuple[Any, ...] = ()
        self.freed: list[int] = []
        #: As _Measure.side, with each one's probe at the stack's start.
        self.side: list[tuple[weakref.ref[Any], int, int]] = []
        #: As _Measure.returned, with a probe each; then those freed when delta^L arrived.
        self.returned: list[tuple[weakref.ref[Any], int, int]] = []
        self.finishing = False
        self.end: int | None = None  # the mark at the end of the measured backward
        #: The thread and graph task of the measured backward, once it has begun.
        self.task: tuple[int, int] | None = None
        self.trace.stale = lambda: _backward_failed(self.task, self.end)
        #: Per bridge stage: marks at its start and end (and of its backward's
        #: start and end), and the last block's input, its bytes and probe.
        self.bridges: dict[int, dict[str, Any]] = {}
        try:
            self.trace.__enter__()
        except RuntimeError:
            # The user's own profiler runs through this compiled step: no
            # figures (the plan keeps the stack's budget alone) until a step
            # runs without it.
            warnings.warn(
                "remat.torch.apply: torch.profiler is running, so this compiled step's memory outside the stack "
                "cannot be measured (remat measures it with a profiler of its own); the plan counts the stack "
                "alone until a training step runs without the profiler",
                stacklevel=2,
            )
            self.open = False
            return
        # A compiled step's from their allocation, as its blocks' profiles and
        # its verification (_Verify) leave them out.
        self.trace.exclude_parameter_gradients(plan.model.parameters(), from_allocation=compiled)

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """Stops the trace (profiling inside runs profilers of its own)."""
        return self.trace.paused() if self.open else contextlib.nullcontext()

    def aside(self) -> contextlib.AbstractContextManager[None]:
        """Work the step's figures leave out: the trace paused (see paused())."""
        return self.paused()

    def stack_starts(self, x: torch.Tensor, side: Sequence[torch.Tensor] = ()) -> None:
        if not self.open:
            return
        self.side = [(ref, n, self.trace.probe(t)) for t, ref, n in _side_storages(x, side)]
        self.p_input = self.trace.probe(x)  # pre is what was made before, x not included
        self.m_start = self.p_input
        self.own = x.untyped_storage().nbytes()
        self.given = self.plan._given_bytes(x)  # where the trace did not make x
        self.numel = x.numel()
        if x.requires_grad:
            x.register_hook(self._input_gradient_arrives)

    def block_returned(self, y: object) -> None:
        """As :meth:`_Measure.block_returned`, each tensor probed."""
        if not self.open:
            return
        for t in _returned_besides(y):
            self.returned.append((weakref.ref(t.untyped_storage()), t.untyped_storage().nbytes(), self.trace.probe(t)))

    def bridge_starts(self, b: int, y: torch.Tensor, last_input: torch.Tensor) -> None:
        """As :meth:`_Measure.bridge_starts`, by marks read at :meth:`settle`."""
        if not self.open:
            return
        at: dict[str, Any] = {"start": self.trace.mark(), "y": y}
        if last_input is not y:
            at["input"] = (weakref.ref(last_input.untyped_storage()), last_input.untyped_storage().nbytes())
            at["probe"] = self.trace.probe(last_input)
        self.bridges[b] = at

    def bridge_ends(self, b: int, x: torch.Tensor) -> None:
        """As :meth:`_Measure.bridge_ends`, by marks read at :meth:`settle`."""
        at = self.bridges.get(b)
        if not self.open or at is None or "end" in at:
            return
        at["end"] = self.trace.mark()
        ref, size = at.pop("input", (None, 0))
        at["dropped"] = size if ref is not None and ref() is None else 0
        y = at.pop("y")
        if not (x.requires_grad and y.requires_grad):
            return

        def backward_starts(_g: torch.Tensor) -> None:
            if self.open and "b_start" not in at:
                at["b_start"] = self.trace.mark()

        def backward_ends(_g: torch.Tensor) -> None:
            if self.open and "b_start" in at and "b_end" not in at:
                at["b_end"] = self.trace.mark()

        x.register_hook(backward_starts)
        y.register_hook(backward_ends)

    def _settle_bridges(self) -> None:
        """Each bridge's figures from the trace (see :meth:`_Measure.bridge_ends`)."""
        t = self.trace
        for b, at in self.bridges.items():
            if "end" not in at:
                continue
            start, end = at["start"], at["end"]
            dropped = at["dropped"] if "probe" in at and t.found(at["probe"]) else 0
            alive_end = t.alive(end)
            figures = _BridgeFigures(
                max(0, alive_end + dropped - t.alive(start)),
                max(0, t.alive(start) + t.peak(start, end) - alive_end),
                self.numel,
            )
            if "b_end" in at:
                figures.backward = max(0, t.peak(at["b_start"], at["b_end"]))
            self.plan._bridge_measured(b, figures)

    def _input_gradient_arrives(self, g: torch.Tensor) -> None:
        if self.open and self.m_in is None:
            self.m_in = self.trace.mark()
            self._finish_later()

    def stack_ends(self, y: object, last_input: torch.Tensor) -> None:
        out = y if isinstance(y, torch.Tensor) else None
        if out is None and isinstance(y, (tuple, list)) and y and isinstance(y[0], torch.Tensor):
            out = y[0]
        if not self.open or out is None or not out.requires_grad:
            self.close()
            return
        self.m_end = self.trace.mark()
        self.grad_bytes = out.numel() * out.element_size()
        same = last_input.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
        # As _Measure: a^L and a^{L-1} are the chain's; their freeing before
        # delta^L arrives is not room the head makes.
        held = [(out, self.trace.probe(out))]
        if not same:
            held.append((last_input, self.trace.probe(last_input)))
        self.held = tuple((weakref.ref(t.untyped_storage()), t.untyped_storage().nbytes(), p) for t, p in held)
        probes = {id(ref): p for ref, _, p in self.returned}
        side = [(ref, n, p) for ref, n, p in self.side if ref() is not None]
        returned = [
            (ref, n, probes[id(ref)])
            for ref, n in _distinct_alive([(ref, n) for ref, n, _ in self.returned], out, last_input)
        ]

        def gradient_arrives(g: torch.Tensor) -> None:
            if not self.open or self.m_grad is not None:
                return
            self.m_grad = self.trace.mark(births=True)
            self.freed = [n if ref() is None else 0 for ref, n, _ in self.held]
            self.returned = [(ref, n, p) for ref, n, p in returned if ref() is None]
            self.side = [(ref, n, p) for ref, n, p in side if ref() is None]
            self._finish_later()

        out.register_hook(gradient_arrives)

    def _finish_later(self) -> None:
        if not self.finishing:
            self.finishing = True
            self.task = _backward_task()
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)

    def _finish(self) -> None:
        """The end of the measured step's backward (an engine callback)."""
        if self.open and self.end is None:
            self.end = self.trace.mark()
            self.trace.settle = self._settle_quietly

    def _settle_quietly(self) -> None:
        try:
            self.settle()
        except remat.InfeasibleError as e:
            self.plan._infeasible = e  # the next forward raises it

    @property
    def done(self) -> bool:
        """The measured step's backward has ended: :meth:`settle` may run."""
        return self.open and self.end is not None

    def settle(self) -> None:
        """Ends the trace, reads it and solves the plan again with the figures
        (outside any backward)."""
        if not self.done:
            return
        end = self.end
        assert end is not None
        self.close()
        t = self.trace
        if t.abandoned or self.m_start is None or self.m_end is None or self.m_grad is None:
            return  # abandoned: its backward raised (_backward_failed); a later step is measured
        made = t.found(self.m_start)
        own = self.own if made else 0
        pre = max(0, t.alive(self.m_start) - own)
        at_end = t.alive(self.m_end)
        freed = [n if t.found(p) else 0 for (_, _, p), n in zip(self.held, self.freed)]
        output_freed = freed[0]
        dropped = freed[1] if len(freed) > 1 else 0
        dropped += sum(n for _, n, p in self.returned if t.found(p))  # see _Measure.stack_ends
        dropped += sum(n for _, n, p in self.side if t.found(p))
        now = t.alive(self.m_grad)
        peak = at_end + t.peak(self.m_end, self.m_grad)
        raw = now + output_freed + dropped - at_end - self.grad_bytes
        # What the part after the stack made and left (the loss, the seed of
        # its gradient, a tied weight's gradient), read apart from what it
        # freed of what was there before: a net figure let a frees of 160 KiB
        # hide the loss's 8 bytes (timm's ConvNeXt 8 B above its budget).
        post_after = max(0, raw, t.made(self.m_end, self.m_grad) - self.grad_bytes)
        post_peak = max(post_after, peak + dropped - at_end)
        # Of what it freed, that of the part before the stack (see _Measure.stack_ends).
        released = min(pre, max(0, post_after - raw))
        # From the stack's input gradient to the end: the part before the
        # stack runs its own backward (the embeddings' gradients).
        pre_backward = t.alive(self.m_in) + t.peak(self.m_in, end) if self.m_in is not None else 0
        self._settle_bridges()
        self.plan._measured(
            _Outside(
                pre,
                post_peak,
                post_after,
                self.numel,
                max(0, pre_backward),
                fixed=self.plan._outside_gradients,
                released=released,
                given=0 if made else self.given,
                fixed_pre=self.plan._outside_per_channel,
                fixed_post=self.plan._head_gradients,
                inputs=self.inputs,
                input_dropped=min(freed[1] if len(freed) > 1 else 0, max(0, post_peak - post_after)),
            )
        )

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        self.trace.close()
        if self.plan._measure is self:
            self.plan._measure = None


def _backward_failed(task: tuple[int, int] | None, end: int | None) -> bool:
    """Whether a measured step's backward began (``task``: the thread it ran
    on and its graph task) and has not ended (``end``) though no backward
    runs on that thread now: it raised, and the final callback that ends
    the measurement never runs (a compiled block's second backward through
    donated buffers, a hook that raises, running out of memory). Asked on
    another thread, or inside any backward (a hook's ``autograd.grad``
    nested in the measured one), it cannot tell, and says no. O(1)."""
    return (
        end is None
        and task is not None
        and task[0] == threading.get_ident()
        and torch._C._current_graph_task_id() == -1
    )


def _backward_task() -> tuple[int, int]:
    """The thread and graph task of the backward running now (for :func:`_backward_failed`)."""
    return threading.get_ident(), torch._C._current_graph_task_id()


class _Verify:
    """The whole step's peak, the first time its blocks run inside
    torch.compile's graph, or a compiled plan's first step by the executor:
    from the model's forward to the end of the backward (the allocator's
    events on the CPU, its statistics on a GPU), read at the plan's next use
    (see :class:`_TracedMeasure`)."""

    def __init__(self, plan: AppliedPlan) -> None:
        self.plan = plan
        self.open = True
        self.end: int | None = None
        #: The thread and graph task of the step's backward, once it has begun.
        self.task: tuple[int, int] | None = None
        self.cuda: torch.device | None = None
        self.trace: AllocatorTrace | None = None
        params = list(plan.model.parameters())
        #: Parameters with no gradient at the step's start (a GPU's figure
        #: leaves out the gradients the step gives them; see ends()).
        self.fresh = [p for p in params if p.requires_grad and p.grad is None]
        if torch.cuda.is_available() and any(p.is_cuda for p in params):
            self.cuda = next(p.device for p in params if p.is_cuda)
            torch.cuda.synchronize(self.cuda)
            self.base = torch.cuda.memory_allocated(self.cuda)
            torch.cuda.reset_peak_memory_stats(self.cuda)
            return
        self.trace = AllocatorTrace()
        self.trace.stale = lambda: _backward_failed(self.task, self.end)
        try:
            self.trace.__enter__()
        except RuntimeError:
            self.open = False  # the user's profiler runs: measured at a later step
            self.trace = None
            return
        # From their allocation: a compiled backward holds the gradients it
        # returns until its graph ends, a whole model's graph all of them
        # (AllocatorTrace.exclude_parameter_gradients).
        self.trace.exclude_parameter_gradients(params, from_allocation=True)

    def forward_ends(self, output: Any) -> None:
        """Marks the end of the backward that starts from ``output``."""
        from torch.utils._pytree import tree_flatten

        def backward_starts(g: torch.Tensor) -> None:
            if self.task is None:
                self.task = _backward_task()

            def ends() -> None:
                if self.open and self.end is None:
                    if self.trace is not None:
                        self.end = self.trace.mark()
                        self.trace.settle = self.settle
                    else:
                        assert self.cuda is not None
                        # The allocator's statistics cannot leave a gradient
                        # out from its allocation as the CPU's trace does: the
                        # gradients the step leaves (each one of the
                        # parameters', outside the budget) are taken off the
                        # peak. The device then held at most the budget and
                        # those gradients beside the parameters, which is what
                        # the budget promises.
                        made = {
                            q.grad.untyped_storage().data_ptr(): q.grad.untyped_storage().nbytes()
                            for q in self.fresh
                            if q.grad is not None and q.grad.device == self.cuda
                        }
                        peak = int(torch.cuda.max_memory_allocated(self.cuda)) - self.base
                        self.end = max(0, peak - sum(made.values()))

            torch.autograd.Variable._execution_engine.queue_callback(ends)

        flat = output.to_tuple() if hasattr(output, "to_tuple") else output
        for t in tree_flatten(flat)[0]:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(backward_starts)

    @property
    def done(self) -> bool:
        return self.open and self.end is not None

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """Stops the trace (a profile of a new shape runs profilers of its own)."""
        return self.trace.paused() if self.open and self.trace is not None else contextlib.nullcontext()

    def aside(self) -> contextlib.AbstractContextManager[None]:
        return self.paused()

    def settle(self) -> None:
        if not self.done:
            return
        end = self.end
        assert end is not None
        self.close()
        if self.trace is not None and self.trace.abandoned:
            # Its backward raised (_backward_failed): not measured, as under a
            # profiler of the user's.
            self.plan._verified_step(None)
            return
        peak = end if self.trace is None else self.trace.peak(0, end)
        self.plan._verified_fresh = bool(self.fresh)
        self.plan._verified_step(peak)

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        if self.trace is not None:
            self.trace.close()
        if self.plan._measure is self:
            self.plan._measure = None


def _measure(plan: AppliedPlan, compiled: bool) -> _Measure | _TracedMeasure:
    """The measurement of a first step: on a GPU the allocator's statistics
    (:class:`_Measure`); on the CPU the allocator's events
    (:class:`_TracedMeasure`), which see what compiled code allocates.

    :class:`LiveBytes` (a dispatch mode) measures an eager step only while
    ``torch.profiler`` runs already (the trace needs one of its own): a
    dispatch mode cannot be left inside a backward (the engine puts it back when
    the backward ends), and one still on the stack when a compiled forward
    starts breaks Dynamo, so it is no longer the default."""
    if plan._on_gpu():
        return _Measure(plan)
    if not AllocatorTrace.available() and not compiled:
        return _Measure(plan)
    return _TracedMeasure(plan, compiled)


def _explain_compiled(plan: AppliedPlan, planned: _Planned) -> str:
    """explain()'s line on how the blocks run."""
    if not plan.compiled:
        return "blocks run eagerly"
    grads = (
        "; steps add into .grad: each block's backward counts the gradients its graph returns"
        if plan._accumulating
        else ""
    )
    return _explain_compiled_run(plan, planned) + grads


def _explain_compiled_run(plan: AppliedPlan, planned: _Planned) -> str:
    if planned.in_graph is not None and plan._in_graph:
        verified = plan._verified
        measured = (
            f"; its first step measured {_fmt(verified[0])} against the step's budget {_fmt(verified[1])}"
            if verified is not None
            else "; its first step's peak is measured before it stays"
        )
        if plan._in_graph_excess > 0:
            measured += (
                f" (solved {_fmt(plan._in_graph_excess)} below the budget: an earlier plan's graph held that much "
                "above its prediction)"
            )
        elif plan._in_graph_excess < 0:
            measured += (
                f" (solved {_fmt(-plan._in_graph_excess)} above the budget: an earlier plan's graph held that much "
                "below its prediction)"
            )
        return (
            "blocks run inside torch.compile's graph (every block recorded in the forward: no graph break, each "
            f"under non-reentrant checkpoint with its option's policy){measured}"
        )
    line = "blocks run compiled (torch.compile, one graph per kind of block and recording option)"
    if plan._in_graph_refused:
        line += f"; {plan._in_graph_refused}"
    if plan._verified is not None and not plan._verifying_executor:
        measured, budget = plan._verified
        line += f"; a step of the plan measured {_fmt(measured)} against the step's budget {_fmt(budget)}"
    if plan._executor_excess > 0:
        line += (
            f" (solved {_fmt(plan._executor_excess)} below the budget: earlier plans' compiled steps took that much "
            "above it)"
        )
    return line


def _ranges(blocks: list[int]) -> str:
    """``[1, 2, 3, 5]`` as ``"1-3, 5"``."""
    parts: list[str] = []
    for b in sorted(blocks):
        if parts and parts[-1].split("-")[-1] == str(b - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{b}"
        else:
            parts.append(str(b))
    return ", ".join(parts)


def _explain_forward(
    forward: list[tuple[str, int, int]],
    L: int,
    options: bool,
    stages: list[dict[str, Any]] | None = None,
    bridges: frozenset[int] = frozenset(),
) -> str:
    """explain()'s words for the forward phase: each block is recorded whole,
    under an option (rerun at the start of its backward), offloaded (its saved
    tensors in host memory), or not at all (run again before its backward),
    and counted once."""

    def offloaded(l: int, o: int) -> bool:
        found = (stages[l - 1].get("options") or []) if stages is not None else []
        return 0 < o <= len(found) and found[o - 1].get("name") == "offload"

    forward = [(k, l, o) for k, l, o in forward if l not in bridges]
    whole = [l for k, l, o in forward if Op(k) is Op.F_ALL and l <= L and not o]
    under = [l for k, l, o in forward if Op(k) is Op.F_ALL and l <= L and o and not offloaded(l, o)]
    moved = [l for k, l, o in forward if Op(k) is Op.F_ALL and l <= L and o and offloaded(l, o)]
    rerun = [l for k, l, _ in forward if Op(k) is not Op.F_ALL and l <= L]

    def part(blocks: list[int], what: str, then: str = "") -> str:
        return f"{len(blocks)} {what}" + (f" ({_ranges(blocks)}{then})" if blocks else "")

    parts = [part(whole, "recorded whole")]
    if options:
        parts.append(part(under, "recorded under an option", "; each runs again at its backward"))
    if moved:
        parts.append(part(moved, "offloaded", "; what each saves kept in host memory until its backward"))
    parts.append(part(rerun, "not recorded", "; each runs again before its backward"))
    numbered = " (numbered as the chain's stages)" if bridges else ""
    return f"of {L - len(bridges)} blocks{numbered}, " + ", ".join(parts)


def _explain_dropped(dropped: list[tuple[int, str, str]]) -> list[str]:
    """explain()'s lines on options blocks could not run: per policy and
    error, the blocks (1-based) it was dropped for."""
    by: dict[tuple[str, str], list[int]] = {}
    for i, name, why in dropped:
        by.setdefault((name, why), []).append(i + 1)
    return [
        f"option {name} dropped for blocks {_ranges(sorted(blocks))}: they raised {why!r} under it"
        for (name, why), blocks in by.items()
    ]


def _explain_options(
    stages: list[dict[str, Any]], ops: list[tuple[str, int, int]], bridges: frozenset[int] = frozenset()
) -> list[str]:
    """explain()'s lines on recording options: how each block is recorded, and
    the options of the blocks as measured (the stages between stacks left out)."""
    L = len(stages)
    chosen: dict[str, set[int]] = {}
    for k, l, o in ops:
        if k == Op.F_ALL.value and l <= L and l not in bridges:
            name = "all" if not o else str(stages[l - 1]["options"][o - 1].get("name") or f"option {o}")
            chosen.setdefault(name, set()).add(l)
    lines = ["recorded with: " + "; ".join(f"{name} (blocks {_ranges(sorted(ls))})" for name, ls in chosen.items())]
    seen: set[str] = set()
    for l, s in enumerate(stages, 1):
        described = ", ".join(
            f"{o.get('name') or f'option {i}'} keeps {_fmt(o['saved_size'])} for {o.get('recompute_time', 0.0):+.3f} ms"
            for i, o in enumerate(s.get("options") or [], 1)
        )
        if described and described not in seen:
            seen.add(described)
            lines.append(f"options of block {l} (all keeps {_fmt(s['saved_size'])}): {described}")
    return lines


def _distinct_alive(
    returned: list[tuple[weakref.ref[Any], int]], *chain: torch.Tensor
) -> list[tuple[weakref.ref[Any], int]]:
    """Of ``returned``, the storages still alive, each once, none of
    ``chain``'s (a^L, a^{L-1}: counted apart). O(len(returned))."""
    seen = {t.untyped_storage().data_ptr() for t in chain}
    found: list[tuple[weakref.ref[Any], int]] = []
    for ref, n in returned:
        st = ref()
        if st is None or st.data_ptr() in seen:
            continue
        seen.add(st.data_ptr())
        found.append((ref, n))
    return found


def _ptr(ref: weakref.ref[Any]) -> int | None:
    """The data pointer of a weakly held storage; None once freed."""
    st = ref()
    return None if st is None else int(st.data_ptr())


def _side_storages(x: torch.Tensor, side: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, weakref.ref[Any], int]]:
    """The distinct storages of ``side`` other than ``x``'s: a tensor of each,
    the storage weakly, and its bytes. O(len(side))."""
    seen = {x.untyped_storage().data_ptr()}
    found: list[tuple[torch.Tensor, weakref.ref[Any], int]] = []
    for t in side:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            continue  # a tensor subclass without storage of its own
        if st.data_ptr() in seen or st.nbytes() == 0:
            continue
        seen.add(st.data_ptr())
        found.append((t, weakref.ref(st), st.nbytes()))
    return found


def _returned_besides(y: object) -> list[torch.Tensor]:
    """The tensors a block returned besides the one the next block takes (a
    Hugging Face layer's attention weights), one level deep. O(len(y))."""
    if isinstance(y, (tuple, list)):
        values = list(y[1:])
    elif isinstance(y, collections.abc.Mapping):
        values = list(y.values())[1:]
    else:
        return []
    return [t for t in values if isinstance(t, torch.Tensor)]


def _tied_bytes(model: nn.Module) -> int:
    """Bytes of the trainable parameters registered in more than one place."""
    seen: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            seen[id(p)] = seen.get(id(p), 0) + 1
    return sum(p.numel() * p.element_size() for p in model.parameters() if seen.get(id(p), 0) > 1)


def _is_cache(v: object) -> bool:
    """A key/value cache (Hugging Face's ``Cache`` classes): state a block appends
    to on every call, which recomputation must not see twice."""
    return callable(getattr(v, "update", None)) and callable(getattr(v, "get_seq_length", None))


def _without_cache(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call with a key/value cache replaced by None, as Hugging Face's own
    gradient checkpointing does in training (a cache is for generation, which
    runs without gradients and so without remat)."""
    if any(_is_cache(a) for a in args):
        args = tuple(None if _is_cache(a) else a for a in args)
    if any(_is_cache(v) for v in kwargs.values()):
        kwargs = {k: None if _is_cache(v) else v for k, v in kwargs.items()}
    return args, kwargs


def _is_fsdp(module: nn.Module) -> bool:
    """Whether ``module`` is FSDP2's (``fully_shard``). O(1)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a build without torch.distributed
        return False
    return isinstance(module, FSDPModule)


def _fsdp_modules(model: nn.Module) -> list[nn.Module]:
    """``model``'s FSDP2 modules. O(modules)."""
    return [m for m in model.modules() if _is_fsdp(m)]


def _fsdp_groups(module: nn.Module) -> tuple[Any, list[Any]] | None:
    """An FSDP2 module's state and parameter groups (FSDP2's private state:
    a list in recent releases, one group in older ones); None where neither
    is there. O(1)."""
    try:
        state = module._get_fsdp_state()  # type: ignore[operator]
    except AttributeError:
        return None
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        one = getattr(state, "_fsdp_param_group", None)
        if one is None and not hasattr(state, "_fsdp_param_group"):
            return None
        groups = [] if one is None else [one]
    return state, list(groups)


def _fsdp_state_readable(model: nn.Module) -> bool:
    """Whether :func:`_fsdp_state_kept` can put back the state of every FSDP2
    module of ``model`` (no FSDP2 at all: trivially). O(modules)."""
    return all(_fsdp_groups(m) is not None for m in _fsdp_modules(model))


@contextlib.contextmanager
def _fsdp_state_kept(model: nn.Module) -> Iterator[None]:
    """FSDP2's state of ``model``'s modules, put back after a forward run
    inside the step's forward (:meth:`AppliedPlan._capture`): each module's
    forward there reshards its parameters after it, and the modules whose
    forward is running (the first block, a stack's wrapper) would go on
    sharded; the last block's is gathered and not resharded (the run stops
    in its call); it also records each forward for the backward's
    prefetching and marks the state idle. What was gathered is gathered
    again, what was not is sharded again, the records and the training
    states put back. Reads FSDP2's private state (the caller checks
    :func:`_fsdp_state_readable` first). O(FSDP modules)."""
    modules = _fsdp_modules(model)
    kept: list[tuple[Any, bool, int, Any]] = []  # (group, gathered, records, group's training state)
    states: list[tuple[Any, Any]] = []  # (module's state, its training state)
    orders: dict[int, tuple[list[Any], int]] = {}
    for m in modules:
        found = _fsdp_groups(m)
        if found is None:
            continue
        state, groups = found
        states.append((state, state._training_state))
        for g in groups:
            kept.append((g, bool(g.is_unsharded), len(g._post_forward_indices), g._training_state))
            order = g.comm_ctx.post_forward_order
            orders.setdefault(id(order), (order, len(order)))
    try:
        yield
    finally:
        for g, gathered, records, training in kept:
            del g._post_forward_indices[records:]
            g._training_state = training
            if gathered and not g.is_unsharded:
                g.unshard()
                g.wait_for_unshard()
            elif not gathered and g.is_unsharded:
                g.reshard()
        for state, training in states:
            state._training_state = training
        for order, n in orders.values():
            del order[n:]


@contextlib.contextmanager
def _gathered(module: nn.Module) -> Iterator[None]:
    """FSDP2's parameters of ``module`` gathered while the profile runs it
    (without its module hooks, which gather them in a step) and sharded again
    after, where they were sharded (the block whose forward is running is
    gathered already); nothing where FSDP2's state cannot be read. O(1) but
    the gathering."""
    found = _fsdp_groups(module) if _is_fsdp(module) else None
    if found is None or all(g.is_unsharded for g in found[1]):
        yield
        return
    module.unshard()  # type: ignore[operator]
    try:
        yield
    finally:
        module.reshard()  # type: ignore[operator]


def _bridge_stage(name: str, output: int, held: int = 0, transient: int = 0, backward: int = 0) -> dict[str, Any]:
    """The chain stage of the model's code between two stacks: recorded once,
    never run again (F_ck and F_none take a transient no budget holds), its
    output the next stack's input, its abar what it holds (at least that
    output). Its time is the same in every schedule, so 0."""
    return {
        "name": name,
        "forward_time": 0.0,
        "backward_time": 0.0,
        "output_size": output,
        "saved_size": max(output, held),
        "gradient_size": output,
        "forward_overhead": _NO_PLAIN_FORWARD,
        "recording_overhead": transient,
        "backward_overhead": backward,
    }


class _Captured(Exception):
    """Ends :meth:`AppliedPlan._capture`'s forward at the last block's call."""


def _drop(_t: torch.Tensor) -> None:
    """A pack hook that keeps nothing (a forward run only to see its calls)."""
    return None


def _never(_packed: None) -> torch.Tensor:
    raise RuntimeError("remat: a graph recorded only to see the blocks' calls was differentiated")


def _numpy_random_state() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy.random.get_state()


def _set_numpy_random_state(state: Any) -> None:
    if state is not None:
        import numpy

        numpy.random.set_state(state)


def _halved_inputs(
    inputs: tuple[tuple[Any, ...], dict[str, Any]], length: int
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The model's inputs with every tensor whose second dimension is
    ``length`` (token ids, their mask, labels, positions) cut to its first
    ``length // 2``; where none is, every (batch, samples) tensor longer than
    ``length`` (a raw signal the model turns into fewer frames: Wav2Vec2's
    audio) cut to half its samples; None where neither is. O(inputs)."""
    args, kwargs = inputs
    tensors = [v for v in [*args, *kwargs.values()] if isinstance(v, torch.Tensor)]
    if any(t.dim() >= 2 and t.shape[1] == length for t in tensors):

        def cut(t: torch.Tensor) -> bool:
            return t.dim() >= 2 and t.shape[1] == length
    elif any(t.dim() == 2 and t.shape[1] > length for t in tensors):

        def cut(t: torch.Tensor) -> bool:
            return t.dim() == 2 and t.shape[1] > length
    else:
        return None

    def half(v: Any) -> Any:
        return v[:, : v.shape[1] // 2] if isinstance(v, torch.Tensor) and cut(v) else v

    return (tuple(half(a) for a in args), {k: half(v) for k, v in kwargs.items()})


def _at_length(chain: remat.Chain, shorter: dict[str, Any], r: float, weights: Sequence[int] = ()) -> remat.Chain:
    """``chain`` (profiled at sequence length T) read at length ``r * T``
    (``0 < r < 1``), the batch as it was. Each stage's size fields are read
    off the curve ``c + a t + b t^2`` through its figures at T and in
    ``shorter`` (the same stacks at length ``q * T``, half of it), so that
    attention's T x T scores shrink as the square, with ``c = 0``: where the
    true curve has a constant (a weight's gradient), the fitted one is above
    it between the two lengths (by at most an eighth of the constant at
    ``q = 1/2``) and below it past them, so for ``r < q`` each size is the
    larger of the curve's and of the figure at T scaled as without a fit
    (linearly, the gradient of the stage's largest weight, ``weights``, kept
    whole in the backward's transient). Taking that gradient as ``c`` read
    Phi-3's backward 8 KiB low at 48 of 64 tokens: its transient does not
    hold it. Each option is fitted as its stage,
    by name; an option ``shorter`` lacks, the input, the times and any stage
    the two profiles do not cut alike (its output) scale by ``r``.
    O(stages)."""
    d = chain.to_dict()
    short = shorter.get("stages") or []
    q = 0.0
    if short and d["stages"]:
        q = int(short[0]["output_size"]) / max(1, int(d["stages"][0]["output_size"]))
    for i, s in enumerate(d["stages"]):
        h = short[i] if i < len(short) else None
        matched = (
            h is not None
            and 0 < q < 1
            and abs(int(h["output_size"]) - q * int(s["output_size"])) <= 0.01 * int(s["output_size"]) + 8
        )
        w = weights[i] if i < len(weights) else 0
        half_options = {o.get("name"): o for o in (h or {}).get("options") or []} if matched else {}
        pairs = [(s, h if matched else None), *((o, half_options.get(o.get("name"))) for o in s.get("options") or [])]
        for part, half in pairs:
            for k in SIZE_FIELDS:
                if k in part:
                    v1 = int(part[k])
                    linear = _scaled_keeping(v1, w, r) if k == "backward_overhead" else v1 * r
                    part[k] = (
                        math.ceil(linear) if half is None or k not in half else _fitted(v1, int(half[k]), q, r, linear)
                    )
            if "backward_frees" in part:
                # Taken off: read as low as attention's T x T scores would
                # make it (as the square of the length).
                part["backward_frees"] = int(int(part["backward_frees"]) * r * r)
                _frees_within(part)
            for k in ("forward_time", "backward_time", "recompute_time"):
                if k in part:
                    part[k] = part[k] * r
    d["input_size"] = math.ceil(d["input_size"] * r)
    return remat.Chain.from_dict(d)


def _with_sizes(chain: remat.Chain, sizes: dict[str, Any], factor: float) -> remat.Chain:
    """``chain`` with the size fields of ``sizes`` (the same stacks profiled
    at another shape, :meth:`AppliedPlan._sizes_on`), each option's by name,
    and its times scaled by ``factor``. A stage or option ``sizes`` lacks (an
    option that failed there) keeps its sizes, or scales them by ``factor``
    where that is above 1 (its frees scaled down). O(stages)."""
    d = chain.to_dict()
    found = sizes.get("stages") or []
    fields = (*SIZE_FIELDS, "backward_frees")
    for i, s in enumerate(d["stages"]):
        h = found[i] if i < len(found) else None
        by_name = {o.get("name"): o for o in (h or {}).get("options") or []}
        for part, new in [(s, h), *((o, by_name.get(o.get("name"))) for o in s.get("options") or [])]:
            for k in fields:
                if new is not None:
                    if k in new:
                        part[k] = int(new[k])
                    else:
                        part.pop(k, None)
                elif k in part:
                    # Taken off (the frees) rounded down, the rest up.
                    v = int(part[k])
                    part[k] = int(v * factor) if k == "backward_frees" else math.ceil(max(v * factor, v))
            _frees_within(part)
            for k in ("forward_time", "backward_time", "recompute_time"):
                if k in part:
                    part[k] = part[k] * factor
    d["input_size"] = int(sizes.get("input_size", math.ceil(d["input_size"] * factor)))
    return remat.Chain.from_dict(d)


def _fitted(v1: int, v2: int, q: float, r: float, linear: float) -> int:
    """The curve ``a t + b t^2`` through ``v1`` at length 1 and ``v2`` at
    ``q``, read at ``r``; below ``q`` at least ``linear``. O(1)."""
    b = (v2 - q * v1) / (q * q - q)
    fit = (v1 - b) * r + b * r * r
    return max(0, math.ceil(fit if r >= q else max(fit, linear)))


def _part_scaled(v: int, fixed: int, factor: float) -> int:
    """``v`` bytes scaled by ``factor``, rounded up, where up to ``fixed`` of
    them may not scale: the larger of the two readings. O(1)."""
    k = min(v, fixed)
    return math.ceil(max(v * factor, k + (v - k) * factor))


def _scaled_keeping(v: int, fixed: int, factor: float) -> float:
    """``v`` bytes scaled by ``factor`` where up to ``fixed`` of them may not
    scale (a weight's gradient): the largest of the readings, so that an
    input smaller or larger than the profiled one is not predicted low. A
    backward's transient is measured less the room its stage's output leaves
    (freed before it, counted by the chain), which scales: ``v`` may be
    ``fixed`` less that room, and at a smaller input the room shrinks while
    the weight's gradient does not (``fixed + (v - fixed) * factor``)."""
    k = min(v, fixed)
    return max(v * factor, k + (v - k) * factor, fixed + (v - fixed) * factor)


def _with_held_output_gradient(chain: remat.Chain) -> remat.Chain:
    """``chain`` whose stages' backwards (each option's too) take one gradient
    more each. The profile measures a backward whose incoming gradient
    autograd alone holds, so that it sums a residual's gradients into it in
    place, as a step's backward does; where the caller holds the stack's
    output gradient (a pipeline rank gets it from the next one), autograd
    sums into a new buffer there. Measured under torch.distributed.pipelining
    (test_torch_pipeline.py): every recomputed block's backward took one
    gradient more than the profile's, not only the last block's; the cause
    is not pinned down, so each stage is counted so. O(stages)."""
    d = chain.to_dict()
    for s in d["stages"]:
        grad = int(s.get("gradient_size", s["output_size"]))
        for part in [s, *(s.get("options") or [])]:
            part["backward_overhead"] = int(part.get("backward_overhead", 0) or 0) + grad
    return remat.Chain.from_dict(d)


def _with_more_transient(
    chain: remat.Chain, extra: int, *, forwards: bool = False, backwards: bool = True, last: bool = False
) -> remat.Chain:
    """``chain`` with ``extra`` bytes more in the backward transient of every
    stage but the last, each option's too, and with ``forwards`` in every
    forward's and recording's transient as well. O(stages). For what autograd
    holds from the last stage's backward to the first's, beside the schedule
    (the gradient autograd sums for the parameters of a layer called several
    times, ALBERT's, with ``forwards``: alive beside each recomputation and
    each backward, an over-count in the forward phase), and with ``last``
    for what is before the stack and gone by its backward."""
    if extra <= 0:
        return chain
    d = chain.to_dict()
    for s in d["stages"] if last else d["stages"][:-1]:
        if forwards:
            s["recording_overhead"] = int(s.get("recording_overhead", s.get("forward_overhead", 0)) or 0) + extra
        for part in [s, *(s.get("options") or [])]:
            if backwards:
                part["backward_overhead"] = int(part.get("backward_overhead", 0) or 0) + extra
            if forwards:
                part["forward_overhead"] = int(part.get("forward_overhead", 0) or 0) + extra
    return remat.Chain.from_dict(d)


class _Kept:
    """Counts the bytes of the side inputs a stack's later blocks get that its
    first block did not (see ``_Entry.side_kept``), call by call: each storage
    once, parameters aside. O(the call's arguments) a call."""

    def __init__(self, bridges: frozenset[int], older: frozenset[tuple[int, Any]] = frozenset()) -> None:
        self.bridges = bridges
        #: (stage, where in its call) of side inputs that were alive when the
        #: first block was called (:func:`_alive_at_start`): not made inside
        #: a stack, so not counted here. Made before the stack in the step,
        #: they are what it holds before the stack (the measured outside);
        #: older, they are the caller's. Gemma 2's blocks take its sliding
        #: window's mask or the full one by turns: the second, made before
        #: the stack and read first by block 2, was counted twice (its
        #: census prediction 1.4% high, 2.3% at 48 tokens).
        self.older = older
        self.total = 0
        self._first: set[int] = set()  # storages of the current stack's first call's side inputs
        self._seen: set[int] = set()
        #: What the blocks so far returned, by storage (with the stage): a
        #: later stack's first block that reads one of these reads what the
        #: model's code holds from inside an earlier stack (a U-Net's skip
        #: connections), not what the code between the stacks made (T5's
        #: encoder output, which the bridge stage holds) nor the earlier
        #: stack's output (BART's encoder output: the bridge's input, which
        #: the chain holds; counted, BART's prediction was 2.7% high).
        self._returned: dict[int, tuple[int, weakref.ref[torch.Tensor]]] = {}
        #: The counted storages: their bytes and the stages that read them.
        self._counted: dict[int, tuple[int, set[int]]] = {}

    def by_readers(self, skip: Set[int] = frozenset()) -> list[tuple[frozenset[int], int]]:
        """The counted bytes by the stages that read them (each storage once),
        the storages in ``skip`` (those a reader's recording keeps, which
        autograd holds whatever the plan) left out. The executor keeps a
        block's call, and so these, only where the plan runs the block again:
        a plan that runs none of a storage's readers again, and records each
        whole, does not keep the rest."""
        return [(frozenset(readers), n) for key, (n, readers) in self._counted.items() if key not in skip]

    def returned(self, l: int, y: Any) -> None:
        """Stage ``l``'s output (tensors nested one level in tuples and lists).
        Noted only where there are several stacks: only a later stack's first
        block asks (every block of every step calls this)."""
        if not self.bridges:
            return
        for t in _flat_tensors(y):
            key = t.untyped_storage().data_ptr()
            if key:
                self._returned[key] = (l, weakref.ref(t))

    def _inside_a_stack(self, key: int, l: int) -> bool:
        """Whether a block before stage ``l``'s bridge, not the one just
        before it, returned storage ``key`` (still alive)."""
        found = self._returned.get(key)
        return found is not None and found[0] < l - 2 and found[1]() is not None

    def add(self, l: int, call: Call) -> None:
        """Stage ``l``'s call (stages in order; a stack's first resets ``first``)."""
        items = call.side_items()
        tensors = [t for _, t in items]
        if l == 1:
            # The chain's input a^0, held throughout every schedule, is not
            # counted again where a later block reads it (a U-Net's first skip
            # connection is the stack's input: 256 KiB of the census U-Net's
            # 512 KiB were counted twice, its prediction 4.3% high).
            self._seen = {call.carried.untyped_storage().data_ptr()} - {0}
            self._first = {t.untyped_storage().data_ptr() for t in tensors}
            return
        if l - 1 in self.bridges:
            # The executor keeps this call too, with what it reads of earlier stacks.
            first = (t.untyped_storage().data_ptr() for t in tensors)
            self._first = {k for k in first if not self._inside_a_stack(k, l)}
        for where, t in items:
            key = t.untyped_storage().data_ptr()
            if key in self._counted:
                self._counted[key][1].add(l)  # another reader that may keep it
            if isinstance(t, nn.Parameter) or key in self._first or key in self._seen or key == 0:
                continue
            if (l, where) in self.older:
                continue
            self._seen.add(key)
            n = t.untyped_storage().nbytes()
            self._counted[key] = (n, {l})
            self.total += n


def _alive_tensors() -> dict[int, torch.Tensor]:
    """The tensors alive now that Python sees, parameters aside, by their
    storage's address. The caller holds them until it is done (while
    capturing the blocks' calls, which saves nothing), so that no storage
    made meanwhile can take one's address. (Weak references instead, kept
    as long, made the compiled blocks' semantics tests name budgets too
    small for their next steps, on every run; not found why.)
    O(the objects Python's collector tracks): about 0.1 s with transformers
    loaded, run once per capture."""
    import gc

    found: dict[int, torch.Tensor] = {}
    for o in gc.get_objects():
        # By the type alone: isinstance() reads ``__class__``, which a
        # deprecated alias's proxy answers with a warning.
        kind = type(o)
        if issubclass(kind, torch.Tensor) and not issubclass(kind, nn.Parameter):
            try:
                key = o.untyped_storage().data_ptr()
            except (RuntimeError, NotImplementedError):  # a tensor without storage (a fake, a functional one)
                continue
            if key:
                found.setdefault(key, o)
    return found


def _alive_at_start(alive: dict[int, torch.Tensor], l: int, call: Call) -> set[tuple[int, Any]]:
    """Where in stage ``l``'s call a side input is on the storage of one of
    ``alive``. O(the call's arguments)."""
    return {(l, where) for where, t in call.side_items() if t.untyped_storage().data_ptr() in alive}


def _carried_or_none(y: Any) -> torch.Tensor | None:
    """A block's carried output, or None where it has none (the call raises
    that elsewhere, naming the block)."""
    try:
        return carried_output(y, lambda: "")
    except TypeError:
        return None


def _flat_tensors(y: Any) -> list[torch.Tensor]:
    """The tensors of a block's output: itself, or nested one level in tuples
    and lists (and a ModelOutput's values). O(the output's items)."""
    if isinstance(y, torch.Tensor):
        return [y]
    return tensors_in(y.values() if isinstance(y, dict) else y if isinstance(y, (tuple, list)) else ())


class _SideGradients:
    """The gradients of the blocks' side inputs that require one (parameters
    aside; each storage once) over one pass, and where in the backward each
    is alive: an encoder-decoder's encoder output, which every decoder block
    reads and whose gradient autograd accumulates through the decoder's
    backward; a U-Net's skip connections, each read by one up block and made
    by a down block. O(the call's arguments and the block's outputs) a call.

    A side input's gradient is made by the backward of the last stage that
    reads it, r, and used up by the backward of the stage that made it: held
    from B^r to there, which the chain counts as part of the running
    gradients delta^k in between (:meth:`figures`)."""

    def __init__(self) -> None:
        self.total = 0
        self._bytes: dict[int, int] = {}  # storage -> bytes
        self._readers: dict[int, list[int]] = {}  # storage -> the stages that read it
        #: storage -> the first k whose delta^k holds its gradient: a block's
        #: own tensor (an intermediate it returned) is used up by its
        #: backward (k = the block); its output a^l and the stack's input by
        #: the backward that makes delta^l (k = l + 1). Unknown (made outside
        #: every block: before the stack, between two): held down to delta^0.
        #: With the tensor, weakly: an address freed and taken again is not it.
        self._from: dict[int, tuple[int, weakref.ref[torch.Tensor]]] = {}
        self._first: dict[int, int] = {}  # storage -> that k, read when a block first reads it

    def stack_input(self, x: torch.Tensor) -> None:
        """The stack's input a^0: a block that reads it (a U-Net's first skip
        connection) adds to delta^0, made by B^1."""
        key = x.untyped_storage().data_ptr()
        if key:
            self._from[key] = (1, weakref.ref(x))

    def returned(self, l: int, y: Any, carried: torch.Tensor | None) -> None:
        """Stage ``l``'s output: the tensors a later block may read."""
        carried_key = carried.untyped_storage().data_ptr() if carried is not None else 0
        for t in _flat_tensors(y):
            key = t.untyped_storage().data_ptr()
            found = self._from.get(key)
            if key and (found is None or found[1]() is None):
                self._from[key] = (l + 1 if key == carried_key else l, weakref.ref(t))

    def add(self, call: Call, l: int) -> None:
        """Stage ``l``'s call. Nested side inputs count too (a U-Net's up
        block reads its skip connections as a tuple: their 705 KiB of
        gradients were not counted, and the census' U-Net's step peaked in a
        backward 870 KiB above the chain's figure for it)."""
        for v in call.side_tensors():
            if isinstance(v, nn.Parameter) or not v.requires_grad:
                continue
            key = v.untyped_storage().data_ptr()
            if key not in self._bytes:
                self._bytes[key] = v.numel() * v.element_size()
                self._readers[key] = []
                self.total += self._bytes[key]
                made = self._from.get(key)
                self._first[key] = made[0] if made is not None and made[1]() is not None else 0
            if l not in self._readers[key]:
                self._readers[key].append(l)

    def last_reads(self) -> dict[int, set[int]]:
        """Stage l -> the storages of the side inputs whose last reader it is:
        its backward makes their gradient, which the chain holds in
        delta^{l-1} for the whole of B^l, so its profile leaves them out of
        that backward's transient (profile_calls' ``last``). O(side inputs)."""
        found: dict[int, set[int]] = {}
        for key, readers in self._readers.items():
            found.setdefault(max(readers), set()).add(key)
        return found

    def figures(self, stages: int, held: Sequence[dict[int, tuple[int, int, int]]] = ()) -> _SideFigures:
        """Per k in 0..``stages``: the bytes delta^k holds beside itself
        (``held``), those counted in both delta^k and delta^{k-1} while B^k
        runs (``twice``), and the sum B^k makes out of place where a block
        after it read the same input (``summed``). B^r, which makes a
        gradient, has it left out of the transient its profile measured
        (:meth:`last_reads`). ``held[r-1]``: what each gradient B^r makes
        keeps allocated while delta^{r-1} lives and after, by storage
        (profile's ``Profiled.side_held``), where that is more than its own
        bytes: a view of a concatenation's gradient keeps the whole buffer
        until the maker's backward (a test's U-Net's skip connections: the
        step peaked 31 KiB above a later block's figure). O(side inputs x
        stages)."""
        kept = [0] * (stages + 1)
        twice = [0] * (stages + 1)
        summed = [0] * (stages + 1)
        beyond = [0] * (stages + 1)
        for key, own in self._bytes.items():
            readers = self._readers[key]
            last = max(readers)
            first = min(self._first[key], min(readers))
            during, after, past = held[last - 1].get(key, (own, own, 0)) if last - 1 < len(held) else (own, own, 0)
            for k in range(first, last):
                b = max(own, during if k == last - 1 else after)
                kept[k] += b
                if k > first:
                    twice[k] += b
            if first < last:
                beyond[last] += past
            for l in readers:
                if l != last:
                    summed[l] += own
        return _SideFigures(kept, twice, summed, beyond)


@dataclass
class _SideFigures:
    """What :meth:`_SideGradients.figures` found, per k in 0..L."""

    held: list[int]
    twice: list[int]
    summed: list[int]
    #: Per stage r: what delta^{r-1} holds of the gradients B^r makes beyond
    #: their elements (the rest of a concatenation's buffer), which B^r's
    #: profile measured in its peak and took off only by elements.
    beyond: list[int]

    def merged(self, other: _SideFigures) -> _SideFigures:
        """The larger figure of the two at each k."""
        return _SideFigures(
            [max(a, b) for a, b in zip(self.held, other.held)],
            [max(a, b) for a, b in zip(self.twice, other.twice)],
            [max(a, b) for a, b in zip(self.summed, other.summed)],
            [max(a, b) for a, b in zip(self.beyond, other.beyond)],
        )

    def scaled(self, factor: float) -> _SideFigures:
        return _SideFigures(
            [math.ceil(v * factor) for v in self.held],
            [int(v * factor) for v in self.twice],  # taken off: rounded down
            [math.ceil(v * factor) for v in self.summed],
            [int(v * factor) for v in self.beyond],
        )


def _side_of(call: Call, stages: int) -> _SideGradients:
    """:class:`_SideGradients` where every block is given the first block's
    side inputs (the model's forward could not run again), made outside the
    stack."""
    found = _SideGradients()
    for l in range(1, stages + 1):
        found.add(call, l)
    return found


def _with_weight_gradients(chain: remat.Chain, per_stage: Sequence[int]) -> remat.Chain:
    """``chain`` with ``per_stage[l-1]`` bytes more in stage l's backward
    transient, each option's too. O(stages)."""
    d = chain.to_dict()
    for st, extra in zip(d["stages"], per_stage):
        for part in [st, *(st.get("options") or [])]:
            part["backward_overhead"] = int(part.get("backward_overhead", 0) or 0) + extra
    return remat.Chain.from_dict(d)


def _with_side_gradients(chain: remat.Chain, side: _SideFigures) -> remat.Chain:
    """``chain`` with the side inputs' gradients in the running gradients that
    hold them (``gradient_size`` of stage k for delta^k, the chain's
    ``input_gradient_size`` for delta^0): from the backward of the last block
    that reads each, so that the forward phase does not count them and a
    recomputation in the backward phase does. While B^k runs, one held in
    both delta^k and delta^{k-1} is alive once: taken off B^k's transient as
    far as it goes (never below 0, an over-count then); the out-of-place sums
    added to it; and the rest of the buffers of the gradients B^k makes
    (``beyond``), in its measured peak already, taken off its figure, from
    its transient and then as what it frees (as far as its saved bytes go).
    O(stages)."""
    if not any(side.held) and not any(side.summed):
        return chain
    d = chain.to_dict()
    if side.held[0]:
        d["input_gradient_size"] = int(d.get("input_gradient_size", d["input_size"])) + side.held[0]
    for k, st in enumerate(d["stages"], 1):
        if k >= len(side.held):
            break
        if side.held[k]:
            st["gradient_size"] = int(st.get("gradient_size", st["output_size"])) + side.held[k]
        for part in [st, *(st.get("options") or [])]:
            # What is counted twice comes off the transient only: taken
            # further, it cancelled the out-of-place sums, and a step whose
            # blocks read two chunks of one tensor measured 15,872 B above
            # its prediction (the twice-read test).
            o = max(0, int(part.get("backward_overhead", 0) or 0) - side.twice[k]) + side.summed[k]
            part["backward_overhead"] = max(0, o - side.beyond[k])
            frees = int(part.get("backward_frees", 0) or 0) + max(0, side.beyond[k] - o)
            if frees:
                part["backward_frees"] = frees
                _frees_within(part)
    return remat.Chain.from_dict(d)


def _sequence_first(modules: Sequence[nn.Module]) -> str | None:
    """The name of the first module in ``modules`` that takes its input
    sequence first (``nn.MultiheadAttention`` or an RNN with
    ``batch_first=False``, as ``nn.TransformerEncoderLayer`` builds by
    default), None where none does. Sizes scale with the batch only, and
    dimension 0 of such blocks' input is the sequence: a longer one taken for
    a larger batch was scaled linearly, its attention scores growing with the
    square (round 5: 1.17x to 2.46x the budget). O(submodules)."""
    for i, m in enumerate(modules):
        for name, sub in m.named_modules():
            if isinstance(sub, (nn.MultiheadAttention, nn.RNNBase)) and not sub.batch_first:
                return f"{type(m).__name__} {i + 1}'s {name} ({type(sub).__name__}, batch_first=False)"
    return None


def _grown(shape: Sequence[int], profiled: Sequence[int]) -> bool:
    """Whether ``shape`` is larger than ``profiled`` in a dimension past the
    first (the batch's: along it a step's bytes and times are linear)."""
    return len(shape) == len(profiled) and any(n > p for n, p in zip(shape[1:], profiled[1:]))


def _scaled(
    chain: remat.Chain,
    factor: float,
    fixed: Sequence[int] = (),
    measured: Sequence[dict[str, Any] | None] = (),
) -> remat.Chain:
    """The chain with every size and time multiplied by ``factor`` (an input with
    ``factor`` times the elements between blocks), except that up to
    ``fixed[l-1]`` bytes of stage l's backward transient (the gradient of its
    largest weight, whose size is the weight's) are taken as not growing or
    shrinking with the input: the larger of the two readings is kept, so that
    neither direction predicts low. (A ResNet profiled at batch 4 and run at
    batch 2 was predicted up to 57% low: its last blocks' backward transient is
    a 9 MiB weight gradient.)

    Where the profile measured a stage on half its batch too (``measured``:
    what of each size does not grow with the batch, a batch norm's
    per-channel statistics among them; under ``"options"`` each option's),
    each size is read off that line too, the largest of the readings kept;
    an option measured on half the batch reads its own line, one that was
    not keeps at most its stage's part. O(stages)."""
    d = chain.to_dict()
    for i, s in enumerate(d["stages"]):
        c = fixed[i] if i < len(fixed) else 0
        known = measured[i] if i < len(measured) else None
        of_options = (known or {}).get("options") or []
        for j, part in enumerate([s, *(s.get("options") or [])]):
            # Divided back: every size is multiplied by ``factor`` below.
            readings: dict[str, float] = {}
            if "backward_overhead" in part:
                readings["backward_overhead"] = _scaled_keeping(part["backward_overhead"], c, factor)
            own = known if j == 0 else (of_options[j - 1] if j - 1 < len(of_options) else None)
            line_of = own if own is not None else known
            for k in SIZE_FIELDS:
                keep = (line_of or {}).get(k)
                if keep is None or not part.get(k):
                    continue
                v = int(part[k])
                # A measured line may rise as the input shrinks (fixed_parts);
                # an option read off its stage's keeps at most its own figure.
                kept = keep if own is not None else min(v, keep)
                line = kept + (v - kept) * factor
                readings[k] = max(readings.get(k, v * factor), line)
            for k, value in readings.items():
                part[k] = math.ceil(value / factor)
    parts = [*d["stages"], d.get("loss") or {}]
    parts += [o for s in parts for o in s.get("options") or []]
    for s in parts:
        for k in SIZE_FIELDS:
            if k in s:
                s[k] = math.ceil(s[k] * factor)
        if "backward_frees" in s:
            # Taken off: rounded down, and not grown past the measured bytes
            # (part of them may not grow with the input).
            s["backward_frees"] = int(s["backward_frees"] * min(1.0, factor))
            _frees_within(s)
        for k in ("forward_time", "backward_time", "recompute_time"):
            if k in s:
                s[k] = s[k] * factor
    d["input_size"] = math.ceil(d["input_size"] * factor)
    return remat.Chain.from_dict(d)


def _in_graph_chain(chain: remat.Chain, copies: Sequence[Sequence[float]]) -> remat.Chain:
    """``chain`` as one model's graph runs its blocks: each option's saved bytes
    less the copy of its input its compiled variant saves alone (``copies[l-1][o]``,
    a share of the input's bytes), which a graph that lays out every
    activation once does not make (docs/model.md, "Inside one graph"). Never
    below the option's output. O(stages x options)."""
    if not any(any(c) for c in copies):
        return chain
    d = chain.to_dict()
    stages = d["stages"]
    for l, shares in enumerate(copies[: len(stages)], 1):
        s = stages[l - 1]
        given = int(d["input_size"] if l == 1 else stages[l - 2]["output_size"])
        figures = [s, *s.get("options", [])]
        for figure, share in zip(figures, shares):
            if share:
                out = int(s["output_size"])
                figure["saved_size"] = max(out, int(figure["saved_size"]) - round(share * given))
                _frees_within(figure)
    return remat.Chain.from_dict(d)


def _frees_within(part: dict[str, Any]) -> None:
    """A stage's or option's ``backward_frees`` (a figure taken off its
    backward) kept within its ``saved_size``, as the chain requires: where
    the saved bytes were read lower than those measured. O(1)."""
    if "backward_frees" in part:
        part["backward_frees"] = min(int(part["backward_frees"]), int(part["saved_size"]))


def _with_derived_inputs(chain: remat.Chain, derived: set[int]) -> remat.Chain:
    """``chain`` where each block l of ``derived`` takes what the model's code
    made of block l-1's output, not that output: a rerun of block l-1 cannot
    make block l's input, so block l-1 is always recorded (``F_all``, with any
    of its options), never run plain, and none of its forwards runs again
    before ``B^{l-1}`` (abar^{l-1} is held until then). A rerun of block l
    then starts from its input as the forward had it, which the executor
    keeps; the chain counts it as a^{l-1}, block l-1's output, which the
    model's code consumed (the same bytes where the code between keeps the
    shape, as a residual add does). O(stages)."""
    if not derived:
        return chain
    d = chain.to_dict()
    for l in sorted(derived):
        s = d["stages"][l - 2]
        s.setdefault("recording_overhead", s["forward_overhead"])
        s["forward_overhead"] = _NO_PLAIN_FORWARD
        for o in s.get("options") or []:
            o.setdefault("forward_overhead", s["recording_overhead"])
    return remat.Chain.from_dict(d)


def _with_loss(chain: remat.Chain, outside: _Outside) -> remat.Chain:
    """The chain whose loss stage is the part after the stack: its forward and
    backward may take ``post_peak`` on top of the stack (less what stays through
    the backward, which the budget sets aside)."""
    d = chain.to_dict()
    transient = max(0, outside.post_peak - outside.post_after)
    grad = d["stages"][-1].get("gradient_size", d["stages"][-1]["output_size"])
    # What is before the stack and gone by its backward (_Outside.released)
    # may still be there in the head's backward.
    d["loss"] = dict(
        d.get("loss") or {},
        forward_overhead=transient + outside.released,
        backward_overhead=max(0, transient - grad) + outside.released,
    )
    return remat.Chain.from_dict(d)


def _backward_reached(life: OutputLifetimes, l: int, _grads: Any) -> None:
    """``B^l`` begins: a pre-hook on the node that made block l's output."""
    life.backward_starts(l)


def _with_input_held(stack: remat.Chain, outside: _Outside, schedule: remat.Schedule) -> remat.Chain | None:
    """``stack`` with ``outside``'s head less the last block's input, where
    the schedule runs the last block with its input kept (F_ck^L, F_all^L):
    the chain holds a^{L-1} at the head, and the head's measured figure,
    which counts it too (``_Outside.input_dropped``), is taken without it.
    None otherwise. O(stages)."""
    ops = [(k, l) for k, l, _ in schedule.operations_with_options]
    last = len(stack)
    head = ops.index((Op.F_ALL.value, last + 1))
    kind, l = ops[head - 1]
    if l != last or kind == Op.F_NONE.value:
        return None
    lower = replace(outside, post_peak=max(outside.post_after, outside.post_peak - outside.input_dropped))
    return _with_loss(stack, lower)


def _loss_of(out: Any, example_loss: Callable[[Any], torch.Tensor] | None) -> torch.Tensor:
    """The loss :meth:`AppliedPlan.plan_on` runs the backward from."""
    if example_loss is not None:
        loss = example_loss(out)
    else:
        loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
        if loss is None and isinstance(out, torch.Tensor):
            loss = out
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(out).__name__
        raise TypeError(
            f"remat: the example's output is {what}, not a loss: pass example_loss= (a function of the output "
            "that returns the training loss, e.g. lambda out: criterion(out, target)), or labels= for a "
            "Hugging Face model"
        )
    if not loss.requires_grad:
        raise RuntimeError("remat: the example's loss does not require a gradient: is the model frozen?")
    return loss


def apply(
    model: nn.Module,
    memory: int | str,
    *,
    blocks: str | nn.Module | Sequence[nn.Module] | Sequence[str] | None = None,
    algorithm: str = "auto",
    slots: int | None = None,
    exact_memory: int | str | None = None,
    repeat: int = 3,
    preserve_rng: bool = True,
    optimizer_state_bytes: int | None = None,
    scale_shapes: bool = True,
    policies: Sequence[Policy | NamedPolicy | Any] | None = DEFAULT_POLICIES,
    in_flight: int = 1,
    compile: bool | dict[str, Any] | None = None,
    chunked_loss: bool = True,
    example_inputs: Any = None,
    example_loss: Callable[[Any], torch.Tensor] | None = None,
    offload: bool = False,
    head: LossHead | None = None,
) -> AppliedPlan:
    """Trains ``model`` within ``memory`` by recomputing its blocks on remat's
    schedule, in place, with the training loop unchanged::

        model = transformers.GPT2LMHeadModel(config)
        plan = remat.torch.apply(model, memory="60%")
        loss = model(input_ids, labels=input_ids).loss
        loss.backward()
        print(plan.explain())

    The stack is found by :func:`find_blocks` (or named by ``blocks``). Each
    block may take side inputs (masks, position embeddings, cache flags) and
    return a tuple or dict whose first item goes on to the next block; the
    first training step profiles the blocks (identical blocks once), solves,
    and measures the rest of the step; gradients are autograd's own (see
    :mod:`remat.torch.executor`). Under ``torch.no_grad()`` (``generate()``,
    evaluation) the blocks run as they are.

    Args:
        model: the model, trained as usual afterwards.
        memory: the budget for the step's activations, gradients and
            workspace (parameters, their gradients and optimizer state are
            outside it): bytes, a size (``"8GiB"``), a share of storing
            everything (``"60%"``), or ``"auto"`` on a GPU.
        blocks: the stack: a dotted name (``"transformer.h"``), the container,
            or a list of modules called one after another; or several stacks
            planned together, as a list of dotted names in the order the
            model calls them (``["encoder.block", "decoder.block"]``, what
            :func:`find_stacks` finds for a Hugging Face encoder-decoder).
        algorithm: any of :func:`remat.solve`'s.
        slots: the dynamic programs' memory slots (None: remat's default).
        exact_memory: :func:`remat.solve`'s.
        repeat: timed runs per block when profiling.
        preserve_rng: replay RNG state on recomputation.
        optimizer_state_bytes: for ``memory="auto"`` (default: Adam's).
        scale_shapes: reuse one profile for inputs of other shapes, scaled by
            the number of elements between blocks, except that an input longer
            than the profiled one past its first dimension (a longer
            sequence: attention's scores grow with its square) is profiled
            again, and that profile serves the shorter ones (False: profile
            each shape).
        policies: the ways to record a block besides keeping all it saves
            (:mod:`remat.torch.policies`): each block is measured under each,
            and the solver picks, per block, whether to record it whole, under
            one of them (selective saving, run through PyTorch's selective
            activation checkpointing) or not at all. Default:
            ``(Policy.SAVE_MATMULS, Policy.SAVE_INPUT)``, and on compiled
            blocks ``Policy.SAVE_ATTENTION`` too, where a block has attention
            (:data:`remat.torch.COMPILED_DEFAULT_POLICIES`). A user policy is a
            function of SAC's signature ``(ctx, op, *args, **kwargs) ->
            CheckpointPolicy``, a list of operators whose outputs to keep, or
            :func:`remat.torch.policy` (name, either). ``()`` or None: no
            options, blocks are recorded whole or not at all (remat before
            options).
        in_flight: how many micro-batches' forward residues the device holds
            at once (pipeline parallelism: derive it with
            :func:`remat.torch.pipeline.in_flight`, or let
            :func:`remat.torch.pipeline.apply_stage` do it): the solver bounds
            ``(in_flight - 1) x residue + peak`` by the stack's budget, where
            the residue is what one micro-batch's forward leaves for its
            backward. 1 (the default): one step at a time, as before.
        compile: how the blocks run. None (the default): compiled by
            ``torch.compile`` (inductor) when the model runs under
            ``torch.compile`` (``torch.compile(model)`` after ``apply``),
            eagerly otherwise. True: always compiled, block by block, the
            model itself eager or not (regional compilation, as torchtitan
            compiles each block). A dict: always compiled, with these
            ``torch.compile`` arguments (``{"mode": "max-autotune"}``). False:
            always eager. Compiled blocks are profiled compiled, their memory
            measured by the allocator, and each recording option runs as its
            own compiled variant (see :mod:`remat.torch.compiled`).
        chunked_loss: for a Hugging Face causal LM (an ``lm_head`` and a
            ``loss_function``), let the plan compute the head and the loss in
            chunks of tokens, never holding the whole logits (each chunk's
            gradient made in the forward: :func:`remat.torch.chunked_cross_entropy`),
            where that is the fastest plan that fits (or faster than the head
            whole by 5%: chunks change the gradients' rounding). Each way is
            measured on the first training step (checked against the model's
            own loss there); a plan that chunks returns the loss without ``logits``
            (None), as fused linear cross-entropy kernels do, and
            ``explain()`` says so. Eager only: under ``torch.compile`` the
            head runs whole. False: the model's forward as it is.
        head: the head and the loss of any other model, named
            (:class:`LossHead`: the ``nn.Linear`` making the logits and the
            forward's argument holding the targets, for a forward that
            computes a cross-entropy of them), planned as a causal LM's are;
            ``chunked_loss`` is then ignored.
        example_inputs: a batch to plan on now, before training (see
            :meth:`AppliedPlan.plan_on`: the first step's profile, solve and
            measurement, with no training step taken): a tensor, a tuple of
            positional arguments or a dict of keyword arguments (a Hugging
            Face model's with ``labels``). None: the first training step plans.
        example_loss: the loss of the example's output (default: its ``loss``,
            or the output when it is one number).
        offload: give every block on a GPU one more recording option, offload
            (:attr:`Policy.OFFLOAD`; ``policies=`` may name it instead):
            recorded whole, what it saves kept in host memory (pinned) and
            brought back in its backward, at the copy bandwidths measured when
            profiling (docs/model.md, "Offload"). The solver takes it where
            the copies cost less than recomputing. Eager blocks only; the
            copies are synchronous (their time is counted, none hidden). On
            the CPU it moves nothing and is not offered.

    Returns:
        the :class:`AppliedPlan` (``remove()`` undoes it).

    Raises:
        ValueError: a bad ``memory``, or no stack found.
        TypeError: ``blocks`` of the wrong type.
        remat.InfeasibleError: with ``example_inputs``, no schedule fits
            (``min_budget`` is the smallest budget that does); the model is
            left as it was.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    memory = check_memory(memory, "apply")
    if slots is None:
        slots = remat.DEFAULT_SLOTS
    if exact_memory is not None:
        exact_memory = remat.parse_size(exact_memory)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be a positive int, got {repeat!r}")
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        raise ValueError(f"in_flight must be a positive int, got {in_flight!r}")
    for m in model.modules():
        if isinstance(m.__dict__.get("forward"), Callable) and hasattr(m.__dict__["forward"], "__wrapped__"):  # type: ignore[arg-type]
            raise ValueError("remat.torch.apply was already applied to this model; call plan.remove() first")
    if head is not None and not isinstance(head, LossHead):
        raise TypeError(
            f"head must be a remat.torch.LossHead (the head module and the targets' argument), got {head!r}"
        )
    if head is not None:
        _check_head(model, head)
    if example_loss is not None and example_inputs is None:
        raise ValueError("example_loss= is the loss of example_inputs=, which is missing")
    named = resolve_policies(policies)
    # Offload is derived from option 0's figures, not profiled as a policy.
    offload = bool(offload) or any(p.offload for p in named)
    named = [p for p in named if not p.offload]
    compiled_named = resolve_policies(COMPILED_DEFAULT_POLICIES) if policies is DEFAULT_POLICIES else named
    compile_options(compile)  # checks it
    stacks = _resolve_stacks(model, blocks)
    where = ", ".join(w for w, _ in stacks)
    found = [b for _, bs in stacks for b in bs]
    if len(found) < 1:
        raise ValueError(f"blocks={where!r} holds no modules")
    plan = AppliedPlan(
        model,
        found,
        where,
        memory,
        algorithm=algorithm,
        slots=slots,
        exact_memory=exact_memory,
        repeat=repeat,
        preserve_rng=preserve_rng,
        optimizer_state_bytes=optimizer_state_bytes,
        scale_shapes=scale_shapes,
        policies=named,
        compiled_policies=compiled_named,
        in_flight=in_flight,
        compile=compile,
        chunked_loss=bool(chunked_loss),
        offload=offload,
        head=head,
        stacks=[(w, len(bs)) for w, bs in stacks],
        # Found by parameters: the first step may find another that keeps more.
        alternatives=_disjoint_stacks(model, found) if blocks is None and len(stacks) == 1 else (),
    )
    if example_inputs is not None:
        try:
            plan.plan_on(example_inputs, example_loss)
        except BaseException:
            plan.remove()
            raise
    return plan


def _check_head(model: nn.Module, head: LossHead) -> None:
    """A :class:`LossHead` must name the model's own head module and an
    argument of its forward: either mistake surfaced at the first chunked
    step as an error about the budget."""
    if not any(m is head.head for m in model.modules()):
        raise ValueError(
            f"head=LossHead({type(head.head).__name__}): that module is not a submodule of {type(model).__name__}; "
            "pass the nn.Linear of this model that makes the logits"
        )
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return  # a forward whose signature cannot be read: the first step checks the loss
    if head.targets in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    raise ValueError(
        f"head=LossHead(targets={head.targets!r}): {type(model).__name__}.forward takes no argument "
        f"{head.targets!r} (it takes {', '.join(params) or 'none'}); name the argument that holds the targets, "
        f"e.g. LossHead(head, targets={next(iter(params), 'targets')!r})"
    )


def _shapes_of(args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The shapes of the tensors among a call's arguments, by position and
    name: which shape of the model's inputs a step is. O(arguments)."""
    found: list[tuple[Any, ...]] = [(i, tuple(v.shape)) for i, v in enumerate(args) if isinstance(v, torch.Tensor)]
    found += [(k, tuple(v.shape)) for k, v in sorted(kwargs.items()) if isinstance(v, torch.Tensor)]
    return tuple(found)
