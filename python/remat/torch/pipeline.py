"""remat inside each stage of a pipeline (``torch.distributed.pipelining``).

Under pipeline parallelism a rank runs one stage of the model (a
:class:`~torch.distributed.pipelining.PipelineStage` around the part of the
model it holds) on several micro-batches, and the schedule runs some of their
forwards before the matching backwards. Each such micro-batch leaves its
**residue** on the rank: what its forward keeps for its backward. So a rank's
memory is not one step's peak but::

    (n - 1) x residue + peak

where ``n`` is the number of micro-batches the rank holds at once, its
*in-flight count*, and ``peak`` is one micro-batch's peak. The count follows
from the schedule (:func:`in_flight`):

- **GPipe** (``ScheduleGPipe``) runs every forward, then every backward: each
  rank holds all ``m`` micro-batches.
- **1F1B** (``Schedule1F1B``) lets stage ``k`` of ``P`` run ``P - k`` forwards
  before its first backward, then alternates: it holds ``min(P - k, m)``. The
  first stage holds the most, the last one a single micro-batch.

A plan made for one micro-batch would therefore overrun on every rank but the
last. :func:`apply_stage` derives ``n`` from the schedule and applies
:func:`remat.torch.apply` with ``in_flight=n``, so the solver minimises time
subject to ``(n - 1) x residue + peak <= budget``: a rank that holds many
micro-batches keeps less per micro-batch (its residue shrinks), one that holds
few may keep more and recompute less. remat's executor then runs inside the
stage module on every forward and backward the pipeline schedule calls; its
state is per forward pass (each micro-batch's forward has its own), so
forwards of several micro-batches may run before their backwards, in any
order.

Example (rank ``k`` of ``P``; ``stage_module`` is this rank's part)::

    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    from remat.torch.pipeline import apply_stage

    sp = apply_stage(stage_module, "6GiB", Schedule1F1B, stage_index=k, num_stages=P,
                     n_microbatches=8, example_args=(x_mb,))
    stage = PipelineStage(stage_module, k, P, device)
    schedule = Schedule1F1B(stage, n_microbatches=8, loss_fn=loss_fn)
    print(sp.explain())

What the plan does not count: the pipeline's communication buffers (the
received activations and gradients, the tensors being sent), the parameters,
their gradients and the optimizer state (see docs/pipeline.md).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import remat

from .apply import AppliedPlan, apply
from .budget import format_bytes as _fmt
from .executor import Op
from .memory import LiveBytes

__all__ = ["PipelineSchedule", "StagePlan", "apply_stage", "in_flight"]


class PipelineSchedule(enum.Enum):
    """A pipeline schedule, as far as memory is concerned: how many
    micro-batches a stage holds at once.

    :meth:`of` also accepts ``torch.distributed.pipelining``'s schedule classes
    (or instances) and the names ``"gpipe"`` and ``"1f1b"``.
    """

    #: Every forward, then every backward (``ScheduleGPipe``).
    GPIPE = "gpipe"
    #: ``P - k`` forwards on stage ``k``, then one backward, one forward
    #: (``Schedule1F1B``).
    ONE_F_ONE_B = "1f1b"

    @classmethod
    def of(cls, schedule: PipelineSchedule | str | type | object) -> PipelineSchedule:
        """The schedule kind of an enum member, a name (``"gpipe"``,
        ``"1f1b"``, any case), or a ``torch.distributed.pipelining`` schedule
        class or instance (``ScheduleGPipe``, ``Schedule1F1B``).

        Raises:
            ValueError: a schedule whose in-flight count is not modelled here
                (interleaved and zero-bubble schedules run several stages per
                rank).
        """
        if isinstance(schedule, PipelineSchedule):
            return schedule
        if isinstance(schedule, str):
            for kind in cls:
                if kind.value == schedule.lower():
                    return kind
            raise ValueError(f"unknown pipeline schedule {schedule!r}: use 'gpipe' or '1f1b'")
        klass = schedule if isinstance(schedule, type) else type(schedule)
        try:
            from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe
        except ImportError:  # pragma: no cover - torch without pipelining
            raise ValueError(f"{klass.__name__}: torch.distributed.pipelining is not available") from None
        if issubclass(klass, ScheduleGPipe):
            return cls.GPIPE
        if issubclass(klass, Schedule1F1B):
            return cls.ONE_F_ONE_B
        raise ValueError(
            f"{klass.__name__}: remat.torch.pipeline knows the in-flight counts of ScheduleGPipe and Schedule1F1B "
            "only (one stage per rank); pass in_flight= to remat.torch.apply yourself for other schedules"
        )


def in_flight(
    schedule: PipelineSchedule | str | type | object, stage_index: int, num_stages: int, n_microbatches: int
) -> int:
    """How many micro-batches stage ``stage_index`` (0-based) of ``num_stages``
    holds at once under ``schedule`` with ``n_microbatches`` micro-batches:
    ``n_microbatches`` under GPipe, ``min(num_stages - stage_index,
    n_microbatches)`` under 1F1B (the warm-up forwards of
    ``torch.distributed.pipelining.Schedule1F1B``).

    >>> in_flight("1f1b", 0, 4, 8), in_flight("1f1b", 3, 4, 8), in_flight("gpipe", 3, 4, 8)
    (4, 1, 8)

    Raises:
        ValueError: a stage index outside ``0..num_stages-1``, a count below 1,
            or an unknown schedule.
    """
    kind = PipelineSchedule.of(schedule)
    for name, v in (("num_stages", num_stages), ("n_microbatches", n_microbatches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if isinstance(stage_index, bool) or not isinstance(stage_index, int) or not 0 <= stage_index < num_stages:
        raise ValueError(f"stage_index must be in 0..{num_stages - 1}, got {stage_index!r}")
    if kind is PipelineSchedule.GPIPE:
        return n_microbatches
    return min(num_stages - stage_index, n_microbatches)


@dataclass
class StagePlan:
    """What :func:`apply_stage` installed on one rank's stage module.

    Attributes:
        plan: the :class:`~remat.torch.AppliedPlan` of the stage's block stack
            (``plan.remove()`` or :meth:`remove` undoes it).
        schedule: the pipeline schedule kind.
        stage_index: this rank's stage (0-based).
        num_stages: stages in the pipeline.
        n_microbatches: micro-batches per step.
        in_flight: micro-batches this stage holds at once (from the schedule).
        memory: the rank's budget in bytes.
        outside_held: bytes one micro-batch in flight holds outside the stack
            (what the stage's embeddings or head and the loss keep for their
            backward), measured on the calibration step; 0 without one.
        schedule_held: bytes torch's schedule itself keeps on this rank at
            its peak, beyond the plan (as measured with torch 2.15's
            ``torch.distributed.pipelining``; known from the calibration
            example, 0 without one): on the last stage (when it is not also
            the first) the schedule holds every micro-batch's loss until the
            step ends, and through the loss's graph that micro-batch's
            received input, so its last backward runs beside ``n_microbatches
            - in_flight`` earlier inputs (and their losses); under 1F1B a stage that sends input
            gradients still holds the previous one (its send is pending)
            during the next backward.
        calibrated: whether the calibration step ran.
    """

    plan: AppliedPlan
    schedule: PipelineSchedule
    stage_index: int
    num_stages: int
    n_microbatches: int
    in_flight: int
    memory: int
    outside_held: int = 0
    schedule_held: int = 0
    calibrated: bool = False

    @property
    def schedule_of_stack(self) -> remat.Schedule | None:
        """remat's schedule of the stage's stack (None before a step)."""
        return self.plan.schedule

    @property
    def residue(self) -> int | None:
        """Bytes one micro-batch's forward leaves in the stack for its backward
        (held just before the schedule's first backward operation, the stack's
        input included): the schedule's figure, or its replay's where the
        solver reports none (``in_flight=1``); None before a step."""
        s, chain = self.plan.schedule, self.plan.chain
        if s is None or chain is None:
            return None
        r = getattr(s, "residue", None)
        return int(r) if r is not None else _residue(chain, s)

    @property
    def released_output(self) -> int:
        """Bytes of the stack's output that torch's ``PipelineStage`` frees
        once it is sent (on every stage but the last, torch 2.15 keeps only
        the output's autograd edge for the backward): not held by micro-batches
        waiting for their backward. 0 on the last stage, or with a torch that
        keeps outputs."""
        chain = self.plan.chain
        if self.stage_index == self.num_stages - 1 or chain is None:
            return 0
        try:
            from torch.distributed.pipelining.stage import _PipelineStageBase
        except ImportError:  # pragma: no cover
            return 0
        if not hasattr(_PipelineStageBase, "_output_slot_is_releasable"):
            return 0
        return int(chain.to_dict()["stages"][-1]["output_size"])

    @property
    def predicted_peak(self) -> int | None:
        """The rank's predicted activation peak in bytes (:meth:`predict`);
        None before the plan is made."""
        return self.predict()

    def predict(self, recording_overhead: Sequence[int] | None = None) -> int | None:
        """The rank's predicted activation peak in bytes; None before the plan
        is made.

        One micro-batch's schedule is replayed operation by operation while
        ``n - 1`` others each hold their residue and what they keep outside
        the stack (:attr:`outside_held`); in the backward phase the others'
        sent outputs are not held (:attr:`released_output`), nor this one's
        while the model still counts it (a plain ``a^L`` up to ``B^{L+1}``,
        an ``abar^L`` up to ``B^L``, and in ``B^L`` where ``abar^L`` was
        recorded whole: an option's backward figure already lets ``a^L``
        go), and during the forward phase the others'
        outputs are counted (GPipe sends them all before waiting). The parts
        of the stage outside the stack are added as :attr:`AppliedPlan.peak_memory`
        adds them, then what torch's schedule keeps (:attr:`schedule_held`).
        The solver bounds the simpler ``(n - 1) x residue + peak`` of the
        stack, which is never below this figure's stack share.

        Args:
            recording_overhead: per block, the transient bytes of its recording
                forward measured apart, to check the profile's own
                ``recording_overhead``; ``F_all`` operations without an option
                then take it instead. None: the plan's own figure.
        """
        plan = self.plan
        chain, schedule = plan.chain, plan.schedule
        if chain is None or schedule is None:
            return None
        n1 = self.in_flight - 1
        residue = self.residue
        assert residue is not None
        released = self.released_output
        L = len(plan.modules)
        replay = remat.simulate(chain, schedule)
        stages = chain.to_dict()["stages"]
        ops = schedule.operations_with_options
        fwd = bwd = 0
        backward = False
        # Whether the model still counts this micro-batch's a^L from its
        # forward, which the pipeline freed once sent: a plain a^L up to
        # B^{L+1} (which deletes it), an abar^L up to B^L. B^L itself counts
        # an a^L where the abar^L it consumes was recorded whole (the profile
        # measures that backward with a^L held; the pipeline freed the sent
        # one, the executor drops a recomputed one before B^L), not where it
        # was recorded with an option (that figure already lets a^L go). An
        # a^L recomputed after B^{L+1} is real until then.
        recorded_l = Op(ops[L - 1][0]) is Op.F_ALL  # the forward runs stages 1..L+1 in order
        sent_counted, option_l = True, 0
        for st, (_, _, option) in zip(replay.steps, ops):
            kind, stage = st["op"][0], st["op"][1]
            backward = backward or Op(kind) is Op.B
            during = int(st["during"]["total"])
            if recording_overhead is not None and Op(kind) is Op.F_ALL and stage <= L and not option:
                own = stages[stage - 1].get("recording_overhead", stages[stage - 1]["forward_overhead"])
                during -= int(own) - int(recording_overhead[stage - 1])
            if Op(kind) is Op.F_ALL and stage == L:
                option_l = option
            if not backward:
                fwd = max(fwd, during)
                continue
            b_l = Op(kind) is Op.B and stage == L
            bwd = max(bwd, during - (released if (sent_counted and not b_l) or (b_l and not option_l) else 0))
            if Op(kind) is Op.B and (stage == L or (stage == L + 1 and not recorded_l)):
                sent_counted = False
        stack = max(fwd + n1 * (residue + self.outside_held), bwd + n1 * (residue - released + self.outside_held))
        outside = _outside_of(plan)
        if outside is None:
            peak = stack
        else:
            others = n1 * (residue - released + self.outside_held)
            peak = max(stack + outside.pre + outside.post_after, outside.pre_backward + others)
        return peak + self.schedule_held

    def explain(self) -> str:
        """The plan in words: the schedule, the in-flight count and the
        budget's arithmetic, then the stack's plan (:meth:`AppliedPlan.explain`)."""
        n = self.in_flight
        lines = [
            f"stage {self.stage_index} of {self.num_stages} under {self.schedule.name}, {self.n_microbatches} "
            f"micro-batches: holds {n} in flight",
            f"rank budget {_fmt(self.memory)}"
            + (
                f"; {n - 1} x {_fmt(self.outside_held)} held outside the stack by the other micro-batches in flight "
                f"set aside: {_fmt(self.memory - (n - 1) * self.outside_held)} for remat.torch.apply"
                if n > 1
                else ""
            )
            + (
                f"; {_fmt(self.schedule_held)} kept by torch's schedule (earlier micro-batches' inputs, through "
                "their losses) set aside"
                if self.schedule_held
                else ""
            ),
        ]
        if self.residue is not None:
            lines.append(f"residue of one micro-batch in the stack {_fmt(self.residue)}")
        if self.predicted_peak is not None:
            lines.append(f"predicted rank peak {_fmt(self.predicted_peak)}")
        if not self.calibrated:
            lines.append(
                "not calibrated (no example_args): the first pipeline step profiles and measures, under the plan "
                "for the stack alone, and what micro-batches hold outside the stack is not counted"
            )
        return "\n".join([*lines, self.plan.explain()])

    def remove(self) -> None:
        """Undoes :func:`apply_stage` (the stage module is as before)."""
        self.plan.remove()


def _residue(chain: remat.Chain, schedule: remat.Schedule) -> int:
    """Bytes held just before the schedule's first backward operation (the
    model's residue), by replay: for a build of remat whose schedules do not
    report it."""
    replay = remat.simulate(chain, schedule)
    held = int(replay.initial["total"])
    for st in replay.steps:
        if Op(st["op"][0]) is Op.B:
            break
        held = int(st["after"]["total"])
    return held


def _outside_of(plan: AppliedPlan) -> Any:
    """The measured parts of the step outside the stack, scaled to the last
    input (None before they are measured)."""
    last = plan._last
    if last is None:
        return None
    entry, numel, _ = last
    return None if entry.outside is None else entry.outside.scaled(numel)


def apply_stage(
    stage_module: nn.Module,
    memory: int | str,
    schedule: PipelineSchedule | str | type | object,
    stage_index: int,
    num_stages: int,
    n_microbatches: int,
    *,
    example_args: Sequence[Any] | None = None,
    example_kwargs: dict[str, Any] | None = None,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    example_target: Any = None,
    **apply_kwargs: Any,
) -> StagePlan:
    """Applies remat to one rank's stage module for a pipeline schedule.

    The in-flight count comes from the schedule (:func:`in_flight`), never
    typed by hand, and :func:`remat.torch.apply` plans the stage's stack of
    blocks (found in the stage module, or ``blocks=``) with it, so that
    ``(n - 1)`` micro-batches' residues and one micro-batch's peak fit in
    ``memory`` together. Call it before wrapping the module in
    ``PipelineStage``; the module's blocks then run remat's schedule in every
    forward and backward the pipeline calls.

    With ``example_args`` (one micro-batch's input to this stage, with
    ``loss_fn`` and ``example_target`` on the last stage), a calibration step
    runs here, outside the pipeline: it profiles the blocks, measures the
    parts of the stage outside the stack (embeddings, head, loss), and
    measures what one micro-batch holds outside the stack between its forward
    and backward; ``n - 1`` times that is set aside from ``memory`` and the
    stack is planned again. Parameter gradients, RNG state and buffers are put
    back afterwards, so the calibration leaves no trace in training. Without
    an example the first pipeline step profiles and measures instead, under
    the plan for the stack alone, with other micro-batches in flight: fine
    for a stage that is only blocks, approximate otherwise.

    Args:
        stage_module: the part of the model this rank runs.
        memory: the rank's budget for activations, in bytes or a size
            (``"6GiB"``); parameters, their gradients, the optimizer state
            and communication buffers are outside it.
        schedule: :class:`PipelineSchedule`, ``"gpipe"``/``"1f1b"``, or
            ``ScheduleGPipe``/``Schedule1F1B`` (class or instance).
        stage_index: this rank's stage, 0-based.
        num_stages: the number of stages.
        n_microbatches: micro-batches per step.
        example_args: one micro-batch's positional inputs to this stage.
        example_kwargs: its keyword inputs.
        loss_fn: the schedule's ``loss_fn(output, target)``, for the last
            stage's calibration (without it the last stage calibrates with
            ``output.sum()``, which keeps less than a real loss).
        example_target: one micro-batch's target, for ``loss_fn``.
        **apply_kwargs: passed to :func:`remat.torch.apply` (``blocks``,
            ``algorithm``, ``policies``, ...).

    Returns:
        the :class:`StagePlan` (``remove()`` undoes it).

    Raises:
        ValueError: a bad schedule, stage index, count or memory.
        remat.InfeasibleError: no plan fits; its ``min_budget`` is the
            smallest budget for this rank (what was set aside included).
    """
    if "in_flight" in apply_kwargs:
        raise ValueError("apply_stage derives in_flight from the schedule; do not pass it")
    kind = PipelineSchedule.of(schedule)
    n = in_flight(kind, stage_index, num_stages, n_microbatches)
    if isinstance(memory, bool) or not isinstance(memory, (int, str)):
        raise ValueError(f"memory must be bytes or a size string, got {memory!r}")
    if isinstance(memory, str) and (memory.strip().endswith("%") or memory == "auto"):
        raise ValueError(
            f"memory={memory!r}: apply_stage takes the rank's budget in bytes or a size (a share of storing "
            "everything, or 'auto', is not defined with micro-batches in flight)"
        )
    total = memory if isinstance(memory, int) else int(remat.parse_size(memory))
    plan = apply(stage_module, total, in_flight=n, **apply_kwargs)
    # A rank but the last gets its output's gradient from the next one, in a
    # buffer the pipeline holds through the stage's backward.
    plan.output_gradient_held = stage_index != num_stages - 1
    plan.input_in_step = True  # received and held by the pipeline: the rank's memory
    sp = StagePlan(plan, kind, stage_index, num_stages, n_microbatches, n, total)
    if example_args is None:
        return sp
    set_aside = 0
    try:
        is_last = stage_index == num_stages - 1
        if stage_index > 0:
            received = sum(a.numel() * a.element_size() for a in example_args if isinstance(a, torch.Tensor))
            retained = n_microbatches - n if is_last else 0
            pending = 1 if kind is PipelineSchedule.ONE_F_ONE_B and n_microbatches > 1 else 0
            sp.schedule_held = (retained + pending) * received
        # 1: profile, measure the parts outside the stack, plan again.
        losses: list[int] = []
        _calibration_step(
            sp, example_args, example_kwargs or {}, loss_fn if is_last else None, example_target, losses=losses
        )
        if is_last and losses:
            # The losses of the earlier micro-batches, kept to the step's end.
            sp.schedule_held += (n_microbatches - n) * losses[0]
        if n > 1:
            # 2: what one micro-batch holds outside the stack between its
            # forward and backward, under the final plan; n - 1 of them are set
            # aside and the stack is planned again.
            sp.outside_held = _calibration_step(
                sp, example_args, example_kwargs or {}, loss_fn if is_last else None, example_target, measure=True
            )
        set_aside = (n - 1) * sp.outside_held + sp.schedule_held
        if set_aside:
            plan.memory = total - set_aside
            if plan._outside is not None:
                plan._measured(plan._outside)
        sp.calibrated = True
    except remat.InfeasibleError as e:
        plan.remove()
        # apply's figure is for what it was given: the rank's budget less
        # what was set aside for the micro-batches in flight.
        least = None if e.min_budget is None else int(e.min_budget) + set_aside
        err = remat.InfeasibleError(
            f"remat.torch.pipeline.apply_stage: stage {stage_index} of {num_stages} holds {n} micro-batches in "
            f"flight under {kind.name}"
            + (f" ({_fmt(set_aside)} of the budget set aside for what they hold beside the stack)" if set_aside else "")
            + (
                f"; the smallest budget for this rank is {_fmt(least)} ({least} bytes)"
                if least is not None
                else "; no budget fits"
            )
            + f": {e}"
        )
        err.min_budget, err.algorithm, err.budget = least, e.algorithm, total
        raise err from e
    except BaseException:
        plan.remove()
        raise
    return sp


@contextlib.contextmanager
def _no_trace(module: nn.Module) -> Iterator[None]:
    """Puts the parameters' gradients, the buffers and the RNG state back."""
    grads = {p: (None if p.grad is None else p.grad.detach().clone()) for p in module.parameters()}
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    devices = sorted({p.device.index for p in module.parameters() if p.is_cuda and p.device.index is not None})
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            for p, g in grads.items():
                p.grad = g
            with torch.no_grad():
                for b, v in buffers:
                    b.copy_(v)


