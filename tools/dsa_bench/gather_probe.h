// dsa-bench gather-paths: how fast a CTA shaped like split-K's moves gathered 1152-byte rows into
// shared memory, by cp.async or by plain loads through registers (gather_probe.cu says why).
#pragma once

namespace dsa::bench {

// Prints one line per (cache, path); returns the process exit code.
int run_gather_probe(int num_tokens, int reps);

}  // namespace dsa::bench
