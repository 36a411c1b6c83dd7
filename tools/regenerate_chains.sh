#!/usr/bin/env bash
# Regenerates every generated file in chains/ from the commands listed in
# chains/README.md (tests/zoo.rs checks that they match). Run from the repository root.
set -euo pipefail
cargo build --release --quiet
grep -o '`remat zoo [^`]*`' chains/README.md | tr -d '`' | while read -r cmd; do
    # shellcheck disable=SC2086
    target/release/remat ${cmd#remat }
done
