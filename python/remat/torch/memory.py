"""Counting the bytes of live tensors on any device, without a GPU.

:class:`LiveBytes` is a :class:`~torch.utils._python_dispatch.TorchDispatchMode`
that sees every tensor an operator creates while it is active, as
``torch.distributed._tools.mem_tracker`` does: it notes each new storage's size
once, holds only a weak reference to it, and subtracts the size when PyTorch
frees the storage. Its :attr:`~LiveBytes.peak` is therefore the largest number
of bytes, created inside the ``with`` block, that were alive at the same
instant, which on the CPU is what a schedule's memory model predicts (no
allocator rounding, no caching).

Storages created before the block (the parameters, the input batch) are not
counted, nor are freed ones. Parameter gradients can be left out with
:meth:`LiveBytes.exclude_parameter_gradients`: remat's budget does not count
them (they live as long as the parameters, like optimizer state).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Tracks live bytes of the storages created while it is active.

    Use as a context manager::

        with LiveBytes() as live:
            loss = criterion(model(x), y)
            loss.backward()
        print(live.peak)

    Every operator call costs one pass over its outputs (O(number of outputs)),
    so tracking slows small operators down; measure time without it.

    Attributes:
        current: bytes created in the block and still alive.
        peak: the largest value ``current`` has reached since the block (or the
            last :meth:`reset_peak`) began.
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.current = 0
        self.peak = 0
        # id(storage) -> (weak reference, bytes). The weak reference's callback
        # runs when PyTorch frees the storage, whichever thread drops it.
        self._live: dict[int, tuple[weakref.ref[Any], int]] = {}
        self._excluded: set[int] = set()
        self._hooks: list[Any] = []
        #: False: operators pass straight through (a mode that cannot leave the
        #: stack yet, as after a measured backward, costs one call per operator).
        self.tracking = True

    def reset_peak(self) -> None:
        """Starts a new peak from the bytes alive now."""
        self.peak = self.current

    def _freed(self, key: int) -> None:
        entry = self._live.pop(key, None)
        if entry is not None and key not in self._excluded:
            self.current -= entry[1]
        self._excluded.discard(key)

    def _track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = id(st)
        if key in self._live:
            return
        nbytes = st.nbytes()

        def freed(_ref: weakref.ref[Any], k: int = key) -> None:
            self._freed(k)

        ref = weakref.ref(st, freed)
        self._live[key] = (ref, nbytes)
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def tracks(self, t: torch.Tensor) -> bool:
        """Whether ``t``'s storage was created in the block and is counted."""
        key = id(t.untyped_storage())
        return key in self._live and key not in self._excluded

    def exclude(self, t: torch.Tensor) -> None:
        """Stops counting ``t``'s storage from now on (the peak so far stays)."""
        key = id(t.untyped_storage())
        if key in self._live and key not in self._excluded:
            self._excluded.add(key)
            self.current -= self._live[key][1]

    def exclude_parameter_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        """Leaves the gradients autograd accumulates into these parameters out.

        A gradient still counts while it is being computed (it is real
        transient memory); once accumulated into ``.grad`` it belongs to the
        parameters, which remat's budget does not count. Hooks are removed when
        the block ends.
        """

        def accumulated(q: torch.Tensor) -> None:
            if q.grad is not None:
                self.exclude(q.grad)

        for p in parameters:
            if p.requires_grad:
                hook = p.register_post_accumulate_grad_hook(accumulated)  # type: ignore[no-untyped-call]
                self._hooks.append(hook)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.tracking:
            return out
        # An output that shares an input's storage (a view, an in-place or out=
        # operator, `grad += g`) is not new memory; only other storages are.
        inputs = {
            id(a.untyped_storage())
            for a in tree_flatten((args, kwargs))[0]
            if isinstance(a, torch.Tensor) and a.device.type != "meta"
        }
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                if id(t.untyped_storage()) not in inputs:
                    self._track(t)
        return out

    def __exit__(self, *exc: object) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        super().__exit__(*exc)  # type: ignore[no-untyped-call]


#: Traces open now (at most one runs a profiler at a time).
_OPEN: weakref.WeakSet[AllocatorTrace] = weakref.WeakSet()


