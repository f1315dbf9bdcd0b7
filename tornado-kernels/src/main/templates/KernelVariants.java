import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The variant table of the Java TornadoVM kernels: one row per kernel that {@link GenerateKernels} writes from its
 * family's template, with the head dim and tile sizes as constants. The generated class carries its family's rows as
 * its launch table ({@code CONFIGS}, and {@code kernel(config)} for the method), which the tile configurations'
 * {@code forHeadDim} read: this table is the one place that says which head dims have a kernel.
 *
 * <p>A new head dim is a row here, plus what its tile configuration needs: shared memory within 48 KB (TornadoVM
 * launches with static shared memory only), and for tornado-mma a K/V staging map for a new Bc x D ({@code MmaLayout})
 * and a choice of the traits below. The tests run every generated kernel against the CPU reference and check its local
 * arrays against its tile configuration.
 */
final class KernelVariants {
    private KernelVariants() {
    }

    /** tornado-simt ({@code SimtKernels}, {@code SimtTileConfig}): the smallest row whose maxHeadDim >= D runs D. */
    static final List<Simt> SIMT = List.of(
            new Simt(64, 32, 32, 8),
            new Simt(128, 16, 16, 16),
            // 42 KB of local memory: Br = 8 rows of 16 threads, one key each, 16 output columns per thread.
            new Simt(256, 8, 16, 16));

    /** tornado-mma ({@code MmaKernels}, {@code MmaTileConfig}): one row per head dim it runs. */
    static final List<Mma> MMA = List.of(
            // D = 64's tiles and traits at half the width (22,064 bytes): Q^T staging 2-way conflicted (two d blocks).
            new Mma(32, 64, 64, "CU_JIT_OPTIMIZATION_LEVEL 4 CU_JIT_MAX_REGISTERS 128",
                    EnumSet.of(MmaTrait.HOLD_QUERY_FRAGMENTS, MmaTrait.HOLD_ONES_FRAGMENT, MmaTrait.SOFTMAX_BY_KEY_BLOCK)),
            // At most 128 registers: 4 CTAs of 128 threads per SM instead of 3; the few spills cost less than the
            // occupancy gains (MmaTileConfig).
            new Mma(64, 64, 64, "CU_JIT_OPTIMIZATION_LEVEL 4 CU_JIT_MAX_REGISTERS 128",
                    EnumSet.of(MmaTrait.HOLD_QUERY_FRAGMENTS, MmaTrait.HOLD_ONES_FRAGMENT, MmaTrait.SOFTMAX_BY_KEY_BLOCK)),
            // Bc = 32 as at D = 128 (30,704 bytes): three V^T staging items per thread (MmaLayout.vtItemQuad).
            new Mma(96, 64, 32, null, EnumSet.of(MmaTrait.PREFETCH_VALUES)),
            // Needs its ~250 registers: no cap.
            new Mma(128, 64, 32, null, EnumSet.of(MmaTrait.PREFETCH_VALUES)),
            // Q^T is 24 KB: K/V tiles of 16 keys, each in its own buffer (41,040 bytes; Bc = 32 would need 56.5 KB).
            new Mma(192, 64, 16, null, EnumSet.of(MmaTrait.PREFETCH_VALUES)),
            // Q^T alone is 32 KB of the 48 KB: K/V tiles of 16 keys, K and V^T in turns in one buffer (44 KB in all;
            // separate buffers would need 52.5 KB); no cap on registers (its O accumulators alone are 128 per thread).
            new Mma(256, 64, 16, null, EnumSet.of(MmaTrait.PREFETCH_VALUES, MmaTrait.ONE_KV_BUFFER)));

    /**
     * tornado-mma on TornadoVM's CUDA backend ({@code MmaCpAsyncKernels}, {@code MmaTileConfig} with loads CP_ASYNC): one row
     * per head dim, each with an fp16 and a bf16 kernel ({@code mmaBF16}). K and V reach local memory by cp.async
     * ({@code asyncCopyToLocal}, 4 bytes a copy) in their natural row-major layout, so V is the B operand of O = P V and P
     * the A operand. Shared memory is still static (the CUDA backend launches with 0 bytes of dynamic shared memory), so
     * Bc is chosen for two K/V stages within 48 KB where they fit (MmaTileConfig#sharedMemoryBytes).
     */
    static final List<MmaCpAsync> MMA_CP_ASYNC = List.of(
            new MmaCpAsync(32, 64, 2, 2),       // 31,280 bytes
            new MmaCpAsync(64, 32, 2, 2),       // 31,296 bytes (Bc = 64 with two stages: 53,840)
            new MmaCpAsync(96, 32, 2, 2),       // 44,656 bytes
            new MmaCpAsync(128, 16, 2, 2),      // 37,520 bytes (Bc = 32 with two stages: 58,000)
            // Q^T is 24 KB: one stage (41,168 bytes; two: 54,992): K and V of a tile land together, no overlap with compute.
            new MmaCpAsync(192, 16, 1, 2),
            // Q^T is 32 KB: one stage and K and V in turns in one buffer (44,816 bytes; separate buffers: 54,032).
            new MmaCpAsync(256, 16, 1, 1));

