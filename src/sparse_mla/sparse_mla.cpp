// Host side of the sparse MLA API: argument validation, the device query and the launch glue.
// The planner is planner.cpp; what both need is host_shared.h.
#include "dsa/sparse_mla.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>

#include <cuda_runtime_api.h>

#include "common/arg_checks.h"
#include "common/cuda_check.h"
#include "sparse_mla/host_shared.h"
#include "sparse_mla/params.h"

namespace dsa {
namespace {

using detail::ceil_div;
using detail::fail;
using detail::or_default;
using detail::require_disjoint;
using detail::require_pointer;
using detail::require_vector_stride;
using detail::balanced_workspace_for;
using detail::kPartialBytes;
using detail::partial_slots;
using detail::shared_rows_union_bytes;
using detail::shared_rows_workspace_for;
using detail::splitk_lead_chunk;
using detail::validate_format;
using detail::validate_index_shape;
using detail::validate_min_valid_entries;
using detail::validate_shape;
using detail::validate_sharing;
using detail::workspace_for;

// A balanced plan's split slots per head group.
int balanced_slots(const SparseMlaPlan& plan) { return plan.ctas / (plan.num_heads / kHeadGroup); }
// A balanced plan's tile size and splits, the schedule's pointers (params.h, schedule_layout) and
// the partials by slot.
void set_balanced(detail::SparseMlaParams& p, const SparseMlaPlan& plan, void* workspace, const void* schedule) {
  p.block_keys = plan.block_keys;
  p.splits = plan.splits;
  p.chunk = plan.chunk;
  p.balanced_slots = balanced_slots(plan);
  const detail::ScheduleLayout l = detail::schedule_layout(p.num_tokens, p.balanced_slots);
  uint8_t* base = static_cast<uint8_t*>(const_cast<void*>(schedule));  // the forward only reads it
  p.schedule = reinterpret_cast<int4*>(base);
  p.token_splits = reinterpret_cast<int2*>(base + l.token_splits);
  p.token_rows = reinterpret_cast<int*>(base + l.token_rows);
  if (workspace != nullptr) {
    p.partial_out = static_cast<uint16_t*>(workspace);
    p.partial_lse = reinterpret_cast<float*>(p.partial_out + static_cast<size_t>(p.balanced_slots) * p.num_heads * kCkvDim);
  }
}

// Points p's partials into a workspace that holds them from byte `offset` on.
void set_partials(detail::SparseMlaParams& p, void* workspace, size_t offset) {
  if (p.splits <= 1) return;
  p.partial_out = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(workspace) + offset);
  p.partial_lse = reinterpret_cast<float*>(p.partial_out + partial_slots(p.num_tokens, p.num_heads, p.splits, p.lead_tokens, p.lead_splits) * kCkvDim);
}

struct ResolvedStrides {
  int64_t qn_t, qn_h, qp_t, qp_h, ckv, kpe, idx, out_t, out_h, lse_t;
};

bool fp8_cache(const SparseMlaProblem& p) { return p.kv_format == KvCacheFormat::fp8_ds_mla; }

ResolvedStrides resolve(const SparseMlaProblem& p) {
  const int64_t H = p.num_heads;
  const bool fp8 = fp8_cache(p);  // one row of kFp8RowBytes bytes, no kpe cache
  return {or_default(p.q_nope_token_stride, H * kCkvDim), or_default(p.q_nope_head_stride, kCkvDim),
          or_default(p.q_pe_token_stride, H * kKpeDim),   or_default(p.q_pe_head_stride, kKpeDim),
          or_default(p.ckv_row_stride, fp8 ? kFp8RowBytes : kCkvDim), fp8 ? 0 : or_default(p.kpe_row_stride, kKpeDim),
          or_default(p.indices_token_stride, p.topk),     or_default(p.out_token_stride, H * kCkvDim),
          or_default(p.out_head_stride, kCkvDim),         or_default(p.lse_token_stride, H)};
}

// Why the shared-rows kernel cannot take this problem's cache, or "" when it can: its limits
// that depend on the cache, not the shape (the planner and the forward both ask).
std::string shared_rows_cache_limit(const SparseMlaProblem& p) {
  if (static_cast<int64_t>(p.num_pages) * p.page_size >= detail::kSharedRowsMaxRows)
    return "shared_rows needs num_pages * page_size < 2^28; use the split_k kernel";
  const ResolvedStrides s = resolve(p);
  if (s.ckv >= detail::kSharedRowsMaxRowStride || s.kpe >= detail::kSharedRowsMaxRowStride)
    return "shared_rows needs ckv and kpe row strides < 2^31 elements; use the split_k kernel";
  return {};
}

detail::SparseMlaParams make_params(const SparseMlaProblem& p) {
  const ResolvedStrides s = resolve(p);
  detail::SparseMlaParams k{};
  k.lead_splits = 1;
  k.q_nope = static_cast<const uint16_t*>(p.q_nope);
  k.q_pe = static_cast<const uint16_t*>(p.q_pe);
  k.ckv = static_cast<const uint16_t*>(p.ckv_cache);
  k.kpe = static_cast<const uint16_t*>(p.kpe_cache);
  k.indices = p.indices;
  k.topk_lengths = p.topk_lengths;
  k.out = static_cast<uint16_t*>(p.out);
  k.lse = p.lse;
  k.q_nope_token_stride = s.qn_t; k.q_nope_head_stride = s.qn_h;
  k.q_pe_token_stride = s.qp_t;   k.q_pe_head_stride = s.qp_h;
  k.ckv_row_stride = s.ckv;       k.kpe_row_stride = s.kpe;
  k.kv_fp8 = fp8_cache(p);
  k.indices_token_stride = s.idx;
  k.out_token_stride = s.out_t;   k.out_head_stride = s.out_h;
  k.lse_token_stride = s.lse_t;
  k.num_tokens = p.num_tokens; k.num_heads = p.num_heads; k.topk = p.topk;
  k.num_rows = static_cast<int>(static_cast<int64_t>(p.num_pages) * p.page_size);
  k.sm_scale = p.sm_scale;
  k.scale_log2 = static_cast<float>(p.sm_scale * 1.4426950408889634);
  return k;
}

}  // namespace

