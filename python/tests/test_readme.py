"""The README's Python quick starts run as written (from the repository root,
where its paths point)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The blocks as tools/readme_quickstart.py finds them (CI runs that script in a
# fresh virtualenv, after the README's own install lines).
_spec = importlib.util.spec_from_file_location("readme_quickstart", ROOT / "tools" / "readme_quickstart.py")
assert _spec is not None and _spec.loader is not None
quickstart = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quickstart)
snippets = quickstart.snippets


def test_the_quick_start_installs_what_its_snippets_import() -> None:
    """The last install line brings the extra with transformers (the HF quick
    start), and that extra is in pyproject.toml."""
    lines = quickstart.install_lines()
    assert lines[0] == ["pip", "install", str(ROOT)]
    assert lines[-1] == ["pip", "install", f"{ROOT}[hf]"]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    hf = next(line for line in pyproject.splitlines() if line.startswith("hf = "))
    for needed in ("torch", "transformers", "accelerate"):
        assert f'"{needed}' in hf, hf


def test_the_readme_has_its_python_quick_starts() -> None:
    found = snippets()
    assert any("remat.solve(" in s for s in found)
    assert any("remat.torch.apply(" in s for s in found)


@pytest.mark.parametrize("index", range(len(snippets())))
def test_a_readme_snippet_runs_as_written(
    index: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = snippets()[index]
    if "remat.torch" in code:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    monkeypatch.chdir(ROOT)
    exec(compile(code, f"README.md snippet {index + 1}", "exec"), {"__name__": "__readme__"})
    if "remat.torch.apply(" in code:
        assert "blocks of transformer.h" in capsys.readouterr().out
