package io.github.tornadoattention.tornado;

import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.math.TornadoMath;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;

/**
 * tornado-simt: FlashAttention-2 forward as a KernelContext kernel with scalar fp32 arithmetic.
 *
 * <p>One workgroup per (query tile of Br rows, batch x head). The Q tile is loaded once into local
 * memory; the workgroup then walks the K/V tiles, staging each in local memory where all its threads
 * read it. {@code threadsPerRow} threads share a query row: each computes Bc / threadsPerRow scores and
 * owns maxHeadDim / threadsPerRow output columns, kept in registers. Online softmax in fp32: running
 * max and sum per row, the accumulator rescaled when the max grows. Causal tiles above the diagonal are
 * never visited. Q, K, V are read as fp16 ({@link HalfFloatArray}); O is written as fp16 bits into a
 * {@link ShortArray} over the same bytes (TornadoVM's PTX backend converts a computed float to fp16
 * only on a path this kernel cannot use, see {@link Fp16#bits}); logsumexp is fp32.
 *
 * <p>The two entry points are the same kernel with the constants of their {@link SimtTileConfig}, which
 * size the local and private arrays (TornadoVM needs them as compile-time constants). Local arrays are
 * only touched in the entry methods themselves: TornadoVM addresses a local array correctly only where
 * the access sees the allocation directly, not through a helper method's parameter.
 */
public final class SimtKernels {
    private SimtKernels() {
    }

