#!/usr/bin/env bash
# The Python suites against the newest releases of torch, transformers,
# torchvision, timm, diffusers and accelerate, in a virtualenv of their own
# ($REMAT_LATEST_VENV, default .venv-latest), so that a minor release that
# breaks remat shows here before it turns a fresh clone red. Prints the
# versions it tested; python/constraints.txt pins what CI tests (update a pin
# after a green run here, and the range in docs/python.md).
#
#   tools/test-latest.sh            # newest releases, the whole Python suite
#   tools/test-latest.sh -k compile # extra arguments go to pytest
#
# Exit status: 0 when every test passed.
set -euo pipefail
cd "$(dirname "$0")/.."
export REMAT_VENV="${REMAT_LATEST_VENV:-$PWD/.venv-latest}"
export REMAT_CONSTRAINTS=""
exec tools/test-all.sh --python-only --slow "$@"
