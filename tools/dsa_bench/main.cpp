// dsa-bench: verifies the sparse MLA kernel on every case, then times it beside the memory
// floor (a pure gather of the same rows) measured in the same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "bench_kernels.h"
#include "cliffs.h"
#include "dense_bench.h"
#include "device_memory.h"
#include "flashinfer_bench.h"
#include "index_analysis.h"
#include "fuzz.h"
#include "plan_grid.h"
#include "plan_label.h"
#include "common/cuda_check.h"
#include "dsa/reference.h"
#include "dsa/sparse_mla.h"
#include "sparse_mla/params.h"
#include "suites.h"
#include "timing.h"
#include "workload.h"
#include "gather_probe.h"
#include "wgmma_probe.h"

#ifndef DSA_GIT_COMMIT
#define DSA_GIT_COMMIT "unknown"
#endif

namespace dsa::bench {
namespace {

constexpr int kRowBytes = (kCkvDim + kKpeDim) * 2;  // 1152 B gathered per index entry
// Groups of 4 tokens `inspect` samples, as the forward's share probe does (SparseMlaPlan::
// share_probe; 16: within 0.2 points of the full share on every case of perf.md runs 686-687).
constexpr int kInspectSampledGroups = detail::kShareProbeSamples;  // as the forward's share probe

struct Options : TimingOptions {
  std::string suite = "targets";
  std::string csv_path;
  // One custom case instead of a suite.
  int T = 0, heads = 16, topk = 2048, page_size = 64, num_pages = 8462, prefix_len = 8192, seq_tokens = 1;
  std::string pattern = "random";
  std::vector<int> valid;
  std::vector<std::string> shapes;  // --shape: cases by suite-style name (named_case)
  // Read only each list's first positions, as a caller whose tokens' valid entries all sit there
  // passes topk = that length with the lists' full row stride: "off" (all topk), a number, or
  // "auto" (each case's own: its last valid entry's position + 1, the most over its tokens).
  std::string list_length = "off";
  // SparseMlaProblem::min_valid_entries, the planner's hint: "off" (0), a number, or "auto" (each
  // case's own: its fewest valid entries over its tokens).
  std::string min_valid = "off";
  // Plan overrides (sweeps).
  int block_keys = 0, splits = 0, fused_rows = 0;
  std::string row_order = "auto";
  std::string split_softmax = "auto";
  bool balanced = false;  // a balanced plan, its schedule made once before the timed calls
  std::string kernel = "auto";  // auto (planner), split-k, shared-rows
  std::string sharing = "auto";  // the planner's IndexSharing hint: auto (per case), unknown, consecutive, none
  std::string stage = "full";  // full, or a dissection: load, scores, softmax, all
  bool timeline = false;
  std::string timeline_csv;  // --timeline-csv: every CTA's raw points, appended as CSV rows
  bool kernel_starts = false;  // after the table, each kernel's start and end within the call (CUPTI)
  bool warm_code = false;  // after each flush, run the same kernels on other data (caches their code only)
  bool warm_tlb = false;   // after each flush, touch one word per 64 KB of every buffer (caches translations only)
  bool host_overhead = false;  // host time of plan + forward, enqueue only
  bool kernel_only = false;    // verify and time the kernels, no floors (sweeps of many cases)
  std::string kv = "bf16";  // the cache format: bf16, or fp8 (KvCacheFormat::fp8_ds_mla, quantized from the bf16 cache)
  std::string cache_layout = "separate";  // bf16: ckv and kpe arrays, or "joined" ckv | kpe rows (vLLM's, FlashMLA's)
  std::vector<int> union_groups;  // --union-floor: group sizes G for the union floor
  std::string workload_path;  // FlashInfer-Bench JSONL instead of a suite
  std::string export_dir;     // write the selected cases as FlashInfer-Bench workloads and exit
  std::string plot_path;      // gnuplot PNG of latency and floor ratio against T
};

// The cases a command line selects: one custom case, a workload file, or a built-in suite.
std::vector<BenchCase> select_cases(const Options& o) {
  if (!o.shapes.empty()) {
    if (o.T > 0 || !o.workload_path.empty()) throw Error("--shape: not with -T or --workload");
    std::vector<BenchCase> cases;
    for (const std::string& name : o.shapes) cases.push_back(named_case(name));
    return cases;
  }
  if (o.T > 0) {
    BenchCase c;
    c.name = "custom";
    c.num_heads = o.heads;
    c.indices.num_tokens = o.T;
    c.indices.topk = o.topk;
    c.indices.page_size = o.page_size;
    c.indices.num_pages = o.num_pages;
    c.indices.pattern = workload::parse_pattern(o.pattern);
    c.indices.valid_counts = o.valid;
    c.indices.prefix_len = o.prefix_len;
    c.indices.tokens_per_sequence = o.seq_tokens;
    return {c};
  }
  if (!o.workload_path.empty()) {
    std::vector<BenchCase> cases;
    for (fib::Workload& w : fib::read_workloads(o.workload_path)) {
      BenchCase c;
      c.name = w.uuid;
      c.num_heads = w.num_heads;
      c.sm_scale = w.sm_scale;
      c.indices.num_tokens = w.num_tokens;
      c.indices.topk = w.topk;
      c.indices.page_size = w.page_size;
      c.indices.num_pages = w.num_pages;
      c.explicit_indices = std::move(w.indices);
      cases.push_back(std::move(c));
    }
    return cases;
  }
  return builtin_suite(o.suite);
}

std::vector<int32_t> case_indices(const BenchCase& c, uint64_t seed) {
  return c.explicit_indices.empty() ? workload::make_indices(c.indices, seed) : c.explicit_indices;
}

const char* const kStageNames[] = {"load", "scores", "softmax", "full"};

struct Result {
  BenchCase c;
  int64_t entries = 0;  // valid (t, k) entries: rows gathered
  int min_valid_entries = 0;  // the hint the calls passed (--min-valid)
  SparseMlaPlan plan;
  Agreement vs_gpu_ref, vs_cpu_ref;
  bool cpu_checked = false, ok = false;
  Timing kernel, gather;
  int gather_splits = 0;
  // The same floor over each token's list in row order (sorted by the row's top bits, as the
  // kernels' row order does): what a kernel that reorders its reads could reach. Where tokens
  // share rows (the random pattern), it is well below the index-order floor.
  Timing gather_row_order;
  // The output floor (launch_gather_merge): the gather's loads plus what a design that splits a
  // token over several SMs must add (bf16 partials, a barrier in L2, the merge, the bf16 output),
  // at its best split and the better of index and row order; 0 splits: not measured.
  Timing output_floor;
  int output_splits = 0;
  // The output floor with each token split by its own valid rows, as fused rows decide it on the
  // device: 64 blocks per token load Q and the whole list and count the valid rows, the token
  // takes the smallest power-of-2 splits of at most `per_token_rows` rows each, the others leave
  // (launch_split_by_rows); a token of one split is not merged. Best over rows per split and both
  // orders; 0 rows: not measured (topk > 2048, or T x 64 blocks not all resident: T > 8).
  Timing per_token_floor;
  int per_token_rows = 0;
  // The union floor (--union-floor G): each group of G consecutive tokens reads the union of its
  // valid rows once, in row order, with the gather's loads, through L1 and from L2 alone (the
  // way tile fills into shared memory read). What a design that shares each row among the
  // tokens of a CTA moves at best; mma_work is the MMA work of computing every (query row,
  // union entry) pair of the group, over the useful work (every design that puts the group's
  // tokens in one MMA's M dimension pays it).
  struct UnionFloor {
    int group = 0;
    int64_t rows = 0;  // the groups' union entries, summed
    double mma_work = 0;
    Timing through_l1, l2_only;
  };
  std::vector<UnionFloor> union_floors;
  std::vector<std::pair<std::string, double>> stage_us;  // dissection: median per variant
  std::string timeline;  // --timeline: per-phase medians over CTAs
};

// A KV cache on the device for one (num_pages, page_size), filled once; host copy on demand.
// With --kv fp8 the kernels and floors read fp8_ds_mla rows quantized from the bf16 cache. With
// --cache-layout joined the bf16 cache is one array of ckv | kpe rows (1152 B, the layout vLLM and
// FlashMLA keep): ckv and kpe point into it, and the kernels and floors read it at that stride.
struct Cache {
  int num_pages = 0, page_size = 0;
  uint16_t* ckv = nullptr;
  uint16_t* kpe = nullptr;
  uint16_t* joined = nullptr;  // joined layout: the one [rows, 576] array (ckv and kpe point into it)
  uint8_t* fp8 = nullptr;  // fp8_ds_mla rows, or null
  std::vector<uint16_t> host_ckv, host_kpe;  // packed, whichever the device layout
  std::vector<uint8_t> host_fp8;
  int64_t rows() const { return int64_t(num_pages) * page_size; }
  int64_t ckv_stride() const { return joined ? kCkvDim + kKpeDim : kCkvDim; }  // elements
  int64_t kpe_stride() const { return joined ? kCkvDim + kKpeDim : kKpeDim; }
  ~Cache() {
    if (joined != nullptr) {
      cudaFree(joined);
    } else {
      cudaFree(ckv);
      cudaFree(kpe);
    }
    cudaFree(fp8);
  }
  void allocate_bf16(bool joined_rows, uint64_t seed) {
    if (joined_rows) {
      DSA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&joined), rows() * (kCkvDim + kKpeDim) * 2));
      launch_fill_normal_bf16(joined, rows() * (kCkvDim + kKpeDim), 0.5f, seed, nullptr);
      ckv = joined, kpe = joined + kCkvDim;
      return;
    }
    DSA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ckv), rows() * kCkvDim * 2));
    DSA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&kpe), rows() * kKpeDim * 2));
    launch_fill_normal_bf16(ckv, rows() * kCkvDim, 0.5f, seed, nullptr);
    launch_fill_normal_bf16(kpe, rows() * kKpeDim, 0.5f, seed + 1, nullptr);
  }
  void fetch_host() {
    if (!host_ckv.empty()) return;
    host_ckv.resize(rows() * kCkvDim);
    host_kpe.resize(rows() * kKpeDim);
    DSA_CUDA_CHECK(cudaMemcpy2D(host_ckv.data(), kCkvDim * 2, ckv, ckv_stride() * 2, kCkvDim * 2, rows(), cudaMemcpyDeviceToHost));
    DSA_CUDA_CHECK(cudaMemcpy2D(host_kpe.data(), kKpeDim * 2, kpe, kpe_stride() * 2, kKpeDim * 2, rows(), cudaMemcpyDeviceToHost));
    if (fp8 != nullptr) {
      host_fp8.resize(rows() * kFp8RowBytes);
      DSA_CUDA_CHECK(cudaMemcpy(host_fp8.data(), fp8, host_fp8.size(), cudaMemcpyDeviceToHost));
    }
  }
  CacheRows floor_rows() const {
    return fp8 ? CacheRows{fp8, nullptr, kFp8RowBytes}
               : CacheRows{ckv, kpe, 0, static_cast<int>(ckv_stride() * 2), static_cast<int>(kpe_stride() * 2)};
  }
  // The problem's cache pointers, strides and format (host copies, packed, with `host`).
  void point(SparseMlaProblem& p, bool host) const {
    p.kv_format = fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16;
    p.ckv_cache = fp8 ? (host ? static_cast<const void*>(host_fp8.data()) : fp8) : (host ? host_ckv.data() : static_cast<const void*>(ckv));
    p.kpe_cache = fp8 ? nullptr : host ? host_kpe.data() : static_cast<const void*>(kpe);
    p.ckv_row_stride = fp8 || host ? 0 : ckv_stride();
    p.kpe_row_stride = fp8 || host ? 0 : kpe_stride();
  }
};

