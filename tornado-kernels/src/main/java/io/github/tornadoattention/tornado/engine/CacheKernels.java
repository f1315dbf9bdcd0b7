package io.github.tornadoattention.tornado.engine;

import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.math.TornadoMath;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * KV-cache kernels for tornado-simt and tornado-mma (KernelContext, scalar fp32): the split-KV decode (split pass +
 * combine), the packed (varlen) prefill over a cache, the append of new tokens and the copy of element ranges. The
 * Java twins of {@code ptx-overrides/src/flash_cache.cu} (its ABI comment defines the semantics).
 *
 * <p>Everything that varies per step (lengths, new-token counts, packed offsets, the total) is read from the
 * {@code step} array, int32 [3 slots + 1]: L_b (length after this step's append), n_b, the packed offsets, the total.
 * Shapes, strides and flags come from a constant int params array ({@code P_*} for attention, {@code A_*} the words of
 * {@code flash::AppendParam} for the append), never from scalar arguments: TornadoVM compiles scalars into the kernel
 * as constants, and an {@code if} on a folded constant has been mis-compiled (tornado-kernels/README). Only the softmax
 * scale is a scalar (constant per plan).
 *
 * <p>fp16 output: TornadoVM's PTX backend converts a float to fp16 for {@code new HalfFloat(floatArray.get(i))} (a
 * value loaded from a FloatArray) but not for a computed value, and an engine's O is a {@link HalfFloatArray}. So the
 * attention kernels write normalised O in fp32 to their FloatArray workspace, pass a barrier, and convert elements that
 * another thread wrote ({@code o.set(i, new HalfFloat(ws.get(j)))}), so that the compiler cannot forward the stored
 * value.
 *
 * <p>Local arrays are sized for D = {@value #MAX_D} and touched only in the entry methods (TornadoVM addresses a local
 * array passed to a helper as a heap array). Integer shifts: none on values that can be negative ({@code >>} is
 * emitted as a logical shift).
 */
public final class CacheKernels {
    private CacheKernels() {
    }

    // ---- append params: the words of flash::AppendParam (ptx-overrides/src/flash_cache.cuh), int32[A_COUNT] ----
    static final int A_B = 0;
    static final int A_HKV = 1;
    static final int A_D = 2;
    static final int A_MAX_NEW = 3;
    /** Batch, head, row element strides of new K/V, words 4..6. */
    static final int A_NEW_STRIDE = 4;
    /** Batch (page), head, row element strides of the cache, words 7..9. */
    static final int A_CACHE_STRIDE = 7;
    static final int A_PAGE_SIZE = 10;
    static final int A_PAGES_PER_SEQ = 11;
    /** 1: new rows packed [total, Hkv, D] from the step's offsets; 0: dense. */
    static final int A_PACKED = 12;
    /** The staged PTX twins only: half offsets of q, new K, new V in the one stage array, words 13..15. */
    static final int A_STAGE = 13;
    static final int A_COUNT = 16;

    // ---- attention params, int32[P_COUNT] (this class's own block) ----
    static final int P_B = 0;
    static final int P_HQ = 1;
    static final int P_HKV = 2;
    static final int P_D = 3;
    /** Dense: maxQueryLength (rows per head of q, o, lse). */
    static final int P_SQ = 4;
    /** Packed: maxTotalQueries (the lse row length). */
    static final int P_MAX_TOTAL = 5;
    static final int P_CAUSAL = 6;
    static final int P_WRITE_LSE = 7;
    /** Dense q / o element strides: batch, head, row (words 8..10). */
    static final int P_Q_STRIDE = 8;
    /** Cache element strides: batch (page), head, row (words 11..13). */
    static final int P_CACHE_STRIDE = 11;
    static final int P_PAGE_SIZE = 14;
    static final int P_PAGES_PER_SEQ = 15;
    /** Decode: the grid's splits of the key range. */
    static final int P_SPLITS = 16;
    /** Decode: row blocks of {@value #ROWS} packed (query head, query) rows per KV head. */
    static final int P_ROW_BLOCKS = 17;
    static final int P_COUNT = 20;

    /** Largest head dim of the attention kernels (local arrays are sized for it). */
    static final int MAX_D = 128;
    /** Query rows per workgroup (decode: packed (head, query) rows of one KV head; prefill: packed query rows). */
    static final int ROWS = 16;
    /** Keys per K/V tile, and the granularity of a split's key range. */
    static final int BC = 32;
    /** Threads per attention workgroup: 8 per query row. */
    static final int THREADS = 128;
    static final int TPR = 8;
    /** Tokens per append workgroup. */
    static final int APPEND_ROWS = 8;
    static final int APPEND_THREADS = 128;
    static final int COPY_THREADS = 256;

    // Local array sizes (literal constants in the kernels; the tests check they match).
    static final int QS_FLOATS = ROWS * (MAX_D + 1);   // rows padded by one float: no bank conflicts
    static final int KS_FLOATS = BC * (MAX_D + 1);
    static final int VS_FLOATS = BC * MAX_D;
    static final int PS_FLOATS = ROWS * (BC + 1);

