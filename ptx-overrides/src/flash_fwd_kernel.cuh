// FlashAttention-2 forward: one kernel body for prefill and for the split-KV (flash-decoding)
// pass.  Tile sizes and the shared-memory layout come from the traits (kernel_traits.cuh).
//
// Per CTA: one tile of Br query rows of one (batch, head) [prefill], or 16 packed rows
// (query heads of one KV head x Sq) and one slice of the keys [decode split].  Q is copied
// once and kept in registers as mma A fragments (or, kQInRegs = false, re-read from shared
// memory per tile); K/V tiles of Bc keys stream through a ring of kStages shared-memory
// stages with cp.async (kStages = 1: one K and one V buffer loaded apart, kSplitKV);
// S = Q K^T and O += P V run on mma.sync m16n8k16; the softmax is online, in registers, with
// exp2 and a pre-multiplied scale*log2(e).
#pragma once
#include <math_constants.h>
#include <type_traits>
#include "element_type.cuh"
#include "flash_params.cuh"
#include "kernel_traits.cuh"
#include "ptx_primitives.cuh"

namespace flash {

__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

template <class Kt>
struct TileLayout {
  // The xor term of row `row` (kernel_traits.cuh says why it is conflict-free): row % 8 where
  // rows are whole groups of 8 chunks, (row / 2) % 4 where they end in a group of 4.  It
  // depends on row % 8 only.
  static __device__ __forceinline__ int swz(int row) { return Kt::kSwizzle8 ? (row & 7) : ((row >> 1) & 3); }
  // Byte offset of 16-byte chunk `chunk` of row `row` in a [rows][kHeadDim] tile.
  static __device__ __forceinline__ uint32_t chunk_off(int row, int chunk) {
    const int c = Kt::O::kSwizzle ? (chunk ^ swz(row)) : chunk;
    return row * Kt::kRowBytes + c * 16;
  }
  // Byte offset of element (row, col): used by the scalar-load ablation.
  static __device__ __forceinline__ uint32_t elem_off(int row, int col) {
    return chunk_off(row, col >> 3) + (col & 7) * 2;
  }
};

// kDecode = false: prefill.  grid = (ceil(Sq/Br), B*Hq); blockIdx.x = ceil(Sq/Br)-1-m_block
//   (the longest causal tiles start first), blockIdx.y = b*Hq + h.  Writes o (the element type) and lse.
// kDecode = true: split pass.  grid = (num_splits, ceil(G*Sq/16), B*Hkv), G = Hq/Hkv; packed
//   row r = j*Sq + s is query s of head kvh*G + j.  Writes o_partial (fp32, normalised) and
//   lse_partial (always).
// kCache != kNoCache: the same two passes over a KV cache (flash_cache.cu has the ABI).  Sequence
//   b attends to its own lens[b] keys (paged: through its block-table row) with its own n_b new
//   queries, bottom-right causal per sequence.  Prefill: q/o packed [totalQ, Hq, D], rows from
//   q_offsets[b]; CTAs past n_b exit.  Decode: keys_per_split keys per split; the packed rows
//   are r = j*n_b + s for the n_b real queries, then the Sq - n_b absent ones (O = 0, lse = -inf).
//   Every cache-only line sits under `if constexpr`, so the other entries compile as before.
template <class Kt, bool kDecode, int kHdr, int kCache = kNoCache>
__device__ __forceinline__ void fwd_body(const elem_t<Kt>* __restrict__ q, const elem_t<Kt>* __restrict__ k,
                                         const elem_t<Kt>* __restrict__ v, elem_t<Kt>* __restrict__ o,
                                         float* __restrict__ o_partial, float* __restrict__ lse,
                                         const int* __restrict__ params, unsigned char* smem,
                                         CacheArgs ca = CacheArgs{}) {
  // Cache entries: CUDA-driver ABI, but for the fused decode's TornadoVM twins (split pass with a
  // header; ca.lens / ca.block_table then come with the header already applied).
  static_assert(kCache == kNoCache || kHdr == 0 || kDecode, "cache prefill entries are CUDA-driver entries");
  constexpr bool kC = kCache != kNoCache;
  using T = elem_t<Kt>;            // storage type of q, k, v, o
  using E = typename Kt::Element;  // its conversions and mma (element_type.cuh)
  using Opt = typename Kt::O;
  // The score features' words (window sides, softcap, sinks) in the entries that serve them; the
  // plain entries (Opt::kFeatures false) see "none" as constants and compile the features out.
  auto window_word = [&](auto word) -> int {
    if constexpr (Opt::kFeatures) return reload_param<decltype(word)::value, kHdr>(params);
    else return -1;
  };
  auto softcap_bits = [&]() -> int {
    if constexpr (Opt::kFeatures) return reload_param<P_SOFTCAP, kHdr>(params);
    else return 0;
  };
  // The softcap's scale / c: tanh's argument per unit of q.k; 0 = no softcap (also where scale / c underflows, as
  // c * tanh(s / c) is then s to fp32 precision).  Every softcap decision below is cap_in != 0.
  auto softcap_in = [&]() -> float {
    if constexpr (Opt::kFeatures) {
      const int c = softcap_bits();
      return c != 0 ? __int_as_float(reload_param<P_SCALE, kHdr>(params)) / __int_as_float(c) : 0.f;
    } else {
      return 0.f;
    }
  };
  // Sinks are the softmax's starting state (see m_i), nothing in the loop: every entry serves them (the manifest
  // lists sinks for the plain entries too).
  auto sink_of = [&](int h) -> float {
    if constexpr (Opt::kSinks) return sink_logit<kHdr>(params, h);
    else return -__int_as_float(0x7f800000);
  };
  using WinLeft = std::integral_constant<int, P_WINDOW_LEFT>;
  using WinRight = std::integral_constant<int, P_WINDOW_RIGHT>;
  using L = TileLayout<Kt>;
  constexpr int D = Kt::kHeadDim;
  constexpr int BM = Kt::kBlockM;
  constexpr int BN = Kt::kBlockN;
  constexpr int RG = Kt::kRowGroups;
  constexpr int ST = Kt::kStages;
  constexpr int DT = D / 8;    // n-tiles of O
  constexpr int KS = D / 16;   // k-steps of Q K^T
  constexpr int NH = (Opt::kLean & kLeanHalves) ? 2 : 1;  // key chunks per tile
  constexpr int CN = BN / NH;     // keys per chunk
  constexpr int NTC = CN / 8;     // n-tiles of S per chunk
  constexpr int PKC = CN / 16;    // k-steps of P V per chunk
  // kLeanKsLoop(2): the k-step loop of S = Q K^T unrolled by 4 (2) only.
  constexpr int KSU = (Opt::kLean & kLeanKsLoop2) ? 2 : (Opt::kLean & kLeanKsLoop) ? 4 : KS;
  static_assert(NH == 1 || (CN % 16 == 0 && !Kt::kSplitKV), "chunks of whole 16-key pairs, ring pipeline only");
  static_assert(KSU == KS || !Kt::kQInRegs, "a rolled k-step loop would index the Q registers dynamically");
  constexpr int RB = Kt::kRowBytes;
  constexpr int CH = Kt::kChunks;
  const float kNegInf = -CUDART_INF_F;

  const Params p = load_params(at_data<kHdr>(params));
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;  // fragment row (and row + 8)
  const int t4 = lane & 3;  // fragment column pair
  const int G = p.Hq / p.Hkv;

  int b, kvh, h_fixed = 0, m_block, split = 0, nrows;
  if (kDecode) {
    split = blockIdx.x;
    m_block = blockIdx.y;
    b = blockIdx.z / p.Hkv;
    kvh = blockIdx.z % p.Hkv;
    nrows = G * p.Sq;
  } else {
    m_block = gridDim.x - 1 - blockIdx.x;
    b = blockIdx.y / p.Hq;
    h_fixed = blockIdx.y % p.Hq;
    kvh = h_fixed / G;
    nrows = p.Sq;
  }
  // The packed query offsets of a cache prefill: a step array's carry them after its lengths (the
  // TornadoVM twins), re-derived at each use rather than held as a pointer across the loop.
  auto q_offsets = [&]() { return ca.q_offsets != nullptr ? ca.q_offsets : ca.lens + 2 * reload_param<P_B, kHdr>(params); };
  // Cache: keys kv_len = L_b, new queries n_new = n_b, first packed query row q_row (prefill);
  // nvalid = rows holding a real query (the rest of the nrows output rows get O = 0, lse = -inf).
  int kv_len = p.Skv, n_new = p.Sq, q_row = 0, nvalid = nrows;
  if constexpr (kC) {
    kv_len = __ldg(ca.lens + b);
    if (kDecode) {
      n_new = __ldg(ca.lens + p.B + b);
      nvalid = G * n_new;
    } else {
      q_row = __ldg(q_offsets() + b);
      n_new = __ldg(q_offsets() + b + 1) - q_row;
      nrows = nvalid = n_new;
    }
  }
  const int row0 = m_block * BM;
  if constexpr (kC && !kDecode) {
    if (row0 >= n_new) return;  // past this prompt's queries: nothing to write
  }
  auto row_head = [&](int r) {
    if constexpr (kC && kDecode) return kvh * G + (r < nvalid ? r / n_new : (r - nvalid) / max(p.Sq - n_new, 1));
    else return kDecode ? kvh * G + r / p.Sq : h_fixed;
  };
  auto row_query = [&](int r) {
    if constexpr (kC && kDecode) return r < nvalid ? r % n_new : n_new + (r - nvalid) % max(p.Sq - n_new, 1);
    else return kDecode ? r % p.Sq : r;
  };

  // Visible keys: query index i (at position i + off, off = Skv - Sq; cache: L_b - n_b) sees keys
  // [i + lo_off, i + diag] within [0, Skv): diag = off + delta, delta = 0 (causal), right (a right
  // window side) or 2^30 (neither); lo_off = off - left, or -2^30 without a left side.  The tiles
  // that need them re-read the words (bounds_now) instead of holding them across the tile loop,
  // which keeps the 168- and 255-register tiles spill-free.
  auto delta_of = [](bool causal, int right) { return causal ? 0 : right >= 0 ? min(right, 1 << 30) : (1 << 30); };
  auto lo_of = [](int off, int left) { return left >= 0 ? off - min(left, 1 << 30) : -(1 << 30); };
  int2 bounds;  // (diag, lo_off)
  {
    const int off = kC ? kv_len - n_new : p.Skv - p.Sq;
    bounds = make_int2(off + delta_of(p.causal, window_word(WinRight{})), lo_of(off, window_word(WinLeft{})));
  }
  const int diag0 = bounds.x, lo_off = bounds.y;
  // Keys this CTA visits: [kbeg, kend).  Decode: split `split` of the span [span0, Skv) from the
  // first visible key of query 0 (rounded down to whole tiles) to the end (the last query's last
  // key is always Skv - 1).  Prefill: from the first row's first visible key to the last row's
  // last; tiles wholly outside are never loaded.
  int kbeg = 0, kend = kC ? kv_len : p.Skv;
  if (kDecode) {
    if constexpr (kC) {
      kbeg = (max(0, lo_off) & ~63) + split * ca.keys_per_split;  // cache_span_start(L_b, n_b, left)
      kend = row0 < nvalid ? min(kv_len, kbeg + ca.keys_per_split) : kbeg;  // no real query: empty
    } else {
      const int span0 = max(0, lo_off) / BN * BN;
      const int per_split = ceil_div(ceil_div(p.Skv - span0, p.num_splits), BN) * BN;  // tile-aligned slices
      kbeg = span0 + split * per_split;
      kend = min(p.Skv, kbeg + per_split);
    }
  } else if (Opt::kCausalSkip) {
    kbeg = max(0, row0 + lo_off);
    kend = min(kend, min(row0 + BM, nrows) - 1 + diag0 + 1);
  }

  const int warp_row0 = warp * RG * 16;  // first block-local row of this warp

  if (kend <= kbeg) {
    // No row of this CTA sees a key: O = 0, lse = -inf (prefill: the head's sink).
    if (kDecode) {
      for (int i = tid; i < BM * (D / 4); i += Kt::kNThreads) {
        const int r = row0 + i / (D / 4), c = (i % (D / 4)) * 4;
        if (r < nrows) {
          const int64_t row_lin = ((int64_t)split * p.B + b) * p.Hq * p.Sq + (int64_t)row_head(r) * p.Sq + row_query(r);
          *reinterpret_cast<float4*>(at_data<kHdr>(o_partial) + row_lin * D + c) = make_float4(0.f, 0.f, 0.f, 0.f);
          if (c == 0) at_data<kHdr>(lse)[row_lin] = kC && r >= nvalid ? __int_as_float(kAbsentLseBits) : kNegInf;
        }
      }
    } else if constexpr (kC) {
      for (int i = tid; i < BM * CH; i += Kt::kNThreads) {
        const int r = row0 + i / CH, c = i % CH;
        if (r < nrows) {
          *reinterpret_cast<uint4*>(o + (int64_t)(q_row + r) * p.o_sr + (int64_t)h_fixed * p.o_sh + c * 8) = make_uint4(0, 0, 0, 0);
          if (c == 0 && p.write_lse && lse != nullptr) lse[(int64_t)h_fixed * p.Sq + q_row + r] = sink_of(h_fixed);
        }
      }
    } else {
      for (int i = tid; i < BM * CH; i += Kt::kNThreads) {
        const int r = row0 + i / CH, c = i % CH;
        if (r < nrows) {
          *reinterpret_cast<uint4*>(at_data<kHdr>(o) + (int64_t)b * p.o_sb + (int64_t)h_fixed * p.o_sh + (int64_t)r * p.o_sr + c * 8) = make_uint4(0, 0, 0, 0);
          if (c == 0 && p.write_lse) at_data<kHdr>(lse)[((int64_t)b * p.Hq + h_fixed) * p.Sq + r] = sink_of(h_fixed);
        }
      }
    }
    return;
  }

  const int n_min = kbeg / BN;
  const int n_max = ceil_div(kend, BN);
  const int n_tiles = n_max - n_min;

  const T* kbase;
  const T* vbase;
  if constexpr (kCache == kCachePaged) {
    // The page term comes per key from the block table (pool [pages, Hkv, page_size, D]).
    kbase = at_data<kHdr>(k);
    vbase = at_data<kHdr>(v);
  } else {
    kbase = at_data<kHdr>(k) + (int64_t)b * p.k_sb + (int64_t)kvh * p.k_sh;
    vbase = at_data<kHdr>(v) + (int64_t)b * p.v_sb + (int64_t)kvh * p.v_sh;
  }
  const int k_sr = p.k_sr, v_sr = p.v_sr, Skv = kC ? kv_len : p.Skv;
  // Paged: 32-bit offsets of this sequence's block-table row and of the KV head inside a page
  // (both < 2^31 by the stride rules) and log2(page size); the base pointers stay kernel
  // parameters and the page strides are re-read per tile in load_kv.  Registers are what the
  // 168- and 255-register configurations are short of.
  int bt_off = 0, kh_off = 0, vh_off = 0, pg_shift = 0;
  if constexpr (kCache == kCachePaged) {
    bt_off = b * reload_param<P_PAGES_PER_SEQ, kHdr>(params);
    kh_off = kvh * p.k_sh;
    vh_off = kvh * p.v_sh;
    pg_shift = __ffs(reload_param<P_PAGE_SIZE, kHdr>(params)) - 1;
  }

  const uint32_t sbase = smem_addr(smem);
  const uint32_t sQ = sbase + Kt::kQOffset;

  auto load_q = [&]() {
#pragma unroll
    for (int it = 0; it < BM * CH / Kt::kNThreads; ++it) {
      const int i = tid + it * Kt::kNThreads;
      const int r = i / CH, c = i % CH;
      const int gr = row0 + r;
      const bool valid = gr < nvalid;  // nrows, but for the absent queries of a cache decode
      const T* src = at_data<kHdr>(q);
      if constexpr (kC && !kDecode) {
        if (valid) src = src + (int64_t)(q_row + gr) * p.q_sr + (int64_t)h_fixed * p.q_sh + c * 8;
      } else {
        if (valid) src = src + (int64_t)b * p.q_sb + (int64_t)row_head(gr) * p.q_sh + (int64_t)row_query(gr) * p.q_sr + c * 8;
      }
      cp_async_16(sQ + L::chunk_off(r, c), src, valid);
    }
  };
  // Tiles are visited from the last one down, so the only tiles that need a mask (the ragged
  // end of Skv and the causal diagonal) come first and the rest run mask-free.
  // with_k / with_v are constants at every call: the split K/V pipeline loads them apart.
  // One copy pass (Kt::kCopyPasses of them per tile): this thread's rows r0 + i*kRowsPerPass,
  // chunk c.  Pointers advance by a fixed stride so that no per-chunk 64-bit address has to live
  // across the tile loop.
  auto load_kv_pass = [&](int n, int stage, bool with_k, bool with_v, int r0, int c) {
    constexpr int kRowsPerPass = Kt::kCopyRows;
    const uint32_t sK = sbase + stage * Kt::kStageBytes;
    const uint32_t sV = sK + Kt::kTileBytes;
    const int key0 = n * BN + r0;
    if constexpr (kCache == kCachePaged) {
      // Key j lives in page block_table[bt_off + (j >> pg_shift)], row j & (page_size - 1).  One
      // block-table read (an L1 hit after the first) serves a row's K and V copies.
      const int pg_mask = (1 << pg_shift) - 1;
      const int k_pg = with_k ? reload_param<P_K_STRIDE, kHdr>(params) : 0;
      const int v_pg = with_v ? reload_param<P_V_STRIDE, kHdr>(params) : 0;
      // A thread's rows are kRowsPerPass keys apart.  Groups of kGroup of them start at a
      // multiple of kGroup*kRowsPerPass (+ r0 < kRowsPerPass) because Bc is one, so with pages of
      // at least kGroup*kRowsPerPass keys a group lies in one page: one block-table read and one
      // address per group, the rest by pointer increments as in a contiguous cache.  kGroup is
      // the largest power of two dividing the thread's rows per tile, capped so that 16-key
      // pages qualify.
      constexpr int NR = BN / kRowsPerPass;
      constexpr int kGroupCap = kRowsPerPass >= 16 ? 1 : 16 / kRowsPerPass;
      constexpr int kGroup = (NR & -NR) < kGroupCap ? (NR & -NR) : kGroupCap;
      if (kGroup > 1 && pg_mask + 1 >= kGroup * kRowsPerPass) {
#pragma unroll
        for (int gi = 0; gi < NR / kGroup; ++gi) {
          const int key = key0 + gi * kGroup * kRowsPerPass;
          int page = 0;
          if (key < Skv) page = __ldg(ca.block_table + bt_off + (key >> pg_shift));
          const int in_page = key & pg_mask;
          const T* kp = at_data<kHdr>(k) + ((int64_t)page * k_pg + (kh_off + in_page * k_sr + c * 8));
          const T* vp = at_data<kHdr>(v) + ((int64_t)page * v_pg + (vh_off + in_page * v_sr + c * 8));
#pragma unroll
          for (int j = 0; j < kGroup; ++j) {
            const int r = r0 + (gi * kGroup + j) * kRowsPerPass;
            const bool valid = key + j * kRowsPerPass < Skv;
            if (with_k) cp_async_16(sK + L::chunk_off(r, c), kp, valid);
            if (with_v) cp_async_16(sV + L::chunk_off(r, c), vp, valid);
            if (with_k) kp += kRowsPerPass * k_sr;
            if (with_v) vp += kRowsPerPass * v_sr;
          }
        }
        return;
      }
#pragma unroll
      for (int it = 0; it < BN / kRowsPerPass; ++it) {
        const int r = r0 + it * kRowsPerPass;
        const int key = key0 + it * kRowsPerPass;
        const bool valid = key < Skv;
        int page = 0;
        if (valid) page = __ldg(ca.block_table + bt_off + (key >> pg_shift));
        const int in_page = key & pg_mask;
        if (with_k) cp_async_16(sK + L::chunk_off(r, c), at_data<kHdr>(k) + ((int64_t)page * k_pg + (kh_off + in_page * k_sr + c * 8)), valid);
        if (with_v) cp_async_16(sV + L::chunk_off(r, c), at_data<kHdr>(v) + ((int64_t)page * v_pg + (vh_off + in_page * v_sr + c * 8)), valid);
      }
      return;
    }
    const T* kp = kbase + (int64_t)key0 * k_sr + c * 8;
    const T* vp = vbase + (int64_t)key0 * v_sr + c * 8;
#pragma unroll
    for (int it = 0; it < BN / kRowsPerPass; ++it) {
      const int r = r0 + it * kRowsPerPass;
      const bool valid = key0 + it * kRowsPerPass < Skv;
      if (with_k) cp_async_16(sK + L::chunk_off(r, c), valid ? kp : kbase, valid);
      if (with_v) cp_async_16(sV + L::chunk_off(r, c), valid ? vp : vbase, valid);
      if (with_k) kp += (int64_t)kRowsPerPass * k_sr;
      if (with_v) vp += (int64_t)kRowsPerPass * v_sr;
    }
  };
  // Thread -> (row, chunk) of each pass (kernel_traits.cuh, kCopyPasses): consecutive threads copy
  // consecutive 16-byte chunks of a row (coalesced).
  auto load_kv = [&](int n, int stage, bool with_k = true, bool with_v = true) {
#pragma unroll
    for (int pass = 0; pass < Kt::kCopyPasses; ++pass) {
      const int i = tid + pass * Kt::kNThreads;
      load_kv_pass(n, stage, with_k, with_v, i / CH, i % CH);
    }
  };

  // ldmatrix x4 lane roles: lane supplies row (lane % 8) of matrix (lane / 8).
  const int lm = lane >> 3, lr = lane & 7;
  // A operand (Q, P) and V^T: matrices (rows 0-7 | 8-15) x (chunk 0 | 1).
  const int a_row = lr + (lm & 1) * 8;
  const int a_x = Opt::kSwizzle ? ((lm >> 1) ^ L::swz(lr)) : (lm >> 1);
  // K as the B operand of Q K^T: matrices (keys 0-7: chunk 0 | 1), (keys 8-15: chunk 0 | 1).
  // (kLeanKRoles: K is read with the A-operand lane roles instead, matrices (keys 0-7 | 8-15)
  // x (chunk 0 | 1), and the fragment registers are permuted: Q, K and V then share one set
  // of lane offsets.)
  const int k_row = (Opt::kLean & kLeanKRoles) ? a_row : lr + (lm >> 1) * 8;
  const int k_x = (Opt::kLean & kLeanKRoles) ? a_x : Opt::kSwizzle ? ((lm & 1) ^ L::swz(lr)) : (lm & 1);
  // Rows are multiples of 8 apart from a_row / k_row, so row & 7 == lr throughout (and the xor
  // term is swz(lr)), and because the chunk pair starts at an even chunk, (2s + x0) ^ w ==
  // 2s ^ (x0 ^ w).
  // Byte offset of chunk pair s (chunks 2s, 2s+1) for a lane with swizzle term x < 8.  The
  // xor only touches chunk bits 0..2 (0..1 for x < 4), so pairs 4 apart differ by the constant
  // 128 bytes: with
  // that spelled out, four lane offsets serve all D/16 pairs and the rest folds into the
  // ldmatrix immediate, which the Q-in-shared-memory configurations need to fit 255
  // registers.  The Q-in-registers ones keep the plain form their budgets were tuned with
  // (the folded one spills 4 bytes in the 168-register D=128 entry on sm_90).
  auto pair_off = [](int s, int x) -> uint32_t {
    if constexpr (Kt::kQInRegs) return ((2 * s) ^ x) << 4;
    else return (((2 * (s & 3)) ^ x) << 4) + (s >> 2) * 128;
  };

  // (diag, lo_off) again, from the words rather than registers (cache prefill: diag stays live, it
  // has n_b in it, which would take more registers to re-derive).
  auto bounds_now = [&]() {
    if constexpr (kC && !kDecode) {
      const bool causal = reload_param<P_CAUSAL, kHdr>(params) != 0;
      const int right = window_word(WinRight{});
      return make_int2(diag0, lo_of(diag0 - delta_of(causal, right), window_word(WinLeft{})));
    } else {
      const int off = Skv - (kC ? n_new : kDecode ? p.Sq : reload_param<P_SQ, kHdr>(params));
      return make_int2(off + delta_of(reload_param<P_CAUSAL, kHdr>(params) != 0, window_word(WinRight{})),
                       lo_of(off, window_word(WinLeft{})));
    }
  };
  // Visible keys of an owned row: row_first(rg, hh) <= j <= row_limit(rg, hh).  Recomputed in
  // the (few) masked tiles instead of being kept in registers.
  auto row_limit = [&](int rg, int hh, int diag) {
    const int r = row0 + warp_row0 + rg * 16 + g + 8 * hh;
    return min(Skv - 1, row_query(r) + diag);
  };
  auto row_first = [&](int rg, int hh, int lo_off) {
    const int r = row0 + warp_row0 + rg * 16 + g + 8 * hh;
    return row_query(r) + lo_off;
  };
  // A tile takes the mask step iff its last key may be invisible to the CTA's first row
  // (block_lim), or, with a window's left side, its first key to one of the warp's rows (a vote).

  // ---- prologue: Q and tile 0 in flight together (the split pipeline: K only, V follows in
  // the loop); Q to registers; then the rest of the ring.
  load_q();
  cp_async_commit();
  load_kv(n_max - 1, 0, true, !Kt::kSplitKV);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  // A fragment of Q for row group rg, k-step ks.
  auto load_q_frag = [&](uint32_t (&f)[4], int rg, int ks) {
    const int rbase = warp_row0 + rg * 16;
    if (Opt::kLdmatrix) {
      ldmatrix_x4(f, sQ + (rbase + a_row) * RB + pair_off(ks, a_x));
    } else {
      f[0] = lds_u32(sQ + L::elem_off(rbase + g, ks * 16 + 2 * t4));
      f[1] = lds_u32(sQ + L::elem_off(rbase + g + 8, ks * 16 + 2 * t4));
      f[2] = lds_u32(sQ + L::elem_off(rbase + g, ks * 16 + 8 + 2 * t4));
      f[3] = lds_u32(sQ + L::elem_off(rbase + g + 8, ks * 16 + 8 + 2 * t4));
    }
  };
  // B fragment of K (buffer sK) for key n-tiles 2np, 2np+1, k-step ks.
  auto load_k_frag = [&](uint32_t (&f)[4], uint32_t sK, int np, int ks) {
    if (Opt::kLdmatrix && (Opt::kLean & kLeanKRoles)) {
      uint32_t t[4];
      ldmatrix_x4(t, sK + (np * 16 + k_row) * RB + pair_off(ks, k_x));
      f[0] = t[0]; f[1] = t[2]; f[2] = t[1]; f[3] = t[3];
    } else if (Opt::kLdmatrix) {
      ldmatrix_x4(f, sK + (np * 16 + k_row) * RB + pair_off(ks, k_x));
    } else {
      f[0] = lds_u32(sK + L::elem_off(np * 16 + g, ks * 16 + 2 * t4));
      f[1] = lds_u32(sK + L::elem_off(np * 16 + g, ks * 16 + 8 + 2 * t4));
      f[2] = lds_u32(sK + L::elem_off(np * 16 + 8 + g, ks * 16 + 2 * t4));
      f[3] = lds_u32(sK + L::elem_off(np * 16 + 8 + g, ks * 16 + 8 + 2 * t4));
    }
  };
  uint32_t qf[Kt::kQInRegs ? RG : 1][Kt::kQInRegs ? KS : 1][4];
  if constexpr (Kt::kQInRegs) {
#pragma unroll
    for (int rg = 0; rg < RG; ++rg)
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) load_q_frag(qf[rg][ks], rg, ks);
  }
  __syncthreads();  // the Q buffer overlaps ring stages 1..
#pragma unroll
  for (int s = 1; s < ST - 1; ++s) {
    if (s < n_tiles) load_kv(n_max - 1 - s, s);
    cp_async_commit();
  }

