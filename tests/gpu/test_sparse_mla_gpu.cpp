// The split-K kernel against the float64 CPU reference (small cases) or the fp32 GPU reference
// kernel (large ones), on fresh random inputs, with outputs poisoned before every run.
// Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <limits>
#include <iterator>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "dsa/reference.h"
#include "dsa/sparse_mla.h"
#include "sparse_mla/params.h"  // the balanced schedule's host rule and layout
#include "device_buffer.h"
#include "error_message.h"
#include "host_problem.h"
#include "index_analysis.h"

namespace dsa {
namespace {

using testing::CapturedGraph;
using testing::DeviceBuffer;
using testing::error_message;
using testing::Gpu;
using testing::GpuWithParam;
using testing::HostProblem;
using testing::make_problem;
using workload::IndexPattern;

constexpr uint16_t kPoisonBf16 = 0xffff;  // NaN: any element left unwritten fails the check

// Inputs on the device plus poisoned outputs (strided when out_pad/lse_pad > 0).
struct DeviceProblem {
  const HostProblem& hp;
  int64_t out_token_stride, lse_token_stride;
  DeviceBuffer<uint16_t> q_nope, q_pe, ckv, kpe;
  DeviceBuffer<uint8_t> kv_fp8;
  DeviceBuffer<int32_t> indices;
  DeviceBuffer<uint16_t> out;
  DeviceBuffer<float> lse;

  DeviceProblem(const HostProblem& h, int out_pad = 0, int lse_pad = 0)
      : hp(h),
        out_token_stride(int64_t(h.H) * kCkvDim + out_pad),
        lse_token_stride(h.H + lse_pad),
        q_nope(h.q_nope), q_pe(h.q_pe), ckv(h.ckv), kpe(h.kpe), kv_fp8(h.kv_fp8), indices(h.indices),
        out(size_t(h.T) * out_token_stride),
        lse(size_t(h.T) * lse_token_stride) {}

  void poison() {
    std::vector<uint16_t> o(out.n, kPoisonBf16);
    std::vector<float> l(lse.n, std::numeric_limits<float>::quiet_NaN());
    cudaMemcpy(out.ptr, o.data(), o.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(lse.ptr, l.data(), l.size() * 4, cudaMemcpyHostToDevice);
  }

  SparseMlaProblem view() const {
    SparseMlaProblem p = hp.view();
    p.q_nope = q_nope.ptr; p.q_pe = q_pe.ptr;
    if (hp.kv_format == KvCacheFormat::fp8_ds_mla) {
      p.ckv_cache = kv_fp8.ptr;
    } else {
      p.ckv_cache = ckv.ptr; p.kpe_cache = kpe.ptr;
    }
    p.indices = indices.ptr;
    p.out = out.ptr; p.out_token_stride = out_token_stride;
    p.lse = lse.ptr; p.lse_token_stride = lse_token_stride;
    return p;
  }

  // Packed copies of out/lse; checks that the padding between strided rows is still poison.
  void fetch(std::vector<uint16_t>& o, std::vector<float>& l) const {
    const auto ro = out.get();
    const auto rl = lse.get();
    o.assign(size_t(hp.T) * hp.H * kCkvDim, 0);
    l.assign(size_t(hp.T) * hp.H, 0);
    for (int t = 0; t < hp.T; ++t) {
      std::memcpy(&o[size_t(t) * hp.H * kCkvDim], &ro[t * out_token_stride], size_t(hp.H) * kCkvDim * 2);
      std::memcpy(&l[size_t(t) * hp.H], &rl[t * lse_token_stride], size_t(hp.H) * 4);
      for (int64_t i = int64_t(hp.H) * kCkvDim; i < out_token_stride; ++i)
        ASSERT_EQ(ro[t * out_token_stride + i], kPoisonBf16) << "write past a token's out row";
      for (int64_t i = hp.H; i < lse_token_stride; ++i) ASSERT_TRUE(std::isnan(rl[t * lse_token_stride + i]));
    }
  }
};

// The ground truth for hp: CPU float64 when small enough, else the GPU fp32 reference kernel.
void reference(const HostProblem& hp, std::vector<double>& out, std::vector<double>& lse, bool* used_cpu = nullptr) {
  out.assign(size_t(hp.T) * hp.H * kCkvDim, 0);
  lse.assign(size_t(hp.T) * hp.H, 0);
  const bool cpu = int64_t(hp.T) * hp.H * hp.topk <= (int64_t(1) << 21);
  if (used_cpu) *used_cpu = cpu;
  if (cpu) {
    SparseMlaProblem p = hp.view();
    std::vector<uint16_t> o(16);
    std::vector<float> l(4);
    p.out = o.data();
    p.lse = l.data();
    sparse_mla_reference_cpu(p, out.data(), lse.data());
    return;
  }
  DeviceProblem d(hp);
  d.poison();
  sparse_mla_reference_gpu(d.view(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> o;
  std::vector<float> l;
  d.fetch(o, l);
  for (size_t i = 0; i < o.size(); ++i) out[i] = bf16_to_float(o[i]);
  for (size_t i = 0; i < l.size(); ++i) lse[i] = l[i];
}

// The device result of `d`, judged against a reference.
Agreement judge(const DeviceProblem& d, const std::vector<double>& ref_out, const std::vector<double>& ref_lse) {
  std::vector<uint16_t> o;
  std::vector<float> l;
  d.fetch(o, l);
  return compare_to_reference(o.data(), l.data(), ref_out.data(), ref_lse.data(), d.hp.T, d.hp.H);
}

// Poisons d's outputs, runs `p` (d's view, possibly re-pointed) with `plan`, and judges the result.
Agreement forward_and_judge(DeviceProblem& d, const SparseMlaProblem& p, const SparseMlaPlan& plan,
                            const std::vector<double>& ref_out, const std::vector<double>& ref_lse) {
  d.poison();
  DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
  EXPECT_EQ(cudaMemset(ws.ptr, 0xff, plan.workspace_bytes), cudaSuccess);  // nothing may be read before it is written
  sparse_mla_forward(p, plan, ws.ptr, plan.workspace_bytes, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return judge(d, ref_out, ref_lse);
}

// Runs the planned kernel (or `plan_override`) on a poisoned output and judges it.
Agreement run_and_compare(const HostProblem& hp, const SparseMlaPlan* plan_override = nullptr, int out_pad = 0,
                          int lse_pad = 0) {
  DeviceProblem d(hp, out_pad, lse_pad);
  const SparseMlaProblem p = d.view();
  std::vector<double> ro, rl;
  reference(hp, ro, rl);
  return forward_and_judge(d, p, plan_override ? *plan_override : plan_sparse_mla(p), ro, rl);
}

uint64_t seed_of(int a, int b, int c, int d) { return (uint64_t(a) * 1000003 + b) * 1000033 + uint64_t(c) * 97 + d; }

// ---- every H x topk x pattern, page sizes 1 and 64 ----------------------------------------
struct SweepCase {
  int H, topk;
  IndexPattern pattern;
  int page_size;
};

class Sweep : public GpuWithParam<SweepCase> {};

std::string sweep_case_name(const ::testing::TestParamInfo<SweepCase>& info) {
  return "H" + std::to_string(info.param.H) + "_topk" + std::to_string(info.param.topk) + "_" +
         workload::to_string(info.param.pattern) + "_ps" + std::to_string(info.param.page_size);
}

TEST_P(Sweep, MatchesReference) {
  const SweepCase c = GetParam();
  const HostProblem hp = make_problem(3, c.H, c.topk, c.page_size, c.page_size == 1 ? 6000 : 100, c.pattern,
                                      seed_of(c.H, c.topk, int(c.pattern), c.page_size), /*prefix_len=*/3000);
  const Agreement a = run_and_compare(hp);
  EXPECT_TRUE(a.ok()) << a.summary();
}

std::vector<SweepCase> sweep_cases() {
  std::vector<SweepCase> v;
  const IndexPattern patterns[] = {IndexPattern::random,       IndexPattern::runs,         IndexPattern::shared_prefix,
                                   IndexPattern::all_padding,  IndexPattern::single_valid, IndexPattern::padding_middle,
                                   IndexPattern::duplicates,   IndexPattern::out_of_range};
  int i = 0;
  for (int H : {16, 32, 64, 128})
    for (int topk : {1, 63, 64, 2048, 2049})
      for (IndexPattern pat : patterns) {
        // The full product is 160 cases; H = 128 keeps the three main patterns to bound CPU time.
        if (H == 128 && pat != IndexPattern::random && pat != IndexPattern::runs && pat != IndexPattern::padding_middle)
          continue;
        v.push_back({H, topk, pat, (i++ % 2) ? 64 : 1});
      }
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllHeadsTopkPatterns, Sweep, ::testing::ValuesIn(sweep_cases()),
                         sweep_case_name);

// ---- token counts from 1 to 4096 (large ones against the GPU reference) --------------------
class TokenCounts : public GpuWithParam<std::tuple<int, IndexPattern>> {};

TEST_P(TokenCounts, MatchesReference) {
  const auto [T, pattern] = GetParam();
  const HostProblem hp = make_problem(T, 16, 2048, 64, 256, pattern, seed_of(T, int(pattern), 7, 7));
  const Agreement a = run_and_compare(hp);
  EXPECT_TRUE(a.ok()) << a.summary();
}

INSTANTIATE_TEST_SUITE_P(T, TokenCounts,
                         ::testing::Combine(::testing::Values(1, 2, 5, 17, 64, 133, 600, 4096),
                                            ::testing::Values(IndexPattern::random, IndexPattern::runs,
                                                              IndexPattern::shared_prefix)),
                         [](const auto& info) {
                           return "T" + std::to_string(std::get<0>(info.param)) + "_" +
                                  workload::to_string(std::get<1>(info.param));
                         });

// ---- the shared-rows kernel forced: every H x topk x pattern, T = 5 (a CTA with one token) ----
SparseMlaPlan shared_rows_plan(int T, int H, int topk) {
  PlanChoice c;
  c.kernel = PlanChoice::Kernel::shared_rows;
  return plan_sparse_mla(T, H, topk, DeviceInfo::from_device(0), c);
}

// One case of a shared-rows sweep: the bf16 cache, or its fp8_ds_mla quantization.
void expect_shared_rows_agree(const SweepCase& c, bool fp8) {
  HostProblem hp = make_problem(5, c.H, c.topk, c.page_size, c.page_size == 1 ? 6000 : 100, c.pattern,
                                seed_of(c.H, c.topk, int(c.pattern), c.page_size + (fp8 ? 9 : 5)), /*prefix_len=*/1500);
  if (fp8) hp.to_fp8(false);
  const SparseMlaPlan plan = shared_rows_plan(hp.T, hp.H, hp.topk);
  ASSERT_EQ(plan.kernel, SparseMlaKernel::shared_rows);
  const Agreement a = run_and_compare(hp, &plan);
  EXPECT_TRUE(a.ok()) << a.summary();
}

class SharedRowsSweep : public Sweep {};

TEST_P(SharedRowsSweep, MatchesReference) { expect_shared_rows_agree(GetParam(), false); }

// The cases of a sweep the shared-rows kernel takes (topk <= kMaxChunk).
std::vector<SweepCase> shared_rows_subset(const std::vector<SweepCase>& cases) {
  std::vector<SweepCase> v;
  for (const SweepCase& c : cases)
    if (c.topk <= SparseMlaPlan::kMaxChunk) v.push_back(c);
  return v;
}

std::vector<SweepCase> shared_rows_cases() { return shared_rows_subset(sweep_cases()); }

INSTANTIATE_TEST_SUITE_P(AllHeadsTopkPatterns, SharedRowsSweep, ::testing::ValuesIn(shared_rows_cases()),
                         sweep_case_name);

// Multiplicities the union must keep apart: token 0 lists one row 2048 times, token 1 that row
// 1024 times and others once, token 2 two rows alternately, token 3 rows token 1 also lists.
TEST_F(Gpu, SharedRowsCountsEveryOccurrence) {
  HostProblem hp = make_problem(4, 16, 2048, 64, 64, IndexPattern::random, 2024);
  for (int k = 0; k < 2048; ++k) {
    hp.indices[k] = 7;
    hp.indices[2048 + k] = k % 2 ? 7 : 100 + k;
    hp.indices[2 * 2048 + k] = k % 2 ? 9 : 4000;
    hp.indices[3 * 2048 + k] = k < 1000 ? 100 + 2 * k : -1;
  }
  const SparseMlaPlan plan = shared_rows_plan(hp.T, hp.H, hp.topk);
  const Agreement a = run_and_compare(hp, &plan);
  EXPECT_TRUE(a.ok()) << a.summary();
}

// A CTA whose tokens list no row twice reads per-entry words (row, which tokens list it); one
// with a repeated row counts keys per tile. One launch mixes both: tokens 0-3 pick 300 of the
// same ~600 rows, token 5 repeats one row, tokens 8-9 (a CTA of two) carry -1 and a row
// past the cache; with topk 300 the unions end in partly empty tiles.
TEST_F(Gpu, SharedRowsMixesEntryWordsAndCounts) {
  HostProblem hp = make_problem(10, 32, 300, 64, 64, IndexPattern::shared_prefix, 77, 600);
  hp.indices[5 * 300 + 17] = hp.indices[5 * 300 + 3];
  hp.indices[8 * 300 + 5] = -1;
  hp.indices[9 * 300 + 6] = 64 * 64;
  const SparseMlaPlan plan = shared_rows_plan(hp.T, hp.H, hp.topk);
  const Agreement a = run_and_compare(hp, &plan);
  EXPECT_TRUE(a.ok()) << a.summary();
}

// The union pass builds a group's union from a bitmap when its rows lie within 32768 of each
// other, compacted in chunks of 8192 rows, else by sorting. Groups at the limit on each side:
// rows 100 .. 32867 (span 32768: bitmap, four chunks) and 100 .. 32868 (sort); rows 100 .. 8292
// (two chunks, one row in the second); a bitmap group that falls back to the sort on a repeated
// row; groups of one row, of all padding, and a partial last group.
TEST_F(Gpu, SharedRowsBitmapAndSortAgreeAtTheSpanLimit) {
  HostProblem hp = make_problem(26, 16, 300, 64, 520, IndexPattern::random, 8192);
  std::mt19937 rng(11);
  const auto fill_group = [&](int g, int lo, int hi) {
    for (int t = 4 * g; t < 4 * g + 4; ++t)
      for (int k = 0; k < hp.topk; ++k)
        hp.indices[size_t(t) * hp.topk + k] = lo + int(rng() % uint32_t(hi - lo + 1));
    hp.indices[size_t(4 * g) * hp.topk + 5] = lo;  // both ends present
    hp.indices[size_t(4 * g + 3) * hp.topk + 7] = hi;
  };
  fill_group(0, 100, 100 + 32767);
  fill_group(1, 100, 100 + 32768);
  fill_group(2, 100, 100 + 8192);
  fill_group(3, 5000, 5000 + 4000);
  hp.indices[size_t(13) * hp.topk + 20] = hp.indices[size_t(13) * hp.topk + 21];  // token 13 repeats a row
  std::fill_n(hp.indices.begin() + size_t(16) * hp.topk, 4 * hp.topk, -1);         // group 4: padding
  hp.indices[size_t(17) * hp.topk + 150] = 777;                                      // ... but one row
  std::fill_n(hp.indices.begin() + size_t(20) * hp.topk, 4 * hp.topk, -1);         // group 5: none
  // group 6: tokens 24-25, random rows over the whole cache (the sort)
  const SparseMlaPlan plan = shared_rows_plan(hp.T, hp.H, hp.topk);
  const Agreement a = run_and_compare(hp, &plan);
  EXPECT_TRUE(a.ok()) << a.summary();
}

// Groups whose rows lie far apart (decode) are sorted; those with few valid keys sort only
// those, in a sort of 1 or 4 keys per thread instead of 16. Groups at each size's edge (512 /
// 513 / 2048 / 2049 valid keys) with distinct rows per token (entry words), the same sizes with
// a repeated row (key counts), and a few keys far apart, with and without a repeat: each must
// write the record the full sort writes.
TEST_F(Gpu, SharedRowsSortsOnlyTheValidKeys) {
  const int topk = 700, groups = 8;
  HostProblem hp = make_problem(4 * groups, 16, topk, 64, 600, IndexPattern::random, 512);
  const int num_rows = 64 * 600;  // spans above 32768: no bitmap
  std::mt19937 rng(5);
  const auto fill_group = [&](int g, int valid_keys, bool repeat) {
    for (int t = 4 * g; t < 4 * g + 4; ++t) {
      const int mine = valid_keys / 4 + (t - 4 * g < valid_keys % 4 ? 1 : 0);
      std::vector<int> rows(num_rows);
      std::iota(rows.begin(), rows.end(), 0);
      std::shuffle(rows.begin(), rows.end(), rng);  // distinct rows per token
      rows.resize(mine);
      rows.resize(topk, -1);
      std::shuffle(rows.begin(), rows.end(), rng);  // -1 anywhere
      std::copy(rows.begin(), rows.end(), hp.indices.begin() + size_t(t) * topk);
    }
    int* first = &hp.indices[size_t(4 * g) * topk];
    int* v = std::find_if(first, first + topk, [](int r) { return r >= 0; });
    *v = 0;  // both ends of the cache: a span of num_rows
    int* w = std::find_if(v + 1, first + topk, [](int r) { return r >= 0; });
    *w = num_rows - 1;
    if (repeat) *std::find_if(w + 1, first + topk, [](int r) { return r >= 0; }) = *w;  // token 4g lists a row twice
  };
  fill_group(0, 512, false);
  fill_group(1, 513, false);
  fill_group(2, 2048, false);
  fill_group(3, 2049, false);
  fill_group(4, 512, true);
  fill_group(5, 2048, true);
  fill_group(6, 8, false);  // token 4g: rows 0 and num_rows - 1
  fill_group(7, 12, true);  // token 4g: rows 0, num_rows - 1 and num_rows - 1
  const SparseMlaPlan plan = shared_rows_plan(hp.T, hp.H, hp.topk);
  const Agreement a = run_and_compare(hp, &plan);
  EXPECT_TRUE(a.ok()) << a.summary();
}

// T = 512 prefill, every hint: at 16 heads consecutive takes shared rows (128 groups of 4 tokens,
// a wave of 132 SMs) and the others split-K; at 32 heads (topk >= 1024) and 64 every hint takes
// it (256 CTAs of 2 tokens; a CTA per token). Every plan agrees with the reference.
TEST_F(Gpu, EveryIndexSharingHintAgreesAtPrefill512) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (int H : {16, 32, 64}) {
    const HostProblem hp = make_problem(512, H, 2048, 64, 128, IndexPattern::shared_prefix, 512 + H, /*prefix_len=*/8192);
    for (IndexSharing sharing : {IndexSharing::unknown, IndexSharing::consecutive, IndexSharing::none}) {
      const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev, {}, sharing);
      const bool shared_rows = H >= 32 || sharing == IndexSharing::consecutive;
      if (dev.sm_count == 132)  // H100, H200
        EXPECT_EQ(plan.kernel, shared_rows ? SparseMlaKernel::shared_rows : SparseMlaKernel::split_k) << H << " " << static_cast<int>(sharing);
      const Agreement a = run_and_compare(hp, &plan);
      EXPECT_TRUE(a.ok()) << "H " << H << ", sharing " << static_cast<int>(sharing) << ": " << a.summary();
    }
  }
}

// MTP decode batches (2 tokens per request picking from its 2560 rows; some entries -1) with the
// consecutive hint at 16 heads: below and between whole waves of 4-token groups the planner
// splits their union tiles (on an H100 T = 117 / 200 / 300 / 600 / 900: 4 / 2 / 3 / 3 / 4
// splits; T = 400 one; an H200 keeps split-K there, and runs the H100's plans here). Every plan
// agrees with the reference.
TEST_F(Gpu, ConsecutiveHintSplitsGroupsOfMtpBatches) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (auto [T, splits] : {std::pair{117, 4}, std::pair{200, 2}, std::pair{300, 3}, std::pair{400, 1}, std::pair{600, 3}, std::pair{900, 4}}) {
    HostProblem hp = make_problem(T, 16, 2048, 64, (T / 2) * 40 + 64, IndexPattern::sequences, seed_of(T, 16, 2048, 2), 2560, 2);
    std::mt19937 rng(T);
    for (int32_t& r : hp.indices)
      if (rng() % 16 == 0) r = -1;  // -1 anywhere
    DeviceInfo h100 = dev;
    h100.memory_bandwidth_gbs = static_cast<int>(detail::kH100BandwidthGbs);  // the H100's plan on either card
    const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, h100, {}, IndexSharing::consecutive);
    if (dev.sm_count == 132) {  // H100, H200
      EXPECT_EQ(plan.kernel, SparseMlaKernel::shared_rows) << T;
      EXPECT_EQ(plan.splits, splits) << T;
    }
    const Agreement a = run_and_compare(hp, &plan);
    EXPECT_TRUE(a.ok()) << "T " << T << " (splits " << plan.splits << "): " << a.summary();
  }
}

// The min_valid_entries hint (every list full) at 16 heads: on fast memory T = 24 / 33 take one
// CTA per SM (lists of 2048: 5 / 4 splits of 13 / 16 tiles; lists of 1024 at T = 24 / 45: 5 / 2
// splits of 7 / 16 tiles; early issue), the H200's plan on either card. The runs and
// -1-in-the-middle lists are shorter than the hint says, which is allowed (a hint costs time,
// never correctness). Every plan agrees with the reference.
TEST_F(Gpu, FullListsHintAgreesEvenWhereItDoesNotHold) {
  DeviceInfo fast = DeviceInfo::from_device(0);
  fast.memory_bandwidth_gbs = static_cast<int>(detail::kH100BandwidthGbs * 2);  // the fast-memory plans on either card
  for (auto [T, topk, splits] : {std::tuple{24, 2048, 5}, std::tuple{33, 2048, 4}, std::tuple{24, 1024, 5}, std::tuple{60, 1024, 2}})
    for (IndexPattern pattern : {IndexPattern::random, IndexPattern::runs, IndexPattern::padding_middle}) {
      const HostProblem hp = make_problem(T, 16, topk, 64, 400, pattern, seed_of(T, int(pattern), topk, 5));
      const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, fast, {}, IndexSharing::unknown, KvCacheFormat::bf16, topk);
      if (fast.sm_count == 132) {  // H100, H200
        EXPECT_EQ(plan.splits, splits) << T << " " << topk;
        EXPECT_TRUE(plan.early_issue) << T << " " << topk;
      }
      const Agreement a = run_and_compare(hp, &plan);
      EXPECT_TRUE(a.ok()) << "T " << T << ", topk " << topk << ", pattern " << workload::to_string(pattern) << ": " << a.summary();
    }
}

// Under a hint that every list holds more valid entries than a split's chunk, plans have no
// fused rows (each split reads only its own part of the list). Lists that break the hint (one
// valid row, runs, all padding, -1 in the middle) must still agree: a token of few rows runs
// through its splits, most of them empty, and merges. Split-K at 16 heads T = 1 / 4 / 8 and 64
// heads T = 1 / 2; shared rows' one-token groups in splits at 64 heads T = 8 and 128 heads T = 4
// (one token x 64 heads per CTA); both caches.
TEST_F(Gpu, HintedPlansWithoutFusedRowsAgreeEvenWhereTheHintFails) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (auto [H, T] : {std::pair{16, 1}, std::pair{16, 4}, std::pair{16, 8}, std::pair{64, 1}, std::pair{64, 2}, std::pair{64, 8},
                      std::pair{128, 4}})
    for (IndexPattern pattern : {IndexPattern::single_valid, IndexPattern::runs, IndexPattern::all_padding, IndexPattern::padding_middle})
      for (bool fp8 : {false, true}) {
        HostProblem hp = make_problem(T, H, 2048, 64, 400, pattern, seed_of(T, int(pattern), H, fp8 ? 15 : 14));
        if (fp8) hp.to_fp8(false);
        const KvCacheFormat format = fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16;
        const std::string at = "T " + std::to_string(T) + " H " + std::to_string(H) + (fp8 ? " fp8" : " bf16");
        const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev, {}, IndexSharing::unknown, format, 2048);
        if (plan.splits == 1) {  // another card's plan
          EXPECT_NE(dev.sm_count, 132) << at << ": H100 / H200 plan splits here";
          continue;
        }
        EXPECT_EQ(plan.fused_rows, 0) << at;
        EXPECT_GT(plan_sparse_mla(hp.T, hp.H, hp.topk, dev, {}, IndexSharing::unknown, format).fused_rows, 0) << at << " unhinted";
        const Agreement a = run_and_compare(hp, &plan);
        EXPECT_TRUE(a.ok()) << at << " " << workload::to_string(pattern) << ": " << a.summary();
      }
}

