package io.github.tornadoattention.tornado.library;

import io.github.tornadoattention.CacheAttentionSpec;
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
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.runtime.common.TornadoXPUDevice;
import uk.ac.manchester.tornado.runtime.library.LibraryRegistry;
import uk.ac.manchester.tornado.runtime.library.spi.TornadoLibraryProvider;
import uk.ac.manchester.tornado.runtime.library.spi.TornadoNativeStreamSupport;

/**
 * The decode library task on a GPU, end to end, as a plain main (no JUnit): run by
 * {@code tornado-kernels/tools/library-gpu-check.sh} under a CUDA-backend TornadoVM SDK. Checks that
 * TornadoVM's default device is on the CUDA backend and that {@code LibraryRegistry} picks
 * {@link AttentionLibrary} for it, then per case builds a TaskGraph with the
 * {@code tornado-attention/decodeAttention} library task over a contiguous fp16 cache and runs it for
 * several steps with changing lengths: new K/V rows appended by the host (whole cache sent every
 * execution) or by a TornadoVM task on the device (the cache sent once), idle slots, and optionally
 * under {@code withCUDAGraph()}. Every step: fresh N(0,1) queries, O (on the host; with the task
 * append also on the device) and absent query rows poisoned with NaN, cache rows past each length
 * NaN, and O compared with {@link CpuReference#cached} (no NaN, max abs <= 1e-2, rel L2 <= 2e-3, as
 * ptx-overrides/harness/cache_check.py). Prints PASS/FAIL lines
 * and the wall time of each step; exits 1 when anything failed.
 *
 * <pre>{@code java @argfile -cp ... io.github.tornadoattention.tornado.library.LibraryGpuCheck [--steps N] [--seed S] [--timing N] [--case NAME]...}</pre>
 */
public final class LibraryGpuCheck {
    static final double MAX_ABS = 1e-2, MAX_REL_L2 = 2e-3;

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
                            + CASES.stream().map(Case::name).toList());
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

    private static int[] lensNew(IntArray lens, int batch) {
        int[] n = new int[batch];
        for (int b = 0; b < batch; b++) {
            n[b] = lens.get(batch + b);
        }
        return n;
    }

    private static HalfFloat half(SplittableRandom random) {
        // N(0,1) by Box-Muller on the generator's doubles.
        double u = 1 - random.nextDouble(), w = random.nextDouble();
        return new HalfFloat((float) (Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * w)));
    }

    private static float[] floats(HalfFloatArray a) {
        float[] f = new float[a.getSize()];
        for (int i = 0; i < f.length; i++) {
            f[i] = a.get(i).getFloat32();
        }
        return f;
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
    static double[] compare(HalfFloatArray o, double[] expected) {
        long nans = 0;
        double maxAbs = 0, num = 0, den = 0;
        for (int i = 0; i < expected.length; i++) {
            float got = o.get(i).getFloat32();
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
