// Dense attention forward, generation 2: Hopper warpgroup MMA (wgmma, sm_90a).
//
// One CTA = 128 query rows of one (batch, head) = two warpgroups of 64 rows; each warp still
// owns 16 rows, so the online softmax is generation 1's, unchanged (kernel_common.cuh).
//   1. Q and K/V tiles (128 keys) arrive by 16-byte cp.async into the 128-byte-swizzled layout
//      wgmma reads: a tile of R rows x D columns is stored as D/64 column blocks of R rows x 128 B,
//      16-byte chunk c of row r at chunk c ^ (r & 7), every block 1024-byte aligned.
//   2. S = Q K^T: wgmma m64n128k16 with both operands in shared memory (K-major descriptors; the
//      k-step moves the start address 32 B inside the swizzled row).
//   3. Mask and online softmax in registers (base 2).
//   4. O += P V: P re-packed from the S accumulators as register A fragments, V as an N-major
//      (row-major keys x Dv) descriptor; wgmma m64n{Dv}k16.
//   5. Epilogue as generation 1: normalise, stage in the Q area, 16-byte row stores.
// Within a warpgroup, the softmax of tile j overlaps the tensor cores' P_{j-1} V_{j-1}; the next
// copy group is in flight while a tile is computed.
//
// History (H100, dsa-bench dense, CUPTI kernel span; SDPA in the same device call; docs/perf.md).
// Cases: B2 N8 L1024 D128 fp16 | B4 N16 L4096 D128 | B2 N16 L8192 D128 causal | B4 N16 L4096 D64.
//   (filled in as measured)
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "dense/kernel_common.cuh"
#include "dense/params.h"
#include "dense/wgmma_config.h"
#include "dsa/dense_attention.h"

