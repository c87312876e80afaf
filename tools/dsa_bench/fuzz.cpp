#include "fuzz.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench_kernels.h"
#include "device_memory.h"
#include "fuzz_common.h"
#include "common/cuda_check.h"
#include "dsa/reference.h"
#include "dsa/sparse_mla.h"
#include "plan_label.h"
#include "sparse_mla/params.h"
#include "workload.h"

namespace dsa::bench {
namespace {

using workload::IndexPattern;
using workload::Rng;

// The cache every case reads its first rows of: 2^18 rows in four layouts, filled once.
constexpr int64_t kCacheRows = int64_t{1} << 18;
constexpr int kWideFp8RowBytes = kFp8RowBytes + 16;  // fp8_ds_mla rows at a stride past 656 bytes
constexpr int kCombinedRow = kCkvDim + kKpeDim;       // bf16 ckv|kpe rows in one buffer
// T x topk per case at most (host index generation); T x H x topk is FuzzOptions::max_work.
constexpr int64_t kMaxEntries = int64_t{1} << 25;
constexpr int64_t kMaxCpuCheck = int64_t{1} << 22;          // valid entries x H: checked in float64 too
constexpr size_t kGuardBytes = 4096;                        // checked past each output and the workspace

// The cache in four layouts on the device, and host copies for the float64 CPU reference.
struct FuzzCache {
  DevicePtr ckv, kpe, combined, fp8, fp8_wide;
  std::vector<uint16_t> host_ckv, host_kpe, host_combined;
  std::vector<uint8_t> host_fp8, host_fp8_wide;
  FuzzCache() {
    const size_t R = kCacheRows;
    ckv = device_alloc(R * kCkvDim * 2);
    kpe = device_alloc(R * kKpeDim * 2);
    combined = device_alloc(R * kCombinedRow * 2);
    fp8 = device_alloc(R * kFp8RowBytes);
    fp8_wide = device_alloc(R * kWideFp8RowBytes);
    auto* c = static_cast<uint16_t*>(ckv.get());
    auto* k = static_cast<uint16_t*>(kpe.get());
    launch_fill_normal_bf16(c, R * kCkvDim, 0.5f, 3, nullptr);
    launch_fill_normal_bf16(k, R * kKpeDim, 0.5f, 4, nullptr);
    DSA_CUDA_CHECK(cudaMemcpy2D(combined.get(), kCombinedRow * 2, c, kCkvDim * 2, kCkvDim * 2, R, cudaMemcpyDeviceToDevice));
    DSA_CUDA_CHECK(cudaMemcpy2D(static_cast<uint16_t*>(combined.get()) + kCkvDim, kCombinedRow * 2, k, kKpeDim * 2, kKpeDim * 2,
                                R, cudaMemcpyDeviceToDevice));
    launch_quantize_fp8_ds_mla(c, k, kCacheRows, static_cast<uint8_t*>(fp8.get()), nullptr);
    DSA_CUDA_CHECK(cudaMemcpy2D(fp8_wide.get(), kWideFp8RowBytes, fp8.get(), kFp8RowBytes, kFp8RowBytes, R,
                                cudaMemcpyDeviceToDevice));
    DSA_CUDA_CHECK(cudaDeviceSynchronize());
    host_ckv = host_copy(static_cast<const uint16_t*>(ckv.get()), R * kCkvDim);
    host_kpe = host_copy(static_cast<const uint16_t*>(kpe.get()), R * kKpeDim);
    host_combined = host_copy(static_cast<const uint16_t*>(combined.get()), R * kCombinedRow);
    host_fp8 = host_copy(static_cast<const uint8_t*>(fp8.get()), R * kFp8RowBytes);
    host_fp8_wide = host_copy(static_cast<const uint8_t*>(fp8_wide.get()), R * kWideFp8RowBytes);
  }
};

// Where a [T, H, D] tensor's elements lie: packed, with gaps after each head and token, or head
// major (the token stride inside the head stride). Strides stay multiples of 8 elements (16 bytes).
enum class Layout { packed, gaps, head_major };
const char* to_string(Layout l) { return l == Layout::packed ? "packed" : l == Layout::gaps ? "gaps" : "head-major"; }

struct Strides {
  int64_t token = 0, head = 0, span = 0;  // elements; span: the buffer's extent
};
Strides layout_strides(Layout l, int T, int H, int D, int pad_a, int pad_b) {
  Strides s;
  if (l == Layout::packed) s.head = D, s.token = int64_t(H) * D;
  if (l == Layout::gaps) s.head = D + 8 * pad_a, s.token = H * s.head + 8 * pad_b;
  if (l == Layout::head_major) s.token = D + 8 * pad_a, s.head = T * s.token + 8 * pad_b;
  s.span = int64_t(T - 1) * s.token + int64_t(H - 1) * s.head + D;
  return s;
}

struct FuzzCase {
  int number = 0;
  int T = 1, H = 16, topk = 1, page_size = 1, num_pages = 1;
  workload::IndexSpec spec;
  bool fp8 = false, wide_rows = false;  // wide: bf16 ckv|kpe in one buffer, fp8 rows at 672 bytes
  Layout q_layout = Layout::packed, out_layout = Layout::packed;
  int q_pad_a = 0, q_pad_b = 0, out_pad_a = 0, out_pad_b = 0, lse_pad = 0, index_pad = 0;
  bool lengths = false;               // topk_lengths, stale rows past each length
  bool schedule_from_other = false;   // a balanced plan's schedule from other indices of the shape
  IndexSharing sharing = IndexSharing::unknown;
  int min_valid = 0;                  // SparseMlaProblem::min_valid_entries (may not hold: a hint)
  float sm_scale = 0.1f, q_scale = 1.f;
  PlanChoice choice;
  std::string choice_text;  // the fields set, "planner" if none

