package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.PlanOptions;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.atomic.AtomicInteger;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.ProfilerMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.exceptions.TornadoExecutionPlanException;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The host side shared by the TornadoVM backends: one TornadoVM execution plan per {@link AttentionShape},
 * built and compiled in the constructor (that is, in {@code plan()}), then reused by every call. A backend
 * hands its kernel task(s) to {@link #build} as {@link Tasks}; this class puts the transfers around them.
 *
 * <p><b>A call: one task graph.</b> {@code transferToDevice(EVERY_EXECUTION, q, k, v)}, the kernel(s),
 * {@code transferToHost(UNDER_DEMAND, o, lse)} ({@link GraphKind#FORWARD}): O and logsumexp are copied back
 * with {@code TornadoExecutionResult.transferToHost}, logsumexp only when the caller asks for it. A call copies an input tensor
 * into the plan's TornadoVM array only when it changed (identity and {@link HalfTensor#version()}), but the
 * graph sends all three to the device on every execution: TornadoVM 5.2.0 mishandles inputs kept on the
 * device across task graphs ({@code persistOnDevice}/{@code consumeFromDevice}) once several plans have
 * lived in one JVM, so device-resident inputs wait for a later issue.
 *
 * <p><b>Rerun: kernels only.</b> The benchmark hook {@code rerunOnDevice} runs a second execution plan, made on
 * its first use, over the same arrays and the same tasks with the inputs sent {@code FIRST_EXECUTION}
 * ({@link GraphKind#RERUN}) and nothing asked back: its first execution sends Q, K and V once, every later one
 * launches the kernels only (TornadoVM still writes each task's 24-byte kernel-context buffer before a launch). It has device buffers of its own (TornadoVM keeps device buffers per task
 * graph), so while it lives the plan holds its inputs, output and workspace twice on the device; a
 * {@code forward} with other inputs makes the next rerun build it again (on the new inputs).
 *
 * <p><b>Host memory.</b> TornadoVM binds a task graph to its argument objects when the graph is built
 * (there is no call to re-point an argument at another array) and compiles per execution plan. A plan
 * that is compiled once, in {@code plan()}, before any tensor is seen therefore owns its TornadoVM arrays:
 * a changed input is copied into them (one memcpy, only when it changed) and O is copied out of them.
 *
 * <p><b>Options</b> ({@link PlanOptions}): {@code cudaGraph} builds the execution plans
 * {@code withCUDAGraph()} (TornadoVM captures the copies and launches on the first run and replays the
 * capture afterwards); {@code profile} runs them with TornadoVM's profiler ({@code withProfiler(SILENT)}),
 * and every call, reruns included, reports the kernels' device time
 * ({@code TornadoProfilerResult.getDeviceKernelTime()}, CUDA events) to the benchmark hooks.
 */
abstract class TornadoAttentionPlan extends AttentionPlan {
    private static final AtomicInteger PLANS = new AtomicInteger();

    /**
     * The two task graphs a plan builds around its kernels, and how each sends Q, K and V. Both declare O and
     * logsumexp {@code transferToHost(UNDER_DEMAND)}: copied back only when a {@code forward} asks (a rerun never
     * does), and freed with the plan (TornadoVM frees a graph's device buffers only for the arrays it transfers).
     */
    enum GraphKind {
        /** A {@code forward} call: Q, K, V sent on every execution. */
        FORWARD("attend", DataTransferMode.EVERY_EXECUTION),
        /** {@code rerunOnDevice}: Q, K, V sent on the first execution only. */
        RERUN("rerun", DataTransferMode.FIRST_EXECUTION);

        final String name;
        /** How Q, K and V go to the device ({@link DataTransferMode}). */
        final int inputTransfer;

        GraphKind(String name, int inputTransfer) {
            this.name = name;
            this.inputTransfer = inputTransfer;
        }
    }

    /**
     * A backend's kernel task(s): adds them, with any device-only workspace ({@code FIRST_EXECUTION}), to
     * {@code graph}, named {@code graphName}, and their worker grids to {@code scheduler} (keys
     * {@code graphName + "." + task}). Called once per task graph the plan builds.
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
    private TornadoDevice device;
    private TornadoNativeArray[] inputs;
    private Tasks tasks;
    private String ptxJitFlags;
    private TornadoExecutionPlan executionPlan;
    private TornadoExecutionPlan rerunPlan;
    /** Bumped whenever an input array's contents change; the rerun plan holds the contents of one generation. */
    private long inputGeneration;
    private long rerunGeneration;
    private int rerunPlansBuilt;

    protected TornadoAttentionPlan(String backendId, AttentionShape shape, PlanOptions options) {
        super(backendId, shape);
        this.options = options;
        this.lseArray = new FloatArray(shape.logSumExpElements());
    }

    /**
     * Builds and compiles the plan's forward graph around {@code tasks} over the plan's arrays {@code q},
     * {@code k}, {@code v} (and {@link #outputArray()}, {@link #lseArray}), and runs it once.
     *
     * @param ptxJitFlags CUDA JIT options for the generated PTX ({@code withCompilerFlags}: pairs such as
     *                    {@code CU_JIT_MAX_REGISTERS 128}), or {@code null} for TornadoVM's
     */
    protected final void build(TornadoDevice device, TornadoNativeArray q, TornadoNativeArray k, TornadoNativeArray v,
                               Tasks tasks, String ptxJitFlags) {
        this.device = device;
        this.inputs = new TornadoNativeArray[] {q, k, v};
        this.tasks = tasks;
        this.ptxJitFlags = ptxJitFlags;
        this.executionPlan = compile(GraphKind.FORWARD, prefix + GraphKind.FORWARD.name);
    }

    /** The task graph of {@code kind} named {@code name}, compiled into an execution plan and run once. */
    private TornadoExecutionPlan compile(GraphKind kind, String name) {
        TaskGraph graph = new TaskGraph(name).transferToDevice(kind.inputTransfer, (Object[]) inputs);
        GridScheduler scheduler = new GridScheduler();
        tasks.addTo(graph, name, scheduler);
        graph.transferToHost(DataTransferMode.UNDER_DEMAND, outputArray(), lseArray);
        TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot());
        try {
            plan.withDevice(device).withGridScheduler(scheduler);
            if (ptxJitFlags != null) {
                plan.withCompilerFlags(TornadoVMBackendType.PTX, ptxJitFlags);
            }
            if (options.cudaGraph()) {
                plan.withCUDAGraph();
            }
            if (options.profile()) {
                plan.withProfiler(ProfilerMode.SILENT);
            }
            plan.withPreCompilation();
            recordKernelTime(plan.execute());
            return plan;
        } catch (RuntimeException | Error e) {
            closeQuietly(plan);
            throw e;
        } finally {
            compiled();
        }
    }

    /** Called after each execution plan has been compiled (or failed to), e.g. to delete files it loaded. */
    protected void compiled() {
    }

    /** The output array the kernels write (plan-owned, the same bytes as the O tensor). */
    protected abstract TornadoNativeArray outputArray();

    @Override
    protected final void compute(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        copyInIfChanged(0, q);
        copyInIfChanged(1, k);
        copyInIfChanged(2, v);
        TornadoExecutionResult result = executionPlan.execute();
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

    private void copyInIfChanged(int slot, HalfTensor tensor) {
        if (lastSent[slot] == tensor && lastSentVersion[slot] == tensor.version()) {
            return;
        }
        MemorySegment.copy(tensor.data(), 0, inputs[slot].getSegment(), 0, tensor.data().byteSize());
        lastSent[slot] = tensor;
        lastSentVersion[slot] = tensor.version();
        sends[slot]++;
        inputGeneration++;
    }

    /** The last forward's computation again on the device: the rerun plan, which copies nothing after its first run. */
    @Override
    protected final void rerun(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
        if (rerunPlan != null && rerunGeneration != inputGeneration) {
            TornadoExecutionPlan stale = rerunPlan;
            rerunPlan = null;
            closeQuietly(stale);
        }
        if (rerunPlan == null) {
            rerunPlansBuilt++;
            rerunGeneration = inputGeneration;
            rerunPlan = compile(GraphKind.RERUN, prefix + GraphKind.RERUN.name + rerunPlansBuilt);   // sends q, k, v once
            return;
        }
        recordKernelTime(rerunPlan.execute());
    }

    private void recordKernelTime(TornadoExecutionResult result) {
        if (options.profile() && result.getProfilerResult() != null) {
            recordDeviceMillis(result.getProfilerResult().getDeviceKernelTime() / 1e6);
        }
    }

    @Override
    protected final void release() {
        closeQuietly(rerunPlan);
        closeQuietly(executionPlan);
    }

    /** How many times input {@code slot} (0 q, 1 k, 2 v) was copied into the plan's array; for tests. */
    final int sends(int slot) {
        return sends[slot];
    }

    /** How many rerun execution plans this plan has built; for tests. */
    final int rerunPlansBuilt() {
        return rerunPlansBuilt;
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
