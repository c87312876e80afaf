// Turns CUDA runtime failures into dsa::Error with the call site.
#pragma once

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
