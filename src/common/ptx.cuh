// Thin wrappers over the PTX instructions the kernels use, one line of why each.
// Device-only; include from .cu files.
#pragma once

#include <cstdint>

#include <cuda/ptx>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace dsa::ptx {

// Shared-memory address of a generic pointer, as the 32-bit operand cp.async/ldmatrix expect.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared async copy; src_bytes = 0 zero-fills the destination without reading.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// As cp_async_16, asking L2 to fetch the whole 128-byte line from DRAM (.L2::128B): for gathered
// bf16 rows, -1 to -1.5 % at T >= 64 in split-K (docs/perf.md run 68; .L2::256B was +1-2 %). Not
// for rows that do not start and end on a line (fp8_ds_mla's 656 B: 768 B of lines where DRAM's
// 64-byte granules give 704, 1.09x the bytes, run 534).
__device__ __forceinline__ void cp_async_16_l2_128b(uint32_t dst, const void* src, uint32_t src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// cp_async_16 / cp_async_16_l2_128b where `pred` holds, nothing otherwise: one predicated copy.
// An `if` around the copy compiled to a branch and its reconvergence for every gathered row.
__device__ __forceinline__ void cp_async_16_if(bool pred, uint32_t dst, const void* src, uint32_t src_bytes = 16) {
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p cp.async.cg.shared.global [%0], [%1], 16, %2;\n}\n" ::"r"(dst),
               "l"(src), "r"(src_bytes), "r"(static_cast<int>(pred)));
}
__device__ __forceinline__ void cp_async_16_l2_128b_if(bool pred, uint32_t dst, const void* src, uint32_t src_bytes = 16) {
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n}\n" ::"r"(dst),
               "l"(src), "r"(src_bytes), "r"(static_cast<int>(pred)));
}

// 16 bytes from global memory into registers where `pred` holds, zeros otherwise, by one of the
// load paths below. Predicated, not selected after the load: a select (or a branch) waits for
// the data right there.
enum class LoadPath {
  nc,           // ld.global.nc: through L1's non-coherent path
  cg,           // ld.global.cg: L2 only, as cp.async.cg tile fills read
  cg_l2_128b,   // ld.global.cg.L2::128B: L2 only, asking for the whole 128-byte line (cp_async_16_l2_128b)
};
#define DSA_LD_V4_OR_ZERO(INSTR)                                                                                      \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n" \
               " mov.b32 %3, 0;\n @p " INSTR " {%0, %1, %2, %3}, [%4];\n}\n"                                        \
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                                                         \
               : "l"(src), "r"(static_cast<int>(pred)))
template <LoadPath kPath>
__device__ __forceinline__ uint4 ld_v4_or_zero(bool pred, const void* src) {
  uint4 v;
  if constexpr (kPath == LoadPath::nc) DSA_LD_V4_OR_ZERO("ld.global.nc.v4.u32");
  else if constexpr (kPath == LoadPath::cg) DSA_LD_V4_OR_ZERO("ld.global.cg.v4.u32");
  else DSA_LD_V4_OR_ZERO("ld.global.cg.L2::128B.v4.u32");
  return v;
}
#undef DSA_LD_V4_OR_ZERO

// base[i] through the non-coherent path, or `fallback` where base is null: one predicated load
// the compiler cannot split into a branch, so nothing waits for it before its value's first use.
__device__ __forceinline__ int ld_nc_s32_or(const int32_t* base, int64_t i, int fallback) {
  int r;
  asm volatile(
      "{\n .reg .pred has;\n .reg .u64 a;\n setp.ne.u64 has, %1, 0;\n mad.lo.u64 a, %2, 4, %1;\n mov.b32 %0, %3;\n"
      " @has ld.global.nc.b32 %0, [a];\n}\n"
      : "=r"(r)
      : "l"(base), "l"(i), "r"(fallback));
  return r;
}

// Closes the current group of cp.async copies so it can be waited on as one unit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most N committed cp.async groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices from shared memory; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// As ldmatrix_x4, each matrix transposed (row-major K x N in memory -> mma B fragment).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four 8x8 b16 matrices to shared memory (ldmatrix_x4's inverse: an mma C fragment packed to b16
// is matrix i's register i); lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0), "r"(r1), "r"(r2),
               "r"(r3)
               : "memory");
}

// D = A(16x16 bf16, row) * B(16x8 bf16, col) + D, fp32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A(16x16 fp16, row) * B(16x8 fp16, col) + D, fp32 accumulate.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                              uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> one register of two fp16 (lo in the low half), round to nearest.
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two floats -> one register of two bf16 (lo in the low half), round to nearest.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Four fp8 e4m3 (low byte first) as two f16x2, bytes 0-1 and 2-3, exactly: every e4m3 value is
// an f16 normal or zero (cvt.rn.f16x2.e4m3x2). The upper pair is the register's high half, which
// the conversion reads in place (F2FP ... R.H1); a shift to the low half first cost one more
// instruction per 4 values (perf.md run 354).
__device__ __forceinline__ uint2 e4m3x4_to_f16x4(uint32_t x) {
  uint2 d;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n cvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
      : "=r"(d.x), "=r"(d.y)
      : "r"(x));
  return d;
}

// Two f16 products at once (mul.rn.f16x2): a x b per 16-bit half.
__device__ __forceinline__ uint32_t mul_f16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Two bf16 products at once (mul.rn.bf16x2, sm_90): a x b per 16-bit half.
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Fetches a tensor map (a __grid_constant__ kernel parameter) into the cache before its first bulk copy.
__device__ __forceinline__ void prefetch_tensormap(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// Programmatic dependent launch: let the next kernel in the stream start its prologue now.
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Programmatic dependent launch: wait until the previous kernel's memory is visible.
__device__ __forceinline__ void wait_prerequisites() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// Named barrier `id` over `count` threads: wait until all have arrived (this thread included).
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Named barrier `id` over `count` threads: count this thread's warp as arrived, do not wait.
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// named_barrier_sync in the non-.aligned form, for a barrier that warps reach from different
// code (synccheck reports the .aligned one there). Slower in a hot loop: the dense kernel's
// ping-pong lost 7-10 % with it (run 56).
__device__ __forceinline__ void named_barrier_sync_unaligned(int id, int count) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Blocks until the mbarrier at `bar` has completed the phase with parity `parity` (acquire).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

// Warpgroup-wide register budget change (sm_90a): producers give registers back, consumers take
// them. Needs a register cap at kernel entry (__launch_bounds__(threads, 1)).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// The SM this thread runs on (%smid; for --timeline records: the numbering is the hardware's).
__device__ __forceinline__ int sm_id() {
  int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Nanoseconds of the GPU's global timer (the same clock on every SM; for --timeline records).
__device__ __forceinline__ long long globaltimer_ns() {
  long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// 2^x with the hardware approximation (the kernels work in base 2 throughout).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// log2(x) with the hardware approximation (lse = m + log2 l; no slow path for denormals, l >= 1).
__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 1 / x with the hardware approximation (1 ulp; the division's slow-path call is not needed, l >= 1).
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace dsa::ptx
