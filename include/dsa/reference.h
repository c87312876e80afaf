// CPU ground truth for the sparse MLA and dense attention forwards, and the rule that judges a
// result against it. Host-only. 16-bit values are passed as their raw bit patterns (uint16_t).
#pragma once

#include <cstdint>
#include <string>

#include "dsa/dense_attention.h"
#include "dsa/sparse_mla.h"

namespace dsa {

float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);  // round to nearest even; NaN stays NaN
float fp16_to_float(uint16_t bits);
uint16_t float_to_fp16(float value);  // round to nearest even; overflow to inf; NaN stays NaN
float fp8_e4m3_to_float(uint8_t bits);  // exact; 0x7f / 0xff are NaN
uint8_t float_to_fp8_e4m3(float value);  // round to nearest even, saturating at +-448; NaN -> 0x7f
// One fp8_ds_mla cache row (KvCacheFormat::fp8_ds_mla, kFp8RowBytes) from 512 ckv values and 64
// bf16 kpe values: each 128-dim block's scale is its absolute maximum / 448 (1 for a block of
// zeros), rounded up to a power of two with power_of_two_scales (then every dequantized value is
// exact in bf16).
void quantize_fp8_ds_mla_row(const float* ckv, const uint16_t* kpe, uint8_t* row, bool power_of_two_scales = false);
// ckv dim d of an fp8_ds_mla row, dequantized exactly: e4m3 x its block's scale. (Split-K keeps
// the product exact; shared rows rounds it to f16.)
double fp8_ds_mla_ckv(const uint8_t* row, int d);
// The 16-bit type `dtype` names: bits -> float, and float -> bits as above.
float to_float(DType dtype, uint16_t bits);
uint16_t from_float(DType dtype, float value);

// The semantics of sparse_mla.h with double accumulation. All pointers in `problem` are host
// pointers; strides as in the GPU API. Writes packed out_ref[T, H, 512] and lse_ref[T, H].
void sparse_mla_reference_cpu(const SparseMlaProblem& problem, double* out_ref, double* lse_ref);

// The semantics of dense_attention.h with double accumulation, over host pointers (strides as in
// the GPU API). Writes packed out_ref[B, N, Lq, Dv] and lse_ref[B, N, Lq].
void dense_attention_reference_cpu(const DenseAttentionProblem& problem, double* out_ref, double* lse_ref);

// How a result compares with a reference. An element fails only if both its absolute and its
// relative error exceed 1e-2 (the FlashInfer-Bench rule); NaN/inf in out fails always.
struct Agreement {
  int64_t elements = 0, failed_elements = 0, non_finite = 0;
  double max_abs_err = 0, rel_l2_err = 0;  // rel_l2 = |out - ref| / |ref| over all of out
  double max_lse_err = 0;                  // over finite reference lse
  int64_t lse_mismatch = 0;                // -inf where the reference is finite, or the reverse, or NaN
  bool ok(double tol = 1e-2) const {
    return failed_elements == 0 && non_finite == 0 && lse_mismatch == 0 && rel_l2_err <= tol && max_lse_err <= tol;
  }
  std::string summary() const;
};

// out[n_out] (already widened to float) and lse[n_lse] against their references.
Agreement compare_values(const float* out, int64_t n_out, const float* lse, int64_t n_lse, const double* out_ref,
                         const double* lse_ref);

// out: packed bf16 [T, H, 512]; lse: packed fp32 [T, H].
Agreement compare_to_reference(const uint16_t* out, const float* lse, const double* out_ref, const double* lse_ref,
                               int num_tokens, int num_heads);

}  // namespace dsa
