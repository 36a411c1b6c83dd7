"""``max_batch(model, make_inputs, memory)``: the largest batch (or sequence
length, or any integer size) whose remat plan fits a memory budget and really
trains there, with its predicted step time.

What it guarantees: at the size it returns, a fresh
``remat.torch.apply(model, memory=memory, ...)`` trained three steps without
:class:`remat.InfeasibleError` (nor, on a GPU, running out of memory), and a
fourth step's measured peak was at most ``memory`` (the CPU allocator's events,
:class:`remat.torch.memory.AllocatorTrace`, parameter gradients excluded; on a
GPU ``torch.cuda.max_memory_allocated()`` above what the step started with,
parameters and their gradients allocated). The size just above it was tried
and did not fit, unless the search reached ``limit``. Fitting is assumed to be
monotone in the size (a larger batch needs no less memory): the search does
not look past the first size that failed.

What it costs: each size tried is a fresh plan, so a fresh profile of the
stack, and four training steps at that size: ``O(log limit)`` probes in all
(the doubling, then the bisection; 12 from 1 to 37). The model is left as it
was given: each plan is removed after its probe, parameter gradients are set
to None, no optimizer step runs (the parameters are unchanged), and the
global random number generators are restored.

:func:`largest_fitting` is the same search over any predicate, for measuring
a baseline (Hugging Face's gradient checkpointing, plain training) the same
way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import remat

from .apply import apply
from .budget import auto_budget, check_memory
from .budget import format_bytes as _fmt
from .memory import AllocatorTrace

__all__ = ["Capacity", "largest_fitting", "max_batch"]

_log = logging.getLogger("remat.torch")

#: Training steps each probe runs before the measured one: the first profiles
#: and measures the parts outside the stack, the second runs the final plan.
_WARMUP_STEPS = 3

_SHARE = re.compile(r"%\s*$")

FITS = "fits"
OUT_OF_MEMORY = "out of memory"


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value!r}")
    return value


def largest_fitting(fits: Callable[[int], bool], start: int = 1, limit: int = 65536) -> int:
    """The largest ``n`` in ``[start, limit]`` with ``fits(n)``, assuming that
    whatever fits, every smaller size fits too; 0 when ``start`` does not fit.

    ``n`` doubles from ``start`` until it does not fit or reaches ``limit``,
    then the search bisects between the last size that fit and the first that
    did not. Each size is asked about once: at most
    ``2 * ceil(log2(limit / start)) + 1`` calls (12 for ``lambda n: n <= 37``
    from 1)::

        largest_fitting(lambda n: n <= 37)          # 37
        largest_fitting(lambda n: n <= 37, start=64)  # 0
        largest_fitting(lambda n: True, limit=100)  # 100

    Raises:
        TypeError: ``fits`` is not callable, or ``start`` or ``limit`` is not an int.
        ValueError: ``start`` below 1, or ``limit`` below ``start``.
    """
    if not callable(fits):
        raise TypeError(f"fits must be a callable taking a size and returning a bool, got {fits!r}")
    start = _positive_int("start", start)
    limit = _positive_int("limit", limit)
    if limit < start:
        raise ValueError(f"limit must be at least start={start}, got {limit!r}")
    if not fits(start):
        return 0
    good, bad = start, None
    while good < limit:
        n = min(2 * good, limit)
        if fits(n):
            good = n
        else:
            bad = n
            break
    if bad is None:
        return good  # reached the limit
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


@dataclass(frozen=True)
class Capacity:
    """What :func:`max_batch` found.

    Attributes:
        size: the largest size that fits (0: not even ``start``).
        memory: the budget in bytes.
        predicted_peak: the plan's predicted peak at ``size`` in bytes
            (:attr:`AppliedPlan.peak_memory`); None when nothing fits.
        measured_peak: the peak measured on a training step at ``size``, in
            bytes (parameter gradients excluded); None when nothing fits.
        predicted_step_time: the plan's predicted step time at ``size``, in
            the chain's unit, milliseconds (the schedule's makespan: the
            blocks' forwards, recomputations and backwards, and the head and
            loss); None when nothing fits.
        explain: :meth:`AppliedPlan.explain` at ``size`` ("" when nothing fits).
        tried: each size probed, in order, with its outcome: ``"fits"``,
            ``"infeasible: <smallest budget>"``, ``"measured <peak> above the
            budget"`` or ``"out of memory"``.
    """

    size: int
    memory: int
    predicted_peak: int | None
    measured_peak: int | None
    predicted_step_time: float | None
    explain: str
    tried: tuple[tuple[int, str], ...]

    def __str__(self) -> str:
        probes = ", ".join(f"{n}: {outcome}" for n, outcome in self.tried)
        if self.size == 0:
            return f"nothing fits in {_fmt(self.memory)}; tried {probes}"
        lines = [
            f"largest size within {_fmt(self.memory)} ({self.memory} bytes): {self.size}",
            f"peak: measured {_fmt(self.measured_peak or 0)}, predicted {_fmt(self.predicted_peak or 0)}",
            f"predicted step time: {self.predicted_step_time or 0:.3f} ms",
            f"tried: {probes}",
            self.explain,
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Probe:
    fits: bool
    outcome: str
    predicted_peak: int | None = None
    measured_peak: int | None = None
    step_time: float | None = None
    explain: str = ""


def _hf_loss(model: nn.Module, inputs: Mapping[str, Any]) -> torch.Tensor:
    out = model(**inputs)
    value = getattr(out, "loss", None)
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"max_batch: model(**inputs) returned {type(out).__name__} with no .loss tensor (loss={value!r}); "
            "pass loss=lambda model, inputs: ... returning the loss to train on (or labels in make_inputs)"
        )
    return value


def _budget(model: nn.Module, memory: object, apply_kwargs: Mapping[str, Any]) -> int:
    """``memory`` in bytes: a share is refused (it changes with the size),
    ``"auto"`` is the GPU's figure now, before any probe."""
    if isinstance(memory, str) and _SHARE.search(memory):
        raise ValueError(
            f"max_batch: memory={memory!r} is a share of storing everything, which grows with the size searched; "
            "pass the budget as bytes or a size such as '2GiB' (or 'auto' on a GPU)"
        )
    if memory == "auto":
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        return auto_budget(model, device, 0, apply_kwargs.get("optimizer_state_bytes"))[0]
    checked = check_memory(memory, "max_batch", shares=False)
    assert isinstance(checked, int)
    return checked


