package io.github.tornadoattention.tornado;

import io.github.tornadoattention.InvalidArgumentException;

/**
 * Kernel traits of tornado-mma (FlashAttention-2's "kernel traits": tile sizes, warps, shared-memory
 * layout), kept apart from the kernel body in {@link MmaKernels}. The kernel allocates its local arrays
 * with these sizes as literal constants; {@code MmaKernelsTest} checks that both agree.
 *
 * <p>All tiles are fp16 in the layouts the intrinsics expect, packed two to an {@code int} where an {@code int[]} holds
 * them:
 * <ul>
 *   <li>A operand (K tile for S^T = K Q^T; V^T for O^T = V^T P^T in the pipelined kernels, P for O = P V in the
 *       synchronous ones; constant tiles): 16x16 sub-tiles, row-major, 32-byte rows, 512 bytes each
 *       ({@code mmaLoadA} issues {@code ldmatrix.x4} with a fixed 32-byte row stride); K's sub-tiles are padded to
 *       576 bytes, V^T's to 544, so that their staging stores are free of bank conflicts.</li>
 *   <li>B operand (Q^T tile; P^T in a {@code HalfFloat[]} in the pipelined kernels, V in the synchronous ones;
 *       constant tiles): 16x8 sub-tiles, [k][n] row-major, 16-byte rows, 256 bytes each ({@code mmaLoadB} and
 *       {@code mmaLoadBSwizzled} issue {@code ldmatrix.x2.trans}); V's sub-tiles are spread over 1152-byte groups of
 *       four for the same reason.</li>
 * </ul>
 * {@link #sharedMemoryBytes()} is the pipelined kernels' (the default), {@link #synchronousSharedMemoryBytes()} the
 * synchronous ones'.
 *
 * @param headDim   D, 64 or 128
 * @param blockQ    Br: query rows per tile (one CTA works on one tile at a time); 16 per warp
 * @param blockKv   Bc: keys per K/V tile
 * @param warps     warps per CTA (the kernel is written for 4)
 */
public record MmaTileConfig(int headDim, int blockQ, int blockKv, int warps) {
    /** Largest grid: CTAs loop over tiles beyond this, so the fp32 scratch stays bounded. */
    public static final int MAX_CTAS = 1024;
    /** Static shared memory a CTA may use (TornadoVM launches with no dynamic shared memory). */
    public static final int MAX_SHARED_BYTES = 48 * 1024;

    public static final MmaTileConfig D64 = new MmaTileConfig(64, 64, 64, 4);
    public static final MmaTileConfig D128 = new MmaTileConfig(128, 64, 32, 4);

    /** The launch table: one configuration per supported head dim. */
    public static MmaTileConfig forHeadDim(int headDim) {
        return switch (headDim) {
            case 64 -> D64;
            case 128 -> D128;
            default -> throw new InvalidArgumentException("headDim", headDim, "tornado-mma supports 64, 128");
        };
    }

    public int threads() {
        return 32 * warps;
    }

    /** Q^T as B operand: D x Br fp16, each d block's sub-tiles 16 bytes on from the last's: where qSubTile's next d block would start. */
    public int queryTileInts() {
        return MmaKernels.qSubTile(headDim / 16, 0, blockQ) / 4;
    }

    /** K as A operand: Bc x D fp16, each 512-byte sub-tile followed by 64 bytes of padding: where kSubTile's next key block would start. */
    public int keyTileInts() {
        return MmaKernels.kSubTile(blockKv / 16, 0, headDim) / 4;
    }

    /** V as B operand (synchronous kernels): Bc x D fp16, four 256-byte sub-tiles per 1152-byte group: where vSubTile's next key block would start. */
    public int valueTileInts() {
        return MmaKernels.vSubTile(blockKv / 16, 0, headDim) / 4;
    }

    /** V^T as A operand (pipelined kernels): D x Bc fp16, each 512-byte sub-tile followed by 32 bytes of padding (vtSubTile). */
    public int valueTransposedTileInts() {
        return MmaKernels.vtSubTile(blockKv / 16, 0, headDim) / 4;
    }

    /** P as A operand (synchronous kernels): Br x Bc fp16. */
    public int probabilityTileInts() {
        return blockQ * blockKv / 2;
    }

    /** P^T as B operand (pipelined kernels): Bc x Br fp16 in a {@code HalfFloat[]}, one value per element. */
    public int probabilityTransposedTileHalfs() {
        return blockKv * blockQ;
    }

    /** A constant 16x8 B sub-tile of ones (synchronous kernels): P times it gives the row sums of P. */
    public int constantTileInts() {
        return 64;
    }

    /** A constant 16x16 A sub-tile of ones (pipelined kernels): it times P^T gives the row sums of P, as columns. */
    public int constantATileInts() {
        return 128;
    }

    /** Static shared memory of the pipelined kernels (the default). */
    public int sharedMemoryBytes() {
        // + 4: the recompute flag, one int padded to 16 bytes (TornadoVM declares shared arrays without .align, so every
        // array's size is kept a multiple of 16 bytes for ldmatrix's alignment).
        int ints = queryTileInts() + keyTileInts() + valueTransposedTileInts() + constantATileInts() + 4;
        int floats = blockQ; // reference max per row
        return 4 * (ints + floats) + 2 * probabilityTransposedTileHalfs();
    }

    /** Static shared memory of the synchronous kernels ({@code -Dtornado.attention.mma.pipeline=false}). */
    public int synchronousSharedMemoryBytes() {
        int ints = queryTileInts() + keyTileInts() + valueTileInts() + probabilityTileInts() + constantTileInts() + 4;
        int floats = blockQ;
        return 4 * (ints + floats);
    }

    /**
     * fp32 scratch per CTA in global memory: S^T twice (Bc x Br each; the synchronous kernels alternate between
     * the two by K/V tile, the pipelined ones use the first only, which keeps it in L1) and O with its row sums
     * (Br x (D + 8) floats: the synchronous kernels' O fragment by fragment, MmaKernels.outputAt; the pipelined kernels'
     * O^T, MmaKernels.outputTAt, and one row sum per query use Br x (D + 1)). The KernelContext API offers no access to
     * accumulator fragment elements, so S and O leave the tensor cores only through {@code mmaStore}
     * (st.global.f32).
     */
    public int scratchFloatsPerCta() {
        return 2 * blockKv * blockQ + blockQ * (headDim + 8);
    }

    /** Offset within a CTA's scratch of S^T buffer 0 or 1 (K/V tile parity). */
    public int scoresOffset(int buffer) {
        return buffer * blockKv * blockQ;
    }

    public int outputOffset() {
        return 2 * blockKv * blockQ;
    }

    public int queryTiles(int queryLength) {
        return (queryLength + blockQ - 1) / blockQ;
    }

    /** Work items: one per (query tile, batch x head). */
    public int tiles(int batch, int queryHeads, int queryLength) {
        return queryTiles(queryLength) * batch * queryHeads;
    }

    /** CTAs launched: one per tile, at most {@link #MAX_CTAS}. */
    public int gridSize(int batch, int queryHeads, int queryLength) {
        return Math.min(MAX_CTAS, tiles(batch, queryHeads, queryLength));
    }

    public MmaTileConfig {
        if (warps != 4) {
            throw new IllegalArgumentException("the tornado-mma kernels are written for 4 warps");
        }
        if (blockQ != 16 * warps) {
            throw new IllegalArgumentException("each warp owns 16 query rows: blockQ must be 16 * warps");
        }
        if (blockKv % 16 != 0 || headDim % 16 != 0) {
            throw new IllegalArgumentException("blockKv and headDim must be multiples of 16");
        }
    }
}