namespace dsa::detail {
namespace {

// The wgmma flavours by element type and N.
template <typename Elem, int N>
struct Wgmma;
#define DSA_WGMMA_FLAVOUR(ELEM, TAG, N)                                                                 \
  template <>                                                                                          \
  struct Wgmma<ELEM, N> {                                                                              \
    static __device__ __forceinline__ void ss(float (&d)[N / 2], uint64_t a, uint64_t b, int acc) {   \
      wgmma::mma_ss_##TAG##_n##N(d, a, b, acc);                                                        \
    }                                                                                                  \
    static __device__ __forceinline__ void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, int acc) { \
      wgmma::mma_rs_##TAG##_n##N##_bT(d, a, b, acc);                                                   \
    }                                                                                                  \
  };
DSA_WGMMA_FLAVOUR(__nv_bfloat16, bf16, 64)
DSA_WGMMA_FLAVOUR(__nv_bfloat16, bf16, 128)
DSA_WGMMA_FLAVOUR(__half, f16, 64)
DSA_WGMMA_FLAVOUR(__half, f16, 128)
#undef DSA_WGMMA_FLAVOUR

// Byte offset of 16-byte chunk c of row r in a 128-byte-swizzled tile of kRows rows.
template <int kRows>
struct Sw128 {
  __device__ __forceinline__ uint32_t operator()(int r, int c) const {
    return static_cast<uint32_t>((c / 8) * (kRows * 128) + r * 128 + (((c % 8) ^ (r % 8)) * 16));
  }
};

template <typename Elem, int kDqk, int kDv, bool kCausal>
__global__ void __launch_bounds__(WgmmaTile<kDqk>::kThreads, 1) wgmma_forward_kernel(const DenseParams p) {
  using Tile = WgmmaTile<kDqk>;
  constexpr int kBlockQ = Tile::kBlockQ, kBlockK = Tile::kBlockK, kStages = Tile::kStages;
  constexpr int kThreads = Tile::kThreads;
  constexpr int kQkChunks = kDqk / 8, kVChunks = kDv / 8;
  constexpr int kSTiles = kBlockK / 8, kOTiles = kDv / 8;
  constexpr uint32_t kQBytes = kBlockQ * kDqk * 2, kKBytes = kBlockK * kDqk * 2, kVBytes = kBlockK * kDv * 2;
  using WS = Wgmma<Elem, kBlockK>;
  using WO = Wgmma<Elem, kDv>;

  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t sQ = (raw + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
  uint8_t* smem = smem_raw + (sQ - raw);
  const uint32_t sK = sQ + kQBytes;
  const uint32_t sV = sK + kStages * kKBytes;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;  // warpgroup: query rows [64 wg, 64 wg + 64) of the tile
  const int q_block = kCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z;
  const int q0 = q_block * kBlockQ;

  const char* q = static_cast<const char*>(p.q) + 2 * (batch * p.q_batch_stride + head * p.q_head_stride);
  const char* k = static_cast<const char*>(p.k) + 2 * (batch * p.k_batch_stride + head * p.k_head_stride);
  const char* v = static_cast<const char*>(p.v) + 2 * (batch * p.v_batch_stride + head * p.v_head_stride);

  int k_end = p.seqlen_k;
  if (kCausal) k_end = max(0, min(k_end, q0 + kBlockQ + p.causal_offset));
  const int n_tiles = (k_end + kBlockK - 1) / kBlockK;

  // K tile j and V tile j - 1 travel together (copy group j): the iteration that computes
  // S_j = Q K_j^T also runs O += P_{j-1} V_{j-1}. Group j + kStages - 1 is requested after the
  // barrier of iteration j, into the K stage of tile j - 1 (its S finished in iteration j - 1) and
  // the V stage of tile j - 2 (its product finished in iteration j - 1).
  auto load_group = [&](int j) {
    if (j < n_tiles) {
      const int rows = min(kBlockK, p.seqlen_k - j * kBlockK);
      load_tile<kBlockK, kQkChunks, kThreads>(sK + (j % kStages) * kKBytes, k + 2 * j * kBlockK * p.k_row_stride,
                                              2 * p.k_row_stride, rows, Sw128<kBlockK>{});
    }
    if (j >= 1 && j <= n_tiles) {
      const int rows = min(kBlockK, p.seqlen_k - (j - 1) * kBlockK);
      load_tile<kBlockK, kVChunks, kThreads>(sV + ((j - 1) % kStages) * kVBytes,
                                             v + 2 * (j - 1) * kBlockK * p.v_row_stride, 2 * p.v_row_stride, rows,
                                             Sw128<kBlockK>{});
    }
    ptx::cp_async_commit();
  };

  load_tile<kBlockQ, kQkChunks, kThreads>(sQ, q + 2 * q0 * p.q_row_stride, 2 * p.q_row_stride,
                                          min(kBlockQ, p.seqlen_q - q0), Sw128<kBlockQ>{});
#pragma unroll
  for (int g = 0; g < kStages - 1; ++g) load_group(g);  // group 0 with Q

  float o[4 * kOTiles];
#pragma unroll
  for (int i = 0; i < 4 * kOTiles; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  const int warp_row0 = q0 + warp * 16;
  // This warpgroup's 64 rows of Q: column block b starts at b * kBlockQ * 128.
  const uint32_t sQ_wg = sQ + wg * 64 * 128;
  float s[4 * kSTiles];          // S_j, then P_j in place
  uint32_t pa[kBlockK / 16][4];  // P_{j-1} as A fragments, read by the O wgmma in flight

  auto next_group = [&](int j) {  // wait for copy group j, then request group j + kStages - 1
    ptx::cp_async_wait<kStages - 2>();
    wgmma::fence_proxy_async_smem();  // cp.async wrote through the generic proxy; wgmma reads async
    __syncthreads();
    load_group(j + kStages - 1);  // commits an empty group past the end: the counting stays uniform
  };
  auto issue_s = [&](int j) {  // S_j = Q K_j^T, one wgmma group
    const uint32_t sKj = sK + (j % kStages) * kKBytes;
#pragma unroll
    for (int kk = 0; kk < kDqk / 16; ++kk) {
      const uint32_t col = kk / 4, koff = (kk % 4) * 32;
      const uint64_t da = wgmma::desc_sw128(sQ_wg + col * kBlockQ * 128 + koff, 16, 1024);
      const uint64_t db = wgmma::desc_sw128(sKj + col * kBlockK * 128 + koff, 16, 1024);
      WS::ss(s, da, db, kk > 0);
    }
    wgmma::commit();
  };
  auto issue_pv = [&](int j) {  // O += P_j V_j, one wgmma group
    // V rows are keys (the k dimension), Dv contiguous (N-major): a k-step covers 16 keys = two
    // 8-row groups 1024 B apart; column blocks of 64 Dv sit kBlockK * 128 B apart.
    const uint32_t sVj = sV + (j % kStages) * kVBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk)
      WO::rs(o, pa[kk], wgmma::desc_sw128(sVj + kk * 16 * 128, kBlockK * 128, 1024), 1);
    wgmma::commit();
  };
  auto to_fragments = [&] {
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) p_fragment<Elem>(s, kk, pa[kk]);
  };

  // Iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} back to back; the softmax of S_j runs
  // while the tensor cores still work on P_{j-1} V_{j-1} (FlashAttention-3's intra-warpgroup
  // overlap), and O is rescaled once that product has landed. The first and last iterations are
  // peeled so the compiler sees one unconditional wgmma pipeline.
  if (n_tiles > 0) {
    next_group(0);
    wgmma::fence();
    issue_s(0);
    wgmma::wait<0>();
    wgmma::pin(s);
    float alpha[2];
    online_softmax_tile<kSTiles, kCausal>(s, m, l, alpha, p, 0, warp_row0, lane);
    to_fragments();
  }
  for (int j = 1; j < n_tiles; ++j) {
    next_group(j);
    wgmma::fence();
    issue_s(j);
    issue_pv(j - 1);
    wgmma::wait<1>();  // S_j has landed; P_{j-1} V_{j-1} may still run
    wgmma::pin(s);
    float alpha[2];
    online_softmax_tile<kSTiles, kCausal>(s, m, l, alpha, p, j * kBlockK, warp_row0, lane);
    wgmma::wait<0>();
    wgmma::pin(o);
    rescale_rows<kOTiles>(o, alpha);
    to_fragments();
  }
  if (n_tiles > 0) {
    next_group(n_tiles);
    wgmma::fence();
    issue_pv(n_tiles - 1);
    wgmma::wait<0>();
    wgmma::pin(o);
  }

  ptx::cp_async_wait<0>();
  __syncthreads();

  // Epilogue: stage this warp's 16 rows in its own rows of the Q area (no other warp reads them
  // any more), then 16-byte row stores.
  float inv[2], lse[2];
  finish_rows(m, l, inv, lse);
  const int staged_row0 = warp * 16;
#pragma unroll
  for (int n = 0; n < kOTiles; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = staged_row0 + lane / 4 + 8 * r;
      *reinterpret_cast<uint32_t*>(smem + Sw128<kBlockQ>{}(row, n) + 4 * (lane % 4)) =
          ElemOps<Elem>::pack(o[4 * n + 2 * r] * inv[r], o[4 * n + 2 * r + 1] * inv[r]);
    }
  __syncwarp();
  auto staged_offset = [staged_row0](int r, int c) { return Sw128<kBlockQ>{}(staged_row0 + r, c); };
  store_rows<kVChunks>(smem, staged_offset, p, batch, head, warp_row0, lane, lse);
}

template <typename Elem, int kDqk, int kDv, bool kCausal>
void launch(const DenseParams& p, int q_blocks, cudaStream_t stream) {
  using Tile = WgmmaTile<kDqk>;
  constexpr int kSmem = Tile::smem_bytes(kDv);
  auto kernel = wgmma_forward_kernel<Elem, kDqk, kDv, kCausal>;
  static const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  DSA_CUDA_CHECK(configured);
  const dim3 grid(static_cast<unsigned>(q_blocks), static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  kernel<<<grid, Tile::kThreads, kSmem, stream>>>(p);
  DSA_CUDA_CHECK(cudaGetLastError());
}

template <typename Elem, int kDqk, int kDv>
void launch_causal(const DenseParams& p, bool causal, int q_blocks, cudaStream_t stream) {
  if (causal)
    launch<Elem, kDqk, kDv, true>(p, q_blocks, stream);
  else
    launch<Elem, kDqk, kDv, false>(p, q_blocks, stream);
}

template <typename Elem>
void launch_dims(const DenseParams& p, int dqk, bool causal, int q_blocks, cudaStream_t stream) {
  switch (dqk) {
    case 64: return launch_causal<Elem, 64, 64>(p, causal, q_blocks, stream);
    case 128: return launch_causal<Elem, 128, 128>(p, causal, q_blocks, stream);
    default: return launch_causal<Elem, 192, 128>(p, causal, q_blocks, stream);
  }
}

}  // namespace

void launch_wgmma_forward(const DenseParams& p, DType dtype, int head_dim_qk, bool causal, int q_blocks,
                          cudaStream_t stream) {
  if (dtype == DType::bf16)
    launch_dims<__nv_bfloat16>(p, head_dim_qk, causal, q_blocks, stream);
  else
    launch_dims<__half>(p, head_dim_qk, causal, q_blocks, stream);
}

}  // namespace dsa::detail