PlanChoice plan_choice(const Options& o) {
  PlanChoice c{o.block_keys, o.splits};
  if (o.kernel == "split-k") c.kernel = PlanChoice::Kernel::split_k;
  if (o.kernel == "shared-rows") c.kernel = PlanChoice::Kernel::shared_rows;
  c.fused_rows = o.fused_rows;
  c.row_order = o.row_order == "on" ? 1 : o.row_order == "off" ? -1 : 0;
  c.split_softmax = o.split_softmax == "on" ? 1 : o.split_softmax == "off" ? -1 : 0;
  c.balanced = o.balanced ? 1 : 0;
  return c;
}

// --sharing's values (the top-level option and inspect's): one per IndexSharing, and auto, what a
// caller that knows prefill from decode passes: consecutive for a shared-prefix case (prefill),
// unknown for the others.
const std::vector<std::string> kSharingNames = {"auto", "unknown", "consecutive", "none"};

std::string sharing_name(const Options& o, const BenchCase& c) {
  if (o.sharing != "auto") return o.sharing;
  return c.indices.pattern == workload::IndexPattern::shared_prefix ? "consecutive" : "unknown";
}

IndexSharing index_sharing(const Options& o, const BenchCase& c) {
  const std::string name = sharing_name(o, c);
  if (name == "consecutive") return IndexSharing::consecutive;
  if (name == "none") return IndexSharing::none;
  return IndexSharing::unknown;
}

// One call with the in-kernel timeline on (L2 flushed first), summarised per phase over CTAs.
// csv_path (not empty): every CTA's points appended as rows "label,cta,sm,entry_us,p1..p6_us,exit_us"
// (entry and exit since the first entry, points since the CTA's own entry; -1: not reached).
std::string run_timeline(const SparseMlaProblem& p, const SparseMlaPlan& plan, void* ws, KernelTimer& timer,
                         const std::string& csv_path, const std::string& label) {
  const size_t n = size_t(plan.ctas) * detail::kTimelinePoints;
  std::vector<long long> h(n, -1);
  long long* d = device_copy(h);
  DevicePtr keep(d);
  timer.time(Timer::events, [&] { detail::sparse_mla_forward_stage(p, plan, ws, plan.workspace_bytes, bench_stream(), detail::kStageFull, d); }, 1, 1, 0);
  h = host_copy(d, n);
  long long first = -1, last = 0;
  std::vector<double> ghz;
  std::vector<std::vector<double>> phase(detail::kTimelinePoints);
  std::vector<std::pair<long long, int>> events;  // entries (+1) and exits (-1), for the CTAs resident at once
  for (int b = 0; b < plan.ctas; ++b) {
    const long long* r = &h[size_t(b) * detail::kTimelinePoints];
    if (r[0] < 0) continue;
    first = first < 0 ? r[0] : std::min(first, r[0]);
    last = std::max(last, r[7]);
    if (r[7] >= 0) events.push_back({r[0], 1}), events.push_back({r[7], -1});
    if (r[7] > r[0] && r[6] > 0) ghz.push_back(double(r[6]) / double(r[7] - r[0]));  // CTAs that left early lack r[6]
    for (int k = 1; k < detail::kTimelinePoints; ++k)
      if (k != 7 && r[k] >= 0) phase[k].push_back(double(r[k]));
  }
  // Element n * pct / 100 of the sorted values (50: the median, 100: the largest); -1 if none.
  auto percentile = [](std::vector<double> v, size_t pct) {
    if (v.empty()) return -1.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, v.size() * pct / 100)];
  };
  auto median = [&](const std::vector<double>& v) { return percentile(v, 50); };
  auto max_of = [&](const std::vector<double>& v) { return percentile(v, 100); };
  const double clk = median(ghz);  // cycles per ns
  if (!csv_path.empty() && plan.kernel == SparseMlaKernel::split_k) {
    std::FILE* f = std::fopen(csv_path.c_str(), "a");
    if (f == nullptr) throw Error("--timeline-csv: cannot open " + csv_path);
    for (int b = 0; b < plan.ctas; ++b) {
      const long long* r = &h[size_t(b) * detail::kTimelinePoints];
      if (r[0] < 0) continue;
      std::fprintf(f, "%s,%d,%lld,%.3f", label.c_str(), b, r[8], (r[0] - first) * 1e-3);
      for (int k = 1; k <= 6; ++k) std::fprintf(f, ",%.3f", r[k] >= 0 ? r[k] / clk * 1e-3 : -1.0);
      std::fprintf(f, ",%.3f\n", r[7] >= 0 ? (r[7] - first) * 1e-3 : -1.0);
    }
    std::fclose(f);
  }
  char buf[512];
  std::vector<double> entries;
  for (int b = 0; b < plan.ctas; ++b)
    if (h[size_t(b) * detail::kTimelinePoints] >= 0) entries.push_back(double(h[size_t(b) * detail::kTimelinePoints] - first));
  // CTAs resident at once (a cluster launch or an occupancy limit shows as fewer than the SMs).
  std::sort(events.begin(), events.end());
  int resident = 0, most_resident = 0;
  for (const auto& e : events) most_resident = std::max(most_resident, resident += e.second);
  if (plan.kernel == SparseMlaKernel::shared_rows) {  // points 2-5, 8-11 are sums over the loop (shared_rows_kernel.cu)
    std::snprintf(buf, sizeof buf,
                  "SM %.2f GHz; at most %d CTAs resident; per-CTA median us: setup %.2f, loop done %.2f (max %.2f); summed "
                  "over the loop: scores waiting for tiles %.2f, for S to complete %.2f; output waiting for P %.2f, for the next "
                  "S issued %.2f, for P V to complete %.2f, for its copies to land %.2f; issuing gathers %.2f, converting fp8 %.2f; first entry to last exit %.2f us",
                  clk, most_resident, median(phase[1]) / clk * 1e-3, median(phase[6]) / clk * 1e-3, max_of(phase[6]) / clk * 1e-3,
                  median(phase[8]) / clk * 1e-3, median(phase[2]) / clk * 1e-3, median(phase[5]) / clk * 1e-3,
                  median(phase[3]) / clk * 1e-3, median(phase[4]) / clk * 1e-3, median(phase[11]) / clk * 1e-3, median(phase[10]) / clk * 1e-3,
                  median(phase[9]) / clk * 1e-3, (last - first) * 1e-3);
    // Its points are sums over the loop, not split-K's phases: nothing goes to the CSV, and the line says so.
    return csv_path.empty() ? std::string(buf) : std::string(buf) + "; --timeline-csv: nothing written (split-K plans only)";
  }
  std::snprintf(buf, sizeof buf,
                "SM %.2f GHz; at most %d CTAs resident; CTA entry spread median %.2f max %.2f us; per-CTA median us since entry: Q issued %.2f, "
                "compacted %.2f, Q in regs %.2f, tile 0 landed %.2f, loop done %.2f (p90 %.2f, max %.2f), stored %.2f (max %.2f); "
                "first entry to last exit %.2f us",
                clk, most_resident, median(entries) * 1e-3, entries.empty() ? 0.0 : *std::max_element(entries.begin(), entries.end()) * 1e-3,
                median(phase[1]) / clk * 1e-3, median(phase[2]) / clk * 1e-3, median(phase[3]) / clk * 1e-3,
                median(phase[4]) / clk * 1e-3, median(phase[5]) / clk * 1e-3, percentile(phase[5], 90) / clk * 1e-3, max_of(phase[5]) / clk * 1e-3,
                median(phase[6]) / clk * 1e-3, max_of(phase[6]) / clk * 1e-3,
                (last - first) * 1e-3);
  return buf;
}

// A floor probe at its best block split: each candidate timed with a third of the reps, the
// fastest again with all of them. {timing, splits}, or {{}, 0} without a candidate.
std::pair<Timing, int> best_split(const std::vector<int>& candidates, const Options& o,
                                  const std::function<Timing(int splits, int reps, int warmup)>& time_split) {
  Timing best;
  int best_splits = 0;
  for (int splits : candidates) {
    const Timing g = time_split(splits, std::max(5, o.reps / 3), 1);
    if (best_splits == 0 || g.median_us < best.median_us) best = g, best_splits = splits;
  }
  if (best_splits == 0) return {{}, 0};
  return {time_split(best_splits, o.reps, o.warmup), best_splits};
}

// A floor at the faster of its two loop shapes (bench_kernels.h, kFloorRowsInFlight): floor_of(rows
// in flight) returns {timing, split}, split 0 where that shape was not measured.
template <class FloorOf>
std::pair<Timing, int> faster_loop_shape(FloorOf floor_of) {
  std::pair<Timing, int> best{{}, 0};
  for (int rows_in_flight : kFloorRowsInFlight) {
    const std::pair<Timing, int> f = floor_of(rows_in_flight);
    if (f.second > 0 && (best.second == 0 || f.first.median_us < best.first.median_us)) best = f;
  }
  return best;
}

// The floors' barriers set sink[1] when a wait gives up (their blocks were not all resident): a
// figure measured then is void.
void clear_barrier_flag(unsigned* sink) { DSA_CUDA_CHECK(cudaMemset(sink + 1, 0, sizeof(unsigned))); }
bool barrier_gave_up(const unsigned* sink) {
  unsigned flag = 0;
  DSA_CUDA_CHECK(cudaMemcpy(&flag, sink + 1, sizeof flag, cudaMemcpyDeviceToHost));
  return flag != 0;
}

// The output floor at its best split (powers of 2 up to 128 whose blocks are co-resident), over
// the case's indices: {timing, splits}, or {{}, 0} where its barrier gave up (blocks not resident).
std::pair<Timing, int> output_floor(const Cache& cache, const void* d_idx, int T, int topk, KernelTimer& timer, Timer which,
                                    const Options& o, int sm_count, unsigned* sink) {
  // Its barrier's target comes from a host count of calls, which a graph's replays do not advance.
  if (which == Timer::graph) return {{}, 0};
  const cudaStream_t stream = bench_stream();
  const auto* idx = static_cast<const int32_t*>(d_idx);
  DevicePtr out(device_copy(std::vector<uint16_t>(size_t(T) * 16 * kCkvDim)));
  DevicePtr arrivals(device_copy(std::vector<unsigned>(size_t(T))));
  return faster_loop_shape([&](int rows_in_flight) -> std::pair<Timing, int> {
    clear_barrier_flag(sink);
    const int max_blocks = max_merge_blocks(sm_count, rows_in_flight);
    const auto time_split = [&](int splits, int reps, int warmup) {
      DevicePtr partials(device_copy(std::vector<uint8_t>(std::max<size_t>(merge_partials_bytes(T, splits), 16))));
      DSA_CUDA_CHECK(cudaMemset(arrivals.get(), 0, size_t(T) * sizeof(unsigned)));
      unsigned calls = 0;
      return timer.time(which, [&] {
        ++calls;
        launch_gather_merge(cache.floor_rows(), idx, T, topk, int(cache.rows()), splits, static_cast<float*>(partials.get()),
                            static_cast<unsigned*>(arrivals.get()), calls * unsigned(splits), static_cast<uint16_t*>(out.get()), sink,
                            stream, rows_in_flight);
      }, 1, reps, warmup);
    };
    std::vector<int> candidates;
    for (int splits = 1; splits <= 128; splits *= 2)
      if (splits <= topk && (splits == 1 || int64_t(T) * splits <= max_blocks) && int64_t(T) * splits <= 400000)
        candidates.push_back(splits);
    const auto best = best_split(candidates, o, time_split);
    if (best.second == 0 || barrier_gave_up(sink)) return {{}, 0};
    return best;
  });
}

