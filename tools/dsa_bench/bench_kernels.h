// Device helpers of dsa-bench: the memory floor beside every case (a pure gather of exactly the
// rows the case reads, 16-byte loads and no math; a plain streaming read) and a device-side
// random fill for the large KV cache.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace dsa::bench {

// The cache rows the floors read: bf16 ckv (1024 B) and kpe (128 B) rows, or fp8_ds_mla rows
// (656 B each, at fp8_row_bytes).
struct CacheRows {
  const void* ckv = nullptr;  // bf16 [rows, 512], or the fp8_ds_mla rows
  const void* kpe = nullptr;  // bf16 [rows, 64]; null for fp8_ds_mla
  int fp8_row_bytes = 0;      // > 0: fp8_ds_mla rows at this stride (a multiple of 16)
  int ckv_row_bytes = 1024;   // bf16 row strides: packed, or 1152 both for joined ckv | kpe rows
  int kpe_row_bytes = 128;
};

// The floors' two loop shapes, by the rows a warp has in flight at once: one (shared/peers/
// gather_bw.cu's loop: few registers, so a large T's blocks are all resident and sweep the cache
// together, but a memory round trip per row of a warp) or kFloorRowsInFlight[1] (each batch's
// loads all issued before any value is used: no chain of round trips at small T, but 4 blocks
// per SM at most). Every floor is the faster of the two.
constexpr int kFloorRowsInFlight[2] = {1, 4};

// Reads every valid entry's row of indices[T, topk]; `splits` blocks per token. l2_only: loads
// that skip L1 (ld.global.cg), as tile fills into shared memory read. With token_xor [T] (zeroed
// by the caller), each token's entry gets the XOR of every 32-bit word of every row its list
// names, once per listing: a check that a loop shape reads exactly the case's rows.
void launch_gather_rows(const CacheRows& cache, const int32_t* indices, int num_tokens, int topk, int num_rows, int splits,
                        unsigned* sink, cudaStream_t stream, bool l2_only, int rows_in_flight, unsigned* token_xor = nullptr);
// The output floor (gather_merge_kernel in bench_kernels.cu): the same loads, then, with each
// token split over `splits` blocks (a power of 2 <= 128), 16 x 512 bf16 partials, a barrier per
// token in L2 and a merge of each block's 1 / splits of the bf16 output into out[T, 16, 512];
// one split writes out straight away. `partials` holds merge_partials_bytes(); `arrivals` [T]
// starts zeroed and only grows: call n of a sequence passes target = n x splits. Splits > 1
// needs num_tokens x splits <= max_merge_blocks(sm_count, rows_in_flight) (every block resident at once); a
// barrier that still waits too long gives up and sets sink[1].
void launch_gather_merge(const CacheRows& cache, const int32_t* indices, int num_tokens, int topk,
                         int num_rows, int splits, float* partials, unsigned* arrivals, unsigned target, uint16_t* out,
                         unsigned* sink, cudaStream_t stream, int rows_in_flight);
size_t merge_partials_bytes(int num_tokens, int splits);
int max_merge_blocks(int sm_count, int rows_in_flight);
// The output floor with each token split by its own valid rows as fused rows decide it on the
// device (split_by_rows_kernel): kMaxRowSplits blocks per token each load the token's Q
// (q [T, 16, 576] bf16) and whole index list (topk <= 2048) and count its valid rows m; the
// token takes the smallest power-of-2 splits n with n x rows_per_split >= m (<= kMaxRowSplits),
// the other blocks leave, and the n blocks gather their share and merge as launch_gather_merge
// does (one split writes out unmerged). `partials` holds split_by_rows_partials_bytes();
// `arrivals` [T] starts zeroed and only grows: call c of a sequence passes calls = c. Where any
// token takes several splits, the T x kMaxRowSplits blocks must fit the chip at once
// (max_split_by_rows_blocks for the loop shape).
constexpr int kMaxRowSplits = 64;
void launch_split_by_rows(const CacheRows& cache, const uint16_t* q, const int32_t* indices, int num_tokens,
                          int topk, int num_rows, int rows_per_split, float* partials, unsigned* arrivals, unsigned calls,
                          uint16_t* out, unsigned* sink, cudaStream_t stream, int rows_in_flight);
size_t split_by_rows_partials_bytes(int num_tokens);
int max_split_by_rows_blocks(int sm_count, int rows_in_flight);
// Reads `bytes` (multiple of 16) from `src` once with 16-byte loads.
void launch_stream_read(const void* src, size_t bytes, int sm_count, unsigned* sink, cudaStream_t stream);

// Up to 8 device ranges (pointer, bytes; 4-byte aligned, bytes a multiple of 4).
struct PageRanges {
  const void* ptr[8] = {};
  size_t bytes[8] = {};
  int count = 0;
  void add(const void* p, size_t n) {
    if (count < 8 && p != nullptr && n >= 4) { ptr[count] = p; bytes[count] = n; ++count; }
  }
};
// Diagnostic (dsa-bench --warm-tlb): `blocks` blocks each load one word per `page_bytes` of every
// range, so address translations are cached everywhere while almost no data enters L2.
void launch_touch_pages(const PageRanges& ranges, size_t page_bytes, int blocks, unsigned* sink, cudaStream_t stream);

// Launch floor: a kernel that does nothing but exist, with `smem_bytes` of dynamic shared memory.
void launch_empty(int blocks, int smem_bytes, cudaStream_t stream);

// Fills n bf16 values with N(0,1) * scale from a counter hash of (seed, i): deterministic.
void launch_fill_normal_bf16(uint16_t* dst, size_t n, float scale, uint64_t seed, cudaStream_t stream);
// The same as fp16 bit patterns.
void launch_fill_normal_fp16(uint16_t* dst, size_t n, float scale, uint64_t seed, cudaStream_t stream);
// fp8_ds_mla rows [rows, 656] quantized from bf16 ckv [rows, 512] and kpe [rows, 64] (each 128-dim
// block scaled by its absolute maximum / 448, as quantize_fp8_ds_mla_row does on the host).
void launch_quantize_fp8_ds_mla(const uint16_t* ckv, const uint16_t* kpe, int64_t rows, uint8_t* out, cudaStream_t stream);

}  // namespace dsa::bench
