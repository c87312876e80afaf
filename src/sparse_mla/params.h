// The plain struct that crosses from the host API (sparse_mla.cpp) to the kernels (*.cu):
// validated pointers, strides resolved to concrete values, and the plan's choices.
#pragma once

#include <cstdint>
#include <limits>

#include <cuda_runtime_api.h>

#include "dsa/sparse_mla.h"

namespace dsa::detail {

struct SparseMlaParams {
  const uint16_t* q_nope;  // bf16 bits
  const uint16_t* q_pe;
  const uint16_t* ckv;     // kv_fp8: the fp8_ds_mla rows (bytes; ckv_row_stride in bytes)
  const uint16_t* kpe;     // kv_fp8: unused
  const int32_t* indices;
  const int32_t* topk_lengths;  // [T] or null (SparseMlaProblem::topk_lengths): see list_length
  uint16_t* out;
  float* lse;
  int64_t q_nope_token_stride, q_nope_head_stride;
  int64_t q_pe_token_stride, q_pe_head_stride;
  int64_t ckv_row_stride, kpe_row_stride;
  int64_t indices_token_stride;
  int64_t out_token_stride, out_head_stride;
  int64_t lse_token_stride;
  int num_tokens, num_heads, topk;
  int num_rows;          // num_pages * page_size: valid rows are [0, num_rows)
  float sm_scale;
  float scale_log2;      // sm_scale * log2(e): logits in base 2
  // plan
  int block_keys, splits, chunk;
  // SparseMlaPlan::row_order: bits > 0 sorts the rows by bits [shift, shift + bits) (row_order_key_bits).
  int row_order_shift, row_order_bits;
  int fused_rows;        // > 0: every CTA reads the token's whole index list (SparseMlaPlan::fused_rows)
  uint16_t* partial_out;  // [T, H, splits, 512] bf16 bits, normalised per split (splits > 1; partials.cuh)
  float* partial_lse;     // [T, H, splits] base 2, -inf for a split with no valid row
  uint8_t* shared_rows_union;  // shared-rows workspace: a record per group of 4 head blocks, their sizes, their order (layout below)
  bool shared_rows_union_pass;  // false: each shared-rows CTA compacts its token's list (SparseMlaPlan::union_pass)
  // What a split takes, for the combine: split-K split s index positions [s * chunk, s * chunk +
  // chunk); shared rows (true) an equal run of the compacted list's 32-entry tiles.
  bool splits_over_entries;
  bool kv_fp8;  // KvCacheFormat::fp8_ds_mla; in the padding after the two flags above
  bool split_softmax;  // split_k: SparseMlaPlan::split_softmax (always with kv_fp8)
  bool early_issue;    // split_k: SparseMlaPlan::early_issue (the launcher picks the instance)
  // A combine that another combine follows (the lead tokens', lead_tokens_view): each of its
  // blocks waits for the main kernel before it leaves, even one with nothing to merge, so its
  // grid ends after the main kernel and the next combine's wait, which is on this grid, covers
  // the main kernel's partials too.
  bool combine_before_another;
  // SparseMlaPlan::lead_tokens: tokens [0, lead_tokens) take lead_splits splits each (split-K:
  // of lead_chunk positions; 1: the token whole, its CTA writes out and lse), their CTAs first;
  // the later tokens take `splits`. Partials (partial_slot): the lead tokens' [lead_tokens, H,
  // lead_splits] when they split, then the later tokens' [T - lead_tokens, H, splits].
  int lead_tokens, lead_splits, lead_chunk;
  // Balanced split-K (SparseMlaPlan::balanced; balanced_slots 0: off): the main grid holds
  // balanced_slots split slots per head group. The schedule (make_sparse_mla_schedule; layout in
  // schedule_layout below) says which (token, split, splits) each slot computes and each token's
  // run of slots for the combine. Partials are indexed by slot: partial_out[(slot * H + h) *
  // 512], partial_lse[slot * H + h].
  int balanced_slots;
  int4* schedule;      // the header, then the slot table
  int2* token_splits;  // [T] (first slot, splits)
  int* token_rows;     // [T] valid rows, the count kernel's
  // Diagnostics (dsa-bench --timeline): when set, CTA b writes kTimelinePoints values at
  // timeline[b * kTimelinePoints]: %globaltimer at entry (ns), six SM clock counts, and
  // %globaltimer again at exit (the two timers give the SM clock), then (shared rows) four more
  // clock counts. Split-K: cycles since entry after Q issue, compaction, Q in registers, first
  // tile landed, the loop, the stores, then the SM's id.
  // Shared-rows: see SharedRowsTimeline in shared_rows_kernel.cu.
  long long* timeline;
  // SparseMlaPlan::share_probe (share_line_permille 0: off): the probe's (distinct rows, valid
  // entries) of each of share_samples sampled groups, written before this kernel starts. Both
  // kernels are launched; each CTA sums them first and leaves at once unless its kernel is the
  // one chosen (share_probe_picks_shared_rows, share_choice.cuh).
  const int2* share_pairs;
  int share_samples, share_line_permille;
};

inline constexpr int kTimelinePoints = 12;

// Stages of the split-K kernel; the ones before kStageFull are dissection variants (dsa-bench
// --stage) that stop early and produce no meaningful output.
enum SplitkStage { kStageLoad = 0, kStageScores = 1, kStageSoftmax = 2, kStageFull = 3 };

// Whether an index names a cache row ([0, num_rows)); -1 and out-of-range values do not. Every
// kernel that reads indices decides with this: split-K's compaction and its combine's fused-rows
// count must agree exactly, and the shared-rows union pass must skip the same entries.
__host__ __device__ inline bool names_a_row(int32_t index, int num_rows) {
  return static_cast<unsigned>(index) < static_cast<unsigned>(num_rows);
}

// How many of token t's index positions it lists: topk, or with topk_lengths its length clamped
// to [0, topk]. Every kernel that reads indices treats a position at or past it as -1 (it may
// load the entry, never use it), so all of them count the same valid rows. Where each kernel
// loads the length, so that its index loads never wait for it, is said there (split-K's with
// ptx::ld_nc_s32_or, clamped only after Q's copies: perf.md runs 389-392).
__host__ __device__ inline int clamp_list_length(const SparseMlaParams& p, int n) {
  const int at_least_0 = n > 0 ? n : 0;
  return at_least_0 < p.topk ? at_least_0 : p.topk;
}
__host__ __device__ inline int list_length(const SparseMlaParams& p, int64_t t) {
  return p.topk_lengths == nullptr ? p.topk : clamp_list_length(p, p.topk_lengths[t]);
}

// Row order (SparseMlaPlan::row_order): rows are sorted by their top kRowOrderBucketBits bits
// within the cache's range [0, 2^L), L = ceil(log2(num_rows)), plus bit L, which only the
// padding keys (2^L, sorted last) have: a stable radix sort over bits [shift, L].
inline constexpr int kRowOrderBucketBits = 6;
inline constexpr int kRowOrderBuckets = 1 << kRowOrderBucketBits;  // row >> shift < kRowOrderBuckets for every row
inline constexpr int64_t kRowOrderMinPairs = int64_t{1} << 17;  // the planner's line, (token, position) pairs
// Split-K's line, in (token, position) pairs. On fast memory (kFastMemoryEighths: the H200) the
// sort repays later or never (docs/perf.md runs 678-689, on / off in one call):
// - at 16 heads, bf16 lists of >= 2048 from 1.25 x 2^17 pairs (T = 80), of 1024-2047 from
//   1.5 x 2^17 (T = 192 at 1024); fp8 lists of >= 2048 from 2^18 (T = 128), of 1024-2047 from
//   1.75 x 2^17 (T = 224 at 1024: T = 200 tied, T = 240 lost 1.0 us without it); below those
//   lines it cost 0.5-3 us on lists that share no rows, on fp8 and on the half-wave lead plans,
//   and tied on random lists of 2048 at T = 64-72;
// - lists shorter than 1024, and 32-128 heads, never: it cost 1-14 % at every T measured, 16
//   heads lists of 128-512 at T = 256-8192 (topk 512 T = 1024 random 170.6 / 167.1 bf16, 139.1 /
//   133.0 fp8; topk 128 T = 8192 421.5 / 382.5), 32 heads lists of 128-512 at T = 300-2048,
//   and lists of 2049 (split-K's only plans past 16 heads' long lists) at 32 heads T = 64-300
//   and at 64 / 128 heads T = 64-256 (+1-9 %).
// The H100 keeps its line of 2^17.
inline constexpr int64_t kRowOrderNever = std::numeric_limits<int64_t>::max();
inline constexpr int64_t split_k_row_order_min_pairs(bool fast_memory, int num_heads, int topk, bool fp8) {
  if (!fast_memory) return kRowOrderMinPairs;
  if (num_heads != kHeadGroup || topk < 1024) return kRowOrderNever;
  if (fp8) return topk >= 2048 ? int64_t{1} << 18 : int64_t{7} << 15;
  return topk >= 2048 ? int64_t{5} << 15 : int64_t{3} << 16;
}

struct RowOrderKeyBits {
  int shift, bits;
};
inline RowOrderKeyBits row_order_key_bits(int64_t num_rows) {
  int l = 0;
  while ((int64_t{1} << l) < num_rows) ++l;
  const int shift = l > kRowOrderBucketBits ? l - kRowOrderBucketBits : 0;
  return {shift, l + 1 - shift};
}
__host__ __device__ inline uint32_t row_order_padding_key(int shift, int bits) { return 1u << (shift + bits - 1); }

// Split starts must fall on these boundaries for fused rows: the compaction counts valid
// indices per 32 positions (one warp's ballot), and a split finds its rows from those counts.
inline constexpr int kFusedChunkAlign = 32;

// Whether a split-K plan can run fused rows: more than one split, a list one CTA reads whole
// (topk <= SparseMlaPlan::kMaxChunk), and splits that start on kFusedChunkAlign boundaries.
inline bool fused_rows_fit(int splits, int topk, int chunk) {
  return splits > 1 && topk <= SparseMlaPlan::kMaxChunk && chunk % kFusedChunkAlign == 0;
}

// Index positions a split-K CTA compacts into shared memory: its chunk, or with fused rows or a
// balanced schedule the token's whole list (what its shared memory is sized for).
inline int splitk_listed_positions(bool whole_list, int topk, int chunk) { return whole_list ? topk : chunk; }

// Split-K's early issue (SparseMlaPlan::early_issue; splitk_kernel.cu, v39-v40): with two
// stages in position order, tile it + 1 is asked for before tile it lands. 16-head bf16 CTAs of
// more than kEarlyIssueMaxTiles tiles, two to an SM, keep the old order: where each streams its
// own rows from DRAM it lost up to 6.5 % (docs/perf.md runs 715-716). On fast memory one CTA per
// SM gains from it at any length (H200, 16 heads, lists of 2048 in 2-8 splits at T = 16-64: -5 to
// -14 % against the old order, run 721); not measured on the H100, which keeps the old order
// there. Chosen per CTA at run time, the old order's plans ran 1-2 % slower than the old kernel
// (runs 719-720), so the plan says it and the launcher picks the instance; a balanced schedule's
// CTA, whose tiles the plan does not bound, calls this with its own tile count (and never one
// CTA per SM: its grid is the schedule's slots).
inline constexpr int kEarlyIssueMaxTiles = 6;
__host__ __device__ constexpr bool split_k_early_issue(bool fp8, int num_heads, int64_t max_cta_tiles, bool one_cta_per_sm) {
  return fp8 || num_heads > kHeadGroup || max_cta_tiles <= kEarlyIssueMaxTiles || one_cta_per_sm;
}

// Balanced split-K (SparseMlaPlan::balanced). A token with n valid rows has tiles = ceil(n / 32);
// with k tiles per split it gets max(1, ceil(tiles / k)) splits, its tiles shared out evenly.
// The schedule takes the smallest k that fits the B split slots: W = the sum of the tiles,
// k0 = ceil(W / B); the first of k0 .. k0 + 7 whose splits fit, else ceil(W / (B - T)), which
// always fits (sum_t ceil(tiles_t / k) < W / k + T), all capped at a full list's tiles (one
// split per token, T <= B). The schedule kernel evaluates the candidates together, one block
// reduction; this host version is what the tests check it against.
inline constexpr int kBalancedCandidates = 8;
inline constexpr int kBalancedMaxTokens = SparseMlaPlan::kBalancedMaxTokens;  // 8 tokens per thread of one block
__host__ __device__ inline int balanced_splits_of(int tiles, int k) { return tiles > k ? (tiles + k - 1) / k : 1; }
// total_tiles <= kBalancedMaxTokens x 64: int arithmetic.
__host__ __device__ inline int balanced_first_candidate(int total_tiles, int slots, int max_tiles) {
  const int k0 = (total_tiles + slots - 1) / slots;
  return k0 < 1 ? 1 : k0 > max_tiles ? max_tiles : k0;
}
__host__ __device__ inline int balanced_fallback(int total_tiles, int slots, int num_tokens, int max_tiles) {
  if (slots <= num_tokens) return max_tiles;
  const int k1 = (total_tiles + (slots - num_tokens) - 1) / (slots - num_tokens);
  return k1 < 1 ? 1 : k1 > max_tiles ? max_tiles : k1;
}
inline int balanced_tiles_per_split(const int* tiles, int num_tokens, int slots, int max_tiles) {
  int total = 0;
  for (int t = 0; t < num_tokens; ++t) total += tiles[t];
  const int k0 = balanced_first_candidate(total, slots, max_tiles);
  for (int k = k0; k < k0 + kBalancedCandidates && k <= max_tiles; ++k) {
    int64_t splits = 0;
    for (int t = 0; t < num_tokens; ++t) splits += balanced_splits_of(tiles[t], k);
    if (splits <= slots) return k;
  }
  return balanced_fallback(total, slots, num_tokens, max_tiles);
}
// The schedule buffer: a header {T, slots, head groups, kScheduleMagic} (the main kernel traps on
// a schedule made for another shape), then per slot {token (-1: left over), split, splits, 0},
// then per token {first slot, splits}, then per token its valid rows.
inline constexpr int kScheduleMagic = 0x5c4ed01e;
struct ScheduleLayout {
  size_t token_splits, token_rows, bytes;  // byte offsets; the slot table follows the header at 16
};
inline ScheduleLayout schedule_layout(int num_tokens, int slots) {
  ScheduleLayout l;
  l.token_splits = 16 + size_t(slots) * 16;
  l.token_rows = l.token_splits + size_t(num_tokens) * 8;
  l.bytes = (l.token_rows + size_t(num_tokens) * 4 + 15) / 16 * 16;
  return l;
}

// The tile size the planner picks (16, 32 or 64 rows; see kStagesFor in splitk_kernel.cu).
inline constexpr int kPlannerBlockKeys = 32;
// An fp8_ds_mla plan's split-K splits of at least this many positions take 64-row tiles
// (plan_sparse_mla).
inline constexpr int kFp8WideTileMinChunk = 1024;

// The shared-rows kernel (shared_rows_kernel.cu) computes a "head block" per 16 of its wgmma's
// M = 64 rows: one token's heads [16 b, 16 b + 16). Head blocks are numbered token-major
// (token t, block b is t * H / 16 + b), and a CTA takes kSharedRowsBlocks consecutive ones, a
// "group": 4 tokens at H = 16 (whose lists the CTA unites), 2 tokens x 32 heads at H = 32, one
// token's 64 heads at H >= 64 (every row of the tile reads every entry: nothing masked).
inline constexpr int kSharedRowsBlocks = 4;
// Union entries per tile of the shared-rows kernel (its wgmma N for the scores; plan.block_keys).
inline constexpr int kSharedRowsTileEntries = 32;
// Row indices the shared-rows kernel accepts: num_rows < 2^28 (its entry word is row << 4 | the
// 4 head blocks' bits; 2^28 rows of 1152 B are 309 GB, more than a GPU holds).
inline constexpr int64_t kSharedRowsMaxRows = int64_t{1} << 28;
// The planner's thresholds for it (planner.cpp says why): at 16 heads the smallest T, and the
// smallest when the caller says consecutive tokens share rows (IndexSharing::consecutive); at
// 32 heads the smallest T (a bf16 cache with lists of kSharedRowsLongList: from where split-K
// needs a second wave); at 64 and 128 the fewest (head block, index position) pairs.
inline constexpr int kSharedRowsMinTokens = 2048;
// An unhinted fp8 call's smallest T (shared rows through the share probe only): below it the
// probe's chain cost 15-23 µs more than split-K wherever split-K was chosen, and where shared
// rows were the faster kernel they won 5.5 % forced, 1 % through the probe (run 702, H200: T =
// 2048-4096). From T = 8192: -6.6 / -7.2 % shared, +1.5 to +5.3 % else (run 703).
inline constexpr int kSharedRowsMinTokensFp8Unhinted = 8192;
inline constexpr int kSharedRowsMinTokensSharing = 512;
// 16 heads with the consecutive hint, bf16 lists of >= kSharedRowsConsecutiveMinList, below
// fast memory (planner.cpp, consecutive_group_splits): where whole waves of one-split groups do
// not fill the chip, each group's union tiles in up to kSharedRowsConsecutiveMaxSplits splits,
// from as many groups as fill 9/10 of a wave so.
inline constexpr int kSharedRowsConsecutiveMinList = 2048;
inline constexpr int kSharedRowsConsecutiveMaxSplits = 4;
inline constexpr int kSharedRowsMinTokens32Heads = 256;
inline constexpr int64_t kSharedRowsMinPairsWide = int64_t{1} << 17;
// At 64 and 128 heads, since Q moves by TMA (runs 434-436): bf16 lists of
// kSharedRowsMinListBf16 positions or more from kSharedRowsMinHeadBlocksBf16 head blocks
// (T >= 3 / 2 at 64 / 128 heads: below, split-K's fused and lean rows finish the short lists of
// a decode step sooner) and 2^13 pairs, or 2^14 below kSharedRowsManyHeadBlocksBf16 head blocks
// (run 599: 64 heads topk 512 T = 4 / 6 and 128 heads T = 2 / 3 ran 6-20 % faster on split-K);
// fp8 lists of kSharedRowsLongList or more from 3 x 2^14 pairs (T >= 6 / 3 at topk 2048).
inline constexpr int64_t kSharedRowsMinPairsBf16 = int64_t{1} << 13;
inline constexpr int64_t kSharedRowsMinPairsFewHeadBlocksBf16 = int64_t{1} << 14;
inline constexpr int64_t kSharedRowsManyHeadBlocksBf16 = 32;
inline constexpr int kSharedRowsMinListBf16 = 256;
inline constexpr int64_t kSharedRowsMinHeadBlocksBf16 = 12;
inline constexpr int64_t kSharedRowsMinPairsLongListFp8 = int64_t{3} << 14;
inline constexpr int kSharedRowsLongList = 1024;
// ... and fp8 lists of kSharedRowsMidListFp8 up to kSharedRowsLongList once split-K can no longer
// split every token in two within its slots (head blocks > half the slots: 64 heads T >= 34,
// 128 heads T >= 17 on 132 SMs), where its plans are one split or the half-wave lead. Run 604,
// H100, topk 512, split-K plan -> shared rows in 2 splits, µs: 64 heads T = 36 / 40 / 48 / 56 / 63
// 33.4 / 35.0 / 33.3 / 33.8 / 34.5 -> 27.6 / 28.2 / 29.4 / 30.9 / 32.1, runs of 1-512 rows T = 40
// / 56 27.8 / 30.0 -> 24.7 / 27.3; 128 heads T = 20 / 24 / 28 34.9 / 33.0 / 33.8 -> 27.6 / 29.0 /
// 30.2. Below it split-K wins (64 heads T = 24 / 33 22.8 / 24.4 vs 25.2 / 25.9, 128 heads T = 16
// 24.0 vs 25.5).
inline constexpr int kSharedRowsMidListFp8 = 512;
// Shared rows' splits below one wave at 64 and 128 heads: fewer than kSharedRowsManyGroups groups
// put their CTAs on at most 3/4 of the SMs; from that many, a group takes at most
// kSharedRowsManyGroupsMaxSplits splits (fewer, longer CTAs).
inline constexpr int kSharedRowsManyGroups = 8;
inline constexpr int kSharedRowsManyGroupsMaxSplits = 8;
// Just past whole waves (up to half a wave more) the planner splits only the tokens past them
// (SparseMlaPlan::lead_tokens, unsplit), into as many splits as their CTAs fit a wave (the SMs
// the last whole wave frees take them at once), at most one per tile and kTailMaxSplits (the
// combine's mask of live splits): split-K past whole waves of one split, and shared rows'
// one-token groups just past whole waves (kSharedRowsLeadMaxWaves). No union pass: each CTA
// compacts its token's list, as in one wave. Past half a wave more, up to 2/3, the tokens past
// the waves may take 3 splits in two rounds (kLeadTwoRounds*, below). Further on, up to
// kSharedRowsPastWaveMaxTenths / 10 waves of groups, 32 heads keep one-token groups with one
// split (their alternative, 2-token groups, are T / 2 CTAs), while 64 and 128 heads take the
// union pass, whose order pass puts the longest lists in the first wave. 32 heads take
// one-token groups with lead tokens again past 2 or more whole waves (kOneTokenWaves*, below).
inline constexpr int kTailMaxSplits = 64;
// Split-K only with lists of at least this many positions (topk 512 at 16 heads T = 265: 87.6
// -> 68.5 µs, run 463; shorter lists were not measured: their whole CTA costs little more than a
// split's setup and the combine's launch). Just past half a wave, 1024 instead was a trade (16
// heads T = 150 random 55.6 -> 48.3, mixed-length runs 37.9 -> 40.7 µs; run 592): kept at 512.
inline constexpr int kSplitKTailMinList = 512;
// Past one CTA per SM, split-K splits of a list of at most this many positions hold at least
// kSplitKMinTilesPastOneCtaPerSm tiles on average, or only as many as fit one CTA per SM (the
// larger count of the two), unless that leaves a quarter of the SMs idle with splits still to
// merge: a second CTA on an SM gains less than the combine of shorter splits costs. Measured
// (runs 600-602, H100, bf16 / fp8 µs): 16 heads topk 512 T = 33, 8 splits of 2 tiles -> 4 of 4,
// 20.5 / 16.9 -> 18.6 / 15.5; topk 256 T = 50, 4 of 2 -> 2 of 4, 17.5 / 14.5 -> 16.5 / 13.9;
// topk 300 T = 66, 4 of 3 -> 2 of 5, 22.2 / 18.0 -> 20.7 / 17.2 (3 of 4 lost: 22.0 / 18.6, run
// 602); topk 192 T = 89, 2 of 3 -> one, 19.8 / 16.5 -> 18.0 / 14.4. Where 4 splits of 4 tiles
// were 96 CTAs (topk 512 at T x head groups = 24) they ran -2 to +8 % (run 601), so those keep
// 8 of 2. Longer lists take the same rule only where their splits hold at most
// kSplitKLongListMaxTilesToRefit tiles (the two-tile splits past one CTA per SM above): H200 (run
// 611), bf16 / fp8 µs, 16 heads topk 2048 T = 8, 32 splits -> 16, 17.0 / 15.0 -> 15.9 / 13.9; 128
// heads T = 1 14.9 / 14.2 -> 13.3 / 13.2; topk 1024 T = 16, 16 -> 8, 17.2 / 15.0 -> 15.8 / 13.6;
// every moved bf16 case -1.9 to -10.5 %, fp8 -9.4 to +4.6 (runs of 1-2048 rows at 64 heads T = 2
// and 128 heads T = 1); H100 (run 612) -9.2 to +1.5 / -9.3 to +5.3 % (the same two, and the
// targets' T = 8 runs fp8 +4.1 %, bf16 -4.2, run 614). Their 3-tile splits in 4-tile ones were a
// trade: random lists -8.8 to +0.6 %, mixed-length runs +3.2 to +5.4 % (16 heads topk 2048 T = 12,
// 22 splits -> 16).
inline constexpr int kSplitKFitOneCtaMaxList = 512;
// On fast memory (H200; not measured on the H100) lists of at least kSplitKOneTileHalfSmsMinList
// positions take one-tile splits only while their grid fills at most half the SMs; past that,
// two tiles a split, each CTA asking for its second tile early (SparseMlaPlan::early_issue): 16
// heads T = 2, 32 heads T = 1. Run 744 (H200, through the planner, bf16 / fp8 µs): 16 heads T = 2
// random 10.1 / 9.6 -> 9.6 / 9.25, separate requests -4.0 / -3.2 %, mixed runs -3.7 / -0.5 %,
// topk 2049 -3.8 / -3.0 %; 32 heads T = 1 random 9.5 / 9.3 -> 9.0 / 9.1, separate requests -5.3 /
// -2.2 %, mixed runs -5.0 / -1.6 %. Shorter lists lost or traded: 1024 +2.0 to +10.7 % (16-64
// heads, T = 1-4), 512 -3.4 to +5.1 %, 300 -10.1 to +1.2 %, 128 (whole lists then) -8.5 to +14.3 %.
inline constexpr int kSplitKOneTileSmsPerCtaFastMemory = 2;
inline constexpr int kSplitKOneTileHalfSmsMinList = 2048;
// On fast memory (H200; not measured on the H100), 16 heads (and 32, below) over a bf16 cache,
// lists of kSplitKOneCtaPerSmList positions (DSA's 2048; shorter ones are not measured) split two
// CTAs to an SM: as many splits as fit one CTA per SM, where those hold at most
// kSplitKOneCtaPerSmMaxTiles tiles, each CTA asking for its next tile early
// (SparseMlaPlan::early_issue). Run 721 (H200): T = 16 in 8 splits random / sequences 23.7 /
// 23.9 -> 21.4 / 21.6 us, mixed-length runs 18.1 -> 18.0; run 722 moved T = 9-16, -0.6 to -10.1 %
// but +1.5 % on mixed-length runs at T = 11. Longer splits stay two to an SM unless every list is
// full (below): at T = 24-40 (5-3 splits of 13-22 tiles) random lists gained 3-9 %, but mixed
// lengths lost 7-14 % (their long lists' CTAs hold the call up), and fp8 lost 8 % (run 714).
inline constexpr int kSplitKOneCtaPerSmList = 2048;
inline constexpr int kSplitKOneCtaPerSmMaxTiles = 8;
// 32 heads take the 8-tile rule too (two CTAs per token split, the second group's rows from L2):
// T = 5-8 on 132 SMs. Run 734 (H200, through the planner, µs): T = 5 / 7 / 8 random 15.65 /
// 18.3 / 19.05 -> 15.25 / 17.7 / 18.1, separate requests -2.2 / -3.0 / -5.8 %, mixed runs +0.3 /
// +2.1 / -2.8 %; T = 6 a wash (random 0.0, sequences -0.9, runs +2.6 %; run 733: -2.6 / -2.9 /
// +0.6 %). Longer splits lost (run 733: T = 10-15, 11-16 tiles, runs +6 to +13 %, full lists +0
// to +8 %), so neither the full-lists rule nor the 8-tile rule below applies at 32 heads.
inline constexpr int kSplitKOneCtaPerSmHeads = 32;
// The same where the caller says every list is full (SparseMlaProblem::min_valid_entries = topk):
// splits of up to 16 tiles, T = 17-33 on 132 SMs. Run 724 (H200, planner -> one CTA per SM, µs):
// random T = 17 / 20 / 24 / 26 / 30 / 33 24.4 / 27.05 / 30.5 / 34.75 / 34.15 / 35.9 -> 23.25 /
// 25.0 / 28.0 / 29.15 / 32.1 / 33.4, separate requests (sequences) -3.6 to -15.6 %; 3 splits of
// 22 tiles (T = 34-44) -3.6 to +1.9 %, not taken. 64-row tiles gained less (-0.1 to -10.8 %).
inline constexpr int kSplitKOneCtaPerSmMaxTilesFullLists = 16;
// Full lists of 1024 take the same rule (splits of up to 16 tiles), where one CTA per SM leaves
// at most a quarter of the SMs idle: T = 17-44 and 50-66 on 132 SMs. Run 731 (H200, main's
// plans -> the rule, µs): random T = 18 / 24 / 30 / 40 / 60 17.45 / 20.65 / 22.0 / 26.8 / 33.5 ->
// 15.7 / 18.6 / 20.5 / 25.2 / 32.35 (T = 18-66: +0.5 to -10.5 %), separate requests (sequences)
// -0.6 to -11.6 %; at T = 45 the 2 splits' 90 CTAs lost 3.4-3.8 %, hence the quarter. A hint
// that does not hold (mixed-length runs) costs up to +19 %.
inline constexpr int kSplitKOneCtaPerSmFullListsAlso = 1024;
// On fast memory, the same lists that the split rules cut into 7-tile splits two to an SM (10
// splits: T = 25-26 on 132 SMs) take 8-tile splits (8 splits, some SMs holding one CTA), as T =
// 27-33 already do. Run 726 (H200, µs): T = 25 / 26 random 33.75 / 34.7 -> 30.0 / 30.75,
// separate requests (sequences) 34.05 / 35.55 -> 30.25 / 31.0, mixed-length runs 23.15 / 24.65 ->
// 23.75 / 24.05. The early issue on the 7-tile splits gained only 0.3-3.3 % (run 728). Not
// measured on the H100.
inline constexpr int kSplitKNotSevenTiles = 8;
inline constexpr int kSplitKMinTilesPastOneCtaPerSm = 4;
inline constexpr int kSplitKLongListMaxTilesToRefit = 2;
// A list of at most this many tiles is split-K split into one-tile splits (while they fit one
// CTA per SM) or not at all: its two-tile splits lose to one split nearly everywhere (run 601,
// H100, bf16 / fp8 µs): 16 heads topk 128 T = 34 / 66 / 132 11.3 / 13.7 / 20.5 -> 10.8 / 12.0 /
// 16.1, fp8 10.4 / 11.8 / 16.9 -> 9.9 / 10.5 / 12.9; topk 96 T = 90 15.7 -> 11.3; the exceptions
// are bf16 at 32-128 heads with 34-40 CTAs (+2.9 to +6.0 %, runs 601 and 603; fp8 -3 to -5 %),
// a trade left for a rule that needs the format and the head count. One-tile splits win
// at T = 1: topk 128 4 splits 8.0, one 10.2 (run 593).
inline constexpr int kSplitKOneTileOnlyMaxTiles = 4;
// Just past half a wave, where a plan's splits fall from 2 to 1 (split-K: T x head groups past
// the SMs; shared rows at 128 heads: one-token groups past half the SMs), half a wave's worth
// of tokens take 2 splits (SparseMlaPlan::lead_splits, one wave) and the later tokens as many
// as fit a wave after it, if that is at least kLeadMinTailSplits: with 8 a wash (16 heads
// T = 165 146.9 -> 144.7 µs), with fewer their round costs more than one split on every token
// saves (T = 180, 5 splits: 148.1 -> 156.0; run 465).
inline constexpr int kLeadMinTailSplits = 8;
// ... on the H100. Split-K on fast memory (kFastMemoryEighths) with lists of 2048 gains from as
// few as this many (what-if DSA_LEAD_MIN=4 on the H200, run 513, µs): 16 heads T = 170 / 180 /
// 190 142.0 / 142.3 / 142.7 -> 121.3 / 126.7 / 132.5, fp8 T = 180 121.8 -> 107.7; the H100 loses
// there (T = 170 / 180 / 190 147.1 / 148.1 / 149.5 -> 148.8 / 155.6 / 163.6, run 514). Shared rows
// keep 8 on both: on the H200 64 heads T = 86 / 90 / 95 90.7 / 91.2 / 91.3 -> 90.1 / 92.8 / 96.7,
// 32 heads T = 86 / 90 88.1 / 88.3 -> 84.2 / 86.3, 128 heads T = 45 88.9 -> 86.7.
inline constexpr int kLeadMinTailSplitsSplitKFastMemory = 4;
// Where the caller says every list is full (SparseMlaProblem::min_valid_entries = topk), 16-head
// split-K lists of at most this many positions take no half-wave lead: one split (a whole list
// per CTA, no combine) is faster. H200 (run 749, lead -> one split, through the planner, bf16 /
// fp8): topk 512 T = 134 / 150 / 165 random 41.0 / 46.2 / 48.4 -> 37.65 / 39.3 / 40.1 µs (fp8
// -2.1 / -11.3 / -13.1 %), separate requests -9.5 / -14.4 / -17.8 % (fp8 -4.6 / -12.3 / -14.4 %);
// topk 768 T = 150 -4.6 / -6.9 % (fp8 +0.7 / +0.3 %). Longer lists lose (topk 1000: bf16 +1.6 /
// -0.8 %, fp8 +2.2 / +2.7 %), as do 32 heads at T = 69 (+1.1 / +2.7 %; T = 75-81 -3.4 to -7.0
// %), which keep the lead. Mixed runs, for which the unhinted planner keeps it, lose with one
// split (under a false hint +3.9 to +10.1 % bf16, +6.6 to +20.7 % fp8). The H100 measured the
// same trade without the hint (run 592: random lists -0.9 to -13.3 %, mixed runs +7.3 to +17.5 %).
inline constexpr int kSplitKHalfWaveLeadFullListsMaxList = 768;
// That half-wave lead was first taken at 128 heads only (bound by their MMAs). At 32 and 64 heads
// a wave of one-split CTAs of bf16 lists is bound by the gather on the H100, so its idle SMs
// cost little and the second round more; with fp8, or on fast memory (kFastMemoryEighths), lists
// of this many positions gain (what-if DSA_HALF_LEAD=1, runs 508-509, one wave of one-split
// CTAs -> half a wave in 2 splits, µs). H100: 64 heads fp8 T = 67 / 75 98.0 / 99.0 -> 82.1 / 94.7,
// 32 heads fp8 T = 75 96.0 -> 84.8, bf16 T = 67 / 75 / 82 92.1 / 93.5 / 95.0 -> 90.9 / 104.5 /
// 106.9. H200: 64 heads T = 67 / 75 / 82 88.6 / 89.6 / 90.9 -> 77.1 / 87.8 / 86.4, fp8 T = 75
// 97.9 -> 92.5, 32 heads T = 67 / 75 / 82 87.2 / 87.3 / 87.9 -> 70.4 / 78.6 / 80.8. Mixed lengths
// gain on both (runs of 1-2048 rows 64 heads T = 75 89.0 -> 76.7 on the H100), shorter lists lose
// on both (topk 1024 64 heads T = 75 54.0 -> 73.3 on the H100, 50.5 -> 61.6 on the H200).
inline constexpr int kHalfWaveLeadMinList = 2048;
// ... and at 128 heads (bound by their MMAs, where it was first taken with lists of 2048) from
// lists of this many. Shorter lists lose: a CTA's whole list costs little more than a split's
// setup and the combine (H100, run 581, random lists T = 36 / 40, lead -> unsplit, µs): topk 512
// 44.4 / 43.7 -> 29.9 / 30.3 (fp8 48.1 / 47.4 -> 33.6 / 34.0), 768 50.5 / 49.9 -> 39.9 / 40.4,
// 1024 56.4 / 56.5 -> 49.9 / 50.1; at 1536 it is even (68.1 / 69.5 -> 69.5 / 69.8) and mixed
// lengths gain (runs of 1-1536 rows T = 40 52.3 against 67.7; at 1024 43.9 against 48.3).
// On the devices (runs 583 / 589, old planner -> this one, T = 40 topk 512): H100 43.2 -> 30.2,
// H200 40.9 -> 29.2.
inline constexpr int kHalfWaveLeadMinList128Heads = 1536;
// Past whole waves by more than half a wave (up to 2/3 of one), the tokens past them may take 3
// splits in two rounds of CTAs instead of a second wave of whole lists (the planner's
// two_rounds_rule): at 128 heads always; at 64 heads with fp8 always, with bf16 for a tail of at
// most kLeadTwoRoundsMaxTailNum / Den of a wave; at 16 and 32 heads alike, but only with lists of
// kLeadTwoRoundsMinList16And32Heads. H100, µs, one split -> 3 (runs 468-471, b0 or the what-if's
// old plans in the same call): 128 heads T = 100 / 105 / 110 197.3 / 198.1 / 198.2 -> 173.6 /
// 175.6 / 177.1, fp8 T = 100 213.6 -> 187.9, topk 256 / 512 / 1024 T = 100 57.6 / 76.8 / 118.4 ->
// 54.0 / 70.8 / 105.2; 64 heads fp8 T = 210 223.3 -> 196.7, topk 512 / 1024 88.6 / 135.8 -> 81.4
// / 119.3, bf16 T = 200 / 204 / 210 212.0 / 212.9 / 214.1 -> 208.6 / 210.2 / 215.1 (a tail of
// 0.52 / 0.55 / 0.59 of a wave; the gather binds them), topk 512 T = 200 89.1 -> 84.7; 16 heads
// fp8 T = 397 / 420 / 440 / 700 244.4 / 245.0 / 245.6 / 361.3 -> 222.5 / 230.8 / 237.1 / 349.4,
// bf16 T = 397 / 409 / 420 / 440 296.4 / 297.1 / 297.6 / 299.1 -> 285.6 / 289.4 / 296.8 / 310.8,
// 32 heads fp8 T = 200 / 220 194.9 / 194.1 -> 184.2 / 186.7, bf16 T = 200 / 220 201.0 / 203.3
// -> 198.3 / 213.1. Shorter lists lose at 16 and 32 heads (16 heads T = 400 topk 512 / 1024
// 104.0 / 172.9 -> 109.8 / 175.2, fp8 84.6 / 134.1 -> 88.4 / 134.4, 32 heads topk 1024 T = 200
// 113.5 -> 118.1, fp8 107.7 -> 109.9). Mixed lengths (runs of 1-2048 rows) mostly gain (16
// heads T = 400 213.4 -> 192.0, 32 heads T = 200 132.6 -> 113.2) but lose at 128 heads (T = 110
// 107.6 -> 119.5, topk 1024 T = 100 67.1 -> 70.1), whose union pass's order pass put the longest
// lists in the first wave.
inline constexpr int kLeadTwoRoundsMaxTailNum = 11;
inline constexpr int kLeadTwoRoundsMaxTailDen = 20;
inline constexpr int kLeadTwoRoundsMinList16And32Heads = 2048;
// ... on the H100, whose bf16 CTAs at 16-64 heads the gather binds. On the H200 it binds them
// less, and bf16 tails past 11/20 of a wave gain from two rounds too (runs 506-507, one wave of
// whole lists -> two rounds, µs): 16 heads T = 420 / 440 / 700 281.8 / 282.1 / 419.3 -> 256.8 /
// 263.3 / 396.5, runs of 1-2048 rows T = 420 200.7 -> 160.2; 32 heads T = 210 / 220 177.7 /
// 177.4 -> 168.2 / 171.9; 64 heads T = 210 202.9 -> 178.9, topk 1024 / 512 122.6 / 78.3 ->
// 109.4 / 74.2, but runs T = 220 116.2 -> 120.6. Shorter lists at 16 and 32 heads still lose
// there (16 heads topk 512 T = 420 88.0 -> 94.0, 32 heads topk 1024 T = 210 98.5 -> 100.7, fp8
// 105.1 -> 107.8) or tie (16 heads topk 1024 T = 440 153.6 / 153.7), so the list limit stays.
// On fast memory (kFastMemoryEighths) bf16 takes two rounds wherever fp8 does. 4 splits over
// three rounds (tails up to 3/4) gained 1-4 % on the H200 and lost at 32 heads (T = 225 178.5
// -> 181.6) and with mixed lengths (128 heads runs T = 115 107.4 -> 125.0; run 507): not taken.
inline constexpr int kSharedRowsPastWaveMaxTenths = 17;
// Shared rows' one-token groups past whole waves (64 heads bf16: up to this many; 128 heads and
// fp8 any number): the whole waves' tokens unsplit, the tail split (lead tokens, no union pass)
// instead of a last wave of whole lists after the union pass. Run 473 (H100, µs): 64 heads
// T = 265 / 300 / 400 / 530 305.7 / 307.4 / 402.3 / 499.6 -> 242.5 / 278.3 / 355.8 / 464.0, fp8
// T = 265 / 300 319.6 / 324.1 -> 215.8 / 249.1; 128 heads T = 133 / 150 / 165 / 199 / 265 285.5 /
// 289.7 / 291.8 / 374.8 / 463.3 -> 197.9 / 223.7 / 240.9 / 285.2 / 372.8, fp8 T = 133 310.1 ->
// 214.7. The unsplit
// waves lose the union pass's row order (64 heads bf16), so further on the last wave's saving
// shrinks: run 480, union pass -> lead tokens, 64 heads T = 661 / 800 595.7 / 695.8 -> 567.3 /
// 687.5 (5 / 6 waves). fp8 gains more (T = 800 713.9 -> 610.0) and 128 heads, whose union pass
// has no row order, at every T measured: T = 331 / 350 / 400 / 500 / 600 / 1000 550.1 / 556.1 /
// 638.8 / 736.8 / 904.6 / 1434.1 -> 456.0 / 483.9 / 550.2 / 692.9 / 812.1 / 1331.6, fp8 T = 350
// / 500 603.8 / 801.1 -> 526.9 / 752.7. Mixed lengths lose the order pass (runs of 1-2048 rows
// at 128 heads T = 150 144.5 -> 156.7, T = 350 295.8 -> 297.2; T = 500 417.9 -> 395.4; 64
// heads T = 300 184.4 -> 181.0).
inline constexpr int64_t kSharedRowsLeadMaxWaves = 6;
// ... on the H100. On the H200 the row order repays nothing there: run 503, union pass -> lead
// tokens, 64 heads T = 925 / 1057 / 2048 737.8 / 832.6 / 1478.3 -> 634.8 / 725.3 / 1404.8, topk
// 1024 T = 925 429.3 -> 353.5. So on fast memory (kFastMemoryEighths) 64 heads bf16 take lead
// tokens past any number of waves too.
// 32 heads (lists of >= kSharedRowsLongList) past 2 or more whole waves of one-token groups take
// lead tokens too, instead of 2-token groups (T / 2 CTAs, whose last wave may hold a few of them),
// where the planner's wave count says so (one_token_lead_pays): one-token waves (whole + rounds /
// splits of the tail) < (ratio x 2-token waves + setup) / den. Bf16 tails of up to 2/3 of a wave
// take 3 splits in two rounds there (kLeadTwoRounds*'s 11/20 is for one-token waves as the
// alternative); a tail with no lead plan (past 2/3, or none) is a wave of its own, unsplit (run
// 486: bf16 T = 360 / 396 373.6 / 376.2 -> 312.7 / 337.7, fp8 T = 660 / 1170 591.5 / 1049.1 ->
// 474.9 / 834.8, split-K before). With fp8 the count holds from 1.7 waves: T = 225-264 take 2
// unsplit one-token waves (run 490: T = 250 / 256 240.7 / 219.6 -> 195.7 / 195.3, split-K / 2-token
// groups before); from stop 50 fp8 takes one-token groups at every T, whatever the count (run 495:
// its 2-token bands just below whole waves of them lost 3-5 %: T = 760 / 1024 / 2048 588.2 / 777.9
// / 1523.0 against 561.6 / 746.9 / 1475.2). A wave of one-token groups costs ~110 µs, of 2-token
// groups ~172 + ~32 for the union pass and the first wave's setup (bf16, runs 477-478: one-token T
// = 529 / 661 446.6 / 552.0 for 4 / 5 waves, 2-token T = 512 / 792 / 1056 372.2 / 548.0 / 719.9 for
// 2 / 3 / 4); fp8 ~97 against ~182 + 33 (runs 396, 478), a count of 15/8 that the tails' partial
// waves upset. Measured at its edges (bf16, µs, 2-token against one-token): T = 400 369.3 / 345.9
// (taken), 450 375.9 / 387.2, 600 542.7 / 515.9 (taken), 661 543.1 / 552.0, 800 716.2 / 665.4
// (taken), 925 714.6 / 762.5. A last 2-token wave of a single CTA holding one token (odd T) costs
// half a wave (T = 1056 / 1057 719.9 / 810.3 against one-token 868.8 at 1057; T = 264 / 265 204.5 /
// 289.5), of 2-token CTAs a whole one (T = 792 / 800 548.0 / 716.2). Runs 478-479.
struct WaveCost {
  int64_t den, ratio, setup;
};
inline constexpr WaveCost kOneTokenWavesBf16{16, 25, 5};  // 1.56 x 2-token waves + 0.31
// ... on the H100 (DeviceInfo::memory_bandwidth_gbs 3352: HBM3 at 2619 MHz x 5120 bits). The
// 2-token costs scale with the device's bandwidth in eighths of it (to the nearest): on the H200
// (4814 GB/s as it reports itself, 11 eighths) 2.15 x + 0.43, so one-token groups at every T
// there. Run 501 on the H200, µs, 2-token against one-token: T = 256 / 450 / 661 / 784 / 1024 /
// 4096 200.9 / 367.2 / 544.4 / 547.0 / 720.2 / 2861.2 against 179.7 / 314.6 / 444.0 / 520.1 /
// 689.7 / 2685.5; topk 1024 T = 1024 405.0 against 376.7; runs of 1-2048 rows T = 1024 429.9
// against 419.8.
// The reference for rules weighed by bandwidth: the H100 SXM's DeviceInfo::memory_bandwidth_gbs
// (HBM3 at 2619 MHz x 5120 bits; run 502).
inline constexpr int64_t kH100BandwidthGbs = 3352;
// Fast memory: from this many eighths of the H100's bandwidth (to the nearest; H100 8, H200 11,
// nothing measured between) a device plans as the H200, where the gather binds bf16 CTAs less
// and the rules the gather set on the H100 move: 64 heads' lead tokens past any number of waves
// (kSharedRowsLeadMaxWaves), two rounds for any bf16 tail (kLeadTwoRounds*), the half-wave
// lead at 32 and 64 heads (kHalfWaveLeadMinList) and split-K's from fewer later splits
// (kLeadMinTailSplitsSplitKFastMemory).
inline constexpr int64_t kFastMemoryEighths = 10;
// At 16 and 32 heads without the consecutive hint: shorter lists (topk) keep split-K, whose CTAs
// are then short enough that a partial wave costs little, while shared rows pay the union pass
// and the masked MMA work per group whatever the list's length.
inline constexpr int kSharedRowsMinList = 512;
// The share probe (SparseMlaPlan::share_probe, sample_group_sharing; share_probe.cu): groups of
// the shared-rows kernel's 4 tokens, kShareProbeSamples of them spread over the call, each
// counted in a kShareProbeBits-bit bitmap. Shared rows run where the groups' unions keep at
// most the line's share of their entries: on fast memory they won to 65 % and lost from 77 %
// (docs/perf.md runs 686-687, H200), on the H100 they came out even at ~80 % (run 555).
inline constexpr int kShareProbeGroupTokens = kSharedRowsBlocks;  // the tokens of a 16-head group
inline constexpr int kShareProbeSamples = 16;
inline constexpr int kShareProbeBitsLog2 = 17;
inline constexpr int kShareProbeBits = 1 << kShareProbeBitsLog2;
inline constexpr int kShareProbeLinePermille = 800;
inline constexpr int kShareProbeLinePermilleFastMemory = 710;
// An fp8 cache's split-K reads 656-byte rows, so shared rows pay only at lower shares: on the
// H100 fp8 came out even at ~50-55 % (run 555: 45 % shared rows 1320 against 1598 µs, 57-59 %
// split-K 412-1598 against 427-1711). Through the probe on the H200 it picked the faster kernel
// in 23 of 23 cases (docs/perf.md runs 702-703); the line itself is not measured there.
inline constexpr int kShareProbeLinePermilleFp8 = 520;
// The tiles of a share-probe plan's split-K half that its kernel instances (kShareProbe) have:
// bf16 the planner's 32 rows, fp8 32 or 64 (both formats one split of whole lists).
__host__ __device__ constexpr bool share_probe_split_k_tiles_fit(int block_keys, bool fp8) {
  return fp8 ? block_keys == 32 || block_keys == 64 : block_keys == kPlannerBlockKeys;
}
// The probe's groups: min(samples, groups of the call); sample i is the group in the middle of
// the i-th of that many equal spans (tools/common/index_analysis's sampled_group_union_ratio).
__host__ __device__ inline int64_t share_probe_groups(int num_tokens, int samples) {
  const int64_t groups = (int64_t{num_tokens} + kShareProbeGroupTokens - 1) / kShareProbeGroupTokens;
  return samples < groups ? samples : groups;
}
__host__ __device__ inline int share_probe_group_token(int64_t sample, int num_tokens, int64_t sampled_groups) {
  const int64_t groups = (int64_t{num_tokens} + kShareProbeGroupTokens - 1) / kShareProbeGroupTokens;
  return static_cast<int>((2 * sample + 1) * groups / (2 * sampled_groups) * kShareProbeGroupTokens);
}
// Its workspace: the union pass (shared_rows_kernel.cu) writes one record per group, which the
// group's CTA of the main kernel reads: a 16-byte header (union entries, keys, whether entries
// are words), then 4 topk + 32 uint32 (entry words padded to whole tiles, or the sorted keys),
// then 4 topk + 8 uint16 (each entry's first key, + end). After the records, one int per group:
// its union's entries again; then one int per group: the order the main kernel's CTAs take the
// groups in (the order pass writes it from the sizes). The host sizes the workspace and the
// kernels find the parts with these functions, all of the number of head blocks.
inline constexpr int kSharedRowsUnionHeaderBytes = 16;
__host__ __device__ inline int64_t shared_rows_head_blocks(int num_tokens, int num_heads) {
  return int64_t{num_tokens} * (num_heads / kHeadGroup);
}
// Distinct tokens among a group's head blocks (whose lists the union pass unites): 4 at 16
// heads, 2 at 32, 1 at 64 and 128.
__host__ __device__ inline int shared_rows_tokens_per_group(int num_heads) {
  const int blocks_per_token = num_heads / kHeadGroup;
  return blocks_per_token >= kSharedRowsBlocks ? 1 : kSharedRowsBlocks / blocks_per_token;
}
// The head count a group's rows are laid out for: at 32 heads without a union pass a group is one
// token's 32 heads in rows 0-31 of the 64-head layout (rows 32-63 idle: their Q is zero and
// nothing of them is written), so every function of head blocks and groups takes 64 there.
__host__ __device__ inline int shared_rows_group_heads(int num_heads, bool union_pass) {
  return num_heads == 32 && !union_pass ? 64 : num_heads;
}
// One-token groups per token (no union pass): 2 at 128 heads, else 1.
__host__ __device__ inline int shared_rows_groups_per_token(int group_heads) {
  return group_heads > kSharedRowsBlocks * kHeadGroup ? group_heads / (kSharedRowsBlocks * kHeadGroup) : 1;
}
// 32 heads as one token per group (shared_rows_group_heads): lists of >= kSharedRowsLongList
// from this many tokens (both caches), below the union's line in one wave, past one wave up to
// kSharedRowsPastWaveMaxTenths / 10 waves, and past 2 or more whole waves where their tail
// takes lead-token splits and their waves cost less (kOneTokenWaves*).
inline constexpr int kSharedRowsOneToken32HeadsMinTokens = 16;
__host__ __device__ inline int64_t shared_rows_union_entries_offset(int topk) {
  return kSharedRowsUnionHeaderBytes + (kSharedRowsBlocks * int64_t{topk} + kSharedRowsTileEntries) * 4;
}
__host__ __device__ inline int64_t shared_rows_union_stride(int topk) {
  const int64_t bytes = shared_rows_union_entries_offset(topk) + (kSharedRowsBlocks * int64_t{topk} + 8) * 2;
  return (bytes + 127) / 128 * 128;
}
__host__ __device__ inline int64_t shared_rows_groups(int64_t head_blocks) {
  return (head_blocks + kSharedRowsBlocks - 1) / kSharedRowsBlocks;
}
__host__ __device__ inline int64_t shared_rows_group_ints_bytes(int64_t head_blocks) {  // an int per group, 16-byte rounded
  return (shared_rows_groups(head_blocks) * 4 + 15) / 16 * 16;
}
__host__ __device__ inline int64_t shared_rows_union_sizes_offset(int64_t head_blocks, int topk) {
  return shared_rows_groups(head_blocks) * shared_rows_union_stride(topk);
}
__host__ __device__ inline int64_t shared_rows_order_offset(int64_t head_blocks, int topk) {
  return shared_rows_union_sizes_offset(head_blocks, topk) + shared_rows_group_ints_bytes(head_blocks);
}
inline size_t shared_rows_workspace_bytes(int64_t head_blocks, int topk) {
  return static_cast<size_t>(shared_rows_order_offset(head_blocks, topk) + shared_rows_group_ints_bytes(head_blocks));
}
// Splits (p.splits > 1; the planner's for few groups, small T at 64 and 128 heads): CTA b computes
// split b % splits of group b / splits, an equal run of this many of the group's union tiles
// (the last splits fewer or none), and writes bf16 partials (fp32 lse) that the split-K combine
// merges.
__host__ __device__ inline int shared_rows_split_tiles(int union_tiles, int splits) {
  return (union_tiles + splits - 1) / splits;
}
// Whether a shared-rows plan can run fused rows: splits, and groups of one token's list (the
// combine's per-token count must be the group's entry count).
inline bool shared_rows_fused_rows_fit(int splits, int num_heads) {
  return splits > 1 && shared_rows_tokens_per_group(num_heads) == 1;
}
// Whether a shared-rows plan can read in row order (SparseMlaPlan::row_order): its union pass
// sorts one token's list per group; unions of several tokens are in row order already, and
// without a union pass nothing sorts.
inline bool shared_rows_row_order_fit(bool union_pass, int num_heads) {
  return union_pass && shared_rows_tokens_per_group(num_heads) == 1;
}
// Cache row strides (elements) it accepts: a row's byte offset is one 32 x 32 -> 64-bit multiply.
inline constexpr int64_t kSharedRowsMaxRowStride = int64_t{1} << 31;

// CTAs of a plan with lead tokens (SparseMlaPlan::lead_tokens): `lead` units (groups or token
// head groups) in lead_splits splits, then the other units in `splits`. The planner's plan.ctas
// and the launchers' grids both come from it.
__host__ __device__ inline int64_t lead_split_ctas(int64_t units, int64_t splits, int64_t lead, int64_t lead_splits) {
  return lead * lead_splits + (units - lead) * splits;
}
// Partial slots of the lead tokens (SparseMlaPlan::lead_tokens), before the later tokens'.
__host__ __device__ inline int64_t lead_partial_slots(const SparseMlaParams& p) {
  return p.lead_splits > 1 ? int64_t{p.lead_tokens} * p.num_heads * p.lead_splits : 0;
}
// The partial slot (partial_out[slot * 512], partial_lse[slot]) of head h of token t's split s.
__host__ __device__ inline int64_t partial_slot(const SparseMlaParams& p, int t, int h, int split) {
  return t < p.lead_tokens ? (int64_t{t} * p.num_heads + h) * p.lead_splits + split
                           : lead_partial_slots(p) + (int64_t{t - p.lead_tokens} * p.num_heads + h) * p.splits + split;
}
// For the combine, a plan with lead tokens as two plans of one split count each: the lead
// tokens (when they split) and the later tokens, each with its own partials.
inline SparseMlaParams lead_tokens_view(const SparseMlaParams& p) {
  SparseMlaParams v = p;
  v.num_tokens = p.lead_tokens;
  v.splits = p.lead_splits;
  v.chunk = p.lead_chunk;
  v.lead_tokens = 0;
  v.combine_before_another = p.num_tokens > p.lead_tokens;
  return v;
}
inline SparseMlaParams later_tokens_view(const SparseMlaParams& p) {
  SparseMlaParams v = p;
  const int64_t t0 = p.lead_tokens;
  v.q_nope += t0 * p.q_nope_token_stride;
  v.q_pe += t0 * p.q_pe_token_stride;
  v.indices += t0 * p.indices_token_stride;
  if (v.topk_lengths != nullptr) v.topk_lengths += t0;
  v.out += t0 * p.out_token_stride;
  v.lse += t0 * p.lse_token_stride;
  if (v.partial_out != nullptr) v.partial_out += lead_partial_slots(p) * kCkvDim, v.partial_lse += lead_partial_slots(p);
  v.num_tokens -= p.lead_tokens;
  v.lead_tokens = 0;
  return v;
}

// Launchers (src/sparse_mla/*.cu).
void launch_sparse_mla_splitk(const SparseMlaParams& p, cudaStream_t stream, int stage = kStageFull);
// split_k (a share-probe plan's other half; share_choice.cuh): launched after the main kernel.
void launch_sparse_mla_shared_rows(const SparseMlaParams& p, cudaStream_t stream, const SparseMlaParams* split_k = nullptr);
// The combine of p.splits > 1 partials (splitk_kernel.cu), launched dependent on the kernel before
// it; both kernels' splits end with it.
void launch_sparse_mla_combine(const SparseMlaParams& p, cudaStream_t stream);
// Balanced split-K's schedule (make_sparse_mla_schedule): the count kernel, then the schedule kernel.
void launch_sparse_mla_schedule(const SparseMlaParams& p, cudaStream_t stream);
void launch_sparse_mla_reference(const SparseMlaParams& p, float* scratch_logits, cudaStream_t stream);
void launch_count_invalid_indices(const int32_t* indices, int num_tokens, int topk,
                                  int64_t token_stride, int64_t num_rows, long long* d_count,
                                  cudaStream_t stream);
// The share probe (share_probe.cu): one CTA per sampled 4-token group; writes each group's
// (distinct rows, valid entries) to pairs[sample] and/or adds them to sums[0], sums[1] (either
// may be null). topk_lengths: as SparseMlaParams's (null: every list topk long).
void launch_share_probe(const int32_t* indices, const int32_t* topk_lengths, int num_tokens, int topk, int64_t token_stride,
                        int64_t num_rows, int samples, int2* pairs, long long* sums, cudaStream_t stream);
// sparse_mla_forward with a dissection stage (dsa-bench --stage); kStageFull is the real call.
void sparse_mla_forward_stage(const SparseMlaProblem& problem, const SparseMlaPlan& plan, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream, int stage, long long* timeline = nullptr);
// Dynamic shared memory of the split-K kernel for a tile size and chunk (the planner's limit).
int splitk_smem_bytes(int block_keys, int chunk, bool fp8);
int shared_rows_smem_bytes();

}  // namespace dsa::detail
