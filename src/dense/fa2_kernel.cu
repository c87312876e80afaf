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
// History (H100, dsa-bench dense, CUPTI kernel span; SDPA from shared/peers/dense_peers.py in the
// same device call; docs/perf.md has the tables). Cases: B2 N8 L1024 D128 fp16 | B4 N16 L4096
// D128 bf16 | B2 N16 L8192 D128 bf16 causal | B4 N16 L4096 D64 bf16.
//   (filled in as measured)
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "dense/fa2_config.h"
#include "dense/params.h"
#include "dsa/dense_attention.h"

namespace dsa::detail {
namespace {

// The two 16-bit input types: the mma flavour and the fp32 -> 2 x 16-bit packing.
template <typename Elem>
struct ElemOps;
template <>
struct ElemOps<__nv_bfloat16> {
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ptx::mma_bf16_16816(d, a, b0, b1);
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return ptx::pack_bf16x2(lo, hi); }
};
template <>
struct ElemOps<__half> {
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ptx::mma_f16_16816(d, a, b0, b1);
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return ptx::pack_f16x2(lo, hi); }
};

// Byte offset of 16-byte chunk `c` of row `r` in a swizzled tile with `kChunks` chunks per row.
template <int kChunks>
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  static_assert(kChunks % 8 == 0, "the XOR swizzle permutes groups of 8 chunks");
  return static_cast<uint32_t>((r * kChunks + (c ^ (r & 7))) * 16);
}

// Requests rows [0, kRows) of a tile (row r at g + r * row_stride_bytes) into swizzled shared
// memory; rows >= rows_valid are zero-filled without reading global memory.
template <int kRows, int kChunks, int kThreads>
__device__ __forceinline__ void load_tile(uint32_t s_base, const char* g, int64_t row_stride_bytes, int rows_valid) {
  constexpr int kPieces = kRows * kChunks;
  static_assert(kPieces % kThreads == 0, "every thread copies the same number of pieces");
#pragma unroll
  for (int i = 0; i < kPieces / kThreads; ++i) {
    const int piece = i * kThreads + static_cast<int>(threadIdx.x);
    const int r = piece / kChunks, c = piece % kChunks;
    const bool ok = r < rows_valid;
    const char* src = ok ? g + r * row_stride_bytes + c * 16 : g;
    ptx::cp_async_16(s_base + swizzled<kChunks>(r, c), src, ok ? 16 : 0);
  }
}

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
                                            2 * p.k_row_stride, rows);
    load_tile<kBlockK, kVChunks, kThreads>(sV + stage * kVBytes, v + 2 * tile * kBlockK * p.v_row_stride,
                                           2 * p.v_row_stride, rows);
  };

  // Prologue: Q joins the first group.
  load_tile<kBlockQ, kQkChunks, kThreads>(sQ, q + 2 * q0 * p.q_row_stride, 2 * p.q_row_stride,
                                          min(kBlockQ, p.seqlen_q - q0));
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) load_kv(s);
    ptx::cp_async_commit();
  }

  float o[kOTiles][4];
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // running row max, base-2 logit units (rows lane/4, lane/4+8)
  float l[2] = {0.f, 0.f};              // running row sum, this thread's columns only
  uint32_t qf[kQkSteps][4];

  const int warp_row0 = q0 + warp * 16;  // first query row of this warp
  const int row_in_warp = lane / 4;      // accumulator rows row_in_warp and row_in_warp + 8
  const int col_in_tile = 2 * (lane % 4);

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
    float s[kSTiles][4];
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kQkSteps; ++kk) {
#pragma unroll
      for (int n2 = 0; n2 < kSTiles / 2; ++n2) {
        uint32_t b[4];  // b0/b1 of key n-tiles 2*n2 and 2*n2+1
        ptx::ldmatrix_x4(b, sKj + swizzled<kQkChunks>(n2 * 16 + (lane / 16) * 8 + lane % 8, 2 * kk + (lane / 8) % 2));
        Ops::mma(s[2 * n2], qf[kk], b[0], b[1]);
        Ops::mma(s[2 * n2 + 1], qf[kk], b[2], b[3]);
      }
    }

    // Scale to base-2 logits; mask keys past the end and, when causal, past the diagonal.
    const int key0 = j * kBlockK;
    const bool past_end = key0 + kBlockK > p.seqlen_k;
    const bool crosses_diagonal = kCausal && key0 + kBlockK - 1 > warp_row0 + p.causal_offset;
