// Dense attention forward, generation 2: Hopper warpgroup MMA (wgmma, sm_90a), TMA, mbarriers.
//
// One CTA = 128 query rows of one (batch, head) = two warpgroups of 64 rows; each warp still
// owns 16 rows, so the online softmax is generation 1's, unchanged (kernel_common.cuh).
//   1. A producer warpgroup (one lane) requests Q and then copy groups (K tile j with V tile
//      j - 1, 128 keys each) by TMA into the 128-byte-swizzled layout wgmma reads (a tile of R rows
//      x D columns = D/64 column blocks of R x 128 B, chunk c of row r at c ^ (r & 7), 1024-byte
//      aligned); each stage has a "full" mbarrier (TMA bytes) and an "empty" one (one arrival
//      per consumer warp once the stage's tiles are no longer read). Rows past the end arrive as
//      zeros (TMA bounds).
//   2. S = Q K^T: wgmma m64n128k16, both operands in shared memory (K-major descriptors; the
//      k-step moves the start address 32 B inside the swizzled row).
//   3. Mask and online softmax in registers (base 2).
//   4. O += P V: P re-packed from the S accumulators as register A fragments, V as an N-major
//      (row-major keys x Dv) descriptor; wgmma m64n{Dv}k16.
//   5. Epilogue as generation 1: normalise, stage in the Q area, 16-byte row stores.
// Scheduling: without a mask the grid is one CTA per SM and each loops over tiles (the next tile's
// K/V stream in during this tile's epilogue); causal launches a CTA per tile, heaviest first.
// Overlap (FlashAttention-3's two ideas): within a warpgroup, the softmax of tile j runs while the
// tensor cores do P_{j-1} V_{j-1}; between the two warpgroups, named barriers alternate who
// issues its matrix products ("ping-pong"), so one warpgroup's softmax hides under the other's.
//
// History (H100, dsa-bench dense, CUPTI kernel span; SDPA default from shared/peers/dense_peers.py in
// the same device call; docs/perf.md has every run). TF/s for: B2 N8 L1024 D128 fp16 | B4 N16
// L4096 D128 | B2 N16 L8192 D128 causal | B4 N16 L4096 D64 (bf16 unless named).
//   v1 f12b963  287 | 374 | 336 | 296   cp.async by all threads, CTA barrier per tile, S/softmax/PV serial
//   v2 8c0c6f3  305 | 410 | 356 | 297   softmax of tile j overlaps P_{j-1} V_{j-1}
//   v3 d44896a  300 | 394 | 351 | 276   three cp.async stages: slower; ncu: 46% issue, L2 26%: latency-bound
//   v4 b90944e  389 | 541 | 496 | 326   TMA + full/empty mbarriers (thread 0 produces), warpgroup ping-pong
//   v5 da3b29d  391 | 538 | 514 | 384   scale folded into the exp2 FFMA; O rescale skipped when no max moved
//   v6 fe57519  438 | 653 | 615 | 421   producer warpgroup (setmaxnreg 40/232), three stages at D <= 128
//   v7 2402e20  435 | 654 | 617 | 464   D = 64: three consumer warpgroups (192 query rows)
//   v8 fc26f41  435 | 649 | 611 | 466   D = 64: row sums on the tensor cores (P [V | ones]): noise, reverted
//   v9 4786a82  434 | 662 | 594 | 478   persistent CTAs: non-causal +0.5 to +3 %, causal -4 % (static
//                                       round-robin balances worse than the block scheduler)
//   v10 f946420 429 | 652 | 620 | 478   persistent for non-causal only (the same kernel; causal
//                                       launches a CTA per tile)
//   v11 9f70816 437 | 658 | 623 | 484   D = 64: both rows' max and sum through 4-way trees (the same
//                                       softmax at D = 128 lost 4 %, so it is D = 64's only)
//   SDPA default in the v11 run: 168 | 640 | 575 | 456 (the first is event-timed, launch included)
#include <cmath>
#include <cstdint>
#include <string>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda/ptx>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "dense/dispatch.h"
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

// Tensor maps of q, k and v: 4-D (D, L, N, B) views, boxes of 64 columns x 128 rows.
struct DenseTensorMaps {
  CUtensorMap q, k, v;
};

// One TMA request per 64-column block of a rows x D tile at (row0, head, batch).
template <int kD, int kRows>
__device__ __forceinline__ void tma_tile(uint8_t* dst, const CUtensorMap* map, int row0, int head, int batch,
                                         uint64_t* bar) {
#pragma unroll
  for (int b = 0; b < kD / 64; ++b) {
    const int32_t coords[4] = {b * 64, row0, head, batch};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, dst + b * kRows * 128, map,
                                    coords, bar);
  }
}

