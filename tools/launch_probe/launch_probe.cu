// dsa-launch-probe: how soon can a kernel that a device-side decision chose start, and what does
// each way of launching it cost? The share probe (src/sparse_mla/share_choice.cuh) launches every
// kernel of both halves from the host and lets the unchosen grids leave at once; their CTAs still
// pass through every SM (docs/perf.md runs 698, 701, 703). Shapes like the forward's: a 16-CTA
// probe; "work": T CTAs of 128 threads and 100 KB of shared memory, each busy 5 µs; empty grids:
// T / 4 CTAs of 200 KB. Printed, in µs after the probe's start (the work's own in `alone` and
// `pdl-next`; %globaltimer, medians of 35 calls): the first work CTA's start, the last one's
// end, and where a mode has them, the end of a relay grid and the start of the host's next
// kernel on the stream. Results: docs/perf.md runs 705-706.
//   alone        the work alone (times after its own start);
//   host         probe, then work by programmatic dependent launch (any host order's floor);
//   host-empty   probe, 3 empty grids, then work, all by dependent launch (the share probe's
//                split-K side today);
//   device       the probe's last CTA launches the work (CUDA dynamic parallelism,
//                cudaStreamFireAndForget);
//   device-next  as device, then a 1-CTA kernel launched by the host after the probe: does the
//                stream's next work wait for a fire-and-forget child (the forward's output must
//                be complete for it)?
//   device-relay the probe launches a T / 4-CTA relay grid (each CTA busy 5 µs) whose last CTA
//                launches the work: one device-side hop after a grid, as a chain of kernels
//                launched from the device would take;
//   pdl-next     no probe: the work, then a grid launched by dependent launch whose CTAs leave
//                without waiting (as a share-probe plan's unchosen grids do), then a 1-CTA
//                kernel launched plainly: does a plain launch wait for the work, or only for the
//                grid before it? (Why a share-probe chain's last grid must wait: share_choice.cuh.)
//   device-tail  (only with --tail) the probe's last CTA launches the work by
//                cudaStreamTailLaunch; it hung on the H200 in runs 705 and 706, so run it under a timeout.
// Built with relocatable device code and the device runtime (CMake: CUDA_SEPARABLE_COMPILATION),
// unlike the library. Usage: dsa-launch-probe [--tail]. Exit status 77 without a CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

#define LP_CHECK(x)                                                                                \
  do {                                                                                             \
    const cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "dsa-launch-probe: %s at line %d\n", cudaGetErrorString(e_), __LINE__); \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

constexpr int kProbeCtas = 16, kThreads = 128, kWorkSmem = 100 * 1024, kEmptySmem = 200 * 1024, kBusyNs = 5000;
enum Mode { alone, host, host_empty, device, device_next, device_relay, pdl_next, device_tail, kModes };
const char* const kModeNames[kModes] = {"alone",       "host",         "host-empty", "device",
                                        "device-next", "device-relay", "pdl-next",   "device-tail"};
// What the probe's last CTA launches.
enum class ProbeLaunch { none, work, work_tail, relay };

// Stamps of one call (ns, %globaltimer): reset by the host before each call.
struct Stamps {
  unsigned long long probe_start, work_start, work_end, relay_end, next_start;
};
constexpr unsigned long long kNever = ~0ull;
__device__ Stamps g_stamps;
__device__ unsigned g_probes_done, g_relays_done;
__device__ int g_choice;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// griddepcontrol: wait for the previous grid's completion; let the next grid launch.
__device__ __forceinline__ void wait_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void release_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void busy(int ns) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < static_cast<unsigned long long>(ns)) {
  }
}
// Thread 0 of the grid's last CTA to get here returns true (the others false); `done` is reset.
__device__ __forceinline__ bool last_cta(unsigned* done) {
  if (threadIdx.x != 0) return false;
  __threadfence();
  if (atomicAdd(done, 1u) != gridDim.x - 1) return false;
  *done = 0;
  return true;
}

__global__ void work_kernel(int busy_ns) {
  extern __shared__ char smem[];
  wait_prerequisites();
  release_dependents();
  if (threadIdx.x == 0) {
    atomicMin(&g_stamps.work_start, global_ns());
    smem[0] = 1;
  }
  busy(busy_ns);
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&g_stamps.work_end, global_ns() + smem[0] - 1);
}

// A grid the probe did not choose: its CTAs read the choice and leave.
__global__ void unchosen_kernel() {
  extern __shared__ char smem[];
  wait_prerequisites();
  release_dependents();
  if (*static_cast<volatile int*>(&g_choice) == 1) smem[threadIdx.x] = 1;
}

// A dependent grid whose CTAs leave without waiting for the grid before it.
__global__ void leave_kernel() { release_dependents(); }

// A grid whose last CTA launches the work from the device.
__global__ void relay_kernel(int work_ctas, int busy_ns) {
  extern __shared__ char smem[];
  if (threadIdx.x == 0) smem[0] = 1;
  busy(busy_ns);
  __syncthreads();
  if (!last_cta(&g_relays_done)) return;
  g_stamps.relay_end = global_ns() + smem[0] - 1;
  work_kernel<<<work_ctas, kThreads, kWorkSmem, cudaStreamFireAndForget>>>(busy_ns);
}

