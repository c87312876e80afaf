// Tile sizes of the wgmma (generation 2) kernel, decided in one place (host and device include it).
#pragma once

namespace dsa::detail {

// 128 query rows (two warpgroups of 64) x 128-key tiles, two K/V stages. Shared memory:
// Q 128 x Dqk + stages x 128 x (Dqk + Dv), 16-bit, + 1 KB to align the swizzle atoms + the
// mbarriers: 161 KB at D = 128, 81 KB at 64, 209 KB at 192/128.
template <int kDqk>
struct WgmmaTile {
  static constexpr int kBlockQ = 128;
  static constexpr int kBlockK = 128;
  static constexpr int kStages = 2;
  static constexpr int kWarps = kBlockQ / 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBarrierBytes = 8 * (1 + 2 * kStages);
  static constexpr int smem_bytes(int dv) {
    return 2 * (kBlockQ * kDqk + kStages * kBlockK * (kDqk + dv)) + 1024 + kBarrierBytes;
  }
};

}  // namespace dsa::detail
