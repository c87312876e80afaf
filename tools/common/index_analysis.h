// What a sparse_indices tensor looks like (the analysis of shared/seeds/002): per token and in
// summary, valid counts, where the padding sits, sortedness, runs, pages, duplicates,
// out-of-range entries, and rows shared across tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace dsa::analysis {

struct TokenStats {
  int valid = 0;          // entries in [0, num_rows)
  int padding = 0;        // -1 entries
  int out_of_range = 0;   // anything else
  int first_padding = -1; // position of the first -1 (-1: none)
  int last_valid = -1;      // position of the last valid entry (-1: none)
  bool left_packed = true;  // no valid entry after the first -1
  bool sorted = true;       // valid entries ascending (ties allowed)
  int runs = 0;             // maximal runs of consecutive rows (r, r+1, ...) among valid entries, in order
  int longest_run = 0;
  int pages_touched = 0;    // distinct pages among valid entries
  int duplicates = 0;       // valid entries whose row appeared earlier in the same token
};

struct Summary {
  int num_tokens = 0, topk = 0;
  int64_t valid = 0, padding = 0, out_of_range = 0, duplicates = 0;
  int64_t unique_rows = 0;       // distinct valid rows over all tokens
  // Distinct valid rows of each group of kGroupTokens consecutive tokens, summed over the
  // groups: the rows the shared-rows kernel gathers (its union entries).
  int64_t group_union_rows = 0;
  int min_valid = 0, median_valid = 0, max_valid = 0;
  // Positions a call must read: every valid entry sits in each list's first list_length positions
  // (the last one's position + 1, over the tokens; 0 when none is valid). A caller that knows it
  // (contexts shorter than topk) passes topk = list_length with the lists' full row stride.
  int list_length = 0;
  int tokens_left_packed = 0, tokens_sorted = 0, tokens_empty = 0;
  double mean_runs = 0, mean_longest_run = 0, mean_pages = 0;
  int64_t pages_touched = 0;     // distinct pages over all tokens
  // Share of valid entries that another token also reads: 1 - unique_rows / valid.
  double shared_fraction() const { return valid > 0 ? 1.0 - double(unique_rows) / double(valid) : 0.0; }
  // The groups' unions against their valid entries: 1 when consecutive tokens share no rows,
  // down to 1 / kGroupTokens when all four list the same ones.
  double group_union_ratio() const { return valid > 0 ? double(group_union_rows) / double(valid) : 1.0; }
};

// Tokens per group of the shared-rows kernel at 16 heads (kSharedRowsBlocks in src/sparse_mla/params.h).
inline constexpr int kGroupTokens = 4;

TokenStats analyze_token(const int32_t* indices, int topk, int64_t num_rows, int page_size);
// The union of each group of `group` consecutive tokens' valid rows (the last group may hold
// fewer tokens), ascending: what a kernel that gathers each row once per group of tokens reads,
// in row order.
std::vector<std::vector<int32_t>> group_unions(const std::vector<int32_t>& indices, int num_tokens, int topk, int64_t num_rows,
                                               int group);
// group_union_ratio over `samples` groups of kGroupTokens tokens spread evenly over the call (the
// middle group of each of `samples` equal spans; all groups when there are fewer): what a probe
// that reads only those groups would estimate (docs/design.md, unhinted 16 heads past T = 2048).
// 1 when the sampled groups hold no valid entry.
double sampled_group_union_ratio(const std::vector<int32_t>& indices, int num_tokens, int topk, int64_t num_rows, int samples);
Summary summarize(const std::vector<int32_t>& indices, int num_tokens, int topk, int64_t num_rows, int page_size,
                  std::vector<TokenStats>* per_token = nullptr);

}  // namespace dsa::analysis
