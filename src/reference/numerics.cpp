// Host-side number handling shared by the references and tests: 16-bit float conversions and
// the rule that judges a result against a float64 reference.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/reference.h"

namespace dsa {

float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t float_to_bf16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  if (std::isnan(value)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float fp16_to_float(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  float f;
  if (exponent == 0) f = std::ldexp(static_cast<float>(mantissa), -24);  // zero and subnormals
  else if (exponent == 31) f = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else f = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  return (bits & 0x8000) ? -f : f;
}

uint16_t float_to_fp16(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return sign | 0x7e00;
  if (std::isinf(value)) return sign | 0x7c00;
  const double a = std::fabs(static_cast<double>(value));
  if (a < std::ldexp(1.0, -14))  // subnormal range: a multiple of 2^-24 (1024 rounds up to the smallest normal)
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exponent = e - 1;
  double mantissa = std::nearbyint(std::ldexp(a, 10 - exponent));  // in [1024, 2048]
  if (mantissa == 2048) {
    mantissa = 1024;
    ++exponent;
  }
  if (exponent > 15) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((exponent + 15) << 10) | (static_cast<int>(mantissa) - 1024));
}

float fp8_e4m3_to_float(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  float f;
  if (exponent == 0xf && mantissa == 0x7) f = std::numeric_limits<float>::quiet_NaN();
  else if (exponent == 0) f = std::ldexp(static_cast<float>(mantissa), -9);  // zero and subnormals
  else f = std::ldexp(static_cast<float>(mantissa | 0x8), exponent - 10);
  return (bits & 0x80) ? -f : f;
}

uint8_t float_to_fp8_e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return 0x7f;
  const double a = std::min(std::fabs(static_cast<double>(value)), 448.0);  // saturate, inf included
  if (a < std::ldexp(1.0, -6))  // subnormal range: a multiple of 2^-9 (8 rounds up to the smallest normal)
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  int e = 0;
  std::frexp(a, &e);
  int exponent = e - 1;
  double mantissa = std::nearbyint(std::ldexp(a, 3 - exponent));  // in [8, 16]
  if (mantissa == 16) {
    mantissa = 8;
    ++exponent;
  }
  if (exponent > 8 || (exponent == 8 && mantissa > 14)) return sign | 0x7e;  // 448 at most
  return sign | static_cast<uint8_t>(((exponent + 7) << 3) | (static_cast<int>(mantissa) - 8));
}

void quantize_fp8_ds_mla_row(const float* ckv, const uint16_t* kpe, uint8_t* row, bool power_of_two_scales) {
  for (int b = 0; b < kCkvDim / kFp8ScaleDims; ++b) {
    float amax = 0.f;
    for (int d = b * kFp8ScaleDims; d < (b + 1) * kFp8ScaleDims; ++d) amax = std::max(amax, std::fabs(ckv[d]));
    float scale = amax > 0.f ? amax / 448.f : 1.f;
    if (power_of_two_scales) scale = std::ldexp(1.f, static_cast<int>(std::ceil(std::log2(scale))));
    std::memcpy(row + kFp8ScalesOffset + 4 * b, &scale, 4);
    for (int d = b * kFp8ScaleDims; d < (b + 1) * kFp8ScaleDims; ++d) row[d] = float_to_fp8_e4m3(ckv[d] / scale);
  }
  std::memcpy(row + kFp8KpeOffset, kpe, kKpeDim * 2);
}

double fp8_ds_mla_ckv(const uint8_t* row, int d) {
  float scale;
  std::memcpy(&scale, row + kFp8ScalesOffset + 4 * (d / kFp8ScaleDims), 4);
  return double(fp8_e4m3_to_float(row[d])) * scale;
}

float to_float(DType dtype, uint16_t bits) {
  return dtype == DType::bf16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

uint16_t from_float(DType dtype, float value) {
  return dtype == DType::bf16 ? float_to_bf16(value) : float_to_fp16(value);
}

Agreement compare_values(const float* out, int64_t n_out, const float* lse, int64_t n_lse, const double* out_ref,
                         const double* lse_ref) {
  Agreement a;
  a.elements = n_out;
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < n_out; ++i) {
    const double got = out[i], ref = out_ref[i];
    if (!std::isfinite(got)) {
      ++a.non_finite;
      continue;
    }
    const double err = std::fabs(got - ref);
    a.max_abs_err = std::max(a.max_abs_err, err);
    if (err > 1e-2 && err > 1e-2 * std::fabs(ref)) ++a.failed_elements;
    err2 += err * err;
    ref2 += ref * ref;
  }
  a.rel_l2_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  for (int64_t i = 0; i < n_lse; ++i) {
    const double got = lse[i], ref = lse_ref[i];
    if (std::isnan(got) || std::isfinite(got) != std::isfinite(ref) || (std::isinf(got) && got != ref)) {
      ++a.lse_mismatch;
      continue;
    }
    if (std::isfinite(ref)) a.max_lse_err = std::max(a.max_lse_err, std::fabs(got - ref));
  }
  return a;
}

Agreement compare_to_reference(const uint16_t* out, const float* lse, const double* out_ref, const double* lse_ref,
                               int num_tokens, int num_heads) {
  const int64_t rows = static_cast<int64_t>(num_tokens) * num_heads;
  std::vector<float> widened(rows * kCkvDim);
  for (size_t i = 0; i < widened.size(); ++i) widened[i] = bf16_to_float(out[i]);
  return compare_values(widened.data(), rows * kCkvDim, lse, rows, out_ref, lse_ref);
}

std::string Agreement::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "failed %lld/%lld non-finite %lld max_abs %.3g rel_l2 %.3g lse_err %.3g lse_mismatch %lld",
                static_cast<long long>(failed_elements), static_cast<long long>(elements),
                static_cast<long long>(non_finite), max_abs_err, rel_l2_err, max_lse_err,
                static_cast<long long>(lse_mismatch));
  return buf;
}

}  // namespace dsa
