// CPU reference: one token and head at a time, double accumulation, no shortcuts (the host's
// threads take (token, 16 heads) items; the result is the same for any number of them).
#include "common/arg_checks.h"
#include "dsa/reference.h"
#include "reference/host_threads.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace dsa {

void sparse_mla_reference_cpu(const SparseMlaProblem& p, double* out_ref, double* lse_ref) {
  validate(p);
  const auto stride = detail::or_default;  // 0 = packed
  const int64_t H = p.num_heads;
  const int64_t qn_t = stride(p.q_nope_token_stride, H * kCkvDim), qn_h = stride(p.q_nope_head_stride, kCkvDim);
  const int64_t qp_t = stride(p.q_pe_token_stride, H * kKpeDim), qp_h = stride(p.q_pe_head_stride, kKpeDim);
  const int64_t ckv_s = stride(p.ckv_row_stride, kCkvDim), kpe_s = stride(p.kpe_row_stride, kKpeDim);
  const int64_t idx_s = stride(p.indices_token_stride, p.topk);
  const int64_t num_rows = static_cast<int64_t>(p.num_pages) * p.page_size;
  const auto* qn = static_cast<const uint16_t*>(p.q_nope);
  const auto* qp = static_cast<const uint16_t*>(p.q_pe);
  const auto* ckv = static_cast<const uint16_t*>(p.ckv_cache);
  const auto* kpe = static_cast<const uint16_t*>(p.kpe_cache);
  const bool fp8 = p.kv_format == KvCacheFormat::fp8_ds_mla;
  const int64_t row_bytes = stride(p.ckv_row_stride, kFp8RowBytes);  // fp8_ds_mla: in bytes
  // Row r's 576 values (ckv | kpe), dequantized for fp8_ds_mla.
  const auto load_row = [&](int64_t r, double* kv) {
    if (!fp8) {
      for (int d = 0; d < kCkvDim; ++d) kv[d] = bf16_to_float(ckv[r * ckv_s + d]);
      for (int d = 0; d < kKpeDim; ++d) kv[kCkvDim + d] = bf16_to_float(kpe[r * kpe_s + d]);
      return;
    }
    const uint8_t* row = static_cast<const uint8_t*>(p.ckv_cache) + r * row_bytes;
    for (int d = 0; d < kCkvDim; ++d) kv[d] = fp8_ds_mla_ckv(row, d);
    for (int d = 0; d < kKpeDim; ++d) {
      uint16_t bits;
      std::memcpy(&bits, row + kFp8KpeOffset + 2 * d, 2);
      kv[kCkvDim + d] = bf16_to_float(bits);
    }
  };
  constexpr int kQk = kCkvDim + kKpeDim;
  constexpr int kHeadsPerItem = 16;  // H is a multiple of 16 (validate)

  struct Scratch {  // one per thread
    std::vector<double> kv, logits;  // the token's valid rows [n, 576]; their logits
    std::vector<int32_t> rows;
  };
  // One work item: token t's heads [h0, h0 + 16). Items go to the host's threads; every output
  // element is computed by one thread in a fixed order, so the result does not depend on how
  // many threads there are.
  const auto run_item = [&](int64_t t, int64_t h0, Scratch& s) {
    std::vector<double>& kv = s.kv;
    std::vector<double>& logits = s.logits;
    std::vector<int32_t>& rows = s.rows;
    int n = 0;
    const int listed = p.topk_lengths ? std::clamp(p.topk_lengths[t], 0, p.topk) : p.topk;
    for (int k = 0; k < listed; ++k) {
      const int32_t r = p.indices[t * idx_s + k];
      if (r >= 0 && r < num_rows) rows[n++] = r;
    }
    kv.resize(size_t(n) * kQk);
    for (int k = 0; k < n; ++k) load_row(rows[k], &kv[size_t(k) * kQk]);
    double q[kQk];
    for (int64_t h = h0; h < std::min<int64_t>(h0 + kHeadsPerItem, H); ++h) {
      double* o = out_ref + (t * H + h) * kCkvDim;
      if (n == 0) {
        for (int d = 0; d < kCkvDim; ++d) o[d] = 0.0;
        lse_ref[t * H + h] = -std::numeric_limits<double>::infinity();
        continue;
      }
      for (int d = 0; d < kCkvDim; ++d) q[d] = bf16_to_float(qn[t * qn_t + h * qn_h + d]);
      for (int d = 0; d < kKpeDim; ++d) q[kCkvDim + d] = bf16_to_float(qp[t * qp_t + h * qp_h + d]);
      double mx = -std::numeric_limits<double>::infinity();
      for (int k = 0; k < n; ++k) {
        // Eight running sums: one chain of 576 dependent adds would bound the whole reference.
        const double* row = &kv[size_t(k) * kQk];
        double acc[8] = {};
        for (int d = 0; d < kQk; d += 8)
          for (int j = 0; j < 8; ++j) acc[j] += q[d + j] * row[d + j];
        const double dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        logits[k] = dot * double(p.sm_scale);
        mx = std::max(mx, logits[k]);
      }
      double sum = 0.0;
      for (int k = 0; k < n; ++k) sum += (logits[k] = std::exp(logits[k] - mx));
      for (int d = 0; d < kCkvDim; ++d) o[d] = 0.0;
      for (int k = 0; k < n; ++k) {
        const double w = logits[k] / sum;
        for (int d = 0; d < kCkvDim; ++d) o[d] += w * kv[size_t(k) * kQk + d];
      }
      lse_ref[t * H + h] = (mx + std::log(sum)) / std::log(2.0);
    }
  };

  const int64_t head_items = (H + kHeadsPerItem - 1) / kHeadsPerItem;
  detail::for_each_item_on_host_threads(
      p.num_tokens * head_items,
      [&] { return Scratch{{}, std::vector<double>(p.topk), std::vector<int32_t>(p.topk)}; },
      [&](int64_t item, Scratch& s) {
        run_item(item / head_items, (item % head_items) * kHeadsPerItem, s);
      });
}

}  // namespace dsa
