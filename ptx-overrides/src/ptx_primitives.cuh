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

// The softcap's tanh: tanh.approx.f32, one SFU op per score (the scale / c folded into its argument by the caller).
// The ISA promises a relative error below 2^-10.987; over every positive float on an H200 (sm_90) it measured at most
// 1.1e-5 relative and 8.0e-6 absolute (bench/results/h200-2026-11-26-softcap-tanh.md), so a score capped at c moves
// by at most c * 8e-6.  The exact form before it (ex2.approx + rcp.approx, 1.8e-7) took a second SFU op per score,
// which the D=64 and D=128 tiles pay in time: 1.19-1.58x the plain call where this one takes 1.11-1.30x.
// tanh(-inf) = -1 is not relied on: masked scores are set to -inf after the softcap.  NaN stays NaN.
__device__ __forceinline__ float tanh_approx(float x) {
  float t;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(t) : "f"(x));
  return t;
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
