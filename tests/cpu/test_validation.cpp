// Argument validation (each bad argument named in the message), index counting, and the
// workload generators the tests and dsa-bench rely on.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dsa/sparse_mla.h"
#include "error_message.h"
#include "workload.h"

namespace dsa {
namespace {

// Host buffers large enough for the strides used below; only addresses matter to validate().
struct Buffers {
  std::vector<uint16_t> big = std::vector<uint16_t>(1 << 20);
  std::vector<int32_t> idx = std::vector<int32_t>(4096);
  std::vector<float> lse = std::vector<float>(4096);
};

SparseMlaProblem good(Buffers& b) {
  SparseMlaProblem p;
  p.num_tokens = 2; p.num_heads = 16; p.topk = 64; p.page_size = 64; p.num_pages = 10; p.sm_scale = 0.1f;
  p.q_nope = b.big.data(); p.q_pe = b.big.data(); p.ckv_cache = b.big.data(); p.kpe_cache = b.big.data();
  p.indices = b.idx.data(); p.out = b.big.data(); p.lse = b.lse.data();
  return p;
}

void expect_error_naming(const SparseMlaProblem& p, const std::string& name) {
  try {
    validate(p);
    ADD_FAILURE() << "no error; expected one naming " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(Validate, AcceptsAGoodProblem) {
  Buffers b;
  EXPECT_NO_THROW(validate(good(b)));
  SparseMlaProblem p = good(b);
  p.num_tokens = 0;  // T = 0 is a valid no-op
  EXPECT_NO_THROW(validate(p));
  p = good(b);
  p.ckv_row_stride = 576;  // one cache holding ckv|kpe rows
  p.kpe_row_stride = 576;
  p.kpe_cache = b.big.data() + 512;
  EXPECT_NO_THROW(validate(p));
  p = good(b);  // head-major output [H, T, 512] does not overlap
  p.out_head_stride = 2 * 512;
  p.out_token_stride = 512;
  EXPECT_NO_THROW(validate(p));
}

TEST(Validate, IndexSharingMustBeOneOfTheHints) {
  Buffers b;
  SparseMlaProblem p = good(b);
  for (IndexSharing s : {IndexSharing::unknown, IndexSharing::consecutive, IndexSharing::none}) {
    p.index_sharing = s;
    EXPECT_NO_THROW(validate(p));
  }
  p.index_sharing = static_cast<IndexSharing>(3);
  expect_error_naming(p, "index_sharing");
}

// min_valid_entries is a hint, but one no list can satisfy (past topk) or a negative count is
// refused by name.
TEST(Validate, MinValidEntriesMustLieInZeroToTopk) {
  Buffers b;
  SparseMlaProblem p = good(b);
  for (int n : {0, 1, 63, 64}) {
    p.min_valid_entries = n;
    EXPECT_NO_THROW(validate(p)) << n;
  }
  for (int n : {-1, 65}) {
    p.min_valid_entries = n;
    expect_error_naming(p, "min_valid_entries");
  }
}

// A forced shared-rows plan on a cache too large for its entry words (row << 4 | tokens) is
// refused before anything is launched, naming the limit and the kernel to use instead.
TEST(Validate, SharedRowsRefusesCachesOf2To28Rows) {
  Buffers b;
  SparseMlaProblem p = good(b);
  p.page_size = 64;
  p.num_pages = 1 << 22;  // 2^28 rows
  PlanChoice forced;
  forced.kernel = PlanChoice::Kernel::shared_rows;
  const SparseMlaPlan plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{132, 232448, 9, 0}, forced);
  try {
    sparse_mla_forward(p, plan, nullptr, 0, nullptr);
    ADD_FAILURE() << "no error for 2^28 rows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2^28"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("split_k"), std::string::npos) << e.what();
  }
  p.num_pages = (1 << 22) - 1;  // one page less: accepted up to the launch, which needs a GPU
  EXPECT_NO_THROW(validate(p));
}

TEST(Validate, SharedRowsRefusesRowStridesOf2To31) {
  Buffers b;
  SparseMlaProblem p = good(b);
  PlanChoice forced;
  forced.kernel = PlanChoice::Kernel::shared_rows;
  const SparseMlaPlan plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{132, 232448, 9, 0}, forced);
  for (int which = 0; which < 2; ++which) {
    SparseMlaProblem q = p;
    (which == 0 ? q.ckv_row_stride : q.kpe_row_stride) = int64_t{1} << 31;
    try {
      sparse_mla_forward(q, plan, nullptr, 0, nullptr);
      ADD_FAILURE() << "no error for a row stride of 2^31 (" << which << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("2^31"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("split_k"), std::string::npos) << e.what();
    }
  }
}

// The shared-rows plan's workspace holds each group's union (written by its first
// kernel, read by the second): too small or missing is refused by name before any launch.
TEST(Validate, SharedRowsForwardNeedsItsWorkspace) {
  Buffers b;
  const SparseMlaProblem p = good(b);
  PlanChoice forced;
  forced.kernel = PlanChoice::Kernel::shared_rows;
  const SparseMlaPlan plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{132, 232448, 9, 0}, forced);
  ASSERT_GT(plan.workspace_bytes, 0u);
  const auto error_of = [&](void* ws, size_t bytes) {
    return testing::error_message([&] { sparse_mla_forward(p, plan, ws, bytes, nullptr); });
  };
  EXPECT_NE(error_of(b.big.data(), plan.workspace_bytes - 1).find("workspace_bytes"), std::string::npos);
  EXPECT_NE(error_of(nullptr, plan.workspace_bytes).find("workspace"), std::string::npos);
  EXPECT_NE(error_of(b.big.data() + 1, plan.workspace_bytes).find("workspace"), std::string::npos);  // misaligned
}

