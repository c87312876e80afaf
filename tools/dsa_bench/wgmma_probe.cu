// dsa-bench wgmma: what the tensor cores give the shared-rows kernels' wgmma shapes, alone and
// mixed, with no memory traffic (operands stay in shared memory and registers).
//
// Why: the prefill kernel's scores warpgroup issues S as 36 m64n32k16 wgmmas per 32 entries
// beside two warpgroups of m64n256k16 P V, and both designs measured so far keep the tensor pipe
// about half busy (docs/perf.md runs 239, 253-257). Whether a shape mix can do better is a
// property of the hardware, so it is measured here on its own: one CTA per SM, each of its three
// warpgroups given a role (a chain of k-steps into one accumulator, as a kernel issues per tile:
// fence, the chain, commit, wait), all running for the same number of cycles.
// Measured on the H100 (run 259, docs/perf.md): every mix of the kernels' shapes over three
// warpgroups keeps the pipe ~100 % busy; one warpgroup issuing m64n32k16 alone 60 % (26.6
// cycles a step), two 96 %. The kernels' ~50 % is the gaps in their own chains. The m64n64k16
// chain with both operands from shared memory is FlashMLA's sparse-prefill shape (docs/perf.md,
// runs 266-278). m64n32k16 with both operands from shared memory reads 3 KB per 16 cycles of
// math, more than the ~128 bytes per cycle shared memory gives: three warpgroups of it reach 66 %
// (run 369), the bound of a design that puts 2 tokens' heads in N (S^T = K Q^T).
#include "wgmma_probe.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "common/wgmma.cuh"