// Full lists of 512 under the hint (min_valid_entries = topk) at 16 heads T = 150 take one split,
// no half-wave lead (params.h kSplitKHalfWaveLeadFullListsMaxList), on any card. Random rows,
// and runs and -1 in the middle, shorter than the hint says (allowed: a false hint costs time,
// never correctness), agree with the reference over a bf16 cache and its fp8_ds_mla quantization.
TEST_F(Gpu, FullShortListsOneSplitAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (IndexPattern pattern : {IndexPattern::random, IndexPattern::runs, IndexPattern::padding_middle})
    for (bool fp8 : {false, true}) {
      HostProblem hp = make_problem(150, 16, 512, 64, 400, pattern, seed_of(150, int(pattern), 512, fp8 ? 13 : 12));
      if (fp8) hp.to_fp8(false);
      const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev, {}, IndexSharing::unknown,
                                                 fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16, 512);
      if (dev.sm_count == 132) {  // H100, H200
        EXPECT_EQ(plan.kernel, SparseMlaKernel::split_k);
        EXPECT_EQ(plan.splits, 1);
        EXPECT_EQ(plan.lead_tokens, 0);
      }
      const Agreement a = run_and_compare(hp, &plan);
      EXPECT_TRUE(a.ok()) << "pattern " << workload::to_string(pattern) << (fp8 ? " fp8: " : " bf16: ") << a.summary();
    }
}

// 32 heads on fast memory at T = 5 / 8: one CTA per SM, 13 / 8 splits of 5 / 8 tiles, two CTAs
// per token split (params.h kSplitKOneCtaPerSmHeads), the H200's plan on either card. Random
// rows, runs of mixed length and -1 in the middle agree with the reference.
TEST_F(Gpu, ThirtyTwoHeadsOneCtaPerSmAgree) {
  DeviceInfo fast = DeviceInfo::from_device(0);
  fast.memory_bandwidth_gbs = static_cast<int>(detail::kH100BandwidthGbs * 2);  // the fast-memory plans on either card
  for (auto [T, splits] : {std::pair{5, 13}, std::pair{8, 8}})
    for (IndexPattern pattern : {IndexPattern::random, IndexPattern::runs, IndexPattern::padding_middle}) {
      const HostProblem hp = make_problem(T, 32, 2048, 64, 400, pattern, seed_of(T, int(pattern), 2048, 32));
      const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, fast);
      if (fast.sm_count == 132) {  // H100, H200
        EXPECT_EQ(plan.kernel, SparseMlaKernel::split_k) << T;
        EXPECT_EQ(plan.splits, splits) << T;
        EXPECT_EQ(plan.ctas, T * splits * 2) << T;
      }
      const Agreement a = run_and_compare(hp, &plan);
      EXPECT_TRUE(a.ok()) << "T " << T << ", pattern " << workload::to_string(pattern) << ": " << a.summary();
    }
}

// Lists of 2048 on fast memory whose one-tile splits would fill more than half the SMs take
// two-tile splits (params.h kSplitKOneTileSmsPerCtaFastMemory): 16 heads T = 2 and 32 heads
// T = 1, 32 splits of 64 positions (64 CTAs) with the early issue, the H200's plan on either
// card. Random rows, runs of mixed length and -1 in the middle agree with the reference, over
// a bf16 cache and its fp8_ds_mla quantization.
TEST_F(Gpu, TwoTileSplitsOfLongListsAgree) {
  DeviceInfo fast = DeviceInfo::from_device(0);
  fast.memory_bandwidth_gbs = static_cast<int>(detail::kH100BandwidthGbs * 2);  // the fast-memory plans on either card
  for (auto [T, H] : {std::pair{2, 16}, std::pair{1, 32}})
    for (IndexPattern pattern : {IndexPattern::random, IndexPattern::runs, IndexPattern::padding_middle})
      for (bool fp8 : {false, true}) {
        HostProblem hp = make_problem(T, H, 2048, 64, 400, pattern, seed_of(T, int(pattern), H, fp8 ? 11 : 10));
        if (fp8) hp.to_fp8(false);
        const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, fast, {}, IndexSharing::unknown,
                                                   fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16);
        if (fast.sm_count == 132) {  // H100, H200
          EXPECT_EQ(plan.kernel, SparseMlaKernel::split_k) << T << " " << H;
          EXPECT_EQ(plan.splits, 32) << T << " " << H;
          EXPECT_EQ(plan.ctas, 64) << T << " " << H;
          EXPECT_TRUE(plan.early_issue) << T << " " << H;
        }
        const Agreement a = run_and_compare(hp, &plan);
        EXPECT_TRUE(a.ok()) << "T " << T << ", H " << H << ", pattern " << workload::to_string(pattern) << (fp8 ? " fp8: " : " bf16: ")
                            << a.summary();
      }
}

// At 64 and 128 heads the planner takes shared rows whatever the hint, a CTA per token's 64
// heads: below one wave of groups with splits (T = 64 at 64 heads: 2 per token; T = 33 at 128:
// 66 groups x 2) and CTAs that compact their own lists, T = 70 one wave unsplit, T = 140 one
// wave unsplit and the 8 tokens past it in 10 splits (19 tiles: 2 each, the last one), T = 224
// past 1.67 waves with the union and order passes. Random rows with -1 in the middle, a row
// listed twice (weight 2), runs of 1-600 rows.
TEST_F(Gpu, WideHeadsTakeSharedRowsAndAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (auto [T, H, pattern] : {std::tuple{64, 64, IndexPattern::padding_middle}, std::tuple{33, 128, IndexPattern::duplicates},
                               std::tuple{70, 64, IndexPattern::runs}, std::tuple{140, 64, IndexPattern::runs},
                               std::tuple{224, 64, IndexPattern::runs}}) {
    const HostProblem hp = make_problem(T, H, 600, 64, 200, pattern, 640 + T);
    for (IndexSharing sharing : {IndexSharing::unknown, IndexSharing::none}) {
      const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev, {}, sharing);
      if (dev.sm_count == 132) {  // H100, H200
        EXPECT_EQ(plan.kernel, SparseMlaKernel::shared_rows) << T << " " << H;
        EXPECT_EQ(plan.splits, T == 70 || T == 224 ? 1 : T == 140 ? 10 : 2) << T << " " << H;
        EXPECT_EQ(plan.lead_tokens, T == 140 ? 132 : 0) << T << " " << H;
        EXPECT_EQ(plan.lead_splits, 1) << T << " " << H;
        EXPECT_EQ(plan.union_pass, T == 224) << T << " " << H;
      }
      if (plan.kernel == SparseMlaKernel::shared_rows)
        EXPECT_EQ(plan.ctas, (plan.lead_tokens * plan.lead_splits + (T - plan.lead_tokens) * plan.splits) * H / 64);
      const Agreement a = run_and_compare(hp, &plan);
      EXPECT_TRUE(a.ok()) << "T " << T << " H " << H << ": " << a.summary();
    }
  }
}

// Small decode calls at 64 and 128 heads: a few tokens' long lists (bf16 from 2 tokens at 128
// heads, 5 at 64), each group's union tiles split over the chip (8-22 splits, uneven runs at
// topk 1280 and 1792), merged by the combine; -1 in the middle, a row listed twice, runs, every
// list all padding (every split empty: out 0, lse -inf), and one valid row.
TEST_F(Gpu, WideHeadsSmallCallsSplitTheirListsAndAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (auto [T, H, topk, pattern] :
       {std::tuple{8, 64, 2048, IndexPattern::padding_middle}, std::tuple{5, 128, 2048, IndexPattern::duplicates},
        std::tuple{16, 64, 2048, IndexPattern::runs}, std::tuple{4, 128, 2048, IndexPattern::all_padding},
        std::tuple{2, 128, 2048, IndexPattern::random}, std::tuple{6, 64, 2048, IndexPattern::single_valid},
        std::tuple{3, 128, 1280, IndexPattern::random}, std::tuple{5, 64, 1792, IndexPattern::padding_middle}}) {
    const HostProblem hp = make_problem(T, H, topk, 64, 200, pattern, 660 + T);
    const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev);
    if (dev.sm_count == 132) {  // H100, H200
      EXPECT_EQ(plan.kernel, SparseMlaKernel::shared_rows) << T << " " << H;
      EXPECT_GT(plan.splits, 1) << T << " " << H;
      EXPECT_FALSE(plan.union_pass) << T << " " << H;
    }
    const Agreement a = run_and_compare(hp, &plan);
    EXPECT_TRUE(a.ok()) << "T " << T << " H " << H << ": " << a.summary();
  }
}

// 32 heads in one-token groups (the planner's from T = 16, below the union's line): a
// CTA's rows 32-63 idle (Q zero, nothing written), no union pass, splits merged by the combine,
// split 0 alone for a short list. Padding anywhere, a row listed twice, mixed lengths, all
// padding, uneven split runs (topk 1040), one wave exactly (T = 132).
TEST_F(Gpu, ThirtyTwoHeadsInOneTokenGroupsAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (auto [T, topk, pattern, fp8] :
       {std::tuple{16, 2048, IndexPattern::padding_middle, false}, std::tuple{33, 2048, IndexPattern::duplicates, false},
        std::tuple{64, 2048, IndexPattern::runs, false}, std::tuple{20, 2048, IndexPattern::all_padding, false},
        std::tuple{24, 1040, IndexPattern::random, false}, std::tuple{132, 1024, IndexPattern::random, false},
        std::tuple{32, 2048, IndexPattern::random, true}, std::tuple{40, 2048, IndexPattern::runs, true},
        std::tuple{16, 2048, IndexPattern::padding_middle, true}, std::tuple{21, 1100, IndexPattern::duplicates, true}}) {
    HostProblem hp = make_problem(T, 32, topk, 64, 200, pattern, 880 + T);
    if (fp8) hp.to_fp8(false);
    const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev, PlanChoice{}, IndexSharing::unknown,
                                               fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16);
    if (dev.sm_count == 132) {  // H100, H200
      EXPECT_EQ(plan.kernel, SparseMlaKernel::shared_rows) << T;
      EXPECT_FALSE(plan.union_pass) << T;
      EXPECT_EQ(plan.ctas, T * plan.splits) << T;
    }
    const Agreement a = run_and_compare(hp, &plan, /*out_pad=*/16, /*lse_pad=*/3);
    EXPECT_TRUE(a.ok()) << "T " << T << " topk " << topk << (fp8 ? " fp8: " : " bf16: ") << a.summary();
  }
}

