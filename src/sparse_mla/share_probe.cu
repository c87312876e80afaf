// The sampled share of 4-token groups' unions (sample_group_sharing in dsa/sparse_mla.h, and the
// forward's probe for SparseMlaPlan::share_probe): how many of a group's valid entries are
// distinct rows, what decides whether the shared-rows kernel pays at 16 heads (its CTAs gather
// each group's union once).
//
// One CTA per sampled group. Its entries are loaded with every load in flight, then each valid
// one sets one bit of a 2^17-bit shared-memory bitmap (one atomicOr, no loop): the row itself
// where the cache has at most 2^17 rows, so the count of set bits is exact; else a hash of it,
// and the distinct rows are estimated from the bits left clear (linear counting, -m ln(clear /
// m): at most 8192 entries in 131072 bits, a standard error of ~16 rows, 0.2 % of a full group,
// less over the 16 groups the forward samples).
// Run 692 (H200) timed the first version, a shared-memory hash set with probing, at 8.8-87 µs:
// 32 insertions per thread, each looping until every lane of its warp had found a free slot.
// This one took 2.8-3.3 µs (run 693).
#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "dsa/sparse_mla.h"
#include "sparse_mla/params.h"

namespace dsa::detail {
namespace {

constexpr int kProbeThreads = 1024;
constexpr int kProbeItems = kShareProbeGroupTokens * SparseMlaPlan::kMaxChunk / kProbeThreads;  // entries per thread: 8
constexpr int kProbeItemsPerList = kProbeItems / kShareProbeGroupTokens;                        // 2
constexpr int kProbeWords = kShareProbeBits / 32;
static_assert(kProbeItems * kProbeThreads == kShareProbeGroupTokens * SparseMlaPlan::kMaxChunk, "whole lists per thread");
static_assert(kProbeWords % kProbeThreads == 0, "whole words per thread");

// MurmurHash3's finaliser: every input bit moves every output bit, so the bits a group sets
// collide as random ones would, which linear counting assumes. Knuth's multiplicative hash
// spread runs of consecutive rows more evenly than random and overestimated a 2048-row prefix's
// share by 1.3 points (run 693; 1.5 in a model of 8192-row prefixes, 0.01 with this one).
__device__ __forceinline__ uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

__global__ void __launch_bounds__(kProbeThreads) share_probe_kernel(const int32_t* indices, const int32_t* topk_lengths,
                                                                    int num_tokens, int topk, int64_t token_stride,
                                                                    int num_rows, int samples, int2* pairs,
                                                                    unsigned long long* sums) {
  __shared__ uint32_t s_bits[kProbeWords];
  __shared__ int s_sum[2][kProbeThreads / 32];
  const int64_t n = share_probe_groups(num_tokens, samples);
  const int t0 = share_probe_group_token(blockIdx.x, num_tokens, n);
  const int tokens = min(num_tokens - t0, kShareProbeGroupTokens);
  // Every load issued before any is used: thread i reads positions i and i + 1024 of each list.
  int32_t rows[kProbeItems];
#pragma unroll
  for (int t = 0; t < kShareProbeGroupTokens; ++t) {
    const int32_t* list = indices + (int64_t{t0} + t) * token_stride;
#pragma unroll
    for (int m = 0; m < kProbeItemsPerList; ++m) {
      const int k = static_cast<int>(threadIdx.x) + m * kProbeThreads;
      rows[t * kProbeItemsPerList + m] = t < tokens && k < topk ? __ldg(list + k) : -1;
    }
  }
  int lengths[kShareProbeGroupTokens];
#pragma unroll
  for (int t = 0; t < kShareProbeGroupTokens; ++t) {
    const int len = topk_lengths != nullptr && t < tokens ? __ldg(topk_lengths + t0 + t) : topk;
    lengths[t] = min(max(len, 0), topk);
  }
#pragma unroll
  for (int w = 0; w < kProbeWords / kProbeThreads; ++w) s_bits[threadIdx.x + w * kProbeThreads] = 0;
  __syncthreads();
  const bool exact = num_rows <= kShareProbeBits;  // a bit per row
  int valid = 0;
#pragma unroll
  for (int j = 0; j < kProbeItems; ++j) {
    const int t = j / kProbeItemsPerList, k = static_cast<int>(threadIdx.x) + (j % kProbeItemsPerList) * kProbeThreads;
    const int32_t r = rows[j];
    if (!names_a_row(r, num_rows) || k >= lengths[t]) continue;
    ++valid;
    const uint32_t bit = exact ? static_cast<uint32_t>(r) : mix32(static_cast<uint32_t>(r)) >> (32 - kShareProbeBitsLog2);
    atomicOr(&s_bits[bit / 32], 1u << (bit % 32));
  }
  __syncthreads();
  int set = 0;
#pragma unroll
  for (int w = 0; w < kProbeWords / kProbeThreads; ++w) set += __popc(s_bits[threadIdx.x + w * kProbeThreads]);
  for (int d = 16; d > 0; d /= 2) {
    set += __shfl_xor_sync(0xffffffffu, set, d);
    valid += __shfl_xor_sync(0xffffffffu, valid, d);
  }
  if (threadIdx.x % 32 == 0) s_sum[0][threadIdx.x / 32] = set, s_sum[1][threadIdx.x / 32] = valid;
  __syncthreads();
  if (threadIdx.x < 32) {
    set = s_sum[0][threadIdx.x];
    valid = s_sum[1][threadIdx.x];
    for (int d = 16; d > 0; d /= 2) {
      set += __shfl_xor_sync(0xffffffffu, set, d);
      valid += __shfl_xor_sync(0xffffffffu, valid, d);
    }
    if (threadIdx.x == 0) {
      int distinct = set;
      if (!exact && set > 0) {  // linear counting; never below the bits set nor above the entries
        const float m = static_cast<float>(kShareProbeBits);
        distinct = min(valid, max(set, __float2int_rn(-m * log1pf(-static_cast<float>(set) / m))));
      }
      if (pairs != nullptr) pairs[blockIdx.x] = make_int2(distinct, valid);
      if (sums != nullptr) {
        atomicAdd(sums, static_cast<unsigned long long>(distinct));
        atomicAdd(sums + 1, static_cast<unsigned long long>(valid));
      }
    }
  }
}

}  // namespace

void launch_share_probe(const int32_t* indices, const int32_t* topk_lengths, int num_tokens, int topk, int64_t token_stride,
                        int64_t num_rows, int samples, int2* pairs, long long* sums, cudaStream_t stream) {
  const int64_t ctas = share_probe_groups(num_tokens, samples);
  if (ctas == 0) return;
  // Rows past int32 are never named by an index: the kernel compares against at most INT32_MAX.
  const int rows = static_cast<int>(std::min<int64_t>(num_rows, INT32_MAX));
  share_probe_kernel<<<static_cast<unsigned>(ctas), kProbeThreads, 0, stream>>>(
      indices, topk_lengths, num_tokens, topk, token_stride, rows, samples, pairs, reinterpret_cast<unsigned long long*>(sums));
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::detail
