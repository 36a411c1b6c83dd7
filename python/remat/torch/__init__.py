"""remat for PyTorch: measure an ``nn.Sequential`` and train it under a memory budget.

- :func:`profile` measures each stage of a sequential network (times, output,
  saved and gradient bytes, transient workspace) and returns a
  :class:`remat.Chain`, the input of every remat solver.
- :class:`Checkpointed` wraps the network: it profiles on first use, solves for
  the fastest schedule of recomputations within the budget, and runs it inside
  one autograd node, so ``loss.backward()`` works unchanged and gives the plain
  network's gradients.
- :class:`LiveBytes` counts the bytes of live tensors (on any device, the CPU
  included), to check what a schedule really holds.
- :func:`export_joint` writes the joint forward+backward graph of any function
  through AOTAutograd, and :func:`partitioner` is a ``partition_fn`` for
  ``aot_function`` / ``torch.compile`` that asks remat's fusion-aware min-cut
  (optionally under a byte budget) which activations to save.

Example::

    import remat.torch
    model = remat.torch.Checkpointed(nn.Sequential(*blocks), memory="1GiB")
    loss = criterion(model(x), y)
    loss.backward()
    print(model.explain())
"""

from .apply import AppliedPlan, apply, find_blocks
from .checkpointed import Checkpointed, Plan
from .executor import run_schedule
from .joint import export_joint, pytorch_min_cut
from .memory import LiveBytes
from .partition import RematSolverError, partitioner
from .profile import profile, stages_of

__all__ = [
    "AppliedPlan",
    "Checkpointed",
    "LiveBytes",
    "Plan",
    "RematSolverError",
    "apply",
    "export_joint",
    "find_blocks",
    "partitioner",
    "profile",
    "pytorch_min_cut",
    "run_schedule",
    "stages_of",
]
