// PyTorch binding of the sparse MLA forward: schema-registered ops (torch.compile and CUDA graphs
// see them as opaque kernels), a Meta implementation for tracing, the workspace from PyTorch's
// caching allocator, and the current stream. All logic stays in the C++ library.
#include <Python.h>

#include <string>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "dsa/sparse_mla.h"

namespace {

// Numbers and shapes are formatted with std::to_string, never streamed through c10::str: on the
// H100 machine (torch 2.11, g++ 13) an integer streamed into a TORCH_CHECK message from this
// extension segfaulted inside a copy of std::ostream::_M_insert<long> linked into _C.so
// (cuda-gdb backtrace, 2026-11-22); strings, dtypes and devices stream fine.
std::string num(int64_t v) { return std::to_string(v); }

std::string shape(at::IntArrayRef dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

void check_input(const at::Tensor& t, const char* name, at::ScalarType dtype, int64_t dim, const at::Device& device) {
  TORCH_CHECK(t.is_cuda(), "dsa.sparse_mla_forward: ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.device() == device, "dsa.sparse_mla_forward: ", name, " is on ", t.device(), ", q_nope on ", device);
  TORCH_CHECK(t.scalar_type() == dtype, "dsa.sparse_mla_forward: ", name, " must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.dim() == dim, "dsa.sparse_mla_forward: ", name, " must have ", num(dim), " dimensions, got ",
              shape(t.sizes()));
  TORCH_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, "dsa.sparse_mla_forward: ", name,
              " must be contiguous in its last dimension, got strides ", shape(t.strides()));
}

// The planner's hint, from the op's string argument.
dsa::IndexSharing parse_sharing(c10::string_view text) {
  const std::string s(text.data(), text.size());
  if (s == "unknown") return dsa::IndexSharing::unknown;
  if (s == "consecutive") return dsa::IndexSharing::consecutive;
  if (s == "none") return dsa::IndexSharing::none;
  TORCH_CHECK(false, "dsa.sparse_mla_forward: index_sharing must be 'unknown', 'consecutive' (prefill: consecutive tokens "
                     "share rows) or 'none' (a decode batch), got '", s, "'");
}

// Flat row r = page * page_size + offset must address row r: pages laid out back to back.
void check_pages_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.size(1) <= 1 || t.size(0) <= 1 || t.stride(0) == t.size(1) * t.stride(1), "dsa.sparse_mla_forward: ", name,
              " pages must be contiguous rows (stride(0) == page_size * stride(1))");
}

// An FP8 cache (dsa::KvCacheFormat::fp8_ds_mla): 656-byte rows as uint8 or float8_e4m3fn.
bool is_fp8_cache(const at::Tensor& ckv) {
  return ckv.scalar_type() == at::kByte || ckv.scalar_type() == at::kFloat8_e4m3fn;
}

// ckv_cache as either format: [num_pages, page_size, 512] bf16, or [num_pages, page_size, 656]
// uint8 / float8_e4m3fn rows of fp8_ds_mla.
void check_cache(const at::Tensor& ckv, const at::Device& dev) {
  check_input(ckv, "ckv_cache", is_fp8_cache(ckv) ? ckv.scalar_type() : at::kBFloat16, 3, dev);
  const int64_t width = is_fp8_cache(ckv) ? dsa::kFp8RowBytes : dsa::kCkvDim;
  TORCH_CHECK(ckv.size(2) == width, "dsa.sparse_mla_forward: ckv_cache must be [num_pages, page_size, 512] bf16 or [num_pages, "
              "page_size, 656] uint8 / float8_e4m3fn (fp8_ds_mla rows), got ", shape(ckv.sizes()), " ", ckv.scalar_type());
  check_pages_contiguous(ckv, "ckv_cache");
}

