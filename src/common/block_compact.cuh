// Stable compaction across a block: the step that turns a block's per-thread candidates (valid
// indices, union entries) into a dense list in position order, for both sparse MLA kernels.
// Device-only; include from .cu files.
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

// Item j of thread `tid` stands at position j * kThreads + tid. Every kept item gets its rank
// among the kept ones in position order: emit(rank, j) runs once per kept item. Returns the
// number kept. `counts` is kItems * kThreads / 32 + 1 ints of shared memory; the call holds two
// __syncthreads (all threads must call it), and the caller syncs again before the emitted
// output or `counts` is reused.
template <int kItems, int kThreads, typename Emit>
__device__ __forceinline__ int block_compact(const bool (&keep)[kItems], int* counts, Emit emit) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned ballot[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    ballot[j] = __ballot_sync(0xffffffffu, keep[j]);
    if (lane == 0) counts[j * kWarps + warp] = __popc(ballot[j]);
  }
  __syncthreads();
  if (warp == 0) warp_exclusive_scan<kItems * kWarps>(counts, lane);
  __syncthreads();
  const unsigned lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < kItems; ++j)
    if ((ballot[j] >> lane) & 1u) emit(counts[j * kWarps + warp] + __popc(ballot[j] & lanes_below), j);
  return counts[kItems * kWarps];
}

}  // namespace dsa::detail
