// Device pieces both dense kernel generations share: the 16-bit element ops, and the masked
// online softmax of one warp's 16 query rows (the mma.sync m16n8 / wgmma m64nN accumulator
// layout: lane holds rows lane/4 and lane/4 + 8, columns 8n + 2(lane%4) + {0, 1}).
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/ptx.cuh"
#include "dense/params.h"

namespace dsa::detail {

// The two 16-bit input types: the mma.sync flavour and fp32 -> 2 x 16-bit packing.
template <typename Elem>
struct ElemOps;
template <>
struct ElemOps<__nv_bfloat16> {
  static __device__ __forceinline__ void mma(float* d, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ptx::mma_bf16_16816(*reinterpret_cast<float(*)[4]>(d), a, b0, b1);
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return ptx::pack_bf16x2(lo, hi); }
};
template <>
struct ElemOps<__half> {
  static __device__ __forceinline__ void mma(float* d, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ptx::mma_f16_16816(*reinterpret_cast<float(*)[4]>(d), a, b0, b1);
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return ptx::pack_f16x2(lo, hi); }
};

// The S accumulators of key n-tiles 2kk and 2kk+1, packed: exactly the A fragment of k-step kk
// of O += P V (no shared-memory trip).
template <typename Elem>
__device__ __forceinline__ void p_fragment(const float* s, int kk, uint32_t (&a)[4]) {
  const float* t = s + 8 * kk;
  a[0] = ElemOps<Elem>::pack(t[0], t[1]);
  a[1] = ElemOps<Elem>::pack(t[2], t[3]);
  a[2] = ElemOps<Elem>::pack(t[4], t[5]);
  a[3] = ElemOps<Elem>::pack(t[6], t[7]);
}

// One key tile of the online softmax for this lane's two rows: masks keys past the sequence end
// and (causal) past the diagonal, turns the raw scores S into P in place, updates the running max
// m (base-2 logit units) and this lane's partial row sums l, and returns in alpha the factor the
// rows of O must be multiplied by (rescale_rows). The scale is folded into the exponent's FFMA:
// the row max is taken on raw scores (their min when the scale is negative). A row that has seen
// no key keeps m = -inf and uses 0 as its reference, so fully masked rows stay exactly 0.
// kTree = true reduces both rows at once through 4-way trees (shorter dependent chains): +1-2 %
// at D = 64, whose softmax is the critical path, but -4 % at D = 128 (run 36), so it is per kernel.
template <int kSTiles, bool kCausal, bool kTree = false>
__device__ __forceinline__ void online_softmax_tile(float (&s)[4 * kSTiles], float (&m)[2], float (&l)[2],
                                                    float (&alpha)[2], const DenseParams& p, int key0,
                                                    int warp_row0, int lane) {
  const float scale = p.scale_log2;
  const bool negative = scale < 0.f;  // uniform
  const int row_in_warp = lane / 4, col_in_tile = 2 * (lane % 4);
  const bool past_end = key0 + kSTiles * 8 > p.seqlen_k;
  const bool crosses_diagonal = kCausal && key0 + kSTiles * 8 - 1 > warp_row0 + p.causal_offset;
  if (past_end || crosses_diagonal) {
    const float masked = negative ? INFINITY : -INFINITY;  // scaled, either gives -inf
#pragma unroll
    for (int n = 0; n < kSTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + n * 8 + col_in_tile + (e & 1);
        const int row = warp_row0 + row_in_warp + (e / 2) * 8;
        if (key >= p.seqlen_k || (kCausal && key > row + p.causal_offset)) s[4 * n + e] = masked;
      }
  }
  if constexpr (kTree) {
    // Both rows at once, and 4-way trees for the max and the sum: the softmax sits on each
    // warpgroup's critical path, and a 32-long chain of dependent FMNMX (or FADD) is latency.
    float top[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float t[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) t[i] = negative ? INFINITY : -INFINITY;
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        const float a = s[4 * n + 2 * r], b = s[4 * n + 2 * r + 1];
        t[n % 4] = negative ? fminf(t[n % 4], fminf(a, b)) : fmaxf(t[n % 4], fmaxf(a, b));
      }
      top[r] = negative ? fminf(fminf(t[0], t[1]), fminf(t[2], t[3])) : fmaxf(fmaxf(t[0], t[1]), fmaxf(t[2], t[3]));
    }
#pragma unroll
    for (int d = 1; d <= 2; d *= 2)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float o = __shfl_xor_sync(0xffffffffu, top[r], d);
        top[r] = negative ? fminf(top[r], o) : fmaxf(top[r], o);
      }
    float ref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mx = fmaxf(m[r], top[r] * scale);
      ref[r] = mx == -INFINITY ? 0.f : mx;
      alpha[r] = ptx::exp2_approx(m[r] - ref[r]);
      m[r] = mx;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        s[4 * n + 2 * r] = ptx::exp2_approx(fmaf(s[4 * n + 2 * r], scale, -ref[r]));
        s[4 * n + 2 * r + 1] = ptx::exp2_approx(fmaf(s[4 * n + 2 * r + 1], scale, -ref[r]));
        sum[n % 4] += s[4 * n + 2 * r] + s[4 * n + 2 * r + 1];
      }
      l[r] = l[r] * alpha[r] + ((sum[0] + sum[1]) + (sum[2] + sum[3]));
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float top = negative ? INFINITY : -INFINITY;
      if (!negative) {
#pragma unroll
        for (int n = 0; n < kSTiles; ++n) top = fmaxf(top, fmaxf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
      } else {
#pragma unroll
        for (int n = 0; n < kSTiles; ++n) top = fminf(top, fminf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]));
        top = fminf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        top = fminf(top, __shfl_xor_sync(0xffffffffu, top, 2));
      }
      const float mx = fmaxf(m[r], top * scale);
      const float ref = mx == -INFINITY ? 0.f : mx;
      alpha[r] = ptx::exp2_approx(m[r] - ref);
      m[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        s[4 * n + 2 * r] = ptx::exp2_approx(fmaf(s[4 * n + 2 * r], scale, -ref));
        s[4 * n + 2 * r + 1] = ptx::exp2_approx(fmaf(s[4 * n + 2 * r + 1], scale, -ref));
        sum += s[4 * n + 2 * r] + s[4 * n + 2 * r + 1];
      }
      l[r] = l[r] * alpha[r] + sum;
    }
  }
}