// A hand-edited plan whose fused-rows threshold the kernel cannot honour is refused by name.
TEST(Validate, ForwardRefusesAnInconsistentFusedRowsThreshold) {
  Buffers b;
  const SparseMlaProblem p = good(b);
  PlanChoice two_splits;  // the planner keeps a list of 64 whole
  two_splits.splits = 2;
  const SparseMlaPlan base = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{132, 232448, 9, 0}, two_splits);
  ASSERT_GT(base.splits, 1);
  const auto refused = [&](SparseMlaPlan plan) {
    return testing::error_message([&] { sparse_mla_forward(p, plan, nullptr, plan.workspace_bytes, nullptr); })
               .find("fused_rows") != std::string::npos;
  };
  SparseMlaPlan plan = base;
  plan.fused_rows = -1;
  EXPECT_TRUE(refused(plan));
  plan.fused_rows = SparseMlaPlan::kMaxChunk + 1;
  EXPECT_TRUE(refused(plan));
  plan = base;
  plan.chunk += 16;  // split starts off the 32-position groups the kernel counts
  plan.splits = (p.topk + plan.chunk - 1) / plan.chunk;
  EXPECT_TRUE(refused(plan));
}

// A hand-edited plan's split_softmax where no kernel instance has it (16-row tiles, shared rows)
// is refused by name before any launch.
TEST(Validate, ForwardRefusesASplitSoftmaxWithoutItsKernel) {
  Buffers b;
  const SparseMlaProblem p = good(b);
  const auto refused = [&](const SparseMlaPlan& plan) {
    return testing::error_message([&] { sparse_mla_forward(p, plan, b.big.data(), plan.workspace_bytes, nullptr); })
               .find("split_softmax") != std::string::npos;
  };
  PlanChoice keys16;
  keys16.block_keys = 16;
  SparseMlaPlan plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{132, 232448, 9, 0}, keys16);
  ASSERT_FALSE(plan.split_softmax);
  plan.split_softmax = true;
  EXPECT_TRUE(refused(plan));
  PlanChoice rows;
  rows.kernel = PlanChoice::Kernel::shared_rows;
  plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{132, 232448, 9, 0}, rows);
  plan.split_softmax = true;
  EXPECT_TRUE(refused(plan));
}

