#include "bench_kernels.h"

#include <string>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "common/block_compact.cuh"
#include "common/cuda_check.h"
#include "sparse_mla/params.h"
#include "sparse_mla/partials.cuh"

namespace dsa::bench {
namespace {

constexpr int kProbeHeads = 16;  // the output floor's heads: one 16-head group per token

constexpr int kProbeThreads = 256;  // the gather and output floors' blocks

// A 16-byte load through L1 (__ldg: rows that blocks on one SM share hit there), or with
// kL2Only from L2 alone (ld.global.cg), as the kernels' cp.async.cg tile fills read.
template <bool kL2Only>
__device__ __forceinline__ uint4 load_16(const uint4* p) {
  if constexpr (kL2Only) return __ldcg(p);
  return __ldg(p);
}

// One warp reads one row (the layouts below, xor_rows). Returns the XOR of the lane's words.
template <bool kL2Only>
__device__ __forceinline__ unsigned load_row(const CacheRows& cache, int row, int lane) {
  if (cache.fp8_row_bytes > 0) {
    const uint4* c = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(cache.ckv) + static_cast<int64_t>(row) * cache.fp8_row_bytes);
    const uint4 a = load_16<kL2Only>(c + lane);
    unsigned acc = a.x ^ a.y ^ a.z ^ a.w;
    if (lane < kFp8RowBytes / 16 - 32) {
      const uint4 b = load_16<kL2Only>(c + 32 + lane);
      acc ^= b.x ^ b.y ^ b.z ^ b.w;
    }
    return acc;
  }
  const uint4* c = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(cache.ckv) + static_cast<int64_t>(row) * cache.ckv_row_bytes);
  const uint4 a = load_16<kL2Only>(c + lane), b = load_16<kL2Only>(c + lane + 32);
  unsigned acc = a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
  if (lane < 8) {
    const uint4 p = load_16<kL2Only>(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(cache.kpe) + static_cast<int64_t>(row) * cache.kpe_row_bytes) + lane);
    acc ^= p.x ^ p.y ^ p.z ^ p.w;
  }
  return acc;
}

// Blocks per SM the gather and output floors' kernels are compiled for: the loop shape with rows
// in flight holds 4 rows x 12 registers of loaded data per thread and is capped at 64 registers
// (4 blocks per SM); the one-row shape at 51, where the output floor's kernel fits in 48 (5 blocks
// per SM, as before the in-flight shape existed; uncapped it took 56). The per-token floor's
// kernel takes 4 for both shapes (split_by_rows_kernel).
template <int kRowsInFlight>
constexpr int kFloorMinBlocks = kRowsInFlight > 1 ? 4 : 5;

// The XOR of every 16-byte vector of rows row_at(k), k in [begin, end) (skipped where the row is
// not in [0, num_rows)), read by a block's warps: warp w takes k = begin + w + 8 j, kRowsInFlight
// rows at a time, each batch's lookups first, then every load of the batch, then their values.
// One row at a time is the loop of shared/peers/gather_bw.cu: small in registers, so that a
// large T's blocks are all resident, but a memory round trip per row of a warp (4 for a 32-row
// chunk), a latency chain at small T. bf16: lanes take two ckv vectors each (1024 B) and lanes
// 0-7 a kpe vector (128 B); fp8_ds_mla: one vector per lane and lanes 0-8 one more (656 B).
template <bool kL2Only, int kRowsInFlight, class RowAt>
__device__ __forceinline__ unsigned xor_rows(const CacheRows& cache, int begin, int end, int num_rows, RowAt row_at) {
  constexpr int kWarps = kProbeThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned acc = 0;
  if constexpr (kRowsInFlight == 1) {
    for (int k = begin + warp; k < end; k += kWarps) {
      const int r = row_at(k);
      if (detail::names_a_row(r, num_rows)) acc ^= load_row<kL2Only>(cache, r, lane);
    }
    return acc;
  }
  constexpr ptx::LoadPath kPath = kL2Only ? ptx::LoadPath::cg : ptx::LoadPath::nc;
  const bool fp8 = cache.fp8_row_bytes > 0;
  for (int k0 = begin + warp; k0 < end; k0 += kWarps * kRowsInFlight) {
    const int k = k0 + kWarps * lane;  // lane j < kRowsInFlight looks up the warp's row j
    const int mine = lane < kRowsInFlight && k < end ? row_at(k) : -1;
    uint4 v[kRowsInFlight][3];
#pragma unroll
    for (int j = 0; j < kRowsInFlight; ++j) {
      const int r = __shfl_sync(~0u, mine, j);
      const bool ok = detail::names_a_row(r, num_rows);
      const uint8_t* base = static_cast<const uint8_t*>(cache.ckv) + static_cast<int64_t>(ok ? r : 0) * (fp8 ? cache.fp8_row_bytes : cache.ckv_row_bytes);
      const uint4* c = reinterpret_cast<const uint4*>(base);
      v[j][0] = ptx::ld_v4_or_zero<kPath>(ok, c + lane);
      v[j][1] = ptx::ld_v4_or_zero<kPath>(ok && (!fp8 || lane < kFp8RowBytes / 16 - 32), c + 32 + lane);
      const uint4* p = fp8 ? c
                           : reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(cache.kpe) +
                                                            static_cast<int64_t>(ok ? r : 0) * cache.kpe_row_bytes) + lane;
      v[j][2] = ptx::ld_v4_or_zero<kPath>(ok && !fp8 && lane < 8, p);
    }
#pragma unroll
    for (int j = 0; j < kRowsInFlight; ++j)
#pragma unroll
      for (int u = 0; u < 3; ++u) acc ^= v[j][u].x ^ v[j][u].y ^ v[j][u].z ^ v[j][u].w;
  }
  return acc;
}

