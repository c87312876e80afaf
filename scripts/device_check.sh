#!/usr/bin/env bash
# One device call that checks a commit on the H100: GPU tests, compute-sanitizer (memcheck,
# racecheck, synccheck) on sparse and dense subsets, dsa-bench on a sparse suite with stage
# dissection and on the dense targets, and the Triton and SDPA peers when their scripts were
# carried in .peers/. Logs go to $OUT.
# Usage (GPU machine, repo root, build/ carried): scripts/device_check.sh [suite] [extra dsa-bench args]
# BUILD=dir reads the two binaries from dir/tests and dir/tools instead (a copy of just them fits
# the device call's carry limit when the whole build folder does not).
# PARTS=tests runs only the GPU tests and the sanitizers, PARTS=bench only the benchmarks, the
# peers and the PyTorch op: the whole check takes ~11 min, more than one 10-minute device call.
# PARTS=tests took ~10 min: SANITIZERS="memcheck" (and then "racecheck synccheck" with
# NO_TESTS=1) splits it over two calls. Since the CPU reference runs on the host's threads
# (dc8c14c) the GPU tests alone take ~185 s (417 before; docs/perf.md run 420).
# SANITIZERS may also name initcheck (reads of device memory never written), which takes memcheck's
# subsets (run 758: those and two more tests, 137 in all, 0 errors in 95 s on an H200).
# SHARDS=n runs the GPU tests as n gtest shards at once on the one GPU (the CPU reference then
# uses the host's cores in parallel): 4 shards ran all 549 tests in 152 s, one run takes ~350 s
# (docs/perf.md run 630). Each shard logs to gpu_tests.<i>.log.
set -uo pipefail
PARTS=${PARTS:-all}
case "$PARTS" in all | tests | bench) ;; *) echo "device_check.sh: PARTS must be all, tests or bench, got '$PARTS'" >&2; exit 2 ;; esac
SHARDS=${SHARDS:-1}
case "$SHARDS" in '' | *[!0-9]* | 0) echo "device_check.sh: SHARDS must be a positive integer, got '$SHARDS'" >&2; exit 2 ;; esac
SANITIZERS=${SANITIZERS:-memcheck racecheck synccheck}
NO_TESTS=${NO_TESTS:-0}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BUILD=${BUILD:-build}
SUITE=${1:-targets}
shift || true
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
if [ "$PARTS" != bench ]; then
if [ "$NO_TESTS" != 1 ]; then
  # Every test and fuzz case is logged as it runs (gtest flushes each result line; --verbose
  # flushes each case before it runs), so a call that runs out of time still shows where it
  # was: with --gtest_brief and a quiet fuzzer such a log is empty (perf.md run 624).
  echo "== gpu tests ($SHARDS shards)"
  if [ "$SHARDS" = 1 ]; then
    "$BUILD"/tests/dsa_gpu_tests > "$OUT/gpu_tests.log" 2>&1
    logs=$OUT/gpu_tests.log
  else
    logs=
    for ((i = 0; i < SHARDS; ++i)); do
      GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i "$BUILD"/tests/dsa_gpu_tests > "$OUT/gpu_tests.$i.log" 2>&1 &
      logs="$logs $OUT/gpu_tests.$i.log"
    done
    wait
  fi
  # shellcheck disable=SC2086
  grep -h -E '^\[==========\] .* ran|^\[  (PASSED|FAILED)  \]' $logs | head -20
  echo "== dsa-bench fuzz (CTest bench_fuzz's 200 cases, ~60 s, and bench_fuzz_dense's 500, ~12 s)"
  "$BUILD"/tools/dsa-bench fuzz --cases 200 --seed 20261127 --verbose > "$OUT/fuzz.log" 2>&1
  echo "rc=$? $(grep -E '^FAIL|cases,' "$OUT/fuzz.log" | head -5)"
  "$BUILD"/tools/dsa-bench fuzz --dense --cases 500 --seed 20261127 --verbose > "$OUT/fuzz_dense.log" 2>&1
  echo "dense rc=$? $(grep -E '^FAIL|cases,' "$OUT/fuzz_dense.log" | head -5)"
