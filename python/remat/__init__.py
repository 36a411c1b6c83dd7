"""remat: optimal activation rematerialization (gradient checkpointing) schedules.

Training keeps every forward activation for the backward pass; when that does
not fit in memory, some activations are dropped and recomputed. remat computes
the fastest schedule of recomputations that fits a memory budget, and proves
each one by replaying it in an exact simulator. The solvers are Rust (the
``remat._core`` extension); this package is a thin layer over them.

A network is a :class:`Chain` of stages (times and sizes of each forward and
backward). Typical use::

    import remat

    chain = remat.Chain.load("chains/rotor-fc6.json")
    schedule = remat.solve(chain, "90MiB")  # the fastest schedule within 90 MiB
    print(schedule)                         # F_ck^1 F_none^2 ... B^1
    schedule.makespan, schedule.peak_memory
    remat.simulate(chain, schedule).peak_memory  # the replay's figures again

    remat.min_memory(chain)        # the smallest budget any schedule meets
    remat.compare(chain, "90MiB")  # every algorithm and baseline at one budget

Sizes are bytes (an int) or strings with a unit (``"8GiB"``, ``"11.2GiB"``).
No schedule within the budget raises :class:`InfeasibleError`, whose
``min_budget`` is the smallest budget that works; bad input raises
``ValueError`` naming the field at fault; a bug in remat (a schedule its own
simulator rejects, a mispredicted makespan) raises :class:`InternalError`, a
``RuntimeError``. Both are :class:`RematError` subclasses. The kind of each
library error picks the exception, as it picks the exit code of the ``remat``
command (1, 2, 70).

For PyTorch, ``remat.torch`` measures an ``nn.Sequential`` as a chain and
trains it under a budget (it needs ``torch``; install ``remat[torch]``).
"""

from remat._core import (
    DEFAULT_SLOTS,
    MAX_IN_FLIGHT,
    Chain,
    InfeasibleError,
    InternalError,
    RematError,
    Replay,
    Schedule,
    Stage,
    __version__,
    compare,
    format_size,
    min_memory,
    parse_size,
    partition_joint,
    simulate,
    solve,
)

__all__ = [
    "DEFAULT_SLOTS",
    "MAX_IN_FLIGHT",
    "Chain",
    "InfeasibleError",
    "InternalError",
    "RematError",
    "Replay",
    "Schedule",
    "Stage",
    "__version__",
    "compare",
    "format_size",
    "min_memory",
    "parse_size",
    "partition_joint",
    "simulate",
    "solve",
]
