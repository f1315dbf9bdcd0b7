package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.atomic.AtomicInteger;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.ImmutableTaskGraph;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.ProfilerMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.exceptions.TornadoExecutionPlanException;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The host side shared by the TornadoVM backends: one TornadoVM execution plan per
 * {@link AttentionShape}, built and compiled in the constructor (that is, in {@code plan()}), then reused
 * by every call. A backend builds its attention task graph, which must take Q, K and V with
 * {@link #consumeInputs}, and hands it to {@link #build}.
 *
 * <p><b>Default: one task graph.</b> {@code transferToDevice(EVERY_EXECUTION, q, k, v)}, the kernel(s),
 * {@code transferToHost(UNDER_DEMAND, o, lse)}: every call (and {@link #rerun}) sends all three inputs.
 *
 * <p><b>Device-resident inputs (a KV cache), opt-in with {@code -Dtornado.attention.residentInputs=true}.</b>
 * The execution plan holds four task graphs over the same arrays q, k, v:
 * <pre>
 *   0  send-all  transferToDevice(EVERY_EXECUTION, q, k, v)                     + no-op task, persistOnDevice(q, k, v)
 *   1  send-q    transferToDevice(EVERY_EXECUTION, q), consumeFromDevice(k, v)  + no-op task, persistOnDevice(q, k, v)
 *   2  send-kv   transferToDevice(EVERY_EXECUTION, k, v), consumeFromDevice(q)  + no-op task, persistOnDevice(q, k, v)
 *   3  attend    consumeFromDevice(q, k, v), the kernel(s), transferToHost(UNDER_DEMAND, o, lse)
 * </pre>
 * A call runs ({@code executionPlan.withGraph(i).execute()}) the send graph for exactly the inputs that
 * changed since they were last sent, judged by each tensor's identity and {@link HalfTensor#version()},
 * or none at all; then graph 3; then copies O (and logsumexp, when asked for) back with
 * {@code TornadoExecutionResult.transferToHost}, TornadoVM's on-demand transfer. An unchanged K/V is
 * not sent again. TornadoVM hands persisted device buffers from the graph executed last to the next
 * one (consumeFromDevice without a source name), which is why every graph names all three inputs.
 * {@link #rerun} runs graph 3 alone: a kernel launch with no host-device copy at all. This is off by
 * default because TornadoVM 5.2.0 mishandles it once several plans have lived in one JVM (see
 * {@link #RESIDENT_INPUTS_PROPERTY}); one plan per JVM works.
 *
 * <p><b>Host memory.</b> TornadoVM binds a task graph to its argument objects when the graph is built
 * (there is no call to re-point an argument at another array) and compiles per execution plan. A plan
 * that is compiled once, in {@code plan()}, before any tensor is seen therefore owns its TornadoVM arrays:
 * a changed input is copied into them (one memcpy, only when it changed) and O is copied out of them.
 * Wrapping each caller's tensors instead ({@code fromSegmentShallow} over
 * {@link HalfTensor#dataWithHeaderRoom()}) would mean recompiling whenever a caller passes another
 * tensor, as {@code forward(q, k, v)} does with its fresh output on every call.
 *
 * <p><b>CUDA graphs.</b> With {@code -Dtornado.attention.cudaGraph=true} the execution plan is built
 * {@code withCUDAGraph()}: TornadoVM captures each graph's copies and launches on its first run and
 * replays the capture afterwards.
 *
 * <p><b>Kernel times.</b> With {@code -Dtornado.attention.profile=true} the execution plan runs with
 * TornadoVM's profiler ({@code withProfiler(ProfilerMode.SILENT)}) and every call reports the attention
 * kernel's device time ({@code TornadoProfilerResult.getDeviceKernelTime()}, CUDA events) through
 * {@link #lastDeviceMillis()}. Off by default: the profiler adds events and bookkeeping to every call.
 */
abstract class TornadoAttentionPlan extends AttentionPlan {
    /** System property: {@code true} to replay the execution plan's graphs as CUDA graphs. */
    static final String CUDA_GRAPH_PROPERTY = "tornado.attention.cudaGraph";
    /** System property: {@code true} to time the kernels on the device with TornadoVM's profiler. */
    static final String PROFILE_PROPERTY = "tornado.attention.profile";
    /**
     * Diagnostic switch: {@code true} keeps a closed plan's TornadoVM execution plan and arrays alive instead
     * of freeing them (memory is leaked), to tell TornadoVM plan-lifecycle problems from kernel ones.
     */
    static final String KEEP_CLOSED_PROPERTY = "tornado.attention.debug.keepClosedPlans";
    private static final java.util.List<Object> KEPT = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    /**
     * {@code true}: the four-graph scheme that keeps unchanged inputs on the device (a KV cache) and reruns
     * without copies. Off by default: with TornadoVM 5.2.0 its persisted buffers go wrong once several
     * plans have lived in one JVM (wrong results, then CUDA errors; measured on an H200), so by default a
     * plan is one task graph that sends Q, K and V on every execution.
     */
    static final String RESIDENT_INPUTS_PROPERTY = "tornado.attention.residentInputs";
    static final boolean SINGLE_GRAPH = !Boolean.getBoolean(RESIDENT_INPUTS_PROPERTY);
    static final int SEND_ALL = 0;
    static final int SEND_Q = 1;
    static final int SEND_KV = 2;
    static final int ATTEND = 3;
    private static final AtomicInteger PLANS = new AtomicInteger();

    /** Task-graph names are unique per plan: "a12_attend" and so on. */
    protected final String prefix = "a" + PLANS.incrementAndGet() + "_";
    protected final FloatArray lseArray;
    private final Input[] inputs = new Input[3];   // q, k, v
    private final int[] sends = new int[3];
    private TornadoExecutionPlan executionPlan;
    private final boolean profile = Boolean.getBoolean(PROFILE_PROPERTY);

    /** A device-resident input: its TornadoVM array and what was last copied into it. */
    private static final class Input {
        final TornadoNativeArray array;
        HalfTensor lastTensor;
        long lastVersion;

        Input(TornadoNativeArray array) {
            this.array = array;
        }
    }

    protected TornadoAttentionPlan(String backendId, AttentionShape shape) {
        super(backendId, shape);
        this.lseArray = new FloatArray(shape.logSumExpElements());
    }

    /** How the attention graph takes Q, K and V: from the device buffers of the graph executed before it. */
    protected static TaskGraph consumeInputs(TaskGraph attend, TornadoNativeArray q, TornadoNativeArray k,
                                             TornadoNativeArray v) {
        return SINGLE_GRAPH ? attend.transferToDevice(DataTransferMode.EVERY_EXECUTION, q, k, v)
                : attend.consumeFromDevice(q, k, v);
    }

    /** Builds the four graphs around the backend's attention graph, compiles them, and runs them once. */
    protected final void build(TornadoDevice device, TornadoNativeArray q, TornadoNativeArray k, TornadoNativeArray v,
                               TaskGraph attend, GridScheduler scheduler) {
        build(device, q, k, v, attend, scheduler, null);
    }

    /**
     * {@link #build(TornadoDevice, TornadoNativeArray, TornadoNativeArray, TornadoNativeArray, TaskGraph, GridScheduler)}
     * with CUDA JIT options for the generated PTX ({@code withCompilerFlags}: pairs such as
     * {@code CU_JIT_MAX_REGISTERS 128}), or {@code null} for TornadoVM's.
     */
    protected final void build(TornadoDevice device, TornadoNativeArray q, TornadoNativeArray k, TornadoNativeArray v,
                               TaskGraph attend, GridScheduler scheduler, String ptxJitFlags) {
        inputs[0] = new Input(q);
        inputs[1] = new Input(k);
        inputs[2] = new Input(v);
        if (SINGLE_GRAPH) {
            TornadoExecutionPlan single = new TornadoExecutionPlan(attend.snapshot());
            try {
                configure(single, device, scheduler, ptxJitFlags);
                single.execute();
            } catch (RuntimeException | Error e) {
                closeQuietly(single);
                throw e;
            }
            this.executionPlan = single;
            return;
        }
        TaskGraph sendAll = new TaskGraph(prefix + "send_all")
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, q, k, v);
        TaskGraph sendQ = new TaskGraph(prefix + "send_q")
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, q)
                .consumeFromDevice(k, v);
        TaskGraph sendKv = new TaskGraph(prefix + "send_kv")
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, k, v)
                .consumeFromDevice(q);
        ImmutableTaskGraph[] graphs = {
            touching(sendAll, q, k, v).snapshot(),
            touching(sendQ, q, k, v).snapshot(),
            touching(sendKv, q, k, v).snapshot(),
            attend.snapshot()
        };
        TornadoExecutionPlan plan = new TornadoExecutionPlan(graphs);
        try {
            configure(plan, device, scheduler, ptxJitFlags);
            // Allocate every device buffer and finish compiling now, on the zero-filled arrays, in every
            // order a call uses.
            for (int graph : new int[] {SEND_ALL, ATTEND, SEND_Q, ATTEND, SEND_KV, ATTEND}) {
                plan.withGraph(graph).execute();
            }
        } catch (RuntimeException | Error e) {
            closeQuietly(plan);
            throw e;
        }
        this.executionPlan = plan;
    }

    /** The settings every execution plan of this class gets, in one place, before it is compiled. */
    private void configure(TornadoExecutionPlan plan, TornadoDevice device, GridScheduler scheduler, String ptxJitFlags) {
        plan.withDevice(device).withGridScheduler(scheduler);
        if (ptxJitFlags != null) {
            plan.withCompilerFlags(TornadoVMBackendType.PTX, ptxJitFlags);
        }
        if (Boolean.getBoolean(CUDA_GRAPH_PROPERTY)) {
            plan.withCUDAGraph();
        }
        if (profile) {
            plan.withProfiler(ProfilerMode.SILENT);
        }
        plan.withPreCompilation();
    }

    /** Adds the no-op task (a graph needs a task) and keeps all three inputs on the device. */
    private static TaskGraph touching(TaskGraph graph, TornadoNativeArray q, TornadoNativeArray k, TornadoNativeArray v) {
        if (q instanceof LongArray lq) {
            graph.task("touch", TornadoAttentionPlan::touch, lq, (LongArray) k, (LongArray) v);
        } else {
            graph.task("touch", TornadoAttentionPlan::touch, (HalfFloatArray) q, (HalfFloatArray) k, (HalfFloatArray) v);
        }
        return graph.persistOnDevice(q, k, v);
    }

    static void touch(LongArray q, LongArray k, LongArray v) {
    }

    static void touch(HalfFloatArray q, HalfFloatArray k, HalfFloatArray v) {
    }

    /** The output array the attention graph writes (plan-owned, the same bytes as the O tensor). */
    protected abstract TornadoNativeArray outputArray();

    @Override
    protected final void compute(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        boolean sendQ = stale(0, q);
        boolean sendKv = stale(1, k) || stale(2, v);
        if (sendQ || sendKv) {
            if (sendQ) {
                copyIn(0, q);
            }
            if (sendKv) {
                copyIn(1, k);
                copyIn(2, v);
            }
            if (!SINGLE_GRAPH) {
                executionPlan.withGraph(sendQ && sendKv ? SEND_ALL : sendQ ? SEND_Q : SEND_KV).execute();
            }
        }
        TornadoExecutionResult result = attend();
        recordKernelTime(result);
        TornadoNativeArray out = outputArray();
        if (lse != null) {
            result.transferToHost(out, lseArray);
            MemorySegment.copy(lseArray.getSegment(), ValueLayout.JAVA_FLOAT, 0, lse, 0, lse.length);
        } else {
            result.transferToHost(out);
        }
        MemorySegment.copy(out.getSegment(), 0, o.data(), 0, o.data().byteSize());
        o.markModified();
    }

    private boolean stale(int slot, HalfTensor tensor) {
        Input input = inputs[slot];
        return input.lastTensor != tensor || input.lastVersion != tensor.version();
    }

    private void copyIn(int slot, HalfTensor tensor) {
        Input input = inputs[slot];
        MemorySegment.copy(tensor.data(), 0, input.array.getSegment(), 0, tensor.data().byteSize());
        input.lastTensor = tensor;
        input.lastVersion = tensor.version();
        sends[slot]++;
    }

    /** The last forward's computation again, on the device-resident inputs, with no copies. */
    @Override
    protected final void rerun(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        recordKernelTime(attend());
    }

    private TornadoExecutionResult attend() {
        return SINGLE_GRAPH ? executionPlan.execute() : executionPlan.withGraph(ATTEND).execute();
    }

    private void recordKernelTime(TornadoExecutionResult result) {
        if (profile && result.getProfilerResult() != null) {
            recordDeviceMillis(result.getProfilerResult().getDeviceKernelTime() / 1e6);
        }
    }

    @Override
    protected final void release() {
        if (Boolean.getBoolean(KEEP_CLOSED_PROPERTY)) {
            KEPT.add(this);
            return;
        }
        closeQuietly(executionPlan);
    }

    /** How many times input {@code slot} (0 q, 1 k, 2 v) was copied to the device; for tests. */
    final int sends(int slot) {
        return sends[slot];
    }

    private static void closeQuietly(TornadoExecutionPlan plan) {
        if (plan == null) {
            return;
        }
        try {
            plan.close();
        } catch (TornadoExecutionPlanException | RuntimeException e) {
            // Freeing device memory failed; nothing else to do for a plan that is going away.
        }
    }
}
