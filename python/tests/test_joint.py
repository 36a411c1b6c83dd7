"""Cross-check: remat's min-cut (the `remat mincut` binary) against PyTorch's
``min_cut_rematerialization_partition`` on graphs exported by
``remat.torch.export_joint`` from real functions.

Needs torch and a built binary (``cargo build``; or set REMAT_BIN).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest
import torch

import remat
from remat.torch.examples import EXAMPLES
from remat.torch.joint import export_joint, pytorch_min_cut

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _binary() -> pathlib.Path:
    env = os.environ.get("REMAT_BIN")
    if env:
        return pathlib.Path(env)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "remat"


BIN = _binary()
pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"no remat binary at {BIN}")


def _remat(graph: dict[str, object], tmp_path: pathlib.Path, *args: str) -> dict[str, object]:
    path = tmp_path / "joint.json"
    path.write_text(json.dumps(graph))
    out = subprocess.run(
        [str(BIN), "mincut", str(path), "--json", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    answer: dict[str, object] = json.loads(out.stdout)
    return answer


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_saved_set_and_bytes_equal_pytorch(name: str, tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    fn, inputs = EXAMPLES[name]()
    graph = export_joint(fn, *inputs, name=name)
    torch.manual_seed(0)
    fn2, inputs2 = EXAMPLES[name]()
    theirs = pytorch_min_cut(fn2, *inputs2)
    assert graph["metadata"]["pytorch_saved"] == theirs  # type: ignore[index]
    answer = _remat(graph, tmp_path)
    chosen = answer["chosen"]
    assert isinstance(chosen, dict)
    assert chosen["saved"] == theirs
    by_name = {n["name"]: n for n in graph["nodes"]}  # type: ignore[union-attr]
    assert chosen["saved_bytes"] == sum(by_name[s]["bytes"] for s in theirs)


def test_the_paper_examples(tmp_path: pathlib.Path) -> None:
    def saved(name: str) -> tuple[dict[str, object], list[dict[str, object]]]:
        torch.manual_seed(0)
        fn, inputs = EXAMPLES[name]()
        graph = export_joint(fn, *inputs, name=name)
        by_name = {n["name"]: n for n in graph["nodes"]}  # type: ignore[union-attr]
        chosen = _remat(graph, tmp_path)["chosen"]
        assert isinstance(chosen, dict)
        return chosen, [by_name[s] for s in chosen["saved"]]

    _, nodes = saved("sum_cos_cos")
    assert [n["target"] for n in nodes] == ["aten.add.Tensor"]
    _, nodes = saved("gelu_erf")
    assert [n["role"] for n in nodes] == ["primal"]
    chosen, nodes = saved("dropout_like")
    assert [n["dtype"] for n in nodes] == ["bool"]
    assert not any("rand" in r for r in chosen["recomputed"])  # type: ignore[union-attr]


def test_fixtures_are_up_to_date() -> None:
    """The committed fixtures are what the exporter writes today."""
    for name, make in EXAMPLES.items():
        torch.manual_seed(0)
        fn, inputs = make()
        graph = export_joint(fn, *inputs, name=name)
        graph["metadata"].pop("torch", None)  # type: ignore[union-attr]
        committed = json.loads((ROOT / "tests" / "data" / "joint" / f"{name}.json").read_text())
        assert graph == committed, name


def _export(name: str) -> dict[str, object]:
    torch.manual_seed(0)
    fn, inputs = EXAMPLES[name]()
    return export_joint(fn, *inputs, name=name)


def _pytorch_saved(name: str, memory_budget: float) -> list[str]:
    torch.manual_seed(0)
    fn, inputs = EXAMPLES[name]()
    return pytorch_min_cut(fn, *inputs, memory_budget=memory_budget)


@pytest.mark.parametrize("name", ["mlp_block", "attention_block"])
@pytest.mark.parametrize("ratio", [0.5, 0.1])
def test_budget_costs_no_more_than_pytorchs_at_the_same_bytes(name: str, ratio: float, tmp_path: pathlib.Path) -> None:
    """PyTorch's ``activation_memory_budget`` answer, measured by remat's cost
    model, against remat's exact budget at the same activation bytes."""
    graph = _export(name)
    theirs = _pytorch_saved(name, ratio)
    given = _remat(graph, tmp_path, "--saved", ",".join(theirs))["chosen"]
    assert isinstance(given, dict)
    bytes_ = given["activation_bytes"]
    answer = _remat(graph, tmp_path, "--memory", str(bytes_))
    ours = answer["chosen"]
    assert isinstance(ours, dict)
    assert answer["optimal"] is True
    assert ours["activation_bytes"] <= bytes_
    assert ours["recompute_seconds"] <= given["recompute_seconds"] * (1 + 1e-9)
    print(
        f"{name} budget {ratio}: PyTorch saves {bytes_} B of activations at "
        f"{given['recompute_seconds'] * 1e9:.3f} ns recompute; remat "
        f"{ours['activation_bytes']} B at {ours['recompute_seconds'] * 1e9:.3f} ns"
    )


