// `dsa-bench fuzz`: random problems through the public API, each against the references. A case
// draws a shape (H, T, topk, page size, cache rows), an index pattern, a cache format and row
// stride, layouts of q, out, lse and indices with gaps, per-token list lengths with stale rows
// past them, a sharing hint, a softmax scale of either sign or 0, and half the time a PlanChoice
// (a choice the planner refuses is counted, and the case runs the planner's plan); every 16th
// case (number % 16 == 7) is redrawn as an unhinted 16-head call from T = 2048 (fp8 8192, past
// the default --max-tokens), which the planner gives a share probe (SparseMlaPlan::share_probe).
// It fails on:
//  - disagreement (the tests' rule) with the GPU reference, or with the float64 CPU reference
//    where that is quick: the CPU reference shares no code with the forward's launch path, where
//    the GPU reference's parameters come from;
//  - a write outside out's and lse's elements, or past the plan's workspace;
//  - a second call, captured in a CUDA graph and replayed on the workspace the first call left,
//    that differs from the first in any bit;
//  - count_invalid_indices on the device and on the host disagreeing over the case's lists;
//  - a validated problem the forward refuses, or a CUDA error.
// Every case can be repeated alone: dsa-bench fuzz --seed S --first N --cases 1 --verbose
// `--dense` fuzzes the dense attention forward the same way (dense_fuzz.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace dsa::bench {

struct FuzzOptions {
  int cases = 200;
  uint64_t seed = 0;       // 0: from the clock (printed, so a failing run can be repeated)
  int first = 0;           // the first case number
  std::string kv = "both";  // bf16, fp8 or both (drawn per case)
  int max_tokens = 4096;   // T at most (drawn log-uniform from 1)
  int64_t max_work = int64_t{1} << 26;  // T x H x topk at most: the plain GPU reference's time
  bool verbose = false;    // a line per case, not only per failure
  bool list = false;       // print the cases and their plans on a described H100; run nothing
  bool dense = false;      // the dense attention forward instead (dense_fuzz.cpp)
};

// Returns the process exit code: 0 all passed, 1 a case failed, 77 no CUDA device.
int run_fuzz(const FuzzOptions& o);
// The dense forward's fuzzer (a device present, or o.list): each case draws the dtype, B, N, Lq,
// Lk, the head dims, causal, the layouts of q, k, v (one interleaved buffer too), out and lse (or
// none), a scale of either sign and, half the time, a DenseChoice; judged as run_fuzz judges.
int run_dense_fuzz(const FuzzOptions& o, uint64_t seed);

}  // namespace dsa::bench