// The optional per-token list lengths (FlashMLA's topk_length): int32 [T] on the op's device, or
// nullptr when absent.
const int32_t* list_lengths(const c10::optional<at::Tensor>& lengths, int64_t T, const at::Device& dev) {
  if (!lengths.has_value()) return nullptr;
  check_input(*lengths, "topk_length", at::kInt, 1, dev);
  TORCH_CHECK(lengths->size(0) == T, "dsa.sparse_mla_forward: topk_length must be [T] with T = ", num(T), ", got ",
              shape(lengths->sizes()));
  return lengths->data_ptr<int32_t>();
}

// Fills a dsa::SparseMlaProblem from tensors, checking what the C++ API cannot see (dtypes,
// devices, shapes, the paged layout of the caches). An fp8_ds_mla ckv_cache comes without kpe_cache.
dsa::SparseMlaProblem make_problem(const at::Tensor& q_nope, const at::Tensor& q_pe, const at::Tensor& ckv,
                                   const c10::optional<at::Tensor>& kpe_opt, const at::Tensor& idx, double sm_scale,
                                   const at::Tensor& out, const at::Tensor& lse, c10::string_view index_sharing,
                                   const c10::optional<at::Tensor>& lengths, int64_t min_valid_entries) {
  const at::Device dev = q_nope.device();
  check_input(q_nope, "q_nope", at::kBFloat16, 3, dev);
  check_input(q_pe, "q_pe", at::kBFloat16, 3, dev);
  check_cache(ckv, dev);
  const bool fp8 = is_fp8_cache(ckv);
  TORCH_CHECK(fp8 != kpe_opt.has_value(), "dsa.sparse_mla_forward: ",
              fp8 ? "kpe_cache must be None with an fp8_ds_mla ckv_cache (its rows hold the kpe values)"
                  : "kpe_cache is required with a bf16 ckv_cache");
  const at::Tensor kpe = fp8 ? at::Tensor() : *kpe_opt;
  if (!fp8) {
    check_input(kpe, "kpe_cache", at::kBFloat16, 3, dev);
    TORCH_CHECK(kpe.size(0) == ckv.size(0) && kpe.size(1) == ckv.size(1) && kpe.size(2) == dsa::kKpeDim,
                "dsa.sparse_mla_forward: kpe_cache must be [num_pages, page_size, 64] matching ckv_cache, got ",
                shape(kpe.sizes()));
    check_pages_contiguous(kpe, "kpe_cache");
  }
  check_input(idx, "sparse_indices", at::kInt, 2, dev);
  check_input(out, "out", at::kBFloat16, 3, dev);
  check_input(lse, "lse", at::kFloat, 2, dev);
  const int64_t T = q_nope.size(0), H = q_nope.size(1);
  TORCH_CHECK(q_nope.size(2) == dsa::kCkvDim, "dsa.sparse_mla_forward: q_nope must be [T, H, 512], got ", shape(q_nope.sizes()));
  TORCH_CHECK(q_pe.size(0) == T && q_pe.size(1) == H && q_pe.size(2) == dsa::kKpeDim,
              "dsa.sparse_mla_forward: q_pe must be [T, H, 64] = [", num(T), ", ", num(H), ", 64], got ",
              shape(q_pe.sizes()));
  TORCH_CHECK(idx.size(0) == T, "dsa.sparse_mla_forward: sparse_indices must be [T, topk] with T = ", num(T), ", got ",
              shape(idx.sizes()));
  TORCH_CHECK(out.size(0) == T && out.size(1) == H && out.size(2) == dsa::kCkvDim,
              "dsa.sparse_mla_forward: out must be [T, H, 512], got ", shape(out.sizes()));
  TORCH_CHECK(lse.size(0) == T && lse.size(1) == H, "dsa.sparse_mla_forward: lse must be [T, H], got ", shape(lse.sizes()));
  dsa::SparseMlaProblem p;
  p.num_tokens = static_cast<int>(T);
  p.num_heads = static_cast<int>(H);
  p.topk = static_cast<int>(idx.size(1));
  p.num_pages = static_cast<int>(ckv.size(0));
  p.page_size = static_cast<int>(ckv.size(1));
  p.sm_scale = static_cast<float>(sm_scale);
  auto stride = [](const at::Tensor& t, int d) { return t.size(d) <= 1 ? int64_t(0) : t.stride(d); };
  p.q_nope = q_nope.data_ptr();
  p.q_nope_token_stride = stride(q_nope, 0);
  p.q_nope_head_stride = stride(q_nope, 1);
  p.q_pe = q_pe.data_ptr();
  p.q_pe_token_stride = stride(q_pe, 0);
  p.q_pe_head_stride = stride(q_pe, 1);
  p.kv_format = fp8 ? dsa::KvCacheFormat::fp8_ds_mla : dsa::KvCacheFormat::bf16;
  p.ckv_cache = ckv.data_ptr();
  p.ckv_row_stride = stride(ckv, 1) ? stride(ckv, 1) : stride(ckv, 0);  // fp8: one-byte elements, so bytes
  if (!fp8) {
    p.kpe_cache = kpe.data_ptr();
    p.kpe_row_stride = stride(kpe, 1) ? stride(kpe, 1) : stride(kpe, 0);
  }
  p.indices = idx.data_ptr<int32_t>();
  p.indices_token_stride = stride(idx, 0);
  p.topk_lengths = list_lengths(lengths, T, dev);
  p.out = out.data_ptr();
  p.out_token_stride = stride(out, 0);
  p.out_head_stride = stride(out, 1);
  p.lse = lse.data_ptr<float>();
  p.lse_token_stride = stride(lse, 0);
  p.index_sharing = parse_sharing(index_sharing);
  // The library checks the same range on its int; checked here on the int64 first, so that a
  // value past int's range is refused, not narrowed into it.
  TORCH_CHECK(min_valid_entries >= 0 && min_valid_entries <= p.topk, "dsa.sparse_mla_forward: min_valid_entries must be in [0, topk = ",
              num(p.topk), "], got ", num(min_valid_entries));
  p.min_valid_entries = static_cast<int>(min_valid_entries);
  TORCH_CHECK(lse.size(1) <= 1 || lse.stride(1) == 1, "dsa.sparse_mla_forward: lse must be contiguous over heads");
  return p;
}