// O's rows times the softmax's rescale factors; skipped when no row of the warp moved its max
// (most tiles once the running max has settled).
template <int kOTiles>
__device__ __forceinline__ void rescale_rows(float (&o)[4 * kOTiles], const float (&alpha)[2]) {
  if (__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) return;
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) {
    o[4 * n] *= alpha[0];
    o[4 * n + 1] *= alpha[0];
    o[4 * n + 2] *= alpha[1];
    o[4 * n + 3] *= alpha[1];
  }
}

// End of the key loop: the full row sums (over the quad), 1 / l (0 for an empty row) and the
// base-2 lse (-inf for an empty row).
__device__ __forceinline__ void finish_rows(float (&m)[2], float (&l)[2], float (&inv)[2], float (&lse)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
    lse[r] = l[r] > 0.f ? m[r] + log2f(l[r]) : -INFINITY;
  }
}

// Requests 16-byte pieces of a tile (row r at g + r * row_stride_bytes) into shared memory at
// s_base + offset(r, c); rows >= rows_valid are zero-filled without reading global memory.
template <int kRows, int kChunks, int kThreads, typename Offset>
__device__ __forceinline__ void load_tile(uint32_t s_base, const char* g, int64_t row_stride_bytes, int rows_valid,
                                          Offset offset) {
  constexpr int kPieces = kRows * kChunks;
  static_assert(kPieces % kThreads == 0, "every thread copies the same number of pieces");
#pragma unroll
  for (int i = 0; i < kPieces / kThreads; ++i) {
    const int piece = i * kThreads + static_cast<int>(threadIdx.x);
    const int r = piece / kChunks, c = piece % kChunks;
    const bool ok = r < rows_valid;
    const char* src = ok ? g + r * row_stride_bytes + c * 16 : g;
    ptx::cp_async_16(s_base + offset(r, c), src, ok ? 16 : 0);
  }
}

// Writes a warp's 16 staged rows (16-byte pieces at staged + offset(r, c)) to out rows
// warp_row0.. (< seqlen_q), and this lane's lse values.
template <int kChunks, typename Offset>
__device__ __forceinline__ void store_rows(const uint8_t* staged, Offset offset, const DenseParams& p, int batch,
                                           int head, int warp_row0, int lane, const float (&lse)[2]) {
  char* out = static_cast<char*>(p.out) + 2 * (batch * p.out_batch_stride + head * p.out_head_stride);
#pragma unroll
  for (int i = 0; i < 16 * kChunks / 32; ++i) {
    const int piece = i * 32 + lane;
    const int r = piece / kChunks, c = piece % kChunks;
    const int row = warp_row0 + r;
    if (row < p.seqlen_q)
      *reinterpret_cast<uint4*>(out + 2 * (row * p.out_row_stride) + c * 16) =
          *reinterpret_cast<const uint4*>(staged + offset(r, c));
  }
  if (p.lse != nullptr && lane % 4 == 0) {
    float* dst = p.lse + batch * p.lse_batch_stride + head * p.lse_head_stride;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + lane / 4 + 8 * r;
      if (row < p.seqlen_q) dst[row] = lse[r];
    }
  }
}

}  // namespace dsa::detail
