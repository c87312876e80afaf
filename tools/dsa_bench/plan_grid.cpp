#include "plan_grid.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "dsa/sparse_mla.h"

namespace dsa::bench {
namespace {

// The overrides a caller may pass, each alone (the planner's own choice first), and the planner
// told that every list is full (SparseMlaProblem::min_valid_entries = topk).
struct GridChoice {
  const char* name;
  PlanChoice choice;
  bool full_lists;
};
std::vector<GridChoice> grid_choices() {
  std::vector<GridChoice> v;
  const auto add = [&](const char* name, auto set) {
    PlanChoice c;
    set(c);
    v.push_back({name, c, false});
  };
  add("planner", [](PlanChoice&) {});
  v.push_back({"planner/full_lists", PlanChoice{}, true});
  add("shared_rows", [](PlanChoice& c) { c.kernel = PlanChoice::Kernel::shared_rows; });
  add("split_k", [](PlanChoice& c) { c.kernel = PlanChoice::Kernel::split_k; });
  add("shared_rows/3", [](PlanChoice& c) { c.kernel = PlanChoice::Kernel::shared_rows, c.splits = 3; });
  add("splits5", [](PlanChoice& c) { c.splits = 5; });
  add("keys64", [](PlanChoice& c) { c.block_keys = 64; });
  add("keys16", [](PlanChoice& c) { c.block_keys = 16; });
  add("fused_off", [](PlanChoice& c) { c.fused_rows = -1; });
  add("fused100", [](PlanChoice& c) { c.fused_rows = 100; });
  add("balanced", [](PlanChoice& c) { c.balanced = 1; });
  add("order_on", [](PlanChoice& c) { c.row_order = 1; });
  add("order_off", [](PlanChoice& c) { c.row_order = -1; });
  add("split_on", [](PlanChoice& c) { c.split_softmax = 1; });
  add("split_off", [](PlanChoice& c) { c.split_softmax = -1; });
  return v;
}

// FNV-1a over the lines.
struct Hash {
  uint64_t h = 1469598103934665603ull;
  void add(const std::string& s) {
    for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  }
};

}  // namespace

int run_plan_grid(bool summary_only) {
  const auto choices = grid_choices();
  const char* sharing_names[] = {"unknown", "consecutive", "none"};
  const IndexSharing sharings[] = {IndexSharing::unknown, IndexSharing::consecutive, IndexSharing::none};
  Hash hash;
  int64_t count = 0;
  char line[512];
  // An H100 and smaller parts (no bandwidth: planned as the H100's), then the H200 (132 SMs at
  // the 4814 GB/s it reports), whose plans differ at 32 and 64 heads.
  for (auto [sms, gbs] : {std::pair{132, 0}, std::pair{8, 0}, std::pair{16, 0}, std::pair{100, 0}, std::pair{132, 4814}}) {
    DeviceInfo dev{sms, 232448, 9, 0};  // an H100's shared memory per block
    dev.memory_bandwidth_gbs = gbs;
    const std::string device = std::to_string(sms) + (gbs > 0 ? "@" + std::to_string(gbs) : "");
    for (int H : {16, 32, 64, 128})
      for (int topk : {1, 64, 128, 300, 512, 1024, 2048, 2049})
        for (int fp8 = 0; fp8 < 2; ++fp8)
          for (int sh = 0; sh < 3; ++sh)
            for (size_t ci = 0; ci < choices.size(); ++ci)
              for (int T = 0; T <= 8192; T = T < 300 ? T + 1 : T < 1400 ? T + 11 : T < 2048 ? 2048 : 2 * T) {  // + 2048, 4096, 8192
                if (ci > 0 && T % 3 != 0) continue;  // the overrides on every third T
                std::snprintf(line, sizeof line, "sms %s H %d topk %d %s %s %s T %d: ", device.c_str(), H, topk, fp8 ? "fp8" : "bf16",
                              sharing_names[sh], choices[ci].name, T);
                std::string s = line;
                try {
                  const SparseMlaPlan p = plan_sparse_mla(T, H, topk, dev, choices[ci].choice, sharings[sh],
                                                          fp8 ? KvCacheFormat::fp8_ds_mla : KvCacheFormat::bf16,
                                                          choices[ci].full_lists ? topk : 0);
                  std::snprintf(line, sizeof line,
                                "kernel %d keys %d splits %d chunk %d lead %d x %d ctas %d union %d fused %d order %d balanced %d "
                                "split %d early %d launches %d workspace %zu schedule %zu",
                                static_cast<int>(p.kernel), p.block_keys, p.splits, p.chunk, p.lead_tokens, p.lead_splits, p.ctas,
                                static_cast<int>(p.union_pass), p.fused_rows, static_cast<int>(p.row_order), static_cast<int>(p.balanced),
                                static_cast<int>(p.split_softmax), static_cast<int>(p.early_issue), p.launches, p.workspace_bytes,
                                p.schedule_bytes);
                  s += line;
                  if (p.share_probe.line_permille > 0) {
                    std::snprintf(line, sizeof line, " probe %d keys %d order %d split %d", p.share_probe.line_permille,
                                  p.share_probe.split_k_block_keys, static_cast<int>(p.share_probe.split_k_row_order),
                                  static_cast<int>(p.share_probe.split_k_split_softmax));
                    s += line;
                  }
                } catch (const std::exception& e) {
                  s += std::string("error ") + e.what();
                }
                hash.add(s);
                hash.add("\n");
                ++count;
                if (!summary_only) std::printf("%s\n", s.c_str());
              }
  }
  std::printf("plan-grid: %lld plans, hash %016llx\n", static_cast<long long>(count), static_cast<unsigned long long>(hash.h));
  return 0;
}

}  // namespace dsa::bench
