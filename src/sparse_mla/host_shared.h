// Host code the planner (planner.cpp) and the forward (sparse_mla.cpp) share: the workspace's
// layout, split-K's chunk arithmetic and the shape checks. Host-only; internal to the library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/arg_checks.h"
#include "dsa/sparse_mla.h"
#include "sparse_mla/params.h"

namespace dsa::detail {

// One partial: a split's bf16 output row (partials.cuh) and its fp32 lse.
inline constexpr size_t kPartialBytes = kCkvDim * sizeof(uint16_t) + sizeof(float);

// Partial slots of a plan with splits: [T, H, splits], or with lead tokens (params.h) theirs
// [lead, H, lead_splits] (when they split) and the later tokens' [T - lead, H, splits].
inline size_t partial_slots(int num_tokens, int num_heads, int splits, int lead_tokens, int lead_splits) {
  if (splits <= 1) return 0;
  const size_t lead = lead_splits > 1 ? static_cast<size_t>(lead_tokens) * lead_splits : 0;
  return (lead + static_cast<size_t>(num_tokens - lead_tokens) * splits) * num_heads;
}
// bf16 partial outputs [slots, 512] then fp32 partial lse [slots].
inline size_t workspace_for(int num_tokens, int num_heads, int splits, int lead_tokens = 0, int lead_splits = 1) {
  return partial_slots(num_tokens, num_heads, splits, lead_tokens, lead_splits) * kPartialBytes;
}

// The shared-rows kernel's: with a union pass each group's union, sizes and order (a 16-byte
// multiple), then the partials of its splits.
inline size_t shared_rows_union_bytes(int num_tokens, int num_heads, int topk, bool union_pass) {
  return union_pass ? detail::shared_rows_workspace_bytes(detail::shared_rows_head_blocks(num_tokens, num_heads), topk) : 0;
}
inline size_t shared_rows_workspace_for(int num_tokens, int num_heads, int topk, int splits, bool union_pass, int lead_tokens, int lead_splits) {
  return shared_rows_union_bytes(num_tokens, num_heads, topk, union_pass) +
         workspace_for(num_tokens, num_heads, splits, lead_tokens, lead_splits);
}

// A share-probe plan's (SparseMlaPlan::share_probe): the shared-rows workspace, then from the
// next 16-byte boundary the probe's (distinct, valid) pair of each sampled group.
inline size_t share_probe_pairs_offset(size_t shared_rows_bytes) { return (shared_rows_bytes + 15) / 16 * 16; }
inline constexpr size_t kShareProbePairsBytes = kShareProbeSamples * 2 * sizeof(int);

// Split-K's chunk for `splits` splits of a topk list in tiles of block_keys rows (whole tiles).
inline int splitk_chunk(int64_t topk, int64_t splits, int block_keys) {
  return static_cast<int>(std::min<int64_t>(SparseMlaPlan::kMaxChunk, ceil_div(ceil_div(topk, splits), block_keys) * block_keys));
}
// A split-K plan's lead tokens' chunk: the whole list unsplit, else lead_splits of whole tiles.
inline int splitk_lead_chunk(const SparseMlaPlan& plan) {
  return plan.lead_splits == 1 ? plan.topk : splitk_chunk(plan.topk, plan.lead_splits, plan.block_keys);
}

// Balanced split-K's workspace: bf16 partial outputs [slots, H, 512] and fp32 lse [slots, H], by split slot.
inline size_t balanced_workspace_for(int num_heads, int slots) {
  return static_cast<size_t>(slots) * num_heads * kPartialBytes;
}

inline void validate_index_shape(int num_tokens, int topk) {
  if (num_tokens < 0) fail("num_tokens", "must be >= 0, got " + std::to_string(num_tokens));
  if (topk < 1) fail("topk", "must be >= 1, got " + std::to_string(topk));
}

inline void validate_shape(int num_tokens, int num_heads, int topk) {
  validate_index_shape(num_tokens, topk);
  if (num_heads != 16 && num_heads != 32 && num_heads != 64 && num_heads != 128)
    fail("num_heads", "must be 16, 32, 64 or 128, got " + std::to_string(num_heads));
}

inline void validate_format(KvCacheFormat format) {
  if (format != KvCacheFormat::bf16 && format != KvCacheFormat::fp8_ds_mla)
    fail("kv_format", "must be bf16 or fp8_ds_mla, got " + std::to_string(static_cast<int>(format)));
}

// SparseMlaProblem::min_valid_entries: a list cannot hold more valid entries than its topk.
inline void validate_min_valid_entries(int min_valid_entries, int topk) {
  if (min_valid_entries < 0 || min_valid_entries > topk)
    fail("min_valid_entries", "must be in [0, topk = " + std::to_string(topk) + "], got " + std::to_string(min_valid_entries));
}

inline void validate_sharing(IndexSharing sharing) {
  if (sharing != IndexSharing::unknown && sharing != IndexSharing::consecutive && sharing != IndexSharing::none)
    fail("index_sharing", "must be unknown, consecutive or none, got " + std::to_string(static_cast<int>(sharing)));
}

}  // namespace dsa::detail
