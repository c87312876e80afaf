// Tile sizes of the wgmma (generation 2) kernel, decided in one place (host and device include it).
#pragma once

namespace dsa::detail {

// 128 query rows (two consumer warpgroups of 64) + one producer warpgroup (40 registers per
// thread after setmaxnreg, leaving 232 to each consumer thread); 128-key tiles; three K/V
// stages where they fit (D <= 128), two at 192/128. Shared memory: Q 128 x Dqk + stages x 128 x
// (Dqk + Dv), 16-bit, + 1 KB to align the swizzle atoms + the mbarriers: 225 KB at D = 128,
// 113 KB at 64, 209 KB at 192/128.
template <int kDqk>
struct WgmmaTile {
  static constexpr int kBlockQ = 128;
  static constexpr int kBlockK = 128;
  static constexpr int kStages = kDqk <= 128 ? 3 : 2;
  static constexpr int kWarps = kBlockQ / 16;       // consumer warps (16 query rows each)
  static constexpr int kThreads = (kWarps + 4) * 32;  // + the producer warpgroup
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 128 x 40 + 256 x 232 <= 64K
  static constexpr int kBarrierBytes = 8 * (1 + 2 * kStages);
  static constexpr int smem_bytes(int dv) {
    return 2 * (kBlockQ * kDqk + kStages * kBlockK * (kDqk + dv)) + 1024 + kBarrierBytes;
  }
};

}  // namespace dsa::detail
