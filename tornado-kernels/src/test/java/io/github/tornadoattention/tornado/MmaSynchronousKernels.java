package io.github.tornadoattention.tornado;

import static io.github.tornadoattention.tornado.MmaKernels.HALF_ONE_PAIR;
import static io.github.tornadoattention.tornado.MmaKernels.MAX_EXCESS;
import static io.github.tornadoattention.tornado.MmaKernels.MMA_STORE_SKEW;
import static io.github.tornadoattention.tornado.MmaLayout.aSwizzle;
import static io.github.tornadoattention.tornado.MmaLayout.aTileAt;
import static io.github.tornadoattention.tornado.MmaLayout.kSubTile;
import static io.github.tornadoattention.tornado.MmaLayout.qStageChunk;
import static io.github.tornadoattention.tornado.MmaLayout.qStageQuery;
import static io.github.tornadoattention.tornado.MmaLayout.qSubTile;

import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.enums.MMAShape;
import uk.ac.manchester.tornado.api.math.TornadoMath;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;

/**
 * The synchronous tornado-mma kernels, from which {@link MmaKernels}' pipelined ones were derived: the measured
 * baseline of the pipelining (checked on a GPU: suite + 20 random shapes, 42/42) and, in the
 * tests, the reference of the pipelined kernels' shuffled row max. They compute O = P V: V staged row-major as the B
 * operand ({@link #vSubTile}, rows in P's column order, {@link #valueRow}), P encoded as fp16 bits by hand
 * ({@link #fp16Pow2}, keys g and g + 8 packed into one int of P) as the A operand, O fragment by fragment through the
 * scratch ({@link #outputAt}); they share K's and Q^T's layouts ({@link MmaLayout}), the tile sizes and the scratch of
 * {@link MmaTileConfig}, alternating between its two S^T buffers, and every load and barrier is synchronous (3 per K/V
 * tile). {@code MmaKernelsTest} runs them on the CPU emulator; {@code MmaPlan}'s kernel constructor runs them on a
 * GPU (see {@code TornadoDeviceTest}).
 */
final class MmaSynchronousKernels {
    static final float LOG2E = 1.4426950408889634f;
    static final float LN2 = 0.6931471805599453f;

    private MmaSynchronousKernels() {
    }

    /** The kernel for a head dim (64 or 128), with {@link MmaPlan.Kernel}'s signature. */
    static MmaPlan.Kernel kernel(int headDim) {
        return headDim == 64 ? MmaSynchronousKernels::attentionD64 : MmaSynchronousKernels::attentionD128;
    }

    /** V as B operand: Bc x D fp16, four 256-byte sub-tiles per 1152-byte group: where vSubTile's next key block would start. */
    static int valueTileInts(MmaTileConfig c) {
        return vSubTile(c.blockKv() / 16, 0, c.headDim()) / 4;
    }

    /** P as A operand: Br x Bc fp16. */
    static int probabilityTileInts(MmaTileConfig c) {
        return c.blockQ() * c.blockKv() / 2;
    }

    /** A constant 16x8 B sub-tile of ones: P times it gives the row sums of P. */
    static int constantTileInts() {
        return 64;
    }

    /** Static shared memory of these kernels for configuration {@code c}. */
    static int sharedMemoryBytes(MmaTileConfig c) {
        int ints = c.queryTileInts() + c.keyTileInts() + valueTileInts(c) + probabilityTileInts(c) + constantTileInts() + 4;
        int floats = c.blockQ();
        return 4 * (ints + floats);
    }

