// Dense attention forward, generation 1: FlashAttention-2 with mma.sync (sm_80 instructions).
//
// One CTA = one tile of block_q query rows of one (batch, head); warp w owns rows
// [16w, 16w + 16) for the whole kernel (mma M = 16), so the online softmax needs no shared memory.
//   1. Prologue: Q and the first stages-1 K/V tiles are requested by 16-byte cp.async into
//      swizzled shared memory (16-byte chunk c of row r lives at chunk c ^ (r & 7): the eight rows
//      an ldmatrix reads hit eight different bank groups).
//   2. Loop over key tiles: wait for tile j (cp.async.wait_group stages-2), one barrier, request
//      tile j + stages - 1 into the stage tile j - 1 used, then S = Q K^T (Q as A fragments held in
//      registers from the first tile, K by ldmatrix), mask (sequence end, causal diagonal), online
//      softmax in base 2, O += P V (P re-packed from the S accumulators as A fragments with no
//      shared-memory trip, V by ldmatrix.trans).
//   3. Epilogue: O / l converted to the input dtype, staged in shared memory (the Q area), written
//      as 16-byte row pieces; lse = m + log2(l).
// Causal CTAs are launched heaviest first (q-block index reversed) so the tail is short.
//
// History (H100, dsa-bench dense, CUPTI kernel span; SDPA default from shared/peers/dense_peers.py in
// the same device call; docs/perf.md). TF/s for: B2 N8 L1024 D128 fp16 | B4 N16 L4096 D128 |
// B2 N16 L8192 D128 causal | B4 N16 L4096 D64 (bf16 unless named).
//   v1 843440d  230 | 277 | 244 | 229   64- or 128-row tiles by occupancy; 228-248 registers, 1 CTA/SM
//   v2 da3b29d  225 | 238 | 228 | 230   shared softmax (scale in the exp2 FFMA), same kernel otherwise
// SDPA's flash backend (FlashAttention-2) in the v1 run: 147 | 340 | 303 | 278. Generation 2
// (wgmma_kernel.cu) replaced it as the planner's choice; DenseChoice{sm80_mma} still runs it.
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "dense/dispatch.h"
#include "dense/fa2_config.h"
#include "dense/kernel_common.cuh"
#include "dense/params.h"
#include "dsa/dense_attention.h"

namespace dsa::detail {
namespace {

// Byte offset of 16-byte chunk `c` of row `r` in a swizzled tile with `kChunks` chunks per row.
template <int kChunks>
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  static_assert(kChunks % 8 == 0, "the XOR swizzle permutes groups of 8 chunks");
  return static_cast<uint32_t>((r * kChunks + (c ^ (r & 7))) * 16);
}

template <int kChunks>
struct Swizzled {
  __device__ __forceinline__ uint32_t operator()(int r, int c) const { return swizzled<kChunks>(r, c); }
};

template <typename Elem, int kDqk, int kDv, int kBlockQ, bool kCausal>
__global__ void __launch_bounds__(Fa2Tile<kDqk, kBlockQ>::kThreads)
    fa2_forward_kernel(const DenseParams p) {
  using Tile = Fa2Tile<kDqk, kBlockQ>;
  using Ops = ElemOps<Elem>;
  constexpr int kBlockK = Tile::kBlockK, kStages = Tile::kStages, kThreads = Tile::kThreads;
  constexpr int kQkChunks = kDqk / 8, kVChunks = kDv / 8;
  constexpr int kQkSteps = kDqk / 16;   // k-steps of S = Q K^T
  constexpr int kSTiles = kBlockK / 8;  // n-tiles of S
  constexpr int kOTiles = kDv / 8;      // n-tiles of O
  constexpr uint32_t kQBytes = kBlockQ * kDqk * 2, kKBytes = kBlockK * kDqk * 2, kVBytes = kBlockK * kDv * 2;

  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sK = sQ + kQBytes;
  const uint32_t sV = sK + kStages * kKBytes;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q_block = kCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z;
  const int q0 = q_block * kBlockQ;

  const char* q = static_cast<const char*>(p.q) + 2 * (batch * p.q_batch_stride + head * p.q_head_stride);
  const char* k = static_cast<const char*>(p.k) + 2 * (batch * p.k_batch_stride + head * p.k_head_stride);
  const char* v = static_cast<const char*>(p.v) + 2 * (batch * p.v_batch_stride + head * p.v_head_stride);

  // Keys this CTA can see: all, or up to the diagonal of its last row.
  int k_end = p.seqlen_k;
  if (kCausal) k_end = max(0, min(k_end, q0 + kBlockQ + p.causal_offset));
  const int n_tiles = (k_end + kBlockK - 1) / kBlockK;

  auto load_kv = [&](int tile) {
    const int stage = tile % kStages;
    const int rows = min(kBlockK, p.seqlen_k - tile * kBlockK);
    load_tile<kBlockK, kQkChunks, kThreads>(sK + stage * kKBytes, k + 2 * tile * kBlockK * p.k_row_stride,
                                            2 * p.k_row_stride, rows, Swizzled<kQkChunks>{});
    load_tile<kBlockK, kVChunks, kThreads>(sV + stage * kVBytes, v + 2 * tile * kBlockK * p.v_row_stride,
                                           2 * p.v_row_stride, rows, Swizzled<kVChunks>{});
  };

  // Prologue: Q joins the first group.
  load_tile<kBlockQ, kQkChunks, kThreads>(sQ, q + 2 * q0 * p.q_row_stride, 2 * p.q_row_stride,
                                          min(kBlockQ, p.seqlen_q - q0), Swizzled<kQkChunks>{});
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) load_kv(s);
    ptx::cp_async_commit();
  }

  float o[4 * kOTiles];
