package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.ptx.DecodeSplitPolicy;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelParams;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * One {@link AttentionLibraryTasks#decode} call mapped onto the ptx-cuda cache kernels
 * (ptx-overrides/src/flash_cache.cu, entries 1 and 2), with no CUDA: the argument checks, the 32-int
 * params block (as {@code CudaCachePlan} makes it, through {@link KernelParams#forCache}), the split
 * of the keys and both launch geometries. The split count comes from the capacity, not the run-time
 * lengths, so the launches are the same every step (a CUDA graph may capture them); splits past a
 * sequence's length write empty partials that the combine weighs 0.
 *
 * @param shape        the arguments that fix the launches (the cache key of the provider's state)
 * @param params       the params block (uploaded once per shape)
 * @param keysPerSplit keys per split, a multiple of {@link DecodeSplitPolicy#GRANULE}
 * @param splits       split count (grid x of the split pass)
 */
public record DecodeCall(Shape shape, int[] params, String splitEntry, String combineEntry, int keysPerSplit,
                         int splits, int splitGridY, int splitGridZ, int splitThreads, int combineGridX,
                         int combineThreads, long partialOFloats, long partialLseFloats) {
    /** Argument positions of {@link AttentionLibraryTasks#decode}. */
    public static final int ARG_Q = 0, ARG_K = 1, ARG_V = 2, ARG_O = 3, ARG_LENS = 4, ARG_BATCH = 5, ARG_HEADS = 6,
            ARG_KV_HEADS = 7, ARG_QUERIES = 8, ARG_CAPACITY = 9, ARG_HEAD_DIM = 10, ARG_CAUSAL = 11, ARG_SCALE = 12;
    /** CUDA grid y and z limit. */
    static final int MAX_GRID_YZ = 65535;
    /** The kernels read 16-byte chunks: every tensor base must be 16-byte aligned. */
    static final int ALIGNMENT = 16;
    /** The PTX module of the cache kernels (shipped in the tornado-attention jar). */
    public static final String MODULE = "flash_cache.ptx";

    /** The scalar arguments: what fixes the launches. */
    public record Shape(int batch, int heads, int kvHeads, int queries, int capacity, int headDim, boolean causal,
                        float scale) {
    }

    /**
     * Checks the Java arguments of a decode library task (types, shapes, array sizes) and maps them.
     *
     * @throws InvalidArgumentException naming the first bad argument
     */
    public static DecodeCall of(Object[] args) {
        if (args == null || args.length != AttentionLibraryTasks.DECODE_ARGS) {
            throw new InvalidArgumentException("arguments", args == null ? null : args.length,
                    "decodeAttention takes " + AttentionLibraryTasks.DECODE_ARGS + " arguments");
        }
        Shape s = new Shape(integer(args, ARG_BATCH, "batch"), integer(args, ARG_HEADS, "heads"),
                integer(args, ARG_KV_HEADS, "kvHeads"), integer(args, ARG_QUERIES, "queries"),
                integer(args, ARG_CAPACITY, "capacity"), integer(args, ARG_HEAD_DIM, "headDim"),
                type(args, ARG_CAUSAL, "causal", Boolean.class), type(args, ARG_SCALE, "scale", Float.class));
        if (s.queries() < 1 || s.queries() > CacheAttentionSpec.MAX_DENSE_QUERIES) {
            throw new InvalidArgumentException("queries", s.queries(),
                    "must be in [1, " + CacheAttentionSpec.MAX_DENSE_QUERIES + "] (longer prompts: the packed prefill)");
        }
        // Positivity, the head ratio, the scale and 32-bit tensor sizes, as every other host checks them.
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(s.batch()).heads(s.heads()).kvHeads(s.kvHeads())
                .headDim(s.headDim()).maxQueryLength(s.queries()).maxLength(s.capacity()).causal(s.causal())
                .scale(s.scale()).layout(Layout.BHSD).dtype(DType.FP16).build();
        KvCacheSpec cache = KvCacheSpec.contiguous(s.batch(), s.kvHeads(), s.capacity(), s.headDim());
        if ((long) s.batch() * s.heads() > MAX_GRID_YZ) {
            throw new InvalidArgumentException("batch*heads", (long) s.batch() * s.heads(),
                    "the kernels launch one block row per (sequence, head): at most " + MAX_GRID_YZ);
        }
        long qElements = (long) s.batch() * s.heads() * s.queries() * s.headDim();
        long kvElements = (long) s.batch() * s.kvHeads() * s.capacity() * s.headDim();
        requireSize(args, ARG_Q, "q", HalfFloatArray.class, qElements);
        requireSize(args, ARG_K, "keys", HalfFloatArray.class, kvElements);
        requireSize(args, ARG_V, "values", HalfFloatArray.class, kvElements);
        requireSize(args, ARG_O, "o", HalfFloatArray.class, qElements);
        requireSize(args, ARG_LENS, "lens", IntArray.class, 2L * s.batch());

        // The CUDA-driver cache entries of this variant (a head dim or dtype no entry serves is refused here).
        KernelManifest manifest = KernelManifest.shipped();
        KernelVariant variant = KernelVariant.of(Kind.CACHE_DECODE_SPLIT, spec.dtype(), s.headDim()).causal(s.causal())
                .paged(false);
        KernelManifest.Kernel split = manifest.select(variant);
        KernelManifest.Kernel combine = manifest.select(variant.kind(Kind.CACHE_DECODE_COMBINE));
        int[] params = KernelParams.forCache(spec, cache, false);
        // Captured launches: the keys per split are an argument, fixed for the capacity.
        DecodeSplitPolicy.Splits fixed = DecodeSplitPolicy.fixedForCapacity(s.capacity());
        int keysPerSplit = fixed.keysPerSplit();
        int splits = fixed.count();
        int rowBlocks = (spec.groupSize() * s.queries() + split.rowsPerBlock() - 1) / split.rowsPerBlock();
        long rows = (long) s.batch() * s.heads() * s.queries();
        long combineBlocks = (rows + combine.rowsPerBlock() - 1) / combine.rowsPerBlock();
        return new DecodeCall(s, params, split.entry(), combine.entry(), keysPerSplit, splits, rowBlocks,
                s.batch() * s.kvHeads(), split.threads(), Math.toIntExact(combineBlocks), combine.threads(),
                splits * rows * s.headDim(), splits * rows);
    }

    /**
     * Checks the device pointers TornadoVM resolved for the five arrays (the first element, past the
     * array header): present and 16-byte aligned.
     */
    public static void checkPointers(long[] pointers) {
        String[] names = {"q", "keys", "values", "o", "lens"};
        if (pointers == null || pointers.length < names.length) {
            throw new InvalidArgumentException("devicePointers", pointers == null ? null : pointers.length,
                    "one per argument, the five arrays first");
        }
        for (int i = 0; i < names.length; i++) {
            if (pointers[i] == 0) {
                throw new InvalidArgumentException(names[i], 0, "must be on the device (TornadoVM gave no device pointer)");
            }
            if (pointers[i] % ALIGNMENT != 0) {
                throw new InvalidArgumentException(names[i], "0x" + Long.toHexString(pointers[i]),
                        "the kernels need 16-byte aligned data (TornadoVM's array header must be a multiple of 16 bytes)");
            }
        }
    }

    /** The split pass's 9 arguments: q, k, v, o_partial, lse_partial, params, lens, block_table (none), keys_per_split. */
    long[] splitArguments(long[] pointers, long partialO, long partialLse, long params) {
        return new long[] {pointers[ARG_Q], pointers[ARG_K], pointers[ARG_V], partialO, partialLse, params,
                pointers[ARG_LENS], 0, keysPerSplit};
    }

    /** The combine's 6 arguments: o_partial, lse_partial, o, lse (none), params, num_splits. */
    long[] combineArguments(long[] pointers, long partialO, long partialLse, long params) {
        return new long[] {partialO, partialLse, pointers[ARG_O], 0, params, splits};
    }

    private static int integer(Object[] args, int index, String name) {
        return type(args, index, name, Integer.class);
    }

    private static <T> T type(Object[] args, int index, String name, Class<T> type) {
        Object value = args[index];
        if (!type.isInstance(value)) {
            throw new InvalidArgumentException(name, value, "argument " + index + " must be a " + type.getSimpleName());
        }
        return type.cast(value);
    }

    private static void requireSize(Object[] args, int index, String name, Class<?> type, long elements) {
        Object value = args[index];
        if (!type.isInstance(value)) {
            throw new InvalidArgumentException(name, value == null ? null : value.getClass().getSimpleName(),
                    "argument " + index + " must be a " + type.getSimpleName());
        }
        int size = value instanceof HalfFloatArray h ? h.getSize() : ((IntArray) value).getSize();
        if (size < elements) {
            throw new InvalidArgumentException(name, size + " elements", "needs at least " + elements);
        }
    }
}
