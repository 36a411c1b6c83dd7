"""The offload option: a block recorded whole, what it saves kept in host memory.

docs/model.md ("Offload") defines it: ``F_all^l[o]`` keeps only a^l on the
device; the rest of its saved set is copied to host memory in the forward and
brought back in the backward. Its figures follow from option 0's and the two
copy bandwidths, so it needs no profile of its own: :func:`with_offload` adds
it to every stage of a profiled chain, :func:`bandwidth` measures the copies.
The executor runs it (:class:`remat.torch.executor.Executor`, a
:class:`~remat.torch.NamedPolicy` whose ``offload`` is set).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

import remat

from .policies import _BUILT_IN, NamedPolicy, Policy

__all__ = ["Bandwidth", "bandwidth", "with_offload"]

#: The most options a stage may have, option 0 included (docs/model.md).
_MAX_OPTIONS = 16


@dataclass(frozen=True)
class Bandwidth:
    """Copy speeds between a device and host memory, in bytes per ms."""

    to_host: float
    to_device: float

    def ms(self, nbytes: int) -> float:
        """The time of copying ``nbytes`` out and back, none of it hidden."""
        return nbytes / self.to_host + nbytes / self.to_device


def bandwidth(device: torch.device, nbytes: int = 64 << 20, repeat: int = 3) -> Bandwidth:
    """Measures the copies of ``nbytes`` between ``device`` and (pinned, for a
    GPU) host memory: the median of ``repeat`` timed copies each way, after
    one untimed. On the CPU both are copies within host memory.

    Cost: ``2 (repeat + 1)`` copies of ``nbytes``, and ``nbytes`` on the
    device and on the host while it runs.

    # Example

    >>> import torch
    >>> from remat.torch.offload import bandwidth
    >>> bandwidth(torch.device("cpu"), nbytes=1 << 20, repeat=1).to_host > 0
    True
    """
    cuda = device.type == "cuda"
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda)

    def timed(dst: torch.Tensor, source: torch.Tensor) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        dst.copy_(source)
        if cuda:
            torch.cuda.synchronize(device)
        return max(time.perf_counter() - start, 1e-9) * 1e3

    out = [timed(host, src) for _ in range(repeat + 1)][1:]
    back = [timed(src, host) for _ in range(repeat + 1)][1:]
    return Bandwidth(nbytes / statistics.median(out), nbytes / statistics.median(back))


def with_offload(
    chain: remat.Chain, options: list[list[NamedPolicy | None]], speed: Bandwidth
) -> tuple[remat.Chain, list[list[NamedPolicy | None]]]:
    """``chain`` with the offload option appended to every stage that has
    room for one (at most 16 options) and something to move (a saved set
    above its output), and ``options`` (the policies of each stage's options,
    ``options[l-1][o]``) to match. Figures as docs/model.md's table says.
    O(stages).
    """
    d = chain.to_dict()
    offload = _BUILT_IN[Policy.OFFLOAD]
    out: list[list[NamedPolicy | None]] = []
    for s, policies in zip(d["stages"], options):
        policies = list(policies)
        moved = int(s["saved_size"]) - int(s["output_size"])
        if moved > 0 and len(policies) < _MAX_OPTIONS:
            record = int(s.get("recording_overhead", s.get("forward_overhead", 0)) or 0)
            s.setdefault("options", []).append(
                {
                    "name": offload.name,
                    "saved_size": int(s["output_size"]),
                    "recompute_time": speed.ms(moved),
                    "forward_overhead": record + moved,
                    "backward_overhead": int(s.get("backward_overhead", 0) or 0) + moved,
                }
            )
            policies.append(offload)
        out.append(policies)
    return remat.Chain.from_dict(d), out