static DeviceInfo query_device(int device) {
  DeviceInfo d;
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&d.max_smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
  int memory_clock_khz = 0, bus_bits = 0;  // 0 where the device does not say: planned as an H100
  if (cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess)
    cudaGetLastError(), memory_clock_khz = bus_bits = 0;  // the failed query's error cleared
  d.memory_bandwidth_gbs = static_cast<int>(int64_t{2} * memory_clock_khz * bus_bits / 8 / 1000000);
  return d;
}

// Attribute queries cost microseconds and a device's answers never change: one cache serves the
// library's planner, the PyTorch op and C++ callers, however often they ask.
DeviceInfo DeviceInfo::from_device(int device) {
  constexpr int kCached = 64;
  if (device < 0 || device >= kCached) return query_device(device);
  static std::mutex mu;
  static DeviceInfo cache[kCached];
  std::lock_guard<std::mutex> lock(mu);
  if (cache[device].sm_count == 0) cache[device] = query_device(device);
  return cache[device];
}

// What reading the index lists needs: the shape, the cache's row count, the indices and their
// stride (make_sparse_mla_schedule reads no more; validate checks the rest).
static void validate_indices(const SparseMlaProblem& p) {
  validate_shape(p.num_tokens, p.num_heads, p.topk);
  if (p.page_size < 1) fail("page_size", "must be >= 1, got " + std::to_string(p.page_size));
  if (p.num_pages < 1) fail("num_pages", "must be >= 1, got " + std::to_string(p.num_pages));
  if (static_cast<int64_t>(p.num_pages) * p.page_size > std::numeric_limits<int32_t>::max())
    fail("num_pages", "num_pages * page_size must fit int32 indices");
  require_pointer(p.indices, "indices", 4);
  const int64_t idx_stride = resolve(p).idx;
  if (idx_stride < p.topk) fail("indices_token_stride", "must be >= topk, got " + std::to_string(idx_stride));
  if (p.topk_lengths != nullptr) require_pointer(p.topk_lengths, "topk_lengths", 4);  // optional
}

