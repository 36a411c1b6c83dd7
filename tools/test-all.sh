#!/usr/bin/env bash
# The whole test suite, Rust and Python, in one command on a fresh machine:
#
#   tools/test-all.sh                # everything but the cases marked slow (Rust: ::slow::)
#   tools/test-all.sh --python-only  # skip `cargo test` (still builds the CLI the tests compare with)
#   tools/test-all.sh --slow         # also the cases marked slow (CI runs them: .ci/run)
#   tools/test-all.sh -k compile     # arguments after the options go to pytest
#
# 1. `cargo test` (the library, the command line, the examples of the README
#    and of docs/guide.md), less the cases in modules named `slow` unless
#    --slow is given;
# 2. a virtualenv ($REMAT_VENV, default .venv) with the versions
#    python/constraints.txt pins of maturin, pytest, ruff, mypy, torch,
#    transformers, accelerate, torchvision, timm and diffusers, installed from
#    the package registry when they differ (REMAT_CONSTRAINTS= empty: the
#    newest releases; pip honours PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, e.g. for
#    PyTorch's CPU-only wheels);
# 3. `pip install .`: the package as a user gets it, remat._core built by
#    maturin in the `dev` profile `cargo test` built (a regular install, not
#    an editable one: for development, run `maturin develop --release` in the
#    venv afterwards);
# 4. ruff (lint and format), mypy on the typed core, and pytest python/tests
#    (the torch tests on the CPU, two workers), less the cases marked slow
#    (pyproject.toml) unless --slow is given.
#
# Needs: a Rust toolchain (cargo), Python >= 3.9 with venv, network access to
# the registries on the first run. Exit status: 0 when everything passed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
venv="${REMAT_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

started=$SECONDS
# Each step with the seconds since the start: where the time goes.
step() { printf '\n== %s (at %ds)\n' "$*" "$((SECONDS - started))"; }

python_only=false
slow="not slow"
while [ $# -gt 0 ]; do
    case "$1" in
        --python-only) python_only=true ;;
        --slow) slow="" ;;
        *) break ;;
    esac
    shift
done
case "${1:-}" in
    ""|-*) ;;  # the rest goes to pytest (tools/test-latest.sh -k compile)
    *) echo "usage: tools/test-all.sh [--python-only] [--slow] [PYTEST_ARGS...]" >&2; exit 2 ;;
esac

if $python_only; then
    step "cargo build --bin remat"
    cargo build --locked --bin remat
else
    # The Rust cases of half a minute or more sit in modules named `slow`
    # (without its five, the suite ran 146 s here instead of 285, two cores).
    step "cargo test${slow:+ (less ::slow::)}"
    cargo test --locked -- ${slow:+--skip ::slow::}
fi

step "Python environment ($venv)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
    { echo "error: remat's Python package needs Python >= 3.9 ($python is $("$python" --version))" >&2; exit 2; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
py="$venv/bin/python"
# As `activate` does: the build backend runs `maturin` from PATH.
export PATH="$venv/bin:$PATH"
# The test environment: exactly the versions python/constraints.txt pins
# (a fresh clone tests what CI tested); REMAT_CONSTRAINTS= (empty) takes the
# newest releases instead (tools/test-latest.sh). pip answers from the venv
# without the network when the pinned versions are there.
constraints="${REMAT_CONSTRAINTS-$root/python/constraints.txt}"
# The models remat.torch is tested on are built from configs (nothing
# downloaded): transformers, torchvision, timm and diffusers (a U-Net's two
# stacks); accelerate for HF's Trainer; numpy because torch warns without it.
packages=(maturin pytest pytest-xdist ruff mypy torch numpy transformers accelerate torchvision timm diffusers)
if [ -n "$constraints" ]; then
    if ! "$py" -m pip install --quiet -c "$constraints" "${packages[@]}" --dry-run --report - 2>/dev/null |
        "$py" -c 'import json, sys; sys.exit(bool(json.load(sys.stdin)["install"]))'; then
        echo "installing the pinned test environment ($constraints)"
        "$py" -m pip install --quiet -c "$constraints" "${packages[@]}"
    fi
else
    echo "installing the newest releases"
    "$py" -m pip install --quiet --upgrade "${packages[@]}"
fi
"$py" - <<'PY'
from importlib.metadata import version
names = ["torch", "transformers", "torchvision", "timm", "diffusers", "accelerate"]
print("testing with " + ", ".join(f"{n} {version(n)}" for n in names))
PY

step "pip install . (builds remat._core)"
# No build isolation: the venv's maturin builds it, so a rerun needs no network.
# The `dev` profile (opt-level 2, debug assertions on): it reuses what `cargo
# test` compiled, where a release build compiled every dependency again (3 of
# the command's 16 minutes on a new machine); CI's own `pip install .` below
# (.ci/run) builds the release wheel a user gets.
"$py" -m pip install --quiet --no-build-isolation --no-deps --force-reinstall -C build-args="--profile dev" "$root"

step "ruff check, ruff format --check, mypy"
"$py" -m ruff check "$root"
"$py" -m ruff format --check "$root"
"$py" -m mypy --config-file "$root/pyproject.toml"

step "pytest python/tests"
# The CLI the core tests compare with: built by `cargo test` (or build) above.
export REMAT_BIN="$CARGO_TARGET_DIR/debug/remat"
# Run from outside python/ so that `import remat` is the installed package.
status=0
# Two workers on CI's two cores (the torch tests run one thread each);
# REMAT_PYTEST_WORKERS=0 runs them in this process.
"$py" -m pytest -q -p no:cacheprovider -n "${REMAT_PYTEST_WORKERS:-auto}" ${slow:+-m "$slow"} "$root/python/tests" "$@" ||
    status=$?
# pytest's 5 means no test was collected: the suite has tests, so that is a
# failure too (a broken collection must not pass).
if [ "$status" -ne 0 ]; then
    echo "error: pytest failed (exit $status)" >&2
    exit "$status"
fi
echo
echo "all Rust and Python tests passed in $((SECONDS - started))s"
