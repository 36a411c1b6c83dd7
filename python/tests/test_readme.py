"""The README's Python quick starts run as written (from the repository root,
where its paths point)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def snippets() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


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
