"""``remat.torch.partitioner``: a partition function for AOTAutograd that asks
remat which values the forward saves (the fusion-aware min-cut, or the least
recompute cost within a byte budget) and builds the forward and backward
modules from that set.

    from functorch.compile import aot_function
    compiled = aot_function(fn, fw_compiler, bw_compiler, partition_fn=partitioner())

or with ``torch.compile`` through ``torch._dynamo.backends.common.aot_autograd(
fw_compiler=..., partition_fn=partitioner(memory=...))``.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

from torch import fx
from torch._functorch import partitioners as _partitioners

import remat
from remat.torch.joint import _graph_to_dict

__all__ = ["Partitioner", "RematSolverError", "partitioner"]

# (joint graph JSON, budget or None) -> names of the saved nodes.
Solver = Callable[[str, "int | str | None"], list[str]]


class RematSolverError(RuntimeError):
    """remat could not partition the graph (bad graph, or infeasible budget)."""


def _binary() -> str:
    env = os.environ.get("REMAT_BIN")
    if env:
        return env
    found = shutil.which("remat")
    if found:
        return found
    repo = pathlib.Path(__file__).resolve().parents[3]
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", repo / "target"))
    for profile in ("release", "debug"):
        candidate = target / profile / "remat"
        if candidate.exists():
            return str(candidate)
    raise RematSolverError("no remat binary found: set REMAT_BIN, put `remat` on PATH, or build it (cargo build)")


def binary_solver(graph_json: str, memory: int | str | None) -> list[str]:
    """Runs ``remat mincut --json`` on the graph: the saved node names."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "joint.json"
        path.write_text(graph_json)
        args = [_binary(), "mincut", str(path), "--json"]
        if memory is not None:
            args += ["--memory", str(memory)]
        run = subprocess.run(args, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RematSolverError(run.stderr.strip() or f"remat exited with {run.returncode}")
    answer = json.loads(run.stdout)
    return list(answer["chosen"]["saved"])


def bindings_solver(graph_json: str, memory: int | str | None) -> list[str]:
    """remat's min-cut through the Python bindings (``remat.partition_joint``),
    in this process: the saved node names."""
    try:
        answer = remat.partition_joint(graph_json, memory)
    except (ValueError, remat.RematError) as e:
        raise RematSolverError(str(e)) from e
    return list(answer["chosen"]["saved"])


class Partitioner:
    """The partition function :func:`partitioner` returns: call it as
    AOTAutograd does. ``partitions`` lists, for each region it partitioned
    (one per compiled graph), what the forward saves and its bytes, so a
    caller can count what a budget did not:
    ``{"saved": [...], "activation_bytes": A, "input_bytes": I,
    "saved_bytes": A + I, "memory": budget or None}``."""

    def __init__(self, fn: Callable[..., tuple[fx.GraphModule, fx.GraphModule]]) -> None:
        self._fn = fn
        self.partitions: list[dict[str, Any]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        return self._fn(*args, **kwargs)


def _saved_bytes(graph: dict[str, Any], names: list[str]) -> tuple[int, int]:
    """(activation bytes, input bytes) of the saved ``names`` in ``graph``."""
    by_name = {n["name"]: n for n in graph["nodes"]}
    activations = inputs = 0
    for name in names:
        node = by_name[name]
        size = int(node.get("bytes", 0))
        if node["role"] == "primal":
            inputs += size
        else:
            activations += size
    return activations, inputs


def _solve_counting_inputs(solve: Solver, graph: dict[str, Any], budget: int) -> list[str]:
    """Saved names whose bytes, the region's inputs included, fit ``budget``:
    the activations' budget is lowered by the bytes of the inputs the answer
    saves until the whole fits (the inputs saved can change with the answer,
    so a few rounds)."""
    text = json.dumps(graph)
    allowed = budget
    for _ in range(16):
        names = solve(text, allowed)
        activations, inputs = _saved_bytes(graph, names)
        if activations + inputs <= budget:
            return names
        left = min(budget - inputs, allowed - 1)
        if left < 0:
            raise RematSolverError(
                f"the inputs this region must save take {inputs} bytes, more than the budget of {budget} bytes "
                "(count_inputs=True counts them); raise the budget, or pass count_inputs=False to bound the "
                "activations only"
            )
        allowed = left
    raise RematSolverError(f"no saved set found whose bytes, the region's inputs included, fit {budget} bytes")


def partitioner(
    memory: int | str | None = None, *, count_inputs: bool = False, solver: Solver | None = None
) -> Partitioner:
    """A partition function with PyTorch's signature
    ``(joint_module, joint_inputs, *, num_fwd_outputs, ...) -> (fw_module, bw_module)``.

    ``memory``: None for the min-cut; otherwise a byte budget (an int, or a
    size string such as ``"64MiB"``), answered with the least recompute cost
    that fits; random ops are never recomputed. By default it bounds the saved
    *activations* only: the inputs of the compiled region (parameters and the
    region's arguments) that the backward reads are saved on top of it, free
    because they are alive anyway, as in PyTorch's activation memory budget.
    With ``count_inputs=True`` it bounds everything the forward saves, those
    inputs included (:class:`RematSolverError` when the inputs alone exceed
    it). Either way the returned :class:`Partitioner` records each region's
    activation and input bytes in ``partitions``.

    Nodes that read an input the forward mutates in place (train-mode
    BatchNorm's running statistics) are saved, never recomputed: recomputed
    in the backward they would read the mutated value.

    ``solver`` maps (joint graph JSON, memory) to saved node names; the
    default asks the Python bindings in this process (:func:`bindings_solver`);
    :func:`binary_solver` runs the ``remat`` command instead.
    """
    solve = solver or bindings_solver
    budget = None if memory is None else remat.parse_size(memory)
    partitions: list[dict[str, Any]] = []

    def partition_fn(
        joint_module: fx.GraphModule,
        _joint_inputs: Any,
        *,
        num_fwd_outputs: int,
        static_lifetime_input_indices: list[int] | None = None,
        **_kwargs: Any,
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        joint_module.graph.eliminate_dead_code()
        joint_module.recompile()
        graph = _graph_to_dict(joint_module, num_fwd_outputs, "joint")
        if count_inputs and budget is not None:
            names = _solve_counting_inputs(solve, graph, budget)
        else:
            names = solve(json.dumps(graph), budget)
        activations, inputs = _saved_bytes(graph, names)
        partitions.append(
            {
                "saved": list(names),
                "activation_bytes": activations,
                "input_bytes": inputs,
                "saved_bytes": activations + inputs,
                "memory": budget,
            }
        )
        by_name = {n.name: n for n in joint_module.graph.nodes}
        saved = [by_name[name] for name in names]
        node_info = _partitioners.classify_nodes(joint_module, static_lifetime_input_indices or [], num_fwd_outputs)
        sym = [n for n in saved if _partitioners.is_sym_node(n)]
        values = [n for n in saved if not _partitioners.is_sym_node(n)]
        fw_module, bw_module = _partitioners._extract_fwd_bwd_modules(
            joint_module,
            values,
            saved_sym_nodes=sym,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_nodes=node_info.static_lifetime_input_nodes,
        )
        bw_module = _partitioners.reordering_to_mimic_autograd_engine(bw_module)
        return fw_module, bw_module

    result = Partitioner(partition_fn)
    result.partitions = partitions
    return result