void validate(const SparseMlaProblem& p) {
  validate_indices(p);
  validate_sharing(p.index_sharing);
  validate_min_valid_entries(p.min_valid_entries, p.topk);
  if (!std::isfinite(p.sm_scale)) fail("sm_scale", "must be finite");
  require_pointer(p.q_nope, "q_nope", 16);
  require_pointer(p.q_pe, "q_pe", 16);
  validate_format(p.kv_format);
  require_pointer(p.ckv_cache, "ckv_cache", 16);
  if (fp8_cache(p)) {
    if (p.kpe_cache != nullptr) fail("kpe_cache", "must be null for fp8_ds_mla (the kpe values are inside each 656-byte row)");
    if (p.kpe_row_stride != 0) fail("kpe_row_stride", "must be 0 for fp8_ds_mla (no kpe cache)");
  } else {
    require_pointer(p.kpe_cache, "kpe_cache", 16);
  }
  require_pointer(p.out, "out", 16);
  require_pointer(p.lse, "lse", 4);
  const ResolvedStrides s = resolve(p);
  require_vector_stride(s.qn_t, "q_nope_token_stride");
  require_vector_stride(s.qn_h, "q_nope_head_stride");
  require_vector_stride(s.qp_t, "q_pe_token_stride");
  require_vector_stride(s.qp_h, "q_pe_head_stride");
  if (fp8_cache(p)) {  // bytes
    if (s.ckv < kFp8RowBytes || s.ckv % 16 != 0)
      fail("ckv_row_stride", "must be a multiple of 16 bytes >= 656 for fp8_ds_mla, got " + std::to_string(s.ckv));
  } else {
    require_vector_stride(s.ckv, "ckv_row_stride");
    require_vector_stride(s.kpe, "kpe_row_stride");
    if (s.ckv < kCkvDim) fail("ckv_row_stride", "must be >= 512, got " + std::to_string(s.ckv));
    if (s.kpe < kKpeDim) fail("kpe_row_stride", "must be >= 64, got " + std::to_string(s.kpe));
  }
  require_vector_stride(s.out_t, "out_token_stride");
  require_vector_stride(s.out_h, "out_head_stride");
  require_disjoint("out", kCkvDim, {{s.out_t, p.num_tokens}, {s.out_h, p.num_heads}});
  require_disjoint("lse", 1, {{s.lse_t, p.num_tokens}, {1, p.num_heads}});
}

// The caller's workspace for a plan that needs `need` bytes: at least that many, 16-byte aligned.
static void require_workspace(const void* workspace, size_t workspace_bytes, size_t need) {
  if (workspace_bytes < need) fail("workspace_bytes", "is " + std::to_string(workspace_bytes) + ", plan needs " + std::to_string(need));
  if (need > 0) require_pointer(workspace, "workspace", 16);
}

// A plan's fused_rows, checked by the forward: in range, and only where its kernel can fuse.
static void check_plan_fused_rows(const SparseMlaPlan& plan, bool fusable) {
  if (plan.fused_rows < 0 || plan.fused_rows > SparseMlaPlan::kMaxChunk || (plan.fused_rows > 0 && !fusable))
    fail("plan", "inconsistent fused_rows");
}

// A plan's lead tokens (SparseMlaPlan::lead_tokens), checked by the forward: none, or fewer than
// its tokens in a plan with splits, lead_splits in [1, kTailMaxSplits]: shared_rows without a
// union pass; split_k not balanced, with lists a lead CTA can hold (topk <= kMaxChunk) and
// lead_splits of whole tiles, none empty, starting on kFusedChunkAlign boundaries with fused rows.
static void check_plan_lead_tokens(const SparseMlaPlan& plan) {
  if (plan.lead_tokens == 0) return;
  const auto lead_splits_fit = [&] {
    const int chunk = splitk_lead_chunk(plan);
    return plan.lead_splits == 1 || (int64_t{chunk} * (plan.lead_splits - 1) < plan.topk &&
                                     (plan.fused_rows == 0 || chunk % detail::kFusedChunkAlign == 0));
  };
  const bool kernel_takes_them = plan.kernel == SparseMlaKernel::shared_rows
                                     ? !plan.union_pass
                                     : !plan.balanced && plan.topk <= SparseMlaPlan::kMaxChunk && lead_splits_fit();
  if (plan.lead_tokens < 0 || plan.lead_tokens >= plan.num_tokens || plan.splits < 2 || plan.lead_splits < 1 ||
      plan.lead_splits > detail::kTailMaxSplits || !kernel_takes_them)
    fail("plan", "inconsistent lead_tokens / lead_splits");
}

