#!/usr/bin/env bash
# Graph steps for .ci/run (issue 6): HiGHS's build dependencies, then the test
# suite with each LP backend. Meant to be spliced into .ci/run (or sourced).
set -euo pipefail

# highs-sys builds HiGHS from source: cmake and a C++ compiler for HiGHS,
# libclang for bindgen. All three are Debian bookworm packages.
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null || ! ldconfig -p | grep -q 'libclang-14\.so'; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ libclang1-14 >/dev/null
fi

# Outside the clone, so HiGHS (minutes to build) is compiled once per machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/remat-target}"

cargo test --locked                   # microlp only: nothing to install
cargo test --locked --features highs  # HiGHS too (the graph tests then run both)