    /**
     * Decode split pass. Workgroup g = ((split * B + b) * Hkv + kvh) * rowBlocks + rowBlock of {@value #THREADS}
     * threads. The G * n_b real queries of KV head kvh are packed first (row j * n_b + s = query s of head kvh * G + j),
     * so K/V are read once per KV head for up to {@value #ROWS} rows; row blocks without a real row exit. Slot b's keys
     * are cut into {@code splits} ranges of kps = ceil(ceil(L_b / splits) / BC) * BC keys (from the run-time length,
     * so short and long slots both use every split). Writes, for each real row, the normalised fp32 O of its keys
     * in the range and their logsumexp (-inf and O = 0 where it sees none) to {@code ws}: O part [splits, B, Hq, Sq, D],
     * then lse part [splits, B, Hq, Sq].
     */
    public static void decodeSplit(KernelContext kc, HalfFloatArray q, HalfFloatArray kCache, HalfFloatArray vCache,
                                   IntArray step, IntArray blockTable, IntArray params, FloatArray ws, float scale) {
        float[] qs = kc.allocateFloatLocalArray(2064);  // ROWS x (MAX_D + 1)
        float[] ks = kc.allocateFloatLocalArray(4128);  // BC x (MAX_D + 1)
        float[] vs = kc.allocateFloatLocalArray(4096);  // BC x MAX_D
        float[] ps = kc.allocateFloatLocalArray(528);   // ROWS x (BC + 1)
        float[] red = kc.allocateFloatLocalArray(128);  // one value per thread
        int[] keyAt = kc.allocateIntLocalArray(64);     // [0, BC): element index of the tile's key rows ([BC, 2 BC) unused here)
        // The row's columns tq + 8 c are a0 .. a15: scalars, so that they live in registers (a private array went to
        // the stack, one local load and store per multiply-add).

        int t = kc.localIdx;
        int tq = t % 8;
        int slot = t / 8;   // the thread's row of ps and red: copy c, row r (slot = c * rowsPer + r)
        int batch = params.get(P_B);
        int hq = params.get(P_HQ);
        int hkv = params.get(P_HKV);
        int d = params.get(P_D);
        int sq = params.get(P_SQ);
        int splits = params.get(P_SPLITS);
        int rowBlocks = params.get(P_ROW_BLOCKS);
        int group = hq / hkv;
        int g = kc.groupIdx;
        int rowBlock = g % rowBlocks;
        int kvh = (g / rowBlocks) % hkv;
        int b = (g / (rowBlocks * hkv)) % batch;
        int split = g / (rowBlocks * hkv * batch);
        int length = step.get(b);
        int n = step.get(batch + b);
        int real = group * n;
        int r0 = rowBlock * 16;
        if (r0 < real) {
            // With few real rows (decode: G n_b), the 16 thread rows are `copies` copies of rowsPer = 16 / copies
            // rows: every copy runs the softmax of the same rows, copy c computes the partial scores over its slice of
            // the head dim and P V over its quarter (half) of the tile's keys, so that every warp works.
            int rowsHere = Math.min(16, real - r0);
            int copies = rowsHere <= 4 ? 4 : rowsHere <= 8 ? 2 : 1;
            int rowsPer = 16 / copies;
            int c = slot / rowsPer;
            int r = slot % rowsPer;
            // This thread's row: query s of head kvh * G + j, visible keys <= rowLimit (-1: not a real row).
            int pr = r0 + r;
            boolean isReal = pr < real;
            int j = isReal ? pr / n : 0;
            int s = isReal ? pr % n : 0;
            int h = kvh * group + j;
            int rowLimit = !isReal ? -1 : params.get(P_CAUSAL) == 1 ? Math.min(length - 1, length - n + s) : length - 1;
            int kps = keysPerSplit(length, splits);
            int k0 = split * kps;
            int k1 = Math.min(length, k0 + kps);

            // Q rows to fp32 local memory (zeros for rows that are not real): thread t loads column t % D of rows
            // t / D, t / D + 128 / D, ...
            int qsb = params.get(P_Q_STRIDE);
            int qsh = params.get(P_Q_STRIDE + 1);
            int qsr = params.get(P_Q_STRIDE + 2);
            int dl = t % d;
            int rowStep = 128 / d;
            for (int rr = t / d; rr < 16; rr += rowStep) {
                int qr = r0 + rr;
                boolean ok = qr < real;
                int qj = ok ? qr / n : 0;
                int qsIdx = ok ? qr % n : 0;
                float x = q.get(b * qsb + (kvh * group + qj) * qsh + qsIdx * qsr + dl).getFloat32();
                qs[rr * 129 + dl] = ok ? x : 0.0f;
            }
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f, a7 = 0.0f;
            float a8 = 0.0f, a9 = 0.0f, a10 = 0.0f, a11 = 0.0f, a12 = 0.0f, a13 = 0.0f, a14 = 0.0f, a15 = 0.0f;
            float runningMax = Float.NEGATIVE_INFINITY;
            float partialSum = 0.0f;
            int csb = params.get(P_CACHE_STRIDE);
            int csh = params.get(P_CACHE_STRIDE + 1);
            int csr = params.get(P_CACHE_STRIDE + 2);
            int pageSize = params.get(P_PAGE_SIZE);
            int pagesPerSeq = params.get(P_PAGES_PER_SEQ);
            int eLen = d / copies;        // this copy's slice of the head dim (a multiple of 4)
            int e0 = c * eLen;
            int keyLen = 32 / copies;     // this copy's keys of each tile in P V
            int key0 = c * keyLen;
            int kb0 = t / d;

            for (int j0 = k0; j0 < k1; j0 += 32) {
                if (t < 32) {
                    int key = j0 + t;
                    keyAt[t] = keyRow(blockTable, b, kvh, key < k1 ? key : j0, csb, csh, csr, pageSize, pagesPerSeq);
                }
                kc.localBarrier();   // key rows known (and every thread is done with the previous tile)
                // K and V tiles: 16 keys per trip, all 32 loads issued before the first store (one trip at D = 128 is
                // half the tile; D <= 64: one trip, keys past 31 wrap onto keys this thread also loads). Keys out of
                // range load key j0's row and are left out of P V.
                for (int kb = kb0; kb < 32; kb += 16 * rowStep) {
                    int w0 = (kb + 0 * rowStep) & 31;
                    int w1 = (kb + 1 * rowStep) & 31;
                    int w2 = (kb + 2 * rowStep) & 31;
                    int w3 = (kb + 3 * rowStep) & 31;
                    int w4 = (kb + 4 * rowStep) & 31;
                    int w5 = (kb + 5 * rowStep) & 31;
                    int w6 = (kb + 6 * rowStep) & 31;
                    int w7 = (kb + 7 * rowStep) & 31;
                    int w8 = (kb + 8 * rowStep) & 31;
                    int w9 = (kb + 9 * rowStep) & 31;
                    int w10 = (kb + 10 * rowStep) & 31;
                    int w11 = (kb + 11 * rowStep) & 31;
                    int w12 = (kb + 12 * rowStep) & 31;
                    int w13 = (kb + 13 * rowStep) & 31;
                    int w14 = (kb + 14 * rowStep) & 31;
                    int w15 = (kb + 15 * rowStep) & 31;
                    int at0 = keyAt[w0] + dl;
                    int at1 = keyAt[w1] + dl;
                    int at2 = keyAt[w2] + dl;
                    int at3 = keyAt[w3] + dl;
                    int at4 = keyAt[w4] + dl;
                    int at5 = keyAt[w5] + dl;
                    int at6 = keyAt[w6] + dl;
                    int at7 = keyAt[w7] + dl;
                    int at8 = keyAt[w8] + dl;
                    int at9 = keyAt[w9] + dl;
                    int at10 = keyAt[w10] + dl;
                    int at11 = keyAt[w11] + dl;
                    int at12 = keyAt[w12] + dl;
                    int at13 = keyAt[w13] + dl;
                    int at14 = keyAt[w14] + dl;
                    int at15 = keyAt[w15] + dl;
                    float x0 = kCache.get(at0).getFloat32();
                    float x1 = kCache.get(at1).getFloat32();
                    float x2 = kCache.get(at2).getFloat32();
                    float x3 = kCache.get(at3).getFloat32();
                    float x4 = kCache.get(at4).getFloat32();
                    float x5 = kCache.get(at5).getFloat32();
                    float x6 = kCache.get(at6).getFloat32();
                    float x7 = kCache.get(at7).getFloat32();
                    float x8 = kCache.get(at8).getFloat32();
                    float x9 = kCache.get(at9).getFloat32();
                    float x10 = kCache.get(at10).getFloat32();
                    float x11 = kCache.get(at11).getFloat32();
                    float x12 = kCache.get(at12).getFloat32();
                    float x13 = kCache.get(at13).getFloat32();
                    float x14 = kCache.get(at14).getFloat32();
                    float x15 = kCache.get(at15).getFloat32();
                    float y0 = vCache.get(at0).getFloat32();
                    float y1 = vCache.get(at1).getFloat32();
                    float y2 = vCache.get(at2).getFloat32();
                    float y3 = vCache.get(at3).getFloat32();
                    float y4 = vCache.get(at4).getFloat32();
                    float y5 = vCache.get(at5).getFloat32();
                    float y6 = vCache.get(at6).getFloat32();
                    float y7 = vCache.get(at7).getFloat32();
                    float y8 = vCache.get(at8).getFloat32();
                    float y9 = vCache.get(at9).getFloat32();
                    float y10 = vCache.get(at10).getFloat32();
                    float y11 = vCache.get(at11).getFloat32();
                    float y12 = vCache.get(at12).getFloat32();
                    float y13 = vCache.get(at13).getFloat32();
                    float y14 = vCache.get(at14).getFloat32();
                    float y15 = vCache.get(at15).getFloat32();
                    ks[w0 * 129 + dl] = x0;
                    ks[w1 * 129 + dl] = x1;
                    ks[w2 * 129 + dl] = x2;
                    ks[w3 * 129 + dl] = x3;
                    ks[w4 * 129 + dl] = x4;
                    ks[w5 * 129 + dl] = x5;
                    ks[w6 * 129 + dl] = x6;
                    ks[w7 * 129 + dl] = x7;
                    ks[w8 * 129 + dl] = x8;
                    ks[w9 * 129 + dl] = x9;
                    ks[w10 * 129 + dl] = x10;
                    ks[w11 * 129 + dl] = x11;
                    ks[w12 * 129 + dl] = x12;
                    ks[w13 * 129 + dl] = x13;
                    ks[w14 * 129 + dl] = x14;
                    ks[w15 * 129 + dl] = x15;
                    vs[w0 * 128 + dl] = y0;
                    vs[w1 * 128 + dl] = y1;
                    vs[w2 * 128 + dl] = y2;
                    vs[w3 * 128 + dl] = y3;
                    vs[w4 * 128 + dl] = y4;
                    vs[w5 * 128 + dl] = y5;
                    vs[w6 * 128 + dl] = y6;
                    vs[w7 * 128 + dl] = y7;
                    vs[w8 * 128 + dl] = y8;
                    vs[w9 * 128 + dl] = y9;
                    vs[w10 * 128 + dl] = y10;
                    vs[w11 * 128 + dl] = y11;
                    vs[w12 * 128 + dl] = y12;
                    vs[w13 * 128 + dl] = y13;
                    vs[w14 * 128 + dl] = y14;
                    vs[w15 * 128 + dl] = y15;
                }
                kc.localBarrier();

                // Partial scores of keys tq, tq + 8, tq + 16, tq + 24 over this copy's slice of the head dim (rows that
                // are not real skip the products; their scores are masked below).
                float s0 = 0.0f;
                float s1 = 0.0f;
                float s2 = 0.0f;
                float s3 = 0.0f;
                if (rowLimit >= j0) {
                    for (int e = e0; e < e0 + eLen; e += 4) {
                        int qb = r * 129 + e;
                        float q0 = qs[qb];
                        float q1 = qs[qb + 1];
                        float q2 = qs[qb + 2];
                        float q3 = qs[qb + 3];
                        int kq = tq * 129 + e;
                        s0 += q0 * ks[kq];
                        s1 += q0 * ks[kq + 1032];
                        s2 += q0 * ks[kq + 2064];
                        s3 += q0 * ks[kq + 3096];
                        s0 += q1 * ks[kq + 1];
                        s1 += q1 * ks[kq + 1033];
                        s2 += q1 * ks[kq + 2065];
                        s3 += q1 * ks[kq + 3097];
                        s0 += q2 * ks[kq + 2];
                        s1 += q2 * ks[kq + 1034];
                        s2 += q2 * ks[kq + 2066];
                        s3 += q2 * ks[kq + 3098];
                        s0 += q3 * ks[kq + 3];
                        s1 += q3 * ks[kq + 1035];
                        s2 += q3 * ks[kq + 2067];
                        s3 += q3 * ks[kq + 3099];
                    }
                }
                ps[slot * 33 + tq] = s0;
                ps[slot * 33 + tq + 8] = s1;
                ps[slot * 33 + tq + 16] = s2;
                ps[slot * 33 + tq + 24] = s3;
                kc.localBarrier();   // partial scores complete
                float u0 = 0.0f;
                float u1 = 0.0f;
                float u2 = 0.0f;
                float u3 = 0.0f;
                for (int cc = 0; cc < copies; cc++) {
                    int pb = (cc * rowsPer + r) * 33 + tq;
                    u0 += ps[pb];
                    u1 += ps[pb + 8];
                    u2 += ps[pb + 16];
                    u3 += ps[pb + 24];
                }
                int last = Math.min(rowLimit, k1 - 1);
                float z0 = j0 + tq <= last ? u0 * scale : Float.NEGATIVE_INFINITY;
                float z1 = j0 + tq + 8 <= last ? u1 * scale : Float.NEGATIVE_INFINITY;
                float z2 = j0 + tq + 16 <= last ? u2 * scale : Float.NEGATIVE_INFINITY;
                float z3 = j0 + tq + 24 <= last ? u3 * scale : Float.NEGATIVE_INFINITY;
                float tileMax = Math.max(Math.max(z0, z1), Math.max(z2, z3));
                red[t] = tileMax;
                kc.localBarrier();   // row maxima known, and every thread is done reading the partial scores
                for (int i = 0; i < 8; i++) {
                    tileMax = Math.max(tileMax, red[slot * 8 + i]);
                }
                float newMax = Math.max(runningMax, tileMax);
                float alpha = newMax == Float.NEGATIVE_INFINITY ? 1.0f : TornadoMath.exp(runningMax - newMax);
                float p0 = z0 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(z0 - newMax);
                float p1 = z1 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(z1 - newMax);
                float p2 = z2 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(z2 - newMax);
                float p3 = z3 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(z3 - newMax);
                ps[slot * 33 + tq] = p0;
                ps[slot * 33 + tq + 8] = p1;
                ps[slot * 33 + tq + 16] = p2;
                ps[slot * 33 + tq + 24] = p3;
                partialSum = partialSum * alpha + (p0 + p1 + p2 + p3);
                runningMax = newMax;
                kc.localBarrier();   // P complete, red free again
                if (rowLimit >= j0) {
                    a0 *= alpha; a1 *= alpha; a2 *= alpha; a3 *= alpha; a4 *= alpha; a5 *= alpha; a6 *= alpha; a7 *= alpha;
                    a8 *= alpha; a9 *= alpha; a10 *= alpha; a11 *= alpha; a12 *= alpha; a13 *= alpha; a14 *= alpha; a15 *= alpha;
                    int keyEnd = Math.min(key0 + keyLen, k1 - j0);
                    for (int jj = key0; jj < keyEnd; jj++) {
                        float p = ps[slot * 33 + jj];
                        int vb = jj * 128 + tq;
                        a0 += p * vs[vb + 0]; a1 += p * vs[vb + 8]; a2 += p * vs[vb + 16]; a3 += p * vs[vb + 24];
                        a4 += p * vs[vb + 32]; a5 += p * vs[vb + 40]; a6 += p * vs[vb + 48]; a7 += p * vs[vb + 56];
                        a8 += p * vs[vb + 64]; a9 += p * vs[vb + 72]; a10 += p * vs[vb + 80]; a11 += p * vs[vb + 88];
                        a12 += p * vs[vb + 96]; a13 += p * vs[vb + 104]; a14 += p * vs[vb + 112]; a15 += p * vs[vb + 120];
                    }
                }
            }

            // Row sum over the row's 8 threads (every copy sees all the row's keys); the copies' O parts summed through
            // vs by copy 0; O normalised, lse = m + log l (-inf where the row saw no key here). l == 0 rather than
            // l > 0: a NaN score makes l NaN, and O and lse must stay NaN.
            red[t] = partialSum;
            kc.localBarrier();   // also: every copy is done with vs
            float rowSum = 0.0f;
            for (int i = 0; i < 8; i++) {
                rowSum += red[slot * 8 + i];
            }
            int own = slot * 128 + tq;
            vs[own] = a0; vs[own + 8] = a1; vs[own + 16] = a2; vs[own + 24] = a3;
            vs[own + 32] = a4; vs[own + 40] = a5; vs[own + 48] = a6; vs[own + 56] = a7;
            vs[own + 64] = a8; vs[own + 72] = a9; vs[own + 80] = a10; vs[own + 88] = a11;
            vs[own + 96] = a12; vs[own + 104] = a13; vs[own + 112] = a14; vs[own + 120] = a15;
            kc.localBarrier();
            if (isReal && c == 0) {
                for (int cc = 1; cc < copies; cc++) {
                    int ob = (cc * rowsPer + r) * 128 + tq;
                    a0 += vs[ob]; a1 += vs[ob + 8]; a2 += vs[ob + 16]; a3 += vs[ob + 24];
                    a4 += vs[ob + 32]; a5 += vs[ob + 40]; a6 += vs[ob + 48]; a7 += vs[ob + 56];
                    a8 += vs[ob + 64]; a9 += vs[ob + 72]; a10 += vs[ob + 80]; a11 += vs[ob + 88];
                    a12 += vs[ob + 96]; a13 += vs[ob + 104]; a14 += vs[ob + 112]; a15 += vs[ob + 120];
                }
                int part = ((split * batch + b) * hq + h) * sq + s;
                float inverse = rowSum == 0.0f ? 0.0f : 1.0f / rowSum;
                int ob = part * d + tq;
                int room = d - tq;   // columns tq + 8 c < d
                put(ws, ob + 0, 0 < room, a0 * inverse);
                put(ws, ob + 8, 8 < room, a1 * inverse);
                put(ws, ob + 16, 16 < room, a2 * inverse);
                put(ws, ob + 24, 24 < room, a3 * inverse);
                put(ws, ob + 32, 32 < room, a4 * inverse);
                put(ws, ob + 40, 40 < room, a5 * inverse);
                put(ws, ob + 48, 48 < room, a6 * inverse);
                put(ws, ob + 56, 56 < room, a7 * inverse);
                put(ws, ob + 64, 64 < room, a8 * inverse);
                put(ws, ob + 72, 72 < room, a9 * inverse);
                put(ws, ob + 80, 80 < room, a10 * inverse);
                put(ws, ob + 88, 88 < room, a11 * inverse);
                put(ws, ob + 96, 96 < room, a12 * inverse);
                put(ws, ob + 104, 104 < room, a13 * inverse);
                put(ws, ob + 112, 112 < room, a14 * inverse);
                put(ws, ob + 120, 120 < room, a15 * inverse);
                if (tq == 0) {
                    ws.set(splits * batch * hq * sq * d + part,
                            rowSum == 0.0f ? Float.NEGATIVE_INFINITY : runningMax + TornadoMath.log(rowSum));
                }
            }
        }
    }

