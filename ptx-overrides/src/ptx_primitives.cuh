// Thin inline-PTX wrappers for the instructions the FlashAttention kernels are built from.
// Everything here is sm_80-level PTX, so one PTX file runs on Ampere, Ada (L4, sm_89) and
// Hopper (H100/H200, sm_90) after the driver's JIT.
#pragma once
#include <stdint.h>

namespace flash {

// Shared-window address of a shared-memory pointer: cp.async and ldmatrix take 32-bit
// shared addresses, which saves a register per address against generic 64-bit pointers.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy that bypasses L1 (.cg: K/V tiles are read once per CTA, and
// L1 would only evict Q).  src_bytes = 0 zero-fills the 16 bytes without reading: that is how
// rows past Sq / Skv become zeros (a zero V row times a zero probability stays 0, never NaN).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// Four 8x8 b16 matrices; lane i supplies the row address of row (i % 8) of matrix (i / 8).
// The "memory" clobber keeps NVVM from moving the read across the cp.async wait / barrier.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
// Transposed variant: used for V, stored [key][d] but needed as the k-major B operand of P V.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// Plain shared loads, for the "no ldmatrix" ablation only.
__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.b16 %0, [%1];\n" : "=h"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void sts_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void sts_u128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n"
               :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint4 lds_u128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

// mma.sync and the fp32 -> pair conversion depend on the element type: element_type.cuh.

// 2^x on the SFU.  ex2.approx(-inf) = +0, which is what masked scores rely on.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The softcap's tanh(x) in "v units", v = (tanh(x) - 1) / 2 = -1/(1 + e^(2x)), given y = 2 x log2(e) (the caller
// folds that factor into its scale): ex2.approx and rcp.approx of -(1 + 2^y), the negation free as an operand
// modifier, so two instructions per score.  The softmax needs tanh only up to the affine map t = 1 + 2v, whose
// constant cancels in exp(t - m) and whose factor 2 joins the scale (fwd_body: sl2, and the lse's offset c);
// -inf (a masked score) stays -inf.  Absolute error below 1e-6 in t over the whole range, v -> 0 or -1 for large
// |x|, NaN stays NaN.  (tanh.approx.f32's 2^-11 relative error would move a capped score by up to c*2^-11,
// more than the checks allow; a reciprocal by Newton steps on the FMA pipe instead of rcp measured slower:
// the softcapped tile is issue-bound, not SFU-bound.)
__device__ __forceinline__ float softcap_v(float y) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(-1.f - exp2_approx(y)));
  return r;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace flash
