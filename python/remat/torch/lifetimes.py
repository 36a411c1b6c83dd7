"""When a step frees a block's output, against when the chain stops counting it.

The chain counts a block's output a^l inside abar^l until ``B^l`` (and a
plain a^l, kept by ``F_ck^l``, until ``B^{l+1}``): the next block reads it,
and a rerun of the next block starts from it (docs/model.md, "The four
operations"). Where nothing keeps it (the next block joins it to a skip
connection and saves the concatenation, as a U-Net's up blocks do; a head
whose normalisation frees its input in its backward), a step frees it
long before: the next forward has consumed it, and no recording saved it.

Whether anything holds it is the model's code's business as much as the
recordings': a list of hidden states, a skip connection, a cache. So it is
not inferred but seen: :class:`OutputLifetimes` keeps a weak reference to
each block's output during one step of a plan, and notes, at the start of
each block's forward and of each block's backward, which are gone.
:func:`replayed_peak` replays the plan with each such output taken off from
that operation on, until the chain would have dropped it. The solver's
schedule is unchanged (it was solved with the outputs counted: a plan only
gets a lower, truer prediction, never another plan).

Sound for the step it was seen in and for every later step of the plan
whose code frees what it freed then: an output seen freed at an operation
is freed at every operation after it (a freed tensor does not come back; a
block that runs again makes a new output, which the chain counts from that
run: an output is taken off only until its block runs again).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

import remat

from .executor import Op

__all__ = ["OutputLifetimes", "freed_outputs", "replayed_peak"]


class OutputLifetimes:
    """What one step of a plan freed of its blocks' outputs, and from which
    operation on. ``ops`` are the plan's operations as ``(kind, stage)``
    pairs (the loss a stage after the last block); ``done`` is called when
    ``B^1``, the step's last operation, begins. Each check costs O(outputs
    followed); a step makes O(operations) checks."""

    def __init__(self, ops: Sequence[tuple[str, int]], done: Callable[[OutputLifetimes], None] | None = None) -> None:
        self._ops = [(str(k), int(l)) for k, l in ops]
        #: The first operation of each stage (its forward in the forward phase).
        self._first: dict[int, int] = {}
        self._backward: dict[int, int] = {}
        for i, (k, l) in enumerate(self._ops):
            self._first.setdefault(l, i)
            if k == Op.B.value:
                self._backward[l] = i
        self._followed: dict[tuple[int, int], weakref.ref[Any]] = {}
        #: (stage, the operation that made the output; -1: the stack's input)
        #: -> the first operation at whose start that output was gone.
        self.freed: dict[tuple[int, int], int] = {}
        self.spoiled = False
        self._done = done

    def follow(self, l: int, y: torch.Tensor, run: int | None = None) -> None:
        """Follows stage ``l``'s output ``y`` made by operation ``run`` (by
        default the stage's first; stage 0: the stack's input), weakly: by
        its storage, which its views share."""
        key = (l, run if run is not None else self._first.get(l, -1) if l else -1)
        if key in self._followed or key in self.freed:
            return
        try:
            self._followed[key] = weakref.ref(y.untyped_storage())
        except (RuntimeError, TypeError, NotImplementedError):
            return  # no storage of its own (a tensor subclass): not followed

    def rerun(self, l: int, run: int, y: torch.Tensor) -> None:
        """Stage ``l`` ran again (operation ``run`` of the schedule), making
        ``y``: followed from now on (:attr:`remat.torch.executor.Step.on_rerun`)."""
        self.follow(l, y, run)

    def forward_starts(self, l: int) -> None:
        """Stage ``l``'s first run begins (its forward-phase operation)."""
        i = self._first.get(l)
        if i is not None:
            self._check(i)

    def backward_starts(self, l: int) -> None:
        """``B^l`` begins: autograd is about to run the node that made the
        stage's output."""
        i = self._backward.get(l)
        if i is not None:
            self._check(i)
        if l == 1 and self._done is not None:
            done, self._done = self._done, None
            done(self)

    def _check(self, i: int) -> None:
        for key, ref in list(self._followed.items()):
            if ref() is None:
                self.freed[key] = i
                del self._followed[key]

    def spoil(self) -> None:
        """The step did not run the plan as written (a block skipped): what it
        freed says nothing of the plan."""
        self.spoiled = True


