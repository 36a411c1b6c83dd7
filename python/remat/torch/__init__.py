"""remat for PyTorch: train a model within a memory budget, gradients unchanged.

- :func:`apply` finds a model's stack of blocks (a Hugging Face model's
  ``transformer.h`` / ``model.layers``, torchvision's ``layer1..layer4``),
  plans it with what runs before and after it counted in the budget, and runs
  the schedule in place: the model stays the user's object and the training
  loop is unchanged. :func:`find_stacks` finds several stacks where a model
  has them (a Hugging Face encoder-decoder's encoder and decoder), planned as
  one chain.
- :class:`Checkpointed` wraps an ``nn.Sequential`` the same way.
- The executor (:mod:`remat.torch.executor`) follows autograd's own semantics,
  as non-reentrant ``torch.utils.checkpoint`` does: hooks fire once,
  ``autograd.grad``, ``retain_graph`` and ``create_graph`` work, and gradients
  are bit-identical to plain training.
- :func:`profile` measures each stage of a sequential network (times, output,
  saved and gradient bytes, transient workspace) and returns a
  :class:`remat.Chain`, the input of every remat solver.
- Recording options (:mod:`remat.torch.policies`): each block is also measured
  under selective-saving policies (:class:`Policy`: ``SAVE_MATMULS`` keeps the
  matrix products' outputs, ``SAVE_INPUT`` nothing), run through PyTorch's
  selective activation checkpointing, and the solver picks one per block.
- Pipeline parallelism (:mod:`remat.torch.pipeline`): :func:`apply_stage`
  plans one rank's stage for ``torch.distributed.pipelining``'s GPipe or 1F1B
  schedule, with the micro-batches the rank holds at once
  (:func:`pipeline_in_flight`) counted in its budget.
- The loss as a loss option (:mod:`remat.torch.head`): for a Hugging Face
  causal LM, :func:`apply` measures the head and the loss whole and in chunks
  of tokens (:func:`chunked_cross_entropy`, which never holds the whole
  logits) and plans with the one that fits fastest; :func:`max_batch` finds
  the largest batch whose plan fits a budget.
- :class:`LiveBytes` counts the bytes of live tensors (on any device, the CPU
  included), to check what a schedule really holds.
- :func:`export_joint` writes the joint forward+backward graph of any function
  through AOTAutograd, and :func:`partitioner` is a ``partition_fn`` for
  ``aot_function`` / ``torch.compile`` that asks remat's fusion-aware min-cut
  (optionally under a byte budget) which activations to save.

Example::

    import remat.torch
    plan = remat.torch.apply(model, memory="60%")   # or bytes, "8GiB", "auto"
    loss = model(input_ids, labels=input_ids).loss
    loss.backward()
    print(plan.explain())
"""

from .apply import AppliedPlan, apply, find_blocks, find_stacks
from .capacity import Capacity, largest_fitting, max_batch
from .checkpointed import Checkpointed, Plan
from .executor import run_schedule
from .head import LossHead, chunked_cross_entropy
from .joint import export_joint, pytorch_min_cut
from .memory import LiveBytes
from .partition import RematSolverError, partitioner
from .pipeline import PipelineSchedule, StagePlan, apply_stage
from .pipeline import in_flight as pipeline_in_flight
from .policies import (
    ATTENTION_OPS,
    COMPILED_DEFAULT_POLICIES,
    DEFAULT_POLICIES,
    MATMUL_OPS,
    OFFLOAD,
    SAVE_ALL,
    SAVE_ATTENTION,
    SAVE_INPUT,
    SAVE_MATMULS,
    NamedPolicy,
    Policy,
    policy,
)
from .profile import profile, stages_of
from .unplanned import StepKind, UnplannedStepWarning

__all__ = [
    "ATTENTION_OPS",
    "COMPILED_DEFAULT_POLICIES",
    "DEFAULT_POLICIES",
    "MATMUL_OPS",
    "OFFLOAD",
    "SAVE_ALL",
    "SAVE_ATTENTION",
    "SAVE_INPUT",
    "SAVE_MATMULS",
    "AppliedPlan",
    "Capacity",
    "Checkpointed",
    "LiveBytes",
    "LossHead",
    "NamedPolicy",
    "PipelineSchedule",
    "Plan",
    "Policy",
    "RematSolverError",
    "StagePlan",
    "StepKind",
    "UnplannedStepWarning",
    "apply",
    "apply_stage",
    "chunked_cross_entropy",
    "export_joint",
    "find_blocks",
    "find_stacks",
    "largest_fitting",
    "max_batch",
    "partitioner",
    "pipeline_in_flight",
    "policy",
    "profile",
    "pytorch_min_cut",
    "run_schedule",
    "stages_of",
]
