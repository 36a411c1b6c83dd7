"""Running a remat schedule with autograd's own semantics.

A schedule (docs/model.md) is a list of operations over stages 1..L and the
loss L+1. Its **forward phase** (every operation before ``B^{L+1}``) runs each
stage once, in order; its **backward phase** interleaves the backwards
``B^L .. B^1`` with recomputations (``F_ck``, ``F_none``, ``F_all``).

How it runs (the design of non-reentrant ``torch.utils.checkpoint``, extended
from one segment to a whole schedule):

- The forward phase is the caller's own forward: each stage is called once,
  with autograd recording as usual, so the graph is the plain module's graph.
  Parameters, hooks, side inputs and ``autograd.grad`` behave as without remat:
  a parameter's hooks fire once with its full gradient, ``autograd.grad``
  writes no ``.grad``, ``backward(inputs=...)`` only touches those inputs.
- A stage the schedule records (``F_all``) saves its tensors as autograd does.
  Any other stage runs under ``torch.autograd.graph.saved_tensors_hooks`` whose
  pack hook keeps a small :class:`_Holder` in place of each saved tensor, so its
  activations are freed as soon as the forward moves on (parameters, buffers and
  side inputs are kept as they are: they are alive anyway).
- When the backward is about to run the node that made stage l's output (a
  pre-hook), or first reads a holder of stage l, the schedule's backward
  phase is run up to ``B^l``: its recomputations start from the activations the
  forward phase kept (the residue) and fill the holders of the stages they
  record. The pre-hook comes first: nothing ``B^l`` allocates is alive
  through them. Autograd then runs ``B^l`` itself and frees each saved tensor right
  after the node that reads it, as it does without remat.
- Everything a backward recomputes belongs to that backward (keyed by
  autograd's graph task id), so ``retain_graph=True`` followed by a second
  backward, and ``autograd.grad`` over part of the graph, recompute again; a
  callback queued on the engine drops a backward's state when it ends.
- With ``create_graph=True`` the recomputation records a graph from the kept
  activations (not detached), so double backward (gradient penalties) sees the
  full dependency of the saved tensors on the parameters and the input.
- The residue lives as long as the graph does: each holder references the
  residue below its stage, so an activation kept by the forward phase is freed
  when the last stage above it has run its backward (``B^{j+1}`` in the model),
  or never if the graph is retained.

Recording options (``F_all^l[o]``, o >= 1; :mod:`remat.torch.policies`):

- The recording forward of stage l runs as an unrecorded one does (holders in
  place of what autograd saves), under the caching context of PyTorch's
  selective activation checkpointing (SAC) for the option's policy, which keeps
  the outputs of the operators the policy saves. That is the whole of
  ``abar^l[o]``: those outputs and a^l.
- When the backward reaches stage l (``B^l``), the stage runs again recording,
  from a^{l-1}, under SAC's replaying context: the kept outputs are handed back
  instead of computed, the rest is computed, and what autograd saves fills the
  holders of the first run. Autograd then runs ``B^l`` itself. This rerun is the
  model's r^l[o] and, with the tensors it makes, o_b^l[o].
- In the forward phase the first run is that recording forward. In the
  backward phase ``F_all^l[o]`` is a recording run whose saved tensors are
  dropped (only the cache and a^l stay), and the rerun at ``B^l`` fills the
  holders. Under ``create_graph=True`` a backward-phase ``F_all^l[o]`` records
  the stage whole instead (its graph must stay differentiable).
- An offload option (:attr:`~remat.torch.Policy.OFFLOAD`, docs/model.md
  "Offload") records the stage whole, copying each storage autograd saves to
  host memory (pinned, for a GPU) and letting the device's go; the backward
  brings it back when autograd first reads it, one copy per storage, which
  lives until the stage's saved tensors are released. No rerun at ``B^l``. In
  the backward phase it is a recording run whose values go to the first run's
  holders as host copies. On a GPU the copies run on a side stream beside the
  stage's compute (out as each tensor is saved, back all at once at the first
  read of its backward); the stage's forward ends when the copies out have
  (the model counts the set on the device until then). On the CPU they are
  copies within host memory, for tests.
- SAC hands each kept output back once; a second backward through a retained
  graph (``retain_graph=True``) recomputes every operator of the stage again.
  PyTorch's own ``checkpoint(..., context_fn=...)`` is not used: its
  recomputation fills its own frame, not the holders of a graph remat recorded
  in the forward phase, and allows one backward per region.

Why the results equal the plain module's:

- RNG: the first run of a stage draws from the global generator in stage order,
  as the plain forward does; the RNG state (CPU and the input's CUDA device) is
  saved then for stages the schedule runs again (or records with an option),
  and restored for each rerun inside ``torch.random.fork_rng``: dropout masks
  repeat, and the operators an option recomputes draw what they drew.
- Buffers: a rerun copies the stage's buffers first and puts them back after
  (through ``.data``, so no version counter moves), so BatchNorm running
  statistics move once per step, as in the plain module.
- Autocast: the caller's autocast state at each stage's first run is re-entered
  for its reruns (autograd runs the backward outside autocast).
- In-place changes: an activation kept for recomputation whose version counter
  moved by the time it is needed raises autograd's own error; a rerun that
  saves other tensors (count, shape, dtype or device) than the first run raises
  an error naming the stage.

Memory: after each forward-phase operation the executor holds what the
simulator says; in the backward phase it holds no more (autograd frees each
saved tensor after its node, where the model frees a stage's abar after B^l).
"""

from __future__ import annotations

import contextlib
import enum
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from .policies import NamedPolicy
from .stages import Call, carried_output, stage_label

__all__ = ["Executor", "Op", "Program", "Step", "autocast_enabled", "run_schedule"]


class Op(enum.Enum):
    """The operations of a schedule (docs/model.md)."""

    F_ALL = "F_all"
    F_CK = "F_ck"
    F_NONE = "F_none"
    B = "B"


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


