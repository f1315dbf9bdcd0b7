package io.github.tornadoattention.verify;

import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.cpu.CpuReference;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

/**
 * The inference API's correctness scenarios on any device, each call checked against the oracle
 * over {@link KvCacheModel}: ragged prefill packed (varlen), decode steps with slots idle, rollbacks,
 * shared prefixes, speculative steps, for a contiguous cache and paged ones, and the public merge.
 * Outputs are poisoned (NaN) before every call; inputs are fresh random fp16 values.
 */
public final class CacheSuite {
    private CacheSuite() {
    }

    public record CaseResult(String name, ErrorStats error) {
        public boolean passed() {
            return error.passes();
        }
    }

    /** Every scenario at head dim {@code headDim}, causal and not, contiguous and paged (pages of 16 and 4). */
    public static List<CaseResult> run(AttentionDevice device, int headDim, long seed) {
        return run(device, headDim, DType.FP16, seed);
    }

    /** As {@link #run(AttentionDevice, int, long)} with caches, queries and outputs of {@code dtype}. */
    public static List<CaseResult> run(AttentionDevice device, int headDim, DType dtype, long seed) {
        List<CaseResult> results = new ArrayList<>();
        for (int pageSize : new int[] {0, 16, 4}) {
            for (boolean causal : new boolean[] {true, false}) {
                scenario(device, headDim, pageSize, causal, new Random(seed + 31L * pageSize + (causal ? 1 : 0)),
                        dtype == DType.FP16 ? "" : dtype.label() + " ", b -> b.dtype(dtype), results);
            }
        }
        if (dtype == DType.FP16) {
            merge(device, headDim, new Random(seed ^ 0x5EED), results);
        }
        return results;
    }

    /**
     * An engine serving requests from several threads: {@code threads} threads at once, each with its own caches and
     * plans, thread t on {@code devices[t % devices.length]} (several devices: other options on the same TornadoVM
     * device, e.g. with lanes), each running {@code rounds} of the scenarios (thread t, round r: the
     * {@code (t + r)}-th of contiguous, pages of 16 and pages of 4, causal and not; then a merge), so that builds,
     * first executions, steady steps and closes of different threads interleave. Every call is checked as in
     * {@link #run}; names start with the thread and round. A thread's failure (an exception) is thrown once all have
     * finished, the other threads' failures suppressed in it.
     */
    public static List<CaseResult> runConcurrently(List<? extends AttentionDevice> devices, int headDim, int threads,
                                                   int rounds, long seed) {
        if (devices.isEmpty() || threads < 1 || rounds < 1) {
            throw new IllegalArgumentException("devices, threads >= 1 and rounds >= 1 needed: " + devices.size() + ", "
                    + threads + ", " + rounds);
        }
        int[][] combos = {{0, 1}, {0, 0}, {16, 1}, {16, 0}, {4, 1}, {4, 0}};   // page size (0: contiguous), causal
        List<List<CaseResult>> perThread = new ArrayList<>();
        List<RuntimeException> failures = java.util.Collections.synchronizedList(new ArrayList<>());
        java.util.concurrent.CountDownLatch start = new java.util.concurrent.CountDownLatch(1);
        List<Thread> running = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int thread = t;
            List<CaseResult> results = new ArrayList<>();
            perThread.add(results);
            AttentionDevice device = devices.get(t % devices.size());
            running.add(Thread.ofPlatform().name("engine-thread-" + t).start(() -> {
                try {
                    start.await();
                    for (int r = 0; r < rounds; r++) {
                        int[] combo = combos[(thread + r) % combos.length];
                        Random random = new Random(seed + 1000L * thread + r);
                        List<CaseResult> round = new ArrayList<>();
                        scenario(device, headDim, combo[0], combo[1] == 1, random, "", b -> b, round);
                        merge(device, headDim, random, round);
                        for (CaseResult c : round) {
                            results.add(new CaseResult("thread " + thread + " round " + r + " on " + device.backendId()
                                    + ": " + c.name(), c.error()));
                        }
                    }
                } catch (Throwable e) {
                    failures.add(new IllegalStateException("engine thread " + thread + " failed: " + e, e));
                }
            }));
        }
        start.countDown();
        for (Thread thread : running) {
            boolean interrupted = false;
            while (true) {
                try {
                    thread.join();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;   // the threads are using the device: let them finish
                }
            }
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
        if (!failures.isEmpty()) {
            RuntimeException first = failures.getFirst();
            failures.stream().skip(1).forEach(first::addSuppressed);
            throw first;
        }
        List<CaseResult> all = new ArrayList<>();
        perThread.forEach(all::addAll);
        return all;
    }