  int64_t rows() const { return int64_t(num_pages) * page_size; }
  std::string describe() const {
    static const char* sharing_names[] = {"unknown", "consecutive", "none"};
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "case %d: T=%d H=%d topk=%d page=%d pages=%d (%lld rows) pattern=%s kv=%s%s q=%s out=%s lse+%d "
                  "indices+%d%s sharing=%s min_valid=%d sm_scale=%.4g q_scale=%g choice{%s}",
                  number, T, H, topk, page_size, num_pages, static_cast<long long>(rows()), workload::to_string(spec.pattern),
                  fp8 ? "fp8" : "bf16", wide_rows ? (fp8 ? "(672-byte rows)" : "(ckv|kpe rows)") : "", to_string(q_layout),
                  to_string(out_layout), lse_pad, index_pad, lengths ? " topk_lengths" : "", sharing_names[int(sharing)], min_valid,
                  sm_scale, q_scale, choice_text.c_str());
    return buf;
  }
};

FuzzCase draw_case(Rng& rng, int number, const FuzzOptions& o) {
  const std::string& kv = o.kv;
  FuzzCase c;
  c.number = number;
  c.H = pick(rng, {16, 16, 32, 64, 128});
  c.topk = rng.uniform() < 0.8 ? pick(rng, {1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 127, 128, 255, 256, 300, 511, 512, 513,
                                            1000, 1023, 1024, 1025, 2047, 2048, 2048, 2048, 2049, 3000, 4096})
                               : 1 + int(rng.below(2048));
  const int64_t max_t = std::min(o.max_work / (int64_t(c.H) * c.topk), kMaxEntries / c.topk);
  c.T = log_uniform(rng, 1, int(std::clamp<int64_t>(max_t, 1, o.max_tokens)));
  c.page_size = rng.uniform() < 0.7 ? pick(rng, {1, 16, 64, 64, 64, 128}) : 1 + int(rng.below(300));
  const int64_t want_rows = pick<int64_t>(rng, {std::max(1, c.topk / 2), 2 * int64_t(c.topk), 8192, 50000, kCacheRows});
  c.num_pages = int(std::clamp<int64_t>(want_rows / c.page_size, 1, kCacheRows / c.page_size));
  auto& s = c.spec;
  s.pattern = pick(rng, {IndexPattern::random, IndexPattern::random, IndexPattern::runs, IndexPattern::shared_prefix,
                         IndexPattern::shared_prefix, IndexPattern::all_padding, IndexPattern::single_valid,
                         IndexPattern::padding_middle, IndexPattern::duplicates, IndexPattern::out_of_range, IndexPattern::sequences});
  s.num_tokens = c.T;
  s.topk = c.topk;
  s.page_size = c.page_size;
  s.num_pages = c.num_pages;
  if ((s.pattern == IndexPattern::random || s.pattern == IndexPattern::runs) && rng.uniform() < 0.4)
    for (int i = 0, n = 1 + int(rng.below(8)); i < n; ++i) s.valid_counts.push_back(int(rng.below(c.topk + 1)));
  s.prefix_len = 1 + int(rng.below(uint64_t(c.rows())));
  s.tokens_per_sequence = 1 + int(rng.below(8));
  c.fp8 = kv == "fp8" || (kv == "both" && rng.uniform() < 0.4);
  c.wide_rows = rng.uniform() < 0.3;
  c.q_layout = pick(rng, {Layout::packed, Layout::packed, Layout::gaps, Layout::head_major});
  c.out_layout = pick(rng, {Layout::packed, Layout::packed, Layout::gaps, Layout::head_major});
  c.q_pad_a = int(rng.below(3)), c.q_pad_b = int(rng.below(3));
  c.out_pad_a = int(rng.below(3)), c.out_pad_b = int(rng.below(3));
  c.lse_pad = rng.uniform() < 0.3 ? 1 + int(rng.below(7)) : 0;
  c.index_pad = rng.uniform() < 0.3 ? 1 + int(rng.below(40)) : 0;
  c.lengths = rng.uniform() < 0.25;
  c.sharing = pick(rng, {IndexSharing::unknown, IndexSharing::unknown, IndexSharing::consecutive, IndexSharing::none});
  // |sm_scale| in [0.02, 0.2], negative 20 % of the time; 0 (equal logits: lse = log2 of the
  // valid count) 5 % of the time.
  c.sm_scale = float(std::exp(std::log(0.02) + rng.uniform() * std::log(10.0))) * (rng.uniform() < 0.2 ? -1.f : 1.f);
  if (rng.uniform() < 0.05) c.sm_scale = 0.f;
  c.q_scale = pick(rng, {0.5f, 1.f, 2.f});
  c.choice_text = "planner";
  if (rng.uniform() < 0.5) {
    std::string t;
    const auto add = [&](const std::string& s) { t += (t.empty() ? "" : " ") + s; };
    PlanChoice& ch = c.choice;
    if (rng.uniform() < 0.5) {
      const bool shared = rng.uniform() < 0.4;
      ch.kernel = shared ? PlanChoice::Kernel::shared_rows : PlanChoice::Kernel::split_k;
      add(shared ? "kernel=shared_rows" : "kernel=split_k");
    }
    if (rng.uniform() < 0.25) ch.block_keys = pick(rng, {16, 32, 64}), add("block_keys=" + std::to_string(ch.block_keys));
    if (rng.uniform() < 0.3) ch.splits = log_uniform(rng, 1, std::min(64, c.topk)), add("splits=" + std::to_string(ch.splits));
    if (rng.uniform() < 0.15)
      ch.fused_rows = pick(rng, {-1, 1 + int(rng.below(64)), 2048}), add("fused_rows=" + std::to_string(ch.fused_rows));
    if (rng.uniform() < 0.2) ch.row_order = pick(rng, {-1, 1}), add("row_order=" + std::to_string(ch.row_order));
    if (rng.uniform() < 0.15) ch.split_softmax = pick(rng, {-1, 1}), add("split_softmax=" + std::to_string(ch.split_softmax));
    if (rng.uniform() < 0.1) {
      ch.balanced = 1;
      c.schedule_from_other = rng.uniform() < 0.5;
      add(c.schedule_from_other ? "balanced (schedule from other indices)" : "balanced");
    }
    if (!t.empty()) c.choice_text = t;
  }
  // Every 16th case an unhinted 16-head call of lists of >= 512 from T = 2048 (fp8 8192, past
  // the default --max-tokens), the planner's share-probe plans (SparseMlaPlan::share_probe),
  // which the draws above reach rarely: its drawn format, pattern, layouts and lengths kept, the
  // shape redrawn last (the other cases' draws unchanged).
  if (number % 16 == 7) {
    const int topk = pick(rng, {512, 700, 1024, 2048});
    const int64_t max_t = std::min<int64_t>({o.max_work / (16 * int64_t{topk}), kMaxEntries / topk, o.max_tokens});
    // T where 4-token groups fill >= 90 % of whole waves on 132 SMs, as the planner wants.
    const std::vector<int> tokens = c.fp8 ? std::vector<int>{8192, 8360, 8448} : std::vector<int>{2048, 2090, 2112, 4096, 4180, 4224};
    const int fit = int(std::count_if(tokens.begin(), tokens.end(), [&](int t) { return t <= max_t; }));
    if (fit > 0) {
      c.H = 16, c.topk = topk, c.T = tokens[rng.below(uint64_t(fit))];
      s.num_tokens = c.T, s.topk = c.topk;
      for (int& v : s.valid_counts) v = std::min(v, c.topk);
      c.sharing = IndexSharing::unknown;
      c.choice = PlanChoice{};
      c.schedule_from_other = false;
      c.choice_text = "planner (share probe)";
    }
  }
  // A quarter of the cases pass the min_valid_entries hint: topk (full lists, which the drawn
  // pattern may not have) or a smaller count. Drawn from the case number, not the shared stream,
  // so every other draw of every case is what it was before the hint existed.
  Rng hint_rng(0x9e3779b97f4a7c15ull * uint64_t(number + 1));
  if (hint_rng.uniform() < 0.25) c.min_valid = hint_rng.uniform() < 0.6 ? c.topk : 1 + int(hint_rng.below(uint64_t(c.topk)));
  return c;
}

// The case's plan: its choice's, or the planner's where the planner refuses the choice.
SparseMlaPlan plan_case(const FuzzCase& c, const DeviceInfo& dev, bool& refused, std::map<std::string, int>& refusals) {
  const KvCacheFormat format = c.fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16;
  return plan_with_choice(
      [&](bool with_choice) { return plan_sparse_mla(c.T, c.H, c.topk, dev, with_choice ? c.choice : PlanChoice{}, c.sharing, format, c.min_valid); },
      refused, refusals);
}

FuzzOutcome run_case(const FuzzCase& c, const FuzzCache& cache, Rng& rng, std::map<std::string, int>& refusals) {
  FuzzOutcome res;
  const int T = c.T, H = c.H, topk = c.topk;
  const cudaStream_t stream = nullptr;
  // Indices [T, topk] at a stride of topk + index_pad, the gap holding rows that must not be read;
  // with topk_lengths each list's entries past its length hold rows too (stale entries).
  const std::vector<int32_t> lists = workload::make_indices(c.spec, rng.next());
  const int64_t idx_stride = topk + c.index_pad;
  std::vector<int32_t> idx(size_t(T) * idx_stride);
  std::vector<int32_t> lengths(size_t(T), topk);
  const auto stale_row = [&] { return int32_t(rng.below(uint64_t(c.rows()))); };
  for (int t = 0; t < T; ++t) {
    if (c.lengths) lengths[size_t(t)] = rng.uniform() < 0.2 ? topk : int(rng.below(uint64_t(topk) + 4)) - 2;  // [-2, topk + 1]
    for (int k = 0; k < idx_stride; ++k)
      idx[size_t(t) * idx_stride + k] = k < topk && k < std::max(lengths[size_t(t)], 0) ? lists[size_t(t) * topk + k] : stale_row();
  }
  const Strides qn = layout_strides(c.q_layout, T, H, kCkvDim, c.q_pad_a, c.q_pad_b);
  const Strides qp = layout_strides(c.q_layout, T, H, kKpeDim, c.q_pad_a, c.q_pad_b);
  const Strides os = layout_strides(c.out_layout, T, H, kCkvDim, c.out_pad_a, c.out_pad_b);
  const int64_t lse_stride = H + c.lse_pad;
  const size_t out_n = size_t(os.span) + kGuardBytes / 2, lse_n = size_t(int64_t(T - 1) * lse_stride + H) + kGuardBytes / 4;

  DevicePtr d_qn = device_alloc(size_t(qn.span) * 2), d_qp = device_alloc(size_t(qp.span) * 2);
  launch_fill_normal_bf16(static_cast<uint16_t*>(d_qn.get()), size_t(qn.span), c.q_scale, rng.next(), stream);
  launch_fill_normal_bf16(static_cast<uint16_t*>(d_qp.get()), size_t(qp.span), c.q_scale, rng.next(), stream);
  DevicePtr d_idx(device_copy(idx)), d_len(device_copy(lengths));
  DevicePtr d_out = device_alloc(out_n * 2), d_lse = device_alloc(lse_n * 4);
  DevicePtr d_ref_out = device_alloc(size_t(T) * H * kCkvDim * 2), d_ref_lse = device_alloc(size_t(T) * H * 4);

  SparseMlaProblem p;
  p.num_tokens = T, p.num_heads = H, p.topk = topk, p.page_size = c.page_size, p.num_pages = c.num_pages;
  p.sm_scale = c.sm_scale;
  p.q_nope = d_qn.get(), p.q_pe = d_qp.get();
  if (c.q_layout != Layout::packed) {  // packed: the zero strides' defaults
    p.q_nope_token_stride = qn.token, p.q_nope_head_stride = qn.head;
    p.q_pe_token_stride = qp.token, p.q_pe_head_stride = qp.head;
  }
  const void* host_ckv = nullptr;  // the same layout's host copy (the CPU reference's)
  const void* host_kpe = nullptr;
  if (c.fp8) {
    p.kv_format = KvCacheFormat::fp8_ds_mla;
    p.ckv_cache = c.wide_rows ? cache.fp8_wide.get() : cache.fp8.get();
    host_ckv = c.wide_rows ? cache.host_fp8_wide.data() : cache.host_fp8.data();
    p.ckv_row_stride = c.wide_rows ? kWideFp8RowBytes : 0;
  } else if (c.wide_rows) {
    p.ckv_cache = cache.combined.get();
    p.kpe_cache = static_cast<const uint16_t*>(cache.combined.get()) + kCkvDim;
    host_ckv = cache.host_combined.data(), host_kpe = cache.host_combined.data() + kCkvDim;
    p.ckv_row_stride = p.kpe_row_stride = kCombinedRow;
  } else {
    p.ckv_cache = cache.ckv.get(), p.kpe_cache = cache.kpe.get();
    host_ckv = cache.host_ckv.data(), host_kpe = cache.host_kpe.data();
  }
  p.indices = static_cast<const int32_t*>(d_idx.get());
  p.indices_token_stride = c.index_pad > 0 ? idx_stride : 0;
  p.topk_lengths = c.lengths ? static_cast<const int32_t*>(d_len.get()) : nullptr;
  p.out = d_out.get();
  if (c.out_layout != Layout::packed) p.out_token_stride = os.token, p.out_head_stride = os.head;
  p.lse = static_cast<float*>(d_lse.get());
  p.lse_token_stride = c.lse_pad > 0 ? lse_stride : 0;
  p.index_sharing = c.sharing;
  p.min_valid_entries = c.min_valid;
  validate(p);  // a case the fuzzer draws is valid; an error here is the fuzzer's own bug

  const SparseMlaPlan plan = plan_case(c, DeviceInfo::from_device(0), res.refused_choice, refusals);
  res.plan = plan_label(plan);
  DevicePtr d_sched, d_other_idx;
  if (plan.balanced) {  // the schedule, from these indices or from another draw of the same shape
    d_sched = device_alloc(plan.schedule_bytes);
    SparseMlaProblem from = p;
    if (c.schedule_from_other) {
      workload::IndexSpec other = c.spec;
      other.pattern = IndexPattern::random;
      other.valid_counts = {int(rng.below(uint64_t(topk) + 1))};
      d_other_idx.reset(device_copy(workload::make_indices(other, rng.next())));
      from.indices = static_cast<const int32_t*>(d_other_idx.get());
      from.indices_token_stride = 0;
    }
    make_sparse_mla_schedule(from, plan, d_sched.get(), plan.schedule_bytes, stream);
    p.schedule = d_sched.get();
    p.schedule_bytes = plan.schedule_bytes;
  }
  // The workspace and both outputs poisoned, with guard bytes past each.
  DevicePtr d_ws = device_alloc(plan.workspace_bytes + kGuardBytes);
  DSA_CUDA_CHECK(cudaMemset(d_ws.get(), 0xff, plan.workspace_bytes + kGuardBytes));
  const auto poison_outputs = [&] {
    DSA_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, out_n * 2));
    DSA_CUDA_CHECK(cudaMemset(d_lse.get(), 0xff, lse_n * 4));
  };
  poison_outputs();
  res.detail = first_call([&] { sparse_mla_forward(p, plan, d_ws.get(), plan.workspace_bytes, stream); });
  if (!res.detail.empty()) return res;
  const auto out1 = host_copy(static_cast<const uint16_t*>(d_out.get()), out_n);
  const auto lse1 = host_copy(static_cast<const uint32_t*>(d_lse.get()), lse_n);
  const auto ws_guard = host_copy<uint8_t>(static_cast<uint8_t*>(d_ws.get()) + plan.workspace_bytes, kGuardBytes);

  SparseMlaProblem ref = p;
  ref.out = d_ref_out.get(), ref.lse = static_cast<float*>(d_ref_lse.get());
  ref.out_token_stride = ref.out_head_stride = ref.lse_token_stride = 0;
  ref.schedule = nullptr, ref.schedule_bytes = 0;
  sparse_mla_reference_gpu(ref, stream);
  // The second call, captured in a CUDA graph and replayed: outputs poisoned again, the
  // workspace as the first call left it; every bit must match the first call's.
  poison_outputs();
  const std::string graph_error = replay_in_graph([&](cudaStream_t s) { sparse_mla_forward(p, plan, d_ws.get(), plan.workspace_bytes, s); });
  const bool same = graph_error.empty() && host_copy(static_cast<const uint16_t*>(d_out.get()), out_n) == out1 &&
                    host_copy(static_cast<const uint32_t*>(d_lse.get()), lse_n) == lse1;

  const auto ro = host_copy(static_cast<const uint16_t*>(d_ref_out.get()), size_t(T) * H * kCkvDim);
  const auto rl = host_copy(static_cast<const float*>(d_ref_lse.get()), size_t(T) * H);
  std::vector<uint16_t> out(ro.size());
  std::vector<float> lse(rl.size());
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      std::copy_n(out1.begin() + t * os.token + h * os.head, kCkvDim, out.begin() + (size_t(t) * H + h) * kCkvDim);
      std::memcpy(&lse[size_t(t) * H + h], &lse1[size_t(t * lse_stride + h)], 4);
    }
  std::vector<double> ro_d(ro.size()), rl_d(rl.begin(), rl.end());
  for (size_t i = 0; i < ro.size(); ++i) ro_d[i] = bf16_to_float(ro[i]);
  const Agreement a = compare_to_reference(out.data(), lse.data(), ro_d.data(), rl_d.data(), T, H);
  const int64_t stray_out = count_stray_writes<uint16_t>(out1, kPoison16, kCkvDim, {{T, os.token}, {H, os.head}});
  const int64_t stray_lse = count_stray_writes<uint32_t>(lse1, kPoison32, 1, {{T, lse_stride}, {H, 1}});
  const int64_t stray_ws = std::count_if(ws_guard.begin(), ws_guard.end(), [](uint8_t b) { return b != 0xff; });

  // count_invalid_indices over the same lists (all topk entries, the stride's gap excluded),
  // on the device and on the host.
  DevicePtr d_count(device_copy(std::vector<long long>{0}));
  count_invalid_indices(p.indices, T, topk, idx_stride, c.rows(), static_cast<long long*>(d_count.get()), stream);
  const long long invalid_device = host_copy(static_cast<const long long*>(d_count.get()), 1)[0];
  const int64_t invalid_host = count_invalid_indices_host(idx.data(), T, topk, idx_stride, c.rows());

  // The float64 CPU reference too where it is quick: code that shares nothing with the kernels'
  // launch path, which the GPU reference's parameters come through.
  int64_t valid = 0;
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < std::min(topk, std::max(lengths[size_t(t)], 0)); ++k)
      valid += detail::names_a_row(idx[size_t(t) * idx_stride + k], int(c.rows())) ? 1 : 0;
  Agreement cpu;
  const bool cpu_checked = valid * H <= kMaxCpuCheck;
  if (cpu_checked) {
    const auto q_nope = host_copy(static_cast<const uint16_t*>(d_qn.get()), size_t(qn.span));
    const auto q_pe = host_copy(static_cast<const uint16_t*>(d_qp.get()), size_t(qp.span));
    SparseMlaProblem hp = p;
    hp.q_nope = q_nope.data(), hp.q_pe = q_pe.data();
    hp.ckv_cache = host_ckv, hp.kpe_cache = host_kpe;
    hp.schedule = nullptr, hp.schedule_bytes = 0;
    hp.indices = idx.data();
    hp.topk_lengths = c.lengths ? lengths.data() : nullptr;
    std::vector<uint16_t> dummy_out(16);
    std::vector<float> dummy_lse(4);
    hp.out = dummy_out.data(), hp.lse = dummy_lse.data();  // the reference writes out_ref and lse_ref only
    hp.out_token_stride = hp.out_head_stride = hp.lse_token_stride = 0;
    std::vector<double> cpu_out(ro.size()), cpu_lse(rl.size());
    sparse_mla_reference_cpu(hp, cpu_out.data(), cpu_lse.data());
    cpu = compare_to_reference(out.data(), lse.data(), cpu_out.data(), cpu_lse.data(), T, H);
  }

  res.ok = a.ok() && (!cpu_checked || cpu.ok()) && stray_out == 0 && stray_lse == 0 && stray_ws == 0 && same &&
           invalid_device == invalid_host;
  res.detail = "vs GPU reference " + a.summary() + (cpu_checked ? "; vs CPU reference " + cpu.summary() : "");
  if (stray_out || stray_lse || stray_ws)
    res.detail += "; written outside: out " + std::to_string(stray_out) + ", lse " + std::to_string(stray_lse) +
                  ", past the workspace " + std::to_string(stray_ws) + " bytes";
  if (invalid_device != invalid_host)
    res.detail += "; count_invalid_indices " + std::to_string(invalid_device) + " on the device, " + std::to_string(invalid_host) +
                  " on the host";
  if (!graph_error.empty()) res.detail += "; " + graph_error;
  else if (!same) res.detail += "; the graph's replay differed from the first call";
  return res;
}

