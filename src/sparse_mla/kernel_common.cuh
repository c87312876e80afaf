// Row layout and the row gather shared by the sparse MLA kernels (device code, .cu only).
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "sparse_mla/params.h"

namespace dsa::detail {

constexpr int kQkDim = kCkvDim + kKpeDim;       // 576
constexpr int kChunksPerRow = kQkDim * 2 / 16;  // 72 x 16 B per gathered row
constexpr int kCkvChunks = kCkvDim * 2 / 16;    // 64
constexpr int kRowBytes = kQkDim * 2 + 16;      // 1168: +16 B keeps ldmatrix conflict-free
// Row stride of the bf16 output tile staged in shared memory by the epilogues (+8 elements:
// rows of the 8 quads land in different banks).
constexpr int kStagedStrideBf16 = kCkvDim + 8;

// One warp copies KV row `row` (ckv | kpe, 1152 B) into shared memory at `dst`: lanes take ckv
// chunks l and l+32, lanes 0-7 the kpe chunk. bytes = 0 zero-fills without reading.
__device__ __forceinline__ void gather_row(const SparseMlaParams& p, uint32_t dst, int64_t row, uint32_t bytes,
                                           int lane) {
  const uint16_t* ckv = p.ckv + row * p.ckv_row_stride + lane * 8;
  dst += lane * 16;
  ptx::cp_async_16(dst, ckv, bytes);
  ptx::cp_async_16(dst + 512, ckv + 256, bytes);
  if (lane < kKpeDim * 2 / 16) ptx::cp_async_16(dst + kCkvDim * 2, p.kpe + row * p.kpe_row_stride + lane * 8, bytes);
}

// Q of one token's 16 heads (576 wide) into shared rows of kRowBytes by cp.async, `threads`
// threads cooperating (thread index `tid`).
__device__ __forceinline__ void stage_q(const SparseMlaParams& p, uint32_t dst, int t, int h0, int tid, int threads) {
  for (int c = tid; c < kHeadGroup * kChunksPerRow; c += threads) {
    const int h = c / kChunksPerRow, col = c - h * kChunksPerRow;
    const uint16_t* src =
        col < kCkvChunks
            ? p.q_nope + t * p.q_nope_token_stride + (h0 + h) * p.q_nope_head_stride + col * 8
            : p.q_pe + t * p.q_pe_token_stride + (h0 + h) * p.q_pe_head_stride + (col - kCkvChunks) * 8;
    ptx::cp_async_16(dst + h * kRowBytes + col * 16, src);
  }
}

}  // namespace dsa::detail
