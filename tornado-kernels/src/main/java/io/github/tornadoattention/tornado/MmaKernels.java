package io.github.tornadoattention.tornado;

import static io.github.tornadoattention.tornado.MmaLayout.aSwizzle;
import static io.github.tornadoattention.tornado.MmaLayout.aTileAt;
import static io.github.tornadoattention.tornado.MmaLayout.kSubTile;
import static io.github.tornadoattention.tornado.MmaLayout.kTileAt;
import static io.github.tornadoattention.tornado.MmaLayout.kvLoadColumn;
import static io.github.tornadoattention.tornado.MmaLayout.kvLoadKey;
import static io.github.tornadoattention.tornado.MmaLayout.outputTAt;
import static io.github.tornadoattention.tornado.MmaLayout.pTileAt;
import static io.github.tornadoattention.tornado.MmaLayout.qStageChunk;
import static io.github.tornadoattention.tornado.MmaLayout.qStageQuery;
import static io.github.tornadoattention.tornado.MmaLayout.qSubTile;
import static io.github.tornadoattention.tornado.MmaLayout.scoreAt;
import static io.github.tornadoattention.tornado.MmaLayout.vtAt;
import static io.github.tornadoattention.tornado.MmaLayout.vtItemPair;
import static io.github.tornadoattention.tornado.MmaLayout.vtItemQuad;
import static io.github.tornadoattention.tornado.MmaLayout.vtSubTile;

