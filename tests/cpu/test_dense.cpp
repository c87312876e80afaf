// Dense attention on the CPU: 16-bit conversions, the float64 reference against hand-computed
// answers, argument validation (each bad argument named) and planner decisions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dsa/dense_attention.h"
#include "dsa/reference.h"
#include "workload.h"

namespace dsa {
namespace {

TEST(Fp16, EveryFiniteBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = fp16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f), b) << std::hex << b;
  }
}

TEST(Fp16, RoundsToNearestEvenAndOverflowsToInf) {
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even (down)
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(float_to_fp16(65519.f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.f), 0x7c00);
  EXPECT_EQ(float_to_fp16(-1e9f), 0xfc00);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: tie -> 0
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
}

// A small problem over host vectors: q/k/v random normal (never zeros).
struct Small {
  DenseAttentionProblem p;
  std::vector<uint16_t> q, k, v, out = std::vector<uint16_t>(16);
  Small(int Lq, int Lk, int D, bool causal, DType dt = DType::bf16, uint64_t seed = 1) {
    workload::Rng rng(seed);
    auto fill = [&](std::vector<uint16_t>& x, size_t n) {
      x.resize(n);
      for (auto& e : x) {
        const float f = static_cast<float>(rng.normal());
        e = from_float(dt, f);
      }
    };
    fill(q, size_t(Lq) * D);
    fill(k, size_t(Lk) * D);
    fill(v, size_t(Lk) * D);
    p.dtype = dt;
    p.batch = 1; p.num_heads = 1; p.seqlen_q = Lq; p.seqlen_k = Lk;
    p.head_dim_qk = p.head_dim_v = D;
    p.causal = causal;
    p.scale = 0.125f;
    p.q.data = q.data(); p.k.data = k.data(); p.v.data = v.data(); p.out = out.data();
  }
  float at(const std::vector<uint16_t>& x, size_t i) const {
    return to_float(p.dtype, x[i]);
  }
};

TEST(DenseReference, MatchesTheFormulaWrittenOut) {
  for (DType dt : {DType::bf16, DType::fp16}) {
    Small s(3, 5, 64, false, dt, 7);
    std::vector<double> out(3 * 64), lse(3);
    dense_attention_reference_cpu(s.p, out.data(), lse.data());
    for (int i = 0; i < 3; ++i) {
      double w[5], total = 0;
      for (int j = 0; j < 5; ++j) {
        double dot = 0;
        for (int d = 0; d < 64; ++d) dot += double(s.at(s.q, i * 64 + d)) * s.at(s.k, j * 64 + d);
        w[j] = std::exp(dot * 0.125);
        total += w[j];
      }
      EXPECT_NEAR(lse[i], std::log2(total), 1e-9);
      for (int d = 0; d < 64; ++d) {
        double o = 0;
        for (int j = 0; j < 5; ++j) o += w[j] / total * s.at(s.v, j * 64 + d);
        EXPECT_NEAR(out[i * 64 + d], o, 1e-9);
      }
    }
  }
}

TEST(DenseReference, CausalIsBottomRightAligned) {
  // Lq == Lk: row 0 sees key 0 only, so its output is v[0] and its lse the one logit.
  Small s(4, 4, 64, true);
  std::vector<double> out(4 * 64), lse(4);
  dense_attention_reference_cpu(s.p, out.data(), lse.data());
  double dot = 0;
  for (int d = 0; d < 64; ++d) dot += double(s.at(s.q, d)) * s.at(s.k, d);
  EXPECT_NEAR(lse[0], dot * 0.125 / std::log(2.0), 1e-9);
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(out[d], s.at(s.v, d), 1e-12);
  // Lq = 6 > Lk = 4: rows 0 and 1 see nothing (out 0, lse -inf); row 2 sees key 0 only.
  Small t(6, 4, 64, true);
  std::vector<double> o2(6 * 64), l2(6);
  dense_attention_reference_cpu(t.p, o2.data(), l2.data());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(l2[i], -std::numeric_limits<double>::infinity());
    for (int d = 0; d < 64; ++d) EXPECT_EQ(o2[i * 64 + d], 0.0);
  }
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(o2[2 * 64 + d], t.at(t.v, d), 1e-12);
  EXPECT_TRUE(std::isfinite(l2[2]));
}

TEST(DenseReference, CompareValuesCatchesAWrongElement) {
  std::vector<double> ref = {1.0, 2.0, 3.0}, ref_lse = {0.5};
  std::vector<float> got = {1.0f, 2.0f, 3.0f}, lse = {0.5f};
  EXPECT_TRUE(compare_values(got.data(), 3, lse.data(), 1, ref.data(), ref_lse.data()).ok());
  got[1] = 2.1f;
  EXPECT_FALSE(compare_values(got.data(), 3, lse.data(), 1, ref.data(), ref_lse.data()).ok());
  got[1] = 2.0f;
  lse[0] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(compare_values(got.data(), 3, lse.data(), 1, ref.data(), ref_lse.data()).ok());
}

