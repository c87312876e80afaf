// The planner: from a shape and a device, the kernel configuration a forward call runs
// (SparseMlaPlan). Each rule's measurements are beside it and in params.h; docs/perf.md has the runs.
#include <algorithm>
#include <cstdint>
#ifdef DSA_WHATIF
#include <cstdlib>
#endif
#include <limits>
#include <string>

#include "common/arg_checks.h"
#include "dsa/sparse_mla.h"
#include "sparse_mla/host_shared.h"
#include "sparse_mla/params.h"

namespace dsa {

using detail::balanced_workspace_for;
using detail::ceil_div;
using detail::fail;
using detail::shared_rows_workspace_for;
using detail::splitk_chunk;
using detail::splitk_lead_chunk;
using detail::validate_format;
using detail::validate_min_valid_entries;
using detail::validate_shape;
using detail::validate_sharing;
using detail::workspace_for;

namespace {  // the planner's steps; plan_sparse_mla (the end of the file) is the API

// A forced fused_rows threshold: in range, and only where the plan can fuse.
void check_fused_rows_choice(const PlanChoice& choice, bool fusable) {
  if (choice.fused_rows < -1 || choice.fused_rows > SparseMlaPlan::kMaxChunk)
    fail("fused_rows", "must be -1, 0 or in [1, " + std::to_string(SparseMlaPlan::kMaxChunk) + "], got " +
                           std::to_string(choice.fused_rows));
  if (choice.fused_rows > 0 && !fusable)
    fail("fused_rows", "needs splits > 1, topk <= " + std::to_string(SparseMlaPlan::kMaxChunk) + " and a chunk of whole " +
                           std::to_string(detail::kFusedChunkAlign) + "-position groups (split_k), or 64+ heads (shared_rows)");
}

// A plan's fused-rows threshold (SparseMlaPlan::fused_rows): a forced one, else one chunk where
// the plan can fuse, but none where the caller's hint says every list holds more valid entries
// than a chunk (min_valid_entries > chunk): no token could fuse, and without them each split
// reads only its own part of the list and the combine counts nothing (perf.md runs 762-765,
// H200, hinted full lists: split-K bf16 -1.9 to +0.9 %, fp8 T = 4-24 -1.5 to -6.5 %; shared rows
// at 64 / 128 heads bf16 -0.2 to -3.1 %, fp8 to -2.6 %).
int planned_fused_rows(const PlanChoice& choice, bool fusable, int chunk, int min_valid_entries) {
  check_fused_rows_choice(choice, fusable);
  if (choice.fused_rows != 0) return std::max(choice.fused_rows, 0);
  return fusable && min_valid_entries <= chunk ? chunk : 0;
}

// A balanced choice: -1, 0 or 1.
void check_balanced_choice(const PlanChoice& choice) {
  if (choice.balanced < -1 || choice.balanced > 1)
    fail("balanced", "must be -1, 0 or 1, got " + std::to_string(choice.balanced));
}

// A forced row_order: -1, 0 or 1, and on only where the plan reads lists in position order.
void check_row_order_choice(const PlanChoice& choice, bool orderable) {
  if (choice.row_order < -1 || choice.row_order > 1)
    fail("row_order", "must be -1, 0 or 1, got " + std::to_string(choice.row_order));
  if (choice.row_order == 1 && !orderable)
    fail("row_order", "needs split_k, or shared_rows at 64+ heads with a union pass (unions of several tokens are in row order)");
}

// SparseMlaPlan::split_softmax: a forced one (-1, 0 or 1; on only with 32- or 64-row tiles, off
// only for bf16) or the planner's. `whole_lists`: some CTA takes a token's whole list.
bool resolve_split_softmax(const PlanChoice& choice, int block_keys, bool whole_lists, bool fp8, bool fast_memory) {
  if (choice.split_softmax < -1 || choice.split_softmax > 1)
    fail("split_softmax", "must be -1, 0 or 1, got " + std::to_string(choice.split_softmax));
  const bool splittable = block_keys == 32 || block_keys == 64;
  if (choice.split_softmax == 1 && !splittable) fail("split_softmax", "needs split_k with 32- or 64-row tiles");
  if (fp8) {
    if (choice.split_softmax == -1) fail("split_softmax", "an fp8_ds_mla cache always splits its softmax");
    return true;
  }
  return splittable && (choice.split_softmax == 1 || (choice.split_softmax == 0 && (fast_memory || !whole_lists)));
}

// The planner's row order where it can be on (SparseMlaPlan::row_order says why), from
// `min_pairs` (token, position) pairs.
bool planner_row_order(int num_tokens, int topk, IndexSharing sharing, int64_t min_pairs) {
  return sharing == IndexSharing::unknown && int64_t{num_tokens} * topk >= min_pairs;
}

// `pays`: whether the planner's rule applies to this kernel and head count at all.
bool resolve_row_order(const PlanChoice& choice, bool orderable, bool pays, int num_tokens, int topk,
                       IndexSharing sharing, int64_t min_pairs = detail::kRowOrderMinPairs) {
  check_row_order_choice(choice, orderable);
  return orderable &&
         (choice.row_order == 1 || (choice.row_order == 0 && pays && planner_row_order(num_tokens, topk, sharing, min_pairs)));
}

// A plan's CTA count, which one launch (an int grid) must hold.
int launch_ctas(int64_t ctas) {
  if (ctas > std::numeric_limits<int32_t>::max()) fail("num_tokens", "too many tokens for one launch");
  return static_cast<int>(ctas);
}

// Balanced split-K (SparseMlaPlan::balanced) for a plan with its shape and block_keys set. The
// grid: one wave of split slots (two CTAs per SM), at least one per token.
SparseMlaPlan plan_balanced(SparseMlaPlan plan, const PlanChoice& choice, const DeviceInfo& dev, bool fp8, bool fast_memory) {
  const int T = plan.num_tokens, topk = plan.topk;
  if (topk > SparseMlaPlan::kMaxChunk)
    fail("balanced", "needs topk <= " + std::to_string(SparseMlaPlan::kMaxChunk) + " (each CTA reads its token's whole list)");
  if (T > SparseMlaPlan::kBalancedMaxTokens)
    fail("balanced", "needs num_tokens <= " + std::to_string(SparseMlaPlan::kBalancedMaxTokens));
  if (plan.block_keys != detail::kPlannerBlockKeys)
    fail("balanced", "runs " + std::to_string(detail::kPlannerBlockKeys) + "-row tiles (block_keys 0 or " +
                         std::to_string(detail::kPlannerBlockKeys) + ")");
  if (choice.splits != 0) fail("balanced", "sizes each token's splits from the schedule: leave splits 0");
  if (choice.fused_rows > 0) fail("balanced", "excludes fused_rows (a token of one split is unmerged anyway)");
  if (choice.row_order == 1) fail("balanced", "excludes row_order");
  check_fused_rows_choice(choice, true);  // the ranges of the rest
  check_row_order_choice(choice, true);
  const int max_tiles = static_cast<int>(ceil_div(topk, plan.block_keys));
  if (max_tiles < 2) fail("balanced", "needs topk > block_keys (a list of one tile has one split)");
  if (detail::splitk_smem_bytes(plan.block_keys, topk, fp8) > dev.max_smem_per_block) fail("device", "not enough shared memory per block");
  const int head_groups = plan.num_heads / kHeadGroup;
  const int slots = std::max(T, std::max(1, 2 * dev.sm_count / head_groups));
  plan.balanced = true;
  plan.splits = max_tiles;  // the most one token can get: a split per tile
  plan.chunk = plan.block_keys;
  plan.fused_rows = 0;
  plan.row_order = false;
  plan.split_softmax = resolve_split_softmax(choice, plan.block_keys, false, fp8, fast_memory);
  plan.early_issue = true;  // each CTA chooses by its slot's tiles (splitk_kernel.cu)
  plan.ctas = launch_ctas(static_cast<int64_t>(slots) * head_groups);
  plan.launches = T > 0 ? 2 : 0;  // main, combine (the schedule is made before, once per step)
  plan.workspace_bytes = T > 0 ? balanced_workspace_for(plan.num_heads, slots) : 0;
  plan.schedule_bytes = T > 0 ? detail::schedule_layout(T, slots).bytes : 0;
  return plan;
}

// Splits of a list of `tiles` whole tiles: at most max_splits, none left empty.
int64_t whole_tile_splits(int64_t tiles, int64_t max_splits) { return ceil_div(tiles, ceil_div(tiles, max_splits)); }

// A plan's lead tokens (SparseMlaPlan::lead_tokens): theirs, their splits, the later tokens'
// splits; splits 0: none.
struct LeadPlan {
  int64_t lead_tokens = 0, lead_splits = 1, splits = 0;
};
// Lead tokens in lead_splits splits, then the `later` units (groups or tokens) in as many splits
// as fit `rounds` rounds of `slots` CTAs (at most a tile each and kTailMaxSplits); none if fewer
// than min_splits fit, or too few to beat one split (rounds of 1 / splits each).
LeadPlan lead_plan(int64_t lead_tokens, int64_t lead_splits, int64_t later, int64_t slots, int64_t tiles, int64_t min_splits,
                   int64_t rounds = 1) {
  const int64_t fit = std::min<int64_t>({rounds * slots / later, tiles, detail::kTailMaxSplits});
  if (fit < min_splits) return {};
  const int64_t splits = whole_tile_splits(tiles, fit);
  if (splits <= rounds) return {};
  return {lead_tokens, lead_splits, splits};
}

// Where the units past whole waves, with more than half a wave left, may take 3 splits in two
// rounds of CTAs (params.h kLeadTwoRounds*): always, for a tail of at most 11/20 of a wave, or
// never. The longer a CTA's work the less its round's setup weighs: 128 heads are bound by their
// MMAs, 64-head CTAs compute 4x a 16-head one's, and 16 / 32 heads pay only with full lists. On
// fast memory (PlannerContext::fast_memory: the H200) the gather binds bf16 less, and its tails
// take two rounds up to 2/3 of a wave too.
enum class TwoRounds { never, short_tail, always };
TwoRounds two_rounds_rule(int num_heads, int topk, bool fp8, bool fast_memory) {
#ifdef DSA_WHATIF
  // What-if builds only: DSA_TWO_ROUNDS=always / never for every plan.
  if (const char* e = std::getenv("DSA_TWO_ROUNDS")) return std::string(e) == "always" ? TwoRounds::always : TwoRounds::never;
#endif
  if (num_heads == 128) return TwoRounds::always;
  if (num_heads < 64 && topk < detail::kLeadTwoRoundsMinList16And32Heads) return TwoRounds::never;
  return fp8 || fast_memory ? TwoRounds::always : TwoRounds::short_tail;
}

// Past whole waves (params.h): the `lead` units' tokens unsplit, the `later` units past them in
// as many splits as fit one round of `slots` CTAs, or in 3 splits over two rounds where `rule`
// allows.
LeadPlan past_waves_lead(int64_t lead_tokens, int64_t later, int64_t slots, int64_t tiles, TwoRounds rule) {
  const LeadPlan one_round = lead_plan(lead_tokens, 1, later, slots, tiles, 2);
  int64_t max_rounds = 2;
#ifdef DSA_WHATIF
  // What-if builds only: 1 = one round; 3 = also 4 splits over three rounds where `rule` is
  // always (tails of up to 3/4 of a wave; not measured yet).
  if (const char* e = std::getenv("DSA_LEAD_ROUNDS")) max_rounds = std::atoi(e);
  if (max_rounds < 2) rule = TwoRounds::never;
#endif
  if (one_round.splits > 0 || rule == TwoRounds::never) return one_round;
  if (rule == TwoRounds::short_tail && later * detail::kLeadTwoRoundsMaxTailDen > slots * detail::kLeadTwoRoundsMaxTailNum) return {};
  const LeadPlan two_rounds = lead_plan(lead_tokens, 1, later, slots, tiles, 2, 2);
  if (two_rounds.splits > 0 || max_rounds < 3 || rule != TwoRounds::always) return two_rounds;
  return lead_plan(lead_tokens, 1, later, slots, tiles, 2, 3);
}

// The device's DRAM bandwidth in eighths of the H100's (params.h kH100BandwidthGbs), to the
// nearest: an H100 reporting within 6 % of its 3352 GB/s is 8, an H200 (4814) 11; unknown (0) 8.
int64_t bandwidth_eighths(const DeviceInfo& dev) {
  const int64_t bandwidth = dev.memory_bandwidth_gbs > 0 ? dev.memory_bandwidth_gbs : detail::kH100BandwidthGbs;
  return std::max<int64_t>(1, (8 * bandwidth + detail::kH100BandwidthGbs / 2) / detail::kH100BandwidthGbs);
}

// 32 heads past 2 or more whole waves with a bf16 cache (params.h kOneTokenWavesBf16; fp8 takes
// one-token groups always): whether one-token groups with lead tokens (the whole waves unsplit, the
// tail in `tail_splits` splits over as many rounds as their CTAs fill) cost less than 2-token
// groups, in waves of each: whole + rounds / tail_splits against ceil(T / 2 / SMs) x the cost ratio
// + the union pass's setup. A last 2-token wave of one CTA that holds one token (odd T) counts
// half: it reads one list.
// One-token waves are bound by memory, 2-token waves by their instructions (H200: T = 1024 690.5
// / 719.6 µs against the H100's 842.5 / 724.6, run 500), so the 2-token costs, counted in
// one-token waves, scale with the device's bandwidth (bandwidth_eighths).
bool one_token_lead_pays(int64_t num_tokens, int64_t tail_splits, int64_t sm_count, int64_t bandwidth_eighths) {
  const int64_t whole = num_tokens / sm_count, tail = num_tokens % sm_count;
  const int64_t rounds = ceil_div(tail * tail_splits, sm_count);
  const int64_t two_token_ctas = ceil_div(num_tokens, 2);
  const int64_t two_token_half_waves = 2 * ceil_div(two_token_ctas, sm_count) - (num_tokens % 2 == 1 && two_token_ctas % sm_count == 1 ? 1 : 0);
  const detail::WaveCost c = detail::kOneTokenWavesBf16;
  return 8 * 2 * c.den * (whole * tail_splits + rounds) < bandwidth_eighths * (c.ratio * two_token_half_waves + 2 * c.setup) * tail_splits;
}

// The facts of one plan_sparse_mla call that its steps share: the shape, the device and the
// rules that follow from them.
struct PlannerContext {
  int num_tokens, num_heads, topk;
  const DeviceInfo& dev;
  IndexSharing sharing;
  int min_valid_entries;         // SparseMlaProblem::min_valid_entries (0: unknown)
  bool fp8;
  int64_t split_k_slots;         // split-K's CTAs per wave: two per SM
  int shared_rows_tiles;         // union tiles of a full list
  TwoRounds two_rounds;          // two_rounds_rule's
  int64_t lead_min_tail_splits;  // just past half a wave (params.h kLeadMinTailSplits)
  int64_t split_k_lead_min_tail_splits;  // the same for split-K (kLeadMinTailSplitsSplitKFastMemory)
  int64_t bandwidth_eighths;     // the device's DRAM bandwidth in eighths of the H100's
  bool fast_memory;              // bandwidth_eighths >= params.h kFastMemoryEighths (the H200)

