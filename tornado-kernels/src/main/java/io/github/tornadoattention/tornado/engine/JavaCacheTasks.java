package io.github.tornadoattention.tornado.engine;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.ptx.DecodeSplitPolicy;
import io.github.tornadoattention.tornado.ScoreFeatures;
import io.github.tornadoattention.tornado.TornadoArrays;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * Adds the Java KV-cache kernels ({@link CacheKernels}) as tasks to an engine's TaskGraph, with their WorkerGrids
 * (scheduler key {@code graphName + "." + taskName}) and their device-only arrays (constant params, workspaces: sent
 * {@code FIRST_EXECUTION}, then resident). The arrays it is handed are the engine's; their shapes are checked by the
 * caller ({@code CacheAttentionTasks}). Task names: {@code taskPrefix} + "Append", "DecodeSplit", "DecodeCombine",
 * "Prefill", "CopyRanges".
 *
 * <p>Decode: {@link #splits()} splits of every slot's keys, fixed here from the capacity and the device's compute units
 * by {@link DecodeSplitPolicy#gridSplits}; the keys per split follow each slot's run-time length.
 */
final class JavaCacheTasks {
    /** Decode workgroups aimed at per compute unit (an SM holds up to 5 of 43 KB of local memory). */
    static final int WORKGROUPS_PER_UNIT = 4;
    /** Workgroups of the copy kernel per compute unit (grid-stride loops over the ranges). */
    static final int COPY_GROUPS_PER_UNIT = 2;

    private final CacheAttentionSpec spec;
    private final KvCacheSpec cacheSpec;
    private final CacheTileConfig config;
    private final int computeUnits;
    private final int sq;
    private final int rowBlocks;
    private final int splits;

    /** Tasks for a device of {@code computeUnits} compute units (SMs): the decode's split count is chosen from them. */
    JavaCacheTasks(CacheAttentionSpec spec, KvCacheSpec cacheSpec, int computeUnits) {
        this(spec, cacheSpec, computeUnits, 0);
    }

    /** Tasks whose decode uses {@code splits} splits (>= 1; any count works, the keys per split follow the lengths). */
    static JavaCacheTasks withSplits(CacheAttentionSpec spec, KvCacheSpec cacheSpec, int splits) {
        if (splits < 1) {
            throw new InvalidArgumentException("splits", splits, "must be >= 1");
        }
        return new JavaCacheTasks(spec, cacheSpec, Math.max(1, splits / WORKGROUPS_PER_UNIT), splits);
    }

    private JavaCacheTasks(CacheAttentionSpec spec, KvCacheSpec cacheSpec, int computeUnits, int splits) {
        checkSupported(spec, cacheSpec);
        if (computeUnits < 1) {
            throw new InvalidArgumentException("computeUnits", computeUnits, "must be >= 1");
        }
        this.spec = spec;
        this.cacheSpec = cacheSpec;
        this.config = CacheTileConfig.forHeadDim(spec.headDim());
        this.computeUnits = computeUnits;
        this.sq = Math.min(spec.maxQueryLength(), CacheAttentionSpec.MAX_DENSE_QUERIES);
        this.rowBlocks = (spec.groupSize() * sq + config.rows() - 1) / config.rows();
        long perSplit = (long) spec.batch() * spec.kvHeads() * rowBlocks;
        this.splits = splits > 0 ? splits
                : DecodeSplitPolicy.gridSplits(DecodeSplitPolicy.keySpan(spec, cacheSpec.capacity(), sq), perSplit, computeUnits);
        if (decodeWorkspaceFloats() > Integer.MAX_VALUE || decodeGroups() > Integer.MAX_VALUE / config.threads()) {
            throw new InvalidArgumentException("batch*heads*maxQueryLength*headDim", denseLseElements() * spec.headDim(),
                    "too large for the decode workspace's 32-bit indices with " + this.splits + " splits");
        }
    }

    /**
     * Throws unless the Java cache kernels serve this spec and cache (fp16 or bf16, a head dim
     * {@link CacheTileConfig#forHeadDim} serves).
     */
    static void checkSupported(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        InvalidArgumentException.requireNonNull("spec", spec);
        InvalidArgumentException.requireNonNull("cacheSpec", cacheSpec);
        spec.checkCache(cacheSpec);
        CacheTileConfig.forHeadDim(spec.headDim());
        if (spec.dtype() != DType.FP16 && spec.dtype() != DType.BF16) {
            throw new InvalidArgumentException("dtype", spec.dtype(), "the Java cache kernels serve fp16 and bf16");
        }
    }

    /** Whether the kernels run over bf16 bits (ShortArrays) rather than fp16 (HalfFloatArrays). */
    boolean bf16() {
        return spec.dtype() == DType.BF16;
    }

    /**
     * The array type of q, o, the caches and new K/V for {@code dtype}: fp16 in HalfFloatArrays, bf16 bits in
     * ShortArrays (not BFloat16Array: TornadoVM 5.2's runtime has no device buffer for it).
     */
    static Class<? extends TornadoNativeArray> arrayType(DType dtype) {
        return dtype == DType.BF16 ? ShortArray.class : HalfFloatArray.class;
    }

    /** A zeroed array of {@code length} elements of {@code dtype} ({@link #arrayType}). */
    static TornadoNativeArray newArray(DType dtype, int length) {
        return TornadoArrays.allocate(dtype == DType.BF16 ? DType.BF16 : DType.FP16, length);
    }

    /** The tile configuration of the decode split and prefill kernels for the spec's head dim. */
    CacheTileConfig config() {
        return config;
    }

    /** Dense queries per slot of the decode: maxQueryLength, at most 16; q and o [B, Hq, this, D] in the spec's layout. */
    int denseQueries() {
        return sq;
    }

    long denseLseElements() {
        return (long) spec.batch() * spec.heads() * sq;
    }

    /** Element strides of dense q and o, [B, Hq, denseQueries(), D] in the spec's layout. */
    TensorStrides denseStrides() {
        long d = spec.headDim();
        long hq = spec.heads();
        return spec.layout() == Layout.BSHD ? new TensorStrides(sq * hq * d, d, hq * d)
                : new TensorStrides(hq * sq * d, sq * d, d);
    }

    /** Splits of the decode's key range (the grid's; fixed for the plan). */
    int splits() {
        return splits;
    }

    /** Decode row blocks per KV head: ceil(G * maxQueryLength / rows). */
    int rowBlocks() {
        return rowBlocks;
    }

    long decodeGroups() {
        return (long) splits * spec.batch() * spec.kvHeads() * rowBlocks;
    }

    /** Threads of a combine workgroup: at least D, one per column ({@link CacheTileConfig#combineThreads}). */
    int combineThreads() {
        return config.combineThreads(spec.headDim());
    }

    int combineGroups() {
        return Math.toIntExact(denseLseElements());
    }

    int prefillGroups() {
        return Math.toIntExact(((long) spec.maxTotalQueries() + config.rows() - 1) / config.rows() * spec.heads());
    }

    int copyGroups() {
        return COPY_GROUPS_PER_UNIT * computeUnits;
    }

    /** fp32 O partials [splits, B, Hq, Sq, D], lse partials [splits, B, Hq, Sq], the combined O [B, Hq, Sq, D]. */
    long decodeWorkspaceFloats() {
        long rows = denseLseElements();
        return (long) splits * rows * (spec.headDim() + 1) + rows * spec.headDim();
    }

    /** The attention params block ({@code CacheKernels.P_*}) of a call that is not a chunk. */
    IntArray attentionParams(boolean writeLse) {
        return attentionParams(writeLse, false);
    }

    /** The attention params block; {@code chunked}: decode calls are chunks ({@code CacheKernels.P_CHUNKED}). */
    IntArray attentionParams(boolean writeLse, boolean chunked) {
        int[] p = new int[CacheKernels.P_COUNT];
        p[CacheKernels.P_B] = spec.batch();
        p[CacheKernels.P_HQ] = spec.heads();
        p[CacheKernels.P_HKV] = spec.kvHeads();
        p[CacheKernels.P_D] = spec.headDim();
        p[CacheKernels.P_SQ] = sq;
        p[CacheKernels.P_MAX_TOTAL] = spec.maxTotalQueries();
        p[CacheKernels.P_CAUSAL] = spec.causal() ? 1 : 0;
        p[CacheKernels.P_WRITE_LSE] = writeLse ? 1 : 0;
        TensorStrides q = denseStrides();
        p[CacheKernels.P_Q_STRIDE] = Math.toIntExact(q.batch());
        p[CacheKernels.P_Q_STRIDE + 1] = Math.toIntExact(q.head());
        p[CacheKernels.P_Q_STRIDE + 2] = Math.toIntExact(q.row());
        TensorStrides c = cacheSpec.strides();
        p[CacheKernels.P_CACHE_STRIDE] = Math.toIntExact(c.batch());
        p[CacheKernels.P_CACHE_STRIDE + 1] = Math.toIntExact(c.head());
        p[CacheKernels.P_CACHE_STRIDE + 2] = Math.toIntExact(c.row());
        p[CacheKernels.P_PAGE_SIZE] = cacheSpec.pageSize();
        p[CacheKernels.P_PAGES_PER_SEQ] = cacheSpec.pagesPerSequence();
        p[CacheKernels.P_SPLITS] = splits;
        p[CacheKernels.P_ROW_BLOCKS] = rowBlocks;
        int bound = ScoreFeatures.windowBound((long) spec.maxQueryLength() + spec.maxTotalQueries(), cacheSpec.capacity());
        p[CacheKernels.P_WINDOW_LEFT] = ScoreFeatures.windowSide(spec.windowLeft(), bound);
        p[CacheKernels.P_WINDOW_RIGHT] = ScoreFeatures.windowSide(spec.windowRight(), bound);
        p[CacheKernels.P_CHUNKED] = chunked ? 1 : 0;
        return IntArray.fromArray(p);
    }

    /** The score words of the spec: softcap, then a sink per query head ({@link ScoreFeatures#scores}). */
    FloatArray scores() {
        return ScoreFeatures.scores(spec.softcap(), spec.sinkArray(), spec.heads());
    }

    /**
     * The 16 append-params words ({@code flash::AppendParam}; the fused PTX twins flash_cache_append_decode_fused_*
     * and flash_cache_staged_decode_fused_* read words 4..6 of the same block, the staged ones 13..15 too):
     * new K/V dense [B, Hkv, maxNew, D] with {@code newStrides} (batch, head, row; BHSD or BSHD), or packed [total,
     * Hkv, D] (packed rows use the head and row strides; {@code newStrides} null: head D, row Hkv*D). For the Java
     * kernel's grid, packed rows number at most B * maxNew.
     */
    static int[] appendParams(KvCacheSpec cacheSpec, TensorStrides newStrides, int maxNew, boolean packed) {
        InvalidArgumentException.requireNonNull("cacheSpec", cacheSpec);
        if (maxNew < 1) {
            throw new InvalidArgumentException("maxNew", maxNew, "must be >= 1");
        }
        int[] a = new int[CacheKernels.A_COUNT];
        a[CacheKernels.A_B] = cacheSpec.slots();
        a[CacheKernels.A_HKV] = cacheSpec.kvHeads();
        a[CacheKernels.A_D] = cacheSpec.headDim();
        a[CacheKernels.A_MAX_NEW] = maxNew;
        TensorStrides n = packed && newStrides == null
                ? new TensorStrides(0, cacheSpec.headDim(), (long) cacheSpec.kvHeads() * cacheSpec.headDim())
                : InvalidArgumentException.requireNonNull("newStrides", newStrides);
        a[CacheKernels.A_NEW_STRIDE] = Math.toIntExact(n.batch());
        a[CacheKernels.A_NEW_STRIDE + 1] = Math.toIntExact(n.head());
        a[CacheKernels.A_NEW_STRIDE + 2] = Math.toIntExact(n.row());
        TensorStrides c = cacheSpec.strides();
        a[CacheKernels.A_CACHE_STRIDE] = Math.toIntExact(c.batch());
        a[CacheKernels.A_CACHE_STRIDE + 1] = Math.toIntExact(c.head());
        a[CacheKernels.A_CACHE_STRIDE + 2] = Math.toIntExact(c.row());
        a[CacheKernels.A_PAGE_SIZE] = cacheSpec.pageSize();
        a[CacheKernels.A_PAGES_PER_SEQ] = cacheSpec.pagesPerSequence();
        a[CacheKernels.A_PACKED] = packed ? 1 : 0;
        return a;
    }

    /** Append workgroups for the given append-params words: B Hkv ceil(maxNew / 8) (packed: Hkv ceil(B maxNew / 8)). */
    static int appendGroups(IntArray appendParams) {
        long b = appendParams.get(CacheKernels.A_B);
        long hkv = appendParams.get(CacheKernels.A_HKV);
        long maxNew = appendParams.get(CacheKernels.A_MAX_NEW);
        long groups = appendParams.get(CacheKernels.A_PACKED) == 1
                ? hkv * ((b * maxNew + CacheKernels.APPEND_ROWS - 1) / CacheKernels.APPEND_ROWS)
                : b * hkv * ((maxNew + CacheKernels.APPEND_ROWS - 1) / CacheKernels.APPEND_ROWS);
        if (groups < 1 || groups > Integer.MAX_VALUE / CacheKernels.APPEND_THREADS) {
            throw new InvalidArgumentException("appendParams", groups + " workgroups", "1 .. "
                    + Integer.MAX_VALUE / CacheKernels.APPEND_THREADS);
        }
        return (int) groups;
    }

    /**
     * The append task. {@code appendParams} (see {@link #appendParams}) must hold its values now: they size the grid.
     * The kernel reads one element of each cache (into a device-only sink), so TornadoVM sends a cache declared
     * {@code FIRST_EXECUTION} even when this task is the graph's first user of it.
     */
    static void addAppend(TaskGraph g, String graphName, GridScheduler s, String taskPrefix, TornadoNativeArray newK,
                   TornadoNativeArray newV, IntArray appendParams, TornadoNativeArray kCache, TornadoNativeArray vCache,
                   IntArray step, IntArray blockTable) {
        String name = taskPrefix + "Append";
        FloatArray sink = new FloatArray(1);
        g.transferToDevice(DataTransferMode.FIRST_EXECUTION, sink);
        grid(s, graphName, name, appendGroups(appendParams), CacheKernels.APPEND_THREADS);
        if (kCache instanceof ShortArray) {
            g.task(name, CacheKernels::appendBf16, context(g), (ShortArray) newK, (ShortArray) newV, (ShortArray) kCache,
                    (ShortArray) vCache, step, blockTable, appendParams, sink);
        } else {
            g.task(name, CacheKernels::append, context(g), (HalfFloatArray) newK, (HalfFloatArray) newV,
                    (HalfFloatArray) kCache, (HalfFloatArray) vCache, step, blockTable, appendParams, sink);
        }
    }

    /**
     * Split-KV decode: the split pass, then the combine into o (and lse when {@code writeLse}); {@code chunked}: each
     * call is a chunk of a slot's queries ({@code CacheKernels.P_CHUNKED}).
     */
    void addDecode(TaskGraph g, String graphName, GridScheduler s, String taskPrefix, TornadoNativeArray q,
                   TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step, IntArray blockTable,
                   TornadoNativeArray o, FloatArray lse, boolean writeLse, boolean chunked) {
        IntArray params = attentionParams(writeLse, chunked);
        FloatArray scores = scores();
        FloatArray ws = new FloatArray(Math.toIntExact(decodeWorkspaceFloats()));
        g.transferToDevice(DataTransferMode.FIRST_EXECUTION, params, scores, ws);
        String split = taskPrefix + "DecodeSplit";
        String combine = taskPrefix + "DecodeCombine";
        grid(s, graphName, split, Math.toIntExact(decodeGroups()), config.threads());
        grid(s, graphName, combine, combineGroups(), combineThreads());   // at least D threads: one per column
        if (bf16()) {
            g.task(split, CacheKernels.decodeSplitBf16(config), context(g), (ShortArray) q, (ShortArray) kCache,
                    (ShortArray) vCache, step, blockTable, params, ws, spec.scale(), scores);
            g.task(combine, CacheKernels::decodeCombineBf16, context(g), ws, step, params, (ShortArray) o, lse, scores);
        } else {
            g.task(split, CacheKernels.decodeSplit(config), context(g), (HalfFloatArray) q, (HalfFloatArray) kCache,
                    (HalfFloatArray) vCache, step, blockTable, params, ws, spec.scale(), scores);
            g.task(combine, CacheKernels::decodeCombine, context(g), ws, step, params, (HalfFloatArray) o, lse, scores);
        }
    }

    /** Packed (varlen) prefill over the cache, causal per prompt when the spec is causal. */
    void addPrefill(TaskGraph g, String graphName, GridScheduler s, String taskPrefix, TornadoNativeArray q,
                    TornadoNativeArray kCache, TornadoNativeArray vCache, IntArray step, IntArray blockTable,
                    TornadoNativeArray o, FloatArray lse, boolean writeLse) {
        IntArray params = attentionParams(writeLse);
        FloatArray scores = scores();
        FloatArray ws = new FloatArray(Math.toIntExact(spec.packedQueryElements()));
        g.transferToDevice(DataTransferMode.FIRST_EXECUTION, params, scores, ws);
        String name = taskPrefix + "Prefill";
        grid(s, graphName, name, prefillGroups(), config.threads());
        if (bf16()) {
            g.task(name, CacheKernels.prefillBf16(config), context(g), (ShortArray) q, (ShortArray) kCache,
                    (ShortArray) vCache, step, blockTable, params, ws, (ShortArray) o, lse, spec.scale(), scores);
        } else {
            g.task(name, CacheKernels.prefill(config), context(g), (HalfFloatArray) q, (HalfFloatArray) kCache,
                    (HalfFloatArray) vCache, step, blockTable, params, ws, (HalfFloatArray) o, lse, spec.scale(), scores);
        }
    }

    /** Copies of element ranges within both caches (copies[0] = n, then n (src, dst, count) triples). */
    void addCopyRanges(TaskGraph g, String graphName, GridScheduler s, String taskPrefix, TornadoNativeArray kCache,
                       TornadoNativeArray vCache, IntArray copies) {
        String name = taskPrefix + "CopyRanges";
        grid(s, graphName, name, copyGroups(), CacheKernels.COPY_THREADS);
        if (bf16()) {
            g.task(name, CacheKernels::copyRangesBf16, context(g), (ShortArray) kCache, (ShortArray) vCache, copies);
        } else {
            g.task(name, CacheKernels::copyRanges, context(g), (HalfFloatArray) kCache, (HalfFloatArray) vCache, copies);
        }
    }

    /**
     * A task's kernel context, listed with the graph's {@code FIRST_EXECUTION} arrays: TornadoVM gives it a device
     * buffer (never copied) and frees that buffer on {@code close()} only for objects the graph lists.
     */
    private static KernelContext context(TaskGraph g) {
        KernelContext kc = new KernelContext();
        g.transferToDevice(DataTransferMode.FIRST_EXECUTION, kc);
        return kc;
    }

    private static void grid(GridScheduler s, String graphName, String taskName, int groups, int threads) {
        WorkerGrid1D worker = new WorkerGrid1D(groups * threads);
        worker.setLocalWork(threads, 1, 1);
        s.addWorkerGrid(graphName + "." + taskName, worker);
    }
}