  float acc_o[RG][DT][4];
  float m_i[RG][2], l_i[RG][2];
#pragma unroll
  for (int rg = 0; rg < RG; ++rg) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc_o[rg][dt][j] = 0.f;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      m_i[rg][hh] = kNegInf;
      l_i[rg][hh] = 0.f;
    }
  }
  // Softcap: scores are t = tanh(scale*q.k/c) values, c*log2(e) per unit.  cap_in and the window's left side are
  // read once and held across the tile loop: read at their point of use, every tile waited on the load (3-6% of a
  // D=128 tile without a softcap, 4-6% more with one; bench/results/h200-2026-11-26-softcap-tanh.md).  Tiles without
  // the two registers to spare (kLeanRereadWords, the table's FEAT_TILES) re-read them every tile.
  constexpr bool kHoldWords = !(Opt::kLean & kLeanRereadWords);
  const float cap_in_held = kHoldWords ? softcap_in() : 0.f;
  const int win_left_held = kHoldWords ? window_word(WinLeft{}) : -1;
  auto cap_in_now = [&]() -> float {
    if constexpr (kHoldWords) return cap_in_held;
    else return softcap_in();
  };
  auto win_left_now = [&]() -> int {
    if constexpr (kHoldWords) return win_left_held;
    else return window_word(WinLeft{});
  };
  const float sl2 = cap_in_now() != 0.f ? __int_as_float(softcap_bits()) * 1.4426950408889634f : p.scale_log2;
  if (!kDecode) {
    // Prefill: the head's sink z is the softmax's starting state, a key of logit z without a value: m = z in the
    // loop's units (lse = m*scale, see the epilogue), l = 1 (in one thread of each quad: row sums are
    // per-thread partials), O = 0.  The loop and the epilogue then need no code for it, and no register holds it.
    // Branch-free (z = -inf gives m = -inf, l = 0, the start without a sink): a branch here costs the
    // 255-register tiles a spill.  Split passes leave the sink to the combine.
    const float z = sink_of(h_fixed);
    const float m0 = cap_in_now() != 0.f ? __fdividef(z, __int_as_float(softcap_bits()))
                                    : __fdividef(z, __int_as_float(reload_param<P_SCALE, kHdr>(params)));
    const float l0 = t4 == 0 && z != kNegInf ? 1.f : 0.f;
#pragma unroll
    for (int rg = 0; rg < RG; ++rg)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        m_i[rg][hh] = m0;
        l_i[rg][hh] = l0;
      }
  }
  const int block_lim = min(Skv - 1, (kDecode ? 0 : row0) + bounds_now().x);

  // n counts down to n_min (a window's first tile).  Two stages: one register holds both n_min and
  // the parity of n_max - 1 (tile n sits in stage (n_max - 1 - n) % 2), lo_pack = 2*n_min + parity:
  // n >= n_min iff 2n + 1 >= lo_pack.  The 168-register tile has no register to spare for either.
  int stage = 0;
  const int lo_pack = 2 * n_min + ((n_max - 1) & 1);
  for (int n = n_max - 1; ST == 2 ? 2 * n + 1 >= lo_pack : n >= n_min; --n) {
    if constexpr (ST == 2) stage = (n ^ lo_pack) & 1;
    if constexpr (Kt::kSplitKV) {
      // K_n landed; the barrier also says every warp is done with V_{n+1} (P V of the previous
      // tile), so V_n may overwrite it while S = Q K_n^T runs.
      cp_async_wait<0>();
      __syncthreads();
      load_kv(n, 0, false, true);
      cp_async_commit();
    } else if constexpr (ST > 1) {
      // Tile `it` landed (only the younger ST-2 groups may still fly); the barrier also
      // tells us every warp is done with the stage read in the previous iteration, which
      // is exactly the one the next prefetch overwrites.  One barrier per tile.
      cp_async_wait<ST - 2>();
      __syncthreads();
      if (ST == 2 ? 2 * (n - 1) + 1 >= lo_pack : n - (ST - 1) >= n_min)
        load_kv(n - (ST - 1), stage == 0 ? ST - 1 : stage - 1);
      cp_async_commit();
    } else {
      if (n < n_max - 1) {
        load_kv(n, 0);
        cp_async_commit();
      }
      cp_async_wait<0>();
      __syncthreads();
    }
    const uint32_t sK = sbase + stage * Kt::kStageBytes;
    const uint32_t sV = sK + Kt::kTileBytes;
    // kLeanHalves: S, softmax and P V in NH chunks of CN keys (one online-softmax step per
    // chunk), so that only CN/8 n-tiles of S are live beside O; Q fragments are re-read per chunk.
#pragma unroll 1
    for (int hf = 0; hf < NH; ++hf) {
      // ---- S = Q K^T
      float s_acc[RG][NTC][4];
#pragma unroll
      for (int rg = 0; rg < RG; ++rg)
#pragma unroll
        for (int nt = 0; nt < NTC; ++nt)
#pragma unroll
          for (int j = 0; j < 4; ++j) s_acc[rg][nt][j] = 0.f;
#pragma unroll (KSU)
      for (int ks = 0; ks < KS; ++ks) {
        if constexpr (Kt::kQInRegs) {
          // K fragments of key n-tiles 2np, 2np+1 for this k-step.
          uint32_t kf[NTC / 2][4];
#pragma unroll
          for (int np = 0; np < NTC / 2; ++np) load_k_frag(kf[np], sK, hf * (NTC / 2) + np, ks);
#pragma unroll
          for (int rg = 0; rg < RG; ++rg) {
            uint32_t qs[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) qs[j] = qf[rg][ks][j];
#pragma unroll
            for (int np = 0; np < NTC / 2; ++np) {
              E::mma_16816(s_acc[rg][2 * np], qs, kf[np][0], kf[np][1]);
              E::mma_16816(s_acc[rg][2 * np + 1], qs, kf[np][2], kf[np][3]);
            }
          }
        } else {
          // Q from shared memory: this k-step's Q fragments of every row group, then K one
          // 16-key pair at a time, so that few fragments are live beside S and O (with two row
          // groups at D=128, O alone holds 128 registers).
          uint32_t qs[RG][4];
#pragma unroll
          for (int rg = 0; rg < RG; ++rg) load_q_frag(qs[rg], rg, ks);
#pragma unroll
          for (int np = 0; np < NTC / 2; ++np) {
            uint32_t kf[4];
            load_k_frag(kf, sK, hf * (NTC / 2) + np, ks);
#pragma unroll
            for (int rg = 0; rg < RG; ++rg) {
              E::mma_16816(s_acc[rg][2 * np], qs[rg], kf[0], kf[1]);
              E::mma_16816(s_acc[rg][2 * np + 1], qs[rg], kf[2], kf[3]);
            }
          }
        }
      }

      // ---- score edits: softcap on every tile, then the mask (ragged Skv end, causal diagonal,
      // window edges) on the tiles that cross a bound.  The bounds' words are re-read here, not held across the loop.
      const int tile_key0 = n * BN + hf * CN;
      bool mask = tile_key0 + CN - 1 > block_lim;
      // Softcap: scale*q.k becomes c*tanh(scale*q.k/c); S keeps t = tanh(scale*q.k/c) and the softmax
      // runs in those units (sl2 = c*log2(e)).  Applied before the mask, which then sets -inf.
      const float cap_in = cap_in_now();
      if constexpr (Opt::kFeatures) {
        // A window's left side: a prefill tile needs the mask where it starts before the first key
        // of the warp's last row (rows are queries in order); decode rows mix queries: every tile.
        if (!mask && win_left_now() >= 0) {
          if constexpr (kDecode) mask = true;
          else mask = tile_key0 < row0 + warp_row0 + RG * 16 - 1 + bounds_now().y;
        }
        if (!mask && cap_in != 0.f) {
#pragma unroll
          for (int rg = 0; rg < RG; ++rg)
#pragma unroll
            for (int nt = 0; nt < NTC; ++nt)
#pragma unroll
              for (int j = 0; j < 4; ++j) s_acc[rg][nt][j] = tanh_approx(s_acc[rg][nt][j] * cap_in);
        }
      }
      if (mask) {
        // Branch-free row bounds: a tile inside every row's window keeps all its keys.
        const int2 bd = bounds_now();
#pragma unroll
        for (int rg = 0; rg < RG; ++rg)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int lim = row_limit(rg, hh, bd.x) - (tile_key0 + 2 * t4);
            // Plain entries have no left side: no first key to compare with.
            const int first = Opt::kFeatures ? row_first(rg, hh, bd.y) - (tile_key0 + 2 * t4) : -(1 << 30);
#pragma unroll
            for (int nt = 0; nt < NTC; ++nt)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                float& x = s_acc[rg][nt][2 * hh + c];
                if (cap_in != 0.f) x = tanh_approx(x * cap_in);
                if (nt * 8 + c > lim || nt * 8 + c < first) x = kNegInf;
              }
          }
      }

      if constexpr (Kt::kSplitKV) {
        // V_n landed and every warp is done with K_n: the next K loads during softmax and P V.
        cp_async_wait<0>();
        __syncthreads();
        if (n > n_min) load_kv(n - 1, 0, true, false);
        cp_async_commit();
      }

      // ---- online softmax, rows g and g+8 of each row group
      float alphas[RG][2];
      bool rescale = false;