// Block b reads the rows of token b / splits listed in its chunk of index positions (chunk
// b % splits of ceil(topk / splits)). Returns a value that depends on every load.
template <bool kL2Only, int kRowsInFlight>
__device__ __forceinline__ unsigned gather_block_rows(const CacheRows cache, const int32_t* __restrict__ indices, int topk, int num_rows,
                                                      int splits) {
  const int t = blockIdx.x / splits, s = blockIdx.x % splits;
  const int chunk = (topk + splits - 1) / splits;
  const int begin = s * chunk, end = min(topk, begin + chunk);
  const int32_t* idx = indices + static_cast<int64_t>(t) * topk;
  return xor_rows<kL2Only, kRowsInFlight>(cache, begin, end, num_rows, [&](int k) { return __ldg(idx + k); });
}

template <bool kL2Only, int kRowsInFlight>
__global__ void __launch_bounds__(kProbeThreads, kFloorMinBlocks<kRowsInFlight>) gather_rows_kernel(const CacheRows cache, const int32_t* __restrict__ indices,
                                                                    int topk, int num_rows, int splits, unsigned* sink,
                                                                    unsigned* token_xor) {
  const unsigned acc = gather_block_rows<kL2Only, kRowsInFlight>(cache, indices, topk, num_rows, splits);
  if (token_xor != nullptr)
    atomicXor(token_xor + blockIdx.x / splits, acc);  // the check: every word of the token's listed rows
  else if (acc == 0x9e3779b9u)
    sink[0] = acc;  // keeps the loads alive
}

// The output floor: the gather floor's loads, then what any design that splits a token over
// several blocks must add to them, with no math: each block writes a 16 x 512 bf16 partial (as
// the kernels do, partials.cuh) and 16 fp32 lse values, the token's blocks meet at a barrier in
// L2 (one arrival counter per token, which only grows: call c waits for c x n arrivals), and
// each block merges 1 / n of the token's output from every partial (8 loads of 4 values per
// thread, all in flight; partial sums per thread, then across threads in shared memory) and
// writes it as bf16. A token of one block writes its bf16 output straight away. The blocks are
// launched normally: the caller checks that they fit the chip at once, and a barrier that waits
// too long gives up and flags it.
constexpr int kMergeThreads = kProbeThreads;
constexpr int kPartialVec4 = kProbeHeads * 512 / 4;            // 4-value items per partial: 2048
constexpr int kMergeLoads = kPartialVec4 / kMergeThreads;       // 8 per thread
constexpr int kMaxMergeOwn = kPartialVec4 / 2 / kMergeThreads;  // output float4 per thread, n = 2: 4

