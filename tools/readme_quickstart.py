#!/usr/bin/env python3
"""The README's Python quick start, as a user runs it: its install lines, then
its Python code blocks, exactly as written.

    python tools/readme_quickstart.py --install   # the quick start's `pip install` lines, into this Python
    python tools/readme_quickstart.py             # then every ```python block of README.md, in order

`--install` runs each `pip install` line of the first ```sh block under
"## Python quick start" with this interpreter's pip (`python -m pip`), the
README's `/path/to/remat` being this clone; pip's own environment variables
apply (PIP_INDEX_URL or PIP_EXTRA_INDEX_URL for PyTorch's CPU-only wheels,
PIP_QUIET). Without it, the blocks run from the repository root (where their
paths point), each in a fresh namespace, with the `remat` this interpreter
imports (run it from outside python/, as here: the script's own folder comes
first on sys.path, not the clone's python/). CI runs both in a fresh virtualenv
(.ci/run); python/tests/test_readme.py runs the blocks through snippets().

Exit status: 0 when every line and block ran, 1 at the first that failed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PLACEHOLDER = "/path/to/remat"


def snippets(readme: Path = README) -> list[str]:
    """The README's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.S)


def install_lines(readme: Path = README) -> list[list[str]]:
    """The `pip install` lines of the quick start's first ```sh block, as
    argument lists (comments dropped), `/path/to/remat` being this clone."""
    text = readme.read_text(encoding="utf-8")
    section = text.split("\n## Python quick start\n", 1)
    if len(section) != 2:
        raise SystemExit(f"{readme}: no '## Python quick start' section")
    block = re.search(r"```sh\n(.*?)```", section[1].split("\n## ", 1)[0], flags=re.S)
    if block is None:
        raise SystemExit(f"{readme}: no ```sh block in the Python quick start")
    lines = []
    for line in block.group(1).splitlines():
        args = shlex.split(line.replace(PLACEHOLDER, str(ROOT)), comments=True)
        if args[:2] == ["pip", "install"]:
            lines.append(args)
    if not lines:
        raise SystemExit(f"{readme}: no `pip install` line in the Python quick start")
    return lines


def install() -> int:
    for args in install_lines():
        command = [sys.executable, "-m", *args]
        print("+", shlex.join(command), flush=True)
        status = subprocess.call(command)
        if status != 0:
            print(f"error: {shlex.join(args)} failed (exit {status})", file=sys.stderr)
            return 1
    return 0


def run() -> int:
    found = snippets()
    if not found:
        print(f"error: {README} has no ```python block", file=sys.stderr)
        return 1
    os.chdir(ROOT)
    for i, code in enumerate(found, 1):
        print(f"== README.md Python block {i} of {len(found)}", flush=True)
        try:
            exec(compile(code, f"README.md Python block {i}", "exec"), {"__name__": "__readme__"})
        except Exception:
            traceback.print_exc()
            print(f"error: README.md Python block {i} failed", file=sys.stderr)
            return 1
        sys.stdout.flush()
    print(f"all {len(found)} Python blocks of README.md ran")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--install"]:
        return install()
    if argv:
        print("usage: python tools/readme_quickstart.py [--install]", file=sys.stderr)
        return 2
    return run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
