package io.github.tornadoattention.tornado.engine;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.cpu.HostCacheOps;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.KvCacheModel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.exceptions.TornadoExecutionPlanException;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;
import uk.ac.manchester.tornado.api.types.HalfFloat;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * {@link CacheAttentionTasks} in an engine's own task graph, checked on the GPU against the CPU reference: a graph
 * per case as an engine builds it (the cache {@code FIRST_EXECUTION} with a prompt the host wrote, the step array and
 * the queries {@code EVERY_EXECUTION}), then decode steps with changing lengths and idle slots (append + decode as
 * the graph's first task), and a packed prefill of ragged prompts over a prefix (the prompts written with the cache,
 * the prefill task alone in its graph); contiguous and paged
 * with a shuffled block table, D 64 and 128; on the Java cache kernels (tornado-simt, tornado-mma) each case also with
 * a window, softcap and sinks. Outputs are poisoned (NaN) on the host before each execution; TornadoVM
 * does not send an array a task only writes, so a row the kernels leave unwritten shows the device buffer's old
 * contents (zeros, or an earlier step's row) and fails the comparison (its lse is 0 or stale, never -inf or the
 * right value). Run under TornadoVM ({@code -Dtornado.recover.bailout=False}):
 * <pre>  java @$TORNADOVM_HOME/tornado-argfile ... -cp ... io.github.tornadoattention.tornado.engine.EngineTasksCheck [backends] [seed]</pre>
 * Prints one PASS/FAIL line per case; exit status 1 on any failure.
 */
public final class EngineTasksCheck {
    private static final int SLOTS = 3;
    private static final int HQ = 8;
    private static final int HKV = 2;
    private static final int CAPACITY = 320;
    private static final int PAGE = 16;
    private static final int[] PROMPT = {37, 0, 100};
    private static final int STEPS = 5;
    private static final int[] PACKED = {50, 0, 70};

    private EngineTasksCheck() {
    }

    public static void main(String[] args) throws TornadoExecutionPlanException {
        List<String> backends = args.length > 0 ? List.of(args[0].split(",")) : CacheAttentionTasks.BACKENDS;
        long seed = args.length > 1 ? Long.parseLong(args[1]) : 14;
        TornadoDevice device = TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice();
        int failures = 0;
        int cases = 0;
        for (String backend : backends) {
            for (int d : new int[] {64, 128}) {
                for (boolean paged : new boolean[] {false, true}) {
                    for (boolean causal : new boolean[] {true, false}) {
                        for (boolean features : new boolean[] {false, true}) {
                            if (features && backend.equals("ptx-tornado")) {
                                continue;   // its prebuilt twins serve no window, softcap or sinks
                            }
                            String tag = backend + " D=" + d + (paged ? " paged" : " contiguous") + (causal ? " causal" : "")
                                    + (features ? " window+softcap+sinks" : "");
                            Random random = new Random(seed + 31L * cases);
                            cases += 2;
                            failures += report(tag + " decode steps", decode(backend, device, d, paged, causal, features,
                                    random));
                            failures += report(tag + " packed prefill", prefill(backend, device, d, paged, causal, features,
                                    random));
                        }
                    }
                }
            }
        }
        System.out.printf("engine tasks: %d passed, %d failed%n", cases - failures, failures);
        System.exit(failures == 0 ? 0 : 1);
    }

    private static int report(String name, ErrorStats worst) {
        boolean pass = worst != null && worst.passes();
        System.out.printf("%s %s: %s%n", pass ? "PASS" : "FAIL", name, worst);
        return pass ? 0 : 1;
    }

