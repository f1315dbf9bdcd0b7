package io.github.tornadoattention.tornado.inference;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.tornado.TornadoArrays;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The inference API ({@link AttentionDevice}) on a TornadoVM backend: {@code ptx-tornado}, {@code tornado-mma}
 * or {@code tornado-simt}. This class is the API's face; what the device holds and has queued is {@link DeviceState}'s,
 * the task graphs are built by {@link CacheGraph} (a KV cache's) and {@link MergeStatesGraph} (mergeStates).
 *
 * <p><b>Memory.</b> A device tensor is a TornadoVM array ({@link HalfFloatArray} for fp16, a {@code ShortArray} of bf16
 * bits for bf16, {@link FloatArray}, {@link IntArray}; {@link #arrayOf} hands it to an engine); its address is the host
 * address of its data.
 * TornadoVM keeps device buffers per execution plan, so what lives on the GPU between calls is what a task
 * graph keeps there: each KV cache gets one task graph in which its K and V stay on the device
 * ({@code FIRST_EXECUTION}) and are appended to by a task; the step's lengths, block table, new K/V rows and queries
 * go up with each execution and the output comes back. Every other tensor is host memory between calls, so copies to
 * and from it are plain memory copies, and every call completes before it returns ({@link #synchronize()} only runs
 * work still pending, see below). {@code mergeStates} runs a Java kernel on the GPU, on copies of its tensors.
 *
 * <p><b>Lanes</b> ({@code PlanOptions.lanes}, 0 by default). With lanes, a dense attention call of a cache's main
 * variant (a decode step's append + attention, no lse asked for) is queued on its cache's lane, a host thread of its
 * own, and returns: calls on different caches (an engine's layers) then overlap TornadoVM's synchronous
 * per-execution cost, each plan on its own CUDA stream. Its output is copied into the caller's tensor when the
 * host next needs it, in the order the calls were made (a later call's output over the same tensor replaces it).
 * Everything else waits for what is queued first: {@link #synchronize()}, any host access to a tensor, a build, a
 * first execution (TornadoVM captures CUDA graphs then, which other threads must not disturb), downloads, lse, packed
 * calls, merges; a call that reads a tensor a queued call will write waits for it too.
 *
 * <p><b>Threads.</b> An engine may call a device from several threads, each with its own caches (a {@link KvCache} is
 * one thread's at a time); one device's calls take turns ({@link DeviceState}'s lock; lanes overlap the executions).
 * Builds, first executions and closes of TornadoVM plans run alone in the JVM, every device's and thread's
 * ({@link io.github.tornadoattention.tornado.TornadoVMLock}, which says why); later executions run beside each other.
 *
 * <p><b>Calls.</b> An append is held back and runs in the same execution as the attention call that follows
 * it (one graph execution per layer and step); any other use of the cache runs it first. Appends before a
 * cache's first attention call are written on the host (the prompt goes up with the graph's first execution).
 * Attention with up to S queries per slot (S: the largest {@code maxQueryLength} of the dense plans on this
 * device, at most 16; 16 without any) is one execution; packed (varlen) calls run in chunks of S queries per
 * slot. A cache's graph is built and compiled once, for the plans made on this device before its first use;
 * a later plan with more queries per slot or another attention definition (causal flag, scale, element type, window,
 * softcap, sinks: each its own variant) rebuilds it once (the cache
 * contents are carried over through the host). The merge graph is built once per size class. {@link #compilations()}
 * counts these builds.
 */
public final class TornadoAttentionDevice extends AttentionDevice {
    private static final Map<String, TornadoAttentionDevice> DEVICES = new ConcurrentHashMap<>();

    private final String name;
    private final boolean profile;
    private final DeviceState state;

    private TornadoAttentionDevice(String backendId, TornadoDevice tornadoDevice, boolean profile, boolean cudaGraph,
                                   int lanes) {
        super(backendId);
        this.profile = profile;
        this.state = new DeviceState(new GraphTarget(backendId, tornadoDevice, profile, cudaGraph),
                new Lanes(backendId, lanes));
        this.name = tornadoDevice.getPhysicalDevice().getDeviceName() + " (TornadoVM " + tornadoDevice.getTornadoVMBackend() + ")";
    }

    /**
     * The device of backend {@code backendId} on {@code device}, one per backend and options in a JVM
     * ({@code profile}: execution plans run with TornadoVM's profiler, and {@link #timeEach} reports the kernels'
     * device time; {@code cudaGraph}: the execution plans run {@code withCUDAGraph()}: TornadoVM captures an
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
        return device.state.arrayOf(tensor.address(), tensor.byteSize());   // after the queued calls
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public long compilations() {
        return state.compilations();
    }

    /** Runs what caches hold back (appends, copies); every call has completed when it returns. */
    @Override
    public void synchronize() {
        state.synchronize();
    }

    /** With {@code profile}: the kernels' device time (TornadoVM's profiler) of the executions each op ran. */
    @Override
    public Optional<double[]> timeEach(List<Runnable> ops) {
        return profile ? Optional.of(state.timeEach(ops)) : super.timeEach(ops);
    }

    @Override
    protected long malloc(DType dtype, long length) {
        return state.malloc(dtype, length);
    }

    /** The TornadoVM array's header and data: host memory the device keeps beside the GPU's copy. */
    @Override
    protected long directBytes(DType dtype, long length) {
        return TornadoArrays.bytes(dtype, length);
    }

    @Override
    protected void free(long address, long bytes) {
        state.free(address);
    }

    @Override
    protected void checkWrappable(long address, long bytes) {
        state.checkWrappable(address, bytes);
    }

    @Override
    protected void copyToDevice(long destination, MemorySegment source, long bytes) {
        state.copyToDevice(destination, source, bytes);
    }

    @Override
    protected void copyToHost(MemorySegment destination, long source, long bytes) {
        state.copyToHost(destination, source, bytes);
    }

    @Override
    protected void copyOnDevice(long destination, long source, long bytes) {
        state.copyOnDevice(destination, source, bytes);
    }

    @Override
    protected void uploadInts(long destination, int[] values, int from, int count) {
        state.uploadInts(destination, values, from, count);
    }

    @Override
    protected void appendToCache(KvCache cache, KvCache.Append append) {
        state.append(cache, append);
    }

    @Override
    protected CacheAttentionPlan newCachePlan(CacheAttentionSpec spec, KvCacheSpec cacheSpec) {
        TornadoCachePlan plan = new TornadoCachePlan(this, state, spec, cacheSpec);
        state.addPlan(plan);
        return plan;
    }

    /** mergeStates on the GPU ({@link MergeStatesGraph}); every call has completed when it returns. */
    @Override
    protected void merge(DeviceTensor oParts, DeviceTensor lseParts, int parts, long rows, int headDim,
                         DeviceTensor o, DeviceTensor lse) {
        if (o.dtype() != DType.FP16) {   // the Java merge kernel reads and writes fp16 values, not bits
            throw new InvalidArgumentException("o.dtype", o.dtype().label(), backendId()
                    + "'s mergeStates (a Java kernel) is fp16; cpu-reference merges bf16");
        }
        state.merge(oParts, lseParts, parts, rows, headDim, o, lse);
    }
}
