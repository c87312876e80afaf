// Sparse MLA forward for tokens that share rows (prefill): one CTA = 4 consecutive tokens x one
// group of 16 heads x all their index positions, on the tensor cores' wgmma with M = 64 = the 4
// tokens' 16 heads each.
//
// The split-K kernel gathers every (token, row) pair through L2 on its own and is bound by L2 in
// prefill (docs/perf.md: its load stage alone takes ~1990 us at T = 4096). Here a row that several
// of the CTA's tokens picked crosses L2 once and is read from shared memory once for all four:
//   1. The 4 x topk indices become keys (row << 2 | token), sorted by cub::BlockRadixSort. Each
//      distinct row is one "union entry" (the position of its first key), in row order, so the
//      result is deterministic; a token that lists a row k times has k keys, and the row's
//      weight in that token's softmax is k.
//   2. Three warpgroups split the work (FlashAttention-3's warp specialisation):
//      - the scores warpgroup keeps Q[:, 0:384] of the 64 rows in registers (96 registers; the
//        other 192 dims stay in shared memory) and for each tile of 32 entries computes
//        S = Q K^T (wgmma m64n32k16, A from registers), masks the entries a row's token did not
//        list (weight 0 -> -inf; warp w holds rows 16w..16w+15 = token w), runs the online
//        softmax (base 2) and hands P (bf16) and the rescale factors over in shared memory;
//      - the two output warpgroups gather the tiles (16-byte cp.async into the 128-byte-swizzled
//        layout wgmma reads, 3 stages; entries past the end zero-filled) and accumulate
//        O[:, 256g .. 256g+256) += P V (wgmma m64n256k16, V = the ckv part of the same tile as an
//        N-major operand), while the scores warpgroup is already on the next tile.
//      Named barriers hand tiles and P over (producer bar.arrive, consumer bar.sync).
//   3. Epilogue: normalise, stage the 64 x 512 bf16 tile in shared memory, write whole rows and
//      the lse. One CTA owns its tokens' heads: no split, no combine, no workspace.
// The tensor cores compute every (query row, entry) pair, also those of entries another token
// listed: at the bench's prefill overlap (uniform random subsets of a prefix, ~1/3 shared)
// that is ~2.4x the useful MMA work, traded for 0.6x the L2 traffic and shared-memory reads
// served to four tokens at once.
// Limits (the planner's): topk <= 2048, num_rows < 2^30 (the key packs the row and the token).
//
// History (H100, dsa-bench, CUPTI kernel span, L2 flushed; docs/perf.md has the tables).
// T = 4096 prefill (8192-row prefix), split-K in the same run in brackets.
//   v0 76bc4a5  mma.sync, M = 16 per token, each token's warps picking its rows from the union
//               tile by per-lane ldmatrix addresses: 4393 us (2169), issue-bound. Reverted.
//   v1          wgmma M = 64, two warpgroups each computing half of S's 576 dims from shared
//               memory (m64n32k16 SS) and half of O, partial S summed through shared memory,
//               2 stages: 2868 us (2147). Dissection: loads alone 1113 (the union's gather
//               floor), + scores 2022, + softmax 2309; lock-step warpgroups, 1.9 IPC of
//               integer-heavy work, Q re-read from shared memory for every 32 entries.
//   v2          warp-specialised as above, 3 stages: 2623 (2171); the output warpgroups announced
//               tile j + 1 only after taking P of tile j, so scores and P V ran in lock-step.
//   v3          tile j + 1 announced before waiting for P of tile j (the scores warpgroup runs a
//               tile ahead): 2078 (2149); T = 8192 prefill 3092 (3711); T = 1024 random 795,
//               1.04x the gather floor (split-K 1.09x); T = 256 random 395 (64 CTAs: too few).
// Status: experimental, only when forced (PlanChoice::Kernel::shared_rows). Correct (136 GPU
// tests) and memcheck-clean, but racecheck reports the P / alpha hand-over (named-barrier
// arrive -> sync) and synccheck the epilogue's named barrier; the next step is mbarriers with
// release/acquire for the hand-over, then a planner rule (T >= 512).
#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>
#include <cub/block/block_radix_sort.cuh>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "common/warp_scan.cuh"
#include "common/wgmma.cuh"
#include "sparse_mla/params.h"

