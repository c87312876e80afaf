// The short label dsa-bench prints for a plan: "32/4" (split-K: tile rows / splits), "rows" or
// "rows/3" (shared rows, its splits), then ",leadNxS" (the first N tokens in S splits), ",o" (row
// order), ",b" (balanced) and ",s" (split softmax); a share-probe plan (SparseMlaPlan::share_probe)
// then "|p710:32/1,o,s": the line in permille and split-K's half.
#pragma once

#include <string>

#include "dsa/sparse_mla.h"

namespace dsa::bench {

inline const char* kernel_name(const SparseMlaPlan& plan) {
  return plan.kernel == SparseMlaKernel::shared_rows ? "rows" : "splitk";
}

inline std::string plan_label(const SparseMlaPlan& plan) {
  std::string s;
  if (plan.kernel == SparseMlaKernel::shared_rows)
    s = plan.splits > 1 ? "rows/" + std::to_string(plan.splits) : "rows";
  else
    s = std::to_string(plan.block_keys) + "/" + std::to_string(plan.splits);
  if (plan.lead_tokens > 0) s += ",lead" + std::to_string(plan.lead_tokens) + "x" + std::to_string(plan.lead_splits);
  if (plan.row_order) s += ",o";
  if (plan.balanced) s += ",b";
  if (plan.split_softmax) s += ",s";
  if (plan.share_probe.line_permille > 0) {
    s += "|p" + std::to_string(plan.share_probe.line_permille) + ":" + std::to_string(plan.share_probe.split_k_block_keys) + "/1";
    if (plan.share_probe.split_k_row_order) s += ",o";
    if (plan.share_probe.split_k_split_softmax) s += ",s";
  }
  return s;
}

}  // namespace dsa::bench