// Block `block` is split s of token t's n (a power of 2 <= 64), whose blocks are b0 .. b0 + n - 1;
// v stands for its result (it depends on every load). partials: one partial per block, then 16
// lse per block (`blocks` in all).
__device__ __forceinline__ void merge_split_outputs(float v, int t, int s, int n, int64_t block, int64_t b0, int64_t blocks,
                                                    float* partials, unsigned* arrivals, unsigned target, uint4* out,
                                                    unsigned* sink, float4* s_part) {
  const auto pack = [](float lo, float hi) { return ptx::pack_bf16x2(lo, hi); };  // rounded, as the kernels' partials
  if (n == 1) {  // the token's output, bf16: 1024 x 16 B
    const unsigned bits = pack(v, v);
    for (int i = threadIdx.x; i < kPartialVec4 / 2; i += kMergeThreads)
      out[static_cast<int64_t>(t) * (kPartialVec4 / 2) + i] = make_uint4(bits, bits, bits, bits);
    return;
  }
  uint2* part = reinterpret_cast<uint2*>(partials);  // 4 bf16 per item
  float* lse = partials + blocks * kPartialVec4 * 2;
  const unsigned bits = pack(v, v);
#pragma unroll
  for (int u = 0; u < kMergeLoads; ++u) part[block * kPartialVec4 + u * kMergeThreads + threadIdx.x] = make_uint2(bits, bits);
  if (threadIdx.x < kProbeHeads) lse[block * kProbeHeads + threadIdx.x] = v;
  __syncthreads();  // the partial written by every thread
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(arrivals + t, 1u);
    unsigned seen = 0;
    for (long spins = 0; spins < (1l << 22); ++spins) {  // seconds: a wait that long is a bug
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(arrivals + t) : "memory");
      if (seen >= target) break;
    }
    if (seen < target) sink[1] = 1;  // the barrier gave up: the figure is void
  }
  __syncthreads();
  // Load u of a thread: item i = u * 256 + tid of the token's n x per float4 to merge, partial
  // j = i / per, output float4 e = i % per (the same e for every u when per <= 256).
  const int per = kPartialVec4 / n;                                // float4 of the output this block merges
  const int own = per >= kMergeThreads ? per / kMergeThreads : 1;  // output float4 per thread
  const int groups = per >= kMergeThreads ? 1 : kMergeThreads / per;  // threads per output float4
  const uint2* tok = part + b0 * kPartialVec4 + s * per;
  uint2 raw[kMergeLoads];
#pragma unroll
  for (int u = 0; u < kMergeLoads; ++u) {
    const int i = u * kMergeThreads + threadIdx.x;
    raw[u] = __ldcg(tok + static_cast<int64_t>(i / per) * kPartialVec4 + i % per);
  }
  float l = 0.f;  // the lse of every split and head, as a merge needs them
  for (int i = threadIdx.x; i < kProbeHeads * n; i += kMergeThreads) l += __ldcg(lse + b0 * kProbeHeads + i);
  float4 sum[kMaxMergeOwn];
#pragma unroll
  for (int q = 0; q < kMaxMergeOwn; ++q) sum[q] = make_float4(l, 0.f, 0.f, 0.f);
#pragma unroll
  for (int u = 0; u < kMergeLoads; ++u) {  // widened after every load is issued, as the kernels' combine does
    const float4 x = detail::widen_partial4(raw[u]);
#pragma unroll
    for (int q = 0; q < kMaxMergeOwn; ++q)
      if (u % own == q) sum[q].x += x.x, sum[q].y += x.y, sum[q].z += x.z, sum[q].w += x.w;
  }
  if (groups > 1) {  // threads tid, tid + per, ... hold parts of output float4 tid % per
    s_part[threadIdx.x] = sum[0];
    __syncthreads();
    if (threadIdx.x >= per) return;
    for (int g = 1; g < groups; ++g) {
      const float4 o = s_part[g * per + threadIdx.x];
      sum[0].x += o.x; sum[0].y += o.y; sum[0].z += o.z; sum[0].w += o.w;
    }
  }
  // Output float4 e = q * 256 + tid (own > 1) or tid: as bf16, 8 bytes each.
  uint2* o2 = reinterpret_cast<uint2*>(out) + static_cast<int64_t>(t) * kPartialVec4 + s * per;
#pragma unroll
  for (int q = 0; q < kMaxMergeOwn; ++q)
    if (q < own) o2[q * kMergeThreads + threadIdx.x] = make_uint2(pack(sum[q].x, sum[q].y), pack(sum[q].z, sum[q].w));
}