// The per-token output floor (Result::per_token_floor) over the case's index list d_idx, whose
// tokens hold at most `most_valid` valid rows: {timing, rows per split}, or {{}, 0} (topk > 2048,
// blocks not resident).
std::pair<Timing, int> per_token_floor(const Cache& cache, const void* d_idx, int most_valid, int T, int topk,
                                       KernelTimer& timer, Timer which, const Options& o, int sm_count, unsigned* sink) {
  if (topk > 2048 || which == Timer::graph) return {{}, 0};  // graph: as output_floor's barrier
  const cudaStream_t stream = bench_stream();
  std::vector<int> candidates;  // rows per split
  for (int rows = 32; rows <= 2048; rows *= 2) {
    if (rows > 32 && rows / 2 >= most_valid) break;  // the same splits as rows / 2
    candidates.push_back(rows);
  }
  DevicePtr q(device_copy(std::vector<uint16_t>(size_t(T) * 16 * (kCkvDim + kKpeDim), 0x3f80)));
  DevicePtr out(device_copy(std::vector<uint16_t>(size_t(T) * 16 * kCkvDim)));
  DevicePtr arrivals(device_copy(std::vector<unsigned>(size_t(T))));
  DevicePtr partials(device_copy(std::vector<uint8_t>(split_by_rows_partials_bytes(T))));
  return faster_loop_shape([&](int rows_in_flight) -> std::pair<Timing, int> {
    clear_barrier_flag(sink);
    // Its T x 64 blocks must all be resident for its barriers; with fewer, it could not split
    // tokens freely and would be no floor.
    if (int64_t(T) * kMaxRowSplits > max_split_by_rows_blocks(sm_count, rows_in_flight)) return {{}, 0};
    const auto best = best_split(candidates, o, [&](int rows, int reps, int warmup) {
      // Each token's arrivals grow by its splits per call: a count per rows-per-split value.
      DSA_CUDA_CHECK(cudaMemset(arrivals.get(), 0, size_t(T) * sizeof(unsigned)));
      unsigned calls = 0;
      return timer.time(which, [&] {
        launch_split_by_rows(cache.floor_rows(), static_cast<const uint16_t*>(q.get()), static_cast<const int32_t*>(d_idx), T, topk,
                             int(cache.rows()), rows, static_cast<float*>(partials.get()), static_cast<unsigned*>(arrivals.get()),
                             ++calls, static_cast<uint16_t*>(out.get()), sink, stream, rows_in_flight);
      }, 1, reps, warmup);
    });
    if (best.second == 0 || barrier_gave_up(sink)) return {{}, 0};
    return best;
  });
}

// Every loop shape of the floors reads exactly the case's rows: for each token, the XOR of every
// 32-bit word of every row its list names (once per listing), from the gather floor's kernel at
// 1, 3 (ragged chunks) and 64 blocks per token, through L1 and L2 only, against the host's copy
// of the cache (fetched). Throws on a difference.
void check_floor_rows(const Cache& cache, const std::vector<int32_t>& indices, const void* d_idx, int T, int topk, unsigned* sink) {
  std::vector<unsigned> want(size_t(T), 0u);
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < topk; ++k) {
      const int32_t r = indices[size_t(t) * topk + k];
      if (!detail::names_a_row(r, int(cache.rows()))) continue;
      const auto xor_words = [&](const void* src, size_t bytes) {
        for (size_t i = 0; i < bytes; i += 4) {
          uint32_t w;
          std::memcpy(&w, static_cast<const uint8_t*>(src) + i, 4);
          want[size_t(t)] ^= w;
        }
      };
      if (cache.fp8 != nullptr) {
        xor_words(cache.host_fp8.data() + size_t(r) * kFp8RowBytes, kFp8RowBytes);
      } else {
        xor_words(cache.host_ckv.data() + size_t(r) * kCkvDim, kCkvDim * 2);
        xor_words(cache.host_kpe.data() + size_t(r) * kKpeDim, kKpeDim * 2);
      }
    }
  DevicePtr got_d(device_copy(std::vector<unsigned>(size_t(T))));
  for (int rows_in_flight : kFloorRowsInFlight)
    for (bool l2_only : {false, true})
      for (int splits : {1, 3, 64}) {
        DSA_CUDA_CHECK(cudaMemset(got_d.get(), 0, size_t(T) * sizeof(unsigned)));
        launch_gather_rows(cache.floor_rows(), static_cast<const int32_t*>(d_idx), T, topk, int(cache.rows()), splits, sink, nullptr,
                           l2_only, rows_in_flight, static_cast<unsigned*>(got_d.get()));
        const auto got = host_copy(static_cast<unsigned*>(got_d.get()), size_t(T));
        for (int t = 0; t < T; ++t)
          if (got[size_t(t)] != want[size_t(t)])
            throw Error("the gather floor (" + std::to_string(rows_in_flight) + " rows in flight, " + std::to_string(splits) +
                        " blocks per token" + (l2_only ? ", L2 only" : "") + ") read other rows than token " + std::to_string(t) +
                        "'s list");
      }
}

// --min-valid: the hint a case's calls pass (0: none). A number is passed as given, clamped to
// the call's topk (a hint that does not hold is allowed: it costs time, never correctness).
int resolve_min_valid(const Options& o, int topk, int fewest_valid) {
  if (o.min_valid == "off") return 0;
  return std::min(o.min_valid == "auto" ? fewest_valid : std::stoi(o.min_valid), topk);
}

// --list-length: the positions [0, L) of each list a call reads (the lists keep their topk
// stride), from the option and the case's last valid position over its tokens (-1: none). A
// number is refused where a valid entry sits further on: the time would be of less work.
// "tokens" keeps topk and passes each token's own length instead (topk_lengths, see run_case).
int resolve_list_length(const Options& o, const std::string& case_name, int topk, int last_valid) {
  if (o.list_length == "off" || o.list_length == "tokens") return topk;
  const int length = o.list_length == "auto" ? std::max(last_valid + 1, 1) : std::min(std::stoi(o.list_length), topk);
  if (length <= last_valid)
    throw Error("--list-length " + o.list_length + ": case " + case_name + " has a valid entry at position " + std::to_string(last_valid));
  return length;
}

