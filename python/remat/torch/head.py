"""The head and the loss in chunks of tokens: the loss options of
docs/model.md ("Ways to compute the loss").

At the floor of any checkpointing scheme a language model holds its logits
(tokens x vocabulary), the fp32 copy the cross-entropy takes, the softmax it
keeps and the logits' gradient, all at once: with a vocabulary of 128,256 that
is most of the step. :func:`chunked_cross_entropy` computes
``cross_entropy(hidden @ weight.T + bias, targets)`` one chunk of tokens at a
time and keeps none of the logits: each chunk's logits become their gradient
in the forward, folded into the hidden states' and the weight's at once (as
fused linear cross-entropy kernels do: Liger's, torchtune's), so at most one
chunk's logits is alive and none is made twice.

:class:`CausalLMHead` runs a Hugging Face causal LM's forward that way (the
base model, then the head and the loss chunked or whole), for
:func:`remat.torch.apply`, which measures each loss option and lets the solver
choose one per plan. Any other model whose forward computes a cross-entropy
of a linear head's logits names its head with :class:`LossHead`
(``apply(model, ..., head=LossHead(model.lm_head, targets="targets"))``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable

__all__ = ["CausalLMHead", "HeadOption", "LossHead", "chunked_cross_entropy"]

#: Loss options remat.torch measures: the head whole, or in this many chunks
#: of tokens, each of at least MIN_TOKENS tokens (each chunk reads the whole
#: head weight three times: smaller chunks save little and cost much).
CHUNKS = (1, 4, 16)
MIN_TOKENS = 64


def _bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    size = math.ceil(n / max(1, min(chunks, n)))
    return [(a, min(n, a + size)) for a in range(0, n, size)]


def _softmax_(x: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension, in place: no temporary of x's size
    (``torch.softmax`` and ``logsumexp`` make one, unseen by dispatch modes).
    Returns the logsumexp of each row."""
    top = x.amax(dim=-1, keepdim=True)
    x.sub_(top).exp_()
    total = x.sum(dim=-1, keepdim=True)
    x.div_(total)
    return total.log_().add_(top).squeeze(-1)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """The loss and its gradients, one chunk of tokens at a time, in the
    forward: each chunk's logits become its softmax in place, then its
    gradient, folded into the hidden states' and the weight's and dropped. The
    backward scales what the forward made by the loss's own gradient. So no
    logits are made twice (three matrix products of the head's size, as the
    whole head takes), at most one chunk's logits is alive, and the gradients
    are held only from the loss's forward to its backward, which follows it."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        chunks: int,
        ignore_index: int,
        denominator: torch.Tensor,
    ) -> torch.Tensor:
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros_like(bias) if need_b and bias is not None else None
        scale = 1.0 / denominator.to(torch.float32)
        # No target counted (every one ignore_index): the loss is 0/0, NaN, as
        # cross_entropy's mean; the gradients are zero, as its backward's
        # (with the loss's scale they were NaN in every parameter: round 5).
        grad_scale = torch.where(denominator > 0, scale, torch.zeros_like(scale))
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for a, b in _bounds(hidden.shape[0], chunks):
            h = hidden[a:b]
            g = nn.functional.linear(h, weight, bias).float()
            t = targets[a:b]
            valid = t != ignore_index
            picked = g.gather(1, t.clamp(min=0).unsqueeze(1)).squeeze(1)
            lse = _softmax_(g)  # g is the softmax now: one chunk of logits, no more
            total += (lse - picked)[valid].sum()
            if grad_h is None and grad_w is None and grad_b is None:
                continue
            # d loss / d logits = (softmax - onehot(target)) / denominator
            rows = torch.arange(t.shape[0], device=t.device)
            g[rows[valid], t[valid]] -= 1.0
            g[~valid] = 0.0
            g.mul_(grad_scale)
            gd = g.to(hidden.dtype)
            del g
            if grad_h is not None:
                torch.mm(gd, weight, out=grad_h[a:b])
            if grad_w is not None:
                grad_w.addmm_(gd.t(), h)
            if grad_b is not None:
                grad_b += gd.sum(0)
            del gd
        ctx.grads = (grad_h, grad_w, grad_b)
        return total * scale

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if ctx.grads is None:
            # The gradients were made once, in the forward, and handed to the
            # first backward: a second (retain_graph=True) has none to give.
            raise RuntimeError(
                "chunked_cross_entropy: its gradients were used by an earlier backward; a second backward through "
                "the same loss (retain_graph=True) is not supported: compute the loss again"
            )
        found = [None if g is None else g.mul_(grad.to(g.dtype)) for g in ctx.grads]
        ctx.grads = None
        return found[0], found[1], found[2], None, None, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    chunks: int = 16,
    ignore_index: int = -100,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """``cross_entropy(linear(hidden, weight, bias).float(), targets)`` in
    ``chunks`` chunks of tokens, never holding more than one chunk's logits.

    The mean over the targets that are not ``ignore_index`` (as
    ``torch.nn.functional.cross_entropy``), or the sum over ``num_items_in_batch``
    where given (as Hugging Face's loss with gradient accumulation). The logits
    are made in ``hidden``'s dtype and reduced in fp32, as Hugging Face's
    ``ForCausalLMLoss`` does. The gradients are made in the forward, chunk by
    chunk, and scaled by the loss's gradient in the backward: the gradients
    of the hidden states and the weight (their size) are held from the forward
    to the backward, which in training follows at once. Equal to the whole
    computation up to floating-point order (the chunks' sums, and the
    weight's gradient summed over chunks). Cost: three matrix products of the
    head's size, as the whole head; memory one chunk's logits (tokens / chunks
    x vocabulary, fp32) and the gradients. No double backward.

    Args:
        hidden: ``(tokens, hidden)`` (any leading shape is flattened).
        weight: the head's ``(vocabulary, hidden)`` weight.
        targets: ``tokens`` class indices.

    # Example

    >>> h = torch.randn(10, 8, requires_grad=True)
    >>> w = torch.randn(50, 8, requires_grad=True)
    >>> t = torch.randint(0, 50, (10,))
    >>> whole = torch.nn.functional.cross_entropy(h @ w.T, t)
    >>> torch.allclose(chunked_cross_entropy(h, w, t, chunks=3), whole, rtol=1e-6)
    True
    """
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive int, got {chunks!r}")
    h = hidden.reshape(-1, hidden.shape[-1])
    t = targets.reshape(-1).to(h.device)
    if t.shape[0] != h.shape[0]:
        raise ValueError(f"targets has {t.shape[0]} elements for {h.shape[0]} tokens of hidden {tuple(hidden.shape)}")
    counted = t != ignore_index
    vocabulary = weight.shape[0]
    out_of_range = counted & ((t < 0) | (t >= vocabulary))
    if bool(out_of_range.any()):
        # As cross_entropy raises (chunks gathered at the clamped index and
        # trained on a wrong target in silence).
        bad = int(t[out_of_range][0])
        raise IndexError(
            f"chunked_cross_entropy: target {bad} is out of bounds for {vocabulary} classes "
            f"(targets are class indices in [0, {vocabulary}) or ignore_index={ignore_index})"
        )
    if num_items_in_batch is None:
        denominator = counted.sum().to(torch.float32)
    else:
        denominator = torch.as_tensor(num_items_in_batch, device=h.device).to(torch.float32)
    out = _ChunkedLinearCrossEntropy.apply(h, weight, bias, t, chunks, ignore_index, denominator)
    return out  # type: ignore[no-any-return]


@dataclass(frozen=True)
class HeadOption:
    """One way to compute the head and the loss, as measured (see
    docs/model.md): ``chunks`` 1 is the model's own, whole."""

    chunks: int
    peak: int  # the most it holds above its input, forward and backward (bytes)
    ms: float  # its forward and backward
    loss: float  # the loss it computed on the profiled step
    #: Not measured (the device ran out of memory measuring it beside the
    #: step): its figures are extrapolated from the options that were.
    estimated: bool = False

    def describe(self) -> str:
        return "whole" if self.chunks == 1 else f"in {self.chunks} chunks of tokens"


#: Config fields with which Hugging Face models change the logits between the
#: head and the loss (Gemma 2's soft-capping, Cohere's scale, Granite's
#: divisor): chunks compute the plain head's loss, so such a model keeps its
#: own forward. On random weights the logits are too small for the loss to
#: show the difference, so the check of the loss alone would let them pass.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")

_DROP = ("labels", "logits_to_keep", "num_items_in_batch", "shift_labels", "ignore_index", "return_dict")


class CausalLMHead:
    """A Hugging Face causal LM's forward with the head and the loss computed
    whole or in chunks: ``base_model(...)`` to the last hidden states, then
    ``lm_head`` and ``loss_function`` as the model writes them (whole) or
    :func:`chunked_cross_entropy` (chunked: the output's ``logits`` is None).

    :meth:`of` returns None for a model that is not one (no ``lm_head`` Linear
    reading the base model's last hidden state, no ``loss_function``); a model
    whose own loss is not what the head and ``loss_function`` give on the
    profiled step (logit soft-capping, an auxiliary loss) is found out by
    :func:`remat.torch.apply`, which then leaves its forward alone."""

    def __init__(self, model: nn.Module, head: nn.Linear, base: nn.Module) -> None:
        self.model = model
        self.head = head
        self.base = base
        self._base_params = inspect.signature(base.forward).parameters
        self._takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in self._base_params.values())
        config = getattr(model, "config", None)
        found = [(k, getattr(config, k, None)) for k in _LOGIT_TRANSFORMS]
        #: Why chunks would not compute this model's loss (a config field that
        #: changes its logits), or None.
        self.transforms_logits = next(
            (f"its config's {k}={v!r} changes the logits before the loss" for k, v in found if v not in (None, 1, 1.0)),
            None,
        )

    @staticmethod
    def of(model: nn.Module) -> CausalLMHead | None:
        head = getattr(model, "lm_head", None)
        base = getattr(model, "base_model", None)
        loss = getattr(model, "loss_function", None)
        config = getattr(model, "config", None)
        if not isinstance(head, nn.Linear) or not isinstance(base, nn.Module) or base is model or loss is None:
            return None
        if getattr(config, "is_encoder_decoder", False) or head.out_features != getattr(config, "vocab_size", None):
            return None
        try:
            inspect.signature(type(model).forward).bind(None, input_ids=None, labels=None)
        except TypeError:
            return None
        return CausalLMHead(model, head, base)

    @staticmethod
    def own_loss(out: Any) -> Any:
        """The loss in the model's output (``ModelOutput.loss``)."""
        return getattr(out, "loss", None)

    @staticmethod
    def logits_of(out: Any) -> Any:
        return getattr(out, "logits", None)

    def learn(self, out: Any) -> str | None:
        """Nothing to learn from a profiled step: the output is a ModelOutput."""
        return None

    def split(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], torch.Tensor | None, dict[str, Any]] | None:
        """(the base model's arguments, labels, the loss's arguments), or None
        where the call must run as the model writes it (no labels, tuples asked
        for, an argument the base model does not take)."""
        try:
            bound = inspect.signature(original).bind(*args, **kwargs)
        except TypeError:
            return None
        named = dict(bound.arguments)
        extra = named.pop("kwargs", None) or {}
        named.update(extra)
        labels = named.get("labels")
        if labels is None or named.get("return_dict") is False:
            return None
        if named.get("logits_to_keep") not in (None, 0):
            return None
        # What Hugging Face's loss_function takes besides the logits and labels
        # (ignore_index was lost once the head was chunked: round 5).
        loss_kwargs = {
            k: named[k] for k in ("num_items_in_batch", "shift_labels", "ignore_index") if named.get(k) is not None
        }
        base = {k: v for k, v in named.items() if k not in _DROP}
        if not self._takes_any and any(k not in self._base_params for k in base):
            return None
        return base, labels, loss_kwargs

    def loss(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        chunks: int,
        loss_kwargs: dict[str, Any],
        hooks: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the loss, the logits or None) from the last hidden states; the head
        called as a module (its hooks fire) where ``hooks``, else as a function
        (remat's own measuring runs)."""
        if chunks == 1:
            logits = self.head(hidden) if hooks else nn.functional.linear(hidden, self.head.weight, self.head.bias)
            vocab = self.head.out_features
            return self.model.loss_function(logits=logits, labels=labels, vocab_size=vocab, **loss_kwargs), logits
        ignore_index = int(loss_kwargs.get("ignore_index", -100))
        shifted = loss_kwargs.get("shift_labels")
        if shifted is None:
            shifted = nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
        loss = chunked_cross_entropy(
            hidden,
            self.head.weight,
            shifted,
            bias=self.head.bias,
            chunks=chunks,
            ignore_index=ignore_index,
            num_items_in_batch=loss_kwargs.get("num_items_in_batch"),
        )
        return loss, None

    def forward(
        self, base_args: dict[str, Any], labels: torch.Tensor, loss_kwargs: dict[str, Any], chunks: Callable[[], int]
    ) -> Any:
        """The model's output; ``chunks()`` is asked once the base model has
        run (the plan for this input is known by then)."""
        from transformers.modeling_outputs import CausalLMOutputWithPast

        out = self.base(**base_args)
        loss, logits = self.loss(out[0], labels, chunks(), loss_kwargs)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=getattr(out, "past_key_values", None),
            hidden_states=getattr(out, "hidden_states", None),
            attentions=getattr(out, "attentions", None),
        )


