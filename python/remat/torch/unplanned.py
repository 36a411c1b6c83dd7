"""Steps unlike the planned one, said once each.

A plan is solved for one kind of step: a forward of the stack, then one
backward through it that frees what each node saved as it goes. Three ordinary
training patterns hold more than that, and nothing in the chain counts it:

- **Two forwards in flight**, then one backward (losses summed over
  micro-batches): the first forward's residue, what it keeps for its backward,
  is still held while the second runs (and the parts outside the stack: the
  logits of both). A backward after each forward gives the same gradients.
- **A second backward through one forward** (``retain_graph=True`` on the
  first): a retained graph keeps every tensor its nodes saved until the graph
  goes, so what the plan counts as freed node by node stays through the
  backward.
- **A backward with** ``create_graph=True`` (a gradient penalty): the blocks
  run again in it are recorded with their graphs, kept for the second
  backward, up to what plain training holds.

Measured on an HF Llama shape (6 layers, 4 x 64 tokens, ``memory="50%"``,
the CPU allocator): two forwards 1.99x the planned step's peak, the retained
graph 1.40x, a gradient penalty 5.86x. Planning them is future work; until
then :class:`StepWatch` tells the user once per kind, as the step happens,
with the figure the plan knows (see ``docs/pytorch.md``).

How it knows: the node that made the stack's output gets a pre-hook holding
a token; the token lives as long as the graph does, and the hook counts the
backwards that reach it. Cost: one hook per forward, one weak reference per
forward whose graph is alive.
"""

from __future__ import annotations

import enum
import functools
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["StepKind", "StepWatch", "UnplannedStepWarning"]


class UnplannedStepWarning(UserWarning):
    """A training step unlike the one the plan was solved for: it holds more
    memory than the plan predicts (see :mod:`remat.torch.unplanned`)."""


class StepKind(enum.Enum):
    """The kinds of step a plan was not solved for."""

    #: A forward of the stack began before an earlier one's backward (more
    #: forwards in flight than the plan's ``in_flight``).
    TWO_FORWARDS = "more forwards in flight than planned"
    #: A second backward through one forward (``retain_graph=True``).
    RETAINED_GRAPH = "a second backward through one forward"
    #: A backward with ``create_graph=True``.
    CREATE_GRAPH = "a backward with create_graph=True"


class _Forward:
    """Alive as long as one forward's graph is; counts its backwards."""

    __slots__ = ("__weakref__", "backwards", "graphed")

    def __init__(self) -> None:
        self.backwards = 0
        #: A backward with create_graph=True reached it: the next one is the
        #: gradient penalty's own, part of the same kind of step.
        self.graphed = False


class StepWatch:
    """Watches the kinds of step a plan holds and warns once per
    :class:`StepKind` it was not solved for.

    Args:
        what: the stack's name, for messages (``"model.layers"``).
        in_flight: the forwards the plan holds at once (``apply``'s).
        figures: called when a warning is due, returns ``(residue, peak)``:
            the bytes one forward keeps for its backward and the planned
            step's peak (None where not known yet).
    """

    def __init__(self, what: str, figures: Callable[[], tuple[int | None, int | None]], in_flight: int = 1) -> None:
        self._what = what
        self._in_flight = in_flight
        self._figures = figures
        self._open: list[weakref.ref[_Forward]] = []
        #: The kinds said so far (each once per plan).
        self.seen: set[StepKind] = set()

    def forward_starts(self) -> None:
        """A forward of the stack begins. O(forwards whose graph is alive)."""
        self._open = [r for r in self._open if (t := r()) is not None and t.backwards == 0]
        if len(self._open) >= self._in_flight:
            self._say(StepKind.TWO_FORWARDS)

    def forward_ends(self, out: Any) -> None:
        """The stack's last block returned ``out`` (its carried tensor)."""
        node = getattr(out, "grad_fn", None)
        if node is None:
            return
        token = _Forward()
        node.register_prehook(functools.partial(self._reached, token))
        self._open.append(weakref.ref(token))

    def _reached(self, token: _Forward, _grads: Any) -> None:
        token.backwards += 1
        if torch.is_grad_enabled():
            token.graphed = True
            self._say(StepKind.CREATE_GRAPH)
        elif token.backwards > 1 and not token.graphed:
            self._say(StepKind.RETAINED_GRAPH)

    def _say(self, kind: StepKind) -> None:
        if kind in self.seen:
            return
        self.seen.add(kind)
        residue, peak = self._figures()
        planned = f" (the plan's peak: {_mib(peak)})" if peak is not None else ""
        if kind is StepKind.TWO_FORWARDS:
            cost = (
                f"the first forward's residue, {_mib(residue)}, is held through the second"
                if residue is not None
                else "the first forward's residue is held through the second"
            )
            advice = "Call backward after each forward, each loss scaled as in the sum: the gradients are the same."
        elif kind is StepKind.RETAINED_GRAPH:
            cost = "a retained graph keeps what its nodes saved until it goes, which the plan counts as freed"
            advice = "Sum the losses and call backward once, or run the forward again for the second backward."
        else:
            cost = "the blocks run again in it keep their graphs for the next backward, up to what plain training holds"
            advice = "remat plans the first backward only; give such steps a budget with room to spare."
        warnings.warn(
            f"remat: {kind.value} in {self._what}: the step holds more than its plan predicts{planned}: {cost}. "
            f"{advice} (Said once per plan; filter remat.torch.UnplannedStepWarning to silence it.)",
            UnplannedStepWarning,
            stacklevel=4,
        )


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.2f} MiB"