namespace dsa::bench {
namespace {

// A warpgroup's role: its wgmma shape and the k-steps per group (per tile in the kernels).
enum WgRole : int { kIdle = 0, kS32Rs, kS32Ss, kS64Rs, kPv256, kPv128, kS64Ss };
struct RoleShape {
  const char* name;
  int n, steps;
};
constexpr RoleShape kRoleShapes[] = {
    {"-", 0, 0},
    {"S n32 RS x36", 32, 36},   // the one-CTA kernel's S per 32 entries (its 24 register k-steps, as all 36)
    {"S n32 SS x36", 32, 36},   // the same with A from shared memory
    {"S n64 RS x18", 64, 18},   // the two-CTA design's S per 64 entries
    {"PV n256 RS x2", 256, 2},  // the one-CTA kernel's P V per 32 entries (B N-major)
    {"PV n128 RS x4", 128, 4},  // the two-CTA design's P V per 64 entries
    {"S n64 SS x36", 64, 36},   // FlashMLA's schedule: S per 64 entries, Q and K from shared memory
};
constexpr int kWarpgroups = 3;
constexpr int kThreads = kWarpgroups * 128;
constexpr int kSmemBytes = 64 * 1024 + 1024;
constexpr int kAOffset = 40 * 1024;  // SS: A (64 rows x 3 blocks of 64 dims) after B's 40 KB

// One role's loop until `budget` cycles have passed; returns the groups issued. The warpgroup
// decides together (its first thread's clock, through shared memory and a named barrier, every
// kGroupsPerCheck groups): warps that left at different iterations would break wgmma's
// warpgroup-wide .aligned instructions (an illegal instruction, seen in the first version).
constexpr int kGroupsPerCheck = 8;
template <int kRole>
__device__ long long run_role(uint32_t base, long long start, long long budget, float* sink, volatile int* stop_flag, int barrier) {
  constexpr int kN = kRoleShapes[kRole].n, kSteps = kRoleShapes[kRole].steps;
  float acc[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.f;
  const uint32_t lane_bits = 0x3c003c00u ^ ((threadIdx.x * 2654435761u) & 0x007f007fu);  // small bf16 pairs
  const uint32_t a[4] = {lane_bits, lane_bits ^ 0x10001u, lane_bits ^ 0x20002u, lane_bits ^ 0x30003u};
  long long groups = 0;
  int stop = 0;
  do {
#pragma unroll 1
    for (int r = 0; r < kGroupsPerCheck; ++r) {
      wgmma::fence();
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        if constexpr (kRole == kS32Rs)
          wgmma::mma_rs_bf16_n32(acc, a, wgmma::desc_sw128(base + (k / 4) * 32 * 128 + (k % 4) * 32, 16, 1024), k > 0);
        else if constexpr (kRole == kS32Ss)
          wgmma::mma_ss_bf16_n32(acc, wgmma::desc_sw128(base + kAOffset + ((k / 4) % 3) * 64 * 128 + (k % 4) * 32, 16, 1024),
                                 wgmma::desc_sw128(base + (k / 4) * 32 * 128 + (k % 4) * 32, 16, 1024), k > 0);
        else if constexpr (kRole == kS64Ss)  // B cycles over 4 blocks of 64 rows (32 KB), A over 3
          wgmma::mma_ss_bf16_n64(acc, wgmma::desc_sw128(base + kAOffset + ((k / 4) % 3) * 64 * 128 + (k % 4) * 32, 16, 1024),
                                 wgmma::desc_sw128(base + ((k / 4) % 4) * 64 * 128 + (k % 4) * 32, 16, 1024), k > 0);
        else if constexpr (kRole == kS64Rs)
          wgmma::mma_rs_bf16_n64(acc, a, wgmma::desc_sw128(base + (k / 4) * 64 * 128 + (k % 4) * 32, 16, 1024), k > 0);
        else if constexpr (kRole == kPv256)
          wgmma::mma_rs_bf16_n256_bT(acc, a, wgmma::desc_sw128(base + k * 16 * 128, 32 * 128, 1024), 1);
        else
          wgmma::mma_rs_bf16_n128_bT(acc, a, wgmma::desc_sw128(base + k * 16 * 128, 64 * 128, 1024), 1);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::pin(acc);
    }
    groups += kGroupsPerCheck;
    if (threadIdx.x % 128 == 0) *stop_flag = clock64() - start >= budget;
    ptx::named_barrier_sync(barrier, 128);
    stop = *stop_flag;
    ptx::named_barrier_sync(barrier, 128);  // read by all before the next write
  } while (!stop);
  if (acc[0] == 1234.5f) *sink = acc[1];  // never true; keeps the chain live
  return groups;
}

// out[(block * 3 + wg) * 2 + {0, 1}] = {groups, cycles} of each warpgroup.
__global__ void __launch_bounds__(kThreads, 1) wgmma_probe_kernel(int3 roles, long long budget, long long* out, float* sink) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ int stop_flags[kWarpgroups];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023) & ~1023u;
  uint32_t* words = reinterpret_cast<uint32_t*>(smem_raw + (base - raw));
  for (int i = threadIdx.x; i < 64 * 1024 / 4; i += kThreads) words[i] = 0x3c003c00u ^ ((i * 2246822519u) & 0x007f007fu);
  wgmma::fence_proxy_async_smem();
  __syncthreads();
  const int wg = threadIdx.x / 128;
  const int role = wg == 0 ? roles.x : wg == 1 ? roles.y : roles.z;
  const long long start = clock64();
  long long groups = 0;
  switch (role) {
    case kS32Rs: groups = run_role<kS32Rs>(base, start, budget, sink, &stop_flags[wg], 1 + wg); break;
    case kS32Ss: groups = run_role<kS32Ss>(base, start, budget, sink, &stop_flags[wg], 1 + wg); break;
    case kS64Rs: groups = run_role<kS64Rs>(base, start, budget, sink, &stop_flags[wg], 1 + wg); break;
    case kPv256: groups = run_role<kPv256>(base, start, budget, sink, &stop_flags[wg], 1 + wg); break;
    case kPv128: groups = run_role<kPv128>(base, start, budget, sink, &stop_flags[wg], 1 + wg); break;
    case kS64Ss: groups = run_role<kS64Ss>(base, start, budget, sink, &stop_flags[wg], 1 + wg); break;
    default: break;
  }
  const long long cycles = clock64() - start;
  if (threadIdx.x % 128 == 0) {
    out[(blockIdx.x * kWarpgroups + wg) * 2] = groups;
    out[(blockIdx.x * kWarpgroups + wg) * 2 + 1] = role == kIdle ? 0 : cycles;
  }
}

struct Mix {
  const char* name;
  int roles[kWarpgroups];
};

}  // namespace