// The kernels' sort keys for a plan with row order (make_params leaves them 0: off).
static void set_row_order(detail::SparseMlaParams& k, const SparseMlaPlan& plan) {
  if (!plan.row_order) return;
  const detail::RowOrderKeyBits b = detail::row_order_key_bits(k.num_rows);
  k.row_order_shift = b.shift;
  k.row_order_bits = b.bits;
}

// A share-probe plan (SparseMlaPlan::share_probe) as the planner makes them: the shared-rows
// half (checked by the caller) with a union pass and one split, no lead tokens, at 16 heads, and
// a split_k half in the tiles split-K has instances for (bf16 32 rows, fp8 32 or 64), run as one
// split of the whole list.
static void check_share_probe_plan(const SparseMlaProblem& problem, const SparseMlaPlan& plan, const long long* timeline) {
  const SparseMlaPlan::ShareProbe& sp = plan.share_probe;
  if (sp.line_permille < 1 || sp.line_permille > 1000) fail("plan", "share_probe.line_permille must be in [1, 1000] (0: off)");
  if (plan.num_heads != 16 || !plan.union_pass || plan.splits != 1 || plan.lead_tokens != 0)
    fail("plan", "share_probe needs 16 heads and shared rows with a union pass in one split");
  if (!detail::share_probe_split_k_tiles_fit(sp.split_k_block_keys, fp8_cache(problem)))
    fail("plan", fp8_cache(problem) ? "share_probe.split_k_block_keys must be 32 or 64 over an fp8 cache (its kernel instances')"
                                    : "share_probe.split_k_block_keys must be " + std::to_string(detail::kPlannerBlockKeys) +
                                          " over a bf16 cache (its kernel instances')");
  if (timeline != nullptr) fail("plan", "a timeline needs one kernel: force it (PlanChoice::kernel) instead of share_probe");
}

// A split_k plan's tiles, splits, lead tokens, fused rows, row order and softmax in k (its
// partials and timeline are the caller's).
static void set_split_k(detail::SparseMlaParams& k, const SparseMlaPlan& plan) {
  k.block_keys = plan.block_keys;
  k.splits = plan.splits;
  k.chunk = plan.chunk;
  k.lead_tokens = plan.lead_tokens;
  k.lead_splits = plan.lead_splits;
  k.lead_chunk = splitk_lead_chunk(plan);
  k.fused_rows = plan.fused_rows;
  set_row_order(k, plan);
  k.split_softmax = plan.split_softmax;
  k.early_issue = plan.early_issue;
}

// The split_k half of a share-probe plan, as a plan: one split of the whole list, with the
// half's tiles, row order and softmax.
static SparseMlaPlan share_probe_split_k_plan(const SparseMlaPlan& plan) {
  SparseMlaPlan half;
  half.num_tokens = plan.num_tokens, half.num_heads = plan.num_heads, half.topk = plan.topk;
  half.kernel = SparseMlaKernel::split_k;
  half.block_keys = plan.share_probe.split_k_block_keys;
  half.splits = 1;
  half.chunk = plan.topk;
  half.row_order = plan.share_probe.split_k_row_order;
  half.split_softmax = plan.share_probe.split_k_split_softmax;
  return half;
}