    /**
     * Every scenario with window, softcap and sinks (relative to each sequence's own position), for a device whose
     * cache plans serve them (cpu-reference): a causal local layer (window 24 with softcap and sinks, as Gemma 2 and
     * gpt-oss), a non-causal window reaching right (16, 5), and sinks alone; contiguous and pages of 16.
     */
    public static List<CaseResult> runWithFeatures(AttentionDevice device, int headDim, long seed) {
        List<CaseResult> results = new ArrayList<>();
        float[] sinks = {0.5f, -1f, 2f, 0f, 1f, -0.25f, 3f, -2f}; // heads = 8
        for (int pageSize : new int[] {0, 16}) {
            scenario(device, headDim, pageSize, true, new Random(seed + pageSize), "window (24, 0) softcap 5 sinks ",
                    b -> b.window(24, 0).softcap(5f).sinks(sinks), results);
            scenario(device, headDim, pageSize, false, new Random(seed + 7 + pageSize), "window (16, 5) ",
                    b -> b.window(16, 5), results);
            scenario(device, headDim, pageSize, true, new Random(seed + 13 + pageSize), "sinks ", b -> b.sinks(sinks), results);
        }
        return results;
    }

    private static void scenario(AttentionDevice device, int d, int pageSize, boolean causal, Random random, String features,
                                 java.util.function.UnaryOperator<CacheAttentionSpec.Builder> withFeatures,
                                 List<CaseResult> results) {
        int slots = 4;
        int heads = 8;
        int kvHeads = 2;
        int capacity = 320;
        CacheAttentionSpec decode = withFeatures.apply(CacheAttentionSpec.builder().batch(slots).heads(heads).kvHeads(kvHeads)
                .headDim(d).maxQueryLength(4).maxLength(capacity).causal(causal)).build();
        KvCacheSpec cacheSpec = (pageSize == 0 ? KvCacheSpec.contiguous(slots, kvHeads, capacity, d)
                : KvCacheSpec.paged(slots, kvHeads, capacity, d, pageSize)).withDtype(decode.dtype());
        CacheAttentionSpec prefill = withFeatures.apply(CacheAttentionSpec.builder().batch(slots).heads(heads).kvHeads(kvHeads)
                .headDim(d).maxQueryLength(capacity).maxTotalQueries(512).maxLength(capacity).causal(causal)).build();
        String tag = features + (pageSize == 0 ? "contiguous" : "paged" + pageSize) + (causal ? " causal" : "") + " D=" + d
                + ": ";
        KvCacheModel model = new KvCacheModel(slots, kvHeads, d, decode.dtype());
        try (KvCache cache = device.kvCache(cacheSpec);
             CacheAttentionPlan decodePlan = device.plan(decode, cacheSpec);
             CacheAttentionPlan prefillPlan = device.plan(prefill, cacheSpec)) {
            int[] prompt = {0, 1, 77, 200};
            model.appendPacked(cache, device, random, prompt);
            results.add(check(tag + "varlen prefill " + Arrays.toString(prompt), device, prefillPlan, cache, model, random, true));
            if (pageSize > 0) {
                // Slot 0 takes slot 3's whole pages in a shuffled order: a block table far from the pool's order.
                int[] pages = Arrays.copyOf(cache.pages(3), 200 / pageSize);
                List<Integer> order = new ArrayList<>();
                for (int i = 0; i < pages.length; i++) {
                    order.add(i);
                }
                java.util.Collections.shuffle(order, random);
                int[] shuffled = new int[pages.length];
                for (int i = 0; i < pages.length; i++) {
                    shuffled[i] = pages[order.get(i)];
                    for (int r = 0; r < pageSize; r++) {
                        model.keys.get(0).add(model.keys.get(3).get(order.get(i) * pageSize + r));
                        model.values.get(0).add(model.values.get(3).get(order.get(i) * pageSize + r));
                    }
                }
                cache.usePages(0, shuffled, pages.length * pageSize);
                model.newTokens[0] = 0;
            }
            for (int stepIndex = 0; stepIndex < 5; stepIndex++) {
                int[] counts = {random.nextInt(2), 1, random.nextInt(2), 1};
                model.appendDense(cache, device, random, 1, counts);
                results.add(check(tag + "decode step " + stepIndex + " " + Arrays.toString(counts), device, decodePlan,
                        cache, model, random, false));
            }
            cache.truncate(2, 50);
            model.truncate(2, 50);
            cache.reset(1);
            model.truncate(1, 0);
            cache.sharePrefix(3, 1, 100);
            model.sharePrefix(3, 1, 100);
            int[] counts = {1, 1, 1, 1};
            model.appendDense(cache, device, random, 1, counts);
            results.add(check(tag + "after truncate, reset and a shared prefix", device, decodePlan, cache, model,
                    random, false));
            int[] speculative = {4, 0, 2, 3};
            model.appendDense(cache, device, random, 4, speculative);
            results.add(check(tag + "speculative step " + Arrays.toString(speculative), device, decodePlan, cache, model,
                    random, false));
            cache.truncate(0, model.length(0) - 3); // reject 3 of the 4 draft tokens
            model.truncate(0, model.length(0) - 3);
            int[] second = {2, 1, 0, 1};
            model.appendPacked(cache, device, random, second);
            results.add(check(tag + "packed step after a rollback " + Arrays.toString(second), device, prefillPlan,
                    cache, model, random, true));
        }
    }

