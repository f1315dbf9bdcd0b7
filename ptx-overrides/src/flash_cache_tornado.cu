// TornadoVM twins of the KV-cache entries (ptx/flash_cache_tornado.ptx): the decode (fused, 6),
// the varlen prefill (7), the append and decode in one launch (8; the TornadoVM engines' only
// append kernel here: a standalone append twin would be a second prebuilt task, which TornadoVM
// 5.2.0 does not run right) and the same with its per-step inputs in one array (9).  The kernels
// and the ABI of params, lens and the cache layouts are flash_cache.cu's (its items 1-5 and the
// ABI comment at its top), names as there (every head dim of the table, bf16 in
// flash_cache_tornado_bf16.cu); a module of their own.  Hosts load one entry at a time.
//
// ---- TornadoVM twins (prebuilt tasks over a TornadoVM engine's own arrays) ----------------
// A leading uint64 kernel_context (ignored), then every argument an array passed as a pointer
// to its TornadoVM header, the data kHdr bytes in: _tornado = 16 (TornadoVM's default),
// _tornado_h128 = 128 (-Dtornado.panama.objectHeader=128); the manifest's header_bytes.  No scalar
// arguments (TornadoVM compiles scalars into the kernel as constants): what varies per step
// comes from device memory.  No null arrays: an unused one (block_table of a contiguous cache) is
// any small int array, not read.
// 6. flash_cache_decode_fused[_paged]_d{64,128}_tornado[_h128](uint64 ctx, q, k, v, elem* o,
//        float* lse, const int* params, const int* lens, const int* block_table,
//        float* workspace, int* tickets)
//    The decode split pass (1) and combine (2) in one launch: the split pass's block (32) and
//    grid (num_splits, ceil(G*Sq/16), B*Hkv); num_splits = gridDim.x, keys per split =
//    params[25] (P_KEYS_PER_SPLIT):
//      > 0: as given (a multiple of 64, num_splits >= ceil(max_b (L_b - span_b) / it)), as in 1;
//      = 0: derived per launch from lens, so that an engine's fixed params block and fixed grid
//           serve every step: kps = ceil(ceil(M / num_splits) / Bc) * Bc, M = max (L_b - span_b)
//           (1's span) over the sequences with n_b > 0 (0 if none), Bc = the tile's keys (32 for
//           d128, 64 for d64);
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
//    flash_cache_fwd[_paged]_d128_causal_tornado[_h128](uint64 ctx, q, k, v, elem* o,
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
// 8. flash_cache_append_decode_fused[_paged]_d{64,128}_tornado[_h128](uint64 ctx, q, elem* k,
//        elem* v, elem* o, float* lse, const int* params, const int* lens,
//        const int* block_table, float* workspace, int* tickets, const elem* new_k,
//        const elem* new_v, const int* append_params)
//    The step's append (as 4, dense rows only) and the fused decode (6) in one launch, for a
//    TornadoVM graph that can hold only one prebuilt task (TornadoVM 5.2.0 maps every prebuilt
//    task of a graph to the first one's installed code).  Block, grid, params (params[25] = 0:
//    keys per split derived as in 6), lens, block_table, o, lse, workspace and tickets exactly as
//    6; lens[b] = L_b after the append, lens[B+b] = n_b <= Sq (<= 16) new rows of slot b.
//    Prologue: CTA (split s = blockIdx.x, z = b*Hkv + kvh) first writes the new rows of its own
//    slot b and KV head kvh whose positions p fall in its split's keys, p in
//    [max(span_b + s*kps, L_b - n_b), min(L_b, span_b + (s+1)*kps)) (span_b as in 1): row j =
//    p - (L_b - n_b) of new_k/new_v,
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
//        const elem* stage, elem* k, elem* v, elem* o, float* lse, const int* params,
//        const int* block_table, float* workspace, int* tickets, const int* append_params)
//    8 with the step's per-execution inputs in one array (what the inference API's TornadoVM
//    device sends with each execution: one transfer instead of four).  stage: the step array
//    (int32 [3*B + 1], lens as in 8) at data byte 0; q, new_k, new_v (layouts as in 8) at the
//    half-element offsets append_params[13], [14], [15] (A_STAGE: multiples of 8, regions
//    disjoint, after the step words).  Everything else exactly as 8.
#include "flash_cache.cuh"

#include "generated/flash_cache_tornado.inc"
