// CPU reference for dense attention: one query row at a time, double accumulation, no shortcuts
// (rows are items on the host's threads).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/arg_checks.h"
#include "dsa/reference.h"
#include "reference/host_threads.h"

namespace dsa {

void dense_attention_reference_cpu(const DenseAttentionProblem& p, double* out_ref, double* lse_ref) {
  validate(p);
  const auto stride = detail::or_default;  // 0 = packed
  const int64_t N = p.num_heads, Lq = p.seqlen_q, Lk = p.seqlen_k, Dqk = p.head_dim_qk, Dv = p.head_dim_v;
  // Row r of head (b, n) of tensor t with default packed strides.
  auto row = [&](const DenseTensor& t, int64_t b, int64_t n, int64_t r, int64_t rows, int64_t dim) {
    const int64_t rs = stride(t.row_stride, dim), hs = stride(t.head_stride, rows * dim),
                  bs = stride(t.batch_stride, N * rows * dim);
    return static_cast<const uint16_t*>(t.data) + b * bs + n * hs + r * rs;
  };
  // One work item: query row i of head (b, n), computed by one thread (the result does not
  // depend on how many threads there are).
  const auto run_row = [&](int64_t b, int64_t n, int64_t i, std::vector<double>& logits) {
    double* o = out_ref + ((b * N + n) * Lq + i) * Dv;
    double* lse = lse_ref + (b * N + n) * Lq + i;
    const int64_t key_end = p.causal ? std::clamp<int64_t>(i + (Lk - Lq) + 1, 0, Lk) : Lk;
    std::fill(o, o + Dv, 0.0);
    if (key_end == 0) {
      *lse = -std::numeric_limits<double>::infinity();
      return;
    }
    const uint16_t* q = row(p.q, b, n, i, Lq, Dqk);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < key_end; ++j) {
      const uint16_t* k = row(p.k, b, n, j, Lk, Dqk);
      double dot = 0.0;
      for (int64_t d = 0; d < Dqk; ++d) dot += double(to_float(p.dtype, q[d])) * to_float(p.dtype, k[d]);
      logits[j] = dot * double(p.scale);
      mx = std::max(mx, logits[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < key_end; ++j) sum += std::exp(logits[j] - mx);
    for (int64_t j = 0; j < key_end; ++j) {
      const double w = std::exp(logits[j] - mx) / sum;
      const uint16_t* v = row(p.v, b, n, j, Lk, Dv);
      for (int64_t d = 0; d < Dv; ++d) o[d] += w * to_float(p.dtype, v[d]);
    }
    *lse = (mx + std::log(sum)) / std::log(2.0);
  };
  detail::for_each_item_on_host_threads(
      p.batch * N * Lq, [&] { return std::vector<double>(Lk); },
      [&](int64_t item, std::vector<double>& logits) { run_row(item / (N * Lq), item / Lq % N, item % Lq, logits); });
}

}  // namespace dsa
