// dsa-bench's cliffs report (tools/dsa_bench/cliffs.h): which cases a larger T of the same
// problem beats.
#include <gtest/gtest.h>

#include "cliffs.h"

namespace dsa::bench {
namespace {

BenchCase make_case(int T, int heads = 32, int topk = 2048) {
  BenchCase c;
  c.name = "T" + std::to_string(T);
  c.num_heads = heads;
  c.indices.num_tokens = T;
  c.indices.topk = topk;
  return c;
}

std::vector<Cliff> cliffs_of(const std::vector<BenchCase>& cases, const std::vector<double>& us) {
  std::vector<const BenchCase*> ptrs;
  for (const BenchCase& c : cases) ptrs.push_back(&c);
  return find_cliffs(ptrs, us);
}

TEST(BenchCliffs, ACaseALargerTBeatsByMoreThanTenPercent) {
  // Run 590's 32 heads topk 2048: T = 2 (64 one-tile splits) 15.4 us, T = 3 13.7, T = 4 15.9.
  const std::vector<BenchCase> cases{make_case(1), make_case(2), make_case(3), make_case(4)};
  const auto cliffs = cliffs_of(cases, {10.2, 15.4, 13.7, 15.9});
  ASSERT_EQ(cliffs.size(), 1u);
  EXPECT_EQ(cliffs[0].slow, 1u);
  EXPECT_EQ(cliffs[0].fast, 2u);
}

TEST(BenchCliffs, TheFastestLargerCaseIsNamedAndTenPercentIsNoCliff) {
  const std::vector<BenchCase> cases{make_case(8), make_case(9), make_case(16), make_case(32)};
  const auto cliffs = cliffs_of(cases, {30.0, 27.0, 25.0, 40.0});  // T = 8: 1.2x T = 16's, 1.11x T = 9's
  ASSERT_EQ(cliffs.size(), 1u);
  EXPECT_EQ(cliffs[0].slow, 0u);
  EXPECT_EQ(cliffs[0].fast, 2u);
  EXPECT_TRUE(cliffs_of({make_case(1), make_case(2)}, {11.0, 10.0}).empty());  // exactly 1.1x
}

TEST(BenchCliffs, OnlyTheSameProblemCompares) {
  BenchCase runs = make_case(4);
  runs.indices.pattern = workload::IndexPattern::runs;
  BenchCase from_file = make_case(5);
  from_file.explicit_indices = {1, 2, 3};
  BenchCase other_cache = make_case(6);
  other_cache.indices.num_pages = 100;
  const std::vector<BenchCase> cases{make_case(2), make_case(3, 16), make_case(3, 32, 512), runs, from_file, other_cache};
  EXPECT_TRUE(cliffs_of(cases, {50.0, 10.0, 10.0, 10.0, 10.0, 10.0}).empty());
}

}  // namespace
}  // namespace dsa::bench
