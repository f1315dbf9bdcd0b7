// Entry-point macros of the dense kernels: prefill (CUDA driver and TornadoVM prebuilt-task
// ABI), the decode split pass and the decode combine (CUDA driver); the fused decode's are in
// flash_decode_fused.cuh, the KV-cache ones in flash_cache.cuh.  All are thin wrappers around
// the same body.  TornadoVM entries take a leading kernel-context word (ignored) and every array,
// params included, as a pointer to the TornadoVM array header (HDR bytes before the data).
//
// The entries themselves are listed in src/generated/<module>.inc, written by
// generate_kernels.py from its table: it names each entry (ENTRY), its configuration (CONFIG, the
// name FLASH_SELECT and the twins of one configuration share) and the traits type KT.  Each
// macro also writes the entry's row of ptx/manifest.tsv (flash_manifest.cuh).
#pragma once
#include "flash_decode_combine.cuh"
#include "flash_fwd_kernel.cuh"
#include "flash_manifest.cuh"

#define FLASH_FWD_ENTRY(ENTRY, CONFIG, KT)                                                        \
  FLASH_MANIFEST_ROW("prefill", CONFIG, ENTRY, 0, KT, "none")                                    \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(const flash::elem_t<KT>* __restrict__ q, const flash::elem_t<KT>* __restrict__ k,        \
        const flash::elem_t<KT>* __restrict__ v, flash::elem_t<KT>* __restrict__ o,              \
        float* __restrict__ lse, const int* __restrict__ params) {                               \
    flash::run_fwd<KT, false>(q, k, v, o, nullptr, lse, params);                                 \
  }

// HDR 16: TornadoVM's default array header. 128: for a JVM run with
// -Dtornado.panama.objectHeader=128, which puts the data on a 128-byte boundary again; with the
// default header every row load straddles one more 32-byte sector (about 20% slower at D=128).
#define FLASH_FWD_TORNADO_ENTRY(ENTRY, CONFIG, KT, HDR)                                          \
  static_assert(!KT::kDynamicSmem, "TornadoVM launches with static shared memory only");         \
  FLASH_MANIFEST_ROW("prefill", CONFIG, ENTRY, HDR, KT, "none")                                  \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(uint64_t kernel_context, const flash::elem_t<KT>* __restrict__ q,                        \
        const flash::elem_t<KT>* __restrict__ k, const flash::elem_t<KT>* __restrict__ v,        \
        flash::elem_t<KT>* __restrict__ o, float* __restrict__ lse,                              \
        const int* __restrict__ params) {                                                         \
    flash::run_fwd<KT, false, HDR>(q, k, v, o, nullptr, lse, params);                            \
  }

#define FLASH_DECODE_SPLIT_ENTRY(ENTRY, CONFIG, KT)                                               \
  FLASH_MANIFEST_ROW("decode-split", CONFIG, ENTRY, 0, KT, "none")                               \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(const flash::elem_t<KT>* __restrict__ q, const flash::elem_t<KT>* __restrict__ k,        \
        const flash::elem_t<KT>* __restrict__ v, float* __restrict__ o_partial,                  \
        float* __restrict__ lse_partial, const int* __restrict__ params) {                       \
    flash::run_fwd<KT, true>(q, k, v, nullptr, o_partial, lse_partial, params);                  \
  }

// E: the element type of o (element_type.cuh); D: the head dim.
#define FLASH_DECODE_COMBINE_ENTRY(ENTRY, CONFIG, E, D)                                           \
  FLASH_MANIFEST_PLAIN("decode-combine", CONFIG, ENTRY, 0, E, "none", flash::manifest::kScoreFeatures, D, \
                       flash::kCombineRows<D>, flash::kCombineThreads)                           \
  extern "C" __global__ void __launch_bounds__(flash::kCombineThreads)                           \
  ENTRY(const float* __restrict__ o_partial, const float* __restrict__ lse_partial,              \
        E::Storage* __restrict__ o, float* __restrict__ lse, const int* __restrict__ params) {    \
    flash::decode_combine_body<E, D>(o_partial, lse_partial, o, lse, params);                    \
  }
