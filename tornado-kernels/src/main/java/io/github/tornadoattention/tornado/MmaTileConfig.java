package io.github.tornadoattention.tornado;

import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.PlanOptions;
import java.util.List;

/**
 * Kernel traits of tornado-mma (FlashAttention-2's "kernel traits": tile sizes, warps, shared-memory
 * layout, JIT options), kept apart from the kernel body in {@link MmaKernels}; where each element of a tile sits
 * is {@link MmaLayout}'s. The configurations that have a kernel are the rows of the variant table
 * (tornado-kernels/src/main/templates/KernelVariants.java), which the build writes into {@link MmaKernels#CONFIGS}
 * with one kernel each; the kernels allocate their local arrays with these sizes as literal constants, and
 * {@code MmaKernelsTest} checks that both agree.
 *
 * <p>All tiles are fp16 in the layouts the intrinsics expect, packed two to an {@code int} where an {@code int[]} holds
 * them:
 * <ul>
 *   <li>A operand (K tile for S^T = K Q^T; V^T for O^T = V^T P^T; a constant tile of ones): 16x16 sub-tiles,
 *       row-major, 32-byte rows, 512 bytes each ({@code mmaLoadA} issues {@code ldmatrix.x4} with a fixed 32-byte row
 *       stride); K's sub-tiles are padded to 576 bytes, V^T's to 544, so that their staging stores are free of bank
 *       conflicts.</li>
 *   <li>B operand (Q^T tile; P^T in a {@code HalfFloat[]}): 16x8 sub-tiles, [k][n] row-major, 16-byte rows, 256 bytes
 *       each ({@code mmaLoadB} and {@code mmaLoadBSwizzled} issue {@code ldmatrix.x2.trans}).</li>
 * </ul>
 *
 * @param headDim   D, a multiple of 16
 * @param blockQ    Br: query rows per tile (one CTA works on one tile at a time); 16 per warp
 * @param blockKv   Bc: keys per K/V tile
 * @param warps     warps per CTA (the kernel is written for 4)
 * @param kvBuffers 2: K and V^T each in a buffer of their own; 1: in turns in one buffer, sized for K (the variant trait
 *                  ONE_KV_BUFFER, for a head dim whose Q^T leaves no room for both: two more barriers per K/V tile)
 * @param jitFlags  the CUDA JIT options the kernels are loaded with ({@code withCompilerFlags}: {@code NAME VALUE}
 *                  pairs), or null for TornadoVM's; {@link PlanOptions#mmaJitFlags()} replaces them
 * @param loads     how K and V reach local memory, which decides the kernel family and its backend ({@link Loads})
 * @param kvStages  {@link Loads#CP_ASYNC}: 2, K/V tile j + 1 is copied while tile j is computed (two buffers each); 1,
 *                  each tile's copies land before it is computed. 1 for {@link Loads#REGISTERS}.
 */