namespace dsa::detail {
namespace {

constexpr int kTokens = kSharedRowsTokens;                   // tokens per CTA
constexpr int kRows = kTokens * kHeadGroup;                  // 64 = wgmma M
constexpr int kOutGroups = 2;                                // output warpgroups
constexpr int kThreads = (1 + kOutGroups) * 128;             // warpgroup 0 computes the scores
constexpr int kWarps = kThreads / 32;
constexpr int kQkDim = kCkvDim + kKpeDim;                    // 576
constexpr int kChunksPerRow = kQkDim * 2 / 16;               // 72 x 16 B
constexpr int kCkvChunks = kCkvDim * 2 / 16;                 // 64
constexpr int kBlocks = kQkDim / 64;                         // 9 swizzled column blocks of 64 dims
constexpr int kTileEntries = kSharedRowsTileEntries;         // union entries per tile = S's N
constexpr int kStages = 3;
constexpr int kRegKSteps = 24;                               // Q dims 0-383 in registers
constexpr int kSmemKSteps = kQkDim / 16 - kRegKSteps;        // Q dims 384-575 from shared memory
constexpr int kRegChunks = kRegKSteps * 2;                   // 48 16-byte chunks of a Q row
constexpr int kDimsPerGroup = kCkvDim / kOutGroups;          // 256 output dims each
constexpr int kMaxKeys = kTokens * SparseMlaPlan::kMaxChunk;  // 8192
constexpr int kKeysPerThread = (kMaxKeys + kThreads - 1) / kThreads;  // 22
constexpr int kSAcc = kTileEntries / 2;                      // 16 accumulators of S per thread
constexpr int kOAcc = kDimsPerGroup / 2;                     // 128 accumulators of O per thread
constexpr int kStagedStride = kCkvDim + 8;                   // bf16 elements per staged output row
constexpr int kPStride = kTileEntries + 8;                   // bf16 elements per P row (ldmatrix without conflicts)
// Registers after setmaxnreg: the scores warpgroup holds 2/3 of Q (96) + S; each output
// warpgroup O (128) + P fragments + its loads. 128 x (152 + 2 x 176) = 64512, the launch's
// allocation (all of Q in registers spills on one side or the other and serialises the wgmmas).
constexpr int kScoresRegs = 152, kOutputRegs = 176;

// Named barriers (0 is __syncthreads). Producers bar.arrive, consumers bar.sync, kThreads each.
constexpr int kBarTileFull = 1;  // + stage: the tile's rows landed (output -> scores)
constexpr int kBarPFull = 4;     // + j % 2: P and alpha of tile j written (scores -> output)
constexpr int kBarPEmpty = 6;    // + j % 2: P and alpha of tile j read (output -> scores)
constexpr int kBarQRead = 8;     // Q moved into registers: its staging area may take tiles
constexpr int kBarEpilogue = 9;  // all warpgroups, twice: 1/l written, output staged

// Dynamic shared memory (1024-byte aligned for the swizzle atoms), in order:
constexpr int kTileBytes = kBlocks * kTileEntries * 128;     // one stage: 9 blocks of 32 rows x 128 B
constexpr int kQSmemBytes = kSmemKSteps / 4 * kRows * 128;    // Q dims 384-575: 3 blocks of 64 rows
constexpr int kKeysBytes = kMaxKeys * 4;                     // sorted keys
constexpr int kEntriesBytes = ((kMaxKeys + 1) * 2 + 15) / 16 * 16;  // uint16 key position per entry, + end
constexpr int kPBytes = kRows * kPStride * 2;                // one P buffer
using KeySort = cub::BlockRadixSort<uint32_t, kThreads, kKeysPerThread>;
constexpr int kHandoffBytes = 2 * kPBytes + 2 * kRows * 4 + kRows * 4;  // P x 2, alpha x 2, 1/l
constexpr int kScratchBytes = (static_cast<int>(sizeof(typename KeySort::TempStorage)) > kHandoffBytes
                                   ? static_cast<int>(sizeof(typename KeySort::TempStorage))
                                   : kHandoffBytes);
constexpr int kTilesOffset = 0;
constexpr int kQSmemOffset = kStages * kTileBytes;
constexpr int kKeysOffset = kQSmemOffset + kQSmemBytes;
constexpr int kEntriesOffset = kKeysOffset + kKeysBytes;
constexpr int kScratchOffset = (kEntriesOffset + kEntriesBytes + 127) / 128 * 128;  // sort, then hand-over
constexpr int kSmemBytes = kScratchOffset + kScratchBytes + 1024;
static_assert(kRows * kRegKSteps * 16 * 2 <= kStages * kTileBytes, "Q staging fits the tiles");
static_assert(kRows * kStagedStride * 2 <= kStages * kTileBytes, "output staging fits the tiles");

__global__ void __launch_bounds__(kThreads, 1) sparse_mla_shared_rows_kernel(const SparseMlaParams p) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const uint32_t sTiles = base + kTilesOffset, sQSmem = base + kQSmemOffset;
  uint32_t* s_keys = reinterpret_cast<uint32_t*>(smem + kKeysOffset);
  uint16_t* s_entry = reinterpret_cast<uint16_t*>(smem + kEntriesOffset);
  uint16_t* s_p = reinterpret_cast<uint16_t*>(smem + kScratchOffset);                   // [2][kRows][kPStride]
  float* s_alpha = reinterpret_cast<float*>(smem + kScratchOffset + 2 * kPBytes);       // [2][kRows]
  float* s_inv_l = s_alpha + 2 * kRows;                                                  // [kRows]
  __shared__ int s_counts[kKeysPerThread * kWarps + 1];  // heads per (item, warp), then offsets
  __shared__ int s_num_keys;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4;               // 0: scores, 1-2: output
  const int token_of_warp = warp % 4;    // rows 16w..16w+15 of the wgmma tile
  const int head_groups = p.num_heads / kHeadGroup;
  const int h0 = (blockIdx.x % head_groups) * kHeadGroup;
  const int t0 = (blockIdx.x / head_groups) * kTokens;
  const uint32_t invalid_key = static_cast<uint32_t>(p.num_rows) << 2;  // above every valid key

