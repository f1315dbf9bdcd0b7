package io.github.tornadoattention.tornado.inference;

import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;

import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.cpu.HostCacheOps;
import io.github.tornadoattention.tornado.TornadoArrays;
import io.github.tornadoattention.tornado.inference.CacheGraph.Variant;
import io.github.tornadoattention.tornado.inference.CacheGraph.VariantKey;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * What a TornadoVM inference device holds and has queued, and the only code that changes it: the TornadoVM arrays
 * behind its tensors, each KV cache's residency (host or GPU, its built graph, a held-back append, what its staging
 * holds), the open plans a cache's graph is built for, the lanes' queued calls and their pending output copies, and the
 * merge graphs. It decides when a graph is built, filled, executed, downloaded or closed; building and running one is
 * {@link CacheGraph}'s and {@link MergeStatesGraph}'s, which it hands values and never hears back from.
 *
 * <p>Every method runs under this object's lock (the build counter is an atomic); a queued execution runs on its cache's lane without it (the caller
 * may hold the lock while it waits for that execution), touching only the cache's own graph and flags, which nobody
 * reads before waiting for it ({@link #awaitIdle}). This lock orders one device's calls; what TornadoVM cannot run
 * beside anything else in the JVM (builds, first executions, closes: other devices' and other threads' included)
 * the graphs run under {@link io.github.tornadoattention.tornado.TornadoVMLock}, which they take inside this one
 * (never the other way round), so executions of different caches, lanes and devices stay concurrent.
 *
 * <p>A cache is <i>on the host</i> (no graph; the host arrays hold it, appends are host copies) or <i>on the device</i>
 * (built; after the first execution the GPU holds it). {@link #evict} brings a device cache home (download, close)
 * when the graph must be rebuilt or the host writes the cache directly.
 */
final class DeviceState {
    /** One TornadoVM array behind device tensors; {@code cache} is set while a cache's graph keeps it on the GPU. */
    private static final class Memory {
        final TornadoNativeArray array;
        final DType dtype;
        final long address;
        final long bytes;
        /** The array's data (getSegment() makes a new view per call, several per layer in a decode step). */
        final MemorySegment segment;
        Resident cache;

        Memory(TornadoNativeArray array, DType dtype) {
            this.array = array;
            this.dtype = dtype;
            this.segment = array.getSegment();
            this.address = segment.address();
            this.bytes = segment.byteSize();
        }
    }

    /** One KV cache: its arrays, the graph built for it (null while the cache is on the host) and what it holds. */
    private static final class Resident {
        final KvCacheSpec spec;
        final int slots;
        final Memory keys;
        final Memory values;
        final Memory stepInfo;
        final Memory blockTable;
        /** The lane its queued calls run on (-1 without lanes). */
        final int lane;
        /** The variants its graph serves (or will, once built), kept across rebuilds. */
        final Set<VariantKey> keysWanted = new LinkedHashSet<>();
        /**
         * The dense variant of the plan whose call first builds the graph (a packed first call: of the first dense
         * plan): its attention runs in the same task as the append (ptx-tornado's
         * fused PTX twin, the graph's first and only prebuilt task; Java backends: append then decode) and shares the
         * append's step. The other variants run the Java kernels with step arrays of their own.
         */
        VariantKey mainKey;
        /** The plans version the graph was last checked against. */
        long preparedFor = -1;
        CacheGraph graph;
        /** Staging rows per slot of the last build (a rebuild never shrinks them). */
        int rows;
        boolean appendPending;
        /**
         * Whether the staging rows hold the cache's last append: the main variant's task writes the step's new rows
         * from them before it attends, so when it attends without a held-back append it rewrites those rows (the same
         * bytes).
         */
        boolean stagingHoldsLastAppend;
        /**
         * Whether the host arrays hold what the GPU holds (true before the first execution and after a download).
         * Whether the GPU holds the cache at all (host writes then need an eviction) is whether the graph has executed
         * ({@link CacheGraph#executed}).
         */
        boolean hostCurrent = true;

        Resident(KvCacheSpec spec, Memory keys, Memory values, Memory stepInfo, Memory blockTable, int lane) {
            this.spec = spec;
            this.slots = spec.slots();
            this.keys = keys;
            this.values = values;
            this.stepInfo = stepInfo;
            this.blockTable = blockTable;
            this.lane = lane;
        }
    }

    private final GraphTarget target;
    private final Lanes lanes;
    private final TreeMap<Long, Memory> memory = new TreeMap<>();
    private final Map<KvCache, Resident> caches = new IdentityHashMap<>();
    private final List<CacheAttentionPlan> plans = new ArrayList<>();
    /** Bumped when a plan is made or closed: a cache's graph rechecks what it serves only then. */
    private long plansVersion;
    private final Map<MergeStatesGraph.Capacity, MergeStatesGraph> merges = new HashMap<>();
    /** Graphs built, read without the lock (a counter an engine may poll while a call runs). */
    private final AtomicLong compilations = new AtomicLong();
    private long kernelNanos;

    DeviceState(GraphTarget target, Lanes lanes) {
        this.target = target;
        this.lanes = lanes;
    }

    long compilations() {
        return compilations.get();
    }

    /** Runs what caches hold back (appends, queued calls, output copies); every call has completed when it returns. */
    synchronized void synchronize() {
        drain();
        for (Resident r : caches.values()) {
            flush(r);
        }
    }

    /** The kernels' device time (TornadoVM's profiler) of the executions each op ran. */
    synchronized double[] timeEach(List<Runnable> ops) {
        synchronize();
        double[] millis = new double[ops.size()];
        for (int i = 0; i < ops.size(); i++) {
            long before = kernelNanos;
            ops.get(i).run();
            millis[i] = (kernelNanos - before) / 1e6;
        }
        long before = kernelNanos;
        synchronize();   // work an op held back counts for the last op
        if (millis.length > 0) {
            millis[millis.length - 1] += (kernelNanos - before) / 1e6;
        }
        return millis;
    }

    // ---- memory

    synchronized long malloc(DType dtype, long length) {
        if (length > Integer.MAX_VALUE) {
            throw new InvalidArgumentException("length", length, "TornadoVM arrays hold at most " + Integer.MAX_VALUE + " elements");
        }
        TornadoNativeArray array = TornadoArrays.allocate(dtype, (int) length);
        Memory m = new Memory(array, dtype);
        memory.put(m.address, m);
        return m.address;
    }

    /** Forgets the array at {@code address}; a cache's array takes the cache's graph with it. */
    synchronized void free(long address) {
        drain();
        Memory m = memory.remove(address);
        if (m != null && m.cache != null) {
            Resident r = m.cache;
            r.appendPending = false;
            closeGraph(r);
            for (Memory held : new Memory[] {r.keys, r.values, r.stepInfo, r.blockTable}) {
                if (held != null && held.cache == r) {
                    held.cache = null;
                }
            }
            caches.values().remove(r);
        }
    }

    /** Refuses a range that lies in no array of this device (a wrapped tensor must, to be reachable at all). */
    synchronized void checkWrappable(long address, long bytes) {
        find("address", address, bytes);
    }

    /** The array holding [address, address + bytes). */
    private Memory find(String argument, long address, long bytes) {
        Map.Entry<Long, Memory> e = memory.floorEntry(address);
        if (e == null || address + bytes > e.getValue().address + e.getValue().bytes) {
            throw new InvalidArgumentException(argument, "0x" + Long.toHexString(address) + " (" + bytes + " bytes)",
                    "must lie inside one array of this TornadoVM device");
        }
        return e.getValue();
    }

    /** The array behind [address, address + bytes), for an engine that reads or writes it outside our calls. */
    synchronized TornadoNativeArray arrayOf(long address, long bytes) {
        drain();
        return find("tensor", address, bytes).array;
    }

    synchronized void copyToDevice(long destination, MemorySegment source, long bytes) {
        MemorySegment.copy(source, 0, hostView(destination, bytes, true), 0, bytes);
    }

    synchronized void copyToHost(MemorySegment destination, long source, long bytes) {
        MemorySegment.copy(hostView(source, bytes, false), 0, destination, 0, bytes);
    }

    synchronized void copyOnDevice(long destination, long source, long bytes) {
        // Within a cache on the GPU (copy-on-write of a shared page, a shared prefix): the cache comes home
        // and goes up again with its graph's next execution. Rare, and correct; a device-side copy task would
        // avoid the round trip.
        MemorySegment from = hostView(source, bytes, false);
        MemorySegment.copy(from, 0, hostView(destination, bytes, true), 0, bytes);
    }

    synchronized void uploadInts(long destination, int[] values, int from, int count) {
        Memory m = find("destination", destination, 4L * count);
        if (m.cache != null) {
            flush(m.cache);   // held-back and queued work must see the lengths and pages it was issued with
        } else {
            settle(destination, 4L * count);
        }
        MemorySegment.copy(values, from, m.segment, ValueLayout.JAVA_INT_UNALIGNED, destination - m.address, count);
    }

    /** Host memory of [address, address + bytes), after the cache holding it (if any) has brought it home. */
    private MemorySegment hostView(long address, long bytes, boolean forWriting) {
        drain();
        Memory m = find("address", address, bytes);
        Resident r = m.cache;
        if (r != null && (m == r.keys || m == r.values)) {
            if (!forWriting) {
                download(r);
            } else if (r.graph != null && r.graph.executed()) {
                evict(r);   // the GPU holds a copy: the graph sends the host's again when it is next built
            }
        }
        return m.segment.asSlice(address - m.address, bytes);
    }

    /** The host memory of {@code t}. */
    private MemorySegment host(DeviceTensor t) {
        Memory m = find("tensor", t.address(), t.byteSize());
        return m.segment.asSlice(t.address() - m.address, t.byteSize());
    }

    // ---- plans

    synchronized void addPlan(CacheAttentionPlan plan) {
        plans.add(plan);
        plansVersion++;
    }

    synchronized void forgetPlan(CacheAttentionPlan plan) {
        plans.remove(plan);
        plansVersion++;
    }

    // ---- cache calls

    /** The residency of {@code cache}, made (its graph not yet built) on first use. */
    private Resident resident(KvCache cache) {
        return caches.computeIfAbsent(cache, c -> {
            KvCacheSpec spec = c.spec();
            Resident r = new Resident(spec, memory(c.keys()), memory(c.values()), memory(c.stepInfo()),
                    spec.paged() ? memory(c.blockTable()) : null, lanes.assign());
            for (Memory m : new Memory[] {r.keys, r.values, r.stepInfo, r.blockTable}) {
                if (m != null) {
                    m.cache = r;
                }
            }
            return r;
        });
    }

    private Memory memory(DeviceTensor t) {
        return find("cache", t.address(), t.byteSize());
    }

    /**
     * An append: written on the host while the cache is there; otherwise staged and held back, to run in the same
     * execution as the attention call that follows (chunks of S rows per slot beyond the first run on their own).
     */
    synchronized void append(KvCache cache, KvCache.Append append) {
        Resident r = resident(cache);
        awaitIdle(r);
        settle(append.keys().address(), append.keys().byteSize());
        settle(append.values().address(), append.values().byteSize());
        int[] step = step(r);
        MemorySegment srcK = host(append.keys());
        MemorySegment srcV = host(append.values());
        CacheGraph g = r.graph;
        if (g == null) {
            HostCacheOps.append(r.spec, r.stepInfo.segment, table(r), append, srcK, srcV, r.keys.segment, r.values.segment);
            r.stagingHoldsLastAppend = false;
            return;
        }
        int maxNew = StagingRows.maxNew(step, r.slots);
        int rows = g.rows();
        if (maxNew <= rows && !append.packed() && append.strides().equals(g.stagingStrides())) {
            // The decode step's usual case: the new rows already lie as the staging rows do (rows past a slot's
            // count are copied too and never read).
            flush(r);
            long bytes = 2L * r.slots * r.spec.kvHeads() * rows * r.spec.headDim();
            MemorySegment.copy(srcK, 0, g.newK(), 0, Math.min(bytes, srcK.byteSize()));
            MemorySegment.copy(srcV, 0, g.newV(), 0, Math.min(bytes, srcV.byteSize()));
            int[] chunk = new int[3 * r.slots + 1];   // as the chunked path writes its one chunk: no packed offsets
            System.arraycopy(step, 0, chunk, 0, 2 * r.slots);
            StagingRows.write(g.mainStep(), chunk);
            r.appendPending = true;
            r.stagingHoldsLastAppend = true;
            return;
        }
        for (int j0 = 0; j0 < maxNew; j0 += rows) {
            flush(r);
            int[] chunk = StagingRows.stageAppendChunk(r.spec, step, append, srcK, srcV, g.newK(), g.newV(), rows, j0);
            StagingRows.write(g.mainStep(), chunk);   // the main variant attends over these rows too (its output unused)
            r.appendPending = true;
        }
        r.stagingHoldsLastAppend = maxNew <= rows;
    }

    /** Dense attention of queries {@code q} (plan {@code s}) over {@code cache} (at most S new tokens per slot). */
    synchronized void attendDense(KvCache cache, CacheAttentionSpec s, DeviceTensor q, DeviceTensor o, DeviceTensor lse) {
        Resident r = resident(cache);
        awaitIdle(r);
        Variant v = prepare(r, s, false);
        CacheGraph g = r.graph;
        // Queued on the lane: the main variant's usual decode call (a first execution captures, so it runs here).
        boolean queue = lanes.enabled() && v == g.main() && lse == null && g.executed();
        if (queue) {
            settle(q.address(), q.byteSize());
        } else {
            drain();   // this call writes the caller's tensors now: after the queued calls' copies
        }
        int[] step = step(r);
        int sq = s.maxQueryLength();
        TensorStrides strides = s.denseQueryStrides();
        if (v != g.main()) {
            flush(r);
        } else if (!r.appendPending && !r.stagingHoldsLastAppend) {
            // The last append went to the host cache, which the GPU receives with this execution.
            StagingRows.stageFromCache(r.spec, table(r), step, r.keys.segment, r.values.segment, g.newK(), g.newV(),
                    g.rows());
            r.stagingHoldsLastAppend = true;
        }
        StagingRows.copyRows(host(q), strides, v.q(), r.slots, s.heads(), g.rows(), sq, s.headDim(), 0, true);
        StagingRows.write(v.step(), step);   // the main variant: the held-back append's step too (the same lengths)
        if (queue) {
            MemorySegment out = host(o);
            lanes.submit(r, r.lane, () -> execute(r), o.address(), o.byteSize(), () -> StagingRows.copyRows(out, strides,
                    v.o().getSegment(), r.slots, s.heads(), g.rows(), sq, s.headDim(), 0, false));
            return;
        }
        execute(r);
        StagingRows.copyRows(host(o), strides, v.o().getSegment(), r.slots, s.heads(), g.rows(), sq, s.headDim(), 0, false);
        if (lse != null) {
            g.downloadLse(v);   // on request only: one copy less for every call that asks for none
            MemorySegment out = host(lse);
            MemorySegment staged = v.lse().getSegment();
            for (int bh = 0; bh < r.slots * s.heads(); bh++) {
                MemorySegment.copy(staged, 4L * bh * g.rows(), out, 4L * bh * sq, 4L * sq);
            }
        }
    }

    /** Packed (varlen) attention of the last append's tokens, in chunks of S queries per slot. */
    synchronized void attendPacked(KvCache cache, CacheAttentionSpec s, DeviceTensor q, DeviceTensor o, DeviceTensor lse) {
        Resident r = resident(cache);
        drain();   // it writes the caller's tensors as it goes
        Variant v = prepare(r, s, true);
        CacheGraph g = r.graph;
        flush(r);
        int[] step = step(r);
        int maxNew = StagingRows.maxNew(step, r.slots);
        int rows = g.rows();
        int hq = s.heads();
        MemorySegment qHost = host(q);
        MemorySegment oHost = host(o);
        MemorySegment lseHost = lse == null ? null : host(lse);
        for (int j0 = 0; j0 < maxNew; j0 += rows) {
            int[] chunk = StagingRows.stagePackedQueries(qHost, v.q(), step, r.slots, hq, rows, s.headDim(), s.causal(), j0);
            StagingRows.write(v.step(), chunk);
            execute(r);
            if (lseHost != null) {
                g.downloadLse(v);
            }
            StagingRows.unstagePackedOutputs(v.o().getSegment(), lseHost == null ? null : v.lse().getSegment(), oHost,
                    lseHost, chunk, step, r.slots, hq, rows, s.headDim(), s.maxTotalQueries(), j0);
        }
    }

    /**
     * Builds (or rebuilds, carrying the cache over through the host) the graph of {@code r} so that it serves plan
     * {@code s}'s calls; returns their variant.
     */
    private Variant prepare(Resident r, CacheAttentionSpec s, boolean packed) {
        VariantKey key = VariantKey.of(s, packed);
        if (r.graph != null && r.preparedFor == plansVersion) {
            Variant v = r.graph.variant(key);   // the usual step: no plan made or closed since the graph was checked
            if (v != null) {
                return v;
            }
        }
        drain();   // checking may rebuild: no execution of ours may be under way on another thread
        int wantRows = 0;
        Set<VariantKey> want = new LinkedHashSet<>(r.keysWanted);
        if (r.mainKey == null && !packed) {
            // The main variant (ptx-tornado: the fused PTX twin; the others run Java kernels) is the plan that first
            // attends over this cache: an engine's local and global layers each get their own plan's twin.
            r.mainKey = key;
        }
        for (CacheAttentionPlan p : plans) {
            if (!p.cacheSpec().equals(r.spec)) {
                continue;
            }
            boolean dense = p.spec().maxQueryLength() <= CacheAttentionSpec.MAX_DENSE_QUERIES;
            if (dense) {
                VariantKey dense0 = VariantKey.of(p.spec(), false);
                want.add(dense0);
                wantRows = Math.max(wantRows, p.spec().maxQueryLength());
                if (r.mainKey == null) {
                    r.mainKey = dense0;
                }
            } else {
                want.add(VariantKey.of(p.spec(), true));   // a prefill plan: its packed calls (a dense plan's, when made)
            }
        }
        want.add(key);
        if (wantRows == 0) {
            wantRows = CacheAttentionSpec.MAX_DENSE_QUERIES;
        }
        if (r.graph == null || r.rows < wantRows || !r.keysWanted.containsAll(want)) {
            evict(r);
            r.keysWanted.addAll(want);
            r.rows = Math.max(r.rows, wantRows);
            r.stagingHoldsLastAppend = false;
            try {
                r.graph = CacheGraph.build(target, r.spec, r.keys.array, r.values.array,
                        r.blockTable != null ? (IntArray) r.blockTable.array : null, r.keysWanted, r.mainKey, r.rows);
            } finally {
                compilations.incrementAndGet();
            }
        }
        r.preparedFor = plansVersion;
        return r.graph.variant(key);
    }

    /**
     * One execution of the graph of {@code r}; on its lane for a queued call (without the lock: it touches only what
     * belongs to {@code r}, and a first execution, which captures CUDA graphs, is never queued).
     */
    private void execute(Resident r) {
        if (!r.graph.executed()) {
            // A first execution runs alone in the JVM (TornadoVMLock: it allocates and captures CUDA graphs); our
            // queued calls finish and copy their outputs first, so that their failures surface here, in call order.
            drain();
        }
        long nanos = r.graph.execute();
        r.hostCurrent = false;
        r.appendPending = false;
        if (nanos != 0) {
            kernelNanos += nanos;   // with the profiler only, which has no lanes
        }
    }

    /** Runs a held-back append. */
    private void flush(Resident r) {
        awaitIdle(r);
        if (r.appendPending) {
            execute(r);
        }
    }

    /** Brings the cache's newest K and V into the host arrays (the graph keeps them on the GPU too). */
    private void download(Resident r) {
        flush(r);
        if (r.graph != null && !r.hostCurrent) {
            r.graph.downloadCache();
            r.hostCurrent = true;
        }
    }

    /** Downloads the cache and closes its graph: the host holds the cache until the graph is built again. */
    private void evict(Resident r) {
        download(r);
        closeGraph(r);
    }

    private void closeGraph(Resident r) {
        if (r.graph != null) {
            r.graph.close();
            r.graph = null;
            r.hostCurrent = true;
        }
    }

    /** Before the arrays of {@code r} are touched: its queued call has run, and its output copy (if pending) is done. */
    private void awaitIdle(Resident r) {
        RuntimeException failure = lanes.await(r);
        if (failure != null) {
            throw failure;
        }
        if (lanes.owesCopy(r)) {
            drain();   // the copy reads this cache's output array; copies go in call order
        }
    }

    /**
     * Waits for every queued call and copies their outputs into the callers' tensors in call order. The first failure
     * of a queued call is thrown (after the others have finished; a failed call's output is not copied).
     */
    private void drain() {
        RuntimeException failure = lanes.drain();
        if (failure != null) {
            throw failure;
        }
    }

    /** Before the host reads [address, address + bytes) for a call: waits if a queued call writes it. */
    private void settle(long address, long bytes) {
        if (lanes.writesInto(address, bytes)) {
            drain();
        }
    }

    /** The cache's step ints as KvCache wrote them: lengths, new tokens, packed offsets, total. */
    private static int[] step(Resident r) {
        return r.stepInfo.segment.asSlice(0, 4L * (3 * r.slots + 1)).toArray(JAVA_INT_UNALIGNED);
    }

    private static int[] table(Resident r) {
        return r.blockTable == null ? null : r.blockTable.segment.toArray(JAVA_INT_UNALIGNED);
    }

    // ---- merge

    /**
     * mergeStates on the GPU: the inputs are copied into the merge graph of their size class, one execution merges
     * them, the outputs are copied out; every call has completed when it returns.
     */
    synchronized void merge(DeviceTensor oParts, DeviceTensor lseParts, int parts, long rows, int headDim,
                            DeviceTensor o, DeviceTensor lse) {
        MemorySegment op = hostView(oParts.address(), oParts.byteSize(), false);
        MemorySegment lp = hostView(lseParts.address(), lseParts.byteSize(), false);
        MemorySegment out = hostView(o.address(), o.byteSize(), true);
        MemorySegment lseOut = lse == null ? null : hostView(lse.address(), lse.byteSize(), true);
        MergeStatesGraph.Capacity capacity = MergeStatesGraph.Capacity.of(parts, rows, headDim);
        MergeStatesGraph graph = merges.get(capacity);
        if (graph == null) {
            try {
                graph = MergeStatesGraph.build(target, capacity);
            } finally {
                compilations.incrementAndGet();
            }
            merges.put(capacity, graph);
        }
        kernelNanos += graph.run(op, lp, parts, Math.toIntExact(rows), headDim, out, lseOut);
    }
}