Result run_case(const BenchCase& c, Cache& cache, KernelTimer& timer, Timer which, const Options& o, int sm_count) {
  Result res;
  res.c = c;
  const int T = c.indices.num_tokens, H = c.num_heads, topk = c.indices.topk;
  const auto indices = case_indices(c, o.seed);
  int most_valid = 0;  // a token's valid rows, at most (the per-token floor's candidates)
  int fewest_valid = topk;  // and at least (--min-valid auto)
  int last_valid = -1;  // the last valid entry's position, over the tokens
  std::vector<int32_t> token_lengths(static_cast<size_t>(T));  // each token's last valid position + 1
  for (int t = 0; t < T; ++t) {
    int valid = 0;
    for (int k = 0; k < topk; ++k)
      if (detail::names_a_row(indices[size_t(t) * topk + k], int(cache.rows()))) {
        ++valid;
        token_lengths[size_t(t)] = k + 1;
      }
    last_valid = std::max(last_valid, token_lengths[size_t(t)] - 1);
    res.entries += valid;
    most_valid = std::max(most_valid, valid);
    fewest_valid = std::min(fewest_valid, valid);
  }
  const int list_length = resolve_list_length(o, c.name, topk, last_valid);
  if (list_length < topk) res.c.name += "/L" + std::to_string(list_length);
  const int min_valid = resolve_min_valid(o, list_length, fewest_valid);
  if (min_valid > 0) res.c.name += "/V" + std::to_string(min_valid);
  res.min_valid_entries = min_valid;
  const bool per_token_lengths = o.list_length == "tokens";
  if (per_token_lengths) res.c.name += "/Lt";
  const auto q_nope = workload::random_bf16(size_t(T) * H * kCkvDim, 1.0, o.seed + 11);
  const auto q_pe = workload::random_bf16(size_t(T) * H * kKpeDim, 1.0, o.seed + 12);
  DevicePtr d_qn(device_copy(q_nope)), d_qp(device_copy(q_pe)), d_idx(device_copy(indices));
  // Allocated with or without --list-length tokens, so that both place every later buffer alike.
  DevicePtr d_lengths(device_copy(token_lengths));
  const size_t out_n = size_t(T) * H * kCkvDim, lse_n = size_t(T) * H;
  DevicePtr d_out(device_copy(std::vector<uint16_t>(out_n, 0xffff)));  // poisoned: NaN
  DevicePtr d_lse(device_copy(std::vector<float>(lse_n, NAN)));
  DevicePtr d_ref_out(device_copy(std::vector<uint16_t>(out_n, 0xffff)));
  DevicePtr d_ref_lse(device_copy(std::vector<float>(lse_n, NAN)));

  SparseMlaProblem p;
  p.num_tokens = T; p.num_heads = H; p.topk = list_length;
  p.page_size = cache.page_size; p.num_pages = cache.num_pages; p.sm_scale = c.sm_scale;
  p.q_nope = d_qn.get(); p.q_pe = d_qp.get();
  cache.point(p, false);
  p.indices = static_cast<const int32_t*>(d_idx.get());
  p.indices_token_stride = topk;
  p.topk_lengths = per_token_lengths ? static_cast<const int32_t*>(d_lengths.get()) : nullptr;
  p.out = d_out.get(); p.lse = static_cast<float*>(d_lse.get());
  p.index_sharing = index_sharing(o, c);
  p.min_valid_entries = min_valid;
  validate(p);
  PlanChoice choice = plan_choice(o);
  res.plan = plan_sparse_mla(T, H, list_length, DeviceInfo::from_device(0), choice, p.index_sharing, p.kv_format, min_valid);
  void* ws = nullptr;
  DSA_CUDA_CHECK(cudaMalloc(&ws, std::max<size_t>(res.plan.workspace_bytes, 16)));
  DevicePtr d_ws(ws);
  const cudaStream_t stream = bench_stream();
  // A balanced plan's schedule, made once from the case's indices as an engine makes it once
  // per decode step (outside every timed call).
  DevicePtr d_schedule;
  if (res.plan.balanced) {
    void* schedule = nullptr;
    DSA_CUDA_CHECK(cudaMalloc(&schedule, res.plan.schedule_bytes));
    d_schedule.reset(schedule);
    make_sparse_mla_schedule(p, res.plan, schedule, res.plan.schedule_bytes, stream);
    p.schedule = schedule;
    p.schedule_bytes = res.plan.schedule_bytes;
  }

  // Verify first: the kernel and the GPU reference on the same inputs, outputs poisoned.
  sparse_mla_forward(p, res.plan, ws, res.plan.workspace_bytes, stream);
  SparseMlaProblem ref = p;
  ref.out = d_ref_out.get();
  ref.lse = static_cast<float*>(d_ref_lse.get());
  sparse_mla_reference_gpu(ref, stream);
  DSA_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = host_copy(static_cast<uint16_t*>(d_out.get()), out_n);
  const auto lse = host_copy(static_cast<float*>(d_lse.get()), lse_n);
  {
    const auto ro = host_copy(static_cast<uint16_t*>(d_ref_out.get()), out_n);
    const auto rl = host_copy(static_cast<float*>(d_ref_lse.get()), lse_n);
    std::vector<double> ro_d(out_n), rl_d(lse_n);
    for (size_t i = 0; i < out_n; ++i) ro_d[i] = bf16_to_float(ro[i]);
    for (size_t i = 0; i < lse_n; ++i) rl_d[i] = rl[i];
    res.vs_gpu_ref = compare_to_reference(out.data(), lse.data(), ro_d.data(), rl_d.data(), T, H);
  }
  if (res.entries * H <= (int64_t(1) << 19)) {  // small enough for the float64 CPU reference
    cache.fetch_host();
    SparseMlaProblem hp = p;
    hp.q_nope = q_nope.data(); hp.q_pe = q_pe.data();
    cache.point(hp, true);
    hp.indices = indices.data();
    if (per_token_lengths) hp.topk_lengths = token_lengths.data();
    std::vector<uint16_t> dummy_out(16);
    std::vector<float> dummy_lse(4);
    hp.out = dummy_out.data();
    hp.lse = dummy_lse.data();
    std::vector<double> ro(out_n), rl(lse_n);
    sparse_mla_reference_cpu(hp, ro.data(), rl.data());
    res.vs_cpu_ref = compare_to_reference(out.data(), lse.data(), ro.data(), rl.data(), T, H);
    res.cpu_checked = true;
  }
  res.ok = res.vs_gpu_ref.ok() && (!res.cpu_checked || res.vs_cpu_ref.ok());

  // Time the kernel, then the gather floor (best block split) with the same timer.
  // Split-K: main + combine when splits > 1; shared rows: union pass, order pass, main (with
  // splits: union pass, main, combine).
  const int kernels = res.plan.launches;
  // --warm-code: the same plan on a one-page cache with its own q, indices, out and workspace,
  // launched after each flush: the timed call then finds its kernels' instructions cached but
  // none of its data.
  const int warm_rows = 64;
  DevicePtr w_ckv, w_kpe, w_fp8, w_qn, w_qp, w_idx, w_out, w_lse, w_ws;
  SparseMlaProblem warm = p;
  if (o.warm_code) {
    w_ckv.reset(device_copy(workload::random_bf16(size_t(warm_rows) * kCkvDim, 1.0, o.seed + 21)));
    w_kpe.reset(device_copy(workload::random_bf16(size_t(warm_rows) * kKpeDim, 1.0, o.seed + 22)));
    w_qn.reset(device_copy(q_nope));
    w_qp.reset(device_copy(q_pe));
    std::vector<int32_t> widx(size_t(T) * topk);
    for (size_t i = 0; i < widx.size(); ++i) widx[i] = static_cast<int32_t>(i % warm_rows);
    w_idx.reset(device_copy(widx));
    w_out.reset(device_copy(std::vector<uint16_t>(out_n)));
    w_lse.reset(device_copy(std::vector<float>(lse_n)));
    w_ws.reset(device_copy(std::vector<uint8_t>(std::max<size_t>(res.plan.workspace_bytes, 16))));
    warm.page_size = warm_rows; warm.num_pages = 1;
    warm.ckv_cache = w_ckv.get(); warm.kpe_cache = w_kpe.get();
    if (cache.fp8 != nullptr) {  // the same format as the timed call
      w_fp8.reset(device_copy(std::vector<uint8_t>(size_t(warm_rows) * kFp8RowBytes)));
      launch_quantize_fp8_ds_mla(static_cast<const uint16_t*>(w_ckv.get()), static_cast<const uint16_t*>(w_kpe.get()), warm_rows,
                                 static_cast<uint8_t*>(w_fp8.get()), stream);
      warm.ckv_cache = w_fp8.get();
      warm.kpe_cache = nullptr;
    }
    warm.q_nope = w_qn.get(); warm.q_pe = w_qp.get();
    warm.indices = static_cast<const int32_t*>(w_idx.get());
    warm.out = w_out.get(); warm.lse = static_cast<float*>(w_lse.get());
    timer.set_after_flush([&] { sparse_mla_forward(warm, res.plan, w_ws.get(), res.plan.workspace_bytes, stream); }, kernels);
  }
  // --warm-tlb: one word per 64 KB page of every buffer the call touches, loaded by every SM after
  // each flush: the timed call then finds its address translations cached and ~1 sector per page
  // of its data in L2 (0.05 % of the rows).
  // One sink keeps the loads of the touch and of the gather floor alive.
  unsigned* sink = nullptr;
  DSA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sink), 64));
  DevicePtr d_sink(sink);
  if (o.warm_tlb) {
    PageRanges r;
    if (cache.fp8 != nullptr) {
      r.add(cache.fp8, size_t(cache.rows()) * kFp8RowBytes);
    } else {
      r.add(cache.ckv, size_t(cache.rows()) * cache.ckv_stride() * 2);
      if (cache.joined == nullptr) r.add(cache.kpe, size_t(cache.rows()) * kKpeDim * 2);
    }
    r.add(d_qn.get(), q_nope.size() * 2);
    r.add(d_qp.get(), q_pe.size() * 2);
    r.add(d_idx.get(), indices.size() * 4);
    if (per_token_lengths) r.add(d_lengths.get(), token_lengths.size() * 4);
    r.add(d_out.get(), out_n * 2);
    r.add(d_lse.get(), lse_n * 4);
    r.add(ws, res.plan.workspace_bytes);
    timer.set_after_flush([=] { launch_touch_pages(r, size_t(64) << 10, sm_count, sink, stream); }, 1);
  }
  res.kernel = timer.time(which, [&] { sparse_mla_forward(p, res.plan, ws, res.plan.workspace_bytes, stream); },
                          kernels, o.reps, o.warmup);
  timer.set_after_flush(nullptr, 0);
  // Stage variants exist for split_k's 32-row tiles with the softmax repeated in every warp only.
  const bool split_k = res.plan.kernel == SparseMlaKernel::split_k && !res.plan.balanced && !res.plan.split_softmax &&
                       res.plan.block_keys == detail::kPlannerBlockKeys;
  if (o.timeline)  // one kernel's CTAs: a share-probe plan launches two (the forward refuses it a timeline)
    res.timeline = res.plan.share_probe.line_permille > 0 ? "none: a share-probe plan runs two kernels; force one with --kernel"
                                                          : run_timeline(p, res.plan, ws, timer, o.timeline_csv, c.name);
  if (o.host_overhead) {  // enqueue time of plan + forward in short bursts (the launch queue never fills)
    constexpr int kCalls = 16;
    double best = 1e30;
    for (int round = 0; round < 50; ++round) {
      DSA_CUDA_CHECK(cudaDeviceSynchronize());
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) sparse_mla_forward(p, plan_sparse_mla(p), ws, res.plan.workspace_bytes, stream);
      const auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
    }
    DSA_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("host us per call (plan + forward, best of 50 bursts of %d): %.2f  [%s]\n", kCalls, best, c.name.c_str());
  }
  if (o.stage != "full" && split_k) {  // stage dissection: variants that stop early, same timer
    for (int st = 0; st < 4; ++st) {
      if (o.stage != "all" && o.stage != kStageNames[st]) continue;
      const Timing t = timer.time(
          which, [&] { detail::sparse_mla_forward_stage(p, res.plan, ws, res.plan.workspace_bytes, stream, st); }, kernels,
          o.reps, o.warmup);
      res.stage_us.emplace_back(kStageNames[st], t.median_us);
    }
  }
  if (o.kernel_only) return res;
  if (res.cpu_checked) check_floor_rows(cache, indices, d_idx.get(), T, topk, sink);  // the host has the cache
  // The floor: the gather probe at its best block split over the case's indices, then over the
  // same lists in row order. `lists` lists of `len` positions (the case's: T x topk).
  const auto gather_lists = [&](const int32_t* idx_ptr, int lists, int len, bool l2_only) {
    std::vector<int> candidates;
    for (int splits : {1, 2, 4, 8, 16, 32, 64, 128}) {
      if (int64_t(lists) * splits > 400000 || splits > len) continue;
      if (int64_t(lists) * splits < sm_count / 2 && splits != 64 && splits * 2 <= len) continue;  // too few blocks
      candidates.push_back(splits);
    }
    return faster_loop_shape([&](int rows_in_flight) {
      return best_split(candidates, o, [&](int splits, int reps, int warmup) {
        return timer.time(
            which,
            [&] {
              launch_gather_rows(cache.floor_rows(), idx_ptr, lists, len, int(cache.rows()), splits, sink, stream, l2_only,
                                 rows_in_flight);
            },
            1, reps, warmup);
      });
    });
  };
  const auto gather_floor = [&](const int32_t* idx_ptr) { return gather_lists(idx_ptr, T, topk, false); };
  std::tie(res.gather, res.gather_splits) = gather_floor(static_cast<const int32_t*>(d_idx.get()));
  std::vector<int32_t> in_row_order = indices;
  const int row_order_shift = detail::row_order_key_bits(cache.rows()).shift;
  for (int t = 0; t < T; ++t)  // rows by their top bits, then the entries that name none
    std::stable_sort(in_row_order.begin() + size_t(t) * topk, in_row_order.begin() + size_t(t + 1) * topk,
                     [&](int32_t a, int32_t b) {
                       const bool va = detail::names_a_row(a, int(cache.rows())), vb = detail::names_a_row(b, int(cache.rows()));
                       return va && (!vb || (a >> row_order_shift) < (b >> row_order_shift));
                     });
  DevicePtr d_idx_row_order(device_copy(in_row_order));
  res.gather_row_order = gather_floor(static_cast<const int32_t*>(d_idx_row_order.get())).first;
  for (int G : o.union_groups) {  // the union floor: one list per group of G tokens, -1 padded
    const std::vector<std::vector<int32_t>> unions = analysis::group_unions(indices, T, topk, cache.rows(), G);
    const int groups = static_cast<int>(unions.size());
    Result::UnionFloor u;
    u.group = G;
    for (int g = 0; g < groups; ++g) {
      u.rows += int64_t(unions[g].size());
      u.mma_work += double(std::min(G, T - g * G)) * double(unions[g].size());  // the group's tokens x its union
    }
    u.mma_work /= std::max<double>(1, double(res.entries));
    size_t len = 1;
    for (const auto& rows : unions) len = std::max(len, rows.size());
    std::vector<int32_t> padded(size_t(groups) * len, -1);
    for (int g = 0; g < groups; ++g) std::copy(unions[g].begin(), unions[g].end(), padded.begin() + size_t(g) * len);
    DevicePtr d_union(device_copy(padded));
    const auto* ptr = static_cast<const int32_t*>(d_union.get());
    u.through_l1 = gather_lists(ptr, groups, int(len), false).first;
    u.l2_only = gather_lists(ptr, groups, int(len), true).first;
    res.union_floors.push_back(u);
  }
  // The output floors over both orders: a kernel may read its rows in either. A floor is
  // {timing, its split}, split 0 where it was not measured.
  const auto faster = [](const std::pair<Timing, int>& a, const std::pair<Timing, int>& b) {
    return b.second > 0 && (a.second == 0 || b.first.median_us < a.first.median_us) ? b : a;
  };
  const auto output_in_index_order = output_floor(cache, d_idx.get(), T, topk, timer, which, o, sm_count, sink);
  const auto output_in_row_order = output_floor(cache, d_idx_row_order.get(), T, topk, timer, which, o, sm_count, sink);
  std::tie(res.output_floor, res.output_splits) = faster(output_in_index_order, output_in_row_order);
  const auto per_token_in_index_order = per_token_floor(cache, d_idx.get(), most_valid, T, topk, timer, which, o, sm_count, sink);
  const auto per_token_in_row_order =
      per_token_floor(cache, d_idx_row_order.get(), most_valid, T, topk, timer, which, o, sm_count, sink);
  std::tie(res.per_token_floor, res.per_token_rows) = faster(per_token_in_index_order, per_token_in_row_order);
  return res;
}

// The kernel's time over the gather floor's; 0 where the floor was not timed (--kernel-only).
double ratio_to_gather(const Result& r) { return r.gather.median_us > 0 ? r.kernel.median_us / r.gather.median_us : 0.0; }

double useful_tflops(const Result& r, double us) {
  return double(r.entries) * r.c.num_heads * (kCkvDim + kKpeDim + kCkvDim) * 2 / (us * 1e-6) / 1e12;
}

// Cases whose plan has no stage variants (shared rows, balanced, a split softmax, other tiles) show "-".
void print_stage_table(const std::vector<Result>& results, FILE* f) {
  const auto first = std::find_if(results.begin(), results.end(), [](const Result& r) { return !r.stage_us.empty(); });
  if (first == results.end()) return;
  std::fprintf(f, "\nstage dissection (median us; each variant stops after the named stage)\n%-18s", "case");
  for (const auto& [name, us] : first->stage_us) std::fprintf(f, " %9s", name.c_str());
  std::fprintf(f, " %9s\n", "gather");
  for (const Result& r : results) {
    std::fprintf(f, "%-18s", r.c.name.c_str());
    if (r.stage_us.empty())
      for (size_t i = 0; i < first->stage_us.size(); ++i) std::fprintf(f, " %9s", "-");
    for (const auto& [name, us] : r.stage_us) std::fprintf(f, " %9.1f", us);
    std::fprintf(f, " %9.1f\n", r.gather.median_us);
  }
}