int run_wgmma_probe() {
  int device = 0, sm_count = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  DSA_CUDA_CHECK(cudaFuncSetAttribute(wgmma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const Mix mixes[] = {
      {"S n32 RS alone", {kS32Rs, kIdle, kIdle}},
      {"S n32 SS alone", {kS32Ss, kIdle, kIdle}},
      {"S n64 RS alone", {kS64Rs, kIdle, kIdle}},
      {"S n32 RS, 2 warpgroups", {kS32Rs, kS32Rs, kIdle}},
      {"S n32 RS, 3 warpgroups", {kS32Rs, kS32Rs, kS32Rs}},
      {"PV n256, 2 warpgroups", {kIdle, kPv256, kPv256}},
      {"PV n128, 2 warpgroups", {kIdle, kPv128, kPv128}},
      {"one-CTA kernel: S n32 RS + PV n256 x2", {kS32Rs, kPv256, kPv256}},
      {"one-CTA kernel, S from smem: S n32 SS + PV n256 x2", {kS32Ss, kPv256, kPv256}},
      {"two-CTA design: S n64 RS + PV n128 x2", {kS64Rs, kPv128, kPv128}},
      {"n256, 3 warpgroups (the ceiling)", {kPv256, kPv256, kPv256}},
      {"S n64 SS alone", {kS64Ss, kIdle, kIdle}},
      {"S n64 SS, 2 warpgroups", {kS64Ss, kS64Ss, kIdle}},
      {"FlashMLA's shapes: S n64 SS x2 + PV n256", {kS64Ss, kS64Ss, kPv256}},
      // Both operands from shared memory at N = 32 (3 KB per 16 cycles of math): what S^T = K Q^T
      // of 2 tokens (M = 64 keys, N = 32 heads) would issue; 66 % on the H100 (run 369).
      {"S n32 SS, 3 warpgroups", {kS32Ss, kS32Ss, kS32Ss}},
  };
  const long long budget = 2000000;  // cycles per warpgroup (~1.1 ms)
  long long* d_out = nullptr;
  float* d_sink = nullptr;
  DSA_CUDA_CHECK(cudaMalloc(&d_out, sizeof(long long) * sm_count * kWarpgroups * 2));
  DSA_CUDA_CHECK(cudaMalloc(&d_sink, sizeof(float)));
  std::printf("wgmma rates, one CTA per SM (%d SMs), 3 warpgroups, each a role issuing k-step chains (fence, chain, commit, wait)\n"
              "for %lld cycles; no memory traffic. 'cycles' is per wgmma, the median over SMs; 'math' is N / 2, its cycles at\n"
              "2048 bf16 MAC per cycle per SM (4 tensor cores x 512); busy = MACs issued / (2048 x cycles).\n\n",
              sm_count, budget);
  std::printf("%-52s %-34s %-34s %-34s %7s\n", "mix", "warpgroup 0: cycles (math)", "warpgroup 1", "warpgroup 2", "busy");
  std::vector<long long> h(size_t(sm_count) * kWarpgroups * 2);
  for (const Mix& m : mixes) {
    wgmma_probe_kernel<<<sm_count, kThreads, kSmemBytes>>>(make_int3(m.roles[0], m.roles[1], m.roles[2]), budget / 10, d_out, d_sink);
    wgmma_probe_kernel<<<sm_count, kThreads, kSmemBytes>>>(make_int3(m.roles[0], m.roles[1], m.roles[2]), budget, d_out, d_sink);
    DSA_CUDA_CHECK(cudaGetLastError());
    DSA_CUDA_CHECK(cudaMemcpy(h.data(), d_out, sizeof(long long) * h.size(), cudaMemcpyDeviceToHost));
    std::printf("%-52s", m.name);
    std::vector<double> busy;
    for (int b = 0; b < sm_count; ++b) {
      double macs = 0, cycles = 0;
      for (int w = 0; w < kWarpgroups; ++w) {
        const RoleShape& r = kRoleShapes[m.roles[w]];
        const long long* g = &h[(size_t(b) * kWarpgroups + w) * 2];
        if (r.n == 0 || g[1] == 0) continue;
        macs += double(g[0]) * r.steps * 64.0 * r.n * 16.0;
        cycles = std::max(cycles, double(g[1]));
      }
      busy.push_back(macs / (2048.0 * cycles));
    }
    for (int w = 0; w < kWarpgroups; ++w) {
      const RoleShape& r = kRoleShapes[m.roles[w]];
      char cell[64] = "-";
      if (r.n > 0) {
        std::vector<double> per;
        for (int b = 0; b < sm_count; ++b) {
          const long long* g = &h[(size_t(b) * kWarpgroups + w) * 2];
          per.push_back(double(g[1]) / (double(g[0]) * r.steps));
        }
        std::sort(per.begin(), per.end());
        std::snprintf(cell, sizeof cell, "%s: %.1f (%d)", r.name, per[per.size() / 2], r.n / 2);
      }
      std::printf(" %-34s", cell);
    }
    std::sort(busy.begin(), busy.end());
    std::printf(" %6.1f%%\n", 100.0 * busy[busy.size() / 2]);
  }
  DSA_CUDA_CHECK(cudaFree(d_out));
  DSA_CUDA_CHECK(cudaFree(d_sink));
  return 0;
}

}  // namespace dsa::bench