  // 1. Q of the 4 tokens: dims 0-383 into the tile area (read into registers below), dims
  //    384-575 into their own blocks; rows past T are zeros.
  for (int c = tid; c < kRows * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, col = c - r * kChunksPerRow;
    const int t = t0 + r / kHeadGroup, h = h0 + r % kHeadGroup;
    const bool live = t < p.num_tokens;
    const uint16_t* src = !live ? p.q_nope
                          : col < kCkvChunks
                              ? p.q_nope + t * p.q_nope_token_stride + h * p.q_nope_head_stride + col * 8
                              : p.q_pe + t * p.q_pe_token_stride + h * p.q_pe_head_stride + (col - kCkvChunks) * 8;
    const uint32_t dst = col < kRegChunks ? sTiles + wgmma::sw128_offset(kRows, r, col) : sQSmem + wgmma::sw128_offset(kRows, r, col - kRegChunks);
    ptx::cp_async_16(dst, src, live ? 16u : 0u);
  }
  ptx::cp_async_commit();

  // 2. Keys, loaded position-major so each warp's loads are contiguous; sorted.
  uint32_t keys[kKeysPerThread];
  const int num_positions = kTokens * p.topk;
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) {
    const int q = j * kThreads + tid;
    const int g = q / p.topk, pos = q - g * p.topk;
    int row = -1;
    if (q < num_positions && t0 + g < p.num_tokens) row = __ldg(p.indices + (int64_t)(t0 + g) * p.indices_token_stride + pos);
    keys[j] = static_cast<unsigned>(row) < static_cast<unsigned>(p.num_rows) ? (static_cast<uint32_t>(row) << 2) | g
                                                                              : invalid_key;
  }
  if (tid == 0) s_num_keys = 0;
  const int end_bit = 32 - __clz(invalid_key);
  KeySort(*reinterpret_cast<typename KeySort::TempStorage*>(smem + kScratchOffset)).SortBlockedToStriped(keys, 0, end_bit);
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j)
    if (j * kThreads + tid < kMaxKeys) s_keys[j * kThreads + tid] = keys[j];
  __syncthreads();  // sorted keys visible

  // Union entries: the first key of each row, compacted in key order.
  unsigned head_ballot[kKeysPerThread];
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) {
    const int i = j * kThreads + tid;
    const bool valid = i < kMaxKeys && keys[j] < invalid_key;
    const bool head = valid && (i == 0 || (s_keys[i - 1] >> 2) != (keys[j] >> 2));
    if (valid && (i + 1 == kMaxKeys || s_keys[i + 1] >= invalid_key)) s_num_keys = i + 1;
    head_ballot[j] = __ballot_sync(0xffffffffu, head);
    if (lane == 0) s_counts[j * kWarps + warp] = __popc(head_ballot[j]);
  }
  __syncthreads();
  if (warp == 0) warp_exclusive_scan<kKeysPerThread * kWarps>(s_counts, lane);
  __syncthreads();
  const unsigned lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j)
    if ((head_ballot[j] >> lane) & 1u)
      s_entry[s_counts[j * kWarps + warp] + __popc(head_ballot[j] & lanes_below)] = j * kThreads + tid;
  const int num_entries = s_counts[kKeysPerThread * kWarps];
  if (tid == 0) s_entry[num_entries] = s_num_keys;
  ptx::cp_async_wait<0>();
  wgmma::fence_proxy_async_smem();  // Q's shared-memory blocks are read by wgmma
  __syncthreads();  // entries and Q visible; the sort's scratch is free for the hand-over buffers
  const int num_tiles = (num_entries + kTileEntries - 1) / kTileEntries;

  if (wg == 0) {
    // ---- scores warpgroup --------------------------------------------------------------------
    ptx::setmaxnreg_dec<kScoresRegs>();
    uint32_t q[kRegKSteps][4];  // A fragments of Q[:, 0:384], rows 16w..16w+15 of this warp
#pragma unroll
    for (int kk = 0; kk < kRegKSteps; ++kk)
      ptx::ldmatrix_x4(q[kk], sTiles + wgmma::sw128_offset(kRows, token_of_warp * 16 + lane % 16, 2 * kk + lane / 16));
    ptx::named_barrier_arrive(kBarQRead, kThreads);  // the output warpgroups may load tiles over it

    float m_run[2] = {-INFINITY, -INFINITY};  // rows lane/4 and lane/4 + 8 of this warp, base-2 logits
    float l_run[2] = {0.f, 0.f};              // this lane's part of the row sums
    const float scale = p.scale_log2;
    const int col0 = 2 * (lane % 4);  // this lane's first column in each n8 tile of S
    const int row0 = token_of_warp * 16 + lane / 4;
    for (int j = 0; j < num_tiles; ++j) {
      ptx::named_barrier_sync(kBarTileFull + j % kStages, kThreads);
      const uint32_t tile = sTiles + (j % kStages) * kTileBytes;

      // This warp's token's weight for each entry of the tile: lane l counts entry l's keys.
      int count = 0;
      const int e = j * kTileEntries + lane;
      if (e < num_entries) {
        const int end = s_entry[e + 1];
        for (int k = s_entry[e]; k < end; ++k) count += (s_keys[k] & 3u) == static_cast<unsigned>(token_of_warp);
      }

      // S = Q K^T: 24 k-steps with Q from registers, 12 with Q from shared memory.
      float s[kSAcc];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kRegKSteps; ++kk)
        wgmma::mma_rs_bf16_n32(s, q[kk], wgmma::desc_sw128(tile + (kk / 4) * kTileEntries * 128 + (kk % 4) * 32, 16, 1024),
                               kk > 0);
#pragma unroll
      for (int kk = kRegKSteps; kk < kRegKSteps + kSmemKSteps; ++kk)
        wgmma::mma_ss_bf16_n32(s, wgmma::desc_sw128(sQSmem + ((kk - kRegKSteps) / 4) * kRows * 128 + (kk % 4) * 32, 16, 1024),
                               wgmma::desc_sw128(tile + (kk / 4) * kTileEntries * 128 + (kk % 4) * 32, 16, 1024), 1);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::pin(s);

      // Online softmax over the tile's 32 entries; an entry this token did not list is -inf, one
      // it listed k times has weight k.
      float weight[kSAcc / 2];  // per column: n8 tile x 2
#pragma unroll
      for (int n = 0; n < kSAcc / 4; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) weight[2 * n + c] = static_cast<float>(__shfl_sync(0xffffffffu, count, 8 * n + col0 + c));
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < kSAcc / 4; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& v = s[4 * n + 2 * r + c];
            v = weight[2 * n + c] > 0.f ? v * scale : -INFINITY;
            mx = fmaxf(mx, v);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[r], mx);
        const float m_ref = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet stays at 0
        alpha[r] = ptx::exp2_approx(m_run[r] - m_ref);
        m_run[r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < kSAcc / 4; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& v = s[4 * n + 2 * r + c];
            v = weight[2 * n + c] * ptx::exp2_approx(v - m_ref);
            sum += v;
          }
        l_run[r] = l_run[r] * alpha[r] + sum;
      }

      // Hand P (bf16) and alpha over; the buffer of tile j - 2 must have been read.
      if (j >= 2) ptx::named_barrier_sync(kBarPEmpty + j % 2, kThreads);
      uint16_t* pb = s_p + (j % 2) * kRows * kPStride;
