package io.github.tornadoattention.tornado;

import io.github.tornadoattention.InvalidArgumentException;

/**
 * Kernel traits of tornado-simt, kept apart from the kernel body in {@link SimtKernels} (the configurations that have a
 * kernel are the rows of the variant table, tornado-kernels/src/main/templates/KernelVariants.java, which the build
 * writes into {@link SimtKernels#CONFIGS} with one kernel each): one workgroup of
 * {@code blockQ * threadsPerRow} threads per (query tile, batch x head); {@code threadsPerRow} threads
 * share a query row. Shared memory holds Q (fp32, Br x (maxHeadDim + 1)), K (Bc x (maxHeadDim + 1)),
 * V (Bc x maxHeadDim), P (Br x (Bc + 1)) and a reduction buffer; the +1 pads rows so that threads reading
 * different rows at the same column hit different banks.
 *
 * @param maxHeadDim    largest D the configuration serves (its shared arrays are sized for it)
 * @param blockQ        Br: query rows per workgroup
 * @param blockKv       Bc: keys per K/V tile
 * @param threadsPerRow threads that share a query row; each owns Bc / threadsPerRow scores and
 *                      maxHeadDim / threadsPerRow output columns
 */
public record SimtTileConfig(int maxHeadDim, int blockQ, int blockKv, int threadsPerRow) {
    public static final int MAX_SHARED_BYTES = 48 * 1024;

    /** The launch table ({@link SimtKernels#CONFIGS}): the configuration with the smallest maxHeadDim >= {@code headDim}. */
    public static SimtTileConfig forHeadDim(int headDim) {
        SimtTileConfig chosen = null;
        for (SimtTileConfig config : SimtKernels.CONFIGS) {
            if (headDim >= 1 && headDim <= config.maxHeadDim()
                    && (chosen == null || config.maxHeadDim() < chosen.maxHeadDim())) {
                chosen = config;
            }
        }
        if (chosen == null) {
            int largest = SimtKernels.CONFIGS.stream().mapToInt(SimtTileConfig::maxHeadDim).max().orElse(0);
            throw new InvalidArgumentException("headDim", headDim, "tornado-simt supports 1.." + largest);
        }
        return chosen;
    }

    public int threads() {
        return blockQ * threadsPerRow;
    }

    public int keysPerThread() {
        return blockKv / threadsPerRow;
    }

    public int columnsPerThread() {
        return maxHeadDim / threadsPerRow;
    }

    public int queryTileFloats() {
        return blockQ * (maxHeadDim + 1);
    }

    public int keyTileFloats() {
        return blockKv * (maxHeadDim + 1);
    }

    public int valueTileFloats() {
        return blockKv * maxHeadDim;
    }

    public int probabilityTileFloats() {
        return blockQ * (blockKv + 1);
    }

    public int sharedMemoryBytes() {
        return 4 * (queryTileFloats() + keyTileFloats() + valueTileFloats() + probabilityTileFloats() + threads());
    }

    public int queryTiles(int queryLength) {
        return (queryLength + blockQ - 1) / blockQ;
    }

    /** One workgroup per (query tile, batch x head). */
    public int workgroups(int batch, int queryHeads, int queryLength) {
        return queryTiles(queryLength) * batch * queryHeads;
    }

    public SimtTileConfig {
        if (blockKv % threadsPerRow != 0 || maxHeadDim % threadsPerRow != 0) {
            throw new IllegalArgumentException("blockKv and maxHeadDim must be multiples of threadsPerRow");
        }
        if ((blockQ * threadsPerRow) % 32 != 0) {
            throw new IllegalArgumentException("a workgroup must be whole warps");
        }
    }
}
