"""Measuring a PyTorch network as a remat chain.

A chain (the model, docs/model.md) describes each stage l by the time of its
forward and backward, the bytes of its output a^l, the bytes abar^l a recorded
forward keeps for the backward (a^l included), the bytes of its gradient
delta^l, and the transient bytes its forward and backward need on top.
:func:`profile` measures these on the module itself, on the device and dtype
of the sample input, so the chain describes exactly the runs that
:class:`~remat.torch.Checkpointed` will make.

The loss is not part of the module: the criterion runs outside, on the
module's output. The chain's loss stage is therefore all zeros (the scalar
loss and its unit gradient are a few bytes); what the criterion itself keeps
between ``loss = criterion(out, y)`` and ``loss.backward()`` is memory the
caller holds on top of the budget.
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import remat

from .executor import Executor, Program
from .memory import AllocatorTrace, LiveBytes
from .policies import NamedPolicy, resolve_policies
from .stages import Call, carried_output, stage_label

__all__ = ["Profiled", "profile", "profile_calls", "stages_of"]


def stages_of(module: nn.Module | Sequence[nn.Module]) -> list[nn.Module]:
    """The stages of a network: the children of an ``nn.Sequential`` or
    ``nn.ModuleList``, or the modules of a list or tuple, in order.

    Raises:
        TypeError: ``module`` is not one of these, is empty, or holds something
            that is not an ``nn.Module``.
    """
    if isinstance(module, (nn.Sequential, nn.ModuleList)):
        stages = list(module)
    elif isinstance(module, (list, tuple)):
        stages = list(module)
    else:
        raise TypeError(
            f"remat.torch needs a sequence of stages (nn.Sequential, nn.ModuleList or a list of "
            f"modules), got {type(module).__name__}; split the network into blocks that each take "
            f"and return one tensor and wrap them in nn.Sequential"
        )
    if not stages:
        raise TypeError("remat.torch needs at least one stage; the sequence is empty")
    for i, s in enumerate(stages):
        if not isinstance(s, nn.Module):
            raise TypeError(f"stage {i + 1} is a {type(s).__name__}, not an nn.Module")
    return stages


def storage_key(t: torch.Tensor) -> int:
    """Identifies the memory block behind a tensor (views share it)."""
    return t.untyped_storage().data_ptr()


def output_bytes(y: torch.Tensor, x: torch.Tensor) -> int:
    """Bytes of a^l: its storage, or its own elements when it is a view of the input
    (then the storage is the input's and counting it again would double it)."""
    if storage_key(y) == storage_key(x):
        return y.numel() * y.element_size()
    return y.untyped_storage().nbytes()


@contextlib.contextmanager
def preserved_state(stages: Sequence[nn.Module], devices: Sequence[torch.device]) -> Iterator[None]:
    """Runs a block and then puts back what running the stages changes: the RNG
    state (CPU and the given CUDA devices), every buffer (BatchNorm running
    statistics) and every parameter's ``.grad`` (None while it runs)."""
    cuda = [d.index if d.index is not None else torch.cuda.current_device() for d in devices]
    buffers = [(b, b.detach().clone()) for s in stages for b in s.buffers()]
    grads = [(p, p.grad) for s in stages for p in s.parameters()]
    for p, _ in grads:
        # Measured as a step that gives the parameters their gradients, the
        # same whatever the step before left in .grad.
        p.grad = None
    with torch.random.fork_rng(devices=cuda):
        try:
            yield
        finally:
            with torch.no_grad():
                for b, saved in buffers:
                    # Through .data: the step's graph may have saved the buffer
                    # (an embedding's position ids), whose version must not move.
                    b.data.copy_(saved)
            for p, g in grads:
                p.grad = g


def _by_allocator(runner: _StageRunner) -> bool:
    """Whether a stage's bytes are measured by the allocator's events: always,
    but where eager code runs while a profiler of the caller's does (a
    compiled stage needs them, and raises then)."""
    return runner.compiled or AllocatorTrace.available()


class _Meter:
    """Times blocks and measures peaks of bytes: CUDA events and allocator
    statistics on a GPU, perf_counter on the CPU with the allocator's events
    (:class:`AllocatorTrace`, ``allocator=True``: what kernels and operators
    allocate inside themselves, compiled or not) or :class:`LiveBytes`
    (tensors that dispatch an operator: where a profiler of the caller's
    already runs, since two cannot nest).

    Inside :meth:`window`, :meth:`mark` notes the largest number of bytes alive
    since the previous mark (or the window's start) above the number alive
    then, frees included: while a backward runs, the saved tensors it releases
    make room, as they do when the executor runs the same backward.
    :meth:`alive` notes the bytes alive now that were not at the window's
    start. Both return an index; :meth:`value` reads it once the window has
    closed (the allocator's events are read only then)."""

    def __init__(
        self,
        device: torch.device,
        parameters: Sequence[nn.Parameter],
        allocator: bool = False,
        compiled: bool = False,
    ) -> None:
        self.cuda = device.type == "cuda"
        self.allocator = allocator and not self.cuda
        #: A compiled block's backward holds the gradients of the weights it
        #: returns until its graph ends: left out from their allocation, as
        #: a compiled step's measurement does (docs/model.md, "The budget").
        #: A step that adds into .grad holds them as transients: the plan
        #: adds them then (AppliedPlan._accumulating).
        self.compiled = compiled
        self.device = device
        self.parameters = parameters
        self.ms = 0.0
        self._base = 0
        self._start = 0
        self._live: LiveBytes | None = None
        self._trace: AllocatorTrace | None = None
        self._last = 0  # the trace's mark of the previous mark()
        # ("value", bytes) known at once, or ("peak", i, j) / ("alive", j) of a trace.
        self._notes: list[tuple[Any, ...]] = []
        self._traces: list[AllocatorTrace] = []

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._base = self._start = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            yield
        elif self.allocator:
            trace = AllocatorTrace()
            self._traces.append(trace)
            with trace:
                trace.exclude_parameter_gradients(self.parameters, from_allocation=self.compiled)
                self._trace, self._last = trace, 0
                try:
                    yield
                finally:
                    self._trace = None
        else:
            with LiveBytes() as live:
                live.exclude_parameter_gradients(self.parameters)
                self._live, self._base, self._start = live, 0, 0
                try:
                    yield
                finally:
                    self._live = None

    def mark(self) -> int:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) - self._base
            self._base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._notes.append(("value", max(0, peak)))
        elif self._trace is not None:
            j = self._trace.mark()
            self._notes.append(("peak", self._trace, self._last, j))
            self._last = j
        else:
            assert self._live is not None, "mark() outside window()"
            peak = self._live.peak - self._base
            self._base = self._live.current
            self._live.reset_peak()
            self._notes.append(("value", max(0, peak)))
        return len(self._notes) - 1

    def alive(self) -> int:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._notes.append(("value", int(torch.cuda.memory_allocated(self.device)) - self._start))
        elif self._trace is not None:
            self._notes.append(("alive", self._trace, self._trace.mark()))
        else:
            assert self._live is not None, "alive() outside window()"
            self._notes.append(("value", self._live.current - self._start))
        return len(self._notes) - 1

    def value(self, i: int) -> int:
        """The figure noted as ``i`` (its window must have closed)."""
        note = self._notes[i]
        if note[0] == "value":
            return int(note[1])
        if note[0] == "peak":
            return note[1].peak(note[2], note[3])
        return note[1].alive(note[2])

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            yield
            end.record()
            torch.cuda.synchronize(self.device)
            self.ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            yield
            self.ms = (time.perf_counter() - t0) * 1e3


