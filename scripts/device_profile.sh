#!/usr/bin/env bash
# Nsight Compute summaries of the split-K kernel on a small-T and a prefill case (one device call).
set -uo pipefail
OUT=${OUT:-/tmp/out}
SECTIONS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --section SourceCounters"
for c in "-T 1 --pattern random" "-T 1024 --pattern random" "-T 4096 --pattern shared_prefix"; do
  name=$(echo "$c" | tr -d ' -' | cut -c1-30)
  ncu --clock-control none $SECTIONS -k regex:sparse_mla_splitk -c 1 \
    ./build/tools/dsa-bench $c --reps 3 --warmup 0 --timer events > "$OUT/ncu_$name.txt" 2>&1
  echo "== ncu $c"; grep -E "Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|stall" "$OUT/ncu_$name.txt" | head -30
done
