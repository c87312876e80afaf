#!/usr/bin/env bash
# The README's main command: install what is missing, build, and run dsa-bench on its built-in
# suites (the sparse MLA targets, then the dense attention targets). Extra arguments go to the
# sparse run and replace the dense one.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
"$BUILD/tools/dsa-bench" "$@"
if [ $# -eq 0 ]; then "$BUILD/tools/dsa-bench" dense; fi