class Program:
    """A schedule compiled for running on ``num_stages`` stages.

    Operations are ``(kind, stage)`` or ``(kind, stage, option)``
    (:attr:`remat.Schedule.operations_with_options`): ``F_all^l[o]`` records
    stage l with its recording option o (docs/model.md), 0 being the stage
    recorded whole; other operations have option 0.

    Attributes:
        first: ``first[l]``, the operation that first runs stage l (1-based).
        first_option: ``first_option[l]``, its option (0 unless ``F_all^l[o]``).
        record_option: ``record_option[l]``, the option of the ``F_all^l``
            whose tensors ``B^l`` reads (each stage is recorded once before its
            backward): a compiled stage's unrecorded first run runs that
            option's variant, whose saved set the rerun then fills.
        rerun: ``rerun[l]``, whether stage l runs again: the schedule runs it
            again, or records it with an option (whose backward reruns it).
        backward: the operations after ``B^{L+1}``, as (kind, stage, option).
        reached: the stages whose backward the schedule runs forwards just
            before (since the ``B`` before it): the backward phase runs up to
            ``B^l`` as autograd reaches stage l, as the schedule has it, even
            where stage l was recorded whole (otherwise those forwards wait
            for the next stage that runs again, and the step's memory is
            another order's than the schedule's replay).
        keep: the activations a^j the forward phase keeps that a rerun may
            start from.
        options: whether any operation records with an option.

    Building it is O(number of operations).

    Raises:
        ValueError: an unknown operation, an option on another operation than
            ``F_all`` or on the loss, no ``B^{L+1}``, or a forward phase that
            does not run stages 1..L+1 once each in order (remat's solvers and
            baselines all produce such schedules).
    """

    def __init__(self, num_stages: int, operations: Sequence[tuple[str, int] | tuple[str, int, int]]) -> None:
        L = num_stages
        self.num_stages = L
        ops: list[tuple[Op, int, int]] = []
        for op in operations:
            try:
                kind, l = Op(op[0]), int(op[1])
            except ValueError as e:
                raise ValueError(f"the schedule has an unknown operation: {e}") from None
            o = int(op[2]) if len(op) > 2 else 0  # type: ignore[misc]
            if o < 0 or (o and (kind is not Op.F_ALL or l > L)):
                raise ValueError(f"the schedule has {kind.value}^{l}[{o}]: only F_all of stages 1..{L} takes an option")
            ops.append((kind, l, o))
        self.operations = ops
        try:
            split = [(k, l) for k, l, _ in ops].index((Op.B, L + 1))
        except ValueError:
            raise ValueError(f"the schedule has no B^{L + 1} (the loss's backward)") from None
        forward = ops[:split]
        if [l for _, l, _ in forward] != list(range(1, L + 2)) or any(k is Op.B for k, _, _ in forward):
            raise ValueError(
                "remat.torch runs schedules whose operations before the loss's backward run stages "
                f"1..{L + 1} once each, in order; this one runs {' '.join(f'{k.value}^{l}' for k, l, _ in forward)}"
            )
        self.first: list[Op] = [Op.F_ALL] + [k for k, _, _ in forward[:L]]
        self.first_option: list[int] = [0] + [o for _, _, o in forward[:L]]
        runs = [0] * (L + 2)
        with_option = [False] * (L + 2)
        for kind, l, o in ops:
            if kind is not Op.B:
                runs[l] += 1
            if o:
                with_option[l] = True
        self.options = any(with_option)
        self.rerun = [n > 1 or w for n, w in zip(runs[: L + 1], with_option)]
        self.record_option: list[int] = [0] * (L + 2)
        for kind, l, o in ops:
            if kind is Op.F_ALL:
                self.record_option[l] = o
        self.backward = ops[split + 1 :]
        reached: set[int] = set()
        pending = False
        for kind, l, _ in self.backward:
            if kind is Op.B:
                if pending:
                    reached.add(l)
                pending = False
            else:
                pending = True
        self.reached = frozenset(reached)
        held: dict[int, Op] = {0: Op.F_CK}
        for kind, l, _ in forward[:L]:
            held[l] = kind
            if kind is Op.F_NONE:
                held.pop(l - 1, None)
        if held.get(L) is not Op.F_ALL:  # B^{L+1} drops a plain a^L
            held.pop(L, None)
        top = max((l for l in range(L + 1) if self.rerun[l]), default=0)
        self.keep = frozenset(j for j in held if j < top)

    @property
    def stored_all(self) -> bool:
        """Whether nothing is run again (storing everything: plain autograd)."""
        return not any(self.rerun)


class _Residue:
    """An activation a^j the forward phase keeps for reruns, and the one below it."""

    __slots__ = ("__weakref__", "index", "prev", "value", "version")

    def __init__(self, index: int, value: torch.Tensor, prev: _Residue | None) -> None:
        self.index = index
        self.value = value
        self.version = value._version
        self.prev = prev


class _Holder:
    """What autograd saves in place of a tensor of a stage that is not recorded:
    the recomputed value per backward (graph task id), and the residue below."""

    __slots__ = ("__weakref__", "anchor", "index", "stage", "step", "values")

    def __init__(self, step: Step, stage: int, index: int, anchor: _Residue | None) -> None:
        self.step = step
        self.stage = stage
        self.index = index
        self.anchor = anchor
        self.values: dict[int, torch.Tensor | _OnHost] = {}


class _Cache:
    """What a recording under a policy keeps: SAC's replaying context, which
    hands the saved operator outputs back once (SAC marks them consumed), to
    the rerun at the start of the stage's backward."""

    __slots__ = ("replaying", "used")

    def __init__(self, replaying: Any) -> None:
        self.replaying = replaying
        self.used = False

    def context(self) -> Any:
        """The replaying context, or none once it was used: a second backward
        through a retained graph recomputes every operator instead."""
        if self.used:
            return contextlib.nullcontext()
        self.used = True
        replaying, self.replaying = self.replaying, None
        return replaying


def _host_bytes(t: torch.Tensor) -> bytes:
    """A CPU generator's state (5,056 bytes) as bytes: kept from a stage's first
    run to its last rerun, it is bookkeeping, like the holders, and stays out
    of the tensor allocator the budget counts (on the CPU that allocator is the
    device's; there, one state per stage that draws and runs again would
    otherwise be memory the model does not have)."""
    return t.numpy().tobytes()


def _set_rng(cpu: bytes, cuda: torch.Tensor | None, device: int | None) -> None:
    """Puts the generators in the states ``cpu`` (:func:`_host_bytes`) and
    ``cuda`` (of ``device``; left alone where either is None)."""
    torch.set_rng_state(torch.frombuffer(bytearray(cpu), dtype=torch.uint8))
    if cuda is not None and device is not None:
        torch.cuda.set_rng_state(cuda, device)