// ---- validation ------------------------------------------------------------------------------
struct Buffers {
  std::vector<uint16_t> big = std::vector<uint16_t>(1 << 20);
  std::vector<float> lse = std::vector<float>(1 << 12);
};

DenseAttentionProblem good(Buffers& b) {
  DenseAttentionProblem p;
  p.batch = 2; p.num_heads = 4; p.seqlen_q = 100; p.seqlen_k = 120; p.head_dim_qk = p.head_dim_v = 128;
  p.scale = 0.088f;
  p.q.data = p.k.data = p.v.data = b.big.data();
  p.out = b.big.data();
  p.lse = b.lse.data();
  return p;
}

void expect_error_naming(const DenseAttentionProblem& p, const std::string& name) {
  try {
    validate(p);
    ADD_FAILURE() << "no error; expected one naming " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(DenseValidate, AcceptsGoodProblems) {
  Buffers b;
  DenseAttentionProblem p = good(b);
  EXPECT_NO_THROW(validate(p));
  p.lse = nullptr;  // lse is optional
  EXPECT_NO_THROW(validate(p));
  p.head_dim_qk = 192;
  EXPECT_NO_THROW(validate(p));
  p.batch = 0;
  EXPECT_NO_THROW(validate(p));
}

TEST(DenseValidate, NamesEachBadArgument) {
  Buffers b;
  auto with = [&](auto mutate) {
    DenseAttentionProblem p = good(b);
    mutate(p);
    return p;
  };
  expect_error_naming(with([](auto& p) { p.q.data = nullptr; }), "q: pointer is null");
  expect_error_naming(with([&](auto& p) { p.k.data = b.big.data() + 1; }), "k: pointer must be 16-byte aligned");
  expect_error_naming(with([](auto& p) { p.v.data = nullptr; }), "v: pointer is null");
  expect_error_naming(with([](auto& p) { p.out = nullptr; }), "out: pointer is null");
  expect_error_naming(with([&](auto& p) { p.lse = reinterpret_cast<float*>(b.big.data() + 1); }), "lse: pointer must be 4-byte");
  expect_error_naming(with([](auto& p) { p.head_dim_qk = 96; p.head_dim_v = 96; }), "head_dim_qk/head_dim_v");
  expect_error_naming(with([](auto& p) { p.head_dim_v = 64; }), "head_dim_qk/head_dim_v");
  expect_error_naming(with([](auto& p) { p.batch = -1; }), "batch");
  expect_error_naming(with([](auto& p) { p.num_heads = 0; }), "num_heads");
  expect_error_naming(with([](auto& p) { p.num_heads = 70000; }), "num_heads");
  expect_error_naming(with([](auto& p) { p.seqlen_q = -3; }), "seqlen_q");
  expect_error_naming(with([](auto& p) { p.seqlen_k = 0; }), "seqlen_k");
  expect_error_naming(with([](auto& p) { p.scale = NAN; }), "scale");
  expect_error_naming(with([](auto& p) { p.scale = 0.f; }), "scale: must be finite and non-zero");
  expect_error_naming(with([](auto& p) { p.dtype = static_cast<DType>(7); }), "dtype");
  expect_error_naming(with([](auto& p) { p.q.row_stride = 100; }), "q.row_stride");
  expect_error_naming(with([](auto& p) { p.k.row_stride = 64; }), "k.row_stride: must be >= the head dim 128");
  expect_error_naming(with([](auto& p) { p.k.head_stride = -8; }), "k.head_stride");
  expect_error_naming(with([](auto& p) { p.v.batch_stride = 12; }), "v.batch_stride");
  expect_error_naming(with([](auto& p) { p.out_row_stride = 64; }), "out: strides overlap");
  expect_error_naming(with([](auto& p) { p.out_head_stride = 128 * 50; }), "out: strides overlap");
  expect_error_naming(with([](auto& p) { p.lse_head_stride = 10; }), "lse: strides overlap");
}

TEST(DenseValidate, ForwardRejectsAPlanForAnotherShape) {
  Buffers b;
  DenseAttentionProblem p = good(b);
  const DeviceInfo h100{132, 232448, 9, 0};
  const DenseAttentionPlan plan = plan_dense_attention(p, h100);
  p.seqlen_k = 121;
  try {
    dense_attention_forward(p, plan, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan: was made for a different problem shape"), std::string::npos) << e.what();
  }
}

// ---- planner ------------------------------------------------------------------------------------
TEST(DensePlanner, Generation1PicksTheQueryTileByOccupancyAndSizesSharedMemory) {
  Buffers b;
  const DeviceInfo h100{132, 232448, 9, 0};
  DenseChoice fa2;
  fa2.kernel = DenseKernel::sm80_mma;
  DenseAttentionProblem p = good(b);
  p.batch = 2; p.num_heads = 8; p.seqlen_q = p.seqlen_k = 1024;  // 128 CTAs of 128 rows: too few
  DenseAttentionPlan plan = plan_dense_attention(p, h100, fa2);
  EXPECT_EQ(plan.kernel, DenseKernel::sm80_mma);
  EXPECT_EQ(plan.block_q, 64);
  EXPECT_EQ(plan.q_blocks, 16);
  EXPECT_EQ(plan.ctas, 256);
  p.batch = 4; p.num_heads = 16; p.seqlen_q = p.seqlen_k = 4096;
  plan = plan_dense_attention(p, h100, fa2);
  EXPECT_EQ(plan.block_q, 128);
  EXPECT_EQ(plan.block_k, 64);
  EXPECT_EQ(plan.smem_bytes, size_t(2 * (128 * 128 + 2 * 64 * 256)));
  p.head_dim_qk = p.head_dim_v = 64;
  plan = plan_dense_attention(p, h100, fa2);
  EXPECT_EQ(plan.block_k, 128);
  p.seqlen_q = 1000;
  fa2.block_q = 64;
  plan = plan_dense_attention(p, h100, fa2);
  EXPECT_EQ(plan.block_q, 64);
  EXPECT_EQ(plan.q_blocks, 16);
}

TEST(DensePlanner, Generation2TilesAndSharedMemory) {
  Buffers b;
  const DeviceInfo h100{132, 232448, 9, 0};
  DenseChoice wg;
  wg.kernel = DenseKernel::sm90_wgmma;
  DenseAttentionProblem p = good(b);
  p.seqlen_q = 1000;
  DenseAttentionPlan plan = plan_dense_attention(p, h100, wg);
  EXPECT_EQ(plan.kernel, DenseKernel::sm90_wgmma);
  EXPECT_EQ(plan.block_q, 128);
  EXPECT_EQ(plan.block_k, 128);
  EXPECT_EQ(plan.q_blocks, 8);
  EXPECT_EQ(plan.stages, 3);
  EXPECT_EQ(plan.smem_bytes, size_t(2 * (128 * 128 + 3 * 128 * 256) + 1024 + 64));
  EXPECT_EQ(plan.ctas, 64);  // 8 q-blocks x 4 heads x 2 batches, fewer than the SMs
  p.head_dim_qk = 192;  // MLA prefill: two stages, 209 KB of the H100's 227 KB
  plan = plan_dense_attention(p, h100, wg);
  EXPECT_EQ(plan.stages, 2);
  EXPECT_EQ(plan.smem_bytes, size_t(2 * (128 * 192 + 2 * 128 * 320) + 1024 + 48));
  p.head_dim_qk = p.head_dim_v = 64;  // three consumer warpgroups: 192-row tiles
  plan = plan_dense_attention(p, h100, wg);
  EXPECT_EQ(plan.block_q, 192);
  EXPECT_EQ(plan.q_blocks, 6);
  EXPECT_EQ(plan.warps, 16);
  p.batch = 16; p.num_heads = 16;  // 6 x 256 tiles: persistent, one CTA per SM
  plan = plan_dense_attention(p, h100, wg);
  EXPECT_EQ(plan.ctas, 132);
  p.causal = true;  // causal: a CTA per tile, heaviest first
  plan = plan_dense_attention(p, h100, wg);
  EXPECT_EQ(plan.ctas, 6 * 256);
  p.causal = false;
  p.batch = 2; p.num_heads = 4;
  wg.block_q = 64;
  EXPECT_THROW(plan_dense_attention(p, h100, wg), Error);
  // The planner's own pick is generation 2; a block_q asks for generation 1.
  EXPECT_EQ(plan_dense_attention(p, h100).kernel, DenseKernel::sm90_wgmma);
  DenseChoice q64;
  q64.block_q = 64;
  EXPECT_EQ(plan_dense_attention(p, h100, q64).kernel, DenseKernel::sm80_mma);
}

TEST(DensePlanner, RejectsOtherDevicesAndChoices) {
  Buffers b;
  const DenseAttentionProblem p = good(b);
  const DeviceInfo a100{108, 166912, 8, 0};
  EXPECT_THROW(plan_dense_attention(p, a100), Error);
  DenseChoice choice;
  choice.block_q = 96;
  EXPECT_THROW(plan_dense_attention(p, DeviceInfo{132, 232448, 9, 0}, choice), Error);
}

}  // namespace
}  // namespace dsa