def _saved_storages(
    run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, own: set[int], packed: set[int] | None = None
) -> tuple[torch.Tensor, dict[int, int]]:
    """Runs a recording forward (``run``) of the stage on ``x`` and returns its output and
    the storages autograd keeps for the backward (data pointer -> bytes), the
    storages in ``own`` (parameters, buffers, side inputs, the input) excluded;
    every storage it keeps, those included, added to ``packed`` where given."""
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "meta":
            key = storage_key(t)
            if packed is not None:
                packed.add(key)
            if key not in own and key != 0:
                saved[key] = t.untyped_storage().nbytes()
        # A new tensor object over the same storage, not ``t`` itself: an output
        # its own node saves (ReLU's) would otherwise hold that node, which holds
        # it, a cycle outside Python's collector. The backward breaks it, but when
        # the forward fails (out of memory, found on a GPU), the stage's saved
        # tensors stayed allocated for good.
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = run(x)
    return y, saved


def profile(
    module: nn.Module | Sequence[nn.Module],
    sample_input: torch.Tensor,
    *,
    repeat: int = 3,
    name: str | None = None,
    policies: Sequence[Any] = (),
) -> remat.Chain:
    """Measures every stage of ``module`` on ``sample_input`` and returns the chain.

    ``module`` is an ``nn.Sequential`` (or ``nn.ModuleList``, or a list of
    modules) whose stages each take one tensor and return one tensor (blocks
    with side inputs and structured outputs are measured by
    :func:`remat.torch.apply`). Each stage is run on the output of the previous
    one, on the sample's device and dtype and in the module's current mode
    (``train()`` or ``eval()``), and measured:

    - ``forward_time`` / ``backward_time``: median of ``repeat`` runs after a
      warm-up run (not measured at all), in ms (CUDA events on a GPU,
      ``time.perf_counter`` on the CPU). The forward is the recording one (with
      autograd), the backward gets a gradient of ones.
    - ``output_size``: bytes of the output's storage (or of its elements if it
      is a view of the stage's input).
    - ``saved_size``: bytes of the distinct storages autograd saves for the
      backward, seen through ``torch.autograd.graph.saved_tensors_hooks``, with
      the stage's parameters, buffers and input excluded, plus the output's
      storage (the model's abar^l includes a^l).
    - ``gradient_size``: bytes of the gradient of the output (its elements).
    - ``forward_overhead``: the largest number of new bytes alive during a
      plain forward (without autograd) beyond its output.
    - ``recording_overhead``: the same for a recording forward (with
      autograd), beyond what it saves for the backward.
    - ``backward_overhead``: the largest number of bytes alive during the
      backward beyond those alive when it starts and the input's gradient
      (the saved tensors it frees as it goes make room). Parameter gradients
      are not counted once accumulated into ``.grad`` (remat's budget leaves
      parameters out), only while computed.

    With ``policies`` (:mod:`remat.torch.policies`), each stage is also
    measured recorded under each policy, and those that keep fewer bytes than
    recording it whole (and than every cheaper policy) become the stage's
    ``options`` (``saved_size``, ``recompute_time``, ``forward_overhead``,
    ``backward_overhead``; docs/model.md).

    Identical stages (same class, same structure and parameter shapes, on an
    input of the same shape) are measured once: a stack of N equal blocks
    costs one block's measurements. A stage that changes its input in place
    (``ReLU(inplace=True)`` first) is measured, and later run, on a copy of its
    input; the copy is part of its forward overhead.

    On the CPU the bytes come from the allocator's events
    (:class:`~remat.torch.memory.AllocatorTrace`: what an operator allocates
    inside itself counts, a convolution's workspace among them), or from
    :class:`~remat.torch.memory.LiveBytes` (tensors only) while a profiler of
    the caller's runs; on a GPU from ``torch.cuda.max_memory_allocated``. The module's state is left as
    it was: RNG state, buffers (BatchNorm statistics) and ``.grad`` are
    restored. The chain's loss stage is zero (the criterion is outside the
    module) and its metadata records the device, dtype, batch size and input
    shape.

    Cost: about ``repeat + 3`` forwards and ``repeat + 1`` backwards of each
    distinct stage, plus one forward without autograd of each other stage; at
    most one stage's saved tensors at a time beyond the sample.

    Raises:
        TypeError: ``module`` is not a sequence of modules, ``sample_input`` is
            not a tensor, or a stage does not return a tensor.
        ValueError: ``repeat`` < 1, or a stage rejects its input (the message
            names the stage and the shape it got).
    """
    stages = stages_of(module)
    if not isinstance(sample_input, torch.Tensor):
        raise TypeError(f"sample_input must be a torch.Tensor, got {type(sample_input).__name__}")
    chain, _ = profile_calls(
        stages,
        Call((sample_input,), {}, 0),
        names=_names(module, stages),
        repeat=repeat,
        name=name or type(module).__name__,
        single_tensor=True,
        policies=policies,
    )
    return chain


@dataclass
class Profiled:
    """What profiling found beyond the chain: which stages change their input in
    place, which draw random numbers (only their RNG state is replayed), and the
    policy behind each stage's recording options (``options[l-1][o]`` for
    option o >= 1; ``options[l-1][0]`` is None, the stage recorded whole)."""

    inplace: list[bool]
    uses_rng: list[bool]
    options: list[list[NamedPolicy | None]] = field(default_factory=list)
    #: Options a stage could not run, dropped for it: (stage index from 0,
    #: policy name, the first line of the error it raised).
    dropped: list[tuple[int, str, str]] = field(default_factory=list)
    #: Per stage, the bytes of each size field that do not grow with the
    #: batch (a batch norm's per-channel statistics, a weight's gradient),
    #: from a second measurement on half the batch; None where not measured
    #: (side inputs, compiled stages, a batch of one). See :func:`fixed_parts`.
    #: Under ``"options"``, each option's own (in the record's order; None
    #: where not measured).
    fixed: list[dict[str, Any] | None] = field(default_factory=list)
    #: Per stage, for option 0 and each option in the record's order, the
    #: bytes its compiled variant saves that copy the stage's input, as a
    #: share of the input's bytes (see :func:`_input_copies`; 0 eager).
    input_copies: list[list[float]] = field(default_factory=list)
    #: Per stage, for each side input whose gradient it makes as the last
    #: reader (by storage, as ``profile_calls``' ``last`` names it), the bytes
    #: that gradient keeps allocated while the stage's input gradient lives
    #: and after (:meth:`_Gradients.held`): more than its own where it is a
    #: view of a larger buffer (a U-Net's skip connection, a slice of a
    #: concatenation's gradient), which it keeps until its maker's backward.
    #: Eager stages only; empty where none.
    side_held: list[dict[int, tuple[int, int, int]]] = field(default_factory=list)
    #: Per stage, the storages of the side inputs its recording (option 0)
    #: keeps for the backward, by data pointer (every one where not known):
    #: autograd holds those until the stage's backward whatever the plan.
    side_saved: list[set[int]] = field(default_factory=list)