#pragma unroll
  for (int i = 0; i < 4 * kOTiles; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // running row max, base-2 logit units (rows lane/4, lane/4+8)
  float l[2] = {0.f, 0.f};              // running row sum, this lane's columns only
  uint32_t qf[kQkSteps][4];
  const int warp_row0 = q0 + warp * 16;  // first query row of this warp

  for (int j = 0; j < n_tiles; ++j) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < kQkSteps; ++kk)
        ptx::ldmatrix_x4(qf[kk], sQ + swizzled<kQkChunks>(warp * 16 + lane % 16, 2 * kk + lane / 16));
    }
    if (j + kStages - 1 < n_tiles) load_kv(j + kStages - 1);
    ptx::cp_async_commit();

    const uint32_t sKj = sK + (j % kStages) * kKBytes;
    const uint32_t sVj = sV + (j % kStages) * kVBytes;

    // S = Q K^T for this warp's 16 rows x kBlockK keys.
    float s[4 * kSTiles];
#pragma unroll
    for (int i = 0; i < 4 * kSTiles; ++i) s[i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kQkSteps; ++kk) {
#pragma unroll
      for (int n2 = 0; n2 < kSTiles / 2; ++n2) {
        uint32_t b[4];  // b0/b1 of key n-tiles 2*n2 and 2*n2+1
        ptx::ldmatrix_x4(b, sKj + swizzled<kQkChunks>(n2 * 16 + (lane / 16) * 8 + lane % 8, 2 * kk + (lane / 8) % 2));
        Ops::mma(&s[8 * n2], qf[kk], b[0], b[1]);
        Ops::mma(&s[8 * n2 + 4], qf[kk], b[2], b[3]);
      }
    }

    float alpha[2];
    online_softmax_tile<kSTiles, kCausal>(s, m, l, alpha, p, j * kBlockK, warp_row0, lane);
    rescale_rows<kOTiles>(o, alpha);

    // O += P V, V by ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      uint32_t a[4];
      p_fragment<Elem>(s, kk, a);
#pragma unroll
      for (int n2 = 0; n2 < kOTiles / 2; ++n2) {
        uint32_t b[4];  // b0/b1 of output n-tiles 2*n2 and 2*n2+1
        ptx::ldmatrix_x4_trans(b, sVj + swizzled<kVChunks>(kk * 16 + ((lane / 8) % 2) * 8 + lane % 8, 2 * n2 + lane / 16));
        Ops::mma(&o[8 * n2], a, b[0], b[1]);
        Ops::mma(&o[8 * n2 + 4], a, b[2], b[3]);
      }
    }
  }

  // Every copy (Q included, when there was no tile) has landed before the Q area is reused.
  ptx::cp_async_wait<0>();
  __syncthreads();

  // Epilogue: normalise, stage this warp's 16 rows in the Q area, write 16-byte row pieces.
  float inv[2], lse[2];
  finish_rows(m, l, inv, lse);
  uint8_t* staged = smem + warp * 16 * kDv * 2;
#pragma unroll
  for (int n = 0; n < kOTiles; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      *reinterpret_cast<uint32_t*>(staged + swizzled<kVChunks>(lane / 4 + 8 * r, n) + 4 * (lane % 4)) =
          Ops::pack(o[4 * n + 2 * r] * inv[r], o[4 * n + 2 * r + 1] * inv[r]);
  __syncwarp();
  store_rows<kVChunks>(staged, Swizzled<kVChunks>{}, p, batch, head, warp_row0, lane, lse);
}

template <typename Elem, int kDqk, int kDv, int kBlockQ, bool kCausal>
void launch(const DenseParams& p, int q_blocks, cudaStream_t stream) {
  using Tile = Fa2Tile<kDqk, kBlockQ>;
  constexpr int kSmem = Tile::smem_bytes(kDv);
  constexpr auto kernel = fa2_forward_kernel<Elem, kDqk, kDv, kBlockQ, kCausal>;
  raise_smem_limit_once<kernel>(kSmem);
  const dim3 grid(static_cast<unsigned>(q_blocks), static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  kernel<<<grid, Tile::kThreads, kSmem, stream>>>(p);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_fa2_forward(const DenseParams& p, DType dtype, int head_dim_qk, int block_q, bool causal, int q_blocks,
                        cudaStream_t stream) {
  dispatch_dense(dtype, head_dim_qk, causal, [&](auto elem, auto dqk, auto dv, auto masked) {
    using Elem = typename decltype(elem)::type;
    if (block_q == 64)
      launch<Elem, decltype(dqk)::value, decltype(dv)::value, 64, decltype(masked)::value>(p, q_blocks, stream);
    else
      launch<Elem, decltype(dqk)::value, decltype(dv)::value, 128, decltype(masked)::value>(p, q_blocks, stream);
  });
}

}  // namespace dsa::detail
