"""Running a remat schedule on PyTorch modules, inside one autograd.Function.

A schedule is a list of operations over stages 1..L and the loss L+1 (the
model, docs/model.md):

- ``F_ck l`` / ``F_none l``: run stage l without autograd, keep its output a^l;
  ``F_none`` also drops its input a^{l-1}.
- ``F_all l``: run stage l with autograd on a detached copy of its input, so
  that what autograd saves (abar^l) belongs to this stage alone.
- ``B l``: backpropagate delta^l through the recorded stage l, which
  accumulates the parameters' gradients into ``.grad`` and gives delta^{l-1};
  drop abar^l, delta^l and a plain a^{l-1}.

:class:`_ScheduleFunction` runs the operations before ``B^{L+1}`` in its
``forward`` and returns a^L; the criterion runs outside; when the gradient of
a^L arrives, its ``backward`` runs the rest. The loss stage's own operations
are therefore bookkeeping only.

Why the results equal the plain module's:

- RNG: the first run of stage l in a step draws from the global generator in
  stage order, exactly as the plain forward does; its RNG state (CPU, and the
  CUDA device of the input) is saved then, and every later run of stage l
  (a recomputation) restores it inside ``torch.random.fork_rng``, so dropout
  masks repeat and the global generator ends where the plain forward leaves it.
  This is what ``torch.utils.checkpoint`` does per checkpointed segment.
- Buffers: a recomputation copies the stage's buffers first and puts them back
  after, so BatchNorm running statistics (and ``num_batches_tracked``) move
  once per step, by the first run (``torch.utils.checkpoint`` does not do
  this: its recomputation updates them a second time). In training mode BatchNorm normalises with the
  batch's statistics, so the recomputed output is the same.
- Autocast: the autocast state of the caller's forward is captured and
  re-entered for the forwards that run in ``backward`` (autograd runs
  ``backward`` outside autocast).
- Gradients: the same kernels run on the same values, so gradients are
  bit-identical where the kernels are deterministic. Parameter gradients are
  accumulated into ``.grad`` by an inner ``torch.autograd.backward`` per stage,
  as reentrant ``torch.utils.checkpoint`` does, so use ``loss.backward()``
  (``torch.autograd.grad`` with respect to the parameters does not see them).

Memory: after every operation before ``B^{L+1}`` the runner holds exactly the
bytes the simulator predicts (tested operation by operation with
:class:`~remat.torch.LiveBytes`). Two things differ, both outside the chain:
the criterion's own tensors, and delta^L, which autograd keeps alive until
the Function's ``backward`` (the whole rest of the schedule) returns, where
the model frees it after ``B^L``. The caller's reference to the input batch
also keeps a^0 alive after an ``F_none^1``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from .profile import run_stage

__all__ = ["ScheduleRunner", "autocast_enabled", "run_schedule"]

Op = tuple[str, int]


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` ("cpu" or "cuda"), on torch >= 2.1."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: one function per device type
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return bool(torch.is_autocast_enabled())


def _autocast_dtype(device_type: str) -> torch.dtype:
    try:
        return torch.get_autocast_dtype(device_type)
    except AttributeError:  # torch < 2.4
        if device_type == "cpu":
            return torch.get_autocast_cpu_dtype()
        return torch.get_autocast_gpu_dtype()


def _autocast_state() -> list[tuple[str, torch.dtype]]:
    """The device types for which autocast is on now, with their dtypes."""
    return [(dev, _autocast_dtype(dev)) for dev in ("cpu", "cuda") if autocast_enabled(dev)]


@contextlib.contextmanager
def _autocast(state: list[tuple[str, torch.dtype]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for dev, dtype in state:
            stack.enter_context(torch.autocast(device_type=dev, dtype=dtype))
        yield


class _Saved:
    """abar^l: the detached input the stage ran on (a leaf, collecting delta^{l-1})
    and its output with the autograd graph; ``value`` is a^l without the graph."""

    __slots__ = ("inp", "out", "value")

    def __init__(self, inp: torch.Tensor, out: torch.Tensor) -> None:
        self.inp = inp
        self.out = out
        self.value = out.detach()


class ScheduleRunner:
    """The state of one training step under a schedule.

    Holds, per stage, nothing, a plain a^l or an abar^l, exactly as the
    simulator does, plus the running gradient. One instance serves one forward
    and its backward; each operation costs the stage's forward or backward and
    O(1) bookkeeping (a recomputation also copies the stage's buffers and
    restores a CPU/CUDA RNG state).
    """

    def __init__(
        self,
        stages: Sequence[nn.Module],
        operations: Sequence[Op],
        *,
        preserve_rng: bool = True,
        on_op: Callable[[str, int], None] | None = None,
    ) -> None:
        self.stages = stages
        self.on_op = on_op
        self.L = len(stages)
        self.ops = list(operations)
        self.preserve_rng = preserve_rng
        # Stages the schedule runs more than once: only their RNG state is saved
        # at the first run (a stage run once replays nothing; on a GPU the capture
        # costs about 50 us of Python a stage, measured on an H200).
        runs = [0] * (self.L + 2)
        for kind, l in self.ops:
            if kind != "B" and 1 <= l <= self.L + 1:
                runs[l] += 1
        self.rerun = [n > 1 for n in runs]
        self.held: list[torch.Tensor | _Saved | None] = [None] * (self.L + 2)
        self.ran = [False] * (self.L + 1)
        self.rng: list[tuple[torch.Tensor, torch.Tensor | None] | None] = [None] * (self.L + 1)
        self.delta: torch.Tensor | None = None
        self.input_requires_grad = False
        self.autocast: list[tuple[str, torch.dtype]] = []
        self.cuda_device: int | None = None
        self.pos = 0
        try:
            self.split = self.ops.index(("B", self.L + 1))
        except ValueError:
            raise ValueError(f"the schedule has no B^{self.L + 1} (the loss's backward)") from None

    def _value(self, l: int) -> torch.Tensor:
        h = self.held[l]
        if h is None:
            raise RuntimeError(f"a^{l} is not in memory; the schedule is invalid for this chain")
        return h.value if isinstance(h, _Saved) else h

    def _rng_get(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        cuda = None if self.cuda_device is None else torch.cuda.get_rng_state(self.cuda_device)
        return torch.get_rng_state(), cuda

    @contextlib.contextmanager
    def _stage_context(self, l: int) -> Iterator[None]:
        """Context of a run of stage l: the first run records the RNG state; a
        rerun replays it and leaves RNG and buffers as they were."""
        if not self.ran[l]:
            self.ran[l] = True
            if self.preserve_rng and self.rerun[l]:
                self.rng[l] = self._rng_get()
            yield
            return
        stage = self.stages[l - 1]
        buffers = [(b, b.detach().clone()) for b in stage.buffers()]
        devices = [] if self.cuda_device is None else [self.cuda_device]
        with torch.random.fork_rng(devices=devices, enabled=self.preserve_rng):
            state = self.rng[l]
            if state is not None:
                torch.set_rng_state(state[0])
                if state[1] is not None and self.cuda_device is not None:
                    torch.cuda.set_rng_state(state[1], self.cuda_device)
            try:
                yield
            finally:
                # Through .data: the restore must not bump the buffers' version
                # counters, which the graph this run recorded checks in backward
                # (BatchNorm saves its running statistics).
                for b, saved in buffers:
                    b.data.copy_(saved)

    def _forward(self, kind: str, l: int) -> None:
        if l == self.L + 1:  # the loss runs outside; keep the bookkeeping only
            self._value(self.L)
            self.held[l] = self.held[self.L]
            return
        x = self._value(l - 1)
        with self._stage_context(l), _autocast(self.autocast):
            if kind == "F_all":
                grad_in = self.input_requires_grad if l == 1 else x.is_floating_point()
                inp = x.detach().requires_grad_(grad_in)
                with torch.enable_grad():
                    self.held[l] = _Saved(inp, run_stage(self.stages, l - 1, inp))
            else:
                with torch.no_grad():
                    self.held[l] = run_stage(self.stages, l - 1, x)
        if kind == "F_none":
            self.held[l - 1] = None

    def _backward(self, l: int) -> None:
        if l == self.L + 1:
            self.held[l] = None
            if not isinstance(self.held[self.L], _Saved):
                self.held[self.L] = None
            return
        h = self.held[l]
        if not isinstance(h, _Saved):
            raise RuntimeError(f"abar^{l} is not in memory; the schedule is invalid for this chain")
        delta, self.delta = self.delta, None
        if delta is not None and h.out.requires_grad:
            with torch.enable_grad():
                torch.autograd.backward(h.out, delta)
            self.delta = h.inp.grad
        self.held[l] = None
        del h, delta
        if not isinstance(self.held[l - 1], _Saved):
            self.held[l - 1] = None

    def _run(self, upto: int) -> None:
        while self.pos < upto:
            kind, l = self.ops[self.pos]
            self.pos += 1
            if kind == "B":
                self._backward(l)
            elif kind in ("F_all", "F_ck", "F_none"):
                self._forward(kind, l)
            else:
                raise ValueError(f"unknown operation {kind!r} in the schedule")
            if self.on_op is not None:
                self.on_op(kind, l)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Runs the operations before B^{L+1} from a^0 = ``x`` and returns a^L."""
        self.input_requires_grad = x.requires_grad
        self.autocast = _autocast_state()
        if x.device.type == "cuda":
            self.cuda_device = x.device.index if x.device.index is not None else torch.cuda.current_device()
        self.held[0] = x.detach()
        self._run(self.split)
        return self._value(self.L)

    def backward(self, grad_output: torch.Tensor) -> torch.Tensor | None:
        """Runs the rest from delta^L = ``grad_output``; returns delta^0 (None when
        the input does not require a gradient) and frees everything."""
        self.delta = grad_output
        try:
            self._run(len(self.ops))
            return self.delta if self.input_requires_grad else None
        finally:
            self.held = [None] * (self.L + 2)
            self.delta = None
            self.rng = [None] * (self.L + 1)


