// Deliberately simple GPU kernels: the fp32 reference used to verify cases too large for the
// CPU reference, and the out-of-range index counter. Obvious loops, no tiling, no tricks.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "common/block_reduce.cuh"
#include "common/cuda_check.h"
#include "dsa/sparse_mla.h"
#include "sparse_mla/params.h"

namespace dsa::detail {
namespace {

constexpr int kRefThreads = 256;

__device__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// Cache row r's value at ckv dim d / kpe dim d, from either format (fp8_ds_mla: e4m3 x its scale).
__device__ float ckv_value(const SparseMlaParams& p, int64_t r, int d) {
  if (!p.kv_fp8) return bf16_bits_to_float(p.ckv[r * p.ckv_row_stride + d]);
  const uint8_t* row = reinterpret_cast<const uint8_t*>(p.ckv) + r * p.ckv_row_stride;
  const __half_raw h = __nv_cvt_fp8_to_halfraw(row[d], __NV_E4M3);
  return __half2float(__half(h)) * reinterpret_cast<const float*>(row + kFp8ScalesOffset)[d / kFp8ScaleDims];
}
__device__ float kpe_value(const SparseMlaParams& p, int64_t r, int d) {
  if (!p.kv_fp8) return bf16_bits_to_float(p.kpe[r * p.kpe_row_stride + d]);
  const uint8_t* row = reinterpret_cast<const uint8_t*>(p.ckv) + r * p.ckv_row_stride;
  return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row + kFp8KpeOffset)[d]);
}

// One block per (token, head). logits: scratch [T * H, topk].
__global__ void __launch_bounds__(kRefThreads) sparse_mla_reference_kernel(const SparseMlaParams p, float* logits) {
  __shared__ float s_red[kRefThreads / 32];
  const int t = blockIdx.x / p.num_heads, h = blockIdx.x % p.num_heads;
  const uint16_t* qn = p.q_nope + t * p.q_nope_token_stride + h * p.q_nope_head_stride;
  const uint16_t* qp = p.q_pe + t * p.q_pe_token_stride + h * p.q_pe_head_stride;
  const int32_t* idx = p.indices + t * p.indices_token_stride;
  float* lg = logits + (int64_t)blockIdx.x * p.topk;
  const int listed = list_length(p, t);

  float mx = -INFINITY;
  for (int k = threadIdx.x; k < p.topk; k += kRefThreads) {
    const int r = k < listed ? idx[k] : -1;
    float v = -INFINITY;
    if (r >= 0 && r < p.num_rows) {
      float dot = 0.f;
      for (int d = 0; d < kCkvDim; ++d) dot += bf16_bits_to_float(qn[d]) * ckv_value(p, r, d);
      for (int d = 0; d < kKpeDim; ++d) dot += bf16_bits_to_float(qp[d]) * kpe_value(p, r, d);
      v = dot * p.sm_scale;
    }
    lg[k] = v;
    mx = fmaxf(mx, v);
  }
  mx = block_reduce<kRefThreads>(mx, true, s_red);
  float sum = 0.f;
  if (mx != -INFINITY)
    for (int k = threadIdx.x; k < p.topk; k += kRefThreads) sum += expf(lg[k] - mx);  // exp(-inf) = 0
  sum = block_reduce<kRefThreads>(sum, false, s_red);

  uint16_t* out = p.out + t * p.out_token_stride + h * p.out_head_stride;
  for (int d = threadIdx.x; d < kCkvDim; d += kRefThreads) {
    float acc = 0.f;
    if (sum > 0.f) {
      for (int k = 0; k < p.topk; ++k) {
        const int r = k < listed ? idx[k] : -1;
        if (r >= 0 && r < p.num_rows)
          acc += expf(lg[k] - mx) / sum * ckv_value(p, r, d);
      }
    }
    const __nv_bfloat16 b = __float2bfloat16_rn(acc);
    out[d] = *reinterpret_cast<const uint16_t*>(&b);
  }
  if (threadIdx.x == 0)
    p.lse[t * p.lse_token_stride + h] = sum > 0.f ? (mx + logf(sum)) * 1.4426950408889634f : -INFINITY;
}

__global__ void count_invalid_kernel(const int32_t* indices, int num_tokens, int topk, int64_t token_stride,
                                     int64_t num_rows, unsigned long long* count) {
  unsigned long long local = 0;
  const int64_t n = (int64_t)num_tokens * topk;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int32_t r = indices[(i / topk) * token_stride + i % topk];
    local += (r < -1 || r >= num_rows) ? 1 : 0;
  }
  for (int d = 16; d > 0; d /= 2) local += __shfl_xor_sync(0xffffffffu, local, d);
  if (threadIdx.x % 32 == 0 && local) atomicAdd(count, local);
}

}  // namespace

void launch_sparse_mla_reference(const SparseMlaParams& p, float* scratch_logits, cudaStream_t stream) {
  const int64_t blocks = (int64_t)p.num_tokens * p.num_heads;
  if (blocks == 0) return;
  sparse_mla_reference_kernel<<<static_cast<unsigned>(blocks), kRefThreads, 0, stream>>>(p, scratch_logits);
  DSA_CUDA_CHECK(cudaGetLastError());
}

void launch_count_invalid_indices(const int32_t* indices, int num_tokens, int topk, int64_t token_stride,
                                  int64_t num_rows, long long* d_count, cudaStream_t stream) {
  const int64_t n = (int64_t)num_tokens * topk;
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 1024));
  count_invalid_kernel<<<blocks, 256, 0, stream>>>(indices, num_tokens, topk, token_stride, num_rows,
                                                   reinterpret_cast<unsigned long long*>(d_count));
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::detail
