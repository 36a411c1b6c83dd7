"""Export the joint (forward + backward) graph of a PyTorch function as remat's
joint-graph JSON (docs/joint.md), through AOTAutograd on the CPU.

The graph exported is the one PyTorch's own min-cut partitioner
(``min_cut_rematerialization_partition``) works on, after its dead-code
elimination and CSE, so remat and PyTorch partition the same nodes; PyTorch's
saved set is recorded in ``metadata.pytorch_saved`` for comparison.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from typing import Any

import torch
from functorch.compile import make_boxed_func
from torch import fx
from torch._functorch import partitioners as _partitioners
from torch._functorch.aot_autograd import aot_function
from torch.utils._pytree import tree_flatten

__all__ = ["export_joint", "pytorch_min_cut"]

# Reductions among PyTorch's recomputable ops: remat's `reduction` class
# (the rest of the recomputable ops are `pointwise`).
_REDUCTIONS = {
    "sum",
    "mean",
    "amax",
    "amin",
    "var",
    "std",
    "var_mean",
    "argmax",
    "argmin",
    "any",
    "all",
    "_grad_sum_to_size",
    "sum_to_size",
    "max",
    "min",
    "prod",
    "logsumexp",
}


def _op_class(node: fx.Node, op_types: Any) -> str:
    """remat's op class of a call_function node, from PyTorch's own op lists."""
    if node.target is operator.getitem or op_types.is_view(node):
        return "view"
    if op_types.is_random(node):
        return "random"
    if op_types.is_compute_intensive(node):
        return "compute_intensive"
    if op_types.is_recomputable(node):
        packet = getattr(node.target, "_overloadpacket", None)
        name = getattr(packet, "__name__", str(node.target))
        return "reduction" if name.split(".")[-1] in _REDUCTIONS else "pointwise"
    return "other"


def _flops(node: fx.Node) -> float | None:
    """FLOPs of one run from PyTorch's flop formulas (matmul, conv, attention)."""
    from torch.utils.flop_counter import flop_registry

    packet = getattr(node.target, "_overloadpacket", None)
    formula = flop_registry.get(packet) if packet is not None else None
    if formula is None:
        return None

    def val(a: Any) -> Any:
        return a.meta.get("val") if isinstance(a, fx.Node) else a

    args = torch.utils._pytree.tree_map(val, node.args)
    kwargs = torch.utils._pytree.tree_map(val, node.kwargs)
    try:
        return float(formula(*args, **kwargs, out_val=node.meta.get("val")))
    except (
        TypeError,
        ValueError,
        RuntimeError,
    ):  # a formula that does not fit: no count
        return None


def _input_nodes(node: fx.Node) -> list[fx.Node]:
    """The node's fx.Node arguments in order, repeats kept (``mul(x, x)``)."""
    flat, _ = tree_flatten((node.args, node.kwargs))
    return [a for a in flat if isinstance(a, fx.Node)]


def _mutated_inputs(joint_module: fx.GraphModule) -> set[str]:
    """Names of the placeholders the graph writes in place (``copy_`` and the
    other in-place ops of a functionalized graph's epilogue)."""
    mutated: set[str] = set()
    for node in joint_module.graph.nodes:
        if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
            continue
        schema = getattr(node.target, "_schema", None)
        parts = str(node.target).split(".")
        in_place = bool(getattr(schema, "is_mutable", False)) or (len(parts) >= 2 and parts[-2].endswith("_"))
        if in_place and node.args[0].op == "placeholder":
            mutated.add(node.args[0].name)
    return mutated


def _graph_to_dict(joint_module: fx.GraphModule, num_fwd_outputs: int, name: str) -> dict[str, Any]:
    node_info = _partitioners.classify_nodes(joint_module, [], num_fwd_outputs)
    op_types = _partitioners.get_default_op_list()
    nodes: list[dict[str, Any]] = []
    outputs: list[str] = []
    gradients: list[str] = []
    mutated = _mutated_inputs(joint_module)
    for node in joint_module.graph.nodes:
        if node.op == "output":
            flat = list(node.args[0])
            for i, out in enumerate(flat):
                if isinstance(out, fx.Node):
                    target = outputs if i < num_fwd_outputs else gradients
                    if out.name not in target:
                        target.append(out.name)
            continue
        if node.op not in ("placeholder", "call_function"):
            raise ValueError(f"node `{node.name}`: op `{node.op}` is not supported")
        entry: dict[str, Any] = {"name": node.name}
        if node.op == "placeholder":
            entry["role"] = "tangent" if "tangents" in str(node.target) else "primal"
        else:
            entry["role"] = "forward" if node_info.is_required_fw(node) else "backward"
            entry["op"] = _op_class(node, op_types)
            entry["target"] = str(node.target)
            entry["inputs"] = [a.name for a in _input_nodes(node)]
            # A node that reads an input the forward mutates in place (train-mode
            # BatchNorm's running statistics, copied back at the end of the
            # forward) would read the mutated value if recomputed in the
            # backward, and autograd refuses it: it is saved, never recomputed.
            # In-place ops on inputs (`copy_`) appear in the graph;
            # Functionalized mutating ops (`_native_batch_norm_legit_functional`)
            # read such inputs: AOTAutograd writes their new values back after
            # the forward, outside this graph.
            reads_mutated = any(name in mutated for name in entry["inputs"])
            if entry["role"] == "forward" and (reads_mutated or "_functional" in entry["target"]):
                entry["banned"] = True
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            entry["shape"] = [int(d) for d in value.shape]
            entry["dtype"] = str(value.dtype).removeprefix("torch.")
            entry["bytes"] = int(_partitioners._size_of(node))
        elif isinstance(value, (tuple, list)):
            entry["tuple"] = True
        else:
            entry["bytes"] = int(_partitioners._size_of(node)) if value is not None else 0
        if node.op == "call_function" and entry["op"] == "compute_intensive":
            flops = _flops(node)
            if flops is not None:
                entry["flops"] = flops
        nodes.append(entry)
    return {"name": name, "nodes": nodes, "outputs": outputs, "gradients": gradients}


