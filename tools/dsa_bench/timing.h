// Kernel timing for dsa-bench, three ways, each result labelled with the timer that made it:
//   cupti  - kernel span per call (first kernel start to last kernel end), CUPTI activity records;
//            what the FlashInfer-Bench harness reports. The default.
//   events - CUDA events around each call (adds launch overhead, ~3 us on small kernels).
//   graph  - N calls captured in one graph with the L2 flushes, minus a graph of the flushes alone.
// The L2 is flushed (256 MB memset) before every call unless flush is off.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace dsa::bench {

enum class Timer { cupti, events, graph };
Timer parse_timer(const std::string& name);
const char* to_string(Timer t);

// How a command times and seeds its cases; the sparse and dense commands share these flags.
struct TimingOptions {
  std::string timer = "cupti";
  int reps = 30, warmup = 3;
  bool no_flush = false;
  uint64_t seed = 1;
  std::string json_path;
};

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int reps = 0;
  Timer timer = Timer::cupti;
  // cupti only, each kernel of a call in the order they start (call_kernels.h), medians: its
  // duration, its start and end after the call's first start; and its name.
  std::vector<double> per_kernel_median_us, per_kernel_start_us, per_kernel_end_us;
  std::vector<std::string> kernel_names;
};

// The stream dsa-bench issues its timed calls, their timers and their set-up on: a stream it
// created, since the legacy default stream (nullptr) cannot be captured into a CUDA graph
// (--timer graph: cudaStreamBeginCapture fails on it with cudaErrorStreamCaptureUnsupported). It
// is a blocking stream, so work still issued on the legacy stream stays ordered with it.
cudaStream_t bench_stream();

class KernelTimer {
 public:
  KernelTimer(cudaStream_t stream, bool flush_l2);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;
  // `call` launches one call's kernels on the stream: `kernels_per_call` of them (CUPTI groups by it).
  Timing time(Timer timer, const std::function<void()>& call, int kernels_per_call, int reps, int warmup);
  // Diagnostic (CUPTI only): `fn` launches `kernels` kernels after each flush, outside the span
  // timed (dsa-bench --warm-code: the same kernels on other data, so only their code is cached;
  // --warm-tlb: one load per page of every buffer, so only address translations are cached).
  void set_after_flush(std::function<void()> fn, int kernels) { after_flush_ = std::move(fn); after_flush_kernels_ = kernels; }

 private:
  void flush();
  Timing time_events(const std::function<void()>& call, int reps);
  Timing time_graph(const std::function<void()>& call, int reps);
  Timing time_cupti(const std::function<void()>& call, int kernels_per_call, int reps);
  cudaStream_t stream_;
  bool flush_l2_;
  std::function<void()> after_flush_;
  int after_flush_kernels_ = 0;
  void* flush_buf_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

}  // namespace dsa::bench
