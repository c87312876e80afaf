// FlashInfer-Bench workload files for the DSA sparse attention definitions
// (dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64 and its variants).
//
// A workload file is JSONL, one workload per line:
//   {"definition": "...", "workload": {"uuid": "...", "axes": {"num_tokens": T, "num_pages": P},
//    "inputs": {name: {"type": "random"} | {"type": "scalar", "value": v}
//                     | {"type": "safetensors", "path": "...", "tensor_key": "..."}}}}
// Only sparse_indices comes from a safetensors file (int32 [T, topk]); q/ckv/kpe are random.
// Relative safetensors paths are resolved against the JSONL file's directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsa::fib {

struct Workload {
  std::string definition, uuid;
  int num_heads = 16, topk = 2048, page_size = 64;  // from the definition name
  int num_tokens = 0, num_pages = 0;                // axes
  float sm_scale = 0.1352337788608801f;             // the scalar input, if given
  std::vector<int32_t> indices;                     // [num_tokens, topk]
};

// Throws dsa::Error naming the file, the line and the field on any malformed input.
std::vector<Workload> read_workloads(const std::string& jsonl_path);

// Writes `workloads` as <dir>/<name>.jsonl plus one <uuid>.safetensors per workload.
void write_workloads(const std::vector<Workload>& workloads, const std::string& dir, const std::string& name);

// safetensors I/O for one int32 tensor (exposed for tests).
std::vector<int32_t> read_safetensors_i32(const std::string& path, const std::string& key,
                                          std::vector<int64_t>* shape);
void write_safetensors_i32(const std::string& path, const std::string& key, const std::vector<int32_t>& data,
                           const std::vector<int64_t>& shape);

// Parses h/topk/ps out of a definition name like dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64.
void parse_definition(const std::string& name, Workload& w);
std::string definition_name(int num_heads, int topk, int page_size);

}  // namespace dsa::fib