// One-token groups past one wave (the planner's up to 1.7 waves of them, at 32 / 64 / 128 heads):
// no union pass, each CTA compacts its token's list. Up to 1.5 waves one wave of groups runs
// unsplit and the tokens past it split (SparseMlaPlan::lead_tokens: 2-64 splits, fused rows);
// past that, at 32 heads, one split. Both caches; -1 in the middle, runs, a row listed twice, all
// padding, one valid row, lists of 1024 and 1600; the `none` hint.
TEST_F(Gpu, OneTokenGroupsPastOneWaveAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  struct Case {
    int T, H, topk;
    IndexPattern pattern;
    bool fp8;
    int splits, unsplit;  // the H100's
    IndexSharing sharing = IndexSharing::unknown;
  };
  const Case cases[] = {
      {133, 64, 2048, IndexPattern::padding_middle, false, 64, 132}, {170, 32, 2048, IndexPattern::runs, false, 3, 132},
      {67, 128, 2048, IndexPattern::duplicates, false, 64, 66}, {200, 32, 1024, IndexPattern::random, true, 1, 0},
      {140, 32, 2048, IndexPattern::all_padding, true, 16, 132}, {190, 32, 2048, IndexPattern::single_valid, false, 2, 132},
      {150, 64, 2048, IndexPattern::runs, true, 7, 132}, {85, 128, 1600, IndexPattern::random, false, 3, 66},
      // 32 heads past 2 whole waves (fp8: 1.7), the tail a wave of its own (one_token_lead_pays, no lead plan)
      {370, 32, 2048, IndexPattern::padding_middle, false, 1, 0}, {500, 32, 2048, IndexPattern::runs, true, 1, 0},
      {250, 32, 2048, IndexPattern::duplicates, true, 1, 0},
      // fp8 where the count said 2-token groups (its bands below whole waves of them), and the
      // none hint, which plans as unknown at 32 heads with these lists
      {1024, 32, 1024, IndexPattern::padding_middle, true, 1, 0}, {760, 32, 2048, IndexPattern::duplicates, true, 1, 0, IndexSharing::none},
      {360, 32, 2048, IndexPattern::random, false, 1, 0, IndexSharing::none}};
  for (const Case& c : cases) {
    HostProblem hp = make_problem(c.T, c.H, c.topk, 64, 200, c.pattern, 990 + c.T);
    if (c.fp8) hp.to_fp8(false);
    const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev, PlanChoice{}, c.sharing,
                                               c.fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16);
    const std::string what = "T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " topk " + std::to_string(c.topk) + " " +
                             workload::to_string(c.pattern) + (c.fp8 ? " fp8" : " bf16") +
                             (c.sharing == IndexSharing::none ? " none" : "");
    if (dev.sm_count == 132) {  // H100, H200
      const int groups_per_token = std::max(c.H / 64, 1);
      EXPECT_EQ(plan.kernel, SparseMlaKernel::shared_rows) << what;
      EXPECT_FALSE(plan.union_pass) << what;
      EXPECT_EQ(plan.splits, c.splits) << what;
      EXPECT_EQ(plan.lead_tokens, c.unsplit) << what;
      EXPECT_EQ(plan.ctas, (c.unsplit + (c.T - c.unsplit) * c.splits) * groups_per_token) << what;
    }
    const Agreement a = run_and_compare(hp, &plan, /*out_pad=*/16, /*lse_pad=*/3);
    EXPECT_TRUE(a.ok()) << what << ": " << a.summary();
  }
}

// Shared rows with splits (the planner's for few groups): each group's union tiles dealt in equal
// runs, bf16 partials, the split-K combine. Every head count (at 16 and 32 a row's token may list
// none of a split's entries: lse -inf there), lists with padding anywhere, a row listed twice
// (the counting path, whose keys a split reads from before its first entry), all padding (every
// split empty), one valid row, and more splits than tiles (empty splits).
TEST_F(Gpu, SharedRowsSplitsAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  const IndexPattern patterns[] = {IndexPattern::random, IndexPattern::padding_middle, IndexPattern::duplicates,
                                   IndexPattern::all_padding, IndexPattern::single_valid, IndexPattern::runs};
  int i = 0;
  for (int H : {16, 32, 64, 128})
    for (IndexPattern pattern : patterns) {
      const int T = 1 + i % 4, topk = i % 3 == 0 ? 63 : 2048;
      const HostProblem hp = make_problem(T, H, topk, 64, 200, pattern, 700 + i);
      for (int splits : {2, 7, 64 + i % 5}) {
        PlanChoice c;
        c.kernel = PlanChoice::Kernel::shared_rows;
        c.splits = splits;
        const SparseMlaPlan plan = plan_sparse_mla(T, H, topk, dev, c);
        ASSERT_EQ(plan.splits, splits);
        ASSERT_EQ(plan.ctas, (T * H / 16 + 3) / 4 * splits);
        const Agreement a = run_and_compare(hp, &plan);
        EXPECT_TRUE(a.ok()) << "T " << T << " H " << H << " topk " << topk << " " << workload::to_string(pattern) << " splits "
                            << splits << ": " << a.summary();
      }
      ++i;
    }
}

// The main kernel's CTAs take the groups largest union first, in the order pass's order. A
// decode batch of runs (1-2048 rows per token) at 32 heads (2 tokens per group) with more groups
// than SMs, groups whose tokens are all padding (the smallest bucket) and a partial last group
// (1029 tokens: 2058 head blocks, the last group holds 2): each group must be taken exactly once,
// or some output stays poisoned.
TEST_F(Gpu, SharedRowsTakesEveryGroupOnceLargestFirst) {
  HostProblem hp = make_problem(1029, 32, 2048, 64, 256, IndexPattern::runs, 4242);
  for (int t : {40, 41, 42, 43, 800, 801, 802, 803, 1028})
    std::fill_n(hp.indices.begin() + size_t(t) * hp.topk, hp.topk, -1);
  const SparseMlaPlan plan = shared_rows_plan(hp.T, hp.H, hp.topk);
  ASSERT_GT(plan.ctas, 2 * DeviceInfo::from_device(0).sm_count);
  const Agreement a = run_and_compare(hp, &plan);
  EXPECT_TRUE(a.ok()) << a.summary();
}

// The order pass places the groups 1024 at a time (one per thread): 1026 groups, the last one
// partial, take it round twice.
TEST_F(Gpu, SharedRowsOrdersMoreGroupsThanOneOrderRound) {
  const HostProblem hp = make_problem(4102, 16, 64, 64, 256, IndexPattern::runs, 4243);
  const SparseMlaPlan plan = shared_rows_plan(hp.T, hp.H, hp.topk);
  ASSERT_EQ(plan.ctas, 1026);
  const Agreement a = run_and_compare(hp, &plan);
  EXPECT_TRUE(a.ok()) << a.summary();
}

// ---- row order: CTAs gather their rows sorted by the row's top bits ------------------------
// The lists as a split-K plan with row order reads them, built on the host: each split's valid
// rows (a token with at most fused_rows valid rows: its whole list) stably sorted by the row's
// top 6 bits within the cache's range [0, 2^L), then padding. Without row order the kernel must
// give exactly the same bits on these lists as with row order on the originals.
std::vector<int32_t> lists_in_row_order(const HostProblem& hp, const SparseMlaPlan& plan) {
  int l = 0;
  while ((int64_t{1} << l) < hp.rows()) ++l;
  const int shift = std::max(0, l - 6);
  const auto names_a_row = [&](int32_t r) { return r >= 0 && r < hp.rows(); };
  std::vector<int32_t> sorted(hp.indices.size(), -1);
  for (int t = 0; t < hp.T; ++t) {
    const int32_t* list = &hp.indices[size_t(t) * hp.topk];
    const int valid = static_cast<int>(std::count_if(list, list + hp.topk, names_a_row));
    const int chunk = plan.fused_rows > 0 && valid <= plan.fused_rows ? hp.topk : plan.chunk;
    for (int c0 = 0; c0 < hp.topk; c0 += chunk) {
      const int c1 = std::min(hp.topk, c0 + chunk);
      std::vector<int32_t> rows;
      std::copy_if(list + c0, list + c1, std::back_inserter(rows), names_a_row);
      std::stable_sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) { return (a >> shift) < (b >> shift); });
      std::copy(rows.begin(), rows.end(), &sorted[size_t(t) * hp.topk + c0]);
    }
  }
  return sorted;
}

// Split-K with row order forced on, against the reference: every head count (in turn), padding anywhere,
// out-of-range entries, a row listed twice, all padding, one valid row, runs; one split and
// several (a split sorts its own run), the planner's splits with fused rows (split 0 sorts a short whole list), topk past
// one chunk; caches of 1 row, of exactly 2^13 rows and of 2^13 + 1 (the sort's bit range at its
// edges). Row order must change the summation order somewhere (or it did nothing), stay
// deterministic run to run, and match bit for bit the plain kernel on lists sorted on the host.
struct RowOrderCache {
  int page_size, num_pages;
};
class SplitKRowOrder : public GpuWithParam<RowOrderCache> {};

