// The CPU reference against hand-derived values and an independent formula, and the
// comparison rule against results it must reject.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dsa/reference.h"
#include "host_problem.h"

namespace dsa {
namespace {

using testing::HostProblem;

struct RefOut {
  std::vector<double> out, lse;
};

RefOut run_ref(const SparseMlaProblem& p) {
  RefOut r{std::vector<double>(size_t(p.num_tokens) * p.num_heads * kCkvDim, -7.0),
           std::vector<double>(size_t(p.num_tokens) * p.num_heads, -7.0)};
  std::vector<uint16_t> out_dummy(16);  // validate() wants non-null outputs
  std::vector<float> lse_dummy(4);
  SparseMlaProblem q = p;
  q.out = out_dummy.data();
  q.lse = lse_dummy.data();
  sparse_mla_reference_cpu(q, r.out.data(), r.lse.data());
  return r;
}

double logit(const HostProblem& hp, int t, int h, int row) {
  double dot = 0;
  for (int d = 0; d < kCkvDim; ++d)
    dot += double(bf16_to_float(hp.q_nope[(size_t(t) * hp.H + h) * kCkvDim + d])) * bf16_to_float(hp.ckv[size_t(row) * kCkvDim + d]);
  for (int d = 0; d < kKpeDim; ++d)
    dot += double(bf16_to_float(hp.q_pe[(size_t(t) * hp.H + h) * kKpeDim + d])) * bf16_to_float(hp.kpe[size_t(row) * kKpeDim + d]);
  return dot * hp.sm_scale;
}

TEST(Bf16, RoundTripAndTies) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(float_to_bf16(-2.5f), 0xc020);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3f82);  // 1 + 3*2^-8 -> up to even
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(Reference, OneValidRowCopiesItAndLseIsItsLogitInBase2) {
  HostProblem hp;
  hp.fill({}, 11);
  std::fill(hp.indices.begin(), hp.indices.end(), -1);
  hp.indices[5] = 9;
  const RefOut r = run_ref(hp.view());
  for (int h = 0; h < hp.H; ++h) {
    for (int d = 0; d < kCkvDim; ++d) ASSERT_EQ(r.out[size_t(h) * kCkvDim + d], bf16_to_float(hp.ckv[9 * kCkvDim + d]));
    EXPECT_NEAR(r.lse[h], logit(hp, 0, h, 9) / std::log(2.0), 1e-12);
  }
}

TEST(Reference, MatchesTheSoftmaxFormulaWithDuplicatesCountedTwice) {
  HostProblem hp;
  hp.T = 2;
  hp.fill({}, 12);
  const std::vector<int32_t> rows = {3, 7, 7, -1, 15, 0, -1, 2};
  for (int t = 0; t < hp.T; ++t) std::copy(rows.begin(), rows.end(), hp.indices.begin() + t * hp.topk);
  const RefOut r = run_ref(hp.view());
  for (int t = 0; t < hp.T; ++t) {
    for (int h = 0; h < hp.H; ++h) {
      // Direct formula: sum_k e^{l_k} without max-subtraction (logits are small here).
      long double z = 0;
      std::vector<long double> o(kCkvDim, 0);
      for (int32_t row : rows) {
        if (row < 0) continue;
        const long double w = std::exp(static_cast<long double>(logit(hp, t, h, row)));
        z += w;
        for (int d = 0; d < kCkvDim; ++d) o[d] += w * bf16_to_float(hp.ckv[size_t(row) * kCkvDim + d]);
      }
      EXPECT_NEAR(r.lse[size_t(t) * hp.H + h], double(std::log2(z)), 1e-10);
      for (int d = 0; d < kCkvDim; ++d)
        ASSERT_NEAR(r.out[(size_t(t) * hp.H + h) * kCkvDim + d], double(o[d] / z), 1e-10) << "t " << t << " h " << h << " d " << d;
    }
  }
}

TEST(Reference, NoValidIndexGivesZerosAndMinusInfinity) {
  HostProblem hp;
  hp.fill({}, 13);
  std::fill(hp.indices.begin(), hp.indices.end(), -1);
  hp.indices[2] = static_cast<int32_t>(hp.rows());  // out of range counts as padding
  hp.indices[3] = -5;
  const RefOut r = run_ref(hp.view());
  for (double v : r.out) ASSERT_EQ(v, 0.0);
  for (double v : r.lse) ASSERT_EQ(v, -std::numeric_limits<double>::infinity());
}

TEST(Reference, OutOfRangeEntriesAreSkippedLikePadding) {
  HostProblem hp;
  hp.T = 3;
  workload::IndexSpec spec;
  spec.pattern = workload::IndexPattern::out_of_range;
  hp.fill(spec, 14);
  const RefOut with_bad = run_ref(hp.view());
  for (int32_t& v : hp.indices)
    if (v < -1 || v >= hp.rows()) v = -1;
  const RefOut cleaned = run_ref(hp.view());
  EXPECT_EQ(with_bad.out, cleaned.out);
  EXPECT_EQ(with_bad.lse, cleaned.lse);
}

TEST(Reference, HonoursQueryStrides) {
  HostProblem hp;
  hp.T = 2;
  hp.fill({}, 15);
  const RefOut packed = run_ref(hp.view());
  // Same q placed at head stride 640 / token stride 16*640 inside a larger buffer.
  std::vector<uint16_t> wide(size_t(hp.T) * hp.H * 640, 0x7fc0);  // NaN filler must never be read
  for (int t = 0; t < hp.T; ++t)
    for (int h = 0; h < hp.H; ++h)
      for (int d = 0; d < kCkvDim; ++d) wide[(size_t(t) * hp.H + h) * 640 + d] = hp.q_nope[(size_t(t) * hp.H + h) * kCkvDim + d];
  SparseMlaProblem p = hp.view();
  p.q_nope = wide.data();
  p.q_nope_head_stride = 640;
  p.q_nope_token_stride = 640 * hp.H;
  const RefOut strided = run_ref(p);
  EXPECT_EQ(packed.out, strided.out);
  EXPECT_EQ(packed.lse, strided.lse);
}

// The judge must reject what is wrong, or every GPU test that uses it proves nothing.
TEST(Compare, RejectsWrongValuesNaNAndLseMismatch) {
  const int T = 1, H = 16, n = T * H * kCkvDim;
  std::vector<double> ref(n), ref_lse(T * H, 1.5);
  std::vector<uint16_t> got(n);
  workload::Rng rng(3);
  for (int i = 0; i < n; ++i) {
    got[i] = float_to_bf16(static_cast<float>(rng.normal()));
    ref[i] = bf16_to_float(got[i]);
  }
  std::vector<float> lse(T * H, 1.5f);
  EXPECT_TRUE(compare_to_reference(got.data(), lse.data(), ref.data(), ref_lse.data(), T, H).ok());

  auto bad = got;
  bad[100] = float_to_bf16(static_cast<float>(ref[100] + 0.5));
  Agreement a = compare_to_reference(bad.data(), lse.data(), ref.data(), ref_lse.data(), T, H);
  EXPECT_FALSE(a.ok());
  EXPECT_EQ(a.failed_elements, 1);

  bad = got;
  bad[7] = 0xffff;  // NaN
  EXPECT_EQ(compare_to_reference(bad.data(), lse.data(), ref.data(), ref_lse.data(), T, H).non_finite, 1);

  auto bad_lse = lse;
  bad_lse[3] = 1.6f;
  EXPECT_FALSE(compare_to_reference(got.data(), bad_lse.data(), ref.data(), ref_lse.data(), T, H).ok());
  bad_lse = lse;
  bad_lse[4] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(compare_to_reference(got.data(), bad_lse.data(), ref.data(), ref_lse.data(), T, H).lse_mismatch, 1);
  auto inf_ref = ref_lse;
  inf_ref[5] = -std::numeric_limits<double>::infinity();
  EXPECT_EQ(compare_to_reference(got.data(), lse.data(), ref.data(), inf_ref.data(), T, H).lse_mismatch, 1);
}

}  // namespace
}  // namespace dsa
