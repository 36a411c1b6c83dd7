"""`Checkpointed`: train an ``nn.Sequential`` under a memory budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import remat

from .budget import auto_budget, check_memory
from .budget import format_bytes as _fmt
from .executor import Executor, Op, Program, autocast_enabled
from .profile import _names, _StageRunner, preserved_state, profile_calls, stages_of
from .stages import Call

__all__ = ["Checkpointed", "Plan", "auto_budget"]


@dataclass
class Plan:
    """What :class:`Checkpointed` decided for one input shape.

    Attributes:
        chain: the measured chain (:func:`remat.torch.profile`).
        schedule: the schedule the solver returned for ``budget``.
        budget: the activation budget in bytes (as given, or from ``"auto"``).
        budget_note: how the budget was obtained (the arithmetic for ``"auto"``).
    """

    chain: remat.Chain
    schedule: remat.Schedule
    budget: int | str
    budget_note: str
    executor: Executor | None = None


class Checkpointed(nn.Module):
    """An ``nn.Sequential`` that trains within a memory budget by recomputing
    activations on a schedule remat computes.

    ``Checkpointed(model, "2GiB")`` behaves as ``model`` does in an ordinary
    training loop::

        model = remat.torch.Checkpointed(nn.Sequential(...), memory="2GiB")
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()

    On the first forward for an input shape (device, dtype and train/eval mode)
    it measures the stages on that input (:func:`remat.torch.profile`), solves
    for the fastest schedule whose activations fit ``memory``
    (:func:`remat.solve` with ``algorithm`` and ``slots``), and caches the plan;
    ``sample_input`` does this at construction instead. Every forward then runs
    the schedule's operations before the loss's backward, and the backward runs
    the rest (see :mod:`remat.torch.executor` for how RNG, BatchNorm statistics
    and autocast stay exactly as in the plain module). The parameter and input
    gradients equal the plain module's, bit for bit where the kernels are
    deterministic.

    Under ``torch.no_grad()`` (or when nothing requires a gradient) the module
    just runs ``model``: there is nothing to schedule.

    Args:
        module: an ``nn.Sequential``, ``nn.ModuleList`` or list of modules, each
            taking and returning one tensor.
        memory: the budget for activations, gradients and transient workspace
            (the model's M: the input batch and the running gradient count,
            parameters, their gradients and optimizer state do not): bytes as
            an int, a size string (``"8GiB"``, ``"11.2GiB"``), or ``"auto"`` on
            a GPU (see :meth:`auto_budget`).
        sample_input: profile and solve now, on this input.
        algorithm: any of :func:`remat.solve`'s: ``"auto"``, ``"floating"``,
            ``"persistent"``, ``"exhaustive"``, or a baseline (``"sequential"``,
            ``"revolve"``, ``"chen-sqrt"``, ``"chen-greedy"``, ``"store-all"``)
            to run it through the same executor.
        slots: memory slots of the dynamic programs (more: closer to the budget).
        exact_memory: :func:`remat.solve`'s: how much memory its exact answer
            may take (bytes or a size string; None: its default, 0: always
            round to ``slots``). Raise it for chains of hundreds of stages.
        repeat: runs per measurement when profiling.
        optimizer_state_bytes: for ``memory="auto"``: bytes the optimizer state
            will take; None assumes Adam (two tensors per parameter).
        preserve_rng: replay RNG state on recomputation (turn off only for
            stages that use no randomness, to save the state copies).
        chain: a chain measured before (:func:`profile`, or ``remat.Chain.load``
            of a saved one) to solve on instead of profiling, for every input.
            Each stage then runs once in the first forward, as in every other
            (which stages write into their input is in the metadata
            :func:`profile` writes; which draw random numbers shows on their
            first run); a chain without that metadata, or whose stage names
            are not this module's, costs one probing run of each stage first.

    Raises:
        TypeError: ``module`` is not a sequence of modules.
        ValueError: ``memory`` is not a size, or ``"auto"`` without a GPU, or
            ``chain`` has another number of stages than ``module``.
        remat.InfeasibleError: (when solving) no schedule fits ``memory``; its
            ``min_budget`` is the smallest budget that does.
    """

    def __init__(
        self,
        module: nn.Module | Sequence[nn.Module],
        memory: int | str,
        *,
        sample_input: torch.Tensor | None = None,
        algorithm: str = "auto",
        slots: int = remat.DEFAULT_SLOTS,
        exact_memory: int | str | None = None,
        repeat: int = 3,
        optimizer_state_bytes: int | None = None,
        preserve_rng: bool = True,
        chain: remat.Chain | None = None,
    ) -> None:
        super().__init__()
        stages = stages_of(module)
        self.module = module if isinstance(module, nn.Sequential) else nn.Sequential(*stages)
        memory = check_memory(memory, "Checkpointed", shares=False)  # an error now rather than at the first step
        self.memory: int | str = memory
        self.algorithm = algorithm
        self.slots = slots
        if exact_memory is not None:
            exact_memory = remat.parse_size(exact_memory)  # a ValueError now rather than at the first step
        self.exact_memory = exact_memory
        self.repeat = repeat
        self.optimizer_state_bytes = optimizer_state_bytes
        self.preserve_rng = preserve_rng
        if chain is not None and len(chain) != len(stages):
            raise ValueError(f"the chain has {len(chain)} stages and the module {len(stages)}")
        self._chain = chain
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self._last: Plan | None = None
        if sample_input is not None:
            self.plan(sample_input)

    # -- planning -----------------------------------------------------------

    @staticmethod
    def _key(x: torch.Tensor, training: bool) -> tuple[Any, ...]:
        return (tuple(x.shape), x.dtype, x.device, training, autocast_enabled(x.device.type))

    def auto_budget(self, device: torch.device, input_bytes: int = 0) -> tuple[int, str]:
        """The budget ``memory="auto"`` gives on ``device``, and its arithmetic
        (:func:`auto_budget` for this module's parameters)."""
        return auto_budget(self.module, device, input_bytes, self.optimizer_state_bytes)

    def plan(self, x: torch.Tensor) -> Plan:
        """Profiles and solves for inputs like ``x`` (cached by shape, dtype,
        device, mode and autocast), and returns the plan.

        Raises:
            remat.InfeasibleError: no schedule fits the budget.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"the input must be a torch.Tensor, got {type(x).__name__}")
        key = self._key(x, self.training)
        cached = self._plans.get(key)
        if cached is not None:
            self._last = cached
            return cached
        budget: int | str
        if self.memory == "auto":
            on_device = x.device.type == "cuda"
            budget, note = self.auto_budget(x.device, x.numel() * x.element_size() if on_device else 0)
        else:
            budget, note = self.memory, f"memory={self.memory} bytes ({_fmt(int(self.memory))}) as given"
        stages = list(self.module)
        names = _names(self.module, stages)
        uses_rng: list[bool] | None
        if self._chain is not None:
            chain = self._chain
            # Which stages draw random numbers is found by the executor, on each
            # stage's first run; which write into their input must be known
            # before it (they run on a copy).
            inplace = self._writes_input(chain, names) or self._probe(x)
            uses_rng = None
        else:
            chain, found = profile_calls(
                stages,
                Call((x,), {}, 0),
                names=names,
                repeat=self.repeat,
                name=type(self.module).__name__,
                single_tensor=True,
            )
            inplace, uses_rng = found.inplace, found.uses_rng
        schedule = remat.solve(
            chain, budget, algorithm=self.algorithm, slots=self.slots, exact_memory=self.exact_memory
        )
        executor = Executor(
            stages,
            Program(len(stages), schedule.operations),
            preserve_rng=self.preserve_rng,
            names=names,
            inplace=inplace,
            uses_rng=uses_rng,
        )
        plan = Plan(chain, schedule, budget, note, executor)
        self._plans[key] = plan
        self._last = plan
        return plan

    @staticmethod
    def _writes_input(chain: remat.Chain, names: list[str]) -> list[bool] | None:
        """Which stages write into their input, as :func:`profile` recorded it in
        the chain's metadata; None where it did not (a chain written by hand, or
        by an older remat), or where the chain's stages are not this module's
        (their names differ)."""
        d = chain.to_dict()
        found = (d.get("metadata") or {}).get("writes_input")
        L = len(names)
        if not isinstance(found, list) or not all(isinstance(l, int) and 1 <= l <= L for l in found):
            return None
        if [s.get("name") for s in d["stages"]] != names:
            return None
        return [l in found for l in range(1, L + 1)]

    def _probe(self, x: torch.Tensor) -> list[bool]:
        """Which stages write into their input, found by one forward without
        autograd (each stage runs once, on a copy of its input; RNG and
        buffers put back), for a chain given that does not say."""
        stages = list(self.module)
        names = _names(self.module, stages)
        inplace = []
        devices = [x.device] if x.device.type == "cuda" else []
        with preserved_state(stages, devices), torch.no_grad():
            x = x.detach()
            for i in range(len(stages)):
                runner = _StageRunner(stages, stages, names, i, Call((x,), {}, 0), single_tensor=True)
                copy = x.clone()
                before = copy._version
                x = runner(copy)
                inplace.append(copy._version != before)
        return inplace

    @property
    def plans(self) -> dict[tuple[Any, ...], Plan]:
        """Every plan made so far, by (shape, dtype, device, training, autocast)."""
        return dict(self._plans)

    @property
    def chain(self) -> remat.Chain | None:
        """The chain of the last input shape planned (None before the first)."""
        return self._last.chain if self._last else None

    @property
    def schedule(self) -> remat.Schedule | None:
        """The schedule of the last input shape planned (None before the first)."""
        return self._last.schedule if self._last else None

    def explain(self) -> str:
        """The last plan in words: budget arithmetic, chain, schedule, predicted
        peak and time against storing everything."""
        p = self._last
        if p is None:
            return "no plan yet: call the module (or pass sample_input) first"
        d = p.chain.to_dict()
        stages = d["stages"]
        meta = d.get("metadata") or {}
        lines = [
            p.budget_note,
            f"budget {_fmt(int(p.budget)) if isinstance(p.budget, int) else p.budget}"
            f" for activations, gradients and workspace",
            f"chain: {len(stages)} stages measured on {meta.get('device', '?')}, {meta.get('dtype', '?')},"
            f" batch {meta.get('batch', '?')} ({meta.get('mode', '?')} mode)",
        ]
        for s in stages:
            lines.append(
                f"  {s.get('name', '?'):>20}: fwd {s['forward_time']:.3f} ms, bwd "
                f"{s['backward_time']:.3f} ms, a {_fmt(s['output_size'])}, abar "
                f"{_fmt(s['saved_size'])}"
            )
        ops = p.schedule.operations
        recomputed = len([o for o in ops if Op(o[0]) is not Op.B and o[1] <= len(stages)]) - len(stages)
        lines.append(
            f"schedule ({p.schedule.algorithm}): {len(ops)} operations, {recomputed} stage "
            f"forwards recomputed; predicted peak {_fmt(p.schedule.peak_memory)}, "
            f"time {p.schedule.makespan:.3f} ms"
        )
        store_all = sum(s["forward_time"] + s["backward_time"] for s in stages)
        lines.append(f"storing everything would take {store_all:.3f} ms")
        lines.append(str(p.schedule))
        return "\n".join(lines)

    # -- running ------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Runs the module on ``x`` under the schedule for its shape (or plainly
        when no gradient is needed)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"the input must be a torch.Tensor, got {type(x).__name__}")
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or any(p.requires_grad for p in self.module.parameters())
        )
        if not needs_grad:
            out: torch.Tensor = self.module(x)
            return out
        plan = self.plan(x)
        ex = plan.executor
        assert ex is not None
        step = ex.begin()
        for l in range(1, len(ex.stages) + 1):
            y = ex.call(step, l, Call((x,), {}, 0))
            if not isinstance(y, torch.Tensor):
                raise TypeError(
                    f"{ex.label(l)} returned a {type(y).__name__}; every stage must return one tensor (the next "
                    "stage's input); for blocks with side inputs and structured outputs use remat.torch.apply"
                )
            x = y
        return x