    /** The shared setup of a case: specs, cache arrays with the prompt written on the host, the model of the cache. */
    private record Case(CacheAttentionSpec spec, KvCacheSpec cacheSpec, CacheAttentionTasks tasks, HalfFloatArray k,
                        HalfFloatArray v, IntArray blocks, int[] table, KvCacheModel model) {
        static Case of(String backend, TornadoDevice device, CacheAttentionSpec spec, boolean paged, Random random) {
            int d = spec.headDim();
            KvCacheSpec cacheSpec = paged ? KvCacheSpec.paged(SLOTS, HKV, CAPACITY, d, PAGE)
                    : KvCacheSpec.contiguous(SLOTS, HKV, CAPACITY, d);
            CacheAttentionTasks tasks = CacheAttentionTasks.create(backend, spec, cacheSpec, device);
            HalfFloatArray k = tasks.newCacheArray();
            HalfFloatArray v = tasks.newCacheArray();
            IntArray blocks = tasks.newBlockTable();
            int[] table = null;
            if (paged) {
                List<Integer> pages = new ArrayList<>();
                for (int p = 0; p < cacheSpec.pages(); p++) {
                    pages.add(p);
                }
                Collections.shuffle(pages, random);
                table = pages.stream().limit((long) SLOTS * cacheSpec.pagesPerSequence()).mapToInt(Integer::intValue).toArray();
                for (int i = 0; i < table.length; i++) {
                    blocks.set(i, table[i]);
                }
            }
            KvCacheModel model = new KvCacheModel(SLOTS, HKV, d);
            Case c = new Case(spec, cacheSpec, tasks, k, v, blocks, table, model);
            c.write(PROMPT, random);   // the prompt, written on the host before the first execution
            return c;
        }

        /** Writes {@code counts[b]} random rows per slot into the host cache arrays and records them. */
        void write(int[] counts, Random random) {
            float[][] rows = model.randomPacked(random, counts);
            int d = spec.headDim();
            TensorStrides s = cacheSpec.strides();
            int r = 0;
            for (int b = 0; b < SLOTS; b++) {
                for (int j = 0; j < counts[b]; j++, r++) {
                    long at = HostCacheOps.storageRow(cacheSpec, table, b, model.length(b) + j);
                    for (int h = 0; h < HKV; h++) {
                        for (int c = 0; c < d; c++) {
                            int from = (r * HKV + h) * d + c;
                            k.set((int) (at + h * s.head() + c), new HalfFloat(rows[0][from]));
                            v.set((int) (at + h * s.head() + c), new HalfFloat(rows[1][from]));
                        }
                    }
                }
            }
            model.recordPacked(rows[0], rows[1], counts);
        }
    }

    /**
     * The spec's window, softcap and sinks when {@code features}: a window of 48 keys left (and 8 right where not
     * causal) of each sequence's own position, softcap 20 and one sink per query head.
     */
    private static CacheAttentionSpec.Builder features(CacheAttentionSpec.Builder builder, boolean features, boolean causal) {
        if (!features) {
            return builder;
        }
        float[] sinks = new float[HQ];
        for (int h = 0; h < HQ; h++) {
            sinks[h] = 0.5f * (h % 3) - 0.4f;
        }
        return builder.window(48, causal ? 0 : 8).softcap(20f).sinks(sinks);
    }