def _cuda_device(model: nn.Module) -> torch.device | None:
    return next((p.device for p in model.parameters() if p.is_cuda), None)


class _Prober:
    """Probes one size at a time on a fresh plan, leaving the model as it was."""

    def __init__(
        self,
        model: nn.Module,
        make_inputs: Callable[[int], Mapping[str, Any]],
        memory: int,
        loss: Callable[[nn.Module, Mapping[str, Any]], torch.Tensor],
        apply_kwargs: dict[str, Any],
    ) -> None:
        self.model = model
        self.make_inputs = make_inputs
        self.memory = memory
        self.loss = loss
        self.apply_kwargs = apply_kwargs
        self.device = _cuda_device(model)
        self.probes: dict[int, _Probe] = {}
        self.order: list[int] = []

    def fits(self, n: int) -> bool:
        found = self.probes.get(n)
        if found is None:
            found = self.probes[n] = self._probe(n)
            self.order.append(n)
            _log.info("remat.torch.max_batch: size %d: %s", n, found.outcome)
        return found.fits

    def _step(self, inputs: Mapping[str, Any]) -> None:
        value = self.loss(self.model, inputs)
        if not isinstance(value, torch.Tensor) or not value.requires_grad:
            raise TypeError(
                f"max_batch: the loss must be a tensor that requires grad, got {type(value).__name__}"
                f"{'' if not isinstance(value, torch.Tensor) else ' without grad'}"
            )
        value.backward()  # type: ignore[no-untyped-call, unused-ignore]

    def _measured_step(self, inputs: Mapping[str, Any]) -> int:
        if self.device is not None:
            # Parameters and their gradients allocated before the step (zeroed,
            # not freed): the peak counts activations, workspace and the
            # gradients' flow, as the budget does.
            self.model.zero_grad(set_to_none=False)
            torch.cuda.synchronize(self.device)
            base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._step(inputs)
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.max_memory_allocated(self.device)) - base
        self.model.zero_grad(set_to_none=True)
        with AllocatorTrace() as trace:
            trace.exclude_parameter_gradients(self.model.parameters())
            self._step(inputs)
            end = trace.mark()
        return trace.peak(0, end)

    def _probe(self, n: int) -> _Probe:
        inputs = self.make_inputs(n)
        if not isinstance(inputs, Mapping):
            raise TypeError(
                f"max_batch: make_inputs({n}) must return a dict of the model's keyword arguments, "
                f"got {type(inputs).__name__}"
            )
        plan = apply(self.model, memory=self.memory, **self.apply_kwargs)
        found: _Probe | None = None
        try:
            try:
                for _ in range(_WARMUP_STEPS):
                    self.model.zero_grad(set_to_none=True)
                    self._step(inputs)
                peak = self._measured_step(inputs)
            except remat.InfeasibleError as e:
                least = getattr(e, "min_budget", None)
                found = _Probe(False, f"infeasible: {_fmt(least) if least is not None else 'unknown'}")
            except torch.cuda.OutOfMemoryError:
                found = _Probe(False, OUT_OF_MEMORY)
            if found is None:
                schedule = plan.schedule
                predicted = plan.peak_memory
                if peak > self.memory:
                    outcome = f"measured {_fmt(peak)} ({peak} bytes) above the budget"
                    found = _Probe(False, outcome, predicted, peak)
                else:
                    step_time = float(schedule.makespan) if schedule is not None else None
                    found = _Probe(True, FITS, predicted, peak, step_time, plan.explain())
        finally:
            # Leaves the model as it was given, also when the step raised.
            plan.remove()
            self.model.zero_grad(set_to_none=True)
            del inputs
            if self.device is not None:
                torch.cuda.empty_cache()
        assert found is not None
        return found


