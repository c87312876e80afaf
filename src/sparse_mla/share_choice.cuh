// The device side of SparseMlaPlan::share_probe. The forward launches the probe, the union pass,
// the order pass, the main kernel and split-K, the last three by programmatic dependent launch;
// each of their CTAs asks first whether its kernel is the one the probe's counts chose, and
// leaves at once if not. No host round trip, so the call stays asynchronous and
// graph-capturable. Split-K comes last: shared rows chosen, the main kernel lets it launch from
// its start, and its 2-8x more CTAs leave on the SMs the main kernel's last wave frees, the last
// of them waiting for the main kernel so that the chain ends after it; split-K chosen, the empty
// passes and main kernel go first, a wave of memory round trips per 132 groups (T / 528).
// Measured on the H200 over the chosen kernel alone: split-K launched after the main kernel
// plainly, +13-36 µs (run 693); between the passes, +11-34 µs with shared rows chosen (run 695);
// this layout, +10-39 µs with shared rows chosen and +13-23 with split-K (run 696). Of that, the
// pairs' round trip is a few µs at most (read through L1: -1.4 to -5.2 µs with split-K chosen,
// -0.6 to +21 with shared rows, run 697); the empty grids ~1.5-4 µs at T = 2048, 9-14 at T =
// 4096-8192; the probe and the extra launches the other 7-10 µs (runs 698-700, docs/perf.md).
// Tried and not kept:
// - split-K's half looping over slots in one resident grid: faster with shared rows chosen, 1-2 %
//   slower when chosen (run 700);
// - a wait in the main kernel's own path for leaving: prefill +13 % (its code 5 KB longer, run 694);
// - split-K first, the shared-rows grids after it, none waiting (run 707): split-K chosen -5 to
//   -27 µs, shared rows chosen +5 to +20 (split-K's empty grid then delays the union pass
//   instead of overlapping the main kernel's last wave), and unhinted calls this large are
//   mostly prefill chunks, where shared rows win;
// - the probe's last CTA launching the chosen kernel (CUDA dynamic parallelism): it started 6.9
//   µs after the probe against 15.6-18.9 behind three empty grids, but the stream's next kernel
//   then started 7.7-8.7 µs after the child ended, against 1.8 after a host chain (run 706,
//   tools/launch_probe).
// Split-K's last CTA waits for the main kernel although a launch after a grid whose CTAs left
// without waiting still waited for every grid before it (run 706's pdl-next; run 707's
// next-operation test, on a stream and in a graph): CUDA does not document that, and the wait
// costs one CTA.
#pragma once

#include "common/ptx.cuh"
#include "sparse_mla/params.h"

namespace dsa::detail {

static_assert(kShareProbeSamples <= 32, "a warp's lanes hold the groups' pairs");

// Whether the probe's groups keep at most the line's share of their entries (shared rows pay).
// Warp-uniform, no barrier: lanes 0..15 load a group's pair each (in L2, written by the probe,
// which ended before this grid began) and the warp sums them by shuffles. A call with no valid
// entry in its groups takes split-K, whose CTAs leave an empty list soonest.
__device__ __forceinline__ bool share_probe_picks_shared_rows(const SparseMlaParams& p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int2 pair = make_int2(0, 0);
  if (lane < p.share_samples) pair = __ldcg(p.share_pairs + lane);
  long long distinct = pair.x, valid = pair.y;
  for (int d = 16; d > 0; d /= 2) {
    distinct += __shfl_xor_sync(0xffffffffu, distinct, d);
    valid += __shfl_xor_sync(0xffffffffu, valid, d);
  }
  return valid > 0 && distinct * 1000 <= valid * p.share_line_permille;
}

// Whether a CTA of the shared-rows kernels (shared_rows) or of split-K (!shared_rows) should leave
// at once: a share-probe plan whose probe chose the other kernel.
__device__ __forceinline__ bool share_probe_skips(const SparseMlaParams& p, bool shared_rows) {
  return p.share_line_permille > 0 && share_probe_picks_shared_rows(p) != shared_rows;
}

// How split-K's CTAs leave when shared rows were chosen: the chain ends with split-K's grid, which
// must not end before the main kernel it follows, so its last CTA waits for it first.
__device__ __forceinline__ void share_probe_leave() {
  if (blockIdx.x == gridDim.x - 1) ptx::wait_prerequisites();
}

}  // namespace dsa::detail
