package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.annotations.Parallel;
import uk.ac.manchester.tornado.api.common.LibraryTaskDescriptor;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;
import uk.ac.manchester.tornado.runtime.common.TornadoXPUDevice;
import uk.ac.manchester.tornado.runtime.library.LibraryRegistry;
import uk.ac.manchester.tornado.runtime.library.spi.TornadoLibraryProvider;
import uk.ac.manchester.tornado.runtime.library.spi.TornadoNativeStreamSupport;

/**
 * The attention library task on a GPU, end to end, as a plain main (no JUnit): run by
 * {@code tornado-kernels/tools/library-gpu-check.sh} under a CUDA-backend TornadoVM SDK. Checks that TornadoVM's
 * default device is on the CUDA backend and that {@code LibraryRegistry} picks {@link AttentionLibrary} for it, then
 * runs two families of cases, each for several steps with changing lengths and idle slots:
 * <ul>
 * <li>{@link #CASES}: {@link AttentionLibraryTasks#decode} over a contiguous fp16 cache, new K/V rows appended by the
 *     host (whole cache sent every execution) or by a TornadoVM task on the device (the cache sent once);</li>
 * <li>{@link #CACHE_CASES}: the functions of {@link CacheLibraryTasks}: paged decode over an engine-owned page pool with
 *     a shuffled block table, chunked (varlen) prefill with the bottom-right causal mask (each chunk's queries at the
 *     end of its sequence's keys), GQA and MQA, lse, bf16, window/softcap/sinks, and CUDA-graph capture; new rows
 *     written by the host into its cache (or pool), sent every execution; and append-decode, whose task writes the new
 *     rows into the device's cache itself (sent once, read back each step and compared bit for bit);</li>
 * <li>{@value LibraryTiming#NAME}: Llama 3 8B's decode attention through the library task beside ptx-cuda
 *     ({@link LibraryTiming}: the same kernels event-timed on the same buffers, and TornadoVM's wall time per
 *     execution), timings printed, outputs checked.</li>
 * </ul>
 * Every step: fresh N(0,1) inputs (rounded to the element type), O and lse poisoned with NaN on the device by a task
 * before the library task (TornadoVM copies no write-only argument in), cache rows past each length and pool pages
 * no sequence owns NaN, and O (and lse) compared with {@link CpuReference#cached} on the same rounded inputs: no NaN,
 * fp16 max abs <= 1e-2 and rel L2 <= 2e-3 (as ptx-overrides/harness/cache_check.py), bf16 6e-2 and 1.6e-2
 * ({@code verify.Tolerance}), lse within 1e-3 and -inf exactly where the reference has it. A packed prefill's rows
 * past the step's total are not the kernels' (they keep the poison) and are not compared. Prints PASS/FAIL lines and
 * the wall time of each step; exits 1 when anything failed.
 *
 * <pre>{@code java @argfile -cp ... io.github.tornadoattention.tornado.library.LibraryGpuCheck [--steps N] [--seed S] [--timing N] [--case NAME]...}</pre>
 */
public final class LibraryGpuCheck {
    static final double MAX_ABS = 1e-2, MAX_REL_L2 = 2e-3;
    /** bf16 bounds (verify.Tolerance: bf16's unit roundoff is 8x fp16's; O stored and P rounded in bf16). */
    static final double BF16_MAX_ABS = 6e-2, BF16_MAX_REL_L2 = 1.6e-2;
    static final double MAX_LSE_ABS = 1e-3;

    enum Append { HOST, TASK }

    record Case(String name, int batch, int heads, int kvHeads, int queries, int capacity, int headDim, Append append,
                boolean cudaGraph, int[] initialLengths) {
    }

    static final List<Case> CASES = List.of(
            new Case("d128-gqa4-host", 4, 16, 4, 1, 1024, 128, Append.HOST, false, new int[] {0, 255, 600, 1016}),
            new Case("d128-gqa4-task", 4, 16, 4, 1, 1024, 128, Append.TASK, false, new int[] {0, 255, 600, 1016}),
            new Case("d64-mha-q4-task", 3, 8, 8, 4, 2048, 64, Append.TASK, false, new int[] {3, 513, 1900}),
            new Case("d128-gqa4-long-task", 2, 16, 4, 1, 40000, 128, Append.TASK, false, new int[] {39000, 12345}),
            new Case("d128-gqa4-task-cudagraph", 4, 16, 4, 1, 1024, 128, Append.TASK, true, new int[] {1, 256, 777, 1000}));

    /** Score features of a cache case: window sides (-1 unbounded), softcap (0 off), one sink per query head or none. */
    record Features(int windowLeft, int windowRight, float softcap, boolean sinks) {
        static final Features NONE = new Features(-1, -1, 0f, false);
    }

