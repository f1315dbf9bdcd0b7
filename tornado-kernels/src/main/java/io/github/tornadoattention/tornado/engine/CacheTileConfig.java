package io.github.tornadoattention.tornado.engine;

import io.github.tornadoattention.InvalidArgumentException;

/**
 * Kernel traits of the Java KV-cache kernels' decode split and prefill, kept apart from the kernel bodies in
 * {@link CacheKernels} (the configurations that have kernels are the rows of the variant table,
 * tornado-kernels/src/main/templates/KernelVariants.java, which the build writes into {@link CacheKernels#CONFIGS}). One
 * workgroup of {@code rows x threadsPerRow} threads per block of query rows; local memory holds Q (fp32,
 * rows x (maxHeadDim + 1)), a K tile (blockKv x (maxHeadDim + 1)), a V tile (blockKv x maxHeadDim), the scores
 * (rows x (blockKv + 1)), one value per thread and the tile's key rows (2 blockKv ints); the + 1 pads rows so that
 * threads reading different rows at the same column hit different banks.
 *
 * @param maxHeadDim    the largest D served (the local arrays are sized for it); D a multiple of 16 up to it
 * @param rows          query rows per workgroup (decode: packed (head, query) rows of one KV head; prefill: packed
 *                      query rows)
 * @param blockKv       keys per K/V tile, and the granularity of a split's key range
 * @param threadsPerRow threads that share a query row; each owns 4 scores and maxHeadDim / threadsPerRow output
 *                      columns
 */
public record CacheTileConfig(int maxHeadDim, int rows, int blockKv, int threadsPerRow) {
    /** Static local memory a workgroup may use (TornadoVM launches with no dynamic shared memory). */
    public static final int MAX_SHARED_BYTES = 48 * 1024;
    /**
     * The smallest head dim served, and the step between served ones: the decode's copies of a row split D into
     * quarters of whole 4-column steps.
     */
    public static final int MIN_HEAD_DIM = 16;

    /**
     * The launch table ({@link CacheKernels#CONFIGS}): the configuration with the smallest maxHeadDim >= {@code headDim},
     * for a multiple of {@link #MIN_HEAD_DIM} up to the largest maxHeadDim.
     */
    public static CacheTileConfig forHeadDim(int headDim) {
        CacheTileConfig chosen = null;
        int largest = 0;
        for (CacheTileConfig config : CacheKernels.CONFIGS) {
            largest = Math.max(largest, config.maxHeadDim());
            if (headDim <= config.maxHeadDim() && (chosen == null || config.maxHeadDim() < chosen.maxHeadDim())) {
                chosen = config;
            }
        }
        if (chosen == null || headDim < MIN_HEAD_DIM || headDim % MIN_HEAD_DIM != 0) {
            throw new InvalidArgumentException("headDim", headDim, "the Java cache kernels support multiples of "
                    + MIN_HEAD_DIM + " in " + MIN_HEAD_DIM + ".." + largest);
        }
        return chosen;
    }

    /** Whether the workgroup has fewer threads than maxHeadDim columns (the kernels' tile loads then walk elements). */
    public boolean wide() {
        return threads() < maxHeadDim;
    }

    /** Threads of a decode combine workgroup: one per column, at least this configuration's, whole warps. */
    public int combineThreads(int headDim) {
        return Math.max(threads(), Math.ceilDiv(headDim, 32) * 32);
    }

    public int threads() {
        return rows * threadsPerRow;
    }

    public int queryTileFloats() {
        return rows * (maxHeadDim + 1);
    }

    public int keyTileFloats() {
        return blockKv * (maxHeadDim + 1);
    }

    public int valueTileFloats() {
        return blockKv * maxHeadDim;
    }

    public int scoreTileFloats() {
        return rows * (blockKv + 1);
    }

    /** Static local memory of the decode split and the prefill (floats, the per-thread values, 2 blockKv key ints). */
    public int sharedMemoryBytes() {
        return 4 * (queryTileFloats() + keyTileFloats() + valueTileFloats() + scoreTileFloats() + threads()) + 4 * 2 * blockKv;
    }

    public CacheTileConfig {
        if (blockKv != 4 * threadsPerRow) {
            throw new IllegalArgumentException("the cache kernels are written for 4 scores per thread: blockKv = 4 threadsPerRow");
        }
        int threads = rows * threadsPerRow;   // (the fields are not set yet: no threads())
        if (maxHeadDim % threadsPerRow != 0 || (threads >= maxHeadDim && threads % maxHeadDim != 0)
                || (threads < maxHeadDim && maxHeadDim % threads != 0) || threads < blockKv) {
            throw new IllegalArgumentException("maxHeadDim must be a multiple of threadsPerRow; threads a multiple of"
                    + " maxHeadDim (a thread per column) or a divisor of it (wide: the loads walk elements), and >= blockKv"
                    + " (a thread per key of a tile)");
        }
        if (rows % 4 != 0 || (blockKv & (blockKv - 1)) != 0) {
            throw new IllegalArgumentException("rows must split into 4 copies, blockKv must be a power of two");
        }
    }
}