    /** {@link SimtTileConfig#UP_TO_64}: Br = 32, Bc = 32, 8 threads per row, 256 threads, D <= 64. */
    public static void attentionUpTo64(KernelContext kc, HalfFloatArray q, HalfFloatArray k, HalfFloatArray v,
                                       ShortArray o, FloatArray lse, int batch, int queryHeads, int kvHeads,
                                       int queryLength, int kvLength, int headDim, int causal, int bshd, float scale) {
        final int maxD = 64;
        final int bq = 32;
        final int bkv = 32;
        final int tpr = 8;                   // threads per query row
        final int threads = 256;
        float[] qs = kc.allocateFloatLocalArray(2080);  // Br x (maxD + 1): padded rows, no bank conflicts
        float[] ks = kc.allocateFloatLocalArray(2080);  // Bc x (maxD + 1)
        float[] vs = kc.allocateFloatLocalArray(2048);  // Bc x maxD
        float[] ps = kc.allocateFloatLocalArray(1056);  // Br x (Bc + 1)
        float[] red = kc.allocateFloatLocalArray(256);  // one value per thread
        float[] acc = new float[8];                  // this thread's output columns: tq, tq + tpr, ...

        int t = kc.localIdx;
        int r = t / tpr;                           // the query row of the tile this thread works on
        int tq = t % tpr;                          // its place among the row's threads
        int heads = batch * queryHeads;
        int queryTiles = (queryLength + bq - 1) / bq;
        int bh = kc.groupIdx % heads;
        int q0 = (queryTiles - 1 - kc.groupIdx / heads) * bq;   // late (causal: heavy) query tiles first
        int b = bh / queryHeads;
        int h = bh % queryHeads;
        int hkv = h / (queryHeads / kvHeads);
        // Element strides of the two layouts: BHSD [b][h][s][d], BSHD [b][s][h][d].
        int qRow = bshd == 1 ? queryHeads * headDim : headDim;
        int qBase = bshd == 1 ? b * queryLength * queryHeads * headDim + h * headDim : (b * queryHeads + h) * queryLength * headDim;
        int kvRow = bshd == 1 ? kvHeads * headDim : headDim;
        int kvBase = bshd == 1 ? b * kvLength * kvHeads * headDim + hkv * headDim : (b * kvHeads + hkv) * kvLength * headDim;
        int offset = kvLength - queryLength;     // bottom-right causal: key j visible to query i iff j <= i + offset
        int rowLimit = causal == 1 ? Math.min(kvLength - 1, q0 + r + offset) : kvLength - 1;
        int lastKey = causal == 1 ? Math.min(kvLength - 1, q0 + bq - 1 + offset) : kvLength - 1;
        int kvTiles = lastKey < 0 ? 0 : lastKey / bkv + 1;      // tiles above the diagonal are never visited

        // The Q tile, once, to fp32 local memory; rows past the end are zeros.
        // Branch-free bounds (load a row that exists, scale by 1 or 0): TornadoVM's PTX backend mis-emits an
        // if whose condition folds to a constant, which the shape specialisation makes common.
        for (int e = t; e < bq * headDim; e += threads) {
            int rr = e / headDim;
            int d = e % headDim;
            float keep = (float) (((q0 + rr - queryLength) >> 31) & 1);
            qs[rr * (maxD + 1) + d] = keep * q.get(qBase + Math.min(q0 + rr, queryLength - 1) * qRow + d).getFloat32();
        }
        for (int c = 0; c < 8; c++) {
            acc[c] = 0.0f;
        }
        float runningMax = Float.NEGATIVE_INFINITY;
        float partialSum = 0.0f;               // this thread's share of the row sum

        for (int kvt = 0; kvt < kvTiles; kvt++) {
            int j0 = kvt * bkv;
            kc.localBarrier();   // everyone is done with the previous K/V tile (and qs is complete)
            // K and V tiles to fp32 local memory, consecutive threads on consecutive elements.
            for (int e = t; e < bkv * headDim; e += threads) {
                int jj = e / headDim;
                int d = e % headDim;
                int at = kvBase + Math.min(j0 + jj, kvLength - 1) * kvRow + d;
                float keep = (float) (((j0 + jj - kvLength) >> 31) & 1);
                ks[jj * (maxD + 1) + d] = keep * k.get(at).getFloat32();
                vs[jj * maxD + d] = keep * v.get(at).getFloat32();
            }
            kc.localBarrier();

            // This thread's 4 score(s): keys tq, tq + tpr, tq + 2 tpr, tq + 3 tpr; each Q value read once.
            int qi = r * (maxD + 1);
            int k0 = tq * (maxD + 1);
            float s0 = 0.0f;
            int k1 = (tq + 1 * tpr) * (maxD + 1);
            float s1 = 0.0f;
            int k2 = (tq + 2 * tpr) * (maxD + 1);
            float s2 = 0.0f;
            int k3 = (tq + 3 * tpr) * (maxD + 1);
            float s3 = 0.0f;
            for (int d = 0; d < headDim; d++) {
                float qd = qs[qi + d];
                s0 += qd * ks[k0 + d];
                s1 += qd * ks[k1 + d];
                s2 += qd * ks[k2 + d];
                s3 += qd * ks[k3 + d];
            }
            float tileMax = Float.NEGATIVE_INFINITY;
            float x0 = j0 + tq <= rowLimit ? s0 * scale : Float.NEGATIVE_INFINITY;
            tileMax = Math.max(tileMax, x0);
            float x1 = j0 + tq + tpr <= rowLimit ? s1 * scale : Float.NEGATIVE_INFINITY;
            tileMax = Math.max(tileMax, x1);
            float x2 = j0 + tq + 2 * tpr <= rowLimit ? s2 * scale : Float.NEGATIVE_INFINITY;
            tileMax = Math.max(tileMax, x2);
            float x3 = j0 + tq + 3 * tpr <= rowLimit ? s3 * scale : Float.NEGATIVE_INFINITY;
            tileMax = Math.max(tileMax, x3);
            red[t] = tileMax;
            kc.localBarrier();
            for (int i = 0; i < tpr; i++) {
                tileMax = Math.max(tileMax, red[r * tpr + i]);
            }

            // Online softmax: new running max, rescale what was accumulated, P of this tile.
            float newMax = Math.max(runningMax, tileMax);
            float alpha = newMax == Float.NEGATIVE_INFINITY ? 1.0f : TornadoMath.exp(runningMax - newMax);
            float p0 = x0 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(x0 - newMax);
            ps[r * (bkv + 1) + tq] = p0;
            float p1 = x1 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(x1 - newMax);
            ps[r * (bkv + 1) + tq + tpr] = p1;
            float p2 = x2 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(x2 - newMax);
            ps[r * (bkv + 1) + tq + 2 * tpr] = p2;
            float p3 = x3 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(x3 - newMax);
            ps[r * (bkv + 1) + tq + 3 * tpr] = p3;
            float tileSum = p0 + p1 + p2 + p3;
            partialSum = partialSum * alpha + tileSum;
            for (int c = 0; c < 8; c++) {
                acc[c] = acc[c] * alpha;
            }
            runningMax = newMax;
            kc.localBarrier();   // P complete, red free again

            // acc[c] += sum over the tile's keys of P[row][key] V[key][tq + c tpr]
            for (int jj = 0; jj < bkv; jj++) {
                float p = ps[r * (bkv + 1) + jj];
                for (int c = 0; c < 8; c++) {
                    acc[c] += p * vs[jj * maxD + tq + c * tpr];
                }
            }
        }

        // O = acc / l as fp16, l the sum of the row's partial sums; a row that sees no key (l = 0) gives O = 0 and
        // logsumexp = -infinity. A NaN score (a NaN or infinity in the row's Q or a K it sees) makes l NaN, and O
        // and logsumexp stay NaN, as in the CPU reference. (Tests on l == 0 rather than l > 0 for that: a comparison
        // with NaN is false.)
        red[t] = partialSum;
        kc.localBarrier();
        float rowSum = 0.0f;
        for (int i = 0; i < tpr; i++) {
            rowSum += red[r * tpr + i];
        }
        if (q0 + r < queryLength) {
            float inverse = rowSum == 0.0f ? 0.0f : 1.0f / rowSum;
            for (int c = 0; c < 8; c++) {
                int d = tq + c * tpr;
                if (d < headDim) {
                    o.set(qBase + (q0 + r) * qRow + d, (short) Fp16.bits(acc[c] * inverse));
                }
            }
            if (tq == 0) {
                lse.set((b * queryHeads + h) * queryLength + q0 + r,
                        rowSum == 0.0f ? Float.NEGATIVE_INFINITY : runningMax + TornadoMath.log(rowSum));
            }
        }
    }

