// A call's kernels from CUPTI's kernel records (timing.cpp): the call's span, and each kernel's
// start and end after the call's first start. A chain of dependent launches (the share probe's
// five kernels, shared rows' three) overlaps, so kernel durations alone cannot say where a call's
// time goes; the starts and ends show the gaps and the overlap (dsa-bench --kernel-starts).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsa::bench {

struct KernelRecord {
  uint64_t start = 0, end = 0;  // ns, CUPTI's clock
  std::string name;             // as the record gives it (mangled)
};

// The function's own name from an Itanium-mangled one: the last component of a nested name
// (_ZN...E), or the name of a plain one (_Z<len><name>); the name unchanged if it is neither.
// "_ZN3dsa6detail49_GLOBAL__N__ce78d1f2_16_splitk_kernel_cu_6a1411bb24sparse_mla_splitk_kernelILi32E..."
// gives "sparse_mla_splitk_kernel".
inline std::string kernel_short_name(const std::string& mangled) {
  if (mangled.rfind("_Z", 0) != 0) return mangled;
  size_t pos = mangled.size() > 2 && mangled[2] == 'N' ? 3 : 2;
  std::string last;
  while (pos < mangled.size() && std::isdigit(static_cast<unsigned char>(mangled[pos]))) {
    size_t len = 0;
    while (pos < mangled.size() && std::isdigit(static_cast<unsigned char>(mangled[pos]))) len = len * 10 + (mangled[pos++] - '0');
    if (len == 0 || pos + len > mangled.size()) return mangled;
    last = mangled.substr(pos, len);
    pos += len;
  }
  return last.empty() ? mangled : last;
}

struct CallKernels {
  std::vector<double> span_us;  // per call: first start to last end
  // [kernel][call], kernels in the order they started: start and end after the call's first
  // start, and duration.
  std::vector<std::vector<double>> start_us, end_us, duration_us;
  std::vector<std::string> names;  // each kernel's short name, from the first call
};

// Groups records (any order) into calls of `kernels_per_call` kernels, each call led by `skip`
// kernels that are not its own (dsa-bench --warm-code's), dropped. Throws if the records do not
// make whole calls.
inline CallKernels group_calls(std::vector<KernelRecord> recs, int kernels_per_call, int skip = 0) {
  const size_t per_group = static_cast<size_t>(skip + kernels_per_call);
  if (kernels_per_call < 1 || skip < 0 || recs.empty() || recs.size() % per_group != 0)
    throw std::runtime_error("cupti: " + std::to_string(recs.size()) + " kernel records do not make calls of " +
                             std::to_string(skip) + " + " + std::to_string(kernels_per_call) + " kernels");
  std::stable_sort(recs.begin(), recs.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  CallKernels c;
  c.start_us.resize(kernels_per_call);
  c.end_us.resize(kernels_per_call);
  c.duration_us.resize(kernels_per_call);
  for (size_t g = 0; g < recs.size(); g += per_group) {
    const KernelRecord* call = recs.data() + g + skip;
    uint64_t end = 0;
    for (int k = 0; k < kernels_per_call; ++k) {
      end = std::max(end, call[k].end);
      c.start_us[k].push_back((call[k].start - call[0].start) * 1e-3);
      c.end_us[k].push_back((call[k].end - call[0].start) * 1e-3);
      c.duration_us[k].push_back((call[k].end - call[k].start) * 1e-3);
      if (g == 0) c.names.push_back(kernel_short_name(call[k].name));
    }
    c.span_us.push_back((end - call[0].start) * 1e-3);
  }
  return c;
}

}  // namespace dsa::bench