def _saved_names(fw_module: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    """Names of the tensors a partitioned forward saves for its backward."""
    output = next(n for n in fw_module.graph.nodes if n.op == "output")
    saved = list(output.args[0])[num_fwd_outputs:]
    return [n.name for n in saved if isinstance(n, fx.Node) and isinstance(n.meta.get("val"), torch.Tensor)]


def _trace(
    fn: Callable[..., Any],
    inputs: tuple[Any, ...],
    partition: Callable[..., Any],
) -> None:
    """Runs ``fn`` once through AOTAutograd with ``partition`` as partition_fn."""

    def nop(gm: fx.GraphModule, _inputs: Any) -> Any:
        return make_boxed_func(gm)

    if isinstance(fn, torch.nn.Module):
        module = fn
        params = dict(module.named_parameters())

        def call(params: dict[str, torch.Tensor], *args: Any) -> Any:
            return torch.func.functional_call(module, params, args)

        compiled = aot_function(call, fw_compiler=nop, bw_compiler=nop, partition_fn=partition)
        compiled(params, *inputs)
    else:
        compiled = aot_function(fn, fw_compiler=nop, bw_compiler=nop, partition_fn=partition)
        compiled(*inputs)


def export_joint(fn: Callable[..., Any], *inputs: Any, name: str = "joint") -> dict[str, Any]:
    """The joint graph of ``fn(*inputs)`` (a function or an ``nn.Module``) as a
    remat joint-graph dict, ready for ``json.dump``.

    Inputs that need gradients must have ``requires_grad=True``. The graph is
    traced by AOTAutograd on whatever device the inputs are on (the CPU is
    enough). ``metadata.pytorch_saved`` lists what PyTorch's
    ``min_cut_rematerialization_partition`` saves on the same graph.
    """
    captured: dict[str, Any] = {}

    def partition(
        joint_module: fx.GraphModule,
        joint_inputs: Any,
        *,
        num_fwd_outputs: int,
        **kw: Any,
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        # PyTorch's partitioner first: it runs DCE and CSE on joint_module in
        # place, so what is exported after is the graph it partitioned.
        fw, bw = _partitioners.min_cut_rematerialization_partition(
            joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kw
        )
        captured["graph"] = _graph_to_dict(joint_module, num_fwd_outputs, name)
        captured["saved"] = _saved_names(fw, num_fwd_outputs)
        return fw, bw

    _trace(fn, inputs, partition)
    graph: dict[str, Any] = captured["graph"]
    by_name = {n["name"]: n for n in graph["nodes"]}
    graph["metadata"] = {
        "exporter": "remat.torch.export_joint",
        "torch": torch.__version__,
        "pytorch_saved": captured["saved"],
        "pytorch_saved_bytes": sum(by_name[s].get("bytes", 0) for s in captured["saved"]),
    }
    return graph


def pytorch_min_cut(fn: Callable[..., Any], *inputs: Any, memory_budget: float = 1.0) -> list[str]:
    """Names of the values PyTorch's ``min_cut_rematerialization_partition``
    saves for ``fn(*inputs)``, at ``activation_memory_budget=memory_budget``."""
    captured: dict[str, Any] = {}

    def partition(
        joint_module: fx.GraphModule,
        joint_inputs: Any,
        *,
        num_fwd_outputs: int,
        **kw: Any,
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        fw, bw = _partitioners.min_cut_rematerialization_partition(
            copy.deepcopy(joint_module),
            joint_inputs,
            num_fwd_outputs=num_fwd_outputs,
            **kw,
        )
        captured["saved"] = _saved_names(fw, num_fwd_outputs)
        return fw, bw

    with torch._functorch.config.patch(activation_memory_budget=memory_budget):
        _trace(fn, inputs, partition)
    return list(captured["saved"])