@dataclass(frozen=True)
class LossHead:
    """The head and the loss of a model that is not a Hugging Face causal LM,
    named for :func:`remat.torch.apply` (``head=``), so that its plans may
    compute them in chunks of tokens as they do a causal LM's.

    The model's forward must take the targets as an argument and compute, in
    the same forward, ``loss = cross_entropy(head(hidden), targets)`` (any
    reshaping between, the mean over the targets that are not
    ``ignore_index``), returning the loss alone, in a tuple or list, or in a
    dict or an object with a ``loss`` field (nanoGPT's ``forward(idx,
    targets)`` returning ``(logits, loss)`` is such a model). When a plan
    chunks, remat runs the forward up to the head, computes the loss with
    :func:`chunked_cross_entropy` from the head's input, and returns the
    model's output with the loss in its place and ``None`` where the logits
    were. The first training step checks that this gives the model's own
    loss; where it does not (a loss that is not that cross-entropy, logits
    changed before it), the model keeps its own forward and ``explain()``
    says why.

    Args:
        head: the ``nn.Linear`` that makes the logits.
        targets: the name of the model's forward argument holding the class
            indices (any shape with the logits' leading dimensions).
        ignore_index: the target value the loss skips.
        shift: the targets are the inputs, and the loss compares position i's
            logits with position i + 1's target (as Hugging Face's causal
            loss does); False (the default): targets line up with the logits.

    # Example

    >>> import torch, remat.torch
    >>> class Tiny(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         layer = lambda: torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    ...         self.blocks = torch.nn.ModuleList(layer() for _ in range(4))
    ...         self.out = torch.nn.Linear(8, 500)
    ...     def forward(self, x, targets):
    ...         for b in self.blocks:
    ...             x = b(x)
    ...         logits = self.out(x)
    ...         return logits, torch.nn.functional.cross_entropy(logits.view(-1, 500), targets.view(-1))
    >>> model = Tiny()
    >>> plan = remat.torch.apply(model, memory="30%", head=remat.torch.LossHead(model.out))
    >>> x, t = torch.randn(4, 64, 8), torch.randint(0, 500, (4, 64))
    >>> for _ in range(3):  # the first two measure: a plan that chunks runs from the third
    ...     logits, loss = model(x, targets=t)
    ...     loss.backward()
    >>> plan.loss_chunks, logits
    (4, None)
    """

    head: nn.Linear
    targets: str = "targets"
    ignore_index: int = -100
    shift: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.head, nn.Linear):
            raise TypeError(
                f"LossHead.head must be the nn.Linear that makes the logits, got {type(self.head).__name__}"
            )
        if not isinstance(self.targets, str) or not self.targets:
            raise TypeError(f"LossHead.targets must name the forward's argument, got {self.targets!r}")


