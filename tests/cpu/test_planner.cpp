// Planner decisions on a described H100: invariants over a grid of shapes, and the choices
// that matter for speed at both ends.
#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "dsa/sparse_mla.h"

namespace dsa {
namespace {

const DeviceInfo kH100{132, 232448, 9, 0};
// kH100 reporting a memory bandwidth (DeviceInfo::memory_bandwidth_gbs; kH100's 0 plans as 3352).
DeviceInfo with_bandwidth(int gbs) {
  DeviceInfo d = kH100;
  d.memory_bandwidth_gbs = gbs;
  return d;
}
const DeviceInfo kH200 = with_bandwidth(4814);  // what the H200 reports (run 501): 11 eighths of the H100's

// Every field of two plans alike (the tests that say a hint or a device changes nothing).
bool same_plan(const SparseMlaPlan& a, const SparseMlaPlan& b);
// The same but split_softmax, which follows the device's memory bandwidth on its own (tested
// in SplitSoftmaxOnFastMemoryOnSplitListsAndForFp8): the tests that say the rest does not.
bool same_plan_but_softmax(SparseMlaPlan a, const SparseMlaPlan& b) {
  a.split_softmax = b.split_softmax;
  return same_plan(a, b);
}
bool same_plan(const SparseMlaPlan& a, const SparseMlaPlan& b) {
  return a.num_tokens == b.num_tokens && a.num_heads == b.num_heads && a.topk == b.topk && a.kernel == b.kernel &&
         a.block_keys == b.block_keys && a.splits == b.splits && a.chunk == b.chunk && a.ctas == b.ctas && a.launches == b.launches &&
         a.fused_rows == b.fused_rows && a.union_pass == b.union_pass && a.lead_tokens == b.lead_tokens && a.lead_splits == b.lead_splits &&
         a.row_order == b.row_order && a.balanced == b.balanced && a.split_softmax == b.split_softmax && a.early_issue == b.early_issue && a.schedule_bytes == b.schedule_bytes && a.workspace_bytes == b.workspace_bytes &&
         a.share_probe.line_permille == b.share_probe.line_permille && a.share_probe.split_k_block_keys == b.share_probe.split_k_block_keys &&
         a.share_probe.split_k_row_order == b.share_probe.split_k_row_order &&
         a.share_probe.split_k_split_softmax == b.share_probe.split_k_split_softmax;
}

TEST(Planner, InvariantsHoldOverAGridOfShapes) {
  for (int T : {0, 1, 2, 3, 8, 64, 100, 133, 200, 250, 350, 370, 397, 420, 1024, 4096, 100000})
    for (int H : {16, 32, 64, 128})
      for (int topk : {1, 31, 63, 64, 128, 600, 2048, 2049, 5000, 300000}) {
        SCOPED_TRACE(::testing::Message() << "T " << T << " H " << H << " topk " << topk);
        const SparseMlaPlan p = plan_sparse_mla(T, H, topk, kH100);
        EXPECT_TRUE(p.block_keys == 16 || p.block_keys == 32 || p.block_keys == 64);
        EXPECT_GE(p.splits, 1);
        EXPECT_GE(p.chunk, 1);
        EXPECT_LE(p.chunk, SparseMlaPlan::kMaxChunk);
        EXPECT_GE(int64_t(p.chunk) * p.splits, topk);         // every position covered
        EXPECT_LT(int64_t(p.chunk) * (p.splits - 1), topk);   // no empty split
        EXPECT_LE(p.splits, SparseMlaPlan::kMaxSplits);
        if (p.chunk < topk) EXPECT_EQ(p.chunk % p.block_keys, 0) << "whole tiles per split";
        // Split-K: a CTA per (token, 16 heads, split); shared rows: a CTA per 4 such head blocks
        // and split (at 32 heads without a union pass a CTA per token and split: one-token
        // groups), split only with one token per group: fewer groups than SMs in one wave, or
        // just past one wave (at most half a wave more) one wave of groups unsplit and the
        // tokens past it split, as many CTAs as fit the SMs (at most a tile each, 64).
        const bool shared_rows = p.kernel == SparseMlaKernel::shared_rows;
        const bool one_token = shared_rows && (H >= 64 || !p.union_pass);
        const int64_t head_blocks = int64_t(T) * (H / 16);
        const int groups_per_token = std::max(H / 64, 1);
        const int64_t groups = one_token ? int64_t(T) * groups_per_token : (head_blocks + 3) / 4;
        const int64_t lead_groups = int64_t(p.lead_tokens) * groups_per_token;
        EXPECT_EQ(int64_t(p.ctas), shared_rows ? lead_groups * p.lead_splits + (groups - lead_groups) * p.splits
                                               : (int64_t(p.lead_tokens) * p.lead_splits + int64_t(T - p.lead_tokens) * p.splits) * (H / 16));
        const int tiles = (topk + 31) / 32;
        // Lead tokens: just past whole waves (at most half a wave more) shared rows' whole waves
        // of one-token groups (64 heads: 1-6), split-K's whole waves of one split (264 CTAs,
        // lists of 512-2048), unsplit; just past half a wave (shared rows at 128 heads only) half
        // a wave of them in 2 splits; the tokens past them in as many splits as fit a wave (at
        // least 2, or 8 past half a wave), none left empty by a full list. Past whole waves,
        // where fewer than 2 fit, 3 in two rounds of a wave where the rule allows: 128 heads; 64
        // heads, and 16 / 32 heads with lists of 2048, for a tail of at most 11/20 of a wave
        // (bf16; 32 heads' one-token groups past 2 whole waves up to 2/3).
        const auto splits_of = [](int64_t tiles, int64_t fit) { return (tiles + (tiles + fit - 1) / fit - 1) / ((tiles + fit - 1) / fit); };
        // The later tokens' splits (0: no lead plan).
        const auto later_splits = [&](int64_t later, int64_t slots, int64_t t, int64_t min_fit, int64_t rounds = 1) -> int64_t {
          const int64_t fit = std::min<int64_t>({rounds * slots / later, t, 64});
          return fit >= min_fit && splits_of(t, fit) > rounds ? splits_of(t, fit) : 0;
        };
        // 32 heads past 2 whole waves (h32_past_two): bf16 tails up to 2/3 of a wave too.
        const auto past_waves_splits = [&](int64_t later, int64_t slots, int64_t t, bool h32_past_two = false) -> int64_t {
          const int64_t one_round = later_splits(later, slots, t, 2);
          const bool two_rounds = H == 128 || ((H == 64 || topk >= 2048) && (later * 20 <= slots * 11 || h32_past_two));
          return one_round > 0 || !two_rounds ? one_round : later_splits(later, slots, t, 2, 2);
        };
        int64_t want_lead = 0, want_lead_splits = 1, want_splits = 0;
        const auto expect_lead = [&](int64_t lead, int64_t lead_splits, int64_t later, int64_t slots, int64_t t, int64_t min_fit) {
          if (const int64_t s = later_splits(later, slots, t, min_fit)) want_lead = lead, want_lead_splits = lead_splits, want_splits = s;
        };
        const auto expect_past_waves = [&](int64_t lead, int64_t later, int64_t slots, int64_t t, bool h32_past_two = false) {
          if (const int64_t s = past_waves_splits(later, slots, t, h32_past_two)) want_lead = lead, want_lead_splits = 1, want_splits = s;
        };
        const int64_t token_slots = 264 / (H / 16);
        const int64_t wave = 132 / groups_per_token * groups_per_token, whole = groups / wave * wave;  // shared rows' groups
        if (one_token && groups > wave) {
          if (whole != groups && (whole / wave <= 6 || H != 64)) expect_past_waves(whole / groups_per_token, groups - whole, 132, tiles, H == 32 && T > 264);
        }
        else if (one_token && H == 128 && groups > 66 / groups_per_token * groups_per_token)
          expect_lead(66 / groups_per_token, 2, groups - 66 / groups_per_token * groups_per_token, 132, tiles, 8);
        else if (!shared_rows && topk >= 512 && topk <= 2048 && T > token_slots && T % token_slots > 0)
          expect_past_waves(T - T % token_slots, T % token_slots, token_slots, tiles);
        else if (!shared_rows && topk >= 512 && topk <= 2048 && T > token_slots / 2 && T <= token_slots)
          expect_lead(token_slots / 2, 2, T - token_slots / 2, token_slots, tiles, 8);
        EXPECT_EQ(p.lead_tokens, want_lead);
        EXPECT_EQ(p.lead_splits, want_lead_splits);
        if (want_lead > 0) EXPECT_EQ(p.splits, want_splits);
        const bool just_past_wave = want_lead > 0 && want_lead_splits == 1;
        if (shared_rows) {
          EXPECT_LE(topk, SparseMlaPlan::kMaxChunk);
          if (p.splits > 1 && want_lead == 0) EXPECT_TRUE(one_token && groups * p.splits <= 132);
          if (p.chunk < topk) EXPECT_EQ(p.chunk % 32, 0) << "whole union tiles per split";
          // One wave of one-token groups, just past it, or at 32 heads up to 1.7 waves of them
          // unsplit: CTAs compact their lists.
          const bool past_wave_32 = H == 32 && one_token && groups > 132 && groups * 10 <= 17 * 132;
          // (32 heads from 1.7 waves: below.)
          const bool past_two_waves_32 = H == 32 && one_token && T > 224;
          EXPECT_EQ(p.union_pass, !(one_token && (p.ctas <= 132 || just_past_wave || past_wave_32 || past_two_waves_32)));
          if (H == 32 && !p.union_pass) EXPECT_TRUE(T >= 16 && topk >= 1024);
        }
        // 32 heads from 1.7 waves (lists of 1024-2048): one-token groups exactly where their
        // waves (whole + rounds / splits of the tail) are fewer than 25/16 x the 2-token groups'
        // + 5/16 (bf16). Without lead-token splits the tail is a wave of its own.
        if (H == 32 && topk >= 1024 && topk <= 2048 && T > 224) {
          const int64_t s = T % 132 > 0 ? std::max<int64_t>(past_waves_splits(T % 132, 132, tiles, T > 264), 1) : 1;
          const int64_t rounds = (T % 132 * s + 131) / 132, two_token_ctas = (T + 1) / 2;
          // A last 2-token wave of one CTA of one token counts half.
          const int64_t half_waves = 2 * ((two_token_ctas + 131) / 132) - (T % 2 == 1 && two_token_ctas % 132 == 1);
          EXPECT_EQ(shared_rows && !p.union_pass, 32 * (T / 132 * s + rounds) < (25 * half_waves + 10) * s);
        }
        // Split-K: a partial per split (a bf16 row and an fp32 lse); shared rows: with a union pass
        // a union record per group (48 KB at topk 2048), then two ints per group (the unions'
        // sizes, the order), each array rounded up to 16 bytes; then the partials of its splits.
        const size_t union_bytes = (16 + (4 * size_t(topk) + 32) * 4 + (4 * size_t(topk) + 8) * 2 + 127) / 128 * 128;
        const size_t lead_slots = p.lead_splits > 1 ? size_t(p.lead_tokens) * p.lead_splits : 0;
        const size_t partials = p.splits > 1 ? (lead_slots + size_t(T - p.lead_tokens) * p.splits) * H * (512 * 2 + 4) : 0;
        const size_t unions = shared_rows && p.union_pass ? groups * union_bytes + 2 * ((groups * 4 + 15) / 16 * 16) : 0;
        // The share probe (SparseMlaPlan::share_probe) on every unhinted 16-head shared-rows plan:
        // its pairs after the rest from a 16-byte boundary, two launches more (the probe, split-K);
        // split-K's half: 32-row tiles, row order from 2^17 pairs, the softmax repeated (the H100's
        // whole lists).
        const bool probe = shared_rows && H == 16;
        EXPECT_EQ(p.share_probe.line_permille, probe ? 800 : 0);
        if (probe) {
          EXPECT_TRUE(p.union_pass && p.splits == 1 && p.lead_tokens == 0);
          EXPECT_EQ(p.share_probe.split_k_block_keys, 32);
          EXPECT_EQ(p.share_probe.split_k_row_order, int64_t(T) * topk >= (int64_t(1) << 17));
          EXPECT_FALSE(p.share_probe.split_k_split_softmax);
        }
        EXPECT_EQ(p.workspace_bytes, probe ? (unions + partials + 15) / 16 * 16 + 16 * 8 : unions + partials);
        const int launches = (shared_rows ? (p.union_pass ? 1 : 0) + (p.union_pass && p.splits == 1 ? 1 : 0) + 1 + (p.splits > 1 ? 1 : 0)
                                          : (p.splits > 1 ? 2 : 1)) +
                             (p.lead_splits > 1 ? 1 : 0) + (probe ? 2 : 0);  // the lead tokens' own combine; the probe's two
        EXPECT_EQ(p.launches, T == 0 ? 0 : launches);
        // Fused rows exactly where the kernel can count a whole list and find split starts
        // (shared rows: where a group is one token's list).
        const bool fusable = shared_rows ? p.splits > 1 && one_token
                                         : p.splits > 1 && topk <= SparseMlaPlan::kMaxChunk && p.chunk % 32 == 0;
        EXPECT_EQ(p.fused_rows, fusable ? p.chunk : 0);
        // Row order where the CTAs read lists in position order (split-K, one-token unions; at
        // 128 heads shared rows gain nothing by it), from 2^17 (token, position) pairs with no hint.
        const bool orderable = !shared_rows || (H == 64 && p.union_pass);
        EXPECT_EQ(p.row_order, orderable && int64_t(T) * topk >= (int64_t(1) << 17));
        // A split softmax on the H100 (bf16) where no CTA takes a whole list.
        const bool whole_lists = p.splits == 1 || (p.lead_tokens > 0 && p.lead_splits == 1);
        EXPECT_EQ(p.split_softmax, !shared_rows && p.block_keys >= 32 && !whole_lists);
      }
}

// SparseMlaPlan::split_softmax: bf16 split-K on fast memory or where every token's list is split;
// fp8 split-K always; never shared rows; forced on or off within its limits.
TEST(Planner, SplitSoftmaxOnFastMemoryOnSplitListsAndForFp8) {
  for (int T : {1, 8, 64, 128}) {  // 64 / 32 / 4 / 2 splits of each list
    EXPECT_TRUE(plan_sparse_mla(T, 16, 2048, kH100).split_softmax) << T;
    EXPECT_TRUE(plan_sparse_mla(T, 16, 2048, kH200).split_softmax) << T;
  }
  for (int T : {200, 256, 1024}) {  // one split: long CTAs, where the H100's L2 binds (+4 % at T = 1024)
    EXPECT_FALSE(plan_sparse_mla(T, 16, 2048, kH100).split_softmax) << T;
    EXPECT_TRUE(plan_sparse_mla(T, 16, 2048, kH200).split_softmax) << T;
  }
  const SparseMlaPlan lead = plan_sparse_mla(265, 16, 2048, kH100);  // 264 whole lists, one token split
  ASSERT_EQ(lead.lead_tokens, 264);
  ASSERT_EQ(lead.lead_splits, 1);
  EXPECT_FALSE(lead.split_softmax);
  const SparseMlaPlan half = plan_sparse_mla(133, 16, 2048, kH100);  // half a wave in 2 splits, the rest in more
  ASSERT_EQ(half.lead_splits, 2);
  EXPECT_TRUE(half.split_softmax);
  for (int T : {1, 64, 1024})
    EXPECT_TRUE(plan_sparse_mla(T, 16, 2048, kH100, {}, IndexSharing::none, KvCacheFormat::fp8_ds_mla).split_softmax) << T;
  const SparseMlaPlan rows = plan_sparse_mla(4096, 16, 2048, kH200, {}, IndexSharing::consecutive);
  ASSERT_EQ(rows.kernel, SparseMlaKernel::shared_rows);
  EXPECT_FALSE(rows.split_softmax);
  PlanChoice balanced;
  balanced.balanced = 1;
  EXPECT_TRUE(plan_sparse_mla(64, 16, 2048, kH100, balanced).split_softmax);

  PlanChoice on, off;
  on.split_softmax = 1;
  off.split_softmax = -1;
  EXPECT_TRUE(plan_sparse_mla(1024, 16, 2048, kH100, on).split_softmax);
  EXPECT_FALSE(plan_sparse_mla(8, 16, 2048, kH100, off).split_softmax);
  EXPECT_FALSE(plan_sparse_mla(1024, 16, 2048, kH200, off).split_softmax);
  const SparseMlaPlan forced = plan_sparse_mla(64, 64, 2048, kH100, on);  // a split-K knob: split-K, not shared rows
  EXPECT_EQ(forced.kernel, SparseMlaKernel::split_k);
  EXPECT_TRUE(forced.split_softmax);
  on.block_keys = 64;
  EXPECT_TRUE(plan_sparse_mla(4, 16, 2048, kH100, on).split_softmax);
  on.block_keys = 16;  // 2 n-tiles of keys for 4 warps
  EXPECT_THROW(plan_sparse_mla(4, 16, 2048, kH100, on), Error);
  PlanChoice keys16;
  keys16.block_keys = 16;
  EXPECT_FALSE(plan_sparse_mla(8, 16, 2048, kH100, keys16).split_softmax);
  EXPECT_FALSE(plan_sparse_mla(8, 16, 2048, kH200, keys16).split_softmax);
  EXPECT_THROW(plan_sparse_mla(8, 16, 2048, kH100, off, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla), Error);
  off.kernel = PlanChoice::Kernel::shared_rows;
  EXPECT_THROW(plan_sparse_mla(4096, 16, 2048, kH100, off), Error);
  PlanChoice bad;
  bad.split_softmax = 2;
  EXPECT_THROW(plan_sparse_mla(4, 16, 2048, kH100, bad), Error);
  bad.split_softmax = -2;
  EXPECT_THROW(plan_sparse_mla(4, 16, 2048, kH100, bad), Error);
}

TEST(Planner, RowOrderFromEnoughPairsWithoutAHintAndWhenForced) {
  EXPECT_FALSE(plan_sparse_mla(32, 16, 2048, kH100).row_order);  // 2^16 pairs: the sort's ~1.5 us is not repaid
  EXPECT_TRUE(plan_sparse_mla(64, 16, 2048, kH100).row_order);
  EXPECT_TRUE(plan_sparse_mla(1024, 16, 2048, kH100).row_order);
  EXPECT_TRUE(plan_sparse_mla(512, 16, 256, kH100).row_order);
  // On fast memory the sort repays later (params.h split_k_row_order_min_pairs): at 16 heads bf16
  // lists of 2048 from 1.25 x 2^17 pairs, of 1024 from 1.5 x 2^17, fp8 from 2^18 (lists of 1024
  // from 1.75 x 2^17); lists shorter than 1024 and 32-128 heads never.
  EXPECT_FALSE(plan_sparse_mla(64, 16, 2048, kH200).row_order);
  EXPECT_FALSE(plan_sparse_mla(79, 16, 2048, kH200).row_order);
  EXPECT_TRUE(plan_sparse_mla(80, 16, 2048, kH200).row_order);
  EXPECT_FALSE(plan_sparse_mla(127, 16, 2048, kH200, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).row_order);
  EXPECT_TRUE(plan_sparse_mla(128, 16, 2048, kH200, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).row_order);
  EXPECT_FALSE(plan_sparse_mla(191, 16, 1024, kH200).row_order);
  EXPECT_TRUE(plan_sparse_mla(192, 16, 1024, kH200).row_order);
  EXPECT_FALSE(plan_sparse_mla(223, 16, 1024, kH200, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).row_order);
  EXPECT_TRUE(plan_sparse_mla(224, 16, 1024, kH200, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).row_order);
  EXPECT_TRUE(plan_sparse_mla(512, 16, 512, kH100).row_order);
  EXPECT_FALSE(plan_sparse_mla(512, 16, 512, kH200).row_order);  // lists shorter than 1024: never
  EXPECT_FALSE(plan_sparse_mla(1400, 16, 512, kH200).row_order);
  EXPECT_TRUE(plan_sparse_mla(1024, 16, 256, kH100).row_order);
  EXPECT_FALSE(plan_sparse_mla(1024, 16, 256, kH200).row_order);
  EXPECT_TRUE(plan_sparse_mla(1100, 32, 512, kH100).row_order);
  EXPECT_FALSE(plan_sparse_mla(1100, 32, 512, kH200).row_order);
  EXPECT_TRUE(plan_sparse_mla(64, 32, 2049, kH100).row_order);
  EXPECT_FALSE(plan_sparse_mla(300, 32, 2049, kH200).row_order);  // 32-128 heads: never
  EXPECT_TRUE(plan_sparse_mla(128, 64, 2049, kH100).row_order);
  EXPECT_FALSE(plan_sparse_mla(128, 64, 2049, kH200).row_order);
  EXPECT_TRUE(plan_sparse_mla(1024, 16, 2048, kH200).row_order);
  EXPECT_FALSE(plan_sparse_mla(1024, 16, 2048, kH100, {}, IndexSharing::none).row_order);         // nothing to share
  EXPECT_FALSE(plan_sparse_mla(1024, 16, 2048, kH100, {}, IndexSharing::consecutive).row_order);  // shared rows' unions
  EXPECT_FALSE(plan_sparse_mla(64, 16, 2048, kH100, {}, IndexSharing::consecutive).row_order);    // split-K, rows in L2
  // Shared rows: at 64 and 128 heads with a union pass (each token's list sorted there), never
  // at 16 or 32 heads (unions of several tokens are in row order) or without a union pass.
  EXPECT_TRUE(plan_sparse_mla(1024, 64, 2048, kH100).row_order);
  EXPECT_FALSE(plan_sparse_mla(1024, 128, 2048, kH100).row_order);  // MMA-bound: nothing to gain
  EXPECT_FALSE(plan_sparse_mla(64, 64, 2048, kH100).row_order);   // one wave: CTAs compact their lists
  EXPECT_FALSE(plan_sparse_mla(1024, 32, 2048, kH100).row_order);
  PlanChoice on, off;
  on.row_order = 1;
  off.row_order = -1;
  EXPECT_TRUE(plan_sparse_mla(1, 16, 2048, kH100, on).row_order);
  EXPECT_TRUE(plan_sparse_mla(8, 16, 2048, kH100, on, IndexSharing::none).row_order);
  EXPECT_FALSE(plan_sparse_mla(1024, 16, 2048, kH100, off).row_order);
  EXPECT_FALSE(plan_sparse_mla(1024, 64, 2048, kH100, off).row_order);
  EXPECT_THROW(plan_sparse_mla(64, 64, 2048, kH100, on), Error);    // no union pass
  EXPECT_THROW(plan_sparse_mla(1024, 32, 2048, kH100, on), Error);  // unions of 2 tokens
  on.kernel = PlanChoice::Kernel::shared_rows;
  EXPECT_THROW(plan_sparse_mla(4096, 16, 2048, kH100, on), Error);
  EXPECT_TRUE(plan_sparse_mla(4096, 128, 2048, kH100, on).row_order);
  PlanChoice bad;
  bad.row_order = 2;
  EXPECT_THROW(plan_sparse_mla(4, 16, 2048, kH100, bad), Error);
  bad.row_order = -2;
  EXPECT_THROW(plan_sparse_mla(4, 16, 2048, kH100, bad), Error);
}

TEST(Planner, FusedRowsCoverOneChunkAndCanBeForcedOrTurnedOff) {
  const SparseMlaPlan t1 = plan_sparse_mla(1, 16, 2048, kH100);
  EXPECT_EQ(t1.fused_rows, t1.chunk);  // 64 splits of 32: a token with <= 32 rows needs no merge
  EXPECT_EQ(t1.chunk, 32);
  EXPECT_EQ(plan_sparse_mla(64, 16, 2048, kH100).fused_rows, 512);
  EXPECT_EQ(plan_sparse_mla(1024, 16, 2048, kH100).fused_rows, 0);   // one split: nothing to merge
  EXPECT_EQ(plan_sparse_mla(1, 16, 2049, kH100).fused_rows, 0);      // list longer than one CTA reads
  EXPECT_EQ(plan_sparse_mla(4, 32, 2048, kH100, PlanChoice{64, 7}).fused_rows, 0);  // chunk 293
  PlanChoice c;
  c.fused_rows = -1;
  EXPECT_EQ(plan_sparse_mla(1, 16, 2048, kH100, c).fused_rows, 0);
  c.fused_rows = 100;
  EXPECT_EQ(plan_sparse_mla(1, 16, 2048, kH100, c).fused_rows, 100);
  EXPECT_THROW(plan_sparse_mla(1024, 16, 2048, kH100, c), Error);  // one split
  EXPECT_THROW(plan_sparse_mla(1, 16, 2049, kH100, c), Error);
  c.fused_rows = -2;
  EXPECT_THROW(plan_sparse_mla(1, 16, 2048, kH100, c), Error);
  c.fused_rows = SparseMlaPlan::kMaxChunk + 1;
  EXPECT_THROW(plan_sparse_mla(1, 16, 2048, kH100, c), Error);
}

TEST(Planner, SmallBatchesSplitEachTokenOverTheChip) {
  const SparseMlaPlan p = plan_sparse_mla(1, 16, 2048, kH100);
  EXPECT_GE(p.ctas, 64);  // one token must not run on a handful of SMs
  EXPECT_GT(p.splits, 1);
}

// Split-K's one-tile splits stop where the grid passes one CTA per SM (two tiles a split from
// there), and a list of at most two tiles is never split (planner.cpp, runs 592-593).
TEST(Planner, ShortSplitsOnlyWhereTheyPay) {
  EXPECT_EQ(plan_sparse_mla(1, 16, 2048, kH100).splits, 64);  // 64 CTAs
  EXPECT_EQ(plan_sparse_mla(2, 16, 2048, kH100).splits, 64);  // 128 CTAs: one per SM
  EXPECT_EQ(plan_sparse_mla(3, 16, 2048, kH100).splits, 32);  // 192 one-tile CTAs would not fit
  EXPECT_EQ(plan_sparse_mla(2, 32, 2048, kH100).splits, 32);
  EXPECT_EQ(plan_sparse_mla(1, 64, 2048, kH100).splits, 32);
  EXPECT_EQ(plan_sparse_mla(4, 16, 1024, kH100).splits, 32);  // 128 one-tile CTAs
  EXPECT_EQ(plan_sparse_mla(8, 16, 1024, kH100).splits, 16);
  EXPECT_EQ(plan_sparse_mla(12, 16, 512, kH100).splits, 8);
  EXPECT_EQ(plan_sparse_mla(8, 16, 512, kH100).splits, 16);  // 128 CTAs
  for (auto [T, H] : {std::pair{1, 16}, std::pair{66, 16}, std::pair{67, 16}, std::pair{132, 16}, std::pair{1, 128},
                       std::pair{16, 128}}) {  // split-K (128 heads from T = 66: shared rows, their own splits)
    const SparseMlaPlan p = plan_sparse_mla(T, H, 64, kH100);
    ASSERT_EQ(p.kernel, SparseMlaKernel::split_k) << T << " " << H;
    EXPECT_EQ(p.splits, 1) << T << " " << H;
    EXPECT_EQ(p.workspace_bytes, 0u) << T << " " << H;
  }
  EXPECT_EQ(plan_sparse_mla(1, 16, 65, kH100).splits, 3);  // three tiles split
  // Lists of <= 4 tiles: one-tile splits while they fit one CTA per SM, else whole.
  EXPECT_EQ(plan_sparse_mla(1, 16, 128, kH100).splits, 4);
  EXPECT_EQ(plan_sparse_mla(33, 16, 128, kH100).splits, 4);  // 132 CTAs
  for (int T : {34, 66, 80, 132}) EXPECT_EQ(plan_sparse_mla(T, 16, 128, kH100).splits, 1) << T;
  EXPECT_EQ(plan_sparse_mla(44, 16, 96, kH100).splits, 3);
  EXPECT_EQ(plan_sparse_mla(45, 16, 96, kH100).splits, 1);
  EXPECT_EQ(plan_sparse_mla(17, 32, 128, kH100).splits, 1);
  // Longer lists up to 512 past one CTA per SM: splits of >= 4 tiles or as many as fit one CTA
  // per SM, unless that idles a quarter of the SMs.
  EXPECT_EQ(plan_sparse_mla(33, 16, 512, kH100).splits, 4);  // not 8 of 2 tiles: 132 CTAs
  EXPECT_EQ(plan_sparse_mla(40, 16, 512, kH100).splits, 4);  // 160 CTAs of 4 tiles
  EXPECT_EQ(plan_sparse_mla(17, 16, 512, kH100).splits, 6);  // 102 CTAs of 3 tiles
  EXPECT_EQ(plan_sparse_mla(24, 16, 512, kH100).splits, 8);  // 4 splits would be 96 CTAs
  EXPECT_EQ(plan_sparse_mla(50, 16, 256, kH100).splits, 2);
  EXPECT_EQ(plan_sparse_mla(55, 16, 300, kH100).splits, 2);  // 2 of 5 tiles, not 3 of 4
  EXPECT_EQ(plan_sparse_mla(66, 16, 192, kH100).splits, 2);
  EXPECT_EQ(plan_sparse_mla(67, 16, 192, kH100).splits, 1);  // whole lists: no combine
  // Longer lists only where their splits hold <= 2 tiles.
  EXPECT_EQ(plan_sparse_mla(5, 16, 2048, kH100).splits, 22);  // 110 CTAs of 3 tiles, not 160 of 2
  EXPECT_EQ(plan_sparse_mla(8, 16, 2048, kH100).splits, 16);  // 128 CTAs of 4 tiles
  EXPECT_EQ(plan_sparse_mla(1, 128, 2048, kH100).splits, 16);
  EXPECT_EQ(plan_sparse_mla(16, 16, 1024, kH100).splits, 8);
  EXPECT_EQ(plan_sparse_mla(12, 16, 2048, kH100).splits, 22);  // 3-tile splits stay: in 16 mixed lengths lost 3-5 %
  EXPECT_EQ(plan_sparse_mla(20, 16, 1024, kH100).splits, 11);
  PlanChoice forced;
  forced.splits = 2;
  EXPECT_EQ(plan_sparse_mla(1, 16, 64, kH100, forced).splits, 2);  // a caller may still split
}

TEST(Planner, MidBatchesFillOneWaveWithoutASecondPartialOne) {
  const SparseMlaPlan p = plan_sparse_mla(64, 16, 2048, kH100);
  EXPECT_LE(p.ctas, 2 * 132);
  EXPECT_GE(p.ctas, 132);
}

TEST(Planner, LargeBatchesUseOneSplitAndNoWorkspace) {
  const SparseMlaPlan p = plan_sparse_mla(1024, 16, 2048, kH100);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.workspace_bytes, 0u);
}

TEST(Planner, SharedRowsFor16HeadsAtPrefillSizesInWholeWaves) {
  // 512, 1024, 2048 CTAs of 4 tokens on 132 SMs: >= 90 % of whole waves.
  for (int T : {2048, 4096, 8192}) EXPECT_EQ(plan_sparse_mla(T, 16, 2048, kH100).kernel, SparseMlaKernel::shared_rows) << T;
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2048, kH100).ctas, 1024);
  // One union record per group of 4 tokens: 16-byte header, 8224 words, 8200 entries, 128-byte aligned.
  // Records, then a size and an order slot per group, then (unhinted: the share probe) 16 pairs.
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2048, kH100).workspace_bytes, size_t(1024) * 49408 + 2 * 1024 * 4 + 16 * 8);
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2048, kH100, {}, IndexSharing::consecutive).workspace_bytes, size_t(1024) * 49408 + 2 * 1024 * 4);
  // Decode sizes (T < 2048, even where the waves would be full: 512, 1024), 2200 tokens (550
  // CTAs = 4.2 waves, 83 %), topk > 2048: split-K.
  for (int T : {1, 64, 256, 512, 1024, 2047, 2200}) EXPECT_EQ(plan_sparse_mla(T, 16, 2048, kH100).kernel, SparseMlaKernel::split_k) << T;
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2049, kH100).kernel, SparseMlaKernel::split_k);
  EXPECT_EQ(plan_sparse_mla(0, 16, 2048, kH100).kernel, SparseMlaKernel::split_k);
  // A forced tile size or split count keeps split-K.
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2048, kH100, PlanChoice{32, 0}).kernel, SparseMlaKernel::split_k);
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2048, kH100, PlanChoice{0, 1}).kernel, SparseMlaKernel::split_k);
  // A device with too little shared memory per block keeps split-K.
  DeviceInfo small_smem = kH100;
  small_smem.max_smem_per_block = 166 * 1024;
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2048, small_smem).kernel, SparseMlaKernel::split_k);
}