// A balanced plan (dsa::PlanChoice::balanced) for a shape on a device (DeviceInfo::from_device
// caches the device's answers). The schedule op and the forward make the same one.
dsa::SparseMlaPlan balanced_plan(int64_t T, int64_t H, int64_t topk, const at::Device& device) {
  const dsa::DeviceInfo info = dsa::DeviceInfo::from_device(device.index() < 0 ? 0 : device.index());
  dsa::PlanChoice choice;
  choice.balanced = 1;
  return dsa::plan_sparse_mla(static_cast<int>(T), static_cast<int>(H), static_cast<int>(topk), info, choice);
}

// The schedule of a balanced forward (dsa::make_sparse_mla_schedule), made once per decode step
// from any layer's indices: a uint8 tensor on the indices' device.
at::Tensor schedule(const at::Tensor& idx, const at::Tensor& ckv, int64_t num_heads, const c10::optional<at::Tensor>& lengths) {
  check_input(idx, "sparse_indices", at::kInt, 2, idx.device());
  check_cache(ckv, idx.device());
  const c10::cuda::CUDAGuard guard(idx.device());
  at::Tensor sched;
  try {
    const dsa::SparseMlaPlan plan = balanced_plan(idx.size(0), num_heads, idx.size(1), idx.device());
    sched = at::empty({static_cast<int64_t>(plan.schedule_bytes)}, idx.options().dtype(at::kByte));
    dsa::SparseMlaProblem p;
    p.num_tokens = static_cast<int>(idx.size(0));
    p.num_heads = static_cast<int>(num_heads);
    p.topk = static_cast<int>(idx.size(1));
    p.num_pages = static_cast<int>(ckv.size(0));
    p.page_size = static_cast<int>(ckv.size(1));
    p.indices = idx.data_ptr<int32_t>();
    p.indices_token_stride = idx.size(0) <= 1 ? 0 : idx.stride(0);
    p.topk_lengths = list_lengths(lengths, idx.size(0), idx.device());
    if (plan.schedule_bytes > 0)
      dsa::make_sparse_mla_schedule(p, plan, sched.data_ptr(), plan.schedule_bytes, at::cuda::getCurrentCUDAStream());
  } catch (const dsa::Error& e) {
    TORCH_CHECK(false, "dsa.sparse_mla_schedule: ", e.what());
  }
  return sched;
}