#pragma unroll
      for (int rg = 0; rg < RG; ++rg)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float mx = kNegInf;
#pragma unroll
          for (int nt = 0; nt < NTC; ++nt) mx = fmaxf(mx, fmaxf(s_acc[rg][nt][2 * hh], s_acc[rg][nt][2 * hh + 1]));
          mx = quad_max(mx);
          const float m_old = m_i[rg][hh];
          const float m_new = fmaxf(m_old, mx);
          // m_old = -inf: nothing accumulated yet (acc, l are 0), any finite factor will do;
          // this also avoids (-inf) - (-inf).
          const float alpha = m_old == kNegInf ? 0.f : exp2_approx((m_old - m_new) * sl2);
          m_i[rg][hh] = m_new;
          // A row that has seen no key keeps m = -inf: subtract 0 so that exp2(-inf) = 0.
          const float m_scaled = m_new == kNegInf ? 0.f : m_new * sl2;
          float rs = 0.f;
#pragma unroll
          for (int nt = 0; nt < NTC; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float e = exp2_approx(fmaf(s_acc[rg][nt][2 * hh + c], sl2, -m_scaled));
              s_acc[rg][nt][2 * hh + c] = e;
              rs += e;
            }
          // Row sums stay per-thread partial (the quad's sum is taken once at the end).
          l_i[rg][hh] = l_i[rg][hh] * alpha + rs;
          if constexpr (Opt::kLazyRescale) {
            alphas[rg][hh] = alpha;
            rescale |= alpha != 1.f;
          } else {
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
              acc_o[rg][dt][2 * hh] *= alpha;
              acc_o[rg][dt][2 * hh + 1] *= alpha;
            }
          }
        }
      if constexpr (Opt::kLazyRescale) {
        // Once the running max has settled the factor is exactly 1: skip the D/4 FMULs per
        // row pair when no row of the warp needs them (warp-uniform branch).  It also shortens
        // live ranges, which is what lets some configurations fit their register budget.
        if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
          for (int rg = 0; rg < RG; ++rg)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
              for (int dt = 0; dt < DT; ++dt) {
                acc_o[rg][dt][2 * hh] *= alphas[rg][hh];
                acc_o[rg][dt][2 * hh + 1] *= alphas[rg][hh];
              }
        }
      }

      // ---- P (the element type) as A fragments: the C layout of n-tiles 2kk, 2kk+1 is the A layout of
      // k-step kk, so P never leaves registers.
      uint32_t pf[RG][PKC][4];
