#!/usr/bin/env bash
# Runs dsa-bench once with each of its options and subcommands on a small case, as the README's
# examples use them, and fails if any run exits non-zero, prints a FAIL row or an error. `--timer
# graph` had failed on every case since the bench timed on the legacy stream, and no test ran it
# (docs/perf.md runs 753-754): this script is the test for the rest. Needs a GPU (exit 77 without
# one, so CTest skips it); ~1-2 minutes on an H200.
# Usage: scripts/bench_options_check.sh [DSA_BENCH] (default build/tools/dsa-bench)
set -uo pipefail
bench=${1:-build/tools/dsa-bench}
[ -x "$bench" ] || { echo "bench_options_check: $bench is not an executable" >&2; exit 2; }
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "bench_options_check: no GPU, skipped"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0 ran=0
bad='^FAIL|dsa-bench: |(^|[^_a-z])error:'  # a failed case, an exception, an error message
check() {  # check NAME ARGS...: one run of dsa-bench ARGS
  local name=$1
  shift
  ran=$((ran + 1))
  local log=$dir/$name.log
  timeout 300 "$bench" "$@" > "$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] || grep -q -E "$bad" "$log"; then
    failed=$((failed + 1))
    echo "FAILED $name (rc $rc): dsa-bench $*"
    grep -E "$bad" "$log" | head -3 | sed 's/^/  /'
  else
    echo "ok     $name"
  fi
}
small=(--shape H16-T1-k2048-random,H16-T8-k2048-runs --reps 3 --warmup 1)
check smoke --suite smoke --reps 3
check timer_events "${small[@]}" --timer events
check timer_graph --shape H16-T1-k2048-random,H16-T64-k2048-random,H64-T4-k2048-random --reps 3 --timer graph  # split-K and shared rows, with the gather floor
check outputs "${small[@]}" --json "$dir/out.json" --csv "$dir/out.csv" --plot "$dir/out.png"
check fp8 "${small[@]}" --kv fp8
check cache_joined --shape H16-T1-k2048-random,H16-T8-k2048-runs,H64-T4-k2048-random --cache-layout joined --reps 3  # split-K and shared rows on ckv | kpe rows, with the floors
check stage_all -T 64 --pattern random --heads 16 --stage all --reps 3 --kernel-only
check timeline -T 1 --pattern random --timeline --timeline-csv "$dir/timeline.csv" --warm-code --reps 3 --kernel-only
check warm_tlb -T 1 --warm-tlb --reps 3 --kernel-only
check kernel_starts -T 2048 --sharing unknown --kernel-starts --reps 3 --kernel-only
check host_overhead -T 8 --host-overhead --reps 3 --kernel-only
check list_length_auto --suite smoke --list-length auto --reps 3 --kernel-only
check list_length_tokens --suite smoke --list-length tokens --reps 3 --kernel-only
check min_valid_auto --shape H16-T24-k2048-random,H16-T24-k2048-runs --min-valid auto --reps 3 --kernel-only
check overrides -T 8 --pattern random --block-keys 64 --splits 8 --fused-rows -1 --row-order on --split-softmax on --reps 3 --kernel-only
check balanced -T 70 --pattern runs --balanced --reps 3 --kernel-only
check shared_rows_forced -T 64 --pattern shared_prefix --kernel shared-rows --splits 2 --reps 3 --kernel-only
check sequences -T 264 --pattern sequences --num-pages 33856 --sharing none --reps 3 --kernel-only
check mtp -T 264 --pattern sequences --seq-tokens 2 --prefix-len 2560 --num-pages 5300 --sharing consecutive --reps 3 --kernel-only
check valid_cut -T 528 --pattern random --valid 2048,1210 --reps 3 --kernel-only
check union_floor -T 512 --pattern shared_prefix --union-floor 1,4 --reps 3
check export --suite smoke --export "$dir/export"
check workload --workload "$(ls "$dir"/export/*.jsonl 2>/dev/null | head -1)" --reps 3 --kernel-only
check inspect inspect decode-small --tokens 2
check dense dense --suite smoke --reps 3
check dense_graph dense --suite smoke --timer graph --reps 3
check dense_case dense -B 1 -N 4 -L 1024 --causal --kernel fa2 --reps 3
check wgmma wgmma
check gather_paths gather-paths
check fuzz fuzz --cases 12 --seed 20261208
check fuzz_one fuzz --seed 20261208 --first 5 --cases 1 --verbose
check fuzz_dense fuzz --dense --cases 30 --seed 20261208
echo "bench_options_check: $((ran - failed)) of $ran ran clean"
[ $failed -eq 0 ]