    private static CaseResult check(String name, AttentionDevice device, CacheAttentionPlan plan, KvCache cache,
                                    KvCacheModel model, Random random, boolean packed) {
        CacheAttentionSpec spec = plan.spec();
        long elements = packed ? spec.packedQueryElements() : spec.denseQueryElements();
        long lseElements = packed ? spec.packedLseElements() : spec.denseLseElements();
        float[] q = KvCacheModel.random(spec.dtype(), random, Math.toIntExact(elements));
        try (DeviceTensor dq = KvCacheModel.upload(device, spec.dtype(), q);
             DeviceTensor o = device.allocate(spec.dtype(), elements);
             DeviceTensor lse = device.allocate(DType.FP32, lseElements)) {
            poison(o, lse);
            if (packed) {
                plan.forwardPacked(dq, cache, o, lse);
            } else {
                plan.forward(dq, cache, o, lse);
            }
            float[] out = KvCacheModel.download(device, o);
            float[] l = downloadFloats(device, lse);
            CpuReference.Result expected = model.expected(spec, q, true == packed);
            if (packed) {
                // Only the call's rows are written: compare those.
                int total = cache.totalNewTokens();
                int rowElements = spec.heads() * spec.headDim();
                out = Arrays.copyOf(out, Math.max(1, total * rowElements));
                double[] eo = Arrays.copyOf(expected.output(), out.length);
                float[] lc = new float[spec.heads() * Math.max(1, total)];
                double[] el = new double[lc.length];
                for (int h = 0; h < spec.heads(); h++) {
                    for (int t = 0; t < total; t++) {
                        lc[h * total + t] = l[h * spec.maxTotalQueries() + t];
                        el[h * total + t] = expected.logSumExp()[h * spec.maxTotalQueries() + t];
                    }
                }
                if (total == 0) {
                    return new CaseResult(name, new ErrorStats(0, 0, 0, 0));
                }
                return new CaseResult(name, compare(spec.dtype(), out, eo, lc, el));
            }
            return new CaseResult(name, compare(spec.dtype(), out, expected.output(), l, expected.logSumExp()));
        }
    }

    /** The public combine on random partial results, some parts empty (lse = -inf), one row with none. */
    private static void merge(AttentionDevice device, int d, Random random, List<CaseResult> results) {
        int parts = 3;
        int rows = 37;
        float[] oParts = KvCacheModel.randomFp16(random, parts * rows * d);
        float[] lseParts = new float[parts * rows];
        for (int i = 0; i < lseParts.length; i++) {
            lseParts[i] = random.nextInt(5) == 0 ? Float.NEGATIVE_INFINITY : (float) (random.nextGaussian() * 4);
        }
        for (int i = 0; i < parts; i++) {
            lseParts[i * rows + 5] = Float.NEGATIVE_INFINITY;
        }
        try (DeviceTensor op = KvCacheModel.upload(device, oParts);
             DeviceTensor lp = uploadFloats(device, lseParts);
             DeviceTensor o = device.allocate(DType.FP16, (long) rows * d);
             DeviceTensor lse = device.allocate(DType.FP32, rows)) {
            poison(o, lse);
            device.mergeStates(op, lp, parts, d, o, lse);
            CpuReference.Result expected = CpuReference.merge(oParts, lseParts, parts, rows, d);
            results.add(new CaseResult("merge " + parts + " parts x " + rows + " rows D=" + d,
                    compare(DType.FP16, KvCacheModel.download(device, o), expected.output(), downloadFloats(device, lse),
                            expected.logSumExp())));
        }
    }

    private static ErrorStats compare(DType dtype, float[] out, double[] expected, float[] lse, double[] expectedLse) {
        try (HalfTensor h = HalfTensor.of(dtype, out)) {
            return ErrorStats.compare(h, expected, lse, expectedLse);
        }
    }

    private static void poison(DeviceTensor o, DeviceTensor lse) {
        KvCacheModel.poison(o);
        float[] nans = new float[Math.toIntExact(lse.length())];
        Arrays.fill(nans, Float.NaN);
        try (Arena arena = Arena.ofConfined()) {
            lse.copyFrom(arena.allocateFrom(ValueLayout.JAVA_FLOAT, nans), 0);
        }
    }

    private static DeviceTensor uploadFloats(AttentionDevice device, float[] values) {
        DeviceTensor t = device.allocate(DType.FP32, values.length);
        try (Arena arena = Arena.ofConfined()) {
            t.copyFrom(arena.allocateFrom(ValueLayout.JAVA_FLOAT, values), 0);
        }
        return t;
    }

    static float[] downloadFloats(AttentionDevice device, DeviceTensor t) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment m = arena.allocate(t.byteSize());
            t.copyTo(m, 0);
            device.synchronize();
            return m.toArray(ValueLayout.JAVA_FLOAT);
        }
    }
}
