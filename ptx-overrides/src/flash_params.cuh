// The call descriptor shared by every entry: 32 int32 in device memory (see README.md, "ABI").
// The hosts fill it once per call; keeping it in memory instead of 20+ kernel parameters keeps
// one entry signature for the CUDA-driver host and the TornadoVM prebuilt-task host alike.
#pragma once
#include <stdint.h>

namespace flash {

enum ParamIndex {
  P_B = 0, P_HQ = 1, P_HKV = 2, P_SQ = 3, P_SKV = 4, P_D = 5, P_CAUSAL = 6,
  P_SCALE_LOG2 = 7,      // float bits of scale * log2(e)
  P_WRITE_LSE = 8,
  P_Q_STRIDE = 9,        // batch, head, row strides (elements), 9..11
  P_K_STRIDE = 12,       // 12..14
  P_V_STRIDE = 15,       // 15..17
  P_O_STRIDE = 18,       // 18..20
  P_NUM_SPLITS = 21,     // decode only
  P_SCALE = 22,          // float bits of scale
  P_PAGE_SIZE = 23,      // KV-cache calls (flash_cache.cu): tokens per page, a power of two; 0 = contiguous cache
  P_PAGES_PER_SEQ = 24,  // KV-cache calls: block-table row stride (pages per sequence)
  P_KEYS_PER_SPLIT = 25, // KV-cache fused decode (TornadoVM twins): keys per split, a multiple of 64
  // Score features (run-time, every attention entry; AttentionShape's semantics):
  P_WINDOW_LEFT = 26,    // window: query i sees keys j >= i + Skv - Sq - left (cache: L_b - n_b + i - left); -1 = unbounded
  P_WINDOW_RIGHT = 27,   // and keys j <= i + Skv - Sq + right; -1 = unbounded (causal still applies)
  P_SOFTCAP = 28,        // float bits of c: a score s = scale * q.k becomes c * tanh(s / c); 0 = off
  P_SINKS = 29,          // 1: word P_COUNT + h holds float bits of head h's sink logit (h < Hq); 0 = none
  P_COUNT = 32           // words before the sinks; the block is P_COUNT + Hq words when P_SINKS = 1
};

// Where attention reads K/V from (fwd_body's kCache template argument).
//   kNoCache:     the plain [B, Hkv, Skv, D] tensors of the prefill / decode entries
//   kCacheContig: a KV cache [slots, Hkv, capacity, D] holding lens[b] valid keys per sequence
//   kCachePaged:  a page pool [pages, Hkv, page_size, D] read through a block table
enum CacheMode { kNoCache = 0, kCacheContig = 1, kCachePaged = 2 };

// The run-time data of a KV-cache call (see flash_cache.cu for the ABI).
struct CacheArgs {
  const int* lens = nullptr;         // [2*B]: KV length after this step, then new queries per sequence
  const int* block_table = nullptr;  // [B * pages_per_seq] page ids (paged only)
  const int* q_offsets = nullptr;    // [B + 1] packed query offsets (varlen prefill only); nullptr:
                                     // lens + 2*B (a step array), re-derived where read
  int keys_per_split = 0;            // decode split pass: keys per split, a multiple of Bc
};

struct Params {
  int B, Hq, Hkv, Sq, Skv, D;
  bool causal, write_lse;
  float scale_log2, scale;
  // Strides are int32 (each must fit); offsets are formed in 64 bits at the point of use,
  // (int64_t)index * stride, which is one wide multiply-add and keeps half the registers live.
  int q_sb, q_sh, q_sr, k_sb, k_sh, k_sr, v_sb, v_sh, v_sr, o_sb, o_sh, o_sr;
  int num_splits;
};

// Every thread reads the same 32 words: one L1 line, a broadcast.
__device__ __forceinline__ Params load_params(const int* __restrict__ p) {
  Params r;
  r.B = __ldg(p + P_B); r.Hq = __ldg(p + P_HQ); r.Hkv = __ldg(p + P_HKV);
  r.Sq = __ldg(p + P_SQ); r.Skv = __ldg(p + P_SKV); r.D = __ldg(p + P_D);
  r.causal = __ldg(p + P_CAUSAL) != 0;
  r.scale_log2 = __int_as_float(__ldg(p + P_SCALE_LOG2));
  r.write_lse = __ldg(p + P_WRITE_LSE) != 0;
  r.q_sb = __ldg(p + P_Q_STRIDE); r.q_sh = __ldg(p + P_Q_STRIDE + 1); r.q_sr = __ldg(p + P_Q_STRIDE + 2);
  r.k_sb = __ldg(p + P_K_STRIDE); r.k_sh = __ldg(p + P_K_STRIDE + 1); r.k_sr = __ldg(p + P_K_STRIDE + 2);
  r.v_sb = __ldg(p + P_V_STRIDE); r.v_sh = __ldg(p + P_V_STRIDE + 1); r.v_sr = __ldg(p + P_V_STRIDE + 2);
  r.o_sb = __ldg(p + P_O_STRIDE); r.o_sh = __ldg(p + P_O_STRIDE + 1); r.o_sr = __ldg(p + P_O_STRIDE + 2);
  r.num_splits = __ldg(p + P_NUM_SPLITS);
  r.scale = __int_as_float(__ldg(p + P_SCALE));
  return r;
}

// A fresh (non-CSE-able) read of word kIdx, for values needed only in the epilogue: cheaper
// than keeping them in registers across the main loop.  The offset (header bytes included) is
// an immediate on the raw kernel parameter, so no adjusted pointer stays live either.
template <int kIdx, int kHdr>
__device__ __forceinline__ int reload_param(const int* p) {
  int v;
  asm volatile("ld.global.nc.b32 %0, [%1+%2];\n" : "=r"(v) : "l"(p), "n"(kHdr + 4 * kIdx));
  return v;
}

// reload_param for a word whose index is known only at run time (a sink: P_COUNT + head).
template <int kHdr>
__device__ __forceinline__ int reload_param_at(const int* p, int idx) {
  int v;
  asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(reinterpret_cast<const char*>(p) + kHdr + 4 * idx));
  return v;
}

