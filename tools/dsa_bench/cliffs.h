// Cliffs: cases that a larger T of the same problem beats. dsa-bench lists them after a suite's
// table (`--suite sweep` is made for it): a planner line there costs more than the tokens it adds
// (docs/perf.md "Shapes no one picked", "`--suite sweep`").
#pragma once

#include <cstddef>
#include <vector>

#include "suites.h"

namespace dsa::bench {

// Two cases alike but for their token count: heads, list length, pattern, valid counts, prefix,
// tokens per sequence and cache. Cases with a workload file's own indices never compare.
inline bool same_problem_but_tokens(const BenchCase& a, const BenchCase& b) {
  const workload::IndexSpec &x = a.indices, &y = b.indices;
  return a.num_heads == b.num_heads && x.topk == y.topk && x.pattern == y.pattern && x.valid_counts == y.valid_counts &&
         x.prefix_len == y.prefix_len && x.tokens_per_sequence == y.tokens_per_sequence && x.page_size == y.page_size &&
         x.num_pages == y.num_pages && a.explicit_indices.empty() && b.explicit_indices.empty();
}

struct Cliff {
  size_t slow;  // the case
  size_t fast;  // the fastest case with more tokens and the same problem
};

// Every case that took more than factor x the time of the fastest case with more tokens and the
// same problem; us[i] is *cases[i]'s time.
inline std::vector<Cliff> find_cliffs(const std::vector<const BenchCase*>& cases, const std::vector<double>& us,
                                      double factor = 1.1) {
  std::vector<Cliff> cliffs;
  const size_t none = cases.size();
  for (size_t i = 0; i < cases.size(); ++i) {
    size_t fast = none;
    for (size_t j = 0; j < cases.size(); ++j)
      if (cases[j]->indices.num_tokens > cases[i]->indices.num_tokens && same_problem_but_tokens(*cases[i], *cases[j]) &&
          (fast == none || us[j] < us[fast]))
        fast = j;
    if (fast != none && us[i] > factor * us[fast]) cliffs.push_back({i, fast});
  }
  return cliffs;
}

}  // namespace dsa::bench