def program_option(program: Program, l: int) -> int:
    """The option stage l's first run records with (its holders' variant)."""
    return program.first_option[l] if program.first[l] is Op.F_ALL else program.record_option[l]


def _dropped(t: torch.Tensor) -> None:
    return None


def _never(_: object) -> torch.Tensor:
    raise RuntimeError("remat: a graph recorded only to cache a policy's outputs was run backward (a bug in remat)")


#: One stream per CUDA device for the offload option's copies, beside the
#: compute stream, so that they overlap the stage's own compute.
_SIDE_STREAMS: dict[int, torch.cuda.Stream] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = _SIDE_STREAMS.get(index)
    if stream is None:
        stream = _SIDE_STREAMS[index] = torch.cuda.Stream(device=index)
    return stream


class _HostCopies:
    """The host copies of what one offloaded recording saved, one per
    storage, and the device copies brought back from them: each brought back
    once and alive while a tensor read from it is (its views keep it).

    On a GPU the copies run on a side stream. Out: each storage's copy starts
    when the recording saves it, behind the compute that made it, and runs
    beside the rest of the stage's forward; :meth:`finish` waits for the last
    one before the device's bytes go (docs/model.md: the whole set is on the
    device until the copies end). Back: the first read of the backward brings
    every storage back at once, the last saved first (autograd reads them in
    about the reverse order), and each read waits only for its own copy, so
    the stage's backward starts while the rest arrive. On the CPU the copies
    are plain copies within host memory (tests)."""

    __slots__ = ("back", "device", "fetched", "host", "own", "pending", "prefetched")

    def __init__(self, own: frozenset[int]) -> None:
        self.own = own
        self.host: dict[int, torch.Tensor] = {}
        self.back: dict[int, weakref.ref[torch.Tensor]] = {}
        #: Device copies brought back ahead of their read, and the event each
        #: read waits for (a GPU's).
        self.fetched: dict[int, tuple[torch.Tensor, torch.cuda.Event]] = {}
        #: The device storages copied, kept until :meth:`finish` (their copies
        #: out may still run, and a key is a storage's address).
        self.pending: list[torch.Tensor] = []
        self.device: torch.device | None = None
        self.prefetched = False

    def pack(self, t: torch.Tensor) -> object:
        """``t`` itself where it stays (a parameter, the stage's own or side
        tensors, a tensor already on the host when the device is not), else a
        :class:`_OnHost` naming its storage's host copy (started now; on a
        GPU :meth:`finish` waits for it)."""
        key = _storage(t)
        if isinstance(t, nn.Parameter) or t.device.type == "meta" or key in (-1, 0) or key in self.own:
            return t
        if t.layout is not torch.strided or t.is_sparse or t.is_quantized:
            return t
        if key not in self.host:
            source = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
            cuda = t.device.type == "cuda"
            host = torch.empty(source.shape, dtype=torch.uint8, pin_memory=cuda)
            if cuda:
                side = _side_stream(t.device)
                side.wait_stream(torch.cuda.current_stream(t.device))  # after the compute that made it
                with torch.cuda.stream(side):
                    host.copy_(source, non_blocking=True)
                self.device = t.device
            else:
                host.copy_(source)
            self.host[key] = host
            # Also keeps the key unique: a storage freed during the recording
            # could leave its address to another one, taken for it.
            self.pending.append(source)
        return _OnHost(self, key, t)

    def finish(self) -> None:
        """Waits (the host) for every copy out, then lets the device's bytes
        go: the allocator may hand them out again at once, and the device's
        peak is the model's. On the CPU it only lets them go."""
        if self.pending and self.device is not None:
            done = torch.cuda.Event()
            done.record(_side_stream(self.device))
            done.synchronize()
        self.pending.clear()

    def _fetch(self, keys: list[int], device: torch.device) -> None:
        """Starts bringing ``keys`` back on the side stream, in that order."""
        side = _side_stream(device)
        copies = []
        for key in keys:
            host = self.host[key]
            copies.append((key, host, torch.empty(host.shape, dtype=torch.uint8, device=device)))
        # After everything the compute stream has queued: a block the
        # allocator just handed out may still be read by its earlier kernels.
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for key, host, base in copies:
                base.copy_(host, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record(side)
                # Freed unread (a graph dropped mid-backward), its bytes wait
                # for the copy before the allocator hands them out again.
                base.record_stream(side)
                self.fetched[key] = (base, ready)

    def bring_back(self, o: _OnHost) -> torch.Tensor:
        ref = self.back.get(o.key)
        base = ref() if ref is not None else None
        if base is None:
            if o.device.type != "cuda":
                base = self.host[o.key].to(o.device, copy=True)
            else:
                if o.key not in self.fetched:
                    if self.prefetched:
                        keys = [o.key]  # read again (a retained graph's second backward)
                    else:
                        keys = [k for k in reversed(self.host) if k not in self.fetched]
                        self.prefetched = True
                    self._fetch(keys, o.device)
                base, ready = self.fetched.pop(o.key)
                torch.cuda.current_stream(o.device).wait_event(ready)
            self.back[o.key] = weakref.ref(base)
        # A view of ``base`` (its _base): the device copy lives while it does.
        return base.view(o.dtype).as_strided(o.size, o.stride, o.offset)


class _OnHost:
    """A saved tensor of an offloaded recording: where its bytes are on the host."""

    __slots__ = ("copies", "device", "dtype", "key", "offset", "size", "stride")

    def __init__(self, copies: _HostCopies, key: int, t: torch.Tensor) -> None:
        self.copies = copies
        self.key = key
        self.device = t.device
        self.dtype = t.dtype
        self.size = t.size()
        self.stride = t.stride()
        self.offset = t.storage_offset()


def _unpack(h: object) -> torch.Tensor:
    if isinstance(h, torch.Tensor):
        return h
    if isinstance(h, _OnHost):
        return h.copies.bring_back(h)
    assert isinstance(h, _Holder)
    return h.step.unpack(h)


class Executor:
    """Runs one program on a fixed list of stages, one :class:`Step` per forward.

    Args:
        stages: the stage modules, in order.
        forwards: how to call each stage (``module.__call__`` by default; a
            block whose ``forward`` remat replaced passes the original one).
        first_forwards: how to call each stage in its first run of a step
            (``forwards`` by default). A caller that is itself the stage's
            ``__call__`` (remat's own ``forward`` of a block) passes the bare
            forward, so that the module's hooks, which that call runs, fire once
            per run of the stage and not twice.
        program: the compiled schedule.
        preserve_rng: replay the RNG state on reruns.
        names: the stages' names, for messages.
        inplace: ``inplace[l-1]``: stage l changes its input in place, so it gets
            a copy (found by :func:`remat.torch.profile`).
        uses_rng: ``uses_rng[l-1]``: stage l draws random numbers, so its RNG
            state is saved and replayed (None: not known; each stage run again
            is taken to draw until its first run, which shows whether the
            generator moved).
        options: ``options[l-1][o]``, the policy that records stage l with
            option o >= 1 (``options[l-1][0]`` is None: option 0 records it
            whole); needed for every ``F_all^l[o]`` of the schedule.
        compiled: ``compiled[l-1]``, stage l's compiled variants
            (:mod:`remat.torch.compiled`), or None where it runs eagerly:
            ``compiled[l-1][o]`` records it under option o (0: whole), called
            as ``forwards`` are. A compiled option keeps its saved set itself,
            so its runs need no SAC contexts and no rerun at the start of its
            backward; a recomputation (``F_ck``, ``F_none``) runs the graph of
            the stage's first run with its saved tensors dropped, so its values
            are the first run's to the bit.
        on_op: called with (kind, stage) after each operation, for tests that
            measure memory operation by operation: a forward-phase operation on
            stage l < L is reported when stage l + 1 is called (the caller has
            let go of a^{l-1} then), stage L and the loss when stage L returns,
            a backward-phase recomputation right after it runs, and ``B^l``
            when the schedule moves past it.
    """

    def __init__(
        self,
        stages: Sequence[nn.Module],
        program: Program,
        *,
        forwards: Sequence[Callable[..., Any]] | None = None,
        first_forwards: Sequence[Callable[..., Any]] | None = None,
        preserve_rng: bool = True,
        names: Sequence[str] | None = None,
        inplace: Sequence[bool] | None = None,
        uses_rng: Sequence[bool] | None = None,
        options: Sequence[Sequence[NamedPolicy | None]] | None = None,
        compiled: Sequence[Sequence[Callable[..., Any]] | None] | None = None,
        on_op: Callable[[str, int], None] | None = None,
        bridges: Sequence[int] = (),
    ) -> None:
        if len(stages) != program.num_stages:
            raise ValueError(f"the schedule is for {program.num_stages} stages, got {len(stages)}")
        self.options: list[list[NamedPolicy | None]] = [list(o) for o in options] if options is not None else []
        self.compiled: list[list[Callable[..., Any]] | None] = (
            [list(c) if c is not None else None for c in compiled] if compiled is not None else [None] * len(stages)
        )
        if len(self.compiled) != len(stages):
            raise ValueError(f"compiled= has {len(self.compiled)} entries for {len(stages)} stages")
        for _, l, o in program.operations:
            if l > len(stages):
                continue
            variants = self.compiled[l - 1]
            if variants is not None:
                if o >= len(variants):
                    raise ValueError(f"the schedule records stage {l} with option {o}, which has no compiled variant")
            elif o and (l > len(self.options) or o >= len(self.options[l - 1]) or self.options[l - 1][o] is None):
                raise ValueError(f"the schedule records stage {l} with option {o}, for which no policy was given")
        self.stages = list(stages)
        self.program = program
        self.forwards: list[Callable[..., Any]] = list(forwards) if forwards is not None else list(stages)
        self.first_forwards: list[Callable[..., Any]] = (
            list(first_forwards) if first_forwards is not None else self.forwards
        )
        if len(self.first_forwards) != len(stages):
            raise ValueError(f"first_forwards= has {len(self.first_forwards)} entries for {len(stages)} stages")
        self.preserve_rng = preserve_rng
        given = list(names) if names is not None else [None] * len(stages)
        # "3:Linear", the automatic name, says no more than the label does.
        self.names = [None if n == f"{i + 1}:{type(s).__name__}" else n for i, (n, s) in enumerate(zip(given, stages))]
        self.inplace = list(inplace) if inplace is not None else [False] * len(stages)
        draws = list(uses_rng) if uses_rng is not None else [True] * len(stages)
        # Stages whose reruns replay an RNG state: those that draw and run again.
        self.replay_rng = [False] + [preserve_rng and d and program.rerun[l] for l, d in enumerate(draws, 1)]
        #: Stages whose first run is to show whether they draw (uses_rng None).
        self.learn_rng = [False] + [uses_rng is None and r for r in self.replay_rng[1:]]
        self.has_buffers = [False] + [any(True for _ in s.buffers()) for s in self.stages]
        # Storages of each stage's parameters and buffers, found at its first
        # unrecorded run (FSDP2 gathers parameters only then).
        self.own: list[frozenset[int] | None] = [None] * len(self.stages)
        self.on_op = on_op
        #: Stages that stand for the caller's code between two stacks (docs/model.md,
        #: "Several stacks"): run by the caller, never by the executor; the
        #: schedule records each in the forward phase and runs it no more.
        self.bridges = frozenset(bridges)
        for l in self.bridges:
            if program.first[l] is not Op.F_ALL or program.rerun[l]:
                raise ValueError(
                    f"the schedule runs {self.label(l)}, the part between two stacks, otherwise than recorded once "
                    "in the forward phase"
                )

    def label(self, l: int) -> str:
        return stage_label(l - 1, self.stages[l - 1], self.names[l - 1])

    def recording(self, l: int, option: int) -> Callable[..., Any] | None:
        """Stage l's compiled variant for ``option``, or None where it runs
        eagerly (through ``forwards``, under SAC's contexts for an option)."""
        variants = self.compiled[l - 1]
        return variants[option] if variants is not None else None

    def offloads(self, l: int, option: int) -> bool:
        """Whether stage l's option ``option`` is an offload option."""
        if not option or l > len(self.options) or option >= len(self.options[l - 1]):
            return False
        p = self.options[l - 1][option]
        return p is not None and p.offload

    def _own(self, l: int) -> frozenset[int]:
        if self.own[l - 1] is None:
            self.own[l - 1] = _own_storages(self.stages[l - 1])
        own = self.own[l - 1]
        assert own is not None
        return own

    def policy(self, l: int, option: int) -> NamedPolicy:
        """The policy of stage l's option ``option`` >= 1 (checked when built)."""
        p = self.options[l - 1][option]
        assert p is not None
        return p

    def begin(self) -> Step:
        """Starts a forward phase (a new step)."""
        return Step(self)

    def skip(self, step: Step, l: int, x: torch.Tensor) -> None:
        """Stages ``step.next`` .. l - 1 do not run in ``step`` (LayerDrop
        skipped them): each is the identity for this step, its output its
        input ``x``, and recomputing it is nothing. The schedule still holds:
        an identity keeps no more than the stage would."""
        for j in range(step.next, min(l, len(self.stages) + 1)):
            if j in self.bridges:
                step.bridge(j)
            else:
                step.skip(j, x)

    def call(self, step: Step, l: int, call: Call) -> Any:
        """Runs stage l for the first time in ``step`` (stages run in order)."""
        if l != step.next:
            expected = self.label(step.next) if step.next <= len(self.stages) else "no stage"
            raise RuntimeError(
                f"remat: {self.label(l)} was called when {expected} was expected; the stages must run once each, "
                "in order, in every forward"
            )
        y = step.first_run(l, call)
        if l == len(self.stages):
            step.finish()
        return y


def _storage(t: torch.Tensor) -> int:
    """The address of ``t``'s memory, or -1 where it has none to ask (a sharded
    or resized-away parameter under FSDP2, a tensor subclass)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError, TypeError):
        return -1


def _own_storages(stage: nn.Module) -> frozenset[int]:
    """Storages of a stage's parameters and buffers (buffers change in place,
    so their storages stay; a parameter is also known by its type)."""
    return frozenset(_storage(t) for t in [*stage.parameters(), *stage.buffers()]) - {-1, 0}


def _kept_as_is(own: frozenset[int], call: Call) -> frozenset[int]:
    """Storages a stage's autograd may save that remat keeps rather than drops:
    its parameters and buffers (``own``) and its side inputs, alive anyway."""
    if len(call.args) > 1 or call.kwargs:
        return own | ({_storage(t) for t in call.side_tensors()} - {-1, 0})
    return own


class Step:
    """One forward of the stages and every backward through it."""

    def __init__(self, executor: Executor) -> None:
        self.ex = executor
        n = len(executor.stages) + 1
        self.next = 1
        self.calls: list[Call | None] = [None] * n
        self.input_grad = [False] * n
        self.rng: list[tuple[bytes, torch.Tensor | None] | None] = [None] * n
        self.autocast: list[list[tuple[str, torch.dtype]]] = [[] for _ in range(n)]
        self.holders: list[list[weakref.ref[_Holder] | None]] = [[] for _ in range(n)]
        self.metas: list[list[tuple[torch.Size, torch.dtype, torch.device]]] = [[] for _ in range(n)]
        self.residue: dict[int, weakref.ref[_Residue]] = {}
        self._strong: list[_Residue] = []
        self._last: _Residue | None = None
        self.cuda_device: int | None = None
        self.tasks: dict[int, _Task] = {}
        self._pending: tuple[str, int] | None = None
        #: What stages recorded with an option in the forward phase keep, until
        #: their backward's rerun.
        self.caches: dict[int, _Cache] = {}
        #: Stages that did not run in this step (identities: see Executor.skip).
        self.skipped: set[int] = set()
        #: The residue kept at skipped stages: no holder of theirs anchors it, so
        #: it lives as long as the step does (as long as any holder).
        self._skipped_residue: list[_Residue] = []
        #: Called with (stage, the operation's index in the schedule, its
        #: output) after each forward the backward phase runs: an observer's
        #: (remat.torch.lifetimes).
        self.on_rerun: Callable[[int, int, torch.Tensor], None] | None = None

    # -- the forward phase --------------------------------------------------

    def _keep(self, j: int, x: torch.Tensor) -> None:
        r = _Residue(j, x, self._last)
        self._strong.append(r)
        self.residue[j] = weakref.ref(r)
        self._last = r

    def skip(self, l: int, x: torch.Tensor) -> None:
        """Stage l, skipped in this step: its output is its input ``x``."""
        ex = self.ex
        if self._pending is not None and ex.on_op is not None:
            ex.on_op(*self._pending)
            self._pending = None
        if (l - 1) in ex.program.keep:
            self._keep(l - 1, x)
            assert self._last is not None
            self._skipped_residue.append(self._last)
        self.skipped.add(l)
        self.next = l + 1

    def bridge(self, l: int) -> None:
        """Stage l, the caller's code between two stacks, has run (the next
        stack's first block is called): nothing of it is kept here; the next
        stage's call keeps its input where the schedule says so."""
        ex = self.ex
        if self._pending is not None and ex.on_op is not None:
            ex.on_op(*self._pending)
        self._pending = (Op.F_ALL.value, l)
        self.next = l + 1

    def first_run(self, l: int, call: Call) -> Any:
        ex = self.ex
        program = ex.program
        x = call.carried
        if l == 1 and x.device.type == "cuda":
            self.cuda_device = x.device.index if x.device.index is not None else torch.cuda.current_device()
        if self._pending is not None and ex.on_op is not None:
            # Reported now that the caller has let go of the activation before it.
            ex.on_op(*self._pending)
            self._pending = None
        if (l - 1) in program.keep:
            self._keep(l - 1, x)
        rerun = program.rerun[l]
        if rerun:
            self.calls[l] = call.without_carried()
            self.input_grad[l] = x.requires_grad
            self.autocast[l] = _autocast_state()
            if ex.replay_rng[l]:
                cuda = None if self.cuda_device is None else torch.cuda.get_rng_state(self.cuda_device)
                self.rng[l] = (_host_bytes(torch.get_rng_state()), cuda)
        if ex.inplace[l - 1]:
            call = Call(*call.with_carried(x.clone()), call.position)
        fn = ex.first_forwards[l - 1]
        kind = program.first[l]
        option = program.first_option[l]
        compiled = ex.recording(l, program_option(program, l))
        whole = True  # recorded as is: no holders
        if kind is Op.F_ALL and compiled is not None:
            # A compiled option saves its own set (abar^l[o]): recorded as is.
            y = compiled(*call.args, **call.kwargs)
        elif kind is Op.F_ALL and not option:
            y = fn(*call.args, **call.kwargs)
        elif kind is Op.F_ALL and ex.offloads(l, option):
            copies = _HostCopies(_kept_as_is(ex._own(l), call))
            with torch.autograd.graph.saved_tensors_hooks(copies.pack, _unpack):
                y = fn(*call.args, **call.kwargs)
            copies.finish()
        else:
            whole = False
            if ex.own[l - 1] is None:
                ex.own[l - 1] = _own_storages(ex.stages[l - 1])
            own = _kept_as_is(ex.own[l - 1], call)
            holders = self.holders[l]
            metas = self.metas[l]
            anchor = self._last

            def pack(t: torch.Tensor) -> object:
                metas.append((t.shape, t.dtype, t.device))
                if isinstance(t, nn.Parameter) or t.device.type == "meta" or _storage(t) in own:
                    holders.append(None)
                    return t
                h = _Holder(self, l, len(holders), anchor)
                holders.append(weakref.ref(h))
                return h

            with torch.autograd.graph.saved_tensors_hooks(pack, _unpack):
                if compiled is not None:
                    # The variant that records the stage before B^l: its rerun
                    # there saves the same tensors, into these holders.
                    y = compiled(*call.args, **call.kwargs)
                elif option:
                    # F_all^l[o]: what autograd saves goes to holders (filled by
                    # a rerun when the backward reaches the stage); SAC's caching
                    # context keeps the outputs the policy saves for that rerun.
                    caching, replaying = ex.policy(l, option).contexts()
                    self.caches[l] = _Cache(replaying)
                    with caching:
                        y = fn(*call.args, **call.kwargs)
                else:
                    y = fn(*call.args, **call.kwargs)
        if not whole or l in program.reached:
            # (A stage recorded whole: only where the schedule runs forwards
            # just before its backward; nothing else of it reaches B^l first.)
            self._rerun_first(l, y)
        if ex.learn_rng[l]:
            self._learn_rng(l)
        self.next = l + 1
        self._pending = (kind.value, l)
        return y

    def _learn_rng(self, l: int) -> None:
        """After the first run of stage l whose RNG use was not known: a stage
        that left the generator where it was has no state to replay, now or in
        later steps."""
        ex = self.ex
        ex.learn_rng[l] = False
        state = self.rng[l]
        assert state is not None
        moved = state[0] != _host_bytes(torch.get_rng_state())
        if state[1] is not None and self.cuda_device is not None:
            moved = moved or not torch.equal(state[1], torch.cuda.get_rng_state(self.cuda_device))
        if not moved:
            self.rng[l] = None
            ex.replay_rng[l] = False

    def finish(self) -> None:
        """Ends the forward phase: the residue now lives as long as the graph."""
        self._strong = []
        self._last = None
        if self.ex.on_op is not None and self._pending is not None:
            self.ex.on_op(*self._pending)
            self.ex.on_op("F_all", len(self.ex.stages) + 1)
        self._pending = None

    # -- the backward phase -------------------------------------------------

    def _rerun_first(self, l: int, y: object) -> None:
        """Stage l's first run, whose saved tensors are holders: the backward
        phase's operations up to ``B^l`` run when autograd is about to run
        the node that made its output (a pre-hook), before any node of the
        stage allocates. Left to the first read of a holder, a node that
        reads none ran first, and what it allocated stayed alive through
        the recomputation: a Mixtral block's backward allocated 131,072 B
        (its routed tokens' gradient) before its first saved tensor was read,
        and the step measured 13,840 B above its prediction."""
        try:
            out = carried_output(y, lambda: "")
        except TypeError:
            return
        node = out.grad_fn
        if node is not None:
            node.register_prehook(lambda _grads, l=l: self._reach(l))

    def _reach(self, l: int) -> None:
        """Runs the backward phase up to ``B^l`` in the current backward."""
        gid = torch._C._current_graph_task_id()
        if gid != -1:
            self._task(gid).advance_to(l)

    def _task(self, gid: int) -> _Task:
        """The backward phase of backward pass ``gid`` (made at its first use)."""
        task = self.tasks.get(gid)
        if task is None:
            task = self.tasks[gid] = _Task(self, gid)
            torch.autograd.Variable._execution_engine.queue_callback(lambda: self._end_task(gid))
        return task

    def unpack(self, h: _Holder) -> torch.Tensor:
        gid = torch._C._current_graph_task_id()
        if gid == -1:
            raise RuntimeError(
                f"remat: a tensor saved by {self.ex.label(h.stage)} was read outside a backward pass; remat "
                "recomputes it during backward only"
            )
        task = self._task(gid)
        v = h.values.get(gid)
        if v is None:
            task.advance_to(h.stage)
            v = h.values.get(gid)
            if v is None:
                raise RuntimeError(
                    f"remat: the schedule did not recompute tensor {h.index} of {self.ex.label(h.stage)} before its "
                    "backward (a bug in remat: please report it with the schedule)"
                )
        if _read_once():
            del h.values[gid]  # autograd's own node: freed with it, as without remat
        else:
            task.kept.append(weakref.ref(h))  # may be read again in this backward
        if isinstance(v, _OnHost):
            return v.copies.bring_back(v)  # an offloaded recording's
        return v

    def _end_task(self, gid: int) -> None:
        """The end of a backward: what it recomputed and kept for a second read
        goes (a holder that outlives it is in a retained graph)."""
        task = self.tasks.pop(gid, None)
        if task is not None:
            for ref in task.kept:
                h = ref()
                if h is not None:
                    h.values.pop(gid, None)

    @contextlib.contextmanager
    def rerun_context(self, l: int) -> Iterator[None]:
        """A rerun of stage l: its first run's RNG state and autocast, its buffers
        put back afterwards (each only where the stage has one)."""
        ex = self.ex
        with contextlib.ExitStack() as stack:
            if ex.has_buffers[l]:
                buffers = [(b, b.detach().clone()) for b in ex.stages[l - 1].buffers()]

                def put_back() -> None:
                    # Through .data: the restore must not bump the buffers' version
                    # counters, which the graph this run recorded checks in backward
                    # (BatchNorm saves its running statistics).
                    for b, saved in buffers:
                        b.data.copy_(saved)

                stack.callback(put_back)
            state = self.rng[l]
            if state is not None:
                # As torch.random.fork_rng, but the CPU generator's state is
                # kept as bytes: fork_rng's 5,056-byte tensor was alive through
                # the whole rerun, on the CPU memory the budget counts (a
                # RoBERTa step's peak, a rerun in the backward phase, measured
                # 4,544 B above its prediction).
                device = self.cuda_device
                cuda_now = None if device is None else torch.cuda.get_rng_state(device)
                stack.callback(_set_rng, _host_bytes(torch.get_rng_state()), cuda_now, device)
                _set_rng(state[0], state[1], device)
            if self.autocast[l]:
                stack.enter_context(_autocast(self.autocast[l]))
            yield


