// Split-KV decode in one launch, for hosts where two dependent launches are a problem (TornadoVM
// 5.2.0 crashes with the split and combine passes as two prebuilt tasks of one graph).  Each CTA runs
// the split pass for its slice of keys; the last of the num_splits CTAs of a row block to finish
// (an atomic ticket per row block) then combines that block's rows.  The tickets live in a zeroed
// int array of gridDim.y * gridDim.z words, which the last CTA sets back to 0 for the next launch.
#pragma once
#include "flash_decode_combine.cuh"
#include "flash_fwd_kernel.cuh"
#include "flash_manifest.cuh"

namespace flash {

template <class Kt, int kHdr>
__device__ __forceinline__ void decode_fused_body(const elem_t<Kt>* q, const elem_t<Kt>* k, const elem_t<Kt>* v,
                                                  elem_t<Kt>* o, float* lse, float* o_partial,
                                                  float* lse_partial, int* tickets, const int* params) {
  run_fwd<Kt, true, kHdr>(q, k, v, nullptr, o_partial, lse_partial, params);

  int* ticket = last_split_ticket<kHdr>(tickets);
  if (ticket == nullptr) return;  // another split CTA of this row block combines it

  constexpr int D = Kt::kHeadDim;
  constexpr int kThreadsPerRow = D / 8;
  constexpr int kRowsPerPass = Kt::kNThreads / kThreadsPerRow;
  static_assert(kRowsPerPass >= 1, "combine: a row per pass at least");
  // D = 96, 192: the threads past the last whole row idle.
  constexpr bool kIdle = Kt::kNThreads % kThreadsPerRow != 0;
  const Params p = load_params(at_data<kHdr>(params));
  const int G = p.Hq / p.Hkv;
  const int b = blockIdx.z / p.Hkv, kvh = blockIdx.z % p.Hkv;
  const int64_t rows = (int64_t)p.B * p.Hq * p.Sq;
  // Packed row r of this block = query r % Sq of head kvh*G + r / Sq (as in the split pass).
  const int r_end = min((int)(blockIdx.y + 1) * Kt::kBlockM, G * p.Sq);
  const int r_first = kIdle && (int)threadIdx.x >= kRowsPerPass * kThreadsPerRow
                          ? r_end : (int)(blockIdx.y * Kt::kBlockM + threadIdx.x / kThreadsPerRow);
  for (int r = r_first; r < r_end; r += kRowsPerPass) {
    const int64_t row = ((int64_t)b * p.Hq + kvh * G + r / p.Sq) * p.Sq + r % p.Sq;
    combine_row<typename Kt::Element, D, true>(at_data<kHdr>(o_partial), at_data<kHdr>(lse_partial), at_data<kHdr>(o),
                   at_data<kHdr>(lse), p, at_data<kHdr>(params), rows, row, (threadIdx.x % kThreadsPerRow) * 8);
  }
  if (threadIdx.x == 0) *ticket = 0;
}

}  // namespace flash

// The fused decode's TornadoVM prebuilt-task entries (kernel-context word first, arrays behind an
// HDR-byte header).  No CUDA-driver twin: that host launches the split and combine passes.
#define FLASH_DECODE_FUSED_ENTRY(ENTRY, CONFIG, KT, HDR)                                          \
  FLASH_MANIFEST_ROW("decode-fused", CONFIG, ENTRY, HDR, KT, "none")                             \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(uint64_t kernel_context, const flash::elem_t<KT>* __restrict__ q,                        \
        const flash::elem_t<KT>* __restrict__ k, const flash::elem_t<KT>* __restrict__ v,        \
        flash::elem_t<KT>* __restrict__ o, float* __restrict__ lse, float* __restrict__ o_partial, \
        float* __restrict__ lse_partial, int* __restrict__ tickets, const int* __restrict__ params) { \
    flash::decode_fused_body<KT, HDR>(q, k, v, o, lse, o_partial, lse_partial, tickets, params); \
  }
