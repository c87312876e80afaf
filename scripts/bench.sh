#!/usr/bin/env bash
# The README's main command: install what is missing, build, and run dsa-bench on its built-in
# suite (the sparse MLA targets). Extra arguments go to dsa-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
"$BUILD/tools/dsa-bench" "$@"