// The output floor with every token split the same way: block b is split b % kSplits of token
// b / kSplits, reading its chunk of index positions as the gather floor does.
template <int kSplits, int kRowsInFlight>
__global__ void __launch_bounds__(kMergeThreads, kFloorMinBlocks<kRowsInFlight>) gather_merge_kernel(const CacheRows cache, const int32_t* __restrict__ indices,
                                                                     int topk, int num_rows,
                                                                     float* partials, unsigned* arrivals, unsigned target,
                                                                     uint4* out, unsigned* sink) {
  __shared__ float4 s_part[kSplits > 8 ? kMergeThreads : 1];
  const int t = blockIdx.x / kSplits, s = blockIdx.x % kSplits;
  const unsigned acc = gather_block_rows<false, kRowsInFlight>(cache, indices, topk, num_rows, kSplits);
  const float v = static_cast<float>(acc & 0xffu);  // every store below waits for every load
  merge_split_outputs(v, t, s, kSplits, blockIdx.x, static_cast<int64_t>(t) * kSplits, gridDim.x, partials, arrivals, target, out,
                      sink, s_part);
}

// The output floor with each token split by its own valid rows, as fused rows decide it on the
// device (nothing precomputed): token t has kMaxRowSplits blocks; each loads the token's Q (16
// heads x 576 bf16) and whole index list with all loads in flight, compacts the valid rows in
// position order (the kernels' block_compact) and counts them (m); the token takes n splits,
// the smallest power of 2 with n x rows_per_split >= m (at most kMaxRowSplits); blocks s >= n
// leave, block s gathers rows [s m / n, (s + 1) m / n) and merges as above; a token of one
// split writes its output unmerged. 4 blocks per SM (64 registers), so that T = 8's 512 blocks
// are resident at once; the in-flight shape spills 8 bytes there (its merge takes a run-time n).
constexpr int kQVec4 = kProbeHeads * 576 / 8;                  // 1152
constexpr int kListPerThread = 2048 / kMergeThreads;           // 8: topk <= 2048
template <int kRowsInFlight>
__global__ void __launch_bounds__(kMergeThreads, 4) split_by_rows_kernel(const CacheRows cache, const uint4* __restrict__ q, const int32_t* __restrict__ indices,
                                                                      int topk, int num_rows, int rows_per_split, float* partials,
                                                                      unsigned* arrivals, unsigned calls, uint4* out, unsigned* sink) {
  constexpr int kWarps = kMergeThreads / 32;
  __shared__ int s_rows[2048];
  __shared__ int s_counts[kListPerThread * kWarps + 1];
  __shared__ float4 s_part[kMergeThreads];
  const int t = blockIdx.x / kMaxRowSplits, s = blockIdx.x % kMaxRowSplits;
  const int32_t* idx = indices + static_cast<int64_t>(t) * topk;
  int r[kListPerThread];
#pragma unroll
  for (int u = 0; u < kListPerThread; ++u) {
    const int k = u * kMergeThreads + threadIdx.x;
    r[u] = k < topk ? __ldg(idx + k) : -1;
  }
  unsigned acc = 0;
#pragma unroll
  for (int i = threadIdx.x; i < kQVec4; i += kMergeThreads) {
    const uint4 v = __ldg(q + static_cast<int64_t>(t) * kQVec4 + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  // The kernels' compaction: valid rows in position order.
  bool keep[kListPerThread];
#pragma unroll
  for (int u = 0; u < kListPerThread; ++u) keep[u] = detail::names_a_row(r[u], num_rows);
  const int m = detail::block_compact<kListPerThread, kMergeThreads>(keep, s_counts, [&](int rank, int u) { s_rows[rank] = r[u]; });
  __syncthreads();  // s_rows complete
  int n = 1;
  while (n < kMaxRowSplits && n * rows_per_split < m) n *= 2;
  if (s >= n) return;
  const int begin = s * m / n, end = (s + 1) * m / n;
  acc ^= xor_rows<false, kRowsInFlight>(cache, begin, end, num_rows, [&](int k) { return s_rows[k]; });
  const float v = static_cast<float>(acc & 0xffu);  // every store below waits for every load
  merge_split_outputs(v, t, s, n, blockIdx.x, static_cast<int64_t>(t) * kMaxRowSplits, gridDim.x, partials, arrivals,
                      calls * unsigned(n), out, sink, s_part);
}

__global__ void stream_read_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

__global__ void empty_kernel(unsigned* never) {
  extern __shared__ unsigned s_any[];
  if (never != nullptr) s_any[threadIdx.x] = 0;
}

__device__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_normal_kernel(uint16_t* dst, size_t n, float scale, uint64_t seed, bool fp16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    const float u1 = ((h >> 40) + 1) * (1.0f / 16777217.0f), u2 = ((h & 0xffffff) * (1.0f / 16777216.0f));
    const float z = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    const __nv_bfloat16 b = __float2bfloat16_rn(z * scale);
    dst[i] = fp16 ? __half_as_ushort(__float2half_rn(z * scale)) : *reinterpret_cast<const uint16_t*>(&b);
  }
}

// One 4-byte load per page of each range, from every block: each SM's translation caches and
// the shared ones hold the ranges' pages afterwards, while L2 gains one sector per page.
__global__ void touch_pages_kernel(PageRanges ranges, size_t page_bytes, unsigned* sink) {
  unsigned acc = 0;
  for (int r = 0; r < ranges.count; ++r) {
    const char* base = static_cast<const char*>(ranges.ptr[r]);
    const size_t pages = (ranges.bytes[r] + page_bytes - 1) / page_bytes;
    for (size_t i = threadIdx.x; i < pages; i += blockDim.x)
      acc ^= __ldcg(reinterpret_cast<const unsigned*>(base + i * page_bytes));
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}

}  // namespace

void launch_touch_pages(const PageRanges& ranges, size_t page_bytes, int blocks, unsigned* sink, cudaStream_t stream) {
  touch_pages_kernel<<<blocks, 256, 0, stream>>>(ranges, page_bytes, sink);
  DSA_CUDA_CHECK(cudaGetLastError());
}

void launch_empty(int blocks, int smem_bytes, cudaStream_t stream) {
  static int configured = 0;
  if (smem_bytes > configured) {
    DSA_CUDA_CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    configured = smem_bytes;
  }
  empty_kernel<<<blocks, 128, smem_bytes, stream>>>(nullptr);
  DSA_CUDA_CHECK(cudaGetLastError());
}

void launch_fill_normal_bf16(uint16_t* dst, size_t n, float scale, uint64_t seed, cudaStream_t stream) {
  fill_normal_kernel<<<1024, 256, 0, stream>>>(dst, n, scale, seed, false);
  DSA_CUDA_CHECK(cudaGetLastError());
}

void launch_fill_normal_fp16(uint16_t* dst, size_t n, float scale, uint64_t seed, cudaStream_t stream) {
  fill_normal_kernel<<<1024, 256, 0, stream>>>(dst, n, scale, seed, true);
  DSA_CUDA_CHECK(cudaGetLastError());
}

// The kernel of a floor's loop shape: rows_in_flight must be one of kFloorRowsInFlight.
template <class Kernel>
Kernel by_rows_in_flight(int rows_in_flight, Kernel one, Kernel many, const char* who) {
  if (rows_in_flight == 1) return one;
  if (rows_in_flight == kFloorRowsInFlight[1]) return many;
  throw Error(std::string(who) + ": rows_in_flight must be 1 or " + std::to_string(kFloorRowsInFlight[1]) + ", got " +
              std::to_string(rows_in_flight));
}

void launch_gather_rows(const CacheRows& cache, const int32_t* indices, int num_tokens, int topk, int num_rows, int splits,
                        unsigned* sink, cudaStream_t stream, bool l2_only, int rows_in_flight, unsigned* token_xor) {
  constexpr int kMany = kFloorRowsInFlight[1];
  const auto kernel = l2_only ? by_rows_in_flight(rows_in_flight, gather_rows_kernel<true, 1>, gather_rows_kernel<true, kMany>, __func__)
                              : by_rows_in_flight(rows_in_flight, gather_rows_kernel<false, 1>, gather_rows_kernel<false, kMany>, __func__);
  kernel<<<num_tokens * splits, kProbeThreads, 0, stream>>>(cache, indices, topk, num_rows, splits, sink, token_xor);
  DSA_CUDA_CHECK(cudaGetLastError());
}

int max_merge_blocks(int sm_count, int rows_in_flight) {
  int per_sm = 0;  // every instance has the same footprint but the shared partial sums
  const auto kernel = by_rows_in_flight(rows_in_flight, gather_merge_kernel<64, 1>, gather_merge_kernel<64, kFloorRowsInFlight[1]>, __func__);
  DSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kMergeThreads, 0));
  return per_sm * sm_count;
}