def freed_outputs(
    ops: Sequence[tuple[str, int]], sizes: Sequence[int], freed: Mapping[tuple[int, int], int]
) -> list[int]:
    """Per operation of ``ops``, the bytes of block outputs the chain counts
    that a step found freed by then. ``freed`` maps (stage l, the operation
    r that made the output; stage 0, the stack's input, with r = -1) to the
    operation from which on it was gone (:attr:`OutputLifetimes.freed`);
    ``sizes[l]`` is w_a^l, ``sizes[0]`` the input's. Each is taken off as
    long as the chain holds that copy: in abar^l (r an ``F_all^l``) up to
    ``B^l``, not in it (a backward's figure is measured with its output let
    go of already); a plain one (``F_ck^l``, ``F_none^l``, the input)
    through the operation that deletes it, ``F_none^{l+1}`` or ``B^{l+1}``
    (each measured with its input held). O(operations x len(freed)).

    # Example

    >>> ops = [("F_all", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("B", 1)]
    >>> freed_outputs(ops, [4, 10, 20], {(1, 0): 2})
    [0, 0, 10, 10, 10, 0]
    >>> freed_outputs(ops, [4, 10, 20], {(0, -1): 1})
    [0, 4, 4, 4, 4, 4]
    """
    less = [0] * len(ops)
    for (l, r), j in freed.items():
        if not 0 <= l < len(sizes) or not r < j < len(ops):
            continue
        if (r < 0) != (l == 0) or (r >= 0 and (ops[r][1] != l or ops[r][0] == Op.B.value)):
            continue  # not an operation that makes a^l
        if r >= 0 and ops[r][0] == Op.F_ALL.value:
            # abar^l, until B^l (whose own figure has its output gone).
            end = next((i for i in range(r, len(ops)) if ops[i] == (Op.B.value, l)), None)
        else:
            # A plain a^l, until the operation that deletes it: F_none^{l+1}
            # or B^{l+1}, each of which holds it while it runs.
            gone = ((Op.F_NONE.value, l + 1), (Op.B.value, l + 1))
            found = next((i for i in range(r + 1, len(ops)) if ops[i] in gone), None)
            end = None if found is None else found + 1
        # (A block runs again only once the chain has dropped its output:
        # "one copy at a time", docs/model.md.)
        for i in range(j, end if end is not None else j):
            less[i] += int(sizes[l])
    return less


def replayed_peak(
    chain: remat.Chain, schedule: remat.Schedule, extra: int = 0, freed: Mapping[tuple[int, int], int] | None = None
) -> int:
    """The peak of ``schedule`` replayed on ``chain`` (with its loss stage),
    with ``extra`` bytes more in each forward of the forward phase (before
    the loss's backward; not the loss's own), and without the block outputs
    ``freed`` says a step of it freed (:func:`freed_outputs`). O(the
    replay + operations x len(freed))."""
    replay = remat.simulate(chain, schedule)
    ops = [(str(k), int(l)) for k, l, _ in schedule.operations_with_options]
    stages = chain.stages
    sizes = [chain.input_size] + [s.output_size for s in stages]
    less = freed_outputs(ops, sizes, freed) if freed else [0] * len(ops)
    loss = len(stages) + 1
    peak, forward = 0, True
    for st, off in zip(replay.steps, less):
        kind, l = str(st["op"][0]), int(st["op"][1])
        during = int(st["during"]["total"]) - off
        peak = max(peak, during + (extra if forward and kind != Op.B.value and l != loss else 0))
        if kind == Op.B.value and l == loss:
            forward = False
    return peak
