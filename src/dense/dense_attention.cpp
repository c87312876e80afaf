// Host side of the dense attention API: argument validation, the planner, and the launch glue.
#include "dsa/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <cuda_runtime_api.h>

#include "common/arg_checks.h"
#include "common/cuda_check.h"
#include "dense/fa2_config.h"
#include "dense/params.h"
#include "dense/wgmma_config.h"

namespace dsa {
namespace detail {
void launch_fa2_forward(const DenseParams& p, DType dtype, int head_dim_qk, int block_q, bool causal, int q_blocks,
                        cudaStream_t stream);
void launch_wgmma_forward(const DenseParams& p, DType dtype, int head_dim_qk, bool causal, int q_blocks, int ctas,
                          cudaStream_t stream);
void launch_dense_reference(const DenseParams& p, DType dtype, int head_dim_qk, int head_dim_v, bool causal,
                            cudaStream_t stream);
}  // namespace detail

namespace {

using detail::ceil_div;
using detail::fail;
using detail::or_default;
using detail::require_disjoint;
using detail::require_pointer;
using detail::require_vector_stride;

constexpr int kMaxGridYZ = 65535;

struct ResolvedStrides {
  int64_t q[3], k[3], v[3], out[3], lse[2];  // {batch, head, row}; lse {batch, head}
};

ResolvedStrides resolve(const DenseAttentionProblem& p) {
  const int64_t N = p.num_heads, Lq = p.seqlen_q, Lk = p.seqlen_k, Dqk = p.head_dim_qk, Dv = p.head_dim_v;
  auto tensor = [](const DenseTensor& t, int64_t (&s)[3], int64_t rows, int64_t dim, int64_t heads) {
    s[2] = or_default(t.row_stride, dim);
    s[1] = or_default(t.head_stride, rows * dim);
    s[0] = or_default(t.batch_stride, heads * rows * dim);
  };
  ResolvedStrides r{};
  tensor(p.q, r.q, Lq, Dqk, N);
  tensor(p.k, r.k, Lk, Dqk, N);
  tensor(p.v, r.v, Lk, Dv, N);
  r.out[2] = or_default(p.out_row_stride, Dv);
  r.out[1] = or_default(p.out_head_stride, Lq * Dv);
  r.out[0] = or_default(p.out_batch_stride, N * Lq * Dv);
  r.lse[1] = or_default(p.lse_head_stride, Lq);
  r.lse[0] = or_default(p.lse_batch_stride, N * Lq);
  return r;
}

void validate_shape(const DenseAttentionProblem& p) {
  if (p.dtype != DType::fp16 && p.dtype != DType::bf16) fail("dtype", "must be fp16 or bf16");
  if (p.batch < 0 || p.batch > kMaxGridYZ)
    fail("batch", "must be in [0, 65535], got " + std::to_string(p.batch));
  if (p.num_heads < 1 || p.num_heads > kMaxGridYZ)
    fail("num_heads", "must be in [1, 65535], got " + std::to_string(p.num_heads));
  if (p.seqlen_q < 0) fail("seqlen_q", "must be >= 0, got " + std::to_string(p.seqlen_q));
  if (p.seqlen_k < 1) fail("seqlen_k", "must be >= 1, got " + std::to_string(p.seqlen_k));
  const bool dims_ok = (p.head_dim_qk == 64 && p.head_dim_v == 64) || (p.head_dim_qk == 128 && p.head_dim_v == 128) ||
                       (p.head_dim_qk == 192 && p.head_dim_v == 128);
  if (!dims_ok)
    fail("head_dim_qk/head_dim_v", "must be 64/64, 128/128 or 192/128, got " + std::to_string(p.head_dim_qk) + "/" +
                                       std::to_string(p.head_dim_v));
}

detail::DenseParams make_params(const DenseAttentionProblem& p) {
  const ResolvedStrides s = resolve(p);
  detail::DenseParams k{};
  k.q = p.q.data; k.k = p.k.data; k.v = p.v.data; k.out = p.out; k.lse = p.lse;
  k.q_batch_stride = s.q[0]; k.q_head_stride = s.q[1]; k.q_row_stride = s.q[2];
  k.k_batch_stride = s.k[0]; k.k_head_stride = s.k[1]; k.k_row_stride = s.k[2];
  k.v_batch_stride = s.v[0]; k.v_head_stride = s.v[1]; k.v_row_stride = s.v[2];
  k.out_batch_stride = s.out[0]; k.out_head_stride = s.out[1]; k.out_row_stride = s.out[2];
  k.lse_batch_stride = s.lse[0]; k.lse_head_stride = s.lse[1];
  k.batch = p.batch; k.num_heads = p.num_heads; k.seqlen_q = p.seqlen_q; k.seqlen_k = p.seqlen_k;
  k.causal_offset = p.seqlen_k - p.seqlen_q;
  k.scale = p.scale;
  k.scale_log2 = static_cast<float>(p.scale * 1.4426950408889634);
  return k;
}

bool same_shape(const DenseAttentionProblem& p, const DenseAttentionPlan& plan) {
  return plan.dtype == p.dtype && plan.batch == p.batch && plan.num_heads == p.num_heads &&
         plan.seqlen_q == p.seqlen_q && plan.seqlen_k == p.seqlen_k && plan.head_dim_qk == p.head_dim_qk &&
         plan.head_dim_v == p.head_dim_v && plan.causal == p.causal;
}

}  // namespace

void validate(const DenseAttentionProblem& p) {
  validate_shape(p);
  if (!std::isfinite(p.scale) || p.scale == 0.f) fail("scale", "must be finite and non-zero");
  require_pointer(p.q.data, "q", 16);
  require_pointer(p.k.data, "k", 16);
  require_pointer(p.v.data, "v", 16);
  require_pointer(p.out, "out", 16);
  if (p.lse != nullptr) require_pointer(p.lse, "lse", 4);
  const ResolvedStrides s = resolve(p);
  const char* names[4][3] = {{"q.batch_stride", "q.head_stride", "q.row_stride"},
                             {"k.batch_stride", "k.head_stride", "k.row_stride"},
                             {"v.batch_stride", "v.head_stride", "v.row_stride"},
                             {"out_batch_stride", "out_head_stride", "out_row_stride"}};
  const int64_t* strides[4] = {s.q, s.k, s.v, s.out};
  for (int t = 0; t < 4; ++t)
    for (int d = 0; d < 3; ++d) require_vector_stride(strides[t][d], names[t][d]);
  // Rows of an input may not overlap each other (the tensor-map copies read whole rows).
  const int64_t widths[3] = {p.head_dim_qk, p.head_dim_qk, p.head_dim_v};
  for (int t = 0; t < 3; ++t)
    if (strides[t][2] < widths[t])
      fail(names[t][2], "must be >= the head dim " + std::to_string(widths[t]) + ", got " + std::to_string(strides[t][2]));
  require_disjoint("out", p.head_dim_v, {{s.out[2], p.seqlen_q}, {s.out[1], p.num_heads}, {s.out[0], p.batch}});
  if (p.lse != nullptr) {
    if (s.lse[0] < 0 || s.lse[1] < 0) fail("lse", "strides must be >= 0");
    require_disjoint("lse", 1, {{1, p.seqlen_q}, {s.lse[1], p.num_heads}, {s.lse[0], p.batch}});
  }
}

DenseAttentionPlan plan_dense_attention(const DenseAttentionProblem& p, const DeviceInfo& dev,
                                        const DenseChoice& choice) {
  validate_shape(p);
  if (dev.cc_major != 9)
    fail("device", "needs compute capability 9.x (sm_90a build), got " + std::to_string(dev.cc_major) + "." +
                       std::to_string(dev.cc_minor));
  if (choice.kernel != DenseKernel::automatic && choice.kernel != DenseKernel::sm80_mma &&
      choice.kernel != DenseKernel::sm90_wgmma)
    fail("choice.kernel", "unknown kernel");
  if (choice.block_q != 0 && choice.block_q != 64 && choice.block_q != 128)
    fail("choice.block_q", "must be 0 (planner), 64 or 128, got " + std::to_string(choice.block_q));
  if (choice.kernel == DenseKernel::sm90_wgmma && choice.block_q != 0)
    fail("choice.block_q", "the sm90_wgmma kernel sets its own query tile (leave block_q 0)");

  DenseAttentionPlan plan;
  plan.dtype = p.dtype;
  plan.batch = p.batch; plan.num_heads = p.num_heads;
  plan.seqlen_q = p.seqlen_q; plan.seqlen_k = p.seqlen_k;
  plan.head_dim_qk = p.head_dim_qk; plan.head_dim_v = p.head_dim_v;
  plan.causal = p.causal;
  const int64_t heads = int64_t(p.batch) * p.num_heads;
  plan.kernel = choice.kernel;
  if (plan.kernel == DenseKernel::automatic)
    plan.kernel = choice.block_q != 0 ? DenseKernel::sm80_mma : DenseKernel::sm90_wgmma;  // block_q is FA2's knob
  // Generation 1's query tile: 128 rows (8 warps) unless that leaves SMs idle, then 64 rows
  // double the CTAs.
  int block_q = choice.block_q;
  if (block_q == 0) block_q = ceil_div(p.seqlen_q, 128) * heads >= 2 * int64_t(dev.sm_count) ? 128 : 64;
  const detail::DenseTileInfo tile = plan.kernel == DenseKernel::sm90_wgmma
                                         ? detail::wgmma_tile_info(p.head_dim_qk, p.head_dim_v)
                                         : detail::fa2_tile_info(p.head_dim_qk, p.head_dim_v, block_q);
  plan.block_q = tile.block_q;
  plan.block_k = tile.block_k;
  plan.stages = tile.stages;
  plan.warps = tile.warps;
  plan.smem_bytes = tile.smem_bytes;
  plan.q_blocks = static_cast<int>(ceil_div(p.seqlen_q, plan.block_q));
  plan.ctas = int64_t(plan.q_blocks) * p.num_heads * p.batch;
  if (plan.ctas > std::numeric_limits<int32_t>::max())
    fail("seqlen_q", "q blocks x heads x batch must fit int32, got " + std::to_string(plan.ctas));
  // Generation 2 without a mask is persistent: one CTA per SM (its shared memory allows no second)
  // loops over tiles. Causal tiles differ in length, and a static round-robin balances them worse
  // than the hardware's block scheduler taking them heaviest first (run 32: -4 %), so a causal
  // launch gives every tile its own CTA (the same kernel, its tile loop running once).
  if (plan.kernel == DenseKernel::sm90_wgmma && !p.causal) plan.ctas = std::min<int64_t>(plan.ctas, dev.sm_count);
  if (plan.smem_bytes > static_cast<size_t>(dev.max_smem_per_block))
    fail("device", "needs " + std::to_string(plan.smem_bytes) + " bytes of shared memory per block, has " +
                       std::to_string(dev.max_smem_per_block));
  return plan;
}

DenseAttentionPlan plan_dense_attention(const DenseAttentionProblem& p) {
  validate(p);
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  return plan_dense_attention(p, DeviceInfo::from_device(device));
}

void dense_attention_forward(const DenseAttentionProblem& p, const DenseAttentionPlan& plan, cudaStream_t stream) {
  validate(p);
  if (!same_shape(p, plan)) fail("plan", "was made for a different problem shape");
  if (plan.ctas == 0) return;  // B = 0 or Lq = 0: nothing to write
  if (plan.kernel == DenseKernel::sm90_wgmma)
    detail::launch_wgmma_forward(make_params(p), p.dtype, p.head_dim_qk, p.causal, plan.q_blocks,
                                 static_cast<int>(plan.ctas), stream);
  else
    detail::launch_fa2_forward(make_params(p), p.dtype, p.head_dim_qk, plan.block_q, p.causal, plan.q_blocks,
                               stream);
}

void dense_attention_reference_gpu(const DenseAttentionProblem& p, cudaStream_t stream) {
  validate(p);
  if (int64_t(p.batch) * p.seqlen_q == 0) return;
  detail::launch_dense_reference(make_params(p), p.dtype, p.head_dim_qk, p.head_dim_v, p.causal, stream);
}

}  // namespace dsa