TEST_P(SplitKRowOrder, Agrees) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  const IndexPattern patterns[] = {IndexPattern::random,       IndexPattern::padding_middle, IndexPattern::out_of_range,
                                   IndexPattern::duplicates,   IndexPattern::all_padding,    IndexPattern::single_valid,
                                   IndexPattern::runs};
  const RowOrderCache cache = GetParam();
  int i = 7 * cache.num_pages;  // problems differ across caches
  bool some_order_changed = false;
  for (IndexPattern pattern : patterns) {
    const int T = 1 + i % 3, H = 16 << (i % 4), topk = i % 5 == 0 ? 63 : i % 5 == 1 ? 2049 : 2048;
    const HostProblem hp = make_problem(T, H, topk, cache.page_size, cache.num_pages, pattern, 900 + i);
    DeviceProblem d(hp);
    const SparseMlaProblem p = d.view();
    std::vector<double> ro, rl;
    reference(hp, ro, rl);
    for (int splits : {0, 1, 3}) {  // 0: the planner's (64 splits of 32 at 16 heads, fused rows)
      if (splits != 0 && splits < (topk + 2047) / 2048) continue;
      PlanChoice on, off;
      on.kernel = off.kernel = PlanChoice::Kernel::split_k;
      on.splits = off.splits = splits;
      on.row_order = 1;
      off.row_order = -1;
      const SparseMlaPlan plan = plan_sparse_mla(T, H, topk, dev, on), plain = plan_sparse_mla(T, H, topk, dev, off);
      ASSERT_TRUE(plan.row_order);
      ASSERT_FALSE(plain.row_order);
      const std::string what = "T " + std::to_string(T) + " H " + std::to_string(H) + " topk " + std::to_string(topk) +
                               " " + workload::to_string(pattern) + " rows " + std::to_string(hp.rows()) + " splits " +
                               std::to_string(plan.splits) + " fused_rows " + std::to_string(plan.fused_rows);
      const Agreement a = forward_and_judge(d, p, plan, ro, rl);
      EXPECT_TRUE(a.ok()) << what << ": " << a.summary();
      const auto ordered = d.out.get();
      const auto ordered_lse = d.lse.get();
      ASSERT_TRUE(forward_and_judge(d, p, plan, ro, rl).ok()) << what;
      ASSERT_EQ(d.out.get(), ordered) << what << ": not deterministic";
      ASSERT_TRUE(forward_and_judge(d, p, plain, ro, rl).ok()) << what;
      some_order_changed |= d.out.get() != ordered;
      const std::vector<int32_t> sorted = lists_in_row_order(hp, plan);
      ASSERT_EQ(cudaMemcpy(d.indices.ptr, sorted.data(), sorted.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_TRUE(forward_and_judge(d, p, plain, ro, rl).ok()) << what;
      EXPECT_EQ(d.out.get(), ordered) << what << ": not the order of a stable sort by the rows' top bits";
      EXPECT_EQ(d.lse.get(), ordered_lse) << what;
      ASSERT_EQ(cudaMemcpy(d.indices.ptr, hp.indices.data(), hp.indices.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
    ++i;
  }
  // One row has one order; every larger cache gets random lists that row order must reorder.
  if (cache.page_size * cache.num_pages > 1) EXPECT_TRUE(some_order_changed) << "row order never changed a result: is it on?";
}

INSTANTIATE_TEST_SUITE_P(Caches, SplitKRowOrder,
                         ::testing::Values(RowOrderCache{64, 128}, RowOrderCache{1, 8193}, RowOrderCache{1, 1},
                                           RowOrderCache{64, 200}),
                         [](const ::testing::TestParamInfo<RowOrderCache>& info) {
                           return "ps" + std::to_string(info.param.page_size) + "_pages" + std::to_string(info.param.num_pages);
                         });

// Shared rows at 64 and 128 heads with a union pass and row order forced on (the planner's at 64
// heads from 2^17 pairs): each token's list sorted in the union pass. Random rows with -1 in the middle, a row
// listed twice, runs, all padding, one valid row; one split and several.
TEST_F(Gpu, SharedRowsRowOrderAgrees) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  int i = 0;
  for (auto [T, H] : {std::tuple{140, 64}, std::tuple{70, 128}})
    for (IndexPattern pattern : {IndexPattern::padding_middle, IndexPattern::duplicates, IndexPattern::runs,
                                 IndexPattern::all_padding, IndexPattern::single_valid}) {
      const int splits = i % 2 == 0 ? 0 : 2;
      const HostProblem hp = make_problem(T, H, 2048, 64, 200, pattern, 950 + i++);
      PlanChoice c;
      c.kernel = PlanChoice::Kernel::shared_rows;
      c.splits = splits;
      c.row_order = 1;
      const SparseMlaPlan plan = plan_sparse_mla(T, H, 2048, dev, c);
      ASSERT_TRUE(plan.union_pass);
      ASSERT_TRUE(plan.row_order);  // the planner's at 64 heads past 1.7 waves of tokens (CPU planner tests)
      const Agreement a = run_and_compare(hp, &plan);
      EXPECT_TRUE(a.ok()) << "T " << T << " H " << H << " " << workload::to_string(pattern) << " splits " << plan.splits
                          << ": " << a.summary();
    }
}

// ---- forced kernel configurations: both tile sizes, one split and many ---------------------
TEST_F(Gpu, EveryTileSizeAndSplitCountAgrees) {
  const HostProblem hp = make_problem(4, 32, 2048, 64, 128, IndexPattern::padding_middle, 99);
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (int bk : {16, 32, 64})
    for (int splits : {1, 2, 3, 7, 32, 64}) {
      const SparseMlaPlan plan = plan_sparse_mla(4, 32, 2048, dev, PlanChoice{bk, splits});
      ASSERT_EQ(plan.block_keys, bk);
      const Agreement a = run_and_compare(hp, &plan);
      EXPECT_TRUE(a.ok()) << "block_keys " << bk << " splits " << plan.splits << ": " << a.summary();
    }
}

// The softmax split over the warps (SparseMlaPlan::split_softmax) forced on and off on a bf16
// cache: 32- and 64-row tiles, one split and several, row order, lists whose last tile is partial
// (topk 63, 300, 2049), -1 in the middle, runs, duplicates, one valid row, 16 / 32 / 64 heads.
// The planner's choice on this device is one of the two; fp8 always splits (its own tests).
TEST_F(Gpu, SplitSoftmaxOnAndOffAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  struct Case {
    int T, H, topk, block_keys, splits, row_order;
    IndexPattern pattern;
  };
  int i = 0;
  for (const Case c : {Case{3, 16, 2049, 32, 0, 0, IndexPattern::random}, Case{5, 16, 63, 32, 1, 0, IndexPattern::padding_middle},
                       Case{70, 16, 2048, 32, 0, 1, IndexPattern::random}, Case{4, 32, 300, 64, 2, 0, IndexPattern::runs},
                       Case{2, 16, 2048, 64, 1, 0, IndexPattern::duplicates}, Case{6, 64, 128, 32, 3, 0, IndexPattern::single_valid}})
    for (int split : {-1, 1}) {
      const HostProblem hp = make_problem(c.T, c.H, c.topk, 64, 200, c.pattern, 1200 + i++);
      PlanChoice choice;
      choice.kernel = PlanChoice::Kernel::split_k;
      choice.block_keys = c.block_keys;
      choice.splits = c.splits;
      choice.row_order = c.row_order;
      choice.split_softmax = split;
      const SparseMlaPlan plan = plan_sparse_mla(c.T, c.H, c.topk, dev, choice);
      ASSERT_EQ(plan.split_softmax, split == 1);
      const Agreement a = run_and_compare(hp, &plan);
      EXPECT_TRUE(a.ok()) << "T " << c.T << " H " << c.H << " topk " << c.topk << " block_keys " << plan.block_keys << " splits "
                          << plan.splits << " " << workload::to_string(c.pattern) << " split_softmax " << split << ": "
                          << a.summary();
    }
}

// Split partials are bf16 (src/sparse_mla/partials.cuh): an output that cancels partials of
// magnitude M carries up to ~2^-9 M more absolute error than fp32 partials would, the bound
// docs/design.md states. Here every token lists 2048 consecutive rows whose dims 256-511 (the
// output's, not the logits': Q is 0 there) are +A in the first half and -A in the second, so
// every split's partial is ~ +-A and the output their near-cancelling difference. Each element
// must stay within 2^-8 max|V| of float64 (a partial's bf16 rounding, under weights that sum to
// 1, plus P's). Split-K (16 heads, bf16 and fp8 caches) and shared rows' splits (the planner's
// plan at 128 heads, T = 4).
TEST_F(Gpu, SplitPartialsStayWithinBf16OfTheirValuesWhenTheyCancel) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  constexpr double kA = 37.3;
  struct Case {
    int T, H;
    bool fp8;
    PlanChoice::Kernel kernel;
  };
  for (const Case c : {Case{2, 16, false, PlanChoice::Kernel::split_k}, Case{2, 16, true, PlanChoice::Kernel::split_k},
                       Case{4, 128, false, PlanChoice::Kernel::planner}}) {
    HostProblem hp = make_problem(c.T, c.H, 2048, 64, 32 * c.T, IndexPattern::random, seed_of(c.T, c.H, c.fp8, 7));
    std::mt19937_64 rng(seed_of(c.T, c.H, c.fp8, 8));
    std::uniform_real_distribution<double> noise(-1.0, 1.0);
    for (int t = 0; t < c.T; ++t)
      for (int i = 0; i < 2048; ++i) hp.indices[size_t(t) * 2048 + i] = t * 2048 + i;
    for (int64_t r = 0; r < hp.rows(); ++r)
      for (int d = 256; d < kCkvDim; ++d)
        hp.ckv[size_t(r) * kCkvDim + d] = float_to_bf16(float((r % 2048 < 1024 ? kA : -kA) * (1.0 + 0.01 * noise(rng))));
    for (size_t i = 0; i < hp.q_nope.size(); ++i)
      if (i % kCkvDim >= 256) hp.q_nope[i] = 0;
    if (c.fp8) hp.to_fp8(false);
    double max_v = 0;
    for (uint16_t v : hp.ckv) max_v = std::max(max_v, std::fabs(double(bf16_to_float(v))));
    PlanChoice choice;
    choice.kernel = c.kernel;
    const SparseMlaPlan plan = plan_sparse_mla(c.T, c.H, 2048, dev, choice, IndexSharing::unknown, hp.kv_format);
    const std::string what = std::to_string(c.H) + " heads" + (c.fp8 ? " fp8" : "") + ", splits " + std::to_string(plan.splits);
    ASSERT_GT(plan.splits, 1) << what << ": the plan must write partials";
    ASSERT_EQ(plan.kernel == SparseMlaKernel::shared_rows, c.H == 128) << what;
    std::vector<double> ro, rl;
    reference(hp, ro, rl);
    DeviceProblem d(hp);
    const Agreement a = forward_and_judge(d, d.view(), plan, ro, rl);
    double cancelled = 0;
    for (size_t i = 0; i < ro.size(); ++i)
      if (i % kCkvDim >= 256) cancelled = std::max(cancelled, std::fabs(ro[i]));
    EXPECT_LT(cancelled, kA / 2) << what << ": the output must cancel the partials";  // 10.9 at 128 heads (run 411)
    EXPECT_EQ(a.non_finite, 0) << what;  // so max_abs_err covers every element
    EXPECT_LE(a.max_abs_err, std::ldexp(max_v, -8)) << what << ": " << a.summary();
    EXPECT_LE(a.max_lse_err, 1e-2) << what;
  }
}

// ---- fused rows: tokens with few valid indices finish in split 0, the rest are merged ------
// Per token, `counts[t]` valid rows at random positions; every other position holds -1 or an
// out-of-range row. Counts straddle one chunk (32 at T=1 H=16, 64 at T=8 H=16, 512 at T=64), so
// one launch mixes fused tokens, merged ones and splits that start inside runs of padding.
HostProblem problem_with_valid_counts(int T, int H, const std::vector<int>& counts, uint64_t seed) {
  HostProblem hp = make_problem(T, H, 2048, 64, 128, IndexPattern::random, seed);
  std::mt19937_64 rng(seed);
  const int num_rows = 64 * 128;
  for (int t = 0; t < T; ++t) {
    std::vector<int> pos(2048);
    for (int k = 0; k < 2048; ++k) pos[k] = k;
    std::shuffle(pos.begin(), pos.end(), rng);
    const int c = counts[t % counts.size()];
    for (int k = 0; k < 2048; ++k) {
      int32_t& v = hp.indices[size_t(t) * 2048 + pos[k]];
      v = k < c ? int32_t(rng() % num_rows) : (k % 3 == 0 ? num_rows + int32_t(k) : k % 3 == 1 ? -1 : -7);
    }
  }
  return hp;
}

TEST_F(Gpu, FusedRowsAgreeWithTheReferenceAndWithMergedSplits) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  const std::vector<int> counts = {0, 1, 2, 31, 32, 33, 63, 64, 65, 100, 511, 512, 513, 700, 2048};
  // Split-K at 16 heads and at T = 1; shared rows with splits at 64 and 128 heads from T = 8
  // (chunks of 256 / 512 / 1024 entries: the counts straddle them).
  for (int T : {1, 8, 16, 64})
    for (int H : {16, 64, 128}) {
      if (T == 64 && H == 128) continue;  // one split: no fused rows
      for (size_t first = 0; first < (T == 1 ? counts.size() : 1); ++first) {
        std::vector<int> c(counts.begin() + first, counts.end());
        const HostProblem hp = problem_with_valid_counts(T, H, c, seed_of(T, H, int(first), 11));
        DeviceProblem d(hp);
        const SparseMlaProblem p = d.view();
        std::vector<double> ro, rl;
        reference(hp, ro, rl);
        PlanChoice on, off, wide;
        off.fused_rows = -1;
        wide.fused_rows = 100;
        const SparseMlaPlan plans[] = {plan_sparse_mla(T, H, 2048, dev, on), plan_sparse_mla(T, H, 2048, dev, off),
                                       plan_sparse_mla(T, H, 2048, dev, wide)};
        ASSERT_GT(plans[0].fused_rows, 0) << "T " << T << " H " << H;
        ASSERT_EQ(plans[1].fused_rows, 0);
        std::vector<uint16_t> outs[3];
        for (int i = 0; i < 3; ++i) {
          const Agreement a = forward_and_judge(d, p, plans[i], ro, rl);
          EXPECT_TRUE(a.ok()) << "T " << T << " H " << H << " first count " << c[0] << " fused_rows "
                              << plans[i].fused_rows << ": " << a.summary();
          outs[i] = d.out.get();
        }
        // A token above the threshold reads the same rows per split either way: bitwise equal.
        const size_t row = size_t(H) * kCkvDim;
        for (int t = 0; t < T; ++t)
          if (c[t % c.size()] > plans[0].fused_rows)
            ASSERT_TRUE(std::equal(outs[0].begin() + t * row, outs[0].begin() + (t + 1) * row, outs[1].begin() + t * row))
                << "T " << T << " H " << H << " token " << t;
      }
    }
}

// ---- balanced split-K: splits sized by each token's valid rows, from a schedule per step -----
SparseMlaPlan balanced_plan(const HostProblem& hp, int split_softmax = 0) {
  PlanChoice on;
  on.balanced = 1;
  on.split_softmax = split_softmax;
  return plan_sparse_mla(hp.T, hp.H, hp.topk, DeviceInfo::from_device(0), on);
}

// A balanced forward on `hp` judged against the reference, its schedule made from
// `schedule_from`'s indices (another problem of the same shape, or hp itself) into a poisoned
// buffer, the workspace and outputs poisoned too. `schedule` receives the buffer's bytes.
Agreement balanced_forward_and_judge(const HostProblem& hp, const HostProblem& schedule_from,
                                     std::vector<uint8_t>* schedule = nullptr, int split_softmax = 0) {
  const SparseMlaPlan plan = balanced_plan(hp, split_softmax);
  EXPECT_TRUE(plan.balanced);
  DeviceProblem d(hp), d_from(schedule_from);
  std::vector<double> ro, rl;
  reference(hp, ro, rl);
  d.poison();
  DeviceBuffer<uint8_t> sched(plan.schedule_bytes), ws(plan.workspace_bytes);
  EXPECT_EQ(cudaMemset(sched.ptr, 0xff, plan.schedule_bytes), cudaSuccess);
  EXPECT_EQ(cudaMemset(ws.ptr, 0xff, plan.workspace_bytes), cudaSuccess);
  make_sparse_mla_schedule(d_from.view(), plan, sched.ptr, plan.schedule_bytes, nullptr);
  SparseMlaProblem p = d.view();
  p.schedule = sched.ptr;
  p.schedule_bytes = plan.schedule_bytes;
  sparse_mla_forward(p, plan, ws.ptr, plan.workspace_bytes, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (schedule != nullptr) *schedule = sched.get();
  return judge(d, ro, rl);
}

// ---- lists of at most 2 valid rows: the lean path (FMAs, no tile pipeline) -----------------
// Every token of T holds counts[(t + shift) % 7] valid rows, 0-6 (the lean path takes up to
// kLeanRows = 2, the tile path the rest), at random positions among -1 and out-of-range
// entries, its second row a repeat of its first.
// Each head count; the planner's plan (fused rows at small T), one split per token (every CTA
// writes bf16 itself), row order and, at 16 heads, a balanced plan; outputs strided.
TEST_F(Gpu, FewRowsAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  std::vector<int> counts = {0, 1, 2, 3, 4, 5, 6};
  int shift = 0;
  for (int H : {16, 32, 64, 128})
    for (int T : {1, 1, 1, 7, 40}) {
      std::rotate(counts.begin(), counts.begin() + (shift++ % 3 + 1), counts.end());
      HostProblem hp = problem_with_valid_counts(T, H, counts, seed_of(T, H, shift, 13));
      for (int t = 0; t < T; ++t) {  // the second valid entry repeats the first
        int32_t* list = &hp.indices[size_t(t) * 2048];
        int32_t* first = nullptr;
        for (int k = 0; k < 2048; ++k)
          if (list[k] >= 0 && list[k] < hp.rows()) {
            if (first == nullptr) {
              first = &list[k];
            } else {
              list[k] = *first;
              break;
            }
          }
      }
      DeviceProblem d(hp, /*out_pad=*/24, /*lse_pad=*/3);
      const SparseMlaProblem p = d.view();
      std::vector<double> ro, rl;
      reference(hp, ro, rl);
      PlanChoice one_split, row_order;
      one_split.kernel = row_order.kernel = PlanChoice::Kernel::split_k;
      one_split.splits = 1;
      row_order.row_order = 1;
      std::vector<SparseMlaPlan> plans = {plan_sparse_mla(p), plan_sparse_mla(T, H, 2048, dev, one_split),
                                          plan_sparse_mla(T, H, 2048, dev, row_order)};
      for (const SparseMlaPlan& plan : plans) {
        const Agreement a = forward_and_judge(d, p, plan, ro, rl);
        EXPECT_TRUE(a.ok()) << "T " << T << " H " << H << " first count " << counts[0] << " splits " << plan.splits
                            << " fused_rows " << plan.fused_rows << " row_order " << plan.row_order << ": " << a.summary();
      }
      if (H == 16) {
        const Agreement a = balanced_forward_and_judge(hp, hp);
        EXPECT_TRUE(a.ok()) << "balanced T " << T << " first count " << counts[0] << ": " << a.summary();
      }
    }
}

// Lists of at most 32 positions in one split per token (a caller passing topk = L, the lists'
// valid length, with their full stride): every warp counts the list by one ballot, lists of at
// most 2 rows take the lean path and longer ones are compacted by warp 0 alone. Counts 0-4, half
// the list and all of it, anywhere in lists of 1-33 positions,
// the rest -1, out of range above and below, a row listed twice, per-token lengths that cut a
// valid entry off, and list strides whose gap holds rows that must not be read; both formats,
// the planner's plan and one forced split.
TEST_F(Gpu, TinyListsAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  int case_id = 0;
  for (KvCacheFormat format : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
    for (int topk : {1, 2, 3, 5, 31, 32, 33})
      for (int H : {16, 32, 64, 128}) {
        const int T = 1 + case_id % 5;  // 1-5 tokens
        const uint64_t seed = seed_of(topk, H, int(format), 17);
        HostProblem hp = make_problem(T, H, topk, 64, 16, IndexPattern::random, seed);
        if (format == KvCacheFormat::fp8_ds_mla) hp.to_fp8(false);
        std::mt19937_64 rng(seed);
        const int32_t rows = static_cast<int32_t>(hp.rows());
        for (int t = 0; t < T; ++t) {
          std::vector<int> pos(static_cast<size_t>(topk));
          for (int k = 0; k < topk; ++k) pos[size_t(k)] = k;
          std::shuffle(pos.begin(), pos.end(), rng);
          // 0-4 rows (the lean path and past it), half the list, all of it.
          const int counts[] = {0, 1, 2, 3, 4, topk / 2, topk};
          const int count = std::min(topk, counts[(case_id + t) % 7]);
          for (int k = 0; k < topk; ++k) {
            int32_t& v = hp.indices[size_t(t) * topk + pos[size_t(k)]];
            v = k < count ? static_cast<int32_t>(rng() % rows) : (k % 3 == 0 ? rows + k : k % 3 == 1 ? -1 : -7);
          }
          if (count >= 2 && t % 2 == 1) hp.indices[size_t(t) * topk + pos[1]] = hp.indices[size_t(t) * topk + pos[0]];
        }
        // Lengths on every other case: each token's list cut at a random point (0 .. topk + 2).
        std::vector<int32_t> len;
        if (case_id % 2 == 1)
          for (int t = 0; t < T; ++t) len.push_back(static_cast<int32_t>(rng() % (topk + 3)));
        HostProblem cut = hp;
        if (!len.empty()) cut.keep_first_positions(len);
        std::vector<double> ro, rl;
        reference(cut, ro, rl);
        // The lists at a stride of topk + 9, every gap entry a row.
        const int64_t stride = topk + 9;
        std::vector<int32_t> wide(size_t(T) * stride);
        for (int t = 0; t < T; ++t)
          for (int64_t k = 0; k < stride; ++k)
            wide[size_t(t * stride + k)] = k < topk ? hp.indices[size_t(t) * topk + k] : static_cast<int32_t>(k % rows);
        DeviceProblem d(hp, /*out_pad=*/8, /*lse_pad=*/2);
        DeviceBuffer<int32_t> didx(wide);
        DeviceBuffer<int32_t> dlen(len.empty() ? std::vector<int32_t>(1, 0) : len);
        SparseMlaProblem p = d.view();
        p.indices = didx.ptr;
        p.indices_token_stride = stride;
        if (!len.empty()) p.topk_lengths = dlen.ptr;
        PlanChoice one_split;
        one_split.kernel = PlanChoice::Kernel::split_k;
        one_split.splits = 1;
        for (const SparseMlaPlan& plan : {plan_sparse_mla(p), plan_sparse_mla(T, H, topk, dev, one_split, IndexSharing::unknown, format)}) {
          const Agreement a = forward_and_judge(d, p, plan, ro, rl);
          EXPECT_TRUE(a.ok()) << (format == KvCacheFormat::bf16 ? "bf16" : "fp8") << " T " << T << " H " << H << " topk "
                              << topk << " lengths " << !len.empty() << " splits " << plan.splits << " fused_rows "
                              << plan.fused_rows << ": " << a.summary();
        }
        ++case_id;
      }
}

struct BalancedCase {
  const char* name;
  int T, H, topk;
  IndexPattern pattern;     // with counts empty
  std::vector<int> counts;  // valid rows per token (cycled), topk 2048
};

class Balanced : public GpuWithParam<BalancedCase> {};

// The result against the reference, and each token's (first slot, splits) in the schedule
// against the host rule of params.h over the same counts.
TEST_P(Balanced, MatchesReferenceAndTheHostSchedule) {
  const BalancedCase c = GetParam();
  const uint64_t seed = seed_of(c.T, c.H, c.topk, int(c.pattern) + int(c.counts.size()));
  const HostProblem hp = c.counts.empty() ? make_problem(c.T, c.H, c.topk, 64, 128, c.pattern, seed)
                                          : problem_with_valid_counts(c.T, c.H, c.counts, seed);
  std::vector<uint8_t> w;
  const Agreement a = balanced_forward_and_judge(hp, hp, &w);
  EXPECT_TRUE(a.ok()) << a.summary();

  const SparseMlaPlan plan = balanced_plan(hp);
  const Agreement other = balanced_forward_and_judge(hp, hp, nullptr, plan.split_softmax ? -1 : 1);  // the other softmax
  EXPECT_TRUE(other.ok()) << "split_softmax " << !plan.split_softmax << ": " << other.summary();
  const int slots = plan.ctas / (hp.H / kHeadGroup);
  std::vector<int> tiles(hp.T);
  for (int t = 0; t < hp.T; ++t) {
    int n = 0;
    for (int k = 0; k < hp.topk; ++k) n += detail::names_a_row(hp.indices[size_t(t) * hp.topk + k], int(hp.rows()));
    tiles[t] = (n + plan.block_keys - 1) / plan.block_keys;
  }
  const int k = detail::balanced_tiles_per_split(tiles.data(), hp.T, slots, plan.splits);
  const detail::ScheduleLayout l = detail::schedule_layout(hp.T, slots);
  int first = 0;
  for (int t = 0; t < hp.T; ++t) {
    int run[2];
    std::memcpy(run, &w[l.token_splits + size_t(t) * 8], 8);
    const int splits = detail::balanced_splits_of(tiles[t], k);
    ASSERT_EQ(run[0], first) << "token " << t << " (tiles per split " << k << ")";
    ASSERT_EQ(run[1], splits) << "token " << t << " tiles " << tiles[t] << " (tiles per split " << k << ")";
    first += splits;
  }
  EXPECT_LE(first, slots);
}

std::vector<BalancedCase> balanced_cases() {
  const std::vector<int> mixed = {0, 1, 2048, 31, 32, 33, 700, 5, 1500, 64, 337, 2047};
  return {
      {"T8_runs_mixed", 8, 16, 2048, IndexPattern::random, {1, 2048, 33, 700, 5, 1500, 64, 337}},
      {"T64_mixed", 64, 16, 2048, IndexPattern::random, mixed},
      {"T3_H32_mixed", 3, 32, 2048, IndexPattern::random, mixed},
      {"T2_H64_mixed", 2, 64, 2048, IndexPattern::random, {2048, 40}},
      {"T300_runs", 300, 16, 2048, IndexPattern::runs, {}},  // more tokens than one wave's slots
      {"T1000_topk100", 1000, 16, 100, IndexPattern::padding_middle, {}},  // 8 tokens per thread
      {"T1_random", 1, 16, 2048, IndexPattern::random, {}},
      {"T4_all_padding", 4, 16, 2048, IndexPattern::all_padding, {}},
      {"T6_single_valid", 6, 16, 2048, IndexPattern::single_valid, {}},
      {"T5_H64_topk63", 5, 64, 63, IndexPattern::padding_middle, {}},
      {"T2_H128_topk64_dups", 2, 128, 64, IndexPattern::duplicates, {}},
      {"T17_topk2047_out_of_range", 17, 16, 2047, IndexPattern::out_of_range, {}},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, Balanced, ::testing::ValuesIn(balanced_cases()),
                         [](const ::testing::TestParamInfo<BalancedCase>& info) { return std::string(info.param.name); });

// A schedule made from other counts (another layer, a stale step) changes the splits, never the result.
TEST_F(Gpu, BalancedScheduleFromOtherCountsStaysCorrect) {
  const HostProblem hp = problem_with_valid_counts(64, 16, {1, 2048, 33, 700, 5, 1500, 64, 337}, 901);
  const HostProblem other = problem_with_valid_counts(64, 16, {2048, 3, 0, 1024, 64}, 902);
  const Agreement a = balanced_forward_and_judge(hp, other);
  EXPECT_TRUE(a.ok()) << a.summary();
}

TEST_F(Gpu, BalancedPlansNeedTheirScheduleAndOnlyThey) {
  const HostProblem hp = make_problem(8, 16, 2048, 64, 64, IndexPattern::runs, 903);
  const SparseMlaPlan plan = balanced_plan(hp);
  const SparseMlaPlan plain = plan_sparse_mla(hp.T, hp.H, hp.topk, DeviceInfo::from_device(0));
  DeviceProblem d(hp);
  SparseMlaProblem p = d.view();
  DeviceBuffer<uint8_t> ws(std::max(plan.workspace_bytes, plain.workspace_bytes)), schedule(plan.schedule_bytes);
  EXPECT_NE(error_message([&] { sparse_mla_forward(p, plan, ws.ptr, plan.workspace_bytes, nullptr); }).find("schedule"), std::string::npos);
  EXPECT_NE(error_message([&] { make_sparse_mla_schedule(p, plain, schedule.ptr, plan.schedule_bytes, nullptr); }).find("plan"),
            std::string::npos);
  EXPECT_NE(error_message([&] { make_sparse_mla_schedule(p, plan, schedule.ptr, plan.schedule_bytes - 16, nullptr); }).find("schedule_bytes"),
            std::string::npos);
  EXPECT_NE(error_message([&] { make_sparse_mla_schedule(p, plan, nullptr, plan.schedule_bytes, nullptr); }).find("schedule"),
            std::string::npos);
  p.schedule = schedule.ptr;
  EXPECT_NE(error_message([&] { sparse_mla_forward(p, plain, ws.ptr, plain.workspace_bytes, nullptr); }).find("schedule"), std::string::npos);
  SparseMlaPlan edited = plan;
  edited.ctas += 1;
  EXPECT_NE(error_message([&] { sparse_mla_forward(p, edited, ws.ptr, plan.workspace_bytes, nullptr); }).find("plan"), std::string::npos);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing was launched
}

// ---- an fp8_ds_mla cache (split-K converts MMA fragments; shared rows converts each tile) ----
// Every H x topk x pattern as Sweep (fewer patterns past 16 heads), block scales from each
// block's maximum, against the float64 reference of the dequantized values.
class Fp8Sweep : public Sweep {};

TEST_P(Fp8Sweep, MatchesReference) {
  const SweepCase c = GetParam();
  HostProblem hp = make_problem(3, c.H, c.topk, c.page_size, c.page_size == 1 ? 6000 : 100, c.pattern,
                                seed_of(c.H, c.topk, int(c.pattern), c.page_size + 8), /*prefix_len=*/3000);
  hp.to_fp8(false);
  const Agreement a = run_and_compare(hp);
  EXPECT_TRUE(a.ok()) << a.summary();
}

std::vector<SweepCase> fp8_cases() {
  std::vector<SweepCase> v;
  for (const SweepCase& c : sweep_cases())
    if (c.topk != 64 && (c.H == 16 || c.pattern == IndexPattern::random || c.pattern == IndexPattern::padding_middle ||
                         c.pattern == IndexPattern::duplicates))
      v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllHeadsTopkPatterns, Fp8Sweep, ::testing::ValuesIn(fp8_cases()),
                         sweep_case_name);

// The same cases on the shared-rows kernel, forced (T = 5: a CTA with one token at 16 heads).
class Fp8SharedRowsSweep : public Sweep {};

TEST_P(Fp8SharedRowsSweep, MatchesReference) { expect_shared_rows_agree(GetParam(), true); }

std::vector<SweepCase> fp8_shared_rows_cases() { return shared_rows_subset(fp8_cases()); }

INSTANTIATE_TEST_SUITE_P(AllHeadsTopkPatterns, Fp8SharedRowsSweep, ::testing::ValuesIn(fp8_shared_rows_cases()),
                         sweep_case_name);

// fp8 through the shared-rows kernel's paths, each against the float64 reference: entry words
// with the bitmap union (a prefill group), key counts (a row listed twice, the sort), 32 heads'
// paired lists, splits and the combine, CTAs that compact their own list (64 and 128 heads, one
// wave and below it with splits), the union and order passes, and row order.
TEST_F(Gpu, Fp8SharedRowsPathsAgree) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  struct Case {
    int T, H, topk;
    IndexPattern pattern;
    int splits;     // 0: the planner's
    int row_order;  // PlanChoice::row_order
  };
  const Case cases[] = {
      {8, 16, 2048, IndexPattern::shared_prefix, 0, 0}, {8, 16, 2048, IndexPattern::duplicates, 0, 0},
      {6, 32, 300, IndexPattern::padding_middle, 0, 0}, {3, 32, 2048, IndexPattern::duplicates, 0, 0},
      {4, 64, 2048, IndexPattern::padding_middle, 7, 0}, {2, 16, 63, IndexPattern::single_valid, 64, 0},
      {8, 64, 2048, IndexPattern::random, 0, 0},        {5, 128, 2048, IndexPattern::duplicates, 0, 0},
      {70, 64, 600, IndexPattern::runs, 0, 0},          {140, 64, 600, IndexPattern::runs, 0, 0},
      {70, 128, 2048, IndexPattern::padding_middle, 0, 1}, {4, 128, 2048, IndexPattern::all_padding, 0, 0},
  };
  int i = 0;
  for (const Case& c : cases) {
    HostProblem hp = make_problem(c.T, c.H, c.topk, 64, 200, c.pattern, 1700 + i++, /*prefix_len=*/3000);
    hp.to_fp8(false);
    PlanChoice choice;
    choice.kernel = PlanChoice::Kernel::shared_rows;
    choice.splits = c.splits;
    choice.row_order = c.row_order;
    const SparseMlaPlan plan = plan_sparse_mla(c.T, c.H, c.topk, dev, choice);
    const Agreement a = run_and_compare(hp, &plan);
    EXPECT_TRUE(a.ok()) << "T " << c.T << " H " << c.H << " topk " << c.topk << " " << workload::to_string(c.pattern)
                        << " splits " << plan.splits << (plan.union_pass ? " union pass" : "") << ": " << a.summary();
  }
}

// Block scales of many magnitudes: blocks scaled by 2^-40 .. 2^0 (a tile mixes them: the
// shared-rows kernel's f16 tile holds each key over its own power of two and P carries the ratio
// to the largest so far), rows of all-zero scales (their kpe still scores), a block at 0 beside
// blocks that are not, and query heads 2^12 apart (one Q shift per CTA). Shared rows and
// split-K, against the float64 reference of the same values. (Logits stay as large as the other
// tests': the shared-rows kernel's f16 values carry a relative error of 2^-12, so its logits'
// absolute error grows with their size; design.md, "FP8 KV cache".)
TEST_F(Gpu, Fp8ScalesOfManyMagnitudes) {
  HostProblem hp = make_problem(8, 64, 512, 64, 16, IndexPattern::random, 8484);
  hp.to_fp8(false);
  std::mt19937 rng(3);
  for (int64_t r = 0; r < hp.rows(); ++r) {
    float* scales = reinterpret_cast<float*>(&hp.kv_fp8[size_t(r) * kFp8RowBytes + kFp8ScalesOffset]);
    const int kind = int(rng() % 8);
    for (int b = 0; b < kCkvDim / kFp8ScaleDims; ++b) {
      if (kind == 0) scales[b] = 0.f;                                               // the whole row
      else if (kind == 1 && b == 2) scales[b] = 0.f;                                // one block
      else if (kind >= 4) scales[b] = std::ldexp(scales[b], int(rng() % 41) - 40);  // 2^-40 .. 2^0
    }
  }
  for (int t = 0; t < hp.T; ++t)
    for (int h = 0; h < hp.H; ++h) {
      const float f = h % 2 == 0 ? std::ldexp(1.f, -12) : 1.f;
      for (int d = 0; d < kCkvDim; ++d) {
        uint16_t& q = hp.q_nope[(size_t(t) * hp.H + h) * kCkvDim + d];
        q = float_to_bf16(bf16_to_float(q) * f);
      }
      for (int d = 0; d < kKpeDim; ++d) {
        uint16_t& q = hp.q_pe[(size_t(t) * hp.H + h) * kKpeDim + d];
        q = float_to_bf16(bf16_to_float(q) * f);
      }
    }
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (PlanChoice::Kernel kernel : {PlanChoice::Kernel::shared_rows, PlanChoice::Kernel::split_k}) {
    PlanChoice c;
    c.kernel = kernel;
    const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev, c);
    const Agreement a = run_and_compare(hp, &plan);
    EXPECT_TRUE(a.ok()) << (kernel == PlanChoice::Kernel::shared_rows ? "shared_rows: " : "split_k: ") << a.summary();
  }
}

// Each token lists topk distinct random rows of the cache in ascending order.
void list_random_rows_ascending(HostProblem& hp) {
  for (int t = 0; t < hp.T; ++t) {
    std::vector<int32_t> rows(size_t(hp.rows()));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), std::mt19937(t));
    std::sort(rows.begin(), rows.begin() + hp.topk);
    std::copy(rows.begin(), rows.begin() + hp.topk, hp.indices.begin() + size_t(t) * hp.topk);
  }
}