    /**
     * Decode combine: one workgroup of {@value #THREADS} threads per dense row (b, h, s), thread t column t. Rows s >=
     * n_b get O = 0, lse = -inf; the others lse = log sum_i exp(lse_i), O = sum_i exp(lse_i - lse) O_i over the splits
     * (-inf splits weigh 0 and their O is not read). O goes through the fp32 region of {@code ws} after the partials
     * ([B, Hq, Sq, D]) to reach fp16 (see the class comment).
     */
    public static void decodeCombine(KernelContext kc, FloatArray ws, IntArray step, IntArray params, HalfFloatArray o,
                                     FloatArray lse) {
        int t = kc.localIdx;
        int batch = params.get(P_B);
        int hq = params.get(P_HQ);
        int d = params.get(P_D);
        int sq = params.get(P_SQ);
        int splits = params.get(P_SPLITS);
        int row = kc.groupIdx;
        int s = row % sq;
        int h = (row / sq) % hq;
        int b = row / (sq * hq);
        int rows = batch * hq * sq;
        int lseBase = splits * rows * d;
        int outBase = lseBase + splits * rows;
        boolean present = s < step.get(batch + b);
        float lmax = Float.NEGATIVE_INFINITY;
        for (int i = 0; i < splits; i++) {
            lmax = Math.max(lmax, ws.get(lseBase + i * rows + row));
        }
        float x = 0.0f;
        float wsum = 0.0f;
        if (present) {
            // No test of lmax against -inf: on the GPU max.f32 skips a NaN lse, which must still reach O and lse.
            for (int i = 0; i < splits; i++) {
                float li = ws.get(lseBase + i * rows + row);
                if (li != Float.NEGATIVE_INFINITY) {
                    float w = TornadoMath.exp(li - lmax);
                    wsum += w;
                    if (t < d) {
                        x += w * ws.get((i * rows + row) * d + t);
                    }
                }
            }
        }
        float inverse = wsum == 0.0f ? 0.0f : 1.0f / wsum;
        if (t < d) {
            ws.set(outBase + row * d + t, x * inverse);
        }
        kc.localBarrier();
        // Column (t + 1) % D, stored by another thread: the value is loaded, so TornadoVM converts it to fp16.
        if (t < d) {
            int col = (t + 1) % d;
            int at = b * params.get(P_Q_STRIDE) + h * params.get(P_Q_STRIDE + 1) + s * params.get(P_Q_STRIDE + 2) + col;
            o.set(at, new HalfFloat(ws.get(outBase + row * d + col)));
        }
        if (t == 0 && params.get(P_WRITE_LSE) == 1) {
            lse.set(row, wsum == 0.0f ? Float.NEGATIVE_INFINITY : lmax + TornadoMath.log(wsum));
        }
    }