// A hand-edited shared-rows plan with split-K's early issue (SparseMlaPlan::early_issue) is
// refused by name before any launch.
TEST(Validate, ForwardRefusesAnEarlyIssueOnSharedRows) {
  Buffers b;
  const SparseMlaProblem p = good(b);
  PlanChoice rows;
  rows.kernel = PlanChoice::Kernel::shared_rows;
  SparseMlaPlan plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{132, 232448, 9, 0}, rows);
  ASSERT_FALSE(plan.early_issue);
  plan.early_issue = true;
  EXPECT_NE(testing::error_message([&] { sparse_mla_forward(p, plan, b.big.data(), plan.workspace_bytes, nullptr); })
                .find("early_issue is split_k's"),
            std::string::npos);
}

// A hand-edited plan's lead_tokens / lead_splits (SparseMlaPlan::lead_tokens) are refused by name
// unless it has splits, fewer lead tokens than tokens and lead_splits in [1, 64], in a shared_rows
// plan without a union pass or a split_k plan not balanced with topk <= kMaxChunk and no empty
// lead split; its workspace holds the partials. All before any launch.
TEST(Validate, ForwardRefusesInconsistentLeadTokens) {
  Buffers b;
  SparseMlaProblem p = good(b);
  p.num_tokens = 9, p.num_heads = 64, p.topk = 2048;
  const SparseMlaPlan base = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{8, 232448, 9, 0});
  ASSERT_EQ(base.lead_tokens, 8);  // one wave of 8 unsplit, the 9th token in 8 splits
  ASSERT_EQ(base.splits, 8);
  ASSERT_EQ(base.workspace_bytes, size_t{1} * 64 * 8 * 1028);
  const auto error = [&](const SparseMlaPlan& plan, size_t bytes) {
    return testing::error_message([&] { sparse_mla_forward(p, plan, b.big.data(), bytes, nullptr); });
  };
  EXPECT_NE(error(base, base.workspace_bytes - 1).find("workspace_bytes"), std::string::npos);
  const auto refused = [&](const SparseMlaPlan& plan) { return error(plan, base.workspace_bytes).find("lead_tokens") != std::string::npos; };
  for (int unsplit : {-1, 9, 10}) {
    SparseMlaPlan plan = base;
    plan.lead_tokens = unsplit;
    EXPECT_TRUE(refused(plan)) << unsplit;
  }
  for (int lead_splits : {0, 65}) {
    SparseMlaPlan plan = base;
    plan.lead_splits = lead_splits;
    EXPECT_TRUE(refused(plan)) << lead_splits;
  }
  SparseMlaPlan plan = base;
  plan.union_pass = true;
  EXPECT_TRUE(refused(plan));
  plan = base;
  plan.splits = 1;
  EXPECT_TRUE(refused(plan));
  // split_k takes them, but not in a balanced plan, nor with lists longer than an unsplit CTA holds.
  PlanChoice balanced;
  balanced.balanced = 1;
  plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{8, 232448, 9, 0}, balanced);
  plan.lead_tokens = 1;
  EXPECT_TRUE(refused(plan));
  PlanChoice split_k;
  split_k.kernel = PlanChoice::Kernel::split_k;
  split_k.splits = 3;
  SparseMlaProblem longer = p;
  longer.topk = 5000;
  plan = plan_sparse_mla(longer.num_tokens, longer.num_heads, longer.topk, DeviceInfo{8, 232448, 9, 0}, split_k);
  plan.lead_tokens = 1;
  EXPECT_NE(testing::error_message([&] { sparse_mla_forward(longer, plan, b.big.data(), plan.workspace_bytes, nullptr); }).find("lead_tokens"),
            std::string::npos);
  // Split-K's lead splits must each hold a whole tile of the list: 64 of topk 600 leave some empty.
  SparseMlaProblem shorter = p;
  shorter.topk = 600;
  split_k.splits = 2;
  plan = plan_sparse_mla(shorter.num_tokens, shorter.num_heads, shorter.topk, DeviceInfo{8, 232448, 9, 0}, split_k);
  plan.lead_tokens = 1;
  plan.lead_splits = 64;
  EXPECT_NE(testing::error_message([&] { sparse_mla_forward(shorter, plan, b.big.data(), plan.workspace_bytes, nullptr); }).find("lead_tokens"),
            std::string::npos);
  // With fused rows, a lead split must start on a 32-position boundary (16-row tiles: 608 / 2 =
  // 304; the later tokens' 19 splits of 32 fuse).
  shorter.topk = 608;
  split_k.block_keys = 16;
  split_k.splits = 19;
  plan = plan_sparse_mla(shorter.num_tokens, shorter.num_heads, shorter.topk, DeviceInfo{8, 232448, 9, 0}, split_k);
  ASSERT_GT(plan.fused_rows, 0);
  plan.lead_tokens = 1;
  plan.lead_splits = 2;
  EXPECT_NE(testing::error_message([&] { sparse_mla_forward(shorter, plan, b.big.data(), plan.workspace_bytes, nullptr); }).find("lead_tokens"),
            std::string::npos);
}

