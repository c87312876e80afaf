// dsa-launch-probe: how soon can a kernel that a device-side decision chose start, and what does
// each way of launching it cost? The share probe (src/sparse_mla/share_choice.cuh) launches every
// kernel of both halves from the host and lets the unchosen grids leave at once; their CTAs still
// pass through every SM (docs/perf.md runs 698, 701, 703). This measures, with shapes like the
// forward's (a 16-CTA probe; "work": T CTAs of 128 threads and 100 KB of shared memory, each busy
// 5 µs; empty grids: T / 4 CTAs of 200 KB), the first work CTA's start and the last one's end
// after the probe's start (%globaltimer, median of 35 calls):
//   1. the work alone;
//   2. probe, then work by programmatic dependent launch (the floor of any host-launched order);
//   3. probe, 3 empty grids, then work, all by dependent launch (the share probe's split-K side);
//   4. the probe's last CTA launches the work itself (CUDA dynamic parallelism,
//      cudaStreamFireAndForget).
// A tail launch (cudaStreamTailLaunch) from the same place hung on the H200 (run 705) and is left
// out. Built with relocatable device code and the device runtime (CMake: CUDA_SEPARABLE_COMPILATION),
// unlike the library. Exit status 77 without a CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

#define LP_CHECK(x)                                                                         \
  do {                                                                                      \
    const cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "dsa-launch-probe: %s at line %d\n", cudaGetErrorString(e_), __LINE__); \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

constexpr int kProbeCtas = 16, kThreads = 128, kWorkSmem = 100 * 1024, kEmptySmem = 200 * 1024, kBusyNs = 5000;
enum Mode { alone, probe_then_work, probe_empty_grids_work, device_launch, kModes };
const char* const kModeNames[kModes] = {"work alone", "probe -> work (host, dependent launch)",
                                        "probe -> 3 empty T/4 grids -> work (host, dependent launch)",
                                        "probe's last CTA launches work (device, fire-and-forget)"};

__device__ unsigned long long g_probe_start, g_work_start, g_work_end;
__device__ unsigned g_probes_done;
__device__ int g_choice;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// griddepcontrol: wait for the previous grid's completion; let the next grid launch.
__device__ __forceinline__ void wait_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void release_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }

__global__ void work_kernel(int busy_ns) {
  extern __shared__ char smem[];
  wait_prerequisites();
  release_dependents();
  if (threadIdx.x == 0) {
    atomicMin(&g_work_start, global_ns());
    smem[0] = 1;
  }
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < static_cast<unsigned long long>(busy_ns)) {
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&g_work_end, global_ns() + smem[0] - 1);
}

// A grid the probe did not choose: its CTAs read the choice and leave.
__global__ void unchosen_kernel() {
  extern __shared__ char smem[];
  wait_prerequisites();
  release_dependents();
  if (*static_cast<volatile int*>(&g_choice) == 1) smem[threadIdx.x] = 1;
}

__global__ void probe_kernel(int work_ctas, int busy_ns, bool launch_work) {
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicMin(&g_probe_start, global_ns());
  release_dependents();
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(&g_probes_done, 1u) != kProbeCtas - 1) return;
  g_probes_done = 0;  // the last CTA: every probe CTA has counted, the decision could be made here
  if (launch_work) work_kernel<<<work_ctas, kThreads, kWorkSmem, cudaStreamFireAndForget>>>(busy_ns);
}

template <typename... Args>
cudaError_t launch(void (*kernel)(Args...), int ctas, int smem, bool dependent, Args... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.attrs = &attribute;
  config.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

int run() {
  LP_CHECK(cudaFuncSetAttribute(work_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kWorkSmem));
  LP_CHECK(cudaFuncSetAttribute(unchosen_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kEmptySmem));
  std::printf("%6s  %-62s %12s %10s\n", "T", "launch", "work starts", "ends (us)");
  for (int T : {2048, 8192}) {
    for (int mode = 0; mode < kModes; ++mode) {
      std::vector<double> starts, ends;
      for (int call = 0; call < 40; ++call) {
        const unsigned long long early = ~0ull, late = 0;
        LP_CHECK(cudaMemcpyToSymbol(g_probe_start, &early, sizeof early));
        LP_CHECK(cudaMemcpyToSymbol(g_work_start, &early, sizeof early));
        LP_CHECK(cudaMemcpyToSymbol(g_work_end, &late, sizeof late));
        LP_CHECK(cudaDeviceSynchronize());
        if (mode != alone) LP_CHECK(launch(probe_kernel, kProbeCtas, 0, false, T, kBusyNs, mode == device_launch));
        if (mode == probe_empty_grids_work)
          for (int i = 0; i < 3; ++i) LP_CHECK(launch(unchosen_kernel, T / 4, kEmptySmem, true));
        if (mode != device_launch) LP_CHECK(launch(work_kernel, T, kWorkSmem, mode != alone, kBusyNs));
        LP_CHECK(cudaDeviceSynchronize());
        unsigned long long probe_start = 0, work_start = 0, work_end = 0;
        LP_CHECK(cudaMemcpyFromSymbol(&probe_start, g_probe_start, sizeof probe_start));
        LP_CHECK(cudaMemcpyFromSymbol(&work_start, g_work_start, sizeof work_start));
        LP_CHECK(cudaMemcpyFromSymbol(&work_end, g_work_end, sizeof work_end));
        if (work_start == ~0ull) {
          std::fprintf(stderr, "dsa-launch-probe: T %d, %s: the work did not run\n", T, kModeNames[mode]);
          return 1;
        }
        const unsigned long long origin = mode == alone ? work_start : probe_start;
        if (call >= 5) starts.push_back((work_start - origin) * 1e-3), ends.push_back((work_end - origin) * 1e-3);
      }
      std::sort(starts.begin(), starts.end());
      std::sort(ends.begin(), ends.end());
      std::printf("%6d  %-62s %12.1f %10.1f\n", T, kModeNames[mode], starts[starts.size() / 2], ends[ends.size() / 2]);
    }
  }
  return 0;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "dsa-launch-probe: no CUDA device\n");
    return 77;
  }
  return run();
}
