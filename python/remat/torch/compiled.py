"""Compiled blocks: the second way remat runs a stage, through ``torch.compile``.

A schedule runs a block several times: its first run in the forward, its
recomputations, and, for a block recorded under a recording option, a run
that keeps only what the option keeps. Under ``torch.compile`` each of these
runs a graph compiled by inductor, so that a block keeps the compiler's fusion
whatever the schedule does with it.

Design notes:

- **A compiled block is an autograd Function.** AOTAutograd turns the block's
  forward and backward into one ``CompiledFunction``; what it saves for its
  backward goes through ``ctx.save_for_backward``, so the executor's
  ``saved_tensors_hooks`` see it as they see an eager block's saved tensors (the
  compiled graph saves fewer: its partitioner recomputes cheap pointwise work in
  the backward). A rerun of the same compiled function on the same input saves
  the same tensors, which is what the executor's holders need.
- **One variant per recording option.** Option 0 is the block compiled as it
  is. Option o runs the block inside PyTorch's non-reentrant
  ``torch.utils.checkpoint.checkpoint`` with the option's policy as a
  selective-checkpoint context (``create_selective_checkpoint_contexts``), and
  that is compiled: Dynamo traces the region as a tagged subgraph and the
  partitioner saves exactly what the policy says to save (``MUST_SAVE``: the
  matrix products' outputs for ``SAVE_MATMULS``, nothing but the inputs for
  ``SAVE_INPUT``), recomputing the rest inside the compiled backward, fused.
  The eager executor needs SAC's caching and replaying contexts around the
  runs; a compiled option needs nothing at run time: its saved set already is
  abar^l[o]. Compiled blocks are also measured under ``SAVE_ATTENTION`` by
  default (attention's batched products and softmax kept too): inside a
  compiled graph, recomputing them costs more than reading them back while
  memory allows (:data:`remat.torch.policies.ATTENTION_OPS`).
- **Inside one model's graph** (an in-graph plan), a block keeps less than
  compiled alone: alone, inductor saves a channels-last copy of a
  convolution block's input beside the input; one graph lays out every
  activation once. The profile finds such copies and in-graph plans are
  predicted without them (docs/model.md, "Inside one graph").
- **Recomputations** (``F_ck`` and ``F_none`` in the backward phase) run the
  graph of the block's first run (the variant it is recorded with) with
  gradients on and its saved tensors dropped as autograd hands them over, not
  an inference graph: another graph may fuse and round otherwise, and the
  recomputed activation must be the first run's to the bit. The same graph on
  the same input with the same RNG state draws the same random numbers
  (inductor takes its seeds from the global generator, which the executor
  replays), so a recomputation's dropout masks are the first run's
  (``python/tests/test_torch_compiled.py``). Its saved tensors are all alive
  when the graph returns, so the profile counts that run's peak in the
  block's ``forward_overhead``.
- **One compiled function per kind of block.** Identical blocks (same class,
  structure and parameter shapes) share one function: Dynamo guards on the
  parameters' metadata, not on which module it is, so a stack of N equal blocks
  compiles once per variant. Each kind of block gets a function with its own
  code object, because Dynamo keeps its cache per code object and gives up
  after a few entries (``torch._dynamo.config.recompile_limit``): a ResNet's
  eight kinds of bottleneck, three variants each, with and without gradients,
  would go over it with one shared function.
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from .policies import NamedPolicy

__all__ = ["CompiledBlocks", "compile_options", "in_graph_context", "own_code"]


_IDENT = re.compile(r"\W")


def _call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # The class's forward alone: the module's hooks run outside the compiled
    # graph, once per run of the block (remat.torch.apply calls the module
    # around it), and remat's own forward (the instance's) is not re-entered,
    # even where checkpoint's recomputation runs this eagerly in a backward.
    return type(module).forward(module, *args, **kwargs)


def own_code(fn: Callable[..., Any], name: str, shared: dict[str, types.CodeType] | None = None) -> Callable[..., Any]:
    """``fn`` (a plain function or closure) with a code object of its own,
    named ``name``. Dynamo keeps its cache per code object and, past
    ``recompile_limit`` entries, runs that code eagerly for good: a wrapper
    written once and made for every block of every plan (each guarded on its
    own closure) would get there after a few plans. The name shows in
    Dynamo's logs.

    With ``shared``, the code object made for ``name`` the first time is kept
    there and reused: functions that Dynamo should compile once between them
    (the forwards of a stack's blocks, which a compiled block calls, guarded
    on ``module.forward.__code__``) share it."""
    code = shared.get(name) if shared is not None else None
    if code is None:
        code = fn.__code__.replace(co_name=name)
        if hasattr(code, "co_qualname"):  # Python >= 3.11
            code = code.replace(co_qualname=name)
        if shared is not None:
            shared[name] = code
    copy = types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def _selective(policy: NamedPolicy) -> Callable[..., Any]:
    """The block called inside non-reentrant checkpoint with the policy's
    selective-checkpoint context (none for a policy that keeps nothing:
    PyTorch's docs call that plain checkpointing)."""
    if policy.keeps_nothing:

        def run_nothing(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            return checkpoint(_call, module, *args, use_reentrant=False, **kwargs)

        return run_nothing
    context = functools.partial(create_selective_checkpoint_contexts, policy.spec)

    def run_selective(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(_call, module, *args, use_reentrant=False, context_fn=context, **kwargs)

    return run_selective


def in_graph_context(policy: NamedPolicy) -> Callable[[], Any] | None:
    """The ``context_fn`` that runs a block under ``policy`` inside a compiled
    model's graph (non-reentrant checkpoint traced by Dynamo, the policy applied
    by the partitioner); None for a policy that keeps nothing (plain
    checkpointing)."""
    if policy.keeps_nothing:
        return None
    return functools.partial(create_selective_checkpoint_contexts, policy.spec)


def compile_options(compile: bool | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``apply(compile=...)`` as ``torch.compile`` keyword arguments: None for
    ``False``/``None`` (no compiled blocks of one's own), ``{}`` for ``True``.

    Raises:
        TypeError: ``compile`` is none of bool, None or a mapping.
        ValueError: a mapping with a key ``torch.compile`` does not take.
    """
    if compile is None or compile is False:
        return None
    if compile is True:
        return {}
    if not isinstance(compile, Mapping):
        raise TypeError(
            f"compile must be True, False, None or a dict of torch.compile arguments, got {type(compile).__name__}"
        )
    allowed = {"backend", "mode", "options", "dynamic", "fullgraph"}
    unknown = sorted(set(compile) - allowed)
    if unknown:
        raise ValueError(
            f"compile={dict(compile)!r}: torch.compile takes no {', '.join(map(repr, unknown))} here "
            f"(one of {', '.join(sorted(allowed))})"
        )
    return dict(compile)


class CompiledBlocks:
    """The compiled functions of a model's blocks, one per kind of block and
    recording option, made on first use.

    Args:
        options: ``torch.compile``'s keyword arguments for every block.
        kind: what makes two blocks the same kind (they share a function).

    :meth:`variant` returns a callable ``f(module, *args, **kwargs)``.
    Compiling happens on its first call (Dynamo's), not here.
    """

    def __init__(self, options: Mapping[str, Any], kind: Callable[[nn.Module], Any]) -> None:
        self.options = dict(options)
        self.kind = kind
        self._kinds: dict[Any, int] = {}
        self._compiled: dict[tuple[int, str | None], Callable[..., Any]] = {}

    def variant(self, module: nn.Module, policy: NamedPolicy | None) -> Callable[..., Any]:
        """The compiled function that runs ``module`` recorded under ``policy``
        (None: option 0, the block as it is)."""
        k = self._kinds.setdefault(self.kind(module), len(self._kinds))
        key = (k, policy.name if policy is not None else None)
        fn = self._compiled.get(key)
        if fn is None:
            base = _call if policy is None else _selective(policy)
            what = "all" if policy is None else _IDENT.sub("_", policy.name)
            name = f"remat_{_IDENT.sub('_', type(module).__name__)}_{k}_{what}"
            fn = torch.compile(own_code(base, name), **self.options)
            self._compiled[key] = fn
        return fn

    def __len__(self) -> int:
        return len(self._compiled)