    /** The KV-cache kernels' decode split and prefill ({@code CacheKernels}, {@code CacheTileConfig}); D <= maxHeadDim. */
    static final List<Cache> CACHE = List.of(
            new Cache(128, 16, 32, 8),
            // D 144..256: 41 KB of local memory (Q 8 x 257, K 16 x 257, V 16 x 256 floats); 32 threads, fewer than
            // the columns (WIDE: the loads walk the tiles element by element), 64 output columns per thread.
            new Cache(256, 8, 16, 4));

    /** The rows of the family whose template makes class {@code className}, as the template's names. */
    static List<Map<String, Object>> rowsOf(String className) {
        return switch (className) {
            // Each row twice: its fp16 kernel, then its bf16 one (the same body over bf16 bits).
            case "SimtKernels" -> SIMT.stream().flatMap(r -> java.util.stream.Stream.of(r.names(false), r.names(true))).toList();
            case "MmaKernels" -> MMA.stream().map(Mma::names).toList();
            // Each row twice: its fp16 kernel, then its bf16 one.
            case "MmaCpAsyncKernels" -> MMA_CP_ASYNC.stream()
                    .flatMap(r -> java.util.stream.Stream.of(r.names(false), r.names(true))).toList();
            // Each row twice, as tornado-simt's: its fp16 kernels, then its bf16 ones. The kernels that do not depend on
            // the head dim (combine, append, copies) come with the first row of each element type (ONCE).
            case "CacheKernels" -> java.util.stream.Stream.of(false, true).flatMap(bf16 -> CACHE.stream()
                    .map(r -> r.names(bf16, r == CACHE.getFirst()))).toList();
            default -> throw new IllegalArgumentException("no variant table for " + className);
        };
    }

    /**
     * tornado-simt: one workgroup of blockQ x threadsPerRow threads per query tile; each thread owns
     * blockKv / threadsPerRow scores and maxHeadDim / threadsPerRow output columns.
     */
    record Simt(int maxHeadDim, int blockQ, int blockKv, int threadsPerRow) {
        /**
         * The names of its fp16 kernel or, {@code bf16}, of its bf16 kernel: BF16 (a trait), TENSOR (the array type of
         * Q, K, V: bf16 bits in a ShortArray, see SimtKernels), OUTPUT (O's), KERNEL (the method's name).
         */
        Map<String, Object> names(boolean bf16) {
            return Map.of("MAX_D", maxHeadDim, "BQ", blockQ, "BKV", blockKv, "TPR", threadsPerRow, "BF16", bf16,
                    "TENSOR", bf16 ? "ShortArray" : "HalfFloatArray", "OUTPUT", "ShortArray",
                    "KERNEL", "attentionUpTo" + maxHeadDim + (bf16 ? "Bf16" : ""));
        }
    }

    /**
     * Register-pressure choices of a tornado-mma kernel, each measured per head dim (the kernel comments give the
     * numbers): holding a fragment saves loads and costs registers.
     */
    enum MmaTrait {
        /**
         * The warp's Q^T fragments (2 x D / 16) are read once per K/V tile and held through S^T; without it they are
         * read per key block, two chains of mma over one K fragment at a time.
         */
        HOLD_QUERY_FRAGMENTS,
        /** The A fragment of the tile of ones is read once per K/V tile; without it, once per key block of P V. */
        HOLD_ONES_FRAGMENT,
        /**
         * V is loaded into registers right after S^T, landing during the softmax, and stored after it; without it V is
         * loaded after the softmax, right before it is stored.
         */
        PREFETCH_VALUES,
        /**
         * The softmax loops over key blocks outermost, with the lane's four -m read once per tile; without it, over the
         * lane's rows outermost, reading each row's -m once.
         */
        SOFTMAX_BY_KEY_BLOCK,
        /**
         * K and V^T take turns in one local buffer (MmaTileConfig#kvBuffers 1), for a head dim whose Q^T leaves no room
         * for both: two more barriers per K/V tile (before K's store, V^T's last readers done; before V^T's, K's).
         */
        ONE_KV_BUFFER;

        /** Its name in the template: HOLD_QUERY_FRAGMENTS is holdQueryFragments. */
        String templateName() {
            StringBuilder name = new StringBuilder();
            for (String word : name().toLowerCase().split("_")) {
                name.append(name.isEmpty() ? word : Character.toUpperCase(word.charAt(0)) + word.substring(1));
            }
            return name.toString();
        }
    }

