// Built-in benchmark cases of dsa-bench, generated deterministically from a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workload.h"

namespace dsa::bench {

struct BenchCase {
  std::string name;
  int num_heads = 16;
  float sm_scale = 0.1352337788608801f;  // what the captured DeepSeek-V3.2 workloads use
  workload::IndexSpec indices;           // T, topk, page_size, num_pages, pattern
  std::string target;                    // the speed target it is held to, if any (free text)
  std::vector<int32_t> explicit_indices; // from a workload file; empty = generate from `indices`
};

// Names: builtin_suite_names() (targets, the default, is the sparse MLA core issue's table),
// each described where builtin_suite builds it. Throws dsa::Error on an unknown name.
std::vector<BenchCase> builtin_suite(const std::string& name);
std::vector<std::string> builtin_suite_names();

// One case from a suite-style name, H<heads>-T<tokens>-k<topk>-<pattern> (H16-T8-k2048-runs):
// the suites' page size and cache, so the same indices as a suite case of that name. Throws
// dsa::Error naming what does not parse (suite names without a topk, as wide-heads', or with a
// valid count, "-valid20", do not).
BenchCase named_case(const std::string& name);

}  // namespace dsa::bench
