// Tile sizes of the wgmma (generation 2) kernel, decided in one place (host and device include it).
#pragma once

#include <cstddef>

#include "dense/params.h"

namespace dsa::detail {

// Consumer warpgroups of 64 query rows + one producer warpgroup; 128-key tiles. Head dim 64
// takes three consumer warpgroups (192 rows): its softmax costs as much as its matrix work
// (one exp2 per 256 flops meets the 16-per-clock MUFU limit), so a third warpgroup keeps the
// exp unit busier; 128 and 192/128 take two. The producer keeps 24-40 registers after
// setmaxnreg and the consumers take the rest of the 64K. Three K/V stages where they fit (D <=
// 128), two at 192/128. Shared memory: Q rows x Dqk + stages x 128 x (Dqk + Dv), 16-bit, + 1 KB
// to align the swizzle atoms + the mbarriers: 225 KB at D = 128, 121 KB at 64, 209 KB at 192/128.
template <int kDqk>
struct WgmmaTile {
  static constexpr int kConsumerGroups = kDqk == 64 ? 3 : 2;
  static constexpr int kBlockQ = 64 * kConsumerGroups;
  static constexpr int kBlockK = 128;
  static constexpr int kStages = kDqk <= 128 ? 3 : 2;
  static constexpr int kWarps = kBlockQ / 16;         // consumer warps (16 query rows each)
  static constexpr int kThreads = (kWarps + 4) * 32;  // + the producer warpgroup
  static constexpr int kProducerRegs = kConsumerGroups == 3 ? 24 : 40;
  static constexpr int kConsumerRegs = kConsumerGroups == 3 ? 160 : 232;
  static_assert(128 * kProducerRegs + 128 * kConsumerGroups * kConsumerRegs <= 65536, "register file");
  // D = 64's softmax is the critical path: reduce its rows through trees (run 36: +1-2 % there,
  // -4 % at D = 128).
  static constexpr bool kTreeSoftmax = kDqk == 64;
  static constexpr int kBarrierBytes = 8 * (2 + 2 * kStages);
  static constexpr int smem_bytes(int dv) {
    return 2 * (kBlockQ * kDqk + kStages * kBlockK * (kDqk + dv)) + 1024 + kBarrierBytes;
  }
};

// Host-side view of the same numbers for the planner (warps include the producer warpgroup).
template <int kDqk>
constexpr DenseTileInfo wgmma_tile_info(int dv) {
  using T = WgmmaTile<kDqk>;
  return {T::kBlockQ, T::kBlockK, T::kStages, T::kThreads / 32, static_cast<size_t>(T::smem_bytes(dv))};
}

constexpr DenseTileInfo wgmma_tile_info(int dqk, int dv) {
  if (dqk == 64) return wgmma_tile_info<64>(dv);
  if (dqk == 128) return wgmma_tile_info<128>(dv);
  return wgmma_tile_info<192>(dv);
}

}  // namespace dsa::detail
