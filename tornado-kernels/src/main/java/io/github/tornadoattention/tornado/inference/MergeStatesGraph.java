package io.github.tornadoattention.tornado.inference;

import io.github.tornadoattention.tornado.TornadoVMLock;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicInteger;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.math.TornadoMath;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * mergeStates on a TornadoVM device: a task graph of one Java kernel ({@link #mergeStates}) over staging arrays of
 * one size class, in an execution plan compiled once. TornadoVM compiles per execution plan (its code cache belongs to
 * the plan) and binds a plan to its arrays, so a plan over the caller's tensors would compile again for every new
 * tensor; instead the device keeps one plan per {@link Capacity} (sizes rounded up to a power of two), copies each
 * call's inputs into its staging arrays and the outputs out. Shapes are run-time data (a params array, never scalar
 * arguments, which TornadoVM compiles in as constants), so every call of a size class runs the same compiled kernel.
 *
 * <p>Per call TornadoVM sends the parts' O and lse and the params, and brings O back (lse only when asked for). The
 * plans stay with the device (devices live as long as the JVM), each with staging arrays of its class's size.
 */
final class MergeStatesGraph {
    private static final AtomicInteger GRAPHS = new AtomicInteger();

    /** Threads per workgroup. */
    static final int THREADS = 128;
    /** Output elements per thread: one thread per (row, chunk of 8 columns); head dims are multiples of 8. */
    static final int CHUNK = 8;
    /** The smallest size class: one workgroup's output. */
    static final int MIN_ELEMENTS = THREADS * CHUNK;

    /** params words: number of parts, rows, head dim. */
    static final int P_PARTS = 0;
    static final int P_ROWS = 1;
    static final int P_HEAD_DIM = 2;
    static final int P_COUNT = 3;

    /**
     * A size class: elements of the parts' O ({@code parts * rows * D}) and of O ({@code rows * D}), each rounded up to
     * a power of two (at least {@value #MIN_ELEMENTS}), so that a few plans serve every shape.
     */
    record Capacity(int inputElements, int outputElements) {
        static Capacity of(int parts, long rows, int headDim) {
            long output = rows * headDim;
            return new Capacity(roundUp(parts * output), roundUp(output));
        }

        private static int roundUp(long elements) {
            long n = Math.max(elements, MIN_ELEMENTS);
            long power = Long.highestOneBit(n - 1) << 1;
            return Math.toIntExact(power <= Integer.MAX_VALUE ? power : n);   // past 2^30 elements: the size itself
        }

        /** Rows the class holds at the smallest head dim (lse staging). */
        int inputRows() {
            return (inputElements + CHUNK - 1) / CHUNK;
        }

        int outputRows() {
            return (outputElements + CHUNK - 1) / CHUNK;
        }

        int workgroups() {
            return (outputRows() + THREADS - 1) / THREADS;
        }
    }

    private final TornadoExecutionPlan plan;
    private final boolean profile;
    private final HalfFloatArray oParts;
    private final FloatArray lseParts;
    private final IntArray params;
    private final HalfFloatArray o;
    private final FloatArray lse;
    /** Whether the plan has executed (its first execution runs alone: {@link TornadoVMLock#execution}). */
    private boolean executed;

    private MergeStatesGraph(TornadoExecutionPlan plan, boolean profile, HalfFloatArray oParts, FloatArray lseParts,
                             IntArray params, HalfFloatArray o, FloatArray lse) {
        this.plan = plan;
        this.profile = profile;
        this.oParts = oParts;
        this.lseParts = lseParts;
        this.params = params;
        this.o = o;
        this.lse = lse;
    }

    /** Builds and compiles the merge graph of {@code capacity} on {@code target}'s device (alone). */
    static MergeStatesGraph build(GraphTarget target, Capacity capacity) {
        return TornadoVMLock.exclusive(() -> buildAlone(target, capacity));
    }

    private static MergeStatesGraph buildAlone(GraphTarget target, Capacity capacity) {
        HalfFloatArray oParts = new HalfFloatArray(capacity.inputElements());
        FloatArray lseParts = new FloatArray(capacity.inputRows());
        IntArray params = new IntArray(P_COUNT);
        FloatArray ws = new FloatArray(capacity.outputElements());
        HalfFloatArray o = new HalfFloatArray(capacity.outputElements());
        FloatArray lse = new FloatArray(capacity.outputRows());
        String name = "merge" + GRAPHS.incrementAndGet();
        KernelContext kc = new KernelContext();
        TaskGraph graph = new TaskGraph(name)
                // The kernel context listed: TornadoVM frees on close() only the buffers of objects a graph lists.
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, kc, ws)
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, oParts, lseParts, params)
                .task("states", MergeStatesGraph::mergeStates, kc, oParts, lseParts, params, ws, o, lse)
                .transferToHost(DataTransferMode.EVERY_EXECUTION, o)
                .transferToHost(DataTransferMode.UNDER_DEMAND, lse);
        WorkerGrid1D worker = new WorkerGrid1D(capacity.workgroups() * THREADS);
        worker.setLocalWork(THREADS, 1, 1);
        GridScheduler scheduler = new GridScheduler();
        scheduler.addWorkerGrid(name + ".states", worker);
        return new MergeStatesGraph(target.compile(graph, scheduler), target.profile(), oParts, lseParts, params, o, lse);
    }

    /**
     * Merges {@code parts} partial results ({@code oPartsIn} [parts, rows, headDim] fp16, {@code lsePartsIn} [parts,
     * rows] fp32, host memory) into {@code oOut} [rows, headDim] and, when not null, {@code lseOut} [rows]; the shape
     * must fit this graph's capacity. Returns the kernel's device time in nanoseconds (0 without the profiler).
     */
    long run(MemorySegment oPartsIn, MemorySegment lsePartsIn, int parts, int rows, int headDim, MemorySegment oOut,
             MemorySegment lseOut) {
        MemorySegment.copy(oPartsIn, 0, oParts.getSegment(), 0, 2L * parts * rows * headDim);
        MemorySegment.copy(lsePartsIn, 0, lseParts.getSegment(), 0, 4L * parts * rows);
        params.set(P_PARTS, parts);
        params.set(P_ROWS, rows);
        params.set(P_HEAD_DIM, headDim);
        TornadoExecutionResult result = TornadoVMLock.execution(!executed, plan::execute);
        executed = true;
        MemorySegment.copy(o.getSegment(), 0, oOut, 0, 2L * rows * headDim);
        if (lseOut != null) {
            TornadoVMLock.shared(() -> result.transferToHost(lse));   // on request only
            MemorySegment.copy(lse.getSegment(), 0, lseOut, 0, 4L * rows);
        }
        return profile && result.getProfilerResult() != null ? result.getProfilerResult().getDeviceKernelTime() : 0;
    }

    /**
     * The merge of {@code ptx-overrides/src/flash_cache.cuh} ({@code merge_states_body}) with the NaN behaviour of the
     * CPU reference: thread {@code globalIdx} merges output elements [8 i, 8 i + 8) of row 8 i / D, params
     * {@code [parts, rows, D]}. lse = log sum_i exp(lse_i), O = sum_i exp(lse_i - lse) O_i: computed as weights
     * exp(lse_i - max) over their sum; parts with lse_i = -inf weigh 0 and their O is not read, a row whose parts are
     * all -inf gets O = 0 and lse = -inf. A NaN lse_i (or +inf) makes the row's O and lse NaN, a NaN in a weighed
     * part's O that element of O. The maximum is taken with a comparison, not Math.max: PTX's {@code max.f32} skips a
     * NaN where Java's returns it, and a comparison skips it in both, so the NaN reaches the sum through its weight on
     * either.
     *
     * <p>fp16 output: TornadoVM's PTX backend converts a float to fp16 for {@code new HalfFloat(floatArray.get(i))} only
     * when the value is loaded, not forwarded from a store in the same thread (see CacheKernels), so O goes through
     * {@code ws} in fp32 and, after a barrier, each thread converts the chunk its neighbour in the workgroup stored.
     */
    public static void mergeStates(KernelContext kc, HalfFloatArray oParts, FloatArray lseParts, IntArray params,
                                   FloatArray ws, HalfFloatArray o, FloatArray lse) {
        int parts = params.get(P_PARTS);
        int rows = params.get(P_ROWS);
        int d = params.get(P_HEAD_DIM);
        int chunks = rows * (d / CHUNK);
        int i = kc.globalIdx;
        if (i < chunks) {
            int e = i * CHUNK;
            int row = e / d;
            float lmax = Float.NEGATIVE_INFINITY;
            for (int p = 0; p < parts; p++) {
                float l = lseParts.get(p * rows + row);
                if (l > lmax) {
                    lmax = l;
                }
            }
            float wsum = 0.0f;
            float a0 = 0.0f;
            float a1 = 0.0f;
            float a2 = 0.0f;
            float a3 = 0.0f;
            float a4 = 0.0f;
            float a5 = 0.0f;
            float a6 = 0.0f;
            float a7 = 0.0f;
            for (int p = 0; p < parts; p++) {
                float l = lseParts.get(p * rows + row);
                if (l != Float.NEGATIVE_INFINITY) {
                    float w = TornadoMath.exp(l - lmax);
                    wsum += w;
                    int at = p * rows * d + e;
                    a0 += w * oParts.get(at).getFloat32();
                    a1 += w * oParts.get(at + 1).getFloat32();
                    a2 += w * oParts.get(at + 2).getFloat32();
                    a3 += w * oParts.get(at + 3).getFloat32();
                    a4 += w * oParts.get(at + 4).getFloat32();
                    a5 += w * oParts.get(at + 5).getFloat32();
                    a6 += w * oParts.get(at + 6).getFloat32();
                    a7 += w * oParts.get(at + 7).getFloat32();
                }
            }
            float inverse = wsum == 0.0f ? 0.0f : 1.0f / wsum;
            ws.set(e, a0 * inverse);
            ws.set(e + 1, a1 * inverse);
            ws.set(e + 2, a2 * inverse);
            ws.set(e + 3, a3 * inverse);
            ws.set(e + 4, a4 * inverse);
            ws.set(e + 5, a5 * inverse);
            ws.set(e + 6, a6 * inverse);
            ws.set(e + 7, a7 * inverse);
            if (e == row * d) {
                lse.set(row, wsum == 0.0f ? Float.NEGATIVE_INFINITY : lmax + TornadoMath.log(wsum));
            }
        }
        kc.localBarrier();
        int t = kc.localIdx;
        int neighbour = i - t + (t + 1) % THREADS;
        if (neighbour < chunks) {
            int e = neighbour * CHUNK;
            o.set(e, new HalfFloat(ws.get(e)));
            o.set(e + 1, new HalfFloat(ws.get(e + 1)));
            o.set(e + 2, new HalfFloat(ws.get(e + 2)));
            o.set(e + 3, new HalfFloat(ws.get(e + 3)));
            o.set(e + 4, new HalfFloat(ws.get(e + 4)));
            o.set(e + 5, new HalfFloat(ws.get(e + 5)));
            o.set(e + 6, new HalfFloat(ws.get(e + 6)));
            o.set(e + 7, new HalfFloat(ws.get(e + 7)));
        }
    }
}
