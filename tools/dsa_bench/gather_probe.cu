// dsa-bench gather-paths: the rate at which a CTA shaped like split-K's (4 warps, two per SM, the
// rows of a tile spread over the warps, no math) moves gathered rows (1024 B of ckv + 128 B of
// kpe, one token's 2048 rows in row order per CTA) into shared memory, by each path a kernel has.
//
// Why: split-K's loop at large T is bound by its loads, not by DRAM: over a cache that fits L2
// (50 pages) T = 1024 random takes 565 us against 611 over the benchmark's 8462 pages, and its
// load-only stage alone 530 (docs/perf.md run 641). More cp.async in flight does not lift it
// (16-row tiles x 4 stages, 3 CTAs per SM, 8 warps: all ~37 GB/s per SM). Measured here on the
// H100 (runs 643, 646-647): cp.async moves ~37 GB/s per SM from L2 however it is issued, a tile
// loaded by ld.global into registers and stored by st.shared ~62 (the row-order floor's rate,
// whose loads go to registers too); from the 8462-page cache 29 against 35. Mixing the paths in
// one tile (half of each row either way) gains little (43 from L2, 31 from DRAM) and inside
// split-K lost 15-18 % (runs 645, 651-652: the st.shared load the MIO pipe its math waits on);
// a whole 32-row tile in registers is 72 registers per thread that split-K's 205 cannot add.
#include "gather_probe.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "timing.h"
#include "workload.h"

namespace dsa::bench {
namespace {

constexpr int kTopk = 2048, kSlot = 1168, kWarps = 4, kThreads = kWarps * 32;
constexpr int kCkvVecs = 64, kKpeVecs = 8;  // 16-byte vectors per row part

enum Path : int { kCpAsync, kRegisters, kMixed };

// One CTA per token: its 2048 rows in tiles of BK, STAGES deep. kCpAsync: the kernel's loop (issue
// tile + STAGES - 1, wait for tile, sync). kRegisters: a tile's rows loaded into registers, then
// stored, the next tile's loads issued before the sync. kMixed: each row's first 512 bytes by
// registers, the rest by cp.async, in the kernel's order.
template <Path kPath, int BK, int STAGES>
__global__ void __launch_bounds__(kThreads) gather_probe_kernel(const uint4* __restrict__ ckv, const uint4* __restrict__ kpe,
                                                                const int* __restrict__ indices, unsigned* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int* rows = indices + static_cast<int64_t>(blockIdx.x) * kTopk;
  const uint32_t base = ptx::smem_addr(smem);
  constexpr int kTiles = kTopk / BK, kRowsPerWarp = BK / kWarps;
  const auto copy_tile = [&](int tile, bool first_halves) {
    const uint32_t stage = base + (tile % STAGES) * BK * kSlot;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * kWarps, row = rows[tile * BK + r];
      const uint4* c = ckv + static_cast<int64_t>(row) * kCkvVecs;
      const uint32_t dst = stage + r * kSlot + lane * 16;
      if (first_halves) ptx::cp_async_16_l2_128b(dst, c + lane);
      ptx::cp_async_16_l2_128b(dst + 512, c + lane + 32);
      ptx::cp_async_16_l2_128b_if(lane < kKpeVecs, dst + 1024, kpe + static_cast<int64_t>(row) * kKpeVecs + lane);
    }
    ptx::cp_async_commit();
  };
  if constexpr (kPath == kCpAsync) {
    for (int s = 0; s < STAGES - 1; ++s) copy_tile(s, true);
    for (int tile = 0; tile < kTiles; ++tile) {
      if (tile + STAGES - 1 < kTiles) copy_tile(tile + STAGES - 1, true);
      else ptx::cp_async_commit();
      ptx::cp_async_wait<STAGES - 1>();
      __syncthreads();
    }
  } else {
    constexpr int kVecs = kPath == kRegisters ? 3 : 1;  // per row and lane: ckv's two halves and kpe, or the first half
    uint4 held[kRowsPerWarp][kVecs];
    const auto load_tile = [&](int tile) {
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int row = rows[tile * BK + warp + i * kWarps];
        const uint4* c = ckv + static_cast<int64_t>(row) * kCkvVecs;
        held[i][0] = ptx::ld_v4_or_zero<ptx::LoadPath::cg_l2_128b>(true, c + lane);
        if constexpr (kPath == kRegisters) {
          held[i][1] = ptx::ld_v4_or_zero<ptx::LoadPath::cg_l2_128b>(true, c + lane + 32);
          held[i][2] = ptx::ld_v4_or_zero<ptx::LoadPath::cg_l2_128b>(lane < kKpeVecs, kpe + static_cast<int64_t>(row) * kKpeVecs + lane);
        }
      }
    };
    const auto store_tile = [&](int tile) {
      uint8_t* stage = smem + (tile % STAGES) * BK * kSlot;
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        uint4* d = reinterpret_cast<uint4*>(stage + (warp + i * kWarps) * kSlot) + lane;
        d[0] = held[i][0];
        if constexpr (kPath == kRegisters) {
          d[32] = held[i][1];
          if (lane < kKpeVecs) d[64] = held[i][2];
        }
      }
    };
    if constexpr (kPath == kRegisters) {
      load_tile(0);
      for (int tile = 0; tile < kTiles; ++tile) {
        store_tile(tile);
        if (tile + 1 < kTiles) load_tile(tile + 1);
        __syncthreads();
      }
    } else {
      copy_tile(0, true);
      for (int tile = 0; tile < kTiles; ++tile) {
        ptx::cp_async_wait<0>();
        __syncthreads();
        if (tile + 1 < kTiles) {
          load_tile(tile + 1);
          copy_tile(tile + 1, false);
          store_tile(tile + 1);
        }
      }
    }
  }
  if (threadIdx.x == 0 && smem[5] == 0x7f && smem[kSlot + 9] == 0x11) sink[0] = 1;  // keeps the copies live
}

