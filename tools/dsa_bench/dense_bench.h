// `dsa-bench dense`: verifies the dense attention forward against the GPU reference (and the
// float64 CPU reference on small cases), then times it; TFLOP/s count 2 * B * N * Lq * Lk *
// (Dqk + Dv), halved when causal (the convention of shared/peers/dense_peers.py).
#pragma once

#include <string>
#include <vector>

#include "dsa/dense_attention.h"
#include "timing.h"

namespace dsa::bench {

struct DenseCase {
  std::string name;
  DType dtype = DType::bf16;
  int batch = 1, heads = 1, seqlen_q = 1, seqlen_k = 1, head_dim_qk = 128, head_dim_v = 128;
  bool causal = false;
  std::string target;  // the speed target it is held to, if any (free text)
};

struct DenseOptions : TimingOptions {
  std::string suite = "targets";
  // One custom case instead of a suite (batch > 0 selects it).
  int batch = 0, heads = 16, seqlen = 1024, seqlen_k = 0, head_dim = 128;
  bool causal = false;
  std::string dtype = "bf16";
  std::string kernel = "auto";  // plan override: auto, fa2 (sm80_mma), wgmma (sm90_wgmma)
  int block_q = 0;              // plan override
};

// Names: targets (the dense issue's table and DeepSeek's 192/128 prefill), smoke (small, odd
// lengths). Throws dsa::Error on an unknown name.
std::vector<DenseCase> dense_suite(const std::string& name);
std::vector<std::string> dense_suite_names();

int run_dense(const DenseOptions& o);

inline const char* dtype_name(DType d) { return d == DType::bf16 ? "bf16" : "fp16"; }
inline const char* kernel_name(DenseKernel k) { return k == DenseKernel::sm80_mma ? "fa2" : "wgmma"; }

}  // namespace dsa::bench
