// Sparse MLA forward for tokens that share rows (prefill): one CTA = 4 consecutive tokens x one
// group of 16 heads x all their index positions, 16 warps.
//
// The split-K kernel gathers every (token, row) pair through L2 on its own; in prefill the tokens
// of one sequence pick most of their rows from the same prefix, and that traffic bounds it
// (docs/perf.md: its load stage alone takes 1988 us at T=4096). Here a row that several of the
// CTA's tokens picked crosses L2 once.
//   1. The 4 x topk indices become keys (row << 2 | token) and are sorted in shared memory by
//      cub::BlockRadixSort. Each distinct row is a "union entry" (the position of its first key);
//      the order is deterministic (by row), and a token that lists a row twice has two keys.
//   2. Q of the 4 tokens is staged and moved into registers. Warp group g (warps 4g..4g+3) owns
//      token g and does the split-K kernel's math for it: warp 4g+w keeps Q dims [144w, 144w+144)
//      and O dims [128w, 128w+128); the 4 partial scores are summed through shared memory.
//   3. Tiles of 32 union entries are gathered by 16-byte cp.async, 3 stages deep. In each tile
//      group g picks its keys by ballot (with their multiplicity: duplicates count per occurrence)
//      and computes on 16 of them at a time; ldmatrix reads the chosen rows of the tile through
//      per-lane addresses, so rows of the other tokens cost no math beyond padding to 16 keys.
//   4. Each group normalises and writes its token's out and lse: no split, no combine.
// Limits (the planner's): topk <= 2048, num_rows < 2^30 (the key packs the row and token).
//
// History (H100, dsa-bench, CUPTI kernel span, L2 flushed; docs/perf.md has the tables).
#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>
#include <cub/block/block_radix_sort.cuh>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "sparse_mla/kernel_common.cuh"
#include "sparse_mla/params.h"

namespace dsa::detail {
namespace {

constexpr int kTokens = kSharedRowsTokens;                // tokens per CTA
constexpr int kWarpsPerToken = 4;
constexpr int kWarps = kTokens * kWarpsPerToken;           // 16
constexpr int kThreads = kWarps * 32;                      // 512
constexpr int kMaxKeys = kTokens * SparseMlaPlan::kMaxChunk;  // 8192
constexpr int kKeysPerThread = kMaxKeys / kThreads;        // 16
constexpr int kTileEntries = 32;                           // union entries per tile (one per lane)
constexpr int kStages = 3;
constexpr int kStepKeys = 16;                              // keys per compute step (mma k of P V)
constexpr int kDimsPerWarpQk = kQkDim / kWarpsPerToken;    // 144 = 9 k-steps
constexpr int kKSteps = kDimsPerWarpQk / 16;
constexpr int kDimsPerWarpV = kCkvDim / kWarpsPerToken;    // 128
constexpr int kTileBytes = kTileEntries * kRowBytes;
constexpr int kQBytes = kHeadGroup * kRowBytes;            // one token's staged Q
constexpr int kStagedBytes = kHeadGroup * kStagedStrideBf16 * 2;  // one token's staged output
static_assert(kTokens * kQBytes <= kStages * kTileBytes, "Q staging fits the tile buffers");
static_assert(kTokens * kStagedBytes <= kStages * kTileBytes, "output staging fits the tile buffers");

using KeySort = cub::BlockRadixSort<uint32_t, kThreads, kKeysPerThread>;

// Dynamic shared memory, in order: sorted keys | union entries (uint16 key positions, +1 end) |
// score exchange (per group, two buffers) | tiles. The sort's scratch overlays the entries and
// the exchange; Q and the output are staged in the tiles.
constexpr int kKeysBytes = kMaxKeys * 4;
constexpr int kEntriesBytes = ((kMaxKeys + 1) * 2 + 15) / 16 * 16;
constexpr int kExchangeBytes = kTokens * 2 * kWarpsPerToken * (kStepKeys / 8) * 32 * 16;
constexpr int kTilesOffset = kKeysBytes + kEntriesBytes + kExchangeBytes;
constexpr int kSmemBytes = kTilesOffset + kStages * kTileBytes;
static_assert(sizeof(typename KeySort::TempStorage) <= kEntriesBytes + kExchangeBytes, "sort scratch fits");

__global__ void __launch_bounds__(kThreads, 1) sparse_mla_shared_rows_kernel(const SparseMlaParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint32_t* s_keys = reinterpret_cast<uint32_t*>(smem);
  uint16_t* s_entry = reinterpret_cast<uint16_t*>(smem + kKeysBytes);
  float4* s_exchange = reinterpret_cast<float4*>(smem + kKeysBytes + kEntriesBytes);
  uint8_t* s_tiles = smem + kTilesOffset;
  __shared__ int s_counts[kKeysPerThread * kWarps + 1];  // heads per (item, warp), then offsets
  __shared__ int s_num_keys;
  __shared__ uint8_t s_pos[kWarps][kTileEntries];        // per warp: tile entry of its k-th key
  __shared__ float s_weight[kWarps][kTileEntries];       // and how often its token listed the row

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / kWarpsPerToken, wq = warp % kWarpsPerToken;
  const int gtid = threadIdx.x % (kWarpsPerToken * 32);
  const int head_groups = p.num_heads / kHeadGroup;
  const int h0 = (blockIdx.x % head_groups) * kHeadGroup;
  const int t0 = (blockIdx.x / head_groups) * kTokens;
  const int t = t0 + group;
  const bool token_live = t < p.num_tokens;
  const uint32_t invalid_key = static_cast<uint32_t>(p.num_rows) << 2;  // above every valid key

  // 1. Keys, loaded position-major so each warp's loads are contiguous.
  uint32_t keys[kKeysPerThread];
  const int num_positions = kTokens * p.topk;
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) {
    const int q = j * kThreads + threadIdx.x;
    const int g = q / p.topk, pos = q - g * p.topk;
    int row = -1;
    if (q < num_positions && t0 + g < p.num_tokens) row = __ldg(p.indices + (int64_t)(t0 + g) * p.indices_token_stride + pos);
    keys[j] = static_cast<unsigned>(row) < static_cast<unsigned>(p.num_rows) ? (static_cast<uint32_t>(row) << 2) | g
                                                                              : invalid_key;
  }
  // Q of this group's token -> the group's slice of the tile buffers (overwritten by tiles later).
  if (token_live) stage_q(p, ptx::smem_addr(s_tiles + group * kQBytes), t, h0, gtid, kWarpsPerToken * 32);
  ptx::cp_async_commit();
  if (threadIdx.x == 0) s_num_keys = 0;