import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.enums.MMAShape;
import uk.ac.manchester.tornado.api.math.TornadoMath;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * tornado-mma: FlashAttention-2 forward with both matrix products on tensor cores, through
 * KernelContext's MMA intrinsics ({@code mma.sync.m16n8k16}, fp16 in, fp32 accumulate; operands read
 * from local memory with {@code ldmatrix}). The tile sizes are {@link MmaTileConfig}'s, the places of the
 * tile elements {@link MmaLayout}'s.
 *
 * <p><b>Structure.</b> A CTA of 4 warps works on a tile of Br = 64 query rows of one (batch, head); the
 * grid loops over tiles when there are more than {@link MmaTileConfig#MAX_CTAS}. Q is loaded once per
 * tile, transposed, as the B operand. Per K/V tile (Bc keys):
 * <ol>
 *   <li>K and V are staged in local memory (K as A operand in its natural row-major layout, V transposed as
 *       the A operand V^T, see below).</li>
 *   <li>S^T = K Q^T on tensor cores. Computing S transposed lets K be the A operand: the API's B load is
 *       {@code ldmatrix .trans} only, so S = Q K^T would need K transposed in local memory every tile,
 *       whereas Q^T is built once per query tile.</li>
 *   <li>Softmax in fp32: each lane reads back the S values that its own {@code mmaStore} wrote (same thread,
 *       no barrier; warp w computes S for its own 16 query rows) and writes P^T = e^z as fp16 values into a
 *       {@code HalfFloat[]} in local memory, the B operand of O^T = V^T P^T.</li>
 *   <li>O^T += V^T P^T on tensor cores; the row sums of P come from the same MMAs (a tile of ones times P^T),
 *       so the accumulator fragments hold both numerator and denominator.</li>
 * </ol>
 *
 * <p><b>What the API lacks, and the detours taken.</b>
 * <ul>
 *   <li>No access to the elements of an accumulator fragment: {@code mmaStore} to a global FloatArray is
 *       the only way out, {@code mmaFragment(v)} and {@code mma} the only ways in. FlashAttention-2 keeps
 *       S in registers and turns it into the fp16 A fragment of P V in registers; here S^T goes through an
 *       fp32 scratch in global memory (per CTA, L1/L2 resident; MmaTileConfig#scratchFloatsPerCta), is read
 *       back by the lane that stored it, and P^T goes to local memory for {@code ldmatrix}.</li>
 *   <li>fp32 to fp16: TornadoVM's PTX backend has no float-to-int bit cast, and {@code new HalfFloat(x)} converts
 *       only where x was just read from a FloatArray or where it is stored into a {@code HalfFloat[]} (then
 *       {@code cvt.rn.f16.f32} and a 16-bit store). {@code mmaLoadA} reads an {@code int[]} only, whereas
 *       {@code mmaLoadBSwizzled} reads a {@code HalfFloat[]}: so the kernels store P^T = e^z straight into
 *       a {@code HalfFloat[]} ({@link MmaLayout#pTileAt}) and compute O^T = V^T P^T, with V staged transposed as the
 *       A operand ({@link MmaLayout#vtAt}: each int holds two keys of one d). This replaced an fp16 encoding by hand
 *       (a floor, an {@code ex2} and a float-to-int conversion that TornadoVM guards with {@code testp}: about 19
 *       instructions per score against 8), which the synchronous kernels of the tests keep
 *       ({@code MmaSynchronousKernels}: O = P V, the measured baseline of these kernels). O is written in fp32 and
 *       converted with {@code new HalfFloat(scratch.get(i))} at the end.</li>
 *   <li>No rescaling of O: FlashAttention-2 multiplies the O accumulator row-wise by exp(m_old - m_new)
 *       whenever a row's running max grows, which needs the fragment's elements. Moreover TornadoVM
 *       types a fragment that flows through an {@code if}/{@code else} merge as a 64-bit scalar (wrong
 *       PTX), so fragments may only be carried around loops, each value straight from an {@code mma}.
 *       Instead each row fixes a reference max m from the first K/V tile, and P = exp(s - m) is accumulated
 *       against it without rescaling; that is exact as long as no later score exceeds m by more than
 *       {@link #MAX_EXCESS} (P <= e^5, well inside fp16), which for realistic inputs is always.
 *       If some score does, the tile is recomputed: a first sweep over the K tiles finds every row's exact
 *       max, then the accumulation runs again against it (never exceeding).</li>
 * </ul>
 *
 * <p><b>Right shifts are written {@code >>>}, never {@code >>}.</b> TornadoVM 5.2's PTX backend lowers
 * both to {@code shr.b32}/{@code shr.b64}, which PTX defines as a logical shift (zero fill): {@code >>} of
 * a negative value is wrong on the GPU while right in Java (and in the CPU emulator of the tests). All
 * shifted values here are non-negative, where both agree; {@code MmaKernelsTest} checks that this class and
 * {@link MmaLayout} have no arithmetic right shift. (Graal's own lowering of a signed division by a power of
 * two uses one too, so no negative value may be divided either.)
 *
 * <p><b>Every {@code mmaStore} column carries {@link #MMA_STORE_SKEW}.</b> TornadoVM lowers {@code mmaStore}
 * with the Java heap's float[] header (16 bytes) where {@code FloatArray.get/set} use
 * {@link TornadoNativeArray#ARRAY_HEADER} (16 by default, 128 with {@code -Dtornado.panama.objectHeader=128}):
 * the skew, (ARRAY_HEADER - 16) / 4 floats, makes the two meet under any header. Local arrays have no
 * header, so {@code ldmatrix} needs nothing.
 *
 * <p>fp16 tensors are passed as {@link LongArray} views of the same bytes, so every global load and
 * store moves four values (the API has no wider access). Scalar arguments are specialised by TornadoVM
 * into the compiled kernel (the plan compiles one kernel per shape).
 *
 * <p>{@link #attentionD64Pipelined} and {@link #attentionD128Pipelined} are the same kernel with the constants of
 * their {@link MmaTileConfig}: TornadoVM sizes local and private arrays only from compile-time constants, and
 * reaches a local array correctly only in the method that allocates it, so the body cannot be shared through a
 * helper. Keep the two in step. Against the synchronous kernels they were derived from (kept in the tests as
 * {@code MmaSynchronousKernels}) they have O^T = V^T P^T (above), the global K/V loads overlapped with compute
 * (TornadoVM's PTX backend has no cp.async: the next K tile is loaded into registers during P V, this V tile during
 * the softmax at D = 128; at D = 64 V is loaded right before it is stored, because held through the softmax it
 * slowed the kernel), the first tile's row max by warp shuffles and 2 barriers per K/V tile instead of 3.
 *
 * <p><b>Shared-memory layouts without bank conflicts.</b> The tiles keep the layouts the intrinsics read, but where
 * they sit is ours: K's and V^T's sub-tiles are padded ({@link MmaLayout#kSubTile}, {@link MmaLayout#vtSubTile}) and
 * Q^T's shifted ({@link MmaLayout#qSubTile}) so that the staging stores reach every bank, and the A-operand tiles
 * (K, V^T) are swizzled ({@link MmaLayout#aTileAt}) with each lane's {@code ldmatrix} row address moved to match
 * ({@link MmaLayout#aSwizzle}: the byte offset of {@code mmaLoadA} is a per-lane register operand), so that
 * {@code ldmatrix.x4} reads each 8x8 matrix in one wavefront instead of two. SharedLayoutTest checks both
 * properties.
 */
public final class MmaKernels {
    /** Largest excess of a score over its row's reference max that P may carry (natural log units). */
    static final float MAX_EXCESS = 5.0f;
    /** Two fp16 ones in an int (the constant tiles of ones). */
    static final int HALF_ONE_PAIR = 0x3C003C00;
    /**
     * The Java heap's float[] base offset (HotSpot, compressed class pointers: 16 bytes), which TornadoVM's
     * {@code mmaStore} lowering adds to every index it stores to (PTXGraphBuilderPlugins: {@code
     * getArrayBaseOffset(JavaKind.Float)}), whereas {@code FloatArray.get/set} add
     * {@link TornadoNativeArray#ARRAY_HEADER}.
     */
    static final int MMA_STORE_HEADER_BYTES = 16;
    /**
     * Added to every {@code mmaStore}'s column so that its element e lands where {@code FloatArray.get(e)}
     * reads: 0 with TornadoVM's default 16-byte array header, 28 with {@code -Dtornado.panama.objectHeader=128}.
     * A static final, folded into the kernel as a constant.
     */
    static final int MMA_STORE_SKEW = mmaStoreSkew(TornadoNativeArray.ARRAY_HEADER);

    private MmaKernels() {
    }

    /**
     * D = 64 ({@link MmaTileConfig#D64}: Br = 64, Bc = 64, 4 warps, 128 threads). Against the synchronous kernel
     * it was derived from ({@code MmaSynchronousKernels.attentionD64} in the tests), with:
     * <ul>
     *   <li>O^T = V^T P^T instead of O = P V: P^T goes to a {@code HalfFloat[]} as fp16 values that TornadoVM converts
     *       ({@link MmaLayout#pTileAt}; the class comment says why), V is staged transposed ({@link MmaLayout#vtAt}), the
     *       row sums come from a tile of ones times P^T, and O^T leaves through the scratch
     *       ({@link MmaLayout#outputTAt});</li>
     *   <li>the global K/V loads overlapped with compute: K of tile j + 1 is loaded into registers during tile
     *       j's P V (and stored to local memory at the top of tile j + 1), V of tile j after the softmax, right
     *       before it is stored (at D = 128 after S^T, landing during the softmax); 8 words of 64 bits in flight per
     *       thread, the two sets never live together (a whole-tile prefetch measured no faster with twice the
     *       registers);</li>
     *   <li>the warp's Q^T fragments read once per K/V tile rather than once per key block (8 {@code ldmatrix} instead
     *       of 32; at D = 128 they would hold 32 registers);</li>
     *   <li>the first tile's reference row max comes from the S values each lane reads back anyway, combined
     *       across the warp by {@code shfl.sync} ({@link KernelContext#simdShuffleDown},
     *       {@link KernelContext#simdBroadcastFirst}), instead of a pass of one thread per row over the scratch
     *       (64 dependent global loads) between two barriers;</li>
     *   <li>no barrier at the top of the K/V loop (2 per K/V tile instead of 3: the barrier that publishes P
     *       already orders K's stores after the previous S^T, and the barrier before S^T orders V's and P's after
     *       the previous P V);</li>
     *   <li>the first K tile's loads are issued before the query tile's first barrier and the Q^T staging (each
     *       sweep ends by loading tile 0 again instead of a tile past the end);</li>
     *   <li>O is normalised before the barrier of the recompute flag, which then also publishes it to
     *       {@link #writeOutputTransposed} (one barrier fewer per query tile).</li>
     * </ul>
     * Per query tile with n K/V tiles: 2 n + 2 barriers instead of 3 n + 5.
     */
    public static void attentionD64Pipelined(KernelContext kc, LongArray q, LongArray k, LongArray v, LongArray o,
                                    FloatArray lse, FloatArray scratch, int batch, int queryHeads, int kvHeads,
                                    int queryLength, int kvLength, int causal, int bshd, float scale, int gridSize) {
        final int d = 64;
        final int bq = 64;
        final int bkv = 64;
        int[] qT = kc.allocateIntLocalArray(2064);      // D x Br / 2 and padding (qSubTile): Q^T, B operand
        int[] kT = kc.allocateIntLocalArray(2304);      // Bc x D / 2 and padding (kSubTile): K, A operand
        int[] vT = kc.allocateIntLocalArray(2176);      // D x Bc / 2 and padding (vtSubTile): V^T, A operand
        HalfFloat[] pT = kc.allocateHalfFloatLocalArray(4096);   // Bc x Br fp16: P^T, B operand (pTileAt)
        int[] ones = kc.allocateIntLocalArray(128);     // a 16x16 A tile of ones: it times P^T gives the row sums
        float[] rowMax = kc.allocateFloatLocalArray(64);
        int[] flag = kc.allocateIntLocalArray(4);      // one used; 16 bytes keep every local array 16-byte aligned (ldmatrix)

        int t = kc.localIdx;
        int warp = t >>> 5;
        int lane = t & 31;
        int aSwizzle = aSwizzle(lane);   // this lane's ldmatrix row address in the swizzled A-operand tiles
        ones[t] = HALF_ONE_PAIR;
        if (t == 0) {
            flag[0] = -1;
        }

        int heads = batch * queryHeads;
        int queryTiles = (queryLength + bq - 1) / bq;
        int tiles = queryTiles * heads;
        int offset = kvLength - queryLength;          // bottom-right causal: key j visible to query i iff j <= i + offset
        int sBase = kc.groupIdx * (2 * bkv * bq + bq * (d + 8));   // this CTA's scratch: S^T (two buffers, the first used), O | l
        int oBase = sBase + 2 * bkv * bq;
        int oStore = oBase + MMA_STORE_SKEW;          // O's index for mmaStore (see MMA_STORE_SKEW)
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
                boolean kvTail = kvLength % bkv != 0;   // a K/V tile runs past the last key (a constant: see kvWord)
                int lastKey = causal == 1 ? Math.min(kvLength - 1, q0 + bq - 1 + offset) : kvLength - 1;
                int kvTiles = lastKey < 0 ? 0 : lastKey / bkv + 1;   // tiles above the diagonal are never visited

                // Thread t loads words i = 0..7 (64 bits, four fp16) of the K tile: key kvJ + 16 (i / (D / 32)), columns
                // kvCol + 32 (i % (D / 32)) ..+ 3, stored at kAt + 288 i (kvLoadKey says why this mapping). Written out per
                // word so that only these three per-thread values stay live, not one address per word. (V is staged
                // transposed, by its own mapping: vtItemPair, vtItemQuad.)
                int kvJ = kvLoadKey(t);
                int kvCol = kvLoadColumn(t);
                int kAt = kTileAt(kvJ, kvCol);
                kvCol += kvBase;
                // The first K tile is loaded here, before the barrier and the Q^T staging, so that its loads land
                // during both; every sweep then ends by loading tile 0 again (jn below), for the next sweep.
                long k0 = kvWord(k, kvRow, kvLength, kvTail, kvJ, kvCol);
                long k1 = kvWord(k, kvRow, kvLength, kvTail, kvJ, kvCol + 32);
                long k2 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 16, kvCol);
                long k3 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 16, kvCol + 32);
                long k4 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 32, kvCol);
                long k5 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 32, kvCol + 32);
                long k6 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 48, kvCol);
                long k7 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 48, kvCol + 32);

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
                    // common. Not a sign mask (x >> 31 = -1 or 0): TornadoVM emits >> as shr.b32/shr.b64, a
                    // logical shift in PTX, so on the GPU x >> 31 is 1 for a negative x (that mask kept only
                    // bit 0 of Q, K and V). x >>> 31 (1 or 0) means the same in Java and in PTX; see the class
                    // comment.
                    int ra = q0 + qa;
                    long la = q.get((qBase + Math.min(ra, queryLength - 1) * qRow + 4 * dq) >>> 2) * ((ra - queryLength) >>> 31);
                    long lb = q.get((qBase + Math.min(ra + 1, queryLength - 1) * qRow + 4 * dq) >>> 2) * ((ra + 1 - queryLength) >>> 31);
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
                        // O^T = V^T P^T: o{db}{nb} holds d rows [16 db, 16 db + 16) of the warp's query block nb.
                        float[] o00 = kc.mmaFragment(0.0f);
                        float[] o01 = kc.mmaFragment(0.0f);
                        float[] o10 = kc.mmaFragment(0.0f);
                        float[] o11 = kc.mmaFragment(0.0f);
                        float[] o20 = kc.mmaFragment(0.0f);
                        float[] o21 = kc.mmaFragment(0.0f);
                        float[] o30 = kc.mmaFragment(0.0f);
                        float[] o31 = kc.mmaFragment(0.0f);
                        float[] rowSum0 = kc.mmaFragment(0.0f);   // ones P^T: every row holds the sums of the block's queries
                        float[] rowSum1 = kc.mmaFragment(0.0f);
                        float excess = Float.NEGATIVE_INFINITY;   // largest z of this sweep
                        for (int kvt = 0; kvt < kvTiles; kvt++) {
                            int j0 = kvt * bkv;
                            // aSwizzle, but not loop-invariant to Graal (j0 >>> 31 is 0): hoisted, each mmaLoadA's offset would hold a register.
                            int aRow = aSwizzle + (j0 >>> 31);
                            // S^T in the scratch's first Bc x Br region every tile (each lane reads back only what it
                            // stored itself, so one buffer suffices, and the smaller footprint stays in L1). The zero
                            // (j0 >>> 31) makes the addresses depend on kvt, so Graal does not hoist all 2 Bc / 8 of this
                            // lane's 64-bit read addresses out of the loop (which kept them live in registers).
                            int sTile = sBase + (j0 >>> 31);
                            // No barrier here: K's last readers (the previous S^T) finished before the previous tile's
                            // barrier that publishes P^T, V^T's and P^T's last readers (the previous P V) before the barrier below.

                            // K of this tile, loaded into registers during the previous tile's P V, goes to local memory.
                            // V is loaded only after the softmax, right before it is stored: held in registers through S^T
                            // and the softmax (as at D = 128) it pushed the kernel past its 128-register cap into spills,
                            // which cost more than the overlap gained (measured: 7% slower).
                            kT[kAt] = (int) k0;
                            kT[kAt + 1] = (int) (k0 >>> 32);
                            kT[kAt + 288] = (int) k1;
                            kT[kAt + 289] = (int) (k1 >>> 32);
                            kT[kAt + 576] = (int) k2;
                            kT[kAt + 577] = (int) (k2 >>> 32);
                            kT[kAt + 864] = (int) k3;
                            kT[kAt + 865] = (int) (k3 >>> 32);
                            kT[kAt + 1152] = (int) k4;
                            kT[kAt + 1153] = (int) (k4 >>> 32);
                            kT[kAt + 1440] = (int) k5;
                            kT[kAt + 1441] = (int) (k5 >>> 32);
                            kT[kAt + 1728] = (int) k6;
                            kT[kAt + 1729] = (int) (k6 >>> 32);
                            kT[kAt + 2016] = (int) k7;
                            kT[kAt + 2017] = (int) (k7 >>> 32);
                            kc.localBarrier();

                            // S^T = K Q^T into the scratch (fragment by fragment: scoreAt). Warp w computes the
                            // columns of its own query rows [16 w, 16 w + 16) for all Bc keys, so that each lane turns the S
                            // values it stored itself into P below, and only the warp's own rows of P are read by its P V.
                            // The warp's Q^T fragments (its two 8-query blocks x four d blocks) are read once per tile, not once per
                            // key block: 8 ldmatrix.x2 instead of 32.
                            int qn0 = warp * 2;
                            HalfFloat[] q00 = kc.mmaLoadB(qT, 16, qSubTile(0, qn0, bq) + (j0 >>> 31));
                            HalfFloat[] q10 = kc.mmaLoadB(qT, 16, qSubTile(1, qn0, bq) + (j0 >>> 31));
                            HalfFloat[] q20 = kc.mmaLoadB(qT, 16, qSubTile(2, qn0, bq) + (j0 >>> 31));
                            HalfFloat[] q30 = kc.mmaLoadB(qT, 16, qSubTile(3, qn0, bq) + (j0 >>> 31));
                            HalfFloat[] q01 = kc.mmaLoadB(qT, 16, qSubTile(0, qn0 + 1, bq) + (j0 >>> 31));
                            HalfFloat[] q11 = kc.mmaLoadB(qT, 16, qSubTile(1, qn0 + 1, bq) + (j0 >>> 31));
                            HalfFloat[] q21 = kc.mmaLoadB(qT, 16, qSubTile(2, qn0 + 1, bq) + (j0 >>> 31));
                            HalfFloat[] q31 = kc.mmaLoadB(qT, 16, qSubTile(3, qn0 + 1, bq) + (j0 >>> 31));
                            for (int kb = 0; kb < 4; kb++) {
                                HalfFloat[] a0 = kc.mmaLoadA(kT, 16, kSubTile(kb, 0, d) + aRow);
                                HalfFloat[] a1 = kc.mmaLoadA(kT, 16, kSubTile(kb, 1, d) + aRow);
                                HalfFloat[] a2 = kc.mmaLoadA(kT, 16, kSubTile(kb, 2, d) + aRow);
                                HalfFloat[] a3 = kc.mmaLoadA(kT, 16, kSubTile(kb, 3, d) + aRow);
                                float[] s0 = kc.mmaFragment(0.0f);
                                s0 = kc.mma(a0, q00, s0, MMAShape.M16N8K16);
                                s0 = kc.mma(a1, q10, s0, MMAShape.M16N8K16);
                                s0 = kc.mma(a2, q20, s0, MMAShape.M16N8K16);
                                s0 = kc.mma(a3, q30, s0, MMAShape.M16N8K16);
                                kc.mmaStore(s0, scratch, 0, sTile + MMA_STORE_SKEW + scoreAt(kb * 16, qn0 * 8, bq), 8);
                                float[] s1 = kc.mmaFragment(0.0f);
                                s1 = kc.mma(a0, q01, s1, MMAShape.M16N8K16);
                                s1 = kc.mma(a1, q11, s1, MMAShape.M16N8K16);
                                s1 = kc.mma(a2, q21, s1, MMAShape.M16N8K16);
                                s1 = kc.mma(a3, q31, s1, MMAShape.M16N8K16);
                                kc.mmaStore(s1, scratch, 0, sTile + MMA_STORE_SKEW + scoreAt(kb * 16, qn0 * 8 + 8, bq), 8);
                            }


                            if (kvt == 0 && attempt == 0) {
                                // The reference max (the first tile's) without a pass over the scratch or a barrier: each
                                // lane takes the max of the visible scores it stored itself (keys g, g + 8 of every 16-key
                                // block, for each of its 4 query columns); the 8 lanes of a column (equal lane % 4) combine
                                // theirs by shuffles down by 16, 8 and 4, after which lanes 0..3 hold the 4 columns' maxima,
                                // and lane 0 broadcasts each (brought to it by a shuffle down by its lane) to the warp. Every
                                // lane writes all 16 of the warp's rows (the same values) and reads back its own rows below.
                                int gm = lane >>> 2;
                                int cm = lane & 3;
                                for (int nb = 0; nb < 2; nb++) {
                                    for (int e = 0; e < 2; e++) {
                                        int rm = warp * 16 + nb * 8 + (cm << 1) + e;
                                        int limit = causal == 1 ? Math.min(kvLength - 1, q0 + rm + offset) : kvLength - 1;
                                        float mx = -1.0e30f;     // a row that sees no key (in any tile) keeps -1e30: P = 0
                                        for (int kb = 0; kb < 4; kb++) {
                                            int below = limit - j0 - kb * 16 - gm;
                                            mx = Math.max(mx, Math.min(scratch.get(sTile + scoreAt(kb * 16 + gm, rm, bq)) * scale,
                                                    (below >>> 31) * -2.0e30f + 1.0e30f));
                                            mx = Math.max(mx, Math.min(scratch.get(sTile + scoreAt(kb * 16 + gm + 8, rm, bq)) * scale,
                                                    ((below - 8) >>> 31) * -2.0e30f + 1.0e30f));
                                        }
                                        mx = Math.max(mx, kc.simdShuffleDown(mx, 16));
                                        mx = Math.max(mx, kc.simdShuffleDown(mx, 8));
                                        mx = Math.max(mx, kc.simdShuffleDown(mx, 4));
                                        int r0 = warp * 16 + nb * 8 + e;
                                        rowMax[r0] = kc.simdBroadcastFirst(mx);
                                        rowMax[r0 + 2] = kc.simdBroadcastFirst(kc.simdShuffleDown(mx, 1));
                                        rowMax[r0 + 4] = kc.simdBroadcastFirst(kc.simdShuffleDown(mx, 2));
                                        rowMax[r0 + 6] = kc.simdBroadcastFirst(kc.simdShuffleDown(mx, 3));
                                    }
                                }
                            }
                            if (sweep == 0) {
                                kc.localBarrier();   // S^T complete in the scratch
                                // Recompute (attempt 1) only: one thread per row folds this tile's max over visible scores
                                // into rowMax, the exact max.
                                if (t < bq) {
                                    int limit = causal == 1 ? Math.min(kvLength - 1, q0 + t + offset) : kvLength - 1;
                                    float tileMax = Float.NEGATIVE_INFINITY;
                                    for (int jl = 0; jl < bkv; jl++) {
                                        if (j0 + jl <= limit) {
                                            tileMax = Math.max(tileMax, scratch.get(sTile + scoreAt(jl, t, bq)) * scale);
                                        }
                                    }
                                    rowMax[t] = Math.max(rowMax[t], tileMax);
                                }
                                kc.localBarrier();
                            }

                            // P^T = e^z, z = scale s - m, into the warp's B-operand sub-tiles of P^T (16 keys x 8 queries, pTileAt),
                            // one fp16 store per value: TornadoVM converts a float stored into a HalfFloat[] with cvt.rn.f16.f32
                            // (subnormals and rounding as the hardware does them), so no fp16 encoding by hand. Lane (g = lane / 4,
                            // c = lane % 4) stored S^T rows (keys) g and g + 8 of every key block at query columns 2 c, 2 c + 1 of the
                            // warp's two 8-query blocks; it reads its own values back (same thread: no barrier). Masked keys get
                            // z = -1e30 (P = 0) branch-free; excess tracks the largest z for the recompute check. NaN scores: Math.min
                            // and Math.max lower to min.f32/max.f32, which return the non-NaN operand, so a masked NaN gives P = 0
                            // exactly and a visible one z = 1e30, P = +infinity (its row's O and sum NaN/+infinity, the recompute it
                            // triggers harmless to the other rows); unmasked, P = NaN. (KernelEmulator.ptxKernel runs them so.)
                            int g = lane >>> 2;
                            int c2 = (lane & 3) << 1;
                            // Keys need masking only in causal attention or where the last K/V tile is partial; a constant of the
                            // compiled kernel (TornadoVM specialises the scalar arguments), so otherwise the masking compiles away.
                            boolean masked = causal == 1 || kvTail;
                            // This lane's S^T values: sLane + scoreAt's offset of key block kb, query block nb, row g (+ 8).
                            int sLane = sTile + scoreAt(g, warp * 16 + c2, bq);
                            // -m of the lane's four query rows (nb, e), read once per tile: 0 - m, not -m, so that s scale + mNeg
                            // compiles to one fma. (The selection below folds away: the nb and e loops are unrolled.)
                            int rowLane = warp * 16 + c2;
                            float mNeg00 = 0.0f - rowMax[rowLane];
                            float mNeg01 = 0.0f - rowMax[rowLane + 1];
                            float mNeg10 = 0.0f - rowMax[rowLane + 8];
                            float mNeg11 = 0.0f - rowMax[rowLane + 9];
                            int kbEnd = 4 + (j0 >>> 31);   // 4, but not a constant to Graal: the kb loop stays a loop (8 scores per trip)
                            // Where this lane's P^T values of keys g and g + 8 go (pTileAt), in the warp's first sub-tile; the
                            // key and query blocks add constants, which the stores take as immediate offsets.
                            int pLane = warp * 1024 + c2 + pTileAt(g, 0);
                            int pLane8 = warp * 1024 + c2 + pTileAt(g + 8, 0);
                            for (int kb = 0; kb < kbEnd; kb++) {
                                for (int nb = 0; nb < 2; nb++) {
                                    for (int e = 0; e < 2; e++) {
                                        int r = warp * 16 + nb * 8 + c2 + e;
                                        float mNeg = nb == 0 ? (e == 0 ? mNeg00 : mNeg01) : (e == 0 ? mNeg10 : mNeg11);
                                        int limit = causal == 1 ? Math.min(kvLength - 1, q0 + r + offset) : kvLength - 1;
                                        int below = limit - j0 - kb * 16 - g;       // >= 0: key g visible; >= 8: key g + 8 too
                                        int at = sLane + kb * (bq / 8) * 128 + nb * 128 + e;   // = sTile + scoreAt(kb * 16 + g, r, bq)
                                        float s0 = scratch.get(at) * scale + mNeg;
                                        float s1 = scratch.get(at + 64) * scale + mNeg;
                                        float z0 = masked ? Math.min(s0, (below >>> 31) * -2.0e30f + 1.0e30f) : s0;
                                        float z1 = masked ? Math.min(s1, ((below - 8) >>> 31) * -2.0e30f + 1.0e30f) : s1;
                                        excess = Math.max(excess, Math.max(z0, z1));
                                        pT[pLane + kb * 256 + nb * 128 + e] = new HalfFloat(TornadoMath.exp(z0));
                                        pT[pLane8 + kb * 256 + nb * 128 + e] = new HalfFloat(TornadoMath.exp(z1));
                                    }
                                }
                            }
                            // V^T into local memory: item i of thread t is keys 2 kp, 2 kp + 1 at columns 4 dq .. 4 dq + 3 (vtItemPair,
                            // vtItemQuad), two 64-bit loads that make four ints (the two keys of one d), stored at vtAt.
                            for (int i = 0; i < 4; i++) {
                                int kp = vtItemPair(t, i, d);
                                int dq = vtItemQuad(t, i, d);
                                long w0 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * kp, kvBase + 4 * dq);
                                long w1 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * kp + 1, kvBase + 4 * dq);
                                int at = vtAt(4 * dq, kp, d);
                                vT[at] = (int) (w0 & 0xFFFF) | ((int) (w1 & 0xFFFF) << 16);
                                vT[at + 8] = (int) ((w0 >>> 16) & 0xFFFF) | ((int) ((w1 >>> 16) & 0xFFFF) << 16);
                                vT[at + 16] = (int) ((w0 >>> 32) & 0xFFFF) | ((int) ((w1 >>> 32) & 0xFFFF) << 16);
                                vT[at + 24] = (int) ((w0 >>> 48) & 0xFFFF) | ((int) ((w1 >>> 48) & 0xFFFF) << 16);
                            }
                            kc.localBarrier();   // P^T complete, V^T staged (ldmatrix reads rows that other lanes of the warp wrote)
                            // Next tile's K into registers, landing during P V.
                            int jn = (j0 + bkv) * ((kvt + 1 - kvTiles) >>> 31);   // after the last tile: tile 0, for the next sweep
                            k0 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ, kvCol);
                            k1 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ, kvCol + 32);
                            k2 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 16, kvCol);
                            k3 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 16, kvCol + 32);
                            k4 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 32, kvCol);
                            k5 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 32, kvCol + 32);
                            k6 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 48, kvCol);
                            k7 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 48, kvCol + 32);

                            // O^T += V^T P^T and l += 1 P^T; warp w owns query rows [16 w, 16 w + 16), as columns of O^T. (On the
                            // rare sweep 0 this multiplies a stale P: wasted, and overwritten by sweep 1, but it keeps every
                            // fragment update unconditional.)
                            HalfFloat[] one = kc.mmaLoadA(ones, 16, aRow);
                            for (int kbb = 0; kbb < 4; kbb++) {
                                HalfFloat[] p0 = kc.mmaLoadBSwizzled(pT, 16, (warp * 4 + kbb) * 512 + (j0 >>> 31));
                                HalfFloat[] p1 = kc.mmaLoadBSwizzled(pT, 16, (warp * 4 + kbb) * 512 + 256 + (j0 >>> 31));
                                HalfFloat[] a0 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 0, d) + aRow);
                                o00 = kc.mma(a0, p0, o00, MMAShape.M16N8K16);
                                o01 = kc.mma(a0, p1, o01, MMAShape.M16N8K16);
                                HalfFloat[] a1 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 1, d) + aRow);
                                o10 = kc.mma(a1, p0, o10, MMAShape.M16N8K16);
                                o11 = kc.mma(a1, p1, o11, MMAShape.M16N8K16);
                                HalfFloat[] a2 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 2, d) + aRow);
                                o20 = kc.mma(a2, p0, o20, MMAShape.M16N8K16);
                                o21 = kc.mma(a2, p1, o21, MMAShape.M16N8K16);
                                HalfFloat[] a3 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 3, d) + aRow);
                                o30 = kc.mma(a3, p0, o30, MMAShape.M16N8K16);
                                o31 = kc.mma(a3, p1, o31, MMAShape.M16N8K16);
                                rowSum0 = kc.mma(one, p0, rowSum0, MMAShape.M16N8K16);
                                rowSum1 = kc.mma(one, p1, rowSum1, MMAShape.M16N8K16);
                            }
                        }
                        if (sweep == 1 && excess > MAX_EXCESS) {
                            flag[0] = stamp;     // some score exceeded its row's reference max by more than MAX_EXCESS
                        }
                        int qb = warp * 2;   // the warp's first query block of 8
                        kc.mmaStore(o00, scratch, 0, oStore + outputTAt(qb * 8, 0, d), 8);
                        kc.mmaStore(o01, scratch, 0, oStore + outputTAt(qb * 8 + 8, 0, d), 8);
                        kc.mmaStore(o10, scratch, 0, oStore + outputTAt(qb * 8, 16, d), 8);
                        kc.mmaStore(o11, scratch, 0, oStore + outputTAt(qb * 8 + 8, 16, d), 8);
                        kc.mmaStore(o20, scratch, 0, oStore + outputTAt(qb * 8, 32, d), 8);
                        kc.mmaStore(o21, scratch, 0, oStore + outputTAt(qb * 8 + 8, 32, d), 8);
                        kc.mmaStore(o30, scratch, 0, oStore + outputTAt(qb * 8, 48, d), 8);
                        kc.mmaStore(o31, scratch, 0, oStore + outputTAt(qb * 8 + 8, 48, d), 8);
                        // The 16 rows of a row-sum fragment are equal: row stride 0 stores each query's sum once (16 lanes
                        // write the same value to it).
                        kc.mmaStore(rowSum0, scratch, 0, oStore + bq * d + qb * 8, 0);
                        kc.mmaStore(rowSum1, scratch, 0, oStore + bq * d + qb * 8 + 8, 0);
                    }
                    // Each lane divides the O it stored by its row sums (no barrier: its own values; a recompute
                    // overwrites them), so that the flag's barrier also publishes O for writeOutputTransposed.
                    normaliseOwnColumns(scratch, oBase, warp, lane, d, bq);
                    kc.localBarrier();   // every thread has set the flag or not, O is normalised
                    // After the first attempt only: the recompute can raise the flag again only for a score that is NaN or
                    // +infinity (the exact max bounds every other), and its rowMax is the m of the logsumexp below (reset,
                    // it made the logsumexp -infinity for every row of the tile, not only for the rows that see that key).
                    if (attempt == 0 && flag[0] == stamp) {
                        attempts = 2;    // some score exceeded its row's reference max: recompute with exact maxima
                        if (t < bq) {
                            rowMax[t] = Float.NEGATIVE_INFINITY;
                        }
                    }
                }
                float m = t < bq ? rowMax[t] : 0.0f;
                writeOutputTransposed(scratch, o, lse, m, t, oBase, qBase, qRow, q0, queryLength,
                        (b * queryHeads + h) * queryLength, d, bq);
            }
        }
    }

    /** {@link #attentionD64Pipelined} for D = 128. */
    public static void attentionD128Pipelined(KernelContext kc, LongArray q, LongArray k, LongArray v, LongArray o,
                                    FloatArray lse, FloatArray scratch, int batch, int queryHeads, int kvHeads,
                                    int queryLength, int kvLength, int causal, int bshd, float scale, int gridSize) {
        final int d = 128;
        final int bq = 64;
        final int bkv = 32;
        int[] qT = kc.allocateIntLocalArray(4128);      // D x Br / 2 and padding (qSubTile): Q^T, B operand
        int[] kT = kc.allocateIntLocalArray(2304);      // Bc x D / 2 and padding (kSubTile): K, A operand
        int[] vT = kc.allocateIntLocalArray(2176);      // D x Bc / 2 and padding (vtSubTile): V^T, A operand
        HalfFloat[] pT = kc.allocateHalfFloatLocalArray(2048);   // Bc x Br fp16: P^T, B operand (pTileAt)
        int[] ones = kc.allocateIntLocalArray(128);     // a 16x16 A tile of ones: it times P^T gives the row sums
        float[] rowMax = kc.allocateFloatLocalArray(64);
        int[] flag = kc.allocateIntLocalArray(4);      // one used; 16 bytes keep every local array 16-byte aligned (ldmatrix)

        int t = kc.localIdx;
        int warp = t >>> 5;
        int lane = t & 31;
        int aSwizzle = aSwizzle(lane);   // this lane's ldmatrix row address in the swizzled A-operand tiles
        ones[t] = HALF_ONE_PAIR;
        if (t == 0) {
            flag[0] = -1;
        }

        int heads = batch * queryHeads;
        int queryTiles = (queryLength + bq - 1) / bq;
        int tiles = queryTiles * heads;
        int offset = kvLength - queryLength;          // bottom-right causal: key j visible to query i iff j <= i + offset
        int sBase = kc.groupIdx * (2 * bkv * bq + bq * (d + 8));   // this CTA's scratch: S^T (two buffers, the first used), O | l
        int oBase = sBase + 2 * bkv * bq;
        int oStore = oBase + MMA_STORE_SKEW;          // O's index for mmaStore (see MMA_STORE_SKEW)
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
                boolean kvTail = kvLength % bkv != 0;   // a K/V tile runs past the last key (a constant: see kvWord)
                int lastKey = causal == 1 ? Math.min(kvLength - 1, q0 + bq - 1 + offset) : kvLength - 1;
                int kvTiles = lastKey < 0 ? 0 : lastKey / bkv + 1;   // tiles above the diagonal are never visited

                // Thread t loads words i = 0..7 (64 bits, four fp16) of the K tile: key kvJ + 16 (i / (D / 32)), columns
                // kvCol + 32 (i % (D / 32)) ..+ 3, stored at kAt + 288 i (kvLoadKey says why this mapping). Written out per
                // word so that only these three per-thread values stay live, not one address per word. (V is staged
                // transposed, by its own mapping: vtItemPair, vtItemQuad.)
                int kvJ = kvLoadKey(t);
                int kvCol = kvLoadColumn(t);
                int kAt = kTileAt(kvJ, kvCol);
                kvCol += kvBase;
                // The first K tile is loaded here, before the barrier and the Q^T staging, so that its loads land
                // during both; every sweep then ends by loading tile 0 again (jn below), for the next sweep.
                long k0 = kvWord(k, kvRow, kvLength, kvTail, kvJ, kvCol);
                long k1 = kvWord(k, kvRow, kvLength, kvTail, kvJ, kvCol + 32);
                long k2 = kvWord(k, kvRow, kvLength, kvTail, kvJ, kvCol + 64);
                long k3 = kvWord(k, kvRow, kvLength, kvTail, kvJ, kvCol + 96);
                long k4 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 16, kvCol);
                long k5 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 16, kvCol + 32);
                long k6 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 16, kvCol + 64);
                long k7 = kvWord(k, kvRow, kvLength, kvTail, kvJ + 16, kvCol + 96);

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
                    // common. Not a sign mask (x >> 31 = -1 or 0): TornadoVM emits >> as shr.b32/shr.b64, a
                    // logical shift in PTX, so on the GPU x >> 31 is 1 for a negative x (that mask kept only
                    // bit 0 of Q, K and V). x >>> 31 (1 or 0) means the same in Java and in PTX; see the class
                    // comment.
                    int ra = q0 + qa;
                    long la = q.get((qBase + Math.min(ra, queryLength - 1) * qRow + 4 * dq) >>> 2) * ((ra - queryLength) >>> 31);
                    long lb = q.get((qBase + Math.min(ra + 1, queryLength - 1) * qRow + 4 * dq) >>> 2) * ((ra + 1 - queryLength) >>> 31);
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
                        // O^T = V^T P^T: o{db}_{nb} holds d rows [16 db, 16 db + 16) of the warp's query block nb.
                        float[] o0_0 = kc.mmaFragment(0.0f);
                        float[] o0_1 = kc.mmaFragment(0.0f);
                        float[] o1_0 = kc.mmaFragment(0.0f);
                        float[] o1_1 = kc.mmaFragment(0.0f);
                        float[] o2_0 = kc.mmaFragment(0.0f);
                        float[] o2_1 = kc.mmaFragment(0.0f);
                        float[] o3_0 = kc.mmaFragment(0.0f);
                        float[] o3_1 = kc.mmaFragment(0.0f);
                        float[] o4_0 = kc.mmaFragment(0.0f);
                        float[] o4_1 = kc.mmaFragment(0.0f);
                        float[] o5_0 = kc.mmaFragment(0.0f);
                        float[] o5_1 = kc.mmaFragment(0.0f);
                        float[] o6_0 = kc.mmaFragment(0.0f);
                        float[] o6_1 = kc.mmaFragment(0.0f);
                        float[] o7_0 = kc.mmaFragment(0.0f);
                        float[] o7_1 = kc.mmaFragment(0.0f);
                        float[] rowSum0 = kc.mmaFragment(0.0f);   // ones P^T: every row holds the sums of the block's queries
                        float[] rowSum1 = kc.mmaFragment(0.0f);
                        float excess = Float.NEGATIVE_INFINITY;   // largest z of this sweep
                        for (int kvt = 0; kvt < kvTiles; kvt++) {
                            int j0 = kvt * bkv;
                            // aSwizzle, but not loop-invariant to Graal (j0 >>> 31 is 0): hoisted, each mmaLoadA's offset would hold a register.
                            int aRow = aSwizzle + (j0 >>> 31);
                            // S^T in the scratch's first Bc x Br region every tile (each lane reads back only what it
                            // stored itself, so one buffer suffices, and the smaller footprint stays in L1). The zero
                            // (j0 >>> 31) makes the addresses depend on kvt, so Graal does not hoist all 2 Bc / 8 of this
                            // lane's 64-bit read addresses out of the loop (which kept them live in registers).
                            int sTile = sBase + (j0 >>> 31);
                            // No barrier here: K's last readers (the previous S^T) finished before the previous tile's
                            // barrier that publishes P^T, V^T's and P^T's last readers (the previous P V) before the barrier below.

                            // K of this tile, loaded into registers during the previous tile's P V, goes to local memory;
                            // V of this tile is loaded into registers after S^T (fewer registers live during it) and stored after the
                            // softmax (its previous readers, the last P V, finished before the barrier above).
                            kT[kAt] = (int) k0;
                            kT[kAt + 1] = (int) (k0 >>> 32);
                            kT[kAt + 288] = (int) k1;
                            kT[kAt + 289] = (int) (k1 >>> 32);
                            kT[kAt + 576] = (int) k2;
                            kT[kAt + 577] = (int) (k2 >>> 32);
                            kT[kAt + 864] = (int) k3;
                            kT[kAt + 865] = (int) (k3 >>> 32);
                            kT[kAt + 1152] = (int) k4;
                            kT[kAt + 1153] = (int) (k4 >>> 32);
                            kT[kAt + 1440] = (int) k5;
                            kT[kAt + 1441] = (int) (k5 >>> 32);
                            kT[kAt + 1728] = (int) k6;
                            kT[kAt + 1729] = (int) (k6 >>> 32);
                            kT[kAt + 2016] = (int) k7;
                            kT[kAt + 2017] = (int) (k7 >>> 32);
                            kc.localBarrier();

                            // S^T = K Q^T into the scratch (fragment by fragment: scoreAt). Warp w computes the
                            // columns of its own query rows [16 w, 16 w + 16) for all Bc keys, so that each lane turns the S
                            // values it stored itself into P below, and only the warp's own rows of P are read by its P V.
                            for (int kb = 0; kb < 2; kb++) {
                                // The warp's two 8-query blocks side by side, one K fragment at a time: two independent mma chains and
                                // one A fragment live instead of eight (28 registers fewer at the peak of the tile).
                                int qn0 = warp * 2;
                                float[] st0 = kc.mmaFragment(0.0f);
                                float[] st1 = kc.mmaFragment(0.0f);
                                HalfFloat[] a = kc.mmaLoadA(kT, 16, kSubTile(kb, 0, d) + aRow);
                                st0 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(0, qn0, bq)), st0, MMAShape.M16N8K16);
                                st1 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(0, qn0 + 1, bq)), st1, MMAShape.M16N8K16);
                                a = kc.mmaLoadA(kT, 16, kSubTile(kb, 1, d) + aRow);
                                st0 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(1, qn0, bq)), st0, MMAShape.M16N8K16);
                                st1 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(1, qn0 + 1, bq)), st1, MMAShape.M16N8K16);
                                a = kc.mmaLoadA(kT, 16, kSubTile(kb, 2, d) + aRow);
                                st0 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(2, qn0, bq)), st0, MMAShape.M16N8K16);
                                st1 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(2, qn0 + 1, bq)), st1, MMAShape.M16N8K16);
                                a = kc.mmaLoadA(kT, 16, kSubTile(kb, 3, d) + aRow);
                                st0 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(3, qn0, bq)), st0, MMAShape.M16N8K16);
                                st1 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(3, qn0 + 1, bq)), st1, MMAShape.M16N8K16);
                                a = kc.mmaLoadA(kT, 16, kSubTile(kb, 4, d) + aRow);
                                st0 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(4, qn0, bq)), st0, MMAShape.M16N8K16);
                                st1 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(4, qn0 + 1, bq)), st1, MMAShape.M16N8K16);
                                a = kc.mmaLoadA(kT, 16, kSubTile(kb, 5, d) + aRow);
                                st0 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(5, qn0, bq)), st0, MMAShape.M16N8K16);
                                st1 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(5, qn0 + 1, bq)), st1, MMAShape.M16N8K16);
                                a = kc.mmaLoadA(kT, 16, kSubTile(kb, 6, d) + aRow);
                                st0 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(6, qn0, bq)), st0, MMAShape.M16N8K16);
                                st1 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(6, qn0 + 1, bq)), st1, MMAShape.M16N8K16);
                                a = kc.mmaLoadA(kT, 16, kSubTile(kb, 7, d) + aRow);
                                st0 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(7, qn0, bq)), st0, MMAShape.M16N8K16);
                                st1 = kc.mma(a, kc.mmaLoadB(qT, 16, qSubTile(7, qn0 + 1, bq)), st1, MMAShape.M16N8K16);
                                kc.mmaStore(st0, scratch, 0, sTile + MMA_STORE_SKEW + scoreAt(kb * 16, qn0 * 8, bq), 8);
                                kc.mmaStore(st1, scratch, 0, sTile + MMA_STORE_SKEW + scoreAt(kb * 16, qn0 * 8 + 8, bq), 8);
                            }

                            // V of this tile into registers now, after S^T (fewer registers live during it), landing during the
                            // softmax: item i of thread t is keys 2 kp, 2 kp + 1 at columns 4 dq .. 4 dq + 3 (vtItemPair, vtItemQuad),
                            // stored after the softmax as four ints each (the two keys of one d).
                            long w00 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * vtItemPair(t, 0, d), kvBase + 4 * vtItemQuad(t, 0, d));
                            long w01 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * vtItemPair(t, 0, d) + 1, kvBase + 4 * vtItemQuad(t, 0, d));
                            long w10 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * vtItemPair(t, 1, d), kvBase + 4 * vtItemQuad(t, 1, d));
                            long w11 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * vtItemPair(t, 1, d) + 1, kvBase + 4 * vtItemQuad(t, 1, d));
                            long w20 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * vtItemPair(t, 2, d), kvBase + 4 * vtItemQuad(t, 2, d));
                            long w21 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * vtItemPair(t, 2, d) + 1, kvBase + 4 * vtItemQuad(t, 2, d));
                            long w30 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * vtItemPair(t, 3, d), kvBase + 4 * vtItemQuad(t, 3, d));
                            long w31 = kvWord(v, kvRow, kvLength, kvTail, j0 + 2 * vtItemPair(t, 3, d) + 1, kvBase + 4 * vtItemQuad(t, 3, d));

                            if (kvt == 0 && attempt == 0) {
                                // The reference max (the first tile's) without a pass over the scratch or a barrier: each
                                // lane takes the max of the visible scores it stored itself (keys g, g + 8 of every 16-key
                                // block, for each of its 4 query columns); the 8 lanes of a column (equal lane % 4) combine
                                // theirs by shuffles down by 16, 8 and 4, after which lanes 0..3 hold the 4 columns' maxima,
                                // and lane 0 broadcasts each (brought to it by a shuffle down by its lane) to the warp. Every
                                // lane writes all 16 of the warp's rows (the same values) and reads back its own rows below.
                                int gm = lane >>> 2;
                                int cm = lane & 3;
                                for (int nb = 0; nb < 2; nb++) {
                                    for (int e = 0; e < 2; e++) {
                                        int rm = warp * 16 + nb * 8 + (cm << 1) + e;
                                        int limit = causal == 1 ? Math.min(kvLength - 1, q0 + rm + offset) : kvLength - 1;
                                        float mx = -1.0e30f;     // a row that sees no key (in any tile) keeps -1e30: P = 0
                                        for (int kb = 0; kb < 2; kb++) {
                                            int below = limit - j0 - kb * 16 - gm;
                                            mx = Math.max(mx, Math.min(scratch.get(sTile + scoreAt(kb * 16 + gm, rm, bq)) * scale,
                                                    (below >>> 31) * -2.0e30f + 1.0e30f));
                                            mx = Math.max(mx, Math.min(scratch.get(sTile + scoreAt(kb * 16 + gm + 8, rm, bq)) * scale,
                                                    ((below - 8) >>> 31) * -2.0e30f + 1.0e30f));
                                        }
                                        mx = Math.max(mx, kc.simdShuffleDown(mx, 16));
                                        mx = Math.max(mx, kc.simdShuffleDown(mx, 8));
                                        mx = Math.max(mx, kc.simdShuffleDown(mx, 4));
                                        int r0 = warp * 16 + nb * 8 + e;
                                        rowMax[r0] = kc.simdBroadcastFirst(mx);
                                        rowMax[r0 + 2] = kc.simdBroadcastFirst(kc.simdShuffleDown(mx, 1));
                                        rowMax[r0 + 4] = kc.simdBroadcastFirst(kc.simdShuffleDown(mx, 2));
                                        rowMax[r0 + 6] = kc.simdBroadcastFirst(kc.simdShuffleDown(mx, 3));
                                    }
                                }
                            }
                            if (sweep == 0) {
                                kc.localBarrier();   // S^T complete in the scratch
                                // Recompute (attempt 1) only: one thread per row folds this tile's max over visible scores
                                // into rowMax, the exact max.
                                if (t < bq) {
                                    int limit = causal == 1 ? Math.min(kvLength - 1, q0 + t + offset) : kvLength - 1;
                                    float tileMax = Float.NEGATIVE_INFINITY;
                                    for (int jl = 0; jl < bkv; jl++) {
                                        if (j0 + jl <= limit) {
                                            tileMax = Math.max(tileMax, scratch.get(sTile + scoreAt(jl, t, bq)) * scale);
                                        }
                                    }
                                    rowMax[t] = Math.max(rowMax[t], tileMax);
                                }
                                kc.localBarrier();
                            }

                            // P^T = e^z, z = scale s - m, into the warp's B-operand sub-tiles of P^T (16 keys x 8 queries, pTileAt),
                            // one fp16 store per value, converted by TornadoVM (as in attentionD64Pipelined). Lane (g = lane / 4,
                            // c = lane % 4) stored S^T rows (keys) g and g + 8 of every key block at query columns 2 c, 2 c + 1 of the
                            // warp's two 8-query blocks; it reads its own values back (same thread: no barrier). Masked keys get
                            // z = -1e30 (P = 0) branch-free; excess tracks the largest z for the recompute check. NaN scores: Math.min
                            // and Math.max lower to min.f32/max.f32, which return the non-NaN operand, so a masked NaN gives P = 0
                            // exactly and a visible one z = 1e30, P = +infinity (its row's O and sum NaN/+infinity, the recompute it
                            // triggers harmless to the other rows); unmasked, P = NaN. (KernelEmulator.ptxKernel runs them so.)
                            int g = lane >>> 2;
                            int c2 = (lane & 3) << 1;
                            // Keys need masking only in causal attention or where the last K/V tile is partial; a constant of the
                            // compiled kernel (TornadoVM specialises the scalar arguments), so otherwise the masking compiles away.
                            boolean masked = causal == 1 || kvTail;
                            // This lane's S^T values: sLane + scoreAt's offset of key block kb, query block nb, row g (+ 8).
                            int sLane = sTile + scoreAt(g, warp * 16 + c2, bq);
                            // Where this lane's P^T values of keys g and g + 8 go (pTileAt), in the warp's first sub-tile.
                            int pLane = warp * 512 + c2 + pTileAt(g, 0);
                            int pLane8 = warp * 512 + c2 + pTileAt(g + 8, 0);
                            for (int nb = 0; nb < 2; nb++) {
                                for (int e = 0; e < 2; e++) {
                                    int r = warp * 16 + nb * 8 + c2 + e;
                                    float mNeg = 0.0f - rowMax[r];   // not -rowMax[r]: s scale + mNeg then compiles to one fma
                                    int limit = causal == 1 ? Math.min(kvLength - 1, q0 + r + offset) : kvLength - 1;
                                    for (int kb = 0; kb < 2; kb++) {
                                        int below = limit - j0 - kb * 16 - g;       // >= 0: key g visible; >= 8: key g + 8 too
                                        int at = sLane + kb * (bq / 8) * 128 + nb * 128 + e;   // = sTile + scoreAt(kb * 16 + g, r, bq)
                                        float s0 = scratch.get(at) * scale + mNeg;
                                        float s1 = scratch.get(at + 64) * scale + mNeg;
                                        float z0 = masked ? Math.min(s0, (below >>> 31) * -2.0e30f + 1.0e30f) : s0;
                                        float z1 = masked ? Math.min(s1, ((below - 8) >>> 31) * -2.0e30f + 1.0e30f) : s1;
                                        excess = Math.max(excess, Math.max(z0, z1));
                                        pT[pLane + kb * 256 + nb * 128 + e] = new HalfFloat(TornadoMath.exp(z0));
                                        pT[pLane8 + kb * 256 + nb * 128 + e] = new HalfFloat(TornadoMath.exp(z1));
                                    }
                                }
                            }
                            // V^T into local memory (its last readers, the previous P V, finished before this tile's first barrier).
                            int vt0 = vtAt(4 * vtItemQuad(t, 0, d), vtItemPair(t, 0, d), d);
                            vT[vt0] = (int) (w00 & 0xFFFF) | ((int) (w01 & 0xFFFF) << 16);
                            vT[vt0 + 8] = (int) ((w00 >>> 16) & 0xFFFF) | ((int) ((w01 >>> 16) & 0xFFFF) << 16);
                            vT[vt0 + 16] = (int) ((w00 >>> 32) & 0xFFFF) | ((int) ((w01 >>> 32) & 0xFFFF) << 16);
                            vT[vt0 + 24] = (int) ((w00 >>> 48) & 0xFFFF) | ((int) ((w01 >>> 48) & 0xFFFF) << 16);
                            int vt1 = vtAt(4 * vtItemQuad(t, 1, d), vtItemPair(t, 1, d), d);
                            vT[vt1] = (int) (w10 & 0xFFFF) | ((int) (w11 & 0xFFFF) << 16);
                            vT[vt1 + 8] = (int) ((w10 >>> 16) & 0xFFFF) | ((int) ((w11 >>> 16) & 0xFFFF) << 16);
                            vT[vt1 + 16] = (int) ((w10 >>> 32) & 0xFFFF) | ((int) ((w11 >>> 32) & 0xFFFF) << 16);
                            vT[vt1 + 24] = (int) ((w10 >>> 48) & 0xFFFF) | ((int) ((w11 >>> 48) & 0xFFFF) << 16);
                            int vt2 = vtAt(4 * vtItemQuad(t, 2, d), vtItemPair(t, 2, d), d);
                            vT[vt2] = (int) (w20 & 0xFFFF) | ((int) (w21 & 0xFFFF) << 16);
                            vT[vt2 + 8] = (int) ((w20 >>> 16) & 0xFFFF) | ((int) ((w21 >>> 16) & 0xFFFF) << 16);
                            vT[vt2 + 16] = (int) ((w20 >>> 32) & 0xFFFF) | ((int) ((w21 >>> 32) & 0xFFFF) << 16);
                            vT[vt2 + 24] = (int) ((w20 >>> 48) & 0xFFFF) | ((int) ((w21 >>> 48) & 0xFFFF) << 16);
                            int vt3 = vtAt(4 * vtItemQuad(t, 3, d), vtItemPair(t, 3, d), d);
                            vT[vt3] = (int) (w30 & 0xFFFF) | ((int) (w31 & 0xFFFF) << 16);
                            vT[vt3 + 8] = (int) ((w30 >>> 16) & 0xFFFF) | ((int) ((w31 >>> 16) & 0xFFFF) << 16);
                            vT[vt3 + 16] = (int) ((w30 >>> 32) & 0xFFFF) | ((int) ((w31 >>> 32) & 0xFFFF) << 16);
                            vT[vt3 + 24] = (int) ((w30 >>> 48) & 0xFFFF) | ((int) ((w31 >>> 48) & 0xFFFF) << 16);
                            kc.localBarrier();   // P^T complete, V^T staged (ldmatrix reads rows that other lanes of the warp wrote)
                            // Next tile's K into registers, landing during P V.
                            int jn = (j0 + bkv) * ((kvt + 1 - kvTiles) >>> 31);   // after the last tile: tile 0, for the next sweep
                            k0 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ, kvCol);
                            k1 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ, kvCol + 32);
                            k2 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ, kvCol + 64);
                            k3 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ, kvCol + 96);
                            k4 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 16, kvCol);
                            k5 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 16, kvCol + 32);
                            k6 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 16, kvCol + 64);
                            k7 = kvWord(k, kvRow, kvLength, kvTail, jn + kvJ + 16, kvCol + 96);

                            // O^T += V^T P^T and l += 1 P^T; warp w owns query rows [16 w, 16 w + 16), as columns of O^T. (On the
                            // rare sweep 0 this multiplies a stale P: wasted, and overwritten by sweep 1, but it keeps every
                            // fragment update unconditional.)
                            for (int kbb = 0; kbb < 2; kbb++) {
                                // Per key block, not once per tile as at D = 64: held across both, it left the causal kernel
                                // 16 bytes of spills at 255 registers instead of 8.
                                HalfFloat[] one = kc.mmaLoadA(ones, 16, aRow);
                                HalfFloat[] p0 = kc.mmaLoadBSwizzled(pT, 16, (warp * 2 + kbb) * 512 + (j0 >>> 31));
                                HalfFloat[] p1 = kc.mmaLoadBSwizzled(pT, 16, (warp * 2 + kbb) * 512 + 256 + (j0 >>> 31));
                                HalfFloat[] a0 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 0, d) + aRow);
                                o0_0 = kc.mma(a0, p0, o0_0, MMAShape.M16N8K16);
                                o0_1 = kc.mma(a0, p1, o0_1, MMAShape.M16N8K16);
                                HalfFloat[] a1 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 1, d) + aRow);
                                o1_0 = kc.mma(a1, p0, o1_0, MMAShape.M16N8K16);
                                o1_1 = kc.mma(a1, p1, o1_1, MMAShape.M16N8K16);
                                HalfFloat[] a2 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 2, d) + aRow);
                                o2_0 = kc.mma(a2, p0, o2_0, MMAShape.M16N8K16);
                                o2_1 = kc.mma(a2, p1, o2_1, MMAShape.M16N8K16);
                                HalfFloat[] a3 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 3, d) + aRow);
                                o3_0 = kc.mma(a3, p0, o3_0, MMAShape.M16N8K16);
                                o3_1 = kc.mma(a3, p1, o3_1, MMAShape.M16N8K16);
                                HalfFloat[] a4 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 4, d) + aRow);
                                o4_0 = kc.mma(a4, p0, o4_0, MMAShape.M16N8K16);
                                o4_1 = kc.mma(a4, p1, o4_1, MMAShape.M16N8K16);
                                HalfFloat[] a5 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 5, d) + aRow);
                                o5_0 = kc.mma(a5, p0, o5_0, MMAShape.M16N8K16);
                                o5_1 = kc.mma(a5, p1, o5_1, MMAShape.M16N8K16);
                                HalfFloat[] a6 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 6, d) + aRow);
                                o6_0 = kc.mma(a6, p0, o6_0, MMAShape.M16N8K16);
                                o6_1 = kc.mma(a6, p1, o6_1, MMAShape.M16N8K16);
                                HalfFloat[] a7 = kc.mmaLoadA(vT, 16, vtSubTile(kbb, 7, d) + aRow);
                                o7_0 = kc.mma(a7, p0, o7_0, MMAShape.M16N8K16);
                                o7_1 = kc.mma(a7, p1, o7_1, MMAShape.M16N8K16);
                                rowSum0 = kc.mma(one, p0, rowSum0, MMAShape.M16N8K16);
                                rowSum1 = kc.mma(one, p1, rowSum1, MMAShape.M16N8K16);
                            }
                        }
                        if (sweep == 1 && excess > MAX_EXCESS) {
                            flag[0] = stamp;     // some score exceeded its row's reference max by more than MAX_EXCESS
                        }
                        int qb = warp * 2;   // the warp's first query block of 8
                        kc.mmaStore(o0_0, scratch, 0, oStore + outputTAt(qb * 8, 0, d), 8);
                        kc.mmaStore(o0_1, scratch, 0, oStore + outputTAt(qb * 8 + 8, 0, d), 8);
                        kc.mmaStore(o1_0, scratch, 0, oStore + outputTAt(qb * 8, 16, d), 8);
                        kc.mmaStore(o1_1, scratch, 0, oStore + outputTAt(qb * 8 + 8, 16, d), 8);
                        kc.mmaStore(o2_0, scratch, 0, oStore + outputTAt(qb * 8, 32, d), 8);
                        kc.mmaStore(o2_1, scratch, 0, oStore + outputTAt(qb * 8 + 8, 32, d), 8);
                        kc.mmaStore(o3_0, scratch, 0, oStore + outputTAt(qb * 8, 48, d), 8);
                        kc.mmaStore(o3_1, scratch, 0, oStore + outputTAt(qb * 8 + 8, 48, d), 8);
                        kc.mmaStore(o4_0, scratch, 0, oStore + outputTAt(qb * 8, 64, d), 8);
                        kc.mmaStore(o4_1, scratch, 0, oStore + outputTAt(qb * 8 + 8, 64, d), 8);
                        kc.mmaStore(o5_0, scratch, 0, oStore + outputTAt(qb * 8, 80, d), 8);
                        kc.mmaStore(o5_1, scratch, 0, oStore + outputTAt(qb * 8 + 8, 80, d), 8);
                        kc.mmaStore(o6_0, scratch, 0, oStore + outputTAt(qb * 8, 96, d), 8);
                        kc.mmaStore(o6_1, scratch, 0, oStore + outputTAt(qb * 8 + 8, 96, d), 8);
                        kc.mmaStore(o7_0, scratch, 0, oStore + outputTAt(qb * 8, 112, d), 8);
                        kc.mmaStore(o7_1, scratch, 0, oStore + outputTAt(qb * 8 + 8, 112, d), 8);
                        // The 16 rows of a row-sum fragment are equal: row stride 0 stores each query's sum once (16 lanes
                        // write the same value to it).
                        kc.mmaStore(rowSum0, scratch, 0, oStore + bq * d + qb * 8, 0);
                        kc.mmaStore(rowSum1, scratch, 0, oStore + bq * d + qb * 8 + 8, 0);
                    }
                    // Each lane divides the O it stored by its row sums (no barrier: its own values; a recompute
                    // overwrites them), so that the flag's barrier also publishes O for writeOutputTransposed.
                    normaliseOwnColumns(scratch, oBase, warp, lane, d, bq);
                    kc.localBarrier();   // every thread has set the flag or not, O is normalised
                    // After the first attempt only: the recompute can raise the flag again only for a score that is NaN or
                    // +infinity (the exact max bounds every other), and its rowMax is the m of the logsumexp below (reset,
                    // it made the logsumexp -infinity for every row of the tile, not only for the rows that see that key).
                    if (attempt == 0 && flag[0] == stamp) {
                        attempts = 2;    // some score exceeded its row's reference max: recompute with exact maxima
                        if (t < bq) {
                            rowMax[t] = Float.NEGATIVE_INFINITY;
                        }
                    }
                }
                float m = t < bq ? rowMax[t] : 0.0f;
                writeOutputTransposed(scratch, o, lse, m, t, oBase, qBase, qRow, q0, queryLength,
                        (b * queryHeads + h) * queryLength, d, bq);
            }
        }
    }

    /**
     * The 64 bits (four fp16) of key {@code row} at column {@code col} (absolute, in fp16 elements, with the
     * head's base) of K or V; 0 for a key past the end (the load reads the last key). Global memory only.
     */
    static long kvWord(LongArray a, int kvRow, int kvLength, boolean kvTail, int row, int col) {
        // kvTail (a constant of the compiled kernel): whether some K/V tile runs past the last key. If none does,
        // the clamp and the 64-bit multiply by 0 or 1 compile away.
        return kvTail ? a.get((Math.min(row, kvLength - 1) * kvRow + col) >>> 2) * ((row - kvLength) >>> 31)
                : a.get((row * kvRow + col) >>> 2);
    }

    /** {@link #MMA_STORE_SKEW} for an array header of {@code arrayHeaderBytes}. */
    static int mmaStoreSkew(long arrayHeaderBytes) {
        return (int) ((arrayHeaderBytes - MMA_STORE_HEADER_BYTES) / Float.BYTES);
    }

    // ---------------------------------------------------------------------------------------------
    // Helpers that touch only global memory. Local (shared) arrays are accessed in the kernel methods
    // themselves: TornadoVM addresses a local array correctly only where the access sees the array
    // allocation directly; passed to a helper method, the array arrives behind a type check and is
    // addressed like a Java heap array (header offset, byte index), which is out of bounds in shared
    // memory.

    /**
     * Each lane divides the O^T elements it stored in the scratch ({@link MmaLayout#outputTAt}: columns g, g + 8 of
     * every 16, queries 2 (lane % 4), + 1 of each of its warp's two query blocks) by their queries' row sums, in
     * place, so that {@link #writeOutputTransposed} can convert values read straight from the scratch to fp16.
     */
    static void normaliseOwnColumns(FloatArray scratch, int oBase, int warp, int lane, int d, int bq) {
        int g = lane >>> 2;
        int query0 = warp * 16 + ((lane & 3) << 1);
        for (int nb = 0; nb < 2; nb++) {
            for (int e = 0; e < 2; e++) {
                int query = query0 + nb * 8 + e;
                float sum = scratch.get(oBase + bq * d + query);
                float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;    // a row that sees no key gives O = 0
                for (int col = g; col < d; col += 8) {
                    int at = oBase + outputTAt(query, col, d);
                    scratch.set(at, scratch.get(at) * inverse);
                }
            }
        }
    }

    /**
     * O (already divided by l) from the O^T scratch ({@link MmaLayout#outputTAt}) to fp16, four values per 64-bit
     * store: a warp instruction covers 8 queries x 4 quads of one 16-column block (its loads touch 4 lines of one
     * fragment); logsumexp = m + ln(l) (thread t < Br passes its row's m), -infinity for a row that saw no key, NaN for
     * one that saw a NaN score.
     */
    static void writeOutputTransposed(FloatArray scratch, LongArray o, FloatArray lse, float rowMax, int t, int oBase,
                                      int qBase, int qRow, int q0, int queryLength, int lseBase, int d, int bq) {
        for (int it = t; it < bq * (d / 4); it += 128) {
            int group = it >>> 5;                                     // 8 queries x 4 quads each
            int r = 8 * (group % (bq / 8)) + (it & 7);
            int dq = 4 * (group / (bq / 8)) + ((it & 31) >>> 3);
            if (q0 + r < queryLength) {
                int at = oBase + outputTAt(r, 4 * dq, d);
                long h0 = new HalfFloat(scratch.get(at)).getHalfFloatValue() & 0xFFFF;
                long h1 = new HalfFloat(scratch.get(at + 8)).getHalfFloatValue() & 0xFFFF;
                long h2 = new HalfFloat(scratch.get(at + 16)).getHalfFloatValue() & 0xFFFF;
                long h3 = new HalfFloat(scratch.get(at + 24)).getHalfFloatValue() & 0xFFFF;
                o.set((qBase + (q0 + r) * qRow + 4 * dq) >>> 2, h0 | (h1 << 16) | (h2 << 32) | (h3 << 48));
            }
        }
        if (t < bq && q0 + t < queryLength) {
            // A row that sees a NaN (or +infinity) score has a NaN or +infinite sum (P = e^z is NaN, or +infinity where the
            // mask's min.f32 turned a NaN z into 1e30): sum - sum, 0 for every finite sum, makes its logsumexp NaN.
            float sum = scratch.get(oBase + bq * d + t);
            lse.set(lseBase + q0 + t, sum == 0.0f ? Float.NEGATIVE_INFINITY : rowMax + TornadoMath.log(sum) + (sum - sum));
        }
    }
}