// The softmax's scale and its running max, both formats: a negative sm_scale (split-K negates Q
// and multiplies by the scale's magnitude), a zero one (every weight 1), a large one (logits
// spread over ~100 in log2), and logits that climb through the list (rows listed in ascending
// order, each ~0.8 above the last tile's in log2 at 32 keys per tile: split-K keeps its running
// max until a tile passes it by more than 8, so P reaches ~2^8 between O's rescales). Split-K with
// one split of 2048 keys (32- and, fp8, 64-row tiles), the planner's splits, 2 valid rows (the
// lean path) and shared rows, against the float64 reference.
TEST_F(Gpu, SoftmaxScaleSignsAndClimbingLogits) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (int fp8 = 0; fp8 < 2; ++fp8)
    for (int variant = 0; variant < 4; ++variant) {
      HostProblem hp = make_problem(3, 16, 2048, 64, 64, IndexPattern::random, seed_of(fp8, variant, 2048, 5));
      if (variant == 0) hp.sm_scale = -0.1352337788608801f;
      if (variant == 1) hp.sm_scale = 0.f;
      if (variant == 2) hp.sm_scale = 0.5f;
      if (variant == 3) {  // Q's first 256 dims 0.5, row r's 2 r / rows: the logit climbs with r
        for (size_t i = 0; i < hp.q_nope.size(); ++i)
          if (i % kCkvDim < 256) hp.q_nope[i] = float_to_bf16(0.5f);
        for (int64_t r = 0; r < hp.rows(); ++r)
          for (int d = 0; d < 256; ++d) hp.ckv[size_t(r) * kCkvDim + d] = float_to_bf16(2.f * float(r) / float(hp.rows()));
        list_random_rows_ascending(hp);
      }
      if (fp8) hp.to_fp8(false);
      const std::string what = std::string(fp8 ? "fp8" : "bf16") + " sm_scale " + std::to_string(hp.sm_scale) +
                               (variant == 3 ? " climbing" : "");
      struct Choice {
        const char* name;
        PlanChoice c;
        int valid;  // > 0: only the first `valid` positions of each list
      };
      std::vector<Choice> choices = {{"planner", {}, 0}, {"one split", {}, 0}, {"2 valid", {}, 2}, {"shared rows", {}, 0}};
      choices[1].c.kernel = PlanChoice::Kernel::split_k, choices[1].c.splits = 1, choices[1].c.block_keys = 32;
      choices[3].c.kernel = PlanChoice::Kernel::shared_rows;
      if (fp8) {
        choices.push_back({"one split, 64 rows", {}, 0});
        choices.back().c.kernel = PlanChoice::Kernel::split_k, choices.back().c.splits = 1, choices.back().c.block_keys = 64;
      }
      for (const Choice& ch : choices) {
        HostProblem h = hp;
        if (ch.valid > 0)
          h.keep_first_positions(ch.valid);
        const SparseMlaPlan plan = plan_sparse_mla(h.T, h.H, h.topk, dev, ch.c, IndexSharing::unknown, h.kv_format);
        const Agreement a = run_and_compare(h, &plan);
        EXPECT_TRUE(a.ok()) << what << ", " << ch.name << ": " << a.summary();
      }
    }
}

// fp8 split-K keeps O in units of the largest block scale seen so far: ascending lists whose
// first ~100 rows (rows < 200) have all-zero scales (values 0, kpe still scoring) and whose
// other rows are scaled by 2^-30 must come out at their own tiny size (a unit stuck at 1 would
// flush their f16 P to 0: relative L2 error 1). One split (32- and 64-row tiles) and the
// planner's splits.
TEST_F(Gpu, Fp8ZeroScalesFirstThenTinyScales) {
  HostProblem hp = make_problem(2, 16, 2048, 64, 64, IndexPattern::random, 6161);
  list_random_rows_ascending(hp);  // the zero-scale rows come first
  hp.to_fp8(false);
  for (int64_t r = 0; r < hp.rows(); ++r) {
    float* scales = reinterpret_cast<float*>(&hp.kv_fp8[size_t(r) * kFp8RowBytes + kFp8ScalesOffset]);
    for (int b = 0; b < kCkvDim / kFp8ScaleDims; ++b) scales[b] = r < 200 ? 0.f : std::ldexp(scales[b], -30);
  }
  const DeviceInfo dev = DeviceInfo::from_device(0);
  for (int block_keys : {0, 32, 64}) {
    PlanChoice c;
    c.kernel = PlanChoice::Kernel::split_k;
    if (block_keys > 0) c.block_keys = block_keys, c.splits = 1;
    const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, dev, c, IndexSharing::unknown, hp.kv_format);
    const Agreement a = run_and_compare(hp, &plan);
    EXPECT_TRUE(a.ok()) << "block_keys " << plan.block_keys << " splits " << plan.splits << ": " << a.summary();
  }
}

// With power-of-two block scales every dequantized value is exact in bf16, so the fp8 cache and
// the bf16 cache of its values are the same problem. Under the same plan the kernel must give
// the reference's answer for both and nearly the same outputs: P V multiplies the same products
// (P x scale x e4m3 = P x value), only S sums its dims in another order (by scale block), which
// can move a weight's bf16 rounding by a step, and split partials are rounded to bf16 in each
// (relative L2 difference <= 4e-3, 2.5x below the reference's tolerance; 2.0e-3 measured at
// 128 heads topk 63, run 410; a misapplied scale moves it by O(1)). Covers the lean path (1 and 2 valid rows), fused
// rows, merged splits, row order (T x topk >= 2^17), one split per token, a balanced schedule,
// and 32 to 128 heads; each case (topk <= 2048, not balanced) also on the shared-rows kernel,
// whose P is f16 where the bf16 cache's is bf16 (a step of either moves a weight by <= 2^-9).
TEST_F(Gpu, Fp8AgreesWithTheBf16CacheOfItsValues) {
  struct Case {
    int T, H, topk;
    IndexPattern pattern;
    int valid;  // > 0: only the first `valid` positions of each list
    bool balanced;
  };
  const Case cases[] = {
      {1, 16, 2048, IndexPattern::random, 1, false},  {1, 16, 2048, IndexPattern::random, 2, false},
      {1, 16, 2048, IndexPattern::random, 0, false},  {4, 16, 2048, IndexPattern::random, 33, false},
      {64, 16, 2048, IndexPattern::random, 0, false}, {300, 16, 100, IndexPattern::padding_middle, 0, false},
      {8, 16, 2048, IndexPattern::runs, 0, true},     {5, 32, 2049, IndexPattern::duplicates, 0, false},
      {2, 64, 2048, IndexPattern::random, 0, false},  {3, 128, 63, IndexPattern::out_of_range, 0, false},
      {1024, 16, 2, IndexPattern::random, 0, false},
  };
  for (const Case& c : cases) {
    HostProblem hp = make_problem(c.T, c.H, c.topk, 64, 128, c.pattern, seed_of(c.T, c.H, c.topk, c.valid));
    if (c.valid > 0)
      hp.keep_first_positions(c.valid);
    hp.to_fp8(true);
    const HostProblem bf = hp.as_bf16();
    const std::string what = "T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " topk " + std::to_string(c.topk) + " " +
                             workload::to_string(c.pattern) + " valid " + std::to_string(c.valid);
    for (PlanChoice::Kernel kernel : {PlanChoice::Kernel::split_k, PlanChoice::Kernel::shared_rows}) {
      if (kernel == PlanChoice::Kernel::shared_rows && (c.balanced || c.topk > SparseMlaPlan::kMaxChunk)) continue;
      const std::string run = what + (kernel == PlanChoice::Kernel::shared_rows ? " (shared_rows)" : " (split_k)");
      std::vector<uint16_t> out[2];
      std::vector<float> lse[2];
      for (int fp8 = 0; fp8 < 2; ++fp8) {
        const HostProblem& which = fp8 ? hp : bf;
        DeviceProblem d(which);
        std::vector<double> ro, rl;
        reference(which, ro, rl);
        PlanChoice choice;
        choice.kernel = kernel;
        const SparseMlaPlan plan = c.balanced ? balanced_plan(which) : plan_sparse_mla(c.T, c.H, c.topk, DeviceInfo::from_device(0), choice);
        SparseMlaProblem p = d.view();
        DeviceBuffer<uint8_t> schedule(plan.schedule_bytes);
        if (c.balanced) {
          make_sparse_mla_schedule(p, plan, schedule.ptr, plan.schedule_bytes, nullptr);
          p.schedule = schedule.ptr;
          p.schedule_bytes = plan.schedule_bytes;
        }
        const Agreement a = forward_and_judge(d, p, plan, ro, rl);
        ASSERT_TRUE(a.ok()) << run << (fp8 ? " fp8: " : " bf16: ") << a.summary();
        out[fp8] = d.out.get();
        lse[fp8] = d.lse.get();
      }
      // The difference a scale applied wrongly would make is of the outputs' own size; one bf16
      // step of P on a key moves an element by up to 2^-8 of that key's weighted row, one of a
      // partial by up to 2^-8 of the partial.
      ASSERT_EQ(out[1].size(), out[0].size());
      double diff2 = 0, ref2 = 0;
      for (size_t i = 0; i < out[0].size(); ++i) {
        const double a = bf16_to_float(out[0][i]), b = bf16_to_float(out[1][i]);
        diff2 += (a - b) * (a - b);
        ref2 += a * a;
      }
      EXPECT_LE(std::sqrt(diff2 / std::max(ref2, 1e-30)), 4e-3) << run << ": fp8 and bf16 outputs differ";
      for (size_t i = 0; i < lse[0].size(); ++i) {
        if (std::isinf(lse[0][i])) {
          ASSERT_EQ(lse[1][i], lse[0][i]) << run << " lse " << i;
          continue;
        }
        ASSERT_NEAR(lse[1][i], lse[0][i], 1e-4f) << run << " lse " << i;
      }
    }
  }
}

