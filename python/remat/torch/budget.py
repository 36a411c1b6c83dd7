"""What :func:`remat.torch.apply` and :class:`remat.torch.Checkpointed` share:
budgets in bytes, and how they are written for people."""

from __future__ import annotations

import re

import torch
from torch import nn

import remat

__all__ = ["MemoryArgumentError", "auto_budget", "check_memory", "format_bytes", "share_of"]


def format_bytes(n: float) -> str:
    """Bytes as a short human figure (``12.50 MiB``), :func:`remat.format_size`'s."""
    return ("-" if n < 0 else "") + str(remat.format_size(abs(int(n))))


_fmt = format_bytes

#: A share of what storing everything needs: ``"60%"``, ``"62.5 %"``,
#: ``".5%"``, ``"50.%"`` (as the command line reads them).
SHARE = re.compile(r"^\s*(\d+\.?\d*|\.\d+)\s*%\s*$")

#: The largest budget in bytes taken: one exbibyte, far above any device,
#: far below where the solver's sums of bytes would overflow.
MAX_BYTES = 1 << 60


class MemoryArgumentError(ValueError, TypeError):
    """A ``memory=`` argument remat cannot read: a ``ValueError`` (a bad value),
    and a ``TypeError`` too (a value of the wrong type), so that either
    ``except`` catches it."""


def share_of(memory: str) -> float | None:
    """The share ``memory`` names (``"60%"`` -> 0.6), None where it names none.

    # Example

    ```python
    from remat.torch.budget import share_of

    assert share_of("60%") == 0.6 and share_of(".5%") == 0.005 and share_of("2GiB") is None
    ```
    """
    m = SHARE.match(memory)
    return float(m.group(1)) / 100 if m else None


def check_memory(memory: object, caller: str = "apply", shares: bool = True, auto: bool = True) -> int | str:
    """``memory=`` as :func:`remat.torch.apply` and :func:`remat.torch.max_batch`
    take it: bytes (an int), a size (``"2GiB"``), with ``shares`` a share of
    storing everything (``"60%"``), with ``auto`` ``"auto"``. Returns the bytes,
    or the share or ``"auto"`` as given. O(length of the string).

    Raises:
        MemoryArgumentError: anything else, naming ``caller``, the argument and
            its value, and what it takes.

    # Example

    ```python
    from remat.torch.budget import check_memory

    assert check_memory("1KiB") == 1024 and check_memory("60%") == "60%"
    ```
    """
    takes = "bytes (int), a size such as '2GiB'" + (", a share such as '60%'" if shares else "")
    takes += " or 'auto'" if auto else ""
    if isinstance(memory, bool) or not isinstance(memory, (int, str)):
        raise MemoryArgumentError(f"{caller}: memory must be {takes}, got {memory!r}")
    if isinstance(memory, int):
        if memory <= 0:
            raise MemoryArgumentError(f"{caller}: memory must be positive, got {memory}")
        if memory > MAX_BYTES:
            raise MemoryArgumentError(
                f"{caller}: memory={memory} bytes is above 1 EiB, more than any device holds; "
                "to store everything, pass memory='100%'"
            )
        return memory
    if auto and memory.strip() == "auto":
        return "auto"
    share = share_of(memory)
    if share is not None:
        if not shares:
            raise MemoryArgumentError(f"{caller}: memory={memory!r} is a share; pass {takes}")
        if not 0 < share <= 1:
            raise MemoryArgumentError(f"{caller}: memory={memory!r}: a share must be above 0% and at most 100%")
        return memory
    try:
        size = int(remat.parse_size(memory))
    except ValueError as e:
        raise MemoryArgumentError(f"{caller}: memory={memory!r}: {e}; memory takes {takes}") from e
    return check_memory(size, caller, shares, auto) if size > MAX_BYTES or size <= 0 else size


def _memory_fraction(device: torch.device) -> float:
    """The cap ``torch.cuda.set_per_process_memory_fraction`` put on ``device`` (1.0
    when none, or on a torch too old to report it)."""
    get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if get is None:
        return 1.0
    # The query wants an index: torch.device("cuda") has none.
    return float(get(device.index if device.index is not None else torch.cuda.current_device()))


def auto_budget(
    module: nn.Module, device: torch.device, input_bytes: int = 0, optimizer_state_bytes: int | None = None
) -> tuple[int, str]:
    """The budget ``memory="auto"`` gives on ``device``, and its arithmetic.

    budget = available memory - gradients of the parameters that do not
    have one yet - optimizer state (``optimizer_state_bytes``, default
    twice the trainable parameters' bytes, Adam's two moments) - 5% of the
    available memory for the caching allocator's fragmentation
    + ``input_bytes``, the input batch: it is allocated already (so not
    available) yet the budget counts it, as the model's a^0 (:meth:`Checkpointed.plan`
    passes the bytes of an input on the GPU).

    Available memory is what this process can still allocate: the device's
    free memory (``torch.cuda.mem_get_info``, which already excludes the
    parameters once they are on the device) plus the blocks PyTorch's
    caching allocator holds but no tensor uses (``memory_reserved -
    memory_allocated``: the driver counts them as used, yet the allocator
    reuses them first), and no more than the per-process cap
    (``torch.cuda.set_per_process_memory_fraction``) minus what is
    allocated.

    Raises:
        ValueError: ``device`` is not a CUDA device (on the CPU there is no
            figure of free memory to divide; give a size instead).
    """
    if device.type != "cuda":
        raise ValueError(
            f"memory='auto' needs a CUDA device (it divides the GPU's free memory); the input "
            f"is on {device}: give the budget as bytes or a size such as '2GiB'"
        )
    free, total = torch.cuda.mem_get_info(device)
    allocated = torch.cuda.memory_allocated(device)
    cached = max(0, torch.cuda.memory_reserved(device) - allocated)
    available = free + cached
    fraction = _memory_fraction(device)
    capped = fraction < 1.0 and int(fraction * total) - allocated < available
    if capped:
        available = max(0, int(fraction * total) - allocated)
    params = [p for p in module.parameters() if p.requires_grad]
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    grad_bytes = sum(p.numel() * p.element_size() for p in params if p.grad is None)
    opt = 2 * param_bytes if optimizer_state_bytes is None else optimizer_state_bytes
    margin = available // 20
    # The budget counts the input batch (the model's a^0), which is already
    # allocated and so not in ``available``: it is given back.
    budget = available + input_bytes - grad_bytes - opt - margin
    source = (
        f"the per-process cap {fraction:g} x {_fmt(total)} - allocated {_fmt(allocated)}"
        if capped
        else f"free {_fmt(free)} (of {_fmt(total)}) + cached by the allocator {_fmt(cached)}"
    )
    note = (
        f"memory='auto' on {device}: available {_fmt(available)}: {source}"
        f" - parameter gradients still to allocate {_fmt(grad_bytes)}"
        f" - optimizer state {_fmt(opt)}"
        f"{' (Adam: 2 x parameters)' if optimizer_state_bytes is None else ''}"
        f" - 5% fragmentation margin {_fmt(margin)}"
        f"{f' + the input batch {_fmt(input_bytes)} (allocated, and counted in the budget)' if input_bytes else ''}"
        f" = {_fmt(budget)}"
    )
    if budget <= 0:
        raise ValueError(f"{note}: nothing left for activations")
    return budget, note