// One output tile of the persistent schedule: 128 (192) query rows of one (batch, head).
struct TileCoord {
  int q0, head, batch;
  int n_tiles;  // key tiles it sees (causal: up to its last row's diagonal)
};

template <typename Elem, int kDqk, int kDv, bool kCausal>
__global__ void __launch_bounds__(WgmmaTile<kDqk>::kThreads, 1)
    wgmma_forward_kernel(const DenseParams p, const __grid_constant__ DenseTensorMaps maps, const int q_blocks) {
  using Tile = WgmmaTile<kDqk>;
  constexpr int kBlockQ = Tile::kBlockQ, kBlockK = Tile::kBlockK, kStages = Tile::kStages;
  constexpr int kSTiles = kBlockK / 8, kOTiles = kDv / 8, kVChunks = kDv / 8;
  constexpr uint32_t kQBytes = kBlockQ * kDqk * 2, kKBytes = kBlockK * kDqk * 2, kVBytes = kBlockK * kDv * 2;
  constexpr int kConsumerWarps = Tile::kWarps;
  using WS = Wgmma<Elem, kBlockK>;
  using WO = Wgmma<Elem, kDv>;

  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t sQ = (raw + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
  uint8_t* smem = smem_raw + (sQ - raw);
  const uint32_t sK = sQ + kQBytes;
  const uint32_t sV = sK + kStages * kKBytes;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kQBytes + kStages * (kKBytes + kVBytes));
  uint64_t* q_full = bars;                   // Q of the CTA's k-th tile has landed (phase k)
  uint64_t* q_empty = bars + 1;              // every consumer warp is done with the Q area (phase k)
  uint64_t* full = bars + 2;                 // [kStages]: the stage's TMA bytes have landed
  uint64_t* empty = bars + 2 + kStages;      // [kStages]: every consumer warp is done with the stage

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;  // warpgroup: query rows [64 wg, 64 wg + 64) of the tile
  const bool producer_wg = warp >= kConsumerWarps;

  // Tiles in (batch, head)-major order, so the CTAs working at one time share a head's K/V in
  // L2; causal tiles of a head heaviest first. CTA b takes tiles b, b + grid, b + 2 grid, ...
  const int num_tiles = q_blocks * p.num_heads * p.batch;
  auto coord = [&](int t) {
    const int hb = t / q_blocks, qb = kCausal ? q_blocks - 1 - t % q_blocks : t % q_blocks;
    TileCoord c;
    c.q0 = qb * kBlockQ;
    c.head = hb % p.num_heads;
    c.batch = hb / p.num_heads;
    int k_end = p.seqlen_k;
    if (kCausal) k_end = max(0, min(k_end, c.q0 + kBlockQ + p.causal_offset));
    c.n_tiles = (k_end + kBlockK - 1) / kBlockK;
    return c;
  };

  if (threadIdx.x == 0) {
    cuda::ptx::mbarrier_init(q_full, 1);
    cuda::ptx::mbarrier_init(q_empty, kConsumerWarps);
    for (int s = 0; s < kStages; ++s) {
      cuda::ptx::mbarrier_init(&full[s], 1);
      cuda::ptx::mbarrier_init(&empty[s], kConsumerWarps);
    }
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  __syncthreads();

  // The producer warpgroup. Copy group g of a tile = K tile g (g < n_tiles) and V tile g - 1
  // (1 <= g <= n_tiles); groups are numbered across the CTA's tiles (seq) and group seq lives
  // in stage seq % kStages, refilled once the consumers release group seq - kStages. The first
  // groups of a tile go out before its Q, which must wait for the previous tile's epilogue.
  if (producer_wg) {
    ptx::setmaxnreg_dec<Tile::kProducerRegs>();
    if (warp == kConsumerWarps && lane == 0) {
      uint32_t seq = 0;
      int k = 0;
      for (int t = blockIdx.x; t < num_tiles; t += gridDim.x, ++k) {
        const TileCoord c = coord(t);
        auto request_group = [&](int g) {
          const uint32_t gs = seq + g;
          const int stage = gs % kStages;
          if (gs >= kStages) ptx::mbarrier_wait(&empty[stage], ((gs / kStages) - 1) & 1);
          const uint32_t bytes = (g < c.n_tiles ? kKBytes : 0) + (g >= 1 ? kVBytes : 0);
          cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                               cuda::ptx::space_shared, &full[stage], bytes);
          if (g < c.n_tiles)
            tma_tile<kDqk, kBlockK>(smem + kQBytes + stage * kKBytes, &maps.k, g * kBlockK, c.head, c.batch,
                                    &full[stage]);
          if (g >= 1)
            tma_tile<kDv, kBlockK>(smem + kQBytes + kStages * kKBytes + stage * kVBytes, &maps.v,
                                   (g - 1) * kBlockK, c.head, c.batch, &full[stage]);
        };
        const int groups = c.n_tiles > 0 ? c.n_tiles + 1 : 0;
        const int early = min(groups, kStages - 1);
        for (int g = 0; g < early; ++g) request_group(g);
        if (k > 0) ptx::mbarrier_wait(q_empty, (k - 1) & 1);
        cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                             q_full, kQBytes);
        tma_tile<kDqk, kBlockQ>(smem, &maps.q, c.q0, c.head, c.batch, q_full);
        for (int g = early; g < groups; ++g) request_group(g);
        seq += groups;
      }
    }
    return;
  }
  ptx::setmaxnreg_inc<Tile::kConsumerRegs>();

  // This warpgroup's 64 rows of Q: column block b starts at b * kBlockQ * 128.
  const uint32_t sQ_wg = sQ + wg * 64 * 128;
  float o[4 * kOTiles];
  float m[2], l[2];
  float s[4 * kSTiles];          // S_j, then P_j in place
  uint32_t pa[kBlockK / 16][4];  // P_{j-1} as A fragments, read by the O wgmma in flight
  uint32_t seq = 0;              // copy groups consumed so far (the producer's numbering)

  // Ping-pong (a ring when there are three): warpgroup w issues its matrix products after
  // bar.sync(1 + w) and then lets the next one go (bar.arrive). Every warpgroup takes the same
  // number of turns per tile, so the ring runs unbroken across tiles: the last warpgroup opens
  // it once, warpgroup 0 closes it once.
  constexpr int kGroups = Tile::kConsumerGroups;
  auto my_turn = [&] { ptx::named_barrier_sync(1 + wg, 2 * 128); };
  auto your_turn = [&] { ptx::named_barrier_arrive(1 + (wg + 1) % kGroups, 2 * 128); };
  if (wg == kGroups - 1) your_turn();

  auto begin_iteration = [&](int j) { ptx::mbarrier_wait(&full[(seq + j) % kStages], ((seq + j) / kStages) & 1); };
  auto end_iteration = [&](int j) {  // this warp no longer reads group j's stage
    __syncwarp();
    if (lane == 0) cuda::ptx::mbarrier_arrive(&empty[(seq + j) % kStages]);
  };
  auto issue_s = [&](int j) {  // S_j = Q K_j^T, one wgmma group
    const uint32_t sKj = sK + ((seq + j) % kStages) * kKBytes;
#pragma unroll
    for (int kk = 0; kk < kDqk / 16; ++kk) {
      const uint32_t col = kk / 4, koff = (kk % 4) * 32;
      const uint64_t da = wgmma::desc_sw128(sQ_wg + col * kBlockQ * 128 + koff, 16, 1024);
      const uint64_t db = wgmma::desc_sw128(sKj + col * kBlockK * 128 + koff, 16, 1024);
      WS::ss(s, da, db, kk > 0);
    }
    wgmma::commit();
  };
  auto issue_pv = [&](int g) {  // O += P V with V of copy group g, one wgmma group
    // V rows are keys (the k dimension), Dv contiguous (N-major): a k-step covers 16 keys = two
    // 8-row groups 1024 B apart; column blocks of 64 Dv sit kBlockK * 128 B apart.
    const uint32_t sVg = sV + ((seq + g) % kStages) * kVBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk)
      WO::rs(o, pa[kk], wgmma::desc_sw128(sVg + kk * 16 * 128, kBlockK * 128, 1024), 1);
    wgmma::commit();
  };
  auto to_fragments = [&] {
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) p_fragment<Elem>(s, kk, pa[kk]);
  };

  int k = 0;
  for (int t = blockIdx.x; t < num_tiles; t += gridDim.x, ++k) {
    const TileCoord c = coord(t);
    const int n_tiles = c.n_tiles;
    const int warp_row0 = c.q0 + warp * 16;
#pragma unroll
    for (int i = 0; i < 4 * kOTiles; ++i) o[i] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
    // Q has landed (also when there is no key tile: its bytes must not land over staged rows).
    ptx::mbarrier_wait(q_full, k & 1);

    // Iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} back to back; the softmax of S_j
    // runs while the tensor cores still work on P_{j-1} V_{j-1}, and O is rescaled once that
    // product has landed. The first and last iterations are peeled so the compiler sees one
    // unconditional wgmma pipeline.
    if (n_tiles > 0) {
      begin_iteration(0);
      my_turn();
      wgmma::fence();
      issue_s(0);
      your_turn();
      wgmma::wait<0>();
      wgmma::pin(s);
      float alpha[2];
      online_softmax_tile<kSTiles, kCausal, Tile::kTreeSoftmax>(s, m, l, alpha, p, 0, warp_row0, lane);
      to_fragments();
      end_iteration(0);
    }
    for (int j = 1; j < n_tiles; ++j) {
      begin_iteration(j);
      my_turn();
      wgmma::fence();
      issue_s(j);
      issue_pv(j);
      your_turn();
      wgmma::wait<1>();  // S_j has landed; P_{j-1} V_{j-1} may still run
      wgmma::pin(s);
      float alpha[2];
      online_softmax_tile<kSTiles, kCausal, Tile::kTreeSoftmax>(s, m, l, alpha, p, j * kBlockK, warp_row0, lane);
      wgmma::wait<0>();
      wgmma::pin(o);
      end_iteration(j);
      rescale_rows<kOTiles>(o, alpha);
      to_fragments();
    }
    if (n_tiles > 0) {
      begin_iteration(n_tiles);
      my_turn();
      wgmma::fence();
      issue_pv(n_tiles);
      your_turn();
      wgmma::wait<0>();
      wgmma::pin(o);
      end_iteration(n_tiles);
      seq += n_tiles + 1;
    }

    // Epilogue: stage this warp's 16 rows in its own rows of the Q area (this warpgroup's wgmmas
    // have completed and no other warp reads them), 16-byte row stores, then hand the Q area back.
    float inv[2], lse[2];
    finish_rows(m, l, inv, lse);
    const int staged_row0 = warp * 16;
#pragma unroll
    for (int n = 0; n < kOTiles; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = staged_row0 + lane / 4 + 8 * r;
        *reinterpret_cast<uint32_t*>(smem + wgmma::sw128_offset(kBlockQ, row, n) + 4 * (lane % 4)) =
            ElemOps<Elem>::pack(o[4 * n + 2 * r] * inv[r], o[4 * n + 2 * r + 1] * inv[r]);
      }
    __syncwarp();
    auto staged_offset = [staged_row0](int r, int col) { return wgmma::sw128_offset(kBlockQ, staged_row0 + r, col); };
    store_rows<kVChunks>(smem, staged_offset, p, c.batch, c.head, warp_row0, lane, lse);
    wgmma::fence_proxy_async_smem();  // these generic accesses come before the next Q's TMA writes
    __syncwarp();
    if (lane == 0) cuda::ptx::mbarrier_arrive(q_empty);
  }
  if (wg == 0) my_turn();  // consumes the last warpgroup's last your_turn()
}

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no libcuda link).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    DSA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr)
      throw Error("the driver has no cuTensorMapEncodeTiled (needs CUDA 12.0 or newer)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A (D, L, N, B) tensor with the given element strides, read in 64-column x box_rows boxes into
// 128-byte-swizzled shared memory; rows past L read as zeros.
CUtensorMap tensor_map(const void* base, DType dtype, int dim, int rows, int heads, int batch, int64_t row_stride,
                       int64_t head_stride, int64_t batch_stride, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {cuuint64_t(dim), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(row_stride) * 2, cuuint64_t(head_stride) * 2, cuuint64_t(batch_stride) * 2};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode_tiled()(&map, dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                    4, const_cast<void*>(base), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw Error("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r)));
  return map;
}

template <typename Elem, int kDqk, int kDv, bool kCausal>
void launch(const DenseParams& p, DType dtype, int q_blocks, int ctas, cudaStream_t stream) {
  using Tile = WgmmaTile<kDqk>;
  constexpr int kSmem = Tile::smem_bytes(kDv);
  constexpr auto kernel = wgmma_forward_kernel<Elem, kDqk, kDv, kCausal>;
  raise_smem_limit_once<kernel>(kSmem);
  DenseTensorMaps maps;
  maps.q = tensor_map(p.q, dtype, kDqk, p.seqlen_q, p.num_heads, p.batch, p.q_row_stride, p.q_head_stride,
                      p.q_batch_stride, Tile::kBlockQ);
  maps.k = tensor_map(p.k, dtype, kDqk, p.seqlen_k, p.num_heads, p.batch, p.k_row_stride, p.k_head_stride,
                      p.k_batch_stride, Tile::kBlockK);
  maps.v = tensor_map(p.v, dtype, kDv, p.seqlen_k, p.num_heads, p.batch, p.v_row_stride, p.v_head_stride,
                      p.v_batch_stride, Tile::kBlockK);
  kernel<<<static_cast<unsigned>(ctas), Tile::kThreads, kSmem, stream>>>(p, maps, q_blocks);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_wgmma_forward(const DenseParams& p, DType dtype, int head_dim_qk, bool causal, int q_blocks, int ctas,
                          cudaStream_t stream) {
  dispatch_dense(dtype, head_dim_qk, causal, [&](auto elem, auto dqk, auto dv, auto masked) {
    launch<typename decltype(elem)::type, decltype(dqk)::value, decltype(dv)::value, decltype(masked)::value>(
        p, dtype, q_blocks, ctas, stream);
  });
}

}  // namespace dsa::detail
