// Block-wide max or sum for the simple reference kernels; every thread gets the result.
#pragma once

namespace dsa::detail {

// s_red holds kThreads / 32 floats; every thread of the block must call.
template <int kThreads>
__device__ float block_reduce(float v, bool is_max, float* s_red) {
  for (int d = 16; d > 0; d /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, d);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) s_red[threadIdx.x / 32] = v;
  __syncthreads();
  v = s_red[0];
  for (int w = 1; w < kThreads / 32; ++w) v = is_max ? fmaxf(v, s_red[w]) : v + s_red[w];
  return v;
}

}  // namespace dsa::detail
