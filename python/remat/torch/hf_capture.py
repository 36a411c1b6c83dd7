"""Hugging Face's output capturing, kept to the model's own calls.

Since transformers 5, ``output_attentions=True``, ``output_router_logits=True``
and ``output_hidden_states=True`` work by forward hooks on the recorded
modules (attention, router, decoder layer), which append every output to a
collector the model's forward sets in a context variable for its duration.
remat runs a model's blocks more than once inside that forward on the steps
it profiles (the profile's runs of each block, the capture of each block's
call, the head's options), and each such run was recorded: Mixtral with
``output_router_logits=True`` returned 58 router logits for 4 layers (a wrong
auxiliary loss), then its backward failed; ``output_attentions=True``
returned 58 attention maps. remat's own runs go inside
:func:`outputs_not_captured`, where the collector is off.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

__all__ = ["outputs_not_captured"]

#: The module that holds the collector (transformers >= 5).
_MODULE = "transformers.utils.output_capturing"


@contextlib.contextmanager
def outputs_not_captured() -> Iterator[None]:
    """Within it, Hugging Face's output capturing records nothing; the
    model's collector is back after it. Nothing happens where transformers
    is not imported or has no such collector. O(1).

    # Example

    ```python
    from remat.torch.hf_capture import outputs_not_captured

    with outputs_not_captured():
        pass  # remat's own runs of the blocks
    ```
    """
    module = sys.modules.get(_MODULE)
    collector = getattr(module, "_active_collector", None)
    var = getattr(collector, "context_var", None)
    if collector is None or var is None or not hasattr(var, "set"):
        yield
        return
    token = var.set(None)
    # Where compilation was detected, transformers reads a plain global instead.
    was = getattr(collector, "global_var", None)
    collector.global_var = None
    try:
        yield
    finally:
        collector.global_var = was
        var.reset(token)