  // The caller's hint says every list is full (min_valid_entries = topk).
  bool full_lists() const { return min_valid_entries >= topk; }

  // Splits of one-token groups below one wave (split each group's union tiles; the combine merges
  // them; no split left empty by a full list). Fewer than 8 groups use at most 3/4 of the SMs, 8
  // or more at most 8 splits each: both faster than filling the chip (runs 422-425: 64 heads
  // T = 8 / 10 / 12 27.6 / 29.5 / 32.2 -> 24.5 / 26.8 / 28.6 us, 128 heads T = 2 / 5 / 6 18.8 /
  // 25.8 / 27.7 -> 18.2 / 24.3 / 25.2, fp8 128 heads T = 6 29.7 -> 27.7). Above 8 splits the
  // main kernel gains <= 1.2 us and the many-splits combine's tail grows 2.6 -> 6.3-7.5 (run 427).
  int64_t one_token_splits(int64_t groups) const {
    if (groups <= 0 || groups >= dev.sm_count) return 1;
    const int64_t cap = groups < detail::kSharedRowsManyGroups ? dev.sm_count * 3 / 4 / groups : detail::kSharedRowsManyGroupsMaxSplits;
    const int64_t max_splits = std::max<int64_t>(1, std::min<int64_t>({dev.sm_count / groups, shared_rows_tiles, cap}));
    return whole_tile_splits(shared_rows_tiles, max_splits);
  }

