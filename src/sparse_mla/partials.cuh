// A split's partial output: its 16 x 512 tile normalised by the split's own row sums, stored as
// bf16 for the combine to merge in fp32 with the split's fp32 lse (as FlashInfer's split-KV keeps
// its partial outputs in the output's dtype; FlashMLA keeps fp32). Half the bytes of fp32 in both
// directions: 64 / 128 heads at T = 16 / 4 -7 / -13 %, 16 heads T <= 16 -0.1 to -0.6 us, T = 128
// -3 %; relative L2 error against float64 1.3e-3 -> 2.3e-3 on random data (bf16 cache), the
// tests' bound 1e-2 (docs/perf.md, run 409).
#pragma once

#include <cstdint>

#include "common/ptx.cuh"

namespace dsa::detail {

// A quad's row over two adjacent n8 mma tiles (lane c holds dims 2c, 2c+1 of each: a0 a1 of tile
// j, b0 b1 of tile j + 1), elem = the row's first dim of tile j, 16-dim aligned. Lane c stores
// dims 4c..4c+3, so each store is one whole 32-byte sector (a store per tile fills half a sector,
// +0.4 us per CTA at T = 1, run 408). Every lane of the warp calls it; `store` says whether this
// lane's row is written.
__device__ __forceinline__ void store_partial_tiles(uint16_t* partial_out, int64_t elem, float a0, float a1, float b0,
                                                    float b1, bool store) {
  const int lane = threadIdx.x % 32, c = lane % 4;
  const uint32_t tile_j = ptx::pack_bf16x2(a0, a1), tile_j1 = ptx::pack_bf16x2(b0, b1);
  const int src = (lane & ~3) | (2 * (c % 2));  // lanes 0, 1 take dims 0-7 of tile j from lanes 0-3; 2, 3 tile j + 1's
  const uint32_t x0 = __shfl_sync(0xffffffffu, tile_j, src), x1 = __shfl_sync(0xffffffffu, tile_j1, src);
  const uint32_t y0 = __shfl_sync(0xffffffffu, tile_j, src + 1), y1 = __shfl_sync(0xffffffffu, tile_j1, src + 1);
  if (store) *reinterpret_cast<uint2*>(partial_out + elem + 4 * c) = c >= 2 ? make_uint2(x1, y1) : make_uint2(x0, y0);
}

// Four adjacent dims at elem (4-dim aligned).
__device__ __forceinline__ void store_partial4(uint16_t* partial_out, int64_t elem, float4 v) {
  *reinterpret_cast<uint2*>(partial_out + elem) = make_uint2(ptx::pack_bf16x2(v.x, v.y), ptx::pack_bf16x2(v.z, v.w));
}

// The combine loads four dims raw and widens them only after every load of its round is issued:
// a select around a load and its widening made each load wait for the one before (+1.6 us at
// T = 1, run 408).
__device__ __forceinline__ uint2 load_partial4(const uint16_t* partial_out, int64_t elem) {
  return *reinterpret_cast<const uint2*>(partial_out + elem);
}
__device__ __forceinline__ float4 widen_partial4(uint2 u) {  // bf16 -> fp32 is a 16-bit shift
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}

}  // namespace dsa::detail