    /**
     * tornado-mma: 4 warps, each owning 16 of the blockQ = 64 query rows; jitFlags as MmaTileConfig's (null: none);
     * KV_BUFFERS (MmaTileConfig#kvBuffers) from the trait ONE_KV_BUFFER.
     */
    record Mma(int headDim, int blockQ, int blockKv, String jitFlags, Set<MmaTrait> traits) {
        Map<String, Object> names() {
            Map<String, Object> names = new LinkedHashMap<>();
            names.put("D", headDim);
            names.put("BQ", blockQ);
            names.put("BKV", blockKv);
            names.put("JIT_FLAGS", jitFlags == null ? "null" : '"' + jitFlags + '"');
            names.put("KV_BUFFERS", traits.contains(MmaTrait.ONE_KV_BUFFER) ? 1 : 2);
            for (MmaTrait trait : MmaTrait.values()) {
                names.put(trait.templateName(), traits.contains(trait));
            }
            return names;
        }
    }

    /**
     * tornado-mma on the CUDA backend: 4 warps, Br = 64; kvStages 2: K/V tile j + 1 is copied (cp.async) while tile j is
     * computed, 1: each tile's copies are waited for before it is computed; kvBuffers 1: K and V in turns in one buffer.
     * The names of its fp16 kernel or, {@code bf16}, its bf16 one: BF16 (a trait), MMA (the intrinsic), ONE_PAIR (two ones
     * of the element type in an int), DTYPE and IS_BF16 (its name and the literal), KERNEL.
     */
    record MmaCpAsync(int headDim, int blockKv, int kvStages, int kvBuffers) {
        Map<String, Object> names(boolean bf16) {
            Map<String, Object> names = new LinkedHashMap<>();
            names.put("D", headDim);
            names.put("BQ", 64);
            names.put("BKV", blockKv);
            names.put("KV_STAGES", kvStages);
            names.put("KV_BUFFERS", kvBuffers);
            names.put("doubleBuffered", kvStages == 2);
            names.put("oneKvBuffer", kvBuffers == 1);
            names.put("bf16", bf16);
            names.put("MMA", bf16 ? "mmaBF16" : "mma");
            names.put("ONE_PAIR", bf16 ? "BF16_ONE_PAIR" : "MmaKernels.HALF_ONE_PAIR");
            names.put("DTYPE", bf16 ? "bf16" : "fp16");
            names.put("IS_BF16", String.valueOf(bf16));
            names.put("KERNEL", "attentionD" + headDim + "CpAsync" + (bf16 ? "Bf16" : ""));
            return names;
        }
    }

    /**
     * The cache kernels: one workgroup of rows x threadsPerRow threads per row block; K/V tiles of blockKv keys, each
     * thread owning blockKv / threadsPerRow scores and maxHeadDim / threadsPerRow output columns.
     */
    record Cache(int maxHeadDim, int rows, int blockKv, int threadsPerRow) {
        /**
         * The names of its fp16 kernels or, {@code bf16}, of its bf16 ones: BF16 (a trait), ONCE (a trait: this row also
         * carries the kernels that do not depend on the head dim), WIDE (a trait: fewer threads than maxHeadDim, so the
         * tile loads walk elements rather than give each thread a column), TENSOR (the array type of q, o, the caches and new
         * K/V: bf16 bits in a ShortArray), LOAD and LOADED (the text around an element read that makes it a float),
         * SUFFIX (of the methods' names).
         */
        Map<String, Object> names(boolean bf16, boolean once) {
            // The decode split loads K and V in trips of this many keys per thread, all loads of a trip issued before
            // its first store: half the tile per trip at D = maxHeadDim (threads / D threads share a key).
            int loadsPerTrip = Math.max(1, blockKv * maxHeadDim / (rows * threadsPerRow) / 2);
            Map<String, Object> names = new LinkedHashMap<>();
            names.put("MAX_D", maxHeadDim);
            names.put("ROWS", rows);
            names.put("BC", blockKv);
            names.put("TPR", threadsPerRow);
            names.put("LOADS_PER_TRIP", loadsPerTrip);
            names.put("BF16", bf16);
            names.put("ONCE", once);
            names.put("WIDE", rows * threadsPerRow < maxHeadDim);
            names.put("TENSOR", bf16 ? "ShortArray" : "HalfFloatArray");
            names.put("LOAD", bf16 ? "Bf16.toFloat(" : "");
            names.put("LOADED", bf16 ? ")" : ".getFloat32()");
            names.put("SUFFIX", bf16 ? "Bf16" : "");
            return names;
        }
    }
}