public record MmaTileConfig(int headDim, int blockQ, int blockKv, int warps, int kvBuffers, String jitFlags, Loads loads,
                            int kvStages) {
    /** How K and V reach local memory; each is one kernel family and the TornadoVM backend it compiles on. */
    public enum Loads {
        /**
         * {@link MmaKernels} (TornadoVM's PTX backend, which has no cp.async): 64-bit global loads into registers during
         * the previous tile's compute, stored to local memory (V transposed, as the A operand of O^T = V^T P^T).
         */
        REGISTERS,
        /**
         * {@link MmaCpAsyncKernels} (TornadoVM's CUDA backend): {@code asyncCopyToLocal} (cp.async, 4 bytes a copy)
         * straight into local memory in the tiles' natural row-major layout: V as the B operand of O = P V, P as the A
         * operand (packed by hand into ints); fp16 and bf16 ({@code mmaBF16}).
         */
        CP_ASYNC
    }

    /** A configuration of the PTX backend's kernels ({@link Loads#REGISTERS}). */
    public MmaTileConfig(int headDim, int blockQ, int blockKv, int warps, int kvBuffers, String jitFlags) {
        this(headDim, blockQ, blockKv, warps, kvBuffers, jitFlags, Loads.REGISTERS, 1);
    }

    /** Largest grid: CTAs loop over tiles beyond this, so the fp32 scratch stays bounded. */
    public static final int MAX_CTAS = 1024;
    /** Static shared memory a CTA may use (TornadoVM launches with no dynamic shared memory). */
    public static final int MAX_SHARED_BYTES = 48 * 1024;

    /**
     * Why no other head dim, in the refusal: a head dim is a row of the variant table with its own K/V staging map
     * ({@link MmaLayout#vtItemPair}); tornado-simt serves every multiple of 8 up to 256.
     */
    static final String HEAD_DIM_NOTE = " (a kernel per head dim; tornado-simt serves every head dim up to 256)";

    /**
     * The launch table ({@link MmaKernels#CONFIGS}): the configuration of the kernel for {@code headDim}. D = 64 is
     * JIT-compiled with at most 128 registers, so 4 CTAs of 128 threads fit an SM instead of 3 (measured on an H200
     * with the pipelined kernel before its row max moved to shuffles: 0.232 ms instead of 0.277 at (16,8,512,64),
     * 0.157 instead of 0.183 causal; the few spills this causes cost less than the occupancy gains); D = 128 needs its
     * ~250 registers: no cap. D = 32: D = 64's tiles and cap (22,064 bytes). D = 96: Bc = 32 (30,704 bytes). D = 192: Bc = 16 (41,040 bytes; Bc = 32 would need 56.5 KB). D = 256: Q^T alone is 32 KB
     * of the 48 KB, so Bc = 16 and K and V^T in turns in one buffer (kvBuffers 1: 45,072 bytes; two buffers would need
     * 53,776); no cap (its O accumulators alone are 128 registers per thread).
     */
    public static MmaTileConfig forHeadDim(int headDim) {
        return forHeadDim(headDim, Loads.REGISTERS);
    }

    /**
     * The configuration of the kernel for {@code headDim} in the family of {@code loads} ({@link MmaKernels#CONFIGS},
     * {@link MmaCpAsyncKernels#CONFIGS}: both from the variant table).
     */
    public static MmaTileConfig forHeadDim(int headDim, Loads loads) {
        List<MmaTileConfig> table = loads == Loads.REGISTERS ? MmaKernels.CONFIGS : MmaCpAsyncKernels.CONFIGS;
        for (MmaTileConfig config : table) {
            if (config.headDim() == headDim) {
                return config;
            }
        }
        throw new InvalidArgumentException("headDim", headDim, "tornado-mma supports " + String.join(", ",
                table.stream().map(c -> String.valueOf(c.headDim())).toList()) + HEAD_DIM_NOTE);
    }

    /**
     * The JIT options a plan loads the kernels with: {@code options}' if it sets some ("" for none), else {@link #jitFlags()}.
     * TornadoVM's PTX backend applies them; its CUDA backend compiles with NVRTC and takes none (so D = 64's register cap
     * applies on the PTX backend only, and a plan that sets some is refused there).
     */
    public String jitFlags(PlanOptions options) {
        String chosen = options.mmaJitFlags() != null ? options.mmaJitFlags() : jitFlags;
        return chosen == null || chosen.isEmpty() ? null : chosen;
    }

    public int threads() {
        return 32 * warps;
    }

    /** Q^T as B operand: D x Br fp16, each d block's sub-tiles 16 bytes on from the last's: where qSubTile's next d block would start. */
    public int queryTileInts() {
        return MmaLayout.qSubTile(headDim / 16, 0, blockQ) / 4;
    }

    /** K as A operand: Bc x D fp16, each 512-byte sub-tile followed by 64 bytes of padding: where kSubTile's next key block would start. */
    public int keyTileInts() {
        return MmaLayout.kSubTile(blockKv / 16, 0, headDim) / 4;
    }

    /** V^T as A operand: D x Bc fp16, each 512-byte sub-tile followed by 32 bytes of padding (vtSubTile). */
    public int valueTransposedTileInts() {
        return MmaLayout.vtSubTile(blockKv / 16, 0, headDim) / 4;
    }

    /** P^T as B operand: Bc x Br fp16 in a {@code HalfFloat[]}, one value per element. */
    public int probabilityTransposedTileHalfs() {
        return blockKv * blockQ;
    }

    /** A constant 16x16 A sub-tile of ones: it times P^T gives the row sums of P, as columns. */
    public int constantATileInts() {
        return 128;
    }

    /** V as B operand ({@link Loads#CP_ASYNC}): Bc x D fp16 row-major, four 256-byte sub-tiles per 1152 bytes ({@link MmaLayout#vSubTile}). */
    public int valueTileInts() {
        return MmaLayout.vSubTile(blockKv / 16, 0, headDim) / 4;
    }

    /** P as A operand ({@link Loads#CP_ASYNC}): Br x Bc fp16, two to an int. */
    public int probabilityTileInts() {
        return blockQ * blockKv / 2;
    }

    /** Static shared memory of the kernels. */
    public int sharedMemoryBytes() {
        if (loads == Loads.CP_ASYNC) {
            // K and V (B operand) per stage, or in turns in one buffer; P as ints; a 16x8 B tile of ones (64 ints); the rows'
            // reference max with the recompute flag after them (Br + 4 floats).
            int kv = kvBuffers == 2 ? kvStages * (keyTileInts() + valueTileInts()) : Math.max(keyTileInts(), valueTileInts());
            return 4 * (queryTileInts() + kv + probabilityTileInts() + 64 + 4 + blockQ);
        }
        // + 4: the recompute flag, one int padded to 16 bytes (TornadoVM declares shared arrays without .align, so every
        // array's size is kept a multiple of 16 bytes for ldmatrix's alignment).
        int kv = kvBuffers == 2 ? keyTileInts() + valueTransposedTileInts() : Math.max(keyTileInts(), valueTransposedTileInts());
        int ints = queryTileInts() + kv + constantATileInts() + 4;
        int floats = blockQ; // reference max per row
        return 4 * (ints + floats) + 2 * probabilityTransposedTileHalfs();
    }

    /**
     * fp32 scratch per CTA in global memory: room for S^T twice (Bc x Br each; the kernels use the first only, which
     * keeps it in L1; the synchronous kernels of the tests alternate between the two by K/V tile) and O with its row
     * sums in Br x (D + 8) floats (the kernels' O^T, {@link MmaLayout#outputTAt}, and one row sum per query use
     * Br x (D + 1); the synchronous kernels' O the whole). The KernelContext API offers no access to accumulator
     * fragment elements, so S and O leave the tensor cores only through {@code mmaStore} (st.global.f32).
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
        if (kvBuffers != 1 && kvBuffers != 2) {
            throw new IllegalArgumentException("K and V^T take one buffer or two: kvBuffers " + kvBuffers);
        }
        if (kvStages != 1 && (kvStages != 2 || loads != Loads.CP_ASYNC || kvBuffers != 2)) {
            throw new IllegalArgumentException("two K/V stages need cp.async and separate K and V buffers: kvStages "
                    + kvStages + ", " + loads + ", kvBuffers " + kvBuffers);
        }
    }
}