// A balanced plan's schedule (SparseMlaPlan::balanced): every misuse is refused by name before
// any launch, so these run without a GPU; the schedule reads only the indices and the shape.
TEST(Validate, BalancedScheduleMisuseIsNamedBeforeAnyLaunch) {
  Buffers b;
  const DeviceInfo h100{132, 232448, 9, 0};
  SparseMlaProblem p = good(b);
  PlanChoice on;
  on.balanced = 1;
  const SparseMlaPlan plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, h100, on);
  const SparseMlaPlan plain = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, h100);
  ASSERT_TRUE(plan.balanced);
  ASSERT_GT(plan.schedule_bytes, 0u);
  void* sched = b.big.data();
  const auto make = [&](const SparseMlaProblem& q, const SparseMlaPlan& pl, void* s, size_t bytes) {
    return testing::error_message([&] { make_sparse_mla_schedule(q, pl, s, bytes, nullptr); });
  };
  const auto forward = [&](const SparseMlaProblem& q, const SparseMlaPlan& pl) {
    return testing::error_message([&] { sparse_mla_forward(q, pl, b.big.data(), pl.workspace_bytes, nullptr); });
  };
  EXPECT_NE(make(p, plain, sched, plan.schedule_bytes).find("plan"), std::string::npos);  // not balanced
  SparseMlaProblem other = p;
  other.num_tokens = 3;
  EXPECT_NE(make(other, plan, sched, plan.schedule_bytes).find("another shape"), std::string::npos);
  EXPECT_NE(make(p, plan, sched, plan.schedule_bytes - 16).find("schedule_bytes"), std::string::npos);
  EXPECT_NE(make(p, plan, nullptr, plan.schedule_bytes).find("schedule"), std::string::npos);
  EXPECT_NE(make(p, plan, b.big.data() + 1, plan.schedule_bytes).find("schedule"), std::string::npos);  // misaligned
  SparseMlaProblem no_indices = p;
  no_indices.indices = nullptr;
  EXPECT_NE(make(no_indices, plan, sched, plan.schedule_bytes).find("indices"), std::string::npos);
  SparseMlaPlan edited = plan;
  edited.ctas += 1;
  EXPECT_NE(make(p, edited, sched, plan.schedule_bytes).find("inconsistent balanced"), std::string::npos);
  EXPECT_NE(forward(p, plan).find("schedule"), std::string::npos);  // a balanced plan without one
  p.schedule = sched;
  EXPECT_NE(forward(p, plan).find("schedule_bytes"), std::string::npos);  // its size left 0
  p.schedule_bytes = plan.schedule_bytes - 16;
  EXPECT_NE(forward(p, plan).find("schedule_bytes"), std::string::npos);  // a buffer too small
  p.schedule_bytes = plan.schedule_bytes;
  EXPECT_NE(forward(p, plain).find("schedule"), std::string::npos);  // one, for a plan that takes none
  EXPECT_NE(forward(p, edited).find("inconsistent balanced"), std::string::npos);
  // The schedule needs no q, cache or output pointers (nothing to launch for T = 0).
  SparseMlaProblem indices_only;
  indices_only.num_heads = 16; indices_only.topk = 64; indices_only.page_size = 64; indices_only.num_pages = 10;
  indices_only.indices = b.idx.data();
  const SparseMlaPlan empty = plan_sparse_mla(0, 16, 64, h100, on);
  EXPECT_EQ(make(indices_only, empty, nullptr, 0), "no error");
}