SparseMlaPlan plan_sparse_mla(const SparseMlaProblem& problem) {
  validate(problem);
  int device = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceInfo dev = DeviceInfo::from_device(device);
  // Outside the shared-rows kernel's cache limits the planner keeps split-K.
  PlanChoice choice;
  if (!shared_rows_cache_limit(problem).empty()) choice.kernel = PlanChoice::Kernel::split_k;
  return plan_sparse_mla(problem.num_tokens, problem.num_heads, problem.topk, dev, choice, problem.index_sharing, problem.kv_format,
                         problem.min_valid_entries);
}

// A balanced plan as plan_balanced makes them (a plan is a plain struct: the caller may have edited it).
static void check_balanced_plan(const SparseMlaPlan& plan) {
  const int head_groups = plan.num_heads / kHeadGroup;
  if (plan.kernel != SparseMlaKernel::split_k || plan.block_keys != detail::kPlannerBlockKeys || plan.chunk != plan.block_keys ||
      plan.splits != ceil_div(plan.topk, plan.block_keys) || plan.splits < 2 || plan.topk > SparseMlaPlan::kMaxChunk ||
      plan.row_order || plan.fused_rows != 0 || plan.num_tokens > SparseMlaPlan::kBalancedMaxTokens ||
      plan.ctas % head_groups != 0 || plan.ctas / head_groups < plan.num_tokens ||
      (plan.num_tokens > 0 && plan.schedule_bytes != detail::schedule_layout(plan.num_tokens, plan.ctas / head_groups).bytes))
    fail("plan", "inconsistent balanced schedule");
}

// The plan was made for the problem's shape.
static void check_plan_shape(const SparseMlaProblem& problem, const SparseMlaPlan& plan) {
  if (plan.num_tokens != problem.num_tokens || plan.num_heads != problem.num_heads || plan.topk != problem.topk)
    fail("plan", "was made for another shape (T, H, topk)");
}

// A schedule buffer of `bytes` holds the plan's schedule; `name` is the argument that gave its size.
static void check_schedule_bytes(const SparseMlaPlan& plan, size_t bytes, const char* name, const char* hint = "") {
  if (bytes < plan.schedule_bytes)
    fail(name, "must be >= plan.schedule_bytes (" + std::to_string(plan.schedule_bytes) + "), got " + std::to_string(bytes) + hint);
}

void make_sparse_mla_schedule(const SparseMlaProblem& problem, const SparseMlaPlan& plan, void* schedule,
                              size_t schedule_bytes, cudaStream_t stream) {
  validate_indices(problem);
  check_plan_shape(problem, plan);
  if (!plan.balanced) fail("plan", "is not balanced: only a balanced plan takes a schedule (PlanChoice::balanced)");
  check_balanced_plan(plan);
  if (problem.num_tokens == 0) return;
  require_pointer(schedule, "schedule", 16);
  check_schedule_bytes(plan, schedule_bytes, "schedule_bytes");
  detail::SparseMlaParams k = make_params(problem);
  set_balanced(k, plan, nullptr, schedule);
  detail::launch_sparse_mla_schedule(k, stream);
}

