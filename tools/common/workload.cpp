#include "workload.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "dsa/error.h"
#include "dsa/reference.h"

namespace dsa::workload {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }

double Rng::normal() {
  const double u1 = 1.0 - uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

int log_uniform(Rng& rng, int lo, int hi) {
  const double a = std::log(double(lo)), b = std::log(double(hi) + 1);
  return std::clamp(int(std::exp(a + rng.uniform() * (b - a))), lo, hi);
}

namespace {
constexpr IndexPattern kAll[] = {IndexPattern::random,       IndexPattern::runs,
                                 IndexPattern::shared_prefix, IndexPattern::all_padding,
                                 IndexPattern::single_valid, IndexPattern::padding_middle,
                                 IndexPattern::duplicates,   IndexPattern::out_of_range,
                                 IndexPattern::sequences};

// k distinct values of [0, n) in random order (k <= n); rejection sampling when k << n.
std::vector<int32_t> distinct(Rng& rng, int64_t n, int k) {
  std::vector<int32_t> out;
  out.reserve(k);
  if (static_cast<int64_t>(k) * 4 < n) {
    std::unordered_set<int32_t> seen;
    while (static_cast<int>(out.size()) < k) {
      const auto v = static_cast<int32_t>(rng.below(n));
      if (seen.insert(v).second) out.push_back(v);
    }
    return out;
  }
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  for (int i = 0; i < k; ++i) std::swap(all[i], all[i + rng.below(n - i)]);
  all.resize(k);
  return all;
}
// Token t's entry of valid_counts (set): the last one for the tokens past them.
int valid_count(const IndexSpec& s, int t) { return s.valid_counts[std::min<size_t>(t, s.valid_counts.size() - 1)]; }
}  // namespace

const char* to_string(IndexPattern p) {
  switch (p) {
    case IndexPattern::random: return "random";
    case IndexPattern::runs: return "runs";
    case IndexPattern::shared_prefix: return "shared_prefix";
    case IndexPattern::all_padding: return "all_padding";
    case IndexPattern::single_valid: return "single_valid";
    case IndexPattern::padding_middle: return "padding_middle";
    case IndexPattern::duplicates: return "duplicates";
    case IndexPattern::out_of_range: return "out_of_range";
    case IndexPattern::sequences: return "sequences";
  }
  return "?";
}

std::string pattern_names() {
  std::string names;
  for (IndexPattern p : kAll) names += (names.empty() ? "" : ", ") + std::string(to_string(p));
  return names;
}

IndexPattern parse_pattern(const std::string& name) {
  for (IndexPattern p : kAll)
    if (name == to_string(p)) return p;
  throw Error("pattern: unknown '" + name + "'");
}

std::vector<int32_t> make_indices(const IndexSpec& s, uint64_t seed) {
  if (s.num_tokens < 0 || s.topk < 1 || s.page_size < 1 || s.num_pages < 1) throw Error("IndexSpec: bad sizes");
  const int64_t rows = static_cast<int64_t>(s.num_pages) * s.page_size;
  Rng rng(seed);
  std::vector<int32_t> idx(static_cast<size_t>(s.num_tokens) * s.topk, -1);
  for (int t = 0; t < s.num_tokens; ++t) {
    int32_t* row = idx.data() + static_cast<size_t>(t) * s.topk;
    switch (s.pattern) {
      case IndexPattern::random:
      case IndexPattern::padding_middle:
      case IndexPattern::out_of_range: {
        const int k = static_cast<int>(std::min<int64_t>(s.topk, rows));
        std::vector<int32_t> v = distinct(rng, rows, k);
        // random with valid_counts: the token's first n entries, -1 after (a list of n rows).
        const size_t n = s.pattern == IndexPattern::random && !s.valid_counts.empty()
                             ? static_cast<size_t>(std::clamp(valid_count(s, t), 0, k))
                             : v.size();
        std::copy(v.begin(), v.begin() + n, row);
        if (s.pattern == IndexPattern::padding_middle) {
          for (int i = 0; i < s.topk; ++i)
            if (rng.uniform() < 0.3) row[i] = -1;
          for (int i = s.topk / 3; i < s.topk / 2; ++i) row[i] = -1;  // a hole in the middle
        } else if (s.pattern == IndexPattern::out_of_range) {
          const int32_t bad[] = {static_cast<int32_t>(rows), static_cast<int32_t>(rows) + 12345, -2, -1000,
                                 std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
          for (int i = 0; i < s.topk; ++i)
            if (rng.uniform() < 0.2) row[i] = bad[rng.below(6)];
        }
        break;
      }
      case IndexPattern::runs: {
        int n = s.valid_counts.empty() ? 1 + static_cast<int>(rng.below(s.topk)) : valid_count(s, t);
        n = static_cast<int>(std::min<int64_t>({n, s.topk, rows}));
        const int64_t pages_needed = (n + s.page_size - 1) / s.page_size;
        const int64_t start = rng.below(std::max<int64_t>(1, s.num_pages - pages_needed + 1)) * s.page_size;
        for (int i = 0; i < n; ++i) row[i] = static_cast<int32_t>(std::min<int64_t>(start + i, rows - 1));
        break;
      }
      case IndexPattern::shared_prefix: {
        const int64_t len = std::min<int64_t>(s.prefix_len, rows);
        const int64_t ctx = std::max<int64_t>(1, len - s.num_tokens + t + 1);
        const int k = static_cast<int>(std::min<int64_t>(s.topk, ctx));
        std::vector<int32_t> v = distinct(rng, ctx, k);
        std::copy(v.begin(), v.end(), row);
        break;
      }
      case IndexPattern::sequences: {
        const int64_t span = std::max<int64_t>(1, std::min<int64_t>(s.prefix_len, rows));
        const int64_t request = t / std::max(1, s.tokens_per_sequence);
        const int64_t start = request * span % (rows / span * span);
        const int k = static_cast<int>(std::min<int64_t>(s.topk, span));
        const std::vector<int32_t> v = distinct(rng, span, k);
        for (int i = 0; i < k; ++i) row[i] = static_cast<int32_t>(start + v[i]);
        break;
      }
      case IndexPattern::all_padding:
        break;
      case IndexPattern::single_valid:
        row[rng.below(s.topk)] = static_cast<int32_t>(rng.below(rows));
        break;
      case IndexPattern::duplicates: {
        int32_t pool[5];
        for (int32_t& v : pool) v = static_cast<int32_t>(rng.below(rows));
        for (int i = 0; i < s.topk; ++i) row[i] = pool[rng.below(5)];
        break;
      }
    }
  }
  return idx;
}

std::vector<uint16_t> random_bf16(size_t n, double scale, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(static_cast<float>(rng.normal() * scale));
  return v;
}

}  // namespace dsa::workload