// Every e4m3 code but NaN in one row (subnormals and both zeros included), its four blocks at
// scales 1, 2^-3, 2^5 and 2^-10: a list of that row once (the lean path) or four times (the tile
// path, weights 1/4) must give out = the row's values exactly (each exact in bf16).
TEST_F(Gpu, Fp8EveryCodeDequantizesExactly) {
  HostProblem hp = make_problem(2, 16, 4, 64, 2, IndexPattern::random, 78);
  hp.to_fp8(true);
  constexpr int kRow = 5;
  uint8_t* row = &hp.kv_fp8[size_t(kRow) * kFp8RowBytes];
  for (int d = 0; d < kCkvDim; ++d) row[d] = static_cast<uint8_t>((d & 0x7f) == 0x7f ? d ^ 1 : d);  // 0x7f, 0xff: NaN
  const float scales[4] = {1.f, 0.125f, 32.f, std::ldexp(1.f, -10)};
  std::memcpy(row + kFp8ScalesOffset, scales, sizeof scales);
  hp.indices = {kRow, -1, -1, -1, kRow, kRow, kRow, kRow};
  DeviceProblem d(hp);
  std::vector<double> ro, rl;
  reference(hp, ro, rl);
  const Agreement a = forward_and_judge(d, d.view(), plan_sparse_mla(d.view()), ro, rl);
  EXPECT_TRUE(a.ok()) << a.summary();
  const auto out = d.out.get();
  for (int t = 0; t < hp.T; ++t)
    for (int h = 0; h < hp.H; ++h)
      for (int k = 0; k < kCkvDim; ++k) {
        const float want = static_cast<float>(fp8_ds_mla_ckv(row, k));
        ASSERT_EQ(bf16_to_float(float_to_bf16(want)), want) << "dim " << k << " is not exact in bf16";
        // As floats: -0 sums to +0 in the tile path's accumulators.
        ASSERT_EQ(bf16_to_float(out[(size_t(t) * hp.H + h) * kCkvDim + k]), want) << "token " << t << " head " << h << " dim " << k;
      }
}

// Where the formats' thresholds agree (Planner.Fp8CacheHasItsOwnThresholds), the device's plan
// for an fp8 cache is the bf16 one's: shared rows at 64 heads T = 64 here.
TEST_F(Gpu, Fp8AndBf16PlansAgreeAtWideHeads) {
  HostProblem hp = make_problem(64, 64, 2048, 64, 64, IndexPattern::random, 4343);
  DeviceProblem bf(hp);
  const SparseMlaPlan bf16_plan = plan_sparse_mla(bf.view());
  ASSERT_EQ(bf16_plan.kernel, SparseMlaKernel::shared_rows);
  hp.to_fp8(false);
  DeviceProblem d(hp);
  const SparseMlaPlan fp8_plan = plan_sparse_mla(d.view());
  EXPECT_EQ(fp8_plan.kernel, bf16_plan.kernel);
  EXPECT_EQ(fp8_plan.splits, bf16_plan.splits);
  EXPECT_EQ(fp8_plan.workspace_bytes, bf16_plan.workspace_bytes);
}

// fp8's 64-row split-K tiles (the planner's for splits of >= 1024 positions, or forced): every
// pattern, a last tile of 1-63 rows, fused rows (T = 100: 2 splits of 1024), row order (T = 200),
// splits of 1025 positions (topk 2049), the lean path, 32 and 128 heads, against the float64
// reference.
TEST_F(Gpu, Fp8WideTilesAgree) {
  struct Case {
    int T, H, topk;
    IndexPattern pattern;
    int block_keys, splits;  // 0: the planner's
  };
  const Case cases[] = {
      {3, 16, 2048, IndexPattern::random, 64, 1},      {3, 16, 2048, IndexPattern::padding_middle, 64, 2},
      {5, 16, 2049, IndexPattern::duplicates, 64, 2}, {2, 16, 1500, IndexPattern::out_of_range, 64, 1},
      {100, 16, 2048, IndexPattern::runs, 0, 0},      {200, 16, 2048, IndexPattern::random, 0, 0},
      {4, 32, 2048, IndexPattern::single_valid, 64, 1}, {3, 128, 1100, IndexPattern::random, 64, 1},
      {7, 16, 97, IndexPattern::random, 64, 1},       {2, 16, 2048, IndexPattern::all_padding, 64, 1},
  };
  for (const Case& c : cases) {
    HostProblem hp = make_problem(c.T, c.H, c.topk, 64, 200, c.pattern, seed_of(c.T, c.H, c.topk, int(c.pattern) + 77));
    hp.to_fp8(false);
    DeviceProblem d(hp);
    const SparseMlaProblem p = d.view();
    PlanChoice choice;
    choice.kernel = PlanChoice::Kernel::split_k;
    choice.block_keys = c.block_keys;
    choice.splits = c.splits;
    const SparseMlaPlan plan = plan_sparse_mla(c.T, c.H, c.topk, DeviceInfo::from_device(0), choice, p.index_sharing, p.kv_format);
    const std::string what = "T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " topk " + std::to_string(c.topk) + " " +
                             workload::to_string(c.pattern) + " splits " + std::to_string(plan.splits);
    ASSERT_EQ(plan.block_keys, 64) << what;
    if (c.T == 100) EXPECT_GT(plan.fused_rows, 0) << what;
    if (c.T == 200) EXPECT_TRUE(plan.row_order) << what;
    std::vector<double> ro, rl;
    reference(hp, ro, rl);
    const Agreement a = forward_and_judge(d, p, plan, ro, rl);
    EXPECT_TRUE(a.ok()) << what << ": " << a.summary();
  }
}

// Rows at a stride wider than 656 bytes with NaN between them, q and out strided: nothing outside
// a row is read, nothing outside out's rows written.
TEST_F(Gpu, Fp8WideRowStrideAndStridedQueryAndOutput) {
  HostProblem hp = make_problem(5, 16, 2048, 64, 64, IndexPattern::padding_middle, 4242);
  hp.to_fp8(false);
  constexpr int kStride = 672;
  std::vector<uint8_t> wide(size_t(hp.rows()) * kStride, 0xff);
  for (int64_t r = 0; r < hp.rows(); ++r) std::memcpy(&wide[r * kStride], &hp.kv_fp8[r * kFp8RowBytes], kFp8RowBytes);
  std::vector<uint16_t> q_wide(size_t(hp.T) * hp.H * 640, 0x7fc0);
  for (int t = 0; t < hp.T; ++t)
    for (int h = 0; h < hp.H; ++h)
      std::copy_n(&hp.q_nope[(size_t(t) * hp.H + h) * kCkvDim], kCkvDim, &q_wide[(size_t(t) * hp.H + h) * 640]);
  DeviceProblem d(hp, /*out_pad=*/64, /*lse_pad=*/3);
  DeviceBuffer<uint8_t> cache(wide);
  DeviceBuffer<uint16_t> q(q_wide);
  SparseMlaProblem p = d.view();
  p.ckv_cache = cache.ptr;
  p.ckv_row_stride = kStride;
  p.q_nope = q.ptr;
  p.q_nope_head_stride = 640;
  p.q_nope_token_stride = 640 * hp.H;
  std::vector<double> ro, rl;
  reference(hp, ro, rl);
  const Agreement a = forward_and_judge(d, p, plan_sparse_mla(p), ro, rl);
  EXPECT_TRUE(a.ok()) << a.summary();
}

// ---- strided q/out/lse and a combined ckv|kpe cache ----------------------------------------
// Random lists, and one valid row per token (the lean path).
TEST_F(Gpu, StridedQueryOutputAndCombinedCache) {
  for (IndexPattern pattern : {IndexPattern::random, IndexPattern::single_valid}) {
    const HostProblem hp = make_problem(5, 16, 300, 16, 64, pattern, 1234);
    std::vector<double> ro, rl;
    reference(hp, ro, rl);

    // q_nope|q_pe interleaved in one [T, H, 576] tensor padded to 600 per head (+8 per token);
    // ckv|kpe in one [rows, 576] cache.
    const int64_t q_hs = 600, q_ts = q_hs * hp.H + 8;
    std::vector<uint16_t> q(size_t(hp.T) * q_ts, 0x7fc0), cache(size_t(hp.rows()) * 576);
    for (int t = 0; t < hp.T; ++t)
      for (int h = 0; h < hp.H; ++h) {
        std::memcpy(&q[t * q_ts + h * q_hs], &hp.q_nope[(size_t(t) * hp.H + h) * 512], 1024);
        std::memcpy(&q[t * q_ts + h * q_hs + 512], &hp.q_pe[(size_t(t) * hp.H + h) * 64], 128);
      }
    for (int64_t r = 0; r < hp.rows(); ++r) {
      std::memcpy(&cache[r * 576], &hp.ckv[r * 512], 1024);
      std::memcpy(&cache[r * 576 + 512], &hp.kpe[r * 64], 128);
    }
    DeviceProblem d(hp, /*out_pad=*/24, /*lse_pad=*/3);
    DeviceBuffer<uint16_t> dq(q), dcache(cache);
    SparseMlaProblem p = d.view();
    p.q_nope = dq.ptr;
    p.q_pe = dq.ptr + 512;
    p.q_nope_head_stride = p.q_pe_head_stride = q_hs;
    p.q_nope_token_stride = p.q_pe_token_stride = q_ts;
    p.ckv_cache = dcache.ptr;
    p.kpe_cache = dcache.ptr + 512;
    p.ckv_row_stride = p.kpe_row_stride = 576;
    for (int variant : {0, 1, 2}) {  // planned (split), single split, shared rows
      const SparseMlaPlan plan = variant == 0   ? plan_sparse_mla(p)
                                 : variant == 1 ? plan_sparse_mla(hp.T, hp.H, hp.topk, DeviceInfo::from_device(0),
                                                                  PlanChoice{0, 1})
                                                : shared_rows_plan(hp.T, hp.H, hp.topk);
      if (variant == 1) ASSERT_EQ(plan.splits, 1);
      const Agreement a = forward_and_judge(d, p, plan, ro, rl);
      EXPECT_TRUE(a.ok()) << workload::to_string(pattern) << " variant " << variant << ": " << a.summary();
    }
  }
}

// ---- head-major q ([H, T, 576]: the token stride below the head stride) ----------------------
// The shared-rows kernel copies Q by TMA tensor maps, whose dims it orders by stride; split-K
// reads it row by row. Every head count, both caches, the planner's plan and shared rows (with
// splits at 64 / 128 heads); T = 1 gets a token stride no row uses.
TEST_F(Gpu, HeadMajorQueryOnEveryKernel) {
  for (int H : {16, 32, 64, 128})
    for (bool fp8 : {false, true})
      for (int T : {1, 3}) {
        HostProblem hp = make_problem(T, H, 256, 16, 64, IndexPattern::padding_middle, 777 + H + T);
        if (fp8) hp.to_fp8(false);
        std::vector<double> ro, rl;
        reference(hp, ro, rl);
        const int64_t q_ts = T == 1 ? 8 : 576, q_hs = 576 * T + 8;  // T = 1: rows overlap in no read
        std::vector<uint16_t> q(size_t(H) * q_hs + 64, 0x7fc0);
        for (int t = 0; t < T; ++t)
          for (int h = 0; h < H; ++h) {
            std::memcpy(&q[h * q_hs + t * q_ts], &hp.q_nope[(size_t(t) * H + h) * 512], 1024);
            std::memcpy(&q[h * q_hs + t * q_ts + 512], &hp.q_pe[(size_t(t) * H + h) * 64], 128);
          }
        DeviceProblem d(hp);
        DeviceBuffer<uint16_t> dq(q);
        SparseMlaProblem p = d.view();
        p.q_nope = dq.ptr;
        p.q_pe = dq.ptr + 512;
        p.q_nope_head_stride = p.q_pe_head_stride = q_hs;
        p.q_nope_token_stride = p.q_pe_token_stride = q_ts;
        PlanChoice with_splits;
        with_splits.kernel = PlanChoice::Kernel::shared_rows;
        with_splits.splits = H >= 64 ? 3 : 1;
        for (const SparseMlaPlan& plan : {plan_sparse_mla(p), plan_sparse_mla(T, H, hp.topk, DeviceInfo::from_device(0), with_splits)}) {
          const Agreement a = forward_and_judge(d, p, plan, ro, rl);
          EXPECT_TRUE(a.ok()) << "H " << H << " T " << T << (fp8 ? " fp8 " : " bf16 ") << " kernel " << static_cast<int>(plan.kernel) << " splits " << plan.splits << ": " << a.summary();
        }
      }
}

// A Q stride no TMA tensor map can hold (2^40 bytes or more: the shared-rows kernel copies Q by
// TMA) is a dsa::Error naming the tensor, raised on the host before anything is launched (so the
// stride never has to be backed by memory).
TEST_F(Gpu, AQStrideNoTensorMapHoldsIsAnErrorNamingQ) {
  const HostProblem hp = make_problem(3, 64, 2048, 64, 64, IndexPattern::random, 12);
  DeviceProblem d(hp);
  for (bool pe : {false, true}) {
    SparseMlaProblem p = d.view();
    (pe ? p.q_pe_token_stride : p.q_nope_token_stride) = int64_t{1} << 39;  // elements: 2^40 bytes
    const SparseMlaPlan plan = plan_sparse_mla(p);
    ASSERT_EQ(plan.kernel, SparseMlaKernel::shared_rows);
    DeviceBuffer<uint8_t> ws(std::max<size_t>(plan.workspace_bytes, 16));
    try {
      sparse_mla_forward(p, plan, ws.ptr, plan.workspace_bytes, nullptr);
      ADD_FAILURE() << "no error for a token stride of 2^39 elements";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(pe ? "q_pe" : "q_nope"), std::string::npos) << e.what();
    }
  }
  CUDA_OK(cudaDeviceSynchronize());
}

// ---- indices with a token stride > topk: the gap holds valid-looking rows that must not be read --
TEST_F(Gpu, StridedIndicesNeverReadPastTopk) {
  const HostProblem hp = make_problem(6, 16, 77, 64, 64, IndexPattern::padding_middle, 4321);
  std::vector<double> ro, rl;
  reference(hp, ro, rl);
  const int64_t stride = hp.topk + 13;
  std::vector<int32_t> wide(size_t(hp.T) * stride);
  for (int t = 0; t < hp.T; ++t)
    for (int64_t k = 0; k < stride; ++k)  // rows 0..12 in the gap: reading them would change the result
      wide[t * stride + k] = k < hp.topk ? hp.indices[size_t(t) * hp.topk + k] : static_cast<int32_t>(k - hp.topk);
  DeviceProblem d(hp);
  DeviceBuffer<int32_t> didx(wide);
  SparseMlaProblem p = d.view();
  p.indices = didx.ptr;
  p.indices_token_stride = stride;
  for (int forced_splits : {0, 1, 3, -1}) {  // -1: shared rows
    const SparseMlaPlan plan =
        forced_splits < 0 ? shared_rows_plan(hp.T, hp.H, hp.topk)
                          : plan_sparse_mla(hp.T, hp.H, hp.topk, DeviceInfo::from_device(0), PlanChoice{0, forced_splits});
    const Agreement a = forward_and_judge(d, p, plan, ro, rl);
    EXPECT_TRUE(a.ok()) << "splits " << forced_splits << ": " << a.summary();
  }
}

// ---- per-token list lengths (topk_lengths): entries past a token's length are never used ------
// Every entry of every list names a row (random, a run, or a repeat), so an entry past a length
// that were used would change the result. The reference runs on the same lists with those
// entries set to -1 and no lengths. Lengths cover 0, negative, above topk, and the boundaries of
// 32-position groups, chunks and the lean path's 2 rows.
std::vector<int32_t> lengths_for(int T, int topk, uint64_t seed) {
  const std::vector<int32_t> base = {0, 1, 2, 3, 31, 33, 64, 100, 511, 700, topk - 1, topk, topk + 5, -3};
  std::vector<int32_t> len(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) len[size_t(t)] = base[(t + seed) % base.size()];
  return len;
}

TEST_F(Gpu, TopkLengthsEndEveryKernelsLists) {
  const DeviceInfo dev = DeviceInfo::from_device(0);
  int seed = 0;
  for (KvCacheFormat format : {KvCacheFormat::bf16, KvCacheFormat::fp8_ds_mla})
    for (auto [T, H] : {std::tuple{1, 16}, std::tuple{9, 16}, std::tuple{64, 16}, std::tuple{8, 32}, std::tuple{2, 64},
                        std::tuple{12, 128}, std::tuple{140, 64}}) {
      const IndexPattern pattern = seed % 2 == 0 ? IndexPattern::random : IndexPattern::runs;
      HostProblem hp = make_problem(T, H, 2048, 64, 128, pattern, 7000 + seed);
      std::mt19937 rng(seed);
      for (int32_t& r : hp.indices)  // no padding: every entry would count
        if (r < 0) r = static_cast<int32_t>(rng() % hp.rows());
      if (format == KvCacheFormat::fp8_ds_mla) hp.to_fp8(false);
      const std::vector<int32_t> len = lengths_for(T, hp.topk, seed++);
      std::vector<double> ro, rl;
      HostProblem cut = hp;
      cut.keep_first_positions(len);
      reference(cut, ro, rl);
      DeviceProblem d(hp);
      DeviceBuffer<int32_t> dlen(len);
      SparseMlaProblem p = d.view();
      p.topk_lengths = dlen.ptr;
      // The planner's plan and each kernel forced, with and without fused rows and row order.
      std::vector<std::pair<std::string, PlanChoice>> choices = {{"planner", {}}};
      PlanChoice c;
      c.kernel = PlanChoice::Kernel::split_k;
      choices.push_back({"split_k", c});
      c.fused_rows = -1;
      choices.push_back({"split_k unfused", c});
      c.fused_rows = 0;
      c.row_order = 1;
      choices.push_back({"split_k row order", c});
      c = {};
      c.kernel = PlanChoice::Kernel::shared_rows;
      choices.push_back({"shared_rows", c});
      c.splits = 3;
      choices.push_back({"shared_rows 3 splits", c});
      if (H >= 64 && T >= 64) {
        c.splits = 0;
        c.row_order = 1;
        choices.push_back({"shared_rows row order", c});
      }
      for (const auto& [name, choice] : choices) {
        const SparseMlaPlan plan = plan_sparse_mla(T, H, hp.topk, dev, choice, IndexSharing::unknown, format);
        const Agreement a = forward_and_judge(d, p, plan, ro, rl);
        EXPECT_TRUE(a.ok()) << (format == KvCacheFormat::bf16 ? "bf16" : "fp8") << " T " << T << " H " << H << " "
                            << name << " (splits " << plan.splits << ", fused_rows " << plan.fused_rows
                            << ", union pass " << plan.union_pass << "): " << a.summary();
      }
      if (H != 16 || format != KvCacheFormat::bf16) continue;
      // Balanced: the schedule counts each token's rows up to its length too.
      PlanChoice b;
      b.balanced = 1;
      const SparseMlaPlan plan = plan_sparse_mla(T, H, hp.topk, dev, b);
      DeviceBuffer<uint8_t> sched(plan.schedule_bytes);
      make_sparse_mla_schedule(p, plan, sched.ptr, plan.schedule_bytes, nullptr);
      SparseMlaProblem pb = p;
      pb.schedule = sched.ptr;
      pb.schedule_bytes = plan.schedule_bytes;
      const Agreement a = forward_and_judge(d, pb, plan, ro, rl);
      EXPECT_TRUE(a.ok()) << "balanced T " << T << ": " << a.summary();
    }
}