// Unhinted 16-head calls that the planner gives shared rows sample the share on the device
// (SparseMlaPlan::share_probe): the line by the device and format (bf16: H200 710 permille, H100
// 800; fp8 520 on both, from T = 8192), and split-K's half as the planner would plan one split
// of whole lists there. A hint, a forced kernel or any forced field, or other head counts plan one kernel; an
// unhinted fp8 call that cannot sample keeps split-K.
TEST(Planner, UnhintedSixteenHeadSharedRowsSampleTheShare) {
  for (int T : {2048, 4096, 8192, 16384})
    for (int topk : {512, 1024, 2048}) {
      SCOPED_TRACE(::testing::Message() << "T " << T << " topk " << topk);
      const SparseMlaPlan h100 = plan_sparse_mla(T, 16, topk, kH100), h200 = plan_sparse_mla(T, 16, topk, kH200);
      ASSERT_EQ(h100.kernel, SparseMlaKernel::shared_rows);
      ASSERT_EQ(h200.kernel, SparseMlaKernel::shared_rows);
      EXPECT_EQ(h100.share_probe.line_permille, 800);
      EXPECT_EQ(h200.share_probe.line_permille, 710);
      PlanChoice split_k;
      split_k.kernel = PlanChoice::Kernel::split_k;
      for (const auto& [plan, dev] : {std::pair{h100, kH100}, std::pair{h200, kH200}}) {
        const SparseMlaPlan sk = plan_sparse_mla(T, 16, topk, dev, split_k);
        EXPECT_EQ(plan.share_probe.split_k_block_keys, sk.block_keys);
        EXPECT_EQ(plan.share_probe.split_k_row_order, sk.row_order);
        EXPECT_EQ(plan.share_probe.split_k_split_softmax, sk.split_softmax);
      }
      // On the H200 split-K sorts only lists of >= 1024 and splits its softmax; the H100 sorts
      // all of these (>= 2^17 pairs) and repeats it over whole lists.
      EXPECT_EQ(h200.share_probe.split_k_row_order, topk >= 1024);
      EXPECT_TRUE(h200.share_probe.split_k_split_softmax);
      EXPECT_TRUE(h100.share_probe.split_k_row_order);
      EXPECT_FALSE(h100.share_probe.split_k_split_softmax);
      EXPECT_EQ(h100.launches, 5);  // the probe, the union and order passes, the main kernel, split-K
      for (const DeviceInfo& dev : {kH100, kH200}) {
        EXPECT_EQ(plan_sparse_mla(T, 16, topk, dev, {}, IndexSharing::consecutive).share_probe.line_permille, 0);
        EXPECT_EQ(plan_sparse_mla(T, 16, topk, dev, {}, IndexSharing::none).kernel, SparseMlaKernel::split_k);
        PlanChoice forced;
        forced.kernel = PlanChoice::Kernel::shared_rows;
        EXPECT_EQ(plan_sparse_mla(T, 16, topk, dev, forced).share_probe.line_permille, 0);
        PlanChoice no_order;
        no_order.row_order = -1;
        const SparseMlaPlan p = plan_sparse_mla(T, 16, topk, dev, no_order);
        EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows);
        EXPECT_EQ(p.share_probe.line_permille, 0);
        for (int H : {32, 64, 128}) EXPECT_EQ(plan_sparse_mla(T, H, topk, dev).share_probe.line_permille, 0) << H;
        // fp8: from T = 8192 the same plans with their own line, split-K's half in fp8's tiles
        // (32 rows for lists of 512, 64 from 1024); below it, and with forced fields, split-K,
        // as the hints' plans are.
        const auto fp8 = [&](const PlanChoice& choice) {
          return plan_sparse_mla(T, 16, topk, dev, choice, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla);
        };
        const SparseMlaPlan f = fp8({});
        if (T < 8192) {
          EXPECT_EQ(f.kernel, SparseMlaKernel::split_k);
          EXPECT_EQ(f.share_probe.line_permille, 0);
          continue;
        }
        EXPECT_EQ(f.kernel, SparseMlaKernel::shared_rows);
        EXPECT_EQ(f.share_probe.line_permille, 520);
        EXPECT_EQ(f.launches, 5);
        const SparseMlaPlan fsk = fp8(split_k);
        EXPECT_EQ(f.share_probe.split_k_block_keys, fsk.block_keys);
        EXPECT_EQ(f.share_probe.split_k_block_keys, topk >= 1024 ? 64 : 32);
        EXPECT_EQ(f.share_probe.split_k_row_order, fsk.row_order);
        EXPECT_TRUE(f.share_probe.split_k_split_softmax);
        EXPECT_EQ(fp8(no_order).kernel, SparseMlaKernel::split_k);
        EXPECT_EQ(fp8(no_order).share_probe.line_permille, 0);
      }
    }
  // Split-K's plans, and shorter lists, sample nothing.
  EXPECT_EQ(plan_sparse_mla(1024, 16, 2048, kH200).share_probe.line_permille, 0);
  EXPECT_EQ(plan_sparse_mla(4096, 16, 256, kH200).share_probe.line_permille, 0);
}