    /**
     * Packed (varlen) prefill over the cache: workgroup g = tile * Hq + h, {@value #ROWS} packed query rows [16 tile,
     * 16 tile + 16) of query head h. q and o [maxTotalQueries, Hq, D], lse [Hq, maxTotalQueries]; row r of slot b
     * (offsets[b] <= r < offsets[b] + n_b) is query r - offsets[b]. A tile that spans several prompts runs one pass per
     * prompt (rows of other prompts masked). Rows past the step's total are not written. O reaches fp16 through
     * {@code ws} [maxTotalQueries, Hq, D] fp32.
     */
    public static void prefill(KernelContext kc, HalfFloatArray q, HalfFloatArray kCache, HalfFloatArray vCache,
                               IntArray step, IntArray blockTable, IntArray params, FloatArray ws, HalfFloatArray o,
                               FloatArray lse, float scale) {
        float[] qs = kc.allocateFloatLocalArray(2064);  // ROWS x (MAX_D + 1)
        float[] ks = kc.allocateFloatLocalArray(4128);  // BC x (MAX_D + 1)
        float[] vs = kc.allocateFloatLocalArray(4096);  // BC x MAX_D
        float[] ps = kc.allocateFloatLocalArray(528);   // ROWS x (BC + 1)
        float[] red = kc.allocateFloatLocalArray(128);  // one value per thread
        int[] keyAt = kc.allocateIntLocalArray(64);     // [0, BC): element index of the tile's key rows; [BC, 2 BC): 1 if the key is in range
        // The row's columns tq + 8 c are a0 .. a15: scalars, so that they live in registers (a private array went to
        // the stack, one local load and store per multiply-add).

        int t = kc.localIdx;
        int r = t / 8;
        int tq = t % 8;
        int batch = params.get(P_B);
        int hq = params.get(P_HQ);
        int hkv = params.get(P_HKV);
        int d = params.get(P_D);
        int maxTotal = params.get(P_MAX_TOTAL);
        int causal = params.get(P_CAUSAL);
        int h = kc.groupIdx % hq;
        int kvh = h / (hq / hkv);
        int r0 = (kc.groupIdx / hq) * 16;
        int total = step.get(3 * batch);
        if (r0 < total) {
            int rowEnd = Math.min(r0 + 16, total);
            int dl = t % d;
            int rowStep = 128 / d;
            for (int rr = t / d; rr < 16; rr += rowStep) {
                boolean ok = r0 + rr < rowEnd;
                float x = q.get((ok ? r0 + rr : r0) * hq * d + h * d + dl).getFloat32();
                qs[rr * 129 + dl] = ok ? x : 0.0f;
            }
            int csb = params.get(P_CACHE_STRIDE);
            int csh = params.get(P_CACHE_STRIDE + 1);
            int csr = params.get(P_CACHE_STRIDE + 2);
            int pageSize = params.get(P_PAGE_SIZE);
            int pagesPerSeq = params.get(P_PAGES_PER_SEQ);
            int pr = r0 + r;
            boolean writeLse = params.get(P_WRITE_LSE) == 1;

            // One pass per prompt that has rows in this tile, from the last slot whose offset is <= r0.
            for (int b = slotOfRow(step, batch, r0); b < batch && step.get(2 * batch + b) < rowEnd; b++) {
                int n = step.get(batch + b);
                int length = step.get(b);
                int off = step.get(2 * batch + b);
                boolean mine = pr >= off && pr < off + n && pr < rowEnd;
                int rowLimit = !mine ? -1 : causal == 1 ? Math.min(length - 1, length - n + pr - off) : length - 1;
                int lastRow = Math.min(rowEnd, off + n) - 1 - off;   // the prompt's last query in this tile
                int keyEnd = causal == 1 ? Math.min(length, length - n + lastRow + 1) : length;
                float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f, a7 = 0.0f;
                float a8 = 0.0f, a9 = 0.0f, a10 = 0.0f, a11 = 0.0f, a12 = 0.0f, a13 = 0.0f, a14 = 0.0f, a15 = 0.0f;
                float runningMax = Float.NEGATIVE_INFINITY;
                float partialSum = 0.0f;
                for (int j0 = 0; j0 < keyEnd; j0 += 32) {
                    if (t < 32) {
                        int key = j0 + t;
                        boolean inRange = key < keyEnd;
                        keyAt[t] = keyRow(blockTable, b, kvh, inRange ? key : j0, csb, csh, csr, pageSize, pagesPerSeq);
                        keyAt[32 + t] = inRange ? 1 : 0;
                    }
                    kc.localBarrier();
                    for (int jj = t / d; jj < 32; jj += 4 * rowStep) {
                        int at0 = keyAt[jj] + dl;
                        int at1 = keyAt[jj + rowStep] + dl;
                        int at2 = keyAt[jj + 2 * rowStep] + dl;
                        int at3 = keyAt[jj + 3 * rowStep] + dl;
                        float x0 = kCache.get(at0).getFloat32();
                        float x1 = kCache.get(at1).getFloat32();
                        float x2 = kCache.get(at2).getFloat32();
                        float x3 = kCache.get(at3).getFloat32();
                        float y0 = vCache.get(at0).getFloat32();
                        float y1 = vCache.get(at1).getFloat32();
                        float y2 = vCache.get(at2).getFloat32();
                        float y3 = vCache.get(at3).getFloat32();
                        ks[jj * 129 + dl] = x0;
                        ks[(jj + rowStep) * 129 + dl] = x1;
                        ks[(jj + 2 * rowStep) * 129 + dl] = x2;
                        ks[(jj + 3 * rowStep) * 129 + dl] = x3;
                        vs[jj * 128 + dl] = keyAt[32 + jj] == 1 ? y0 : 0.0f;
                        vs[(jj + rowStep) * 128 + dl] = keyAt[32 + jj + rowStep] == 1 ? y1 : 0.0f;
                        vs[(jj + 2 * rowStep) * 128 + dl] = keyAt[32 + jj + 2 * rowStep] == 1 ? y2 : 0.0f;
                        vs[(jj + 3 * rowStep) * 128 + dl] = keyAt[32 + jj + 3 * rowStep] == 1 ? y3 : 0.0f;
                    }
                    kc.localBarrier();

                    float s0 = 0.0f;
                    float s1 = 0.0f;
                    float s2 = 0.0f;
                    float s3 = 0.0f;
                    if (rowLimit >= j0) {
                        for (int e = 0; e < d; e++) {
                            float qe = qs[r * 129 + e];
                            s0 += qe * ks[tq * 129 + e];
                            s1 += qe * ks[(tq + 8) * 129 + e];
                            s2 += qe * ks[(tq + 16) * 129 + e];
                            s3 += qe * ks[(tq + 24) * 129 + e];
                        }
                    }
                    int last = Math.min(rowLimit, keyEnd - 1);
                    float z0 = j0 + tq <= last ? s0 * scale : Float.NEGATIVE_INFINITY;
                    float z1 = j0 + tq + 8 <= last ? s1 * scale : Float.NEGATIVE_INFINITY;
                    float z2 = j0 + tq + 16 <= last ? s2 * scale : Float.NEGATIVE_INFINITY;
                    float z3 = j0 + tq + 24 <= last ? s3 * scale : Float.NEGATIVE_INFINITY;
                    float tileMax = Math.max(Math.max(z0, z1), Math.max(z2, z3));
                    red[t] = tileMax;
                    kc.localBarrier();
                    for (int i = 0; i < 8; i++) {
                        tileMax = Math.max(tileMax, red[r * 8 + i]);
                    }
                    float newMax = Math.max(runningMax, tileMax);
                    float alpha = newMax == Float.NEGATIVE_INFINITY ? 1.0f : TornadoMath.exp(runningMax - newMax);
                    float p0 = z0 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(z0 - newMax);
                    float p1 = z1 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(z1 - newMax);
                    float p2 = z2 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(z2 - newMax);
                    float p3 = z3 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(z3 - newMax);
                    ps[r * 33 + tq] = p0;
                    ps[r * 33 + tq + 8] = p1;
                    ps[r * 33 + tq + 16] = p2;
                    ps[r * 33 + tq + 24] = p3;
                    partialSum = partialSum * alpha + (p0 + p1 + p2 + p3);
                    runningMax = newMax;
                    kc.localBarrier();
                    if (rowLimit >= j0) {
                        a0 *= alpha; a1 *= alpha; a2 *= alpha; a3 *= alpha; a4 *= alpha; a5 *= alpha; a6 *= alpha; a7 *= alpha;
                        a8 *= alpha; a9 *= alpha; a10 *= alpha; a11 *= alpha; a12 *= alpha; a13 *= alpha; a14 *= alpha; a15 *= alpha;
                        for (int jj = 0; jj < 32; jj++) {
                            float p = ps[r * 33 + jj];
                            int vb = jj * 128 + tq;
                            a0 += p * vs[vb + 0]; a1 += p * vs[vb + 8]; a2 += p * vs[vb + 16]; a3 += p * vs[vb + 24];
                            a4 += p * vs[vb + 32]; a5 += p * vs[vb + 40]; a6 += p * vs[vb + 48]; a7 += p * vs[vb + 56];
                            a8 += p * vs[vb + 64]; a9 += p * vs[vb + 72]; a10 += p * vs[vb + 80]; a11 += p * vs[vb + 88];
                            a12 += p * vs[vb + 96]; a13 += p * vs[vb + 104]; a14 += p * vs[vb + 112]; a15 += p * vs[vb + 120];
                        }
                    }
                }
                red[t] = partialSum;
                kc.localBarrier();
                float rowSum = 0.0f;
                for (int i = 0; i < 8; i++) {
                    rowSum += red[r * 8 + i];
                }
                if (mine) {
                    float inverse = rowSum == 0.0f ? 0.0f : 1.0f / rowSum;
                    int ob = (pr * hq + h) * d + tq;
                    int room = d - tq;   // columns tq + 8 c < d
                    put(ws, ob + 0, 0 < room, a0 * inverse);
                    put(ws, ob + 8, 8 < room, a1 * inverse);
                    put(ws, ob + 16, 16 < room, a2 * inverse);
                    put(ws, ob + 24, 24 < room, a3 * inverse);
                    put(ws, ob + 32, 32 < room, a4 * inverse);
                    put(ws, ob + 40, 40 < room, a5 * inverse);
                    put(ws, ob + 48, 48 < room, a6 * inverse);
                    put(ws, ob + 56, 56 < room, a7 * inverse);
                    put(ws, ob + 64, 64 < room, a8 * inverse);
                    put(ws, ob + 72, 72 < room, a9 * inverse);
                    put(ws, ob + 80, 80 < room, a10 * inverse);
                    put(ws, ob + 88, 88 < room, a11 * inverse);
                    put(ws, ob + 96, 96 < room, a12 * inverse);
                    put(ws, ob + 104, 104 < room, a13 * inverse);
                    put(ws, ob + 112, 112 < room, a14 * inverse);
                    put(ws, ob + 120, 120 < room, a15 * inverse);
                    if (tq == 0 && writeLse) {
                        lse.set(h * maxTotal + pr,
                                rowSum == 0.0f ? Float.NEGATIVE_INFINITY : runningMax + TornadoMath.log(rowSum));
                    }
                }
                kc.localBarrier();   // red is read before the next pass writes it
            }
            // fp16 O of the tile's rows, each element converted by a thread other than the one that stored it.
            for (int rr = t / d; rr < 16; rr += rowStep) {
                if (r0 + rr < rowEnd) {
                    int at = ((r0 + rr) * hq + h) * d + dl;
                    o.set(at, new HalfFloat(ws.get(at)));
                }
            }
        }
    }