def test_pytorch_budget_mode_recomputes_the_random_op_and_remat_does_not(
    tmp_path: pathlib.Path,
) -> None:
    """pytorch/pytorch#190758: under a budget PyTorch may recompute rand_like
    (a different mask in the backward: a wrong gradient). remat never does."""
    graph = _export("dropout_like")
    by_name = {n["name"]: n for n in graph["nodes"]}  # type: ignore[union-attr]
    rand = [n for n, v in by_name.items() if v.get("op") == "random"]
    theirs = _pytorch_saved("dropout_like", 0.0)
    given = _remat(graph, tmp_path, "--saved", ",".join(theirs))["chosen"]
    assert isinstance(given, dict)
    pytorch_recomputes_rand = any(r in given["recomputed"] for r in rand)  # type: ignore[operator]
    answer = _remat(graph, tmp_path, "--memory", str(answer_smallest(graph, tmp_path)))
    ours = answer["chosen"]
    assert isinstance(ours, dict)
    assert not any(r in ours["recomputed"] for r in rand)  # type: ignore[operator]
    print(f"PyTorch at budget 0 saves {theirs}; recomputes rand: {pytorch_recomputes_rand}")


def answer_smallest(graph: dict[str, object], tmp_path: pathlib.Path) -> int:
    smallest = _remat(graph, tmp_path)["smallest_budget"]
    assert isinstance(smallest, int)
    return smallest


def _grads(
    fn: object, inputs: tuple[object, ...], compiled: bool, partition_fn: object = None
) -> tuple[object, list[object]]:
    """Output and gradients of fn(*inputs), eagerly or through aot_function."""
    from functorch.compile import aot_function

    module = fn if isinstance(fn, torch.nn.Module) else None
    params = dict(module.named_parameters()) if module is not None else {}

    def call(params: dict[str, object], *args: object) -> object:
        if module is not None:
            return torch.func.functional_call(module, params, args)
        return fn(*args)  # type: ignore[operator]

    from functorch.compile import make_boxed_func

    def nop(gm: object, _inputs: object) -> object:
        return make_boxed_func(gm)

    run = aot_function(call, nop, nop, partition_fn=partition_fn) if compiled else call
    torch.manual_seed(1234)
    out = run(params, *inputs)
    leaves = list(params.values()) + [x for x in inputs if isinstance(x, torch.Tensor)]
    torch.manual_seed(99)
    seed_grad = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, seed_grad)
    return out.detach(), [g.detach() for g in grads]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("budget", [None, "smallest"])
def test_gradients_through_the_partitioner_equal_eager(name: str, budget: str | None, tmp_path: pathlib.Path) -> None:
    from remat.torch import partitioner

    memory = None if budget is None else answer_smallest(_export(name), tmp_path)
    torch.manual_seed(0)
    fn, inputs = EXAMPLES[name]()
    out, grads = _grads(fn, inputs, compiled=False)
    out2, grads2 = _grads(fn, inputs, compiled=True, partition_fn=partitioner(memory=memory))
    torch.testing.assert_close(out2, out)
    for a, b in zip(grads2, grads, strict=True):
        torch.testing.assert_close(a, b)


def test_an_infeasible_budget_raises_with_the_smallest() -> None:
    from remat.torch import RematSolverError, partitioner

    torch.manual_seed(0)
    fn, inputs = EXAMPLES["dropout_like"]()
    with pytest.raises(RematSolverError, match="the smallest that fits needs 1024 bytes"):
        _grads(fn, inputs, compiled=True, partition_fn=partitioner(memory=10))


def test_the_partitioner_works_under_torch_compile() -> None:
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from remat.torch import partitioner

    def nop(gm: object, _inputs: object) -> object:
        return make_boxed_func(gm)

    torch.manual_seed(0)
    module, (x,) = EXAMPLES["mlp_block"]()
    backend = aot_autograd(fw_compiler=nop, bw_compiler=nop, partition_fn=partitioner(memory="16KiB"))
    torch.compile(module, backend=backend)(x).sum().backward()
    compiled = [p.grad.clone() for p in module.parameters()] + [x.grad.clone()]
    for p in module.parameters():
        p.grad = None
    x.grad = None
    module(x).sum().backward()
    eager = [p.grad for p in module.parameters()] + [x.grad]
    for a, b in zip(compiled, eager, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "tests" / "data" / "joint").glob("*.json")))
def test_bindings_answer_as_the_binary_does(name: str) -> None:
    """``remat.partition_joint`` (the partitioner's default solver, in process)
    gives the saved set of ``remat mincut`` on every fixture, with and without
    a budget."""
    path = ROOT / "tests" / "data" / "joint" / f"{name}.json"
    text = path.read_text()
    cli = json.loads(subprocess.run([str(BIN), "mincut", str(path), "--json"], capture_output=True, check=True).stdout)
    answer = remat.partition_joint(text)
    assert answer["chosen"]["saved"] == cli["chosen"]["saved"]
    assert answer["min_cut"]["saved_bytes"] == cli["min_cut"]["saved_bytes"]
    budget = answer["smallest_budget"]
    assert remat.partition_joint(text, budget)["chosen"]["activation_bytes"] <= budget
