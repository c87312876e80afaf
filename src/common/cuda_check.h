// Turns CUDA runtime failures into dsa::Error with the call site.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

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

}  // namespace dsa::detail
