// The dense attention forward against the float64 CPU reference (small cases) or the fp32 GPU
// reference kernel (large ones), on fresh random inputs, with outputs poisoned before every run.
// Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "device_buffer.h"
#include "dsa/dense_attention.h"
#include "dsa/reference.h"
#include "workload.h"

namespace dsa {
namespace {

using testing::CapturedGraph;
using testing::DeviceBuffer;
using testing::Gpu;
using testing::GpuWithParam;

constexpr uint16_t kPoison = 0xffff;  // NaN in fp16 and bf16

struct Shape {
  DType dtype = DType::bf16;
  int B = 1, N = 1, Lq = 1, Lk = 1, Dqk = 128, Dv = 128;
  bool causal = false;
  std::string str() const {
    return std::string(dtype == DType::bf16 ? "bf16" : "fp16") + " B" + std::to_string(B) + " N" + std::to_string(N) +
           " Lq" + std::to_string(Lq) + " Lk" + std::to_string(Lk) + " D" + std::to_string(Dqk) + "/" +
           std::to_string(Dv) + (causal ? " causal" : "");
  }
};

// Packed host inputs [B, N, L, D] of random normal values (never zeros).
struct HostInputs {
  Shape s;
  float scale;
  std::vector<uint16_t> q, k, v;
  HostInputs(const Shape& shape, uint64_t seed, double magnitude = 1.0) : s(shape) {
    scale = 1.f / std::sqrt(float(s.Dqk));
    q = random(size_t(s.B) * s.N * s.Lq * s.Dqk, magnitude, seed + 1);
    k = random(size_t(s.B) * s.N * s.Lk * s.Dqk, magnitude, seed + 2);
    v = random(size_t(s.B) * s.N * s.Lk * s.Dv, 1.0, seed + 3);
  }
  std::vector<uint16_t> random(size_t n, double magnitude, uint64_t seed) const {
    workload::Rng rng(seed);
    std::vector<uint16_t> out(n);
    for (auto& x : out) {
      const float f = static_cast<float>(rng.normal() * magnitude);
      x = from_float(s.dtype, f);
    }
    return out;
  }
  // The packed problem over host or device copies of q/k/v (outputs left to the caller).
  DenseAttentionProblem view(const void* dq, const void* dk, const void* dv) const {
    DenseAttentionProblem p;
    p.dtype = s.dtype;
    p.batch = s.B; p.num_heads = s.N; p.seqlen_q = s.Lq; p.seqlen_k = s.Lk;
    p.head_dim_qk = s.Dqk; p.head_dim_v = s.Dv;
    p.causal = s.causal;
    p.scale = scale;
    p.q.data = dq; p.k.data = dk; p.v.data = dv;
    return p;
  }
  size_t out_elems() const { return size_t(s.B) * s.N * s.Lq * s.Dv; }
  size_t lse_elems() const { return size_t(s.B) * s.N * s.Lq; }
};

// Device outputs with optional padding between rows (out) and heads (lse), poisoned on demand.
struct DeviceOutputs {
  Shape s;
  int64_t out_row_stride, out_head_stride, out_batch_stride, lse_head_stride, lse_batch_stride;
  DeviceBuffer<uint16_t> out;
  DeviceBuffer<float> lse;
  DeviceOutputs(const Shape& shape, int out_row_pad = 0, int lse_pad = 0)
      : s(shape),
        out_row_stride(s.Dv + out_row_pad),
        out_head_stride(int64_t(s.Lq) * out_row_stride),
        out_batch_stride(int64_t(s.N) * out_head_stride),
        lse_head_stride(s.Lq + lse_pad),
        lse_batch_stride(int64_t(s.N) * lse_head_stride),
        out(size_t(s.B) * out_batch_stride),
        lse(size_t(s.B) * lse_batch_stride) {}
  void poison() {
    std::vector<uint16_t> o(out.n, kPoison);
    std::vector<float> l(lse.n, std::numeric_limits<float>::quiet_NaN());
    cudaMemcpy(out.ptr, o.data(), o.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(lse.ptr, l.data(), l.size() * 4, cudaMemcpyHostToDevice);
  }
  void attach(DenseAttentionProblem& p) const {
    p.out = out.ptr;
    p.out_row_stride = out_row_stride; p.out_head_stride = out_head_stride; p.out_batch_stride = out_batch_stride;
    p.lse = lse.ptr;
    p.lse_head_stride = lse_head_stride; p.lse_batch_stride = lse_batch_stride;
  }
  // Packed, widened copies; the padding must still be poison.
  void fetch(std::vector<float>& o, std::vector<float>& l) const {
    const auto ro = out.get();
    const auto rl = lse.get();
    o.clear();
    l.clear();
    size_t written = 0;
    for (int b = 0; b < s.B; ++b)
      for (int n = 0; n < s.N; ++n)
        for (int i = 0; i < s.Lq; ++i) {
          const size_t base = b * out_batch_stride + n * out_head_stride + i * out_row_stride;
          for (int d = 0; d < s.Dv; ++d) o.push_back(to_float(s.dtype, ro[base + d]));
          l.push_back(rl[b * lse_batch_stride + n * lse_head_stride + i]);
          written += s.Dv;
        }
    size_t poisoned = 0;
    for (uint16_t x : ro) poisoned += x == kPoison;
    size_t nan_lse = 0;
    for (float x : rl) nan_lse += std::isnan(x);
    // Every element outside the rows must be poison still (a written element is never 0xffff:
    // the kernel writes no NaN, and a NaN in a row is caught by the comparison).
    ASSERT_GE(poisoned, ro.size() - written) << "a write landed outside the output rows";
    ASSERT_GE(nan_lse, rl.size() - l.size()) << "a write landed outside the lse rows";
  }
};

bool cpu_reference_is_cheap(const Shape& s) {
  return double(s.B) * s.N * s.Lq * s.Lk * (s.Dqk + s.Dv) <= double(1 << 27);
}

// Ground truth: float64 CPU when cheap, else the fp32 GPU reference kernel.
void reference(const HostInputs& h, std::vector<double>& ro, std::vector<double>& rl, bool force_gpu = false) {
  ro.assign(h.out_elems(), 0);
  rl.assign(h.lse_elems(), 0);
  if (cpu_reference_is_cheap(h.s) && !force_gpu) {
    DenseAttentionProblem p = h.view(h.q.data(), h.k.data(), h.v.data());
    std::vector<uint16_t> dummy(16);
    p.out = dummy.data();
    dense_attention_reference_cpu(p, ro.data(), rl.data());
    return;
  }
  DeviceBuffer<uint16_t> q(h.q), k(h.k), v(h.v);
  DeviceOutputs d(h.s);
  d.poison();
  DenseAttentionProblem p = h.view(q.ptr, k.ptr, v.ptr);
  d.attach(p);
  dense_attention_reference_gpu(p, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> o, l;
  d.fetch(o, l);
  ro.assign(o.begin(), o.end());
  rl.assign(l.begin(), l.end());
}

Agreement judge(const DeviceOutputs& d, const std::vector<double>& ro, const std::vector<double>& rl) {
  std::vector<float> o, l;
  d.fetch(o, l);
  return compare_values(o.data(), o.size(), l.data(), l.size(), ro.data(), rl.data());
}

// Poisons d, runs p with plan (the planner's by default), judges against the reference.
Agreement forward_and_judge(DeviceOutputs& d, const DenseAttentionProblem& p, const DenseAttentionPlan& plan,
                            const std::vector<double>& ro, const std::vector<double>& rl) {
  d.poison();
  dense_attention_forward(p, plan, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return judge(d, ro, rl);
}

Agreement run_and_compare(const HostInputs& h, DenseChoice choice = {}) {
  const Shape& s = h.s;
  std::vector<double> ro, rl;
  reference(h, ro, rl);
  DeviceBuffer<uint16_t> q(h.q), k(h.k), v(h.v);
  DeviceOutputs d(s);
  DenseAttentionProblem p = h.view(q.ptr, k.ptr, v.ptr);
  d.attach(p);
  return forward_and_judge(d, p, plan_dense_attention(p, DeviceInfo::from_device(0), choice), ro, rl);
}

Agreement run_and_compare(const Shape& s, uint64_t seed, DenseChoice choice = {}, double magnitude = 1.0) {
  return run_and_compare(HostInputs(s, seed, magnitude), choice);
}

// ---- dtype x head dims x causal x odd lengths ---------------------------------------------------
using SweepParam = std::tuple<DenseKernel, DType, int, bool, int>;  // kernel, dtype, Dqk, causal, L

class DenseSweep : public GpuWithParam<SweepParam> {};

TEST_P(DenseSweep, MatchesReference) {
  const auto [kernel, dtype, dqk, causal, L] = GetParam();
  Shape s;
  s.dtype = dtype; s.B = 1; s.N = 2; s.Lq = L; s.Lk = L; s.Dqk = dqk; s.Dv = dqk == 192 ? 128 : dqk;
  s.causal = causal;
  DenseChoice choice;
  choice.kernel = kernel;
  const Agreement a = run_and_compare(s, uint64_t(dqk) * 7919 + L * 31 + causal, choice);
  EXPECT_TRUE(a.ok()) << s.str() << ": " << a.summary();
}

INSTANTIATE_TEST_SUITE_P(KernelDtypeDimsCausalLength, DenseSweep,
                         ::testing::Combine(::testing::Values(DenseKernel::sm80_mma, DenseKernel::sm90_wgmma),
                                            ::testing::Values(DType::fp16, DType::bf16), ::testing::Values(64, 128, 192),
                                            ::testing::Bool(), ::testing::Values(1, 17, 1000, 4097)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == DenseKernel::sm80_mma ? "sm80_" : "sm90_") +
                                  (std::get<1>(info.param) == DType::bf16 ? "bf16" : "fp16") + "_D" +
                                  std::to_string(std::get<2>(info.param)) +
                                  (std::get<3>(info.param) ? "_causal" : "_full") + "_L" +
                                  std::to_string(std::get<4>(info.param));
                         });

// Every kernel generation, for the tests that follow.
const DenseKernel kKernels[] = {DenseKernel::sm80_mma, DenseKernel::sm90_wgmma};
const char* name(DenseKernel k) {
  return k == DenseKernel::sm80_mma ? "sm80_mma" : k == DenseKernel::sm90_wgmma ? "sm90_wgmma" : "automatic";
}
DenseChoice choose(DenseKernel k, int block_q = 0) {
  DenseChoice c;
  c.kernel = k;
  c.block_q = block_q;
  return c;
}

// ---- query and key lengths that differ (causal: bottom-right aligned) -------------------------
TEST_F(Gpu, DenseDifferentQueryAndKeyLengths) {
  const int cases[][3] = {{300, 100, 1}, {5, 1000, 1}, {77, 333, 0}, {129, 64, 0}, {200, 1, 1}};
  for (const auto& c : cases) {
    Shape s;
    s.B = 2; s.N = 2; s.Lq = c[0]; s.Lk = c[1]; s.Dqk = s.Dv = 64; s.causal = c[2];
    for (DenseKernel kernel : kKernels) {
      const Agreement a = run_and_compare(s, 17 + c[0] + c[1], choose(kernel));
      EXPECT_TRUE(a.ok()) << name(kernel) << " " << s.str() << ": " << a.summary();
    }
  }
}

// ---- many tiles per persistent CTA (no mask), and causal tiles that see no key at all ----------
TEST_F(Gpu, DensePersistentTilesAndEmptyCausalTiles) {
  Shape s;
  s.B = 4; s.N = 64; s.Lq = 600; s.Lk = 100; s.Dqk = s.Dv = 128; s.causal = true;  // 1280 tiles
  const Agreement a = run_and_compare(s, 4242, choose(DenseKernel::sm90_wgmma));
  EXPECT_TRUE(a.ok()) << s.str() << ": " << a.summary();
  s.Lq = 700; s.Lk = 900; s.Dqk = s.Dv = 64; s.N = 40; s.causal = false;  // 640 tiles of 192 rows, ragged
  const Agreement b = run_and_compare(s, 4243, choose(DenseKernel::sm90_wgmma));
  EXPECT_TRUE(b.ok()) << s.str() << ": " << b.summary();
  s.Dqk = 192; s.Dv = 128;  // two stages
  const Agreement c = run_and_compare(s, 4244, choose(DenseKernel::sm90_wgmma));
  EXPECT_TRUE(c.ok()) << s.str() << ": " << c.summary();
}

// ---- B * N from 1 to 256 ---------------------------------------------------------------------
TEST_F(Gpu, DenseBatchAndHeadCounts) {
  const int cases[][2] = {{1, 1}, {2, 3}, {3, 5}, {4, 64}};
  for (const auto& c : cases) {
    Shape s;
    s.B = c[0]; s.N = c[1]; s.Lq = s.Lk = 130; s.Dqk = s.Dv = 64; s.causal = c[0] % 2 == 1;
    for (DenseKernel kernel : kKernels) {
      const Agreement a = run_and_compare(s, 100 + c[0] * 7 + c[1], choose(kernel));
      EXPECT_TRUE(a.ok()) << name(kernel) << " " << s.str() << ": " << a.summary();
    }
  }
}

// ---- both query tiles, the same answer -------------------------------------------------------
TEST_F(Gpu, DenseEveryKernelAndQueryTileAgrees) {
  for (int dqk : {64, 128, 192})
    for (DenseChoice choice : {choose(DenseKernel::sm80_mma, 64), choose(DenseKernel::sm80_mma, 128),
                               choose(DenseKernel::sm90_wgmma), choose(DenseKernel::automatic)}) {
      Shape s;
      s.B = 1; s.N = 3; s.Lq = s.Lk = 333; s.Dqk = dqk; s.Dv = dqk == 192 ? 128 : dqk; s.causal = true;
      const Agreement a = run_and_compare(s, 5 + dqk, choice);
      EXPECT_TRUE(a.ok()) << s.str() << " " << name(choice.kernel) << " block_q " << choice.block_q << ": "
                          << a.summary();
    }
}

// ---- large logits: the online max must keep exp2 in range ------------------------------------
TEST_F(Gpu, DenseLargeLogits) {
  Shape s;
  s.B = 1; s.N = 2; s.Lq = s.Lk = 300; s.Dqk = s.Dv = 128;
  for (bool causal : {false, true}) {
    s.causal = causal;
    for (DenseKernel kernel : kKernels) {
      const Agreement a = run_and_compare(s, 71, choose(kernel), /*magnitude=*/6.0);  // logits with std ~36
      EXPECT_TRUE(a.ok()) << name(kernel) << " " << s.str() << ": " << a.summary();
    }
  }
}

// ---- a negative scale: the row max becomes a min of the raw scores ----------------------------
TEST_F(Gpu, DenseNegativeScale) {
  Shape s;
  s.B = 1; s.N = 2; s.Lq = s.Lk = 200; s.Dqk = s.Dv = 64; s.causal = true;
  HostInputs h(s, 72, /*magnitude=*/3.0);
  h.scale = -h.scale;
  for (DenseKernel kernel : kKernels) {
    const Agreement a = run_and_compare(h, choose(kernel));
    EXPECT_TRUE(a.ok()) << name(kernel) << ": " << a.summary();
  }
}

// ---- q, k, v sliced out of one fused [B, L, 3, N, D] projection; padded out and lse ------------
TEST_F(Gpu, DenseStridedQkvAndPaddedOutputs) {
  Shape s;
  s.B = 2; s.N = 3; s.Lq = s.Lk = 200; s.Dqk = s.Dv = 128; s.causal = true;
  const HostInputs h(s, 909);
  std::vector<double> ro, rl;
  reference(h, ro, rl);
  const int64_t D = 128, row = 3 * s.N * D, batch = int64_t(s.Lq) * row;
  std::vector<uint16_t> qkv(size_t(s.B) * batch, 0x7fc0);
  for (int b = 0; b < s.B; ++b)
    for (int n = 0; n < s.N; ++n)
      for (int i = 0; i < s.Lq; ++i)
        for (int t = 0; t < 3; ++t) {
          const auto& src = t == 0 ? h.q : t == 1 ? h.k : h.v;
          std::memcpy(&qkv[b * batch + i * row + t * s.N * D + n * D], &src[((size_t(b) * s.N + n) * s.Lq + i) * D], D * 2);
        }
  DeviceBuffer<uint16_t> dqkv(qkv);
  DeviceOutputs d(s, /*out_row_pad=*/24, /*lse_pad=*/5);
  DenseAttentionProblem p = h.view(dqkv.ptr, dqkv.ptr + s.N * D, dqkv.ptr + 2 * s.N * D);
  for (DenseTensor* t : {&p.q, &p.k, &p.v}) {
    t->batch_stride = batch;
    t->head_stride = D;
    t->row_stride = row;
  }
  d.attach(p);
  for (DenseChoice choice : {choose(DenseKernel::sm80_mma, 64), choose(DenseKernel::sm80_mma, 128),
                             choose(DenseKernel::sm90_wgmma)}) {
    const Agreement a = forward_and_judge(d, p, plan_dense_attention(p, DeviceInfo::from_device(0), choice), ro, rl);
    EXPECT_TRUE(a.ok()) << name(choice.kernel) << " block_q " << choice.block_q << ": " << a.summary();
  }
}

// ---- lse is optional ---------------------------------------------------------------------------
TEST_F(Gpu, DenseWithoutLse) {
  Shape s;
  s.Lq = s.Lk = 65; s.N = 2;
  const HostInputs h(s, 4);
  std::vector<double> ro, rl;
  reference(h, ro, rl);
  DeviceBuffer<uint16_t> q(h.q), k(h.k), v(h.v);
  DeviceOutputs d(s);
  d.poison();
  DenseAttentionProblem p = h.view(q.ptr, k.ptr, v.ptr);
  d.attach(p);
  p.lse = nullptr;
  dense_attention_forward(p, plan_dense_attention(p), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  for (float x : d.lse.get()) ASSERT_TRUE(std::isnan(x)) << "lse written though it was not asked for";
  std::vector<float> o, l;
  d.fetch(o, l);
  const Agreement a = compare_values(o.data(), o.size(), nullptr, 0, ro.data(), rl.data());
  EXPECT_TRUE(a.ok()) << a.summary();
}

// ---- B = 0 and Lq = 0 write nothing ----------------------------------------------------------
TEST_F(Gpu, DenseEmptyProblemsWriteNothing) {
  Shape s;
  s.Lq = s.Lk = 16;
  const HostInputs h(s, 3);
  DeviceBuffer<uint16_t> q(h.q), k(h.k), v(h.v);
  DeviceOutputs d(s);
  for (int which = 0; which < 2; ++which) {
    d.poison();
    DenseAttentionProblem p = h.view(q.ptr, k.ptr, v.ptr);
    d.attach(p);
    if (which == 0) p.batch = 0; else p.seqlen_q = 0;
    const DenseAttentionPlan plan = plan_dense_attention(p);
    EXPECT_EQ(plan.ctas, 0);
    dense_attention_forward(p, plan, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    for (uint16_t x : d.out.get()) ASSERT_EQ(x, kPoison);
  }
}

// ---- captured in a CUDA graph, replayed on new inputs --------------------------------------------
TEST_F(Gpu, DenseGraphCaptureAndReplay) {
  Shape s;
  s.B = 2; s.N = 4; s.Lq = s.Lk = 257; s.Dqk = s.Dv = 128; s.causal = true;
  HostInputs h(s, 1);
  DeviceBuffer<uint16_t> q(h.q), k(h.k), v(h.v);
  DeviceOutputs d(s);
  DenseAttentionProblem p = h.view(q.ptr, k.ptr, v.ptr);
  d.attach(p);
  const DenseAttentionPlan plan = plan_dense_attention(p);
  CapturedGraph graph([&](cudaStream_t stream) { dense_attention_forward(p, plan, stream); });
  ASSERT_TRUE(graph.ok());
  for (int round = 0; round < 3; ++round) {
    const HostInputs next(s, 50 + round);
    CUDA_OK(q.set(next.q));
    CUDA_OK(k.set(next.k));
    CUDA_OK(v.set(next.v));
    d.poison();
    CUDA_OK(graph.replay());
    std::vector<double> ro, rl;
    reference(next, ro, rl);
    const Agreement a = judge(d, ro, rl);
    EXPECT_TRUE(a.ok()) << "replay " << round << ": " << a.summary();
  }
}

// ---- run to run, bit for bit ---------------------------------------------------------------------
TEST_F(Gpu, DenseBitwiseDeterministic) {
  Shape s;
  s.B = 2; s.N = 8; s.Lq = s.Lk = 1024; s.causal = true;
  const HostInputs h(s, 8);
  DeviceBuffer<uint16_t> q(h.q), k(h.k), v(h.v);
  DeviceOutputs d(s);
  DenseAttentionProblem p = h.view(q.ptr, k.ptr, v.ptr);
  d.attach(p);
  const DenseAttentionPlan plan = plan_dense_attention(p);
  std::vector<uint16_t> first;
  for (int rep = 0; rep < 4; ++rep) {
    d.poison();
    dense_attention_forward(p, plan, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const auto o = d.out.get();
    if (rep == 0) first = o;
    ASSERT_EQ(o, first) << "rep " << rep;
  }
}

// ---- the GPU reference itself against the CPU reference -------------------------------------------
TEST_F(Gpu, DenseGpuReferenceMatchesCpuReference) {
  for (bool causal : {false, true}) {
    Shape s;
    s.dtype = causal ? DType::fp16 : DType::bf16;
    s.B = 2; s.N = 2; s.Lq = 150; s.Lk = 500; s.Dqk = 192; s.Dv = 128; s.causal = causal;
    ASSERT_TRUE(cpu_reference_is_cheap(s));
    const HostInputs h(s, 12);
    std::vector<double> cpu_o, cpu_l, gpu_o, gpu_l;
    reference(h, cpu_o, cpu_l);
    reference(h, gpu_o, gpu_l, /*force_gpu=*/true);
    std::vector<float> go(gpu_o.begin(), gpu_o.end()), gl(gpu_l.begin(), gpu_l.end());
    const Agreement a = compare_values(go.data(), go.size(), gl.data(), gl.size(), cpu_o.data(), cpu_l.data());
    EXPECT_TRUE(a.ok()) << s.str() << ": " << a.summary();
  }
}

}  // namespace
}  // namespace dsa
