#!/usr/bin/env bash
# One device call: GPU tests, compute-sanitizer, then dsa-bench on a suite. Logs go to $OUT.
# Usage (on the GPU machine, from the repo root, with build/ carried): scripts/device_check.sh [suite] [extra bench args]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SUITE=${1:-targets}
shift || true
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
echo "== gpu tests"
./build/tests/dsa_gpu_tests --gtest_brief=1 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
echo "== compute-sanitizer memcheck (small cases)"
SMALL='*Sweep*H16_topk63_*:*Sweep*H32_topk2049_*:Gpu.StridedQueryOutputAndCombinedCache:Gpu.EveryTileSizeAndSplitCountAgrees:Gpu.GraphCaptureAndReplay:Gpu.CountInvalidIndicesMatchesHost:T/TokenCounts.MatchesReference/T5_*'
compute-sanitizer --tool memcheck --error-exitcode 9 ./build/tests/dsa_gpu_tests --gtest_brief=1 --gtest_filter="$SMALL" > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -4 "$OUT/memcheck.log"
echo "== compute-sanitizer racecheck"
compute-sanitizer --tool racecheck --error-exitcode 9 ./build/tests/dsa_gpu_tests --gtest_brief=1 --gtest_filter='*Sweep*H16_topk2049_random*:*Sweep*H64_topk64_runs*:Gpu.EveryTileSizeAndSplitCountAgrees' > "$OUT/racecheck.log" 2>&1
echo "racecheck rc=$?"; tail -4 "$OUT/racecheck.log"
echo "== synccheck"
compute-sanitizer --tool synccheck --error-exitcode 9 ./build/tests/dsa_gpu_tests --gtest_brief=1 --gtest_filter='*Sweep*H16_topk2049_random*:Gpu.GraphCaptureAndReplay' > "$OUT/synccheck.log" 2>&1
echo "synccheck rc=$?"; tail -2 "$OUT/synccheck.log"
echo "== dsa-bench --suite $SUITE $*"
./build/tools/dsa-bench --suite "$SUITE" --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log"
