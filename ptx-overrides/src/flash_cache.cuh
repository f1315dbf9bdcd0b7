// KV-cache kernels beside the attention passes (flash_cache.cu has the ABI): the split-KV
// combine with the split count by value, the append of new K/V tokens into a contiguous or paged
// cache, the public merge of partial (O, lse) results, and the entry macros of the attention
// passes over a cache (the shared kernel body in flash_fwd_kernel.cuh, kCache modes).
#pragma once
#include <math_constants.h>
#include <type_traits>
#include "element_type.cuh"
#include "flash_decode_combine.cuh"  // kCombineThreads
#include "flash_fwd_kernel.cuh"
#include "flash_manifest.cuh"

namespace flash {

constexpr int kCacheThreads = 128;  // block of kv_cache_append and attention_merge_states

// The decode combine over a cache: num_splits comes from the launch (the host picks it from the
// lengths at run time), so the params block stays constant across steps.  The head's sink joins
// here, once, as in combine_row; rows of absent queries (every split wrote kAbsentLseBits) become
// O = 0, lse = -inf, a real row that sees no key O = 0, lse = its sink (-inf without sinks).
template <class E, int D>
__device__ __forceinline__ void cache_combine_body(const float* __restrict__ o_partial,
                                                   const float* __restrict__ lse_partial,
                                                   typename E::Storage* __restrict__ o, float* __restrict__ lse,
                                                   const int* __restrict__ params, int num_splits) {
  static_assert(kCombineFits<D>, "combine: D/8 threads per row, at most the block");
  constexpr int kThreadsPerRow = D / 8;
  constexpr int kRowsPerBlock = kCombineThreads / kThreadsPerRow;
  if constexpr (kCombineIdle<D>) {
    if (threadIdx.x >= kRowsPerBlock * kThreadsPerRow) return;
  }
  const float kNegInf = -CUDART_INF_F;
  const int Hq = __ldg(params + P_HQ), Sq = __ldg(params + P_SQ);
  const int64_t rows = (int64_t)__ldg(params + P_B) * Hq * Sq;
  const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  if (row >= rows) return;
  const int c = (threadIdx.x % kThreadsPerRow) * 8;
  const int sq = (int)(row % Sq);
  const int h = (int)((row / Sq) % Hq);
  const int b = (int)(row / ((int64_t)Sq * Hq));
  // An absent query (kAbsentLseBits in every split) has no sink: it stays O = 0, lse = -inf.
  const bool absent = __float_as_int(lse_partial[row]) == kAbsentLseBits;
  const float sink = absent ? kNegInf : sink_logit<0>(params, h);
  float lmax = sink;
  for (int s = 0; s < num_splits; ++s) lmax = fmaxf(lmax, lse_partial[s * rows + row]);
  float acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.f;
  float wsum = 0.f;
  if (lmax != kNegInf) {
#pragma unroll 4
    for (int s = 0; s < num_splits; ++s) {
      const float ls = lse_partial[s * rows + row];
      if (ls == kNegInf || absent) continue;  // an empty split: its O is not read
      const float w = __expf(ls - lmax);
      wsum += w;
      const float4* src = reinterpret_cast<const float4*>(o_partial + (s * rows + row) * D + c);
      const float4 x0 = src[0], x1 = src[1];
      acc[0] += w * x0.x; acc[1] += w * x0.y; acc[2] += w * x0.z; acc[3] += w * x0.w;
      acc[4] += w * x1.x; acc[5] += w * x1.y; acc[6] += w * x1.z; acc[7] += w * x1.w;
    }
    if (sink != kNegInf) wsum += __expf(sink - lmax);
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  uint4 out;
  typename E::Pair* oh = reinterpret_cast<typename E::Pair*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) oh[j] = E::pair_rn(acc[2 * j] * inv, acc[2 * j + 1] * inv);
  *reinterpret_cast<uint4*>(o + (int64_t)b * __ldg(params + P_O_STRIDE) + (int64_t)h * __ldg(params + P_O_STRIDE + 1) +
                            (int64_t)sq * __ldg(params + P_O_STRIDE + 2) + c) = out;
  if (c == 0 && lse != nullptr && __ldg(params + P_WRITE_LSE) != 0) lse[row] = wsum > 0.f ? lmax + logf(wsum) : kNegInf;
}

__device__ __forceinline__ uint4 ld_nc_u128(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Append: D/8 threads per token (one 16-byte chunk of K and one of V each), 128 / (D/8) tokens
// per block; grid = (ceil(max_new / (128 / (D/8))), Hkv, B).
// (Elements of type E, copied as 16-byte chunks.)
template <class E>
__device__ __forceinline__ void kv_append_body(typename E::Storage* __restrict__ k_cache,
                                               typename E::Storage* __restrict__ v_cache,
                                               const typename E::Storage* __restrict__ new_k,
                                               const typename E::Storage* __restrict__ new_v,
                                               const int* __restrict__ lens, const int* __restrict__ block_table,
                                               const int* __restrict__ new_offsets, int B, int D,
                                               int new_sb, int new_sh, int new_sr, int cache_sb, int cache_sh,
                                               int cache_sr, int page_size, int pages_per_seq) {
  const int cpr = D >> 3;  // 16-byte chunks per row
  const int rows_per_block = kCacheThreads / cpr;
  const int t = threadIdx.x;
  if (t >= rows_per_block * cpr) return;
  const int h = blockIdx.y, b = blockIdx.z;
  const int j = blockIdx.x * rows_per_block + t / cpr, c = (t % cpr) * 8;
  const int n = __ldg(lens + B + b);
  if (j >= n) return;
  const int pos = __ldg(lens + b) - n + j;  // lens[b] is the length after this append
  const int64_t src = new_offsets != nullptr
                          ? (int64_t)(__ldg(new_offsets + b) + j) * new_sr + (int64_t)h * new_sh + c
                          : (int64_t)b * new_sb + (int64_t)h * new_sh + (int64_t)j * new_sr + c;
  int64_t dst;
  if (page_size > 0) {
    const int page = __ldg(block_table + (int64_t)b * pages_per_seq + pos / page_size);
    dst = (int64_t)page * cache_sb + (int64_t)h * cache_sh + (int64_t)(pos % page_size) * cache_sr + c;
  } else {
    dst = (int64_t)b * cache_sb + (int64_t)h * cache_sh + (int64_t)pos * cache_sr + c;
  }
  const uint4 kx = ld_nc_u128(new_k + src);
  const uint4 vx = ld_nc_u128(new_v + src);
  *reinterpret_cast<uint4*>(k_cache + dst) = kx;
  *reinterpret_cast<uint4*>(v_cache + dst) = vx;
}

// Merge of partial results over disjoint key sets: o_parts [parts, rows, D] (element type E), lse_parts
// [parts, rows] fp32 (natural log) -> o [rows, D], lse [rows] (may be null).
//   lse = log sum_i exp(lse_i),  O = sum_i exp(lse_i - lse) O_i;  -inf parts weigh 0, a row with
//   every part -inf gets O = 0, lse = -inf.
// D/8 threads per row (one 16-byte chunk each), 128 / (D/8) rows per block.
template <class E>
__device__ __forceinline__ void merge_states_body(const typename E::Storage* __restrict__ o_parts,
                                                  const float* __restrict__ lse_parts,
                                                  typename E::Storage* __restrict__ o, float* __restrict__ lse,
                                                  int parts, int64_t rows, int D) {
  const int cpr = D >> 3;
  const int rows_per_block = kCacheThreads / cpr;
  const int t = threadIdx.x;
  if (t >= rows_per_block * cpr) return;
  const int64_t row = (int64_t)blockIdx.x * rows_per_block + t / cpr;
  if (row >= rows) return;
  const int c = (t % cpr) * 8;
  const float kNegInf = -CUDART_INF_F;
  float lmax = kNegInf;
  for (int i = 0; i < parts; ++i) lmax = fmaxf(lmax, __ldg(lse_parts + (int64_t)i * rows + row));
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.f;
  float wsum = 0.f;
  if (lmax != kNegInf) {
    for (int i = 0; i < parts; ++i) {
      const float l = __ldg(lse_parts + (int64_t)i * rows + row);
      if (l == kNegInf) continue;
      const float w = expf(l - lmax);
      wsum += w;
      const uint4 x = ld_nc_u128(o_parts + ((int64_t)i * rows + row) * D + c);
      const typename E::Pair* xh = reinterpret_cast<const typename E::Pair*>(&x);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = E::to_float2(xh[e]);
        acc[2 * e] = fmaf(w, f.x, acc[2 * e]);
        acc[2 * e + 1] = fmaf(w, f.y, acc[2 * e + 1]);
      }
    }
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  uint4 out;
  typename E::Pair* oh = reinterpret_cast<typename E::Pair*>(&out);
#pragma unroll
  for (int e = 0; e < 4; ++e) oh[e] = E::pair_rn(acc[2 * e] * inv, acc[2 * e + 1] * inv);
  *reinterpret_cast<uint4*>(o + row * D + c) = out;
  if (lse != nullptr && c == 0) lse[row] = wsum > 0.f ? lmax + logf(wsum) : kNegInf;
}

// ---- TornadoVM twins (flash_cache_tornado.cu has their ABI): a leading kernel-context word, every array
// behind a kHdr-byte header, no scalar arguments (TornadoVM compiles scalars in as constants).

// Keys per split derived on the device (params[P_KEYS_PER_SPLIT] = 0): the longest span over the
// sequences with a query this step (lens[b] - cache_span_start(lens[b], lens[B+b], left) with
// lens[B+b] > 0; the others' rows are O = 0, lse = -inf whatever the split), over the grid's
// splits, rounded up to whole tiles of kTile keys.  Every CTA of the launch computes the same
// value; splits * result >= that span, so the splits cover every visible key of every sequence
// with a query.  0 when no such sequence has a key (every split is then empty).  One warp (the
// decode tiles' block): B/32 strided reads each.
template <int kTile>
__device__ __forceinline__ int keys_per_split_from_lens(const int* __restrict__ lens, int B, int splits, int left) {
  int m = 0;
  for (int b = threadIdx.x & 31; b < B; b += 32) {
    const int n = __ldg(lens + B + b);
    if (n > 0) {
      const int L = __ldg(lens + b);
      m = max(m, L - cache_span_start(L, n, left));
    }
  }
  m = __reduce_max_sync(0xffffffffu, m);
  return ceil_div(ceil_div(m, splits), kTile) * kTile;
}

// The functions below that own a static shared-memory array are written once per element type
// E, with E's storage type in their signature (see flash_fwd_kernel.cuh, FLASH_FWD_SMEM_OWNERS).
//
// cache_fwd_tornado_body: varlen prefill over a cache, TornadoVM twin (flash_cache_fwd*_tornado):
// the arrays behind kHdr-byte headers; lens and the packed query offsets both come from one step
// array, the KvCache's [3*slots + 1] words (lengths at word 0, new tokens at B, offsets at 2B;
// B = params[P_B] = slots).  The body is the CUDA-driver entries' own fwd_body instantiation
// (kHdr = 0: its cache prefill takes raw pointers) with every pointer moved past its header here.
// Its own function, templated on kHdr, so that each twin has a shared-memory symbol of its own:
// sharing run_fwd_cache's would move that symbol out of the flash_cache_fwd_* entries and change
// their PTX.
#define FLASH_CACHE_FWD_TORNADO_SMEM_OWNER(E)                                                     \
  template <class Kt, int kCache, int kHdr>                                                       \
  __device__ __forceinline__ void cache_fwd_tornado_body(const E::Storage* q, const E::Storage* k, \
                                                         const E::Storage* v, E::Storage* o, float* lse, \
                                                         const int* params, const int* step,      \
                                                         const int* block_table) {                \
    static_assert(std::is_same<typename Kt::Element, E>::value, "element type of the traits");    \
    static_assert(!Kt::kDynamicSmem && kCache != kNoCache, "cache entries: static shared memory"); \
    __shared__ __align__(128) unsigned char flash_smem[Kt::kSmemBytes];                           \
    const int* pd = at_data<kHdr>(params);                                                        \
    CacheArgs ca;                                                                                 \
    ca.lens = at_data<kHdr>(step);                                                                \
    ca.q_offsets = nullptr; /* lens + 2*B: re-derived where read */                              \
    ca.block_table = at_data<kHdr>(block_table);                                                  \
    fwd_body<Kt, false, 0, kCache>(at_data<kHdr>(q), at_data<kHdr>(k), at_data<kHdr>(v), at_data<kHdr>(o), \
                                   nullptr, at_data<kHdr>(lse), pd, flash_smem, ca);              \
  }
FLASH_FOR_EACH_ELEMENT(FLASH_CACHE_FWD_TORNADO_SMEM_OWNER)
#undef FLASH_CACHE_FWD_TORNADO_SMEM_OWNER

// Words of the append_params block (int32 [A_COUNT]): the Java append kernel's (tornado-kernels'
// CacheKernels declares these name for name; CacheKernelsTest checks it), of which the append +
// decode twins read only A_NEW_STRIDE..+2 (cache_append_split_range) and the staged twins also
// A_STAGE..+2.
enum AppendParam {
  A_B = 0, A_HKV = 1, A_D = 2, A_MAX_NEW = 3,
  A_NEW_STRIDE = 4,    // batch, head, row strides of new_k/new_v (elements), 4..6
  A_CACHE_STRIDE = 7,  // batch (page), head, row strides of the cache, 7..9
  A_PAGE_SIZE = 10, A_PAGES_PER_SEQ = 11,
  A_PACKED = 12,       // 1: rows from new_offsets (packed), 0: dense (new_offsets not read)
  A_STAGE = 13,        // staged twins: where q, new_k, new_v start in the stage array (elements), 13..15
  A_COUNT = 16
};

// ---- Append + decode in one launch (flash_cache_append_decode_fused*_tornado): TornadoVM 5.2.0
// launches a prebuilt task right only as the first and only prebuilt task of its graph, so an
// engine's step (append the new K/V rows, then decode over the cache) must be one kernel.

// The append prologue: this CTA's share of the step's new rows.  CTA (split s = blockIdx.x,
// z = b*Hkv + kvh) writes the new rows of its own sequence b and KV head kvh whose positions lie in
// its split's keys [s0, min(L_b, s0 + kps)), s0 = cache_span_start(L_b, n_b, left) + s*kps (the
// split pass's range), i.e. positions p in [max(s0, L_b - n_b), min(L_b, s0 + kps)); row
// j = p - (L_b - n_b) of new_k/new_v (dense [B, Hkv, maxNew, D], element
// strides append_params[A_NEW_STRIDE..+2]) goes to cache position p.  The cache is addressed exactly
// as the split pass reads it: K with params' P_K_STRIDE words, V with P_V_STRIDE, the page words
// P_PAGE_SIZE / P_PAGES_PER_SEQ (paged: page block_table[b*pages_per_seq + p/page_size], row
// p % page_size).  The row-block CTAs (blockIdx.y) of one split and head write the same bytes to the
// same rows: idempotent.  kThreads/(D/8) rows per pass, one 16-byte chunk of K and of V per thread;
// n_b <= Sq <= 16 rows at most per CTA.  A slot with n_b = 0 (or an empty split) writes nothing.
template <class T, int kThreads, int D, int kCache, int kHdr>
__device__ __forceinline__ void cache_append_split_range(T* k, T* v, const T* new_k, const T* new_v,
                                                         const int* params,
                                                         const int* lens, const int* block_table,
                                                         const int* append_params, int kps) {
  const int* pd = at_data<kHdr>(params);
  const int* ln = at_data<kHdr>(lens);
  const int B = __ldg(pd + P_B), Hkv = __ldg(pd + P_HKV);
  const int b = blockIdx.z / Hkv, kvh = blockIdx.z % Hkv;
  const int n = __ldg(ln + B + b), L = __ldg(ln + b), first = L - n;
  const int s0 = cache_span_start(L, n, __ldg(pd + P_WINDOW_LEFT)) + (int)blockIdx.x * kps;  // as the split pass
  const int lo = max(s0, first), hi = min(L, s0 + kps);
  if (lo >= hi) return;  // uniform over the CTA
  constexpr int kCpr = D / 8, kRowsPerPass = kThreads / kCpr;
  static_assert(kRowsPerPass >= 1, "a row per pass at least");
  if constexpr (kThreads % kCpr != 0) {
    if ((int)threadIdx.x >= kRowsPerPass * kCpr) return;  // D = 96, 192: the last threads idle
  }
  const int* a = at_data<kHdr>(append_params);
  const int c = (threadIdx.x % kCpr) * 8;
  const T* nk = at_data<kHdr>(new_k) + (int64_t)b * __ldg(a + A_NEW_STRIDE) +
                     (int64_t)kvh * __ldg(a + A_NEW_STRIDE + 1) + c;
  const T* nv = at_data<kHdr>(new_v) + ((nk - at_data<kHdr>(new_k)));
  const int new_sr = __ldg(a + A_NEW_STRIDE + 2);
  const int k_sb = __ldg(pd + P_K_STRIDE), k_sh = __ldg(pd + P_K_STRIDE + 1), k_sr = __ldg(pd + P_K_STRIDE + 2);
  const int v_sb = __ldg(pd + P_V_STRIDE), v_sh = __ldg(pd + P_V_STRIDE + 1), v_sr = __ldg(pd + P_V_STRIDE + 2);
  for (int pos = lo + (int)threadIdx.x / kCpr; pos < hi; pos += kRowsPerPass) {
    const int64_t src = (int64_t)(pos - first) * new_sr;
    int64_t kd, vd;
    if constexpr (kCache == kCachePaged) {
      const int ps = __ldg(pd + P_PAGE_SIZE);  // a power of two
      const int page = __ldg(at_data<kHdr>(block_table) + (int64_t)b * __ldg(pd + P_PAGES_PER_SEQ) +
                             (pos >> (__ffs(ps) - 1)));
      const int in_page = pos & (ps - 1);
      kd = (int64_t)page * k_sb + (int64_t)kvh * k_sh + (int64_t)in_page * k_sr + c;
      vd = (int64_t)page * v_sb + (int64_t)kvh * v_sh + (int64_t)in_page * v_sr + c;
    } else {
      kd = (int64_t)b * k_sb + (int64_t)kvh * k_sh + (int64_t)pos * k_sr + c;
      vd = (int64_t)b * v_sb + (int64_t)kvh * v_sh + (int64_t)pos * v_sr + c;
    }
    const uint4 kx = ld_nc_u128(nk + src);
    const uint4 vx = ld_nc_u128(nv + src);
    *reinterpret_cast<uint4*>(at_data<kHdr>(k) + kd) = kx;
    *reinterpret_cast<uint4*>(at_data<kHdr>(v) + vd) = vx;
  }
}

// The split pass for the append + decode twins: run_fwd_cache_split_hdr with a shared-memory
// symbol of its own (sharing that one would move it out of the decode twins' PTX); once per
// element type, as cache_fwd_tornado_body.
#define FLASH_CACHE_APPEND_SPLIT_SMEM_OWNER(E)                                                    \
  template <class Kt, int kCache, int kHdr>                                                       \
  __device__ __forceinline__ void run_cache_append_split(const E::Storage* q, const E::Storage* k, \
                                                         const E::Storage* v, float* o_partial,   \
                                                         float* lse_partial, const int* params,   \
                                                         CacheArgs ca) {                          \
    static_assert(std::is_same<typename Kt::Element, E>::value, "element type of the traits");    \
    static_assert(!Kt::kDynamicSmem && kCache != kNoCache, "cache entries: static shared memory"); \
    __shared__ __align__(128) unsigned char flash_smem[Kt::kSmemBytes];                           \
    fwd_body<Kt, true, kHdr, kCache>(q, k, v, nullptr, o_partial, lse_partial, params, flash_smem, ca); \
  }
FLASH_FOR_EACH_ELEMENT(FLASH_CACHE_APPEND_SPLIT_SMEM_OWNER)
#undef FLASH_CACHE_APPEND_SPLIT_SMEM_OWNER

// Split-KV decode over a cache in one launch: each CTA runs the split pass for its keys; the last
// of the gridDim.x split CTAs of a row block to finish (a ticket per row block) combines that
// block's rows, as decode_fused_body (flash_decode_fused.cuh) does for the plain decode.
// keys_per_split = params[P_KEYS_PER_SPLIT], or, where that word is 0, keys_per_split_from_lens
// (Bc-tile granules); num_splits = gridDim.x.  workspace (fp32): o_partial [splits, B, Hq, Sq, D]
// then lse_partial [splits, B, Hq, Sq].
//
// kAppend (the append + decode twins): the split pass is preceded by cache_append_split_range
// with the same keys per split (new_k, new_v, append_params; k and v are written).  The
// prologue's global stores, then __syncthreads(), then the split pass's K/V copies (cp.async.cg,
// through L2): bar.sync orders every thread's earlier stores before every thread's later reads of
// the CTA (CTA scope, generic proxy, which cp.async's reads are in), and global stores reach L2
// before an L2 read can see them; no fence is needed.  Only this CTA's own rows are read before
// the kernel ends (the other splits' new rows lie outside its keys), so no grid ordering either.
// Without kAppend the new-row arguments are not read (nullptr) and k, v are only read.
template <class Kt, int kCache, int kHdr, bool kAppend>
__device__ __forceinline__ void cache_decode_fused_body(const elem_t<Kt>* q, elem_t<Kt>* k, elem_t<Kt>* v, elem_t<Kt>* o,
                                                        float* lse, const int* params, const int* lens,
                                                        const int* block_table, float* workspace, int* tickets,
                                                        const elem_t<Kt>* new_k, const elem_t<Kt>* new_v,
                                                        const int* append_params) {
  constexpr int D = Kt::kHeadDim;
  const int* pd = at_data<kHdr>(params);
  const int64_t rows = (int64_t)__ldg(pd + P_B) * __ldg(pd + P_HQ) * __ldg(pd + P_SQ);
  // lse_partial as a header pointer: at_data<kHdr> of it is the data after o_partial.
  float* lse_partial = workspace + (int64_t)gridDim.x * rows * D;
  CacheArgs ca;
  ca.lens = at_data<kHdr>(lens);
  ca.block_table = at_data<kHdr>(block_table);
  static_assert(Kt::kNThreads == 32, "keys_per_split_from_lens: one warp per CTA");
  ca.keys_per_split = __ldg(pd + P_KEYS_PER_SPLIT);
  if (ca.keys_per_split == 0)
    ca.keys_per_split = keys_per_split_from_lens<Kt::kBlockN>(ca.lens, __ldg(pd + P_B), gridDim.x,
                                                              Kt::O::kFeatures ? __ldg(pd + P_WINDOW_LEFT) : -1);
  if constexpr (kAppend) {
    cache_append_split_range<elem_t<Kt>, Kt::kNThreads, D, kCache, kHdr>(k, v, new_k, new_v, params, lens, block_table,
                                                             append_params, ca.keys_per_split);
    __syncthreads();  // the new rows of this split before its K/V tile loads
    run_cache_append_split<Kt, kCache, kHdr>(q, k, v, workspace, lse_partial, params, ca);
  } else {
    run_fwd_cache_split_hdr<Kt, kCache, kHdr>(q, k, v, workspace, lse_partial, params, ca);
  }

  int* ticket = last_split_ticket<kHdr>(tickets);
  if (ticket == nullptr) return;  // another split CTA of this row block combines it

  constexpr int kThreadsPerRow = D / 8;
  constexpr int kRowsPerPass = Kt::kNThreads / kThreadsPerRow;
  static_assert(kRowsPerPass >= 1, "combine: a row per pass at least");
  // D = 96, 192: the threads past the last whole row idle.
  constexpr bool kIdle = Kt::kNThreads % kThreadsPerRow != 0;
  Params p = load_params(pd);
  p.num_splits = gridDim.x;
  const int G = p.Hq / p.Hkv;
  const int b = blockIdx.z / p.Hkv, kvh = blockIdx.z % p.Hkv;
  const int n_b = __ldg(at_data<kHdr>(lens) + p.B + b), nvalid = G * n_b;
  const int n_abs = max(p.Sq - n_b, 1);
  // Packed row r of this block as in the split pass: the G*n_b real queries (r = j*n_b + s),
  // then the absent ones (every split wrote O = 0 and kAbsentLseBits for them).
  const int r_end = min((int)(blockIdx.y + 1) * Kt::kBlockM, G * p.Sq);
  const int r_first = kIdle && (int)threadIdx.x >= kRowsPerPass * kThreadsPerRow
                          ? r_end : (int)(blockIdx.y * Kt::kBlockM + threadIdx.x / kThreadsPerRow);
  for (int r = r_first; r < r_end; r += kRowsPerPass) {
    const int h = kvh * G + (r < nvalid ? r / n_b : (r - nvalid) / n_abs);
    const int s = r < nvalid ? r % n_b : n_b + (r - nvalid) % n_abs;
    const int64_t row = ((int64_t)b * p.Hq + h) * p.Sq + s;
    combine_row<typename Kt::Element, D, true>(at_data<kHdr>(workspace), at_data<kHdr>(lse_partial), at_data<kHdr>(o),
                         at_data<kHdr>(lse), p, pd, rows, row, (threadIdx.x % kThreadsPerRow) * 8);
  }
  if (threadIdx.x == 0) *ticket = 0;
}

}  // namespace flash

// ---- Entry macros (the entries: src/generated/flash_cache*.inc, from generate_kernels.py).
// ENTRY: the .entry name; CONFIG: the name FLASH_SELECT and the twins of one configuration share;
// KT: the traits; MODE: flash::kCacheContig or flash::kCachePaged (the manifest's layout); HDR:
// the TornadoVM array header in bytes (16 or 128).

// Split pass over a cache (CUDA driver, ABI item 1).
#define FLASH_CACHE_SPLIT_ENTRY(ENTRY, CONFIG, KT, MODE)                                          \
  FLASH_MANIFEST_ROW("cache-decode-split", CONFIG, ENTRY, 0, KT, flash::manifest::layout_of(MODE)) \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(const flash::elem_t<KT>* __restrict__ q, const flash::elem_t<KT>* __restrict__ k,        \
        const flash::elem_t<KT>* __restrict__ v, float* __restrict__ o_partial,                  \
        float* __restrict__ lse_partial, const int* __restrict__ params,                         \
        const int* __restrict__ lens, const int* __restrict__ block_table, int keys_per_split) { \
    flash::CacheArgs ca;                                                                          \
    ca.lens = lens;                                                                               \
    ca.block_table = block_table;                                                                 \
    ca.keys_per_split = keys_per_split;                                                           \
    flash::run_fwd_cache<KT, true, MODE>(q, k, v, nullptr, o_partial, lse_partial, params, ca);  \
  }

// The combine of the split pass over a cache (CUDA driver, ABI item 2); serves both layouts.
// E: the element type of o; D: the head dim.
#define FLASH_CACHE_COMBINE_ENTRY(ENTRY, CONFIG, E, D)                                            \
  FLASH_MANIFEST_PLAIN("cache-decode-combine", CONFIG, ENTRY, 0, E, "any", flash::manifest::kScoreFeatures, D, \
                       flash::kCombineRows<D>, flash::kCombineThreads)                           \
  extern "C" __global__ void __launch_bounds__(flash::kCombineThreads)                           \
  ENTRY(const float* __restrict__ o_partial, const float* __restrict__ lse_partial,              \
        E::Storage* __restrict__ o, float* __restrict__ lse, const int* __restrict__ params,      \
        int num_splits) {                                                                         \
    flash::cache_combine_body<E, D>(o_partial, lse_partial, o, lse, params, num_splits);            \
  }

// Varlen prefill over a cache (CUDA driver, ABI item 3).
#define FLASH_CACHE_FWD_ENTRY(ENTRY, CONFIG, KT, MODE)                                            \
  FLASH_MANIFEST_ROW("cache-prefill", CONFIG, ENTRY, 0, KT, flash::manifest::layout_of(MODE))    \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(const flash::elem_t<KT>* __restrict__ q, const flash::elem_t<KT>* __restrict__ k,        \
        const flash::elem_t<KT>* __restrict__ v, flash::elem_t<KT>* __restrict__ o,              \
        float* __restrict__ lse, const int* __restrict__ params, const int* __restrict__ q_offsets, \
        const int* __restrict__ lens, const int* __restrict__ block_table) {                     \
    flash::CacheArgs ca;                                                                          \
    ca.lens = lens;                                                                               \
    ca.block_table = block_table;                                                                 \
    ca.q_offsets = q_offsets;                                                                     \
    flash::run_fwd_cache<KT, false, MODE>(q, k, v, o, nullptr, lse, params, ca);                 \
  }

// The append of new tokens (CUDA driver, ABI item 4); any head dim, both layouts.
#define FLASH_KV_APPEND_ENTRY(ENTRY, CONFIG, E)                                                   \
  FLASH_MANIFEST_PLAIN("cache-append", CONFIG, ENTRY, 0, E, "any", "-", 0, 0, flash::kCacheThreads) \
  extern "C" __global__ void __launch_bounds__(flash::kCacheThreads)                             \
  ENTRY(E::Storage* __restrict__ k_cache, E::Storage* __restrict__ v_cache,                      \
        const E::Storage* __restrict__ new_k, const E::Storage* __restrict__ new_v,              \
        const int* __restrict__ lens, const int* __restrict__ block_table,                       \
        const int* __restrict__ new_offsets, int B, int Hkv, int D, int max_new, int new_sb,     \
        int new_sh, int new_sr, int cache_sb, int cache_sh, int cache_sr, int page_size,         \
        int pages_per_seq) {                                                                      \
    flash::kv_append_body<E>(k_cache, v_cache, new_k, new_v, lens, block_table, new_offsets, B, D, new_sb, new_sh, \
                          new_sr, cache_sb, cache_sh, cache_sr, page_size, pages_per_seq);       \
  }

// The merge of partial results (CUDA driver, ABI item 5); any head dim.
#define FLASH_MERGE_STATES_ENTRY(ENTRY, CONFIG, E)                                                \
  FLASH_MANIFEST_PLAIN("merge-states", CONFIG, ENTRY, 0, E, "none", "-", 0, 0, flash::kCacheThreads) \
  extern "C" __global__ void __launch_bounds__(flash::kCacheThreads)                             \
  ENTRY(const E::Storage* __restrict__ o_parts, const float* __restrict__ lse_parts,             \
        E::Storage* __restrict__ o, float* __restrict__ lse, int parts, int64_t rows, int D) {   \
    flash::merge_states_body<E>(o_parts, lse_parts, o, lse, parts, rows, D);                        \
  }

// TornadoVM twin of the cache decode: split + combine in one launch (ABI item 6).  No CUDA-driver
// twin: that host launches the two passes.
#define FLASH_CACHE_FUSED_ENTRY(ENTRY, CONFIG, KT, MODE, HDR)                                     \
  FLASH_MANIFEST_ROW("cache-decode-fused", CONFIG, ENTRY, HDR, KT, flash::manifest::layout_of(MODE)) \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(uint64_t kernel_context, const flash::elem_t<KT>* __restrict__ q,                        \
        const flash::elem_t<KT>* __restrict__ k, const flash::elem_t<KT>* __restrict__ v,        \
        flash::elem_t<KT>* __restrict__ o, float* __restrict__ lse, const int* __restrict__ params, \
        const int* __restrict__ lens, const int* __restrict__ block_table,                       \
        float* __restrict__ workspace, int* __restrict__ tickets) {                              \
    /* kAppend = false: k and v are only read */                                                \
    flash::cache_decode_fused_body<KT, MODE, HDR, false>(                                         \
        q, const_cast<flash::elem_t<KT>*>(k), const_cast<flash::elem_t<KT>*>(v), o, lse, params, lens, \
        block_table, workspace, tickets, nullptr, nullptr, nullptr);                             \
  }

// TornadoVM twin of the varlen prefill over a cache, lens and q_offsets from one step array (ABI
// item 7).
#define FLASH_CACHE_FWD_TORNADO_ENTRY(ENTRY, CONFIG, KT, MODE, HDR)                               \
  FLASH_MANIFEST_ROW("cache-prefill", CONFIG, ENTRY, HDR, KT, flash::manifest::layout_of(MODE))  \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(uint64_t kernel_context, const flash::elem_t<KT>* __restrict__ q,                        \
        const flash::elem_t<KT>* __restrict__ k, const flash::elem_t<KT>* __restrict__ v,        \
        flash::elem_t<KT>* __restrict__ o, float* __restrict__ lse, const int* __restrict__ params, \
        const int* __restrict__ step, const int* __restrict__ block_table) {                     \
    flash::cache_fwd_tornado_body<KT, MODE, HDR>(q, k, v, o, lse, params, step, block_table);    \
  }

// TornadoVM twin of the append + cache decode (ABI item 8): the fused decode's arguments, then
// new_k, new_v (dense) and append_params; k and v are written (the step's new rows) and read.
#define FLASH_CACHE_APPEND_FUSED_ENTRY(ENTRY, CONFIG, KT, MODE, HDR)                              \
  FLASH_MANIFEST_ROW("cache-append-decode-fused", CONFIG, ENTRY, HDR, KT, flash::manifest::layout_of(MODE)) \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(uint64_t kernel_context, const flash::elem_t<KT>* __restrict__ q,                        \
        flash::elem_t<KT>* __restrict__ k, flash::elem_t<KT>* __restrict__ v,                    \
        flash::elem_t<KT>* __restrict__ o, float* __restrict__ lse, const int* __restrict__ params, \
        const int* __restrict__ lens, const int* __restrict__ block_table,                       \
        float* __restrict__ workspace, int* __restrict__ tickets,                                \
        const flash::elem_t<KT>* __restrict__ new_k, const flash::elem_t<KT>* __restrict__ new_v, \
        const int* __restrict__ append_params) {                                                  \
    flash::cache_decode_fused_body<KT, MODE, HDR, true>(q, k, v, o, lse, params, lens, block_table, workspace, \
                                                        tickets, new_k, new_v, append_params);   \
  }

// TornadoVM twin of the append + decode with the step's four inputs in ONE array (ABI item 9), so
// that a TornadoVM execution sends one array instead of four (each transfer costs a TornadoVM
// execution several microseconds): stage = the step array (int32 [3*B + 1]) at its start, then q,
// new_k, new_v at the element offsets append_params[A_STAGE..+2].  Each pointer handed to the
// body is a header pointer moved by its offset, so at_data<HDR> of it is the data it names; the
// regions do not overlap.
#define FLASH_CACHE_STAGED_FUSED_ENTRY(ENTRY, CONFIG, KT, MODE, HDR)                              \
  FLASH_MANIFEST_ROW("cache-staged-decode-fused", CONFIG, ENTRY, HDR, KT, flash::manifest::layout_of(MODE)) \
  extern "C" __global__ void __launch_bounds__(KT::kNThreads, KT::kMinBlocksPerSm)               \
  ENTRY(uint64_t kernel_context, const flash::elem_t<KT>* __restrict__ stage,                    \
        flash::elem_t<KT>* __restrict__ k, flash::elem_t<KT>* __restrict__ v,                    \
        flash::elem_t<KT>* __restrict__ o, float* __restrict__ lse, const int* __restrict__ params, \
        const int* __restrict__ block_table, float* __restrict__ workspace,                      \
        int* __restrict__ tickets, const int* __restrict__ append_params) {                      \
    const int* a = flash::at_data<HDR>(append_params) + flash::A_STAGE;                          \
    flash::cache_decode_fused_body<KT, MODE, HDR, true>(                                          \
        stage + __ldg(a), k, v, o, lse, params, reinterpret_cast<const int*>(stage), block_table, \
        workspace, tickets, stage + __ldg(a + 1), stage + __ldg(a + 2), append_params);          \
  }