namespace detail {

void sparse_mla_forward_stage(const SparseMlaProblem& problem, const SparseMlaPlan& plan, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream, int stage, long long* timeline) {
  validate(problem);
  check_plan_shape(problem, plan);
  check_plan_lead_tokens(plan);
  if (!plan.balanced && problem.schedule != nullptr)
    fail("schedule", "is set, but the plan is not balanced (SparseMlaPlan::balanced)");
  if (plan.kernel == SparseMlaKernel::shared_rows) {
    if (plan.balanced) fail("plan", "inconsistent balanced schedule");
    if (plan.split_softmax) fail("plan", "split_softmax is split_k's");
    if (plan.early_issue) fail("plan", "early_issue is split_k's");
    if (plan.topk > SparseMlaPlan::kMaxChunk)
      fail("plan", "shared_rows needs topk <= " + std::to_string(SparseMlaPlan::kMaxChunk));
    const std::string cache_limit = shared_rows_cache_limit(problem);
    if (!cache_limit.empty()) fail("plan", cache_limit);
    if (stage != kStageFull) fail("plan", "stage variants exist for split_k only");
    if (plan.splits < 1 || plan.splits > SparseMlaPlan::kMaxSplits) fail("plan", "inconsistent splits");
    const int group_heads = detail::shared_rows_group_heads(plan.num_heads, plan.union_pass);
    if (!plan.union_pass && detail::shared_rows_tokens_per_group(group_heads) != 1)
      fail("plan", "shared_rows without a union pass needs 32, 64 or 128 heads");
    const bool probe = plan.share_probe.line_permille != 0;
    if (probe) check_share_probe_plan(problem, plan, timeline);
    if (problem.num_tokens == 0) return;
    const int T = problem.num_tokens, H = problem.num_heads;
    const size_t shared_bytes =
        shared_rows_workspace_for(T, H, problem.topk, plan.splits, plan.union_pass, plan.lead_tokens, plan.lead_splits);
    const size_t pairs_offset = detail::share_probe_pairs_offset(shared_bytes);
    require_workspace(workspace, workspace_bytes, probe ? pairs_offset + detail::kShareProbePairsBytes : shared_bytes);
    detail::SparseMlaParams k = make_params(problem);
    detail::SparseMlaParams split_k{};  // a share probe's other half: the problem's params and the probe's pairs, as k's
    if (probe) {  // both kernels read the probe's choice (share_choice.cuh)
      k.share_pairs = reinterpret_cast<const int2*>(static_cast<uint8_t*>(workspace) + pairs_offset);
      k.share_samples = static_cast<int>(detail::share_probe_groups(T, detail::kShareProbeSamples));
      k.share_line_permille = plan.share_probe.line_permille;
      split_k = k;
      set_split_k(split_k, share_probe_split_k_plan(plan));
    }
    k.shared_rows_union = plan.union_pass ? static_cast<uint8_t*>(workspace) : nullptr;
    k.shared_rows_union_pass = plan.union_pass;
    k.splits_over_entries = true;
    k.splits = plan.splits;
    k.lead_tokens = plan.lead_tokens;
    k.lead_splits = plan.lead_splits;
    check_plan_fused_rows(plan, detail::shared_rows_fused_rows_fit(plan.splits, group_heads));
    k.fused_rows = plan.fused_rows;
    if (plan.row_order && !detail::shared_rows_row_order_fit(plan.union_pass, plan.num_heads))
      fail("plan", "inconsistent row_order");
    set_row_order(k, plan);
    set_partials(k, workspace, shared_rows_union_bytes(T, H, problem.topk, plan.union_pass));
    k.timeline = timeline;
    if (probe)  // the probe first, once every check has passed
      detail::launch_share_probe(k.indices, k.topk_lengths, T, k.topk, k.indices_token_stride, k.num_rows, detail::kShareProbeSamples,
                                 const_cast<int2*>(k.share_pairs), nullptr, stream);
    launch_sparse_mla_shared_rows(k, stream, probe ? &split_k : nullptr);
    return;
  }
  if (fp8_cache(problem) && ((plan.block_keys != 32 && plan.block_keys != 64) || stage != kStageFull))
    fail("plan", "an fp8_ds_mla cache runs split_k's full kernel with 32- or 64-row tiles only");
  if (plan.split_softmax && ((plan.block_keys != 32 && plan.block_keys != 64) || stage != kStageFull))
    fail("plan", "split_softmax runs split_k's full kernel with 32- or 64-row tiles only");
  if (plan.balanced) {
    check_balanced_plan(plan);
    if (stage != kStageFull) fail("plan", "stage variants exist for plans that are not balanced only");
    if (problem.num_tokens == 0) return;
    if (problem.schedule == nullptr)
      fail("schedule", "a balanced plan needs the schedule make_sparse_mla_schedule wrote (SparseMlaPlan::balanced)");
    require_pointer(problem.schedule, "schedule", 16);
    check_schedule_bytes(plan, problem.schedule_bytes, "schedule_bytes", " (a schedule made for another shape?)");
    require_workspace(workspace, workspace_bytes, balanced_workspace_for(problem.num_heads, balanced_slots(plan)));
    detail::SparseMlaParams k = make_params(problem);
    set_balanced(k, plan, workspace, problem.schedule);
    k.timeline = timeline;
    k.split_softmax = plan.split_softmax;
    k.early_issue = plan.early_issue;  // unused: a balanced CTA chooses by its slot's tiles
    launch_sparse_mla_splitk(k, stream, stage);
    return;
  }
  if ((plan.block_keys != 16 && plan.block_keys != 32 && plan.block_keys != 64) || plan.splits < 1 || plan.splits > SparseMlaPlan::kMaxSplits || plan.chunk < 1 ||
      plan.chunk > SparseMlaPlan::kMaxChunk || static_cast<int64_t>(plan.chunk) * plan.splits < plan.topk ||
      static_cast<int64_t>(plan.chunk) * (plan.splits - 1) >= plan.topk)
    fail("plan", "inconsistent (block_keys, splits, chunk)");
  check_plan_fused_rows(plan, detail::fused_rows_fit(plan.splits, plan.topk, plan.chunk));
  if (problem.num_tokens == 0) return;
  require_workspace(workspace, workspace_bytes,
                    workspace_for(problem.num_tokens, problem.num_heads, plan.splits, plan.lead_tokens, plan.lead_splits));
  detail::SparseMlaParams k = make_params(problem);
  set_split_k(k, plan);
  set_partials(k, workspace, 0);
  k.timeline = timeline;
  launch_sparse_mla_splitk(k, stream, stage);
}

}  // namespace detail

