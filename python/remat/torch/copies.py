"""Copies and pickles of a model remat runs: the model as it was before
:func:`remat.torch.apply`, without remat's forwards and hooks.

remat installs a ``forward`` on each block (and, when a plan chunks the loss,
on the model) and hooks on the model and its head, all closures over the
plan. ``copy.deepcopy`` keeps functions as they are, so a copy of an applied
model (an EMA copy, a DPO reference model, a best-so-far snapshot) ran the
original model's blocks: its outputs used the original's weights and its
gradients landed on the original's parameters; ``torch.save(model)`` failed
with a bare ``PicklingError`` on those closures. Both go through
``__reduce_ex__``, which ``copy`` and ``pickle`` look up on the instance:
:func:`leave_out_of_copies` puts one there that reduces the module as
``nn.Module`` does, less what remat installed. A copy is a plain model; apply
remat to it to train it under a budget too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = ["HOOK_DICTS", "leave_out_of_copies", "stop_leaving_out"]

#: The attributes of an ``nn.Module`` that hold its forward hooks, by handle id.
HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)

#: Where the reduction is installed: what ``copy`` and ``pickle`` look up.
_REDUCE = "__reduce_ex__"


def leave_out_of_copies(
    module: nn.Module, installed: Callable[[], dict[str, Any]], hook_ids: Callable[[], set[int]]
) -> None:
    """From now on, ``copy.copy``, ``copy.deepcopy`` and ``pickle`` (so
    ``torch.save``) of ``module`` leave out what remat installed on it.

    ``installed()`` names, when a copy is made, each instance attribute remat
    set on the module and what stood there before (None: nothing); the copy
    gets the one before. ``hook_ids()`` are the ids of remat's hook handles;
    the copy keeps every other hook. O(attributes and hooks of the module)
    per copy.

    # Example

    ```python
    import copy
    from torch import nn
    from remat.torch.copies import leave_out_of_copies

    block = nn.Linear(2, 2)
    block.forward = lambda x: x  # what a tool installed
    leave_out_of_copies(block, lambda: {"forward": None}, set)
    assert "forward" not in copy.deepcopy(block).__dict__
    ```
    """

    def reduce_ex(protocol: int) -> Any:
        reduced = object.__reduce_ex__(module, protocol)
        if not isinstance(reduced, tuple) or len(reduced) < 3 or not isinstance(reduced[2], dict):
            return reduced
        return (*reduced[:2], _without(reduced[2], installed(), hook_ids()), *reduced[3:])

    module.__dict__[_REDUCE] = reduce_ex


def stop_leaving_out(module: nn.Module) -> None:
    """Undoes :func:`leave_out_of_copies` (``plan.remove()``)."""
    module.__dict__.pop(_REDUCE, None)


def _without(state: dict[str, Any], installed: dict[str, Any], ids: set[int]) -> dict[str, Any]:
    state = dict(state)
    state.pop(_REDUCE, None)
    for name, before in installed.items():
        if before is None:
            state.pop(name, None)
        else:
            state[name] = before
    for key in HOOK_DICTS:
        hooks = state.get(key)
        if isinstance(hooks, dict) and any(k in ids for k in hooks):
            state[key] = type(hooks)((k, v) for k, v in hooks.items() if k not in ids)
    return state