#pragma unroll
      for (int rg = 0; rg < RG; ++rg)
#pragma unroll
        for (int kk = 0; kk < PKC; ++kk) {
          pf[rg][kk][0] = E::pack(s_acc[rg][2 * kk][0], s_acc[rg][2 * kk][1]);
          pf[rg][kk][1] = E::pack(s_acc[rg][2 * kk][2], s_acc[rg][2 * kk][3]);
          pf[rg][kk][2] = E::pack(s_acc[rg][2 * kk + 1][0], s_acc[rg][2 * kk + 1][1]);
          pf[rg][kk][3] = E::pack(s_acc[rg][2 * kk + 1][2], s_acc[rg][2 * kk + 1][3]);
        }
      if (!Opt::kPInRegs) {
        // Ablation: the classic round trip through shared memory (per-warp region).
#pragma unroll
        for (int rg = 0; rg < RG; ++rg) {
          const uint32_t sP = sbase + Kt::kPOffset + (warp * RG + rg) * 16 * Kt::kPPitch;
#pragma unroll
          for (int kk = 0; kk < PKC; ++kk) {
            sts_u32(sP + g * Kt::kPPitch + (kk * 16 + 2 * t4) * 2, pf[rg][kk][0]);
            sts_u32(sP + (g + 8) * Kt::kPPitch + (kk * 16 + 2 * t4) * 2, pf[rg][kk][1]);
            sts_u32(sP + g * Kt::kPPitch + (kk * 16 + 8 + 2 * t4) * 2, pf[rg][kk][2]);
            sts_u32(sP + (g + 8) * Kt::kPPitch + (kk * 16 + 8 + 2 * t4) * 2, pf[rg][kk][3]);
          }
        }
        __syncwarp();
#pragma unroll
        for (int rg = 0; rg < RG; ++rg) {
          const uint32_t sP = sbase + Kt::kPOffset + (warp * RG + rg) * 16 * Kt::kPPitch;
#pragma unroll
          for (int kk = 0; kk < PKC; ++kk) {
            if (Opt::kLdmatrix) {
              ldmatrix_x4(pf[rg][kk], sP + a_row * Kt::kPPitch + (2 * kk + (lm >> 1)) * 16);
            } else {
              pf[rg][kk][0] = lds_u32(sP + g * Kt::kPPitch + (kk * 16 + 2 * t4) * 2);
              pf[rg][kk][1] = lds_u32(sP + (g + 8) * Kt::kPPitch + (kk * 16 + 2 * t4) * 2);
              pf[rg][kk][2] = lds_u32(sP + g * Kt::kPPitch + (kk * 16 + 8 + 2 * t4) * 2);
              pf[rg][kk][3] = lds_u32(sP + (g + 8) * Kt::kPPitch + (kk * 16 + 8 + 2 * t4) * 2);
            }
          }
        }
      }

      // ---- O += P V