void sparse_mla_forward(const SparseMlaProblem& problem, const SparseMlaPlan& plan, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  detail::sparse_mla_forward_stage(problem, plan, workspace, workspace_bytes, stream, detail::kStageFull);
}

void count_invalid_indices(const int32_t* indices, int num_tokens, int topk, int64_t token_stride,
                           int64_t num_rows, long long* d_count, cudaStream_t stream) {
  validate_index_shape(num_tokens, topk);
  require_pointer(indices, "indices", 4);
  require_pointer(d_count, "d_count", 8);
  if (token_stride < topk) fail("token_stride", "must be >= topk");
  detail::launch_count_invalid_indices(indices, num_tokens, topk, token_stride, num_rows, d_count, stream);
}

void sample_group_sharing(const int32_t* indices, int num_tokens, int topk, int64_t token_stride, int64_t num_rows,
                          int samples, long long* d_counts, cudaStream_t stream) {
  validate_index_shape(num_tokens, topk);
  require_pointer(indices, "indices", 4);
  require_pointer(d_counts, "d_counts", 8);
  if (topk > SparseMlaPlan::kMaxChunk) fail("topk", "sample_group_sharing needs topk <= " + std::to_string(SparseMlaPlan::kMaxChunk));
  if (token_stride < topk) fail("token_stride", "must be >= topk");
  if (samples < 1) fail("samples", "must be >= 1");
  detail::launch_share_probe(indices, nullptr, num_tokens, topk, token_stride, num_rows, samples, nullptr, d_counts, stream);
}

int64_t count_invalid_indices_host(const int32_t* indices, int num_tokens, int topk, int64_t token_stride,
                                   int64_t num_rows) {
  validate_index_shape(num_tokens, topk);
  require_pointer(indices, "indices", 4);
  if (token_stride < topk) fail("token_stride", "must be >= topk");
  int64_t n = 0;
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int k = 0; k < topk; ++k) {
      const int32_t r = indices[t * token_stride + k];
      n += (r < -1 || r >= num_rows) ? 1 : 0;
    }
  return n;
}

void sparse_mla_reference_gpu(const SparseMlaProblem& problem, cudaStream_t stream) {
  validate(problem);
  if (problem.num_tokens == 0) return;
  const detail::SparseMlaParams k = make_params(problem);
  float* scratch = nullptr;
  const size_t bytes = static_cast<size_t>(problem.num_tokens) * problem.num_heads * problem.topk * sizeof(float);
  DSA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, stream));
  detail::launch_sparse_mla_reference(k, scratch, stream);
  DSA_CUDA_CHECK(cudaFreeAsync(scratch, stream));
}

}  // namespace dsa