  const int end_bit = 32 - __clz(invalid_key);
  KeySort(*reinterpret_cast<typename KeySort::TempStorage*>(s_entry)).SortBlockedToStriped(keys, 0, end_bit);
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) s_keys[j * kThreads + threadIdx.x] = keys[j];
  __syncthreads();  // sorted keys visible; the sort's scratch is free

  // 2. Union entries: the first key of each row, compacted in key order.
  unsigned head_ballot[kKeysPerThread];
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) {
    const int i = j * kThreads + threadIdx.x;
    const bool valid = keys[j] < invalid_key;
    const bool head = valid && (i == 0 || (s_keys[i - 1] >> 2) != (keys[j] >> 2));
    if (valid && (i + 1 == kMaxKeys || s_keys[i + 1] >= invalid_key)) s_num_keys = i + 1;
    head_ballot[j] = __ballot_sync(0xffffffffu, head);
    if (lane == 0) s_counts[j * kWarps + warp] = __popc(head_ballot[j]);
  }
  __syncthreads();
  if (warp == 0) {  // exclusive scan of the 256 (item, warp) counts, 8 per lane
    constexpr int kPer = kKeysPerThread * kWarps / 32;
    int c[kPer], sum = 0;
#pragma unroll
    for (int u = 0; u < kPer; ++u) sum += (c[u] = s_counts[lane * kPer + u]);
    int incl = sum;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    __syncwarp();
    int run = incl - sum;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      s_counts[lane * kPer + u] = run;
      run += c[u];
    }
    if (lane == 31) s_counts[kKeysPerThread * kWarps] = incl;
  }
  __syncthreads();
  const unsigned lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j)
    if ((head_ballot[j] >> lane) & 1u)
      s_entry[s_counts[j * kWarps + warp] + __popc(head_ballot[j] & lanes_below)] = j * kThreads + threadIdx.x;
  const int num_entries = s_counts[kKeysPerThread * kWarps];
  if (threadIdx.x == 0) s_entry[num_entries] = s_num_keys;

  // Q fragments into registers, then the tile buffers are free for the pipeline.
  ptx::cp_async_wait<0>();
  __syncthreads();
  uint32_t q_frag[kKSteps][4];
  if (token_live) {
    const uint32_t base = ptx::smem_addr(s_tiles + group * kQBytes);
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const int dim = wq * kDimsPerWarpQk + kk * 16 + (lane / 16) * 8;
      ptx::ldmatrix_x4(q_frag[kk], base + (lane % 16) * kRowBytes + dim * 2);
    }
  }
  __syncthreads();

  // 3. Pipeline over tiles of union entries; warp w gathers entries w and w + 16 of a tile.
  const int num_tiles = (num_entries + kTileEntries - 1) / kTileEntries;
  auto load_tile = [&](int tile) {
    const uint32_t base = ptx::smem_addr(s_tiles + (tile % kStages) * kTileBytes);
#pragma unroll
    for (int r = warp; r < kTileEntries; r += kWarps) {
      const int e = tile * kTileEntries + r;
      if (e < num_entries) gather_row(p, base + r * kRowBytes, s_keys[s_entry[e]] >> 2, 16u, lane);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) load_tile(s);
    ptx::cp_async_commit();
  }

  float o_acc[kDimsPerWarpV / 8][4];