    /**
     * Append (kv_cache_append semantics): workgroup g of {@value #APPEND_THREADS} threads copies {@value #APPEND_ROWS}
     * tokens of one KV head. Dense: g = (b * Hkv + h) * chunks + chunk, token j = 8 chunk + rr < n_b of slot b from
     * new + b nsb + h nsh + j nsr. Packed: g = h * chunks + chunk, packed row 8 chunk + rr < total, of the slot whose
     * offsets contain it, from new + row nsr + h nsh (chunks = ceil(B max_new / 8)). Token j of slot b goes to position
     * L_b - n_b + j (through the block table when paged).
     *
     * <p>The first thread also reads one element of each cache into {@code sink}: TornadoVM 5.2.0 drops the upload of
     * an array whose first task in a graph only writes it, so without a read the host's prompt would never reach a
     * device-resident cache (tornado-kernels/README, "Device residency").
     */
    public static void append(KernelContext kc, HalfFloatArray newK, HalfFloatArray newV, HalfFloatArray kCache,
                              HalfFloatArray vCache, IntArray step, IntArray blockTable, IntArray ap, FloatArray sink) {
        int t = kc.localIdx;
        int g = kc.groupIdx;
        int batch = ap.get(A_B);
        int hkv = ap.get(A_HKV);
        int d = ap.get(A_D);
        int packed = ap.get(A_PACKED);
        int nsb = ap.get(A_NEW_STRIDE);
        int nsh = ap.get(A_NEW_STRIDE + 1);
        int nsr = ap.get(A_NEW_STRIDE + 2);
        int csb = ap.get(A_CACHE_STRIDE);
        int csh = ap.get(A_CACHE_STRIDE + 1);
        int csr = ap.get(A_CACHE_STRIDE + 2);
        int pageSize = ap.get(A_PAGE_SIZE);
        int pagesPerSeq = ap.get(A_PAGES_PER_SEQ);
        if (g == 0 && t == 0) {
            sink.set(0, kCache.get(0).getFloat32() + vCache.get(0).getFloat32());
        }
        int total = step.get(3 * batch);
        if (packed == 1) {
            int chunks = (batch * ap.get(A_MAX_NEW) + 7) / 8;
            int h = g / chunks;
            for (int rr = 0; rr < 8; rr++) {
                int row = (g % chunks) * 8 + rr;
                if (row < total) {
                    int b = slotOfRow(step, batch, row);
                    int pos = step.get(b) - step.get(batch + b) + row - step.get(2 * batch + b);
                    int dst = keyRow(blockTable, b, h, pos, csb, csh, csr, pageSize, pagesPerSeq);
                    int src = row * nsr + h * nsh;
                    for (int e = t; e < d; e += 128) {
                        kCache.set(dst + e, newK.get(src + e));
                        vCache.set(dst + e, newV.get(src + e));
                    }
                }
            }
        } else {
            int chunks = (ap.get(A_MAX_NEW) + 7) / 8;
            int h = (g / chunks) % hkv;
            int b = g / (chunks * hkv);
            int n = step.get(batch + b);
            for (int rr = 0; rr < 8; rr++) {
                int j = (g % chunks) * 8 + rr;
                if (j < n) {
                    int dst = keyRow(blockTable, b, h, step.get(b) - n + j, csb, csh, csr, pageSize, pagesPerSeq);
                    int src = b * nsb + h * nsh + j * nsr;
                    for (int e = t; e < d; e += 128) {
                        kCache.set(dst + e, newK.get(src + e));
                        vCache.set(dst + e, newV.get(src + e));
                    }
                }
            }
        }
    }

