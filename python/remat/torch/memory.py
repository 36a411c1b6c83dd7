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

import weakref
from collections.abc import Iterable
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