  // One-token groups just past one wave (params.h: up to half a wave more): one wave of groups
  // unsplit, the tokens past it split (at least 2 splits). It took over from 2-3 equal splits of
  // every group (and at 64 and 128 heads past 1.35 waves the union pass), runs 458-459 on the
  // H100, random lists of 2048, µs: 32 heads T = 133 / 150 / 176
  // / 198 168.7 / 176.6 / 185.3 / 200.8 -> 128.7 / 145.0 / 167.1 / 184.7; 64 heads T = 133 / 160 /
  // 190 181.9 / 196.2 / 209.8 -> 131.6 / 158.1 / 185.8; 128 heads T = 67 / 80 / 99 154.7 / 164.1 /
  // 196.4 -> 107.4 / 125.9 / 151.5; fp8 by as much; runs of 1-2048 rows at 64 / 128 heads
  // T = 150 / 80 113.2 / 104.0 -> 107.9 / 95.0 (32 heads T = 150 102.2 / 102.8). At most 8 splits
  // lost 3-5 µs on the smallest tails (32 heads T = 133 133.9, 128 heads T = 67 112.5). Past half
  // a wave the split CTAs would need several rounds, whose setups lose on full lists (32 heads
  // T = 200 202.0 against 212.6 / 214.7 / 245.4 with 4 / 8 / 16 splits, 128 heads T = 112 198.1
  // against 190.7 / 221.6; only mixed lengths gain: 32 heads runs T = 200 132.3 against 113.2),
  // except 3 splits in two rounds up to 2/3 of a wave where that pays (two_rounds_rule: 128
  // heads T = 100 197.3 -> 173.6, run 470). The same past 2-6 whole waves at 64 heads bf16 and
  // past any number at 128 heads and with fp8 (params.h kSharedRowsLeadMaxWaves: 128 heads
  // T = 133 / 400 285.9 / 638.8 -> 198.4 / 550.2, runs 474, 480).
  // Lead tokens (params.h, SparseMlaPlan::lead_tokens) for one-token groups just past whole waves
  // (their groups unsplit) or just past half a wave (half a wave of groups in 2 splits),
  // the later tokens in as many splits as fit the SMs after them; none where too few fit.
  // max_lead_waves: the most whole waves whose tokens go unsplit.
  // rule: two_rounds_rule's, or the caller's where it knows better (32 heads past 2 waves).
  LeadPlan shared_rows_lead(int64_t groups, int groups_per_token, int64_t max_lead_waves, TwoRounds rule) const {
    const int64_t wave = dev.sm_count / groups_per_token * groups_per_token, half = dev.sm_count / 2 / groups_per_token * groups_per_token;
    if (groups > wave) {  // past 1 to max_lead_waves whole waves: their tokens unsplit, the tail split
      const int64_t whole = groups / wave * wave;
      if (whole == groups || whole / wave > max_lead_waves) return {};
      return past_waves_lead(whole / groups_per_token, groups - whole, dev.sm_count, shared_rows_tiles, rule);
    }
    // Past half a wave at 128 heads, whose CTAs are bound by their MMAs (T = 34 / 41 88.8 /
    // 89.8 -> 75.5 / 83.9 µs, runs of 1-2048 rows T = 40 87.4 -> 63.5; run 465). At 32 and 64
    // heads only with lists of 2048 and fp8 or fast memory (params.h kHalfWaveLeadMinList): a
    // wave of one-split bf16 CTAs is bound by the gather on the H100, so the idle SMs cost little
    // and the second round more (64 heads T = 75 93.5 -> 104.5 µs, fp8 99.0 -> 94.7; run 509).
    // At 128 heads (two groups per token) only with lists of kHalfWaveLeadMinList128Heads or
    // more: shorter ones lose (topk 512 T = 40 43.7 -> 30.3 µs unsplit, run 581).
    const bool half_wave_lead = groups_per_token > 1 ? topk >= detail::kHalfWaveLeadMinList128Heads
                                                     : topk >= detail::kHalfWaveLeadMinList && (fp8 || fast_memory);
    if (groups > half && half > 0 && half_wave_lead)
      return lead_plan(half / groups_per_token, 2, groups - half, dev.sm_count, shared_rows_tiles, lead_min_tail_splits);
    return {};
  }
};

// Splits of 16-head groups with the consecutive hint: the fewest whose rounds of CTAs cost at
// least 10 % less than those of fewer splits, counting a round of s-way splits as 1 / s of a
// group's time (a CTA's union tiles take that long whether its wave is full or not: a group CTA
// streams its rows at its own rate, ~0.04 us per row, until ~95 of them share the DRAM).
int64_t consecutive_group_splits(int64_t groups, int64_t sm_count) {
  int64_t best = 1, best_rounds = ceil_div(groups, sm_count);
  for (int64_t s = 2; s <= detail::kSharedRowsConsecutiveMaxSplits; ++s) {
    const int64_t rounds = ceil_div(groups * s, sm_count);
    if (rounds * best * 10 < best_rounds * s * 9) best = s, best_rounds = rounds;  // rounds / s < 0.9 x best's
  }
  return best;
}

// What the planner would run on the shared-rows kernel, and whether that pays.
struct SharedRowsPick {
  bool pays = false;
  int64_t splits = 1;
  LeadPlan lead;
  bool one_token_32_heads = false;   // 32 heads in one-token groups (shared_rows_group_heads)
  bool one_token_past_wave = false;  // 32 heads: one-token groups past one wave, no union pass
};

// Shared rows (shared_rows_kernel.cu: a CTA computes 64 query rows, 4 tokens x 16 heads, 2 x 32
// or one token's 64, over the union of their index lists) when forced, or by the planner:
//  - H >= 64 (one token per CTA: nothing united, nothing masked), whatever the hint, once the
//    call holds 2^17 (head block, index position) pairs; bf16 lists of >= 256 positions from
//    2^13 pairs and 32 head blocks or 2^14 and 12, fp8 lists of >= 1024 from 3 x 2^14 pairs; or
//    more head blocks than split-K's two CTAs per SM. Split-K's CTAs of 16 heads each read
//    every row again and run mma.sync at M = 16. Fewer groups than SMs split each group's union
//    tiles within one wave (a combine merges them; how many splits: below), and CTAs of one
//    wave compact their token's list themselves (no union or order pass). Measured on the H100
//    (docs/perf.md, runs 125-134, 418-426 and 434-437 for the history), split-K vs shared rows,
//    us: H = 64 random T = 32 / 64 / 256 / 1024 83.7 / 147 / 557 / 2183 vs 52.4 / 80.2 / 240 /
//    906, prefill T = 4096 8274 vs 3217; H = 128 T = 32 / 1024 145 / 4251 vs 69.3 / 1606. Since
//    Q moves by TMA (6238c75, runs 434-436) shared rows also win small bf16 calls of long
//    lists: 64 heads T = 3 / 4 18.1 / 20.4 vs 17.0 / 18.2 (topk 2048), 128 heads T = 3 / 4 at
//    topk 1024 18.2 / 20.0 vs 15.7 / 16.2, 64 heads topk 512 T = 8 15.2 vs 14.7, mixed lengths
//    64 heads T = 4 17.3 vs 14.9; not 4096 pairs (64 heads T = 1 topk 1024 9.6 vs 10.9, 128
//    heads topk 256 T = 2 9.5 vs 10.8). Since split-K's row gathers and split softmax (run 599,
//    bf16 split-K vs shared rows, us): not below 2^14 pairs and 32 head blocks either (64 heads
//    topk 512 T = 4 / 6 / 7 10.9 / 13.0 / 14.1 vs 13.6 / 14.6 / 14.4, runs of 1-512 rows T = 4
//    10.1 vs 12.1, 2 valid 4.8 vs 8.5; 128 heads T = 2 / 3 10.9 / 13.0 vs 13.2 / 13.8; 64 heads
//    topk 1024 T = 3 13.7 vs 14.2, runs even; topk 300 T = 7 12.4 vs 15.4); from 32 head blocks
//    shared rows still win or tie (topk 300 at 64 heads T = 10 / 13 and 128 heads T = 4 / 6
//    13.9 / 15.0 / 12.6 / 14.7 vs 13.6 / 15.0 / 12.6 / 13.8). T = 1 (and 2 at 64 heads) stays
//    on split-K: full lists would gain 1.2-1.9 us (64 heads T = 1 / 2 14.8 / 16.2 vs 13.1 /
//    15.1, 128 heads T = 1 16.1 vs 13.9), but short ones, which split-K's fused and lean rows
//    finish alone, lose more (2 / 33 / 700 valid rows at 64 heads T = 1 5.5 / 9.3 / 10.9 vs 7.3
//    / 10.7 / 11.9, 128 heads 5.3 / 7.4 vs 7.5 / 8.9; 64 heads T = 2 of 5 and 1500 10.9 vs
//    12.6). fp8, whose split-K tiles cost less: from T = 6 / 3 at 64 / 128 heads (22.9 / 22.8
//    vs 20.3 / 20.3); T = 4 / 2 within 2 %, T = 1 and lists of 1024 at T = 4 / 2 split-K by
//    4-15 %.
//  - H = 32 (2 tokens per CTA), unless the caller says tokens share no rows, and without the
//    consecutive hint only for lists of >= 512 positions. bf16 with lists of >= 1024: once
//    split-K needs a second wave (T x 2 head groups > 2 CTAs x SMs), whether or not shared rows
//    fill theirs: random T = 128 / 140 / 192 / 300 / 400 150.7 / 255.3 / 284.2 / 422.1 / 532.6
//    vs 191.7 / 192.9 / 196.9 / 369.6 / 371.0 (runs 395-396; the planner took split-K below
//    T = 256 until then); topk 1024 T = 200 / 300 / 1024 152.7 / 224.5 / 591.9 vs 117.3 / 216.6
//    / 424.9. Otherwise (fp8, whose split-K costs less, or shorter lists) from T = 256 in whole
//    waves: fp8 T = 192 / 256 / 300 / 400 / 512 201.5 / 236.9 / 317.2 / 430.2 / 467.8 vs 211.2
//    / 215.4 / 396.0 / 397.9 / 396.6; bf16 topk 512 T = 256 / 300 / 512 / 1024 90.8 / 126.1 /
//    170.4 / 328.6 vs 90.8 / 140.5 / 152.3 / 281.8. Shorter lists lose (runs 399-400): topk 256
//    T = 256 / 300 / 1024 54.2 / 71.8 / 191.7 vs 64.2 / 94.3 / 189.3, topk 64 T = 300 / 1024
//    31.1 / 79.1 vs 58.2 / 110.8. Mixed runs of 1-2048 rows at topk 2048 lose at T = 200 (175.8
//    vs 193.3; win from 300: 253.9 / 637.1 vs 222.1 / 486.2). Earlier (bf16): runs of 300 rows
//    T = 1024 212 vs 204, prefill T = 1024 / 4096 1074 / 4198 vs 666 / 2546.
//    Below that line, lists of >= 1024 in one wave of one-token CTAs (the 64-head layout, rows
//    32-63 idle; shared_rows_group_heads) from T = 16, whatever the hint: split-K vs
//    shared rows (run 441, us) random T = 16 / 24 / 32 / 48 / 64 / 96 / 128 / 132 35.3 / 45.1 /
//    53.2 / 80.8 / 87.8 / 141.7 / 151.0 / 154.1 vs 31.3 / 39.4 / 47.3 / 60.9 / 72.4 / 96.8 /
//    117.9 / 121.6, runs of 1-2048 rows T = 16 / 64 / 128 26.9 / 78.2 / 138.2 vs 25.7 / 54.7 /
//    95.6; fp8 T = 16 / 20 / 24 / 31 / 64 / 128 27.4 / 32.9 / 37.1 / 43.4 / 71.8 / 123.6 vs 26.7
//    / 30.8 / 33.9 / 38.7 / 61.3 / 100.7 (runs 441, 456; fp8 runs of 1-2048 rows T = 16 / 24
//    24.6 / 33.9 vs 25.0 / 31.3). Below T = 16 the 64-head kernel at the same T was no faster
//    than split-K at 32 (T = 8 23.1 vs 22.3, run 440).
//  - H = 16 (4 tokens per CTA) when its CTAs fill >= 90 % of whole waves (each CTA runs for its
//    4 tokens' whole index lists, ~230 us at topk 2048, so a partial last wave costs a full CTA
//    time) and T is large enough for the caller's IndexSharing. Measured (runs 54, 57, 98,
//    104-105, 117-119): it wins where consecutive tokens share rows (prefill of an 8192-row
//    prefix: T = 512 / 1024 / 2048 / 4096 / 8192 -6 / -10 / -11 / -17 / -32 % vs split-K; of a
//    2048-row prefix: T = 512 / 1024 -56 / -62 %), and where tokens share none it wins on full
//    random lists (T = 1024 0.98x the gather floor, split-K 1.08x) and on runs of 1-2048 rows
//    (T = 1024 / 2048 -5 / -1 %), but loses on full contiguous runs (+5 % at T = 1024) and on
//    short lists (16 / 300 rows per token at T = 1024: 50 / 166 us vs split-K 34 / 146; at
//    T = 4096 16 rows: 157 vs 110). Uniform subsets of a 32768-row prefix share ~6 % and lose
//    too (+19-20 % at T = 512 / 1024). The planner sees no indices: with no hint (unknown) it
//    takes shared rows from T = 2048 (prefill sizes) for lists of >= 512 positions (random T =
//    2048 / 4096 at topk 64 93.5 / 171.1 vs 137.5 / 250.9, 256 251.9 / 481.4 vs 280.8 / 539.9,
//    512 440.4 / 873.7 vs 426.3 / 833.1, 1024 769.2 / 1559.1 vs 717.5 / 1425.8; run 400), with
//    consecutive from T = 512 (128 groups, one wave; T = 256 is +82 % unsplit; split groups
//    below and between whole waves: below, consecutive_group_splits), with none never. An fp8
//    cache only with consecutive: its split-K is so much cheaper that shared rows lose 46-54 %
//    on lists that share no rows (random T = 2048 / 4096 957 / 1929 vs 1425 / 2823 us, runs
//    T = 4096 1027 vs 1581) and gain only -6 / -22 % on the 8192-row prefix at T = 4096 / 8192
//    (1812 / 3133 vs 1696 / 2433; T = 512-2048 +10 to +1 %), but -54 % on a 2048-row prefix
//    (T = 1024: 374 vs 172; runs 395-396). Against the split-K since e4a2bed (run 549): the
//    8192-row prefix T = 512 / 4096 260.3 / 1694.6 vs split-K 209.0 / 1585.6, the 2048-row prefix
//    T = 512 / 1024 115.5 / 170.4 vs 192.5 / 331.4; kept, as real prefill tokens share most rows.
SharedRowsPick pick_shared_rows(const PlannerContext& c) {
  const int num_tokens = c.num_tokens, num_heads = c.num_heads, topk = c.topk;
  const DeviceInfo& dev = c.dev;
  const bool fp8 = c.fp8;
  const IndexSharing sharing = c.sharing;
  const int64_t split_k_slots = c.split_k_slots;
  const int64_t shared_rows_head_blocks = detail::shared_rows_head_blocks(num_tokens, num_heads);
  const int64_t shared_rows_ctas = detail::shared_rows_groups(shared_rows_head_blocks);
  const int64_t shared_rows_waves = ceil_div(shared_rows_ctas, dev.sm_count);
  const bool shared_rows_fills_waves = shared_rows_ctas * 10 >= shared_rows_waves * dev.sm_count * 9;  // >= 90 %
  const int tokens_per_group = detail::shared_rows_tokens_per_group(num_heads);
  SharedRowsPick pick;
  if (tokens_per_group == 1) {
    const int64_t pairs = shared_rows_head_blocks * topk;
    const bool long_list_pays = fp8 ? (topk >= detail::kSharedRowsLongList && pairs >= detail::kSharedRowsMinPairsLongListFp8) ||
                                          (topk >= detail::kSharedRowsMidListFp8 && 2 * shared_rows_head_blocks > split_k_slots)
                                    : topk >= detail::kSharedRowsMinListBf16 && shared_rows_head_blocks >= detail::kSharedRowsMinHeadBlocksBf16 &&
                                          pairs >= (shared_rows_head_blocks >= detail::kSharedRowsManyHeadBlocksBf16
                                                        ? detail::kSharedRowsMinPairsBf16
                                                        : detail::kSharedRowsMinPairsFewHeadBlocksBf16);
    pick.pays = pairs >= detail::kSharedRowsMinPairsWide || long_list_pays || shared_rows_head_blocks > split_k_slots;
    // Further past one wave one split, with the union pass: its order pass puts the longest lists
    // in the first wave (runs of 1-2048 rows 64 heads T = 179 / 224 127.9 / 134.5 against 133.6 /
    // 156.4 without it, 128 heads T = 100 107.0 against 128.2; full lists do not repay it: 64
    // heads T = 200 213.1 against 207.5; runs 449-450).
    // 64 heads bf16 up to kSharedRowsLeadMaxWaves whole waves (past them the union pass's row
    // order repays its last wave), 128 heads and fp8 past any number (params.h, run 480); so do
    // 64 heads bf16 on fast memory (params.h kFastMemoryEighths, run 503).
    const bool lead_waves_limited = num_heads == 64 && !fp8 && !c.fast_memory;
    int64_t max_lead_waves = lead_waves_limited ? detail::kSharedRowsLeadMaxWaves : std::numeric_limits<int64_t>::max();
#ifdef DSA_WHATIF
    if (const char* e = std::getenv("DSA_SR_MAX_WAVES")) max_lead_waves = std::atoi(e);  // what-if builds only; 1: one wave
#endif
    pick.lead = c.shared_rows_lead(shared_rows_ctas, detail::shared_rows_groups_per_token(num_heads), max_lead_waves, c.two_rounds);
    pick.splits = pick.lead.splits > 0 ? pick.lead.splits : c.one_token_splits(shared_rows_ctas);
  }
  // At 16 and 32 heads: never for none, and without consecutive only for lists of
  // kSharedRowsMinList positions or more; at 32 heads with lists of kSharedRowsLongList or more
  // whatever the hint, as at 64 and 128 heads: the count below was measured on random lists,
  // which share no rows, and 2-token groups read each row once as one-token groups do (run 495,
  // hint none, one-token -> 2-token groups: random T = 500 / 784 / 1024 / 4096 423.7 / 648.8 /
  // 842.7 / 3289.4 -> 376.7 / 551.3 / 721.5 / 2874.1, padding in the middle T = 1024 526.9 ->
  // 480.4; mixed lengths lose the one-token groups' lead: runs of 1-2048 rows T = 450 / 1024 /
  // 4096 221.6 / 474.7 / 1724.8 -> 238.7 / 484.5 / 1784.3).
  const bool long_lists_32_heads = tokens_per_group == 2 && topk >= detail::kSharedRowsLongList;
  const bool hint_allows = sharing == IndexSharing::consecutive || (sharing == IndexSharing::unknown && topk >= detail::kSharedRowsMinList) ||
                           long_lists_32_heads;
  if (tokens_per_group == 2) {
    // On fast memory an fp8 cache's shorter lists keep split-K without the hint: run 690 (H200,
    // 2-token groups -> split-K, topk 512) random T = 500 / 750 / 1024 / 2048 138.8 / 202.8 /
    // 262.3 / 507.7 -> 126.9 / 186.4 / 247.5 / 490.3, runs 95.8 / 139.5 / 175.6 / 331.4 -> 87.6 /
    // 118.0 / 155.2 / 293.5 µs, where bf16's groups still win on random lists (131.6 / 189.7 /
    // 244.9 / 472.2 against 139.6 / 203.9 / 270.0 / 521.6) and tie on runs.
    const bool fp8_short_lists_keep_split_k =
        c.fast_memory && fp8 && sharing == IndexSharing::unknown && topk < detail::kSharedRowsLongList;
    pick.pays = hint_allows && (!fp8 && topk >= detail::kSharedRowsLongList
                                    ? shared_rows_head_blocks > split_k_slots  // head blocks = split-K's CTAs of one split
                                    : num_tokens >= detail::kSharedRowsMinTokens32Heads && shared_rows_fills_waves &&
                                          !fp8_short_lists_keep_split_k);
    // Below that line, lists of >= 1024 in one wave of one-token groups, whatever the hint:
    // each row read once per token (split-K: twice) at the price of 32 idle MMA rows. Past it,
    // up to 1.7 waves, one-token groups as at 64 heads (tail_splits), and past half a wave with
    // one split: 2-token groups are T / 2 < SMs CTAs (random T = 200 / 224 199.8 / 203.3 µs
    // against 202.1 / 204.8, runs of 1-2048 rows T = 200 / 224 192.0 / 196.3 against 133.3 /
    // 149.5; fp8, split-K there, T = 200 239.1 against 193.2; runs 448-450).
    if (topk >= detail::kSharedRowsLongList && num_tokens >= detail::kSharedRowsOneToken32HeadsMinTokens) {
      pick.one_token_past_wave = num_tokens > dev.sm_count && num_tokens * 10 <= int64_t{detail::kSharedRowsPastWaveMaxTenths} * dev.sm_count;
      pick.one_token_32_heads = pick.one_token_past_wave || (!pick.pays && num_tokens <= dev.sm_count);
      // Past 2 or more whole waves of them: one-token groups with lead tokens (the tail split)
      // where their waves cost less than the 2-token groups' (one_token_lead_pays), whatever
      // the hint. Run 478, µs, 2-token groups or split-K -> lead tokens: random T = 265 / 300 /
      // 330 / 400 / 529 / 600 289.5 / 366.8 / 367.4 / 369.3 / 464.8 / 542.7 -> 235.9 / 267.5 /
      // 292.0 / 345.9 / 446.6 / 515.9, topk 1024 T = 265 173.7 -> 134.3, fp8 (split-K) T = 300 /
      // 350 283.7 / 332.4 -> 233.8 / 275.6, runs of 1-2048 rows T = 300 217.9 -> 173.1; past 4
      // whole waves T = 800 711.3 -> 665.0, fp8 T = 700 628.9 -> 508.7. Where the 2-token
      // groups' waves are full they stay: T = 450 / 661 / 700 / 925 375.9 / 543.1 / 544.5 /
      // 714.6 against 387.2 / 552.0 / 587.8 / 762.5 with lead tokens (runs 477-479).
      // Past 2 whole waves a bf16 tail of 11/20-2/3 of a wave takes 3 splits in two rounds too:
      // the alternative there is 2-token groups, not one more wave of one-token CTAs as below 2
      // waves (T = 220 203.4 -> 213.0 with two rounds). Run 484, 2-token groups -> two rounds:
      // random T = 340 / 345 / 350 / 352 / 610 369.2 / 369.4 / 370.0 / 371.2 / 545.6 -> 308.4 /
      // 312.2 / 316.6 / 317.7 / 525.1, runs of 1-2048 rows T = 350 218.3 -> 178.3.
      const bool past_two_waves = num_tokens > 2 * int64_t{dev.sm_count};
      const TwoRounds rule = past_two_waves && c.two_rounds == TwoRounds::short_tail ? TwoRounds::always : c.two_rounds;
      const LeadPlan one_token_lead = c.shared_rows_lead(num_tokens, 1, std::numeric_limits<int64_t>::max(), rule);
      // Without a lead plan (a tail past 2/3 of a wave, or none) the same count with the tail a
      // wave of its own, unsplit: 3 one-token waves against 2 of 2-token groups (T = 353-396). Run
      // 486, 2-token groups or split-K (fp8, then by the count at 15/8) -> one-token groups: random
      // T = 360 / 380 / 396 373.6 / 373.9 / 376.2 -> 312.7 / 324.4 / 337.7, topk 1024 T = 360 217.8
      // -> 174.5, runs of 1-2048 rows T = 370 221.8 -> 203.2; fp8 T = 360 / 500 / 660 / 900 / 1170
      // 356.3 / 400.9 / 591.5 / 823.8 / 1049.1 -> 286.9 / 379.7 / 474.9 / 654.8 / 834.8, topk 1024
      // T = 360 / 660 / 1400 188.9 / 312.7 / 673.1 -> 158.7 / 262.0 / 562.5. Mixed lengths lose the
      // union pass's order: fp8 runs T = 500 236.9 -> 251.8.
      // fp8 takes one-token groups at every T: where the count said 2-token groups (the bands
      // just below whole waves of them, T = 749-792, 1013-1056, ...) they lost too. Run 495,
      // 2-token -> one-token groups: random T = 760 / 1024 / 2048 588.2 / 777.9 / 1523.0 ->
      // 561.6 / 746.9 / 1475.2, topk 1024 T = 1024 438.4 -> 416.2. Earlier, split-K or 2-token
      // groups -> one-token groups, run 490: T = 225 / 250 / 256 / 264 240.9 / 240.7 / 219.6 /
      // 219.8 -> 194.9 / 195.7 / 195.3 / 196.0; runs of 1-2048 rows T = 240 / 256 182.8 / 213.3
      // -> 161.7 / 167.6. Mixed lengths lose the union pass's order: runs T = 500 236.9 -> 251.8.
      const int64_t tail_splits = one_token_lead.splits > 0 ? one_token_lead.splits : 1;
      const bool one_token_pays = fp8 || one_token_lead_pays(num_tokens, tail_splits, dev.sm_count, c.bandwidth_eighths);
      if (!pick.one_token_32_heads && num_tokens > dev.sm_count && one_token_pays)
        pick.one_token_32_heads = pick.one_token_past_wave = true;
      if (pick.one_token_32_heads) {
        pick.pays = true;
        pick.lead = one_token_lead;
        pick.splits = one_token_lead.splits > 0 ? one_token_lead.splits : c.one_token_splits(num_tokens);
      }
    }
  } else if (tokens_per_group == 4) {  // 16 heads
    pick.pays = hint_allows && shared_rows_fills_waves &&
                (sharing == IndexSharing::consecutive ? num_tokens >= detail::kSharedRowsMinTokensSharing
                                                      : num_tokens >= (fp8 ? detail::kSharedRowsMinTokensFp8Unhinted : detail::kSharedRowsMinTokens));
    // With consecutive, bf16 lists of >= 2048 also below and between whole waves, their groups
    // split (consecutive_group_splits), from groups that fill 9/10 of a wave in 4 splits (T >= 117
    // on 132 SMs). Run 528 (H100, split-K -> shared rows, us): MTP batches (2 tokens per request
    // of 2560 rows, sharing ~80 % of them) T = 117 / 150 / 232 / 300 / 450 / 511 / 600 / 800 /
    // 1100 / 1400 / 2200 109.6 / 138.6 / 204.7 / 253.2 / 380.0 / 420.9 / 490.4 / 653.4 / 888.6 /
    // 1131.9 / 1764.6 -> 96.8 / 110.7 / 158.0 / 198.7 / 260.2 / 290.8 / 387.8 / 485.6 / 683.8 /
    // 790.5 / 1230.6 (4 / 3 / 2 / 3 / 1 / 1 / 3 / 3 / 2 / 3 / 3 splits). Tokens that share ~25 %
    // (uniform picks from an 8192-row prefix, or MTP over 8192-row contexts) come out even: T =
    // 150 / 300 / 600 / 1100 / 2200 100.6 / 173.6 / 334.6 / 589.9 / 1166.1 -> 98.2 / 181.7 /
    // 353.3 / 609.0 / 1067.2, T = 264 / 600 232.1 / 510.2 -> 225.2 / 536.6. Lists of 1024 lost
    // (+4 to +37 %), and fp8, whose split-K costs less, lost at most T (runs 526-527: prefix T =
    // 264 / 500 / 700 118.9 / 233.7 / 322.8 against 148.3 / 259.4 / 387.4). Below the line split-K
    // wins (MTP T = 64 64.2 against 79.2 with 4 splits). Not on fast memory (params.h
    // kFastMemoryEighths), where split-K's gather is 1.4x faster: the H200 gained less on MTP
    // batches and lost more where ~25 % is shared (run 529: MTP T = 117 / 232 / 300 / 600 / 1100 /
    // 2200 83.9 / 149.7 / 185.9 / 355.3 / 628.0 / 1237.3 -> 77.8 / 130.6 / 176.8 / 334.4 / 581.4 /
    // 1034.1; 8192-row prefix T = 300 / 600 / 2200 162.2 / 317.8 / 1098.8 -> 182.3 / 352.1 /
    // 1062.0; MTP over 8192-row contexts T = 600 364.0 -> 455.6).
    if (!pick.pays && sharing == IndexSharing::consecutive && !fp8 && !c.fast_memory && topk >= detail::kSharedRowsConsecutiveMinList &&
        shared_rows_ctas * detail::kSharedRowsConsecutiveMaxSplits * 10 >= int64_t{dev.sm_count} * 9) {
      pick.pays = true;
      pick.splits = consecutive_group_splits(shared_rows_ctas, dev.sm_count);
    }
  }
  return pick;
}

// A shared-rows plan: the planner's (`pick`), or the caller's choice forced it (`pick` null).
SparseMlaPlan plan_shared_rows(SparseMlaPlan plan, const PlanChoice& choice, const PlannerContext& c, const SharedRowsPick* pick) {
  const int num_tokens = c.num_tokens, num_heads = c.num_heads, topk = c.topk;
  const DeviceInfo& dev = c.dev;
  if (topk > SparseMlaPlan::kMaxChunk) fail("kernel", "shared_rows needs topk <= " + std::to_string(SparseMlaPlan::kMaxChunk));
  if (choice.block_keys != 0) fail("kernel", "shared_rows takes no block_keys");
  if (choice.balanced == 1) fail("balanced", "needs the split_k kernel");
  if (choice.split_softmax != 0) fail("split_softmax", "needs the split_k kernel");
  if (choice.splits < 0 || choice.splits > SparseMlaPlan::kMaxSplits)
    fail("splits", "must be in [1, " + std::to_string(SparseMlaPlan::kMaxSplits) + "], got " + std::to_string(choice.splits));
  if (detail::shared_rows_smem_bytes() > dev.max_smem_per_block) fail("device", "not enough shared memory per block");
  plan.kernel = SparseMlaKernel::shared_rows;
  plan.block_keys = detail::kSharedRowsTileEntries;
  plan.splits = choice.splits != 0 ? choice.splits : pick ? static_cast<int>(pick->splits) : 1;
  // Union entries per split for a full list (whole tiles, shared_rows_split_tiles).
  plan.chunk = static_cast<int>(std::min<int64_t>(
      topk, detail::shared_rows_split_tiles(c.shared_rows_tiles, plan.splits) * int64_t{detail::kSharedRowsTileEntries}));
  const bool one_token = pick && pick->one_token_32_heads;  // 32 heads: forced plans unite 2 tokens
  const int group_heads = detail::shared_rows_group_heads(num_heads, !one_token);
  if (pick && pick->lead.splits > 0) {
    plan.lead_tokens = static_cast<int>(pick->lead.lead_tokens);
    plan.lead_splits = static_cast<int>(pick->lead.lead_splits);
  }
  const int64_t groups = detail::shared_rows_groups(detail::shared_rows_head_blocks(num_tokens, group_heads));
  const int64_t lead_groups = int64_t{plan.lead_tokens} * detail::shared_rows_groups_per_token(group_heads);
  plan.ctas = launch_ctas(detail::lead_split_ctas(groups, plan.splits, lead_groups, plan.lead_splits));
  // Fused rows with splits and one token per group: a list of at most one split's entries is
  // done by split 0 alone, unmerged (as split-K's: 100 valid rows at T = 16 and 64 heads ...).
  plan.fused_rows = planned_fused_rows(choice, detail::shared_rows_fused_rows_fit(plan.splits, group_heads), plan.chunk,
                                       c.min_valid_entries);
  // One token per group in one wave, or the planner's lead tokens or 32 heads past one wave:
  // each CTA compacts its token's list (no union pass, and no order pass, which only matters
  // across waves).
  plan.union_pass = !(detail::shared_rows_tokens_per_group(group_heads) == 1 &&
                      (plan.ctas <= dev.sm_count || (pick && (pick->lead.splits > 0 || pick->one_token_past_wave))));
  // Row order at 64 heads only: at 128 a token's two CTAs share its rows through L2 already and
  // the main kernel is bound by its MMAs (T = 256 / 1024 random: 243 / 911 -> 226 / 841 us at
  // 64 heads, 411 / 1604 -> 418 / 1616 at 128, the union pass's sort included; run 144).
  plan.row_order = resolve_row_order(choice, detail::shared_rows_row_order_fit(plan.union_pass, num_heads), num_heads == 64,
                                     num_tokens, topk, c.sharing);
  plan.launches = num_tokens == 0 ? 0 : (plan.union_pass ? 1 : 0) + (plan.union_pass && plan.splits == 1 ? 1 : 0) + 1 + (plan.splits > 1 ? 1 : 0) +
                                          (plan.lead_splits > 1 ? 1 : 0);
  plan.workspace_bytes = shared_rows_workspace_for(num_tokens, num_heads, topk, plan.splits, plan.union_pass, plan.lead_tokens, plan.lead_splits);
  return plan;
}

// A split-K plan: the planner's, or shaped by the caller's choice.
SparseMlaPlan plan_split_k(SparseMlaPlan plan, const PlanChoice& choice, const PlannerContext& c) {
  const int num_tokens = c.num_tokens, num_heads = c.num_heads, topk = c.topk;
  const DeviceInfo& dev = c.dev;
  const bool fp8 = c.fp8;
  const IndexSharing sharing = c.sharing;
  const int64_t split_k_slots = c.split_k_slots;
  const TwoRounds two_rounds = c.two_rounds;
  const int64_t lead_min_tail_splits = c.split_k_lead_min_tail_splits;
  const int64_t base_ctas = static_cast<int64_t>(num_tokens) * (num_heads / kHeadGroup);
  const int64_t min_splits = ceil_div(topk, SparseMlaPlan::kMaxChunk);
  // Two CTAs per SM (8 warps). Measured on the H100 (docs/perf.md, ac6f7a2): 32-key tiles x 2
  // stages beat 16 x 4 (prefill 2155 vs 2397 us, T=64 72 vs 74 us, equal at T <= 8); 16 and 64
  // stay for experiments (dsa-bench --block-keys).
  plan.block_keys = detail::kPlannerBlockKeys;
  // Small problems split each token's index list so that one wave fills the chip (floor: a
  // second, nearly empty wave costs more than a few idle slots); large ones keep one split
  // per token and need no combine.
  int64_t splits = min_splits;
  // At least kMinSplitKeys positions per split: more, smaller splits cost more in the combine
  // than they gain in parallel loads.
  constexpr int kMinSplitKeys = 32;
  if (base_ctas > 0 && base_ctas * splits < split_k_slots)
    splits = std::max(min_splits, std::min(ceil_div(topk, kMinSplitKeys), split_k_slots / base_ctas));
  // One-tile splits only while the grid fits one CTA per SM; past it, two tiles a split. The
  // second CTA on an SM gains less than the combine of twice the partials costs (run 592, H100,
  // bf16 / fp8 us): 32 heads T = 2 topk 2048 15.3 -> 11.5 / 14.5 -> 10.8, 16 heads T = 4
  // 17.0 -> 13.9 / 15.5 -> 11.6, topk 512 T = 16 15.4 -> 13.8 / 13.8 -> 11.9, topk 1024 T = 8
  // 15.7 -> 13.7 / 14.2 -> 11.9; no case slower. On fast memory, lists of 2048 only while that
  // grid fills at most half the SMs (params.h kSplitKOneTileSmsPerCtaFastMemory).
  const int64_t one_tile_sms_per_cta =
      c.fast_memory && topk >= detail::kSplitKOneTileHalfSmsMinList ? detail::kSplitKOneTileSmsPerCtaFastMemory : 1;
  if (splits > min_splits && splits * kMinSplitKeys >= topk && base_ctas * splits * one_tile_sms_per_cta > dev.sm_count)
    splits = std::max(min_splits, ceil_div(topk, 2 * kMinSplitKeys));
  // A list of at most two tiles is not split at all: one more tile costs a CTA less than the
  // combine kernel. Topk 64, 2 splits -> 1 (run 593, H100, bf16 / fp8 us): 16 heads T = 1
  // 7.8 -> 6.9 / 7.7 -> 6.7, T = 66 11.1 -> 8.4 / 10.2 -> 7.7; 128 heads T = 8 9.6 -> 7.2 /
  // 9.4 -> 6.9.
  if (topk <= 2 * detail::kPlannerBlockKeys) splits = min_splits;
  // Lists of <= 512 past one CTA per SM: splits of >= 4 tiles, or as many as fit one CTA per SM
  // (params.h kSplitKFitOneCtaMaxList); longer lists too where their splits hold <= 2 tiles
  // (kSplitKLongListMaxTilesToRefit); lists of <= 4 tiles in one-tile splits or whole
  // (kSplitKOneTileOnlyMaxTiles).
  const int64_t list_tiles = ceil_div(topk, detail::kPlannerBlockKeys);
  const int64_t split_tiles = ceil_div(list_tiles, splits);
  const bool refit = topk <= detail::kSplitKFitOneCtaMaxList || split_tiles <= detail::kSplitKLongListMaxTilesToRefit;
  if (refit && splits > min_splits && base_ctas * splits > dev.sm_count && split_tiles < detail::kSplitKMinTilesPastOneCtaPerSm) {
    // Splits of >= 4 tiles on average: 10 tiles in 2 of 5, not 3 of 4 (topk 300, run 602: 3 of 4
    // past one CTA per SM lost 3-13 % to 2 of 5 within it).
    const int64_t long_splits = list_tiles / detail::kSplitKMinTilesPastOneCtaPerSm;
    const int64_t fewer = std::max({min_splits, int64_t{dev.sm_count} / base_ctas, long_splits});
    const int64_t fewer_ctas = base_ctas * whole_tile_splits(list_tiles, fewer);
    // Not where a quarter of the SMs would idle, unless no split is left (and no combine).
    if (fewer == min_splits || 4 * fewer_ctas >= 3 * int64_t{dev.sm_count}) splits = fewer;
  }
  if (list_tiles <= detail::kSplitKOneTileOnlyMaxTiles && ceil_div(list_tiles, splits) > 1) splits = min_splits;
  // On fast memory, 16- and 32-head bf16 lists of 2048: one CTA per SM with the early issue,
  // where its splits hold at most 8 tiles, or at 16 heads 16 where the caller says every list is
  // full, as are full lists of 1024 (params.h kSplitKOneCtaPerSmList, kSplitKOneCtaPerSmHeads,
  // kSplitKOneCtaPerSmMaxTilesFullLists, kSplitKOneCtaPerSmFullListsAlso); at 16 heads two to an
  // SM, 8-tile splits rather than 7 (kSplitKNotSevenTiles).
  const bool sixteen_heads = num_heads == kHeadGroup;
  const bool sixteen_heads_full_lists = sixteen_heads && c.full_lists();  // the caller's hint (min_valid_entries = topk)
  if (c.fast_memory && !fp8 && num_heads <= detail::kSplitKOneCtaPerSmHeads &&
      (topk == detail::kSplitKOneCtaPerSmList || (sixteen_heads_full_lists && topk == detail::kSplitKOneCtaPerSmFullListsAlso)) &&
      base_ctas * splits > dev.sm_count) {
    const int64_t fit = dev.sm_count / base_ctas;
    const int64_t max_tiles = sixteen_heads_full_lists ? detail::kSplitKOneCtaPerSmMaxTilesFullLists : detail::kSplitKOneCtaPerSmMaxTiles;
    if (fit > min_splits && ceil_div(list_tiles, fit) <= max_tiles) {
      const int64_t fit_splits = whole_tile_splits(list_tiles, fit);
      // Not where a quarter of the SMs would idle (lists of 1024 at T = 45-49: 2 splits, 90-98 CTAs).
      if (4 * base_ctas * fit_splits >= 3 * int64_t{dev.sm_count}) splits = fit_splits;
    }
    // Still two to an SM: no 7-tile splits in 16-head lists of 2048 (params.h kSplitKNotSevenTiles).
    if (sixteen_heads && topk == detail::kSplitKOneCtaPerSmList && base_ctas * splits > dev.sm_count &&
        ceil_div(list_tiles, splits) == detail::kSplitKNotSevenTiles - 1)
      splits = whole_tile_splits(list_tiles, list_tiles / detail::kSplitKNotSevenTiles);
  }
  // Whole tiles per split, and no empty trailing split.
  plan.chunk = splitk_chunk(topk, splits, plan.block_keys);
  if (choice.block_keys != 0) {
    if (choice.block_keys != 16 && choice.block_keys != 32 && choice.block_keys != 64)
      fail("block_keys", "must be 16, 32 or 64, got " + std::to_string(choice.block_keys));
    if (fp8 && choice.block_keys == 16) fail("block_keys", "must be 32 or 64 for an fp8_ds_mla cache, got 16");
    plan.block_keys = choice.block_keys;
  }
  if (choice.balanced == 1) return plan_balanced(plan, choice, dev, fp8, c.fast_memory);
  if (choice.splits != 0) {  // exact chunks, not whole tiles: a forced split may end mid-tile
    if (choice.splits < min_splits || choice.splits > SparseMlaPlan::kMaxSplits)
      fail("splits", "must be in [" + std::to_string(min_splits) + ", " + std::to_string(SparseMlaPlan::kMaxSplits) +
                         "] for topk " + std::to_string(topk) + ", got " + std::to_string(choice.splits));
    plan.chunk = static_cast<int>(ceil_div(topk, choice.splits));
  }
  // Just past whole waves of one split (at most half a wave more; params.h): the tokens of the
  // whole waves unsplit, the tokens past them split into as many CTAs as fit a wave (at most a
  // tile each, 64), so the last wave is short instead of a wave of whole lists. An fp8 cache
  // keeps the 64-row tiles of its unsplit lists of >= 1024. Measured against one split (run 463,
  // H100, random lists, µs): 16 heads T = 265 / 300 / 396 / 529 / 800 266.5 / 292.7 / 295.2 /
  // 410.2 / 561.5 -> 167.0 / 199.7 / 259.3 / 315.9 / 474.6 (T = 264 161.4), fp8 T = 265 / 529
  // 210.1 / 323.3 -> 132.3 / 249.5, topk 512 T = 265 87.6 -> 68.5, 32 heads topk 512 T = 133 /
  // 150 74.5 / 83.0 -> 54.6 / 62.7; mixed lengths gain or lose a little (16 heads runs of 1-2048
  // rows T = 300 / 529 180.6 / 279.2 -> 173.9 / 281.9, 32 heads topk 1000 T = 140 75.6 -> 78.2).
  // Just past half a wave, where one split per token leaves half the slots idle: half a wave's
  // tokens in 2 splits, the later ones in as many as fit a wave after them if that is >= 8
  // (run 465, µs): 16 heads T = 133 / 140 / 150 / 165 143.1 / 144.0 / 146.2 / 146.9 -> 115.0 /
  // 122.7 / 133.2 / 144.7, fp8 T = 133 / 165 121.5 / 121.5 -> 86.4 / 109.7, runs of 1-2048 rows
  // T = 150 121.5 -> 99.8; with 5 / 4 later splits T = 180 / 198 148.1 / 150.7 -> 156.0 / 169.2.
  // On fast memory with lists of 2048, 4 (params.h kLeadMinTailSplitsSplitKFastMemory: H200 16
  // heads T = 180 142.3 -> 126.7, run 513).
  // Not at 16 heads for full lists of at most 768 (SparseMlaProblem::min_valid_entries = topk;
  // params.h kSplitKHalfWaveLeadFullListsMaxList): one split is faster there.
  // Past whole waves by more than half a wave (up to 2/3), 3 splits in two rounds where that
  // pays (two_rounds_rule, params.h kLeadTwoRounds*: fp8 T = 397 244.4 -> 222.5, run 470).
  LeadPlan splitk_lead;
  const bool no_half_wave_lead = sixteen_heads_full_lists && topk <= detail::kSplitKHalfWaveLeadFullListsMaxList;
  const int64_t token_slots = split_k_slots / (num_heads / kHeadGroup);  // tokens in a wave of one split
  if (choice.splits == 0 && choice.block_keys == 0 && choice.fused_rows >= 0 && topk >= detail::kSplitKTailMinList &&
      topk <= SparseMlaPlan::kMaxChunk && token_slots > 0 && num_tokens > token_slots / 2) {
    const int tile = fp8 && topk >= detail::kFp8WideTileMinChunk ? 64 : detail::kPlannerBlockKeys;  // a lead CTA's (below)
    const int64_t tiles = ceil_div(topk, tile);
    const int64_t past_waves = num_tokens % token_slots, half = token_slots / 2;
    if (num_tokens > token_slots && past_waves > 0)
      splitk_lead = past_waves_lead(num_tokens - past_waves, past_waves, token_slots, tiles, two_rounds);
    else if (num_tokens <= token_slots && !no_half_wave_lead)
      splitk_lead = lead_plan(half, 2, num_tokens - half, token_slots, tiles, lead_min_tail_splits);
    if (splitk_lead.splits > 0) {
      plan.block_keys = tile;
      plan.chunk = splitk_chunk(topk, splitk_lead.splits, tile);
    }
  }
  // fp8 with splits of >= 1024 positions: 64-row tiles (still two CTAs per SM, where bf16's take
  // 176 KB), half as many rounds of the tile's dependent chain. At 16 heads T = 96 / 192 / 1024
  // -6 / -9 / -9 %; shorter splits lose the longer pipeline fill (T = 1 / 16 / 64 +9 / +5 / +5 %,
  // docs/perf.md runs 344-345).
  if (fp8 && choice.block_keys == 0 && plan.chunk >= detail::kFp8WideTileMinChunk) plan.block_keys = 64;
  plan.splits = static_cast<int>(ceil_div(topk, plan.chunk));  // no empty trailing split
  if (splitk_lead.splits > 0) {
    plan.lead_tokens = static_cast<int>(splitk_lead.lead_tokens);
    plan.lead_splits = static_cast<int>(splitk_lead.lead_splits);
  }
  plan.ctas = launch_ctas(detail::lead_split_ctas(num_tokens, plan.splits, plan.lead_tokens, plan.lead_splits) * (num_heads / kHeadGroup));
  // Fused rows: a token with at most one chunk's worth of valid indices (short contexts, the
  // -1 padding of an indexer with fewer candidates than topk) is finished by its first split
  // alone. That CTA does no more tile work than any split of the plan, and the token needs no
  // partials and no merge: T=1 with 2 valid rows 9.0 -> 5.6 us, T=16 with 100 each 19.8 -> 14.0,
  // full lists unchanged (docs/perf.md runs 83-84). Not under a hint that rules them out
  // (planned_fused_rows).
  plan.fused_rows = planned_fused_rows(choice, detail::fused_rows_fit(plan.splits, topk, plan.chunk), plan.chunk,
                                       c.min_valid_entries);
  if (detail::splitk_smem_bytes(plan.block_keys, detail::splitk_listed_positions(plan.fused_rows > 0, topk, plan.chunk), fp8) >
      dev.max_smem_per_block)
    fail("device", "not enough shared memory per block");
  // Row order (SparseMlaPlan::row_order): random lists at 16 heads T = 64 / 96 / 256 / 1024
  // 71.6 / 99.7 / 218.0 / 829.0 -> 70.4 / 92.9 / 159.8 / 608.9 us; T = 16 / 32 +1.5 us, lists
  // that share no rows (runs, T = 1024) +1 % (docs/perf.md runs 143-144). On fast memory later
  // or never (params.h split_k_row_order_min_pairs).
  plan.row_order = resolve_row_order(choice, true, true, num_tokens, topk, sharing,
                                     detail::split_k_row_order_min_pairs(c.fast_memory, num_heads, topk, fp8));
  // Split softmax (SparseMlaPlan::split_softmax): on fast memory, or where every CTA takes a split
  // of its token's list (none a whole list, as unsplit tokens and unsplit lead tokens do).
  const bool whole_lists = plan.splits == 1 || (plan.lead_tokens > 0 && plan.lead_splits == 1);
  plan.split_softmax = resolve_split_softmax(choice, plan.block_keys, whole_lists, fp8, c.fast_memory);
  // Early issue (SparseMlaPlan::early_issue, params.h split_k_early_issue): by the most tiles one
  // CTA holds (a split, or a lead token's) and, on fast memory, whether the grid fits one CTA per SM.
  const int cta_positions = std::min(topk, plan.lead_tokens > 0 ? std::max(plan.chunk, splitk_lead_chunk(plan)) : plan.chunk);
  plan.early_issue = !plan.row_order && detail::split_k_early_issue(fp8, num_heads, ceil_div(cta_positions, plan.block_keys),
                                                                      c.fast_memory && plan.ctas <= dev.sm_count);
  plan.launches = num_tokens > 0 ? (plan.splits > 1 ? 2 : 1) + (plan.lead_splits > 1 ? 1 : 0) : 0;  // + the lead tokens' combine
  plan.workspace_bytes = workspace_for(num_tokens, num_heads, plan.splits, plan.lead_tokens, plan.lead_splits);
  return plan;
}

bool is_default(const PlanChoice& choice) {
  return choice.block_keys == 0 && choice.splits == 0 && choice.kernel == PlanChoice::Kernel::planner && choice.fused_rows == 0 &&
         choice.row_order == 0 && choice.balanced == 0 && choice.split_softmax == 0;
}

// SparseMlaPlan::share_probe: the planner's shared rows for an unhinted 16-head call, whose
// worth depends on how many rows consecutive tokens share (the planner takes them from T = 2048,
// fp8 from 8192: the bet on prefill; an fp8 cache has its own line, kShareProbeLinePermilleFp8).
// On an H200 split-K won by 12-26 % on random lists, `sequences` and an 8192-row prefix with
// lists shorter than 2048, shared rows by 7-59 % on prefixes of 1-2x the list and lists of 2048
// over 8192 rows; ordered by the 4-token groups' union share they won wherever it was <= 65 %
// and lost from 77 % (docs/perf.md runs 685-687). On the H100 bf16 came
// out even at ~80 % on prefixes (run 555) and split-K won random lists by 3-9 % (run 400). Both
// halves run whole lists in one split (no combine, no partials): the kernels not chosen are
// grids whose CTAs leave at once, the union pass's three or split-K's one.
void add_share_probe(SparseMlaPlan& shared, const SparseMlaPlan& split_k, const PlannerContext& c) {
  const bool fits = c.sharing == IndexSharing::unknown && c.num_heads == 16 && c.num_tokens > 0 && shared.union_pass &&
                    shared.splits == 1 && shared.lead_tokens == 0 && split_k.splits == 1 && split_k.lead_tokens == 0 &&
                    split_k.fused_rows == 0 && !split_k.balanced && detail::share_probe_split_k_tiles_fit(split_k.block_keys, c.fp8);
  if (!fits) return;
  shared.share_probe.line_permille = c.fp8            ? detail::kShareProbeLinePermilleFp8
                                     : c.fast_memory ? detail::kShareProbeLinePermilleFastMemory
                                                     : detail::kShareProbeLinePermille;
  shared.share_probe.split_k_block_keys = split_k.block_keys;
  shared.share_probe.split_k_row_order = split_k.row_order;
  shared.share_probe.split_k_split_softmax = split_k.split_softmax;
  shared.launches += 2;  // the probe, then split-K
  shared.workspace_bytes = detail::share_probe_pairs_offset(shared.workspace_bytes) + detail::kShareProbePairsBytes;
}

}  // namespace

SparseMlaPlan plan_sparse_mla(int num_tokens, int num_heads, int topk, const DeviceInfo& dev, const PlanChoice& choice,
                              IndexSharing sharing, KvCacheFormat kv_format, int min_valid_entries) {
  validate_shape(num_tokens, num_heads, topk);
  validate_min_valid_entries(min_valid_entries, topk);
  check_balanced_choice(choice);
  validate_sharing(sharing);
  validate_format(kv_format);
  if (dev.cc_major != 9)
    fail("device", "compute capability " + std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor) +
                       " unsupported: the kernels are built for sm_90a (H100/H200)");
  if (dev.sm_count < 1) fail("device", "sm_count must be >= 1");
  SparseMlaPlan plan;
  plan.num_tokens = num_tokens;
  plan.num_heads = num_heads;
  plan.topk = topk;
  const bool fp8 = kv_format == KvCacheFormat::fp8_ds_mla;
  const int64_t eighths = bandwidth_eighths(dev);
  const bool fast_memory = eighths >= detail::kFastMemoryEighths;
  int64_t lead_min_tail_splits = detail::kLeadMinTailSplits;  // just past half a wave (params.h)
  int64_t split_k_lead_min_tail_splits =
      fast_memory && topk >= detail::kHalfWaveLeadMinList ? detail::kLeadMinTailSplitsSplitKFastMemory : lead_min_tail_splits;
#ifdef DSA_WHATIF
  if (const char* e = std::getenv("DSA_LEAD_MIN")) lead_min_tail_splits = split_k_lead_min_tail_splits = std::atoi(e);  // what-if builds only
#endif
  const PlannerContext c{num_tokens, num_heads, topk, dev, sharing, min_valid_entries, fp8, 2 * int64_t{dev.sm_count},
                         static_cast<int>(ceil_div(topk, detail::kSharedRowsTileEntries)), two_rounds_rule(num_heads, topk, fp8, fast_memory),
                         lead_min_tail_splits, split_k_lead_min_tail_splits, eighths, fast_memory};
  const SharedRowsPick pick = pick_shared_rows(c);
  const bool planner_picks_shared_rows = choice.kernel == PlanChoice::Kernel::planner && choice.block_keys == 0 &&
                                         choice.splits == 0 && choice.balanced != 1 && choice.split_softmax == 0 && pick.pays && topk <= SparseMlaPlan::kMaxChunk &&
                                         detail::shared_rows_smem_bytes() <= dev.max_smem_per_block;
  if (!planner_picks_shared_rows && choice.kernel != PlanChoice::Kernel::shared_rows) return plan_split_k(plan, choice, c);
  SparseMlaPlan shared = plan_shared_rows(plan, choice, c, planner_picks_shared_rows ? &pick : nullptr);
  if (planner_picks_shared_rows && is_default(choice)) {
    PlanChoice whole_lists;  // split-K's half: without lead tokens, which would need a combine
    whole_lists.fused_rows = -1;
    add_share_probe(shared, plan_split_k(plan, whole_lists, c), c);
  }
  // An unhinted fp8 call takes shared rows only through the probe: its split-K reads less, and
  // won by 6-20 % where neighbours share ~25 % of their rows (run 549).
  if (planner_picks_shared_rows && fp8 && num_heads == 16 && sharing == IndexSharing::unknown && shared.share_probe.line_permille == 0)
    return plan_split_k(plan, choice, c);
  return shared;
}

}  // namespace dsa