class _Stop(Exception):
    """Raised by the head's pre-hook to end the model's forward at the head."""

    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__("remat: the model's forward stopped at its head")
        self.hidden = hidden


class UserHead:
    """A :class:`LossHead` as :func:`remat.torch.apply` runs it (the interface
    of :class:`CausalLMHead`): the model's forward up to the head, then the
    loss whole or in chunks, the output rebuilt with the loss in its place."""

    transforms_logits: str | None = None

    def __init__(self, model: nn.Module, spec: LossHead) -> None:
        self.model = model
        self.spec = spec
        self.head = spec.head
        #: How the output holds the loss: (kind, where the loss is, its length
        #: or keys); the rest is None where a plan chunks.
        self._where: tuple[str, Any, Any] | None = None

    def own_loss(self, out: Any) -> Any:
        if isinstance(out, torch.Tensor):
            return out
        if isinstance(out, dict):
            return out.get("loss")
        if isinstance(out, (tuple, list)):
            scalars = [v for v in out if isinstance(v, torch.Tensor) and v.numel() == 1]
            return scalars[0] if len(scalars) == 1 else None
        return getattr(out, "loss", None)

    def logits_of(self, out: Any) -> Any:
        if isinstance(out, (tuple, list)):
            return next((v for v in out if isinstance(v, torch.Tensor) and v.dim() >= 2), None)
        if isinstance(out, dict):
            return out.get("logits")
        return getattr(out, "logits", None)

    def learn(self, out: Any) -> str | None:
        """Where the profiled step's output holds the loss and the logits, for
        :meth:`forward` to rebuild it; or why it cannot be rebuilt (an output
        with more in it than the loss and the logits)."""
        loss, logits = self.own_loss(out), self.logits_of(out)
        if isinstance(out, torch.Tensor):
            self._where = ("tensor", None, None)
            return None
        if isinstance(out, (tuple, list)):
            at_loss = next((i for i, v in enumerate(out) if v is loss), None)
            at_logits = next((i for i, v in enumerate(out) if v is logits), None) if logits is not None else None
            if at_loss is None or any(v is not None and i not in (at_loss, at_logits) for i, v in enumerate(out)):
                return f"the model returns a {type(out).__name__} with more than its loss and logits"
            self._where = (type(out).__name__, at_loss, len(out))
            return None
        if type(out) is dict and "loss" in out:
            key = next((k for k, v in out.items() if v is logits), None) if logits is not None else None
            if any(v is not None and k not in ("loss", key) for k, v in out.items()):
                return "the model returns a dict with more than its loss and logits"
            self._where = ("dict", "loss", list(out))
            return None
        return f"the model returns a {type(out).__name__}, which remat cannot rebuild with the loss in chunks"

    def split(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], torch.Tensor | None, dict[str, Any]] | None:
        try:
            bound = inspect.signature(original).bind(*args, **kwargs)
        except TypeError:
            return None
        named = dict(bound.arguments)
        targets = named.get(self.spec.targets)
        if targets is None:
            targets = (named.get("kwargs") or {}).get(self.spec.targets)
        if not isinstance(targets, torch.Tensor):
            return None
        return {"args": args, "kwargs": kwargs, "original": original}, targets, {}

    def loss(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        chunks: int,
        loss_kwargs: dict[str, Any],
        hooks: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        spec = self.spec
        targets = labels
        if spec.shift:
            targets = nn.functional.pad(labels, (0, 1), value=spec.ignore_index)[..., 1:]
        if chunks == 1:
            logits = self.head(hidden) if hooks else nn.functional.linear(hidden, self.head.weight, self.head.bias)
            flat = logits.reshape(-1, logits.shape[-1]).float()
            loss = nn.functional.cross_entropy(flat, targets.reshape(-1), ignore_index=spec.ignore_index)
            return loss, logits
        loss = chunked_cross_entropy(
            hidden, self.head.weight, targets, bias=self.head.bias, chunks=chunks, ignore_index=spec.ignore_index
        )
        return loss, None

    def forward(
        self, base_args: dict[str, Any], labels: torch.Tensor, loss_kwargs: dict[str, Any], chunks: Callable[[], int]
    ) -> Any:
        """The model's forward to its head; there, where ``chunks()`` (asked
        then: the stack has run) is above 1, the loss in chunks and the output
        rebuilt; else the model's forward to the end."""
        asked: list[int] = []

        def stop(_m: nn.Module, args: tuple[Any, ...]) -> None:
            asked.append(chunks())
            if asked[-1] > 1:
                raise _Stop(args[0])

        handle = self.head.register_forward_pre_hook(stop)
        try:
            return base_args["original"](*base_args["args"], **base_args["kwargs"])
        except _Stop as s:
            hidden = s.hidden
        finally:
            handle.remove()
        loss, _ = self.loss(hidden, labels, asked[-1], loss_kwargs)
        return self._rebuild(loss)

    def _rebuild(self, loss: torch.Tensor) -> Any:
        kind, at_loss, shape = self._where or ("tensor", None, None)
        if kind == "tensor":
            return loss
        if kind in ("tuple", "list"):
            values: list[Any] = [None] * shape
            values[at_loss] = loss  # the logits (and any None) stay None
            return tuple(values) if kind == "tuple" else values
        return {k: (loss if k == "loss" else None) for k in shape}


def measure_options(
    head: CausalLMHead | UserHead,
    hidden: torch.Tensor,
    labels: torch.Tensor,
    loss_kwargs: dict[str, Any],
    meter: Any,
    chunks: Sequence[int] = CHUNKS,
    whole_grad: list[torch.Tensor] | None = None,
) -> list[HeadOption]:
    """Each loss option on the profiled step's last hidden states, forward and
    backward (to the hidden states and the head's weight, as the step's
    backward does), its peak above its input and its time: ``meter`` is
    :class:`remat.torch.profile._Meter` on the step's device. The gradient
    of the hidden states under the head whole is appended to ``whole_grad``
    where given (to check it against the model's own).

    Where measuring the head whole runs out of device memory (on a GPU, it
    runs beside the step's own head), its figures are extrapolated from two
    chunked options' (:attr:`HeadOption.estimated`); ``whole_grad`` is then
    left empty."""
    tokens = hidden.numel() // hidden.shape[-1]
    found: list[HeadOption] = []
    # The backward accumulates into the head's .grad, as the step's does (the
    # meter leaves parameter gradients out, as the budget does): the user's
    # gradients are put aside meanwhile and put back after.
    params = [p for p in head.head.parameters() if p.requires_grad]
    kept = [p.grad for p in params]
    try:
        ks = sorted({c for c in chunks if c == 1 or tokens // c >= MIN_TOKENS})
        whole_failed = False
        for k in ks:
            try:
                # The first run warms up (the allocator's cache, lazy kernels).
                peak, best, value = _measure(
                    head, hidden, labels, loss_kwargs, meter, params, k, 1 if found else 2, whole_grad
                )
            except torch.OutOfMemoryError:
                # On a GPU the head whole, measured beside the step's own
                # (whole) head, may not fit where the step does: measured in
                # parts instead (below).
                if k != 1:
                    raise
                whole_failed = True
                continue
            found.append(HeadOption(k, peak, best, value))
        if whole_failed:
            found.insert(0, _whole_from_rows(head, hidden, labels, loss_kwargs, meter, params, found[0].loss))
    finally:
        for p, g in zip(params, kept):
            p.grad = g
    return found


def _measure(
    head: CausalLMHead | UserHead,
    hidden: torch.Tensor,
    labels: torch.Tensor,
    loss_kwargs: dict[str, Any],
    meter: Any,
    params: list[torch.Tensor],
    k: int,
    runs: int,
    whole_grad: list[torch.Tensor] | None = None,
) -> tuple[int, float, float]:
    """(peak, least time, loss) of the head and loss in ``k`` chunks, forward
    and backward, over ``runs`` runs (the peak of the last)."""
    best, peak, value = math.inf, 0, math.nan
    for _ in range(runs):
        for p in params:
            p.grad = None
        h = hidden.detach().requires_grad_()
        with meter.window():
            with meter.timed():
                loss = head.loss(h, labels, k, loss_kwargs, hooks=False)[0]  # logits dropped, as a loop does
                loss.backward()
            mark = meter.mark()
        if k == 1 and whole_grad is not None and h.grad is not None:
            whole_grad[:] = [h.grad]
        del h
        value = float(loss.detach())
        peak = meter.value(mark)
        best = min(best, meter.ms)
    return peak, best, value


def _whole_from_rows(
    head: CausalLMHead | UserHead,
    hidden: torch.Tensor,
    labels: torch.Tensor,
    loss_kwargs: dict[str, Any],
    meter: Any,
    params: list[torch.Tensor],
    loss: float,
) -> HeadOption:
    """The head whole where measuring it on the whole batch ran out of device
    memory: measured on its first r1 and r2 rows (an eighth and a quarter of
    the batch, at least 1 and 2) and extrapolated along the line through the
    two, peak and time (both are linear in the tokens: the logits, their fp32
    copy and their gradients, and the products that make them). ``loss`` is a
    chunked option's (the same loss, computed on every row)."""
    rows = hidden.shape[0]
    if hidden.dim() < 3 or rows < 3:
        raise torch.OutOfMemoryError(
            f"remat: measuring the head and loss whole on {rows} sequences ran out of device memory, and fewer than "
            "3 sequences cannot be measured in parts; lower the batch, or profile with apply(..., example_inputs=) "
            "on a smaller batch"
        )
    torch.cuda.empty_cache()  # what the whole batch's attempt left in the allocator's cache
    r1 = max(1, rows // 8)
    r2 = max(2 * r1, rows // 4)
    figures = [_measure(head, hidden[:r], labels[:r], loss_kwargs, meter, params, 1, 2)[:2] for r in (r1, r2)]
    (p1, t1), (p2, t2) = figures
    grow = (rows - r1) / (r2 - r1)
    return HeadOption(1, math.ceil(p1 + (p2 - p1) * grow), t1 + (t2 - t1) * grow, loss, estimated=True)