class _ScheduleFunction(torch.autograd.Function):
    """One autograd node for the whole schedule. The parameters are inputs only
    so that the output requires a gradient when they do; their gradients are
    accumulated by the runner, so ``backward`` returns None for them."""

    @staticmethod
    def forward(ctx: Any, runner: ScheduleRunner, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        ctx.runner = runner
        ctx.n_params = len(params)
        # A new tensor object over a^L's storage: returning the runner's own
        # tensor would tie it to this node (and keep the node alive through it).
        return runner.forward(x).detach()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
        runner: ScheduleRunner = ctx.runner
        ctx.runner = None
        dx = runner.backward(grad_output)
        n: int = ctx.n_params
        return (None, dx, *([None] * n))


def run_schedule(
    stages: Sequence[nn.Module],
    operations: Sequence[Op],
    x: torch.Tensor,
    *,
    preserve_rng: bool = True,
    on_op: Callable[[str, int], None] | None = None,
) -> torch.Tensor:
    """Runs ``operations`` on ``stages`` from input ``x``: returns a^L, whose
    backward runs the rest of the schedule. Validity of the schedule is the
    solver's and simulator's job; an invalid one fails with a RuntimeError
    naming the missing value. ``on_op(kind, stage)`` is called after each
    operation (to measure memory operation by operation)."""
    runner = ScheduleRunner(stages, operations, preserve_rng=preserve_rng, on_op=on_op)
    params = [p for s in stages for p in s.parameters() if p.requires_grad]
    out: torch.Tensor = _ScheduleFunction.apply(runner, x, *params)
    return out