TEST(Validate, NamesTheBadArgument) {
  Buffers b;
  const auto mut = [&](auto f, const std::string& name) {
    SparseMlaProblem p = good(b);
    f(p);
    expect_error_naming(p, name);
  };
  mut([](SparseMlaProblem& p) { p.q_nope = nullptr; }, "q_nope");
  mut([](SparseMlaProblem& p) { p.q_pe = nullptr; }, "q_pe");
  mut([](SparseMlaProblem& p) { p.ckv_cache = nullptr; }, "ckv_cache");
  mut([](SparseMlaProblem& p) { p.kpe_cache = nullptr; }, "kpe_cache");
  mut([](SparseMlaProblem& p) { p.indices = nullptr; }, "indices");
  mut([](SparseMlaProblem& p) { p.out = nullptr; }, "out");
  mut([](SparseMlaProblem& p) { p.lse = nullptr; }, "lse");
  mut([&](SparseMlaProblem& p) { p.q_nope = b.big.data() + 4; }, "q_nope");  // 8-byte aligned only
  mut([&](SparseMlaProblem& p) { p.ckv_cache = b.big.data() + 1; }, "ckv_cache");
  mut([&](SparseMlaProblem& p) { p.out = b.big.data() + 2; }, "out");
  mut([](SparseMlaProblem& p) { p.num_heads = 24; }, "num_heads");
  mut([](SparseMlaProblem& p) { p.num_heads = 8; }, "num_heads");
  mut([](SparseMlaProblem& p) { p.num_tokens = -1; }, "num_tokens");
  mut([](SparseMlaProblem& p) { p.topk = 0; }, "topk");
  mut([](SparseMlaProblem& p) { p.page_size = 0; }, "page_size");
  mut([](SparseMlaProblem& p) { p.num_pages = 0; }, "num_pages");
  mut([](SparseMlaProblem& p) { p.num_pages = 1 << 30; p.page_size = 64; }, "num_pages");
  mut([](SparseMlaProblem& p) { p.sm_scale = 1.f / 0.f; }, "sm_scale");
  mut([](SparseMlaProblem& p) { p.q_nope_head_stride = 516; }, "q_nope_head_stride");
  mut([](SparseMlaProblem& p) { p.q_pe_token_stride = -64; }, "q_pe_token_stride");
  mut([](SparseMlaProblem& p) { p.ckv_row_stride = 256; }, "ckv_row_stride");
  mut([](SparseMlaProblem& p) { p.kpe_row_stride = 32; }, "kpe_row_stride");
  mut([](SparseMlaProblem& p) { p.indices_token_stride = 32; }, "indices_token_stride");
  mut([](SparseMlaProblem& p) { p.out_head_stride = 256; }, "out");        // rows of heads overlap
  mut([](SparseMlaProblem& p) { p.out_token_stride = 512 * 8; }, "out");   // tokens overlap
  mut([](SparseMlaProblem& p) { p.lse_token_stride = 8; }, "lse");
  mut([&](SparseMlaProblem& p) { p.topk_lengths = reinterpret_cast<const int32_t*>(b.big.data() + 1); }, "topk_lengths");
}

TEST(Validate, TopkLengthsAreOptional) {
  Buffers b;
  SparseMlaProblem p = good(b);
  p.topk_lengths = b.idx.data();
  EXPECT_NO_THROW(validate(p));
}

// An fp8_ds_mla cache is one array of 656-byte rows: a kpe cache or stride given with it, a row
// stride that is not a multiple of 16 bytes or shorter than a row, or a format that does not
// exist are refused by name.
TEST(Validate, Fp8CacheArgumentsAreNamed) {
  Buffers b;
  const auto fp8 = [&] {
    SparseMlaProblem p = good(b);
    p.kv_format = KvCacheFormat::fp8_ds_mla;
    p.kpe_cache = nullptr;
    return p;
  };
  EXPECT_NO_THROW(validate(fp8()));
  SparseMlaProblem p = fp8();
  p.ckv_row_stride = 1024;  // rows inside a wider buffer
  EXPECT_NO_THROW(validate(p));
  const auto mut = [&](auto f, const std::string& name) {
    SparseMlaProblem q = fp8();
    f(q);
    expect_error_naming(q, name);
  };
  mut([&](SparseMlaProblem& q) { q.kpe_cache = b.big.data(); }, "kpe_cache");
  mut([](SparseMlaProblem& q) { q.kpe_row_stride = 64; }, "kpe_row_stride");
  mut([](SparseMlaProblem& q) { q.ckv_row_stride = 576; }, "ckv_row_stride");  // shorter than a row
  mut([](SparseMlaProblem& q) { q.ckv_row_stride = 664; }, "ckv_row_stride");  // not a multiple of 16
  mut([](SparseMlaProblem& q) { q.ckv_cache = nullptr; }, "ckv_cache");
  mut([](SparseMlaProblem& q) { q.kv_format = static_cast<KvCacheFormat>(7); }, "kv_format");
}