def _first_tensor(v: Any) -> torch.Tensor | None:
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (tuple, list)) and v:
        return _first_tensor(v[0])
    if isinstance(v, dict) and v:
        return _first_tensor(next(iter(v.values())))
    return None


def _calibration_step(
    sp: StagePlan,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    loss_fn: Callable[[Any, Any], torch.Tensor] | None,
    target: Any,
    *,
    measure: bool = False,
    losses: list[int] | None = None,
) -> int:
    """One forward and backward of the stage on the example, as the pipeline
    runs it (a received input a fresh leaf that requires a gradient where it
    is a floating-point tensor, the last stage's loss, a gradient of ones for
    the others' outputs). With ``measure``: returns the bytes held outside the
    stack between the forward and the backward. ``losses``, where given, gets
    the bytes of the loss."""
    module = sp.plan.model
    # A received activation is a leaf that requires a gradient (the stage
    # sends its gradient back); the first stage's input is the data.
    receives = sp.stage_index > 0
    inputs = [
        a.detach().requires_grad_(receives) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
        for a in args
    ]
    first_input: list[torch.Tensor] = []

    def note_input(_m: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        t = _first_tensor(a) if a else _first_tensor(kw)
        if t is not None and not first_input:
            first_input.append(t)

    hook = sp.plan.modules[0].register_forward_pre_hook(note_input, with_kwargs=True)
    held = 0
    try:
        with _no_trace(module), LiveBytes() if measure else contextlib.nullcontext() as live:
            if live is not None:
                live.exclude_parameter_gradients(module.parameters())
            out = module(*inputs, **kwargs)
            root: Any = loss_fn(out, target) if loss_fn is not None else _first_tensor(out)
            if root is None:
                raise ValueError("the stage's output holds no tensor")
            if losses is not None and loss_fn is not None:
                losses.append(root.untyped_storage().nbytes())
            if live is not None:
                schedule = sp.plan.schedule
                residue = getattr(schedule, "residue", None)
                if schedule is None or residue is None:
                    raise RuntimeError(
                        "remat.solve returned no residue: this remat build predates in_flight (rebuild the extension)"
                    )
                own = first_input and not live.tracks(first_input[0])
                chain_input = sp.plan.chain.to_dict()["input_size"] if own and sp.plan.chain is not None else 0
                # The residue counts the stack's input a^0; a stage input made
                # before the forward (a received activation) is not in `current`.
                held = max(0, live.current - (int(residue) - chain_input))
            # The others' output gradient, made after the measurement: in the
            # pipeline it is a receive buffer, which arrives at the backward.
            grads: Any = None if loss_fn is not None else torch.ones_like(root)
            torch.autograd.backward(root, grads)
            del out, root, grads
    finally:
        hook.remove()
    return held
