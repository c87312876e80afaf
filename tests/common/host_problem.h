// A sparse MLA problem held in host vectors, with packed defaults; tests fill and mutate it.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/sparse_mla.h"
#include "workload.h"

namespace dsa::testing {

struct HostProblem {
  int T = 1, H = 16, topk = 8, page_size = 4, num_pages = 4;
  float sm_scale = 0.1352337788608801f;
  std::vector<uint16_t> q_nope, q_pe, ckv, kpe;
  std::vector<int32_t> indices;

  int64_t rows() const { return static_cast<int64_t>(num_pages) * page_size; }

  // Random q and cache (never zeros); indices from `spec` (its sizes are overwritten by ours).
  void fill(workload::IndexSpec spec, uint64_t seed) {
    q_nope = workload::random_bf16(size_t(T) * H * kCkvDim, 1.0, seed + 1);
    q_pe = workload::random_bf16(size_t(T) * H * kKpeDim, 1.0, seed + 2);
    ckv = workload::random_bf16(size_t(rows()) * kCkvDim, 0.5, seed + 3);
    kpe = workload::random_bf16(size_t(rows()) * kKpeDim, 0.5, seed + 4);
    spec.num_tokens = T;
    spec.topk = topk;
    spec.page_size = page_size;
    spec.num_pages = num_pages;
    indices = workload::make_indices(spec, seed + 5);
  }

  // Packed problem over these host arrays (outputs left for the caller).
  SparseMlaProblem view() const {
    SparseMlaProblem p;
    p.num_tokens = T; p.num_heads = H; p.topk = topk;
    p.page_size = page_size; p.num_pages = num_pages; p.sm_scale = sm_scale;
    p.q_nope = q_nope.data(); p.q_pe = q_pe.data();
    p.ckv_cache = ckv.data(); p.kpe_cache = kpe.data();
    p.indices = indices.data();
    return p;
  }
};

// A filled problem in one line: sizes, an index pattern and a seed.
inline HostProblem make_problem(int T, int H, int topk, int page_size, int num_pages, workload::IndexPattern pattern,
                                uint64_t seed, int prefix_len = 8192) {
  HostProblem hp;
  hp.T = T;
  hp.H = H;
  hp.topk = topk;
  hp.page_size = page_size;
  hp.num_pages = num_pages;
  workload::IndexSpec spec;
  spec.pattern = pattern;
  spec.prefix_len = prefix_len;
  hp.fill(spec, seed);
  return hp;
}

}  // namespace dsa::testing