// On split-K the fp8 cache runs the full kernel with the planner's 32-row tiles: another tile
// size is refused by name before any launch.
TEST(Validate, Fp8ForwardRefusesOtherSplitKTiles) {
  Buffers b;
  SparseMlaProblem p = good(b);
  p.kv_format = KvCacheFormat::fp8_ds_mla;
  p.kpe_cache = nullptr;
  const DeviceInfo dev{132, 232448, 9, 0};
  PlanChoice tiles;
  tiles.block_keys = 16;
  const SparseMlaPlan plan = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, dev, tiles);
  const std::string small = testing::error_message([&] { sparse_mla_forward(p, plan, b.big.data(), plan.workspace_bytes, nullptr); });
  EXPECT_NE(small.find("32- or 64-row tiles"), std::string::npos) << small;
}

// A hand-edited share-probe plan (SparseMlaPlan::share_probe) that no kernel pair can run is
// refused by name before any launch: a line outside [1, 1000], other than 16 heads, shared rows
// without a union pass or in splits, split-K tiles other than its instances' (bf16 32 rows, fp8
// 32 or 64); and its workspace must hold the probe's pairs after the rest.
TEST(Validate, ForwardRefusesAnInconsistentShareProbe) {
  Buffers b;
  SparseMlaProblem p = good(b);
  PlanChoice forced;
  forced.kernel = PlanChoice::Kernel::shared_rows;
  SparseMlaPlan base = plan_sparse_mla(p.num_tokens, p.num_heads, p.topk, DeviceInfo{132, 232448, 9, 0}, forced);
  ASSERT_TRUE(base.union_pass);
  ASSERT_EQ(base.splits, 1);
  const size_t shared_bytes = base.workspace_bytes;
  base.share_probe = {710, 32, false, true};
  base.launches += 2;
  base.workspace_bytes = (shared_bytes + 15) / 16 * 16 + 16 * 8;
  const auto error_of = [&](const SparseMlaProblem& prob, const SparseMlaPlan& plan, size_t bytes) {
    return testing::error_message([&] { sparse_mla_forward(prob, plan, b.big.data(), bytes, nullptr); });
  };
  const auto refused = [&](const SparseMlaPlan& plan, const std::string& what) {
    const std::string m = error_of(p, plan, plan.workspace_bytes);
    EXPECT_NE(m.find(what), std::string::npos) << m;
  };
  for (int line : {-1, 1001}) {
    SparseMlaPlan plan = base;
    plan.share_probe.line_permille = line;
    refused(plan, "line_permille");
  }
  for (int keys : {0, 8, 16, 64, 128}) {  // split-K has the probe's bf16 instances in 32-row tiles only
    SparseMlaPlan plan = base;
    plan.share_probe.split_k_block_keys = keys;
    refused(plan, "split_k_block_keys must be 32 over a bf16 cache");
  }
  SparseMlaPlan plan = base;
  plan.splits = 2;
  refused(plan, "share_probe needs");
  plan = base;
  plan.union_pass = false;
  refused(plan, "union pass");  // the shared-rows check names it first at 16 heads
  std::vector<uint8_t> fp8_rows(size_t(656) * 640);
  SparseMlaProblem fp8 = p;
  fp8.kv_format = KvCacheFormat::fp8_ds_mla;
  fp8.ckv_cache = fp8_rows.data();
  fp8.kpe_cache = nullptr;
  for (int keys : {0, 8, 16, 128}) {  // fp8: 32- and 64-row instances
    SparseMlaPlan plan = base;
    plan.share_probe.split_k_block_keys = keys;
    EXPECT_NE(error_of(fp8, plan, plan.workspace_bytes).find("split_k_block_keys must be 32 or 64 over an fp8 cache"), std::string::npos)
        << keys;
  }
  // The workspace: one byte short of the pairs.
  EXPECT_NE(error_of(p, base, base.workspace_bytes - 1).find("workspace_bytes"), std::string::npos);
}

