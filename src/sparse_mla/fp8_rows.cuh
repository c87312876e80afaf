// fp8_ds_mla (KvCacheFormat::fp8_ds_mla) arithmetic shared by the split-K and shared-rows
// kernels. Device-only; include from .cu files.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/ptx.cuh"

namespace dsa::detail {

// Q goes into the f16 MMAs as x * 2^-shift: the shift that brings the largest |element| amax to
// [2^14, 2^15) (f16's range holds it and its products' sums stay in fp32 range), 0 for amax = 0.
// shift >= -125 keeps 2^-shift a finite float for the tiniest amax.
__device__ __forceinline__ int f16_shift(float amax) { return amax > 0.f ? max(ilogbf(amax) - 14, -125) : 0; }

}  // namespace dsa::detail
