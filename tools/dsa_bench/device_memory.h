// Device buffers for dsa-bench's host code: an owning pointer and typed copies to and from the host.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "common/cuda_check.h"

namespace dsa::bench {

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;

// At least 16 bytes, so that an empty buffer is still a valid, aligned pointer.
inline DevicePtr device_alloc(size_t bytes) {
  void* p = nullptr;
  DSA_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  return DevicePtr(p);
}

// A device copy of h; the caller owns it (wrap it in a DevicePtr).
template <class T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  DSA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(h.size(), 1) * sizeof(T)));
  DSA_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> host_copy(const T* d, size_t n) {
  std::vector<T> h(n);
  DSA_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace dsa::bench
