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

// Each warp's ballot of item j, and its count at counts[j * kWarps + warp] (position order:
// item j of warp w covers positions (j * kWarps + w) * 32 + lane).
template <int kItems, int kWarps>
__device__ __forceinline__ void ballot_counts(const bool (&keep)[kItems], unsigned (&ballot)[kItems], int* counts) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    ballot[j] = __ballot_sync(0xffffffffu, keep[j]);
    if (lane == 0) counts[j * kWarps + warp] = __popc(ballot[j]);
  }
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
  ballot_counts<kItems, kWarps>(keep, ballot, counts);
  __syncthreads();
  if (warp == 0) warp_exclusive_scan<kItems * kWarps>(counts, lane);
  __syncthreads();
  const unsigned lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < kItems; ++j)
    if ((ballot[j] >> lane) & 1u) emit(counts[j * kWarps + warp] + __popc(ballot[j] & lanes_below), j);
  return counts[kItems * kWarps];
}

// A block_compact whose scan every warp does itself: one barrier, not two, and no warp waits on
// warp 0's serial scan. The counts stay raw in `counts` (kItems * kThreads / 32 ints); the
// scanned prefixes stay in registers, where `before(k)` reads them. Needs 32 % warps == 0, so
// that item j's count falls in a round (of 32 counts) known at compile time.
template <int kCounts>
struct CompactScan {
  static constexpr int kRounds = (kCounts + 31) / 32;
  int total;            // items kept in the block
  int excl[kRounds];    // lane l, round u: items kept before count u * 32 + l (position order)
  // Items kept before count k < kCounts (before position 32 k with one warp's 32 items per
  // count); every lane of the warp calls it with the same k.
  // The round is picked by masks, not by `if (k / 32 == u) v = excl[u]`: the compiler turned
  // that into a load from excl[k / 32], which put the struct in local memory (16-byte stack
  // frames in 13 split-K kernels at 6aa879d).
  __device__ __forceinline__ int before(int k) const {
    int v = 0;
#pragma unroll
    for (int u = 0; u < kRounds; ++u) v |= excl[u] & -static_cast<int>(k / 32 == u);
    return __shfl_sync(0xffffffffu, v, k % 32);
  }
};

// Item j of thread `tid` stands at position j * kThreads + tid, as in block_compact, and
// emit(rank, j) runs once per kept item. All threads must call it; the caller syncs before the
// emitted output is read or `counts` is reused.
template <int kItems, int kThreads, typename Emit>
__device__ __forceinline__ CompactScan<kItems * kThreads / 32> block_compact_scan(const bool (&keep)[kItems], int* counts,
                                                                                  Emit emit) {
  constexpr int kWarps = kThreads / 32;
  static_assert(32 % kWarps == 0, "a count's round must be known at compile time");
  constexpr int kCounts = kItems * kWarps;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned ballot[kItems];
  ballot_counts<kItems, kWarps>(keep, ballot, counts);
  __syncthreads();
  CompactScan<kCounts> scan;
  int base = 0;
#pragma unroll
  for (int u = 0; u < CompactScan<kCounts>::kRounds; ++u) {
    const int k = u * 32 + lane;
    const int c = k < kCounts ? counts[k] : 0;
    int incl = c;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    scan.excl[u] = base + incl - c;
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
  scan.total = base;
  const unsigned lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    constexpr int kPerRound = 32 / kWarps;  // items j per round of counts
    const int k = j * kWarps + warp;        // in round j / kPerRound
    const int start = __shfl_sync(0xffffffffu, scan.excl[j / kPerRound], k % 32);
    if ((ballot[j] >> lane) & 1u) emit(start + __popc(ballot[j] & lanes_below), j);
  }
  return scan;
}

// Stable compaction into buckets (a counting sort): the kept items come out ordered by bucket,
// and in position order within a bucket, a cub stable radix sort's order in one pass. Item j
// of thread (warp, lane) stands at position (warp * kItems + j) * 32 + lane: each warp holds a
// contiguous run of positions, so a warp that counts its items round by round (j) counts them
// in position order. bucket[j] < kBuckets where keep[j]. emit(rank, j) runs once per kept item;
// returns the number kept. `counts` is kBuckets * kWarps + 1 ints of shared memory; the call
// holds three __syncthreads (all threads must call it), and the caller syncs again before the
// emitted output or `counts` is reused.
template <int kItems, int kThreads, int kBuckets, typename Emit>
__device__ __forceinline__ int block_bucket_compact(const bool (&keep)[kItems], const int (&bucket)[kItems], int* counts,
                                                    Emit emit) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kCounts = kBuckets * kWarps;  // counts[b * kWarps + w]: bucket-major, so the scan is position order
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = threadIdx.x; i < kCounts; i += kThreads) counts[i] = 0;
  __syncthreads();
  const unsigned lanes_below = (1u << lane) - 1u;
  int rank[kItems];  // among the warp's items of the same bucket
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    // The lanes keeping an item of one bucket; those keeping none share -1, never a bucket.
    const unsigned same = __match_any_sync(0xffffffffu, keep[j] ? bucket[j] : -1);
    int before = 0;
    if (keep[j] && (same & lanes_below) == 0) {  // the bucket's lowest lane counts for all
      int* c = counts + bucket[j] * kWarps + warp;
      before = *c;
      *c = before + __popc(same);
    }
    rank[j] = __shfl_sync(0xffffffffu, before, __ffs(same) - 1) + __popc(same & lanes_below);
    __syncwarp();  // this round's counts written before the next round reads them
  }
  __syncthreads();
  if (warp == 0) warp_exclusive_scan<kCounts>(counts, lane);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j)
    if (keep[j]) emit(counts[bucket[j] * kWarps + warp] + rank[j], j);
  return counts[kCounts];
}

}  // namespace dsa::detail
