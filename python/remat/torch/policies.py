"""Ways to record a block: selective saving, the chain's recording options.

A block the schedule records (``F_all``) keeps everything its backward needs.
A **policy** keeps less: the outputs of some operators, with the rest
recomputed inside the block's backward (docs/model.md, "Options"). remat runs a
policy through PyTorch's selective activation checkpointing (SAC,
``torch.utils.checkpoint.create_selective_checkpoint_contexts``): the recording
forward runs under SAC's caching context, which keeps the outputs the policy
saves; when the backward reaches the block, the block runs again under SAC's
replaying context, which hands back those outputs instead of computing them,
and autograd runs the block's backward on what that rerun saved.

:func:`remat.torch.apply` measures every block under each policy it is given
(``policies=``) and writes the figures into the chain as the stage's
``options``; the solver then chooses, per block, whether to record it whole
(option 0, :attr:`Policy.SAVE_ALL`), under a policy, or not at all.

Built in (:class:`Policy`):

- :attr:`Policy.SAVE_ALL`: option 0, the block recorded as autograd records it.
- :attr:`Policy.SAVE_MATMULS`: keep the outputs of the compute-intensive
  operators (:data:`MATMUL_OPS`: matrix products, convolutions, the
  scaled-dot-product-attention kernels) and recompute the rest (normalisations,
  activations, dropout, softmax): torchtitan's selective policy, after
  Korthikanti et al. 2022.
- :attr:`Policy.SAVE_ATTENTION`: keep what :attr:`Policy.SAVE_MATMULS` keeps
  and attention's batched products and softmax (:data:`ATTENTION_OPS`), where
  attention runs as PyTorch's math kernel (the CPU with dropout, a model's
  eager attention) or a compiler decomposes it: more bytes than
  ``SAVE_MATMULS`` for less recomputation. Measured by default on compiled
  blocks (:data:`COMPILED_DEFAULT_POLICIES`), where inductor's recomputation
  of attention costs more than reading it back while memory allows.
- :attr:`Policy.SAVE_INPUT`: keep nothing inside the block; its backward
  recomputes all of it from the block's input.
- :attr:`Policy.OFFLOAD`: keep everything, in host memory (docs/model.md,
  "Offload"): not measured like the others, its figures follow from option
  0's and the copy bandwidths (``apply(..., offload=True)``).

A user policy is a function of SAC's signature ``policy_fn(ctx, op, *args,
**kwargs) -> CheckpointPolicy`` (or bool), or a list of operators whose outputs
to keep (``[torch.ops.aten.mm.default, ...]``), optionally named with
:func:`policy`.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

__all__ = [
    "ATTENTION_OPS",
    "COMPILED_DEFAULT_POLICIES",
    "DEFAULT_POLICIES",
    "MATMUL_OPS",
    "OFFLOAD",
    "SAVE_ALL",
    "SAVE_ATTENTION",
    "SAVE_INPUT",
    "SAVE_MATMULS",
    "NamedPolicy",
    "Policy",
    "policy",
    "resolve_policies",
]


def _ops(*names: str) -> frozenset[Any]:
    """The ``aten`` overloads of these names that this torch has (``mm`` or
    ``mm.default``)."""
    found = set()
    for name in names:
        packet_name, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, packet_name, None)
        if packet is None:
            continue
        op = getattr(packet, overload or "default", None)
        if op is not None:
            found.add(op)
    return frozenset(found)


#: The operators whose outputs :attr:`Policy.SAVE_MATMULS` keeps: matrix
#: products (``mm``, ``addmm``; an MoE's grouped products), convolutions and
#: every scaled-dot-product-attention kernel (the CPU's flash kernel
#: included), as torchtitan's policy keeps them. Batched products (``bmm``,
#: ``baddbmm``) are recomputed: where attention runs as PyTorch's math kernel
#: (on the CPU with dropout, or a model's eager attention) they make the
#: attention scores, batch x heads x sequence^2, the largest and cheapest
#: thing to recompute (Korthikanti et al.). Keeping them, a compiled GPT-2
#: block under this policy kept 7.00 MiB where torchtitan's kept 4.5 MiB, and
#: remat's plans lost to it. Those this torch lacks are left out.
MATMUL_OPS: frozenset[Any] = _ops(
    "mm",
    "addmm",
    "_grouped_mm",
    "convolution",
    "_convolution",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_attention_math",
    "_flash_attention_forward",
    "_efficient_attention_forward",
)


#: The operators whose outputs :attr:`Policy.SAVE_ATTENTION` keeps:
#: :data:`MATMUL_OPS` and the batched products and softmax attention's math
#: kernel runs as (its scores and probabilities). On the compiled GPT-2 of
#: ``benchmarks/compiled_curve.py`` (8 blocks, sequence 256, dropout 0.1), every
#: block under it ran 0.961-0.965 of compiled plain where every block under
#: ``SAVE_MATMULS`` ran 0.987-1.014 and ``activation_memory_budget=0.5`` 0.972
#: (one run of 9 rounds, beside a CI run), at 91.14 MiB against 71.14 and
#: 81.26: ``activation_memory_budget``'s knapsack keeps attention's
#: probabilities too.
ATTENTION_OPS: frozenset[Any] = MATMUL_OPS | _ops("bmm", "baddbmm", "_softmax", "_safe_softmax")


def _save_matmuls(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in MATMUL_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _save_attention(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in ATTENTION_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _save_input(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.PREFER_RECOMPUTE


class Policy(enum.Enum):
    """The built-in ways to record a block (see the module's notes)."""

    SAVE_ALL = "all"
    SAVE_MATMULS = "matmuls"
    SAVE_ATTENTION = "attention"
    SAVE_INPUT = "input"
    #: Record the block whole and keep what it saves in host memory
    #: (docs/model.md, "Offload"): no recomputation, two copies.
    OFFLOAD = "offload"


SAVE_ALL = Policy.SAVE_ALL
SAVE_MATMULS = Policy.SAVE_MATMULS
SAVE_ATTENTION = Policy.SAVE_ATTENTION
SAVE_INPUT = Policy.SAVE_INPUT
OFFLOAD = Policy.OFFLOAD

#: What :func:`remat.torch.apply` measures by default, beyond option 0.
DEFAULT_POLICIES: tuple[Policy, ...] = (Policy.SAVE_MATMULS, Policy.SAVE_INPUT)
#: What it measures on compiled blocks where ``policies=`` is left as
#: :data:`DEFAULT_POLICIES`. A policy that keeps, on a block, the same
#: operators' outputs as one before it (``SAVE_ATTENTION`` on a block without
#: attention) is not measured on that block (it would compile the same graph).
COMPILED_DEFAULT_POLICIES: tuple[Policy, ...] = (*DEFAULT_POLICIES, Policy.SAVE_ATTENTION)

PolicyFn = Callable[..., Union[CheckpointPolicy, bool]]


@dataclass(frozen=True)
class NamedPolicy:
    """A policy with the name the chain's option gets (``explain()`` shows it).

    ``spec`` is what ``create_selective_checkpoint_contexts`` takes: a policy
    function of SAC's signature, or a list of operators whose outputs to keep.
    ``keeps_nothing`` marks a policy that keeps no operator's output
    (:attr:`Policy.SAVE_INPUT`): it runs without SAC's contexts, which would
    cache nothing and cost a Python call per operator (PyTorch's docs: such a
    policy "is equivalent to vanilla checkpointing").
    """

    name: str
    spec: PolicyFn | list[Any]
    keeps_nothing: bool = False
    #: The offload option: the block recorded whole, what it saves kept in host
    #: memory (no SAC contexts; ``spec`` unused).
    offload: bool = False

    def contexts(self) -> tuple[Any, Any]:
        """A fresh pair of SAC contexts: (caching, replaying). The caching one
        is told to keep its tensors itself, not through the saved-tensor hooks
        remat runs the block under (which drop what autograd saves)."""
        if self.keeps_nothing:
            return contextlib.nullcontext(), contextlib.nullcontext()
        caching, replaying = create_selective_checkpoint_contexts(self.spec)
        if hasattr(caching, "respect_saved_tensors_hooks"):
            caching.respect_saved_tensors_hooks = False
        return caching, replaying


_BUILT_IN = {
    Policy.SAVE_MATMULS: NamedPolicy("matmuls", _save_matmuls),
    Policy.SAVE_ATTENTION: NamedPolicy("attention", _save_attention),
    Policy.SAVE_INPUT: NamedPolicy("input", _save_input, keeps_nothing=True),
    Policy.OFFLOAD: NamedPolicy("offload", _save_input, offload=True),
}


def policy(name: str, spec: PolicyFn | Iterable[Any]) -> NamedPolicy:
    """A named user policy: a function of SAC's signature ``(ctx, op, *args,
    **kwargs) -> CheckpointPolicy`` (or bool), or operators (``OpOverload``)
    whose outputs to keep, everything else recomputed.

    Raises:
        ValueError: an empty name, or an operator that is not an ``OpOverload``
            (SAC's own check: ``torch.ops.aten.mm`` must be ``mm.default``).
        TypeError: ``spec`` is neither callable nor iterable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a policy needs a non-empty name, got {name!r}")
    if callable(spec):
        return NamedPolicy(name, spec)
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Iterable):
        raise TypeError(
            f"policy {name!r}: expected a function (ctx, op, *args, **kwargs) -> CheckpointPolicy or a list of "
            f"operators, got {type(spec).__name__}"
        )
    ops = list(spec)
    create_selective_checkpoint_contexts(ops)  # SAC's check of the operators
    return NamedPolicy(name, ops)


def resolve_policies(policies: Sequence[Any] | None) -> list[NamedPolicy]:
    """The options to measure, from ``apply(policies=...)``: each a
    :class:`Policy`, a :class:`NamedPolicy`, a policy function (named after its
    ``__name__``) or a list of operators (named ``ops1``, ``ops2``...).
    :attr:`Policy.SAVE_ALL` is option 0 and always present, so it is skipped;
    ``()`` or None gives no options (remat records blocks whole or not at all).

    Raises:
        ValueError: two policies with one name.
        TypeError: something that is not a policy.
    """
    if policies is None:
        return []
    if isinstance(policies, (Policy, NamedPolicy)) or callable(policies):
        policies = [policies]
    found: list[NamedPolicy] = []
    for i, p in enumerate(policies):
        if p is Policy.SAVE_ALL:
            continue
        if isinstance(p, Policy):
            found.append(_BUILT_IN[p])
        elif isinstance(p, NamedPolicy):
            found.append(p)
        elif isinstance(p, str):
            raise TypeError(
                f"policies[{i}] is the string {p!r}; use remat.torch.Policy members (Policy.SAVE_MATMULS, ...)"
            )
        elif callable(p):
            found.append(policy(getattr(p, "__name__", None) or f"policy{i + 1}", p))
        elif isinstance(p, (list, tuple, set, frozenset)):
            found.append(policy(f"ops{i + 1}", p))
        else:
            raise TypeError(f"policies[{i}] is a {type(p).__name__}, not a policy")
    names = [p.name for p in found]
    for n in names:
        if n == "all" or names.count(n) > 1:
            raise ValueError(f"two policies are named {n!r} ('all' is option 0's); name them with remat.torch.policy")
    return found