#pragma unroll
      for (int n = 0; n < kSAcc / 4; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<uint32_t*>(pb + (row0 + 8 * r) * kPStride + 8 * n + col0) =
              ptx::pack_bf16x2(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]);
      if (lane % 4 == 0) {
        s_alpha[(j % 2) * kRows + row0] = alpha[0];
        s_alpha[(j % 2) * kRows + row0 + 8] = alpha[1];
      }
      ptx::named_barrier_arrive(kBarPFull + j % 2, kThreads);
    }

    // Row sums, 1/l for the output warpgroups, lse.
    const int my_token = t0 + token_of_warp;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool any = l > 0.f;
      if (lane % 4 == 0) {
        s_inv_l[row0 + 8 * r] = any ? 1.f / l : 0.f;
        if (my_token < p.num_tokens)
          p.lse[my_token * p.lse_token_stride + h0 + lane / 4 + 8 * r] = any ? m_run[r] + log2f(l) : -INFINITY;
      }
    }
    ptx::named_barrier_sync(kBarEpilogue, kThreads);  // (a) 1/l written
    ptx::named_barrier_sync(kBarEpilogue, kThreads);  // (b) the output tile staged
  } else {
    // ---- output warpgroups: gather the tiles, O += P V ------------------------------------------
    ptx::setmaxnreg_inc<kOutputRegs>();
    const int og = wg - 1;           // output dims [256 og, 256 og + 256)
    const int lw = warp - 4;         // loader warp 0..7
    auto load_tile = [&](int tile) {  // warp lw gathers entries lw, lw + 8, ... of the tile
      const uint32_t dst = sTiles + (tile % kStages) * kTileBytes;
#pragma unroll
      for (int r = lw; r < kTileEntries; r += 2 * 4) {
        const int e = tile * kTileEntries + r;
        const bool live = e < num_entries;
        const int64_t row = live ? static_cast<int64_t>(s_keys[s_entry[e]] >> 2) : 0;
        const uint32_t bytes = live ? 16u : 0u;
        const uint16_t* ckv = p.ckv + row * p.ckv_row_stride;
        ptx::cp_async_16(dst + wgmma::sw128_offset(kTileEntries, r, lane), ckv + lane * 8, bytes);
        ptx::cp_async_16(dst + wgmma::sw128_offset(kTileEntries, r, lane + 32), ckv + (lane + 32) * 8, bytes);
        if (lane < kChunksPerRow - kCkvChunks)
          ptx::cp_async_16(dst + wgmma::sw128_offset(kTileEntries, r, kCkvChunks + lane), p.kpe + row * p.kpe_row_stride + lane * 8,
                           bytes);
      }
    };
    // Tile j is announced once its copies landed: wait_group, then the proxy fence (cp.async
    // writes -> the wgmma proxy), then bar.arrive.
    auto announce = [&](int tile) {
      wgmma::fence_proxy_async_smem();
      ptx::named_barrier_arrive(kBarTileFull + tile % kStages, kThreads);
    };
    ptx::named_barrier_sync(kBarQRead, kThreads);
    if (num_tiles > 0) load_tile(0);
    ptx::cp_async_commit();
    if (num_tiles > 1) load_tile(1);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();
    if (num_tiles > 0) announce(0);

    float o[kOAcc];
#pragma unroll
    for (int i = 0; i < kOAcc; ++i) o[i] = 0.f;
    const int row0 = token_of_warp * 16 + lane / 4;
    for (int j = 0; j < num_tiles; ++j) {
      // Tile j + 2 goes into the stage of tile j - 1 (its P V and S are done); tile j + 1 was
      // requested one iteration ago and is announced once it has landed, before this warpgroup
      // waits for P of tile j, so the scores warpgroup can run a tile ahead.
      if (j + 2 < num_tiles) load_tile(j + 2);
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();
      if (j + 1 < num_tiles) announce(j + 1);
      ptx::named_barrier_sync(kBarPFull + j % 2, kThreads);
      const float a0 = s_alpha[(j % 2) * kRows + row0], a1 = s_alpha[(j % 2) * kRows + row0 + 8];
      uint32_t pa[kTileEntries / 16][4];
      const uint16_t* pb = s_p + (j % 2) * kRows * kPStride;
#pragma unroll
      for (int kk = 0; kk < kTileEntries / 16; ++kk)
        ptx::ldmatrix_x4(pa[kk], ptx::smem_addr(pb + (token_of_warp * 16 + lane % 16) * kPStride + kk * 16 + (lane / 16) * 8));
      if (j + 2 < num_tiles) ptx::named_barrier_arrive(kBarPEmpty + j % 2, kThreads);
      if (!__all_sync(0xffffffffu, a0 == 1.f && a1 == 1.f)) {  // no row max moved: skip the rescale
#pragma unroll
        for (int n = 0; n < kOAcc / 4; ++n) {
          o[4 * n + 0] *= a0;
          o[4 * n + 1] *= a0;
          o[4 * n + 2] *= a1;
          o[4 * n + 3] *= a1;
        }
      }
      // O[:, this warpgroup's 256 dims] += P V: V rows are the tile's entries (the k dimension),
      // dims contiguous (N-major); a k-step covers 16 entries = two 8-row groups 1024 B apart,
      // column blocks of 64 dims sit kTileEntries * 128 B apart.
      wgmma::fence();
      const uint32_t v_base = sTiles + (j % kStages) * kTileBytes + (og * kDimsPerGroup / 64) * kTileEntries * 128;
#pragma unroll
      for (int kk = 0; kk < kTileEntries / 16; ++kk)
        wgmma::mma_rs_bf16_n256_bT(o, pa[kk], wgmma::desc_sw128(v_base + kk * 16 * 128, kTileEntries * 128, 1024), 1);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::pin(o);
    }
    ptx::cp_async_wait<0>();

    // Epilogue: normalise and stage the 64 x 512 bf16 tile over the tiles.
    ptx::named_barrier_sync(kBarEpilogue, kThreads);  // (a) 1/l written; every warpgroup is done with the tiles
    const float inv0 = s_inv_l[row0], inv1 = s_inv_l[row0 + 8];
    uint16_t* staged = reinterpret_cast<uint16_t*>(smem + kTilesOffset);
    const int col0 = 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < kOAcc / 4; ++n) {
      *reinterpret_cast<uint32_t*>(staged + row0 * kStagedStride + og * kDimsPerGroup + 8 * n + col0) =
          ptx::pack_bf16x2(o[4 * n] * inv0, o[4 * n + 1] * inv0);
      *reinterpret_cast<uint32_t*>(staged + (row0 + 8) * kStagedStride + og * kDimsPerGroup + 8 * n + col0) =
          ptx::pack_bf16x2(o[4 * n + 2] * inv1, o[4 * n + 3] * inv1);
    }
    ptx::named_barrier_sync(kBarEpilogue, kThreads);  // (b)
  }

  // Every thread writes whole rows.
  const uint16_t* staged = reinterpret_cast<const uint16_t*>(smem + kTilesOffset);
  for (int i = tid; i < kRows * (kCkvDim / 8); i += kThreads) {
    const int r = i / (kCkvDim / 8), c = i % (kCkvDim / 8);
    const int t = t0 + r / kHeadGroup;
    if (t >= p.num_tokens) break;  // rows past T come last
    *reinterpret_cast<uint4*>(p.out + t * p.out_token_stride + (h0 + r % kHeadGroup) * p.out_head_stride + c * 8) =
        *reinterpret_cast<const uint4*>(staged + r * kStagedStride + c * 8);
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
