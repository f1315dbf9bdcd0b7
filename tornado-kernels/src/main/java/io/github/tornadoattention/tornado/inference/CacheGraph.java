package io.github.tornadoattention.tornado.inference;

import static java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;

import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.cpu.HostCacheOps;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;
import io.github.tornadoattention.tornado.inference.TornadoAttentionDevice.Memory;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.ProfilerMode;
import uk.ac.manchester.tornado.api.exceptions.TornadoExecutionPlanException;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * One KV cache on a TornadoVM device: a single task graph, in one execution plan, that keeps the cache's K
 * and V on the GPU ({@code FIRST_EXECUTION}) and runs, in every execution, the append of held-back new
 * tokens and attention for each variant (heads, causal flag, scale; dense or packed) of the plans over this cache.
 * The main variant (the first dense plan's) shares the append's task and step: on ptx-tornado one fused PTX task,
 * the graph's first and only prebuilt one (TornadoVM 5.2.0 launches any other prebuilt task with the first one's
 * kernel); the other variants are Java kernel tasks after it. What a task should not do in an execution it gets as
 * zero lengths (attention over nothing), so one graph serves every call and is compiled once: TornadoVM keeps device
 * buffers per execution plan, and only a task graph of the plan that owns the cache can touch it.
 *
 * <p>Per execution TornadoVM sends the small arrays declared {@code EVERY_EXECUTION}: the step arrays (int32
 * [3*slots+1] each: the main one, shared by the append, and each other variant's), the block table of a paged cache,
 * the new K/V rows (S per slot) and each variant's queries (S per slot). On ptx-tornado the main variant's step,
 * queries and the new rows are views of ONE stage array (the staged twin), so a decode execution sends one array: each
 * transfer costs TornadoVM several microseconds. Each variant's output comes back with the execution, its lse and K
 * and V on request ({@code UNDER_DEMAND}). S bounds a call: appends and packed attention with more tokens per slot
 * run in chunks of S.
 *
 * <p>With lanes ({@link TornadoAttentionDevice}), a main-variant dense call without lse runs on the graph's lane: the
 * caller fills the stage and returns; the execution and the output copy come later ({@link #awaitIdle} before the
 * graph's arrays are touched again).
 *
 * <p>States: <i>host</i> (no execution plan; the host arrays hold the cache, appends are host copies) and
 * <i>device</i> (built; after the first execution the GPU holds it). {@link #evict} brings a device cache home
 * (download, close) when the graph must be rebuilt or the host writes the cache directly.
 */
final class CacheGraph {
    private static final AtomicInteger GRAPHS = new AtomicInteger();

    /** One kind of attention call (dense or packed): its own task, step array and staging for queries and outputs. */
    record VariantKey(int heads, boolean causal, float scale, boolean packed) {
        static VariantKey of(CacheAttentionSpec spec, boolean packed) {
            return new VariantKey(spec.heads(), spec.causal(), spec.scale(), packed);
        }
    }

    /**
     * A variant's staging on the host: its step words and queries (views of its own arrays {@code stepArray} and
     * {@code qArray}, or, on ptx-tornado's main variant, of the stage array: those two are then null), its output and
     * lse arrays.
     */
    private record Variant(VariantKey key, MemorySegment step, MemorySegment q, HalfFloatArray o, FloatArray lse,
                           IntArray stepArray, HalfFloatArray qArray) {
    }

    private final TornadoAttentionDevice device;
    private final KvCacheSpec spec;
    private final int slots;
    private final Memory keys;
    private final Memory values;
    private final Memory stepInfo;
    private final Memory blockTable;
    private final Set<VariantKey> keysWanted = new LinkedHashSet<>();
    private final List<Variant> variants = new ArrayList<>();
    /**
     * The dense variant of the first dense plan: its attention runs in the same task as the append (ptx-tornado's
     * fused PTX twin, the graph's first and only prebuilt task; Java backends: append then decode) and shares the
     * append's step array. The other variants run the Java kernels with step arrays of their own.
     */
    private VariantKey mainKey;
    /** The device's plans version the graph was last checked against. */
    private long preparedFor = -1;
    private Variant main;
    private TornadoExecutionPlan plan;
    private TornadoExecutionResult last;
    private int rows;
    /** The staging rows of new K and V (views, as the variants' step and queries). */
    private MemorySegment newK;
    private MemorySegment newV;
    /** The layout of the staging rows newK/newV: [slots, kvHeads, rows, headDim]. */
    private TensorStrides stagingStrides;
    /** The step of the held-back append and of the main variant's attention. */
    private MemorySegment mainStep;
    private boolean appendPending;
    /**
     * Whether the staging rows hold the cache's last append: the main variant's task writes the step's new rows from
     * them before it attends, so when it attends without a held-back append it rewrites those rows (the same bytes).
     */
    private boolean stagingHoldsLastAppend;
    /** Whether the host arrays hold what the GPU holds (true before the first execution and after a download). */
    private boolean hostCurrent = true;
    /** Whether the current plan has executed (then the GPU holds the cache and host writes need an eviction). */
    private boolean executedSinceBuild;
    /** The lane this graph's queued calls run on (-1 without lanes). */
    private final int lane;
    /** The queued call (its execution), or null; its output copy waits in the device's pending copies. */
    private Future<?> queued;

    CacheGraph(TornadoAttentionDevice device, KvCache cache) {
        this.device = device;
        this.spec = cache.spec();
        this.slots = spec.slots();
        this.keys = memory(cache.keys());
        this.values = memory(cache.values());
        this.stepInfo = memory(cache.stepInfo());
        this.blockTable = spec.paged() ? memory(cache.blockTable()) : null;
        this.lane = device.assignLane();
    }

    private Memory memory(DeviceTensor t) {
        Memory m = device.find("cache", t.address(), t.byteSize());
        m.graph = this;
        return m;
    }

    /** Before the host reads {@code m}: K and V come home if the GPU holds newer contents. */
    void beforeHostRead(Memory m) {
        if (m == keys || m == values) {
            download();
        }
    }

    /**
     * Before the host writes {@code m}: K and V come home and the plan closes if the GPU holds a copy (the graph
     * sends the host's again when it is next built); a graph not yet executed sends the host's anyway.
     */
    void beforeHostWrite(Memory m) {
        if ((m == keys || m == values) && plan != null && executedSinceBuild) {
            evict();
        }
    }

    // ---- calls

    void append(KvCache.Append append) {
        awaitIdle();
        device.settle(append.keys().address(), append.keys().byteSize());
        device.settle(append.values().address(), append.values().byteSize());
        int[] step = step();
        MemorySegment srcK = host(append.keys());
        MemorySegment srcV = host(append.values());
        if (plan == null) {
            HostCacheOps.append(spec, stepInfo.segment(), table(), append, srcK, srcV, keys.segment(), values.segment());
            stagingHoldsLastAppend = false;
            return;
        }
        int maxNew = maxNew(step);
        int d = spec.headDim();
        long rowBytes = 2L * d;
        MemorySegment stageK = newK;
        MemorySegment stageV = newV;
        if (maxNew <= rows && !append.packed() && append.strides().equals(stagingStrides)) {
            // The decode step's usual case: the new rows already lie as the staging rows do (rows past a slot's
            // count are copied too and never read).
            flush();
            long bytes = 2L * slots * spec.kvHeads() * rows * d;
            MemorySegment.copy(srcK, 0, stageK, 0, Math.min(bytes, srcK.byteSize()));
            MemorySegment.copy(srcV, 0, stageV, 0, Math.min(bytes, srcV.byteSize()));
            int[] chunk = new int[3 * slots + 1];   // as the chunked path writes its one chunk: no packed offsets
            System.arraycopy(step, 0, chunk, 0, 2 * slots);
            write(mainStep, chunk);
            appendPending = true;
            stagingHoldsLastAppend = true;
            return;
        }
        for (int j0 = 0; j0 < maxNew; j0 += rows) {
            flush();
            int[] chunk = new int[3 * slots + 1];
            for (int b = 0; b < slots; b++) {
                int n = step[slots + b];
                int c = Math.max(0, Math.min(rows, n - j0));
                chunk[b] = step[b] - n + j0 + c;
                chunk[slots + b] = c;
                for (int h = 0; h < spec.kvHeads(); h++) {
                    for (int jj = 0; jj < c; jj++) {
                        long from = 2 * HostCacheOps.sourceRow(append, b, step[2 * slots + b], h, j0 + jj);
                        long to = 2 * ((((long) b * spec.kvHeads() + h) * rows + jj) * d);
                        MemorySegment.copy(srcK, from, stageK, to, rowBytes);
                        MemorySegment.copy(srcV, from, stageV, to, rowBytes);
                    }
                }
            }
            write(mainStep, chunk);   // the main variant attends over these rows too (its output unused)
            appendPending = true;
        }
        stagingHoldsLastAppend = maxNew <= rows;
    }

    /** Dense attention of {@code plan}'s queries over the cache (at most S new tokens per slot). */
    void attendDense(TornadoCachePlan caller, DeviceTensor q, DeviceTensor o, DeviceTensor lse) {
        awaitIdle();
        CacheAttentionSpec s = caller.spec();
        Variant v = prepare(caller, false);
        // Queued on the lane: the main variant's usual decode call (a first execution captures, so it runs here).
        boolean queue = device.hasLanes() && v == main && lse == null && executedSinceBuild;
        if (queue) {
            device.settle(q.address(), q.byteSize());
        } else {
            device.drain();   // this call writes the caller's tensors now: after the queued calls' copies
        }
        int[] step = step();
        int sq = s.maxQueryLength();
        TensorStrides strides = s.denseQueryStrides();
        if (v != main) {
            flush();
        } else if (!appendPending && !stagingHoldsLastAppend) {
            stageFromHost(step);   // the last append went to the host cache, which the GPU receives with this execution
        }
        copyRows(host(q), strides, v.q, sq, s.heads(), 0, true);
        write(v.step, step);   // the main variant: the held-back append's step too (the same lengths)
        if (queue) {
            MemorySegment out = host(o);
            queued = device.submit(lane, this::execute);
            device.addPendingCopy(this, o, () -> copyRows(out, strides, v.o.getSegment(), sq, s.heads(), 0, false));
            return;
        }
        execute();
        copyRows(host(o), strides, v.o.getSegment(), sq, s.heads(), 0, false);
        if (lse != null) {
            last.transferToHost(v.lse);   // on request only: one copy less for every call that asks for none
            MemorySegment out = host(lse);
            MemorySegment staged = v.lse.getSegment();
            for (int bh = 0; bh < slots * s.heads(); bh++) {
                MemorySegment.copy(staged, 4L * bh * rows, out, 4L * bh * sq, 4L * sq);
            }
        }
    }

    /** Packed (varlen) attention of the last append's tokens, in chunks of S queries per slot. */
    void attendPacked(TornadoCachePlan caller, DeviceTensor q, DeviceTensor o, DeviceTensor lse) {
        device.drain();   // it writes the caller's tensors as it goes
        CacheAttentionSpec s = caller.spec();
        Variant v = prepare(caller, true);
        flush();
        int[] step = step();
        int maxNew = maxNew(step);
        int hq = s.heads();
        int d = s.headDim();
        long rowBytes = 2L * d;
        MemorySegment qHost = host(q);
        MemorySegment oHost = host(o);
        MemorySegment lseHost = lse == null ? null : host(lse);
        for (int j0 = 0; j0 < maxNew; j0 += rows) {
            int[] chunk = new int[3 * slots + 1];
            int[] counts = new int[slots];
            for (int b = 0; b < slots; b++) {
                int n = step[slots + b];
                int c = Math.max(0, Math.min(rows, n - j0));
                counts[b] = c;
                // Causal: query j0 + jj sees keys up to L - n + j0 + jj, i.e. a step of length L - n + j0 + c.
                chunk[b] = s.causal() ? step[b] - n + j0 + c : step[b];
                chunk[slots + b] = c;
                for (int h = 0; h < hq; h++) {
                    for (int jj = 0; jj < c; jj++) {
                        long packedRow = ((long) step[2 * slots + b] + j0 + jj) * hq + h;
                        MemorySegment.copy(qHost, packedRow * rowBytes, v.q,
                                (((long) b * hq + h) * rows + jj) * rowBytes, rowBytes);
                    }
                }
            }
            write(v.step, chunk);
            execute();
            if (lseHost != null) {
                last.transferToHost(v.lse);
            }
            for (int b = 0; b < slots; b++) {
                for (int h = 0; h < hq; h++) {
                    for (int jj = 0; jj < counts[b]; jj++) {
                        int t = step[2 * slots + b] + j0 + jj;
                        long stagedRow = ((long) b * hq + h) * rows + jj;
                        MemorySegment.copy(v.o.getSegment(), stagedRow * rowBytes, oHost, ((long) t * hq + h) * rowBytes,
                                rowBytes);
                        if (lseHost != null) {
                            lseHost.setAtIndex(JAVA_FLOAT_UNALIGNED, (long) h * s.maxTotalQueries() + t,
                                    v.lse.getSegment().getAtIndex(JAVA_FLOAT_UNALIGNED, stagedRow));
                        }
                    }
                }
            }
        }
    }

    /** Copies the step's new rows from the host cache (current: appended there) into the staging rows. */
    private void stageFromHost(int[] step) {
        int d = spec.headDim();
        long rowBytes = 2L * d;
        int[] table = table();
        TensorStrides storage = spec.strides();
        for (int b = 0; b < slots; b++) {
            int n = Math.min(step[slots + b], rows);
            for (int j = 0; j < n; j++) {
                long at = HostCacheOps.storageRow(spec, table, b, step[b] - step[slots + b] + j);
                for (int h = 0; h < spec.kvHeads(); h++) {
                    long from = 2 * (at + h * storage.head());
                    long to = 2 * ((((long) b * spec.kvHeads() + h) * rows + j) * d);
                    MemorySegment.copy(keys.segment(), from, newK, to, rowBytes);
                    MemorySegment.copy(values.segment(), from, newV, to, rowBytes);
                }
            }
        }
        stagingHoldsLastAppend = true;
    }

    /** Runs a held-back append. */
    void flush() {
        awaitIdle();
        if (appendPending) {
            execute();
        }
    }

    /** Brings the cache's newest K and V into the host arrays (the graph keeps them on the GPU too). */
    void download() {
        flush();
        if (plan != null && !hostCurrent) {
            last.transferToHost(keys.array, values.array);
            hostCurrent = true;
        }
    }

    /** Downloads the cache and closes the execution plan: the host holds the cache until the graph is built again. */
    void evict() {
        download();
        closePlan();
    }

    /** Frees the graph's device memory (the cache is going away). */
    void close() {
        appendPending = false;
        closePlan();
        for (Memory m : new Memory[] {keys, values, stepInfo, blockTable}) {
            if (m != null && m.graph == this) {
                m.graph = null;
            }
        }
    }

    // ---- the graph

    /** Builds (or rebuilds, carrying the cache over) the graph so it serves {@code caller}; returns its variant. */
    private Variant prepare(TornadoCachePlan caller, boolean packed) {
        VariantKey key = VariantKey.of(caller.spec(), packed);
        if (plan != null && preparedFor == device.plansVersion()) {
            for (Variant v : variants) {   // the usual step: no plan made or closed since the graph was checked
                if (v.key.equals(key)) {
                    return v;
                }
            }
        }
        device.drain();   // checking may rebuild: no execution of ours may be under way on another thread
        int wantRows = 0;
        Set<VariantKey> want = new LinkedHashSet<>(keysWanted);
        for (TornadoCachePlan p : device.plansFor(spec)) {
            boolean dense = p.spec().maxQueryLength() <= CacheAttentionSpec.MAX_DENSE_QUERIES;
            if (dense) {
                VariantKey dense0 = VariantKey.of(p.spec(), false);
                want.add(dense0);
                wantRows = Math.max(wantRows, p.spec().maxQueryLength());
                if (mainKey == null) {
                    mainKey = dense0;
                }
            }
            if (!dense) {
                want.add(VariantKey.of(p.spec(), true));   // a prefill plan: its packed calls (a dense plan's, when made)
            }
        }
        want.add(key);
        if (wantRows == 0) {
            wantRows = CacheAttentionSpec.MAX_DENSE_QUERIES;
        }
        if (plan == null || rows < wantRows || !keysWanted.containsAll(want)) {
            evict();
            keysWanted.addAll(want);
            build(Math.max(rows, wantRows));
        }
        preparedFor = device.plansVersion();
        return variants.stream().filter(v -> v.key.equals(key)).findFirst().orElseThrow();
    }

    private void build(int rowsPerSlot) {
        rows = rowsPerSlot;
        variants.clear();
        main = null;
        stagingHoldsLastAppend = false;
        String name = "kv" + GRAPHS.incrementAndGet();
        int d = spec.headDim();
        HalfFloatArray k = (HalfFloatArray) keys.array;
        HalfFloatArray vv = (HalfFloatArray) values.array;
        IntArray table = blockTable != null ? (IntArray) blockTable.array : new IntArray(1);
        stagingStrides = new TensorStrides((long) spec.kvHeads() * rows * d, (long) rows * d, d);
        int stagingRows = Math.toIntExact((long) slots * spec.kvHeads() * rows * d);
        TaskGraph graph = new TaskGraph(name);
        GridScheduler scheduler = new GridScheduler();
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, k, vv);
        graph.transferToDevice(blockTable != null ? DataTransferMode.EVERY_EXECUTION : DataTransferMode.FIRST_EXECUTION, table);
        // The main variant first: its task must be the graph's first (ptx-tornado: its only prebuilt task).
        List<VariantKey> order = new ArrayList<>(keysWanted);
        if (order.remove(mainKey)) {
            order.add(0, mainKey);
        }
        HalfFloatArray stage = null;
        HalfFloatArray newKArray = null;
        HalfFloatArray newVArray = null;
        IntArray appendParams = null;
        List<CacheAttentionTasks> tasks = new ArrayList<>();
        for (VariantKey key : order) {
            boolean isMain = key.equals(mainKey);
            CacheAttentionSpec vs = CacheAttentionSpec.builder().batch(slots).heads(key.heads()).kvHeads(spec.kvHeads())
                    .headDim(d).maxQueryLength(rows).maxLength(spec.capacity()).causal(key.causal()).scale(key.scale())
                    .build();
            // Only the main variant may use the PTX twin: one prebuilt task per graph, first (TornadoVM 5.2.0).
            String backend = isMain ? device.backendId() : Backends.TORNADO_SIMT;
            CacheAttentionTasks t = CacheAttentionTasks.create(backend, vs, spec, device.tornadoDevice());
            tasks.add(t);
            int queries = Math.toIntExact((long) slots * key.heads() * rows);
            HalfFloatArray o = new HalfFloatArray(queries * d);
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
                HalfFloatArray q = new HalfFloatArray(queries * d);
                v = new Variant(key, step.getSegment(), q.getSegment(), o, lse, step, q);
                graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, step, q);
            }
            variants.add(v);
            if (isMain) {
                main = v;
            }
        }
        if (stage == null) {
            // The Java append reads the new rows from arrays of their own, with the step of the main variant (if any).
            newKArray = new HalfFloatArray(stagingRows);
            newVArray = new HalfFloatArray(stagingRows);
            newK = newKArray.getSegment();
            newV = newVArray.getSegment();
            appendParams = IntArray.fromArray(CacheAttentionTasks.appendParams(spec, stagingStrides, rows, false));
            graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, appendParams);
            graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, newKArray, newVArray);
        }
        IntArray appendStep;
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
                t.addDecode(graph, name, scheduler, "attend" + i + "_", v.qArray, k, vv, v.stepArray, table, v.o, v.lse);
            }
        }
        graph.transferToHost(DataTransferMode.UNDER_DEMAND, k, vv);
        for (Variant v : variants) {
            // O back with every execution (one synchronisation per call instead of a second one for the copy); lse
            // only when a call asks for it.
            graph.transferToHost(DataTransferMode.EVERY_EXECUTION, v.o);
            graph.transferToHost(DataTransferMode.UNDER_DEMAND, v.lse);
        }
        TornadoExecutionPlan built = new TornadoExecutionPlan(graph.snapshot());
        try {
            built.withDevice(device.tornadoDevice()).withGridScheduler(scheduler);
            if (device.profile()) {
                built.withProfiler(ProfilerMode.SILENT);
            }
            if (device.cudaGraph()) {
                built.withCUDAGraph();
            }
            built.withPreCompilation();
        } catch (RuntimeException | Error e) {
            closeQuietly(built);
            throw e;
        } finally {
            device.countCompilation();
        }
        plan = built;
        last = null;
        executedSinceBuild = false;
    }

    private void execute() {
        if (!executedSinceBuild) {
            device.drain();   // a first execution captures CUDA graphs: nothing else of ours runs meanwhile
        }
        TornadoExecutionResult result = plan.execute();
        last = result;
        hostCurrent = false;
        executedSinceBuild = true;
        appendPending = false;
        if (device.profile() && result.getProfilerResult() != null) {
            device.addKernelNanos(result.getProfilerResult().getDeviceKernelTime());
        }
        // What ran is done: the next execution appends and attends nothing unless told.
        zero(mainStep);
        for (Variant v : variants) {
            zero(v.step);
        }
    }

    // ---- lanes

    /**
     * Waits for the queued call, if any; returns its failure (not thrown: {@link TornadoAttentionDevice#drain} waits for
     * every lane first). A failed call's output is never copied.
     */
    RuntimeException awaitQueued() {
        if (queued == null) {
            return null;
        }
        Future<?> f = queued;
        queued = null;
        RuntimeException failure = TornadoAttentionDevice.outcome(f);
        if (failure != null) {
            device.dropPendingCopies(this);
        }
        return failure;
    }

    /** Before the graph's arrays are touched: the queued call has run, and its output copy (if pending) is done. */
    private void awaitIdle() {
        RuntimeException failure = awaitQueued();
        if (failure != null) {
            throw failure;
        }
        if (device.hasPendingCopy(this)) {
            device.drain();   // the copy reads this graph's output array; copies go in call order
        }
    }

    private void closePlan() {
        if (plan != null) {
            closeQuietly(plan);
            plan = null;
            last = null;
            hostCurrent = true;
        }
    }

    private static void closeQuietly(TornadoExecutionPlan p) {
        try {
            p.close();
        } catch (TornadoExecutionPlanException | RuntimeException e) {
            // Freeing device memory failed; nothing else to do for a plan that is going away.
        }
    }

    // ---- host side

    /** The cache's step ints as KvCache wrote them: lengths, new tokens, packed offsets, total. */
    private int[] step() {
        return stepInfo.segment().asSlice(0, 4L * (3 * slots + 1)).toArray(JAVA_INT_UNALIGNED);
    }

    private int[] table() {
        return blockTable == null ? null : blockTable.segment().toArray(JAVA_INT_UNALIGNED);
    }

    private int maxNew(int[] step) {
        int m = 0;
        for (int b = 0; b < slots; b++) {
            m = Math.max(m, step[slots + b]);
        }
        return m;
    }

    private MemorySegment host(DeviceTensor t) {
        Memory m = device.find("tensor", t.address(), t.byteSize());
        return m.segment().asSlice(t.address() - m.address, t.byteSize());
    }

    /**
     * Copies dense rows between a caller's tensor ({@code strides}, {@code sq} rows per (slot, head)) and a
     * staging array ([slots, heads, S, D]); {@code in}: caller to staging.
     */
    private void copyRows(MemorySegment caller, TensorStrides strides, MemorySegment staged, int sq, int heads, int j0,
                          boolean in) {
        long rowBytes = 2L * spec.headDim();
        if (sq == rows && strides.equals(new TensorStrides((long) heads * sq * spec.headDim(), (long) sq * spec.headDim(),
                spec.headDim()))) {
            long bytes = (long) slots * heads * sq * rowBytes;   // the same dense layout: one copy
            if (in) {
                MemorySegment.copy(caller, 0, staged, 0, bytes);
            } else {
                MemorySegment.copy(staged, 0, caller, 0, bytes);
            }
            return;
        }
        for (int b = 0; b < slots; b++) {
            for (int h = 0; h < heads; h++) {
                for (int j = 0; j < sq; j++) {
                    long at = 2 * strides.rowStart(b, h, j0 + j);
                    long st = (((long) b * heads + h) * rows + j) * rowBytes;
                    if (in) {
                        MemorySegment.copy(caller, at, staged, st, rowBytes);
                    } else {
                        MemorySegment.copy(staged, st, caller, at, rowBytes);
                    }
                }
            }
        }
    }

    private static void write(MemorySegment words, int[] values) {
        MemorySegment.copy(values, 0, words, JAVA_INT_UNALIGNED, 0, values.length);
    }

    private static void zero(MemorySegment words) {
        words.fill((byte) 0);
    }
}