#pragma unroll
      for (int kk = 0; kk < PKC; ++kk) {
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
          uint32_t vf[4];
          if (Opt::kLdmatrix) {
            ldmatrix_x4_trans(vf, sV + ((hf * PKC + kk) * 16 + a_row) * RB + pair_off(dp, a_x));
          } else {
            // B fragment of V: (keys 2t, 2t+1 | 2t+8, 2t+9) of column d = 8*dtile + g.
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int d = (2 * dp + half) * 8 + g;
              const int k0 = (hf * PKC + kk) * 16 + 2 * t4;
              vf[2 * half] = lds_u16(sV + L::elem_off(k0, d)) | (lds_u16(sV + L::elem_off(k0 + 1, d)) << 16);
              vf[2 * half + 1] = lds_u16(sV + L::elem_off(k0 + 8, d)) | (lds_u16(sV + L::elem_off(k0 + 9, d)) << 16);
            }
          }
#pragma unroll
          for (int rg = 0; rg < RG; ++rg) {
            E::mma_16816(acc_o[rg][2 * dp], pf[rg][kk], vf[0], vf[1]);
            E::mma_16816(acc_o[rg][2 * dp + 1], pf[rg][kk], vf[2], vf[3]);
          }
        }
      }
    }

    if constexpr (ST == 1 && !Kt::kSplitKV) {
      // Synchronous ablation: nobody may overwrite the single stage until all warps are done.
      __syncthreads();
    }
    if constexpr (ST != 2) stage = (stage + 1 == ST) ? 0 : stage + 1;
  }

  // ---- epilogue: normalise once, lse = m*scale + ln(l).
  // Values only the epilogue needs are re-read here rather than kept live across the loop.
  // lse = m*scale + ln(l); with a softcap m is in t units: m*scale = c*m.
  const float scale = cap_in_now() != 0.f ? __int_as_float(softcap_bits()) : __int_as_float(reload_param<P_SCALE, kHdr>(params));
  float lse_v[RG][2];
