#include "flashinfer_bench.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dsa/error.h"

namespace dsa::fib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& why) { throw Error(where + ": " + why); }

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) fail(where, std::string("missing field '") + key + "'");
  return j.at(key);
}

int positive_int(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t(1) << 31) - 1)
    fail(where, std::string("field '") + key + "' must be a positive integer");
  return v.get<int>();
}

}  // namespace

void parse_definition(const std::string& name, Workload& w) {
  static const std::regex re(R"(^dsa_sparse_attention_h(\d+)_ckv512_kpe64_topk(\d+)_ps(\d+)$)");
  std::smatch m;
  if (!std::regex_match(name, m, re))
    throw Error("definition: '" + name + "' is not a dsa_sparse_attention_h<H>_ckv512_kpe64_topk<K>_ps<P> definition");
  w.definition = name;
  w.num_heads = std::stoi(m[1]);
  w.topk = std::stoi(m[2]);
  w.page_size = std::stoi(m[3]);
}

std::string definition_name(int num_heads, int topk, int page_size) {
  return "dsa_sparse_attention_h" + std::to_string(num_heads) + "_ckv512_kpe64_topk" + std::to_string(topk) + "_ps" +
         std::to_string(page_size);
}

std::vector<int32_t> read_safetensors_i32(const std::string& path, const std::string& key, std::vector<int64_t>* shape) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open");
  const auto file_size = static_cast<uint64_t>(fs::file_size(path));
  unsigned char len_bytes[8];
  if (!f.read(reinterpret_cast<char*>(len_bytes), 8)) fail(path, "truncated (no header length)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];  // little endian
  if (header_len > file_size - 8 || header_len > (uint64_t(100) << 20)) fail(path, "truncated or corrupt header length");
  std::string header(header_len, '\0');
  if (!f.read(header.data(), static_cast<std::streamsize>(header_len))) fail(path, "truncated header");
  json h;
  try {
    h = json::parse(header);
  } catch (const json::exception& e) {
    fail(path, std::string("header is not JSON: ") + e.what());
  }
  if (!h.is_object() || !h.contains(key)) fail(path, "no tensor '" + key + "'");
  const json& t = h.at(key);
  const std::string where = path + ": tensor '" + key + "'";
  const json& dtype = field(t, "dtype", where);
  if (!dtype.is_string() || dtype.get<std::string>() != "I32")
    fail(where, "dtype must be I32, got " + dtype.dump());
  const json& shp = field(t, "shape", where);
  const json& off = field(t, "data_offsets", where);
  if (!shp.is_array() || !off.is_array() || off.size() != 2) fail(where, "bad shape or data_offsets");
  uint64_t count = 1;
  std::vector<int64_t> dims;
  for (const json& d : shp) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(where, "bad shape " + shp.dump());
    dims.push_back(d.get<int64_t>());
    count *= static_cast<uint64_t>(d.get<int64_t>());
  }
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  const uint64_t data_start = 8 + header_len;
  if (end < begin || end - begin != count * 4) fail(where, "data_offsets do not match the shape");
  if (data_start + end > file_size) fail(where, "truncated data (file has " + std::to_string(file_size) + " bytes)");
  std::vector<int32_t> out(count);
  f.seekg(static_cast<std::streamoff>(data_start + begin));
  if (!f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(count * 4))) fail(where, "truncated data");
  if (shape) *shape = dims;
  return out;
}

void write_safetensors_i32(const std::string& path, const std::string& key, const std::vector<int32_t>& data,
                           const std::vector<int64_t>& shape) {
  json h;
  h[key] = {{"dtype", "I32"}, {"shape", shape}, {"data_offsets", {0, data.size() * 4}}};
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::ofstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot write");
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  if (!f) fail(path, "write failed");
}