// Each bad argument is refused by name before anything is launched (the GPU test checks the counts).
TEST(SampleGroupSharing, RefusesBadArguments) {
  alignas(16) static int32_t idx[2 * 2049];
  alignas(16) static long long counts[2];
  const auto refuses = [](const char* name, auto&& call) {
    const std::string m = testing::error_message(call);
    EXPECT_NE(m.find(name), std::string::npos) << m;
  };
  refuses("topk", [&] { sample_group_sharing(idx, 2, 2049, 2049, 100, 4, counts, nullptr); });  // past one CTA's set
  refuses("topk", [&] { sample_group_sharing(idx, 2, 0, 1, 100, 4, counts, nullptr); });
  refuses("samples", [&] { sample_group_sharing(idx, 2, 2048, 2048, 100, 0, counts, nullptr); });
  refuses("token_stride", [&] { sample_group_sharing(idx, 2, 2048, 2047, 100, 1, counts, nullptr); });
  refuses("indices", [&] { sample_group_sharing(nullptr, 2, 2048, 2048, 100, 1, counts, nullptr); });
  refuses("d_counts", [&] { sample_group_sharing(idx, 2, 2048, 2048, 100, 1, nullptr, nullptr); });
  refuses("d_counts", [&] {
    sample_group_sharing(idx, 2, 2048, 2048, 100, 1, reinterpret_cast<long long*>(reinterpret_cast<char*>(counts) + 4), nullptr);
  });
}

TEST(CountInvalid, CountsEntriesOutsideMinusOneToRows) {
  const std::vector<int32_t> idx = {-1, 0, 9, 10, -2, 5, 1 << 30, -1};  // rows = 10
  EXPECT_EQ(count_invalid_indices_host(idx.data(), 2, 4, 4, 10), 3);
  EXPECT_EQ(count_invalid_indices_host(idx.data(), 1, 3, 4, 10), 0);  // strided: first 3 of token 0
  EXPECT_THROW(count_invalid_indices_host(idx.data(), 2, 4, 3, 10), Error);
}

