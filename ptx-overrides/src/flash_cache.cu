// Shipped KV-cache entries (ptx/flash_cache.ptx): attention over a contiguous or paged KV cache
// with per-sequence lengths (decode split pass + combine, varlen prefill), the append of new
// tokens, and the public merge of partial results (CUDA-driver entries 1-5).  Their TornadoVM
// twins (6-9) are in flash_cache_tornado.cu, a module of their own; the bf16 entries are
// flash_cache_bf16.cu's.  Entry names below show fp16 and D = 64/128: every head dim of the table
// (32..256) and bf16 (a bf16_ tag before d) follow the same pattern.  Static shared memory,
// dynamic shared memory 0 for every launch.
//
// ---- ABI ----------------------------------------------------------------------------------
// elem: the entry's element type (the manifest's dtype; 16 bits: fp16 is IEEE half).  q, k, v
// and o below are elem arrays.
// params: the 32-int block of flash_params.cuh, read as
//   [0] B = sequences (batch slots) of the call   [1] Hq   [2] Hkv   [5] D   [6] causal
//   [3] Sq = dense decode: max new queries per sequence (<= 16); varlen prefill: the packed
//       lse row length (the plan's max total queries)
//   [4] Skv = cache capacity per sequence (not read by the kernels)
//   [7] scale*log2(e) bits, [8] write_lse, [22] scale bits, [9..20] strides in elements as
//       today (q, k, v, o: batch, head, row); [21] unused
//   [25] P_KEYS_PER_SPLIT: keys per split of the fused decode twins (flash_cache_tornado.cu, 6;
//       0 = derived from lens on the device); not read by 1-5, 7
//   [23] P_PAGE_SIZE: 0 = contiguous cache, else tokens per page, a power of two (1, 2, 4, ...)
//   [24] P_PAGES_PER_SEQ: block-table row stride
//   K/V contiguous [slots, Hkv, capacity, D]: k_sb, k_sh, k_sr as usual (V likewise).
//   K/V paged pool [pages, Hkv, page_size, D]: k_sb = page stride, k_sh = page_size*D, k_sr = D;
//   key j of sequence b is row j % page_size of page block_table[b*pages_per_seq + j/page_size].
//   [26..29] window left/right, softcap, sinks (flash_params.cuh; the sinks at word 32 + h)
// lens: int32 [2*B]: lens[b] = L_b, the KV length after this step's append; lens[B+b] = n_b, the
//   new queries of sequence b in this call.  Query j < n_b, at position p = L_b - n_b + j, sees
//   key k iff k < L_b, causal k <= p (bottom-right), window p - left <= k <= p + right.  Rows
//   j >= n_b: O = 0, lse = -inf; rows that see no key: O = 0, lse = the head's sink (or -inf).
//
// 1. flash_cache_decode_split_d{64,128}(q, k, v, float* o_partial, float* lse_partial, params,
//        const int* lens, const int* block_table /* ignored, may be null */, int keys_per_split)
//    flash_cache_decode_split_paged_d{64,128}(same; block_table used)
//    block = 32, grid = (num_splits, ceil(G*Sq/16), B*Hkv), G = Hq/Hkv.  q, o dense
//    [B, Hq, Sq, D] (q strides).  Split s covers keys [span_b + s*kps, min(L_b, span_b +
//    (s+1)*kps)), kps = keys_per_split a multiple of 64 (every decode tile's Bc; the ptx-cuda
//    host uses multiples of 256), span_b = cache_span_start(L_b, n_b, left): the first key query 0
//    sees, rounded down to a multiple of 64 (0 without a left window side).
//    num_splits >= ceil(max_b (L_b - span_b) / kps).  Writes every row of o_partial [splits, B, Hq,
//    Sq, D] fp32 and lse_partial [splits, B, Hq, Sq] (an empty split: 0 and -inf; an absent query:
//    0 and the NaN kAbsentLseBits, so that the combine gives it no sink).  No sink here.
//    The 16-row tiles pack the G*n_b real queries of a KV head first (row j*n_b + s = query s of
//    head kvh*G + j), so a call planned for Sq = 16 that decodes one token per sequence still
//    reads K/V once per KV head; row blocks with no real query only write their -inf rows.
// 2. flash_cache_decode_combine_d{64,128}(o_partial, lse_partial, elem* o, float* lse /* may be
//        null */, params, int num_splits)
//    block = 128, grid = ceil(B*Hq*Sq / (128 / (D/8))).  Writes o (o strides) and lse [B, Hq, Sq]
//    when write_lse = 1 and lse != null.
// 3. flash_cache_fwd[_paged]_d64, flash_cache_fwd[_paged]_d128 (non-causal config),
//    flash_cache_fwd[_paged]_d128_causal (causal config)  (q, k, v, elem* o, float* lse,
//        params, const int* q_offsets, const int* lens, const int* block_table)
//    q packed [totalQ, Hq, D]: q_sr = Hq*D, q_sh = D (q_sb unused); query r of sequence b is row
//    q_offsets[b] + r, n_b = q_offsets[b+1] - q_offsets[b] (lens[B+b] is not read); o the same
//    with the o strides; lse [Hq, Sq]: lse[h*Sq + q_offsets[b] + r] (written when write_lse = 1
//    and lse != null).  block = 128, grid = (ceil(maxQ / Br), B*Hq) with maxQ >= max n_b, Br = 128
//    (d64, d128) or 64 (d128_causal); blockIdx.x = grid.x - 1 - query tile; tiles past n_b exit.
//    The D=64 entry serves causal and non-causal (params[6]); either D=128 entry is correct for
//    both, the names say which configuration is faster.
// 4. kv_cache_append(elem* k_cache, elem* v_cache, const elem* new_k, const elem* new_v,
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
// 5. attention_merge_states(const elem* o_parts, const float* lse_parts, elem* o,
//        float* lse /* may be null */, int parts, int64_t rows, int D)
//    block = 128, grid = ceil(rows / (128 / (D/8))).  o_parts [parts, rows, D], lse_parts
//    [parts, rows] -> o [rows, D], lse [rows]: lse = log sum_i exp(lse_i) (natural log),
//    O = sum_i exp(lse_i - lse) O_i; -inf parts weigh 0; all -inf: O = 0, lse = -inf.  D a
//    multiple of 8, <= 1024.
// Host checks as for the other entries (16-byte aligned bases, strides multiples of 8 and
// < 2^31, B*Hq and B*Hkv <= 65535), plus 0 <= n_b <= Sq (decode), n_b <= L_b <= capacity,
// page ids inside the pool.
//
#include "flash_cache.cuh"

#include "generated/flash_cache.inc"