__global__ void next_kernel() {
  if (threadIdx.x == 0) g_stamps.next_start = global_ns();
}

__global__ void probe_kernel(int work_ctas, int busy_ns, ProbeLaunch what) {
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicMin(&g_stamps.probe_start, global_ns());
  release_dependents();
  __syncthreads();
  if (!last_cta(&g_probes_done)) return;  // every probe CTA has counted: the decision could be made here
  switch (what) {
    case ProbeLaunch::none: break;
    case ProbeLaunch::work: work_kernel<<<work_ctas, kThreads, kWorkSmem, cudaStreamFireAndForget>>>(busy_ns); break;
    case ProbeLaunch::work_tail: work_kernel<<<work_ctas, kThreads, kWorkSmem, cudaStreamTailLaunch>>>(busy_ns); break;
    case ProbeLaunch::relay:
      relay_kernel<<<work_ctas / 4, kThreads, kWorkSmem, cudaStreamFireAndForget>>>(work_ctas, busy_ns);
      break;
  }
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

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One call of `mode` at T tokens (the launches only).
cudaError_t launch_mode(Mode mode, int T) {
  cudaError_t e = cudaSuccess;
  const ProbeLaunch what = mode == device || mode == device_next ? ProbeLaunch::work
                           : mode == device_relay               ? ProbeLaunch::relay
                           : mode == device_tail                ? ProbeLaunch::work_tail
                                                                : ProbeLaunch::none;
  if (mode != alone && mode != pdl_next) e = launch(probe_kernel, kProbeCtas, 0, false, T, kBusyNs, what);
  for (int i = 0; mode == host_empty && i < 3 && e == cudaSuccess; ++i) e = launch(unchosen_kernel, T / 4, kEmptySmem, true);
  if (e == cudaSuccess && (mode == alone || mode == host || mode == host_empty || mode == pdl_next))
    e = launch(work_kernel, T, kWorkSmem, mode == host || mode == host_empty, kBusyNs);
  if (e == cudaSuccess && mode == pdl_next) e = launch(leave_kernel, T / 4, 0, true);
  if (e == cudaSuccess && (mode == device_next || mode == pdl_next)) e = launch(next_kernel, 1, 0, false);
  return e;
}

int run(bool tail) {
  LP_CHECK(cudaFuncSetAttribute(work_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kWorkSmem));
  LP_CHECK(cudaFuncSetAttribute(relay_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kWorkSmem));
  LP_CHECK(cudaFuncSetAttribute(unchosen_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kEmptySmem));
  std::printf("%6s  %-13s %12s %10s %10s %11s   (us after the probe's start, or the work's)\n", "T", "mode", "work starts", "work ends",
              "relay ends", "next starts");
  for (int T : {2048, 8192}) {
    for (int m = 0; m < kModes; ++m) {
      const Mode mode = static_cast<Mode>(m);
      if (mode == device_tail && !tail) continue;
      std::fflush(stdout);  // a hung mode must not take the lines before it along
      std::vector<double> starts, ends, relay_ends, next_starts;
      for (int call = 0; call < 40; ++call) {
        const Stamps reset{kNever, kNever, 0, 0, 0};
        LP_CHECK(cudaMemcpyToSymbol(g_stamps, &reset, sizeof reset));
        LP_CHECK(cudaDeviceSynchronize());
        LP_CHECK(launch_mode(mode, T));
        LP_CHECK(cudaDeviceSynchronize());
        Stamps s{};
        LP_CHECK(cudaMemcpyFromSymbol(&s, g_stamps, sizeof s));
        if (s.work_start == kNever) {
          std::fprintf(stderr, "dsa-launch-probe: T %d, %s: the work did not run\n", T, kModeNames[mode]);
          return 1;
        }
        if (call < 5) continue;
        const double origin = static_cast<double>(mode == alone || mode == pdl_next ? s.work_start : s.probe_start);
        const auto us = [&](unsigned long long t) { return (static_cast<double>(t) - origin) * 1e-3; };
        starts.push_back(us(s.work_start));
        ends.push_back(us(s.work_end));
        if (s.relay_end != 0) relay_ends.push_back(us(s.relay_end));
        if (s.next_start != 0) next_starts.push_back(us(s.next_start));
      }
      std::printf("%6d  %-13s %12.1f %10.1f", T, kModeNames[mode], median(starts), median(ends));
      if (relay_ends.empty()) std::printf(" %10s", "-"); else std::printf(" %10.1f", median(relay_ends));
      if (next_starts.empty()) std::printf(" %11s\n", "-"); else std::printf(" %11.1f\n", median(next_starts));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool tail = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tail") == 0) {
      tail = true;
    } else {
      std::fprintf(stderr, "usage: dsa-launch-probe [--tail]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "dsa-launch-probe: no CUDA device\n");
    return 77;
  }
  return run(tail);
}
