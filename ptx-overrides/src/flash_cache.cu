// Shipped KV-cache entries (ptx/flash_cache.ptx): attention over a contiguous or paged KV cache
// with per-sequence lengths (decode split pass + combine, varlen prefill), the append of new
// tokens, and the public merge of partial results (CUDA-driver entries 1-5), plus TornadoVM
// twins of the decode (fused, 6), of the varlen prefill (7) and of the append and decode in one
// launch (8; the TornadoVM engines' only append kernel here: a standalone append twin would be a
// second prebuilt task, which TornadoVM 5.2.0 does not run right).  fp16,
// D = 64/128, static shared memory, dynamic shared memory 0 for every launch.
//
// ---- ABI ----------------------------------------------------------------------------------
// params: the 32-int block of flash_params.cuh, read as
//   [0] B = sequences (batch slots) of the call   [1] Hq   [2] Hkv   [5] D   [6] causal
//   [3] Sq = dense decode: max new queries per sequence (<= 16); varlen prefill: the packed
//       lse row length (the plan's max total queries)
//   [4] Skv = cache capacity per sequence (not read by the kernels)
//   [7] scale*log2(e) bits, [8] write_lse, [22] scale bits, [9..20] strides in elements as
//       today (q, k, v, o: batch, head, row); [21] unused
//   [25] P_KEYS_PER_SPLIT: keys per split of the fused decode twins (6 below; 0 = derived from
//       lens on the device); not read by 1-5, 7
//   [23] P_PAGE_SIZE: 0 = contiguous cache, else tokens per page, a power of two (1, 2, 4, ...)
//   [24] P_PAGES_PER_SEQ: block-table row stride
//   K/V contiguous [slots, Hkv, capacity, D]: k_sb, k_sh, k_sr as usual (V likewise).
//   K/V paged pool [pages, Hkv, page_size, D]: k_sb = page stride, k_sh = page_size*D, k_sr = D;
//   key j of sequence b is row j % page_size of page block_table[b*pages_per_seq + j/page_size].
// lens: int32 [2*B]: lens[b] = L_b, the KV length after this step's append; lens[B+b] = n_b, the
//   new queries of sequence b in this call.  Query j < n_b sees key k iff k < L_b and, causal,
//   k <= L_b - n_b + j (bottom-right).  Rows j >= n_b and rows that see no key: O = 0, lse = -inf.
//
// 1. flash_cache_decode_split_d{64,128}(q, k, v, float* o_partial, float* lse_partial, params,
//        const int* lens, const int* block_table /* ignored, may be null */, int keys_per_split)
//    flash_cache_decode_split_paged_d{64,128}(same; block_table used)
//    block = 32, grid = (num_splits, ceil(G*Sq/16), B*Hkv), G = Hq/Hkv.  q, o dense
//    [B, Hq, Sq, D] (q strides).  Split s covers keys [s*kps, min(L_b, (s+1)*kps)), kps =
//    keys_per_split a multiple of 64 (every decode tile's Bc; the ptx-cuda host uses 256).
//    num_splits >= ceil(max_b L_b / kps).  Writes every row of o_partial [splits, B, Hq, Sq, D]
//    fp32 and lse_partial [splits, B, Hq, Sq] (an empty split / absent query: 0 and -inf).
//    The 16-row tiles pack the G*n_b real queries of a KV head first (row j*n_b + s = query s of
//    head kvh*G + j), so a call planned for Sq = 16 that decodes one token per sequence still
//    reads K/V once per KV head; row blocks with no real query only write their -inf rows.
// 2. flash_cache_decode_combine_d{64,128}(o_partial, lse_partial, __half* o, float* lse /* may be
//        null */, params, int num_splits)
//    block = 128, grid = ceil(B*Hq*Sq / (128 / (D/8))).  Writes o (o strides) and lse [B, Hq, Sq]
//    when write_lse = 1 and lse != null.
// 3. flash_cache_fwd[_paged]_d64, flash_cache_fwd[_paged]_d128 (non-causal config),
//    flash_cache_fwd[_paged]_d128_causal (causal config)  (q, k, v, __half* o, float* lse,
//        params, const int* q_offsets, const int* lens, const int* block_table)
//    q packed [totalQ, Hq, D]: q_sr = Hq*D, q_sh = D (q_sb unused); query r of sequence b is row
//    q_offsets[b] + r, n_b = q_offsets[b+1] - q_offsets[b] (lens[B+b] is not read); o the same
//    with the o strides; lse [Hq, Sq]: lse[h*Sq + q_offsets[b] + r] (written when write_lse = 1
//    and lse != null).  block = 128, grid = (ceil(maxQ / Br), B*Hq) with maxQ >= max n_b, Br = 128
//    (d64, d128) or 64 (d128_causal); blockIdx.x = grid.x - 1 - query tile; tiles past n_b exit.
//    The D=64 entry serves causal and non-causal (params[6]); either D=128 entry is correct for
//    both, the names say which configuration is faster.
// 4. kv_cache_append(__half* k_cache, __half* v_cache, const __half* new_k, const __half* new_v,
//        const int* lens, const int* block_table, const int* new_offsets, int B, int Hkv, int D,
//        int max_new, int new_sb, int new_sh, int new_sr, int cache_sb, int cache_sh,
//        int cache_sr, int page_size, int pages_per_seq)
//    block = 128, grid = (ceil(max_new / (128 / (D/8))), Hkv, B): D/8 threads per token, each
//    copies one 16-byte chunk of K and of V.  Token j < n_b (= lens[B+b]) of sequence b goes to
//    position L_b - n_b + j: contiguous (page_size = 0) cache + b*cache_sb + h*cache_sh +
//    pos*cache_sr; paged: page block_table[b*pages_per_seq + pos/page_size], cache +
//    page*cache_sb + h*cache_sh + (pos%page_size)*cache_sr (any page_size >= 1 here).  Source:
//    new_offsets != null (packed): row new_offsets[b] + j, new + row*new_sr + h*new_sh; else
//    new + b*new_sb + h*new_sh + j*new_sr.  D a multiple of 8, <= 1024, every pointer and
//    stride 16-byte aligned.
// 5. attention_merge_states(const __half* o_parts, const float* lse_parts, __half* o,
//        float* lse /* may be null */, int parts, int64_t rows, int D)
//    block = 128, grid = ceil(rows / (128 / (D/8))).  o_parts [parts, rows, D], lse_parts
//    [parts, rows] -> o [rows, D], lse [rows]: lse = log sum_i exp(lse_i) (natural log),
//    O = sum_i exp(lse_i - lse) O_i; -inf parts weigh 0; all -inf: O = 0, lse = -inf.  D a
//    multiple of 8, <= 1024.
// Host checks as for the other entries (16-byte aligned bases, strides multiples of 8 and
// < 2^31, B*Hq and B*Hkv <= 65535), plus 0 <= n_b <= Sq (decode), n_b <= L_b <= capacity,
// page ids inside the pool.
//
// ---- TornadoVM twins (prebuilt tasks over a TornadoVM engine's own arrays) ----------------
// A leading uint64 kernel_context (ignored), then every argument an array passed as a pointer
// to its TornadoVM header, the data kHdr bytes in: _tornado = 16 (TornadoVM's default),
// _tornado_h128 = 128 (-Dtornado.panama.objectHeader=128); the manifest's header_bytes.  No scalar
// arguments (TornadoVM compiles scalars into the kernel as constants): what varies per step
// comes from device memory.  No null arrays: an unused one (block_table of a contiguous cache) is
// any small int array, not read.
// 6. flash_cache_decode_fused[_paged]_d{64,128}_tornado[_h128](uint64 ctx, q, k, v, __half* o,
//        float* lse, const int* params, const int* lens, const int* block_table,
//        float* workspace, int* tickets)
//    The decode split pass (1) and combine (2) in one launch: the split pass's block (32) and
//    grid (num_splits, ceil(G*Sq/16), B*Hkv); num_splits = gridDim.x, keys per split =
//    params[25] (P_KEYS_PER_SPLIT):
//      > 0: as given (a multiple of 64, num_splits >= ceil(max_b L_b / it)), as in 1;
//      = 0: derived per launch from lens, so that an engine's fixed params block and fixed grid
//           serve every step: kps = ceil(ceil(M / num_splits) / Bc) * Bc, M = max L_b over the
//           sequences with n_b > 0 (0 if none), Bc = the tile's keys (32 for d128, 64 for d64);
//           every CTA computes the same kps, and num_splits * kps >= M, so the grid's splits
//           always cover every key (the last ones may be empty).  M = 0: every split is empty
//           and every row gets O = 0, lse = -inf.
//    Each CTA writes its partials, then takes a ticket (atomicAdd on tickets[blockIdx.z *
//    gridDim.y + blockIdx.y]); the last of the num_splits CTAs of a row block combines that
//    block's rows into o (o strides) and lse [B, Hq, Sq] (always an array; written when
//    write_lse = 1) and sets the ticket back to 0.  lens: int32 [2*B] as for 1 (an engine can
//    pass the KvCache step array, whose first 2*B words these are).  tickets: int32
//    [ceil(G*Sq/16) * B*Hkv], zeroed once before the first launch (the kernel leaves them zero;
//    a launch that faults leaves them dirty).
//    workspace: fp32 [num_splits*B*Hq*Sq*(D+1)] = o_partial [splits, B, Hq, Sq, D] then
//    lse_partial [splits, B, Hq, Sq]; needs no zeroing.  Same semantics as 1 + 2: rows j >= n_b
//    and rows that see no key get O = 0, lse = -inf.
// 7. flash_cache_fwd[_paged]_d64_tornado[_h128], flash_cache_fwd[_paged]_d128_tornado[_h128],
//    flash_cache_fwd[_paged]_d128_causal_tornado[_h128](uint64 ctx, q, k, v, __half* o,
//        float* lse, const int* params, const int* step, const int* block_table)
//    The varlen prefill over a cache (3) with lens and q_offsets from one step array, the
//    KvCache's int32 [3*B + 1]: step[b] = L_b, step[B+b] = n_b (not read), step[2B+b] =
//    q_offsets[b] (b <= B), B = params[0].  params as for 3 (the packed block: q_sr = o_sr =
//    Hq*D, q_sh = o_sh = D, Sq = the lse row length >= total queries, causal, write_lse, page
//    words); lse [Hq, Sq] always an array (written when write_lse = 1).  Block 128, grid =
//    (ceil(maxQ / Br), B*Hq), maxQ >= max n_b (an engine's fixed grid: the largest prompt it
//    plans for; tiles past n_b exit), Br as 3: 128 (d64, d128), 64 (d128_causal).  Same
//    semantics as 3.  The contiguous d128 twin runs 3's d128 tile with the lazy rescale (the
//    eager one spills on sm_90 with the offsets pointer computed from the step array); the
//    paged d128 twin runs 3's own configuration.
// 8. flash_cache_append_decode_fused[_paged]_d{64,128}_tornado[_h128](uint64 ctx, q, __half* k,
//        __half* v, __half* o, float* lse, const int* params, const int* lens,
//        const int* block_table, float* workspace, int* tickets, const __half* new_k,
//        const __half* new_v, const int* append_params)
//    The step's append (as 4, dense rows only) and the fused decode (6) in one launch, for a
//    TornadoVM graph that can hold only one prebuilt task (TornadoVM 5.2.0 maps every prebuilt
//    task of a graph to the first one's installed code).  Block, grid, params (params[25] = 0:
//    keys per split derived as in 6), lens, block_table, o, lse, workspace and tickets exactly as
//    6; lens[b] = L_b after the append, lens[B+b] = n_b <= Sq (<= 16) new rows of slot b.
//    Prologue: CTA (split s = blockIdx.x, z = b*Hkv + kvh) first writes the new rows of its own
//    slot b and KV head kvh whose positions p fall in its split's keys, p in
//    [max(s*kps, L_b - n_b), min(L_b, (s+1)*kps)): row j = p - (L_b - n_b) of new_k/new_v,
//    dense [B, Hkv, max_new, D] at b*new_sb + kvh*new_sh + j*new_sr with the element strides
//    append_params[4..6] (append_params: int32 [16], flash::AppendParam, the block the Java
//    append kernel reads; words 4..6 = A_NEW_STRIDE: batch, head, row, the only ones read here),
//    goes to cache position p, addressed with params' own cache words, the ones the split pass
//    reads K/V with: K at b*k_sb + kvh*k_sh + p*k_sr (P_K_STRIDE, 12..14), V with P_V_STRIDE
//    (15..17); paged (P_PAGE_SIZE 23 > 0): page block_table[b*pages_per_seq + p/page_size]
//    (P_PAGES_PER_SEQ 24) for b, row p % page_size.  Then __syncthreads() and the split pass +
//    combine of 6.  Every position of [L_b - n_b, L_b) lies in exactly one split's range (the
//    splits cover every key of a slot with n_b > 0, see 6), so after the launch the cache holds
//    every new row; the row-block CTAs (blockIdx.y) of one split and head write the same bytes
//    to the same rows (idempotent); a CTA reads only keys of its own split, so it never waits on
//    another CTA's rows.  Slots with n_b = 0 write nothing.  k and v are read-write (declare them
//    so in the task graph); new_k rows past n_b are not read.  Host checks as 6, plus L_b <=
//    capacity and the new-row strides multiples of 8.
// 9. flash_cache_staged_decode_fused[_paged]_d{64,128}_tornado[_h128](uint64 ctx,
//        const __half* stage, __half* k, __half* v, __half* o, float* lse, const int* params,
//        const int* block_table, float* workspace, int* tickets, const int* append_params)
//    8 with the step's per-execution inputs in one array (what the inference API's TornadoVM
//    device sends with each execution: one transfer instead of four).  stage: the step array
//    (int32 [3*B + 1], lens as in 8) at data byte 0; q, new_k, new_v (layouts as in 8) at the
//    half-element offsets append_params[13], [14], [15] (A_STAGE: multiples of 8, regions
//    disjoint, after the step words).  Everything else exactly as 8.
#include "flash_cache.cuh"