TEST(Workload, SameSeedSameIndicesOtherSeedOther) {
  workload::IndexSpec s;
  s.num_tokens = 4;
  const auto a = workload::make_indices(s, 1), b = workload::make_indices(s, 1), c = workload::make_indices(s, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Workload, PatternsLookAsSpecified) {
  using workload::IndexPattern;
  workload::IndexSpec s;
  s.num_tokens = 6;
  s.topk = 256;
  s.page_size = 64;
  s.num_pages = 100;
  const int64_t rows = 6400;

  s.pattern = IndexPattern::runs;
  s.valid_counts = {1, 100, 256};
  auto v = workload::make_indices(s, 3);
  for (int t = 0; t < 6; ++t) {
    const int n = s.valid_counts[std::min(t, 2)];
    const int32_t* r = v.data() + t * 256;
    EXPECT_EQ(r[0] % 64, 0) << "runs start on a page";
    for (int i = 1; i < n; ++i) EXPECT_EQ(r[i], r[0] + i);
    for (int i = n; i < 256; ++i) EXPECT_EQ(r[i], -1);
  }

  // random with valid counts: the first n entries distinct rows, -1 after (the last count for the
  // tokens past the counts)
  s.pattern = IndexPattern::random;
  v = workload::make_indices(s, 4);
  for (int t = 0; t < 6; ++t) {
    const int n = s.valid_counts[std::min(t, 2)];
    std::vector<int32_t> r(v.begin() + t * 256, v.begin() + t * 256 + n);
    for (int32_t x : r) EXPECT_TRUE(x >= 0 && x < rows);
    std::sort(r.begin(), r.end());
    EXPECT_EQ(std::unique(r.begin(), r.end()), r.end()) << "random rows are distinct";
    for (int i = n; i < 256; ++i) EXPECT_EQ(v[t * 256 + i], -1);
  }

  s.valid_counts.clear();
  v = workload::make_indices(s, 4);
  for (int t = 0; t < 6; ++t) {
    std::vector<int32_t> r(v.begin() + t * 256, v.begin() + (t + 1) * 256);
    for (int32_t x : r) EXPECT_TRUE(x >= 0 && x < rows);
    std::sort(r.begin(), r.end());
    EXPECT_EQ(std::unique(r.begin(), r.end()), r.end()) << "random rows are distinct";
  }

  // sequences: token t's distinct rows from its own span of prefix_len rows, no row shared while
  // the spans fit the cache (6 x 1000 <= 6400), wrapping around past that
  s.pattern = IndexPattern::sequences;
  s.prefix_len = 1000;
  v = workload::make_indices(s, 6);
  for (int t = 0; t < 6; ++t) {
    std::vector<int32_t> r(v.begin() + t * 256, v.begin() + (t + 1) * 256);
    for (int32_t x : r) EXPECT_TRUE(x >= t * 1000 && x < (t + 1) * 1000) << "token " << t;
    std::sort(r.begin(), r.end());
    EXPECT_EQ(std::unique(r.begin(), r.end()), r.end()) << "a token's rows are distinct";
  }
  s.num_tokens = 8;  // 8 spans of 1000 in 6400 rows: tokens 6 and 7 take the first two again
  v = workload::make_indices(s, 6);
  for (int k = 0; k < 256; ++k) EXPECT_TRUE(v[7 * 256 + k] >= 1000 && v[7 * 256 + k] < 2000);
  s.num_tokens = 6;
  s.tokens_per_sequence = 2;  // requests of 2 tokens (MTP): tokens 2r and 2r + 1 in span r
  v = workload::make_indices(s, 6);
  for (int t = 0; t < 6; ++t)
    for (int k = 0; k < 256; ++k) EXPECT_TRUE(v[t * 256 + k] >= t / 2 * 1000 && v[t * 256 + k] < (t / 2 + 1) * 1000) << t;
  EXPECT_NE(std::vector<int32_t>(v.begin(), v.begin() + 256), std::vector<int32_t>(v.begin() + 256, v.begin() + 512))
      << "a request's tokens pick on their own";
  s.tokens_per_sequence = 1;
  s.prefix_len = 300;  // a span shorter than topk: the whole span, -1 after
  s.topk = 512;
  v = workload::make_indices(s, 6);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(std::count(v.begin() + t * 512, v.begin() + (t + 1) * 512, -1), 512 - 300);
  s.topk = 256;

  s.pattern = IndexPattern::all_padding;
  v = workload::make_indices(s, 5);
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](int32_t x) { return x == -1; }));

  s.pattern = IndexPattern::single_valid;
  v = workload::make_indices(s, 6);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(std::count_if(v.begin() + t * 256, v.begin() + (t + 1) * 256, [](int32_t x) { return x >= 0; }), 1);

  s.pattern = IndexPattern::out_of_range;
  v = workload::make_indices(s, 7);
  EXPECT_GT(count_invalid_indices_host(v.data(), 6, 256, 256, rows), 0);

  s.pattern = IndexPattern::padding_middle;
  v = workload::make_indices(s, 8);
  EXPECT_EQ(v[256 / 3 + 1], -1);
  EXPECT_GT(std::count_if(v.begin() + 256 / 2, v.begin() + 256, [](int32_t x) { return x >= 0; }), 0);

  s.pattern = IndexPattern::shared_prefix;
  s.prefix_len = 1000;
  v = workload::make_indices(s, 9);
  for (int t = 0; t < 6; ++t)
    for (int i = 0; i < 256; ++i) EXPECT_LT(v[t * 256 + i], 1000 - 6 + t + 1) << "causal prefix";

  EXPECT_THROW(workload::parse_pattern("nope"), Error);
  EXPECT_EQ(workload::parse_pattern("runs"), IndexPattern::runs);
}

}  // namespace
}  // namespace dsa
