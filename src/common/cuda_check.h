// Turns CUDA runtime failures into dsa::Error with the call site.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "dsa/error.h"

#define DSA_CUDA_CHECK(call)                                                                   \
  do {                                                                                         \
    cudaError_t dsa_err_ = (call);                                                             \
    if (dsa_err_ != cudaSuccess)                                                               \
      throw ::dsa::Error(std::string(#call) + " failed: " + cudaGetErrorString(dsa_err_) +     \
                         " (" + __FILE__ + ":" + std::to_string(__LINE__) + ")");              \
  } while (0)

namespace dsa::detail {

// Raises kKernel's dynamic shared-memory limit to `bytes` once per device (the attribute is per
// function and device; setting it on every launch would cost a driver call each time).
template <auto kKernel>
void raise_smem_limit_once(int bytes) {
  static std::atomic<uint64_t> configured{0};  // bit d: device d done
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit != 0 && (configured.load(std::memory_order_relaxed) & bit)) return;
  DSA_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  configured.fetch_or(bit, std::memory_order_relaxed);
}

// Launches `kernel` by cudaLaunchKernelEx with one launch attribute.
template <typename... Params, typename... Args>
void launch_with_attribute(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                           cudaLaunchAttribute attr, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  DSA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// Launches `kernel` with programmatic dependent launch: its CTAs may start before the previous
// kernel in `stream` ends, so it must call griddepcontrol.wait (ptx::wait_prerequisites) before
// reading anything that kernel writes.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  launch_with_attribute(kernel, grid, block, smem_bytes, stream, attr, std::forward<Args>(args)...);
}

// Launches `kernel` asking for the SM's largest shared-memory carve-out (the least L1) for this
// launch. The driver otherwise sizes the carve-out to the launch's own CTAs, and a grid launched
// beside it (a dependent one) finds room only in what that size leaves over.
template <typename... Params, typename... Args>
void launch_with_max_shared_carveout(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                     cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributePreferredSharedMemoryCarveout;
  attr.val.sharedMemCarveout = cudaSharedmemCarveoutMaxShared;
  launch_with_attribute(kernel, grid, block, smem_bytes, stream, attr, std::forward<Args>(args)...);
}

}  // namespace dsa::detail