void print_union_table(const std::vector<Result>& results, FILE* f) {
  bool any = false;
  for (const Result& r : results) any |= !r.union_floors.empty();
  if (!any) return;
  std::fprintf(f, "\nunion floor: each group of G consecutive tokens reads the union of its rows once (row order)\n");
  std::fprintf(f, "%-18s %4s %10s %8s %10s %10s %8s %10s %8s\n", "case", "G", "rows", "GB", "MMA work", "L1 us", "TB/s",
               "L2-only us", "TB/s");
  for (const Result& r : results)
    for (const Result::UnionFloor& u : r.union_floors) {
      const double gb = double(u.rows) * kRowBytes / 1e9;
      std::fprintf(f, "%-18s %4d %10lld %8.2f %9.2fx %10.1f %8.2f %10.1f %8.2f\n", r.c.name.c_str(), u.group, (long long)u.rows,
                   gb, u.mma_work, u.through_l1.median_us, gb / (u.through_l1.median_us * 1e-6) / 1e3, u.l2_only.median_us,
                   gb / (u.l2_only.median_us * 1e-6) / 1e3);
    }
}

// The cases a larger T of the same problem beat by more than 10 % (cliffs.h).
void print_cliffs(const std::vector<Result>& results, FILE* f) {
  std::vector<const BenchCase*> cases;
  std::vector<double> us;
  for (const Result& r : results) cases.push_back(&r.c), us.push_back(r.kernel.median_us);
  const std::vector<Cliff> cliffs = find_cliffs(cases, us);
  if (!cliffs.empty()) std::fprintf(f, "\ncliffs: slower by > 10 %% than a case with more tokens and otherwise the same problem\n");
  for (const Cliff& c : cliffs) {
    const Result &slow = results[c.slow], &fast = results[c.fast];
    std::fprintf(f, "  %-24s %7s %8.1f us > %-24s %7s %8.1f us (%.2fx)\n", slow.c.name.c_str(), plan_label(slow.plan).c_str(),
                 slow.kernel.median_us, fast.c.name.c_str(), plan_label(fast.plan).c_str(), fast.kernel.median_us,
                 slow.kernel.median_us / fast.kernel.median_us);
  }
}

void print_table(const std::vector<Result>& results, FILE* f) {
  std::fprintf(f, "%-18s %5s %4s %8s %7s %-7s %9s %9s %22s %13s %9s %6s %9s %9s %10s %7s %7s  %s\n", "case", "T", "H", "rows",
               "plan", "verify", "rel_l2", "lse_err", "kernel us (range)", "per kernel", "gather us", "ratio", "row-order",
               "output", "per-token", "GB/s", "TFLOP/s", "target");
  for (const Result& r : results) {
    char range[48];
    const std::string plan = plan_label(r.plan);
    std::snprintf(range, sizeof range, "%.1f (%.1f-%.1f)", r.kernel.median_us, r.kernel.min_us, r.kernel.max_us);
    std::string parts;  // each kernel's span, in launch order
    for (double us : r.kernel.per_kernel_median_us) {
      char one[24];
      std::snprintf(one, sizeof one, "%s%.1f", parts.empty() ? "" : "+", us);
      parts += one;
    }
    if (parts.empty()) parts = "-";
    const double gbs = double(r.entries) * kRowBytes / (r.kernel.median_us * 1e-6) / 1e9;
    char output[24] = "-";  // output floor (us/splits)
    if (r.output_splits > 0) std::snprintf(output, sizeof output, "%.1f/%d", r.output_floor.median_us, r.output_splits);
    char per_token[24] = "-";  // per-token output floor (us/rows per block)
    if (r.per_token_rows > 0) std::snprintf(per_token, sizeof per_token, "%.1f/%d", r.per_token_floor.median_us, r.per_token_rows);
    std::fprintf(f, "%-18s %5d %4d %8lld %7s %-7s %9.2e %9.2e %22s %13s %9.1f %6.2f %9.1f %9s %10s %7.0f %7.1f  %s\n", r.c.name.c_str(),
                 r.c.indices.num_tokens, r.c.num_heads, static_cast<long long>(r.entries), plan.c_str(),
                 r.ok ? (r.cpu_checked ? "ok+cpu" : "ok") : "FAIL", r.vs_gpu_ref.rel_l2_err, r.vs_gpu_ref.max_lse_err,
                 range, parts.c_str(), r.gather.median_us, ratio_to_gather(r), r.gather_row_order.median_us,
                 output, per_token, gbs, useful_tflops(r, r.kernel.median_us),
                 r.c.target.c_str());
  }
}

// Each case's kernels (--kernel-starts): name start-end, in the order they start, µs after the
// call's first start. Where a kernel starts before the one before it ends, dependent launch
// overlapped them; where it starts after, the gap is launch latency or a wait.
void print_kernel_starts(const std::vector<Result>& results, FILE* f) {
  for (const Result& r : results) {
    const Timing& t = r.kernel;
    if (t.kernel_names.empty()) continue;
    std::fprintf(f, "kernels %s (%s, %.1f us):", r.c.name.c_str(), plan_label(r.plan).c_str(), t.median_us);
    for (size_t k = 0; k < t.kernel_names.size(); ++k)
      std::fprintf(f, "%s %s %.1f-%.1f", k == 0 ? "" : ",", t.kernel_names[k].c_str(), t.per_kernel_start_us[k], t.per_kernel_end_us[k]);
    std::fprintf(f, "\n");
  }
}

nlohmann::json to_json(const Result& r) {
  auto timing = [](const Timing& t) {
    return nlohmann::json{{"median_us", t.median_us},
                          {"min_us", t.min_us},
                          {"max_us", t.max_us},
                          {"reps", t.reps},
                          {"timer", to_string(t.timer)},
                          {"per_kernel_median_us", t.per_kernel_median_us},
                          {"per_kernel_start_us", t.per_kernel_start_us},
                          {"per_kernel_end_us", t.per_kernel_end_us},
                          {"kernel_names", t.kernel_names}};
  };
  auto agreement = [](const Agreement& a) {
    return nlohmann::json{{"ok", a.ok()}, {"failed_elements", a.failed_elements}, {"non_finite", a.non_finite},
                          {"max_abs_err", a.max_abs_err}, {"rel_l2_err", a.rel_l2_err}, {"max_lse_err", a.max_lse_err},
                          {"lse_mismatch", a.lse_mismatch}};
  };
  nlohmann::json j{{"case", r.c.name},
                   {"num_tokens", r.c.indices.num_tokens},
                   {"num_heads", r.c.num_heads},
                   {"topk", r.c.indices.topk},
                   {"list_length", r.plan.topk},  // the positions the call read (--list-length)
                   {"min_valid_entries", r.min_valid_entries},  // the planner's hint (--min-valid)
                   {"page_size", r.c.indices.page_size},
                   {"num_pages", r.c.indices.num_pages},
                   {"pattern", workload::to_string(r.c.indices.pattern)},
                   {"entries", r.entries},
                   {"plan", {{"kernel", kernel_name(r.plan)}, {"block_keys", r.plan.block_keys}, {"splits", r.plan.splits}, {"chunk", r.plan.chunk}, {"fused_rows", r.plan.fused_rows}, {"lead_tokens", r.plan.lead_tokens}, {"lead_splits", r.plan.lead_splits}, {"row_order", r.plan.row_order}, {"balanced", r.plan.balanced}, {"split_softmax", r.plan.split_softmax}, {"early_issue", r.plan.early_issue}, {"share_probe_line_permille", r.plan.share_probe.line_permille}}},
                   {"ok", r.ok},
                   {"vs_gpu_reference", agreement(r.vs_gpu_ref)},
                   {"kernel", timing(r.kernel)},
                   {"gather_floor", timing(r.gather)},
                   {"gather_splits", r.gather_splits},
                   {"ratio_to_gather", ratio_to_gather(r)},
                   {"gather_floor_row_order", timing(r.gather_row_order)},
                   {"output_floor", r.output_splits > 0 ? timing(r.output_floor) : nlohmann::json()},
                   {"output_floor_splits", r.output_splits},
                   {"output_floor_per_token", r.per_token_rows > 0 ? timing(r.per_token_floor) : nlohmann::json()},
                   {"output_floor_per_token_rows", r.per_token_rows},
                   {"bytes_gathered", r.entries * kRowBytes},
                   {"useful_tflops", useful_tflops(r, r.kernel.median_us)},
                   {"target", r.c.target}};
  if (r.cpu_checked) j["vs_cpu_reference"] = agreement(r.vs_cpu_ref);
  for (const auto& [name, us] : r.stage_us) j["stage_median_us"][name] = us;
  for (const Result::UnionFloor& u : r.union_floors)
    j["union_floors"].push_back({{"group", u.group}, {"union_rows", u.rows}, {"mma_work", u.mma_work},
                                 {"through_l1", timing(u.through_l1)}, {"l2_only", timing(u.l2_only)}});
  return j;
}

// Every row carries the run's context (device, clocks, driver, commit) so rows stand alone.
void write_csv(const std::vector<Result>& results, const std::string& path, const std::string& context_header,
               const std::string& context) {
  std::ofstream f(path);
  if (!f) throw Error("--csv: cannot write " + path);
  f << context_header
    << "case,T,H,topk,entries,block_keys,splits,ok,rel_l2,lse_err,timer,kernel_us,kernel_min_us,kernel_max_us,gather_us,"
       "ratio,useful_tflops,gather_row_order_us,output_floor_us,output_floor_splits,"
       "output_floor_per_token_us,output_floor_per_token_rows\n";
  for (const Result& r : results)
    f << context << r.c.name << ',' << r.c.indices.num_tokens << ',' << r.c.num_heads << ',' << r.c.indices.topk << ',' << r.entries
      << ',' << r.plan.block_keys << ',' << r.plan.splits << ',' << r.ok << ',' << r.vs_gpu_ref.rel_l2_err << ','
      << r.vs_gpu_ref.max_lse_err << ',' << to_string(r.kernel.timer) << ',' << r.kernel.median_us << ','
      << r.kernel.min_us << ',' << r.kernel.max_us << ',' << r.gather.median_us << ','
      << ratio_to_gather(r) << ',' << useful_tflops(r, r.kernel.median_us) << ','
      << r.gather_row_order.median_us << ',' << (r.output_splits > 0 ? r.output_floor.median_us : 0.0) << ','
      << r.output_splits << ',' << (r.per_token_rows > 0 ? r.per_token_floor.median_us : 0.0) << ',' << r.per_token_rows
      << '\n';
}

// No GPU: say so, and still show the reference working on the smoke suite.
int run_without_gpu(const Options& o) {
  std::printf("dsa-bench: no CUDA device; running the CPU reference on the smoke suite instead\n");
  for (BenchCase c : builtin_suite("smoke")) {
    auto& s = c.indices;
    const int64_t rows = int64_t(s.num_pages) * s.page_size;
    const auto idx = workload::make_indices(s, o.seed);
    const auto qn = workload::random_bf16(size_t(s.num_tokens) * c.num_heads * kCkvDim, 1.0, o.seed + 11);
    const auto qp = workload::random_bf16(size_t(s.num_tokens) * c.num_heads * kKpeDim, 1.0, o.seed + 12);
    const auto ckv = workload::random_bf16(size_t(rows) * kCkvDim, 0.5, o.seed + 3);
    const auto kpe = workload::random_bf16(size_t(rows) * kKpeDim, 0.5, o.seed + 4);
    std::vector<uint16_t> out(16);
    std::vector<float> lse(4);
    SparseMlaProblem p;
    p.num_tokens = s.num_tokens; p.num_heads = c.num_heads; p.topk = s.topk;
    p.page_size = s.page_size; p.num_pages = s.num_pages; p.sm_scale = c.sm_scale;
    p.q_nope = qn.data(); p.q_pe = qp.data(); p.ckv_cache = ckv.data(); p.kpe_cache = kpe.data();
    p.indices = idx.data(); p.out = out.data(); p.lse = lse.data();
    std::vector<double> ro(size_t(s.num_tokens) * c.num_heads * kCkvDim), rl(size_t(s.num_tokens) * c.num_heads);
    sparse_mla_reference_cpu(p, ro.data(), rl.data());
    std::printf("%-20s T=%d H=%d topk=%d  lse[0]=%.4f out[0][0]=%.4f\n", c.name.c_str(), s.num_tokens, c.num_heads,
                s.topk, rl[0], ro[0]);
  }
  return 0;
}

