// Dense attention forward (FlashAttention) on Hopper.
//
// Per batch b, head n, query row i, over the key rows j it may see:
//   logit[j] = scale * (q[b,n,i] . k[b,n,j])
//   out[b,n,i] = softmax(logit) @ v[b,n,:]       (same dtype as q/k/v)
//   lse[b,n,i] = log2(sum_j exp(logit[j]))        (fp32, base 2)
// Non-causal: every row sees all Lk keys. Causal: row i sees keys j <= i + (Lk - Lq), the
// bottom-right alignment of FlashAttention (for Lq == Lk, the usual lower triangle). A row that
// sees no key (only when causal and Lq > Lk) gets out = 0 and lse = -inf.
//
// Usage:
//   dsa::DenseAttentionProblem p;  ... fill pointers, sizes and strides ...
//   dsa::DenseAttentionPlan plan = dsa::plan_dense_attention(p);   // host only, cheap, cacheable
//   dsa::dense_attention_forward(p, plan, stream);
// No workspace; the forward call allocates nothing, never synchronises the host and can be
// captured in a CUDA graph.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "dsa/error.h"
#include "dsa/sparse_mla.h"  // DeviceInfo

namespace dsa {

enum class DType { fp16, bf16 };

// Strides are in elements, as in a [B, N, L, D] tensor whose last dimension is contiguous:
// a view of a larger tensor (e.g. q, k, v sliced out of one packed qkv) works. 0 means packed.
// Each stride is a multiple of 8 (16 bytes) and the row stride is at least D.
struct DenseTensor {
  const void* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
};

struct DenseAttentionProblem {
  DType dtype = DType::bf16;
  int batch = 0;            // B >= 0 (0 is a no-op)
  int num_heads = 0;        // N >= 1 (q, k and v have the same heads)
  int seqlen_q = 0;         // Lq >= 0
  int seqlen_k = 0;         // Lk >= 1
  int head_dim_qk = 0;      // 64, 128 or 192
  int head_dim_v = 0;       // = head_dim_qk, or 128 when head_dim_qk is 192
  bool causal = false;
  float scale = 0.f;        // finite, non-zero; e.g. 1/sqrt(head_dim_qk)

  DenseTensor q, k, v;      // [B, N, Lq, Dqk], [B, N, Lk, Dqk], [B, N, Lk, Dv]
  void* out = nullptr;      // [B, N, Lq, Dv], same dtype
  int64_t out_batch_stride = 0, out_head_stride = 0, out_row_stride = 0;
  float* lse = nullptr;     // fp32 [B, N, Lq] base 2, or nullptr to skip it
  int64_t lse_batch_stride = 0, lse_head_stride = 0;  // rows contiguous
};

// Which kernel generation runs the problem (both kept: docs/perf.md holds their history).
enum class DenseKernel {
  automatic = 0,  // the planner's pick
  sm80_mma = 1,   // generation 1, FlashAttention-2: mma.sync, ldmatrix, cp.async pipeline
  sm90_wgmma = 2, // generation 2: warpgroup MMA (wgmma) from swizzled shared memory
};

// A configuration forced instead of the planner's (tuning, tests): 0 / automatic keep its choice.
struct DenseChoice {
  DenseKernel kernel = DenseKernel::automatic;
  int block_q = 0;  // sm80_mma only: 64 or 128 (with kernel automatic, a block_q selects sm80_mma)
};

struct DenseAttentionPlan {
  // The shape it was made for (the forward call checks it).
  DType dtype = DType::bf16;
  int batch = 0, num_heads = 0, seqlen_q = 0, seqlen_k = 0, head_dim_qk = 0, head_dim_v = 0;
  bool causal = false;
  // The configuration.
  DenseKernel kernel = DenseKernel::automatic;
  int block_q = 0, block_k = 0;  // query rows and key rows per tile
  int stages = 0;                // K/V tiles in flight
  int warps = 0;
  int q_blocks = 0;              // ceil(Lq / block_q)
  int64_t ctas = 0;              // blocks launched: q_blocks * N * B, or at most one per SM (sm90_wgmma, not causal)
  size_t smem_bytes = 0;
};

// Pure function of the problem's shape and the device (no pointer is read): what tests call
// without a GPU. Throws dsa::Error for an unsupported shape, device or choice.
DenseAttentionPlan plan_dense_attention(const DenseAttentionProblem& problem, const DeviceInfo& dev,
                                        const DenseChoice& choice = {});
// Validates the problem and plans it for the current CUDA device.
DenseAttentionPlan plan_dense_attention(const DenseAttentionProblem& problem);

// Throws dsa::Error naming the first bad argument (null pointer, alignment below 16 bytes,
// unsupported head dims, negative sizes, overlapping strides).
void validate(const DenseAttentionProblem& problem);

// Launches the forward on `stream`.
void dense_attention_forward(const DenseAttentionProblem& problem, const DenseAttentionPlan& plan,
                             cudaStream_t stream);

// A deliberately simple fp32 GPU kernel (one block per query row, obvious loops) that verifies
// cases too large for the CPU reference. Not for speed.
void dense_attention_reference_gpu(const DenseAttentionProblem& problem, cudaStream_t stream);

}  // namespace dsa
