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
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

torch = pytest.importorskip("torch")

from remat.torch.examples import EXAMPLES
from remat.torch.joint import export_joint, pytorch_min_cut


def _binary() -> pathlib.Path:
    env = os.environ.get("REMAT_BIN")
    if env:
        return pathlib.Path(env)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "remat"


BIN = _binary()
pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"no remat binary at {BIN}")


def _remat(
    graph: dict[str, object], tmp_path: pathlib.Path, *args: str
) -> dict[str, object]:
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
        committed = json.loads(
            (ROOT / "tests" / "data" / "joint" / f"{name}.json").read_text()
        )
        assert graph == committed, name