// Lead tokens (SparseMlaPlan::lead_tokens): the planner's plans for a device of fewer SMs, so that
// small calls take them, and the H100's own (shared rows T = 133 / 67 / 34, split-K T = 265 /
// 133). Just past whole waves (shared rows: one wave of one-token groups; split-K: whole waves
// of one split) the lead tokens are unsplit; just past half a wave they take 2 splits; the later
// tokens as many as fit a wave after them, or 3 in two rounds (128 heads T = 100, fp8 T = 420);
// shared rows also past 2 whole waves (64 heads T = 265). Split-K with row order and fp8's
// 64-row tiles. The later tokens' partials follow the lead tokens' and each set has its own
// combine: every case checks every token's out and lse (strided), with -1 in the middle, runs,
// a row listed twice, all padding and one valid row (split 0 alone), lists of 256-1600,
// per-token list lengths (each combine counts its tokens' lists from its own view), and lead
// tokens all done by split 0 with later ones that need their combine.
TEST_F(Gpu, LeadTokensThenLaterTokensAgree) {
  const DeviceInfo device = DeviceInfo::from_device(0);
  struct Case {
    int T, H, topk;
    IndexPattern pattern;
    bool fp8, lengths;
    int sms;                // the planner's SM count; 0: the device's (an H100 or H200)
    int lead, lead_splits;  // the plan's
    bool short_lead = false;  // the lead tokens list 2 rows (split 0 alone), the later ones all theirs
    int gbs = 0;              // the planner's memory bandwidth; 0: the device's
  };
  // T = 65 checks row order with lead tokens: the H100's line (split_k_row_order_min_pairs; on
  // fast memory 2^17 pairs of 2048-row lists are not sorted).
  constexpr int kH100Gbs = static_cast<int>(detail::kH100BandwidthGbs);
  int seed = 0;
  for (const Case& c : {// shared rows just past one wave
                        Case{9, 64, 2048, IndexPattern::random, false, false, 8, 8, 1}, Case{11, 64, 2048, IndexPattern::padding_middle, true, false, 8, 8, 1},
                        Case{10, 128, 2048, IndexPattern::duplicates, false, false, 16, 8, 1}, Case{20, 32, 2048, IndexPattern::runs, false, true, 16, 16, 1},
                        Case{20, 32, 2048, IndexPattern::all_padding, true, false, 16, 16, 1}, Case{17, 32, 2048, IndexPattern::single_valid, false, false, 16, 16, 1},
                        Case{9, 128, 1600, IndexPattern::random, true, true, 16, 8, 1}, Case{12, 64, 2048, IndexPattern::runs, true, true, 10, 10, 1},
                        Case{133, 32, 2048, IndexPattern::random, false, false, 0, 132, 1}, Case{67, 128, 2048, IndexPattern::runs, true, false, 0, 66, 1},
                        // shared rows just past half a wave (128 heads)
                        Case{5, 128, 2048, IndexPattern::padding_middle, false, true, 16, 4, 2}, Case{9, 128, 2048, IndexPattern::duplicates, true, false, 32, 8, 2},
                        Case{17, 128, 1600, IndexPattern::runs, false, false, 64, 16, 2}, Case{34, 128, 2048, IndexPattern::random, false, false, 0, 33, 2},
                        // ... at 32 and 64 heads with fp8 or on fast memory (lists of 2048)
                        Case{9, 64, 2048, IndexPattern::padding_middle, true, false, 16, 8, 2}, Case{5, 64, 2048, IndexPattern::duplicates, true, true, 8, 4, 2},
                        Case{75, 64, 2048, IndexPattern::random, true, false, 0, 66, 2}, Case{70, 32, 2048, IndexPattern::runs, true, true, 0, 66, 2},
                        Case{9, 64, 2048, IndexPattern::single_valid, false, true, 16, 8, 2, false, 4814},
                        Case{75, 32, 2048, IndexPattern::random, false, false, 0, 66, 2, false, 4814},
                        // split-K just past whole waves
                        Case{17, 16, 2048, IndexPattern::random, false, false, 8, 16, 1}, Case{20, 16, 600, IndexPattern::padding_middle, true, false, 8, 16, 1},
                        Case{18, 32, 700, IndexPattern::runs, false, true, 8, 16, 1}, Case{70, 16, 2048, IndexPattern::duplicates, false, false, 32, 64, 1},
                        Case{35, 16, 2048, IndexPattern::single_valid, true, true, 16, 32, 1}, Case{19, 16, 2048, IndexPattern::all_padding, false, false, 8, 16, 1},
                        Case{265, 16, 2048, IndexPattern::random, true, false, 0, 264, 1},
                        // split-K just past half a wave
                        Case{10, 16, 2048, IndexPattern::random, false, true, 8, 8, 2}, Case{9, 16, 2048, IndexPattern::padding_middle, true, false, 8, 8, 2},
                        Case{65, 16, 2048, IndexPattern::runs, false, false, 64, 64, 2, false, kH100Gbs}, Case{5, 32, 700, IndexPattern::duplicates, false, false, 8, 4, 2},
                        Case{133, 16, 2048, IndexPattern::random, false, false, 0, 132, 2},
                        // ... from 4 later splits on fast memory
                        Case{180, 16, 2048, IndexPattern::random, false, false, 0, 132, 2, false, 4814},
                        Case{22, 16, 2048, IndexPattern::padding_middle, true, true, 16, 16, 2, false, 4814},
                        // past whole waves by more than half a wave: the later tokens in 3 splits, two rounds
                        Case{13, 128, 2048, IndexPattern::random, false, false, 16, 8, 1}, Case{31, 64, 2048, IndexPattern::padding_middle, false, true, 20, 20, 1},
                        Case{26, 32, 2048, IndexPattern::runs, true, false, 16, 16, 1}, Case{49, 16, 2048, IndexPattern::duplicates, false, false, 16, 32, 1},
                        Case{26, 16, 2048, IndexPattern::single_valid, true, true, 8, 16, 1}, Case{100, 128, 2048, IndexPattern::random, false, false, 0, 66, 1},
                        Case{420, 16, 2048, IndexPattern::runs, true, false, 0, 264, 1},
                        // shared rows past 2 or more whole waves (64 / 128 heads; past 5 / 7 at 128 heads / fp8)
                        Case{17, 64, 2048, IndexPattern::random, false, false, 8, 16, 1}, Case{9, 128, 1600, IndexPattern::padding_middle, true, true, 8, 8, 1},
                        Case{265, 64, 256, IndexPattern::runs, false, false, 0, 264, 1}, Case{21, 128, 2048, IndexPattern::runs, false, true, 8, 20, 1},
                        Case{57, 64, 1600, IndexPattern::padding_middle, true, false, 8, 56, 1},
                        // 32 heads past 2 or more whole waves: one-token groups (was: 2-token groups or split-K)
                        Case{37, 32, 2048, IndexPattern::runs, false, true, 16, 32, 1}, Case{20, 32, 1024, IndexPattern::padding_middle, true, false, 8, 16, 1},
                        Case{41, 32, 2048, IndexPattern::duplicates, true, false, 8, 40, 1}, Case{300, 32, 2048, IndexPattern::random, true, false, 0, 264, 1},
                        // ... bf16 with a tail of 11/20-2/3 of a wave: 3 splits in two rounds
                        Case{21, 32, 2048, IndexPattern::padding_middle, false, false, 8, 16, 1}, Case{350, 32, 2048, IndexPattern::random, false, true, 0, 264, 1},
                        // every lead token done by its split 0: the lead combine's blocks leave at once, the
                        // later combine still reads the main kernel's partials (combine_before_another)
                        Case{133, 16, 2048, IndexPattern::random, true, false, 0, 132, 2, true},
                        Case{10, 16, 2048, IndexPattern::random, false, false, 8, 8, 2, true},
                        Case{5, 128, 2048, IndexPattern::random, false, false, 16, 4, 2, true}}) {
    if (c.sms == 0 && device.sm_count != 132) continue;  // the H100's (and H200's) own plans
    DeviceInfo dev = device;
    if (c.sms > 0) dev.sm_count = c.sms;
    if (c.gbs > 0) dev.memory_bandwidth_gbs = c.gbs;
    HostProblem hp = make_problem(c.T, c.H, c.topk, 64, 200, c.pattern, 5100 + seed);
    if (c.short_lead)
      for (int t = 0; t < c.lead; ++t)
        for (int k = 2; k < c.topk; ++k) hp.indices[size_t(t) * c.topk + k] = -1;
    std::vector<int32_t> len;
    if (c.lengths) {
      std::mt19937 rng(seed);
      for (int32_t& r : hp.indices)  // no padding: an entry past a length that were used would count
        if (r < 0) r = static_cast<int32_t>(rng() % hp.rows());
      len = lengths_for(c.T, hp.topk, seed);
    }
    ++seed;
    if (c.fp8) hp.to_fp8(false);
    const SparseMlaPlan plan = plan_sparse_mla(c.T, c.H, c.topk, dev, PlanChoice{}, IndexSharing::unknown,
                                               c.fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16);
    const std::string what = "T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " topk " + std::to_string(c.topk) + " " +
                             workload::to_string(c.pattern) + (c.fp8 ? " fp8" : " bf16") + (c.lengths ? " lengths" : "") +
                             " on " + std::to_string(dev.sm_count) + " SMs at " + std::to_string(dev.memory_bandwidth_gbs) + " GB/s";
    const bool split_k = c.H <= 16 || (c.H == 32 && c.topk < 1024);  // 64 / 128 heads: shared rows from lists of 256
    const int per_token = split_k ? c.H / 16 : std::max(c.H / 64, 1);  // CTAs per token and split
    ASSERT_EQ(plan.kernel, split_k ? SparseMlaKernel::split_k : SparseMlaKernel::shared_rows) << what;
    ASSERT_FALSE(plan.union_pass) << what;
    ASSERT_EQ(plan.lead_tokens, c.lead) << what;
    ASSERT_EQ(plan.lead_splits, c.lead_splits) << what;
    ASSERT_GE(plan.splits, 2) << what;
    ASSERT_EQ(plan.ctas, (c.lead * c.lead_splits + (c.T - c.lead) * plan.splits) * per_token) << what;
    if (split_k && c.T == 65) ASSERT_TRUE(plan.row_order) << what;
    if (split_k && c.fp8 && c.topk >= 1024) ASSERT_EQ(plan.block_keys, 64) << what;
    std::vector<double> ro, rl;
    HostProblem cut = hp;
    if (c.lengths) cut.keep_first_positions(len);
    reference(cut, ro, rl);
    DeviceProblem d(hp, /*out_pad=*/16, /*lse_pad=*/3);
    DeviceBuffer<int32_t> dlen(c.lengths ? len : std::vector<int32_t>{0});
    SparseMlaProblem p = d.view();
    if (c.lengths) p.topk_lengths = dlen.ptr;
    const Agreement a = forward_and_judge(d, p, plan, ro, rl);
    EXPECT_TRUE(a.ok()) << what << " (splits " << plan.splits << "): " << a.summary();
  }
}

