// Exclusive scan of per-(item, warp) counts by one warp: the step that places the survivors of a
// ballot compaction in order (both sparse MLA kernels). Device-only; include from .cu files.
#pragma once

namespace dsa::detail {

// counts[k] (shared memory, kCounts + 1 ints) becomes the sum of counts[0..k); counts[kCounts]
// the total. Called by all 32 lanes of one warp; lane l scans counts [l * kPer, l * kPer + kPer).
template <int kCounts>
__device__ __forceinline__ void warp_exclusive_scan(int* counts, int lane) {
  constexpr int kPer = (kCounts + 31) / 32;
  int c[kPer], sum = 0;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int k = lane * kPer + u;
    c[u] = k < kCounts ? counts[k] : 0;
    sum += c[u];
  }
  int incl = sum;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  __syncwarp();
  int run = incl - sum;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int k = lane * kPer + u;
    if (k < kCounts) counts[k] = run;
    run += c[u];
  }
  if (lane == 31) counts[kCounts] = incl;
}

}  // namespace dsa::detail
