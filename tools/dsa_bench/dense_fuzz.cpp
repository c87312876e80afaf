// `dsa-bench fuzz --dense`: the dense attention forward on random problems (fuzz.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench_kernels.h"
#include "dense_bench.h"
#include "device_memory.h"
#include "dsa/dense_attention.h"
#include "dsa/reference.h"
#include "fuzz.h"
#include "fuzz_common.h"
#include "workload.h"

namespace dsa::bench {
namespace {

using workload::Rng;

constexpr int64_t kMaxCpuCheck = int64_t{1} << 27;  // B x N x Lq x Lk x (Dqk + Dv): checked in float64 too
constexpr size_t kGuard = 2048;                     // elements checked past out and lse

// A [B, N, L, D] tensor's strides: packed, sequence major ([B, L, N, D], as a q, k or v cut from
// one projection's output), or with gaps after each row, head and batch (multiples of 8).
enum class Layout { packed, seq_major, gaps };
const char* to_string(Layout l) { return l == Layout::packed ? "packed" : l == Layout::seq_major ? "seq-major" : "gaps"; }

struct Strides {
  int64_t batch = 0, head = 0, row = 0, span = 0;  // elements; span: the buffer's extent
};
Strides layout_strides(Layout l, int B, int N, int L, int D, int pad) {
  Strides s;
  if (l == Layout::packed) s.row = D, s.head = int64_t(L) * D, s.batch = int64_t(N) * L * D;
  if (l == Layout::seq_major) s.head = D, s.row = int64_t(N) * D, s.batch = int64_t(L) * N * D;
  if (l == Layout::gaps) s.row = D + 8 * pad, s.head = L * s.row + 8 * pad, s.batch = N * s.head + 8;
  s.span = int64_t(B - 1) * s.batch + int64_t(N - 1) * s.head + int64_t(L - 1) * s.row + D;
  return s;
}

struct DenseFuzzCase {
  int number = 0;
  DType dtype = DType::bf16;
  int B = 1, N = 1, Lq = 1, Lk = 1, Dqk = 64, Dv = 64;
  bool causal = false, with_lse = true;
  bool qkv_one_buffer = false;  // q, k, v interleaved rows of one [B, L, 3, N, D] buffer
  Layout q = Layout::packed, k = Layout::packed, v = Layout::packed, out = Layout::packed;
  int pad = 1, lse_pad = 0;
  float scale = 0.125f;
  DenseChoice choice;

