package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.PlanOptions;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.ProfilerMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The host side shared by the TornadoVM backends: one TornadoVM execution plan per {@link AttentionShape}, built and
 * compiled in the constructor (that is, in {@code plan()}), then reused by every call. A backend hands its kernel
 * task(s) and their device-only workspace to {@link #build}; this class puts the transfers around them.
 *
 * <p><b>One execution plan of four task graphs</b> ({@link Graph}), selected per call with {@code withGraph}:
 * <ul>
 *   <li>{@code SEND_K}, {@code SEND_V}: {@code transferToDevice(EVERY_EXECUTION, k)} (or v), an empty task that takes
 *       the array, {@code persistOnDevice(k)}: the owner of K's (V's) device buffer;</li>
 *   <li>{@code ATTEND_NEW_Q}: {@code transferToDevice(EVERY_EXECUTION, q)}, the workspace {@code FIRST_EXECUTION}, the
 *       kernel(s), {@code transferToHost(UNDER_DEMAND, o, lse)}, K and V consumed: the owner of Q, O, logsumexp and
 *       the workspace;</li>
 *   <li>{@code ATTEND}: the same kernel(s) on everything consumed, transferring nothing and owning nothing.</li>
 * </ul>
 * A call sends exactly the inputs whose tensor (identity) or {@link HalfTensor#version()} changed since they were
 * last sent: {@code SEND_K} if K changed, {@code SEND_V} if V changed, then {@code ATTEND_NEW_Q} if Q changed, else
 * {@code ATTEND}; O (and logsumexp when asked for) comes back with {@code TornadoExecutionResult.transferToHost}.
 * A decode step (new Q, same K/V cache) runs one graph that sends Q; a call with nothing changed sends nothing.
 * The benchmark hook {@code rerunOnDevice} runs {@code ATTEND}: the kernels on the inputs on the device, no copy.
 *
 * <p><b>Why this is safe in TornadoVM 5.2.0</b> (tornado-kernels/README.md, "Device residency"): a consuming graph
 * takes the {@code XPUBuffer} objects of the graph executed last ({@code TornadoTaskGraph.updatePersistedObjectState}),
 * and those objects never change while the plan lives (buffers are locked: allocated once, never freed by an
 * execution), so every graph holds the owner's buffers once the constructor has run the graphs in the order
 * {@code SEND_K, SEND_V, ATTEND_NEW_Q, ATTEND} ({@code SEND_V} relays K, {@code ATTEND_NEW_Q} K and V). Each graph
 * names, for every graph that can run before it, the arrays it takes from it, so no execution falls back to
 * TornadoVM's unnamed consume. Each array is transferred (so freed) by exactly one graph, consumers never persist
 * what they consume, and {@link #release} selects all graphs ({@code withAllGraphs()}) before {@code close()}, which
 * otherwise frees only the graph selected last. Nothing is built or compiled after the constructor.
 *
 * <p><b>Host memory.</b> TornadoVM binds a task graph to its argument objects when the graph is built
 * (there is no call to re-point an argument at another array) and compiles per execution plan. A plan
 * that is compiled once, in {@code plan()}, before any tensor is seen therefore owns its TornadoVM arrays:
 * a changed input is copied into them (one memcpy, only when it changed) and O is copied out of them.
 *
 * <p><b>Options</b> ({@link PlanOptions}): {@code cudaGraph} builds the execution plan {@code withCUDAGraph()}
 * (TornadoVM captures each graph's copies and launches on its first run and replays the capture afterwards);
 * {@code profile} runs it with TornadoVM's profiler ({@code withProfiler(SILENT)}), and every call, reruns included,
 * reports the attention kernels' device time ({@code TornadoProfilerResult.getDeviceKernelTime()}, CUDA events) to
 * the benchmark hooks.
 */
abstract class TornadoAttentionPlan extends AttentionPlan {
    private static final AtomicInteger PLANS = new AtomicInteger();

    /** The task graphs of a plan's execution plan, in {@code withGraph} index order (see the class comment). */
    enum Graph {
        SEND_K("sendk"),
        SEND_V("sendv"),
        ATTEND_NEW_Q("attendq"),
        ATTEND("attend");

        final String suffix;

        Graph(String suffix) {
            this.suffix = suffix;
        }
    }

    /**
     * A backend's kernel task(s): adds them to {@code graph}, named {@code graphName}, and their worker grids to
     * {@code scheduler} (keys {@code graphName + "." + task}). Called for {@code ATTEND_NEW_Q} and {@code ATTEND}.
     */
    @FunctionalInterface
    interface Tasks {
        void addTo(TaskGraph graph, String graphName, GridScheduler scheduler);
    }

    /** Task-graph names are unique per plan: "a12_attend" and so on. */
    protected final String prefix = "a" + PLANS.incrementAndGet() + "_";
    protected final FloatArray lseArray;
    private final PlanOptions options;
    private final HalfTensor[] lastSent = new HalfTensor[3];   // q, k, v
    private final long[] lastSentVersion = new long[3];
    private final int[] sends = new int[3];
    private final int[] graphRuns = new int[Graph.values().length];
    private TornadoNativeArray[] inputs;
    private TornadoExecutionPlan executionPlan;
    private TornadoDevice device;

    protected TornadoAttentionPlan(String backendId, AttentionShape shape, PlanOptions options) {
        super(backendId, shape);
        this.options = options;
        this.lseArray = new FloatArray(shape.logSumExpElements());
    }

    /** The graph name of {@code graph} in this plan. */
    private String name(Graph graph) {
        return prefix + graph.suffix;
    }

    /**
     * Builds the plan's four task graphs around {@code tasks} over the plan's arrays {@code q}, {@code k}, {@code v}
     * (LongArray, HalfFloatArray, or ShortArray for bf16 bits), {@link #outputArray()}, {@link #lseArray} and the device-only {@code workspace}
     * (read and written by the kernels only; sent once), compiles them into one execution plan and runs each once.
     *
     * @param ptxJitFlags CUDA JIT options for the generated PTX ({@code withCompilerFlags}: pairs such as
     *                    {@code CU_JIT_MAX_REGISTERS 128}), or {@code null} for TornadoVM's
     */
    protected final void build(TornadoDevice device, TornadoNativeArray q, TornadoNativeArray k, TornadoNativeArray v,
                               List<TornadoNativeArray> workspace, Tasks tasks, String ptxJitFlags) {
        // Building, compiling and the first runs: alone (TornadoVMLock); every later call runs beside other plans'.
        TornadoVMLock.exclusive(() -> buildAlone(device, q, k, v, workspace, tasks, ptxJitFlags));
    }

    private void buildAlone(TornadoDevice device, TornadoNativeArray q, TornadoNativeArray k, TornadoNativeArray v,
                            List<TornadoNativeArray> workspace, Tasks tasks, String ptxJitFlags) {
        this.device = device;
        this.inputs = new TornadoNativeArray[] {q, k, v};
        TornadoNativeArray o = outputArray();
        GridScheduler scheduler = new GridScheduler();
        List<Object> owned = new ArrayList<>(List.of(q, o, lseArray));   // ATTEND_NEW_Q's own arrays
        owned.addAll(workspace);
        List<Object> all = new ArrayList<>(owned);
        all.addAll(List.of(k, v));

        TaskGraph sendK = send(new TaskGraph(name(Graph.SEND_K)), k);
        TaskGraph sendV = new TaskGraph(name(Graph.SEND_V));
        consume(sendV, Map.of(Graph.SEND_K, List.of(k), Graph.SEND_V, List.of(k),
                Graph.ATTEND_NEW_Q, List.of(k), Graph.ATTEND, List.of(k)));
        send(sendV, v);

        TaskGraph attendNewQ = new TaskGraph(name(Graph.ATTEND_NEW_Q));
        consume(attendNewQ, Map.of(Graph.SEND_K, List.of(k), Graph.SEND_V, List.of(k, v),
                Graph.ATTEND_NEW_Q, List.of(k, v), Graph.ATTEND, List.of(k, v)));
        attendNewQ.transferToDevice(DataTransferMode.EVERY_EXECUTION, q);
        if (!workspace.isEmpty()) {
            attendNewQ.transferToDevice(DataTransferMode.FIRST_EXECUTION, workspace.toArray());
        }
        tasks.addTo(attendNewQ, name(Graph.ATTEND_NEW_Q), scheduler);
        attendNewQ.transferToHost(DataTransferMode.UNDER_DEMAND, o, lseArray);

        TaskGraph attend = new TaskGraph(name(Graph.ATTEND));
        consume(attend, Map.of(Graph.SEND_K, List.of(k), Graph.SEND_V, List.of(k, v),
                Graph.ATTEND_NEW_Q, all, Graph.ATTEND, all));
        tasks.addTo(attend, name(Graph.ATTEND), scheduler);

        TornadoExecutionPlan plan = new TornadoExecutionPlan(sendK.snapshot(), sendV.snapshot(), attendNewQ.snapshot(),
                attend.snapshot());
        try {
            plan.withDevice(device);
            if (!scheduler.keySet().isEmpty()) {   // a library task has no worker grid, and TornadoVM refuses an empty scheduler
                plan.withGridScheduler(scheduler);
            }
            if (ptxJitFlags != null) {
                BackendTypes.PTX.ifPresent(ptx -> plan.withCompilerFlags(ptx, ptxJitFlags));
            }
            if (options.cudaGraph()) {
                plan.withCUDAGraph();
            }
            if (options.profile()) {
                plan.withProfiler(ProfilerMode.SILENT);
            }
            plan.withPreCompilation();
            executionPlan = plan;
            for (Graph graph : Graph.values()) {   // this order hands every consumer the owners' buffers
                recordKernelTime(run(graph));
            }
        } catch (RuntimeException | Error e) {
            executionPlan = null;
            closeAll(device, plan);
            throw e;
        } finally {
            compiled();
        }
    }

    /** {@code graph} sends {@code array} on every execution and owns it: an empty task takes it, the graph persists it. */
    private static TaskGraph send(TaskGraph graph, TornadoNativeArray array) {
        graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, array);
        if (array instanceof LongArray longs) {
            graph.task("keep", TornadoAttentionPlan::keep, longs);
        } else if (array instanceof HalfFloatArray halves) {
            graph.task("keep", TornadoAttentionPlan::keep, halves);
        } else if (array instanceof uk.ac.manchester.tornado.api.types.arrays.ShortArray bits) {
            graph.task("keep", TornadoAttentionPlan::keep, bits);
        } else {
            throw new IllegalArgumentException("inputs are LongArray, HalfFloatArray or ShortArray, not "
                    + array.getClass());
        }
        return graph.persistOnDevice(array);
    }

    /**
     * {@code graph} takes {@code arrays} from the device: for every graph of the plan that can run before it, the
     * subset that graph holds ({@code from}), so that TornadoVM's {@code updatePersistedObjectState} always finds a
     * named list for the graph executed last.
     */
    private void consume(TaskGraph graph, Map<Graph, List<Object>> from) {
        for (Graph source : Graph.values()) {
            graph.consumeFromDevice(name(source), from.get(source).toArray());
        }
    }

    /** The send graphs' task: takes the array so that TornadoVM transfers it; the kernel does nothing. */
    public static void keep(LongArray array) {
    }

    /** The send graphs' task for fp16 arrays. */
    public static void keep(HalfFloatArray array) {
    }

    /** The send graphs' task for bf16 bits (tornado-simt). */
    public static void keep(uk.ac.manchester.tornado.api.types.arrays.ShortArray array) {
    }

    /**
     * Runs {@code graph} alone (of this plan's graphs); beside other plans' executions once built (the build runs
     * every graph once, inside its exclusive section).
     */
    private TornadoExecutionResult run(Graph graph) {
        TornadoExecutionResult result = TornadoVMLock.shared(() -> executionPlan.withGraph(graph.ordinal()).execute());
        graphRuns[graph.ordinal()]++;
        return result;
    }

    /** Called once the execution plan has been compiled and run (or failed to), e.g. to delete files it loaded. */
    protected void compiled() {
    }

    /** The output array the kernels write (plan-owned, the same bytes as the O tensor). */
    protected abstract TornadoNativeArray outputArray();

    @Override
    protected final void compute(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        boolean newQ = copyInIfChanged(0, q);
        boolean newK = copyInIfChanged(1, k);
        boolean newV = copyInIfChanged(2, v);
        TornadoExecutionResult result;
        try {
            if (newK) {
                run(Graph.SEND_K);
            }
            if (newV) {
                run(Graph.SEND_V);
            }
            result = run(newQ ? Graph.ATTEND_NEW_Q : Graph.ATTEND);
        } catch (RuntimeException | Error e) {
            Arrays.fill(lastSent, null);   // the device may hold some of them, or none: send all next time
            throw e;
        }
        recordKernelTime(result);
        TornadoNativeArray out = outputArray();
        if (lse != null) {
            TornadoVMLock.shared(() -> result.transferToHost(out, lseArray));
            MemorySegment.copy(lseArray.getSegment(), ValueLayout.JAVA_FLOAT, 0, lse, 0, lse.length);
        } else {
            TornadoVMLock.shared(() -> result.transferToHost(out));
        }
        MemorySegment.copy(out.getSegment(), 0, o.data(), 0, o.data().byteSize());
        o.markModified();
    }

    /** Copies {@code tensor} into the plan's array {@code slot} unless it was the last one sent there, unchanged. */
    private boolean copyInIfChanged(int slot, HalfTensor tensor) {
        if (lastSent[slot] == tensor && lastSentVersion[slot] == tensor.version()) {
            return false;
        }
        MemorySegment.copy(tensor.data(), 0, inputs[slot].getSegment(), 0, tensor.data().byteSize());
        lastSent[slot] = tensor;
        lastSentVersion[slot] = tensor.version();
        sends[slot]++;
        return true;
    }

    /** The last forward's kernels again on the inputs on the device ({@code ATTEND}): no copy either way. */
    @Override
    protected final void rerun(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        recordKernelTime(run(Graph.ATTEND));
    }

    private void recordKernelTime(TornadoExecutionResult result) {
        if (options.profile()) {
            double ms = deviceMillis(result);
            if (!Double.isNaN(ms)) {
                recordDeviceMillis(ms);
            }
        }
    }

    /** The kernels' device time of one execution: TornadoVM's profiler's; NaN when it has none. */
    protected double deviceMillis(TornadoExecutionResult result) {
        return result.getProfilerResult() == null ? Double.NaN : result.getProfilerResult().getDeviceKernelTime() / 1e6;
    }

    @Override
    protected final void release() {
        closeAll(device, executionPlan);
    }

    /** How many times input {@code slot} (0 q, 1 k, 2 v) was copied into the plan's array and sent; for tests. */
    final int sends(int slot) {
        return sends[slot];
    }

    /** How many times {@code graph} has run, the constructor's run included; for tests. */
    final int runs(Graph graph) {
        return graphRuns[graph.ordinal()];
    }

    /**
     * Frees every graph's device buffers and host registrations: {@code withAllGraphs()} first, because TornadoVM
     * 5.2.0's {@code close()} frees only the graphs selected now, i.e. the one of the last {@code withGraph}. Alone,
     * see {@link TornadoVMLock#close}.
     */
    private static void closeAll(TornadoDevice device, TornadoExecutionPlan plan) {
        if (plan == null) {
            return;
        }
        TornadoVMLock.close(device, () -> {
            plan.withAllGraphs();
            plan.close();
        });
    }
}
