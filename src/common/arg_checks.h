// Argument checks shared by the public entry points; each failure is a dsa::Error naming the
// argument and the value it got.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "dsa/error.h"

namespace dsa::detail {

[[noreturn]] inline void fail(const std::string& arg, const std::string& why) { throw Error(arg + ": " + why); }

inline void require_pointer(const void* ptr, const char* name, size_t align) {
  if (ptr == nullptr) fail(name, "pointer is null");
  if (reinterpret_cast<uintptr_t>(ptr) % align != 0)
    fail(name, "pointer must be " + std::to_string(align) + "-byte aligned");
}

// 16-bit rows are moved in 16-byte pieces: a row start must stay 16-byte aligned.
inline void require_vector_stride(int64_t stride, const char* name) {
  if (stride < 0) fail(name, "stride must be >= 0, got " + std::to_string(stride));
  if (stride % 8 != 0)
    fail(name, "stride must be a multiple of 8 16-bit elements (16 bytes), got " + std::to_string(stride));
}

// Rows of `width` elements written at sum_d index_d * stride_d (dims given as {stride, extent})
// must not overlap: sorted by stride, each stride must clear everything the smaller ones span.
inline void require_disjoint(const char* name, int64_t width,
                             std::initializer_list<std::pair<int64_t, int64_t>> stride_extent) {
  std::vector<std::pair<int64_t, int64_t>> dims(stride_extent);
  std::sort(dims.begin(), dims.end());
  int64_t need = width;
  for (auto [stride, extent] : dims) {
    if (extent <= 1) continue;
    if (stride < need)
      fail(name, "strides overlap (stride " + std::to_string(stride) + " < " + std::to_string(need) + " elements)");
    need = stride * extent;
  }
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int64_t or_default(int64_t v, int64_t packed) { return v == 0 ? packed : v; }

}  // namespace dsa::detail
