// dsa-bench wgmma: the tensor cores' rate for the shared-rows kernels' wgmma shapes, alone and
// mixed across warpgroups (wgmma_probe.cu says why).
#pragma once

namespace dsa::bench {

// Prints one line per shape mix; returns the process exit code.
int run_wgmma_probe();

}  // namespace dsa::bench