// The shipped configurations (flash_fwd.cu, flash_decode.cu), in their cache modes.
using KtCacheDec128 = flash::DecodeTraits<128, 32, 2, 6>;
using KtCacheDec64 = flash::DecodeTraits<64, 64, 2, 6>;
using KtCacheFwd64 = flash::FwdTraits<64, 128, 64, 4, 2, 2, true, false, flash::Opt<>>;
using KtCacheFwd128 = flash::FwdTraits<128, 128, 32, 4, 1, 2, false, false, flash::Opt<>>;
using KtCacheFwd128Causal = flash::FwdTraits<128, 64, 48, 4, 2, 3, true, false,
                                             flash::Opt<true, true, true, true, true, true>>;

FLASH_CACHE_SPLIT_ENTRY(d128, KtCacheDec128, flash::kCacheContig)
FLASH_CACHE_SPLIT_ENTRY(d64, KtCacheDec64, flash::kCacheContig)
FLASH_CACHE_SPLIT_ENTRY(paged_d128, KtCacheDec128, flash::kCachePaged)
FLASH_CACHE_SPLIT_ENTRY(paged_d64, KtCacheDec64, flash::kCachePaged)
FLASH_CACHE_COMBINE_ENTRY(128)
FLASH_CACHE_COMBINE_ENTRY(64)