// The caller's hint moves the threshold at 16 heads: "consecutive" (prefill, MTP decode) takes
// shared rows from T = 512 in whole waves of 4-token groups, and for bf16 lists of >= 2048 from
// T = 117 with the groups split where their waves are not full (consecutive_group_splits; not
// on fast memory); "none" (decode) never.
TEST(Planner, IndexSharingHintMovesTheSharedRowsThreshold) {
  const auto plan = [](int T, IndexSharing sharing, int topk = 2048, KvCacheFormat kv = KvCacheFormat::bf16) {
    return plan_sparse_mla(T, 16, topk, kH100, {}, sharing, kv);
  };
  const auto kernel = [&](int T, int H, IndexSharing sharing) { return plan_sparse_mla(T, H, 2048, kH100, {}, sharing).kernel; };
  for (int T : {512, 1024, 2048, 4096, 8192}) {
    EXPECT_EQ(kernel(T, 16, IndexSharing::consecutive), SparseMlaKernel::shared_rows) << T;
    EXPECT_EQ(plan(T, IndexSharing::consecutive).splits, 1) << T;
  }
  // Groups (T / 4) x splits against rounds of 132: 30 x 4 (T = 117), 64 x 2, 75 x 3 (2 rounds of
  // 1/3), 128 x 1 (T = 511, one wave), 150 x 3 (4 rounds of 1/3), 225 x 4, 300 x 2, 550 x 3.
  for (auto [T, splits] : {std::pair{117, 4}, std::pair{256, 2}, std::pair{300, 3}, std::pair{511, 1}, std::pair{600, 3},
                           std::pair{900, 4}, std::pair{1200, 2}, std::pair{2200, 3}}) {
    const SparseMlaPlan p = plan(T, IndexSharing::consecutive);
    EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << T;
    EXPECT_EQ(p.splits, splits) << T;
    EXPECT_EQ(p.ctas, (T + 3) / 4 * splits) << T;
    EXPECT_TRUE(p.union_pass) << T;
  }
  // 29 groups (T = 116) fill less than 9/10 of a wave in 4 splits; lists of 2047, and an fp8
  // cache, keep the old line (whole waves from T = 512).
  for (int T : {1, 64, 116}) EXPECT_EQ(kernel(T, 16, IndexSharing::consecutive), SparseMlaKernel::split_k) << T;
  for (int T : {256, 600}) {
    EXPECT_EQ(plan(T, IndexSharing::consecutive, 2047).kernel, SparseMlaKernel::split_k) << T;
    EXPECT_EQ(plan(T, IndexSharing::consecutive, 2048, KvCacheFormat::fp8_ds_mla).kernel, SparseMlaKernel::split_k) << T;
  }
  EXPECT_EQ(plan(512, IndexSharing::consecutive, 1024).kernel, SparseMlaKernel::shared_rows);
  // Not on fast memory (an H200), whose split-K gathers faster: the old line.
  for (int T : {117, 300, 600}) EXPECT_EQ(plan_sparse_mla(T, 16, 2048, kH200, {}, IndexSharing::consecutive).kernel, SparseMlaKernel::split_k) << T;
  EXPECT_EQ(plan_sparse_mla(512, 16, 2048, kH200, {}, IndexSharing::consecutive).kernel, SparseMlaKernel::shared_rows);
  for (int T : {512, 1024, 2048, 4096, 8192}) EXPECT_EQ(kernel(T, 16, IndexSharing::none), SparseMlaKernel::split_k) << T;
  // unknown is the default: shared rows from T = 2048.
  EXPECT_EQ(kernel(1024, 16, IndexSharing::unknown), SparseMlaKernel::split_k);
  EXPECT_EQ(kernel(2048, 16, IndexSharing::unknown), SparseMlaKernel::shared_rows);
  // A forced kernel wins over the hint.
  PlanChoice forced;
  forced.kernel = PlanChoice::Kernel::shared_rows;
  EXPECT_EQ(plan_sparse_mla(64, 16, 2048, kH100, forced, IndexSharing::none).kernel, SparseMlaKernel::shared_rows);
  forced.kernel = PlanChoice::Kernel::split_k;
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2048, kH100, forced, IndexSharing::consecutive).kernel, SparseMlaKernel::split_k);
  // A value outside the enum is refused, naming it.
  try {
    plan_sparse_mla(4096, 16, 2048, kH100, {}, static_cast<IndexSharing>(7));
    ADD_FAILURE() << "no error for index_sharing 7";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index_sharing"), std::string::npos) << e.what();
  }
}

// An fp8_ds_mla cache has its own thresholds where its split-K costs less (docs/perf.md runs
// 395-397, 434): at 16 heads shared rows for consecutive tokens, and without a hint from T = 8192
// only with the share probe deciding on the device (its own line); at 32 heads from T = 256 in
// whole waves; at 64 and 128 heads with long lists from 3 x 2^14 (head block, position) pairs. Where
// both formats take the same kernel they get the same splits and workspace; split-K's tiles
// differ: 64 rows on splits of >= 1024 positions (kFp8WideTileMinChunk), 32 below, never 16.
TEST(Planner, Fp8CacheHasItsOwnThresholds) {
  const auto plan = [](int T, int H, IndexSharing sharing, KvCacheFormat format) {
    return plan_sparse_mla(T, H, 2048, kH100, {}, sharing, format);
  };
  const auto fp8_kernel = [&](int T, int H, IndexSharing sharing = IndexSharing::unknown) {
    return plan(T, H, sharing, KvCacheFormat::fp8_ds_mla).kernel;
  };
  const auto bf16_kernel = [&](int T, int H, IndexSharing sharing = IndexSharing::unknown) {
    return plan(T, H, sharing, KvCacheFormat::bf16).kernel;
  };
  for (int T : {512, 2048, 4096, 8192}) {  // 16 heads: consecutive, or unknown through the probe
    EXPECT_EQ(fp8_kernel(T, 16, IndexSharing::consecutive), SparseMlaKernel::shared_rows) << T;
    const SparseMlaPlan unknown = plan(T, 16, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla);
    EXPECT_EQ(unknown.kernel, T >= 8192 ? SparseMlaKernel::shared_rows : SparseMlaKernel::split_k) << T;
    EXPECT_EQ(unknown.share_probe.line_permille, T >= 8192 ? 520 : 0) << T;
    EXPECT_EQ(fp8_kernel(T, 16, IndexSharing::none), SparseMlaKernel::split_k) << T;
  }
  EXPECT_EQ(bf16_kernel(4096, 16), SparseMlaKernel::shared_rows);
  // 32 heads from 1.7 waves (one-token groups unsplit end at 224 tokens) and past 2 whole waves:
  // fp8 takes one-token groups at every T, where bf16 keeps 2-token groups by the count
  // (one_token_lead_pays). T = 230 / 250 / 264: 2 unsplit one-token waves (bf16: 2 >= 25/16 +
  // 5/16; fp8 took split-K below T = 256 before, run 490). T = 628 / 760 / 1024 (tails of 0.76 of
  // a wave, no lead tokens): 5 / 6 / 8 waves (bf16: 25/16 x 3 / 3 / 4 + 5/16 = 5 / 5 / 6.56; fp8
  // took 2-token groups at 760 and 1024 before, run 495).
  for (int topk : {1024, 2048})
    for (int T : {230, 250, 264, 628, 760, 1024}) {
      const SparseMlaPlan fp8 = plan_sparse_mla(T, 32, topk, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla);
      EXPECT_TRUE(fp8.kernel == SparseMlaKernel::shared_rows && !fp8.union_pass && fp8.splits == 1 && fp8.ctas == T) << T << " " << topk;
      const SparseMlaPlan bf16 = plan_sparse_mla(T, 32, topk, kH100);
      EXPECT_TRUE(bf16.kernel == SparseMlaKernel::shared_rows && bf16.union_pass && bf16.ctas == (T + 1) / 2) << T << " " << topk;
    }
  for (int T : {256, 512, 1024}) EXPECT_EQ(fp8_kernel(T, 32), SparseMlaKernel::shared_rows) << T;
  // Both take one-token groups up to 1.7 waves (224 tokens).
  for (KvCacheFormat kv : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla}) {
    const SparseMlaPlan p = plan_sparse_mla(224, 32, 1024, kH100, {}, IndexSharing::unknown, kv);
    EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows);
    EXPECT_FALSE(p.union_pass);
    EXPECT_EQ(p.ctas, 224);
  }
  // 64 / 128 heads at topk 2048: 12-20 head blocks differ (bf16 from 2^13 pairs and 12 head
  // blocks), 24 (3 x 2^14) do not.
  for (auto [T, H] : {std::pair{3, 64}, std::pair{5, 64}, std::pair{2, 128}}) {
    EXPECT_EQ(fp8_kernel(T, H), SparseMlaKernel::split_k) << T << " " << H;
    EXPECT_EQ(bf16_kernel(T, H), SparseMlaKernel::shared_rows) << T << " " << H;
  }
  for (auto [T, H] : {std::pair{6, 64}, std::pair{3, 128}, std::pair{12, 64}})
    EXPECT_EQ(fp8_kernel(T, H, IndexSharing::none), SparseMlaKernel::shared_rows) << T << " " << H;
  // fp8 lists below 1024 positions: from 2^17 pairs (64 heads topk 1023: T = 33) or, with lists
  // of >= 512, once split-K cannot split every token in two (64 heads T = 34, 128 heads T = 17).
  const auto fp8_short = [](int T) { return plan_sparse_mla(T, 64, 1023, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).kernel; };
  EXPECT_EQ(fp8_short(32), SparseMlaKernel::split_k);
  EXPECT_EQ(fp8_short(33), SparseMlaKernel::shared_rows);
  const auto fp8_mid = [](int T, int H, int topk) {
    return plan_sparse_mla(T, H, topk, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).kernel;
  };
  EXPECT_EQ(fp8_mid(33, 64, 512), SparseMlaKernel::split_k);
  EXPECT_EQ(fp8_mid(34, 64, 512), SparseMlaKernel::shared_rows);
  EXPECT_EQ(fp8_mid(16, 128, 512), SparseMlaKernel::split_k);
  EXPECT_EQ(fp8_mid(17, 128, 512), SparseMlaKernel::shared_rows);
  EXPECT_EQ(fp8_mid(40, 64, 511), SparseMlaKernel::split_k);  // shorter lists: not measured
  EXPECT_EQ(plan_sparse_mla(12, 64, 1024, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).kernel, SparseMlaKernel::shared_rows);
  EXPECT_EQ(plan_sparse_mla(11, 64, 1024, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).kernel, SparseMlaKernel::split_k);
  for (auto [T, H] : {std::pair{512, 16}, std::pair{64, 64}, std::pair{12, 64}, std::pair{8, 128}, std::pair{6, 64}, std::pair{100, 32}})
    for (IndexSharing sharing : {IndexSharing::unknown, IndexSharing::consecutive, IndexSharing::none}) {
      const SparseMlaPlan bf16 = plan(T, H, sharing, KvCacheFormat::bf16), fp8 = plan(T, H, sharing, KvCacheFormat::fp8_ds_mla);
      EXPECT_EQ(fp8.kernel, bf16.kernel) << T << " " << H;
      EXPECT_EQ(fp8.splits, bf16.splits) << T << " " << H;
      EXPECT_EQ(fp8.workspace_bytes, bf16.workspace_bytes) << T << " " << H;
      EXPECT_EQ(bf16.block_keys, 32) << T << " " << H;
      if (fp8.kernel == SparseMlaKernel::split_k) EXPECT_EQ(fp8.block_keys, fp8.chunk >= 1024 ? 64 : 32) << T << " " << H;
    }
  // Split-K at 16 heads: one split per token from T = 264 (2048 positions), two at T = 100 (1024),
  // four at T = 64 (512).
  for (auto [T, keys] : {std::pair{1, 32}, std::pair{64, 32}, std::pair{100, 64}, std::pair{264, 64}, std::pair{1024, 64}}) {
    const SparseMlaPlan fp8 = plan(T, 16, IndexSharing::none, KvCacheFormat::fp8_ds_mla);
    EXPECT_EQ(fp8.kernel, SparseMlaKernel::split_k) << T;
    EXPECT_EQ(fp8.block_keys, keys) << T;
  }
  EXPECT_EQ(plan_sparse_mla(1000, 16, 512, kH100, {}, IndexSharing::none, KvCacheFormat::fp8_ds_mla).block_keys, 32);
  PlanChoice forced;
  forced.block_keys = 16;
  try {
    plan_sparse_mla(64, 16, 2048, kH100, forced, IndexSharing::none, KvCacheFormat::fp8_ds_mla);
    ADD_FAILURE() << "no error for 16-row fp8 tiles";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block_keys"), std::string::npos) << e.what();
  }
  try {
    plan(64, 16, IndexSharing::unknown, static_cast<KvCacheFormat>(5));
    ADD_FAILURE() << "no error for kv_format 5";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_format"), std::string::npos) << e.what();
  }
}