    /** {@link SimtTileConfig#UP_TO_128}: Br = 16, Bc = 16, 16 threads per row, 256 threads, D <= 128. */
    public static void attentionUpTo128(KernelContext kc, HalfFloatArray q, HalfFloatArray k, HalfFloatArray v,
                                       ShortArray o, FloatArray lse, int batch, int queryHeads, int kvHeads,
                                       int queryLength, int kvLength, int headDim, int causal, int bshd, float scale) {
        final int maxD = 128;
        final int bq = 16;
        final int bkv = 16;
        final int tpr = 16;                   // threads per query row
        final int threads = 256;
        float[] qs = kc.allocateFloatLocalArray(2064);  // Br x (maxD + 1): padded rows, no bank conflicts
        float[] ks = kc.allocateFloatLocalArray(2064);  // Bc x (maxD + 1)
        float[] vs = kc.allocateFloatLocalArray(2048);  // Bc x maxD
        float[] ps = kc.allocateFloatLocalArray(272);  // Br x (Bc + 1)
        float[] red = kc.allocateFloatLocalArray(256);  // one value per thread
        float[] acc = new float[8];                  // this thread's output columns: tq, tq + tpr, ...

        int t = kc.localIdx;
        int r = t / tpr;                           // the query row of the tile this thread works on
        int tq = t % tpr;                          // its place among the row's threads
        int heads = batch * queryHeads;
        int queryTiles = (queryLength + bq - 1) / bq;
        int bh = kc.groupIdx % heads;
        int q0 = (queryTiles - 1 - kc.groupIdx / heads) * bq;   // late (causal: heavy) query tiles first
        int b = bh / queryHeads;
        int h = bh % queryHeads;
        int hkv = h / (queryHeads / kvHeads);
        // Element strides of the two layouts: BHSD [b][h][s][d], BSHD [b][s][h][d].
        int qRow = bshd == 1 ? queryHeads * headDim : headDim;
        int qBase = bshd == 1 ? b * queryLength * queryHeads * headDim + h * headDim : (b * queryHeads + h) * queryLength * headDim;
        int kvRow = bshd == 1 ? kvHeads * headDim : headDim;
        int kvBase = bshd == 1 ? b * kvLength * kvHeads * headDim + hkv * headDim : (b * kvHeads + hkv) * kvLength * headDim;
        int offset = kvLength - queryLength;     // bottom-right causal: key j visible to query i iff j <= i + offset
        int rowLimit = causal == 1 ? Math.min(kvLength - 1, q0 + r + offset) : kvLength - 1;
        int lastKey = causal == 1 ? Math.min(kvLength - 1, q0 + bq - 1 + offset) : kvLength - 1;
        int kvTiles = lastKey < 0 ? 0 : lastKey / bkv + 1;      // tiles above the diagonal are never visited

        // The Q tile, once, to fp32 local memory; rows past the end are zeros.
        // Branch-free bounds (load a row that exists, scale by 1 or 0): TornadoVM's PTX backend mis-emits an
        // if whose condition folds to a constant, which the shape specialisation makes common.
        for (int e = t; e < bq * headDim; e += threads) {
            int rr = e / headDim;
            int d = e % headDim;
            float keep = (float) (((q0 + rr - queryLength) >> 31) & 1);
            qs[rr * (maxD + 1) + d] = keep * q.get(qBase + Math.min(q0 + rr, queryLength - 1) * qRow + d).getFloat32();
        }
        for (int c = 0; c < 8; c++) {
            acc[c] = 0.0f;
        }
        float runningMax = Float.NEGATIVE_INFINITY;
        float partialSum = 0.0f;               // this thread's share of the row sum

        for (int kvt = 0; kvt < kvTiles; kvt++) {
            int j0 = kvt * bkv;
            kc.localBarrier();   // everyone is done with the previous K/V tile (and qs is complete)
            // K and V tiles to fp32 local memory, consecutive threads on consecutive elements.
            for (int e = t; e < bkv * headDim; e += threads) {
                int jj = e / headDim;
                int d = e % headDim;
                int at = kvBase + Math.min(j0 + jj, kvLength - 1) * kvRow + d;
                float keep = (float) (((j0 + jj - kvLength) >> 31) & 1);
                ks[jj * (maxD + 1) + d] = keep * k.get(at).getFloat32();
                vs[jj * maxD + d] = keep * v.get(at).getFloat32();
            }
            kc.localBarrier();

            // This thread's 1 score(s): keys tq; each Q value read once.
            int qi = r * (maxD + 1);
            int k0 = tq * (maxD + 1);
            float s0 = 0.0f;
            for (int d = 0; d < headDim; d++) {
                float qd = qs[qi + d];
                s0 += qd * ks[k0 + d];
            }
            float tileMax = Float.NEGATIVE_INFINITY;
            float x0 = j0 + tq <= rowLimit ? s0 * scale : Float.NEGATIVE_INFINITY;
            tileMax = Math.max(tileMax, x0);
            red[t] = tileMax;
            kc.localBarrier();
            for (int i = 0; i < tpr; i++) {
                tileMax = Math.max(tileMax, red[r * tpr + i]);
            }

            // Online softmax: new running max, rescale what was accumulated, P of this tile.
            float newMax = Math.max(runningMax, tileMax);
            float alpha = newMax == Float.NEGATIVE_INFINITY ? 1.0f : TornadoMath.exp(runningMax - newMax);
            float p0 = x0 == Float.NEGATIVE_INFINITY ? 0.0f : TornadoMath.exp(x0 - newMax);
            ps[r * (bkv + 1) + tq] = p0;
            float tileSum = p0;
            partialSum = partialSum * alpha + tileSum;
            for (int c = 0; c < 8; c++) {
                acc[c] = acc[c] * alpha;
            }
            runningMax = newMax;
            kc.localBarrier();   // P complete, red free again

            // acc[c] += sum over the tile's keys of P[row][key] V[key][tq + c tpr]
            for (int jj = 0; jj < bkv; jj++) {
                float p = ps[r * (bkv + 1) + jj];
                for (int c = 0; c < 8; c++) {
                    acc[c] += p * vs[jj * maxD + tq + c * tpr];
                }
            }
        }

        // O = acc / l as fp16, l the sum of the row's partial sums; a row that sees no key (l = 0) gives O = 0 and
        // logsumexp = -infinity. A NaN score (a NaN or infinity in the row's Q or a K it sees) makes l NaN, and O
        // and logsumexp stay NaN, as in the CPU reference. (Tests on l == 0 rather than l > 0 for that: a comparison
        // with NaN is false.)
        red[t] = partialSum;
        kc.localBarrier();
        float rowSum = 0.0f;
        for (int i = 0; i < tpr; i++) {
            rowSum += red[r * tpr + i];
        }
        if (q0 + r < queryLength) {
            float inverse = rowSum == 0.0f ? 0.0f : 1.0f / rowSum;
            for (int c = 0; c < 8; c++) {
                int d = tq + c * tpr;
                if (d < headDim) {
                    o.set(qBase + (q0 + r) * qRow + d, (short) Fp16.bits(acc[c] * inverse));
                }
            }
            if (tq == 0) {
                lse.set((b * queryHeads + h) * queryLength + q0 + r,
                        rowSum == 0.0f ? Float.NEGATIVE_INFINITY : runningMax + TornadoMath.log(rowSum));
            }
        }
    }
}
