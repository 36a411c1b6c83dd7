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

__all__ = ["RematSolverError", "partitioner"]

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


def partitioner(
    memory: int | str | None = None, *, solver: Solver | None = None
) -> Callable[..., tuple[fx.GraphModule, fx.GraphModule]]:
    """A partition function with PyTorch's signature
    ``(joint_module, joint_inputs, *, num_fwd_outputs, ...) -> (fw_module, bw_module)``.

    ``memory``: None for the min-cut; otherwise a byte budget for the saved
    activations (an int, or a size string such as ``"64MiB"``), answered with
    the least recompute cost that fits; random ops are never recomputed.
    ``solver`` maps (joint graph JSON, memory) to saved node names; the
    default asks the Python bindings in this process (:func:`bindings_solver`);
    :func:`binary_solver` runs the ``remat`` command instead.
    """
    solve = solver or bindings_solver

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
        names = solve(json.dumps(graph), memory)
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

    return partition_fn
