// The plain struct between the dense attention API layer and its kernels: resolved strides,
// derived constants, no ownership. Host and device code both include it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsa::detail {

struct DenseParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // may be null
  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t out_batch_stride, out_head_stride, out_row_stride;
  int64_t lse_batch_stride, lse_head_stride;
  int batch, num_heads, seqlen_q, seqlen_k;
  int causal_offset;  // Lk - Lq: row i sees keys j <= i + causal_offset when causal
  float scale;
  float scale_log2;   // scale * log2(e): the fast kernels work in base 2
};

// What the planner reads off a kernel's tile configuration (fa2_tile_info, wgmma_tile_info).
struct DenseTileInfo {
  int block_q, block_k, stages;
  int warps;  // all warps of a CTA
  size_t smem_bytes;
};

}  // namespace dsa::detail