_current_node: Callable[[], object] = getattr(torch._C, "_current_autograd_node", lambda: None)


def _read_once() -> bool:
    """Whether the saved tensor being unpacked is read once in this backward:
    by one of autograd's own nodes, which unpack each saved tensor once. A
    custom ``autograd.Function``'s backward may read ``ctx.saved_tensors`` as
    often as it likes (each read unpacks again), as may a hook reading
    ``grad_fn._saved_*``: their tensors stay until the backward ends."""
    node = _current_node()
    return node is not None and not isinstance(node, torch.autograd.function.BackwardCFunction)


class _Task:
    """The backward phase of one backward pass (one autograd graph task)."""

    def __init__(self, step: Step, gid: int) -> None:
        self.step = step
        self.gid = gid
        self.pos = 0
        self.held: dict[int, torch.Tensor] = {}
        self.recorded: set[int] = set()
        self.create_graph = torch.is_grad_enabled()
        #: Stages the backward phase recorded with an option: their caches.
        self.fills: dict[int, _Cache] = {}
        self.filled: set[int] = set()
        #: Holders whose recomputed tensor stays for another read (see _read_once).
        self.kept: list[weakref.ref[_Holder]] = []

    def value(self, j: int) -> torch.Tensor:
        v = self.held.get(j)
        if v is not None:
            return v
        ref = self.step.residue.get(j)
        r = ref() if ref is not None else None
        if r is None:
            raise RuntimeError(
                f"remat: a^{j} is not in memory when the schedule needs it (a bug in remat, or the graph was "
                "partly freed by an earlier backward)"
            )
        if r.value._version != r.version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace operation: "
                f"remat kept the input of stage {j + 1} ({tuple(r.value.shape)}) to recompute from it, and it "
                f"changed from version {r.version} to {r.value._version} after the forward"
            )
        return r.value

    def advance_to(self, k: int) -> None:
        """Runs the backward phase's operations up to ``B^k``."""
        ops = self.step.ex.program.backward
        on_op = self.step.ex.on_op
        while self.pos < len(ops):
            kind, l, option = ops[self.pos]
            if kind is Op.B:
                if l == k:
                    self._fill(k)
                    # B^k reads its saved tensors from the holders: an activation
                    # kept to recompute stage k or above is not needed any more
                    # (the model drops a plain a^{k-1} only after B^k; autograd
                    # frees what B^k itself saved node by node).
                    for j in [j for j in self.held if j >= k - 1]:
                        del self.held[j]
                    return
                if l < k:
                    break
                # Autograd has run B^l: drop what the model drops after it.
                self.held.pop(l, None)
                if l - 1 not in self.recorded:
                    self.held.pop(l - 1, None)
                self.recorded.discard(l)
            else:
                self.run(kind, l, option)
                watch = self.step.on_rerun
                if watch is not None and l in self.held:
                    program = self.step.ex.program
                    watch(l, len(program.operations) - len(ops) + self.pos, self.held[l])
            self.pos += 1
            if on_op is not None:
                on_op(kind.value, l)
        raise RuntimeError(
            f"remat: the backward reached {self.step.ex.label(k)} after the schedule had moved past it "
            "(a bug in remat, or a graph whose stages do not run their backwards in order)"
        )

    def _fill(self, k: int) -> None:
        """The start of ``B^k`` for a stage recorded with an option: reruns it
        recording, under SAC's replaying context (the outputs its policy kept
        are handed back, the rest computed), and hands what it saves to the
        holders of the first run. A stage recorded whole has nothing to do."""
        step = self.step
        program = step.ex.program
        if step.ex.compiled[k - 1] is not None:
            return  # a compiled option's run saved its own set: nothing to replay
        cache = self.fills.pop(k, None)
        if (
            cache is None
            and program.first[k] is Op.F_ALL
            and program.first_option[k]
            and not step.ex.offloads(k, program.first_option[k])
        ):
            cache = step.caches.get(k)
            if cache is None:  # not kept: recompute every operator
                cache = _Cache(None)
                cache.used = True
        if cache is None or k in self.filled:
            return
        self.filled.add(k)
        ex = step.ex
        x = self.value(k - 1)
        call = step.calls[k]
        assert call is not None, f"stage {k} is recorded with an option but its call was not kept"
        plain = not (ex.has_buffers[k] or step.rng[k] is not None or step.autocast[k])
        with contextlib.nullcontext() if plain else step.rerun_context(k):
            inp = x if self.create_graph else self._detached_input(k, x)
            if ex.inplace[k - 1]:
                # The copy of the first run was made outside SAC's context.
                with torch.enable_grad():
                    inp = inp.clone()
            with cache.context():
                self._record(k, ex.forwards[k - 1], call, inp, False)

    def _detached_input(self, l: int, x: torch.Tensor) -> torch.Tensor:
        return x.detach().requires_grad_(self.step.input_grad[l] and (x.is_floating_point() or x.is_complex()))

    def run(self, kind: Op, l: int, option: int = 0) -> None:
        step = self.step
        ex = step.ex
        x = self.value(l - 1)
        if l in step.skipped:
            self.held[l] = x  # a stage skipped in this step: the identity
            if kind is Op.F_ALL:
                self.recorded.add(l)
            return
        call = step.calls[l]
        assert call is not None, f"stage {l} is run again but its call was not kept"
        fn = ex.forwards[l - 1]
        compiled = ex.recording(l, option) if kind is Op.F_ALL else None
        if ex.compiled[l - 1] is not None and self.create_graph:
            raise RuntimeError(
                f"remat: {ex.label(l)} runs compiled, and a compiled block's backward cannot be differentiated "
                "again (create_graph=True); apply remat with compile=False for double backward"
            )
        plain = not (ex.has_buffers[l] or step.rng[l] is not None or step.autocast[l])
        with contextlib.nullcontext() if plain else step.rerun_context(l):
            if compiled is not None:
                # F_all^l[o] compiled: the variant saves abar^l[o], into the
                # first run's holders (which ran the same variant).
                inp = self._detached_input(l, x)
                out = self._record(l, compiled, call, inp, ex.inplace[l - 1])
                self.recorded.add(l)
            elif kind is Op.F_ALL and ex.offloads(l, option) and not self.create_graph:
                # Recorded into the first run's holders, as host copies.
                inp = self._detached_input(l, x)
                copies = _HostCopies(_kept_as_is(ex._own(l), call))
                out = self._record(l, fn, call, inp, ex.inplace[l - 1], copies)
                copies.finish()
                self.recorded.add(l)
            elif kind is Op.F_ALL and option and not self.create_graph:
                # F_all^l[o]: a recording run whose saved tensors are dropped
                # (what the first run's holders need is made again at B^l),
                # under SAC's caching context, which keeps the policy's outputs.
                # Under create_graph the stage is recorded whole instead.
                caching, replaying = ex.policy(l, option).contexts()
                inp = self._detached_input(l, x)
                args, kwargs = call.with_carried(inp.clone() if ex.inplace[l - 1] else inp)
                with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(_dropped, _never), caching:
                    out = carried_output(fn(*args, **kwargs), lambda: ex.label(l))
                self.fills[l] = _Cache(replaying)
                self.filled.discard(l)
                self.recorded.add(l)
            elif kind is Op.F_ALL:
                inp = x if self.create_graph else self._detached_input(l, x)
                out = self._record(l, fn, call, inp, ex.inplace[l - 1])
                self.recorded.add(l)
            else:
                if ex.inplace[l - 1]:
                    x = x.clone()
                if ex.compiled[l - 1] is not None:
                    # The graph of the stage's first run, its saved tensors
                    # dropped: the values are that run's to the bit (another
                    # graph, an inference one, may fuse and round otherwise).
                    variant = ex.recording(l, program_option(step.ex.program, l))
                    assert variant is not None
                    args, kwargs = call.with_carried(self._detached_input(l, x))
                    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(_dropped, _never):
                        out = carried_output(variant(*args, **kwargs), lambda: ex.label(l))
                else:
                    args, kwargs = call.with_carried(x)
                    with torch.set_grad_enabled(self.create_graph):
                        out = carried_output(fn(*args, **kwargs), lambda: ex.label(l))
                if kind is Op.F_NONE:
                    self.held.pop(l - 1, None)
                    self.recorded.discard(l - 1)
        self.held[l] = out if self.create_graph else out.detach()

    def _record(
        self,
        l: int,
        fn: Callable[..., Any],
        call: Call,
        inp: torch.Tensor,
        copy: bool,
        host: _HostCopies | None = None,
    ) -> torch.Tensor:
        """Reruns stage l recording, and hands each tensor it saves to the
        holder of the first run's tensor at the same position (as a host copy
        where ``host`` is given: an offloaded recording)."""
        step = self.step
        holders = step.holders[l]
        metas = step.metas[l]
        gid = self.gid
        keep_graph = self.create_graph
        count = 0

        def pack(t: torch.Tensor) -> None:
            nonlocal count
            i = count
            count += 1
            if i >= len(metas) or metas[i] != (t.shape, t.dtype, t.device):
                first = metas[i] if i < len(metas) else "nothing"
                raise RuntimeError(
                    f"remat: {step.ex.label(l)} saved a different tensor for backward when recomputed than when it "
                    f"first ran (tensor {i}: {first} first, {(t.shape, t.dtype, t.device)} now); its forward must do "
                    "the same work every time it runs on the same input"
                )
            ref = holders[i]
            h = ref() if ref is not None else None
            if h is not None:
                v = t if keep_graph or not t.requires_grad else t.detach()
                h.values[gid] = host.pack(v) if host is not None else v  # type: ignore[assignment]

        with torch.enable_grad():
            # A stage that writes into its input gets a copy, made recording (a
            # backward runs with gradients off) so the copy requires a gradient.
            args, kwargs = call.with_carried(inp.clone() if copy else inp)
            with torch.autograd.graph.saved_tensors_hooks(pack, _unpack):
                out = carried_output(fn(*args, **kwargs), lambda: step.ex.label(l))
        if count != len(metas):
            raise RuntimeError(
                f"remat: {step.ex.label(l)} saved {len(metas)} tensors for backward when it first ran and {count} "
                "when recomputed; its forward must do the same work every time it runs on the same input"
            )
        return out