// Head h's sink logit (scale * q.k units), -inf without sinks.  Never reads past word 31 of a
// block without sinks (it may be only 32 words long).
template <int kHdr>
__device__ __forceinline__ float sink_logit(const int* p, int h) {
  return reload_param<P_SINKS, kHdr>(p) != 0 ? __int_as_float(reload_param_at<kHdr>(p, P_COUNT + h)) : -__int_as_float(0x7f800000);
}

// lse_partial of an absent query (cache decode, row s >= n_b) in every split: a NaN whose payload
// no arithmetic produces (the GPU's NaN is 0x7fffffff), so that the combine gives that row no
// sink (O = 0, lse = -inf) while a real row whose splits saw no key gets lse = its sink.
constexpr int kAbsentLseBits = 0x7fa65e00;

// The first key of a cache decode split pass's span for a sequence of L keys and n new queries:
// the first key its first query sees (window left side; 0 without one), rounded down to a
// multiple of 64 (every decode tile's Bc, and keys_per_split is a multiple of 64), so split s
// covers [span_start + s*kps, span_start + (s+1)*kps) and tiles never straddle two splits.
__device__ __forceinline__ int cache_span_start(int L, int n, int left) {
  return left >= 0 ? max(0, L - n - left) & ~63 : 0;
}

// TornadoVM passes every array as a pointer to its object header; the payload starts 16 bytes in.
constexpr int kTornadoHeaderBytes = 16;

// Pointer to the data of an array passed by a host with kHdr header bytes (0: CUDA host,
// 16: TornadoVM), applied at each use so that it folds into the address arithmetic there
// instead of keeping an adjusted pointer in registers across the main loop.
template <int kHdr, typename T>
__device__ __forceinline__ T* at_data(T* p) {
  static_assert(kHdr % sizeof(T) == 0, "header must be a whole number of elements");
  return p + kHdr / sizeof(T);
}

template <typename T>
__device__ __forceinline__ T* tornado_data(T* header) {
  return reinterpret_cast<T*>(reinterpret_cast<char*>(header) + kTornadoHeaderBytes);
}
template <typename T>
__device__ __forceinline__ const T* tornado_data(const T* header) {
  return reinterpret_cast<const T*>(reinterpret_cast<const char*>(header) + kTornadoHeaderBytes);
}

}  // namespace flash