FLASH_CACHE_FWD_ENTRY(d64, KtCacheFwd64, flash::kCacheContig)
FLASH_CACHE_FWD_ENTRY(d128, KtCacheFwd128, flash::kCacheContig)
FLASH_CACHE_FWD_ENTRY(d128_causal, KtCacheFwd128Causal, flash::kCacheContig)
FLASH_CACHE_FWD_ENTRY(paged_d64, KtCacheFwd64, flash::kCachePaged)
FLASH_CACHE_FWD_ENTRY(paged_d128, KtCacheFwd128, flash::kCachePaged)
FLASH_CACHE_FWD_ENTRY(paged_d128_causal, KtCacheFwd128Causal, flash::kCachePaged)

FLASH_MANIFEST_PLAIN("cache-append", kv_cache_append, kv_cache_append, 0, 0, 0, flash::kCacheThreads)
extern "C" __global__ void __launch_bounds__(flash::kCacheThreads)
kv_cache_append(__half* __restrict__ k_cache, __half* __restrict__ v_cache, const __half* __restrict__ new_k,
                const __half* __restrict__ new_v, const int* __restrict__ lens, const int* __restrict__ block_table,
                const int* __restrict__ new_offsets, int B, int Hkv, int D, int max_new, int new_sb, int new_sh,
                int new_sr, int cache_sb, int cache_sh, int cache_sr, int page_size, int pages_per_seq) {
  flash::kv_append_body(k_cache, v_cache, new_k, new_v, lens, block_table, new_offsets, B, D, new_sb, new_sh,
                        new_sr, cache_sb, cache_sh, cache_sr, page_size, pages_per_seq);
}

