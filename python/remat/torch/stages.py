"""What a stage is: a module called with the running activation and side inputs.

A chain stage (docs/model.md) maps a^{l-1} to a^l. Real blocks take more than
one argument and return more than one thing: a Hugging Face decoder layer takes
``hidden_states`` with an attention mask, position ids, rotary ``(cos, sin)``
and cache flags, and may return a tuple or a ``ModelOutput``. remat calls the
tensor that flows from block to block the **carried** tensor; everything else
a block receives is a **side input** (the same objects for every block in the
common case, held by the caller anyway) and everything else it returns is a
**side output** (passed back to the caller untouched).

:class:`Call` splits one call into the carried tensor and a way to rebuild the
call around another carried tensor, which is what a recomputation needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["Call", "carried_output", "replace_output", "stage_label", "tensors_in"]


def stage_label(index: int, module: nn.Module, name: str | None = None) -> str:
    """``"stage 3 (h.2: GPT2Block)"``: the 1-based stage and what it is, for messages."""
    what = f"{name}: {type(module).__name__}" if name else type(module).__name__
    return f"stage {index + 1} ({what})"


@dataclass
class Call:
    """One call of a stage: positional and keyword arguments, with the carried
    tensor at ``position`` (an int for a positional argument, a str for a
    keyword one).

    Building one is O(number of arguments); :meth:`with_carried` is too.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    position: int | str

    @staticmethod
    def of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Call:
        """The call with its carried tensor found: the first positional
        argument, else ``hidden_states=``, else the first tensor keyword.

        Raises:
            TypeError: no argument is a tensor.
        """
        if args and isinstance(args[0], torch.Tensor):
            return Call(tuple(args), dict(kwargs), 0)
        if isinstance(kwargs.get("hidden_states"), torch.Tensor):
            return Call(tuple(args), dict(kwargs), "hidden_states")
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                return Call(tuple(args), dict(kwargs), k)
        raise TypeError(
            "the stage was called without a tensor as its first argument (nor hidden_states=): remat needs "
            "the activation that flows from one stage to the next as the first argument"
        )

    @property
    def carried(self) -> torch.Tensor:
        """The running activation a^{l-1}."""
        value = self.args[self.position] if isinstance(self.position, int) else self.kwargs[self.position]
        assert isinstance(value, torch.Tensor)
        return value

    def with_carried(self, x: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments with the carried tensor replaced by ``x``."""
        if isinstance(self.position, int):
            args = list(self.args)
            args[self.position] = x
            return tuple(args), self.kwargs
        kwargs = dict(self.kwargs)
        kwargs[self.position] = x
        return self.args, kwargs

    def without_carried(self) -> Call:
        """The same call holding no reference to the carried tensor (kept for
        recomputation, which supplies its own)."""
        args, kwargs = self.with_carried(_PLACEHOLDER)
        return Call(args, kwargs, self.position)

    def detached(self) -> Call:
        """The same call with every tensor argument (nested one level in tuples
        and lists) detached from the graph that made it, keeping whether it
        requires a gradient: profiling runs backwards of its own and must not
        reach into the caller's graph. A tensor passed twice is one tensor
        after, as before (its uses' gradients sum into one)."""
        done: dict[int, torch.Tensor] = {}

        def cut(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                if id(v) not in done:
                    done[id(v)] = v.detach().requires_grad_(v.requires_grad) if v.requires_grad else v.detach()
                return done[id(v)]
            if isinstance(v, (tuple, list)) and any(isinstance(t, torch.Tensor) for t in v):
                return type(v)(cut(t) for t in v) if not hasattr(v, "_fields") else v
            return v

        return Call(tuple(cut(a) for a in self.args), {k: cut(v) for k, v in self.kwargs.items()}, self.position)

    def side_tensors(self) -> list[torch.Tensor]:
        """The tensors among the side inputs (nested one level in tuples and lists,
        as rotary ``(cos, sin)`` pairs are)."""
        return [t for _, t in self.side_items()]

    def side_items(self) -> list[tuple[tuple[int | str, int], torch.Tensor]]:
        """The tensors of :meth:`side_tensors`, in its order, each with where
        it is passed: (argument position or keyword, index in a tuple or list,
        -1 for the argument itself). O(the arguments and their items)."""
        found: list[tuple[tuple[int | str, int], torch.Tensor]] = []
        named: list[tuple[int | str, Any]] = [(i, a) for i, a in enumerate(self.args) if i != self.position]
        named += [(k, v) for k, v in self.kwargs.items() if k != self.position]
        for key, v in named:
            if isinstance(v, torch.Tensor):
                found.append(((key, -1), v))
            elif isinstance(v, (tuple, list)):
                found.extend(((key, j), t) for j, t in enumerate(v) if isinstance(t, torch.Tensor))
        return found


def tensors_in(values: Iterable[Any]) -> list[torch.Tensor]:
    """The tensors among ``values``, nested one level in tuples and lists
    included. O(the values and their items)."""
    found: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (tuple, list)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


_PLACEHOLDER = torch.empty(0)


def carried_output(y: object, describe: Callable[[], str]) -> torch.Tensor:
    """The carried tensor of a stage's output: the output itself, the first
    element of a tuple or list, or the first value of a dict (a
    ``ModelOutput`` is one).

    Raises:
        TypeError: none of these is a tensor (the message names the stage).
    """
    if isinstance(y, torch.Tensor):
        return y
    first: object = None
    if isinstance(y, (tuple, list)) and y:
        first = y[0]
    elif isinstance(y, Mapping) and y:
        first = next(iter(y.values()))
    if isinstance(first, torch.Tensor):
        return first
    raise TypeError(
        f"{describe()} returned a {type(y).__name__}; a stage must return a tensor, or a tuple, list or dict "
        f"whose first item is the tensor the next stage takes"
    )


def replace_output(y: object, carried: torch.Tensor) -> object:
    """``y`` with its carried tensor replaced by ``carried`` (same container type)."""
    if isinstance(y, torch.Tensor):
        return carried
    if isinstance(y, tuple) and not hasattr(y, "_fields"):
        return (carried, *y[1:])
    if isinstance(y, list):
        return [carried, *y[1:]]
    if isinstance(y, dict):
        key = next(iter(y))
        y[key] = carried
        return y
    raise TypeError(f"cannot rebuild an output of type {type(y).__name__}")
