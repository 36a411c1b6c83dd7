"""tools/layers.py, the check CI runs on the crate's module graph: it passes on
the tree as it is, and it fails on what it exists to catch (an edge up a layer,
a cycle between modules), so that a green CI line means something."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(src: Path) -> ModuleType:
    """tools/layers.py as a module, reading the crate at `src`."""
    spec = importlib.util.spec_from_file_location("layers_under_test", ROOT / "tools" / "layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.SRC = src  # type: ignore[attr-defined]
    return module


@pytest.fixture()
def crate(tmp_path: Path) -> Path:
    """A copy of src/ to break on purpose."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src)
    return src


def run(src: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = sys.argv
    sys.argv = ["layers.py"]
    try:
        code = load(src).main()
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return code, out.out + out.err


def test_the_crate_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run(ROOT / "src", capsys)
    assert code == 0, text
    assert "none up a layer, no cycle" in text


def test_an_edge_up_a_layer_fails(crate: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The graph solvers reaching up into the router (issue 26 removed this).
    path = crate / "graph" / "solve.rs"
    path.write_text(path.read_text() + "\npub(crate) fn up() -> Option<crate::problem::Method> { None }\n")
    code, text = run(crate, capsys)
    assert code == 1
    assert "src/graph/solve.rs:" in text and "`graph` (layer" in text and "uses `problem`, a layer above it" in text


def test_a_cycle_within_a_layer_fails(crate: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `chain` and `schedule` share a layer; `schedule` uses `chain`, so the
    # reverse edge closes a loop (ChainId once lived in schedule.rs).
    path = crate / "chain.rs"
    path.write_text(path.read_text() + "\npub(crate) fn back() -> Option<crate::schedule::Op> { None }\n")
    code, text = run(crate, capsys)
    assert code == 1
    assert "module cycle chain <-> schedule" in text


def test_cycles_finds_loops_of_any_length() -> None:
    layers = load(ROOT / "src")
    edges = {("a", "b"): ["x"], ("b", "c"): ["x"], ("c", "a"): ["x"], ("c", "d"): ["x"], ("e", "d"): ["x"]}
    assert layers.cycles(edges) == [["a", "b", "c"]]
    assert layers.cycles({("a", "b"): ["x"], ("b", "c"): ["x"]}) == []