    /**
     * copies[0] = n, then n triples (src, dst, count) of element ranges, each copied within kCache and within vCache
     * (copy-on-write of shared pages). Grid-stride over each range; ranges must not overlap one another's
     * destinations (all copies run at once).
     */
    public static void copyRanges(KernelContext kc, HalfFloatArray kCache, HalfFloatArray vCache, IntArray copies) {
        int n = copies.get(0);
        int stride = kc.globalGroupSizeX;
        for (int i = 0; i < n; i++) {
            int src = copies.get(1 + 3 * i);
            int dst = copies.get(2 + 3 * i);
            int count = copies.get(3 + 3 * i);
            for (int e = kc.globalIdx; e < count; e += stride) {
                kCache.set(dst + e, kCache.get(src + e));
                vCache.set(dst + e, vCache.get(src + e));
            }
        }
    }

    /** ws[at] = value where {@code inside} (a column past D is not stored). */
    static void put(FloatArray ws, int at, boolean inside, float value) {
        if (inside) {
            ws.set(at, value);
        }
    }

    /** Keys per split for a slot of {@code length} keys: ceil(length / splits) rounded up to a whole K/V tile. */
    static int keysPerSplit(int length, int splits) {
        int perSplit = (length + splits - 1) / splits;
        return (perSplit + 31) / 32 * 32;
    }

    /** Element index of row {@code pos} of (slot b, kv head h): contiguous, or through the block table when paged. */
    static int keyRow(IntArray blockTable, int b, int h, int pos, int csb, int csh, int csr, int pageSize,
                      int pagesPerSeq) {
        int result;
        if (pageSize > 0) {
            int page = blockTable.get(b * pagesPerSeq + pos / pageSize);
            result = page * csb + h * csh + (pos % pageSize) * csr;
        } else {
            result = b * csb + h * csh + pos * csr;
        }
        return result;
    }

    /** The last slot whose packed offset is <= row (binary search; for row < total that slot holds the row). */
    static int slotOfRow(IntArray step, int batch, int row) {
        int lo = 0;
        int hi = batch - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (step.get(2 * batch + mid) <= row) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        return lo;
    }
}