  std::string describe() const {
    char buf[400];
    const char* kernel = choice.kernel == DenseKernel::automatic ? "planner" : kernel_name(choice.kernel);
    std::snprintf(buf, sizeof buf,
                  "case %d: %s B=%d N=%d Lq=%d Lk=%d D=%d/%d%s q/k/v=%s out=%s lse=%s scale=%.4g choice{%s block_q=%d}",
                  number, dtype_name(dtype), B, N, Lq, Lk, Dqk, Dv, causal ? " causal" : "",
                  qkv_one_buffer ? "one-buffer" : (std::string(to_string(q)) + "/" + to_string(k) + "/" + to_string(v)).c_str(),
                  to_string(out), !with_lse ? "none" : lse_pad > 0 ? "gaps" : "packed", scale, kernel, choice.block_q);
    return buf;
  }
};

DenseFuzzCase draw_dense_case(Rng& rng, int number, const FuzzOptions& o) {
  DenseFuzzCase c;
  c.number = number;
  c.dtype = rng.uniform() < 0.5 ? DType::bf16 : DType::fp16;
  const int dims = int(rng.below(3));
  c.Dqk = dims == 0 ? 64 : dims == 1 ? 128 : 192;
  c.Dv = dims == 0 ? 64 : 128;
  c.B = log_uniform(rng, 1, 4);
  c.N = pick(rng, {1, 2, 3, 8, 16});
  c.causal = rng.uniform() < 0.5;
  c.Lq = log_uniform(rng, 1, std::min(o.max_tokens, 8192));
  c.Lk = rng.uniform() < 0.5 ? c.Lq : log_uniform(rng, 1, std::min(o.max_tokens, 8192));
  while (int64_t(c.B) * c.N * c.Lq * c.Lk > o.max_work) {  // the plain reference's time
    if (c.Lk > c.Lq) c.Lk = (c.Lk + 1) / 2;
    else c.Lq = (c.Lq + 1) / 2;
  }
  c.with_lse = rng.uniform() < 0.85;
  c.qkv_one_buffer = c.Lq == c.Lk && c.Dqk == c.Dv && rng.uniform() < 0.2;
  const auto layout = [&] { return pick(rng, {Layout::packed, Layout::packed, Layout::seq_major, Layout::gaps}); };
  c.q = layout(), c.k = layout(), c.v = layout(), c.out = layout();
  c.pad = 1 + int(rng.below(3));
  c.lse_pad = rng.uniform() < 0.3 ? 1 + int(rng.below(5)) : 0;
  c.scale = float(1.0 / std::sqrt(double(c.Dqk)) * std::exp(std::log(0.5) + rng.uniform() * std::log(4.0))) *
            (rng.uniform() < 0.2 ? -1.f : 1.f);
  if (rng.uniform() < 0.5) {
    c.choice.kernel = rng.uniform() < 0.5 ? DenseKernel::sm80_mma : DenseKernel::sm90_wgmma;
    if (c.choice.kernel == DenseKernel::sm80_mma) c.choice.block_q = pick(rng, {0, 64, 128});
  }
  return c;
}

// The output as floats, packed [B, N, Lq, Dv], from its strided bits.
std::vector<float> packed_out(const DenseFuzzCase& c, const std::vector<uint16_t>& bits, const Strides& s) {
  std::vector<float> o(size_t(c.B) * c.N * c.Lq * c.Dv);
  size_t n = 0;
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.N; ++h)
      for (int i = 0; i < c.Lq; ++i)
        for (int d = 0; d < c.Dv; ++d) o[n++] = to_float(c.dtype, bits[size_t(b * s.batch + h * s.head + i * s.row + d)]);
  return o;
}

FuzzOutcome run_dense_case(const DenseFuzzCase& c, Rng& rng, std::map<std::string, int>& refusals) {
  FuzzOutcome res;
  const int B = c.B, N = c.N, Lq = c.Lq, Lk = c.Lk;
  const auto fill = [&](void* p, int64_t n) {
    if (c.dtype == DType::bf16) launch_fill_normal_bf16(static_cast<uint16_t*>(p), size_t(n), 1.f, rng.next(), nullptr);
    else launch_fill_normal_fp16(static_cast<uint16_t*>(p), size_t(n), 1.f, rng.next(), nullptr);
  };
  DenseAttentionProblem p;
  p.dtype = c.dtype, p.batch = B, p.num_heads = N, p.seqlen_q = Lq, p.seqlen_k = Lk;
  p.head_dim_qk = c.Dqk, p.head_dim_v = c.Dv, p.causal = c.causal, p.scale = c.scale;
  // q, k and v: one buffer of [B, L, 3, N, D] rows, or three of their own layouts.
  Strides qs, ks, vs;
  DevicePtr d_qkv, d_q, d_k, d_v;
  if (c.qkv_one_buffer) {
    const int64_t row = 3 * int64_t(N) * c.Dqk;
    qs = ks = vs = {int64_t(Lq) * row, c.Dqk, row, int64_t(B) * Lq * row};
    d_qkv = device_alloc(size_t(qs.span) * 2);
    fill(d_qkv.get(), qs.span);
    const auto* base = static_cast<const uint16_t*>(d_qkv.get());
    p.q.data = base, p.k.data = base + int64_t(N) * c.Dqk, p.v.data = base + 2 * int64_t(N) * c.Dqk;
  } else {
    qs = layout_strides(c.q, B, N, Lq, c.Dqk, c.pad);
    ks = layout_strides(c.k, B, N, Lk, c.Dqk, c.pad);
    vs = layout_strides(c.v, B, N, Lk, c.Dv, c.pad);
    d_q = device_alloc(size_t(qs.span) * 2), d_k = device_alloc(size_t(ks.span) * 2), d_v = device_alloc(size_t(vs.span) * 2);
    fill(d_q.get(), qs.span), fill(d_k.get(), ks.span), fill(d_v.get(), vs.span);
    p.q.data = d_q.get(), p.k.data = d_k.get(), p.v.data = d_v.get();
  }
  for (auto [t, s] : {std::pair{&p.q, qs}, std::pair{&p.k, ks}, std::pair{&p.v, vs}})
    t->batch_stride = s.batch, t->head_stride = s.head, t->row_stride = s.row;
  const Strides os = layout_strides(c.out, B, N, Lq, c.Dv, c.pad);
  const int64_t lse_head = Lq + c.lse_pad, lse_batch = N * lse_head + (c.lse_pad > 0 ? 4 : 0);
  const size_t out_n = size_t(os.span) + kGuard, lse_n = size_t(int64_t(B - 1) * lse_batch + int64_t(N - 1) * lse_head + Lq) + kGuard;
  DevicePtr d_out = device_alloc(out_n * 2), d_lse = device_alloc(lse_n * 4);
  p.out = d_out.get();
  p.out_batch_stride = os.batch, p.out_head_stride = os.head, p.out_row_stride = os.row;
  p.lse = c.with_lse ? static_cast<float*>(d_lse.get()) : nullptr;
  p.lse_batch_stride = lse_batch, p.lse_head_stride = lse_head;
  validate(p);

  const DeviceInfo dev = DeviceInfo::from_device(0);
  const DenseAttentionPlan plan = plan_with_choice(
      [&](bool with_choice) { return plan_dense_attention(p, dev, with_choice ? c.choice : DenseChoice{}); }, res.refused_choice,
      refusals);
  res.plan = std::string(kernel_name(plan.kernel)) + "/" + std::to_string(plan.block_q);
  const auto poison = [&] {
    DSA_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, out_n * 2));
    DSA_CUDA_CHECK(cudaMemset(d_lse.get(), 0xff, lse_n * 4));
  };
  poison();
  res.detail = first_call([&] { dense_attention_forward(p, plan, nullptr); });
  if (!res.detail.empty()) return res;
  const auto out1 = host_copy(static_cast<const uint16_t*>(d_out.get()), out_n);
  const auto lse1 = host_copy(static_cast<const uint32_t*>(d_lse.get()), lse_n);

  // The GPU reference into packed outputs of its own.
  const size_t n_out = size_t(B) * N * Lq * c.Dv, n_lse = size_t(B) * N * Lq;
  DevicePtr d_ref_out = device_alloc(n_out * 2), d_ref_lse = device_alloc(n_lse * 4);
  DenseAttentionProblem ref = p;
  ref.out = d_ref_out.get(), ref.lse = static_cast<float*>(d_ref_lse.get());
  ref.out_batch_stride = ref.out_head_stride = ref.out_row_stride = ref.lse_batch_stride = ref.lse_head_stride = 0;
  dense_attention_reference_gpu(ref, nullptr);
  poison();
  const std::string graph_error = replay_in_graph([&](cudaStream_t s) { dense_attention_forward(p, plan, s); });
  const bool same = graph_error.empty() && host_copy(static_cast<const uint16_t*>(d_out.get()), out_n) == out1 &&
                    host_copy(static_cast<const uint32_t*>(d_lse.get()), lse_n) == lse1;

  const std::vector<float> out = packed_out(c, out1, os);
  std::vector<float> lse(c.with_lse ? n_lse : 0);
  for (size_t i = 0; i < lse.size(); ++i) {
    const int64_t b = int64_t(i) / (int64_t(N) * Lq), h = int64_t(i) / Lq % N, row = int64_t(i) % Lq;
    std::memcpy(&lse[i], &lse1[size_t(b * lse_batch + h * lse_head + row)], 4);
  }
  const auto ref_bits = host_copy(static_cast<const uint16_t*>(d_ref_out.get()), n_out);
  const auto ref_lse = host_copy(static_cast<const float*>(d_ref_lse.get()), n_lse);
  std::vector<double> ro(n_out), rl(ref_lse.begin(), ref_lse.begin() + lse.size());
  for (size_t i = 0; i < n_out; ++i) ro[i] = to_float(c.dtype, ref_bits[i]);
  const Agreement a = compare_values(out.data(), int64_t(n_out), lse.data(), int64_t(lse.size()), ro.data(), rl.data());
  // The float64 CPU reference where it is quick (it shares no code with the forward).
  Agreement cpu;
  const bool cpu_checked = double(B) * N * Lq * Lk * (c.Dqk + c.Dv) <= double(kMaxCpuCheck);
  if (cpu_checked) {
    DenseAttentionProblem hp = p;
    std::vector<uint16_t> hqkv, hq, hk, hv;
    if (c.qkv_one_buffer) {
      hqkv = host_copy(static_cast<const uint16_t*>(d_qkv.get()), size_t(qs.span));
      hp.q.data = hqkv.data(), hp.k.data = hqkv.data() + int64_t(N) * c.Dqk, hp.v.data = hqkv.data() + 2 * int64_t(N) * c.Dqk;
    } else {
      hq = host_copy(static_cast<const uint16_t*>(d_q.get()), size_t(qs.span));
      hk = host_copy(static_cast<const uint16_t*>(d_k.get()), size_t(ks.span));
      hv = host_copy(static_cast<const uint16_t*>(d_v.get()), size_t(vs.span));
      hp.q.data = hq.data(), hp.k.data = hk.data(), hp.v.data = hv.data();
    }
    std::vector<uint16_t> dummy_out(16);
    hp.out = dummy_out.data(), hp.lse = nullptr;  // the reference writes out_ref and lse_ref only
    hp.out_batch_stride = hp.out_head_stride = hp.out_row_stride = hp.lse_batch_stride = hp.lse_head_stride = 0;
    std::vector<double> co(n_out), cl(n_lse);
    dense_attention_reference_cpu(hp, co.data(), cl.data());
    cpu = compare_values(out.data(), int64_t(n_out), lse.data(), int64_t(lse.size()), co.data(), cl.data());
  }
  const int64_t stray_out = count_stray_writes<uint16_t>(out1, kPoison16, c.Dv, {{B, os.batch}, {N, os.head}, {Lq, os.row}});
  const int64_t stray_lse =
      c.with_lse ? count_stray_writes<uint32_t>(lse1, kPoison32, 1, {{B, lse_batch}, {N, lse_head}, {Lq, 1}})
                 : int64_t(std::count_if(lse1.begin(), lse1.end(), [](uint32_t w) { return w != kPoison32; }));
  res.ok = a.ok() && (!cpu_checked || cpu.ok()) && stray_out == 0 && stray_lse == 0 && same;
  res.detail = "vs GPU reference " + a.summary() + (cpu_checked ? "; vs CPU reference " + cpu.summary() : "");
  if (stray_out || stray_lse)
    res.detail += "; written outside: out " + std::to_string(stray_out) + ", lse " + std::to_string(stray_lse);
  if (!graph_error.empty()) res.detail += "; " + graph_error;
  else if (!same) res.detail += "; the graph's replay differed from the first call";
  return res;
}

}  // namespace

int run_dense_fuzz(const FuzzOptions& o, uint64_t seed) {
  if (o.list) {
    for (int n = o.first; n < o.first + o.cases; ++n) {
      Rng rng(case_seed(seed, n));
      std::printf("%s\n", draw_dense_case(rng, n, o).describe().c_str());
    }
    return 0;
  }
  std::map<std::string, int> refusals;
  return run_fuzz_cases(
      o.first, o.cases, seed, o.verbose, "dsa-bench fuzz --dense", "fuzz --dense", refusals,
      [&](Rng& rng, int n) { return draw_dense_case(rng, n, o); },
      [&](const DenseFuzzCase& c, Rng& rng) { return run_dense_case(c, rng, refusals); });
}

}  // namespace dsa::bench