def profile_calls(
    stages: Sequence[nn.Module],
    call: Call,
    *,
    forwards: Sequence[Callable[..., Any]] | None = None,
    names: Sequence[str] | None = None,
    repeat: int = 3,
    name: str = "model",
    single_tensor: bool = False,
    policies: Sequence[Any] = (),
    compiled: Callable[[int, NamedPolicy | None], Callable[..., Any]] | None = None,
    calls: Sequence[Call | None] | None = None,
    around: Callable[[int], contextlib.AbstractContextManager[None]] | None = None,
    sizes_only: bool = False,
    last: Sequence[Collection[int]] | None = None,
) -> tuple[remat.Chain, Profiled]:
    """:func:`profile` for stages called as ``call`` is (the carried tensor and
    the same side inputs for every stage), through ``forwards`` (the stages
    themselves by default). Returns the chain and what else was found.

    ``calls`` (one per stage, None where unknown) gives each stage side inputs
    of its own, as the model calls it (Swin's stages their own
    ``input_dimensions``, T5's later blocks the attention bias the first one
    made); each stage still runs on the previous stage's output.

    Each stage is also measured under each of ``policies`` (see
    :func:`remat.torch.policies.resolve_policies`); those that keep fewer bytes
    than option 0 and every cheaper option become the stage's ``options``.

    With ``compiled`` (``compiled(i, policy)``: how the executor calls stage
    i + 1's compiled variant for ``policy``, None for option 0), the compiled
    variants are what is measured, bytes by the allocator's events.

    ``around(i)``, where given, is entered while stage i + 1 is measured and
    run (FSDP2 gathers a block's parameters there: the stages are called
    without their module hooks).

    ``sizes_only``: the sizes on this input alone, for a fit along another
    dimension (remat.torch.apply's ``_at_length``): no half-batch lines (the
    ``fixed`` found is empty), the options untimed and all kept.

    ``last[i]``: the storages (``untyped_storage().data_ptr()``) of the side
    inputs whose gradient stage i + 1's backward makes as the last block that
    reads them. The chain holds such a gradient in delta^{l-1} for the whole
    of B^l (docs/model.md, "Side inputs' gradients"), so an eager stage's
    ``backward_overhead`` is its backward's peak less it, as it is less the
    input's gradient (a compiled stage's counts it: an over-count). None: every side
    input's gradient counts (a chain that does not hold them in its running
    gradients)."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    named = resolve_policies(policies)
    fns: list[Callable[..., Any]] = list(forwards) if forwards is not None else list(stages)
    labels = list(names) if names is not None else [f"{i + 1}:{type(s).__name__}" for i, s in enumerate(stages)]
    call = call.detached()
    own = [c.detached() if c is not None else None for c in calls] if calls is not None else []
    sample = call.carried
    device = sample.device
    x = sample.detach()
    records: list[dict[str, Any]] = []
    inplace: list[bool] = []
    uses_rng: list[bool] = []
    options: list[list[NamedPolicy | None]] = []
    dropped: list[tuple[int, str, str]] = []
    fixed: list[dict[str, Any] | None] = []
    input_copies: list[list[float]] = []
    side_held: list[dict[int, tuple[int, int, int]]] = []
    side_saved: list[set[int]] = []
    measured: dict[
        tuple[Any, ...],
        tuple[dict[str, Any], bool, bool, tuple[Any, ...], list[NamedPolicy | None], list[tuple[str, str]]],
    ] = {}
    cuda_devices = [device] if device.type == "cuda" else []

    def ends_at(i: int) -> Collection[int]:
        return last[i] if last is not None and i < len(last) else ()

    with preserved_state(stages, cuda_devices):
        for i in range(len(stages)):
            with around(i) if around is not None else contextlib.nullcontext():
                mine = own[i] if i < len(own) and own[i] is not None else call
                runner = _StageRunner(
                    stages, fns, labels, i, mine, single_tensor, compiled, shared=mine is call, last=ends_at(i)
                )
                key = (
                    _signature(stages[i]),
                    tuple(x.shape),
                    x.dtype,
                    x.device,
                    x.requires_grad,
                    _side_signature(mine),
                    _last_read(mine, ends_at(i)),
                )
                seen = measured.get(key)
                if seen is None:
                    changes_input, rng = runner.probe(x)
                    record = _profile_stage(runner, x, repeat, device, changes_input, sizes_only)
                    kept: list[NamedPolicy | None] = [None]
                    failed: list[tuple[str, str]] = []
                    if named:
                        found, failed = _profile_options(
                            runner, x, repeat, device, changes_input, rng, named, record, sizes_only
                        )
                        if found:
                            record["options"] = [o for o, _ in found]
                            kept += [p for _, p in found]
                    with torch.no_grad():
                        y = runner(x.clone() if changes_input else x)
                    out_meta = (tuple(y.shape), y.dtype, y.device)
                    measured[key] = (record, changes_input, rng, out_meta, kept, failed)
                else:
                    record, changes_input, rng, out_meta, kept, failed = seen
                    y = None
                dropped += [(i, name, why) for name, why in failed]
                rec = dict(record, name=labels[i])
                stage_fixed: dict[str, Any] | None = rec.pop("_fixed", None)
                copies = [float(rec.pop("_input_copy", 0.0))]
                sides = mine.side_tensors()
                kept_sides = rec.pop("_side_saved", range(len(sides)))  # not known: every one
                side_saved.append({sides[j].untyped_storage().data_ptr() for j in kept_sides if 0 <= j < len(sides)})
                side_held.append(
                    {
                        sides[j].untyped_storage().data_ptr(): b
                        for j, b in rec.pop("_side_held", {}).items()
                        if 0 <= j < len(sides)
                    }
                )
                if rec.get("options"):
                    # Copies: a record measured once serves identical stages.
                    rec["options"] = [dict(o) for o in rec["options"]]
                    of = [o.pop("_fixed", None) for o in rec["options"]]
                    copies += [float(o.pop("_input_copy", 0.0)) for o in rec["options"]]
                    if any(f is not None for f in of):
                        stage_fixed = dict(stage_fixed or {}, options=of)
                fixed.append(stage_fixed)
                input_copies.append(copies)
                records.append(rec)
                inplace.append(changes_input)
                uses_rng.append(rng)
                options.append(kept)
                # The next stage's input: identical stages whose output has the
                # input's shape need not run (a stack of equal blocks runs one).
                final = i + 1 == len(stages)
                if y is None and not final:
                    following = own[i + 1] if i + 1 < len(own) and own[i + 1] is not None else call
                    nxt = (
                        _signature(stages[i + 1]),
                        tuple(x.shape),
                        x.dtype,
                        x.device,
                        x.requires_grad,
                        _side_signature(following),
                        _last_read(following, ends_at(i + 1)),
                    )
                    if out_meta == (tuple(x.shape), x.dtype, x.device) and nxt in measured:
                        continue
                    with torch.no_grad():
                        y = runner(x.clone() if changes_input else x)
                if y is not None:
                    x = y.detach()
    chain = {
        "name": name,
        "input_size": sample.numel() * sample.element_size(),
        "stages": records,
        "metadata": {
            "source": "remat.torch.profile",
            "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
            "dtype": str(sample.dtype).removeprefix("torch."),
            "batch": int(sample.shape[0]) if sample.dim() > 0 else 1,
            "input_shape": list(sample.shape),
            "mode": "train" if any(s.training for s in stages) else "eval",
            "repeat": repeat,
            "torch": torch.__version__,
            "time_unit": "ms",
            # Stages that write into their input (they run on a copy of it):
            # Checkpointed(chain=...) reads this instead of running each stage
            # to find out.
            "writes_input": [l for l, changes in enumerate(inplace, 1) if changes],
        },
    }
    return remat.Chain.from_dict(chain), Profiled(
        inplace, uses_rng, options, dropped, fixed, input_copies, side_held, side_saved
    )


def _last_read(call: Call, ends: Collection[int]) -> tuple[int, ...]:
    """The positions among ``call``'s side tensors of those that require a
    gradient and whose storage is in ``ends``: the gradients the stage makes
    as their last reader (_StageRunner.last_side). O(side inputs)."""
    return tuple(i for i, t in enumerate(call.side_tensors()) if _ends_here(t, ends))


def _ends_here(t: torch.Tensor, ends: Collection[int]) -> bool:
    key = t.untyped_storage().data_ptr()
    return t.requires_grad and key != 0 and key in ends


def _side_signature(call: Call) -> tuple[Any, ...]:
    """What of a stage's side inputs changes what it measures: each argument's
    kind, and for tensors (one level inside tuples and lists too) shape, dtype
    and whether it requires a gradient (its gradient is part of the
    backward). Equal stages called with side inputs equal so measure once."""

    def of(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(v.shape), v.dtype, v.requires_grad)
        if isinstance(v, (tuple, list)):
            return (type(v).__name__, tuple(of(t) for t in v))
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return type(v).__name__

    args = tuple(of(a) for i, a in enumerate(call.args) if i != call.position)
    kwargs = tuple(sorted((k, of(v)) for k, v in call.kwargs.items() if k != call.position))
    return (call.position, args, kwargs)


def _signature(module: nn.Module) -> tuple[Any, ...]:
    """What makes two stages measure the same: class, structure (the module's
    repr, which lists every submodule and its settings), parameter and buffer
    shapes, dtypes and trainability, and the training flag."""
    params = tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in module.named_parameters())
    buffers = tuple((n, tuple(b.shape), b.dtype) for n, b in module.named_buffers())
    return (type(module), repr(module), params, buffers, module.training)


def _names(module: nn.Module | Sequence[nn.Module], stages: Sequence[nn.Module]) -> list[str]:
    """The children's names of an nn.Sequential built from an OrderedDict, else
    ``"3:Linear"`` (position and class)."""
    named = list(module.named_children()) if isinstance(module, nn.Module) else []
    if len(named) == len(stages) and not all(n.isdigit() for n, _ in named):
        return [n for n, _ in named]
    return [f"{i + 1}:{type(s).__name__}" for i, s in enumerate(stages)]


class _StageRunner:
    """Calls stage ``index`` with ``call``'s side inputs around a carried tensor;
    a failure names the stage and the input shape (a ValueError), except
    running out of memory, which stays a ``torch.OutOfMemoryError``."""

    def __init__(
        self,
        stages: Sequence[nn.Module],
        fns: Sequence[Callable[..., Any]],
        labels: Sequence[str],
        index: int,
        call: Call,
        single_tensor: bool = False,
        compiled: Callable[[int, NamedPolicy | None], Callable[..., Any]] | None = None,
        shared: bool = True,
        last: Collection[int] = (),
    ) -> None:
        self.stage = stages[index]
        self.index = index
        #: The stage's compiled variants (index, policy) -> callable, or None: eager.
        self.variants = compiled
        self.compiled = compiled is not None
        #: The stage's eager forward (what operators the policies see).
        self.eager = fns[index]
        self.fn = compiled(index, None) if compiled is not None else fns[index]
        auto = f"{index + 1}:{type(self.stage).__name__}"
        self.label = stage_label(index, self.stage, None if labels[index] in ("", auto) else labels[index])
        self.call = call
        #: Whether ``call``'s side inputs are the first stage's, not this one's own.
        self.shared = shared
        self.single_tensor = single_tensor
        #: The side inputs (leaves, as ``call`` is detached) whose gradient
        #: this stage's backward makes as the last block that reads them: their
        #: storages are in ``last``.
        self.last_side = [t for t in call.side_tensors() if _ends_here(t, last)]

    @contextlib.contextmanager
    def holding(self, x: torch.Tensor, grad: bool) -> Iterator[tuple[torch.Tensor, _Gradients]]:
        """An eager stage's input ``x`` (where ``grad``) and its side inputs
        that require a gradient reach it, within the block, through
        :class:`_Held`: their gradients go to the :class:`_Gradients`
        yielded with the input to run on, as autograd makes them (a view of
        a concatenation's gradient included), not accumulated into
        ``.grad``, and are let go of at the end. A compiled stage runs on
        ``x`` as it is (its backward returns its inputs' gradients as
        tensors of their own): nothing is held. Under grad mode."""
        sink = _Gradients()
        if self.compiled:
            yield x, sink
            return

        # A last-read side input's gradients go to the list of the first side
        # tensor on its storage: the chain holds one gradient per storage
        # (views of one tensor, its chunks, are one input there).
        first: dict[int, int] = {}
        for i, t in enumerate(self.call.side_tensors()):
            first.setdefault(t.untyped_storage().data_ptr(), i)
        # One identity per tensor: one passed twice gets one gradient, the
        # sum autograd makes of its uses, as in a step.
        wrapped: dict[int, torch.Tensor] = {}

        def held(v: Any) -> Any:
            if isinstance(v, torch.Tensor) and v.requires_grad:
                if id(v) not in wrapped:
                    last = any(v is t for t in self.last_side)
                    key = first.get(v.untyped_storage().data_ptr(), -1)
                    into = sink.last.setdefault(key, []) if last else sink.other
                    wrapped[id(v)] = _Held.apply(v, into)
                return wrapped[id(v)]
            if isinstance(v, (tuple, list)) and not hasattr(v, "_fields"):
                return type(v)(held(t) for t in v)
            return v

        kept = self.call
        args = tuple(a if i == kept.position else held(a) for i, a in enumerate(kept.args))
        kwargs = {k: v if k == kept.position else held(v) for k, v in kept.kwargs.items()}
        self.call = Call(args, kwargs, kept.position)
        try:
            yield (_Held.apply(x, sink.input) if grad else x), sink
        finally:
            self.call = kept
            sink.clear()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        args, kwargs = self.call.with_carried(x)
        try:
            y = self.fn(*args, **kwargs)
        except torch.OutOfMemoryError:
            # Not a bad input: the caller may retry with a smaller batch or budget,
            # which it can only do if the error keeps its type.
            raise
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            why = ""
            side = [f"argument {i}" for i in range(len(args)) if i != self.call.position] + [
                repr(k) for k in kwargs if k != self.call.position
            ]
            if self.index > 0 and side and self.shared:
                # The stack is profiled from the first block's call: every block
                # gets its side inputs.
                why = (
                    f"; remat profiled this block with the first block's side inputs ({', '.join(side)}), as "
                    "its own call was not seen (the stack ran outside the model's forward, or a model forward "
                    "run without the blocks' gradients), so blocks that take side inputs of their own cannot be "
                    "one stack there: call the model itself, or name a stack of blocks that share them with "
                    "apply(..., blocks=...)"
                )
            raise ValueError(
                f"{self.label} failed on an input of shape {tuple(x.shape)} and dtype {x.dtype}: {e}{why}"
            ) from e
        if self.single_tensor and not isinstance(y, torch.Tensor):
            raise TypeError(
                f"{self.label} returned a {type(y).__name__}; every stage must return one tensor (the next stage's "
                "input); for blocks with side inputs and structured outputs use remat.torch.apply"
            )
        return carried_output(y, lambda: self.label)

    def probe(self, x: torch.Tensor) -> tuple[bool, bool]:
        """Whether the stage writes into its input (its version counter moves)
        and whether it draws random numbers (the generator of the input's
        device moves), from one forward without autograd. The caller puts the
        RNG state back (:func:`preserved_state`)."""
        probe = x.detach().clone()
        before = probe._version
        rng = _rng_state(x.device)
        with torch.no_grad():
            self(probe)
        return probe._version != before, not torch.equal(rng, _rng_state(x.device))


def _rng_state(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def _dropping(t: torch.Tensor) -> None:
    return None


def _refusing(_: object) -> torch.Tensor:
    raise RuntimeError("remat: a profiling run whose saved tensors were dropped was run backward (a bug in remat)")


def _half_batch(runner: _StageRunner, x: torch.Tensor) -> int:
    """The batch a stage is measured on besides ``x``'s, to find what of its
    sizes does not grow with the batch (see :func:`fixed_parts`): half of
    it; 0 where it is not measured (a batch of one, a compiled stage, side
    inputs, which would have to be cut alike). O(the call's arguments)."""
    batch = int(x.shape[0]) if x.dim() > 1 else 0
    return batch // 2 if batch >= 2 and not runner.compiled and not runner.call.side_tensors() else 0


def _profile_stage(
    runner: _StageRunner,
    x: torch.Tensor,
    repeat: int,
    device: torch.device,
    changes_input: bool,
    sizes_only: bool = False,
) -> dict[str, Any]:
    stage = runner.stage
    params = [p for p in stage.parameters() if p.requires_grad]
    meter = _Meter(device, params, allocator=_by_allocator(runner), compiled=runner.compiled)
    needs_input_grad = x.is_floating_point() or x.is_complex()
    own = {storage_key(t) for t in [*stage.parameters(), *stage.buffers(), *runner.call.side_tensors(), x]}

    def run(inp: torch.Tensor) -> torch.Tensor:
        # A stage that writes into its input runs on a copy (as the executor
        # runs it), made inside the measured window: the copy is its overhead.
        return runner(inp.clone() if changes_input else inp)

    holder_run = _holder_run(run, x, meter, needs_input_grad) if runner.compiled else None

    fwd_ms: list[float] = []
    bwd_ms: list[float] = []

    def fresh_grads() -> None:
        for p in params:
            # On a GPU the allocator's peak sees every parameter gradient the
            # backward allocates, and with no .grad yet they would all stay
            # allocated, counted as transient memory (several times a block's
            # activations at small batches). Gradients that exist are
            # accumulated into in place: only the one being computed counts, as
            # the CPU's LiveBytes (parameter gradients excluded once
            # accumulated) counts it.
            p.grad = torch.zeros_like(p) if meter.cuda else None

    for k in range(repeat + 1):  # run 0 warms up (allocator, kernels, compiling): not counted
        fresh_grads()
        # Time, without the memory tracking (which slows small operators down).
        xl = x.detach().requires_grad_(needs_input_grad)
        with torch.enable_grad(), meter.timed():
            y = run(xl)
        f_ms = meter.ms
        b_ms = 0.0
        if y.requires_grad:
            dy = _incoming_gradient(y, runner.compiled)
            with meter.timed():
                torch.autograd.backward(y, dy)
            b_ms = meter.ms
            del dy
        del y, xl
        if k:
            fwd_ms.append(f_ms)
            bwd_ms.append(b_ms)
    # Memory, once after the warm-up (the figures are deterministic).
    record: dict[str, Any] = {
        # The fastest run: a busy machine only ever adds time (docs/pytorch.md).
        "forward_time": min(fwd_ms),
        "backward_time": min(bwd_ms),
        **_memory_figures(runner, run, x, meter, own, needs_input_grad, fresh_grads),
    }
    if holder_run is not None:
        # A compiled block the forward runs unrecorded still runs its training
        # graph (the backward's rerun fills what it saved): its saved tensors
        # are all alive when the graph returns, then dropped. F_ck and F_none
        # have one transient in the model, so it is the larger of the two.
        held = meter.value(holder_run) - record["output_size"]
        record["forward_overhead"] = max(record["forward_overhead"], held)
        if not changes_input:
            record["_input_copy"] = _input_copies(run, x, needs_input_grad)
    half_batch = 0 if sizes_only else _half_batch(runner, x)
    if half_batch:
        try:
            half = _memory_figures(runner, run, x[:half_batch], meter, own, needs_input_grad, fresh_grads)
        except Exception as e:  # a stage that cannot run on half the batch (batch norm on one value)
            _log.debug("%s: not measured on half its batch (%s); sizes scale whole", runner.label, e)
        else:
            record["_fixed"] = fixed_parts(record, half, half_batch / int(x.shape[0]))
    for p in params:
        p.grad = None
    return record


#: The size fields a profile measures, whose part that does not grow with the
#: batch :func:`fixed_parts` finds.
SIZE_FIELDS = (
    "output_size",
    "saved_size",
    "gradient_size",
    "forward_overhead",
    "recording_overhead",
    "backward_overhead",
)


def fixed_parts(full: dict[str, Any], part: dict[str, Any], share: float) -> dict[str, int]:
    """For each size field, the bytes that do not grow with the batch, from
    its figure on the whole batch and on ``share`` of it (a line through the
    two: ``v(share) = fixed + (v(1) - fixed) * share``), at least 0. Above
    the whole batch's figure where the figure is larger on the smaller batch
    (a backward whose workspace grows as the batch shrinks: ConvNeXt-tiny's
    last blocks, 264 KiB more at half the batch), so that the line reads
    that figure there. O(fields)."""
    found: dict[str, int] = {}
    for k in SIZE_FIELDS:
        v, h = int(full.get(k, 0)), int(part.get(k, 0))
        found[k] = max(0, math.ceil((h - share * v) / (1 - share)))
    return found


def _backward_figures(net: int, saved: int) -> dict[str, int]:
    """A backward's figures from ``net``, its peak above what was alive
    before it less the gradients the chain holds from it on (delta^{l-1}):
    ``backward_overhead`` where that is above 0, else ``backward_frees``, what
    it freed of its saved tensors (at most ``saved``) before it had made those
    gradients (a U-Net's last up block frees 1 MiB of what it saved before
    it makes 1.3 MiB of gradients: docs/model.md, "The four operations").
    The frees are left out where 0, as the chain's JSON leaves them. O(1)."""
    if net >= 0:
        return {"backward_overhead": net}
    frees = min(saved, -net)
    return {"backward_overhead": 0, "backward_frees": frees} if frees else {"backward_overhead": 0}


def _memory_figures(
    runner: _StageRunner,
    run: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    meter: _Meter,
    own: set[Any],
    needs_input_grad: bool,
    fresh_grads: Callable[[], None],
) -> dict[str, Any]:
    """The size fields of a stage on input ``x``: a forward without autograd
    (``F_ck``, ``F_none``: its peak beyond the output it leaves), then a
    recording forward and its backward in one window, so that the backward's
    figure sees the saved tensors it frees. An eager stage's input's and side
    inputs' gradients are held as a step holds them
    (:meth:`_StageRunner.holding`): ``backward_overhead`` is the backward's
    peak less the input's gradient and the last-read side inputs' ones
    (below 0, ``backward_frees``: :func:`_backward_figures`), and
    ``_side_held`` what each of those keeps allocated (:meth:`_Gradients.held`)."""
    # A first run, not measured, keeps one-time allocations (a GPU library's
    # workspace, lazily initialised state, compiling, this shape's) out.
    with torch.no_grad():
        run(x)
    with torch.no_grad(), meter.window():
        y = run(x)
        nograd_mark = meter.mark()
    out_bytes = output_bytes(y, x)
    del y
    fresh_grads()
    xl = x.detach().requires_grad_(needs_input_grad)
    in_grad = 0
    b_mark = None
    packed: set[int] = set()
    with torch.enable_grad(), meter.window(), runner.holding(xl, needs_input_grad) as (xin, sink):
        y, saved = _saved_storages(run, xin, own | {storage_key(xl)}, packed)
        del xin
        f_mark = meter.mark()
        saved[storage_key(y)] = output_bytes(y, x)
        saved_bytes = sum(saved.values())
        grad_bytes = y.numel() * y.element_size()
        if y.requires_grad:
            # As in a step, and as the options': the output is let go of
            # before the backward, and autograd owns the only reference to
            # its gradient, so that it can sum a residual's gradients into
            # that buffer in place instead of into a new one.
            root, one = _root(y, runner.compiled)
            meter.mark()
            del y
            root.backward(one)
            b_mark = meter.mark()
            in_grad = sink.made(xl)
            del root, one
        else:
            del y
        side_held = sink.held()
    del xl
    saved_size = max(saved_bytes, out_bytes)
    copies = buffer_copies(runner.stage)
    found: dict[str, Any] = {
        "output_size": out_bytes,
        "saved_size": saved_size,
        "gradient_size": grad_bytes,
        "forward_overhead": max(0, meter.value(nograd_mark) - out_bytes) + copies,
        "recording_overhead": max(0, meter.value(f_mark) - saved_bytes) + copies,
        **_backward_figures(meter.value(b_mark) - in_grad if b_mark is not None else 0, saved_size),
    }
    if side_held:
        found["_side_held"] = side_held
    # Which side inputs (by position) the recording keeps for the backward:
    # those the chain does not count in abar^l, held by autograd as long.
    found["_side_saved"] = [j for j, t in enumerate(runner.call.side_tensors()) if storage_key(t) in packed]
    return found


def buffer_copies(stage: nn.Module) -> int:
    """The bytes of the copies of ``stage``'s buffers that each of its runs
    again holds: the executor puts the buffers back after a rerun
    (BatchNorm's running statistics move once per step, as in plain
    training), from copies made before it (Step.rerun_context). A forward's
    transient counts them, the first run's too (the chain has one transient
    per forward; a first run makes none): a DenseNet step measured 41,664 B
    above its prediction, the running statistics of the dense block it ran
    again at its peak. O(buffers)."""
    return sum(b.numel() * b.element_size() for b in stage.buffers())


def _holder_run(run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, meter: _Meter, grad: bool) -> int:
    """Measures a recording run whose saved tensors are dropped as autograd hands
    them over (the executor's holders), as a compiled block's unrecorded first
    run is; returns the meter's note of its peak (the output included)."""
    xl = x.detach().requires_grad_(grad)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(_dropping, _refusing):
        run(xl)  # compiles this variant's graph first, outside the window
        with meter.window():
            y = run(xl)
            mark = meter.mark()
    del y
    return mark


def _input_copies(run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, grad: bool) -> float:
    """The bytes of what a recording run of ``run`` on ``x`` saves that is a copy
    of ``x`` laid out anew (its shape, dtype and values, in a storage of its
    own with other strides), as a share of ``x``'s bytes. A block compiled alone saves one where inductor lays its
    input out again for a convolution (channels-last): torchvision's
    bottlenecks save their input twice, once as the graph's input and once so
    laid out, where one whole model's graph lays out every activation once
    and saves none (AppliedPlan._in_graph_chain). O(the run)."""
    xl = x.detach().requires_grad_(grad)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.device == x.device and t.shape == x.shape and t.dtype == x.dtype:
            saved.append(t.detach())
        return t.detach()

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = run(xl)
    del y
    own = storage_key(xl)
    # Another layout, not only another storage: a tensor that equals the input
    # by its values alone (a ReLU of an input that has no negative values) is
    # one that one graph keeps too.
    copies = {
        storage_key(t): t.untyped_storage().nbytes()
        for t in saved
        if storage_key(t) != own and t.stride() != x.stride() and torch.equal(t, x)
    }
    return sum(copies.values()) / max(1, x.numel() * x.element_size())


class _Gradients:
    """The gradients a stage's backward makes for its input (``input``) and
    side inputs (``last``: those whose last reader the stage is, see
    :attr:`_StageRunner.last_side`; ``other``), held as autograd makes them."""

    def __init__(self) -> None:
        self.input: list[torch.Tensor] = []
        #: Per last-read side input's storage, by the position of the first
        #: side tensor on it among the call's side tensors.
        self.last: dict[int, list[torch.Tensor]] = {}
        self.other: list[torch.Tensor] = []

    def made(self, x: torch.Tensor) -> int:
        """The bytes of the input's gradient (held here, or a compiled
        stage's in ``x.grad``) and of the last-read side inputs' ones, each
        by its own elements: what the chain holds in delta^{l-1} from B^l on."""
        grads = [*self.input, *(g for v in self.last.values() for g in v)]
        if x.grad is not None:
            grads.append(x.grad)
        return sum(g.numel() * g.element_size() for g in grads)

    def held(self) -> dict[int, tuple[int, int, int]]:
        """Per last-read side input's storage (by the position of the first
        side tensor on it), the bytes its gradients keep allocated while the
        input's gradient lives and after it: their storages' where that is
        larger than their own elements (a view of a
        concatenation's gradient keeps the whole buffer as long as the view
        lives, the part of the block's input or of an intermediate
        included), less, while it lives, the input's gradient in the same
        buffer (counted as delta^{l-1}); and the first figure beyond their
        elements, which :meth:`made` takes off the backward's peak (the rest
        of such a buffer, in that peak). O(side inputs)."""
        inputs: dict[int, int] = {}
        for g in self.input:
            key = g.untyped_storage().data_ptr()
            inputs[key] = inputs.get(key, 0) + g.numel() * g.element_size()
        found: dict[int, tuple[int, int, int]] = {}
        for i, gs in self.last.items():
            own = sum(g.numel() * g.element_size() for g in gs)
            storages = {g.untyped_storage().data_ptr(): g.untyped_storage().nbytes() for g in gs}
            after = sum(storages.values())
            during = sum(max(0, n - inputs.get(key, 0)) for key, n in storages.items())
            found[i] = (max(own, during), max(own, after), max(0, during - own))
        return found

    def clear(self) -> None:
        self.input.clear()
        self.last.clear()
        self.other.clear()


class _Held(torch.autograd.Function):
    """The identity on ``t`` whose backward puts the gradient into ``into``
    and passes nothing on: a stage's profile sees its input's and side
    inputs' gradients as a step holds them (in autograd's buffers, until the
    stage that made the input runs its backward), where a leaf's
    accumulation into ``.grad`` copies one that is a view of a larger buffer
    (a U-Net's skip connection, read through a concatenation) and lets the
    buffer go."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, into: list[torch.Tensor]) -> torch.Tensor:
        ctx.into = into
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[None, None]:
        ctx.into.append(g)
        return None, None


def _root(y: torch.Tensor, compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """A scalar whose backward (with the other tensor returned, a scalar one)
    runs ``y``'s with a gradient of ones that autograd alone holds, as the
    gradient a stage gets from the next one in a step: a residual's two
    gradients are then summed into it in place, not into a new buffer. The
    gradient is laid out as :func:`_incoming_gradient` says."""
    root = _Root.apply(y, _incoming_gradient(y, compiled))
    return root, torch.ones_like(root)


def _incoming_gradient(y: torch.Tensor, compiled: bool = False) -> torch.Tensor:
    """A gradient of ones for a stage's output ``y``, laid out as a step's
    would be: in ``y``'s memory format where that is one (row-major, or
    channels-last as a convolution's backward makes it), else row-major. A
    step's gradient for a block's output comes from the next block's
    backward, and in the end from the loss's, whose reductions, matrix
    products and normalisations make row-major gradients; pointwise
    operators pass a layout on, so each block hands on what it got.
    ``torch.ones_like(y)`` takes ``y``'s strides instead, and a block whose
    output is laid out otherwise (torchvision's ViT block: sequence before
    batch, from ``nn.MultiheadAttention(batch_first=True)``) then copies it
    into a row-major buffer first in its backward: one output's bytes that
    no step allocates (measured: each backward of the small ViT's census
    plan predicted 66,808 B high, 3% of its peak). A compiled stage
    (``compiled``) gets ``ones_like(y)`` as before: its backward graph is
    compiled for the strides of the tangent it is first given, and what a
    step gives a compiled block was not measured. (Kept so while a flaky
    in-graph test was being found, which turned out to fail as often before
    this change.) O(y's elements)."""
    if compiled:
        return torch.ones_like(y)
    for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
        if y.is_contiguous(memory_format=fmt):
            return torch.ones_like(y, memory_format=fmt)
    return torch.ones(y.shape, dtype=y.dtype, device=y.device)


class _Root(torch.autograd.Function):
    """A backward from ``y`` with gradient ``dy`` that does not need ``y`` itself
    alive: ``_Root.apply(y, dy).backward()`` runs ``y``'s backward with ``dy``."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        ctx.dy = dy
        return y.new_zeros(())

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        dy, ctx.dy = ctx.dy, None
        return dy, None


_log = logging.getLogger("remat.torch")

#: Runs of each variant timed together on a GPU when measuring options.
_BACK_TO_BACK = 4
#: GPU clock cycles the device sleeps before timed runs (about 50 ms at 2 GHz):
#: the host's head start in queuing them.
_HOST_HEAD_START_CYCLES = 100_000_000


def _profile_options(
    runner: _StageRunner,
    x: torch.Tensor,
    repeat: int,
    device: torch.device,
    changes_input: bool,
    uses_rng: bool,
    policies: Sequence[NamedPolicy],
    record: dict[str, Any],
    sizes_only: bool = False,
) -> tuple[list[tuple[dict[str, Any], NamedPolicy]], list[tuple[str, str]]]:
    """Measures the stage recorded under each policy, run by the executor as a
    schedule runs it (``F_all^1[o]``, then ``B^1`` with its rerun), and returns
    the options worth having, cheapest first, each with its policy, and the
    policies the stage cannot run (name, the first line of the error): each is
    tried once first, and one that raises (SAC refuses a block that changes in
    place a tensor the policy keeps, as EfficientNet's in-place SiLU after a
    convolution does) is dropped for this stage, never the step.

    - ``saved_size``: bytes alive after the recording forward (the output and
      what the policy keeps; the input and parameters are not new).
    - ``forward_overhead`` / ``backward_overhead``: transient bytes of that
      forward and of the backward with its rerun, as :func:`profile` counts them.
    - ``recompute_time``: (forward + backward under the policy) - (forward +
      backward of option 0), each the fastest of ``repeat`` rounds run
      interleaved (a busy machine only adds time, to both alike), and never
      below the policy's share of the forward's work times the forward's time
      (:func:`_recomputed_share`: what it does not keep must be computed
      again, so noise cannot make an option look free); compiled, the
      median of the rounds' paired differences, which may be negative
      (:func:`_recompute_time`). On a GPU each figure
      is the mean of 4 runs back to back between two events, queued while the
      device sleeps: the device's time, as in a step where the host runs ahead.
      The model has one forward time per stage, so a slower recording forward
      (SAC's dispatch per operator) is charged to the backward that consumes
      it: each ``F_all^l[o]`` has exactly one.

    An option that keeps no fewer bytes than option 0 or a cheaper option is
    dropped. ``sizes_only``: the sizes on ``x`` alone (not on half the
    batch), every option that runs kept, each ``recompute_time`` 0 (a second
    profile that only fits sizes: see remat.torch.apply's ``_at_length``).
    Cost: ``repeat + 2`` forwards and backwards per policy and
    ``repeat + 1`` of option 0 (4 times that on a GPU), run interleaved so
    that a busy machine slows them alike.
    """
    stage = runner.stage
    params = [p for p in stage.parameters() if p.requires_grad]
    meter = _Meter(device, params, allocator=_by_allocator(runner), compiled=runner.compiled)
    needs_input_grad = x.is_floating_point() or x.is_complex()
    names = [runner.label]
    variants_of = runner.variants

    def executor(option: int, policy: NamedPolicy | None) -> Executor:
        ops = [("F_all", 1, option), ("F_all", 2, 0), ("B", 2, 0), ("B", 1, 0)]
        compiled = None
        if variants_of is not None:
            compiled = [[variants_of(runner.index, None)] + ([variants_of(runner.index, policy)] if policy else [])]
        return Executor(
            [stage],
            Program(1, ops),
            forwards=[runner.fn],
            names=names,
            inplace=[changes_input],
            uses_rng=[uses_rng],
            options=[[None, policy]] if policy is not None else None,
            compiled=compiled,
        )

    failed: list[tuple[str, str]] = []
    usable: list[NamedPolicy] = []
    # One eager forward serves both the duplicates' check and, eager, the
    # floor of each option's recomputation time.
    needs_share = not (runner.compiled or sizes_only)
    calls = _policy_calls(runner, x, policies) if len(policies) > 1 or needs_share else None
    index = {p.name: i for i, p in enumerate(policies)}
    if len(policies) > 1:
        policies = _distinct(policies, calls, runner.label)

    def forward(ex: Executor, inp: torch.Tensor) -> torch.Tensor:
        step = ex.begin()
        args, kwargs = runner.call.with_carried(inp)
        return carried_output(ex.call(step, 1, Call(args, kwargs, runner.call.position)), lambda: runner.label)

    def fresh_grads() -> None:
        for p in params:
            p.grad = torch.zeros_like(p) if meter.cuda else None

    def once(ex: Executor) -> None:
        fresh_grads()
        xl = x.detach().requires_grad_(needs_input_grad)
        with torch.enable_grad():
            y = forward(ex, xl)
        if y.requires_grad:
            torch.autograd.backward(y, _incoming_gradient(y, runner.compiled))

    for policy in policies:
        try:
            once(executor(1, policy))
        except Exception as e:  # whatever the stage raises under the policy drops the policy, not the step
            failed.append((policy.name, (str(e).strip().splitlines() or [type(e).__name__])[0]))
        else:
            usable.append(policy)
    fresh_grads()
    policies = usable
    if not policies:
        for p in params:
            p.grad = None
        return [], failed
    variants = [executor(0, None)] + [executor(1, p) for p in policies]

    # On a GPU a round runs each variant `_BACK_TO_BACK` times between two
    # events, nothing synchronised in between: in a step the host runs ahead of
    # the device, so the device's time is what an option costs, not the host's
    # (SAC dispatches every operator through Python; timed phase by phase, with
    # a synchronisation each, that host time hid what recomputing less saves).
    inner = _BACK_TO_BACK if meter.cuda else 1
    totals: list[list[float]] = [[] for _ in variants]
    for k in range(0 if sizes_only else repeat + 1):  # round 0 warms up (and compiles)
        for v, ex in enumerate(variants):
            if meter.cuda:
                # The device first sleeps while the host queues the runs: the
                # events then time the device's work alone, as in a step where
                # the host runs ahead (SAC's per-operator dispatch in Python
                # would otherwise count, and a whole block's of it is more than
                # what recomputing less saves on a fast GPU).
                torch.cuda._sleep(_HOST_HEAD_START_CYCLES)  # type: ignore[no-untyped-call]
            with meter.timed():
                for _ in range(inner):
                    once(ex)
            if k:
                totals[v].append(meter.ms / inner)
    # The eager floor's figures (compiled, the measured difference stands alone).
    shares = _recomputed_share(calls, [index[p.name] for p in policies]) if needs_share else [0.0] * len(policies)

    def figures(ex: Executor, inp: torch.Tensor, output_size: int) -> dict[str, int]:
        """The option's size fields on input ``inp``."""
        fresh_grads()
        xl = inp.detach().requires_grad_(needs_input_grad)
        in_grad = 0
        b_mark = None
        # As _memory_figures: eager, the gradients are held as a step holds them.
        with torch.enable_grad(), meter.window(), runner.holding(xl, needs_input_grad) as (xin, sink):
            y = forward(ex, xin)
            del xin
            f_mark = meter.mark()
            saved_mark = meter.alive()
            if y.requires_grad:
                # The output is let go of before the backward, as in a step
                # (the executor drops a^l before B^l; the next stage's backward
                # freed what kept it): a rerun's transient then has its room.
                root, one = _root(y, runner.compiled)
                meter.mark()
                del y
                root.backward(one)
                b_mark = meter.mark()
                in_grad = sink.made(xl)
                del root, one
            else:
                del y
        del xl
        saved = max(meter.value(saved_mark), output_size)
        return {
            "saved_size": saved,
            "forward_overhead": max(0, meter.value(f_mark) - saved) + buffer_copies(runner.stage),
            **_backward_figures((meter.value(b_mark) if b_mark is not None else 0) - in_grad, saved),
        }

    half_batch = 0 if sizes_only else _half_batch(runner, x)
    found: list[tuple[dict[str, Any], NamedPolicy]] = []
    for v, policy in enumerate(policies, 1):
        sizes = figures(variants[v], x, record["output_size"])
        half_fixed: dict[str, int] | None = None
        if half_batch:
            # As the stage's own figures (_profile_stage): an option's
            # workspaces need not halve with the batch either (ResNet-50's
            # last blocks under "matmuls" took 136 KiB more at half the batch
            # than their whole-batch figures scaled).
            try:
                share = half_batch / int(x.shape[0])
                half = figures(variants[v], x[:half_batch], math.ceil(record["output_size"] / 2))
            except Exception as e:
                _log.debug("%s: option %s not measured on half its batch (%s)", runner.label, policy.name, e)
            else:
                half_fixed = fixed_parts(sizes, half, share)
        if runner.compiled:
            # Its unrecorded first run (see _profile_stage): the stage's F_ck
            # and F_none transient covers it.
            fn = variants_of(runner.index, policy) if variants_of is not None else runner.fn

            def run(inp: torch.Tensor, fn: Callable[..., Any] = fn) -> torch.Tensor:
                args, kwargs = runner.call.with_carried(inp.clone() if changes_input else inp)
                return carried_output(fn(*args, **kwargs), lambda: runner.label)

            held = meter.value(_holder_run(run, x, meter, needs_input_grad))
            record["forward_overhead"] = max(record["forward_overhead"], held - record["output_size"])
            copy = 0.0 if changes_input else _input_copies(run, x, needs_input_grad)
        recompute = (
            _recompute_time(
                totals[v],
                totals[0],
                compiled=runner.compiled,
                floor=shares[v - 1] * record["forward_time"],
                backward_time=record["backward_time"],
            )
            if not sizes_only
            else 0.0
        )
        option: dict[str, Any] = {"name": policy.name, "recompute_time": recompute, **sizes}
        if half_fixed is not None:
            option["_fixed"] = half_fixed
        if runner.compiled and copy:
            option["_input_copy"] = copy
        found.append((option, policy))
    for p in params:
        p.grad = None
    if sizes_only:
        return found, failed
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug(
            "%s: option 0 keeps %d bytes, forward+backward %.3f ms (fastest); measured options: %s",
            runner.label,
            record["saved_size"],
            min(totals[0]),
            [(o["name"], o["saved_size"], round(o["recompute_time"], 3)) for o, _ in found],
        )
        _log.debug("%s: rounds (ms) %s", runner.label, [[round(t, 3) for t in ts] for ts in totals])
    if failed:
        _log.info("%s: options it cannot run, dropped: %s", runner.label, failed)
    found.sort(key=lambda f: f[0]["recompute_time"])
    kept: list[tuple[dict[str, Any], NamedPolicy]] = []
    least = record["saved_size"]
    for option, policy in found:
        if option["saved_size"] < least:
            kept.append((option, policy))
            least = option["saved_size"]
    return kept, failed


def _recompute_time(
    option: Sequence[float], base: Sequence[float], *, compiled: bool, floor: float, backward_time: float
) -> float:
    """An option's ``recompute_time`` from the rounds' times of (forward +
    backward) under it (``option``) and under option 0 (``base``), round k of
    each run back to back. O(rounds).

    - Eager: the fastest of one less the fastest of the other, at least
      ``floor`` (its share of the forward's work times the forward's time):
      recomputing adds work, and under load the difference of two noisy
      figures fell to 0, which made an option look free (issue 34).
    - Compiled: the median of the rounds' paired differences, either sign
      (a round's load slows both alike), kept above ``-0.9 * backward_time``
      so that ``B^l`` keeps a time (docs/model.md, Options). Inductor fuses
      what an option recomputes into the backward's kernels, which can cost
      less than reading it back: a compiled GPT-2 block keeping only its
      matrix products' outputs ran 8% faster than keeping everything, so the
      eager floor does not hold there."""
    if compiled:
        paired = [t - t0 for t, t0 in zip(option, base)]
        return max(statistics.median(paired), -0.9 * backward_time)
    return max(min(option) - min(base), floor)


def _eager_under(runner: _StageRunner, x: torch.Tensor, mode: Any) -> bool:
    """Runs the stage's eager forward on a copy of ``x``, without autograd,
    under the dispatch ``mode``: the operators a policy sees (a compiled
    variant's are the same before fusion). False where it raises."""
    fn = runner.fn
    runner.fn = runner.eager
    try:
        with torch.no_grad(), mode:
            runner(x.clone())
    except Exception:
        return False
    finally:
        runner.fn = fn
    return True


def _keeps(policy: NamedPolicy, op: Any, args: Any, kwargs: Any) -> bool:
    """Whether ``policy`` keeps the output of this call of ``op`` (a recording
    forward's decision, as SAC asks it)."""
    from torch.utils.checkpoint import CheckpointPolicy, SelectiveCheckpointContext

    if policy.keeps_nothing:
        return False
    spec = policy.spec
    if not callable(spec):
        return op in spec
    try:
        decision = spec(SelectiveCheckpointContext(is_recompute=False), op, *args, **kwargs)
    except Exception:  # a user policy that cannot judge this call: count it as recomputed
        return False
    if isinstance(decision, bool):
        return decision
    return decision in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)


@dataclass
class _PolicyCalls:
    """The operator calls of a stage's eager forward: each call's work (see
    :func:`_policy_calls`) and, per policy of the list it was made for,
    whether that policy keeps the call's output."""

    work: list[float]
    keeps: list[tuple[bool, ...]]

    def of(self, i: int) -> list[bool]:
        """Policy i's decision on every call."""
        return [k[i] for k in self.keeps]


def _policy_calls(runner: _StageRunner, x: torch.Tensor, policies: Sequence[NamedPolicy]) -> _PolicyCalls | None:
    """Every operator call of one eager forward of the stage, without autograd,
    seen by a dispatch mode: its work (``torch.utils.flop_counter``'s count
    for matrix products, convolutions and attention; one per output element
    for every other operator that makes new memory) and each policy's
    decision on it. None where that forward raises. What :func:`_distinct`
    and :func:`_recomputed_share` read, so that one forward serves both.
    O(operators x policies)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    found = _PolicyCalls([], [])

    class Record(TorchDispatchMode):  # type: ignore[misc,no-untyped-call]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            if packet in flop_registry:
                work = float(flop_registry[packet](*args, **kwargs, out_val=out))
            else:
                inputs = {
                    id(a.untyped_storage()) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)
                }
                work = float(
                    sum(
                        t.numel()
                        for t in tree_flatten(out)[0]
                        if isinstance(t, torch.Tensor) and id(t.untyped_storage()) not in inputs
                    )
                )
            found.work.append(work)
            found.keeps.append(tuple(_keeps(p, func, args, kwargs) for p in policies))
            return out

    return found if _eager_under(runner, x, Record()) else None


def _distinct(policies: Sequence[NamedPolicy], calls: _PolicyCalls | None, label: str = "") -> list[NamedPolicy]:
    """``policies`` less each that keeps, on this stage, the outputs of the same
    operator calls as another (:attr:`Policy.SAVE_ATTENTION` on a block
    without attention keeps what ``SAVE_MATMULS`` keeps): measuring it again
    would find the same option, a compiled variant compiled once more for
    nothing. Of such policies the first stays, and of those that keep nothing
    here, one that keeps nothing anywhere (it runs without SAC's contexts).
    All of ``policies`` where ``calls`` (:func:`_policy_calls` of them) is
    None. O(operators x policies)."""
    if calls is None:
        return list(policies)
    # Of two that keep nothing here, the one that runs without SAC's contexts
    # (SAVE_INPUT: plain checkpointing, no Python call per operator).
    order = sorted(range(len(policies)), key=lambda i: not policies[i].keeps_nothing)
    kept: set[int] = set()
    seen: list[list[bool]] = []
    for i in order:
        decisions = calls.of(i)
        if decisions in seen:
            _log.debug("%s: policy %s keeps what another keeps here: not measured", label, policies[i].name)
            continue
        seen.append(decisions)
        kept.add(i)
    return [p for i, p in enumerate(policies) if i in kept]


def _recomputed_share(calls: _PolicyCalls | None, which: Sequence[int]) -> list[float]:
    """For each policy ``which`` names (its index in the list ``calls`` was
    made for), the share of the stage's forward work that its backward
    computes again: the work of the calls whose outputs the policy does not
    keep, over the whole forward's (:func:`_policy_calls`). A lower bound on
    the recomputation's time that no load can push to zero. 0 each where
    ``calls`` is None. O(operators x policies)."""
    total = sum(calls.work) if calls is not None else 0.0
    if calls is None or total <= 0:
        return [0.0] * len(which)
    return [sum(w for w, k in zip(calls.work, calls.keeps) if w and not k[i]) / total for i in which]