void plot(const std::vector<Result>& results, const std::string& png);

int run(const Options& o) {
  const std::vector<BenchCase> cases = select_cases(o);  // bad inputs fail here, GPU or not
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return run_without_gpu(o);
  const Timer which = parse_timer(o.timer);
  cudaDeviceProp prop{};
  DSA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  int sm_clock_khz = 0, mem_clock_khz = 0;  // peak clocks the device reports (attributes, not live readings)
  cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  std::printf("device %s, %d SMs, L2 %d MB, SM clock %d MHz / memory clock %d MHz (peak), DRAM %d GB/s (peak, as the planner "
              "sees it), driver %d, runtime %d, commit %s\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, sm_clock_khz / 1000, mem_clock_khz / 1000,
              DeviceInfo::from_device(0).memory_bandwidth_gbs, driver, runtime, DSA_GIT_COMMIT);
  std::printf("timer %s, L2 %s before each call, %d reps (median, min-max), KV cache %s, index_sharing %s\n", to_string(which),
              o.no_flush ? "NOT flushed" : "flushed", o.reps,
              o.kv == "fp8"                   ? "fp8_ds_mla (656-byte rows; the floors read them)"
              : o.cache_layout == "joined" ? "bf16, joined ckv | kpe rows (1152 B; the floors read them)"
                                           : "bf16",
              o.sharing == "auto" ? "auto (consecutive for shared-prefix cases, else unknown)" : o.sharing.c_str());

  KernelTimer timer(bench_stream(), !o.no_flush);
  // Fixed costs no kernel of this shape can avoid: an empty launch, and one that asks for the
  // shared memory of the split-K kernel (after the L2-flushing memset the SM must re-carve L1).
  const double empty_us = timer.time(which, [] { launch_empty(64, 0, bench_stream()); }, 1, o.reps, o.warmup).median_us;
  const double empty_smem_us =
      timer.time(which, [] { launch_empty(64, 100 * 1024, bench_stream()); }, 1, o.reps, o.warmup).median_us;
  std::printf("launch floor: empty kernel %.1f us, with 100 KB shared memory %.1f us (64 blocks)\n", empty_us,
              empty_smem_us);
  std::map<std::pair<int, int>, std::unique_ptr<Cache>> caches;
  std::vector<Result> results;
  double stream_gbs = 0;
  for (const BenchCase& c : cases) {
    auto& cache = caches[{c.indices.num_pages, c.indices.page_size}];
    if (!cache) {
      cache = std::make_unique<Cache>();
      cache->num_pages = c.indices.num_pages;
      cache->page_size = c.indices.page_size;
      cache->allocate_bf16(o.cache_layout == "joined", o.seed + 3);
      if (o.kv == "fp8") {
        DSA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&cache->fp8), cache->rows() * kFp8RowBytes));
        launch_quantize_fp8_ds_mla(cache->ckv, cache->kpe, cache->rows(), cache->fp8, nullptr);
      }
      if (stream_gbs == 0 && cache->rows() * kCkvDim * 2 >= (size_t(256) << 20)) {
        unsigned* sink = nullptr;
        DSA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sink), 64));
        const size_t bytes = cache->rows() * kCkvDim * 2;
        const Timing t = timer.time(Timer::events, [&] { launch_stream_read(cache->ckv, bytes, prop.multiProcessorCount, sink, bench_stream()); },
                                    1, 10, 2);
        stream_gbs = bytes / (t.median_us * 1e-6) / 1e9;
        cudaFree(sink);
        std::printf("streaming read of %.0f MB: %.0f GB/s (events)\n", bytes / 1e6, stream_gbs);
      }
    }
    std::fprintf(stderr, "[%zu/%zu] %s\n", results.size() + 1, cases.size(), c.name.c_str());
    results.push_back(run_case(c, *cache, timer, which, o, prop.multiProcessorCount));
  }
  std::printf("\n");
  print_table(results, stdout);
  print_stage_table(results, stdout);
  print_union_table(results, stdout);
  print_cliffs(results, stdout);
  if (o.kernel_starts) print_kernel_starts(results, stdout);
  for (const Result& r : results)
    if (!r.timeline.empty()) std::printf("timeline %s: %s\n", r.c.name.c_str(), r.timeline.c_str());
  bool all_ok = true;
  for (const Result& r : results) {
    if (!r.ok) {
      all_ok = false;
      std::printf("FAIL %s: vs GPU reference %s%s%s\n", r.c.name.c_str(), r.vs_gpu_ref.summary().c_str(),
                  r.cpu_checked ? "; vs CPU reference " : "", r.cpu_checked ? r.vs_cpu_ref.summary().c_str() : "");
    }
  }
  if (!o.json_path.empty()) {
    nlohmann::json j{{"device", prop.name}, {"sm_count", prop.multiProcessorCount}, {"driver", driver},
                     {"sm_clock_peak_mhz", sm_clock_khz / 1000}, {"memory_clock_peak_mhz", mem_clock_khz / 1000},
                     {"runtime", runtime}, {"commit", DSA_GIT_COMMIT}, {"timer", to_string(which)},
                     {"l2_flushed", !o.no_flush}, {"stream_read_gbs", stream_gbs}, {"empty_kernel_us", empty_us},
                     {"empty_kernel_100kb_smem_us", empty_smem_us}, {"cases", nlohmann::json::array()}};
    for (const Result& r : results) j["cases"].push_back(to_json(r));
    std::ofstream f(o.json_path);
    if (!f) throw Error("--json: cannot write " + o.json_path);
    f << j.dump(2) << '\n';
  }
  if (!o.csv_path.empty())
    write_csv(results, o.csv_path, "device,sm_clock_peak_mhz,memory_clock_peak_mhz,driver,commit,",
              std::string(prop.name) + "," + std::to_string(sm_clock_khz / 1000) + "," +
                  std::to_string(mem_clock_khz / 1000) + "," + std::to_string(driver) + "," + DSA_GIT_COMMIT + ",");
  if (!o.plot_path.empty()) plot(results, o.plot_path);
  return all_ok ? 0 : 1;
}

// --export DIR: the selected cases as a FlashInfer-Bench workload set (JSONL + safetensors).
int run_export(const Options& o) {
  std::vector<fib::Workload> out;
  for (const BenchCase& c : select_cases(o)) {
    fib::Workload w;
    w.num_heads = c.num_heads;
    w.topk = c.indices.topk;
    w.page_size = c.indices.page_size;
    w.num_tokens = c.indices.num_tokens;
    w.num_pages = c.indices.num_pages;
    w.sm_scale = c.sm_scale;
    w.uuid = (o.T > 0 || !o.workload_path.empty() || !o.shapes.empty() ? std::string("custom") : o.suite) + "-" + c.name;
    w.indices = case_indices(c, o.seed);
    out.push_back(std::move(w));
  }
  const std::string name = o.T > 0 || !o.shapes.empty() ? "custom" : o.suite;
  fib::write_workloads(out, o.export_dir, name);
  std::printf("wrote %zu workloads to %s/%s.jsonl\n", out.size(), o.export_dir.c_str(), name.c_str());
  return 0;
}

