// Deterministic test/benchmark inputs for sparse MLA: index patterns and random bf16 tensors.
// Internal to the repository (tests and dsa-bench); not installed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace dsa::workload {

// Counter-based generator (splitmix64): the same seed gives the same data on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n) { return next() % n; }  // n > 0
  double uniform();                                   // [0, 1)
  double normal();

 private:
  uint64_t state_;
};

// One of `values`, uniformly.
template <class T>
T pick(Rng& rng, std::initializer_list<T> values) {
  return values.begin()[rng.below(values.size())];
}
// Log-uniform in [lo, hi], lo >= 1.
int log_uniform(Rng& rng, int lo, int hi);

enum class IndexPattern {
  random,          // distinct rows scattered over the whole cache (long-context decode)
  runs,            // one page-aligned contiguous run per token, -1 after (short-context decode)
  shared_prefix,   // token t picks rows of its causal prefix of one sequence (prefill)
  all_padding,     // every entry -1
  single_valid,    // one valid row at a random position, -1 elsewhere
  padding_middle,  // random rows with -1 scattered through the list, not only at the end
  duplicates,      // rows drawn from a handful of values, repeated
  out_of_range,    // random rows with some entries < -1 or >= num_rows
  sequences,       // the distinct rows of token t from its request's span of prefix_len rows, request
                   // t / tokens_per_sequence (multi-request decode: no row shared between requests
                   // while the spans fit the cache's rows, past that they wrap around; a request's
                   // tokens, MTP's drafts, pick independently, so they share ~topk / prefix_len)
};

const char* to_string(IndexPattern p);
IndexPattern parse_pattern(const std::string& name);  // throws dsa::Error on an unknown name
std::string pattern_names();                          // every pattern's name, comma-separated

struct IndexSpec {
  IndexPattern pattern = IndexPattern::random;
  int num_tokens = 1;
  int topk = 2048;
  int page_size = 64;
  int num_pages = 8462;
  // runs: valid entries per token; empty = random counts in [1, topk]; one value = all tokens.
  // random: when set, token t's first valid_counts[t] entries only, -1 after (the last value
  // for the tokens past the vector).
  std::vector<int> valid_counts;
  // shared_prefix: length of the sequence the last token sees (rows [0, prefix_len)); sequences:
  // each request's span.
  int prefix_len = 8192;
  int tokens_per_sequence = 1;  // sequences: consecutive tokens of one request
};

// Row-major [num_tokens, topk] int32.
std::vector<int32_t> make_indices(const IndexSpec& spec, uint64_t seed);

// n bf16 bit patterns ~ N(0, 1) * scale.
std::vector<uint16_t> random_bf16(size_t n, double scale, uint64_t seed);

}  // namespace dsa::workload