FLASH_MANIFEST_PLAIN("merge-states", attention_merge_states, attention_merge_states, 0, 0, 0,
                     flash::kCacheThreads)
extern "C" __global__ void __launch_bounds__(flash::kCacheThreads)
attention_merge_states(const __half* __restrict__ o_parts, const float* __restrict__ lse_parts,
                       __half* __restrict__ o, float* __restrict__ lse, int parts, int64_t rows, int D) {
  flash::merge_states_body(o_parts, lse_parts, o, lse, parts, rows, D);
}

// TornadoVM twins (ABI items 6, 7 and 8 above), after every CUDA-driver entry.
FLASH_CACHE_FUSED_ENTRY(d128, KtCacheDec128, flash::kCacheContig)
FLASH_CACHE_FUSED_ENTRY(d64, KtCacheDec64, flash::kCacheContig)
FLASH_CACHE_FUSED_ENTRY(paged_d128, KtCacheDec128, flash::kCachePaged)
FLASH_CACHE_FUSED_ENTRY(paged_d64, KtCacheDec64, flash::kCachePaged)
// The prefill twins (ABI item 7) run the CUDA-driver entries' configurations, but for the contiguous
// non-causal D=128 one: KtCacheFwd128 sits at 255 registers on sm_90, and the step array's
// offsets pointer (computed, not a kernel parameter) stays live to the epilogue and spills 8
// bytes there; the same tile with the lazy rescale fits (249).
using KtCacheFwd128Lazy = flash::FwdTraits<128, 128, 32, 4, 1, 2, false, false,
                                           flash::Opt<true, true, true, true, true, true>>;
