// dsa-bench gather-paths: how fast a CTA shaped like split-K's moves gathered 1152-byte rows into
// shared memory, by cp.async or by plain loads through registers (gather_probe.cu says why).
#pragma once

#include <string>

namespace dsa::bench {

// Prints one line per (cache, path); returns the process exit code. timer: "cupti" (the kernel
// span, an untimed call after each flush first) or "events" (no untimed call: for
// compute-sanitizer, which cannot share CUPTI).
int run_gather_probe(int num_tokens, int reps, const std::string& timer);

}  // namespace dsa::bench
