// Index analysis figures on hand-made index sets.
#include <gtest/gtest.h>

#include "dsa/error.h"
#include "index_analysis.h"

namespace dsa {
namespace {

TEST(IndexAnalysis, OneTokenByHand) {
  // rows = 100, pages of 10: runs 3-4-5 | 40 | 7 (dup of nothing) | 41 ; padding in the middle.
  const std::vector<int32_t> idx = {3, 4, 5, -1, 40, 41, 7, 4, 100, -3, -1, -1};
  const auto s = analysis::analyze_token(idx.data(), 12, 100, 10);
  EXPECT_EQ(s.valid, 7);
  EXPECT_EQ(s.padding, 3);
  EXPECT_EQ(s.out_of_range, 2);  // 100 and -3
  EXPECT_EQ(s.first_padding, 3);
  EXPECT_EQ(s.last_valid, 7);    // the second 4; 100 and -3 are not valid
  EXPECT_FALSE(s.left_packed);
  EXPECT_FALSE(s.sorted);
  EXPECT_EQ(s.runs, 4);          // [3,4,5] [40,41] [7] [4]
  EXPECT_EQ(s.longest_run, 3);
  EXPECT_EQ(s.pages_touched, 2); // pages 0 and 4
  EXPECT_EQ(s.duplicates, 1);    // the second 4
}

TEST(IndexAnalysis, CapturedStyleTokensAndSharing) {
  // Two left-packed, sorted, page-aligned runs; token 1 re-reads half of token 0's rows.
  const std::vector<int32_t> idx = {64, 65, 66, 67, -1, -1,  //
                                    66, 67, 68, 69, 70, -1};
  std::vector<analysis::TokenStats> per;
  const auto s = analysis::summarize(idx, 2, 6, 1000, 64, &per);
  EXPECT_EQ(s.valid, 9);
  EXPECT_EQ(s.unique_rows, 7);
  EXPECT_NEAR(s.shared_fraction(), 2.0 / 9.0, 1e-12);
  EXPECT_EQ(s.tokens_left_packed, 2);
  EXPECT_EQ(s.tokens_sorted, 2);
  EXPECT_EQ(s.min_valid, 4);
  EXPECT_EQ(s.max_valid, 5);
  EXPECT_EQ(s.list_length, 5);   // token 1's last valid entry at position 4
  EXPECT_EQ(s.pages_touched, 1);
  EXPECT_DOUBLE_EQ(s.mean_runs, 1.0);
  EXPECT_EQ(per[1].longest_run, 5);
  EXPECT_THROW(analysis::summarize(idx, 3, 6, 1000, 64), Error);
}

TEST(IndexAnalysis, UnionsOfFourTokenGroups) {
  // Tokens 0-3 (one group) list rows {1,2} {2,3} {3,4} {1,4}: 4 distinct of 8. The partial
  // second group: token 4 lists 7 twice (1 distinct of 2), token 5 rows 1 and 2, which the
  // first group also read, and 9 (3 more: groups are counted apart).
  const std::vector<int32_t> idx = {1, 2, -1,  2, 3, -1,  3, 4, -1,  1, 4, -1,  7, 7, -1,  1, 2, 9};
  const auto s = analysis::summarize(idx, 6, 3, 100, 10);
  EXPECT_EQ(s.valid, 13);
  EXPECT_EQ(s.group_union_rows, 4 + 1 + 3);
  EXPECT_NEAR(s.group_union_ratio(), 8.0 / 13.0, 1e-12);
  EXPECT_EQ(s.unique_rows, 6);
  EXPECT_EQ(s.list_length, 3);   // token 5's 9 at the last position
  // The same groups' unions, ascending, and with groups of 4 and of 5 tokens.
  const auto u4 = analysis::group_unions(idx, 6, 3, 100, 4);
  ASSERT_EQ(u4.size(), 2u);
  EXPECT_EQ(u4[0], (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(u4[1], (std::vector<int32_t>{1, 2, 7, 9}));
  const auto u5 = analysis::group_unions(idx, 6, 3, 100, 5);
  ASSERT_EQ(u5.size(), 2u);
  EXPECT_EQ(u5[0], (std::vector<int32_t>{1, 2, 3, 4, 7}));
  EXPECT_EQ(u5[1], (std::vector<int32_t>{1, 2, 9}));
  // Rows past num_rows are not rows; a group of one token is its own list, deduplicated.
  const auto u1 = analysis::group_unions(idx, 6, 3, 8, 1);
  EXPECT_EQ(u1[4], (std::vector<int32_t>{7}));
  EXPECT_EQ(u1[5], (std::vector<int32_t>{1, 2}));
  EXPECT_THROW(analysis::group_unions(idx, 6, 3, 100, 0), Error);
  EXPECT_THROW(analysis::group_unions(idx, 5, 3, 100, 4), Error);
  // Sampled: as many samples as groups (or more) read every group; one sample reads the middle
  // group of the one span, here the second (rows 7, 7, 1, 2, 9: 4 distinct of 5).
  EXPECT_NEAR(analysis::sampled_group_union_ratio(idx, 6, 3, 100, 2), 8.0 / 13.0, 1e-12);
  EXPECT_NEAR(analysis::sampled_group_union_ratio(idx, 6, 3, 100, 64), 8.0 / 13.0, 1e-12);
  EXPECT_NEAR(analysis::sampled_group_union_ratio(idx, 6, 3, 100, 1), 4.0 / 5.0, 1e-12);
  EXPECT_NEAR(analysis::sampled_group_union_ratio(idx, 6, 3, 8, 1), 3.0 / 4.0, 1e-12);  // 9 is past num_rows
  EXPECT_EQ(analysis::sampled_group_union_ratio(std::vector<int32_t>(12, -1), 4, 3, 100, 1), 1.0);
  EXPECT_THROW(analysis::sampled_group_union_ratio(idx, 6, 3, 100, 0), Error);
  EXPECT_THROW(analysis::sampled_group_union_ratio(idx, 5, 3, 100, 1), Error);
}

// Sampled groups spread over the call: 8 groups of 4 tokens, the first half listing one shared
// row each (unions of 1 in 4), the second half distinct rows (4 in 4). Two samples take groups
// 2 and 6, one of each half: 5 of 8; four take 1, 3, 5, 7: 10 of 16; one takes group 4.
TEST(IndexAnalysis, SampledGroupsSpreadOverTheCall) {
  std::vector<int32_t> idx(32);
  for (int t = 0; t < 32; ++t) idx[t] = t < 16 ? t / 4 : 100 + t;
  EXPECT_NEAR(analysis::sampled_group_union_ratio(idx, 32, 1, 1000, 2), 5.0 / 8.0, 1e-12);
  EXPECT_NEAR(analysis::sampled_group_union_ratio(idx, 32, 1, 1000, 4), 10.0 / 16.0, 1e-12);
  EXPECT_NEAR(analysis::sampled_group_union_ratio(idx, 32, 1, 1000, 8), 20.0 / 32.0, 1e-12);
  EXPECT_NEAR(analysis::sampled_group_union_ratio(idx, 32, 1, 1000, 1), 4.0 / 4.0, 1e-12);  // group 4
}

}  // namespace
}  // namespace dsa