FLASH_CACHE_FWD_TORNADO_ENTRY(d64, flash_cache_fwd_d64, KtCacheFwd64, flash::kCacheContig)
FLASH_CACHE_FWD_TORNADO_ENTRY(d128, flash_cache_fwd_d128_lazy, KtCacheFwd128Lazy, flash::kCacheContig)
FLASH_CACHE_FWD_TORNADO_ENTRY(d128_causal, flash_cache_fwd_d128_causal, KtCacheFwd128Causal, flash::kCacheContig)
FLASH_CACHE_FWD_TORNADO_ENTRY(paged_d64, flash_cache_fwd_paged_d64, KtCacheFwd64, flash::kCachePaged)
FLASH_CACHE_FWD_TORNADO_ENTRY(paged_d128, flash_cache_fwd_paged_d128, KtCacheFwd128, flash::kCachePaged)
FLASH_CACHE_FWD_TORNADO_ENTRY(paged_d128_causal, flash_cache_fwd_paged_d128_causal, KtCacheFwd128Causal,
                              flash::kCachePaged)
// The append + decode twins (ABI item 8), last.
FLASH_CACHE_APPEND_FUSED_ENTRY(d128, KtCacheDec128, flash::kCacheContig)
FLASH_CACHE_APPEND_FUSED_ENTRY(d64, KtCacheDec64, flash::kCacheContig)
FLASH_CACHE_APPEND_FUSED_ENTRY(paged_d128, KtCacheDec128, flash::kCachePaged)
FLASH_CACHE_APPEND_FUSED_ENTRY(paged_d64, KtCacheDec64, flash::kCachePaged)
// The staged append + decode twins (ABI item 9), after them.
FLASH_CACHE_STAGED_FUSED_ENTRY(d128, KtCacheDec128, flash::kCacheContig)
FLASH_CACHE_STAGED_FUSED_ENTRY(d64, KtCacheDec64, flash::kCacheContig)
FLASH_CACHE_STAGED_FUSED_ENTRY(paged_d128, KtCacheDec128, flash::kCachePaged)
FLASH_CACHE_STAGED_FUSED_ENTRY(paged_d64, KtCacheDec64, flash::kCachePaged)