#pragma unroll
  for (int rg = 0; rg < RG; ++rg)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float l = quad_sum(l_i[rg][hh]);
      const bool any = l > 0.f;  // false only for a row that sees no key and no sink
      const float inv = any ? 1.f / l : 0.f;
      lse_v[rg][hh] = any ? m_i[rg][hh] * scale + logf(l) : kNegInf;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        acc_o[rg][dt][2 * hh] *= inv;
        acc_o[rg][dt][2 * hh + 1] *= inv;
      }
    }

  const int B_ = reload_param<P_B, kHdr>(params), Hq_ = reload_param<P_HQ, kHdr>(params), Sq_ = reload_param<P_SQ, kHdr>(params);
  if (kDecode) {
    // Partial results are small next to the K/V slice they summarise: direct 8-byte stores.
#pragma unroll
    for (int rg = 0; rg < RG; ++rg)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = row0 + warp_row0 + rg * 16 + g + 8 * hh;
        if (r < nrows) {
          const int64_t row_lin = ((int64_t)split * B_ + b) * Hq_ * Sq_ + (int64_t)row_head(r) * Sq_ + row_query(r);
          float* dst = at_data<kHdr>(o_partial) + row_lin * D + 2 * t4;
          if constexpr (kC) {
            // An absent query (s >= n_b): O = 0 and the absent marker in every split.
            const bool real = r < nvalid;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
              *reinterpret_cast<float2*>(dst + dt * 8) = real ? make_float2(acc_o[rg][dt][2 * hh], acc_o[rg][dt][2 * hh + 1]) : make_float2(0.f, 0.f);
            if (t4 == 0) at_data<kHdr>(lse)[row_lin] = real ? lse_v[rg][hh] : __int_as_float(kAbsentLseBits);
          } else {
#pragma unroll
          for (int dt = 0; dt < DT; ++dt)
            *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(acc_o[rg][dt][2 * hh], acc_o[rg][dt][2 * hh + 1]);
          if (t4 == 0) at_data<kHdr>(lse)[row_lin] = lse_v[rg][hh];
          }
        }
      }
  } else {
    // Stage the O tile in shared memory (the Q buffer) so that global stores are 16 bytes
    // wide and each row is written contiguously.  Each warp only touches its own rows.
    cp_async_wait<0>();
    __syncthreads();  // other warps may still read K/V stages that overlap the Q buffer
#pragma unroll
    for (int rg = 0; rg < RG; ++rg)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int rl = warp_row0 + rg * 16 + g + 8 * hh;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
          sts_u32(sQ + L::chunk_off(rl, dt) + 4 * t4, E::pack(acc_o[rg][dt][2 * hh], acc_o[rg][dt][2 * hh + 1]));
      }
    __syncwarp();
    // b and h from blockIdx again rather than kept live across the loop.
    const int b = blockIdx.y / Hq_, h_fixed = blockIdx.y % Hq_;
    if constexpr (kC) {
      // Packed rows q_offsets[b] + r of [totalQ, Hq, D]; lse [Hq, P_SQ] at h*P_SQ + q_offsets[b] + r.
      const int q0 = __ldg(q_offsets() + b), n_b = __ldg(q_offsets() + b + 1) - q0;
      const int o_sr = reload_param<P_O_STRIDE + 2, kHdr>(params);
      T* obase = o + (int64_t)q0 * o_sr + (int64_t)h_fixed * reload_param<P_O_STRIDE + 1, kHdr>(params);
#pragma unroll
      for (int it = 0; it < RG * 16 * CH / 32; ++it) {
        const int i = lane + it * 32;
        const int rl = warp_row0 + i / CH, c = i % CH;
        const int r = row0 + rl;
        if (r < n_b) *reinterpret_cast<uint4*>(obase + (int64_t)r * o_sr + c * 8) = lds_u128(sQ + L::chunk_off(rl, c));
      }
      if (reload_param<P_WRITE_LSE, kHdr>(params) != 0 && lse != nullptr && t4 == 0) {
#pragma unroll
        for (int rg = 0; rg < RG; ++rg)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = row0 + warp_row0 + rg * 16 + g + 8 * hh;
            if (r < n_b) lse[(int64_t)h_fixed * Sq_ + q0 + r] = lse_v[rg][hh];
          }
      }
      return;
    }
    T* obase = at_data<kHdr>(o) + (int64_t)b * reload_param<P_O_STRIDE, kHdr>(params) + (int64_t)h_fixed * reload_param<P_O_STRIDE + 1, kHdr>(params);
    const int o_sr = reload_param<P_O_STRIDE + 2, kHdr>(params);
