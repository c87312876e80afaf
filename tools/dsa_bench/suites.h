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

}  // namespace dsa::bench
