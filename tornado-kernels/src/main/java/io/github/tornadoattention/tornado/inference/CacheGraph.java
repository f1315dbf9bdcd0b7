package io.github.tornadoattention.tornado.inference;

import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.tornado.TornadoVMLock;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The task graph of one KV cache, in one execution plan: it keeps the cache's K and V on the GPU
 * ({@code FIRST_EXECUTION}) and runs, in every execution, the append of the staged new tokens and attention for each
 * variant ({@link VariantKey}: the plan's attention definition, dense or packed) it was built for. The main variant (that of the plan whose call first builds the graph)
 * shares the append's task and step: on ptx-tornado one fused PTX task, the graph's first and only prebuilt one
 * (TornadoVM 5.2.0 launches any other prebuilt task with the first one's kernel); the other variants are Java kernel
 * tasks after it. What a task should not do in an execution it gets as zero lengths (attention over nothing), so one
 * graph serves every call and is compiled once: TornadoVM keeps device buffers per execution plan, and only a task
 * graph of the plan that owns the cache can touch it.
 *
 * <p>Per execution TornadoVM sends the small arrays declared {@code EVERY_EXECUTION}: the step arrays (int32
 * [3*slots+1] each: the main one, shared by the append, and each other variant's), the block table of a paged cache,
 * the new K/V rows (S per slot) and each variant's queries (S per slot). On ptx-tornado the main variant's step,
 * queries and the new rows are views of ONE stage array (the staged twin), so a decode execution sends one array: each
 * transfer costs TornadoVM several microseconds. Each variant's output comes back with the execution, its lse and K
 * and V on request ({@code UNDER_DEMAND}).
 *
 * <p>This class builds and runs the graph and nothing else: it is given the cache's arrays and the variants as values
 * and knows nothing of the device state that decides when to build, fill the staging and execute.
 */
final class CacheGraph {
    private static final AtomicInteger GRAPHS = new AtomicInteger();

    /**
     * One kind of attention call (dense or packed): its own task, step array and staging for queries and outputs. It
     * holds the plan's whole attention definition that a task computes with (query heads, causal flag, scale, element
     * type, window, softcap, sinks): two plans that differ in any of them are two variants, and {@link #spec} builds a
     * task's spec from all of them (a key without the features ran every plan without them: a silently wrong answer).
     * What it leaves out is what the graph fixes (slots, KV heads, head dim, capacity: the cache's) or sizes (query
     * rows: the staging's).
     */
    record VariantKey(int heads, boolean causal, float scale, boolean packed, DType dtype, int windowLeft,
                      int windowRight, float softcap, List<Float> sinks) {
        VariantKey {
            sinks = List.copyOf(sinks);
        }

        static VariantKey of(CacheAttentionSpec spec, boolean packed) {
            return new VariantKey(spec.heads(), spec.causal(), spec.scale(), packed, spec.dtype(), spec.windowLeft(),
                    spec.windowRight(), spec.softcap(), spec.sinks());
        }

        /** The spec of this variant's task over a cache of {@code cache} with {@code rows} staging rows per slot. */
        CacheAttentionSpec spec(KvCacheSpec cache, int rows) {
            float[] sinkArray = null;
            if (!sinks.isEmpty()) {
                sinkArray = new float[sinks.size()];
                for (int h = 0; h < sinkArray.length; h++) {
                    sinkArray[h] = sinks.get(h);
                }
            }
            return CacheAttentionSpec.builder().batch(cache.slots()).heads(heads).kvHeads(cache.kvHeads())
                    .headDim(cache.headDim()).maxQueryLength(rows).maxLength(cache.capacity()).causal(causal).scale(scale)
                    .dtype(dtype).window(windowLeft, windowRight).softcap(softcap).sinks(sinkArray).build();
        }
    }

    /**
     * A variant's staging on the host: its step words and queries (views of its own arrays {@code stepArray} and
     * {@code qArray}, or, on ptx-tornado's main variant, of the stage array: those two are then null), its output and
     * lse arrays.
     */
    record Variant(VariantKey key, MemorySegment step, MemorySegment q, TornadoNativeArray o, FloatArray lse,
                   IntArray stepArray, TornadoNativeArray qArray) {
    }

    private final TornadoExecutionPlan plan;
    private final GraphTarget target;
    private final TornadoNativeArray keys;
    private final TornadoNativeArray values;
    private final List<Variant> variants;
    private final Variant main;
    private final int rows;
    private final MemorySegment newK;
    private final MemorySegment newV;
    private final TensorStrides stagingStrides;
    private final MemorySegment mainStep;
    private TornadoExecutionResult last;
    /** Whether the plan has executed (its first execution runs alone: {@link TornadoVMLock#execution}). */
    private boolean executed;

    private CacheGraph(TornadoExecutionPlan plan, GraphTarget target, TornadoNativeArray keys, TornadoNativeArray values,
                       List<Variant> variants, Variant main, int rows, MemorySegment newK, MemorySegment newV,
                       TensorStrides stagingStrides, MemorySegment mainStep) {
        this.plan = plan;
        this.target = target;
        this.keys = keys;
        this.values = values;
        this.variants = variants;
        this.main = main;
        this.rows = rows;
        this.newK = newK;
        this.newV = newV;
        this.stagingStrides = stagingStrides;
        this.mainStep = mainStep;
    }

    /**
     * Builds and compiles the graph of a cache of {@code spec} over its arrays ({@code blockTable} null for a
     * contiguous cache) for {@code wanted} variants, {@code mainKey} (if not null, one of them) first, with
     * {@code rows} staging rows per slot (S: the most new tokens or queries per slot one execution takes). The whole
     * build runs alone ({@link TornadoVMLock#exclusive}).
     */
    static CacheGraph build(GraphTarget target, KvCacheSpec spec, TornadoNativeArray k, TornadoNativeArray vv,
                            IntArray blockTable, Collection<VariantKey> wanted, VariantKey mainKey, int rows) {
        return TornadoVMLock.exclusive(() -> buildAlone(target, spec, k, vv, blockTable, wanted, mainKey, rows));
    }

    private static CacheGraph buildAlone(GraphTarget target, KvCacheSpec spec, TornadoNativeArray k,
                                         TornadoNativeArray vv, IntArray blockTable, Collection<VariantKey> wanted,
                                         VariantKey mainKey, int rows) {
        int slots = spec.slots();
        String name = "kv" + GRAPHS.incrementAndGet();
        int d = spec.headDim();
        IntArray table = blockTable != null ? blockTable : new IntArray(1);
        TensorStrides stagingStrides = new TensorStrides((long) spec.kvHeads() * rows * d, (long) rows * d, d);
        int stagingRows = Math.toIntExact((long) slots * spec.kvHeads() * rows * d);
        TaskGraph graph = new TaskGraph(name);
        GridScheduler scheduler = new GridScheduler();
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, k, vv);
        graph.transferToDevice(blockTable != null ? DataTransferMode.EVERY_EXECUTION : DataTransferMode.FIRST_EXECUTION, table);
        // The main variant first: its task must be the graph's first (ptx-tornado: its only prebuilt task).
        List<VariantKey> order = new ArrayList<>(wanted);
        if (order.remove(mainKey)) {
            order.add(0, mainKey);
        }
        HalfFloatArray stage = null;
        MemorySegment newK = null;
        MemorySegment newV = null;
        Variant main = null;
        List<Variant> variants = new ArrayList<>();
        List<CacheAttentionTasks> tasks = new ArrayList<>();
        for (VariantKey key : order) {
            boolean isMain = key.equals(mainKey);
            CacheAttentionSpec vs = key.spec(spec, rows);
            // Only the main variant may use the PTX twin: one prebuilt task per graph, first (TornadoVM 5.2.0).
            String backend = isMain ? target.backendId() : Backends.TORNADO_SIMT;
            CacheAttentionTasks t = CacheAttentionTasks.create(backend, vs, spec, target.device());
            tasks.add(t);
            int queries = Math.toIntExact((long) slots * key.heads() * rows);
            // The 16-bit staging of the cache's element type (bf16: bits in ShortArrays, as the cache).
            TornadoNativeArray o = newTensor(spec, queries * d);
            FloatArray lse = new FloatArray(queries);
            Variant v;
            if (isMain && backend.equals(Backends.PTX_TORNADO)) {
                // The step's four inputs in one array (the staged twin): one transfer per execution instead of four.
                CacheAttentionTasks.StageLayout at = t.stageLayout();
                stage = new HalfFloatArray(at.halves());
                MemorySegment all = stage.getSegment();
                newK = all.asSlice(2L * at.newKOffset(), 2L * stagingRows);
                newV = all.asSlice(2L * at.newVOffset(), 2L * stagingRows);
                v = new Variant(key, all.asSlice(0, 4L * (3 * slots + 1)), all.asSlice(2L * at.qOffset(), 2L * queries * d),
                        o, lse, null, null);
                graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, stage);
            } else {
                IntArray step = new IntArray(3 * slots + 1);
                TornadoNativeArray q = newTensor(spec, queries * d);
                v = new Variant(key, step.getSegment(), q.getSegment(), o, lse, step, q);
                graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, step, q);
            }
            variants.add(v);
            if (isMain) {
                main = v;
            }
        }
        TornadoNativeArray newKArray = null;
        TornadoNativeArray newVArray = null;
        IntArray appendParams = null;
        if (stage == null) {
            // The Java append reads the new rows from arrays of their own, with the step of the main variant (if any).
            newKArray = newTensor(spec, stagingRows);
            newVArray = newTensor(spec, stagingRows);
            newK = newKArray.getSegment();
            newV = newVArray.getSegment();
            appendParams = IntArray.fromArray(CacheAttentionTasks.appendParams(spec, stagingStrides, rows, false));
            graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, appendParams);
            graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, newKArray, newVArray);
        }
        IntArray appendStep;
        MemorySegment mainStep;
        if (main == null) {
            appendStep = new IntArray(3 * slots + 1);   // an append-only graph (packed plans only)
            graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, appendStep);
            mainStep = appendStep.getSegment();
        } else {
            appendStep = main.stepArray;   // null when staged: the step words are in the stage
            mainStep = main.step;
        }
        for (int i = 0; i < variants.size(); i++) {
            Variant v = variants.get(i);
            CacheAttentionTasks t = tasks.get(i);
            if (v == main && stage != null) {
                t.addStagedAppendAndDecode(graph, name, scheduler, "main_", stage, k, vv, table, v.o, v.lse);
            } else if (v == main) {
                t.addAppendAndDecode(graph, name, scheduler, "main_", newKArray, newVArray, appendParams,
                        v.qArray, k, vv, appendStep, table, v.o, v.lse);
            } else {
                if (i == 0) {
                    tasks.get(0).addAppend(graph, name, scheduler, "append_", newKArray, newVArray, appendParams, rows, k,
                            vv, appendStep, table);
                }
                if (v.key.packed()) {
                    // Packed calls run in chunks of S queries per slot (StagingRows.stagePackedQueries).
                    t.addChunkedDecode(graph, name, scheduler, "attend" + i + "_", v.qArray, k, vv, v.stepArray, table,
                            v.o, v.lse);
                } else {
                    t.addDecode(graph, name, scheduler, "attend" + i + "_", v.qArray, k, vv, v.stepArray, table, v.o,
                            v.lse);
                }
            }
        }
        graph.transferToHost(DataTransferMode.UNDER_DEMAND, k, vv);
        for (Variant v : variants) {
            // O back with every execution (one synchronisation per call instead of a second one for the copy); lse
            // only when a call asks for it.
            graph.transferToHost(DataTransferMode.EVERY_EXECUTION, v.o);
            graph.transferToHost(DataTransferMode.UNDER_DEMAND, v.lse);
        }
        TornadoExecutionPlan built = target.compile(graph, scheduler);
        return new CacheGraph(built, target, k, vv, List.copyOf(variants), main, rows, newK, newV,
                stagingStrides, mainStep);
    }

    /** A zeroed 16-bit array of the cache's element type: fp16 in a HalfFloatArray, bf16 bits in a ShortArray. */
    static TornadoNativeArray newTensor(KvCacheSpec spec, int length) {
        return spec.dtype() == DType.BF16 ? new ShortArray(length) : new HalfFloatArray(length);
    }

    /** The variant of {@code key}, or null when the graph was not built for it. */
    Variant variant(VariantKey key) {
        for (Variant v : variants) {
            if (v.key.equals(key)) {
                return v;
            }
        }
        return null;
    }

    /** The main variant (its attention shares the append's task and step), or null in an append-only graph. */
    Variant main() {
        return main;
    }

    /** Staging rows per slot: the most new tokens (and queries) per slot one execution takes. */
    int rows() {
        return rows;
    }

    /** The staging rows of new K: [slots, kvHeads, rows, headDim] ({@link #stagingStrides}). */
    MemorySegment newK() {
        return newK;
    }

    MemorySegment newV() {
        return newV;
    }

    TensorStrides stagingStrides() {
        return stagingStrides;
    }

    /** The step words of the append and of the main variant's attention. */
    MemorySegment mainStep() {
        return mainStep;
    }

    /**
     * Runs one execution; then zeroes every step, so that the next execution appends and attends nothing unless told.
     * Returns the kernels' device time in nanoseconds (0 without the profiler). The first execution runs alone, the
     * others beside other plans' ({@link TornadoVMLock#execution}).
     */
    long execute() {
        TornadoExecutionResult result = TornadoVMLock.execution(!executed, plan::execute);
        executed = true;
        last = result;
        long nanos = target.profile() && result.getProfilerResult() != null
                ? result.getProfilerResult().getDeviceKernelTime() : 0;
        mainStep.fill((byte) 0);
        for (Variant v : variants) {
            v.step.fill((byte) 0);
        }
        return nanos;
    }

    /** Whether the plan has executed (then the GPU holds the cache; later executions run beside other plans'). */
    boolean executed() {
        return executed;
    }

    /** Copies the cache's K and V as the last execution left them into their host arrays. */
    void downloadCache() {
        TornadoVMLock.shared(() -> last.transferToHost(keys, values));
    }

    /** Copies the lse of {@code v} as the last execution left it into its host array (asked for per call). */
    void downloadLse(Variant v) {
        TornadoVMLock.shared(() -> last.transferToHost(v.lse));
    }

    /** Frees the plan's device memory. */
    void close() {
        target.close(plan);
        last = null;
    }
}