size_t merge_partials_bytes(int num_tokens, int splits) {
  return splits < 2 ? 0 : size_t(num_tokens) * splits * (size_t(kPartialVec4) * 8 + kProbeHeads * 4);
}

void launch_gather_merge(const CacheRows& cache, const int32_t* indices, int num_tokens, int topk,
                         int num_rows, int splits, float* partials, unsigned* arrivals, unsigned target, uint16_t* out,
                         unsigned* sink, cudaStream_t stream, int rows_in_flight) {
  auto* o = reinterpret_cast<uint4*>(out);
  const dim3 grid(static_cast<unsigned>(num_tokens * splits)), block(kMergeThreads);
  constexpr int kMany = kFloorRowsInFlight[1];
  switch (splits) {
#define DSA_MERGE_CASE(S)                                                                                              \
    case S:                                                                                                          \
      by_rows_in_flight(rows_in_flight, gather_merge_kernel<S, 1>, gather_merge_kernel<S, kMany>, __func__)          \
          <<<grid, block, 0, stream>>>(cache, indices, topk, num_rows, partials, arrivals, target, o, sink);          \
      break;
    DSA_MERGE_CASE(1) DSA_MERGE_CASE(2) DSA_MERGE_CASE(4) DSA_MERGE_CASE(8) DSA_MERGE_CASE(16) DSA_MERGE_CASE(32) DSA_MERGE_CASE(64) DSA_MERGE_CASE(128)
#undef DSA_MERGE_CASE
    default: throw Error("launch_gather_merge: splits must be a power of 2 in [1, 128], got " + std::to_string(splits));
  }
  DSA_CUDA_CHECK(cudaGetLastError());
}