def max_batch(
    model: nn.Module,
    make_inputs: Callable[[int], Mapping[str, Any]],
    memory: int | str,
    *,
    loss: Callable[[nn.Module, Mapping[str, Any]], torch.Tensor] | None = None,
    start: int = 1,
    limit: int = 65536,
    **apply_kwargs: Any,
) -> Capacity:
    """The largest size ``n`` whose remat plan fits ``memory`` and really
    trains within it, searched by :func:`largest_fitting`: ``n`` doubles from
    ``start`` until it does not fit or reaches ``limit``, then bisects.

    A size fits when a fresh ``remat.torch.apply(model, memory=memory,
    **apply_kwargs)`` trains three steps on ``make_inputs(n)`` without
    :class:`remat.InfeasibleError` (or, on a GPU, running out of memory), and a
    fourth step's measured peak is at most ``memory`` (see the module's
    docstring for how it is measured). Each probe profiles afresh: the search
    takes ``O(log limit)`` probes of four steps each; each is logged at INFO on
    the ``"remat.torch"`` logger.

    Example::

        import torch, transformers, remat.torch

        config = transformers.GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=512, n_positions=128)
        model = transformers.GPT2LMHeadModel(config)

        def make_inputs(n):                 # n: the batch; a sequence length works the same way
            ids = torch.randint(0, 512, (n, 64))
            return {"input_ids": ids, "labels": ids}

        found = remat.torch.max_batch(model, make_inputs, "8MiB", limit=64)
        print(found)                        # the size, its peaks, its predicted step time, the plan
        found.size, found.measured_peak, found.predicted_step_time

    Args:
        model: the model, left as it was given (no plan, no gradients, the
            same parameters).
        make_inputs: ``make_inputs(n)`` returns the keyword arguments of one
            training call of size ``n`` (a batch of ``n``, or a sequence of
            ``n`` tokens: it decides what ``n`` means).
        memory: the budget, as :func:`apply` takes it: bytes, a size
            (``"8GiB"``), or ``"auto"`` on a GPU (the GPU's figure, computed
            once before the search). Not a share of storing everything
            (``"60%"``), which changes with ``n``.
        loss: ``loss(model, inputs)`` returns the loss to train on; by default
            ``model(**inputs).loss`` (Hugging Face models given ``labels``).
        start: the first size tried (at least 1).
        limit: the largest size tried.
        **apply_kwargs: passed to :func:`apply` (``policies=``, ``compile=``,
            ``algorithm=`` ...).

    Returns:
        :class:`Capacity`: the size (0 when not even ``start`` fits), its
        predicted and measured peaks, its predicted step time, its plan's
        ``explain()``, and every size tried with its outcome.

    Raises:
        TypeError: ``make_inputs`` or ``loss`` is not callable, or
            ``make_inputs`` returns no dict, or the model's output has no
            ``.loss`` and no ``loss=`` was given.
        ValueError: a bad ``memory`` (a share among them), ``start`` below 1,
            or ``limit`` below ``start``; and what :func:`apply` raises for
            its arguments.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"max_batch: model must be an nn.Module, got {type(model).__name__}")
    if not callable(make_inputs):
        raise TypeError(
            f"max_batch: make_inputs must be a callable n -> dict of keyword arguments, got {make_inputs!r}"
        )
    if loss is not None and not callable(loss):
        raise TypeError(f"max_batch: loss must be a callable (model, inputs) -> loss tensor, got {loss!r}")
    start = _positive_int("start", start)
    limit = _positive_int("limit", limit)
    if limit < start:
        raise ValueError(f"max_batch: limit must be at least start={start}, got {limit!r}")
    if "memory" in apply_kwargs:
        raise TypeError("max_batch: memory is given twice")
    budget = _budget(model, memory, apply_kwargs)
    prober = _Prober(model, make_inputs, budget, loss if loss is not None else _hf_loss, apply_kwargs)
    device = prober.device
    devices = [device] if device is not None else []
    # The probes' steps draw random numbers (dropout): the user's generators
    # are put back as they were.
    with torch.random.fork_rng(devices=devices, device_type=device.type if device is not None else "cuda"):
        size = largest_fitting(prober.fits, start, limit)
    tried = tuple((n, prober.probes[n].outcome) for n in prober.order)
    best = prober.probes.get(size) if size else None
    return Capacity(
        size=size,
        memory=budget,
        predicted_peak=best.predicted_peak if best else None,
        measured_peak=best.measured_peak if best else None,
        predicted_step_time=best.step_time if best else None,
        explain=best.explain if best else "",
        tried=tried,
    )