    /** The tiles of {@code MmaTileConfig.forHeadDim(64)}: D = 64, Br = 64, Bc = 64, 4 warps (128 threads). */
    public static void attentionD64(KernelContext kc, LongArray q, LongArray k, LongArray v, LongArray o,
                                    FloatArray lse, FloatArray scratch, int batch, int queryHeads, int kvHeads,
                                    int queryLength, int kvLength, int causal, int bshd, float scale, int gridSize,
                                    uk.ac.manchester.tornado.api.types.arrays.IntArray window, FloatArray scores) {
        final int d = 64;
        final int bq = 64;
        final int bkv = 64;
        int[] qT = kc.allocateIntLocalArray(2064);      // D x Br / 2 and padding (qSubTile): Q^T, B operand
        int[] kT = kc.allocateIntLocalArray(2304);      // Bc x D / 2 and padding (kSubTile): K, A operand
        int[] vT = kc.allocateIntLocalArray(2304);      // Bc x D / 2 and padding (vSubTile): V, B operand
        int[] pT = kc.allocateIntLocalArray(2048);      // Br x Bc / 2: P, A operand
        int[] ones = kc.allocateIntLocalArray(64);      // a 16x8 B tile of ones: P times it gives the row sums
        float[] rowMax = kc.allocateFloatLocalArray(64);
        int[] flag = kc.allocateIntLocalArray(4);      // one used; 16 bytes keep every local array 16-byte aligned (ldmatrix)

        int t = kc.localIdx;
        int warp = t >>> 5;
        int lane = t & 31;
        int aSwizzle = aSwizzle(lane);   // this lane's ldmatrix row address in the swizzled A-operand tiles
        if (t < 64) {
            ones[t] = HALF_ONE_PAIR;
        }
        if (t == 0) {
            flag[0] = -1;
        }

        int heads = batch * queryHeads;
        int queryTiles = (queryLength + bq - 1) / bq;
        int tiles = queryTiles * heads;
        int offset = kvLength - queryLength;          // bottom-right causal: key j visible to query i iff j <= i + offset
        int sBase = kc.groupIdx * (2 * bkv * bq + bq * (d + 8));   // this CTA's scratch: S^T (two buffers), O | l
        int oBase = sBase + 2 * bkv * bq;
        int oStore = oBase + MMA_STORE_SKEW;          // O's index for mmaStore (see MMA_STORE_SKEW)
        float scaleLog2 = scale * LOG2E;
        int stamp = 0;

        for (int round = 0; round * gridSize < tiles; round++) {
            // Zig-zag over rounds: a CTA that got a heavy (causal) tile gets a light one next.
            int position = (round & 1) == 0 ? kc.groupIdx : gridSize - 1 - kc.groupIdx;
            int tile = round * gridSize + position;
            if (tile < tiles) {
                int bh = tile % heads;
                int qt = queryTiles - 1 - tile / heads;      // late (heavy) query tiles first
                int b = bh / queryHeads;
                int h = bh % queryHeads;
                int hkv = h / (queryHeads / kvHeads);
                int q0 = qt * bq;
                int qRow = bshd == 1 ? queryHeads * d : d;
                int qBase = bshd == 1 ? b * queryLength * queryHeads * d + h * d : (b * queryHeads + h) * queryLength * d;
                int kvRow = bshd == 1 ? kvHeads * d : d;
                int kvBase = bshd == 1 ? b * kvLength * kvHeads * d + hkv * d : (b * kvHeads + hkv) * kvLength * d;
                int lastKey = causal == 1 ? Math.min(kvLength - 1, q0 + bq - 1 + offset) : kvLength - 1;
                int kvTiles = lastKey < 0 ? 0 : lastKey / bkv + 1;   // tiles above the diagonal are never visited

                kc.localBarrier();   // the previous tile's readers of local memory and scratch are done

                // Q^T into B-operand sub-tiles (16 d-rows x 8 queries, 256 bytes, sub-tile (d / 16, query / 8)):
                // the values of two queries for one d share an int. Rows past the end are zeros.
                for (int i = 0; i < (bq / 2) * (d / 4) / 128; i++) {
                    int it = t + 128 * i;
                    int qa = qStageQuery(it);          // even query of the pair
                    int dq = qStageChunk(it);          // d = 4 dq .. 4 dq + 3
                    // Branch-free bounds: load a row that exists, keep it only where the row is real (keep is
                    // 1 or 0, and multiplies). TornadoVM's PTX backend mis-emits an if whose condition folds to
                    // a constant (the branch tests an unset predicate), which the shape specialisation makes
                    // common. Not a sign bit taken by a shift: TornadoVM's PTX backend emits >> as the logical
                    // shr.b32 (x >> 31 is 1 for a negative x: that mask kept only bit 0 of Q, K and V), its CUDA
                    // backend emits >>> as C's >> on an int (x >>> 31 is -1 there). A compare and select of 1 or 0
                    // means the same in Java and on both; see the class comment.
                    int ra = q0 + qa;
                    long la = q.get((qBase + Math.min(ra, queryLength - 1) * qRow + 4 * dq) >>> 2) * (ra < queryLength ? 1L : 0L);
                    long lb = q.get((qBase + Math.min(ra + 1, queryLength - 1) * qRow + 4 * dq) >>> 2) * (ra + 1 < queryLength ? 1L : 0L);
                    int at = qSubTile(dq >>> 2, qa >>> 3, bq) / 4 + 16 * (dq & 3) + ((qa & 7) >>> 1);
                    qT[at] = (int) (la & 0xFFFF) | ((int) (lb & 0xFFFF) << 16);
                    qT[at + 4] = (int) ((la >>> 16) & 0xFFFF) | ((int) ((lb >>> 16) & 0xFFFF) << 16);
                    qT[at + 8] = (int) ((la >>> 32) & 0xFFFF) | ((int) ((lb >>> 32) & 0xFFFF) << 16);
                    qT[at + 12] = (int) ((la >>> 48) & 0xFFFF) | ((int) ((lb >>> 48) & 0xFFFF) << 16);
                }
                if (t < bq) {
                    rowMax[t] = Float.NEGATIVE_INFINITY;
                }

                // Fragments live only inside one sweep (declared in its body, stored at its end): TornadoVM
                // mistypes a fragment carried through an if/else merge or from one loop's phi into another's.
                // (Loops keep their condition at the top: TornadoVM's PTX block scheduler needs it there.)
                int attempts = 1;
                for (int attempt = 0; attempt < attempts; attempt++) {
                    stamp++;
                    for (int sweep = attempt == 1 ? 0 : 1; sweep < 2; sweep++) {
                        // Sweep 0 only when a score exceeded its row's reference max (attempt 1): every row's
                        // exact max first. Sweep 1 accumulates O and l.
                        float[] o0 = kc.mmaFragment(0.0f);
                        float[] o1 = kc.mmaFragment(0.0f);
                        float[] o2 = kc.mmaFragment(0.0f);
                        float[] o3 = kc.mmaFragment(0.0f);
                        float[] o4 = kc.mmaFragment(0.0f);
                        float[] o5 = kc.mmaFragment(0.0f);
                        float[] o6 = kc.mmaFragment(0.0f);
                        float[] o7 = kc.mmaFragment(0.0f);
                        float[] rowSum = kc.mmaFragment(0.0f);
                        float excess = Float.NEGATIVE_INFINITY;   // largest z of this sweep (log2 units)
                        for (int kvt = 0; kvt < kvTiles; kvt++) {
                            int j0 = kvt * bkv;
                            // aSwizzle, but not loop-invariant to Graal (j0 >>> 31 is 0): hoisted, each mmaLoadA's offset would hold a register.
                            int aRow = aSwizzle + (j0 >>> 31);
                            // S^T alternates between the scratch's two Bc x Br regions: the addresses then depend on
                            // kvt, so Graal does not hoist all 2 Bc / 8 of this lane's 64-bit read addresses out of the
                            // loop (which kept them live in registers: 255 registers and spills at D = 64).
                            int sTile = sBase + (kvt & 1) * (bkv * bq);
                            kc.localBarrier();

                            // K into A-operand sub-tiles (16 keys x 16 d, sub-tile (key / 16, d / 16)) and V into
                            // B-operand sub-tiles (16 keys x 8 d, sub-tile (key / 16, d / 8)), 64 bits at a time.
                            // Consecutive threads take four consecutive words of 8 rows: 32-byte sectors fully used,
                            // at most 2-way bank conflicts. Keys past the end are zeros (0 * garbage could be NaN).
                            for (int it = t; it < bkv * (d / 4); it += 128) {
                                int dqL = it & 3;
                                int jj = (it >>> 2) & 15;
                                int dqH = (it >>> 6) % (d / 16);
                                int kb = (it >>> 6) / (d / 16);
                                int row = j0 + kb * 16 + jj;
                                int at = (kvBase + Math.min(row, kvLength - 1) * kvRow + 16 * dqH + 4 * dqL) >>> 2;
                                long keep = row < kvLength ? 1L : 0L;     // 1 for a real key, 0 past the end (not a shift: see Q^T)
                                long lk = k.get(at) * keep;
                                long lv = v.get(at) * keep;
                                int kAt = kSubTile(kb, dqH, d) / 4 + aTileAt(jj, 2 * dqL);
                                kT[kAt] = (int) lk;
                                kT[kAt + 1] = (int) (lk >>> 32);
                                int vAt = vSubTile(kb, 2 * dqH + (dqL >>> 1), d) / 4 + valueRow(jj) * 4 + 2 * (dqL & 1);
                                vT[vAt] = (int) lv;
                                vT[vAt + 1] = (int) (lv >>> 32);
                            }
                            kc.localBarrier();

                            // S^T = K Q^T into the scratch (Bc key rows x Br query columns, stride Br). Warp w computes the
                            // columns of its own query rows [16 w, 16 w + 16) for all Bc keys, so that each lane turns the S
                            // values it stored itself into P below, and only the warp's own rows of P are read by its P V.
                            for (int kb = 0; kb < 4; kb++) {
                                HalfFloat[] a0 = kc.mmaLoadA(kT, 16, kSubTile(kb, 0, d) + aRow);
                                HalfFloat[] a1 = kc.mmaLoadA(kT, 16, kSubTile(kb, 1, d) + aRow);
                                HalfFloat[] a2 = kc.mmaLoadA(kT, 16, kSubTile(kb, 2, d) + aRow);
                                HalfFloat[] a3 = kc.mmaLoadA(kT, 16, kSubTile(kb, 3, d) + aRow);
                                for (int nb = 0; nb < 2; nb++) {
                                    int qn = warp * 2 + nb;
                                    float[] s = kc.mmaFragment(0.0f);
                                    s = kc.mma(a0, kc.mmaLoadB(qT, 16, qSubTile(0, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a1, kc.mmaLoadB(qT, 16, qSubTile(1, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a2, kc.mmaLoadB(qT, 16, qSubTile(2, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a3, kc.mmaLoadB(qT, 16, qSubTile(3, qn, bq)), s, MMAShape.M16N8K16);
                                    kc.mmaStore(s, scratch, kb * 16, sTile + MMA_STORE_SKEW + qn * 8, bq);
                                }
                            }

                            if (sweep == 0 || kvt == 0 && attempt == 0) {
                                kc.localBarrier();   // S^T complete in the scratch
                                // One thread per row: fold this tile's max over visible scores into rowMax (the
                                // reference max is the first tile's on attempt 0, the exact max on attempt 1).
                                if (t < bq) {
                                    int limit = causal == 1 ? Math.min(kvLength - 1, q0 + t + offset) : kvLength - 1;
                                    float tileMax = Float.NEGATIVE_INFINITY;
                                    for (int jl = 0; jl < bkv; jl++) {
                                        if (j0 + jl <= limit) {
                                            tileMax = Math.max(tileMax, scratch.get(sTile + jl * bq + t) * scale);
                                        }
                                    }
                                    rowMax[t] = Math.max(rowMax[t], tileMax);
                                }
                                kc.localBarrier();
                            }

                            // P = 2^z, z = (scale s - m) log2(e), as fp16 bits into the warp's A-operand sub-tiles (16 queries
                            // x 16 keys). Lane (g = lane / 4, c = 2 (lane % 4)) stored S^T rows g and g + 8 of every key block
                            // at query columns c, c + 1 of the warp's two 8-query blocks; it reads its own values back (same
                            // thread: no barrier) and packs keys g and g + 8 of a row into one int. So within each 16-key block
                            // P's column 2 g + e holds key g + 8 e, and V is staged with its rows in that order (above). Masked
                            // keys get z = -1e30 (P = 0) branch-free; excess tracks the largest z for the recompute check.
                            int g = lane >>> 2;
                            int kbEnd = 4 + (j0 >>> 31);   // 4, but not a constant to Graal: the kb loop stays a loop (8 scores per trip)
                            for (int kb = 0; kb < kbEnd; kb++) {
                                for (int nb = 0; nb < 2; nb++) {
                                    for (int e = 0; e < 2; e++) {
                                        int rw = nb * 8 + ((lane & 3) << 1) + e;
                                        int r = warp * 16 + rw;
                                        float mLog2 = rowMax[r] * LOG2E;
                                        int limit = causal == 1 ? Math.min(kvLength - 1, q0 + r + offset) : kvLength - 1;
                                        int below = limit - j0 - kb * 16 - g;       // >= 0: key g visible; >= 8: key g + 8 too
                                        float z0 = Math.min(scratch.get(sTile + (kb * 16 + g) * bq + r) * scaleLog2 - mLog2,
                                                (below < 0 ? -1.0e30f : 1.0e30f));
                                        float z1 = Math.min(scratch.get(sTile + (kb * 16 + g + 8) * bq + r) * scaleLog2 - mLog2,
                                                (below - 8 < 0 ? -1.0e30f : 1.0e30f));
                                        excess = Math.max(excess, Math.max(z0, z1));
                                        pT[(warp * 4 + kb) * 128 + aTileAt(rw, g)] = fp16Pow2(z0) | (fp16Pow2(z1) << 16);
                                    }
                                }
                            }
                            kc.localBarrier();   // P complete (ldmatrix reads rows that other lanes of the warp wrote)

                            // O += P V and l += P 1; warp w owns query rows [16 w, 16 w + 16). (On the rare sweep 0
                            // this multiplies a stale P: wasted, and overwritten by sweep 1, but it keeps every
                            // fragment update unconditional.)
                            for (int kbb = 0; kbb < 4; kbb++) {
                                HalfFloat[] p = kc.mmaLoadA(pT, 16, (warp * 4 + kbb) * 512 + aRow);
                                o0 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 0, d)), o0, MMAShape.M16N8K16);
                                o1 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 1, d)), o1, MMAShape.M16N8K16);
                                o2 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 2, d)), o2, MMAShape.M16N8K16);
                                o3 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 3, d)), o3, MMAShape.M16N8K16);
                                o4 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 4, d)), o4, MMAShape.M16N8K16);
                                o5 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 5, d)), o5, MMAShape.M16N8K16);
                                o6 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 6, d)), o6, MMAShape.M16N8K16);
                                o7 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 7, d)), o7, MMAShape.M16N8K16);
                                rowSum = kc.mma(p, kc.mmaLoadB(ones, 16, 0), rowSum, MMAShape.M16N8K16);
                            }
                        }
                        if (sweep == 1 && excess > MAX_EXCESS * LOG2E) {
                            flag[0] = stamp;     // some score exceeded its row's reference max by more than MAX_EXCESS
                        }
                        int rows = warp * 16;
                        kc.mmaStore(o0, scratch, 0, oStore + outputAt(rows, 0, d), 8);
                        kc.mmaStore(o1, scratch, 0, oStore + outputAt(rows, 8, d), 8);
                        kc.mmaStore(o2, scratch, 0, oStore + outputAt(rows, 16, d), 8);
                        kc.mmaStore(o3, scratch, 0, oStore + outputAt(rows, 24, d), 8);
                        kc.mmaStore(o4, scratch, 0, oStore + outputAt(rows, 32, d), 8);
                        kc.mmaStore(o5, scratch, 0, oStore + outputAt(rows, 40, d), 8);
                        kc.mmaStore(o6, scratch, 0, oStore + outputAt(rows, 48, d), 8);
                        kc.mmaStore(o7, scratch, 0, oStore + outputAt(rows, 56, d), 8);
                        kc.mmaStore(rowSum, scratch, 0, oStore + outputAt(rows, d, d), 8);
                    }
                    kc.localBarrier();   // every thread has set the flag or not
                    if (flag[0] == stamp) {
                        attempts = 2;    // some score exceeded its row's reference max: recompute with exact maxima
                        if (t < bq) {
                            rowMax[t] = Float.NEGATIVE_INFINITY;
                        }
                    }
                }
                normaliseOwnRows(scratch, oBase, warp, lane, d);
                kc.localBarrier();
                float m = t < bq ? rowMax[t] : 0.0f;
                writeOutput(scratch, o, lse, m, t, oBase, qBase, qRow, q0, queryLength,
                        (b * queryHeads + h) * queryLength, d, bq);
            }
        }
    }

    /** The tiles of {@code MmaTileConfig.forHeadDim(128)}: D = 128, Br = 64, Bc = 32, 4 warps (128 threads). */
    public static void attentionD128(KernelContext kc, LongArray q, LongArray k, LongArray v, LongArray o,
                                    FloatArray lse, FloatArray scratch, int batch, int queryHeads, int kvHeads,
                                    int queryLength, int kvLength, int causal, int bshd, float scale, int gridSize,
                                    uk.ac.manchester.tornado.api.types.arrays.IntArray window, FloatArray scores) {
        final int d = 128;
        final int bq = 64;
        final int bkv = 32;
        int[] qT = kc.allocateIntLocalArray(4128);      // D x Br / 2 and padding (qSubTile): Q^T, B operand
        int[] kT = kc.allocateIntLocalArray(2304);      // Bc x D / 2 and padding (kSubTile): K, A operand
        int[] vT = kc.allocateIntLocalArray(2304);      // Bc x D / 2 and padding (vSubTile): V, B operand
        int[] pT = kc.allocateIntLocalArray(1024);      // Br x Bc / 2: P, A operand
        int[] ones = kc.allocateIntLocalArray(64);      // a 16x8 B tile of ones: P times it gives the row sums
        float[] rowMax = kc.allocateFloatLocalArray(64);
        int[] flag = kc.allocateIntLocalArray(4);      // one used; 16 bytes keep every local array 16-byte aligned (ldmatrix)

        int t = kc.localIdx;
        int warp = t >>> 5;
        int lane = t & 31;
        int aSwizzle = aSwizzle(lane);   // this lane's ldmatrix row address in the swizzled A-operand tiles
        if (t < 64) {
            ones[t] = HALF_ONE_PAIR;
        }
        if (t == 0) {
            flag[0] = -1;
        }

        int heads = batch * queryHeads;
        int queryTiles = (queryLength + bq - 1) / bq;
        int tiles = queryTiles * heads;
        int offset = kvLength - queryLength;          // bottom-right causal: key j visible to query i iff j <= i + offset
        int sBase = kc.groupIdx * (2 * bkv * bq + bq * (d + 8));   // this CTA's scratch: S^T (two buffers), O | l
        int oBase = sBase + 2 * bkv * bq;
        int oStore = oBase + MMA_STORE_SKEW;          // O's index for mmaStore (see MMA_STORE_SKEW)
        float scaleLog2 = scale * LOG2E;
        int stamp = 0;

        for (int round = 0; round * gridSize < tiles; round++) {
            // Zig-zag over rounds: a CTA that got a heavy (causal) tile gets a light one next.
            int position = (round & 1) == 0 ? kc.groupIdx : gridSize - 1 - kc.groupIdx;
            int tile = round * gridSize + position;
            if (tile < tiles) {
                int bh = tile % heads;
                int qt = queryTiles - 1 - tile / heads;      // late (heavy) query tiles first
                int b = bh / queryHeads;
                int h = bh % queryHeads;
                int hkv = h / (queryHeads / kvHeads);
                int q0 = qt * bq;
                int qRow = bshd == 1 ? queryHeads * d : d;
                int qBase = bshd == 1 ? b * queryLength * queryHeads * d + h * d : (b * queryHeads + h) * queryLength * d;
                int kvRow = bshd == 1 ? kvHeads * d : d;
                int kvBase = bshd == 1 ? b * kvLength * kvHeads * d + hkv * d : (b * kvHeads + hkv) * kvLength * d;
                int lastKey = causal == 1 ? Math.min(kvLength - 1, q0 + bq - 1 + offset) : kvLength - 1;
                int kvTiles = lastKey < 0 ? 0 : lastKey / bkv + 1;   // tiles above the diagonal are never visited

                kc.localBarrier();   // the previous tile's readers of local memory and scratch are done

                // Q^T into B-operand sub-tiles (16 d-rows x 8 queries, 256 bytes, sub-tile (d / 16, query / 8)):
                // the values of two queries for one d share an int. Rows past the end are zeros.
                for (int i = 0; i < (bq / 2) * (d / 4) / 128; i++) {
                    int it = t + 128 * i;
                    int qa = qStageQuery(it);          // even query of the pair
                    int dq = qStageChunk(it);          // d = 4 dq .. 4 dq + 3
                    // Branch-free bounds: load a row that exists, keep it only where the row is real (keep is
                    // 1 or 0, and multiplies). TornadoVM's PTX backend mis-emits an if whose condition folds to
                    // a constant (the branch tests an unset predicate), which the shape specialisation makes
                    // common. Not a sign bit taken by a shift: TornadoVM's PTX backend emits >> as the logical
                    // shr.b32 (x >> 31 is 1 for a negative x: that mask kept only bit 0 of Q, K and V), its CUDA
                    // backend emits >>> as C's >> on an int (x >>> 31 is -1 there). A compare and select of 1 or 0
                    // means the same in Java and on both; see the class comment.
                    int ra = q0 + qa;
                    long la = q.get((qBase + Math.min(ra, queryLength - 1) * qRow + 4 * dq) >>> 2) * (ra < queryLength ? 1L : 0L);
                    long lb = q.get((qBase + Math.min(ra + 1, queryLength - 1) * qRow + 4 * dq) >>> 2) * (ra + 1 < queryLength ? 1L : 0L);
                    int at = qSubTile(dq >>> 2, qa >>> 3, bq) / 4 + 16 * (dq & 3) + ((qa & 7) >>> 1);
                    qT[at] = (int) (la & 0xFFFF) | ((int) (lb & 0xFFFF) << 16);
                    qT[at + 4] = (int) ((la >>> 16) & 0xFFFF) | ((int) ((lb >>> 16) & 0xFFFF) << 16);
                    qT[at + 8] = (int) ((la >>> 32) & 0xFFFF) | ((int) ((lb >>> 32) & 0xFFFF) << 16);
                    qT[at + 12] = (int) ((la >>> 48) & 0xFFFF) | ((int) ((lb >>> 48) & 0xFFFF) << 16);
                }
                if (t < bq) {
                    rowMax[t] = Float.NEGATIVE_INFINITY;
                }

                // Fragments live only inside one sweep (declared in its body, stored at its end): TornadoVM
                // mistypes a fragment carried through an if/else merge or from one loop's phi into another's.
                // (Loops keep their condition at the top: TornadoVM's PTX block scheduler needs it there.)
                int attempts = 1;
                for (int attempt = 0; attempt < attempts; attempt++) {
                    stamp++;
                    for (int sweep = attempt == 1 ? 0 : 1; sweep < 2; sweep++) {
                        // Sweep 0 only when a score exceeded its row's reference max (attempt 1): every row's
                        // exact max first. Sweep 1 accumulates O and l.
                        float[] o0 = kc.mmaFragment(0.0f);
                        float[] o1 = kc.mmaFragment(0.0f);
                        float[] o2 = kc.mmaFragment(0.0f);
                        float[] o3 = kc.mmaFragment(0.0f);
                        float[] o4 = kc.mmaFragment(0.0f);
                        float[] o5 = kc.mmaFragment(0.0f);
                        float[] o6 = kc.mmaFragment(0.0f);
                        float[] o7 = kc.mmaFragment(0.0f);
                        float[] o8 = kc.mmaFragment(0.0f);
                        float[] o9 = kc.mmaFragment(0.0f);
                        float[] o10 = kc.mmaFragment(0.0f);
                        float[] o11 = kc.mmaFragment(0.0f);
                        float[] o12 = kc.mmaFragment(0.0f);
                        float[] o13 = kc.mmaFragment(0.0f);
                        float[] o14 = kc.mmaFragment(0.0f);
                        float[] o15 = kc.mmaFragment(0.0f);
                        float[] rowSum = kc.mmaFragment(0.0f);
                        float excess = Float.NEGATIVE_INFINITY;   // largest z of this sweep (log2 units)
                        for (int kvt = 0; kvt < kvTiles; kvt++) {
                            int j0 = kvt * bkv;
                            // aSwizzle, but not loop-invariant to Graal (j0 >>> 31 is 0): hoisted, each mmaLoadA's offset would hold a register.
                            int aRow = aSwizzle + (j0 >>> 31);
                            // S^T alternates between the scratch's two Bc x Br regions: the addresses then depend on
                            // kvt, so Graal does not hoist all 2 Bc / 8 of this lane's 64-bit read addresses out of the
                            // loop (which kept them live in registers: 255 registers and spills at D = 64).
                            int sTile = sBase + (kvt & 1) * (bkv * bq);
                            kc.localBarrier();

                            // K into A-operand sub-tiles (16 keys x 16 d, sub-tile (key / 16, d / 16)) and V into
                            // B-operand sub-tiles (16 keys x 8 d, sub-tile (key / 16, d / 8)), 64 bits at a time.
                            // Consecutive threads take four consecutive words of 8 rows: 32-byte sectors fully used,
                            // at most 2-way bank conflicts. Keys past the end are zeros (0 * garbage could be NaN).
                            for (int it = t; it < bkv * (d / 4); it += 128) {
                                int dqL = it & 3;
                                int jj = (it >>> 2) & 15;
                                int dqH = (it >>> 6) % (d / 16);
                                int kb = (it >>> 6) / (d / 16);
                                int row = j0 + kb * 16 + jj;
                                int at = (kvBase + Math.min(row, kvLength - 1) * kvRow + 16 * dqH + 4 * dqL) >>> 2;
                                long keep = row < kvLength ? 1L : 0L;     // 1 for a real key, 0 past the end (not a shift: see Q^T)
                                long lk = k.get(at) * keep;
                                long lv = v.get(at) * keep;
                                int kAt = kSubTile(kb, dqH, d) / 4 + aTileAt(jj, 2 * dqL);
                                kT[kAt] = (int) lk;
                                kT[kAt + 1] = (int) (lk >>> 32);
                                int vAt = vSubTile(kb, 2 * dqH + (dqL >>> 1), d) / 4 + valueRow(jj) * 4 + 2 * (dqL & 1);
                                vT[vAt] = (int) lv;
                                vT[vAt + 1] = (int) (lv >>> 32);
                            }
                            kc.localBarrier();

                            // S^T = K Q^T into the scratch (Bc key rows x Br query columns, stride Br). Warp w computes the
                            // columns of its own query rows [16 w, 16 w + 16) for all Bc keys, so that each lane turns the S
                            // values it stored itself into P below, and only the warp's own rows of P are read by its P V.
                            for (int kb = 0; kb < 2; kb++) {
                                HalfFloat[] a0 = kc.mmaLoadA(kT, 16, kSubTile(kb, 0, d) + aRow);
                                HalfFloat[] a1 = kc.mmaLoadA(kT, 16, kSubTile(kb, 1, d) + aRow);
                                HalfFloat[] a2 = kc.mmaLoadA(kT, 16, kSubTile(kb, 2, d) + aRow);
                                HalfFloat[] a3 = kc.mmaLoadA(kT, 16, kSubTile(kb, 3, d) + aRow);
                                HalfFloat[] a4 = kc.mmaLoadA(kT, 16, kSubTile(kb, 4, d) + aRow);
                                HalfFloat[] a5 = kc.mmaLoadA(kT, 16, kSubTile(kb, 5, d) + aRow);
                                HalfFloat[] a6 = kc.mmaLoadA(kT, 16, kSubTile(kb, 6, d) + aRow);
                                HalfFloat[] a7 = kc.mmaLoadA(kT, 16, kSubTile(kb, 7, d) + aRow);
                                for (int nb = 0; nb < 2; nb++) {
                                    int qn = warp * 2 + nb;
                                    float[] s = kc.mmaFragment(0.0f);
                                    s = kc.mma(a0, kc.mmaLoadB(qT, 16, qSubTile(0, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a1, kc.mmaLoadB(qT, 16, qSubTile(1, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a2, kc.mmaLoadB(qT, 16, qSubTile(2, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a3, kc.mmaLoadB(qT, 16, qSubTile(3, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a4, kc.mmaLoadB(qT, 16, qSubTile(4, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a5, kc.mmaLoadB(qT, 16, qSubTile(5, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a6, kc.mmaLoadB(qT, 16, qSubTile(6, qn, bq)), s, MMAShape.M16N8K16);
                                    s = kc.mma(a7, kc.mmaLoadB(qT, 16, qSubTile(7, qn, bq)), s, MMAShape.M16N8K16);
                                    kc.mmaStore(s, scratch, kb * 16, sTile + MMA_STORE_SKEW + qn * 8, bq);
                                }
                            }

                            if (sweep == 0 || kvt == 0 && attempt == 0) {
                                kc.localBarrier();   // S^T complete in the scratch
                                // One thread per row: fold this tile's max over visible scores into rowMax (the
                                // reference max is the first tile's on attempt 0, the exact max on attempt 1).
                                if (t < bq) {
                                    int limit = causal == 1 ? Math.min(kvLength - 1, q0 + t + offset) : kvLength - 1;
                                    float tileMax = Float.NEGATIVE_INFINITY;
                                    for (int jl = 0; jl < bkv; jl++) {
                                        if (j0 + jl <= limit) {
                                            tileMax = Math.max(tileMax, scratch.get(sTile + jl * bq + t) * scale);
                                        }
                                    }
                                    rowMax[t] = Math.max(rowMax[t], tileMax);
                                }
                                kc.localBarrier();
                            }

                            // P = 2^z, z = (scale s - m) log2(e), as fp16 bits into the warp's A-operand sub-tiles (16 queries
                            // x 16 keys). Lane (g = lane / 4, c = 2 (lane % 4)) stored S^T rows g and g + 8 of every key block
                            // at query columns c, c + 1 of the warp's two 8-query blocks; it reads its own values back (same
                            // thread: no barrier) and packs keys g and g + 8 of a row into one int. So within each 16-key block
                            // P's column 2 g + e holds key g + 8 e, and V is staged with its rows in that order (above). Masked
                            // keys get z = -1e30 (P = 0) branch-free; excess tracks the largest z for the recompute check.
                            int g = lane >>> 2;
                            for (int nb = 0; nb < 2; nb++) {
                                for (int e = 0; e < 2; e++) {
                                    int rw = nb * 8 + ((lane & 3) << 1) + e;
                                    int r = warp * 16 + rw;
                                    float mLog2 = rowMax[r] * LOG2E;
                                    int limit = causal == 1 ? Math.min(kvLength - 1, q0 + r + offset) : kvLength - 1;
                                    for (int kb = 0; kb < 2; kb++) {
                                        int below = limit - j0 - kb * 16 - g;       // >= 0: key g visible; >= 8: key g + 8 too
                                        float z0 = Math.min(scratch.get(sTile + (kb * 16 + g) * bq + r) * scaleLog2 - mLog2,
                                                (below < 0 ? -1.0e30f : 1.0e30f));
                                        float z1 = Math.min(scratch.get(sTile + (kb * 16 + g + 8) * bq + r) * scaleLog2 - mLog2,
                                                (below - 8 < 0 ? -1.0e30f : 1.0e30f));
                                        excess = Math.max(excess, Math.max(z0, z1));
                                        pT[(warp * 2 + kb) * 128 + aTileAt(rw, g)] = fp16Pow2(z0) | (fp16Pow2(z1) << 16);
                                    }
                                }
                            }
                            kc.localBarrier();   // P complete (ldmatrix reads rows that other lanes of the warp wrote)

                            // O += P V and l += P 1; warp w owns query rows [16 w, 16 w + 16). (On the rare sweep 0
                            // this multiplies a stale P: wasted, and overwritten by sweep 1, but it keeps every
                            // fragment update unconditional.)
                            for (int kbb = 0; kbb < 2; kbb++) {
                                HalfFloat[] p = kc.mmaLoadA(pT, 16, (warp * 2 + kbb) * 512 + aRow);
                                o0 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 0, d)), o0, MMAShape.M16N8K16);
                                o1 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 1, d)), o1, MMAShape.M16N8K16);
                                o2 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 2, d)), o2, MMAShape.M16N8K16);
                                o3 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 3, d)), o3, MMAShape.M16N8K16);
                                o4 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 4, d)), o4, MMAShape.M16N8K16);
                                o5 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 5, d)), o5, MMAShape.M16N8K16);
                                o6 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 6, d)), o6, MMAShape.M16N8K16);
                                o7 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 7, d)), o7, MMAShape.M16N8K16);
                                o8 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 8, d)), o8, MMAShape.M16N8K16);
                                o9 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 9, d)), o9, MMAShape.M16N8K16);
                                o10 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 10, d)), o10, MMAShape.M16N8K16);
                                o11 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 11, d)), o11, MMAShape.M16N8K16);
                                o12 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 12, d)), o12, MMAShape.M16N8K16);
                                o13 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 13, d)), o13, MMAShape.M16N8K16);
                                o14 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 14, d)), o14, MMAShape.M16N8K16);
                                o15 = kc.mma(p, kc.mmaLoadB(vT, 16, vSubTile(kbb, 15, d)), o15, MMAShape.M16N8K16);
                                rowSum = kc.mma(p, kc.mmaLoadB(ones, 16, 0), rowSum, MMAShape.M16N8K16);
                            }
                        }
                        if (sweep == 1 && excess > MAX_EXCESS * LOG2E) {
                            flag[0] = stamp;     // some score exceeded its row's reference max by more than MAX_EXCESS
                        }
                        int rows = warp * 16;
                        kc.mmaStore(o0, scratch, 0, oStore + outputAt(rows, 0, d), 8);
                        kc.mmaStore(o1, scratch, 0, oStore + outputAt(rows, 8, d), 8);
                        kc.mmaStore(o2, scratch, 0, oStore + outputAt(rows, 16, d), 8);
                        kc.mmaStore(o3, scratch, 0, oStore + outputAt(rows, 24, d), 8);
                        kc.mmaStore(o4, scratch, 0, oStore + outputAt(rows, 32, d), 8);
                        kc.mmaStore(o5, scratch, 0, oStore + outputAt(rows, 40, d), 8);
                        kc.mmaStore(o6, scratch, 0, oStore + outputAt(rows, 48, d), 8);
                        kc.mmaStore(o7, scratch, 0, oStore + outputAt(rows, 56, d), 8);
                        kc.mmaStore(o8, scratch, 0, oStore + outputAt(rows, 64, d), 8);
                        kc.mmaStore(o9, scratch, 0, oStore + outputAt(rows, 72, d), 8);
                        kc.mmaStore(o10, scratch, 0, oStore + outputAt(rows, 80, d), 8);
                        kc.mmaStore(o11, scratch, 0, oStore + outputAt(rows, 88, d), 8);
                        kc.mmaStore(o12, scratch, 0, oStore + outputAt(rows, 96, d), 8);
                        kc.mmaStore(o13, scratch, 0, oStore + outputAt(rows, 104, d), 8);
                        kc.mmaStore(o14, scratch, 0, oStore + outputAt(rows, 112, d), 8);
                        kc.mmaStore(o15, scratch, 0, oStore + outputAt(rows, 120, d), 8);
                        kc.mmaStore(rowSum, scratch, 0, oStore + outputAt(rows, d, d), 8);
                    }
                    kc.localBarrier();   // every thread has set the flag or not
                    if (flag[0] == stamp) {
                        attempts = 2;    // some score exceeded its row's reference max: recompute with exact maxima
                        if (t < bq) {
                            rowMax[t] = Float.NEGATIVE_INFINITY;
                        }
                    }
                }
                normaliseOwnRows(scratch, oBase, warp, lane, d);
                kc.localBarrier();
                float m = t < bq ? rowMax[t] : 0.0f;
                writeOutput(scratch, o, lse, m, t, oBase, qBase, qRow, q0, queryLength,
                        (b * queryHeads + h) * queryLength, d, bq);
            }
        }
    }

    /**
     * Byte offset in the V tile of B-operand sub-tile (key block {@code keyBlock}, d block {@code n} of 8): 16 keys x 8
     * columns, 256 bytes with 16-byte rows ({@code mmaLoadB}). Four consecutive d blocks form a 1152-byte group, at 0,
     * 272, 576 and 848 bytes in it: shifted 0, 16, 64 and 80 bytes within a bank cycle, so that a half-warp's 64-bit
     * staging stores (two keys, four d blocks) reach 16 distinct 8-byte bank pairs; unpadded (all four at 0 mod 128)
     * they reached 4.
     */
    static int vSubTile(int keyBlock, int n, int d) {
        return MmaLayout.vSubTile(keyBlock, n, d);
    }

    /** The row of key {@code key} < 16 in a V sub-tile: key g + 8 e at row 2 g + e, the order of P's columns. */
    static int valueRow(int key) {
        return MmaLayout.valueRow(key);
    }

    /**
     * The fp16 bits of 2^z, computed in float and int arithmetic (TornadoVM converts to fp16 only a value
     * just read from a FloatArray): with n = max(floor(z), -14), 2^z = 2^n 2^(z - n) and the bits are
     * (n + 14) 1024 + round(1024 2^(z - n)). For a normal result 1024 2^(z - n) is in [1024, 2048) (the
     * mantissa with its hidden bit, which carries into the exponent field); below 2^-14 (n clamped) it is the
     * subnormal's mantissa; z <= -25 (and the -1e30 of masked keys) gives 0. Computed as one float,
     * ((n + 14) + 2^(z - n)) 1024 + 0.5, truncated once (one float-to-int conversion, which TornadoVM emits as
     * testp + cvt + mov, instead of two); the sum carries 2^-9 of resolution at 2^15, so rounding is to nearest
     * except within 2^-9 of a tie (then at most 1 ulp of fp16 off). Valid for z < 16 (P <= e^5 here; larger z
     * only occur in a tile that is recomputed).
     */
    static int fp16Pow2(float z) {
        return MmaCpAsyncKernels.fp16Pow2(z);
    }

    /**
     * Index within a CTA's O scratch of query row {@code row} (0..Br-1), column {@code col} (0..D-1, and D for the
     * row sum l): O is stored fragment by fragment (16 rows x 8 columns dense, mmaStore with row stride 8; the
     * row sums are fragment D / 8 of each warp's 16 rows), so that a warp's store or read of one fragment
     * element touches 2 cache lines rather than 8.
     */
    static int outputAt(int row, int col, int d) {
        return MmaLayout.outputAt(row, col, d);
    }

    /**
     * Each lane divides the O elements it stored (rows g, g + 8 of its warp's 16, columns 2 (lane % 4), + 1
     * of every 8) by the row sum l it stored next to them, in place, so that {@link #writeOutput} can
     * convert values read straight from the scratch to fp16.
     */
    static void normaliseOwnRows(FloatArray scratch, int oBase, int warp, int lane, int d) {
        int tc = (lane & 3) << 1;
        int row = warp * 16 + (lane >>> 2);
        float sum0 = scratch.get(oBase + outputAt(row, d + tc, d));       // the copy of l this lane stored itself
        float sum1 = scratch.get(oBase + outputAt(row + 8, d + tc, d));
        float inverse0 = sum0 > 0.0f ? 1.0f / sum0 : 0.0f;    // a row that sees no key gives O = 0
        float inverse1 = sum1 > 0.0f ? 1.0f / sum1 : 0.0f;
        for (int c = tc; c < d; c += 8) {    // a loop (tc is the lane's): unrolled, its loads cost the kernel registers
            int at0 = oBase + outputAt(row, c, d);
            int at1 = at0 + 64;                // row + 8
            scratch.set(at0, scratch.get(at0) * inverse0);
            scratch.set(at0 + 1, scratch.get(at0 + 1) * inverse0);
            scratch.set(at1, scratch.get(at1) * inverse1);
            scratch.set(at1 + 1, scratch.get(at1 + 1) * inverse1);
        }
    }

    /**
     * O (already divided by l) from the scratch to fp16, four values per 64-bit store; logsumexp =
     * m + ln(l) (thread t < Br passes its row's m), -infinity for a row that saw no key.
     */
    static void writeOutput(FloatArray scratch, LongArray o, FloatArray lse, float rowMax, int t, int oBase,
                            int qBase, int qRow, int q0, int queryLength, int lseBase, int d, int bq) {
        // A warp instruction covers 4 rows x 8 quads (32 columns): its loads touch 4 lines of the fragment-dense O
        // (4 rows of 4 fragments, 128 bytes each), its stores 4 rows of 64 bytes. (2 rows x 16 quads, the row-major order,
        // touched 8 lines per load.)
        for (int it = t; it < bq * (d / 4); it += 128) {
            int group = it >>> 5;                                     // 4 rows x 8 quads each
            int r = 4 * (group % (bq / 4)) + ((it & 31) >>> 3);
            int dq = 8 * (group / (bq / 4)) + (it & 7);
            if (q0 + r < queryLength) {
                int at = oBase + outputAt(r, 4 * dq, d);
                long h0 = new HalfFloat(scratch.get(at)).getHalfFloatValue() & 0xFFFF;
                long h1 = new HalfFloat(scratch.get(at + 1)).getHalfFloatValue() & 0xFFFF;
                long h2 = new HalfFloat(scratch.get(at + 2)).getHalfFloatValue() & 0xFFFF;
                long h3 = new HalfFloat(scratch.get(at + 3)).getHalfFloatValue() & 0xFFFF;
                o.set((qBase + (q0 + r) * qRow + 4 * dq) >>> 2, h0 | (h1 << 16) | (h2 << 32) | (h3 << 48));
            }
        }
        if (t < bq && q0 + t < queryLength) {
            float sum = scratch.get(oBase + outputAt(t, d, d));
            lse.set(lseBase + q0 + t, sum > 0.0f ? rowMax + TornadoMath.log(sum) : Float.NEGATIVE_INFINITY);
        }
    }
}