int max_split_by_rows_blocks(int sm_count, int rows_in_flight) {
  int per_sm = 0;
  const auto kernel = by_rows_in_flight(rows_in_flight, split_by_rows_kernel<1>, split_by_rows_kernel<kFloorRowsInFlight[1]>, __func__);
  DSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kMergeThreads, 0));
  return per_sm * sm_count;
}

size_t split_by_rows_partials_bytes(int num_tokens) {
  return size_t(num_tokens) * kMaxRowSplits * (size_t(kPartialVec4) * 8 + kProbeHeads * 4);
}

void launch_split_by_rows(const CacheRows& cache, const uint16_t* q, const int32_t* indices, int num_tokens,
                          int topk, int num_rows, int rows_per_split, float* partials, unsigned* arrivals, unsigned calls,
                          uint16_t* out, unsigned* sink, cudaStream_t stream, int rows_in_flight) {
  if (topk > 2048) throw Error("launch_split_by_rows: topk must be <= 2048, got " + std::to_string(topk));
  if (rows_per_split < 1) throw Error("launch_split_by_rows: rows_per_split must be >= 1");
  by_rows_in_flight(rows_in_flight, split_by_rows_kernel<1>, split_by_rows_kernel<kFloorRowsInFlight[1]>, __func__)
      <<<static_cast<unsigned>(num_tokens * kMaxRowSplits), kMergeThreads, 0, stream>>>(
      cache, reinterpret_cast<const uint4*>(q), indices, topk,
      num_rows, rows_per_split, partials, arrivals, calls, reinterpret_cast<uint4*>(out), sink);
  DSA_CUDA_CHECK(cudaGetLastError());
}

// A warp per row: lane l takes ckv dims [16 l, 16 l + 16) (block l / 8), the block's absolute
// maximum by a reduction over its 8 lanes, then the e4m3 values, the scales and the kpe part.
__global__ void quantize_fp8_ds_mla_kernel(const uint16_t* __restrict__ ckv, const uint16_t* __restrict__ kpe, int64_t rows,
                                           uint8_t* __restrict__ out) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    float v[16], amax = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = __uint_as_float(static_cast<uint32_t>(ckv[r * kCkvDim + 16 * lane + i]) << 16);
      amax = fmaxf(amax, fabsf(v[i]));
    }
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax > 0.f ? amax / 448.f : 1.f;
    uint8_t* row = out + r * kFp8RowBytes;
#pragma unroll
    for (int i = 0; i < 16; ++i) row[16 * lane + i] = __nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3);
    if (lane % 8 == 0) reinterpret_cast<float*>(row + kFp8ScalesOffset)[lane / 8] = scale;
    reinterpret_cast<uint32_t*>(row + kFp8KpeOffset)[lane] = reinterpret_cast<const uint32_t*>(kpe + r * kKpeDim)[lane];
  }
}

void launch_quantize_fp8_ds_mla(const uint16_t* ckv, const uint16_t* kpe, int64_t rows, uint8_t* out, cudaStream_t stream) {
  quantize_fp8_ds_mla_kernel<<<1024, 256, 0, stream>>>(ckv, kpe, rows, out);
  DSA_CUDA_CHECK(cudaGetLastError());
}

void launch_stream_read(const void* src, size_t bytes, int sm_count, unsigned* sink, cudaStream_t stream) {
  stream_read_kernel<<<sm_count * 8, 512, 0, stream>>>(static_cast<const uint4*>(src), bytes / 16, sink);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::bench
