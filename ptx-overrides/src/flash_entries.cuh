// Entry-point macros: every prefill configuration gets a CUDA-driver entry and (static shared
// memory only) TornadoVM prebuilt-task entries; the decode passes get the entries a host
// launches (split and combine: CUDA driver; fused: TornadoVM, flash_decode_fused.cuh).  All are
// thin wrappers around the same body.  TornadoVM entries take a leading kernel-context word
// (ignored) and every array, params included, as a pointer to the TornadoVM array header.
// Each entry also writes its row of ptx/manifest.tsv (flash_manifest.cuh).
#pragma once
#include "flash_decode_combine.cuh"
#include "flash_fwd_kernel.cuh"
#include "flash_manifest.cuh"

#define FLASH_FWD_ENTRY(NAME, KT)                                                                 \
  FLASH_MANIFEST_ROW("prefill", flash_fwd_##NAME, flash_fwd_##NAME, 0, KT, "none")                   \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  flash_fwd_##NAME(const __half* __restrict__ q, const __half* __restrict__ k,                   \
                   const __half* __restrict__ v, __half* __restrict__ o, float* __restrict__ lse, \
                   const int* __restrict__ params) {                                              \
    flash::run_fwd<KT, false>(q, k, v, o, nullptr, lse, params);                                 \
  }

#define FLASH_FWD_TORNADO_ENTRY_HDR(NAME, KT, TAIL, HEADER_BYTES)                                \
  FLASH_MANIFEST_ROW("prefill", flash_fwd_##NAME, flash_fwd_##NAME##TAIL, HEADER_BYTES, KT, "none")   \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  flash_fwd_##NAME##TAIL(uint64_t kernel_context, const __half* __restrict__ q,                  \
                         const __half* __restrict__ k, const __half* __restrict__ v,             \
                         __half* __restrict__ o, float* __restrict__ lse,                        \
                         const int* __restrict__ params) {                                        \
    flash::run_fwd<KT, false, HEADER_BYTES>(q, k, v, o, nullptr, lse, params);                   \
  }

// _tornado: TornadoVM's default 16-byte array header. _tornado_h128: for a JVM run with
// -Dtornado.panama.objectHeader=128, which puts the data on a 128-byte boundary again; with the
// default header every row load straddles one more 32-byte sector (about 20% slower at D=128).
#define FLASH_FWD_TORNADO_ENTRY(NAME, KT)                                                         \
  static_assert(!KT::kDynamicSmem, "TornadoVM launches with static shared memory only");         \
  FLASH_FWD_TORNADO_ENTRY_HDR(NAME, KT, _tornado, flash::kTornadoHeaderBytes)                    \
  FLASH_FWD_TORNADO_ENTRY_HDR(NAME, KT, _tornado_h128, 128)

#define FLASH_DECODE_SPLIT_ENTRY(NAME, KT)                                                        \
  FLASH_MANIFEST_ROW("decode-split", flash_decode_split_##NAME, flash_decode_split_##NAME, 0, KT, "none") \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  flash_decode_split_##NAME(const __half* __restrict__ q, const __half* __restrict__ k,          \
                            const __half* __restrict__ v, float* __restrict__ o_partial,         \
                            float* __restrict__ lse_partial, const int* __restrict__ params) {   \
    flash::run_fwd<KT, true>(q, k, v, nullptr, o_partial, lse_partial, params);                  \
  }

#define FLASH_DECODE_COMBINE_ENTRY(NAME, D)                                                       \
  FLASH_MANIFEST_PLAIN("decode-combine", flash_decode_combine_##NAME, flash_decode_combine_##NAME, \
                       0, flash::Fp16, "none", D, flash::kCombineRows<D>, flash::kCombineThreads)                     \
  extern "C" __global__ void __launch_bounds__(flash::kCombineThreads)                           \
  flash_decode_combine_##NAME(const float* __restrict__ o_partial,                               \
                              const float* __restrict__ lse_partial, __half* __restrict__ o,     \
                              float* __restrict__ lse, const int* __restrict__ params) {         \
    flash::decode_combine_body<D>(o_partial, lse_partial, o, lse, params);                       \
  }

// One configuration = one traits alias + its entries; the entry name spells the configuration:
//   flash_fwd_d{D}_m{Br}n{Bc}w{warps}s{stages}{SUFFIX}   (SUFFIX: _qs = Q stays in shared
//   memory, _dyn = dynamic shared memory, then an ablation tag for benchmark-only entries)
#define FLASH_FWD_NAME(D, BR, BC, W, S, SUFFIX) d##D##_m##BR##n##BC##w##W##s##S##SUFFIX
#define FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, DYN, SUFFIX, ... /* Opt */)               \
  using Kt_d##D##_m##BR##n##BC##w##W##s##S##SUFFIX = flash::FwdTraits<D, BR, BC, W, S, MINB, QREGS, DYN, __VA_ARGS__>; \
  FLASH_FWD_ENTRY(d##D##_m##BR##n##BC##w##W##s##S##SUFFIX, Kt_d##D##_m##BR##n##BC##w##W##s##S##SUFFIX)
// Static shared memory configurations also get the TornadoVM entry.
#define FLASH_FWD_BOTH(D, BR, BC, W, S, MINB, QREGS, SUFFIX, ... /* Opt */)                       \
  FLASH_FWD_CUDA(D, BR, BC, W, S, MINB, QREGS, false, SUFFIX, __VA_ARGS__)                       \
  FLASH_FWD_TORNADO_ENTRY(d##D##_m##BR##n##BC##w##W##s##S##SUFFIX, Kt_d##D##_m##BR##n##BC##w##W##s##S##SUFFIX)

// Decode split pass: flash_decode_split_d{D}_n{Bc}s{stages}.
#define FLASH_DECODE(D, BC, S, MINB)                                                              \
  using KtDec_d##D##_n##BC##s##S = flash::DecodeTraits<D, BC, S, MINB>;                          \
  FLASH_DECODE_SPLIT_ENTRY(d##D##_n##BC##s##S, KtDec_d##D##_n##BC##s##S)