// At 32 heads a shared-rows CTA holds 2 tokens: once split-K needs a second wave (T x 2 head
// groups > 264 CTAs: T > 132), whether or not its own CTAs fill theirs, unless the caller says the
// tokens share no rows (an fp8 cache: Fp8CacheHasItsOwnThresholds). Below that, from T = 16 with
// lists of >= 1024 (both caches), whatever the hint, one token per CTA in one wave (no union pass),
// past it up to 1.7 waves (T <= 224) as at 64 heads (OneTokenGroupsJustPastOneWave...), and past
// 2 or more whole waves where the tail takes lead-token splits and their waves cost less. The
// hint does not matter with these lists (IndexSharingDoesNotMatterAt32HeadsWithLongLists).
TEST(Planner, SharedRowsFor32HeadsOnceSplitKNeedsASecondWave) {
  const auto plan = [](int T, IndexSharing sharing, int topk = 2048, KvCacheFormat kv = KvCacheFormat::bf16) {
    return plan_sparse_mla(T, 32, topk, kH100, {}, sharing, kv);
  };
  for (IndexSharing sharing : {IndexSharing::unknown, IndexSharing::consecutive, IndexSharing::none}) {
    // More one-token waves than 25/16 x the 2-token groups' + 5/16 (T = 264: 2 against 1; 450:
    // 3.5 against 2; 478: 3.67 against 2; 512: 4 against 2, its tail of 0.88 of a wave unsplit;
    // 661: 5.02 against 3; 700: 5.33 against 3; 1057: 8.02 against 4.5, its last 2-token CTA one
    // token): 2-token groups, whatever the hint (run 495: the `none` hint's one-token groups or
    // split-K lost to them).
    for (int T : {225, 256, 264, 450, 478, 512, 661, 700, 1024, 1057, 4096}) {
      EXPECT_EQ(plan(T, sharing).kernel, SparseMlaKernel::shared_rows) << T;
      EXPECT_TRUE(plan(T, sharing).union_pass) << T;
    }
    // Past one wave up to 1.7 (T = 133-224), one-token groups as at 64 heads, whatever the hint:
    // up to T = 198 132 tokens unsplit and the rest split, as many CTAs as fit the SMs (T = 133:
    // 64 splits of a tile), up to T = 204 3 splits in two rounds, then one split.
    for (auto [T, splits] : {std::pair{133, 64}, std::pair{140, 16}, std::pair{162, 4}, std::pair{176, 3}, std::pair{198, 2},
                             std::pair{199, 3}, std::pair{204, 3}, std::pair{205, 1}, std::pair{224, 1}}) {
      const SparseMlaPlan p = plan(T, sharing);
      const int unsplit = splits > 1 ? 132 : 0;
      EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << T;
      EXPECT_FALSE(p.union_pass) << T;
      EXPECT_EQ(p.splits, splits) << T;
      EXPECT_EQ(p.lead_tokens, unsplit) << T;
      EXPECT_EQ(p.ctas, unsplit + (T - unsplit) * splits) << T;
      EXPECT_EQ(p.fused_rows, splits > 1 ? p.chunk : 0) << T;
      EXPECT_EQ(p.launches, splits > 1 ? 2 : 1) << T;
    }
    // Past 2 or more whole waves: one-token groups again, the whole waves' tokens unsplit and the
    // tail in as many splits as fit a wave, or 3 over two rounds (up to 2/3 of a wave), where
    // their waves cost less (bf16 T = 350: 2.67 one-token waves against 2 2-token; 600 and 610:
    // 4.67 against 3; 800: 6.06 against 4; fp8 T = 700: 5.33 against 3 x 15/8).
    for (auto [T, topk, kv, unsplit, splits] :
         {std::tuple{265, 2048, KvCacheFormat::bf16, 264, 64}, std::tuple{300, 2048, KvCacheFormat::bf16, 264, 3},
          std::tuple{330, 2048, KvCacheFormat::bf16, 264, 2}, std::tuple{350, 2048, KvCacheFormat::fp8_ds_mla, 264, 3},
          std::tuple{350, 2048, KvCacheFormat::bf16, 264, 3}, std::tuple{610, 2048, KvCacheFormat::bf16, 528, 3},
          std::tuple{397, 2048, KvCacheFormat::bf16, 396, 64}, std::tuple{430, 2048, KvCacheFormat::bf16, 396, 3},
          std::tuple{529, 2048, KvCacheFormat::fp8_ds_mla, 528, 64}, std::tuple{600, 2048, KvCacheFormat::bf16, 528, 3},
          std::tuple{800, 2048, KvCacheFormat::bf16, 792, 16}, std::tuple{700, 2048, KvCacheFormat::fp8_ds_mla, 660, 3},
          std::tuple{1057, 2048, KvCacheFormat::fp8_ds_mla, 1056, 64}, std::tuple{1058, 2048, KvCacheFormat::bf16, 1056, 64},
          std::tuple{265, 1024, KvCacheFormat::bf16, 264, 32}}) {
      const SparseMlaPlan p = plan(T, sharing, topk, kv);
      const std::string what = std::to_string(T) + " topk " + std::to_string(topk);
      EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << what;
      EXPECT_FALSE(p.union_pass) << what;
      EXPECT_EQ(p.lead_tokens, unsplit) << what;
      EXPECT_EQ(p.lead_splits, 1) << what;
      EXPECT_EQ(p.splits, splits) << what;
      EXPECT_EQ(p.ctas, unsplit + (T - unsplit) * splits) << what;  // one CTA per token and split
      EXPECT_EQ(p.workspace_bytes, size_t(T - unsplit) * splits * 32 * 1028) << what;
      EXPECT_EQ(p.launches, 2) << what;
    }
    // ... and without a lead plan (a tail past 2/3 of a wave, or whole waves) the tail a wave of
    // its own, unsplit, where that count pays: T = 353-396 (3 one-token waves against 2).
    for (auto [T, topk] : {std::pair{353, 2048}, std::pair{360, 2048}, std::pair{396, 2048}, std::pair{360, 1024}}) {
      const SparseMlaPlan p = plan(T, sharing, topk);
      EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << T;
      EXPECT_FALSE(p.union_pass) << T;
      EXPECT_EQ(p.lead_tokens, 0) << T;
      EXPECT_EQ(p.splits, 1) << T;
      EXPECT_EQ(p.ctas, T) << T;
      EXPECT_EQ(p.launches, 1) << T;
    }
    EXPECT_EQ(plan(265, sharing, 1023).kernel, SparseMlaKernel::split_k);  // shorter lists keep split-K's lead plan
    EXPECT_EQ(plan(350, sharing, 2048, KvCacheFormat::fp8_ds_mla).chunk, 704);
    EXPECT_EQ(plan(133, sharing).chunk, 32);  // 64 tiles in 64 splits
    EXPECT_EQ(plan(133, sharing, 1024).splits, 32);  // at most a tile each
    EXPECT_EQ(plan(133, sharing, 1023).kernel, SparseMlaKernel::split_k);  // shorter lists: from T = 256 in whole waves
    for (int T : {1, 8, 15}) EXPECT_EQ(plan(T, sharing).kernel, SparseMlaKernel::split_k) << T;
    for (int T : {16, 33, 64, 128, 132}) {
      const SparseMlaPlan p = plan(T, sharing);
      EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << T;
      EXPECT_FALSE(p.union_pass) << T;
      EXPECT_EQ(p.ctas, T * p.splits) << T;
    }
    EXPECT_EQ(plan(16, sharing).splits, 8);  // 16 one-token groups: 8 splits, as 64 heads T = 16
    EXPECT_EQ(plan(64, sharing).splits, 2);
    EXPECT_EQ(plan(64, sharing).fused_rows, 1024);  // split 0 alone for a list of <= one split's rows
    EXPECT_EQ(plan(64, sharing, 1023).kernel, SparseMlaKernel::split_k);
    EXPECT_EQ(plan(15, sharing, 2048, KvCacheFormat::fp8_ds_mla).kernel, SparseMlaKernel::split_k);
    EXPECT_EQ(plan(16, sharing, 2048, KvCacheFormat::fp8_ds_mla).kernel, SparseMlaKernel::shared_rows);  // as bf16 (run 456)
  }
  EXPECT_EQ(plan_sparse_mla(1024, 32, 2048, kH100).ctas, 512);
  // Forced shared rows keep the 2-token groups and their union pass.
  PlanChoice forced;
  forced.kernel = PlanChoice::Kernel::shared_rows;
  const SparseMlaPlan f = plan_sparse_mla(64, 32, 2048, kH100, forced);
  EXPECT_TRUE(f.union_pass);
  EXPECT_EQ(f.ctas, 32);
}