void forward_out(const at::Tensor& q_nope, const at::Tensor& q_pe, const at::Tensor& ckv, const c10::optional<at::Tensor>& kpe,
                 const at::Tensor& idx, double sm_scale, at::Tensor& out, at::Tensor& lse, c10::string_view index_sharing,
                 const c10::optional<at::Tensor>& sched, const c10::optional<at::Tensor>& lengths, int64_t min_valid_entries) {
  dsa::SparseMlaProblem p =
      make_problem(q_nope, q_pe, ckv, kpe, idx, sm_scale, out, lse, index_sharing, lengths, min_valid_entries);  // checks first
  if (sched.has_value()) {
    check_input(*sched, "schedule", at::kByte, 1, q_nope.device());
    p.schedule = sched->data_ptr();
    p.schedule_bytes = static_cast<size_t>(sched->numel());  // the library refuses one smaller than the plan's
  }
  const c10::cuda::CUDAGuard guard(q_nope.device());
  try {
    const dsa::SparseMlaPlan plan =
        sched.has_value() ? balanced_plan(p.num_tokens, p.num_heads, p.topk, q_nope.device()) : dsa::plan_sparse_mla(p);
    // Caching allocator: no cudaMalloc per call, and graph-capture safe. One split needs none.
    at::Tensor ws;
    if (plan.workspace_bytes > 0)
      ws = at::empty({static_cast<int64_t>(plan.workspace_bytes)}, q_nope.options().dtype(at::kByte));
    dsa::sparse_mla_forward(p, plan, ws.defined() ? ws.data_ptr() : nullptr, plan.workspace_bytes,
                            at::cuda::getCurrentCUDAStream());
  } catch (const dsa::Error& e) {
    TORCH_CHECK(false, "dsa.sparse_mla_forward: ", e.what());
  }
}

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& q_nope, const at::Tensor& q_pe, const at::Tensor& ckv,
                                           const c10::optional<at::Tensor>& kpe, const at::Tensor& idx, double sm_scale,
                                           c10::string_view index_sharing, const c10::optional<at::Tensor>& sched,
                                           const c10::optional<at::Tensor>& lengths, int64_t min_valid_entries) {
  TORCH_CHECK(q_nope.dim() == 3, "dsa.sparse_mla_forward: q_nope must be [T, H, 512], got ", shape(q_nope.sizes()));
  at::Tensor out = at::empty({q_nope.size(0), q_nope.size(1), dsa::kCkvDim}, q_nope.options().dtype(at::kBFloat16));
  at::Tensor lse = at::empty({q_nope.size(0), q_nope.size(1)}, q_nope.options().dtype(at::kFloat));
  forward_out(q_nope, q_pe, ckv, kpe, idx, sm_scale, out, lse, index_sharing, sched, lengths, min_valid_entries);
  return {out, lse};
}

// Shapes only, for tracing (torch.compile, fake tensors).
std::tuple<at::Tensor, at::Tensor> forward_meta(const at::Tensor& q_nope, const at::Tensor&, const at::Tensor&,
                                                const c10::optional<at::Tensor>&, const at::Tensor&, double, c10::string_view,
                                                const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, int64_t) {
  return {at::empty({q_nope.size(0), q_nope.size(1), dsa::kCkvDim}, q_nope.options().dtype(at::kBFloat16)),
          at::empty({q_nope.size(0), q_nope.size(1)}, q_nope.options().dtype(at::kFloat))};
}

