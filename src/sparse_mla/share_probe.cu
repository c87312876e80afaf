// The sampled share of 4-token groups' unions (sample_group_sharing in dsa/sparse_mla.h): how
// many of a group's valid entries are distinct rows, what decides whether the shared-rows kernel
// pays at 16 heads (its CTAs gather each group's union once). One CTA per sampled group: the
// group's entries into registers (all loads in flight at once), then into a shared-memory hash
// set, counting first insertions.
#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "dsa/sparse_mla.h"
#include "sparse_mla/params.h"

namespace dsa::detail {
namespace {

constexpr int kProbeThreads = 256;
constexpr int kProbeGroupTokens = kSharedRowsBlocks;                                   // 4 tokens per group, as the kernel's
constexpr int kProbeItems = kProbeGroupTokens * SparseMlaPlan::kMaxChunk / kProbeThreads;  // entries per thread: 32
constexpr int kProbeSlotBits = 14;  // 16384 slots for at most 8192 rows: the set at most half full
constexpr int kProbeSlots = 1 << kProbeSlotBits;
constexpr uint32_t kProbeEmpty = 0xffffffffu;  // no row is 2^32 - 1 (rows are int32)
constexpr int kProbeItemsPerList = kProbeItems / kProbeGroupTokens;                    // 8
static_assert(kProbeItems * kProbeThreads == kProbeGroupTokens * SparseMlaPlan::kMaxChunk, "whole lists per thread");
static_assert(kProbeSlots >= 2 * kProbeItems * kProbeThreads, "the set stays at most half full");

__global__ void __launch_bounds__(kProbeThreads) share_probe_kernel(const int32_t* indices, int num_tokens, int topk,
                                                                    int64_t token_stride, int64_t num_rows, int samples,
                                                                    unsigned long long* counts) {
  extern __shared__ uint32_t s_set[];  // kProbeSlots
  __shared__ int s_sum[2][kProbeThreads / 32];
  const int64_t groups = (int64_t{num_tokens} + kProbeGroupTokens - 1) / kProbeGroupTokens;
  const int64_t n = samples < groups ? samples : groups;
  const int t0 = static_cast<int>((2 * int64_t{blockIdx.x} + 1) * groups / (2 * n) * kProbeGroupTokens);
  const int tokens = num_tokens - t0 < kProbeGroupTokens ? num_tokens - t0 : kProbeGroupTokens;
  // Every load issued before any is used: a thread reads positions threadIdx.x + 256 m of each
  // of the group's lists.
  int32_t rows[kProbeItems];
#pragma unroll
  for (int t = 0; t < kProbeGroupTokens; ++t) {
    const int32_t* list = indices + (int64_t{t0} + t) * token_stride;
#pragma unroll
    for (int m = 0; m < kProbeItemsPerList; ++m) {
      const int k = static_cast<int>(threadIdx.x) + m * kProbeThreads;
      rows[t * kProbeItemsPerList + m] = t < tokens && k < topk ? __ldg(list + k) : -1;
    }
  }
  for (int i = threadIdx.x; i < kProbeSlots; i += kProbeThreads) s_set[i] = kProbeEmpty;
  __syncthreads();
  int distinct = 0, valid = 0;
#pragma unroll
  for (int j = 0; j < kProbeItems; ++j) {
    const int32_t r = rows[j];
    if (r < 0 || r >= num_rows) continue;
    ++valid;
    uint32_t slot = (static_cast<uint32_t>(r) * 2654435761u) >> (32 - kProbeSlotBits);  // Knuth's multiplicative hash
    for (;;) {
      const uint32_t seen = atomicCAS(&s_set[slot], kProbeEmpty, static_cast<uint32_t>(r));
      if (seen == kProbeEmpty) {
        ++distinct;
        break;
      }
      if (seen == static_cast<uint32_t>(r)) break;
      slot = (slot + 1) & (kProbeSlots - 1);
    }
  }
  for (int d = 16; d > 0; d /= 2) {
    distinct += __shfl_xor_sync(0xffffffffu, distinct, d);
    valid += __shfl_xor_sync(0xffffffffu, valid, d);
  }
  if (threadIdx.x % 32 == 0) s_sum[0][threadIdx.x / 32] = distinct, s_sum[1][threadIdx.x / 32] = valid;
  __syncthreads();
  if (threadIdx.x < 2) {
    unsigned long long sum = 0;
    for (int w = 0; w < kProbeThreads / 32; ++w) sum += static_cast<unsigned long long>(s_sum[threadIdx.x][w]);
    atomicAdd(counts + threadIdx.x, sum);
  }
}

}  // namespace

void launch_share_probe(const int32_t* indices, int num_tokens, int topk, int64_t token_stride, int64_t num_rows,
                        int samples, long long* d_counts, cudaStream_t stream) {
  const int64_t groups = (int64_t{num_tokens} + kProbeGroupTokens - 1) / kProbeGroupTokens;
  const int ctas = static_cast<int>(std::min<int64_t>(samples, groups));
  if (ctas == 0) return;
  constexpr int kSmemBytes = kProbeSlots * static_cast<int>(sizeof(uint32_t));
  raise_smem_limit_once<share_probe_kernel>(kSmemBytes);
  share_probe_kernel<<<ctas, kProbeThreads, kSmemBytes, stream>>>(indices, num_tokens, topk, token_stride, num_rows,
                                                                 samples, reinterpret_cast<unsigned long long*>(d_counts));
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::detail