// At 32 heads with lists of >= 1024 positions the hint does not matter, as at 64 and 128 heads:
// the planner's count of waves was measured on random lists, which share no rows, and the `none`
// hint's split-K (run 492) and one-token groups (run 495) lost to its plans. Every field of every
// plan up to 32 waves, both caches, on the H100 and on a device of 8 SMs.
TEST(Planner, IndexSharingDoesNotMatterAt32HeadsWithLongLists) {
  DeviceInfo small = kH100;
  small.sm_count = 8;
  for (const DeviceInfo& dev : {kH100, small})
    for (int topk : {1024, 1500, 2048})
      for (KvCacheFormat kv : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
        for (int T = 1; T <= 32 * dev.sm_count; ++T) {
          const SparseMlaPlan a = plan_sparse_mla(T, 32, topk, dev, {}, IndexSharing::unknown, kv);
          for (IndexSharing sharing : {IndexSharing::consecutive, IndexSharing::none}) {
            const SparseMlaPlan b = plan_sparse_mla(T, 32, topk, dev, {}, sharing, kv);
            ASSERT_TRUE(same_plan(a, b)) << "T " << T << " topk " << topk << " SMs " << dev.sm_count << (kv == KvCacheFormat::bf16 ? " bf16" : " fp8");
          }
        }
  // Shorter lists keep the hint's meaning: split-K for none.
  EXPECT_EQ(plan_sparse_mla(1024, 32, 1023, kH100, {}, IndexSharing::none).kernel, SparseMlaKernel::split_k);
  EXPECT_EQ(plan_sparse_mla(1024, 32, 1023, kH100).kernel, SparseMlaKernel::shared_rows);
}

// 32 heads past 1.7 waves, bf16: one-token waves are bound by memory, 2-token waves by their
// instructions, so the count weighs the 2-token waves by the device's bandwidth (in eighths of the
// H100's 3352 GB/s; 0, unknown, plans as the H100). On an H200 (4814 GB/s) one-token groups at
// every T (runs 500-501); on a slower device (2 TB/s) 2-token groups where the H100 takes 3 unsplit
// one-token waves (T = 353: 3 x 16 x 2 x 8 >= 5 x (25 x 4 + 10)).
TEST(Planner, ThirtyTwoHeadsWeighTheirWavesByBandwidth) {
  const DeviceInfo h100 = with_bandwidth(3352), h200 = kH200, slow = with_bandwidth(2000);
  for (int topk : {1024, 2048})
    for (int T = 16; T <= 32 * 132; ++T) {
      const SparseMlaPlan a = plan_sparse_mla(T, 32, topk, kH100), b = plan_sparse_mla(T, 32, topk, h100);
      ASSERT_TRUE(same_plan(a, b)) << T << " " << topk;
      const SparseMlaPlan p = plan_sparse_mla(T, 32, topk, h200);
      ASSERT_EQ(p.kernel, SparseMlaKernel::shared_rows) << T << " " << topk;
      ASSERT_FALSE(p.union_pass) << T << " " << topk;  // one token per CTA
      ASSERT_EQ(p.ctas, p.lead_tokens * p.lead_splits + (T - p.lead_tokens) * p.splits) << T << " " << topk;
    }
  EXPECT_TRUE(plan_sparse_mla(1024, 32, 2048, kH100).union_pass);  // 2-token groups on the H100
  EXPECT_FALSE(plan_sparse_mla(353, 32, 2048, kH100).union_pass);
  EXPECT_TRUE(plan_sparse_mla(353, 32, 2048, slow).union_pass);
  const DeviceInfo negative = with_bandwidth(-5);  // a nonsense figure plans as unknown, as the H100
  EXPECT_FALSE(plan_sparse_mla(353, 32, 2048, negative).union_pass);
  EXPECT_TRUE(plan_sparse_mla(1024, 32, 2048, negative).union_pass);
  // 16 and 128 heads do not look at it (64: the next test), but for the share probe's line and
  // split-K half (UnhintedSixteenHeadSharedRowsSampleTheShare).
  for (int H : {16, 128})
    for (int T : {100, 353, 1024, 4096}) {
      SparseMlaPlan a = plan_sparse_mla(T, H, 2048, kH100);
      const SparseMlaPlan b = plan_sparse_mla(T, H, 2048, h200);
      a.share_probe = b.share_probe;
      EXPECT_TRUE(same_plan_but_softmax(a, b)) << T << " " << H;
    }
}

// 64 heads bf16 take lead tokens (the whole waves unsplit, the tail split, no union pass) past at
// most kSharedRowsLeadMaxWaves (6) whole waves on the H100, where past them the union pass's row
// order repays its last wave; from 10 eighths of its bandwidth (an H200: 11) past any number
// (run 503: T = 925 / 1057 737.8 / 832.6 -> 634.8 / 725.3 µs). fp8 past any number everywhere.
TEST(Planner, SixtyFourHeadsLeadPastAnyWavesOnFasterMemory) {
  const DeviceInfo h200 = kH200, nine = with_bandwidth(3352 * 9 / 8);
  for (auto [T, topk, unsplit, splits] : {std::tuple{925, 2048, 924, 64}, std::tuple{1057, 2048, 1056, 64}, std::tuple{925, 1024, 924, 32}}) {
    const SparseMlaPlan h100_plan = plan_sparse_mla(T, 64, topk, kH100), nine_plan = plan_sparse_mla(T, 64, topk, nine);
    EXPECT_TRUE(h100_plan.union_pass && h100_plan.lead_tokens == 0 && h100_plan.splits == 1) << T << " " << topk;
    EXPECT_TRUE(nine_plan.union_pass && nine_plan.ctas == h100_plan.ctas) << T << " " << topk;
    const SparseMlaPlan p = plan_sparse_mla(T, 64, topk, h200);
    EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << T << " " << topk;
    EXPECT_FALSE(p.union_pass) << T << " " << topk;
    EXPECT_EQ(p.lead_tokens, unsplit) << T << " " << topk;
    EXPECT_EQ(p.splits, splits) << T << " " << topk;
    EXPECT_EQ(p.ctas, unsplit + (T - unsplit) * splits) << T << " " << topk;
    const SparseMlaPlan fp8 = plan_sparse_mla(T, 64, topk, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla);
    EXPECT_EQ(fp8.lead_tokens, unsplit) << T << " " << topk;
  }
  // Up to 6 whole waves both alike (T = 800: 792 unsplit and 16 splits).
  const SparseMlaPlan a = plan_sparse_mla(800, 64, 2048, kH100), b = plan_sparse_mla(800, 64, 2048, h200);
  EXPECT_TRUE(a.lead_tokens == 792 && b.lead_tokens == 792 && a.splits == b.splits && a.ctas == b.ctas);
}

// bf16 tails of 11/20-2/3 of a wave past whole waves: one more wave of whole lists on the H100
// (the gather binds its 16-64-head CTAs), 3 splits over two rounds from 10 eighths of its
// bandwidth (an H200), as fp8 does everywhere; lists shorter than 2048 at 16 and 32 heads keep
// one round on both (docs/perf.md runs 506-507).
TEST(Planner, BfloatTailsTakeTwoRoundsOnFasterMemory) {
  const DeviceInfo h200 = kH200, nine = with_bandwidth(3352 * 9 / 8);
  for (auto [T, H, topk, unsplit] : {std::tuple{420, 16, 2048, 264}, std::tuple{700, 16, 2048, 528}, std::tuple{210, 32, 2048, 132},
                                     std::tuple{210, 64, 2048, 132}, std::tuple{210, 64, 512, 132}}) {
    const SparseMlaPlan h100_plan = plan_sparse_mla(T, H, topk, kH100), p = plan_sparse_mla(T, H, topk, h200);
    EXPECT_EQ(h100_plan.lead_tokens, 0) << T << " " << H << " " << topk;
    EXPECT_TRUE(same_plan(h100_plan, plan_sparse_mla(T, H, topk, nine))) << T << " " << H << " " << topk;
    EXPECT_EQ(p.lead_tokens, unsplit) << T << " " << H << " " << topk;
    EXPECT_EQ(p.splits, 3) << T << " " << H << " " << topk;
    const SparseMlaPlan fp8 = plan_sparse_mla(T, H, topk, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla);
    if (H == 64 || topk == 2048) EXPECT_TRUE(fp8.lead_tokens == unsplit && fp8.splits == 3) << T << " " << H << " " << topk;
  }
  // Tails of at most 11/20 of a wave take two rounds on both; shorter lists at 16 / 32 heads on neither.
  EXPECT_TRUE(same_plan_but_softmax(plan_sparse_mla(409, 16, 2048, kH100), plan_sparse_mla(409, 16, 2048, h200)));
  for (auto [T, H, topk] : {std::tuple{420, 16, 1024}, std::tuple{420, 16, 512}, std::tuple{210, 32, 1024}}) {
    SparseMlaPlan a = plan_sparse_mla(T, H, topk, kH100);
    const SparseMlaPlan b = plan_sparse_mla(T, H, topk, h200);
    // Lists of 512 at 16 heads (sorted on the H100): the H200 never sorts lists shorter than
    // 1024; the others alike.
    EXPECT_EQ(b.row_order, topk == 512 ? false : a.row_order) << T << " " << H << " " << topk;
    if (topk == 512) EXPECT_TRUE(a.row_order) << T;
    a.row_order = b.row_order;
    EXPECT_TRUE(same_plan_but_softmax(a, b)) << T << " " << H << " " << topk;
  }
}

// Just past half a wave of one-token groups at 32 and 64 heads: one wave of whole lists for bf16
// on the H100 (the gather binds it), half a wave of tokens in 2 splits and the later ones in as
// many as fit after them with fp8 or on an H200, lists of 2048 only (docs/perf.md runs 508-509).
TEST(Planner, HalfWaveLeadAt32And64HeadsWithFp8OrFastMemory) {
  const DeviceInfo h200 = kH200;
  const auto fp8 = [](int T, int H, int topk, const DeviceInfo& dev) {
    return plan_sparse_mla(T, H, topk, dev, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla);
  };
  for (int H : {32, 64})
    for (auto [T, splits] : {std::pair{67, 64}, std::pair{75, 13}, std::pair{82, 8}}) {
      const SparseMlaPlan h100_bf16 = plan_sparse_mla(T, H, 2048, kH100);
      EXPECT_TRUE(h100_bf16.lead_tokens == 0 && h100_bf16.splits == 1 && h100_bf16.ctas == T) << T << " " << H;
      for (const SparseMlaPlan& p : {plan_sparse_mla(T, H, 2048, h200), fp8(T, H, 2048, kH100), fp8(T, H, 2048, h200)}) {
        EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << T << " " << H;
        EXPECT_EQ(p.lead_tokens, 66) << T << " " << H;
        EXPECT_EQ(p.lead_splits, 2) << T << " " << H;
        EXPECT_EQ(p.splits, splits) << T << " " << H;
        EXPECT_EQ(p.ctas, 132 + (T - 66) * splits) << T << " " << H;
      }
      // Shorter lists keep one split on both devices.
      EXPECT_TRUE(same_plan_but_softmax(plan_sparse_mla(T, H, 1024, kH100), plan_sparse_mla(T, H, 1024, h200))) << T << " " << H;
      EXPECT_EQ(fp8(T, H, 1024, kH100).lead_tokens, 0) << T << " " << H;
    }
  // Past T = 82 too few splits fit after the half wave (kLeadMinTailSplits): one split everywhere.
  EXPECT_EQ(plan_sparse_mla(83, 64, 2048, h200).lead_tokens, 0);
  EXPECT_EQ(fp8(83, 32, 2048, kH100).lead_tokens, 0);
}

// Split-K just past half a wave on fast memory: the later tokens from 4 splits (the H100: 8), with
// lists of 2048 (docs/perf.md runs 513-514).
TEST(Planner, SplitKHalfWaveLeadFromFourLaterSplitsOnFastMemory) {
  const DeviceInfo h200 = kH200;
  for (auto kv : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
    for (auto [T, splits] : {std::pair{166, 7}, std::pair{170, 6}, std::pair{180, 5}, std::pair{190, 4}, std::pair{198, 4}}) {
      const SparseMlaPlan h100_plan = plan_sparse_mla(T, 16, 2048, kH100, {}, IndexSharing::unknown, kv);
      const SparseMlaPlan p = plan_sparse_mla(T, 16, 2048, h200, {}, IndexSharing::unknown, kv);
      EXPECT_EQ(h100_plan.lead_tokens, 0) << T;
      EXPECT_EQ(p.kernel, SparseMlaKernel::split_k) << T;
      EXPECT_EQ(p.lead_tokens, 132) << T;
      EXPECT_EQ(p.lead_splits, 2) << T;
      EXPECT_EQ(p.splits, splits) << T;
      EXPECT_EQ(p.ctas, 264 + (T - 132) * splits) << T;
      // Lists of 1024 split alike on both; the H200 sorts their rows from 1.5 x 2^17 pairs (bf16,
      // T >= 192) or 1.75 x 2^17 (fp8, T >= 224) only (RowOrderFromEnoughPairsWithoutAHintAndWhenForced).
      SparseMlaPlan h100_1024 = plan_sparse_mla(T, 16, 1024, kH100, {}, IndexSharing::unknown, kv);
      const SparseMlaPlan h200_1024 = plan_sparse_mla(T, 16, 1024, h200, {}, IndexSharing::unknown, kv);
      EXPECT_TRUE(h100_1024.row_order) << T;
      EXPECT_EQ(h200_1024.row_order, kv == KvCacheFormat::bf16 && T >= 192) << T;
      h100_1024.row_order = h200_1024.row_order;
      EXPECT_FALSE(h100_1024.early_issue) << T;  // row order never issues early
      h100_1024.early_issue = h200_1024.early_issue;
      EXPECT_TRUE(same_plan_but_softmax(h100_1024, h200_1024)) << T;
    }
  EXPECT_EQ(plan_sparse_mla(199, 16, 2048, h200).lead_tokens, 0);  // 67 later tokens: 3 splits fit
  EXPECT_EQ(plan_sparse_mla(165, 16, 2048, kH100).lead_tokens, 132);  // 8 on both
}

// Without the consecutive hint, lists of fewer than 512 positions keep split-K at 16 and 32
// heads; at 32 heads lists of 512-1023 positions take shared rows from T = 256 in whole waves
// only, 1024 and more once split-K needs a second wave (docs/perf.md runs 399-400).
TEST(Planner, ShortListsKeepSplitKWithoutTheConsecutiveHint) {
  const auto kernel = [](int T, int H, int topk, IndexSharing sharing = IndexSharing::unknown) {
    return plan_sparse_mla(T, H, topk, kH100, {}, sharing).kernel;
  };
  for (int topk : {64, 256, 511})
    for (auto [T, H] : {std::pair{4096, 16}, std::pair{1024, 32}, std::pair{300, 32}}) {
      EXPECT_EQ(kernel(T, H, topk), SparseMlaKernel::split_k) << T << " " << H << " " << topk;
      EXPECT_EQ(kernel(T, H, topk, IndexSharing::consecutive), T == 300 ? SparseMlaKernel::split_k : SparseMlaKernel::shared_rows)
          << T << " " << H << " " << topk;  // 150 CTAs of 2 tokens: 2 waves at 57 %
    }
  for (int topk : {512, 1023}) {
    EXPECT_EQ(kernel(4096, 16, topk), SparseMlaKernel::shared_rows) << topk;
    for (int T : {256, 512, 1024}) EXPECT_EQ(kernel(T, 32, topk), SparseMlaKernel::shared_rows) << T << " " << topk;
    for (int T : {200, 300}) EXPECT_EQ(kernel(T, 32, topk), SparseMlaKernel::split_k) << T << " " << topk;
  }
  for (int T : {133, 200, 300}) EXPECT_EQ(kernel(T, 32, 1024), SparseMlaKernel::shared_rows) << T;
  EXPECT_EQ(kernel(132, 32, 1024), SparseMlaKernel::shared_rows);  // one-token groups, one wave
  EXPECT_EQ(kernel(132, 32, 1023), SparseMlaKernel::split_k);
  // On fast memory 32 heads' fp8 lists of 512-1023 keep split-K without the hint (planner.cpp,
  // run 690); bf16 keeps its groups, the consecutive hint takes them with either format, and
  // lists of 1024 take them whatever the format.
  const auto on_h200 = [](int T, int topk, KvCacheFormat kv, IndexSharing sharing = IndexSharing::unknown) {
    return plan_sparse_mla(T, 32, topk, kH200, {}, sharing, kv).kernel;
  };
  for (int topk : {512, 1023})
    for (int T : {256, 512, 1024, 2048}) {
      EXPECT_EQ(on_h200(T, topk, KvCacheFormat::fp8_ds_mla), SparseMlaKernel::split_k) << T << " " << topk;
      EXPECT_EQ(on_h200(T, topk, KvCacheFormat::bf16), SparseMlaKernel::shared_rows) << T << " " << topk;
      EXPECT_EQ(on_h200(T, topk, KvCacheFormat::fp8_ds_mla, IndexSharing::consecutive), SparseMlaKernel::shared_rows) << T << " " << topk;
      EXPECT_EQ(plan_sparse_mla(T, 32, topk, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).kernel, SparseMlaKernel::shared_rows)
          << T << " " << topk;
    }
  EXPECT_EQ(on_h200(1024, 1024, KvCacheFormat::fp8_ds_mla), SparseMlaKernel::shared_rows);
}

// At 64 and 128 heads a shared-rows CTA holds one token's 64 heads, so it reads each row once
// per 64 heads and masks nothing: whatever the hint, from 2^17 (head block, position) pairs,
// bf16 lists of >= 256 positions from 2^13 pairs and 12 head blocks (fp8: the test above), or
// more head blocks than split-K's two CTAs per SM.
TEST(Planner, SharedRowsFor64And128HeadsFromEnoughPairs) {
  for (IndexSharing sharing : {IndexSharing::unknown, IndexSharing::consecutive, IndexSharing::none}) {
    const auto kernel = [&](int T, int H, int topk) { return plan_sparse_mla(T, H, topk, kH100, {}, sharing).kernel; };
    for (int T : {3, 4, 5, 8, 16, 33, 64, 133, 1024, 4096}) EXPECT_EQ(kernel(T, 64, 2048), SparseMlaKernel::shared_rows) << T;
    for (int T : {2, 3, 8, 17, 1024, 4096}) EXPECT_EQ(kernel(T, 128, 2048), SparseMlaKernel::shared_rows) << T;
    // T = 1 (and 2 at 64 heads: under 12 head blocks) keeps split-K, for its short lists.
    for (int T : {1, 2}) EXPECT_EQ(kernel(T, 64, 2048), SparseMlaKernel::split_k) << T;
    EXPECT_EQ(kernel(1, 128, 2048), SparseMlaKernel::split_k);
    // bf16 with lists of >= 256 positions: from 2^14 pairs below 32 head blocks, 2^13 from 32.
    EXPECT_EQ(kernel(2, 128, 1024), SparseMlaKernel::shared_rows);  // 16 head blocks x 1024
    EXPECT_EQ(kernel(3, 64, 1366), SparseMlaKernel::shared_rows);   // 12 x 1366 = 16392
    EXPECT_EQ(kernel(3, 64, 1365), SparseMlaKernel::split_k);       // 16380
    EXPECT_EQ(kernel(4, 64, 512), SparseMlaKernel::split_k);        // 2^13 pairs, 16 head blocks (run 599)
    EXPECT_EQ(kernel(7, 64, 512), SparseMlaKernel::split_k);        // 28 head blocks
    EXPECT_EQ(kernel(2, 128, 512), SparseMlaKernel::split_k);
    EXPECT_EQ(kernel(8, 64, 512), SparseMlaKernel::shared_rows);
    EXPECT_EQ(kernel(8, 64, 256), SparseMlaKernel::shared_rows);    // 32 x 256 = 2^13
    EXPECT_EQ(kernel(4, 128, 256), SparseMlaKernel::shared_rows);
    EXPECT_EQ(kernel(7, 64, 300), SparseMlaKernel::split_k);        // 28 x 300 = 8400
    EXPECT_EQ(kernel(2, 128, 256), SparseMlaKernel::split_k);
    // Shorter lists: not from 2^13 pairs (nor 2^17, which head blocks reach first below 497).
    EXPECT_EQ(kernel(9, 64, 255), SparseMlaKernel::split_k);
    EXPECT_EQ(kernel(66, 64, 255), SparseMlaKernel::split_k);
    // More head blocks than 2 x 132: split-K would need a second wave.
    EXPECT_EQ(kernel(64, 128, 64), SparseMlaKernel::shared_rows);  // 512 head blocks, 2^15 pairs
    EXPECT_EQ(kernel(66, 64, 64), SparseMlaKernel::split_k);       // 264
    EXPECT_EQ(kernel(67, 64, 64), SparseMlaKernel::shared_rows);   // 268
    EXPECT_EQ(kernel(4096, 64, 2049), SparseMlaKernel::split_k);  // topk > 2048
  }
}

// Fewer groups than SMs split each group's union tiles within one wave, with no split empty for
// a full list: fewer than 8 groups on at most 3/4 of the SMs, 8 or more at most 8 splits each.
// One wave of CTAs compacts its own lists (no union or order pass).
TEST(Planner, WideHeadsSplitTheirUnionsBelowOneWave) {
  const SparseMlaPlan t16 = plan_sparse_mla(16, 64, 2048, kH100);  // 16 groups x 8 splits of 8 tiles
  EXPECT_EQ(t16.kernel, SparseMlaKernel::shared_rows);
  EXPECT_EQ(t16.splits, 8);
  EXPECT_EQ(t16.chunk, 256);
  EXPECT_EQ(t16.ctas, 128);
  EXPECT_FALSE(t16.union_pass);
  EXPECT_EQ(t16.launches, 2);  // main, combine
  EXPECT_EQ(t16.workspace_bytes, size_t(16) * 64 * 8 * 1028);
  EXPECT_EQ(t16.fused_rows, 256);  // a list of <= 256 valid rows: split 0 alone, no merge
  const SparseMlaPlan t3 = plan_sparse_mla(3, 128, 2048, kH100, PlanChoice{}, IndexSharing::none);  // 6 groups: 99 / 6 -> 16 splits of 4 tiles
  EXPECT_EQ(t3.kernel, SparseMlaKernel::shared_rows);
  EXPECT_EQ(t3.splits, 16);
  EXPECT_EQ(t3.chunk, 128);
  EXPECT_EQ(t3.ctas, 96);
  const SparseMlaPlan t2 = plan_sparse_mla(2, 128, 2048, kH100);  // 4 groups: 24 splits -> 3 tiles each -> 22
  EXPECT_EQ(t2.splits, 22);
  EXPECT_EQ(t2.ctas, 88);
  const SparseMlaPlan t7 = plan_sparse_mla(7, 64, 2048, kH100);  // 7 groups: 14 splits -> 5 tiles each -> 13
  EXPECT_EQ(t7.splits, 13);
  EXPECT_EQ(t7.chunk, 160);
  const SparseMlaPlan t3_64 = plan_sparse_mla(3, 64, 2048, kH100);  // 3 groups: 33 -> 2 tiles each -> 32
  EXPECT_EQ(t3_64.kernel, SparseMlaKernel::shared_rows);
  EXPECT_EQ(t3_64.splits, 32);
  const SparseMlaPlan t5 = plan_sparse_mla(5, 128, 2048, kH100);  // 10 groups: 8 splits of 8 tiles
  EXPECT_EQ(t5.splits, 8);
  EXPECT_EQ(t5.chunk, 256);
  EXPECT_EQ(plan_sparse_mla(8, 128, 1024, kH100).splits, 8);  // 16 groups: 8 splits of 4 tiles
  EXPECT_EQ(plan_sparse_mla(20, 64, 1024, kH100).splits, 6);  // 20 groups: 6 splits -> 6 tiles each -> 6
  const SparseMlaPlan t12 = plan_sparse_mla(12, 128, 2048, kH100);  // 24 groups: 5 splits -> 13 tiles -> 5
  EXPECT_EQ(t12.splits, 5);
  const SparseMlaPlan t50 = plan_sparse_mla(50, 128, 2048, kH100);  // 100 groups: one split, one wave
  EXPECT_EQ(t50.splits, 1);
  EXPECT_FALSE(t50.union_pass);
  EXPECT_EQ(t50.launches, 1);
  EXPECT_EQ(t50.workspace_bytes, 0u);
  const SparseMlaPlan t111 = plan_sparse_mla(111, 128, 2048, kH100);  // 222 groups: two waves, ordered
  EXPECT_TRUE(t111.union_pass);
  EXPECT_EQ(t111.launches, 3);
  const SparseMlaPlan t89 = plan_sparse_mla(89, 128, 2048, kH100);  // 178 groups x 2 splits: no union pass
  EXPECT_FALSE(t89.union_pass);
  EXPECT_EQ(t89.splits, 2);
  EXPECT_EQ(t89.launches, 2);
}

// One-token groups just past one wave (at most half a wave more of them): one wave of groups
// unsplit, the tokens past it split into as many CTAs as fit the SMs (at most a tile each, and
// 64), no union pass; the partials are the split tokens' only. Past 2/3 of a wave more one split
// and the union pass (row order at 64 heads); between, the next test.
TEST(Planner, OneTokenGroupsJustPastOneWaveSplitOnlyTheTokensPastIt) {
  for (KvCacheFormat kv : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
    for (auto [T, H, topk, splits] : {std::tuple{133, 64, 2048, 64}, std::tuple{150, 64, 2048, 7}, std::tuple{176, 64, 2048, 3},
                                      std::tuple{198, 64, 2048, 2}, std::tuple{224, 64, 2048, 1},
                                      std::tuple{67, 128, 2048, 64}, std::tuple{80, 128, 2048, 4}, std::tuple{99, 128, 2048, 2},
                                      std::tuple{111, 128, 2048, 1}, std::tuple{133, 64, 1536, 48}, std::tuple{140, 64, 1024, 16},
                                      std::tuple{133, 64, 1100, 35}, std::tuple{135, 64, 2048, 32}}) {  // 135: 44 fit, 32 of 2 tiles
      const std::string what = std::to_string(T) + " " + std::to_string(H) + " " + std::to_string(topk);
      const SparseMlaPlan p = plan_sparse_mla(T, H, topk, kH100, {}, IndexSharing::unknown, kv);
      const int groups_per_token = H / 64, unsplit = splits > 1 ? 132 / groups_per_token : 0;
      EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << what;
      EXPECT_EQ(p.union_pass, splits == 1) << what;
      EXPECT_EQ(p.row_order, splits == 1 && H == 64) << what;  // sorted in the union pass
      EXPECT_EQ(p.splits, splits) << what;
      EXPECT_EQ(p.lead_tokens, unsplit) << what;
      EXPECT_EQ(p.ctas, (unsplit + (T - unsplit) * splits) * groups_per_token) << what;
      EXPECT_EQ(p.launches, splits > 1 ? 2 : 3) << what;
      if (splits > 1) {
        EXPECT_EQ(p.workspace_bytes, size_t(T - unsplit) * H * splits * 1028) << what;
        EXPECT_EQ(p.fused_rows, p.chunk) << what;
        EXPECT_EQ(p.chunk, (topk + 31) / 32 / splits * 32 + ((topk + 31) / 32 % splits ? 32 : 0)) << what;  // whole tiles
      }
    }
  // Forced shared rows past one wave keep the union pass, every token split alike.
  PlanChoice forced;
  forced.kernel = PlanChoice::Kernel::shared_rows;
  const SparseMlaPlan f = plan_sparse_mla(133, 64, 2048, kH100, forced);
  EXPECT_TRUE(f.union_pass);
  EXPECT_EQ(f.lead_tokens, 0);
  // Another device's wave: 100 SMs, 128 heads (2 groups a token): 50 tokens unsplit.
  const SparseMlaPlan other = plan_sparse_mla(60, 128, 2048, DeviceInfo{100, 232448, 9, 0});
  EXPECT_EQ(other.lead_tokens, 50);
  EXPECT_EQ(other.splits, 5);  // 20 groups past the wave: 100 / 20
  EXPECT_EQ(other.ctas, 100 + 20 * 5);
}

// Past whole waves of one-token groups (64 heads bf16: 2-6 of them; 128 heads and fp8 any number)
// as past one: the whole waves' tokens unsplit and the tail split, no union pass (so no row
// order). Exact waves and, at 64 heads bf16, past 7 or more keep the union pass (its row order).
TEST(Planner, OneTokenGroupsPastWholeWavesSplitOnlyTheTail) {
  constexpr auto bf16 = KvCacheFormat::bf16, fp8 = KvCacheFormat::fp8_ds_mla;
  // T, H, kv, unsplit tokens, splits
  for (auto [T, H, kv, unsplit, splits] :
       {std::tuple{265, 64, bf16, 264, 64}, std::tuple{300, 64, bf16, 264, 3}, std::tuple{400, 64, bf16, 396, 32},
        std::tuple{530, 64, bf16, 528, 64}, std::tuple{528, 64, bf16, 0, 1}, std::tuple{664, 64, bf16, 660, 32},
        std::tuple{800, 64, bf16, 792, 16}, std::tuple{925, 64, bf16, 0, 1}, std::tuple{925, 64, fp8, 924, 64},
        std::tuple{133, 128, bf16, 132, 64}, std::tuple{199, 128, bf16, 198, 64}, std::tuple{265, 128, bf16, 264, 64},
        std::tuple{331, 128, bf16, 330, 64}, std::tuple{1000, 128, fp8, 990, 6}, std::tuple{4096, 128, bf16, 4092, 16},
        std::tuple{4096, 64, fp8, 4092, 32}, std::tuple{4096, 64, bf16, 0, 1}}) {
    const std::string what = std::to_string(T) + " " + std::to_string(H) + (kv == bf16 ? " bf16" : " fp8");
    const SparseMlaPlan p = plan_sparse_mla(T, H, 2048, kH100, {}, IndexSharing::unknown, kv);
    EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << what;
    EXPECT_EQ(p.lead_tokens, unsplit) << what;
    EXPECT_EQ(p.lead_splits, 1) << what;
    EXPECT_EQ(p.splits, splits) << what;
    EXPECT_EQ(p.union_pass, unsplit == 0) << what;
    EXPECT_EQ(p.row_order, unsplit == 0 && H == 64) << what;
    EXPECT_EQ(p.ctas, (unsplit + (T - unsplit) * splits) * (H / 64)) << what;
  }
}

// Just past half a wave, where one split per token would leave half the SMs (split-K: half its
// 264 slots) idle: half a wave of tokens in 2 splits, the later ones in as many as fit a wave
// after them if that is at least 8, each set merged by its own combine. Shared rows at 128 heads,
// and at 32 and 64 only with fp8 or on fast memory (HalfWaveLeadAt32And64HeadsWithFp8OrFastMemory:
// on the H100 the gather binds a one-split bf16 wave).
TEST(Planner, JustPastHalfAWaveLeadTokensTakeTwoSplits) {
  // T, H, kv, lead tokens, later splits (0: no lead tokens)
  for (auto [T, H, kv, lead, splits] :
       {std::tuple{133, 16, KvCacheFormat::bf16, 132, 64}, std::tuple{150, 16, KvCacheFormat::bf16, 132, 13},
        std::tuple{165, 16, KvCacheFormat::bf16, 132, 8}, std::tuple{166, 16, KvCacheFormat::bf16, 0, 1},
        std::tuple{133, 16, KvCacheFormat::fp8_ds_mla, 132, 32}, std::tuple{34, 128, KvCacheFormat::bf16, 33, 64},
        std::tuple{41, 128, KvCacheFormat::fp8_ds_mla, 33, 8}, std::tuple{42, 128, KvCacheFormat::bf16, 0, 1},
        std::tuple{67, 64, KvCacheFormat::bf16, 0, 1}, std::tuple{82, 32, KvCacheFormat::bf16, 0, 1}}) {  // 32 / 64 heads: none
    const std::string what = std::to_string(T) + " " + std::to_string(H) + (kv == KvCacheFormat::bf16 ? " bf16" : " fp8");
    const SparseMlaPlan p = plan_sparse_mla(T, H, 2048, kH100, {}, IndexSharing::unknown, kv);
    const bool split_k = H == 16;
    EXPECT_EQ(p.kernel, split_k ? SparseMlaKernel::split_k : SparseMlaKernel::shared_rows) << what;
    EXPECT_EQ(p.lead_tokens, lead) << what;
    EXPECT_EQ(p.lead_splits, lead > 0 ? 2 : 1) << what;
    EXPECT_EQ(p.splits, splits) << what;
    if (lead == 0) continue;
    const int per_token = split_k ? 1 : H / 64;
    EXPECT_EQ(p.ctas, (lead * 2 + (T - lead) * splits) * std::max(per_token, 1)) << what;
    EXPECT_EQ(p.workspace_bytes, size_t(lead * 2 + (T - lead) * splits) * H * 1028) << what;
    EXPECT_EQ(p.launches, 3) << what;  // main and two combines
    EXPECT_FALSE(p.union_pass) << what;
    if (split_k) EXPECT_EQ(p.block_keys, kv == KvCacheFormat::bf16 ? 32 : 64) << what;  // fp8: 64-row tiles (lead chunks of 1024)
  }
}

// At 128 heads the half-wave lead needs lists of 1536 or more (kHalfWaveLeadMinList128Heads):
// shorter lists run one split (docs/perf.md run 581: topk 512 T = 40 43.7 -> 30.3 µs).
TEST(Planner, HalfWaveLeadAt128HeadsNeedsLongLists) {
  for (auto kv : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
    for (int T : {34, 36, 40, 41})
      for (auto [topk, lead] : {std::pair{512, 0}, std::pair{1024, 0}, std::pair{1535, 0}, std::pair{1536, 33}, std::pair{2048, 33}}) {
        const std::string what = std::to_string(T) + " " + std::to_string(topk) + (kv == KvCacheFormat::bf16 ? " bf16" : " fp8");
        const SparseMlaPlan p = plan_sparse_mla(T, 128, topk, kH100, {}, IndexSharing::unknown, kv);
        EXPECT_EQ(p.kernel, SparseMlaKernel::shared_rows) << what;
        EXPECT_EQ(p.lead_tokens, lead) << what;
        if (lead == 0) EXPECT_TRUE(p.splits == 1 && p.ctas == 2 * T && p.launches == 1) << what;
      }
}

// Past whole waves by more than half a wave and up to 2/3 of one, the tokens past them take 3
// splits in two rounds of CTAs: at 128 heads, fp8 at 64 heads and fp8 with lists of 2048 at 16
// and 32 always, bf16 (at 16 and 32 heads with lists of 2048) for a tail of at most 11/20 of a
// wave on the H100 (any on an H200: BfloatTailsTakeTwoRoundsOnFasterMemory); otherwise one split
// (a second wave of whole lists).
TEST(Planner, PastHalfAWaveMoreTheLaterTokensTakeThreeSplitsInTwoRounds) {
  constexpr auto bf16 = KvCacheFormat::bf16, fp8 = KvCacheFormat::fp8_ds_mla;
  // T, H, kv, unsplit tokens, later splits (1: none unsplit)
  for (auto [T, H, kv, unsplit, splits] :
       {std::tuple{397, 16, bf16, 264, 3}, std::tuple{409, 16, bf16, 264, 3}, std::tuple{410, 16, bf16, 0, 1},
        std::tuple{420, 16, fp8, 264, 3}, std::tuple{440, 16, fp8, 264, 3}, std::tuple{441, 16, fp8, 0, 1},
        std::tuple{700, 16, fp8, 528, 3}, std::tuple{700, 16, bf16, 0, 1}, std::tuple{100, 128, bf16, 66, 3},
        std::tuple{110, 128, fp8, 66, 3}, std::tuple{111, 128, bf16, 0, 1}, std::tuple{199, 64, bf16, 132, 3},
        std::tuple{204, 64, bf16, 132, 3}, std::tuple{205, 64, bf16, 0, 1}, std::tuple{210, 64, fp8, 132, 3},
        std::tuple{204, 32, bf16, 132, 3}, std::tuple{205, 32, bf16, 0, 1}, std::tuple{205, 32, fp8, 132, 3}}) {
    const std::string what = std::to_string(T) + " " + std::to_string(H) + (kv == bf16 ? " bf16" : " fp8");
    const SparseMlaPlan p = plan_sparse_mla(T, H, 2048, kH100, {}, IndexSharing::unknown, kv);
    const bool split_k = H == 16;
    EXPECT_EQ(p.kernel, split_k ? SparseMlaKernel::split_k : SparseMlaKernel::shared_rows) << what;
    EXPECT_EQ(p.lead_tokens, unsplit) << what;
    EXPECT_EQ(p.lead_splits, 1) << what;
    EXPECT_EQ(p.splits, splits) << what;
    if (unsplit == 0) continue;
    EXPECT_EQ(p.chunk, 704) << what;  // 64 tiles of 32 (or 32 of 64) in 3 splits of whole tiles
    EXPECT_EQ(p.ctas, (unsplit + (T - unsplit) * 3) * std::max(H / 64, 1)) << what;
    EXPECT_EQ(p.workspace_bytes, size_t(T - unsplit) * H * 3 * 1028) << what;
    EXPECT_EQ(p.launches, 2) << what;  // main and the later tokens' combine
    EXPECT_FALSE(p.union_pass) << what;
  }
  // Shorter lists: at 16 and 32 heads none; at 64 and 128 as full ones (128 heads topk 256: 8
  // tiles in 3 splits of 3).
  for (KvCacheFormat kv : {bf16, fp8}) {
    EXPECT_EQ(plan_sparse_mla(400, 16, 1024, kH100, {}, IndexSharing::unknown, kv).lead_tokens, 0);
    EXPECT_EQ(plan_sparse_mla(200, 32, 1024, kH100, {}, IndexSharing::unknown, kv).lead_tokens, 0);
    const SparseMlaPlan wide = plan_sparse_mla(200, 64, 512, kH100, {}, IndexSharing::unknown, kv);
    EXPECT_EQ(wide.lead_tokens, 132);
    EXPECT_EQ(wide.splits, 3);
  }
  EXPECT_EQ(plan_sparse_mla(210, 64, 512, kH100).lead_tokens, 0);  // bf16, a tail of 0.59 of a wave
  const SparseMlaPlan short_list = plan_sparse_mla(100, 128, 256, kH100);
  EXPECT_EQ(short_list.lead_tokens, 66);
  EXPECT_EQ(short_list.splits, 3);
  EXPECT_EQ(short_list.chunk, 96);
  // 4 tiles: 3 splits of whole tiles would be 2, two rounds of halves, no better than one split.
  EXPECT_EQ(plan_sparse_mla(200, 64, 128, kH100).lead_tokens, 0);
  EXPECT_EQ(plan_sparse_mla(100, 128, 128, kH100).lead_tokens, 0);
}

TEST(Planner, SharedRowsWhenForced) {
  PlanChoice forced;
  forced.kernel = PlanChoice::Kernel::shared_rows;
  EXPECT_EQ(plan_sparse_mla(4096, 64, 2048, kH100, forced).ctas, 4096);       // a token's 64 heads per CTA
  EXPECT_EQ(plan_sparse_mla(4096, 128, 2048, kH100, forced).ctas, 2 * 4096);  // two CTAs per token
  EXPECT_EQ(plan_sparse_mla(4095, 16, 2048, kH100, forced).ctas, 1024);       // 4 tokens per CTA, the last 3
  const SparseMlaPlan small = plan_sparse_mla(5, 32, 63, kH100, forced);     // 2 tokens x 32 heads per CTA
  EXPECT_EQ(small.kernel, SparseMlaKernel::shared_rows);
  EXPECT_EQ(small.ctas, 3);
  EXPECT_EQ(small.workspace_bytes, size_t(3) * ((16 + (4 * 63 + 32) * 4 + (4 * 63 + 8) * 2 + 127) / 128 * 128) + 2 * 16);
  EXPECT_THROW(plan_sparse_mla(5, 16, 2049, kH100, forced), Error);
  // 2^31 - 1 tokens x 8 head blocks / 4 per CTA: more CTAs than one launch takes.
  EXPECT_THROW(plan_sparse_mla(std::numeric_limits<int>::max(), 128, 2048, kH100, forced), Error);
  forced.splits = 7;  // forced splits at any head count, with a union pass below 64 heads
  const SparseMlaPlan split = plan_sparse_mla(5, 16, 2048, kH100, forced);
  EXPECT_EQ(split.ctas, 2 * 7);
  EXPECT_EQ(split.chunk, 320);  // ceil(64 tiles / 7) = 10 tiles
  EXPECT_TRUE(split.union_pass);
  EXPECT_EQ(split.launches, 3);  // union pass, main, combine
  EXPECT_EQ(split.fused_rows, 0);  // 4 tokens' lists per group: no fused rows
  forced.fused_rows = 100;
  EXPECT_THROW(plan_sparse_mla(5, 16, 2048, kH100, forced), Error);
  EXPECT_EQ(plan_sparse_mla(5, 64, 2048, kH100, forced).fused_rows, 100);
  forced.fused_rows = 0;
  forced.splits = -1;
  EXPECT_THROW(plan_sparse_mla(5, 16, 2048, kH100, forced), Error);
  forced.splits = SparseMlaPlan::kMaxSplits + 1;
  EXPECT_THROW(plan_sparse_mla(5, 16, 2048, kH100, forced), Error);
  forced.splits = 0;
  forced.block_keys = 32;
  EXPECT_THROW(plan_sparse_mla(5, 16, 2048, kH100, forced), Error);
  forced = PlanChoice{};
  forced.kernel = PlanChoice::Kernel::split_k;
  EXPECT_EQ(plan_sparse_mla(4096, 16, 2048, kH100, forced).kernel, SparseMlaKernel::split_k);
}

// The early issue (SparseMlaPlan::early_issue): split-K CTAs in position order ask for their next
// tile before the current one lands with an fp8 cache, at 32+ heads, with at most 6 tiles, and
// on fast memory where the grid fits one CTA per SM; 16-head bf16 CTAs of more tiles, two to an
// SM, keep the old order, as row order and shared rows always do.
TEST(Planner, EarlyIssueWhereItPays) {
  const auto plan = [](int T, int H, int topk, const DeviceInfo& dev, KvCacheFormat kv = KvCacheFormat::bf16) {
    return plan_sparse_mla(T, H, topk, dev, PlanChoice{}, IndexSharing::unknown, kv);
  };
  for (const DeviceInfo& dev : {kH100, kH200}) {
    EXPECT_TRUE(plan(1, 16, 2048, dev).early_issue);   // 64 one-tile splits
    EXPECT_TRUE(plan(8, 16, 2048, dev).early_issue);   // 16 splits of 4 tiles
    EXPECT_FALSE(plan(64, 16, 2048, dev).early_issue);  // 256 CTAs of 16 tiles
    EXPECT_TRUE(plan(32, 16, 2048, dev, KvCacheFormat::fp8_ds_mla).early_issue);
    EXPECT_TRUE(plan(8, 32, 2048, dev).early_issue);
    EXPECT_FALSE(plan(4096, 16, 2048, dev).early_issue);  // shared rows
  }
  const SparseMlaPlan sorted = plan(256, 16, 2048, kH100);
  EXPECT_TRUE(sorted.row_order);
  EXPECT_FALSE(sorted.early_issue);
  // One CTA per SM of more than 6 tiles: early on fast memory only (not measured on the H100).
  // A forced split count follows the same rule: T = 32 in 4 splits of 16 tiles.
  PlanChoice four;
  four.splits = 4;
  EXPECT_TRUE(plan_sparse_mla(32, 16, 2048, kH200, four).early_issue);
  EXPECT_FALSE(plan_sparse_mla(32, 16, 2048, kH100, four).early_issue);
}

// On fast memory, 16-head bf16 lists of 2048 positions that the split rules put two CTAs to an
// SM take as many splits as fit one CTA per SM where those hold at most 8 tiles (T = 9-16 for
// lists of 2048 on 132 SMs), with the early issue; fp8, the H100 and longer splits keep theirs.
TEST(Planner, OneCtaPerSmForSixteenHeadListsOnFastMemory) {
  for (int T = 9; T <= 16; ++T) {
    const SparseMlaPlan p = plan_sparse_mla(T, 16, 2048, kH200);
    EXPECT_EQ(p.kernel, SparseMlaKernel::split_k) << T;
    EXPECT_LE(p.ctas, 132) << T;
    EXPECT_GT(p.ctas, 132 * 3 / 4) << T;  // whole tiles per split: 117-132 CTAs
    EXPECT_LE(p.chunk, 8 * 32) << T;
    EXPECT_TRUE(p.early_issue) << T;
    EXPECT_GT(plan_sparse_mla(T, 16, 2048, kH100).ctas, 132) << T;
    EXPECT_GT(plan_sparse_mla(T, 16, 2048, kH200, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).ctas, 132) << T;
  }
  EXPECT_EQ(plan_sparse_mla(16, 16, 2048, kH200).splits, 8);
  EXPECT_EQ(plan_sparse_mla(12, 16, 2048, kH200).splits, 11);
  EXPECT_EQ(plan_sparse_mla(12, 16, 2048, kH100).splits, 22);
  EXPECT_EQ(plan_sparse_mla(24, 16, 2048, kH200).splits, 11);  // 5 splits would hold 13 tiles
  for (int T : {25, 26}) {  // 8-tile splits, not 10 of 7 (params.h kSplitKNotSevenTiles); the H100 keeps 10
    EXPECT_EQ(plan_sparse_mla(T, 16, 2048, kH200).splits, 8) << T;
    EXPECT_EQ(plan_sparse_mla(T, 16, 2048, kH100).splits, 10) << T;
    EXPECT_EQ(plan_sparse_mla(T, 16, 2048, kH200, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).splits,
              plan_sparse_mla(T, 16, 2048, kH100, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).splits) << T;
  }
  EXPECT_EQ(plan_sparse_mla(27, 16, 2048, kH200).splits, 8);
  EXPECT_EQ(plan_sparse_mla(16, 16, 1024, kH200).splits, 8);   // shorter lists keep theirs
  EXPECT_EQ(plan_sparse_mla(16, 16, 1500, kH200).splits, 16);
  EXPECT_EQ(plan_sparse_mla(8, 16, 2048, kH200).splits, 16);   // already one CTA per SM
}

// 32 heads take the 8-tile rule too (params.h kSplitKOneCtaPerSmHeads): T = 5-8 on fast memory,
// 13 / 11 / 8 / 8 splits of 5-8 tiles, two CTAs per token split. Longer splits (T >= 9), the
// H100, fp8 and 64 heads keep theirs; neither the full-lists hint nor the 8-tile rule for 7-tile
// splits applies at 32 heads (T = 13 keeps 10 splits of 7 tiles).
TEST(Planner, OneCtaPerSmForThirtyTwoHeadListsOnFastMemory) {
  const int expected[] = {13, 11, 8, 8};
  for (int T = 5; T <= 8; ++T) {
    const SparseMlaPlan p = plan_sparse_mla(T, 32, 2048, kH200);
    EXPECT_EQ(p.kernel, SparseMlaKernel::split_k) << T;
    EXPECT_EQ(p.splits, expected[T - 5]) << T;
    EXPECT_LE(p.ctas, 132) << T;
    EXPECT_GE(4 * p.ctas, 3 * 132) << T;
    EXPECT_TRUE(p.early_issue) << T;
    EXPECT_GT(plan_sparse_mla(T, 32, 2048, kH100).ctas, 132) << T;
    EXPECT_GT(plan_sparse_mla(T, 32, 2048, kH200, {}, IndexSharing::unknown, KvCacheFormat::fp8_ds_mla).ctas, 132) << T;
  }
  for (int T : {9, 10, 12, 13, 15}) {
    EXPECT_GT(plan_sparse_mla(T, 32, 2048, kH200).ctas, 132) << T;
    EXPECT_EQ(plan_sparse_mla(T, 32, 2048, kH200, {}, IndexSharing::unknown, KvCacheFormat::bf16, 2048).splits,
              plan_sparse_mla(T, 32, 2048, kH200).splits) << T;
  }
  EXPECT_EQ(plan_sparse_mla(13, 32, 2048, kH200).splits, 10);
  EXPECT_EQ(plan_sparse_mla(6, 32, 1024, kH200).splits, plan_sparse_mla(6, 32, 1024, kH100).splits);  // lists of 2048 only
  EXPECT_EQ(plan_sparse_mla(3, 64, 2048, kH200).kernel, SparseMlaKernel::shared_rows);
}

// On fast memory lists of 2048 or more take one-tile splits only while their grid fills at most
// half the SMs: 16 heads T = 2 and 32 heads T = 1 split in two-tile splits (64 CTAs), each CTA
// asking for its second tile early; T = 1 at 16 heads keeps 64 one-tile splits, shorter lists
// and the H100 keep their plans, in both formats.
TEST(Planner, OneTileSplitsOnlyToHalfTheSmsForLongListsOnFastMemory) {
  for (KvCacheFormat f : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla}) {
    const auto plan = [f](int T, int H, int topk, const DeviceInfo& dev) {
      return plan_sparse_mla(T, H, topk, dev, {}, IndexSharing::unknown, f);
    };
    for (auto [T, H] : {std::pair{2, 16}, std::pair{1, 32}}) {
      const SparseMlaPlan p = plan(T, H, 2048, kH200);
      EXPECT_EQ(p.kernel, SparseMlaKernel::split_k) << T << " " << H;
      EXPECT_EQ(p.splits, 32) << T << " " << H;
      EXPECT_EQ(p.chunk, 64) << T << " " << H;
      EXPECT_EQ(p.ctas, 64) << T << " " << H;
      EXPECT_TRUE(p.early_issue) << T << " " << H;
      EXPECT_EQ(plan(T, H, 2049, kH200).splits, 33) << T << " " << H;
      EXPECT_EQ(plan(T, H, 2048, kH100).splits, 64) << T << " " << H;
    }
    EXPECT_EQ(plan(1, 16, 2048, kH200).splits, 64);
    EXPECT_EQ(plan(3, 16, 1024, kH200).splits, plan(3, 16, 1024, kH100).splits);  // lists of 2048 only
    EXPECT_EQ(plan(2, 32, 1024, kH200).splits, 32);
  }
}

// The planner takes min_valid_entries directly too: a count outside [0, topk] is refused there
// by name, as validate() refuses it on a problem.
TEST(Planner, MinValidEntriesOutsideZeroToTopkIsRefused) {
  for (int n : {0, 1, 2047, 2048})
    EXPECT_NO_THROW(plan_sparse_mla(8, 16, 2048, kH200, {}, IndexSharing::unknown, KvCacheFormat::bf16, n)) << n;
  for (int n : {-1, 2049}) {
    try {
      plan_sparse_mla(8, 16, 2048, kH200, {}, IndexSharing::unknown, KvCacheFormat::bf16, n);
      ADD_FAILURE() << "no error for min_valid_entries " << n;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("min_valid_entries: must be in [0, topk = 2048], got " + std::to_string(n)),
                std::string::npos)
          << e.what();
    }
  }
}

// Full lists of at most 768 (min_valid_entries = topk) take no half-wave lead at 16 heads: T =
// 134-165 run one split, on either device and in both formats. Without the hint, with a hint
// short of full, with lists of 1000-2048 and at 32 heads the lead stays.
TEST(Planner, FullShortListsTakeNoHalfWaveLeadAtSixteenHeads) {
  for (KvCacheFormat f : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
    for (const DeviceInfo& dev : {kH100, kH200}) {
      const auto plan = [&](int T, int H, int topk, int min_valid) {
        return plan_sparse_mla(T, H, topk, dev, {}, IndexSharing::unknown, f, min_valid);
      };
      for (int T : {134, 150, 165}) {
        for (int topk : {512, 768}) {
          const SparseMlaPlan hinted = plan(T, 16, topk, topk);
          EXPECT_EQ(hinted.kernel, SparseMlaKernel::split_k) << T << " " << topk;
          EXPECT_EQ(hinted.lead_tokens, 0) << T << " " << topk;
          EXPECT_EQ(hinted.splits, 1) << T << " " << topk;
          EXPECT_EQ(hinted.launches, 1) << T << " " << topk;
          EXPECT_EQ(hinted.workspace_bytes, 0u) << T << " " << topk;
        }
        EXPECT_EQ(plan(T, 16, 512, 0).lead_tokens, 132) << T;    // unhinted: the lead
        EXPECT_EQ(plan(T, 16, 512, 511).lead_tokens, 132) << T;  // a hint short of full
        EXPECT_EQ(plan(T, 16, 1000, 1000).lead_tokens, 132) << T;
        EXPECT_EQ(plan(T, 16, 2048, 2048).lead_tokens, 132) << T;
      }
      EXPECT_EQ(plan(75, 32, 512, 512).lead_tokens, 66);
    }
}

// SparseMlaProblem::min_valid_entries = topk (every list full) lets 16-head bf16 lists of 2048
// on fast memory take one CTA per SM in splits of up to 16 tiles: T = 17-33 on 132 SMs. Any
// smaller hint, the H100, fp8 and 32 heads plan as without it; T = 34 (3 splits of 22 tiles)
// keeps two CTAs per SM.
TEST(Planner, FullListsHintTakesOneCtaPerSmToSixteenTiles) {
  const auto plan = [](int T, const DeviceInfo& dev, int min_valid, KvCacheFormat f = KvCacheFormat::bf16, int H = 16) {
    return plan_sparse_mla(T, H, 2048, dev, {}, IndexSharing::unknown, f, min_valid);
  };
  for (int T = 17; T <= 33; ++T) {
    const SparseMlaPlan p = plan(T, kH200, 2048);
    EXPECT_EQ(p.kernel, SparseMlaKernel::split_k) << T;
    EXPECT_LE(p.ctas, 132) << T;
    EXPECT_GT(p.ctas, 132 * 3 / 4) << T;
    EXPECT_LE(p.chunk, 16 * 32) << T;
    EXPECT_TRUE(p.early_issue) << T;
    const SparseMlaPlan unhinted = plan(T, kH200, 0);
    EXPECT_GT(unhinted.ctas, 132) << T;
    EXPECT_EQ(plan(T, kH200, 2047).splits, unhinted.splits) << T;  // not every list full
    EXPECT_EQ(plan(T, kH100, 2048).splits, plan(T, kH100, 0).splits) << T;
    EXPECT_EQ(plan(T, kH200, 2048, KvCacheFormat::fp8_ds_mla).splits, plan(T, kH200, 0, KvCacheFormat::fp8_ds_mla).splits) << T;
    EXPECT_EQ(plan(T, kH200, 2048, KvCacheFormat::bf16, 32).splits, plan(T, kH200, 0, KvCacheFormat::bf16, 32).splits) << T;
  }
  EXPECT_EQ(plan(24, kH200, 2048).splits, 5);
  EXPECT_EQ(plan(33, kH200, 2048).splits, 4);
  for (int T : {9, 16, 34, 40, 64, 256}) EXPECT_EQ(plan(T, kH200, 2048).splits, plan(T, kH200, 0).splits) << T;
  // Full lists of 1024 too (kSplitKOneCtaPerSmFullListsAlso): one CTA per SM to T = 66, but not
  // where a quarter of the SMs would idle (T = 45-49: 2 splits, 90-98 CTAs), which keep the
  // unhinted plan, as do fp8, 32 heads and T = 67 on.
  const auto plan1024 = [](int T, int min_valid, KvCacheFormat kv = KvCacheFormat::bf16, int H = 16) {
    return plan_sparse_mla(T, H, 1024, kH200, {}, IndexSharing::unknown, kv, min_valid);
  };
  for (int T = 17; T <= 66; ++T) {
    const SparseMlaPlan hinted = plan1024(T, 1024), unhinted = plan1024(T, 0);
    if (T >= 45 && T <= 49) {
      EXPECT_EQ(hinted.splits, unhinted.splits) << T;
      EXPECT_GT(hinted.ctas, 132) << T;
    } else {
      EXPECT_LE(hinted.ctas, 132) << T;
      EXPECT_GE(4 * hinted.ctas, 3 * 132) << T;
      EXPECT_LT(hinted.splits, unhinted.splits) << T;
      EXPECT_TRUE(hinted.early_issue) << T;
    }
  }
  EXPECT_EQ(plan1024(24, 1024).splits, 5);
  EXPECT_EQ(plan1024(60, 1024).splits, 2);
  for (int T : {24, 60}) {
    EXPECT_EQ(plan1024(T, 1024, KvCacheFormat::fp8_ds_mla).splits, plan1024(T, 0, KvCacheFormat::fp8_ds_mla).splits) << T;
    EXPECT_EQ(plan1024(T, 1024, KvCacheFormat::bf16, 32).splits, plan1024(T, 0, KvCacheFormat::bf16, 32).splits) << T;
    EXPECT_EQ(plan1024(T, 1023).splits, plan1024(T, 0).splits) << T;  // not full: no hint
  }
  for (int T : {67, 100}) EXPECT_EQ(plan1024(T, 1024).splits, plan1024(T, 0).splits) << T;
  // The hint is checked like an argument: a list cannot hold more valid entries than topk.
  EXPECT_THROW(plan(24, kH200, 2049), Error);
  EXPECT_THROW(plan(24, kH200, -1), Error);
}

// Fused rows (a token of at most one chunk's valid rows finished by split 0) are planned only
// where a token could have that few: not when min_valid_entries exceeds the chunk. A hint up to
// the chunk keeps them; a forced threshold stays as forced. Split-K and shared rows (64 / 128
// heads, one token per group), both cards, both caches.
TEST(Planner, MinValidEntriesAboveTheChunkPlanNoFusedRows) {
  int split_k = 0, shared_rows = 0;
  for (const DeviceInfo& dev : {kH100, kH200})
    for (KvCacheFormat f : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
      for (int H : {16, 32, 64, 128})
        for (int T : {1, 2, 4, 8, 16, 64}) {
          const auto plan = [&](int min_valid, PlanChoice choice = {}) {
            return plan_sparse_mla(T, H, 2048, dev, choice, IndexSharing::unknown, f, min_valid);
          };
          const SparseMlaPlan unhinted = plan(0);
          if (unhinted.fused_rows == 0) continue;
          ++(unhinted.kernel == SparseMlaKernel::split_k ? split_k : shared_rows);
          const std::string at = "T " + std::to_string(T) + " H " + std::to_string(H);
          EXPECT_EQ(unhinted.fused_rows, unhinted.chunk) << at;
          const SparseMlaPlan at_chunk = plan(unhinted.chunk);
          if (at_chunk.splits == unhinted.splits) EXPECT_EQ(at_chunk.fused_rows, unhinted.chunk) << at;
          const SparseMlaPlan above = plan(unhinted.chunk + 1);
          EXPECT_EQ(above.fused_rows, 0) << at;
          EXPECT_EQ(plan(2048).fused_rows, 0) << at;
          PlanChoice forced;
          forced.fused_rows = 7;
          EXPECT_EQ(plan(2048, forced).fused_rows, 7) << at;
        }
  EXPECT_GT(split_k, 20);
  EXPECT_GT(shared_rows, 10);
}

// Lists of at most 32 positions (a caller's topk = L for short contexts) run as one split per
// token in position order, with no fused rows or lead tokens: the split-K launcher's tiny-list
// instance (one ballot per warp counts the list). At 16 and 32 heads below 2048 tokens (row
// order starts at 2^17 pairs, shared rows at 16 heads without a hint at 2048 tokens); at 64
// and 128 heads in small calls (shared rows' one-token groups take larger ones).
TEST(Planner, ListsOfAtMost32PositionsTakeOneSplitInPositionOrder) {
  for (KvCacheFormat format : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
    for (const DeviceInfo& dev : {kH100, kH200})
      for (int H : {16, 32, 64, 128})
        for (int topk : {1, 2, 3, 17, 32})
          for (int T : {1, 2, 5, 63, 64, 133, 1000, 2047}) {
            if (H >= 64 && T > 5) continue;
            const SparseMlaPlan p = plan_sparse_mla(T, H, topk, dev, PlanChoice{}, IndexSharing::unknown, format);
            EXPECT_TRUE(p.kernel == SparseMlaKernel::split_k && p.splits == 1 && p.fused_rows <= 0 && p.lead_tokens == 0 &&
                        !p.row_order && !p.balanced && p.block_keys == 32 && std::min(p.chunk, p.topk) <= 32)
                << "H " << H << " topk " << topk << " T " << T << " splits " << p.splits << " fused_rows " << p.fused_rows
                << " lead " << p.lead_tokens << " row_order " << p.row_order << " chunk " << p.chunk
                << " kernel " << int(p.kernel) << " block_keys " << p.block_keys << " balanced " << p.balanced;
          }
}

TEST(Planner, TopkBeyondOneChunkAlwaysSplits) {
  const SparseMlaPlan p = plan_sparse_mla(4096, 16, 5000, kH100);
  EXPECT_EQ(p.splits, 3);
}

TEST(Planner, ForcedChoicesAreHonouredAndChecked) {
  const SparseMlaPlan p = plan_sparse_mla(4, 32, 2048, kH100, PlanChoice{64, 7});
  EXPECT_EQ(p.block_keys, 64);
  EXPECT_EQ(p.chunk, 293);  // ceil(2048 / 7): a forced split may end mid-tile
  EXPECT_EQ(p.splits, 7);
  EXPECT_EQ(p.ctas, 4 * 2 * 7);
  EXPECT_EQ(p.workspace_bytes, size_t(4) * 32 * 7 * 1028);
  const SparseMlaPlan one = plan_sparse_mla(4, 16, 2048, kH100, PlanChoice{0, 1});
  EXPECT_EQ(one.splits, 1);
  EXPECT_EQ(one.workspace_bytes, 0u);
  EXPECT_THROW(plan_sparse_mla(4, 16, 2048, kH100, PlanChoice{48, 0}), Error);  // no such tile
  EXPECT_THROW(plan_sparse_mla(4, 16, 5000, kH100, PlanChoice{0, 2}), Error);   // chunk > 2048
  EXPECT_THROW(plan_sparse_mla(4, 16, 2048, kH100, PlanChoice{0, 5000}), Error);
}

// Balanced split-K (SparseMlaPlan::balanced): one wave of split slots (two CTAs per SM), at
// least one per token, given out by a schedule the caller makes; the planner never picks it.
TEST(Planner, BalancedScheduleWhenForcedAndItsLimits) {
  PlanChoice on;
  on.balanced = 1;
  for (int T : {1, 8, 64, 300, 1024})
    for (int H : {16, 32, 64, 128}) {
      SCOPED_TRACE(::testing::Message() << "T " << T << " H " << H);
      const SparseMlaPlan planner = plan_sparse_mla(T, H, 2048, kH100);
      EXPECT_FALSE(planner.balanced);
      EXPECT_EQ(planner.schedule_bytes, 0u);
      const SparseMlaPlan p = plan_sparse_mla(T, H, 2048, kH100, on, IndexSharing::consecutive);
      EXPECT_TRUE(p.balanced);
      EXPECT_EQ(p.kernel, SparseMlaKernel::split_k);
      EXPECT_EQ(p.block_keys, 32);
      EXPECT_EQ(p.chunk, 32);
      EXPECT_EQ(p.splits, 64);  // the most one token can get: a split per tile
      EXPECT_EQ(p.fused_rows, 0);
      EXPECT_FALSE(p.row_order);
      const int slots = std::max(T, 264 / (H / 16));
      EXPECT_EQ(p.ctas, slots * (H / 16));
      EXPECT_EQ(p.launches, 2);  // main, combine
      EXPECT_EQ(p.workspace_bytes, size_t(slots) * H * 1028);
      // header, a 16-byte entry per slot, 8 + 4 bytes per token, rounded to 16
      EXPECT_EQ(p.schedule_bytes, (16 + size_t(slots) * 16 + size_t(T) * 12 + 15) / 16 * 16);
    }
  const SparseMlaPlan empty = plan_sparse_mla(0, 16, 2048, kH100, on);
  EXPECT_EQ(empty.launches, 0);
  EXPECT_EQ(empty.schedule_bytes, 0u);
  EXPECT_EQ(plan_sparse_mla(4, 16, 63, kH100, on).splits, 2);
  EXPECT_THROW(plan_sparse_mla(1025, 16, 2048, kH100, on), Error);  // 8 tokens per thread of one block
  EXPECT_THROW(plan_sparse_mla(4, 16, 2049, kH100, on), Error);     // longer than one CTA reads
  EXPECT_THROW(plan_sparse_mla(4, 16, 32, kH100, on), Error);       // one tile: one split
  // Choices a balanced plan cannot take.
  const std::vector<std::function<void(PlanChoice&)>> conflicts = {
      [](PlanChoice& c) { c.block_keys = 64; },   [](PlanChoice& c) { c.splits = 4; },
      [](PlanChoice& c) { c.fused_rows = 100; },  [](PlanChoice& c) { c.row_order = 1; },
      [](PlanChoice& c) { c.kernel = PlanChoice::Kernel::shared_rows; }, [](PlanChoice& c) { c.balanced = 2; }};
  for (size_t i = 0; i < conflicts.size(); ++i) {
    PlanChoice bad = on;
    conflicts[i](bad);
    EXPECT_THROW(plan_sparse_mla(4, 16, 2048, kH100, bad), Error) << "conflict " << i;
  }
  PlanChoice off;
  off.balanced = -1;
  EXPECT_FALSE(plan_sparse_mla(8, 16, 2048, kH100, off).balanced);
}

TEST(Planner, RejectsUnsupportedShapesAndDevices) {
  EXPECT_THROW(plan_sparse_mla(1, 24, 2048, kH100), Error);
  EXPECT_THROW(plan_sparse_mla(1, 8, 2048, kH100), Error);
  EXPECT_THROW(plan_sparse_mla(1, 16, 0, kH100), Error);
  EXPECT_THROW(plan_sparse_mla(-1, 16, 2048, kH100), Error);
  EXPECT_THROW(plan_sparse_mla(1, 16, 2048, DeviceInfo{108, 166912, 8, 0}), Error);
  EXPECT_THROW(plan_sparse_mla(1, 16, 2048, DeviceInfo{132, 48 * 1024, 9, 0}), Error);  // too little smem
}

}  // namespace
}  // namespace dsa