// --list: the cases and their plans on a described H100, no device needed.
int list_cases(const FuzzOptions& o, uint64_t seed) {
  const DeviceInfo h100{132, 232448, 9, 0};
  std::map<std::string, int> refusals;
  for (int n = o.first; n < o.first + o.cases; ++n) {
    Rng rng(case_seed(seed, n));
    const FuzzCase c = draw_case(rng, n, o);
    bool refused = false;
    const SparseMlaPlan plan = plan_case(c, h100, refused, refusals);
    std::printf("%s\n  plan %s (H100)%s\n", c.describe().c_str(), plan_label(plan).c_str(), refused ? ", the choice refused" : "");
  }
  for (const auto& [why, count] : refusals) std::printf("refused %dx: %s\n", count, why.c_str());
  return 0;
}

}  // namespace

int run_fuzz(const FuzzOptions& o) {
  if (o.list) {
    if (o.seed == 0) throw Error("fuzz --list: needs --seed");
    return o.dense ? run_dense_fuzz(o, o.seed) : list_cases(o, o.seed);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("dsa-bench fuzz: no CUDA device; skipped\n");
    return 77;
  }
  const uint64_t seed = o.seed != 0 ? o.seed : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  cudaDeviceProp prop{};
  DSA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("dsa-bench fuzz%s: device %s, seed %llu, cases %d-%d%s\n", o.dense ? " --dense" : "", prop.name,
              static_cast<unsigned long long>(seed), o.first, o.first + o.cases - 1, o.dense ? "" : (", kv " + o.kv).c_str());
  std::fflush(stdout);
  if (o.dense) return run_dense_fuzz(o, seed);
  const FuzzCache cache;
  std::map<std::string, int> refusals;
  return run_fuzz_cases(
      o.first, o.cases, seed, o.verbose, "dsa-bench fuzz", "fuzz --kv " + o.kv, refusals,
      [&](Rng& rng, int n) { return draw_case(rng, n, o); },
      [&](const FuzzCase& c, Rng& rng) { return run_case(c, cache, rng, refusals); });
}

}  // namespace dsa::bench