// The GPU reference kernel honours lengths as the CPU reference does.
TEST_F(Gpu, TopkLengthsInTheGpuReference) {
  HostProblem hp = make_problem(14, 16, 300, 16, 64, IndexPattern::random, 77);
  const std::vector<int32_t> len = lengths_for(hp.T, hp.topk, 3);
  std::vector<double> ro, rl;
  SparseMlaProblem host = hp.view();
  host.topk_lengths = len.data();
  std::vector<uint16_t> o_unused(16);
  std::vector<float> l_unused(4);
  host.out = o_unused.data();
  host.lse = l_unused.data();
  ro.resize(size_t(hp.T) * hp.H * kCkvDim);
  rl.resize(size_t(hp.T) * hp.H);
  sparse_mla_reference_cpu(host, ro.data(), rl.data());
  DeviceProblem d(hp);
  DeviceBuffer<int32_t> dlen(len);
  SparseMlaProblem p = d.view();
  p.topk_lengths = dlen.ptr;
  d.poison();
  sparse_mla_reference_gpu(p, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const Agreement a = judge(d, ro, rl);
  EXPECT_TRUE(a.ok()) << a.summary();
}

// ---- T = 0 is a no-op: nothing launched, nothing written ---------------------------------------
TEST_F(Gpu, ZeroTokensWritesNothing) {
  const HostProblem hp = make_problem(1, 16, 64, 64, 8, IndexPattern::random, 9);
  DeviceProblem d(hp);
  d.poison();
  SparseMlaProblem p = d.view();
  p.num_tokens = 0;
  const SparseMlaPlan plan = plan_sparse_mla(p);
  EXPECT_EQ(plan.ctas, 0);
  sparse_mla_forward(p, plan, nullptr, 0, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  for (uint16_t v : d.out.get()) ASSERT_EQ(v, kPoisonBf16);
}

// ---- the same call captured in a CUDA graph and replayed on new inputs ---------------------
// Captures one forward of `plan`, then replays it three times on new q, cache and indices
// written into the captured buffers (and a poisoned workspace), each replay judged against the
// reference.
void expect_graph_replays_agree(const HostProblem& hp, const SparseMlaPlan& plan,
                                std::vector<workload::IndexSpec> replays = {}) {
  if (replays.empty()) replays.resize(3), replays[0].pattern = IndexPattern::runs, replays[1].pattern = IndexPattern::padding_middle;
  DeviceProblem d(hp);
  SparseMlaProblem p = d.view();
  DeviceBuffer<uint8_t> ws(plan.workspace_bytes), schedule(plan.schedule_bytes);
  if (plan.balanced) p.schedule = schedule.ptr, p.schedule_bytes = plan.schedule_bytes;
  CapturedGraph graph([&](cudaStream_t stream) {  // a balanced plan: its schedule is made in the graph too
    if (plan.balanced) make_sparse_mla_schedule(p, plan, schedule.ptr, plan.schedule_bytes, stream);
    sparse_mla_forward(p, plan, ws.ptr, plan.workspace_bytes, stream);
  });
  ASSERT_TRUE(graph.ok());
  for (int round = 0; round < static_cast<int>(replays.size()); ++round) {
    // New q and indices each replay (by default runs, padding in the middle, random), written
    // into the captured buffers.
    HostProblem next = hp;
    next.fill(replays[round], 600 + round);
    CUDA_OK(d.q_nope.set(next.q_nope));
    CUDA_OK(d.q_pe.set(next.q_pe));
    CUDA_OK(d.ckv.set(next.ckv));
    CUDA_OK(d.kpe.set(next.kpe));
    CUDA_OK(d.indices.set(next.indices));
    d.poison();
    if (plan.workspace_bytes > 0) CUDA_OK(cudaMemset(ws.ptr, 0xff, plan.workspace_bytes));  // no record of the last replay survives
    if (plan.schedule_bytes > 0) CUDA_OK(cudaMemset(schedule.ptr, 0xff, plan.schedule_bytes));
    CUDA_OK(graph.replay());
    std::vector<double> ro, rl;
    reference(next, ro, rl);
    const Agreement a = judge(d, ro, rl);
    EXPECT_TRUE(a.ok()) << "replay " << round << ": " << a.summary();
  }
}

TEST_F(Gpu, GraphCaptureAndReplay) {
  const HostProblem hp = make_problem(2, 64, 2048, 64, 64, IndexPattern::runs, 555);
  const SparseMlaPlan plan = plan_sparse_mla(hp.T, hp.H, hp.topk, DeviceInfo::from_device(0));
  ASSERT_GT(plan.splits, 1) << "the combine kernel (PDL) must be inside the graph";
  expect_graph_replays_agree(hp, plan);
}

// The shared-rows chain (union pass, order pass, main kernel: two programmatic dependent
// launches) in a graph, with 16 groups whose sizes, and so whose order, change every replay.
TEST_F(Gpu, SharedRowsGraphCaptureAndReplay) {
  const HostProblem hp = make_problem(61, 16, 2048, 64, 64, IndexPattern::runs, 556);
  const SparseMlaPlan plan = shared_rows_plan(hp.T, hp.H, hp.topk);
  ASSERT_EQ(plan.launches, 3);
  expect_graph_replays_agree(hp, plan);
}

// A share-probe plan (SparseMlaPlan::share_probe) made by hand at 16 heads and a small T (the
// planner's start at T = 2048): the forced shared-rows plan (a union pass, one split), and as
// its split-K half a forced one-split split-K plan with the given row order and softmax
// (PlanChoice's -1 / 1).
struct ShareProbePlans {
  SparseMlaPlan probe, shared_rows, split_k;
};
// A share-probe plan by hand and its two halves forced; split-K's half in `block_keys`-row tiles
// (0: the planner's) over a `kv` cache.
ShareProbePlans share_probe_plans(int T, int topk, int line_permille, int row_order = 0, int split_softmax = 0,
                                  KvCacheFormat kv = KvCacheFormat::bf16, int block_keys = 0) {
  ShareProbePlans p;
  p.shared_rows = shared_rows_plan(T, 16, topk);
  EXPECT_TRUE(p.shared_rows.union_pass && p.shared_rows.splits == 1);
  PlanChoice one_split;
  one_split.kernel = PlanChoice::Kernel::split_k;
  one_split.splits = 1;
  one_split.row_order = row_order;
  one_split.split_softmax = split_softmax;
  one_split.block_keys = block_keys;
  p.split_k = plan_sparse_mla(T, 16, topk, DeviceInfo::from_device(0), one_split, IndexSharing::unknown, kv);
  p.probe = p.shared_rows;
  p.probe.share_probe = {line_permille, p.split_k.block_keys, p.split_k.row_order, p.split_k.split_softmax};
  p.probe.launches += 2;
  p.probe.workspace_bytes = (p.shared_rows.workspace_bytes + 15) / 16 * 16 + 16 * 8;
  return p;
}

// Poisons d's outputs, runs `plan` and returns out and lse as the device wrote them.
std::pair<std::vector<uint16_t>, std::vector<float>> forward_outputs(DeviceProblem& d, const SparseMlaPlan& plan) {
  d.poison();
  DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
  EXPECT_EQ(cudaMemset(ws.ptr, 0xff, plan.workspace_bytes), cudaSuccess);  // nothing may be read before it is written
  sparse_mla_forward(d.view(), plan, ws.ptr, plan.workspace_bytes, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::pair<std::vector<uint16_t>, std::vector<float>> r;
  d.fetch(r.first, r.second);
  return r;
}

// The share probe runs exactly one of its kernels, the one its line picks for the sampled share:
// its out and lse are bitwise the forced kernel's (the two differ in their last bits wherever a
// token has rows, so the comparison says which ran), and both agree with the reference. Line
// 1000 always picks shared rows, line 1 split-K, the H200's 710 by the sampled share, which the
// host computes exactly here (64000 rows): a 2048-row prefix shared rows, random lists (~95 %)
// split-K; both must occur. A call whose groups hold no valid entry takes split-K. T = 61: 16
// groups, all sampled; the last of 1 token. Split-K's half with and without row order and a
// split softmax.
TEST_F(Gpu, ShareProbeRunsTheKernelItsLinePicks) {
  struct Case {
    IndexPattern pattern;
    int prefix_len;
  };
  int seed = 690, picked_at_710[2] = {0, 0};  // [split-K, shared rows]
  for (const Case& c : {Case{IndexPattern::shared_prefix, 2048}, Case{IndexPattern::random, 0}, Case{IndexPattern::duplicates, 0},
                        Case{IndexPattern::padding_middle, 0}, Case{IndexPattern::all_padding, 0}})
    for (int variant : {-1, 1}) {
      const HostProblem hp = make_problem(61, 16, 2048, 64, 1000, c.pattern, seed++, c.prefix_len > 0 ? c.prefix_len : 8192);
      const std::string what = std::string(workload::to_string(c.pattern)) + (variant > 0 ? " (row order, split softmax)" : "");
      const double share = analysis::sampled_group_union_ratio(hp.indices, hp.T, hp.topk, hp.rows(), 16);
      const bool any_valid = c.pattern != IndexPattern::all_padding;
      DeviceProblem d(hp);
      std::vector<double> ro, rl;
      reference(hp, ro, rl);
      ShareProbePlans plans = share_probe_plans(hp.T, hp.topk, 1000, variant, variant);
      const auto shared_rows = forward_outputs(d, plans.shared_rows), split_k = forward_outputs(d, plans.split_k);
      for (const auto& [o, l] : {shared_rows, split_k}) {
        const Agreement a = compare_to_reference(o.data(), l.data(), ro.data(), rl.data(), hp.T, hp.H);
        EXPECT_TRUE(a.ok()) << what << ": " << a.summary();
      }
      if (any_valid) ASSERT_NE(shared_rows.first, split_k.first) << what << ": the outputs must tell the kernels apart";
      for (int line : {1000, 1, 710}) {
        plans.probe.share_probe.line_permille = line;
        const bool picks_shared_rows = any_valid && share * 1000 <= line;
        if (line == 710) ++picked_at_710[picks_shared_rows];
        const auto got = forward_outputs(d, plans.probe);
        const auto& want = picks_shared_rows ? shared_rows : split_k;
        EXPECT_TRUE(got.first == want.first && got.second == want.second)
            << what << " line " << line << " share " << share << ": not " << (picks_shared_rows ? "shared rows'" : "split-K's") << " output";
      }
    }
  // The H200's line splits the cases: the prefix (and the duplicates) one way, random lists the other.
  EXPECT_GT(picked_at_710[0], 0);
  EXPECT_GT(picked_at_710[1], 0);
}

// The same over an fp8_ds_mla cache: split-K's half in each of its four fp8 instances (32- and
// 64-row tiles, with and without row order; fp8 always splits its softmax). Lines 1000 and 1
// give the forced kernels' outputs bitwise, both within the reference's tolerance.
TEST_F(Gpu, ShareProbeRunsTheKernelItsLinePicksFp8) {
  int seed = 720;
  for (const IndexPattern pattern : {IndexPattern::shared_prefix, IndexPattern::random})
    for (int keys : {32, 64})
      for (int row_order : {-1, 1}) {
        HostProblem hp = make_problem(61, 16, 2048, 64, 1000, pattern, seed++, /*prefix_len=*/2048);
        hp.to_fp8(false);
        const std::string what = std::string(workload::to_string(pattern)) + " keys " + std::to_string(keys) +
                                 (row_order > 0 ? " row order" : "");
        DeviceProblem d(hp);
        std::vector<double> ro, rl;
        reference(hp, ro, rl);
        ShareProbePlans plans = share_probe_plans(hp.T, hp.topk, 1000, row_order, 1, KvCacheFormat::fp8_ds_mla, keys);
        ASSERT_EQ(plans.split_k.block_keys, keys);
        const auto shared_rows = forward_outputs(d, plans.shared_rows), split_k = forward_outputs(d, plans.split_k);
        for (const auto& [o, l] : {shared_rows, split_k}) {
          const Agreement a = compare_to_reference(o.data(), l.data(), ro.data(), rl.data(), hp.T, hp.H);
          EXPECT_TRUE(a.ok()) << what << ": " << a.summary();
        }
        ASSERT_NE(shared_rows.first, split_k.first) << what << ": the outputs must tell the kernels apart";
        for (int line : {1000, 1}) {
          plans.probe.share_probe.line_permille = line;
          const auto got = forward_outputs(d, plans.probe);
          const auto& want = line == 1000 ? shared_rows : split_k;
          EXPECT_TRUE(got.first == want.first && got.second == want.second) << what << " line " << line;
        }
      }
}

// The operation after the forward on its stream sees its whole output, whichever kernel ran:
// the unchosen grids' CTAs leave without waiting for the grids before them (share_choice.cuh),
// and the chain must not end before the chosen kernel. The planner's own share-probe plan at
// T = 2048 with lists of 2048 (about a millisecond of split-K on random lists, shared rows on a
// 2048-row prefix); out and lse copied to pinned host memory (poisoned first) on the forward's
// stream straight after it, launched on the stream and as a captured graph, then compared with a
// copy made after the device synchronised, and with the kernel the probe picks forced.
TEST_F(Gpu, ShareProbeOutputIsCompleteForTheNextOperationOnItsStream) {
  for (const IndexPattern pattern : {IndexPattern::random, IndexPattern::shared_prefix}) {
    const HostProblem hp = make_problem(2048, 16, 2048, 64, 8192, pattern, 694 + int(pattern), /*prefix_len=*/2048);
    DeviceProblem d(hp);
    const SparseMlaPlan plan = plan_sparse_mla(d.view());
    ASSERT_GT(plan.share_probe.line_permille, 0) << "the planner's unhinted plan samples the share";
    PlanChoice forced;
    forced.kernel = pattern == IndexPattern::random ? PlanChoice::Kernel::split_k : PlanChoice::Kernel::shared_rows;
    if (pattern == IndexPattern::random) forced.splits = 1;  // the probe's split-K half: one split of whole lists
    const auto want = forward_outputs(d, plan_sparse_mla(hp.T, hp.H, hp.topk, DeviceInfo::from_device(0), forced));
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    uint16_t* host_out = nullptr;
    float* host_lse = nullptr;
    CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&host_out), d.out.n * sizeof(uint16_t)));
    CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&host_lse), d.lse.n * sizeof(float)));
    DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
    const auto enqueue = [&] {
      sparse_mla_forward(d.view(), plan, ws.ptr, plan.workspace_bytes, stream);
      CUDA_OK(cudaMemcpyAsync(host_out, d.out.ptr, d.out.n * sizeof(uint16_t), cudaMemcpyDeviceToHost, stream));
      CUDA_OK(cudaMemcpyAsync(host_lse, d.lse.ptr, d.lse.n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    };
    for (const bool graph : {false, true}) {
      const std::string what = std::string(workload::to_string(pattern)) + (graph ? ", graph" : ", stream");
      d.poison();
      CUDA_OK(cudaMemset(ws.ptr, 0xff, plan.workspace_bytes));
      std::fill(host_out, host_out + d.out.n, uint16_t{0x7fff});
      std::fill(host_lse, host_lse + d.lse.n, -1.0f);
      CUDA_OK(cudaDeviceSynchronize());
      cudaGraphExec_t exec = nullptr;
      if (graph) {
        cudaGraph_t g = nullptr;
        CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        enqueue();
        CUDA_OK(cudaStreamEndCapture(stream, &g));
        CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
        CUDA_OK(cudaGraphDestroy(g));
        CUDA_OK(cudaGraphLaunch(exec, stream));
      } else {
        enqueue();
      }
      CUDA_OK(cudaStreamSynchronize(stream));
      if (exec != nullptr) CUDA_OK(cudaGraphExecDestroy(exec));
      std::vector<uint16_t> o;
      std::vector<float> l;
      d.fetch(o, l);
      EXPECT_TRUE(std::equal(o.begin(), o.end(), host_out)) << what << ": out copied before the forward had ended";
      EXPECT_TRUE(std::memcmp(l.data(), host_lse, l.size() * sizeof(float)) == 0) << what << ": lse copied before the forward had ended";
      EXPECT_TRUE(want.first == o && want.second == l) << what << ": not the output of the kernel the share picks";
    }
    CUDA_OK(cudaFreeHost(host_out));
    CUDA_OK(cudaFreeHost(host_lse));
    CUDA_OK(cudaStreamDestroy(stream));
  }
}

// The probe, both shared-rows chains and split-K in a graph; replays that pick each kernel (a
// 2048-row prefix: shared rows; random lists: split-K; then the prefix again).
TEST_F(Gpu, ShareProbeGraphCaptureAndReplay) {
  const HostProblem hp = make_problem(61, 16, 2048, 64, 1000, IndexPattern::runs, 558);
  const SparseMlaPlan plan = share_probe_plans(hp.T, hp.topk, 710).probe;
  ASSERT_EQ(plan.launches, 5);
  std::vector<workload::IndexSpec> replays(3);
  replays[0].pattern = replays[2].pattern = IndexPattern::shared_prefix;
  replays[0].prefix_len = replays[2].prefix_len = 2048;
  expect_graph_replays_agree(hp, plan, replays);
}

// The balanced chain (count and schedule kernels, main, combine) in a graph: every replay's
// indices make its schedule.
TEST_F(Gpu, BalancedGraphCaptureAndReplay) {
  const HostProblem hp = make_problem(9, 16, 2048, 64, 64, IndexPattern::runs, 557);
  const SparseMlaPlan plan = balanced_plan(hp);
  ASSERT_TRUE(plan.balanced);
  expect_graph_replays_agree(hp, plan);
}

// ---- run-to-run determinism (a moving result is a race) -------------------------------------
TEST_F(Gpu, BitwiseDeterministic) {
  const HostProblem hp = make_problem(8, 16, 2048, 64, 128, IndexPattern::padding_middle, 77);
  DeviceProblem d(hp);
  const SparseMlaProblem p = d.view();
  for (const SparseMlaPlan& plan : {plan_sparse_mla(p), shared_rows_plan(hp.T, hp.H, hp.topk)}) {
    DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
    std::vector<uint16_t> first;
    for (int rep = 0; rep < 5; ++rep) {
      d.poison();
      sparse_mla_forward(p, plan, ws.ptr, plan.workspace_bytes, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      const auto o = d.out.get();
      if (rep == 0) first = o;
      ASSERT_EQ(o, first) << "kernel " << int(plan.kernel) << " rep " << rep;
    }
  }
}

// ---- the GPU reference itself against the CPU reference -------------------------------------
TEST_F(Gpu, GpuReferenceKernelMatchesCpuReference) {
  HostProblem hp = make_problem(3, 32, 700, 64, 40, IndexPattern::out_of_range, 31);
  hp.indices[5] = -1;
  std::fill(hp.indices.begin() + 700, hp.indices.begin() + 1400, -1);  // token 1: no valid row
  DeviceProblem d(hp);
  d.poison();
  sparse_mla_reference_gpu(d.view(), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<double> ro, rl;
  bool cpu = false;
  reference(hp, ro, rl, &cpu);
  ASSERT_TRUE(cpu);
  const Agreement a = judge(d, ro, rl);
  EXPECT_TRUE(a.ok()) << a.summary();
}

TEST_F(Gpu, CountInvalidIndicesMatchesHost) {
  workload::IndexSpec spec;
  spec.pattern = IndexPattern::out_of_range;
  spec.num_tokens = 37;
  spec.topk = 999;
  spec.num_pages = 50;
  const auto idx = workload::make_indices(spec, 5);
  DeviceBuffer<int32_t> di(idx);
  DeviceBuffer<long long> count(1);
  CUDA_OK(cudaMemset(count.ptr, 0, 8));
  count_invalid_indices(di.ptr, 37, 999, 999, 50 * 64, count.ptr, nullptr);
  const long long got = count.get()[0];
  EXPECT_EQ(got, count_invalid_indices_host(idx.data(), 37, 999, 999, 50 * 64));
  EXPECT_GT(got, 0);
}

// sample_group_sharing against the host analysis (tools/common/index_analysis.h) on the same
// sampled groups. A cache of at most 2^17 rows is counted exactly: the ratio to 1e-12, and with a
// sample per group (or more) both counts. Larger caches (262144 and 2^31 - 1 rows) are hashed
// into 2^17 bits and estimated: the entries exactly, the share within 1 point. Lists of 1 to 2048
// positions, strided lists, a last group of fewer tokens, padding, duplicates, out-of-range rows,
// lists that share most rows and none.
TEST_F(Gpu, SampledGroupSharingMatchesTheHostAnalysis) {
  struct Case {
    int T, topk;
    IndexPattern pattern;
    int prefix_len, stride_pad;
    int num_pages = 200, page_size = 64;
  };
  int seed = 11;
  for (const Case& c : {Case{2048, 512, IndexPattern::shared_prefix, 2048, 0}, Case{2048, 2048, IndexPattern::random, 0, 0},
                        Case{7, 2048, IndexPattern::shared_prefix, 4096, 3}, Case{37, 999, IndexPattern::out_of_range, 0, 5},
                        Case{41, 63, IndexPattern::duplicates, 0, 1}, Case{9, 300, IndexPattern::padding_middle, 0, 0},
                        Case{16, 1, IndexPattern::runs, 0, 2}, Case{12, 128, IndexPattern::all_padding, 0, 0},
                        Case{1, 2048, IndexPattern::single_valid, 0, 0},
                        Case{2048, 2048, IndexPattern::random, 0, 0, 4096}, Case{64, 2048, IndexPattern::shared_prefix, 8192, 0, 4096},
                        Case{300, 1024, IndexPattern::random, 0, 7, 65536, 32767}}) {
    workload::IndexSpec spec;
    spec.pattern = c.pattern;
    spec.num_tokens = c.T;
    spec.topk = c.topk;
    spec.num_pages = c.num_pages;
    spec.page_size = c.page_size;
    if (c.prefix_len > 0) spec.prefix_len = c.prefix_len;
    const std::vector<int32_t> idx = workload::make_indices(spec, seed++);
    const int64_t rows = int64_t{spec.num_pages} * spec.page_size, stride = c.topk + c.stride_pad;
    const bool exact = rows <= (int64_t{1} << 17);
    std::vector<int32_t> strided(size_t(c.T) * stride, 12345);  // the pad: a valid row, never to be read
    for (int t = 0; t < c.T; ++t) std::copy_n(idx.begin() + size_t(t) * c.topk, c.topk, strided.begin() + size_t(t) * stride);
    DeviceBuffer<int32_t> di(strided);
    const analysis::Summary sum = analysis::summarize(idx, c.T, c.topk, rows, spec.page_size);
    for (int samples : {1, 16, 100000}) {
      DeviceBuffer<long long> counts(2);
      CUDA_OK(cudaMemset(counts.ptr, 0, 16));
      sample_group_sharing(di.ptr, c.T, c.topk, stride, rows, samples, counts.ptr, nullptr);
      const std::vector<long long> got = counts.get();
      const std::string what = "T " + std::to_string(c.T) + " topk " + std::to_string(c.topk) + " " +
                               workload::to_string(c.pattern) + " rows " + std::to_string(rows) + " samples " + std::to_string(samples);
      const double host = analysis::sampled_group_union_ratio(idx, c.T, c.topk, rows, samples);
      EXPECT_LE(got[0], got[1]) << what;
      EXPECT_NEAR(got[1] > 0 ? double(got[0]) / double(got[1]) : 1.0, host, exact ? 1e-12 : 0.01) << what;
      if (samples >= (c.T + 3) / 4) {
        if (exact) EXPECT_EQ(got[0], sum.group_union_rows) << what;
        EXPECT_EQ(got[1], sum.valid) << what;
      }
    }
  }
}

TEST_F(Gpu, ForwardRejectsAPlanForAnotherShapeAndASmallWorkspace) {
  const HostProblem hp = make_problem(1, 16, 2048, 64, 64, IndexPattern::random, 3);
  DeviceProblem d(hp);
  const SparseMlaProblem p = d.view();
  SparseMlaPlan plan = plan_sparse_mla(p);
  ASSERT_GT(plan.workspace_bytes, 0u);
  EXPECT_THROW(sparse_mla_forward(p, plan, nullptr, plan.workspace_bytes - 4, nullptr), Error);
  SparseMlaPlan other = plan;
  other.num_tokens = 2;
  DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
  EXPECT_THROW(sparse_mla_forward(p, other, ws.ptr, plan.workspace_bytes, nullptr), Error);
  EXPECT_NO_THROW(sparse_mla_forward(p, plan, ws.ptr, plan.workspace_bytes, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace dsa
