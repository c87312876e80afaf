#include "timing.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <cupti.h>

#include "call_kernels.h"
#include "common/cuda_check.h"

namespace dsa::bench {
namespace {

constexpr size_t kFlushBytes = size_t(256) << 20;  // > 5x the 50 MB L2 of an H100

std::mutex g_mu;
std::vector<KernelRecord> g_records;

#define CUPTI_CHECK(call)                                                          \
  do {                                                                             \
    CUptiResult r_ = (call);                                                       \
    if (r_ != CUPTI_SUCCESS) {                                                     \
      const char* s_ = nullptr;                                                    \
      cuptiGetResultString(r_, &s_);                                               \
      throw ::dsa::Error(std::string(#call) + " failed: " + (s_ ? s_ : "?"));      \
    }                                                                              \
  } while (0)

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = size_t(4) << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      g_records.push_back({k->start, k->end, k->name != nullptr ? k->name : ""});
    }
  }
  std::free(buffer);
}

Timing summarize(std::vector<double> us, Timer timer) {
  if (us.empty()) throw Error("timer produced no samples");
  std::sort(us.begin(), us.end());
  Timing t;
  t.median_us = us[us.size() / 2];
  t.min_us = us.front();
  t.max_us = us.back();
  t.reps = static_cast<int>(us.size());
  t.timer = timer;
  return t;
}

}  // namespace

Timer parse_timer(const std::string& name) {
  if (name == "cupti") return Timer::cupti;
  if (name == "events") return Timer::events;
  if (name == "graph") return Timer::graph;
  throw Error("timer: unknown '" + name + "' (cupti, events, graph)");
}

const char* to_string(Timer t) {
  switch (t) {
    case Timer::cupti: return "cupti";
    case Timer::events: return "events";
    case Timer::graph: return "graph";
  }
  return "?";
}

cudaStream_t bench_stream() {
  static const cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    DSA_CUDA_CHECK(cudaStreamCreate(&s));  // blocking: ordered with the legacy stream (timing.h)
    return s;
  }();
  return stream;
}

KernelTimer::KernelTimer(cudaStream_t stream, bool flush_l2) : stream_(stream), flush_l2_(flush_l2) {
  DSA_CUDA_CHECK(cudaMalloc(&flush_buf_, kFlushBytes));
  DSA_CUDA_CHECK(cudaEventCreate(&e0_));
  DSA_CUDA_CHECK(cudaEventCreate(&e1_));
}

KernelTimer::~KernelTimer() {
  cudaFree(flush_buf_);
  cudaEventDestroy(e0_);
  cudaEventDestroy(e1_);
}

void KernelTimer::flush() {
  static int value = 0;
  if (flush_l2_) DSA_CUDA_CHECK(cudaMemsetAsync(flush_buf_, (value++) & 0x7f, kFlushBytes, stream_));
}

Timing KernelTimer::time(Timer timer, const std::function<void()>& call, int kernels_per_call, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) {
    flush();
    call();
  }
  DSA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  switch (timer) {
    case Timer::events:
    case Timer::graph:
      if (after_flush_) throw Error("an after-flush hook (--warm-code, --warm-tlb) needs the cupti timer");
      return timer == Timer::events ? time_events(call, reps) : time_graph(call, reps);
    case Timer::cupti: return time_cupti(call, kernels_per_call, reps);
  }
  throw Error("timer: unknown");
}

Timing KernelTimer::time_events(const std::function<void()>& call, int reps) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    flush();
    DSA_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    call();
    DSA_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    DSA_CUDA_CHECK(cudaEventSynchronize(e1_));
    float ms = 0;
    DSA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_, e1_));
    us.push_back(ms * 1e3);
  }
  return summarize(us, Timer::events);
}

Timing KernelTimer::time_graph(const std::function<void()>& call, int reps) {
  constexpr int kCallsPerGraph = 20;
  auto capture = [&](bool with_call) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    DSA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kCallsPerGraph; ++i) {
      flush();
      if (with_call) call();
    }
    DSA_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    DSA_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    DSA_CUDA_CHECK(cudaGraphDestroy(g));
    return exec;
  };
  cudaGraphExec_t with = capture(true), without = capture(false);
  auto run = [&](cudaGraphExec_t exec) {
    DSA_CUDA_CHECK(cudaGraphLaunch(exec, stream_));  // warm
    DSA_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    DSA_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    DSA_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    DSA_CUDA_CHECK(cudaEventSynchronize(e1_));
    float ms = 0;
    DSA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_, e1_));
    return ms * 1e3;
  };
  std::vector<double> us;
  for (int i = 0; i < std::max(3, reps / 4); ++i) us.push_back((run(with) - run(without)) / kCallsPerGraph);
  cudaGraphExecDestroy(with);
  cudaGraphExecDestroy(without);
  return summarize(us, Timer::graph);
}

Timing KernelTimer::time_cupti(const std::function<void()>& call, int kernels_per_call, int reps) {
  static std::once_flag once;
  std::call_once(once, [] { CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)); });
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records.clear();
  }
  CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  for (int i = 0; i < reps; ++i) {
    flush();
    if (after_flush_) after_flush_();
    call();
  }
  DSA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUPTI_CHECK(cuptiActivityFlushAll(1));
  CUPTI_CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  std::vector<KernelRecord> recs;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    recs.swap(g_records);
  }
  const int skip = after_flush_ ? after_flush_kernels_ : 0;  // the hook's kernels lead each group
  if (recs.size() != static_cast<size_t>(reps) * (skip + kernels_per_call))
    throw Error("cupti: expected " + std::to_string(reps * (skip + kernels_per_call)) + " kernel records, got " +
                std::to_string(recs.size()));
  const CallKernels calls = group_calls(std::move(recs), kernels_per_call, skip);
  Timing t = summarize(calls.span_us, Timer::cupti);
  const auto median = [](const std::vector<double>& v) { return summarize(v, Timer::cupti).median_us; };
  for (int k = 0; k < kernels_per_call; ++k) {
    t.per_kernel_median_us.push_back(median(calls.duration_us[k]));
    t.per_kernel_start_us.push_back(median(calls.start_us[k]));
    t.per_kernel_end_us.push_back(median(calls.end_us[k]));
  }
  t.kernel_names = calls.names;
  return t;
}

}  // namespace dsa::bench