// inspect: what the indices of each case look like, and how the planner would split the work.
int run_inspect(const Options& o, int tokens_shown) {
  DeviceInfo dev{132, 232448, 9, 0};  // an H100 unless a device says otherwise
  std::string dev_name = "H100 (described)";
  int64_t l2_bytes = int64_t{50} << 20;  // the H100's
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    dev = DeviceInfo::from_device(0);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) dev_name = prop.name, l2_bytes = prop.l2CacheSize;
  }
  for (const BenchCase& c : select_cases(o)) {
    const auto& s = c.indices;
    const int64_t rows = int64_t(s.num_pages) * s.page_size;
    const auto idx = case_indices(c, o.seed);
    std::vector<analysis::TokenStats> per;
    const analysis::Summary sum = analysis::summarize(idx, s.num_tokens, s.topk, rows, s.page_size, &per);
    std::printf("== %s: T=%d H=%d topk=%d page_size=%d pages=%d (%lld rows)\n", c.name.c_str(), s.num_tokens,
                c.num_heads, s.topk, s.page_size, s.num_pages, static_cast<long long>(rows));
    std::printf("%6s %6s %6s %6s %8s %6s %6s %6s %7s %6s %5s\n", "token", "valid", "pad", "oor", "1st pad", "packed",
                "sorted", "runs", "longest", "pages", "dups");
    for (int t = 0; t < std::min(tokens_shown, s.num_tokens); ++t) {
      const auto& ts = per[t];
      std::printf("%6d %6d %6d %6d %8d %6s %6s %6d %7d %6d %5d\n", t, ts.valid, ts.padding, ts.out_of_range,
                  ts.first_padding, ts.left_packed ? "yes" : "no", ts.sorted ? "yes" : "no", ts.runs, ts.longest_run,
                  ts.pages_touched, ts.duplicates);
    }
    if (s.num_tokens > tokens_shown) std::printf("   ... %d more tokens (--tokens N)\n", s.num_tokens - tokens_shown);
    std::printf("summary: valid %lld (per token min %d median %d max %d), padding %lld, out-of-range %lld, "
                "duplicates %lld, empty tokens %d\n",
                static_cast<long long>(sum.valid), sum.min_valid, sum.median_valid, sum.max_valid,
                static_cast<long long>(sum.padding), static_cast<long long>(sum.out_of_range),
                static_cast<long long>(sum.duplicates), sum.tokens_empty);
    if (sum.list_length < s.topk)
      std::printf("         list length %d: every valid entry sits in the first %d of the %d positions; a call with "
                  "topk = %d over the same lists (stride %d) plans for that (dsa-bench --list-length %d)\n",
                  sum.list_length, sum.list_length, s.topk, std::max(sum.list_length, 1), s.topk, std::max(sum.list_length, 1));
    std::printf("         left-packed tokens %d/%d, sorted %d/%d, mean runs %.1f (longest %.1f), mean pages %.1f, "
                "pages touched %lld\n",
                sum.tokens_left_packed, s.num_tokens, sum.tokens_sorted, s.num_tokens, sum.mean_runs,
                sum.mean_longest_run, sum.mean_pages, static_cast<long long>(sum.pages_touched));
    // Whether the distinct rows fit in L2 says where repeats can come from. Likely why shared rows
    // gained less on an 8192-row prefix than on MTP batches (a reading, not measured: split-K ran
    // ~32 % faster on the prefix at the same T, e.g. 334.6 against 490.4 us at T = 600, run 528).
    const int64_t unique_bytes = sum.unique_rows * kRowBytes;
    std::printf("         unique rows %lld: %.1f%% of valid entries are rows another entry also reads; %.1f MB as bf16 "
                "rows, %s L2 (%lld MB)\n",
                static_cast<long long>(sum.unique_rows), 100.0 * sum.shared_fraction(), unique_bytes / 1048576.0,
                unique_bytes <= l2_bytes ? "within" : "beyond", static_cast<long long>(l2_bytes >> 20));
    static_assert(analysis::kGroupTokens == detail::kSharedRowsBlocks, "the analysis groups tokens as the kernel does at 16 heads");
    // Where shared rows (the consecutive hint) won: it depends on where the rows lie too, since
    // split-K reads the repeats of an L2-resident prefix from L2 (perf.md runs 118, 528, 555; on
    // the H200, prefixes and random lists of 512-2048 at T = 2048, runs 686-687).
    std::printf("         %d-token groups: unions of %.1f%% of their valid entries (100%%: no sharing; on an H100 bf16 "
                "shared rows won at ~60%% (MTP batches) and at 25-67%% on prefixes, came out even at ~67-88%% "
                "between waves and at ~80%% on prefixes, lost at ~91%%; on an H200 they won up to ~65%% and lost "
                "from ~77%%; an fp8_ds_mla cache's came out even at ~50-55%% and lost above; perf.md runs 118, "
                "528, 555, 686-687)\n",
                analysis::kGroupTokens, 100.0 * sum.group_union_ratio());
    // What a probe reading a few groups would see (docs/design.md: a next design for unhinted calls).
    std::printf("         sampled: %d groups spread over the call give %.1f%%", kInspectSampledGroups,
                100.0 * analysis::sampled_group_union_ratio(idx, s.num_tokens, s.topk, rows, kInspectSampledGroups));
    if (devices > 0 && s.topk <= SparseMlaPlan::kMaxChunk && s.num_tokens > 0) {
      // The same on the device (sample_group_sharing), and its time: one kernel, timed as the
      // forward calls are (--timer, --reps, the L2 flushed unless --no-flush).
      DevicePtr d_idx(device_copy(idx));
      DevicePtr d_counts = device_alloc(2 * sizeof(long long));
      const auto probe = [&] {
        sample_group_sharing(static_cast<const int32_t*>(d_idx.get()), s.num_tokens, s.topk, s.topk, rows,
                             kInspectSampledGroups, static_cast<long long*>(d_counts.get()), bench_stream());
      };
      DSA_CUDA_CHECK(cudaMemset(d_counts.get(), 0, 2 * sizeof(long long)));
      probe();
      const std::vector<long long> counts = host_copy(static_cast<const long long*>(d_counts.get()), 2);
      KernelTimer timer(bench_stream(), !o.no_flush);
      const Timing t = timer.time(parse_timer(o.timer), probe, 1, o.reps, o.warmup);
      std::printf("; on the device (sample_group_sharing) %.1f%% in %.1f us (%s, median of %d)",
                  counts[1] > 0 ? 100.0 * double(counts[0]) / double(counts[1]) : 100.0, t.median_us, to_string(t.timer), t.reps);
    }
    std::printf("\n");
    const int list_length = resolve_list_length(o, c.name, s.topk, sum.list_length - 1);
    if (list_length < s.topk) std::printf("--list-length %s: planned as topk %d\n", o.list_length.c_str(), list_length);
    const int min_valid = resolve_min_valid(o, list_length, sum.min_valid);
    if (min_valid > 0) std::printf("--min-valid %s: planned with min_valid_entries %d\n", o.min_valid.c_str(), min_valid);
    const SparseMlaPlan plan = plan_sparse_mla(s.num_tokens, c.num_heads, list_length, dev, {}, index_sharing(o, c),
                                               KvCacheFormat::bf16, min_valid);
    if (plan.kernel == SparseMlaKernel::shared_rows) {
      // The passes before the main kernel: see SparseMlaPlan::union_pass.
      const char* passes = !plan.union_pass ? "" : plan.splits > 1 ? "a union pass, then " : "a union pass, an order pass, then ";
      // A group's layout (at 32 heads without a union pass: one token, 32 idle rows).
      const int group_heads = detail::shared_rows_group_heads(c.num_heads, plan.union_pass);
      const int tokens = detail::shared_rows_tokens_per_group(group_heads);
      const int heads = std::min(c.num_heads, detail::kSharedRowsBlocks * kHeadGroup / tokens);
      std::printf("planner (%s, index_sharing %s): shared-rows kernel, %s%d CTAs of %d token%s x "
                  "%d heads%s%s, %d-entry union tiles, workspace %zu bytes%s\n",
                  dev_name.c_str(), sharing_name(o, c).c_str(), passes, plan.ctas, tokens, tokens > 1 ? "s" : "", heads,
                  group_heads != c.num_heads ? " (+ 32 idle rows)" : "",
                  plan.splits > 1 && plan.lead_tokens == 0 ? (" x " + std::to_string(plan.splits) + " splits").c_str() : "", plan.block_keys,
                  plan.workspace_bytes, plan.lead_splits > 1 ? ", + 2 combine kernels" : plan.splits > 1 ? ", + combine kernel" : "");
      if (plan.lead_tokens > 0)
        std::printf("         lead tokens 0-%d in %d split%s each (their CTAs first), tokens %d-%d in %d\n", plan.lead_tokens - 1,
                    plan.lead_splits, plan.lead_splits > 1 ? "s" : "", plan.lead_tokens, s.num_tokens - 1, plan.splits);
      if (plan.row_order) std::printf("         row order: the union pass sorts each token's rows by the row's top bits\n");
      if (plan.share_probe.line_permille > 0) {
        // SparseMlaPlan::share_probe: which kernel the forward will run, from the same groups
        // (the device hashes caches of more than 2^17 rows: within ~0.4 points of this).
        const double share = analysis::sampled_group_union_ratio(idx, s.num_tokens, s.topk, rows, detail::kShareProbeSamples);
        const SparseMlaPlan::ShareProbe& sp = plan.share_probe;
        std::printf("         share probe: shared rows where the sampled groups' unions hold <= %.1f%% of their entries, else "
                    "split-K in one split (%d-row tiles%s%s); here %.1f%%: %s\n",
                    sp.line_permille / 10.0, sp.split_k_block_keys, sp.split_k_row_order ? ", row order" : "",
                    sp.split_k_split_softmax ? ", split softmax" : "", 100.0 * share,
                    share * 1000 <= sp.line_permille ? "shared rows" : "split-K");
      }
      continue;
    }
    if (plan.lead_tokens == 0)
      std::printf("planner (%s, index_sharing %s): %d CTAs = %d tokens x %d head groups x %d splits of %d positions, "
                  "%d-row tiles, workspace %zu bytes%s\n",
                  dev_name.c_str(), sharing_name(o, c).c_str(), plan.ctas, s.num_tokens, c.num_heads / kHeadGroup, plan.splits, plan.chunk,
                  plan.block_keys, plan.workspace_bytes, plan.splits > 1 ? ", + combine kernel" : "");
    else  // SparseMlaPlan::lead_tokens: the lead tokens' CTAs first, a combine per set that splits
      std::printf("planner (%s, index_sharing %s): %d CTAs = (%d lead tokens x %d split%s + %d tokens x %d splits of %d positions) "
                  "x %d head groups, %d-row tiles, workspace %zu bytes, + %d combine kernel%s\n",
                  dev_name.c_str(), sharing_name(o, c).c_str(), plan.ctas, plan.lead_tokens, plan.lead_splits,
                  plan.lead_splits > 1 ? "s" : "", s.num_tokens - plan.lead_tokens, plan.splits, plan.chunk, c.num_heads / kHeadGroup,
                  plan.block_keys, plan.workspace_bytes, plan.lead_splits > 1 ? 2 : 1, plan.lead_splits > 1 ? "s" : "");
    if (plan.fused_rows > 0) {
      int fused = 0;
      for (const auto& ts : per) fused += ts.valid <= plan.fused_rows ? 1 : 0;
      std::printf("         fused rows: %d of %d tokens have <= %d valid rows and finish in one CTA, unmerged\n", fused,
                  s.num_tokens, plan.fused_rows);
    }
    if (plan.row_order) std::printf("         row order: each CTA sorts its rows by the row's top bits before gathering them\n");
  }
  return 0;
}

// --plot: latency, gather floor and their ratio against T, through gnuplot when installed.
void plot(const std::vector<Result>& results, const std::string& png) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("--plot: gnuplot not found (apt-get install gnuplot-nox); no plot written\n");
    return;
  }
  const std::string data = png + ".dat", script = png + ".gp";
  {
    std::ofstream d(data);
    d << "# T kernel_us gather_us ratio case\n";
    for (const Result& r : results)
      d << r.c.indices.num_tokens << ' ' << r.kernel.median_us << ' ' << r.gather.median_us << ' '
        << ratio_to_gather(r) << ' ' << r.c.name << '\n';
    std::ofstream g(script);
    g << "set terminal pngcairo size 900,560\nset output '" << png << "'\n"
      << "set logscale xy\nset xlabel 'tokens T'\nset ylabel 'us (median, " << to_string(results[0].kernel.timer)
      << ")'\nset y2label 'kernel / gather'\nset y2tics\nset ytics nomirror\nset key top left\n"
      << "plot '" << data << "' using 1:2 with linespoints title 'dsa kernel', '" << data
      << "' using 1:3 with linespoints title 'gather floor', '" << data
      << "' using 1:4 axes x1y2 with points pt 7 title 'ratio'\n";
  }
  const int rc = std::system(("gnuplot '" + script + "'").c_str());
  std::printf(rc == 0 ? "plot written to %s\n" : "--plot: gnuplot failed (%s)\n", png.c_str());
}

}  // namespace
}  // namespace dsa::bench

// The timing flags of the sparse command and of `dense`, registered the same way for both.
static void add_timing_flags(CLI::App& app, dsa::bench::TimingOptions& o) {
  app.add_option("--timer", o.timer, "cupti (kernel span), events, graph (calls replayed from a CUDA graph; the sparse output and per-token floors are then not measured)")->check(CLI::IsMember({"cupti", "events", "graph"}));
  app.add_option("--reps", o.reps, "timed calls per case")->check(CLI::Range(3, 100000));
  app.add_option("--warmup", o.warmup, "untimed calls first")->check(CLI::Range(0, 1000));
  app.add_flag("--no-flush", o.no_flush, "do not flush the L2 before each call");
  app.add_option("--seed", o.seed, "workload seed");
  app.add_option("--json", o.json_path, "write every figure as JSON");
}