@atexit.register
def _stop_open_traces() -> None:
    """Stops the profiler of every trace still open when Python exits (a
    plan's measured step is read at its next use, and a program may end
    before one): a profiler left running is torn down by C++'s destructors
    after Python's, and its soft assertion then crashed the process at exit
    (a segmentation fault on 2 of 4 runs of a compiled plan's five steps)."""
    for trace in list(_OPEN):
        trace.abandon()


#: Marks in an allocator trace are allocations of ``_MARK + i`` bytes (note i).
_MARK = 4099


def _compile_callbacks() -> Any:
    """Dynamo's compile start/end callbacks, where this torch has them."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:  # pragma: no cover - torch without Dynamo's callbacks
        return None
    if not all(hasattr(callback_handler, a) for a in ("start_callbacks", "end_callbacks", "register_start_callback")):
        return None
    return callback_handler


def _quiet_kineto() -> None:
    """Keeps the profiler's C++ library (kineto) from writing two lines to
    stderr each time a profiler starts and stops ("USDT: ... profiler_start"
    on torch 2.15): remat starts one per block it profiles, several thousand
    lines in a census of 52 models. Kineto reads ``KINETO_LOG_LEVEL`` once,
    when the first profiler of the process starts; its messages go up to
    level 5, so 6 silences them. A value the user set is left as it is (set
    ``KINETO_LOG_LEVEL`` before the first step to see kineto's log)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")


class AllocatorTrace:
    """Live bytes as the CPU allocator saw them, from ``torch.profiler``'s
    memory events: what compiled code allocates too, which a dispatch mode such
    as :class:`LiveBytes` cannot see (inductor's kernels allocate their buffers
    without dispatching an operator).

    The figures are known once the trace has ended, so the points of interest
    are marked while it runs and read afterwards::

        with AllocatorTrace() as trace:
            y = compiled_block(x)
            after_forward = trace.mark()
            y.sum().backward()
            after_backward = trace.mark()
        trace.alive(after_forward)          # bytes alive then, allocated in the trace
        trace.peak(after_forward, after_backward)  # the most alive in between, above the first

    Like :class:`LiveBytes`, only allocations made inside the trace count (a
    block freed that was allocated before it is not subtracted), and
    :meth:`exclude` stops counting one from a point on (a parameter gradient
    once accumulated). :meth:`pause` stops the profiler until :meth:`resume`
    (another profiler may run in between: profiling a block inside a measured
    step): what is allocated meanwhile is never counted, nor its free.

    Cost: the profiler records every operator while it runs (about a
    microsecond each), and reading the trace is O(number of events).

    Raises:
        RuntimeError: on entering, when a profiler is already running on this
            thread (two cannot nest).
    """

    def __init__(self) -> None:
        self._sessions: list[Any] = []  # one torch.profiler.profile per stretch between pauses
        self._notes: list[tuple[str, int]] = []  # ("mark" | "exclude" | "disown" | "probe" | "pause", payload)
        self._marked: list[bool] = []  # per note: its mark is in a session (not made while paused)
        self._alive: list[int] = []  # per note: bytes alive just then
        self._peak_to: list[int] = []  # per note: the most alive since the previous note
        self._found: list[bool] = []  # per note: a probe's pointer was counted then
        #: Per mark made with ``births=True``: the bytes alive then, by the
        #: note after which each was allocated (see :meth:`made`).
        self._births: dict[int, dict[int, int]] = {}
        self._hooks: list[Any] = []
        self._open = False
        self._running = False
        self._read = False
        #: Ended by :meth:`abandon` while open, unread: its owner has no figures.
        self.abandoned = False
        #: Set by an owner whose trace may be read early (its step ended): what
        #: reads it, called when another trace needs the profiler.
        self.settle: Callable[[], None] | None = None
        #: Set by an owner whose step may never end: whether it has not and
        #: cannot any more (its backward started and raised before its end:
        #: the final callback that settles it never runs). Such a trace is
        #: abandoned when another trace needs the profiler, which it would
        #: otherwise hold until the owner's next step; its owner then finds
        #: it :attr:`abandoned`.
        self.stale: Callable[[], bool] | None = None

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        # Operators are not recorded, only allocations: a range recorded while
        # a session runs and ended after it stopped (a compiled region that a
        # step's measurement starts and stops inside) writes into the stopped
        # session's results, and reading them then corrupts the heap (seen
        # under torch.compile). Without ranges the marks are allocations.
        torch._C._autograd._enable_record_function(False)
        _quiet_kineto()
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        prof.__enter__()
        self._sessions.append(prof)
        self._running = True

    def _stop(self) -> None:
        if self._running:
            self._running = False
            self._sessions[-1].__exit__(None, None, None)
            torch._C._autograd._enable_record_function(True)

    def _compiling(self, *args: Any) -> None:
        if self._open and self._running:
            self._note("ignore", 0)

    def _compiled(self, *args: Any) -> None:
        if self._open and self._running:
            self._note("heed", 0)

    @staticmethod
    def available() -> bool:
        """Whether a trace can start on this thread now: no other profiler
        runs (two cannot nest; a remat trace whose step has ended gives way
        when one is entered). O(1)."""
        return not torch.autograd.profiler._is_profiler_enabled

    def __enter__(self) -> AllocatorTrace:
        # A trace whose owner's step has ended (its backward done, waiting for
        # the plan's next use to be read) gives way: read it now.
        for other in list(_OPEN):
            settle, stale = other.settle, other.stale
            if other.open and settle is not None:
                try:
                    settle()
                except Exception:
                    other.close()
            elif other.open and stale is not None and stale():
                other.abandon()
        if not AllocatorTrace.available():
            raise RuntimeError(
                "remat: measuring memory by the allocator needs torch.profiler, which is already running on this "
                "thread (two profilers cannot nest); stop it for the first training step"
            )
        self._start()
        self._open = True
        _OPEN.add(self)
        self._note("mark", 0)  # mark 0: the start
        # What torch.compile allocates while it compiles (a graph's first run,
        # a lazily compiled backward) is left out: it is no step's memory.
        handler = _compile_callbacks()
        if handler is not None:
            handler.register_start_callback(self._compiling)
            handler.register_end_callback(self._compiled)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Ends the trace (idempotent) and reads it."""
        if self._end():
            self._replay()
        self._sessions = []  # read: the profilers' buffers can go

    def abandon(self) -> None:
        """Ends the trace without reading it (idempotent): its figures are
        lost, the profiler stopped."""
        if self._end():
            self.abandoned = True
        self._sessions = []

    def _end(self) -> bool:
        """Stops the profiler and lets go of the hooks; whether it was open."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if not self._open:
            return False
        self._open = False
        _OPEN.discard(self)
        handler = _compile_callbacks()
        if handler is not None:
            for hooks, fn in ((handler.start_callbacks, self._compiling), (handler.end_callbacks, self._compiled)):
                if fn in hooks:
                    hooks.remove(fn)
        self._stop()
        return True

    @property
    def open(self) -> bool:
        return self._open

    def _note(self, kind: str, payload: int) -> int:
        i = len(self._notes)
        self._notes.append((kind, payload))
        self._marked.append(self._running)
        if self._running:
            # An allocation of a size no real one has at this point (see
            # _replay), freed at once: where the note falls among the events.
            torch.empty(_MARK + i, dtype=torch.uint8, device="cpu")
        return i

    def mark(self, births: bool = False) -> int:
        """Marks this point; returns its index for :meth:`alive` and :meth:`peak`
        (and :meth:`made`, where ``births``: O(allocations alive) to read)."""
        return self._note("mark", 1 if births else 0)

    def probe(self, t: torch.Tensor) -> int:
        """Marks this point and whether ``t``'s memory is counted then
        (allocated in the trace, not freed, not excluded): :meth:`found`."""
        try:
            ptr = int(getattr(t, "_local_tensor", t).untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError, TypeError):
            ptr = -1  # never counted
        return self._note("probe", ptr)

    def exclude(self, t: torch.Tensor) -> None:
        """Stops counting ``t``'s memory from now on (a sharded tensor's local
        shard's)."""
        self._note_storage("exclude", t)

    def _note_storage(self, kind: str, t: torch.Tensor) -> None:
        if not (self._open and self._running):
            return
        local = getattr(t, "_local_tensor", t)  # a DTensor (FSDP2's gradients) holds its shard
        try:
            ptr = int(local.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError, TypeError):
            return  # no memory of its own to name (a tensor subclass)
        self._note(kind, ptr)

    def exclude_parameter_gradients(
        self, parameters: Iterable[torch.nn.Parameter], *, from_allocation: bool = False
    ) -> None:
        """Leaves parameter gradients out once accumulated into ``.grad`` (as
        :meth:`LiveBytes.exclude_parameter_gradients`).

        With ``from_allocation``, a gradient that becomes ``.grad`` as it is
        (no gradient there before) is left out from its allocation on: what a
        compiled backward allocates for the gradients it returns is held
        inside its graph until the graph returns (a whole model's graph holds
        them all: 26.6 MiB at the peak of a GPT-2 step of 8 blocks, every block
        checkpointed, whose activations took 34 MiB), and remat's budget
        counts no parameter gradient (docs/model.md): each is one of the
        gradients the step leaves. A gradient added into an existing ``.grad``
        is still a transient until it is freed. Read at :meth:`close`:
        O(events) more."""
        kind = "disown" if from_allocation else "exclude"

        def accumulated(q: torch.Tensor) -> None:
            if q.grad is not None:
                self._note_storage(kind, q.grad)

        for p in parameters:
            if p.requires_grad:
                self._hooks.append(p.register_post_accumulate_grad_hook(accumulated))  # type: ignore[no-untyped-call]

    def pause(self) -> None:
        """Stops the profiler until :meth:`resume`."""
        if self._open and self._running:
            self._note("pause", 0)
            self._stop()

    def resume(self) -> None:
        if self._open and not self._running:
            self._start()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """:meth:`pause` around a block, :meth:`resume` after it (a profile
        run inside a measured step, with profilers of its own)."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def _events(self) -> list[tuple[int, int] | None]:
        """The CPU allocator's events of every session in order, as (pointer,
        bytes: negative for a free); None between two sessions. O(events)."""
        from torch._C._profiler import _EventType

        found: list[tuple[int, int] | None] = []
        for prof in self._sessions:
            results = prof.profiler.kineto_results if prof.profiler is not None else None
            events: list[Any] = []
            stack = list(results.experimental_event_tree()) if results is not None else []
            while stack:
                e = stack.pop()
                if e.tag == _EventType.Allocation:
                    events.append(e)
                stack.extend(e.children)
            events.sort(key=lambda e: e.start_time_ns)
            for e in events:
                f = e.extra_fields
                if f.device.type == "cpu":
                    found.append((int(f.ptr), int(f.alloc_size)))
            found.append(None)
        return found

    def _walk(self, events: list[tuple[int, int] | None]) -> Iterator[tuple[str, int, int, int]]:
        """The events that count, in order, as ``(kind, k, ptr, size)``:
        ``("note", k, 0, i)`` where note ``i``'s mark is, ``("alloc", k, ptr,
        bytes)`` and ``("free", k, ptr, 0)`` for the others (``k`` the
        event's index), ``("end", k, 0, 0)`` where a session ends. The marks'
        own allocations and what is allocated while compiling (and their
        frees) are left out. O(events)."""
        n = len(self._notes)
        marks: set[int] = set()  # pointers of the marks' allocations, whose frees are not counted
        ignored: set[int] = set()  # allocated while compiling: never counted, nor their frees
        compiling = 0
        expected = 0  # the next note: its mark is an allocation of _MARK + expected bytes
        for k, event in enumerate(events):
            if event is None:
                yield "end", k, 0, 0
                continue
            ptr, size = event
            if size > 0:
                while expected < n and not self._marked[expected]:
                    expected += 1  # made while paused: no mark
                if expected < n and size == _MARK + expected:
                    marks.add(ptr)
                    kind = self._notes[expected][0]
                    compiling += 1 if kind == "ignore" else -1 if kind == "heed" and compiling else 0
                    yield "note", k, 0, expected
                    expected += 1
                elif compiling:
                    ignored.add(ptr)
                else:
                    yield "alloc", k, ptr, size
            elif ptr in marks:
                marks.discard(ptr)
            elif ptr in ignored:
                ignored.discard(ptr)
            else:
                yield "free", k, ptr, 0

    def _disowned(self, events: list[tuple[int, int] | None]) -> set[int]:
        """The allocation events of the parameter gradients
        (:meth:`exclude_parameter_gradients`): each the allocation alive at its
        gradient's pointer when the gradient was accumulated, which is
        therefore never counted. O(events)."""
        live: dict[int, int] = {}  # pointer -> its allocation event
        found: set[int] = set()
        for kind, k, ptr, i in self._walk(events):
            if kind == "note":
                note, payload = self._notes[i]
                if note == "disown" and payload in live:
                    found.add(live.pop(payload))
            elif kind == "alloc":
                live[ptr] = k
            elif kind == "free":
                live.pop(ptr, None)
        return found

    def _replay(self) -> None:
        events = self._events()
        disowned = self._disowned(events) if any(kind == "disown" for kind, _ in self._notes) else set()
        n = len(self._notes)
        self._alive = [0] * n
        self._peak_to = [0] * n
        self._found = [False] * n
        live: dict[int, int] = {}  # ptr -> bytes, allocations counted
        born: dict[int, int] = {}  # ptr -> the next note when it was allocated
        current = peak = following = 0  # following: the next note
        for kind, k, ptr, size in self._walk(events):
            if kind == "end":
                # Between sessions nothing is seen: what a pause allocated is
                # unknown, so not counted (nor, later, its free).
                peak = current
            elif kind == "note":
                i = size
                current -= self._apply(i, live)
                if self._notes[i] == ("mark", 1):
                    by: dict[int, int] = {}
                    for q, b in live.items():
                        by[born.get(q, 0)] = by.get(born.get(q, 0), 0) + b
                    self._births[i] = by
                self._peak_to[i] = peak
                self._alive[i] = current
                peak = current
                following = i + 1
            elif k in disowned:
                live.pop(ptr, None)  # its free then finds nothing counted
            elif kind == "alloc":
                # A block freed while paused, whose address comes back.
                current -= live.pop(ptr, 0)
                live[ptr] = size
                born[ptr] = following
                current += size
                peak = max(peak, current)
            else:
                current -= live.pop(ptr, 0)
        self._read = True

    def _apply(self, i: int, live: dict[int, int]) -> int:
        """Note i's effect on the live allocations; returns the bytes it stops counting."""
        kind, payload = self._notes[i]
        if kind == "exclude":
            return live.pop(payload, 0)
        if kind == "probe":
            self._found[i] = payload in live
        return 0

    def _check(self, i: int) -> None:
        if not self._read:
            raise RuntimeError("AllocatorTrace: the figures are known once the trace has ended")
        if not 0 <= i < len(self._notes):
            raise IndexError(f"AllocatorTrace: no mark {i}")

    def alive(self, i: int) -> int:
        """Bytes allocated in the trace and alive at mark ``i`` (0: the start)."""
        self._check(i)
        return self._alive[i]

    def found(self, i: int) -> bool:
        """Whether the probe ``i``'s tensor was counted at that point."""
        self._check(i)
        return self._found[i]

    def made(self, i: int, j: int) -> int:
        """Bytes alive at mark ``j`` (made with ``births=True``) that were
        allocated after mark ``i`` (``i < j``): what that stretch left, whatever
        it freed of what was there before. O(distinct notes)."""
        self._check(i)
        self._check(j)
        if self._notes[j] != ("mark", 1):
            raise ValueError(f"AllocatorTrace: mark {j} was not made with births=True")
        # A mark made while paused saw nothing (as alive() reads 0 there).
        return sum(b for k, b in self._births.get(j, {}).items() if k > i)

    def peak(self, i: int, j: int) -> int:
        """The most bytes alive between marks ``i`` and ``j`` (``i < j``), less
        those alive at ``i``: what that stretch took on top."""
        self._check(i)
        self._check(j)
        top = self._alive[i]
        for k in range(i + 1, j + 1):
            top = max(top, self._peak_to[k])
        return max(0, top - self._alive[i])
