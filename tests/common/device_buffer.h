// What every GPU test file needs: device detection, a fixture that skips without a device, and a
// device buffer owning its memory.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>

namespace dsa::testing {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

inline bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
  }
};

// The same for parameterised tests: class Sweep : public GpuWithParam<SweepCase> {};
template <class Param>
class GpuWithParam : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
  }
};

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(count, 1) * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (ptr) cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  cudaError_t set(const std::vector<T>& host) {  // host.size() <= n
    return cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> get() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

// A stream with `launch` captured into a graph on it; replay() waits for the device, launches the
// graph and waits. The first wait matters: the tests poison outputs and workspaces with
// cudaMemset and copy inputs with cudaMemcpy on the legacy stream, which orders nothing on this
// non-blocking stream. Without it a poisoning memset of the workspace landed on a replay's
// partials (Gpu.GraphCaptureAndReplay, NaN in 34 of 128 rows, with 4 test processes and
// compute-sanitizer sharing one GPU: perf.md run 717).
class CapturedGraph {
 public:
  template <class Launch>
  explicit CapturedGraph(Launch&& launch) {
    ok_ = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess &&
          cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal) == cudaSuccess;
    if (!ok_) return;
    launch(stream_);
    ok_ = cudaStreamEndCapture(stream_, &graph_) == cudaSuccess && cudaGraphInstantiate(&exec_, graph_, 0) == cudaSuccess;
  }
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  bool ok() const { return ok_; }
  cudaError_t replay() {
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaGraphLaunch(exec_, stream_);
    return e != cudaSuccess ? e : cudaStreamSynchronize(stream_);
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  bool ok_ = false;
};

}  // namespace dsa::testing