    /**
     * A case of {@link CacheLibraryTasks}: {@code op} decode (up to {@code maxQueries} new tokens per slot and step) or
     * prefill (chunks of up to {@code maxQueries} tokens per slot, packed); {@code pageSize} 0: contiguous cache, else
     * a pool of {@code batch * pagesPerSequence + 3} pages handed out in shuffled order.
     */
    record CacheCase(String name, LibraryCall.Op op, DType dtype, int batch, int heads, int kvHeads, int headDim,
                     int capacity, int pageSize, int maxQueries, boolean lse, Features features, boolean cudaGraph,
                     int[] initialLengths) {
        /** The case's spec; the sinks (when on) are 1 + N(0,1) per query head from {@code random}. */
        CacheAttentionSpec spec(SplittableRandom random) {
            CacheAttentionSpec.Builder builder = CacheAttentionSpec.builder().batch(batch).heads(heads).kvHeads(kvHeads)
                    .headDim(headDim).maxQueryLength(maxQueries).maxTotalQueries(batch * maxQueries).maxLength(capacity)
                    .causal(true).scale((float) (1 / Math.sqrt(headDim))).dtype(dtype)
                    .window(features.windowLeft(), features.windowRight()).softcap(features.softcap());
            if (features.sinks()) {
                float[] sinks = new float[heads];
                for (int i = 0; i < heads; i++) {
                    sinks[i] = 1 + gaussian(random);
                }
                builder.sinks(sinks);
            }
            return builder.build();
        }

        /** Contiguous, or a pool of every slot's pages at capacity and 3 more (never owned: they stay NaN). */
        KvCacheSpec cacheSpec() {
            return pageSize == 0 ? KvCacheSpec.contiguous(batch, kvHeads, capacity, headDim).withDtype(dtype)
                    : KvCacheSpec.paged(batch, kvHeads, capacity, headDim, pageSize)
                            .withPages(batch * Math.ceilDiv(capacity, pageSize) + 3).withDtype(dtype);
        }
    }

    static final List<CacheCase> CACHE_CASES = List.of(
            new CacheCase("paged-decode-d128-gqa4", LibraryCall.Op.DECODE, DType.FP16, 4, 16, 4, 128, 1024, 16, 1, false,
                    Features.NONE, false, new int[] {0, 255, 600, 1016}),
            new CacheCase("paged-decode-d64-mqa-q4-lse", LibraryCall.Op.DECODE, DType.FP16, 3, 8, 1, 64, 2048, 64, 4, true,
                    Features.NONE, false, new int[] {3, 513, 1900}),
            new CacheCase("contiguous-decode-d32-gqa8-lse", LibraryCall.Op.DECODE, DType.FP16, 2, 16, 2, 32, 700, 0, 1, true,
                    Features.NONE, false, new int[] {100, 650}),
            new CacheCase("chunked-prefill-d128-gqa4-lse", LibraryCall.Op.PREFILL, DType.FP16, 3, 16, 4, 128, 2048, 0, 200,
                    true, Features.NONE, false, new int[] {0, 300, 1000}),
            new CacheCase("paged-chunked-prefill-d128-gqa4", LibraryCall.Op.PREFILL, DType.FP16, 2, 32, 8, 128, 1024, 16, 96,
                    false, Features.NONE, false, new int[] {17, 400}),
            new CacheCase("paged-decode-bf16-d256-gqa4", LibraryCall.Op.DECODE, DType.BF16, 2, 8, 2, 256, 1024, 32, 2, true,
                    Features.NONE, false, new int[] {1, 700}),
            new CacheCase("paged-chunked-prefill-bf16-d96-gqa3-lse", LibraryCall.Op.PREFILL, DType.BF16, 2, 12, 4, 96, 1024,
                    16, 100, true, Features.NONE, false, new int[] {0, 333}),
            new CacheCase("paged-decode-window-softcap-sinks-d128-q3-lse", LibraryCall.Op.DECODE, DType.FP16, 2, 8, 2, 128,
                    2048, 16, 3, true, new Features(128, 0, 30f, true), false, new int[] {50, 1500}),
            new CacheCase("chunked-prefill-window-softcap-d64", LibraryCall.Op.PREFILL, DType.FP16, 2, 8, 2, 64, 1024, 0, 128,
                    true, new Features(100, 0, 20f, false), false, new int[] {5, 600}),
            new CacheCase("paged-append-decode-d128-gqa4-lse", LibraryCall.Op.APPEND_DECODE, DType.FP16, 4, 32, 8, 128,
                    2048, 16, 1, true, Features.NONE, false, new int[] {0, 300, 1500, 2000}),
            new CacheCase("contiguous-append-decode-bf16-d64-q4-cudagraph", LibraryCall.Op.APPEND_DECODE, DType.BF16, 3, 8,
                    2, 64, 1024, 0, 4, false, Features.NONE, true, new int[] {5, 500, 1000}),
            new CacheCase("paged-decode-d128-gqa4-cudagraph-lse", LibraryCall.Op.DECODE, DType.FP16, 4, 32, 8, 128, 2048, 16,
                    1, true, Features.NONE, true, new int[] {1, 256, 777, 2000}),
            new CacheCase("paged-chunked-prefill-bf16-d128-cudagraph", LibraryCall.Op.PREFILL, DType.BF16, 2, 16, 4, 128,
                    1024, 16, 64, true, Features.NONE, true, new int[] {0, 500}));

    private int failures;

