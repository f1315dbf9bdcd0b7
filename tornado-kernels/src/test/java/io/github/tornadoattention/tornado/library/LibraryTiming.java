package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.cuda.CudaDriver;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * Llama 3 8B's decode attention (one sequence, 32 query heads over 8 KV heads of 128, one layer, a 4096-token fp16
 * cache) through the library task beside ptx-cuda, at several context lengths: the target is attention time
 * within 1.1x of the same kernels from ptx-cuda. Run by {@link LibraryGpuCheck} (case {@value #NAME}).
 *
 * <ul>
 * <li><b>kernels</b>: the library task's launches ({@link AttentionLibraryContext#dispatch}, its grids: the split
 *     fixed for the capacity) and ptx-cuda's {@link CacheAttentionPlan#forward} (its split picked per call from the
 *     lengths) on the SAME device buffers (ptx-cuda's cache, q, step words) and stream, alternating, each timed with
 *     CUDA events around it ({@link AttentionDevice#timeEach}, as {@code tornado-attention decode} times ptx-cuda);
 *     medians. Both outputs are checked against {@link CpuReference#cached}.</li>
 * <li><b>host</b>: the host's wall time per call of the same two, {@value #HOST_ROUNDS} rounds of
 *     {@value #HOST_BATCH} back-to-back calls each (no synchronisation between the calls of a round; the stream is
 *     drained between rounds, so the launch queue never fills), each call timed with {@code System.nanoTime}, after
 *     {@value #HOST_WARMUP} warm-up calls of each (JIT): the median per call. What a library-task dispatch costs the
 *     host (its checks, lookup and cuLaunchKernel calls) beside ptx-cuda's plan driving the same kernels.</li>
 * <li><b>TornadoVM</b>: the wall time of one execution of a task graph holding only the library task (inputs
 *     resident), without and with a CUDA graph: what TornadoVM adds per execution around the same launches.</li>
 * </ul>
 * Timings are printed, never asserted. The CUDA-driver part runs on a thread of its own (contexts are current per
 * thread: ptx-cuda's primary context must not replace TornadoVM's on the main thread).
 */
final class LibraryTiming {
    static final String NAME = "llama-decode-timing";
    static final int HEADS = 32, KV_HEADS = 8, HEAD_DIM = 128, CAPACITY = 4096;
    static final int[] CONTEXTS = {512, 1024, 4096};
    static final int HOST_WARMUP = 12_000, HOST_ROUNDS = 40, HOST_BATCH = 64;

    private LibraryTiming() {
    }

    static CacheAttentionSpec spec() {
        return CacheAttentionSpec.builder().batch(1).heads(HEADS).kvHeads(KV_HEADS).headDim(HEAD_DIM).maxQueryLength(1)
                .maxLength(CAPACITY).causal(true).build();
    }

    static KvCacheSpec cacheSpec() {
        return KvCacheSpec.contiguous(1, KV_HEADS, CAPACITY, HEAD_DIM);
    }

    /** Runs both parts; returns false when an output was wrong (timings never fail it). */
    static boolean run(int calls, long seed) throws InterruptedException {
        CacheLibraryTasks att = CacheLibraryTasks.create(spec(), cacheSpec());
        System.out.println(String.format(Locale.ROOT, "case %s: batch=1 heads=%d kvHeads=%d headDim=%d capacity=%d "
                + "contexts=%s calls=%d; library splits=%d x %d keys", NAME, HEADS, KV_HEADS, HEAD_DIM, CAPACITY,
                Arrays.toString(CONTEXTS), calls, att.call(CacheLibraryTasks.DECODE).splits(),
                att.call(CacheLibraryTasks.DECODE).keysPerSplit()));
        for (int context : CONTEXTS) {
            tornadoWall(att, context, calls, seed);
        }
        boolean[] ok = {true};
        Throwable[] failure = new Throwable[1];
        Thread driverThread = new Thread(() -> {
            try {
                ok[0] = kernels(att, calls, seed);
            } catch (Throwable e) {
                failure[0] = e;
            }
        }, "library-timing");
        driverThread.start();
        driverThread.join();
        if (failure[0] != null) {
            failure[0].printStackTrace();
            System.out.println("  kernels: threw " + failure[0]);
            return false;
        }
        return ok[0];
    }

    /** TornadoVM's wall time per execution of a graph holding only the library task, without and with a CUDA graph. */
    private static void tornadoWall(CacheLibraryTasks att, int context, int calls, long seed) {
        SplittableRandom random = new SplittableRandom(seed + context);
        HalfFloatArray q = halves(random, HEADS * HEAD_DIM), o = new HalfFloatArray(HEADS * HEAD_DIM);
        HalfFloatArray k = halves(random, Math.toIntExact(cacheSpec().elements()));
        HalfFloatArray v = halves(random, Math.toIntExact(cacheSpec().elements()));
        IntArray step = CacheAttentionTasks.newStepArray(1), blocks = new IntArray(1);
        CacheAttentionTasks.setStep(step, new int[] {context}, new int[] {1});
        double[] ms = new double[2];
        for (int graph = 0; graph < 2; graph++) {
            TaskGraph g = new TaskGraph("lib_timing_" + context + "_" + graph)
                    .transferToDevice(DataTransferMode.FIRST_EXECUTION, q, k, v, step, blocks)
                    .libraryTask("attn", att::decode, q, k, v, step, blocks, o)
                    .transferToHost(DataTransferMode.UNDER_DEMAND, o);
            try (TornadoExecutionPlan plan = new TornadoExecutionPlan(g.snapshot())) {
                if (graph == 1) {
                    plan.withCUDAGraph();
                }
                double[] t = new double[calls];
                for (int i = 0; i < calls / 4; i++) {
                    plan.execute();
                }
                for (int i = 0; i < calls; i++) {
                    long t0 = System.nanoTime();
                    plan.execute();
                    t[i] = (System.nanoTime() - t0) / 1e6;
                }
                ms[graph] = median(t);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }
        System.out.println(String.format(Locale.ROOT,
                "  timing %s L=%d: TornadoVM execute (library task alone, inputs resident) median %.4f ms, with a CUDA "
                        + "graph %.4f ms (wall, %d executions)", NAME, context, ms[0], ms[1], calls));
    }

    /** The library task's launches and ptx-cuda's call on the same buffers and stream, alternating, each event-timed. */
    private static boolean kernels(CacheLibraryTasks att, int calls, long seed) {
        CudaDriver cuda = CudaDriver.load();
        cuda.init();
        AttentionDevice ptxCuda = Attention.device(Backends.PTX_CUDA);
        long context = cuda.primaryContext(cuda.device(0));   // the context ptx-cuda's device uses
        cuda.setCurrent(context);
        long stream = cuda.createStream();
        AttentionDevice device = ptxCuda.onStream(stream);
        CacheAttentionSpec spec = spec();
        boolean ok = true;
        try (AttentionLibraryContext library = new AttentionLibraryContext(LibraryCuda.driver(), context, stream)) {
            // The descriptor's arrays only carry sizes here: the launches get ptx-cuda's device addresses.
            LibraryTaskDescriptor d = att.decode(new HalfFloatArray(HEADS * HEAD_DIM),
                    new HalfFloatArray(Math.toIntExact(cacheSpec().elements())),
                    new HalfFloatArray(Math.toIntExact(cacheSpec().elements())), CacheAttentionTasks.newStepArray(1),
                    new IntArray(1), new HalfFloatArray(HEADS * HEAD_DIM));
            library.prepare(d.getFunctionName(), d.getParameters(), d.getTuning());
            for (int length : CONTEXTS) {
                ok &= kernels(device, library, d, spec, length, calls, new SplittableRandom(seed * 31 + length));
            }
        } finally {
            cuda.destroyStream(stream);
        }
        return ok;
    }

    private static boolean kernels(AttentionDevice device, AttentionLibraryContext library, LibraryTaskDescriptor d,
                                   CacheAttentionSpec spec, int length, int calls, SplittableRandom random) {
        int rowFloats = KV_HEADS * HEAD_DIM;
        float[] keys = gaussians(random, length * rowFloats), values = gaussians(random, length * rowFloats);
        float[] query = gaussians(random, HEADS * HEAD_DIM);
        try (KvCache cache = device.kvCache(cacheSpec());
             CacheAttentionPlan plan = device.plan(spec, cacheSpec());
             DeviceTensor q = device.allocate(DType.FP16, HEADS * HEAD_DIM);
             DeviceTensor oCuda = device.allocate(DType.FP16, HEADS * HEAD_DIM);
             DeviceTensor oLibrary = device.allocate(DType.FP16, HEADS * HEAD_DIM);
             DeviceTensor blocks = device.allocate(DType.INT32, 4)) {
            // length - 1 prompt rows, then this step's one token: lengths (length) and new tokens (1) in the step words.
            append(cache, keys, values, 0, length - 1);
            append(cache, keys, values, length - 1, 1);
            try (HalfTensor host = HalfTensor.of(query)) {
                q.copyFrom(host);
            }
            long[] pointers = {q.address(), cache.keys().address(), cache.values().address(), cache.stepInfo().address(),
                    blocks.address(), oLibrary.address()};
            Runnable cudaCall = () -> plan.forward(q, cache, oCuda, null);
            Runnable libraryCall = () -> library.dispatch(d.getFunctionName(), d.getParameters(), pointers, d.getTuning());
            List<Runnable> ops = new ArrayList<>();
            for (int i = 0; i < calls; i++) {
                ops.add(cudaCall);
                ops.add(libraryCall);
            }
            device.timeEach(ops.subList(0, Math.min(ops.size(), 40)));  // warm-up (module loads, clocks)
            double[] ms = device.timeEach(ops).orElseThrow();
            double[] cudaMs = new double[calls], libraryMs = new double[calls];
            for (int i = 0; i < calls; i++) {
                cudaMs[i] = ms[2 * i];
                libraryMs[i] = ms[2 * i + 1];
            }
            device.synchronize();
            // Both outputs against the reference on the fp16-rounded inputs.
            float[] k16 = rounded(keys), v16 = rounded(values), q16 = rounded(query);
            double[] expected = CpuReference.cached(spec, q16, false, rows(k16), rows(v16), new int[] {length},
                    new int[] {1}).output();
            double[] eCuda = compare(oCuda, expected), eLibrary = compare(oLibrary, expected);
            boolean ok = eCuda[0] <= LibraryGpuCheck.MAX_ABS && eCuda[1] <= LibraryGpuCheck.MAX_REL_L2
                    && eLibrary[0] <= LibraryGpuCheck.MAX_ABS && eLibrary[1] <= LibraryGpuCheck.MAX_REL_L2;
            double cuda = median(cudaMs), lib = median(libraryMs);
            System.out.println(String.format(Locale.ROOT,
                    "  timing %s L=%d: kernels (CUDA events, median of %d) ptx-cuda %.4f ms, library task's launches %.4f ms, "
                            + "library/ptx-cuda %.2fx; outputs max_abs ptx-cuda %.2e library %.2e %s", NAME, length, calls,
                    cuda, lib, lib / cuda, eCuda[0], eLibrary[0], ok ? "ok" : "WRONG"));
            hostTiming(device, length, cudaCall, libraryCall);
            return ok;
        }
    }

    /**
     * The host's wall time per call of ptx-cuda's plan and of the library task's dispatch: after warm-up, rounds of
     * back-to-back calls (rounds alternate between the two), each call timed, the stream drained between rounds.
     */
    private static void hostTiming(AttentionDevice device, int length, Runnable cudaCall, Runnable libraryCall) {
        for (int i = 0; i < HOST_WARMUP; i++) {
            cudaCall.run();
            libraryCall.run();
            if (i % HOST_BATCH == 0) {
                device.synchronize();
            }
        }
        device.synchronize();
        double[] cudaUs = new double[HOST_ROUNDS * HOST_BATCH], libraryUs = new double[HOST_ROUNDS * HOST_BATCH];
        for (int round = 0; round < 2 * HOST_ROUNDS; round++) {
            boolean library = round % 2 == 1;
            Runnable call = library ? libraryCall : cudaCall;
            double[] into = library ? libraryUs : cudaUs;
            int at = (round / 2) * HOST_BATCH;
            for (int i = 0; i < HOST_BATCH; i++) {
                long t0 = System.nanoTime();
                call.run();
                into[at + i] = (System.nanoTime() - t0) / 1e3;
            }
            device.synchronize();
        }
        double cuda = median(cudaUs), lib = median(libraryUs);
        System.out.println(String.format(Locale.ROOT,
                "  host %s L=%d: wall per call (median of %d, %d back-to-back per round, no sync between) ptx-cuda "
                        + "plan.forward %.2f us, library task dispatch %.2f us, library/ptx-cuda %.2fx", NAME, length,
                cudaUs.length, HOST_BATCH, cuda, lib, lib / cuda));
    }

    /** Appends rows [from, from + count) of {@code keys}/{@code values} ([positions, Hkv, D]) as the cache's new tokens. */
    private static void append(KvCache cache, float[] keys, float[] values, int from, int count) {
        // The append takes [slots, Hkv, maxNew, D] (BHSD): transpose positions and heads.
        try (HalfTensor k = HalfTensor.allocate((long) KV_HEADS * count * HEAD_DIM);
             HalfTensor v = HalfTensor.allocate((long) KV_HEADS * count * HEAD_DIM)) {
            for (int p = 0; p < count; p++) {
                for (int h = 0; h < KV_HEADS; h++) {
                    for (int x = 0; x < HEAD_DIM; x++) {
                        long to = ((long) h * count + p) * HEAD_DIM + x;
                        int at = ((from + p) * KV_HEADS + h) * HEAD_DIM + x;
                        k.set(to, keys[at]);
                        v.set(to, values[at]);
                    }
                }
            }
            cache.append(k, v, Layout.BHSD, count, count);
        }
    }

    private static CpuReference.RowSource rows(float[] rows) {
        return (slot, kvHead, position, into) -> System.arraycopy(rows, (position * KV_HEADS + kvHead) * HEAD_DIM, into, 0,
                HEAD_DIM);
    }

    /** {max abs, rel L2} of an fp16 device tensor against the reference (NaN: infinite). */
    private static double[] compare(DeviceTensor o, double[] expected) {
        try (HalfTensor host = HalfTensor.allocate(o.length())) {
            o.copyTo(host);
            double maxAbs = 0, num = 0, den = 0;
            for (int i = 0; i < expected.length; i++) {
                double diff = host.get(i) - expected[i];
                if (Double.isNaN(diff)) {
                    return new double[] {Double.POSITIVE_INFINITY, Double.POSITIVE_INFINITY};
                }
                maxAbs = Math.max(maxAbs, Math.abs(diff));
                num += diff * diff;
                den += expected[i] * expected[i];
            }
            return new double[] {maxAbs, Math.sqrt(num / Math.max(den, Double.MIN_NORMAL))};
        }
    }

    private static float[] gaussians(SplittableRandom random, int n) {
        float[] f = new float[n];
        for (int i = 0; i < n; i++) {
            f[i] = LibraryGpuCheck.gaussian(random);
        }
        return f;
    }

    private static float[] rounded(float[] f) {
        float[] r = new float[f.length];
        for (int i = 0; i < f.length; i++) {
            r[i] = Float.float16ToFloat(Float.floatToFloat16(f[i]));
        }
        return r;
    }

    private static HalfFloatArray halves(SplittableRandom random, int n) {
        HalfFloatArray a = new HalfFloatArray(n);
        for (int i = 0; i < n; i++) {
            a.set(i, new HalfFloat(LibraryGpuCheck.gaussian(random)));
        }
        return a;
    }

    private static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        return sorted[sorted.length / 2];
    }
}
