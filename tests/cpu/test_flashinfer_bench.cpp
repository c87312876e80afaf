// FlashInfer-Bench workload files: round trip, and a clear error for each kind of bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "dsa/error.h"
#include "flashinfer_bench.h"

namespace dsa {
namespace {

namespace fs = std::filesystem;

class FibFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dsa_fib_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }
  // A valid one-line workload referring to `blob` (written separately).
  static std::string line(const std::string& blob, const std::string& key = "sparse_indices", int T = 2) {
    return R"({"definition":"dsa_sparse_attention_h16_ckv512_kpe64_topk4_ps64","workload":{"uuid":"u1","axes":{"num_tokens":)" +
           std::to_string(T) + R"(,"num_pages":3},"inputs":{"q_nope":{"type":"random"},"sm_scale":{"type":"scalar","value":0.5},"sparse_indices":{"type":"safetensors","path":")" +
           blob + R"(","tensor_key":")" + key + R"("}}}})" + "\n";
  }
  fs::path dir_;
};

void expect_error(const std::function<void()>& f, const std::string& must_contain) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << must_contain << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(must_contain), std::string::npos) << e.what();
  }
}

TEST_F(FibFiles, WriteThenReadRoundTrips) {
  fib::Workload w;
  w.num_heads = 16; w.topk = 5; w.page_size = 1; w.num_tokens = 3; w.num_pages = 100; w.sm_scale = 0.25f;
  w.uuid = "case-a";
  w.indices = {0, 1, 2, -1, -1, 7, 99, -1, 5, 5, -1, -1, -1, -1, -1};
  fib::Workload v = w;
  v.uuid = "case-b";
  v.num_heads = 64;
  fib::write_workloads({w, v}, dir_.string(), "set");
  const auto got = fib::read_workloads(path("set.jsonl"));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].uuid, "case-a");
  EXPECT_EQ(got[0].indices, w.indices);
  EXPECT_EQ(got[0].topk, 5);
  EXPECT_EQ(got[0].page_size, 1);
  EXPECT_EQ(got[0].num_pages, 100);
  EXPECT_FLOAT_EQ(got[0].sm_scale, 0.25f);
  EXPECT_EQ(got[1].num_heads, 64);
  EXPECT_EQ(got[1].definition, "dsa_sparse_attention_h64_ckv512_kpe64_topk5_ps1");
}

TEST_F(FibFiles, MalformedJsonNamesFileAndLine) {
  fib::write_safetensors_i32(path("a.safetensors"), "sparse_indices", std::vector<int32_t>(8, 1), {2, 4});
  write("w.jsonl", line("a.safetensors") + "{not json\n");
  expect_error([&] { fib::read_workloads(path("w.jsonl")); }, "w.jsonl:2: not JSON");
}

TEST_F(FibFiles, MissingFieldsAreNamed) {
  write("w.jsonl", R"({"definition":"dsa_sparse_attention_h16_ckv512_kpe64_topk4_ps64","workload":{"uuid":"x","inputs":{}}})" "\n");
  expect_error([&] { fib::read_workloads(path("w.jsonl")); }, "missing field 'axes'");
  write("w2.jsonl", R"({"definition":"gqa_paged_decode","workload":{}})" "\n");
  expect_error([&] { fib::read_workloads(path("w2.jsonl")); }, "not a dsa_sparse_attention");
  write("w3.jsonl", R"({"definition":"dsa_sparse_attention_h16_ckv512_kpe64_topk4_ps64","workload":{"uuid":"x","axes":{"num_tokens":2,"num_pages":3},"inputs":{"q_nope":{"type":"random"}}}})" "\n");
  expect_error([&] { fib::read_workloads(path("w3.jsonl")); }, "sparse_indices is missing");
}

TEST_F(FibFiles, MissingSafetensorsKey) {
  fib::write_safetensors_i32(path("a.safetensors"), "other", std::vector<int32_t>(8, 1), {2, 4});
  write("w.jsonl", line("a.safetensors"));
  expect_error([&] { fib::read_workloads(path("w.jsonl")); }, "no tensor 'sparse_indices'");
}

TEST_F(FibFiles, WrongDtypeIsRejected) {
  // A hand-written F32 tensor of the right size.
  const std::string header = R"({"sparse_indices":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}})";
  std::ofstream f(path("a.safetensors"), std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header << std::string(32, '\0');
  f.close();
  write("w.jsonl", line("a.safetensors"));
  expect_error([&] { fib::read_workloads(path("w.jsonl")); }, "dtype must be I32");
}

TEST_F(FibFiles, TruncatedFileIsRejected) {
  fib::write_safetensors_i32(path("a.safetensors"), "sparse_indices", std::vector<int32_t>(8, 1), {2, 4});
  fs::resize_file(path("a.safetensors"), fs::file_size(path("a.safetensors")) - 4);
  write("w.jsonl", line("a.safetensors"));
  expect_error([&] { fib::read_workloads(path("w.jsonl")); }, "truncated");
  fs::resize_file(path("a.safetensors"), 5);
  expect_error([&] { fib::read_workloads(path("w.jsonl")); }, "truncated");
}

TEST_F(FibFiles, ShapeMustMatchAxesAndTopk) {
  fib::write_safetensors_i32(path("a.safetensors"), "sparse_indices", std::vector<int32_t>(12, 1), {3, 4});
  write("w.jsonl", line("a.safetensors", "sparse_indices", 2));
  expect_error([&] { fib::read_workloads(path("w.jsonl")); }, "shape must be [num_tokens=2, topk=4]");
}

}  // namespace
}  // namespace dsa
