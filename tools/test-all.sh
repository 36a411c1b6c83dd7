#!/usr/bin/env bash
# The whole test suite, Rust and Python, in one command on a fresh machine:
#
#   tools/test-all.sh                # everything
#   tools/test-all.sh --python-only  # skip `cargo test` (still builds the CLI the tests compare with)
#
# 1. `cargo test` (the library, the command line, the examples of the README
#    and of docs/guide.md);
# 2. a virtualenv ($REMAT_VENV, default .venv) with maturin, pytest, ruff,
#    mypy, torch, transformers, accelerate, torchvision and diffusers, each installed from the package registry only when
#    missing (pip honours PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, e.g. for
#    PyTorch's CPU-only wheels);
# 3. `pip install .`: the package as a user gets it, remat._core built by
#    maturin (a regular install, not an editable one: for development, run
#    `maturin develop --release` in the venv afterwards);
# 4. ruff (lint and format), mypy on the typed core, and pytest python/tests
#    (the torch tests on the CPU).
#
# Needs: a Rust toolchain (cargo), Python >= 3.9 with venv, network access to
# the registries on the first run. Exit status: 0 when everything passed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
venv="${REMAT_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

step() { printf '\n== %s\n' "$*"; }

case "${1:-}" in
    "") python_only=false ;;
    --python-only) python_only=true ;;
    *) echo "usage: tools/test-all.sh [--python-only]" >&2; exit 2 ;;
esac

if $python_only; then
    step "cargo build --bin remat"
    cargo build --locked --bin remat
else
    step "cargo test"
    cargo test --locked
fi

step "Python environment ($venv)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
    { echo "error: remat's Python package needs Python >= 3.9 ($python is $("$python" --version))" >&2; exit 2; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
py="$venv/bin/python"
# As `activate` does: the build backend runs `maturin` from PATH.
export PATH="$venv/bin:$PATH"
missing=()
"$py" -c 'import maturin' 2>/dev/null || missing+=("maturin>=1.9,<2")
"$py" -c 'import pytest' 2>/dev/null || missing+=("pytest")
"$py" -c 'import ruff' 2>/dev/null || missing+=("ruff")
"$py" -c 'import mypy' 2>/dev/null || missing+=("mypy")
"$py" -c 'import torch' 2>/dev/null || missing+=("torch")
"$py" -c 'import numpy' 2>/dev/null || missing+=("numpy")  # torch warns without it
# The models remat.torch is tested on, built from configs (nothing downloaded).
"$py" -c 'import transformers' 2>/dev/null || missing+=("transformers")
"$py" -c 'import accelerate' 2>/dev/null || missing+=("accelerate")  # HF's Trainer needs it
"$py" -c 'import torchvision' 2>/dev/null || missing+=("torchvision")
"$py" -c 'import diffusers' 2>/dev/null || missing+=("diffusers")  # a U-Net's two stacks
if [ ${#missing[@]} -gt 0 ]; then
    "$py" -m pip install --quiet --upgrade pip
    echo "installing: ${missing[*]}"
    "$py" -m pip install --quiet "${missing[@]}"
fi

step "pip install . (builds remat._core)"
# No build isolation: the venv's maturin builds it, so a rerun needs no network.
"$py" -m pip install --quiet --no-build-isolation --no-deps --force-reinstall "$root"

step "ruff check, ruff format --check, mypy"
"$py" -m ruff check "$root"
"$py" -m ruff format --check "$root"
"$py" -m mypy --config-file "$root/pyproject.toml"

step "pytest python/tests"
# The CLI the core tests compare with: built by `cargo test` (or build) above.
export REMAT_BIN="$CARGO_TARGET_DIR/debug/remat"
# Run from outside python/ so that `import remat` is the installed package.
status=0
"$py" -m pytest -q -p no:cacheprovider "$root/python/tests" || status=$?
# pytest's 5 means no test was collected: the suite has tests, so that is a
# failure too (a broken collection must not pass).
if [ "$status" -ne 0 ]; then
    echo "error: pytest failed (exit $status)" >&2
    exit "$status"
fi
echo
echo "all Rust and Python tests passed"