    public static void main(String[] args) {
        int steps = 6, timing = 20;
        long seed = 1;
        List<String> only = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--steps" -> steps = Integer.parseInt(args[++i]);
                case "--seed" -> seed = Long.parseLong(args[++i]);
                case "--timing" -> timing = Integer.parseInt(args[++i]);
                case "--case" -> only.add(args[++i]);
                default -> {
                    System.err.println("usage: LibraryGpuCheck [--steps N] [--seed S] [--timing N] [--case NAME]...; cases: "
                            + CASES.stream().map(Case::name).toList() + " " + CACHE_CASES.stream().map(CacheCase::name).toList()
                            + " " + LibraryTiming.NAME);
                    System.exit(2);
                }
            }
        }
        LibraryGpuCheck check = new LibraryGpuCheck();
        boolean deviceOk = check.device();
        if (deviceOk) {
            for (Case c : CASES) {
                if (only.isEmpty() || only.contains(c.name())) {
                    check.run(c, steps, timing, seed);
                }
            }
            for (CacheCase c : CACHE_CASES) {
                if (only.isEmpty() || only.contains(c.name())) {
                    check.run(c, steps, seed);
                }
            }
            if (only.isEmpty() || only.contains(LibraryTiming.NAME)) {
                check.timing(10 * timing, seed);
            }
        }
        System.out.println(check.failures == 0 ? "RESULT PASS" : "RESULT FAIL (" + check.failures + " failed)");
        System.out.flush();
        // TornadoVM's runtime threads may outlive main.
        System.exit(check.failures == 0 ? 0 : 1);
    }

    private void pass(String what, String detail) {
        System.out.println("PASS " + what + (detail.isEmpty() ? "" : " " + detail));
    }

    private void fail(String what, String detail) {
        failures++;
        System.out.println("FAIL " + what + " " + detail);
    }

    /** The default device is on the CUDA backend and the registry hands our provider for it. */
    private boolean device() {
        TornadoDevice device;
        try {
            device = TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice();
        } catch (Throwable e) {
            e.printStackTrace();
            fail("device", "no TornadoVM device: " + e);
            return false;
        }
        TornadoVMBackendType backend = device.getTornadoVMBackend();
        String about = "'" + device.getDeviceName() + "' " + device.getDescription() + " backend=" + backend + " class="
                + device.getClass().getName();
        System.out.println("device " + about);
        if (backend != TornadoVMBackendType.CUDA) {
            fail("device", "the default device is not on TornadoVM's CUDA backend: " + about);
            return false;
        }
        pass("device", "CUDA backend");
        try {
            if (!(device instanceof TornadoXPUDevice xpu)) {
                fail("registry", "the device is not a TornadoXPUDevice: " + device.getClass());
                return false;
            }
            if (!(device instanceof TornadoNativeStreamSupport)) {
                fail("registry", "the device does not implement TornadoNativeStreamSupport");
                return false;
            }
            TornadoLibraryProvider provider = LibraryRegistry.findProvider(AttentionLibraryTasks.LIBRARY_NAME, xpu);
            if (!(provider instanceof AttentionLibrary)) {
                fail("registry", "findProvider gave " + provider.getClass().getName());
                return false;
            }
            pass("registry", "LibraryRegistry.findProvider(\"" + AttentionLibraryTasks.LIBRARY_NAME + "\") = "
                    + provider.getClass().getName());
            return true;
        } catch (Throwable e) {
            e.printStackTrace();
            fail("registry", e.toString());
            return false;
        }
    }

    /** The poison task (Append.TASK): O = NaN on the device before the decode. */
    public static void poison(HalfFloatArray nans, HalfFloatArray o) {
        for (@Parallel int i = 0; i < o.getSize(); i++) {
            o.set(i, nans.get(i));
        }
    }

    /** The append task (Append.TASK): new rows {@code [batch, kvHeads, queries, d]} at {@code lens[b] - n + j}. */
    public static void append(HalfFloatArray kNew, HalfFloatArray vNew, HalfFloatArray k, HalfFloatArray v, IntArray lens,
                              int batch, int kvHeads, int queries, int capacity, int d) {
        for (@Parallel int i = 0; i < batch * kvHeads * queries * d; i++) {
            int x = i % d;
            int j = (i / d) % queries;
            int bh = i / (d * queries);
            int b = bh / kvHeads;
            int n = lens.get(batch + b);
            if (j < n) {
                int dst = (bh * capacity + lens.get(b) - n + j) * d + x;
                k.set(dst, kNew.get(i));
                v.set(dst, vNew.get(i));
            }
        }
    }

    private void run(Case c, int steps, int timing, long seed) {
        String name = "case " + c.name();
        System.out.println(String.format(Locale.ROOT,
                "case %s: batch=%d heads=%d kvHeads=%d queries=%d capacity=%d headDim=%d append=%s cudaGraph=%b lengths0=%s",
                c.name(), c.batch(), c.heads(), c.kvHeads(), c.queries(), c.capacity(), c.headDim(), c.append(),
                c.cudaGraph(), Arrays.toString(c.initialLengths())));
        int b0 = c.batch(), h = c.heads(), hkv = c.kvHeads(), sq = c.queries(), cap = c.capacity(), d = c.headDim();
        float scale = (float) (1 / Math.sqrt(d));
        SplittableRandom random = new SplittableRandom(seed * 1_000_003L + c.name().hashCode());
        int qSize = b0 * h * sq * d;
        int kvSize = Math.multiplyExact(b0 * hkv * cap, d);
        HalfFloatArray q = new HalfFloatArray(qSize);
        HalfFloatArray o = new HalfFloatArray(qSize);
        HalfFloatArray k = new HalfFloatArray(kvSize);
        HalfFloatArray v = new HalfFloatArray(kvSize);
        HalfFloatArray kNew = new HalfFloatArray(b0 * hkv * sq * d);
        HalfFloatArray vNew = new HalfFloatArray(b0 * hkv * sq * d);
        IntArray lens = new IntArray(2 * b0);
        int[] lengths = c.initialLengths().clone();
        // The prompt rows; every row past a length holds NaN, as the harness's poisoned caches.
        HalfFloat nan = new HalfFloat(Float.NaN);
        for (int bh = 0; bh < b0 * hkv; bh++) {
            int length = lengths[bh / hkv];
            for (int p = 0; p < cap; p++) {
                for (int x = 0; x < d; x++) {
                    int at = (bh * cap + p) * d + x;
                    k.set(at, p < length ? half(random) : nan);
                    v.set(at, p < length ? half(random) : nan);
                }
            }
        }
        TaskGraph graph = new TaskGraph("lib_" + c.name().replace('-', '_'));
        if (c.append() == Append.HOST) {
            // The library task alone. O is NaN on the host before each step; on the device it holds the
            // previous step's result (not copied in: WRITE_ONLY), which fresh queries make wrong.
            graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, q, k, v, lens);
        } else {
            // TornadoVM does not copy a WRITE_ONLY library argument in, even when listed here: O is poisoned
            // on the device by a task (NaN copied from a constant array) before the append and the decode.
            HalfFloatArray nans = new HalfFloatArray(qSize);
            nans.init(nan);
            graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, k, v, nans)
                    .transferToDevice(DataTransferMode.EVERY_EXECUTION, q, kNew, vNew, lens)
                    .task("poison", LibraryGpuCheck::poison, nans, o)
                    .task("append", LibraryGpuCheck::append, kNew, vNew, k, v, lens, b0, hkv, sq, cap, d);
        }
        graph.libraryTask("decode", AttentionLibraryTasks::decode, q, k, v, o, lens, b0, h, hkv, sq, cap, d, true, scale)
                .transferToHost(DataTransferMode.EVERY_EXECUTION, o);
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(b0).heads(h).kvHeads(hkv).headDim(d).maxQueryLength(sq)
                .maxLength(cap).causal(true).scale(scale).layout(Layout.BHSD).build();
        double worstAbs = 0, worstRel = 0;
        double[] stepMs = new double[steps];
        boolean ok = true;
        try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
            if (c.cudaGraph()) {
                plan.withCUDAGraph();
            }
            for (int step = 0; step < steps; step++) {
                // This step's new queries per slot: 1..queries, slot (step + b) % 4 == 3 idle, never past capacity.
                int[] n = new int[b0];
                for (int b = 0; b < b0; b++) {
                    int want = (step + b) % 4 == 3 ? 0 : 1 + random.nextInt(sq);
                    n[b] = Math.min(want, cap - lengths[b]);
                    lengths[b] += n[b];
                }
                AttentionLibraryTasks.fillLens(lens, lengths, n);
                for (int b = 0; b < b0; b++) {
                    for (int hh = 0; hh < h; hh++) {
                        for (int j = 0; j < sq; j++) {
                            for (int x = 0; x < d; x++) {
                                q.set(((b * h + hh) * sq + j) * d + x, j < n[b] ? half(random) : nan);
                            }
                        }
                    }
                }
                o.init(nan);
                // The new K/V rows: written into the host cache (HOST, sent whole) or into kNew/vNew for the task.
                for (int bh = 0; bh < b0 * hkv; bh++) {
                    int b = bh / hkv;
                    for (int j = 0; j < sq; j++) {
                        for (int x = 0; x < d; x++) {
                            HalfFloat kk = j < n[b] ? half(random) : nan, vv = j < n[b] ? half(random) : nan;
                            kNew.set((bh * sq + j) * d + x, kk);
                            vNew.set((bh * sq + j) * d + x, vv);
                            if (c.append() == Append.HOST && j < n[b]) {
                                int at = (bh * cap + lengths[b] - n[b] + j) * d + x;
                                k.set(at, kk);
                                v.set(at, vv);
                            }
                        }
                    }
                }
                long t0 = System.nanoTime();
                plan.execute();
                stepMs[step] = (System.nanoTime() - t0) / 1e6;
                if (c.append() == Append.TASK) {
                    // The host copy is the reference's truth; the device got the rows from the task.
                    for (int bh = 0; bh < b0 * hkv; bh++) {
                        int b = bh / hkv;
                        for (int j = 0; j < n[b]; j++) {
                            for (int x = 0; x < d; x++) {
                                int at = (bh * cap + lengths[b] - n[b] + j) * d + x;
                                k.set(at, kNew.get((bh * sq + j) * d + x));
                                v.set(at, vNew.get((bh * sq + j) * d + x));
                            }
                        }
                    }
                }
                CpuReference.Result ref = CpuReference.cached(spec, floats(q), false, rows(k, hkv, cap, d),
                        rows(v, hkv, cap, d), lengths.clone(), n);
                double[] e = compare(o, ref.output());
                worstAbs = Math.max(worstAbs, e[1]);
                worstRel = Math.max(worstRel, e[2]);
                boolean stepOk = e[0] == 0 && e[1] <= MAX_ABS && e[2] <= MAX_REL_L2;
                ok &= stepOk;
                System.out.println(String.format(Locale.ROOT, "  step %d lengths=%s new=%s %.3f ms nan=%d max_abs=%.2e rel_l2=%.2e %s",
                        step, Arrays.toString(lengths), Arrays.toString(n), stepMs[step], (long) e[0], e[1], e[2],
                        stepOk ? "ok" : "WRONG"));
            }
            if (ok && timing > 0) {
                // The same step again (the task re-appends the same rows): wall time per execute.
                double[] t = new double[timing];
                for (int i = 0; i < timing; i++) {
                    long t0 = System.nanoTime();
                    plan.execute();
                    t[i] = (System.nanoTime() - t0) / 1e6;
                }
                Arrays.sort(t);
                System.out.println(String.format(Locale.ROOT, "  timing %s: %d executions, median %.3f ms, min %.3f ms (wall, with transfers%s)",
                        c.name(), timing, t[timing / 2], t[0], c.append() == Append.HOST ? ", whole cache sent each time" : ""));
                double[] again = compare(o, CpuReference.cached(spec, floats(q), false, rows(k, hkv, cap, d),
                        rows(v, hkv, cap, d), lengths.clone(), lensNew(lens, b0)).output());
                if (again[0] != 0 || again[1] > MAX_ABS || again[2] > MAX_REL_L2) {
                    ok = false;
                    System.out.println("  the repeated executions changed O: " + Arrays.toString(again));
                }
            }
        } catch (Throwable e) {
            e.printStackTrace();
            System.out.flush();
            fail(name, "threw " + e);
            return;
        }
        double[] sorted = stepMs.clone();
        Arrays.sort(sorted);
        String detail = String.format(Locale.ROOT, "steps=%d max_abs=%.2e rel_l2=%.2e first_step=%.3f ms median_step=%.3f ms",
                steps, worstAbs, worstRel, stepMs.length > 0 ? stepMs[0] : 0, sorted.length > 0 ? sorted[sorted.length / 2] : 0);
        if (ok) {
            pass(name, detail);
        } else {
            fail(name, detail);
        }
    }

    /** Llama-shaped decode timing, library task beside ptx-cuda ({@link LibraryTiming}); fails only on a wrong output. */
    private void timing(int calls, long seed) {
        String name = "case " + LibraryTiming.NAME;
        try {
            if (LibraryTiming.run(Math.max(20, calls), seed)) {
                pass(name, "outputs within tolerance (timings above: informational)");
            } else {
                fail(name, "an output was out of tolerance");
            }
        } catch (Throwable e) {
            e.printStackTrace();
            System.out.flush();
            fail(name, "threw " + e);
        }
    }

    /** The poison tasks of the cache cases: bf16 bits (ShortArray) and lse. */
    public static void poisonBits(ShortArray nans, ShortArray o) {
        for (@Parallel int i = 0; i < o.getSize(); i++) {
            o.set(i, nans.get(i));
        }
    }

    public static void poisonFloats(FloatArray nans, FloatArray lse) {
        for (@Parallel int i = 0; i < lse.getSize(); i++) {
            lse.set(i, nans.get(i));
        }
    }

    /** A case of {@link CacheLibraryTasks} (see {@link CacheCase}) on the GPU: its graph in a TornadoVM plan. */
    private void run(CacheCase c, int steps, long seed) {
        String name = "case " + c.name();
        System.out.println(String.format(Locale.ROOT,
                "case %s: %s %s batch=%d heads=%d kvHeads=%d headDim=%d capacity=%d pageSize=%d maxQueries=%d lse=%b "
                        + "features=%s cudaGraph=%b lengths0=%s", c.name(), c.op(), c.dtype().label(), c.batch(), c.heads(),
                c.kvHeads(), c.headDim(), c.capacity(), c.pageSize(), c.maxQueries(), c.lse(), c.features(), c.cudaGraph(),
                Arrays.toString(c.initialLengths())));
        boolean ok = true;
        CacheRun run;
        try {
            run = new CacheRun(c, seed);
            try (TornadoExecutionPlan plan = new TornadoExecutionPlan(run.graph().snapshot())) {
                if (c.cudaGraph()) {
                    plan.withCUDAGraph();
                }
                for (int s = 0; s < steps; s++) {
                    ok &= run.step(s, plan::execute);
                }
            }
        } catch (Throwable e) {
            e.printStackTrace();
            System.out.flush();
            fail(name, "threw " + e);
            return;
        }
        String detail = run.summary();
        if (ok) {
            pass(name, detail);
        } else {
            fail(name, detail);
        }
    }

    /**
     * One cache case's arrays and steps, apart from how an execution runs (the GPU check runs its TornadoVM graph;
     * the tests run an emulation of the launches): the spec and cache, the host arrays (the cache or pool filled to
     * the initial lengths, NaN elsewhere; a shuffled block table), and per step the new tokens, fresh inputs, one
     * execution and the comparison with {@link CpuReference#cached}.
     */
    static final class CacheRun {
        final CacheCase c;
        final CacheAttentionSpec spec;
        final KvCacheSpec cacheSpec;
        final CacheLibraryTasks att;
        final boolean prefill;
        /** Append-decode: the task writes the new rows (newK, newV) into the device's cache; kRef, vRef: what it must hold. */
        final boolean append;
        final TornadoNativeArray q, o, k, v, nans, newK, newV, kRef, vRef;
        final FloatArray lse, lseNans;
        final IntArray step, blocks;
        final RowIndex row;
        final int[] lengths;
        private final SplittableRandom random;
        private final List<Double> stepMs = new ArrayList<>();
        private double worstAbs, worstRel, worstLse;

        CacheRun(CacheCase c, long seed) {
            this.c = c;
            this.random = new SplittableRandom(seed * 1_000_003L + c.name().hashCode());
            this.spec = c.spec(random);
            this.cacheSpec = c.cacheSpec();
            this.att = CacheLibraryTasks.create(spec, cacheSpec);
            this.prefill = c.op() == LibraryCall.Op.PREFILL;
            this.append = c.op() == LibraryCall.Op.APPEND_DECODE;
            int b0 = c.batch(), hkv = c.kvHeads(), d = c.headDim(), cap = c.capacity();
            DType dtype = c.dtype();
            int qSize = b0 * c.heads() * c.maxQueries() * d;  // dense [batch, heads, maxQ, D] and packed [batch*maxQ, heads, D] alike
            q = tensor(dtype, qSize);
            o = tensor(dtype, qSize);
            nans = tensor(dtype, qSize);
            k = tensor(dtype, Math.toIntExact(cacheSpec.elements()));
            v = tensor(dtype, Math.toIntExact(cacheSpec.elements()));
            lse = new FloatArray(qSize / d);
            lseNans = new FloatArray(qSize / d);
            lseNans.init(Float.NaN);
            fillNaN(nans);
            fillNaN(k);
            fillNaN(v);
            step = io.github.tornadoattention.tornado.engine.CacheAttentionTasks.newStepArray(b0);
            int pagesPerSequence = cacheSpec.pagesPerSequence();
            blocks = new IntArray(cacheSpec.paged() ? b0 * pagesPerSequence : 1);
            if (cacheSpec.paged()) {
                // The engine's pool handed out in shuffled order: pages of a sequence are neither adjacent nor ascending.
                int[] pages = new int[cacheSpec.pages()];
                for (int i = 0; i < pages.length; i++) {
                    pages[i] = i;
                }
                for (int i = pages.length - 1; i > 0; i--) {
                    int j = random.nextInt(i + 1);
                    int t = pages[i];
                    pages[i] = pages[j];
                    pages[j] = t;
                }
                for (int i = 0; i < blocks.getSize(); i++) {
                    blocks.set(i, pages[i]);
                }
            }
            int pageSize = c.pageSize();
            row = (slot, kvHead, position) -> cacheSpec.paged()
                    ? ((long) (blocks.get(slot * pagesPerSequence + position / pageSize) * hkv + kvHead) * pageSize
                            + position % pageSize) * d
                    : ((long) (slot * hkv + kvHead) * cap + position) * d;
            lengths = c.initialLengths().clone();
            for (int b = 0; b < b0; b++) {
                for (int kh = 0; kh < hkv; kh++) {
                    for (int p = 0; p < lengths[b]; p++) {
                        long at = row.of(b, kh, p);
                        for (int x = 0; x < d; x++) {
                            put(k, (int) (at + x), gaussian(random));
                            put(v, (int) (at + x), gaussian(random));
                        }
                    }
                }
            }
            int newRows = b0 * hkv * c.maxQueries() * d;
            newK = append ? tensor(dtype, newRows) : null;
            newV = append ? tensor(dtype, newRows) : null;
            kRef = append ? copy(k) : null;
            vRef = append ? copy(v) : null;
        }

        private static TornadoNativeArray copy(TornadoNativeArray a) {
            TornadoNativeArray c = a instanceof ShortArray ? new ShortArray(a.getSize()) : new HalfFloatArray(a.getSize());
            for (int i = 0; i < a.getSize(); i++) {
                put(c, i, get(a, i));
            }
            return c;
        }

        /** The library task of the case (decode or prefill, with or without lse) over the arrays. */
        LibraryTaskDescriptor descriptor() {
            if (append) {
                return c.lse() ? att.appendAndDecodeWithLse(newK, newV, q, k, v, step, blocks, o, lse)
                        : att.appendAndDecode(newK, newV, q, k, v, step, blocks, o);
            }
            if (c.lse()) {
                return prefill ? att.prefillWithLse(q, k, v, step, blocks, o, lse) : att.decodeWithLse(q, k, v, step, blocks, o, lse);
            }
            return prefill ? att.prefill(q, k, v, step, blocks, o) : att.decode(q, k, v, step, blocks, o);
        }

        /**
         * The GPU graph: inputs and the cache sent every execution (the host appends), O and lse poisoned on the device
         * by tasks (TornadoVM copies no write-only argument in), the library task, O and lse back.
         */
        TaskGraph graph() {
            TaskGraph graph = new TaskGraph("lib_" + c.name().replace('-', '_'))
                    .transferToDevice(DataTransferMode.FIRST_EXECUTION, c.lse() ? new Object[] {nans, lseNans} : new Object[] {nans});
            if (append) {
                // The cache lives on the device (the task appends); the new rows go up every step; the cache comes back.
                graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, k, v)
                        .transferToDevice(DataTransferMode.EVERY_EXECUTION, q, newK, newV, step, blocks);
            } else {
                graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, q, k, v, step, blocks);
            }
            if (c.dtype() == DType.BF16) {
                graph.task("poison_o", LibraryGpuCheck::poisonBits, (ShortArray) nans, (ShortArray) o);
            } else {
                graph.task("poison_o", LibraryGpuCheck::poison, (HalfFloatArray) nans, (HalfFloatArray) o);
            }
            if (append) {
                if (c.lse()) {
                    graph.task("poison_lse", LibraryGpuCheck::poisonFloats, lseNans, lse);
                    graph.libraryTask("attn", att::appendAndDecodeWithLse, newK, newV, q, k, v, step, blocks, o, lse);
                    return graph.transferToHost(DataTransferMode.EVERY_EXECUTION, o, lse, k, v);
                }
                graph.libraryTask("attn", att::appendAndDecode, newK, newV, q, k, v, step, blocks, o);
                return graph.transferToHost(DataTransferMode.EVERY_EXECUTION, o, k, v);
            }
            if (c.lse()) {
                graph.task("poison_lse", LibraryGpuCheck::poisonFloats, lseNans, lse);
                if (prefill) {
                    graph.libraryTask("attn", att::prefillWithLse, q, k, v, step, blocks, o, lse);
                } else {
                    graph.libraryTask("attn", att::decodeWithLse, q, k, v, step, blocks, o, lse);
                }
                return graph.transferToHost(DataTransferMode.EVERY_EXECUTION, o, lse);
            }
            if (prefill) {
                graph.libraryTask("attn", att::prefill, q, k, v, step, blocks, o);
            } else {
                graph.libraryTask("attn", att::decode, q, k, v, step, blocks, o);
            }
            return graph.transferToHost(DataTransferMode.EVERY_EXECUTION, o);
        }

        /**
         * Step {@code s}: new tokens per slot (1..maxQueries, slot (s + b) % 4 == 3 idle, never past capacity; a
         * prefill's chunk ends at the sequence's new length, after the keys of the chunks before it: bottom-right),
         * fresh queries and new K/V rows written by the host, one {@code execute}, O (and lse) against the reference.
         * Prints the step's line; returns whether it was within tolerance.
         */
        boolean step(int s, Runnable execute) {
            int b0 = c.batch(), h = c.heads(), hkv = c.kvHeads(), d = c.headDim(), maxQ = c.maxQueries();
            int[] n = new int[b0];
            for (int b = 0; b < b0; b++) {
                int want = (s + b) % 4 == 3 ? 0 : 1 + random.nextInt(maxQ);
                n[b] = Math.min(want, c.capacity() - lengths[b]);
                lengths[b] += n[b];
            }
            io.github.tornadoattention.tornado.engine.CacheAttentionTasks.setStep(step, lengths, n);
            fillNaN(q);
            if (append) {
                fillNaN(newK);
                fillNaN(newV);
            }
            int offset = 0;
            for (int b = 0; b < b0; b++) {
                for (int j = 0; j < n[b]; j++) {
                    for (int hh = 0; hh < h; hh++) {
                        int at = prefill ? ((offset + j) * h + hh) * d : ((b * h + hh) * maxQ + j) * d;
                        for (int x = 0; x < d; x++) {
                            put(q, at + x, gaussian(random));
                        }
                    }
                    for (int kh = 0; kh < hkv; kh++) {
                        long at = row.of(b, kh, lengths[b] - n[b] + j);
                        int from = ((b * hkv + kh) * maxQ + j) * d;   // new rows [batch, Hkv, maxQ, D]
                        for (int x = 0; x < d; x++) {
                            float kx = gaussian(random), vx = gaussian(random);
                            put(append ? newK : k, append ? from + x : (int) (at + x), kx);
                            put(append ? newV : v, append ? from + x : (int) (at + x), vx);
                            if (append) {
                                put(kRef, (int) (at + x), kx);
                                put(vRef, (int) (at + x), vx);
                            }
                        }
                    }
                }
                offset += n[b];
            }
            long t0 = System.nanoTime();
            execute.run();
            double ms = (System.nanoTime() - t0) / 1e6;
            stepMs.add(ms);
            // Append-decode: every owned row of the cache as it came back must be the reference cache's, bit for bit.
            long cacheMismatches = append ? mismatches(k, kRef) + mismatches(v, vRef) : 0;
            CpuReference.Result ref = CpuReference.cached(spec, floats(q), prefill, rows(append ? kRef : k, row),
                    rows(append ? vRef : v, row), lengths.clone(), n);
            // A packed call writes the rows of its total only.
            int rowsWritten = prefill ? offset : b0 * maxQ;
            double[] e = compare(o, ref.output(), (long) rowsWritten * h * d);
            double lseErr = c.lse() ? compareLse(lse, ref.logSumExp(), prefill ? b0 * maxQ : 0, offset) : 0;
            worstAbs = Math.max(worstAbs, e[1]);
            worstRel = Math.max(worstRel, e[2]);
            worstLse = Math.max(worstLse, lseErr);
            boolean ok = e[0] == 0 && e[1] <= maxAbs() && e[2] <= maxRel() && lseErr <= MAX_LSE_ABS && cacheMismatches == 0;
            System.out.println(String.format(Locale.ROOT,
                    "  step %d lengths=%s new=%s %.3f ms nan=%d max_abs=%.2e rel_l2=%.2e%s%s %s", s, Arrays.toString(lengths),
                    Arrays.toString(n), ms, (long) e[0], e[1], e[2],
                    c.lse() ? String.format(Locale.ROOT, " lse_err=%.2e", lseErr) : "",
                    append ? " cache_mismatches=" + cacheMismatches : "", ok ? "ok" : "WRONG"));
            return ok;
        }

        /** Elements of the owned cache rows (positions below each slot's length) where {@code a} differs from {@code ref}. */
        private long mismatches(TornadoNativeArray a, TornadoNativeArray ref) {
            long bad = 0;
            for (int b = 0; b < c.batch(); b++) {
                for (int kh = 0; kh < c.kvHeads(); kh++) {
                    for (int p = 0; p < lengths[b]; p++) {
                        long at = row.of(b, kh, p);
                        for (int x = 0; x < c.headDim(); x++) {
                            if (Float.floatToIntBits(get(a, (int) (at + x))) != Float.floatToIntBits(get(ref, (int) (at + x)))) {
                                bad++;
                            }
                        }
                    }
                }
            }
            return bad;
        }

        double maxAbs() {
            return c.dtype() == DType.BF16 ? BF16_MAX_ABS : MAX_ABS;
        }

        double maxRel() {
            return c.dtype() == DType.BF16 ? BF16_MAX_REL_L2 : MAX_REL_L2;
        }

        /** The worst errors and the step times so far, for the PASS/FAIL line. */
        String summary() {
            double[] sorted = stepMs.stream().mapToDouble(Double::doubleValue).sorted().toArray();
            return String.format(Locale.ROOT,
                    "steps=%d max_abs=%.2e rel_l2=%.2e%s bounds=%.0e/%.1e first_step=%.3f ms median_step=%.3f ms",
                    sorted.length, worstAbs, worstRel, c.lse() ? String.format(Locale.ROOT, " lse_err=%.2e", worstLse) : "",
                    maxAbs(), maxRel(), stepMs.isEmpty() ? 0 : stepMs.get(0), sorted.length > 0 ? sorted[sorted.length / 2] : 0);
        }
    }

    /** Where row {@code position} of (slot, KV head) starts in a cache or pool array. */
    @FunctionalInterface
    interface RowIndex {
        long of(int slot, int kvHead, int position);
    }

    /**
     * The largest |lse - lse_ref| (infinity when one is -inf and the other is not, or NaN). Dense ({@code packedRows}
     * 0): every row; packed [heads, packedRows]: the first {@code total} rows of each head.
     */
    static double compareLse(FloatArray lse, double[] expected, int packedRows, int total) {
        double worst = 0;
        for (int i = 0; i < expected.length; i++) {
            if (packedRows > 0 && i % packedRows >= total) {
                continue;
            }
            double got = lse.get(i), want = expected[i];
            if (Double.isNaN(got) || (Double.isInfinite(want) != Double.isInfinite(got))) {
                return Double.POSITIVE_INFINITY;
            }
            if (!Double.isInfinite(want)) {
                worst = Math.max(worst, Math.abs(got - want));
            } else if (want != got) {
                return Double.POSITIVE_INFINITY;
            }
        }
        return worst;
    }

    /** A 16-bit tensor: fp16 in a HalfFloatArray, bf16 bits in a ShortArray (the project's bf16 arrays). */
    static TornadoNativeArray tensor(DType dtype, int elements) {
        return dtype == DType.BF16 ? new ShortArray(elements) : new HalfFloatArray(elements);
    }

    /** Stores {@code value} rounded to the tensor's type. */
    static void put(TornadoNativeArray a, int i, float value) {
        if (a instanceof ShortArray bits) {
            bits.set(i, DType.BF16.fromFloat(value));
        } else {
            ((HalfFloatArray) a).set(i, new HalfFloat(value));
        }
    }

    static float get(TornadoNativeArray a, int i) {
        return a instanceof ShortArray bits ? DType.BF16.toFloat(bits.get(i)) : ((HalfFloatArray) a).get(i).getFloat32();
    }

    static void fillNaN(TornadoNativeArray a) {
        for (int i = 0; i < a.getSize(); i++) {
            put(a, i, Float.NaN);
        }
    }

    static float gaussian(SplittableRandom random) {
        // N(0,1) by Box-Muller on the generator's doubles.
        double u = 1 - random.nextDouble(), w = random.nextDouble();
        return (float) (Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * w));
    }

    private static float[] floats(TornadoNativeArray a) {
        float[] f = new float[a.getSize()];
        for (int i = 0; i < f.length; i++) {
            f[i] = get(a, i);
        }
        return f;
    }

    private static CpuReference.RowSource rows(TornadoNativeArray cache, RowIndex row) {
        return (slot, kvHead, position, into) -> {
            long base = row.of(slot, kvHead, position);
            for (int x = 0; x < into.length; x++) {
                into[x] = get(cache, (int) (base + x));
            }
        };
    }

    private static int[] lensNew(IntArray lens, int batch) {
        int[] n = new int[batch];
        for (int b = 0; b < batch; b++) {
            n[b] = lens.get(batch + b);
        }
        return n;
    }

    private static HalfFloat half(SplittableRandom random) {
        return new HalfFloat(gaussian(random));
    }

    private static CpuReference.RowSource rows(HalfFloatArray cache, int kvHeads, int capacity, int d) {
        return (slot, kvHead, position, into) -> {
            long base = ((long) (slot * kvHeads + kvHead) * capacity + position) * d;
            for (int x = 0; x < d; x++) {
                into[x] = cache.get((int) (base + x)).getFloat32();
            }
        };
    }

    /** {nan count, max abs error, rel L2 error} of O against the reference. */
    static double[] compare(TornadoNativeArray o, double[] expected) {
        return compare(o, expected, expected.length);
    }

    /** {@link #compare} over the first {@code elements} values (a packed call's rows of the step's total). */
    static double[] compare(TornadoNativeArray o, double[] expected, long elements) {
        long nans = 0;
        double maxAbs = 0, num = 0, den = 0;
        for (int i = 0; i < elements; i++) {
            float got = get(o, i);
            if (Float.isNaN(got)) {
                nans++;
                continue;
            }
            double diff = got - expected[i];
            maxAbs = Math.max(maxAbs, Math.abs(diff));
            num += diff * diff;
            den += expected[i] * expected[i];
        }
        return new double[] {nans, maxAbs, den == 0 ? Math.sqrt(num) : Math.sqrt(num / den)};
    }
}