// Each token's 2048 distinct random rows (the benchmark's `random` pattern), sorted as split-K's
// row order sorts them.
std::vector<int32_t> sorted_random_lists(int num_tokens, int num_pages) {
  workload::IndexSpec spec;
  spec.num_tokens = num_tokens, spec.topk = kTopk, spec.page_size = 64, spec.num_pages = num_pages;
  std::vector<int32_t> lists = workload::make_indices(spec, 20261128);
  for (int t = 0; t < num_tokens; ++t) std::sort(lists.begin() + int64_t{t} * kTopk, lists.begin() + int64_t{t + 1} * kTopk);
  return lists;
}

}  // namespace

int run_gather_probe(int num_tokens, int reps, const std::string& timer_name) {
  const Timer timer_kind = parse_timer(timer_name);
  int device = 0, sm_count = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  struct Case {
    const char* name;
    void (*kernel)(const uint4*, const uint4*, const int*, unsigned*);
    int smem;  // split-K's ~100 KB (two CTAs per SM) unless the line says otherwise
  };
  constexpr int kSplitKSmem = 2 * 32 * kSlot + 24 * 1024;
  const Case cases[] = {
      {"cp.async, 32-row tiles x 2 (split-K's)", gather_probe_kernel<kCpAsync, 32, 2>, kSplitKSmem},
      {"cp.async, 16-row tiles x 4", gather_probe_kernel<kCpAsync, 16, 4>, kSplitKSmem},
      {"cp.async, 32-row tiles x 4, one CTA per SM", gather_probe_kernel<kCpAsync, 32, 4>, 4 * 32 * kSlot + 24 * 1024},
      {"registers, 32-row tiles", gather_probe_kernel<kRegisters, 32, 2>, kSplitKSmem},
      {"registers, 16-row tiles", gather_probe_kernel<kRegisters, 16, 2>, kSplitKSmem},
      {"registers, 16-row tiles, 3 CTAs per SM", gather_probe_kernel<kRegisters, 16, 2>, 70 * 1024},
      {"mixed: first 512 B of a row by registers", gather_probe_kernel<kMixed, 32, 2>, kSplitKSmem},
  };
  const int page_counts[] = {50, 8462};  // 3.7 MB (L2-resident) and the benchmark's 555 MB cache
  const int max_rows = 8462 * 64;
  uint4 *ckv = nullptr, *kpe = nullptr;
  int* indices = nullptr;
  unsigned* sink = nullptr;
  DSA_CUDA_CHECK(cudaMalloc(&ckv, size_t{max_rows} * kCkvVecs * 16));
  DSA_CUDA_CHECK(cudaMalloc(&kpe, size_t{max_rows} * kKpeVecs * 16));
  DSA_CUDA_CHECK(cudaMemset(ckv, 1, size_t{max_rows} * kCkvVecs * 16));
  DSA_CUDA_CHECK(cudaMemset(kpe, 2, size_t{max_rows} * kKpeVecs * 16));
  DSA_CUDA_CHECK(cudaMalloc(&indices, sizeof(int) * kTopk * num_tokens));
  DSA_CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  KernelTimer timer(nullptr, /*flush_l2=*/true);
  const double bytes = double{1152} * kTopk * num_tokens;
  std::printf("gathered rows into shared memory: a CTA of %d threads per token, its %d rows in row order, no math; L2 flushed,\n"
              "%s; median of %d; %d SMs\n",
              kThreads, kTopk,
              timer_kind == Timer::cupti ? "then one untimed call (the rows that fit stay in L2), then the timed one; CUPTI kernel span"
                                         : "events, no untimed call",
              reps, sm_count);
  for (const int pages : page_counts) {
    const std::vector<int32_t> lists = sorted_random_lists(num_tokens, pages);
    DSA_CUDA_CHECK(cudaMemcpy(indices, lists.data(), sizeof(int) * lists.size(), cudaMemcpyHostToDevice));
    std::printf("T = %d over %d pages of 64 rows (%.1f MB)\n", num_tokens, pages, pages * 64 * 1152 / 1e6);
    for (const Case& c : cases) {
      DSA_CUDA_CHECK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem));
      int per_sm = 0;
      DSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, c.kernel, kThreads, c.smem));
      const auto call = [&] { c.kernel<<<num_tokens, kThreads, c.smem>>>(ckv, kpe, indices, sink); };
      if (timer_kind == Timer::cupti) timer.set_after_flush(call, 1);
      const double us = timer.time(timer_kind, call, 1, reps, 3).median_us;
      DSA_CUDA_CHECK(cudaGetLastError());
      const double gbs = bytes / us / 1e3;
      std::printf("  %-46s %d CTAs/SM %9.1f us %7.0f GB/s %6.1f GB/s per SM\n", c.name, per_sm, us, gbs, gbs / sm_count);
    }
  }
  DSA_CUDA_CHECK(cudaFree(ckv));
  DSA_CUDA_CHECK(cudaFree(kpe));
  DSA_CUDA_CHECK(cudaFree(indices));
  DSA_CUDA_CHECK(cudaFree(sink));
  return 0;
}

}  // namespace dsa::bench
