// A deliberately simple fp32 GPU reference for dense attention: one block per query row, keys in
// chunks of kChunk whose logits sit in shared memory, natural exp, no tensor cores, no tricks.
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/block_reduce.cuh"
#include "common/cuda_check.h"
#include "dense/params.h"
#include "dsa/dense_attention.h"

namespace dsa::detail {
namespace {

constexpr int kThreads = 128;  // >= every head_dim_v: thread d owns output dim d
constexpr int kChunk = 1024;

template <bool kBf16>
__device__ float to_float(uint16_t b) {
  if constexpr (kBf16) return __uint_as_float(static_cast<uint32_t>(b) << 16);
  else return __half2float(__ushort_as_half(b));
}

template <bool kBf16>
__device__ uint16_t from_float(float x) {
  if constexpr (kBf16) {
    const __nv_bfloat16 b = __float2bfloat16_rn(x);
    return *reinterpret_cast<const uint16_t*>(&b);
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

template <bool kBf16>
__global__ void __launch_bounds__(kThreads)
    dense_reference_kernel(const DenseParams p, int dqk, int dv, bool causal) {
  __shared__ float s_q[192];
  __shared__ float s_logit[kChunk];
  __shared__ float s_red[kThreads / 32];
  const int i = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
                      int64_t(i) * p.q_row_stride;
  const uint16_t* k = static_cast<const uint16_t*>(p.k) + batch * p.k_batch_stride + head * p.k_head_stride;
  const uint16_t* v = static_cast<const uint16_t*>(p.v) + batch * p.v_batch_stride + head * p.v_head_stride;
  for (int d = threadIdx.x; d < dqk; d += kThreads) s_q[d] = to_float<kBf16>(q[d]);
  __syncthreads();

  const int key_end = causal ? max(0, min(p.seqlen_k, i + p.causal_offset + 1)) : p.seqlen_k;
  float m = -INFINITY, l = 0.f, acc = 0.f;
  for (int c0 = 0; c0 < key_end; c0 += kChunk) {
    const int cn = min(kChunk, key_end - c0);
    float cmax = -INFINITY;
    for (int j = threadIdx.x; j < cn; j += kThreads) {
      const uint16_t* kr = k + int64_t(c0 + j) * p.k_row_stride;
      float dot = 0.f;
      for (int d = 0; d < dqk; ++d) dot += s_q[d] * to_float<kBf16>(kr[d]);
      s_logit[j] = dot * p.scale;
      cmax = fmaxf(cmax, dot * p.scale);
    }
    cmax = block_reduce<kThreads>(cmax, true, s_red);
    const float m_new = fmaxf(m, cmax);
    const float alpha = expf(m - m_new);  // 0 on the first chunk (m = -inf)
    float csum = 0.f;
    for (int j = threadIdx.x; j < cn; j += kThreads) {
      s_logit[j] = expf(s_logit[j] - m_new);
      csum += s_logit[j];
    }
    csum = block_reduce<kThreads>(csum, false, s_red);  // its barriers publish s_logit
    l = l * alpha + csum;
    if (threadIdx.x < dv) {
      float a = 0.f;
      for (int j = 0; j < cn; ++j) a += s_logit[j] * to_float<kBf16>(v[int64_t(c0 + j) * p.v_row_stride + threadIdx.x]);
      acc = acc * alpha + a;
    }
    m = m_new;
    __syncthreads();  // s_logit is rewritten by the next chunk
  }
  uint16_t* out = static_cast<uint16_t*>(p.out) + batch * p.out_batch_stride + head * p.out_head_stride +
                  int64_t(i) * p.out_row_stride;
  if (threadIdx.x < dv) out[threadIdx.x] = from_float<kBf16>(l > 0.f ? acc / l : 0.f);
  if (threadIdx.x == 0 && p.lse != nullptr)
    p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + i] =
        l > 0.f ? (m + logf(l)) * 1.4426950408889634f : -INFINITY;
}

}  // namespace

void launch_dense_reference(const DenseParams& p, DType dtype, int head_dim_qk, int head_dim_v, bool causal,
                            cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.seqlen_q), static_cast<unsigned>(p.num_heads),
                  static_cast<unsigned>(p.batch));
  if (dtype == DType::bf16)
    dense_reference_kernel<true><<<grid, kThreads, 0, stream>>>(p, head_dim_qk, head_dim_v, causal);
  else
    dense_reference_kernel<false><<<grid, kThreads, 0, stream>>>(p, head_dim_qk, head_dim_v, causal);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::detail
