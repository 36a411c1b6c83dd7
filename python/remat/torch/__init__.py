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

Example::

    import remat.torch
    model = remat.torch.Checkpointed(nn.Sequential(*blocks), memory="1GiB")
    loss = criterion(model(x), y)
    loss.backward()
    print(model.explain())
"""

from .checkpointed import Checkpointed, Plan
from .executor import run_schedule
from .memory import LiveBytes
from .profile import profile, stages_of

__all__ = ["Checkpointed", "LiveBytes", "Plan", "profile", "run_schedule", "stages_of"]