    /** One decode case (also run under the fake driver, results ignored, to compile its kernels: VariantCompileTest). */
    public static ErrorStats decode(String backend, TornadoDevice device, int d, boolean paged, boolean causal,
                                    boolean withFeatures, Random random) throws TornadoExecutionPlanException {
        CacheAttentionSpec spec = features(CacheAttentionSpec.builder().batch(SLOTS).heads(HQ).kvHeads(HKV).headDim(d)
                .maxQueryLength(1).maxLength(CAPACITY).causal(causal), withFeatures, causal).build();
        Case c = Case.of(backend, device, spec, paged, random);
        int queries = (int) spec.denseQueryElements();
        HalfFloatArray q = new HalfFloatArray(queries);
        HalfFloatArray o = new HalfFloatArray(queries);
        FloatArray lse = new FloatArray(SLOTS * HQ);
        HalfFloatArray newK = new HalfFloatArray(SLOTS * HKV * d);
        HalfFloatArray newV = new HalfFloatArray(SLOTS * HKV * d);
        IntArray step = CacheAttentionTasks.newStepArray(SLOTS);
        GridScheduler scheduler = new GridScheduler();
        TaskGraph graph = new TaskGraph("decode")
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, c.k, c.v, c.blocks)
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, step, q, newK, newV, o, lse);
        c.tasks.addAppendAndDecode(graph, "decode", scheduler, "attn_", newK, newV, q, c.k, c.v, step, c.blocks, o, lse);
        graph.transferToHost(DataTransferMode.EVERY_EXECUTION, o, lse);
        ErrorStats worst = null;
        try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
            plan.withDevice(device).withGridScheduler(scheduler);
            for (int t = 0; t < STEPS; t++) {
                int[] counts = {1, t % 2, 1};   // slot 1 idle every other step (and empty at first)
                float[][] rows = c.model.randomPacked(random, counts);
                float[] dense = new float[SLOTS * HKV * d];
                float[] denseV = new float[dense.length];
                for (int b = 0, r = 0; b < SLOTS; b++) {
                    if (counts[b] == 1) {
                        System.arraycopy(rows[0], r * HKV * d, dense, b * HKV * d, HKV * d);
                        System.arraycopy(rows[1], r * HKV * d, denseV, b * HKV * d, HKV * d);
                        r++;
                    }
                }
                fill(newK, dense);
                fill(newV, denseV);
                c.model.recordPacked(rows[0], rows[1], counts);
                float[] qValues = KvCacheModel.randomFp16(random, queries);
                fill(q, qValues);
                poison(o, lse);
                CacheAttentionTasks.setStep(step, c.model.lengths(), counts);
                plan.execute();
                CpuReference.Result expected = c.model.expected(spec, qValues, false);
                worst = worse(worst, compare(o, lse, expected));
            }
        }
        return worst;
    }

    /** One packed prefill case (as {@link #decode}). */
    public static ErrorStats prefill(String backend, TornadoDevice device, int d, boolean paged, boolean causal,
                                     boolean withFeatures, Random random) throws TornadoExecutionPlanException {
        int total = Arrays.stream(PACKED).sum();
        CacheAttentionSpec spec = features(CacheAttentionSpec.builder().batch(SLOTS).heads(HQ).kvHeads(HKV).headDim(d)
                .maxQueryLength(128).maxTotalQueries(160).maxLength(CAPACITY).causal(causal), withFeatures, causal).build();
        Case c = Case.of(backend, device, spec, paged, random);
        int rowsQ = spec.maxTotalQueries() * HQ * d;
        HalfFloatArray q = new HalfFloatArray(rowsQ);
        HalfFloatArray o = new HalfFloatArray(rowsQ);
        FloatArray lse = new FloatArray(spec.maxTotalQueries() * HQ);
        IntArray step = CacheAttentionTasks.newStepArray(SLOTS);
        GridScheduler scheduler = new GridScheduler();
        TaskGraph graph = new TaskGraph("prefill")
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, c.k, c.v, c.blocks)
                .transferToDevice(DataTransferMode.EVERY_EXECUTION, step, q, o, lse);
        // The prompts' K/V go up with the cache (the engine's own graph before this one would append them).
        c.write(PACKED, random);
        c.tasks.addPrefill(graph, "prefill", scheduler, "attn_", q, c.k, c.v, step, c.blocks, o, lse);
        graph.transferToHost(DataTransferMode.EVERY_EXECUTION, o, lse);
        try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
            plan.withDevice(device).withGridScheduler(scheduler);
            float[] qValues = new float[rowsQ];
            System.arraycopy(KvCacheModel.randomFp16(random, total * HQ * d), 0, qValues, 0, total * HQ * d);
            fill(q, qValues);
            poison(o, lse);
            CacheAttentionTasks.setStep(step, c.model.lengths(), PACKED);
            plan.execute();
            CpuReference.Result expected = c.model.expected(spec, qValues, true);
            // Rows past the total are not the kernels' to write: compare the prompts' rows only.
            int n = total * HQ * d;
            float[] lseRows = new float[total * HQ];
            double[] expectedLse = new double[total * HQ];
            for (int h = 0; h < HQ; h++) {
                for (int t = 0; t < total; t++) {
                    lseRows[h * total + t] = lse.get(h * spec.maxTotalQueries() + t);
                    expectedLse[h * total + t] = expected.logSumExp()[h * spec.maxTotalQueries() + t];
                }
            }
            try (HalfTensor actual = HalfTensor.of(halves(o, n))) {
                return ErrorStats.compare(actual, Arrays.copyOf(expected.output(), n), lseRows, expectedLse);
            }
        }
    }

    private static ErrorStats compare(HalfFloatArray o, FloatArray lse, CpuReference.Result expected) {
        try (HalfTensor actual = HalfTensor.of(halves(o, o.getSize()))) {
            return ErrorStats.compare(actual, expected.output(), lse.toHeapArray(), expected.logSumExp());
        }
    }

    private static ErrorStats worse(ErrorStats a, ErrorStats b) {
        if (a == null || !b.passes()) {
            return b;
        }
        return a.passes() && b.maxAbsError() > a.maxAbsError() ? b : a;
    }

    private static void fill(HalfFloatArray array, float[] values) {
        for (int i = 0; i < values.length; i++) {
            array.set(i, new HalfFloat(values[i]));
        }
    }

    private static float[] halves(HalfFloatArray array, int n) {
        float[] out = new float[n];
        for (int i = 0; i < n; i++) {
            out[i] = array.get(i).getFloat32();
        }
        return out;
    }

    private static void poison(HalfFloatArray o, FloatArray lse) {
        for (int i = 0; i < o.getSize(); i++) {
            o.set(i, new HalfFloat(Float.NaN));
        }
        for (int i = 0; i < lse.getSize(); i++) {
            lse.set(i, Float.NaN);
        }
    }
}