void forward_out_meta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&, const at::Tensor&,
                      double, at::Tensor&, at::Tensor&, c10::string_view, const c10::optional<at::Tensor>&,
                      const c10::optional<at::Tensor>&, int64_t) {}

// The schedule's size needs the plan, so the device's SM count: the tracing device's (the CUDA
// device the indices will be on; 0 when traced on the meta device).
at::Tensor schedule_meta(const at::Tensor& idx, const at::Tensor&, int64_t num_heads, const c10::optional<at::Tensor>&) {
  const at::Device device = idx.is_cuda() ? idx.device() : at::Device(at::kCUDA, 0);
  const dsa::SparseMlaPlan plan = balanced_plan(idx.size(0), num_heads, idx.size(1), device);
  return at::empty({static_cast<int64_t>(plan.schedule_bytes)}, idx.options().dtype(at::kByte));
}

}  // namespace

TORCH_LIBRARY(dsa, m) {
  // index_sharing: the planner's hint (dsa::IndexSharing): "unknown", "consecutive" or "none".
  // schedule: a balanced plan's (dsa::SparseMlaPlan::balanced), from sparse_mla_schedule.
  // kpe_cache: None with an fp8_ds_mla ckv_cache (uint8 / float8_e4m3fn rows of 656 bytes).
  // topk_length: int32 [T] or None, each token's list length (dsa::SparseMlaProblem::topk_lengths).
  // min_valid_entries: the planner's hint (dsa::SparseMlaProblem::min_valid_entries), 0: unknown.
  m.def("sparse_mla_forward(Tensor q_nope, Tensor q_pe, Tensor ckv_cache, Tensor? kpe_cache, Tensor sparse_indices, "
        "float sm_scale, str index_sharing=\"unknown\", Tensor? schedule=None, Tensor? topk_length=None, "
        "int min_valid_entries=0) -> (Tensor, Tensor)");
  m.def("sparse_mla_forward_out(Tensor q_nope, Tensor q_pe, Tensor ckv_cache, Tensor? kpe_cache, "
        "Tensor sparse_indices, float sm_scale, Tensor(a!) out, Tensor(b!) lse, str index_sharing=\"unknown\", "
        "Tensor? schedule=None, Tensor? topk_length=None, int min_valid_entries=0) -> ()");
  m.def("sparse_mla_schedule(Tensor sparse_indices, Tensor ckv_cache, int num_heads, Tensor? topk_length=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(dsa, CUDA, m) {
  m.impl("sparse_mla_forward", &forward);
  m.impl("sparse_mla_forward_out", &forward_out);
  m.impl("sparse_mla_schedule", &schedule);
}

// Inference ops without a backward: fall through the autograd key instead of the boxed
// "autograd not implemented" fallback, which boxes every argument on every call.
TORCH_LIBRARY_IMPL(dsa, Autograd, m) {
  m.impl("sparse_mla_forward", torch::CppFunction::makeFallthrough());
  m.impl("sparse_mla_forward_out", torch::CppFunction::makeFallthrough());
  m.impl("sparse_mla_schedule", torch::CppFunction::makeFallthrough());
}

// CPU tensors reach the same checks and get a clear "must be a CUDA tensor" error.
TORCH_LIBRARY_IMPL(dsa, CPU, m) {
  m.impl("sparse_mla_forward", &forward);
  m.impl("sparse_mla_forward_out", &forward_out);
  m.impl("sparse_mla_schedule", &schedule);
}

TORCH_LIBRARY_IMPL(dsa, Meta, m) {
  m.impl("sparse_mla_forward", &forward_meta);
  m.impl("sparse_mla_forward_out", &forward_out_meta);
  m.impl("sparse_mla_schedule", &schedule_meta);
}

// The extension is imported as dsa._C only for its side effect: registering the ops above.
PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "dsa sparse MLA ops (torch.ops.dsa.*)", -1, nullptr};
  return PyModule_Create(&module);
}
