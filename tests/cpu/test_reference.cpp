// The CPU reference against hand-derived values and an independent formula, and the
// comparison rule against results it must reject.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

// topk_lengths ends each token's list: what lies past it (valid rows here) is as if it were -1;
// a negative length is 0 and one above topk is topk.
TEST(Reference, TopkLengthsEndEachList) {
  HostProblem hp;
  hp.T = 5;
  hp.topk = 6;
  hp.fill({}, 15);
  for (size_t i = 0; i < hp.indices.size(); ++i) hp.indices[i] = static_cast<int32_t>(i % hp.rows());  // all valid
  const std::vector<int32_t> lengths = {0, 1, 4, 9, -2};
  SparseMlaProblem p = hp.view();
  p.topk_lengths = lengths.data();
  const RefOut with_lengths = run_ref(p);
  const RefOut full = run_ref(hp.view());
  hp.keep_first_positions(lengths);
  const RefOut cut = run_ref(hp.view());
  EXPECT_EQ(with_lengths.out, cut.out);
  EXPECT_EQ(with_lengths.lse, cut.lse);
  EXPECT_NE(with_lengths.lse, full.lse);  // the lengths did cut something
  EXPECT_EQ(with_lengths.lse[3 * hp.H], full.lse[3 * hp.H]);  // 9 > topk: the whole list
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

// The reference runs (token, 16 heads) items on the host's threads: a batch must give each
// token exactly what that token alone gives (one item, one thread), bit for bit.
TEST(Reference, EachTokenAsInABatchOfOne) {
  HostProblem hp;
  hp.T = 7;
  hp.H = 64;
  hp.topk = 40;
  hp.num_pages = 20;
  workload::IndexSpec spec;
  spec.pattern = workload::IndexPattern::padding_middle;
  hp.fill(spec, 16);
  const RefOut batch = run_ref(hp.view());
  for (int t = 0; t < hp.T; ++t) {
    SparseMlaProblem p = hp.view();
    p.num_tokens = 1;
    p.q_nope = &hp.q_nope[size_t(t) * hp.H * kCkvDim];
    p.q_pe = &hp.q_pe[size_t(t) * hp.H * kKpeDim];
    p.indices = &hp.indices[size_t(t) * hp.topk];
    const RefOut one = run_ref(p);
    for (size_t i = 0; i < one.out.size(); ++i) ASSERT_EQ(one.out[i], batch.out[size_t(t) * hp.H * kCkvDim + i]) << t;
    for (int h = 0; h < hp.H; ++h) ASSERT_EQ(one.lse[h], batch.lse[size_t(t) * hp.H + h]) << t;
  }
  EXPECT_GT(std::count_if(batch.lse.begin(), batch.lse.end(), [](double l) { return std::isfinite(l); }), 0);
}

// Every e4m3 code decodes to its value (bias 7, subnormals at 2^-9, 0x7f / 0xff NaN), and the
// encoder rounds to the nearest code, ties to even, saturating at 448.
TEST(Fp8, DecodesEveryCodeAndRoundsToNearestEven) {
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_float(0xc4), -3.0f);  // 1 1000 100: -(1 + 4/8) * 2
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    if (code == 0x80) {  // -0
      EXPECT_EQ(float_to_fp8_e4m3(v), 0x80);
      continue;
    }
    ASSERT_EQ(float_to_fp8_e4m3(v), code) << code;
  }
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: to even (1)
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);  // halfway between 1.125 and 1.25: to even (1.25)
  EXPECT_EQ(float_to_fp8_e4m3(1000.f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.5f, -9)), 0x02);  // subnormal steps of 2^-9: ties to even
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(2.5f, -9)), 0x02);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(0.75f, -9)), 0x01);
}

// An fp8_ds_mla row: the scale of each 128-dim block is its absolute maximum / 448, the kpe part is
// copied, and dequantizing gives every value to within half an e4m3 step.
TEST(Fp8, QuantizedRowHoldsScalesKpeAndValues) {
  std::vector<float> ckv(kCkvDim);
  std::vector<uint16_t> kpe(kKpeDim);
  for (int d = 0; d < kCkvDim; ++d) ckv[d] = std::sin(0.37 * d) * (1 + d / 128);
  for (int d = 0; d < kKpeDim; ++d) kpe[d] = float_to_bf16(0.25f * d - 3);
  std::vector<uint8_t> row(kFp8RowBytes);
  quantize_fp8_ds_mla_row(ckv.data(), kpe.data(), row.data());
  for (int b = 0; b < 4; ++b) {
    float amax = 0, scale;
    for (int d = 128 * b; d < 128 * b + 128; ++d) amax = std::max(amax, std::fabs(ckv[d]));
    std::memcpy(&scale, &row[kFp8ScalesOffset + 4 * b], 4);
    EXPECT_FLOAT_EQ(scale, amax / 448.f) << b;
  }
  EXPECT_EQ(std::memcmp(&row[kFp8KpeOffset], kpe.data(), kKpeDim * 2), 0);
  for (int d = 0; d < kCkvDim; ++d) ASSERT_NEAR(fp8_ds_mla_ckv(row.data(), d), ckv[d], std::fabs(ckv[d]) / 16 + 1e-6) << d;
}

// The reference reads an fp8_ds_mla cache as its dequantized values: with power-of-two scales
// those are exact in bf16, so the fp8 problem and the bf16 problem of the same values agree bit
// for bit, through padding, duplicates and a row stride wider than a row.
TEST(Reference, Fp8CacheIsTheBf16CacheOfItsDequantizedValues) {
  HostProblem hp;
  hp.T = 3;
  hp.fill({}, 16);
  hp.indices[1] = -1;
  hp.indices[2] = hp.indices[3];
  hp.to_fp8(true);
  const RefOut bf16 = run_ref(hp.as_bf16().view());
  const RefOut fp8 = run_ref(hp.view());
  EXPECT_EQ(fp8.out, bf16.out);
  EXPECT_EQ(fp8.lse, bf16.lse);
  std::vector<uint8_t> wide(size_t(hp.rows()) * 672, 0xff);  // NaN filler between rows
  for (int64_t r = 0; r < hp.rows(); ++r) std::memcpy(&wide[r * 672], &hp.kv_fp8[r * kFp8RowBytes], kFp8RowBytes);
  SparseMlaProblem p = hp.view();
  p.ckv_cache = wide.data();
  p.ckv_row_stride = 672;
  const RefOut strided = run_ref(p);
  EXPECT_EQ(strided.out, bf16.out);
  EXPECT_EQ(strided.lse, bf16.lse);
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