int main(int argc, char** argv) {
  dsa::bench::Options o;
  CLI::App app{"dsa-bench: verify and time the sparse MLA kernels against the memory floor"};
  std::string suite_list;  // the help's list, from the names the check accepts
  for (const std::string& name : dsa::bench::builtin_suite_names()) suite_list += (suite_list.empty() ? "" : ", ") + name;
  app.add_option("--suite", o.suite, "built-in suite: " + suite_list)->check(CLI::IsMember(dsa::bench::builtin_suite_names()));
  add_timing_flags(app, o);
  app.add_option("--csv", o.csv_path, "write every figure as CSV");
  app.add_option("-T,--tokens", o.T, "custom case: tokens (replaces the suite)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--shape", o.shapes,
                 "cases by name, H<heads>-T<tokens>-k<topk>-<pattern> as the suites name them (comma-separated; replaces the "
                 "suite; the suites' page size and cache, so a suite case's name gives its indices)")
      ->delimiter(',');
  app.add_option("--heads", o.heads, "custom case: heads")->check(CLI::IsMember({16, 32, 64, 128}));
  app.add_option("--topk", o.topk, "custom case: topk")->check(CLI::Range(1, 1 << 20));
  app.add_option("--page-size", o.page_size, "custom case: page size")->check(CLI::Range(1, 1 << 16));
  app.add_option("--num-pages", o.num_pages, "custom case: pages in the cache")->check(CLI::Range(1, 1 << 22));
  app.add_option("--pattern", o.pattern, "custom case: index pattern (" + dsa::workload::pattern_names() + "; tools/common/workload.h)");
  app.add_option("--valid", o.valid,
                 "custom case (runs, random): valid entries per token (comma-separated; the last value for the tokens past them)")
      ->delimiter(',');
  app.add_option("--prefix-len", o.prefix_len, "custom case (shared_prefix, sequences): sequence length");
  app.add_option("--seq-tokens", o.seq_tokens, "custom case (sequences): consecutive tokens per request (MTP: 1 + drafts)")
      ->check(CLI::Range(1, 1 << 20));
  const char* list_length_help =
      "off, L or auto: call with topk = L over each list's first L positions (the lists' stride unchanged), as a "
      "caller does whose tokens' valid entries all sit there (short contexts); auto: each case's own (its last valid "
      "entry's position + 1); L is refused for a case with valid entries further on; tokens: topk unchanged, each "
      "token's own length passed (topk_lengths: its last valid entry's position + 1)";
  const auto list_length_values = CLI::IsMember({"off", "auto", "tokens"}) | CLI::Range(1, 1 << 20);
  app.add_option("--list-length", o.list_length, list_length_help)->check(list_length_values);
  const char* min_valid_help =
      "off, N or auto: the planner's hint SparseMlaProblem::min_valid_entries (every token's list holds at least N "
      "valid entries; clamped to topk); auto: each case's own (its fewest valid entries over its tokens); the case's "
      "name gains /VN";
  const auto min_valid_values = CLI::IsMember({"off", "auto"}) | CLI::Range(1, 1 << 20);
  app.add_option("--min-valid", o.min_valid, min_valid_help)->check(min_valid_values);
  app.add_option("--block-keys", o.block_keys, "override the plan's tile size")->check(CLI::IsMember({16, 32, 64}));
  app.add_option("--splits", o.splits, "override the plan's splits per token")->check(CLI::Range(1, 4096));
  app.add_option("--fused-rows", o.fused_rows, "override the plan's fused-rows threshold (-1: off)")
      ->check(CLI::Range(-1, dsa::SparseMlaPlan::kMaxChunk));
  app.add_option("--row-order", o.row_order, "override the plan's row order: auto, on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--split-softmax", o.split_softmax, "override the plan's split softmax (split-K, bf16): auto, on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag("--balanced", o.balanced,
               "a balanced split-K plan (splits sized by each token's valid rows), its schedule made once before the timed calls");
  app.add_option("--kernel", o.kernel, "override the plan's kernel: auto, split-k, shared-rows (64 query rows per CTA; one split unless --splits)")
      ->check(CLI::IsMember({"auto", "split-k", "shared-rows"}));
  app.add_option("--sharing", o.sharing, "the planner's hint: auto (consecutive for shared-prefix cases, else unknown), unknown, consecutive (prefill: tokens share rows), none (decode)")
      ->check(CLI::IsMember(dsa::bench::kSharingNames));
  app.add_option("--stage", o.stage, "also time kernel variants that stop after a stage (load, scores, softmax, all)")
      ->check(CLI::IsMember({"full", "load", "scores", "softmax", "all"}));
  auto* timeline_flag = app.add_flag("--timeline", o.timeline, "record in-kernel phase timestamps for one call per case");
  app.add_option("--timeline-csv", o.timeline_csv, "with --timeline: append every split-K CTA's raw points and SM id to this CSV file (a shared-rows plan writes none, and its timeline line says so)")
      ->needs(timeline_flag);
  app.add_flag("--kernel-starts", o.kernel_starts,
               "after the table, each kernel of a call (cupti): its name, start and end in us after the call's first start "
               "(medians): the gaps and overlaps of a chain of launches");
  app.add_flag("--warm-code", o.warm_code,
               "diagnostic (cupti): after each flush, run the same kernels on other data, so the timed call pays "
               "for cold data but not for cold instructions");
  app.add_flag("--warm-tlb", o.warm_tlb,
               "diagnostic (cupti): after each flush, load one word per 64 KB of every buffer from every SM, so "
               "the timed call pays for cold data but not for cold address translations");
  app.add_flag("--host-overhead", o.host_overhead, "print the host time of one plan + forward call");
  app.add_flag("--kernel-only", o.kernel_only, "verify and time the kernels only, no floors (the floor columns print 0)");
  app.add_option("--kv", o.kv, "KV cache format: bf16, or fp8 (fp8_ds_mla rows of 656 B quantized from the bf16 cache; "
                               "the floors read those rows)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--cache-layout", o.cache_layout,
                 "bf16 cache layout: separate (ckv [rows, 512] and kpe [rows, 64] arrays), or joined (one array of "
                 "ckv | kpe rows of 1152 B, as vLLM and FlashMLA keep it; the floors read it too)")
      ->check(CLI::IsMember({"separate", "joined"}));
  app.add_option("--union-floor", o.union_groups,
                 "also time the union floor for these group sizes (comma-separated): each group of G consecutive tokens "
                 "reads the union of its rows once")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--workload", o.workload_path, "FlashInfer-Bench workload file (JSONL) instead of a suite")
      ->check(CLI::ExistingFile);
  app.add_option("--export", o.export_dir, "write the selected cases as FlashInfer-Bench workloads into DIR, then exit");
  app.add_option("--plot", o.plot_path, "draw latency and floor ratio against T into a PNG (needs gnuplot)");
  int inspect_tokens = 8;
  std::vector<std::string> inspect_source;  // one file or suite, or case names
  CLI::App* inspect = app.add_subcommand("inspect", "analyse index data: a workload file or a built-in suite");
  inspect->add_option("source", inspect_source, "FILE.jsonl, a suite name, or case names (H16-T8-k2048-runs,...; see --shape)")
      ->required()
      ->delimiter(',');
  inspect->add_option("--tokens", inspect_tokens, "tokens listed per workload")->check(CLI::Range(0, 1 << 20));
  inspect->add_option("--sharing", o.sharing, "the planner's hint the plan lines use: auto, unknown, consecutive, none")
      ->check(CLI::IsMember(dsa::bench::kSharingNames));
  inspect->add_option("--list-length", o.list_length, list_length_help)->check(list_length_values);
  inspect->add_option("--min-valid", o.min_valid, min_valid_help)->check(min_valid_values);
  dsa::bench::DenseOptions dense_o;
  CLI::App* dense = app.add_subcommand("dense", "verify and time the dense attention forward");
  dense->add_option("--suite", dense_o.suite, "built-in suite: targets, smoke")
      ->check(CLI::IsMember(dsa::bench::dense_suite_names()));
  add_timing_flags(*dense, dense_o);
  dense->add_option("-B,--batch", dense_o.batch, "custom case: batch (replaces the suite)")->check(CLI::Range(1, 65535));
  dense->add_option("-N,--heads", dense_o.heads, "custom case: heads")->check(CLI::Range(1, 65535));
  dense->add_option("-L,--seqlen", dense_o.seqlen, "custom case: query (and key) length")->check(CLI::Range(1, 1 << 24));
  dense->add_option("--seqlen-k", dense_o.seqlen_k, "custom case: key length when it differs")->check(CLI::Range(1, 1 << 24));
  dense->add_option("--head-dim", dense_o.head_dim, "custom case: 64, 128 or 192 (192/128 for MLA prefill)")
      ->check(CLI::IsMember({64, 128, 192}));
  dense->add_flag("--causal", dense_o.causal, "custom case: causal mask");
  dense->add_option("--dtype", dense_o.dtype, "custom case: bf16 or fp16")->check(CLI::IsMember({"bf16", "fp16"}));
  dense->add_option("--kernel", dense_o.kernel, "override the plan's kernel: auto, fa2 (mma.sync), wgmma")
      ->check(CLI::IsMember({"auto", "fa2", "wgmma"}));
  dense->add_option("--block-q", dense_o.block_q, "override the plan's query tile (fa2: 64 or 128)")
      ->check(CLI::IsMember({64, 128}));
  dsa::bench::FuzzOptions fuzz_o;
  CLI::App* fuzz = app.add_subcommand("fuzz", "random problems, layouts and plan choices through the public API, each against the GPU "
                                              "reference (tools/dsa_bench/fuzz.h)");
  fuzz->add_option("--cases", fuzz_o.cases, "cases to run")->check(CLI::Range(1, 1 << 24));
  fuzz->add_option("--seed", fuzz_o.seed, "seed (0: from the clock; printed)");
  fuzz->add_option("--first", fuzz_o.first, "the first case number (repeat one case: --first N --cases 1)")->check(CLI::Range(0, 1 << 30));
  fuzz->add_option("--kv", fuzz_o.kv, "cache formats drawn: bf16, fp8 or both")->check(CLI::IsMember({"bf16", "fp8", "both"}));
  fuzz->add_option("--max-tokens", fuzz_o.max_tokens, "T at most")->check(CLI::Range(1, 1 << 20));
  fuzz->add_option("--max-work", fuzz_o.max_work, "T x H x topk at most (the GPU reference's time grows with it)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
  fuzz->add_flag("--dense", fuzz_o.dense, "the dense attention forward instead (T, topk and --kv do not apply; Lq, Lk <= --max-tokens, "
                                         "B x N x Lq x Lk <= --max-work)");
  fuzz->add_flag("--verbose", fuzz_o.verbose, "a line per case");
  fuzz->add_flag("--list", fuzz_o.list, "print the cases and their plans on a described H100 (needs --seed); run nothing");
  CLI::App* wgmma = app.add_subcommand("wgmma", "the tensor cores' rate for the shared-rows kernels' wgmma shapes, alone and mixed");
  int gather_tokens = 1024, gather_reps = 12;
  std::string gather_timer = "cupti";
  CLI::App* gather = app.add_subcommand("gather-paths", "how fast a CTA shaped like split-K's moves gathered rows into shared memory: "
                                                        "by cp.async, by plain loads through registers, or both");
  gather->add_option("-T,--tokens", gather_tokens, "tokens (one CTA each, 2048 rows)")->check(CLI::Range(1, 1 << 16));
  gather->add_option("--reps", gather_reps, "timed calls per path (after 3 untimed)")->check(CLI::Range(1, 1000));
  gather->add_option("--timer", gather_timer, "cupti (kernel span), or events for compute-sanitizer (which cannot share CUPTI)")
      ->check(CLI::IsMember({"cupti", "events"}));
  bool plan_grid_summary = false;
  CLI::App* plan_grid = app.add_subcommand("plan-grid", "the planner's plan for every shape of a fixed grid, then a hash: two builds that print the same hash plan alike");
  plan_grid->add_flag("--summary", plan_grid_summary, "print only the count and the hash");
  CLI11_PARSE(app, argc, argv);
  try {
    if (o.warm_code && o.timer != "cupti") throw dsa::Error("--warm-code: needs --timer cupti, got " + o.timer);
    if (o.warm_tlb && o.timer != "cupti") throw dsa::Error("--warm-tlb: needs --timer cupti, got " + o.timer);
    if (o.warm_tlb && o.warm_code) throw dsa::Error("--warm-tlb and --warm-code: pick one");
    if (o.kernel_starts && o.timer != "cupti") throw dsa::Error("--kernel-starts: needs --timer cupti, got " + o.timer);
    if (o.cache_layout == "joined" && o.kv == "fp8")
      throw dsa::Error("--cache-layout joined: for a bf16 cache only (fp8_ds_mla rows hold their kpe values already)");
    if (*dense) return dsa::bench::run_dense(dense_o);
    if (*wgmma) return dsa::bench::run_wgmma_probe();
    if (*gather) return dsa::bench::run_gather_probe(gather_tokens, gather_reps, gather_timer);
    if (*fuzz) return dsa::bench::run_fuzz(fuzz_o);
    if (*plan_grid) return dsa::bench::run_plan_grid(plan_grid_summary);
    if (*inspect) {
      const std::string& first = inspect_source[0];
      const auto& suites = dsa::bench::builtin_suite_names();
      if (inspect_source.size() == 1 && first.size() > 6 && first.substr(first.size() - 6) == ".jsonl")
        o.workload_path = first;
      else if (inspect_source.size() == 1 && (std::find(suites.begin(), suites.end(), first) != suites.end() || first[0] != 'H'))
        o.suite = first;  // an unknown one fails as a suite
      else
        o.shapes = inspect_source;
      return dsa::bench::run_inspect(o, inspect_tokens);
    }
    if (!o.export_dir.empty()) return dsa::bench::run_export(o);
    return dsa::bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsa-bench: %s\n", e.what());
    return 2;
  }
}
