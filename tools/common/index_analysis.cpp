#include "index_analysis.h"

#include <algorithm>
#include <unordered_set>

#include "dsa/error.h"

namespace dsa::analysis {

TokenStats analyze_token(const int32_t* idx, int topk, int64_t num_rows, int page_size) {
  TokenStats s;
  std::unordered_set<int32_t> seen, pages;
  int64_t prev = -2;  // previous valid row
  for (int k = 0; k < topk; ++k) {
    const int32_t r = idx[k];
    if (r == -1) {
      ++s.padding;
      if (s.first_padding < 0) s.first_padding = k;
      continue;
    }
    if (r < -1 || r >= num_rows) {
      ++s.out_of_range;
      continue;
    }
    ++s.valid;
    s.last_valid = k;
    if (s.first_padding >= 0) s.left_packed = false;
    if (prev >= 0 && r < prev) s.sorted = false;
    if (!seen.insert(r).second) ++s.duplicates;
    pages.insert(static_cast<int32_t>(r / page_size));
    prev = r;
  }
  // Runs of consecutive rows, in list order.
  int run = 0;
  prev = -2;
  for (int k = 0; k < topk; ++k) {
    const int32_t r = idx[k];
    if (r < 0 || r >= num_rows) continue;
    if (prev >= 0 && r == prev + 1) {
      ++run;
    } else {
      ++s.runs;
      run = 1;
    }
    s.longest_run = std::max(s.longest_run, run);
    prev = r;
  }
  s.pages_touched = static_cast<int>(pages.size());
  return s;
}

static void check_shape(const std::vector<int32_t>& indices, int num_tokens, int topk) {
  if (num_tokens < 0 || topk < 1 || indices.size() != size_t(num_tokens) * topk)
    throw Error("analysis: indices do not match [num_tokens, topk]");
}

// The valid rows of tokens [t0, t1), ascending and distinct; `entries` counts them before that.
static std::vector<int32_t> union_of_tokens(const std::vector<int32_t>& indices, int topk, int64_t num_rows, int t0, int t1,
                                            int64_t* entries = nullptr) {
  std::vector<int32_t> u;
  for (size_t i = size_t(t0) * topk; i < size_t(t1) * topk; ++i)
    if (indices[i] >= 0 && indices[i] < num_rows) u.push_back(indices[i]);
  if (entries) *entries += static_cast<int64_t>(u.size());
  std::sort(u.begin(), u.end());
  u.erase(std::unique(u.begin(), u.end()), u.end());
  return u;
}

std::vector<std::vector<int32_t>> group_unions(const std::vector<int32_t>& indices, int num_tokens, int topk, int64_t num_rows,
                                               int group) {
  check_shape(indices, num_tokens, topk);
  if (group < 1) throw Error("analysis: group must be >= 1");
  std::vector<std::vector<int32_t>> unions;
  for (int t = 0; t < num_tokens; t += group)
    unions.push_back(union_of_tokens(indices, topk, num_rows, t, std::min(num_tokens, t + group)));
  return unions;
}

double sampled_group_union_ratio(const std::vector<int32_t>& indices, int num_tokens, int topk, int64_t num_rows, int samples) {
  check_shape(indices, num_tokens, topk);
  if (samples < 1) throw Error("analysis: samples must be >= 1");
  const int64_t groups = (int64_t{num_tokens} + kGroupTokens - 1) / kGroupTokens;
  const int64_t n = std::min<int64_t>(samples, groups);
  int64_t union_rows = 0, entries = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int t0 = static_cast<int>((2 * i + 1) * groups / (2 * n) * kGroupTokens);
    union_rows += static_cast<int64_t>(
        union_of_tokens(indices, topk, num_rows, t0, std::min(num_tokens, t0 + kGroupTokens), &entries).size());
  }
  return entries > 0 ? double(union_rows) / double(entries) : 1.0;
}

Summary summarize(const std::vector<int32_t>& indices, int num_tokens, int topk, int64_t num_rows, int page_size,
                  std::vector<TokenStats>* per_token) {
  check_shape(indices, num_tokens, topk);
  if (page_size < 1) throw Error("analysis: page_size must be >= 1");
  Summary s;
  s.num_tokens = num_tokens;
  s.topk = topk;
  std::unordered_set<int32_t> rows;
  std::unordered_set<int64_t> pages;
  std::vector<int> valid_counts;
  for (int t = 0; t < num_tokens; ++t) {
    const int32_t* idx = indices.data() + size_t(t) * topk;
    const TokenStats ts = analyze_token(idx, topk, num_rows, page_size);
    if (per_token) per_token->push_back(ts);
    s.valid += ts.valid;
    s.padding += ts.padding;
    s.out_of_range += ts.out_of_range;
    s.duplicates += ts.duplicates;
    s.tokens_left_packed += ts.left_packed;
    s.tokens_sorted += ts.sorted;
    s.tokens_empty += ts.valid == 0;
    s.list_length = std::max(s.list_length, ts.last_valid + 1);
    s.mean_runs += ts.runs;
    s.mean_longest_run += ts.longest_run;
    s.mean_pages += ts.pages_touched;
    valid_counts.push_back(ts.valid);
    for (int k = 0; k < topk; ++k)
      if (idx[k] >= 0 && idx[k] < num_rows) {
        rows.insert(idx[k]);
        pages.insert(idx[k] / page_size);
      }
  }
  for (const std::vector<int32_t>& u : group_unions(indices, num_tokens, topk, num_rows, kGroupTokens))
    s.group_union_rows += static_cast<int64_t>(u.size());
  s.unique_rows = static_cast<int64_t>(rows.size());
  s.pages_touched = static_cast<int64_t>(pages.size());
  if (num_tokens > 0) {
    s.mean_runs /= num_tokens;
    s.mean_longest_run /= num_tokens;
    s.mean_pages /= num_tokens;
    std::sort(valid_counts.begin(), valid_counts.end());
    s.min_valid = valid_counts.front();
    s.max_valid = valid_counts.back();
    s.median_valid = valid_counts[valid_counts.size() / 2];
  }
  return s;
}

}  // namespace dsa::analysis