#pragma unroll
    for (int n = 0; n < kSTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] *= p.scale_log2;
        if (past_end || crosses_diagonal) {
          const int key = key0 + n * 8 + col_in_tile + (e & 1);
          const int row = warp_row0 + row_in_warp + (e / 2) * 8;
          if (key >= p.seqlen_k || (kCausal && key > row + p.causal_offset)) s[n][e] = -INFINITY;
        }
      }

    // Online softmax; a row that has seen no key yet keeps m = -inf and uses 0 as its reference.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float ref = mx == -INFINITY ? 0.f : mx;
      const float alpha = ptx::exp2_approx(m[r] - ref);
      m[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        s[n][2 * r] = ptx::exp2_approx(s[n][2 * r] - ref);
        s[n][2 * r + 1] = ptx::exp2_approx(s[n][2 * r + 1] - ref);
        sum += s[n][2 * r] + s[n][2 * r + 1];
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
    }

    // O += P V: the S accumulators of key n-tiles 2kk, 2kk+1 are exactly the A fragment of k-step kk.
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      const uint32_t a[4] = {Ops::pack(s[2 * kk][0], s[2 * kk][1]), Ops::pack(s[2 * kk][2], s[2 * kk][3]),
                             Ops::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Ops::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n2 = 0; n2 < kOTiles / 2; ++n2) {
        uint32_t b[4];  // b0/b1 of output n-tiles 2*n2 and 2*n2+1
        ptx::ldmatrix_x4_trans(b, sVj + swizzled<kVChunks>(kk * 16 + ((lane / 8) % 2) * 8 + lane % 8, 2 * n2 + lane / 16));
        Ops::mma(o[2 * n2], a, b[0], b[1]);
        Ops::mma(o[2 * n2 + 1], a, b[2], b[3]);
      }
    }
  }

  // Every copy (Q included, when there was no tile) has landed before the Q area is reused.
  ptx::cp_async_wait<0>();
  __syncthreads();

  // Epilogue: normalise, stage this warp's 16 rows in the Q area, write 16-byte row pieces.
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
  }
  uint8_t* staged = smem + warp * 16 * kDv * 2;
#pragma unroll
  for (int n = 0; n < kOTiles; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_in_warp + 8 * r;
      *reinterpret_cast<uint32_t*>(staged + swizzled<kVChunks>(row, n) + col_in_tile * 2) =
          Ops::pack(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r]);
    }
  __syncwarp();
  char* out = static_cast<char*>(p.out) + 2 * (batch * p.out_batch_stride + head * p.out_head_stride);
#pragma unroll
  for (int i = 0; i < 16 * kVChunks / 32; ++i) {
    const int piece = i * 32 + lane;
    const int r = piece / kVChunks, c = piece % kVChunks;
    const int row = warp_row0 + r;
    if (row < p.seqlen_q)
      *reinterpret_cast<uint4*>(out + 2 * (row * p.out_row_stride) + c * 16) =
          *reinterpret_cast<const uint4*>(staged + swizzled<kVChunks>(r, c));
  }
  if (p.lse != nullptr && lane % 4 == 0) {
    float* lse = p.lse + batch * p.lse_batch_stride + head * p.lse_head_stride;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + row_in_warp + 8 * r;
      if (row < p.seqlen_q) lse[row] = l[r] > 0.f ? m[r] + log2f(l[r]) : -INFINITY;
    }
  }
}

template <typename Elem, int kDqk, int kDv, int kBlockQ, bool kCausal>
void launch(const DenseParams& p, int q_blocks, cudaStream_t stream) {
  using Tile = Fa2Tile<kDqk, kBlockQ>;
  constexpr int kSmem = Tile::smem_bytes(kDv);
  auto kernel = fa2_forward_kernel<Elem, kDqk, kDv, kBlockQ, kCausal>;
  // The opt-in shared-memory limit is per function; raising it is cheap but not free: once.
  static const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  DSA_CUDA_CHECK(configured);
  const dim3 grid(static_cast<unsigned>(q_blocks), static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  kernel<<<grid, Tile::kThreads, kSmem, stream>>>(p);
  DSA_CUDA_CHECK(cudaGetLastError());
}

template <typename Elem, int kDqk, int kDv, int kBlockQ>
void launch_causal(const DenseParams& p, bool causal, int q_blocks, cudaStream_t stream) {
  if (causal)
    launch<Elem, kDqk, kDv, kBlockQ, true>(p, q_blocks, stream);
  else
    launch<Elem, kDqk, kDv, kBlockQ, false>(p, q_blocks, stream);
}

template <typename Elem, int kDqk, int kDv>
void launch_block(const DenseParams& p, int block_q, bool causal, int q_blocks, cudaStream_t stream) {
  if (block_q == 64)
    launch_causal<Elem, kDqk, kDv, 64>(p, causal, q_blocks, stream);
  else
    launch_causal<Elem, kDqk, kDv, 128>(p, causal, q_blocks, stream);
}

template <typename Elem>
void launch_dims(const DenseParams& p, int dqk, int block_q, bool causal, int q_blocks, cudaStream_t stream) {
  switch (dqk) {
    case 64: return launch_block<Elem, 64, 64>(p, block_q, causal, q_blocks, stream);
    case 128: return launch_block<Elem, 128, 128>(p, block_q, causal, q_blocks, stream);
    default: return launch_block<Elem, 192, 128>(p, block_q, causal, q_blocks, stream);
  }
}

}  // namespace

void launch_fa2_forward(const DenseParams& p, DType dtype, int head_dim_qk, int block_q, bool causal, int q_blocks,
                        cudaStream_t stream) {
  if (dtype == DType::bf16)
    launch_dims<__nv_bfloat16>(p, head_dim_qk, block_q, causal, q_blocks, stream);
  else
    launch_dims<__half>(p, head_dim_qk, block_q, causal, q_blocks, stream);
}

}  // namespace dsa::detail
