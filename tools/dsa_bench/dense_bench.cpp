// `dsa-bench dense`: verify, then time, the dense attention forward on a suite or one case.
#include "dense_bench.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "bench_kernels.h"
#include "common/cuda_check.h"
#include "dsa/reference.h"
#include "timing.h"

#ifndef DSA_GIT_COMMIT
#define DSA_GIT_COMMIT "unknown"
#endif

namespace dsa::bench {
namespace {

DenseCase make_case(std::string name, DType dt, int B, int N, int L, int dqk, int dv, bool causal,
                    std::string target = "") {
  DenseCase c;
  c.name = std::move(name);
  c.dtype = dt;
  c.batch = B; c.heads = N; c.seqlen_q = L; c.seqlen_k = L;
  c.head_dim_qk = dqk; c.head_dim_v = dv;
  c.causal = causal;
  c.target = std::move(target);
  return c;
}

double flops(const DenseCase& c) {
  return 2.0 * c.batch * c.heads * double(c.seqlen_q) * c.seqlen_k * (c.head_dim_qk + c.head_dim_v) *
         (c.causal ? 0.5 : 1.0);
}

struct DeviceArray {
  void* ptr = nullptr;
  explicit DeviceArray(size_t bytes) { DSA_CUDA_CHECK(cudaMalloc(&ptr, bytes > 0 ? bytes : 16)); }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

struct DenseResult {
  DenseCase c;
  DenseAttentionPlan plan;
  Agreement vs_gpu_ref, vs_cpu_ref;
  bool cpu_checked = false, ok = false;
  Timing kernel;
};

// Widened out [B, N, Lq, Dv] and lse of a device result.
void fetch(const DenseCase& c, const void* out, const float* lse, std::vector<float>& o, std::vector<float>& l) {
  const size_t n_out = size_t(c.batch) * c.heads * c.seqlen_q * c.head_dim_v;
  std::vector<uint16_t> bits(n_out);
  DSA_CUDA_CHECK(cudaMemcpy(bits.data(), out, n_out * 2, cudaMemcpyDeviceToHost));
  o.resize(n_out);
  for (size_t i = 0; i < n_out; ++i) o[i] = to_float(c.dtype, bits[i]);
  l.resize(size_t(c.batch) * c.heads * c.seqlen_q);
  DSA_CUDA_CHECK(cudaMemcpy(l.data(), lse, l.size() * 4, cudaMemcpyDeviceToHost));
}

DenseResult run_case(const DenseCase& c, const DenseOptions& o, KernelTimer& timer, Timer which) {
  DenseResult r;
  r.c = c;
  const size_t nq = size_t(c.batch) * c.heads * c.seqlen_q * c.head_dim_qk;
  const size_t nk = size_t(c.batch) * c.heads * c.seqlen_k * c.head_dim_qk;
  const size_t nv = size_t(c.batch) * c.heads * c.seqlen_k * c.head_dim_v;
  const size_t no = size_t(c.batch) * c.heads * c.seqlen_q * c.head_dim_v;
  const size_t nl = size_t(c.batch) * c.heads * c.seqlen_q;
  DeviceArray q(nq * 2), k(nk * 2), v(nv * 2), out(no * 2), lse(nl * 4), ref_out(no * 2), ref_lse(nl * 4);
  auto fill = c.dtype == DType::bf16 ? launch_fill_normal_bf16 : launch_fill_normal_fp16;
  fill(static_cast<uint16_t*>(q.ptr), nq, 1.0f, o.seed * 3 + 1, nullptr);
  fill(static_cast<uint16_t*>(k.ptr), nk, 1.0f, o.seed * 3 + 2, nullptr);
  fill(static_cast<uint16_t*>(v.ptr), nv, 1.0f, o.seed * 3 + 3, nullptr);
  DSA_CUDA_CHECK(cudaMemset(out.ptr, 0xff, no * 2));  // NaN in both dtypes
  DSA_CUDA_CHECK(cudaMemset(lse.ptr, 0xff, nl * 4));

  DenseAttentionProblem p;
  p.dtype = c.dtype;
  p.batch = c.batch; p.num_heads = c.heads; p.seqlen_q = c.seqlen_q; p.seqlen_k = c.seqlen_k;
  p.head_dim_qk = c.head_dim_qk; p.head_dim_v = c.head_dim_v;
  p.causal = c.causal;
  p.scale = 1.f / std::sqrt(float(c.head_dim_qk));
  p.q.data = q.ptr; p.k.data = k.ptr; p.v.data = v.ptr;
  p.out = out.ptr; p.lse = static_cast<float*>(lse.ptr);
  validate(p);
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  DenseChoice choice;
  choice.block_q = o.block_q;
  choice.kernel = o.kernel == "fa2" ? DenseKernel::sm80_mma : o.kernel == "wgmma" ? DenseKernel::sm90_wgmma
                                                                                   : DenseKernel::automatic;
  r.plan = plan_dense_attention(p, DeviceInfo::from_device(device), choice);

  // Verify first: against the GPU reference always, the float64 CPU reference when small.
  dense_attention_forward(p, r.plan, nullptr);
  DenseAttentionProblem pr = p;
  pr.out = ref_out.ptr;
  pr.lse = static_cast<float*>(ref_lse.ptr);
  dense_attention_reference_gpu(pr, nullptr);
  DSA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got_o, got_l, ref_o, ref_l;
  fetch(c, out.ptr, static_cast<float*>(lse.ptr), got_o, got_l);
  fetch(c, ref_out.ptr, static_cast<float*>(ref_lse.ptr), ref_o, ref_l);
  const std::vector<double> ro(ref_o.begin(), ref_o.end()), rl(ref_l.begin(), ref_l.end());
  r.vs_gpu_ref = compare_values(got_o.data(), got_o.size(), got_l.data(), got_l.size(), ro.data(), rl.data());
  r.ok = r.vs_gpu_ref.ok();
  if (double(c.batch) * c.heads * c.seqlen_q * c.seqlen_k * (c.head_dim_qk + c.head_dim_v) <= double(1 << 27)) {
    std::vector<uint16_t> hq(nq), hk(nk), hv(nv);
    DSA_CUDA_CHECK(cudaMemcpy(hq.data(), q.ptr, nq * 2, cudaMemcpyDeviceToHost));
    DSA_CUDA_CHECK(cudaMemcpy(hk.data(), k.ptr, nk * 2, cudaMemcpyDeviceToHost));
    DSA_CUDA_CHECK(cudaMemcpy(hv.data(), v.ptr, nv * 2, cudaMemcpyDeviceToHost));
    DenseAttentionProblem ph = p;
    ph.q.data = hq.data(); ph.k.data = hk.data(); ph.v.data = hv.data();
    std::vector<uint16_t> dummy_out(16);
    ph.out = dummy_out.data();
    ph.lse = nullptr;
    std::vector<double> co(no), cl(nl);
    dense_attention_reference_cpu(ph, co.data(), cl.data());
    r.vs_cpu_ref = compare_values(got_o.data(), got_o.size(), got_l.data(), got_l.size(), co.data(), cl.data());
    r.cpu_checked = true;
    r.ok = r.ok && r.vs_cpu_ref.ok();
  }
  r.kernel = timer.time(which, [&] { dense_attention_forward(p, r.plan, bench_stream()); }, 1, o.reps, o.warmup);
  return r;
}

}  // namespace

std::vector<DenseCase> dense_suite(const std::string& name) {
  const DType bf = DType::bf16, fp = DType::fp16;
  if (name == "targets")
    return {make_case("B2-N8-L1024-D128-fp16", fp, 2, 8, 1024, 128, 128, false, "<= 40 us"),
            make_case("B4-N16-L4096-D128", bf, 4, 16, 4096, 128, 128, false, ">= 650 TF/s"),
            make_case("B2-N16-L8192-D128-causal", bf, 2, 16, 8192, 128, 128, true, ">= 600 TF/s"),
            make_case("B4-N16-L4096-D64", bf, 4, 16, 4096, 64, 64, false, ">= 480 TF/s"),
            make_case("B4-N16-L4096-D128-causal", bf, 4, 16, 4096, 128, 128, true),
            make_case("B1-N16-L8192-D192/128-causal", bf, 1, 16, 8192, 192, 128, true)};
  if (name == "smoke")
    return {make_case("B1-N2-L17-D64", bf, 1, 2, 17, 64, 64, false),
            make_case("B2-N3-L1000-D128-fp16-causal", fp, 2, 3, 1000, 128, 128, true),
            make_case("B1-N2-L333-D192/128-causal", bf, 1, 2, 333, 192, 128, true)};
  throw Error("dense suite: unknown name '" + name + "'");
}

std::vector<std::string> dense_suite_names() { return {"targets", "smoke"}; }

int run_dense(const DenseOptions& o) {
  std::vector<DenseCase> cases;
  if (o.batch > 0) {
    DenseCase c = make_case("custom", o.dtype == "fp16" ? DType::fp16 : DType::bf16, o.batch, o.heads, o.seqlen,
                            o.head_dim, o.head_dim == 192 ? 128 : o.head_dim, o.causal);
    c.seqlen_k = o.seqlen_k > 0 ? o.seqlen_k : o.seqlen;
    cases.push_back(c);
  } else {
    cases = dense_suite(o.suite);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("dsa-bench dense: no CUDA device; nothing to time\n");
    return 0;
  }
  const Timer which = parse_timer(o.timer);
  cudaDeviceProp prop{};
  DSA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, commit %s; timer %s, L2 %s before each call, %d reps (median, min-max)\n",
              prop.name, prop.multiProcessorCount, DSA_GIT_COMMIT, to_string(which),
              o.no_flush ? "NOT flushed" : "flushed", o.reps);
  KernelTimer timer(bench_stream(), !o.no_flush);
  std::vector<DenseResult> results;
  for (const DenseCase& c : cases) {
    std::fprintf(stderr, "[%zu/%zu] %s\n", results.size() + 1, cases.size(), c.name.c_str());
    results.push_back(run_case(c, o, timer, which));
  }
  std::printf("\n%-30s %-5s %-16s %10s %16s %8s %-8s %s\n", "case", "dtype", "kernel", "us", "(min-max)", "TF/s",
              "verified", "target");
  bool all_ok = true;
  for (const DenseResult& r : results) {
    char cfg[32], range[40];
    std::snprintf(cfg, sizeof cfg, "%s %dx%d s%d", kernel_name(r.plan.kernel), r.plan.block_q, r.plan.block_k,
                  r.plan.stages);
    std::snprintf(range, sizeof range, "(%.1f-%.1f)", r.kernel.min_us, r.kernel.max_us);
    std::printf("%-30s %-5s %-16s %10.1f %16s %8.1f %-8s %s\n", r.c.name.c_str(), dtype_name(r.c.dtype), cfg,
                r.kernel.median_us, range, flops(r.c) / r.kernel.median_us / 1e6, r.ok ? "yes" : "FAILED",
                r.c.target.c_str());
    all_ok = all_ok && r.ok;
  }
  for (const DenseResult& r : results) {
    std::printf("%s vs GPU reference: %s\n", r.c.name.c_str(), r.vs_gpu_ref.summary().c_str());
    if (r.cpu_checked) std::printf("%s vs CPU reference: %s\n", r.c.name.c_str(), r.vs_cpu_ref.summary().c_str());
  }
  if (!o.json_path.empty()) {
    nlohmann::json j{{"device", prop.name}, {"commit", DSA_GIT_COMMIT}, {"timer", to_string(which)},
                     {"l2_flushed", !o.no_flush}, {"cases", nlohmann::json::array()}};
    for (const DenseResult& r : results)
      j["cases"].push_back({{"name", r.c.name}, {"dtype", dtype_name(r.c.dtype)}, {"batch", r.c.batch},
                            {"heads", r.c.heads}, {"seqlen_q", r.c.seqlen_q}, {"seqlen_k", r.c.seqlen_k},
                            {"head_dim_qk", r.c.head_dim_qk}, {"head_dim_v", r.c.head_dim_v},
                            {"causal", r.c.causal}, {"kernel", kernel_name(r.plan.kernel)}, {"block_q", r.plan.block_q}, {"block_k", r.plan.block_k},
                            {"median_us", r.kernel.median_us}, {"min_us", r.kernel.min_us},
                            {"max_us", r.kernel.max_us}, {"tflops", flops(r.c) / r.kernel.median_us / 1e6},
                            {"verified", r.ok}, {"rel_l2_err", r.vs_gpu_ref.rel_l2_err}, {"target", r.c.target}});
    std::ofstream f(o.json_path);
    if (!f) throw Error("--json: cannot write " + o.json_path);
    f << j.dump(2) << '\n';
  }
  return all_ok ? 0 : 1;
}

}  // namespace dsa::bench