#pragma unroll
    for (int it = 0; it < RG * 16 * CH / 32; ++it) {
      const int i = lane + it * 32;
      const int rl = warp_row0 + i / CH, c = i % CH;
      const int r = row0 + rl;
      if (r < Sq_) *reinterpret_cast<uint4*>(obase + (int64_t)r * o_sr + c * 8) = lds_u128(sQ + L::chunk_off(rl, c));
    }
    if (reload_param<P_WRITE_LSE, kHdr>(params) != 0 && t4 == 0) {
#pragma unroll
      for (int rg = 0; rg < RG; ++rg)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = row0 + warp_row0 + rg * 16 + g + 8 * hh;
          if (r < Sq_) at_data<kHdr>(lse)[((int64_t)b * Hq_ + h_fixed) * Sq_ + r] = lse_v[rg][hh];
        }
    }
  }
}

// The functions below own the static shared-memory arrays, whose PTX symbols are mangled from
// the function's signature.  They are written once per element type E (FLASH_FOR_EACH_ELEMENT)
// with E's storage type in the signature rather than a name dependent on Kt, so that an entry's
// symbols are those of a function written for its element type alone.
#define FLASH_FWD_SMEM_OWNERS(E)                                                                  \
  /* Shared memory for one configuration: static (<= 48 KB, what TornadoVM can launch) or      \
     dynamic (CUDA-driver host only, after cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)). */ \
  template <class Kt, bool kDecode, int kHdr = 0>                                                 \
  __device__ __forceinline__ void run_fwd(const E::Storage* q, const E::Storage* k, const E::Storage* v, \
                                          E::Storage* o, float* o_partial, float* lse, const int* params) { \
    static_assert(std::is_same<typename Kt::Element, E>::value, "element type of the traits");    \
    if constexpr (Kt::kDynamicSmem) {                                                             \
      extern __shared__ __align__(128) unsigned char flash_dyn_smem[];                           \
      fwd_body<Kt, kDecode, kHdr>(q, k, v, o, o_partial, lse, params, flash_dyn_smem);            \
    } else {                                                                                      \
      __shared__ __align__(128) unsigned char flash_smem[Kt::kSmemBytes];                         \
      fwd_body<Kt, kDecode, kHdr>(q, k, v, o, o_partial, lse, params, flash_smem);                \
    }                                                                                             \
  }                                                                                               \
                                                                                                  \
  /* The KV-cache twin of run_fwd (flash_cache.cu): static shared memory, CUDA-driver ABI.  A    \
     function of its own so that run_fwd's shared-memory symbols stay as they were. */           \
  template <class Kt, bool kDecode, int kCache>                                                   \
  __device__ __forceinline__ void run_fwd_cache(const E::Storage* q, const E::Storage* k, const E::Storage* v, \
                                                E::Storage* o, float* o_partial, float* lse, const int* params, \
                                                CacheArgs ca) {                                   \
    static_assert(std::is_same<typename Kt::Element, E>::value, "element type of the traits");    \
    static_assert(!Kt::kDynamicSmem && kCache != kNoCache, "cache entries: static shared memory"); \
    __shared__ __align__(128) unsigned char flash_smem[Kt::kSmemBytes];                           \
    fwd_body<Kt, kDecode, 0, kCache>(q, k, v, o, o_partial, lse, params, flash_smem, ca);         \
  }                                                                                               \
                                                                                                  \
  /* The split pass over a cache for the TornadoVM twins (flash_cache_decode_fused*_tornado):    \
     every array behind a kHdr-byte header (ca's pointers already at their data).  Its own       \
     function so that run_fwd_cache's shared-memory symbol stays as it was. */                   \
  template <class Kt, int kCache, int kHdr>                                                       \
  __device__ __forceinline__ void run_fwd_cache_split_hdr(const E::Storage* q, const E::Storage* k,     \
                                                          const E::Storage* v, float* o_partial,  \
                                                          float* lse_partial, const int* params,  \
                                                          CacheArgs ca) {                         \
    static_assert(std::is_same<typename Kt::Element, E>::value, "element type of the traits");    \
    static_assert(!Kt::kDynamicSmem && kCache != kNoCache, "cache entries: static shared memory"); \
    __shared__ __align__(128) unsigned char flash_smem[Kt::kSmemBytes];                           \
    fwd_body<Kt, true, kHdr, kCache>(q, k, v, nullptr, o_partial, lse_partial, params, flash_smem, ca); \
  }
FLASH_FOR_EACH_ELEMENT(FLASH_FWD_SMEM_OWNERS)
#undef FLASH_FWD_SMEM_OWNERS

}  // namespace flash
