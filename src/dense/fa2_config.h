// Tile sizes of the FlashAttention-2 kernel, decided in one place (host and device include it).
#pragma once

#include <cstddef>

#include "dense/params.h"

namespace dsa::detail {

// kBlockQ query rows (16 per warp) x kBlockK key rows per tile, kStages K/V tiles in flight.
// Head dim 64 takes 128-key tiles: its S tile is cheap and a longer tile halves the barriers.
template <int kDqk, int kBlockQ>
struct Fa2Tile {
  static constexpr int kBlockK = kDqk == 64 ? 128 : 64;
  static constexpr int kStages = 2;
  static constexpr int kWarps = kBlockQ / 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int smem_bytes(int dv) { return 2 * (kBlockQ * kDqk + kStages * kBlockK * (kDqk + dv)); }
};

// Host-side view of the same numbers for the planner.
template <int kDqk, int kBlockQ>
constexpr DenseTileInfo fa2_tile_info(int dv) {
  using T = Fa2Tile<kDqk, kBlockQ>;
  return {kBlockQ, T::kBlockK, T::kStages, T::kWarps, static_cast<size_t>(T::smem_bytes(dv))};
}

constexpr DenseTileInfo fa2_tile_info(int dqk, int dv, int block_q) {
  if (dqk == 64) return block_q == 64 ? fa2_tile_info<64, 64>(dv) : fa2_tile_info<64, 128>(dv);
  if (dqk == 128) return block_q == 64 ? fa2_tile_info<128, 64>(dv) : fa2_tile_info<128, 128>(dv);
  return block_q == 64 ? fa2_tile_info<192, 64>(dv) : fa2_tile_info<192, 128>(dv);
}

}  // namespace dsa::detail
