// The element types of Q, K, V and O: the one place that names a storage type.  Everything that
// depends on it is here: the storage and packed-pair types, fp32 -> pair conversions, pair ->
// fp32, and the tensor-core mma, whose input type is part of the instruction.  Layouts do not
// depend on it: both types are 16 bits, so cp.async (16-byte chunks), ldmatrix (.b16) and the
// shared-memory tiles are the same for both.  Kernels take the type from their traits
// (`typename Kt::Element`), plain entries as a template argument.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace flash {

struct Fp16 {
  using Storage = __half;  // one element in memory
  using Pair = __half2;    // two elements, lower column in the low half
  static constexpr const char* kName = "fp16";  // the manifest's dtype
  static constexpr const char* kTag = "";       // entry names: fp16 has no tag

  // Two fp32 -> packed pair with lo in the low half (the lower column index), as the mma A
  // fragment expects.  cvt puts its first source in the upper half.
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ Pair pair_rn(float lo, float hi) { return __floats2half2_rn(lo, hi); }
  static __device__ __forceinline__ float2 to_float2(Pair x) { return __half22float2(x); }

  // D += A * B with A 16x16 (row), B 16x8 (col), fp16 in, fp32 accumulate.  Fragment layouts
  // (PTX ISA, "mma.m16n8k16"; the same for both types), g = lane / 4, t = lane % 4:
  //   A: a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
  //   B: b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g)
  //   C: c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
  static __device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

struct Bf16 {
  using Storage = __nv_bfloat16;
  using Pair = __nv_bfloat162;
  static constexpr const char* kName = "bf16";
  static constexpr const char* kTag = "bf16";

  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ Pair pair_rn(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
  static __device__ __forceinline__ float2 to_float2(Pair x) { return __bfloat1622float2(x); }

  // D += A * B, bf16 in, fp32 accumulate.
  static __device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

static_assert(sizeof(Fp16::Storage) == 2 && sizeof(Bf16::Storage) == 2, "tiles are laid out for 16-bit elements");

// The storage type of a configuration's elements.
template <class Kt>
using elem_t = typename Kt::Element::Storage;

// X(type) for every element type.  The few functions that own a static shared-memory array are
// stamped once per type with it (FLASH_*_WRAPPERS): their parameter types are then the storage
// type itself, not a dependent name, so the array's mangled symbol in the PTX is what it would
// be for a function written for that type alone.
#define FLASH_FOR_EACH_ELEMENT(X) X(Fp16) X(Bf16)

}  // namespace flash
