"""The ``remat`` command that ``pip install`` puts on PATH: the Rust CLI
(``remat._core.main``), with its output and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import remat
from remat import _core
from remat.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m remat ARGS`` from the repository root."""
    return subprocess.run([sys.executable, "-m", "remat", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_version_and_help() -> None:
    version = run("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"remat {remat.__version__}"
    help = run("--help")
    assert help.returncode == 0, help.stderr
    assert "Exit codes:" in help.stdout and "70  internal error" in help.stdout


def test_solve_prints_the_binary_answer() -> None:
    out = run("solve", "chains/rotor-fc6.json", "--memory", "90MiB")
    assert out.returncode == 0, out.stderr
    # The README's worked example.
    assert "makespan:    47.42" in out.stdout


def test_exit_codes_are_the_binary_ones() -> None:
    infeasible = run("solve", "chains/rotor-fc6.json", "--memory", "1MiB")
    assert infeasible.returncode == 1
    assert "smallest budget" in infeasible.stderr
    bad = run("solve", "no/such/file.json", "--memory", "1MiB")
    assert bad.returncode == 2
    assert "no/such/file.json" in bad.stderr
    usage = run("solve")
    assert usage.returncode == 2


def test_main_returns_the_exit_code_in_process() -> None:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        assert main(["min-memory", "chains/rotor-fc6.json"]) == 0
        assert _core.main(["remat", "solve", "chains/rotor-fc6.json", "--memory", "1MiB"]) == 1
    finally:
        os.chdir(cwd)


def test_the_installed_script_runs_when_on_path() -> None:
    # `pip install .` writes a `remat` script beside this Python (CI also
    # checks a fresh venv); a development tree built with maturin may have none.
    script = Path(sys.executable).with_name("remat")
    if not script.exists():
        pytest.skip(f"no `remat` script beside {sys.executable} (not installed with pip)")
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.startswith("remat "), out.stderr