def run_schedule(
    stages: Sequence[nn.Module],
    operations: Sequence[tuple[str, int] | tuple[str, int, int]],
    x: torch.Tensor,
    *,
    preserve_rng: bool = True,
    options: Sequence[Sequence[Any]] | None = None,
    on_op: Callable[[str, int], None] | None = None,
) -> torch.Tensor:
    """Runs ``operations`` on single-tensor ``stages`` from input ``x`` and returns
    a^L; the backward through it runs the rest of the schedule (see the module's
    notes). ``on_op(kind, stage)`` is called after each operation.

    An operation ``("F_all", l, o)`` with o >= 1 records stage l under
    ``options[l-1][o-1]``: a :class:`~remat.torch.Policy`, a named policy, a
    policy function of SAC's signature or a list of operators whose outputs to
    keep (see :mod:`remat.torch.policies`).

    Raises:
        ValueError: the schedule does not fit ``stages`` (see :class:`Program`),
            or records a stage with an option ``options`` does not give.
    """
    from .policies import resolve_policies

    per_stage: list[list[NamedPolicy | None]] | None = None
    if options is not None:
        per_stage = [[None, *resolve_policies(list(o))] for o in options]
    ex = Executor(stages, Program(len(stages), operations), preserve_rng=preserve_rng, options=per_stage, on_op=on_op)
    step = ex.begin()
    for l in range(1, len(stages) + 1):
        x = carried_output(ex.call(step, l, Call((x,), {}, 0)), lambda l=l: ex.label(l))  # type: ignore[misc]
    return x