fi
SMALL='*Sweep*H16_topk63_*:*Sweep*H32_topk2049_*:*Sweep*H128_topk64_*:Gpu.StridedQueryOutputAndCombinedCache:Gpu.EveryTileSizeAndSplitCountAgrees:Gpu.GraphCaptureAndReplay:Gpu.CountInvalidIndicesMatchesHost:T/TokenCounts.MatchesReference/T5_*:*SharedRowsSweep*H16_topk2048_random*:Gpu.SharedRowsMixesEntryWordsAndCounts:Gpu.SharedRowsSortsOnlyTheValidKeys:Gpu.WideHeadsTakeSharedRowsAndAgree:Gpu.WideHeadsSmallCallsSplitTheirListsAndAgree:Gpu.SharedRowsSplitsAgree:*SplitKRowOrder.*:Gpu.SharedRowsRowOrderAgrees:*Balanced*'
DENSE='*DenseSweep*_L17:*DenseSweep*_L1000:Gpu.DenseDifferentQueryAndKeyLengths:Gpu.DenseEveryKernelAndQueryTileAgrees:Gpu.DenseStridedQkvAndPaddedOutputs:Gpu.DenseEmptyProblemsWriteNothing'
for tool in $SANITIZERS; do
  filter=$SMALL:$DENSE
  [ $tool != memcheck ] && [ $tool != initcheck ] && filter='*Sweep*H16_topk2049_random*:*Sweep*H64_topk64_runs*:Gpu.EveryTileSizeAndSplitCountAgrees:Gpu.GraphCaptureAndReplay:*DenseSweep*_L1000:Gpu.DenseEveryKernelAndQueryTileAgrees:*SharedRowsSweep*H16_topk2048_random*:*SharedRowsSweep*H128_topk63_dupl*:Gpu.SharedRowsCountsEveryOccurrence:Gpu.SharedRowsSortsOnlyTheValidKeys:Gpu.WideHeadsTakeSharedRowsAndAgree:Gpu.WideHeadsSmallCallsSplitTheirListsAndAgree:Gpu.SharedRowsRowOrderAgrees:*SplitKRowOrder.Agrees/ps64_pages200:*Balanced*'
  compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD"/tests/dsa_gpu_tests --gtest_filter="$filter" > "$OUT/$tool.log" 2>&1
  echo "== $tool rc=$? $(grep -E 'tests ran|ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tr '\n' ' ')"
done
case " $SANITIZERS " in *" memcheck "*)
  compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD"/tools/dsa-bench fuzz --cases 12 --seed 5 > "$OUT/memcheck_fuzz.log" 2>&1
  echo "== memcheck on 12 fuzz cases rc=$? $(grep -E 'cases,|ERROR SUMMARY' "$OUT/memcheck_fuzz.log" | tr '\n' ' ')" ;;
esac
fi
[ "$PARTS" = tests ] && exit 0
echo "== dsa-bench --suite $SUITE --stage all $*"
"$BUILD"/tools/dsa-bench --suite "$SUITE" --stage all --json "$OUT/bench.json" --csv "$OUT/bench.csv" "$@" 2>/dev/null | tee "$OUT/bench.log"
echo "== every dsa-bench option once (scripts/bench_options_check.sh, ~25 s)"
bash scripts/bench_options_check.sh "$BUILD"/tools/dsa-bench > "$OUT/bench_options.log" 2>&1
echo "rc=$? $(grep -E '^FAILED|ran clean' "$OUT/bench_options.log" | tr '\n' ' ')"
echo "== dsa-bench dense --suite targets"
"$BUILD"/tools/dsa-bench dense --suite targets --json "$OUT/dense.json" 2>/dev/null | tee "$OUT/dense.log"
if [ -f .peers/dense_peers.py ]; then
  echo "== SDPA peers (shared/peers/dense_peers.py), same machine, same run"
  (cd .peers && timeout 300 python3 dense_peers.py 2>&1 | tee "$OUT/dense_peers.log")
fi
echo "== PyTorch op: pip install ./python, pytest tests/python"
(export PATH=/usr/local/cuda/bin:$PATH MAX_JOBS=16; python3 -m pip install -q --no-build-isolation ./python > "$OUT/pip.log" 2>&1 &&
  python3 -m pytest -q -p no:cacheprovider tests/python 2>&1 | tail -2 && python3 tests/python/bench_host_overhead.py) ||
  echo "python op FAILED (see $OUT/pip.log)"
"$BUILD"/tools/dsa-bench -T 1 --topk 64 --num-pages 64 --host-overhead --reps 5 2>/dev/null | grep "host us"
if [ -f .peers/dsa_peers.py ]; then
  echo "== Triton split-K peer (shared/peers/dsa_peers.py), same machine, same run"
  (cd .peers && PYTHONUNBUFFERED=1 timeout 300 python3 dsa_peers.py "$OUT/peers.json" 2>&1 | grep -v Warn | tee "$OUT/peers.log" | cut -c1-60,160-260)
fi
