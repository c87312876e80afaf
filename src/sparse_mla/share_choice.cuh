// The device side of SparseMlaPlan::share_probe: the forward launches the probe, then both the
// shared-rows kernels and split-K; each of their CTAs asks this first and leaves at once unless
// its kernel is the one the probe's counts chose. No host round trip, so the call stays
// asynchronous and graph-capturable.
#pragma once

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

}  // namespace dsa::detail
