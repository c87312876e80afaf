// What the sparse and dense fuzzers share: a case's generator (its values drawn with workload.h's
// pick and log_uniform), planning with or without the case's choice, finding writes outside a
// tensor's elements, the first call and a call replayed from a CUDA graph, the loop over the cases.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "dsa/error.h"
#include "workload.h"

namespace dsa::bench {

// Case n of a run draws from its own generator: any case can be repeated alone.
inline uint64_t case_seed(uint64_t seed, int n) { return seed ^ (0x9e3779b97f4a7c15ull * uint64_t(n + 1)); }

using workload::log_uniform;
using workload::pick;

// The plan with the case's choice (plan(true)), or without it (plan(false)) where the planner
// refuses the choice: counted in `refusals` by the message's first clause.
template <class Plan>
auto plan_with_choice(Plan&& plan, bool& refused, std::map<std::string, int>& refusals) -> decltype(plan(true)) {
  try {
    return plan(true);
  } catch (const Error& e) {
    refused = true;
    const std::string why = e.what();
    ++refusals[why.substr(0, why.find(','))];
    return plan(false);
  }
}

// What cudaMemset(0xff) leaves in the outputs before a call: NaN as bf16, fp16 and fp32.
constexpr uint16_t kPoison16 = 0xffff;
constexpr uint32_t kPoison32 = 0xffffffffu;

// One dimension of a strided tensor: `count` indices `stride` elements apart.
struct Dim {
  int64_t count, stride;
};
// The elements of `buf` outside a tensor of rows of `row` contiguous elements at the strides of
// `dims` that no longer hold `poison`: writes the call had no business making.
template <class T>
int64_t count_stray_writes(const std::vector<T>& buf, T poison, int64_t row, std::initializer_list<Dim> dims) {
  std::vector<char> inside(buf.size(), 0);
  std::vector<int64_t> starts{0};
  for (const Dim& d : dims) {
    std::vector<int64_t> next;
    for (int64_t s : starts)
      for (int64_t i = 0; i < d.count; ++i) next.push_back(s + i * d.stride);
    starts.swap(next);
  }
  for (int64_t s : starts) std::fill_n(inside.begin() + s, row, 1);
  int64_t stray = 0;
  for (size_t i = 0; i < buf.size(); ++i) stray += !inside[i] && buf[i] != poison ? 1 : 0;
  return stray;
}

// Captures `launch` on a stream of its own, replays the graph once and waits: "" or what failed.
template <class Launch>
std::string replay_in_graph(Launch&& launch) {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::string error;
  DSA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DSA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    launch(stream);
  } catch (const Error& e) {
    error = std::string("the forward refused to be captured: ") + e.what();
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (error.empty() && end != cudaSuccess) error = std::string("graph capture: ") + cudaGetErrorString(end);
  if (error.empty() && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) error = "graph instantiation failed";
  if (error.empty()) {
    DSA_CUDA_CHECK(cudaDeviceSynchronize());  // the stream does not wait for the legacy stream's poison
    DSA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DSA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaGetLastError();  // a failed capture's error is reported above, not left for the next call
  return error;
}

// A case's verdict.
struct FuzzOutcome {
  bool ok = false, refused_choice = false;  // refused_choice: the planner refused the case's choice
  std::string plan, detail;
};

// The forward's first call (`launch`), waited for: "" or the refusal of a validated problem,
// which fails the case. A CUDA error throws: the context is unusable, the run stops.
template <class Launch>
std::string first_call(Launch&& launch) {
  try {
    launch();
  } catch (const Error& e) {
    return std::string("the forward refused a validated problem: ") + e.what();
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) throw Error(std::string("CUDA error after the forward: ") + cudaGetErrorString(err));
  return "";
}

// Runs cases [first, first + cases) of `seed`: draw(rng, n) makes a case (with describe()),
// run(case, rng) judges it. Prints each failure with the command that repeats it (`repeat`: the
// fuzz command's own flags), then a summary; returns 0 if every case passed, else 1.
template <class Draw, class Run>
int run_fuzz_cases(int first, int cases, uint64_t seed, bool verbose, const std::string& name, const std::string& repeat,
                   const std::map<std::string, int>& refusals, Draw&& draw, Run&& run) {
  std::map<std::string, int> plans;
  int failed = 0, refused = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto repeat_line = [&](int n) {
    std::printf("  repeat: dsa-bench %s --seed %llu --first %d --cases 1 --verbose\n", repeat.c_str(),
                static_cast<unsigned long long>(seed), n);
  };
  for (int n = first; n < first + cases; ++n) {
    workload::Rng rng(case_seed(seed, n));
    const auto c = draw(rng, n);
    if (verbose) std::printf("%s\n", c.describe().c_str()), std::fflush(stdout);
    FuzzOutcome r;
    try {
      r = run(c, rng);
    } catch (const Error& e) {  // a CUDA error leaves the context unusable: stop here
      std::printf("FAIL %s\n  %s\n", c.describe().c_str(), e.what());
      repeat_line(n);
      return 1;
    }
    refused += r.refused_choice ? 1 : 0;
    ++plans[r.plan];
    if (!r.ok) {
      ++failed;
      std::printf("FAIL %s\n  plan %s: %s\n", c.describe().c_str(), r.plan.c_str(), r.detail.c_str());
      repeat_line(n);
    } else if (verbose) {
      std::printf("  ok, plan %s%s: %s\n", r.plan.c_str(), r.refused_choice ? " (the choice was refused: the planner's)" : "",
                  r.detail.c_str());
    }
    std::fflush(stdout);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %d cases, %d failed, %d choices refused (the planner's plan ran), %zu distinct plans, %.1f s\n", name.c_str(),
              cases, failed, refused, plans.size(), s);
  for (const auto& [why, count] : refusals) std::printf("  refused %dx: %s\n", count, why.c_str());
  std::string kinds;
  for (const auto& [label, count] : plans) kinds += " " + label + ":" + std::to_string(count);
  std::printf("  plans:%s\n", kinds.c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace dsa::bench
