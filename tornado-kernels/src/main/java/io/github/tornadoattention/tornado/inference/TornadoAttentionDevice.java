package io.github.tornadoattention.tornado.inference;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.cpu.CpuReference;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The inference API ({@link AttentionDevice}) on a TornadoVM backend: {@code ptx-tornado}, {@code tornado-mma}
 * or {@code tornado-simt}.
 *
 * <p><b>Memory.</b> A device tensor is a TornadoVM array ({@link HalfFloatArray}, {@link FloatArray},
 * {@link IntArray}; {@link #arrayOf} hands it to an engine); its address is the host address of its data.
 * TornadoVM keeps device buffers per execution plan, so what lives on the GPU between calls is what a task
 * graph keeps there: each KV cache gets one task graph ({@link CacheGraph}) in which its K and V stay on the
 * device ({@code FIRST_EXECUTION}) and are appended to by a task; the step's lengths, block table, new K/V
 * rows and queries go up with each execution and the output comes back. Every other tensor is host memory
 * between calls, so copies to and from it are plain memory copies, and every call completes before it
 * returns ({@link #synchronize()} only runs work still pending, see below).
 *
 * <p><b>Lanes</b> ({@code PlanOptions.lanes}, 0 by default). With lanes, a dense attention call of a cache's main
 * variant (a decode step's append + attention, no lse asked for) is queued on its cache's lane, a host thread of its
 * own, and returns: calls on different caches (an engine's layers) then overlap TornadoVM's synchronous
 * per-execution cost, each plan on its own CUDA stream. Its output is copied into the caller's tensor when the
 * host next needs it, in the order the calls were made (a later call's output over the same tensor replaces it).
 * Everything else waits for what is queued first ({@link #drain}): {@link #synchronize()}, any host access to a
 * tensor, a build, a first execution (TornadoVM captures CUDA graphs then, which other threads must not disturb),
 * downloads, lse, packed calls; a call that reads a tensor a queued call will write waits for it too.
 *
 * <p><b>Calls.</b> An append is held back and runs in the same execution as the attention call that follows
 * it (one graph execution per layer and step); any other use of the cache runs it first. Appends before a
 * cache's first attention call are written on the host (the prompt goes up with the graph's first execution).
 * Attention with up to S queries per slot (S: the largest {@code maxQueryLength} of the dense plans on this
 * device, at most 16; 16 without any) is one execution; packed (varlen) calls run in chunks of S queries per
 * slot. A cache's graph is built and compiled once, for the plans made on this device before its first use;
 * a later plan with more queries per slot or another causal flag or scale rebuilds it once (the cache
 * contents are carried over through the host). {@link #compilations()} counts these builds.
 */
public final class TornadoAttentionDevice extends AttentionDevice {
    private static final Map<String, TornadoAttentionDevice> DEVICES = new ConcurrentHashMap<>();

    private final TornadoDevice tornadoDevice;
    private final String name;
    private final boolean profile;
    private final boolean cudaGraph;
    /** One single-thread executor per lane; empty without lanes. */
    private final ExecutorService[] lanes;
    private int nextLane;
    /** Outputs of queued calls still to be copied into the caller's tensors, in call order. */
    private final List<PendingCopy> pendingCopies = new ArrayList<>();
    private final TreeMap<Long, Memory> memory = new TreeMap<>();
    private final Map<KvCache, CacheGraph> graphs = new IdentityHashMap<>();
    private final List<TornadoCachePlan> plans = new ArrayList<>();
    /** Bumped when a plan is made or closed: a cache graph rechecks what it serves only then. */
    private long plansVersion;
    private final AtomicLong compilations = new AtomicLong();
    private long kernelNanos;

    /** One TornadoVM array behind a device tensor; {@code graph} is set while a cache graph keeps it on the GPU. */
    static final class Memory {
        final TornadoNativeArray array;
        final DType dtype;
        final long address;
        final long bytes;
        /** The array's data (getSegment() makes a new view per call, several per layer in a decode step). */
        private final MemorySegment segment;
        CacheGraph graph;

        Memory(TornadoNativeArray array, DType dtype) {
            this.array = array;
            this.dtype = dtype;
            this.segment = array.getSegment();
            this.address = segment.address();
            this.bytes = segment.byteSize();
        }

        MemorySegment segment() {
            return segment;
        }
    }

    /**
     * A queued call's output: {@code apply} copies the graph's output array into the caller's tensor
     * [{@code address}, {@code address + bytes}) once the call has run.
     */
    record PendingCopy(CacheGraph graph, long address, long bytes, Runnable apply) {
        boolean overlaps(long start, long length) {
            return start < address + bytes && address < start + length;
        }
    }

    private TornadoAttentionDevice(String backendId, TornadoDevice tornadoDevice, boolean profile, boolean cudaGraph,
                                   int lanes) {
        super(backendId);
        this.tornadoDevice = tornadoDevice;
        this.profile = profile;
        this.cudaGraph = cudaGraph;
        this.lanes = new ExecutorService[lanes];
        for (int i = 0; i < lanes; i++) {
            String thread = backendId + "-lane-" + i;
            this.lanes[i] = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, thread);
                t.setDaemon(true);   // devices live as long as the JVM
                return t;
            });
        }
        this.name = tornadoDevice.getPhysicalDevice().getDeviceName() + " (TornadoVM " + tornadoDevice.getTornadoVMBackend() + ")";
    }

    /**
     * The device of backend {@code backendId} on {@code device}, one per backend and options in a JVM
     * ({@code profile}: execution plans run with TornadoVM's profiler, and {@link #timeEach} reports the kernels'
     * device time; {@code cudaGraph}: the caches' execution plans run {@code withCUDAGraph()}: TornadoVM captures an
     * execution's copies and launches once and replays them, which removes most of its per-execution host cost;
     * {@code lanes}: host threads running cache executions concurrently, see the class comment; not with
     * {@code profile}, whose kernel times add up per call).
     */
    public static TornadoAttentionDevice of(String backendId, TornadoDevice device, boolean profile, boolean cudaGraph,
                                            int lanes) {
        int used = profile ? 0 : lanes;
        return DEVICES.computeIfAbsent(backendId + (profile ? "+profile" : "") + (cudaGraph ? "+graph" : "")
                        + (used > 0 ? "+lanes" + used : ""),
                k -> new TornadoAttentionDevice(backendId, device, profile, cudaGraph, used));
    }

    /** The TornadoVM array behind {@code tensor} (a tensor of a TornadoVM device), for an engine's own task graphs. */
    public static TornadoNativeArray arrayOf(DeviceTensor tensor) {
        InvalidArgumentException.requireNonNull("tensor", tensor);
        if (!(tensor.device() instanceof TornadoAttentionDevice device)) {
            throw new InvalidArgumentException("tensor", tensor, "must be a tensor of a TornadoVM device");
        }
        synchronized (device) {
            device.drain();   // the engine reads or writes it outside our calls
            return device.find("tensor", tensor.address(), tensor.byteSize()).array;
        }
    }

    TornadoDevice tornadoDevice() {
        return tornadoDevice;
    }

    boolean profile() {
        return profile;
    }

    boolean cudaGraph() {
        return cudaGraph;
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public long compilations() {
        return compilations.get();
    }

    void countCompilation() {
        compilations.incrementAndGet();
    }

    void addKernelNanos(long nanos) {
        kernelNanos += nanos;
    }

    /** Runs what caches hold back (appends, copies); every call has completed when it returns. */
    @Override
    public synchronized void synchronize() {
        drain();
        for (CacheGraph graph : graphs.values()) {
            graph.flush();
        }
    }

    // ---- lanes

    boolean hasLanes() {
        return lanes.length > 0;
    }

    /** The lane of a new cache graph: round robin, so an engine's layers spread over the lanes. */
    int assignLane() {
        return lanes.length == 0 ? -1 : nextLane++ % lanes.length;
    }

    /** Queues {@code work} on {@code lane}; its output copy (if any) is added with {@link #addPendingCopy}. */
    Future<?> submit(int lane, Runnable work) {
        return lanes[lane].submit(work);
    }

    /**
     * Registers the output copy of the call just queued for {@code graph}; a pending copy to exactly the same range is
     * dropped (this call's output replaces it).
     */
    void addPendingCopy(CacheGraph graph, DeviceTensor into, Runnable apply) {
        long address = into.address();
        long bytes = into.byteSize();
        pendingCopies.removeIf(c -> c.address == address && c.bytes == bytes);
        pendingCopies.add(new PendingCopy(graph, address, bytes, apply));
    }

    /** Whether a queued call of {@code graph} still has its output to copy (it reads the graph's output array). */
    boolean hasPendingCopy(CacheGraph graph) {
        for (PendingCopy c : pendingCopies) {
            if (c.graph == graph) {
                return true;
            }
        }
        return false;
    }

    /** A failed call's output is never copied. */
    void dropPendingCopies(CacheGraph graph) {
        pendingCopies.removeIf(c -> c.graph == graph);
    }

    /** Before the host reads [address, address + bytes) for a queued call: waits if a queued call writes it. */
    void settle(long address, long bytes) {
        for (PendingCopy c : pendingCopies) {
            if (c.overlaps(address, bytes)) {
                drain();
                return;
            }
        }
    }

    /**
     * Waits for every queued call and copies their outputs into the callers' tensors in call order. The first failure
     * of a queued call is thrown (after the others have finished; a failed call's output is not copied).
     */
    void drain() {
        RuntimeException failure = null;
        for (CacheGraph graph : graphs.values()) {
            RuntimeException e = graph.awaitQueued();
            failure = failure == null ? e : failure;
        }
        List<PendingCopy> copies = new ArrayList<>(pendingCopies);
        pendingCopies.clear();
        for (PendingCopy c : copies) {
            c.apply.run();
        }
        if (failure != null) {
            throw failure;
        }
    }

    /** The outcome of a queued call: null, or its failure as a runtime exception. */
    static RuntimeException outcome(Future<?> queued) {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    queued.get();
                    return null;
                } catch (InterruptedException e) {
                    interrupted = true;   // the call is running on the GPU: finish waiting, keep the flag
                }
            }
        } catch (ExecutionException e) {
            return e.getCause() instanceof RuntimeException r ? r : new IllegalStateException(e.getCause());
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** With {@code profile}: the kernels' device time (TornadoVM's profiler) of the executions each op ran. */
    @Override
    public synchronized Optional<double[]> timeEach(List<Runnable> ops) {
        if (!profile) {
            return super.timeEach(ops);
        }
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
        return Optional.of(millis);
    }

    // ---- memory

    @Override
    protected synchronized long malloc(DType dtype, long length) {
        if (length > Integer.MAX_VALUE) {
            throw new InvalidArgumentException("length", length, "TornadoVM arrays hold at most " + Integer.MAX_VALUE + " elements");
        }
        int n = (int) length;
        TornadoNativeArray array = switch (dtype) {
            case FP16 -> new HalfFloatArray(n);
            case FP32 -> new FloatArray(n);
            case INT32 -> new IntArray(n);
            default -> throw new InvalidArgumentException("dtype", dtype, "TornadoVM devices hold FP16, FP32 and INT32 tensors");
        };
        Memory m = new Memory(array, dtype);
        memory.put(m.address, m);
        return m.address;
    }

    @Override
    protected synchronized void free(long address, long bytes) {
        drain();
        Memory m = memory.remove(address);
        if (m != null && m.graph != null) {
            CacheGraph graph = m.graph;
            graph.close();
            graphs.values().remove(graph);
        }
    }

    @Override
    protected synchronized void checkWrappable(long address, long bytes) {
        find("address", address, bytes);
    }

    /** The array holding [address, address + bytes). */
    Memory find(String argument, long address, long bytes) {
        Map.Entry<Long, Memory> e = memory.floorEntry(address);
        if (e == null || address + bytes > e.getValue().address + e.getValue().bytes) {
            throw new InvalidArgumentException(argument, "0x" + Long.toHexString(address) + " (" + bytes + " bytes)",
                    "must lie inside one array of this TornadoVM device");
        }
        return e.getValue();
    }

    /** Host memory of [address, address + bytes), after the cache graph holding it (if any) has brought it home. */
    private MemorySegment hostView(long address, long bytes, boolean forWriting) {
        drain();
        Memory m = find("address", address, bytes);
        if (m.graph != null) {
            if (forWriting) {
                m.graph.beforeHostWrite(m);
            } else {
                m.graph.beforeHostRead(m);
            }
        }
        return m.segment().asSlice(address - m.address, bytes);
    }

    @Override
    protected synchronized void copyToDevice(long destination, MemorySegment source, long bytes) {
        MemorySegment.copy(source, 0, hostView(destination, bytes, true), 0, bytes);
    }

    @Override
    protected synchronized void copyToHost(MemorySegment destination, long source, long bytes) {
        MemorySegment.copy(hostView(source, bytes, false), 0, destination, 0, bytes);
    }

    @Override
    protected synchronized void copyOnDevice(long destination, long source, long bytes) {
        // Within a cache on the GPU (copy-on-write of a shared page, a shared prefix): the cache comes home
        // and goes up again with its graph's next execution. Rare, and correct; a device-side copy task would
        // avoid the round trip.
        MemorySegment from = hostView(source, bytes, false);
        MemorySegment.copy(from, 0, hostView(destination, bytes, true), 0, bytes);
    }

    @Override
    protected synchronized void uploadInts(long destination, int[] values, int from, int count) {
        Memory m = find("destination", destination, 4L * count);
        if (m.graph != null) {
            m.graph.flush();   // held-back and queued work must see the lengths and pages it was issued with
        } else {
            settle(destination, 4L * count);
        }
        MemorySegment.copy(values, from, m.segment(), ValueLayout.JAVA_INT_UNALIGNED, destination - m.address, count);
    }

    // ---- caches and plans

    @Override
    protected synchronized void appendToCache(KvCache cache, KvCache.Append append) {
        graph(cache).append(append);
    }

    /** The graph of {@code cache}, made (not yet built) on first use. */
    synchronized CacheGraph graph(KvCache cache) {
        return graphs.computeIfAbsent(cache, c -> new CacheGraph(this, c));
    }

    @Override
    protected synchronized CacheAttentionPlan newCachePlan(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        TornadoCachePlan plan = new TornadoCachePlan(this, spec, cacheSpec);
        plans.add(plan);
        plansVersion++;
        return plan;
    }

    synchronized void forget(TornadoCachePlan plan) {
        plans.remove(plan);
        plansVersion++;
    }

    synchronized long plansVersion() {
        return plansVersion;
    }

    /** The open plans of this device over caches of {@code cacheSpec} (what a cache graph is built for). */
    synchronized List<TornadoCachePlan> plansFor(KvCacheSpec cacheSpec) {
        return plans.stream().filter(p -> p.cacheSpec().equals(cacheSpec)).toList();
    }

    /** mergeStates on the host: the tensors of a TornadoVM device live in host memory between calls. */
    @Override
    protected synchronized void merge(DeviceTensor oParts, DeviceTensor lseParts, int parts, long rows, int headDim,
                                      DeviceTensor o, DeviceTensor lse) {
        MemorySegment op = hostView(oParts.address(), oParts.byteSize(), false);
        MemorySegment lp = hostView(lseParts.address(), lseParts.byteSize(), false);
        float[] oValues = new float[Math.toIntExact(oParts.length())];
        for (int i = 0; i < oValues.length; i++) {
            oValues[i] = Float.float16ToFloat(op.getAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i));
        }
        float[] lseValues = lp.toArray(ValueLayout.JAVA_FLOAT_UNALIGNED);
        CpuReference.Result r = CpuReference.merge(oValues, lseValues, parts, Math.toIntExact(rows), headDim);
        MemorySegment out = hostView(o.address(), o.byteSize(), true);
        for (int i = 0; i < r.output().length; i++) {
            out.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i, Float.floatToFloat16((float) r.output()[i]));
        }
        if (lse != null) {
            MemorySegment l = hostView(lse.address(), lse.byteSize(), true);
            for (int i = 0; i < r.logSumExp().length; i++) {
                l.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i, (float) r.logSumExp()[i]);
            }
        }
    }
}