#pragma unroll
  for (int j = 0; j < kDimsPerWarpV / 8; ++j) o_acc[j][0] = o_acc[j][1] = o_acc[j][2] = o_acc[j][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // rows g and g+8 (g = lane / 4), base-2 logits
  float l_run[2] = {0.f, 0.f};
  const int k_key = (lane & 7) + ((lane >> 4) << 3), k_dim = ((lane >> 3) & 1) * 8;  // K (B, non-trans)
  const int v_key = (lane & 7) + (((lane >> 3) & 1) << 3), v_dim = (lane >> 4) * 8;  // V (B, trans)
  const int quad_col = (lane % 4) * 2;
  const int barrier_id = 1 + group;  // 0 is __syncthreads
  int step = 0;                      // compute steps so far (selects the exchange buffer)

  for (int it = 0; it < num_tiles; ++it) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile `it` visible to all; everyone is done with tile it-1
    if (it + kStages - 1 < num_tiles) load_tile(it + kStages - 1);
    ptx::cp_async_commit();
    const uint32_t tile = ptx::smem_addr(s_tiles + (it % kStages) * kTileBytes);

    // This token's keys in the tile: lane l looks at entry l (its keys are contiguous).
    int count = 0;
    const int e = it * kTileEntries + lane;
    if (e < num_entries) {
      const int end = s_entry[e + 1];
      for (int k = s_entry[e]; k < end; ++k) count += (s_keys[k] & 3u) == static_cast<unsigned>(group);
    }
    const unsigned chosen = __ballot_sync(0xffffffffu, count > 0);
    const int num_chosen = __popc(chosen);  // the same in the group's 4 warps
    if (count > 0) {
      const int rank = __popc(chosen & lanes_below);
      s_pos[warp][rank] = static_cast<uint8_t>(lane);
      s_weight[warp][rank] = static_cast<float>(count);
    }
    __syncwarp();

    for (int k0 = 0; k0 < num_chosen; k0 += kStepKeys, ++step) {
      const int kq = k0 + k_key, kv = k0 + v_key;
      const uint32_t k_row = tile + s_pos[warp][kq < num_chosen ? kq : 0] * kRowBytes;
      const uint32_t v_row = tile + s_pos[warp][kv < num_chosen ? kv : 0] * kRowBytes;

      // Partial scores over this warp's 144 dims for 16 keys.
      float s_acc[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t b[4];
        ptx::ldmatrix_x4(b, k_row + (wq * kDimsPerWarpQk + kk * 16 + k_dim) * 2);
        ptx::mma_bf16_16816(s_acc[0], q_frag[kk], b[0], b[1]);
        ptx::mma_bf16_16816(s_acc[1], q_frag[kk], b[2], b[3]);
      }
      float4* xbuf = s_exchange + ((group * 2 + (step & 1)) * kWarpsPerToken) * 2 * 32;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        xbuf[(wq * 2 + j) * 32 + lane] = make_float4(s_acc[j][0], s_acc[j][1], s_acc[j][2], s_acc[j][3]);
      // The buffer alternates, so one barrier per step suffices: the writes of step + 2 come
      // after every warp passed step + 1's barrier, i.e. after its reads of this step.
      ptx::named_barrier_sync(barrier_id, kWarpsPerToken * 32);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float4 sum = xbuf[j * 32 + lane];
#pragma unroll
        for (int w = 1; w < kWarpsPerToken; ++w) {
          const float4 v = xbuf[(w * 2 + j) * 32 + lane];
          sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
        }
        s_acc[j][0] = sum.x; s_acc[j][1] = sum.y; s_acc[j][2] = sum.z; s_acc[j][3] = sum.w;
      }

      // Online softmax, base 2, each key weighted by its multiplicity; padding keys are -inf.
      float weight[2][2];
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int key = k0 + j * 8 + quad_col + c;
          const bool live = key < num_chosen;
          weight[j][c] = live ? s_weight[warp][key] : 0.f;
          s_acc[j][c] = live ? s_acc[j][c] * p.scale_log2 : -INFINITY;
          s_acc[j][c + 2] = live ? s_acc[j][c + 2] * p.scale_log2 : -INFINITY;
        }
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(fmaxf(s_acc[0][2 * r], s_acc[0][2 * r + 1]), fmaxf(s_acc[1][2 * r], s_acc[1][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[r], mx);  // finite: key k0 is live
        alpha[r] = ptx::exp2_approx(m_run[r] - m_new);
        m_run[r] = m_new;
        l_run[r] *= alpha[r];
      }
      uint32_t p_frag[4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float p0 = weight[j][0] * ptx::exp2_approx(s_acc[j][0] - m_run[0]);
        const float p1 = weight[j][1] * ptx::exp2_approx(s_acc[j][1] - m_run[0]);
        const float p2 = weight[j][0] * ptx::exp2_approx(s_acc[j][2] - m_run[1]);
        const float p3 = weight[j][1] * ptx::exp2_approx(s_acc[j][3] - m_run[1]);
        l_run[0] += p0 + p1;
        l_run[1] += p2 + p3;
        p_frag[j * 2 + 0] = ptx::pack_bf16x2(p0, p1);
        p_frag[j * 2 + 1] = ptx::pack_bf16x2(p2, p3);
      }
#pragma unroll
      for (int j = 0; j < kDimsPerWarpV / 8; ++j) {
        o_acc[j][0] *= alpha[0]; o_acc[j][1] *= alpha[0];
        o_acc[j][2] *= alpha[1]; o_acc[j][3] *= alpha[1];
      }
      // O[:, this warp's 128 dims] += P V.
#pragma unroll
      for (int nd = 0; nd < kDimsPerWarpV / 16; ++nd) {
        uint32_t b[4];
        ptx::ldmatrix_x4_trans(b, v_row + (wq * kDimsPerWarpV + nd * 16 + v_dim) * 2);
        ptx::mma_bf16_16816(o_acc[2 * nd], p_frag, b[0], b[1]);
        ptx::mma_bf16_16816(o_acc[2 * nd + 1], p_frag, b[2], b[3]);
      }
    }
  }
  ptx::cp_async_wait<0>();  // nothing may be in flight when the CTA exits

  // 4. Epilogue: normalise, stage the group's 16 x 512 bf16 tile, write whole rows.
  float inv_l[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    const bool any = l_run[r] > 0.f;
    inv_l[r] = any ? 1.f / l_run[r] : 0.f;
    lse[r] = any ? m_run[r] + log2f(l_run[r]) : -INFINITY;
  }
  __syncthreads();  // every warp is done reading the tiles
  if (!token_live) return;
  const int g = lane / 4;
  uint32_t* so = reinterpret_cast<uint32_t*>(s_tiles + group * kStagedBytes);
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < kDimsPerWarpV / 8; ++j)
      so[((g + 8 * r) * kStagedStrideBf16 + wq * kDimsPerWarpV + j * 8 + quad_col) / 2] =
          ptx::pack_bf16x2(o_acc[j][2 * r] * inv_l[r], o_acc[j][2 * r + 1] * inv_l[r]);
  if (wq == 0 && lane % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) p.lse[t * p.lse_token_stride + h0 + g + 8 * r] = lse[r];
  }
  ptx::named_barrier_sync(barrier_id, kWarpsPerToken * 32);
  const uint16_t* staged = reinterpret_cast<const uint16_t*>(so);
  for (int i = gtid; i < kHeadGroup * kCkvDim / 8; i += kWarpsPerToken * 32) {
    const int h = i / (kCkvDim / 8), c = i % (kCkvDim / 8);
    *reinterpret_cast<uint4*>(p.out + t * p.out_token_stride + (h0 + h) * p.out_head_stride + c * 8) =
        *reinterpret_cast<const uint4*>(staged + h * kStagedStrideBf16 + c * 8);
  }
}

}  // namespace

int shared_rows_smem_bytes() { return kSmemBytes; }

void launch_sparse_mla_shared_rows(const SparseMlaParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  static thread_local bool configured[64] = {};
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 64 || !configured[device]) {
    DSA_CUDA_CHECK(cudaFuncSetAttribute(sparse_mla_shared_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    if (device < 64) configured[device] = true;
  }
  const int64_t ctas = (int64_t)(p.num_tokens + kTokens - 1) / kTokens * (p.num_heads / kHeadGroup);
  sparse_mla_shared_rows_kernel<<<static_cast<unsigned>(ctas), kThreads, kSmemBytes, stream>>>(p);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::detail