std::vector<Workload> read_workloads(const std::string& jsonl_path) {
  std::ifstream f(jsonl_path);
  if (!f) fail(jsonl_path, "cannot open");
  const fs::path dir = fs::path(jsonl_path).parent_path();
  std::vector<Workload> out;
  std::string line;
  for (int line_no = 1; std::getline(f, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = jsonl_path + ":" + std::to_string(line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail(where, std::string("not JSON: ") + e.what());
    }
    Workload w;
    const json& def = field(j, "definition", where);
    if (!def.is_string()) fail(where, "field 'definition' must be a string");
    try {
      parse_definition(def.get<std::string>(), w);
    } catch (const Error& e) {
      fail(where, e.what());
    }
    const json& wl = field(j, "workload", where);
    const json& uuid = field(wl, "uuid", where + ": workload");
    w.uuid = uuid.is_string() ? uuid.get<std::string>() : uuid.dump();
    const json& axes = field(wl, "axes", where + ": workload");
    w.num_tokens = positive_int(axes, "num_tokens", where + ": workload.axes");
    w.num_pages = positive_int(axes, "num_pages", where + ": workload.axes");
    const json& inputs = field(wl, "inputs", where + ": workload");
    if (!inputs.is_object()) fail(where, "workload.inputs must be an object");
    bool have_indices = false;
    for (const auto& [name, spec] : inputs.items()) {
      const std::string in_where = where + ": inputs." + name;
      const json& type = field(spec, "type", in_where);
      if (!type.is_string()) fail(in_where, "'type' must be a string");
      const std::string ty = type.get<std::string>();
      if (ty == "random") {
        if (name == "sparse_indices") fail(in_where, "sparse_indices cannot be random (it must be safetensors)");
        continue;
      }
      if (ty == "scalar") {
        const json& v = field(spec, "value", in_where);
        if (!v.is_number()) fail(in_where, "'value' must be a number");
        if (name == "sm_scale") w.sm_scale = v.get<float>();
        continue;
      }
      if (ty != "safetensors") fail(in_where, "unknown type '" + ty + "'");
      if (name != "sparse_indices") fail(in_where, "only sparse_indices may come from safetensors");
      const json& path = field(spec, "path", in_where);
      const json& key = field(spec, "tensor_key", in_where);
      if (!path.is_string() || !key.is_string()) fail(in_where, "'path' and 'tensor_key' must be strings");
      fs::path p = path.get<std::string>();
      if (p.is_relative() && !fs::exists(p)) p = dir / p;
      std::vector<int64_t> shape;
      w.indices = read_safetensors_i32(p.string(), key.get<std::string>(), &shape);
      if (shape.size() != 2 || shape[0] != w.num_tokens || shape[1] != w.topk)
        fail(in_where, "shape must be [num_tokens=" + std::to_string(w.num_tokens) + ", topk=" + std::to_string(w.topk) +
                           "], got " + json(shape).dump());
      have_indices = true;
    }
    if (!have_indices) fail(where, "inputs.sparse_indices is missing");
    out.push_back(std::move(w));
  }
  if (out.empty()) fail(jsonl_path, "no workloads");
  return out;
}

void write_workloads(const std::vector<Workload>& workloads, const std::string& dir, const std::string& name) {
  fs::create_directories(dir);
  const std::string jsonl = (fs::path(dir) / (name + ".jsonl")).string();
  std::ofstream f(jsonl);
  if (!f) fail(jsonl, "cannot write");
  for (const Workload& w : workloads) {
    const std::string blob = w.uuid + ".safetensors";
    write_safetensors_i32((fs::path(dir) / blob).string(), "sparse_indices", w.indices,
                          {int64_t(w.num_tokens), int64_t(w.topk)});
    json line = {{"definition", definition_name(w.num_heads, w.topk, w.page_size)},
                 {"workload",
                  {{"uuid", w.uuid},
                   {"axes", {{"num_tokens", w.num_tokens}, {"num_pages", w.num_pages}}},
                   {"inputs",
                    {{"q_nope", {{"type", "random"}}},
                     {"q_pe", {{"type", "random"}}},
                     {"ckv_cache", {{"type", "random"}}},
                     {"kpe_cache", {{"type", "random"}}},
                     {"sparse_indices", {{"type", "safetensors"}, {"path", blob}, {"tensor_key", "sparse_indices"}}},
                     {"sm_scale", {{"type", "scalar"}, {"value", w.sm_scale}}}}}}}};
    f << line.dump() << '\n';
  }
  if (!f) fail(jsonl, "write failed");
}

}  // namespace dsa::fib
