// dsa-bench's grouping of CUPTI kernel records into calls (tools/dsa_bench/call_kernels.h): each
// call's span and each kernel's start and end after the call's first start.
#include <gtest/gtest.h>

#include "call_kernels.h"

namespace dsa::bench {
namespace {

// The names of the split-K share-probe instance and of the probe, as their objects list them.
constexpr const char* kSplitK =
    "_ZN3dsa6detail49_GLOBAL__N__ce78d1f2_16_splitk_kernel_cu_6a1411bb24sparse_mla_splitk_kernelILi32ELi2ELi3ELb0ELb0ELb0ELb0ELb0ELb1EEEvNS0_"
    "15SparseMlaParamsE";
constexpr const char* kProbe = "_ZN3dsa6detail47_GLOBAL__N__b9f131d4_14_share_probe_cu_f8e0ec9c18share_probe_kernelEPKiS3_iiliiP4int2Py";

TEST(BenchCallKernels, ShortNamesAreTheFunctionsOwn) {
  EXPECT_EQ(kernel_short_name(kSplitK), "sparse_mla_splitk_kernel");
  EXPECT_EQ(kernel_short_name(kProbe), "share_probe_kernel");
  EXPECT_EQ(kernel_short_name("_Z11flush_cachePvm"), "flush_cache");  // a plain (not nested) name
  EXPECT_EQ(kernel_short_name("gather_probe"), "gather_probe");       // not mangled: unchanged
  EXPECT_EQ(kernel_short_name("_ZN3dsa99tooshort"), "_ZN3dsa99tooshort");  // a length past the end: unchanged
}

// Two calls of three kernels, the second kernel started by dependent launch before the first
// ended, the records out of order (CUPTI's buffers need not be sorted), each call led by one
// kernel that is not its own (--warm-code's).
TEST(BenchCallKernels, CallsSpanFromFirstStartToLastEnd) {
  std::vector<KernelRecord> recs{
      {11000, 14000, kSplitK},  {10000, 13000, kProbe},     {16000, 25000, "c"},  // call 1: starts 10, 11, 16
      {9000, 9500, "warm"},     {40000, 41000, "warm"},     {42000, 45000, kProbe},
      {44000, 60000, kSplitK},  {47000, 50000, "c"},                              // call 2: starts 42, 44, 47; ends 60
  };
  const CallKernels c = group_calls(recs, 3, 1);
  ASSERT_EQ(c.span_us.size(), 2u);
  EXPECT_DOUBLE_EQ(c.span_us[0], 15.0);  // 10 -> 25
  EXPECT_DOUBLE_EQ(c.span_us[1], 18.0);  // 42 -> 60: the middle kernel ends last
  ASSERT_EQ(c.names.size(), 3u);
  EXPECT_EQ(c.names[0], "share_probe_kernel");
  EXPECT_EQ(c.names[1], "sparse_mla_splitk_kernel");
  EXPECT_EQ(c.names[2], "c");
  EXPECT_DOUBLE_EQ(c.start_us[1][0], 1.0);
  EXPECT_DOUBLE_EQ(c.end_us[1][0], 4.0);
  EXPECT_DOUBLE_EQ(c.start_us[2][1], 5.0);
  EXPECT_DOUBLE_EQ(c.end_us[1][1], 18.0);
  EXPECT_DOUBLE_EQ(c.duration_us[2][0], 9.0);
  EXPECT_DOUBLE_EQ(c.duration_us[0][1], 3.0);
}

TEST(BenchCallKernels, RecordsThatMakeNoWholeCallsAreRefused) {
  const std::vector<KernelRecord> five(5, KernelRecord{1, 2, "k"});
  EXPECT_THROW(group_calls(five, 2), std::runtime_error);
  EXPECT_THROW(group_calls(five, 2, 1), std::runtime_error);  // 5 records, groups of 3
  EXPECT_THROW(group_calls({}, 1), std::runtime_error);
  EXPECT_EQ(group_calls(five, 5).span_us.size(), 1u);
}

}  // namespace
}  // namespace dsa::bench
