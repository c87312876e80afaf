// A sparse MLA problem held in host vectors, with packed defaults; tests fill and mutate it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dsa/reference.h"
#include "dsa/sparse_mla.h"
#include "workload.h"

namespace dsa::testing {

struct HostProblem {
  int T = 1, H = 16, topk = 8, page_size = 4, num_pages = 4;
  float sm_scale = 0.1352337788608801f;
  std::vector<uint16_t> q_nope, q_pe, ckv, kpe;
  std::vector<int32_t> indices;
  KvCacheFormat kv_format = KvCacheFormat::bf16;
  std::vector<uint8_t> kv_fp8;  // fp8_ds_mla rows (to_fp8), [rows, kFp8RowBytes]

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

  // The cache as fp8_ds_mla rows quantized from ckv and kpe, and ckv replaced by its dequantized
  // values rounded to bf16 (exact with power-of-two scales: then the bf16 problem is the same
  // problem, whose outputs the kernels must nearly reproduce; Fp8AgreesWithTheBf16CacheOfItsValues).
  void to_fp8(bool power_of_two_scales) {
    kv_format = KvCacheFormat::fp8_ds_mla;
    kv_fp8.assign(size_t(rows()) * kFp8RowBytes, 0);
    std::vector<float> values(kCkvDim);
    for (int64_t r = 0; r < rows(); ++r) {
      for (int d = 0; d < kCkvDim; ++d) values[d] = bf16_to_float(ckv[size_t(r) * kCkvDim + d]);
      uint8_t* row = &kv_fp8[size_t(r) * kFp8RowBytes];
      quantize_fp8_ds_mla_row(values.data(), &kpe[size_t(r) * kKpeDim], row, power_of_two_scales);
      for (int d = 0; d < kCkvDim; ++d) ckv[size_t(r) * kCkvDim + d] = float_to_bf16(static_cast<float>(fp8_ds_mla_ckv(row, d)));
    }
  }

  // Packed problem over these host arrays (outputs left for the caller).
  SparseMlaProblem view() const {
    SparseMlaProblem p;
    p.num_tokens = T; p.num_heads = H; p.topk = topk;
    p.page_size = page_size; p.num_pages = num_pages; p.sm_scale = sm_scale;
    p.q_nope = q_nope.data(); p.q_pe = q_pe.data();
    p.kv_format = kv_format;
    if (kv_format == KvCacheFormat::fp8_ds_mla) {
      p.ckv_cache = kv_fp8.data();
    } else {
      p.ckv_cache = ckv.data(); p.kpe_cache = kpe.data();
    }
    p.indices = indices.data();
    return p;
  }

  // Token t keeps only the first len[t] positions of its list, clamped to [0, topk] as
  // topk_lengths is; the rest become -1.
  void keep_first_positions(const std::vector<int32_t>& len) {
    for (int t = 0; t < T; ++t) {
      const int keep = std::clamp(len[size_t(t)], 0, topk);
      std::fill(indices.begin() + size_t(t) * topk + keep, indices.begin() + size_t(t + 1) * topk, -1);
    }
  }
  void keep_first_positions(int valid) { keep_first_positions(std::vector<int32_t>(size_t(T), valid)); }

  // The same problem over the bf16 cache (after to_fp8: its dequantized values).
  HostProblem as_bf16() const {
    HostProblem b = *this;
    b.kv_format = KvCacheFormat::bf16;
    b.kv_fp8.clear();
    return b;
  }
};

// A filled problem in one line: sizes, an index pattern and a seed (prefix_len and
// tokens_per_sequence: workload::IndexSpec's).
inline HostProblem make_problem(int T, int H, int topk, int page_size, int num_pages, workload::IndexPattern pattern,
                                uint64_t seed, int prefix_len = 8192, int tokens_per_sequence = 1) {
  HostProblem hp;
  hp.T = T;
  hp.H = H;
  hp.topk = topk;
  hp.page_size = page_size;
  hp.num_pages = num_pages;
  workload::IndexSpec spec;
  spec.pattern = pattern;
  spec.prefix_len = prefix_len;
  spec.tokens_per_sequence = tokens_per_sequence;
  hp.fill(spec, seed);
  return hp;
}

}  // namespace dsa::testing
