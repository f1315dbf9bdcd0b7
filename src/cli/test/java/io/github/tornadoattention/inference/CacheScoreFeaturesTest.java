package io.github.tornadoattention.inference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.TensorStrides;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.verify.CacheSuite;
import io.github.tornadoattention.verify.KvCacheModel;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.Random;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Window, softcap and sinks on the cache paths of the CPU device, against a brute-force restatement of the
 * definition written here (every key tested one by one at the query's own position L - n + j): ragged lengths,
 * contiguous and paged caches, dense (decode, speculative) and packed (varlen prefill) calls, windows reaching right
 * with causal off; merge-with-lse consistency; bad input.
 */
class CacheScoreFeaturesTest {
    private static final int SLOTS = 4;
    private static final int HEADS = 4;
    private static final int KV_HEADS = 2;
    private static final int D = 16;
    private static final int CAPACITY = 160;
    private static final float[] SINKS = {1.5f, -0.5f, 0f, 3f};

    private final AttentionDevice device = Attention.device("cpu-reference");

    private record Features(String name, boolean causal, UnaryOperator<CacheAttentionSpec.Builder> apply) {
    }

    private static final List<Features> FEATURES = List.of(
            new Features("causal window (7, 0) softcap 4 sinks", true, b -> b.window(7, 0).softcap(4f).sinks(SINKS)),
            new Features("non-causal window (6, 3)", false, b -> b.window(6, 3)),
            new Features("non-causal window (-1, 2) sinks", false, b -> b.window(-1, 2).sinks(SINKS)),
            new Features("causal window (3, -1)", true, b -> b.window(3, -1)),
            new Features("non-causal window (0, 0) softcap 2", false, b -> b.window(0, 0).softcap(2f)),
            new Features("causal softcap 1.5", true, b -> b.softcap(1.5f)));

    @ParameterizedTest
    @ValueSource(ints = {0, 16, 4})
    void cpuCachePlanMatchesTheBruteForceDefinition(int pageSize) {
        for (Features f : FEATURES) {
            Random random = new Random(42 + pageSize);
            KvCacheSpec cacheSpec = pageSize == 0 ? KvCacheSpec.contiguous(SLOTS, KV_HEADS, CAPACITY, D)
                    : KvCacheSpec.paged(SLOTS, KV_HEADS, CAPACITY, D, pageSize);
            CacheAttentionSpec decode = f.apply().apply(base(f.causal()).maxQueryLength(4)).build();
            CacheAttentionSpec prefill = f.apply().apply(base(f.causal()).maxQueryLength(CAPACITY).maxTotalQueries(256)).build();
            KvCacheModel model = new KvCacheModel(SLOTS, KV_HEADS, D);
            try (KvCache cache = device.kvCache(cacheSpec);
                 CacheAttentionPlan decodePlan = device.plan(decode, cacheSpec);
                 CacheAttentionPlan prefillPlan = device.plan(prefill, cacheSpec)) {
                String tag = f.name() + (pageSize == 0 ? " contiguous" : " paged" + pageSize);
                model.appendPacked(cache, device, random, new int[] {0, 5, 40, 77});
                check(tag + " varlen prefill", prefillPlan, cache, model, random, true);
                model.appendDense(cache, device, random, 1, new int[] {1, 0, 1, 1});
                check(tag + " decode", decodePlan, cache, model, random, false);
                model.appendDense(cache, device, random, 4, new int[] {4, 2, 0, 3});
                check(tag + " speculative", decodePlan, cache, model, random, false);
                model.appendPacked(cache, device, random, new int[] {2, 9, 1, 0});
                check(tag + " packed step", prefillPlan, cache, model, random, true);
            }
        }
    }

    /** bf16 caches: the CPU plan computes on the bf16 values as held and rounds O once to bf16. */
    @ParameterizedTest
    @ValueSource(ints = {0, 16})
    void aBf16CacheMatchesTheBruteForceDefinition(int pageSize) {
        Features f = FEATURES.get(0);
        Random random = new Random(7 + pageSize);
        KvCacheSpec cacheSpec = (pageSize == 0 ? KvCacheSpec.contiguous(SLOTS, KV_HEADS, CAPACITY, D)
                : KvCacheSpec.paged(SLOTS, KV_HEADS, CAPACITY, D, pageSize)).withDtype(DType.BF16);
        CacheAttentionSpec decode = f.apply().apply(base(f.causal()).maxQueryLength(4)).dtype(DType.BF16).build();
        CacheAttentionSpec prefill = f.apply().apply(base(f.causal()).maxQueryLength(CAPACITY).maxTotalQueries(256))
                .dtype(DType.BF16).build();
        KvCacheModel model = new KvCacheModel(SLOTS, KV_HEADS, D, DType.BF16);
        try (KvCache cache = device.kvCache(cacheSpec);
             CacheAttentionPlan decodePlan = device.plan(decode, cacheSpec);
             CacheAttentionPlan prefillPlan = device.plan(prefill, cacheSpec)) {
            model.appendPacked(cache, device, random, new int[] {0, 5, 40, 77});
            check("bf16 varlen prefill", prefillPlan, cache, model, random, true);
            model.appendDense(cache, device, random, 1, new int[] {1, 0, 1, 1});
            check("bf16 decode", decodePlan, cache, model, random, false);
            // One type per call: an fp16 query over the bf16 cache is refused naming q.
            try (DeviceTensor q16 = device.allocate(DType.FP16, decode.denseQueryElements());
                 DeviceTensor o = device.allocate(DType.BF16, decode.denseQueryElements())) {
                refused("q.dtype", () -> decodePlan.forward(q16, cache, o, null));
            }
            // An fp16 append into the bf16 cache: refused naming the new keys, the cache unchanged.
            try (DeviceTensor k16 = device.allocate(DType.FP16, (long) SLOTS * KV_HEADS * D)) {
                int before = cache.length(0);
                refused("newKeys.dtype", () -> cache.append(k16, k16, io.github.tornadoattention.Layout.BHSD, 1, 1, 1, 1, 1));
                assertEquals(before, cache.length(0));
            }
        }
    }

    @Test
    void theCacheSuiteWithFeaturesPassesOnCpuReference() {
        List<CacheSuite.CaseResult> results = CacheSuite.runWithFeatures(device, 32, 2026L);
        assertTrue(results.size() >= 6 * 9, "scenarios ran: " + results.size());
        for (CacheSuite.CaseResult r : results) {
            assertTrue(r.passed(), r.name() + ": " + r.error());
        }
    }

    /**
     * Merge-with-lse is consistent with sinks: a sink is a part with O = 0 and lse = the sink, so merging the result
     * without sinks with that part gives the result with them (a sink belongs to one part of a split, not to each).
     */
    @Test
    void aSinkMergesAsAPartWithNoValue() {
        Random random = new Random(3);
        KvCacheModel model = new KvCacheModel(SLOTS, KV_HEADS, D);
        try (KvCache cache = device.kvCache(KvCacheSpec.paged(SLOTS, KV_HEADS, CAPACITY, D, 16))) {
            model.appendPacked(cache, device, random, new int[] {3, 20, 50, 1});
            model.appendDense(cache, device, random, 2, new int[] {2, 2, 2, 1});
        }
        CacheAttentionSpec plain = base(true).maxQueryLength(2).window(9, 0).softcap(3f).build();
        CacheAttentionSpec sunk = plain.toBuilder().sinks(SINKS).build();
        float[] q = KvCacheModel.randomFp16(random, Math.toIntExact(plain.denseQueryElements()));
        CpuReference.Result without = model.expected(plain, q, false);
        CpuReference.Result with = model.expected(sunk, q, false);
        int rows = Math.toIntExact(plain.denseLseElements());
        float[] oParts = new float[2 * rows * D];
        float[] lseParts = new float[2 * rows];
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < D; c++) {
                oParts[r * D + c] = (float) without.output()[r * D + c];
            }
            lseParts[r] = (float) without.logSumExp()[r];
            lseParts[rows + r] = SINKS[(r / plain.maxQueryLength()) % HEADS];
        }
        CpuReference.Result merged = CpuReference.merge(oParts, lseParts, 2, rows, D);
        for (int r = 0; r < rows; r++) {
            int b = r / (HEADS * plain.maxQueryLength());
            if (r % plain.maxQueryLength() >= model.newTokens[b]) {
                continue; // a padding row is no query
            }
            assertEquals(with.logSumExp()[r], merged.logSumExp()[r], 1e-5, "lse row " + r);
            for (int c = 0; c < D; c++) {
                assertEquals(with.output()[r * D + c], merged.output()[r * D + c], 1e-5, "O row " + r);
            }
        }
    }

    @Test
    void theVisibleRangeIsTheDenseRuleAtEachSequencesPosition() {
        CacheAttentionSpec spec = base(false).window(4, 2).build();
        // L = 20, n = 3: query 0 sits at 17 and sees 13..19 (the right side stops at L - 1).
        assertEquals(13, spec.firstVisibleKey(20, 3, 0));
        assertEquals(19, spec.lastVisibleKey(20, 3, 0));
        assertEquals(15, spec.firstVisibleKey(20, 3, 2));
        CacheAttentionSpec causal = base(true).window(4, 2).build();
        assertEquals(17, causal.lastVisibleKey(20, 3, 0));
        assertEquals(0, base(true).build().firstVisibleKey(20, 3, 0));
        assertEquals(List.of("window", "softcap", "sinks"), causal.toBuilder().softcap(2f).sinks(SINKS).build().features());
        assertEquals(List.of(), base(true).build().features());
    }

    @Test
    void badFeaturesAreRefusedByNameWhenTheSpecIsBuilt() {
        long plans = CacheAttentionPlan.created();
        refused("window.left", () -> base(true).window(-2, 0).build());
        refused("window.right", () -> base(true).window(8, -5).build());
        refused("softcap", () -> base(true).softcap(-1f).build());
        refused("softcap", () -> base(true).softcap(Float.NaN).build());
        refused("softcap", () -> base(true).softcap(Float.POSITIVE_INFINITY).build());
        refused("sinks", () -> base(true).sinks(new float[] {1f, 2f}).build());
        refused("sinks", () -> base(true).sinks(new float[0]).build());
        refused("sinks", () -> base(true).sinks(new float[] {0f, Float.NaN, 0f, 0f}).build());
        assertEquals(plans, CacheAttentionPlan.created());
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> base(true).sinks(new float[3]).build());
        assertEquals("sinks = length 3: must hold one logit per query head: length heads = 4", e.getMessage());
        assertEquals(0f, base(true).softcap(-0f).build().softcap());
    }

    private static CacheAttentionSpec.Builder base(boolean causal) {
        return CacheAttentionSpec.builder().batch(SLOTS).heads(HEADS).kvHeads(KV_HEADS).headDim(D).maxLength(CAPACITY)
                .causal(causal);
    }

    private void check(String name, CacheAttentionPlan plan, KvCache cache, KvCacheModel model, Random random, boolean packed) {
        CacheAttentionSpec spec = plan.spec();
        long elements = packed ? spec.packedQueryElements() : spec.denseQueryElements();
        long lseElements = packed ? spec.packedLseElements() : spec.denseLseElements();
        float[] q = KvCacheModel.random(spec.dtype(), random, Math.toIntExact(elements));
        float[] out;
        float[] lse;
        // O is rounded once to the spec's type: bf16 keeps 8 significant bits (half an ulp: 2^-8 relative).
        double tolerance = spec.dtype() == DType.BF16 ? 4e-3 : 2e-3;
        try (DeviceTensor dq = KvCacheModel.upload(device, spec.dtype(), q);
             DeviceTensor o = device.allocate(spec.dtype(), elements);
             DeviceTensor l = device.allocate(DType.FP32, lseElements)) {
            if (packed) {
                plan.forwardPacked(dq, cache, o, l);
            } else {
                plan.forward(dq, cache, o, l);
            }
            out = KvCacheModel.download(device, o);
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment m = arena.allocate(l.byteSize());
                l.copyTo(m, 0);
                device.synchronize();
                lse = m.toArray(ValueLayout.JAVA_FLOAT);
            }
        }
        TensorStrides dense = spec.denseQueryStrides();
        int offset = 0;
        int visibleRows = 0;
        for (int b = 0; b < SLOTS; b++) {
            int length = model.length(b);
            int n = model.newTokens[b];
            for (int h = 0; h < HEADS; h++) {
                for (int j = 0; j < n; j++) {
                    long row = packed ? ((long) offset + j) * HEADS * D + (long) h * D : dense.rowStart(b, h, j);
                    int lseAt = packed ? h * spec.maxTotalQueries() + offset + j : (b * HEADS + h) * spec.maxQueryLength() + j;
                    double[] expected = new double[D];
                    double expectedLse = bruteForce(spec, model, q, row, b, h, length, n, j, expected);
                    String at = name + ": slot " + b + " head " + h + " query " + j + " of " + n + " over " + length;
                    assertEquals(expectedLse, lse[lseAt], 1e-4 * Math.max(1, Math.abs(expectedLse)), at + " lse");
                    for (int c = 0; c < D; c++) {
                        assertEquals(expected[c], out[(int) (row + c)], tolerance * Math.max(1, Math.abs(expected[c])), at + " O");
                    }
                    visibleRows++;
                }
            }
            offset += n;
        }
        assertTrue(visibleRows > 0, name);
    }

    /**
     * The definition restated: query j of slot b's n new tokens sits at p = L - n + j; key k counts iff k < L, (not
     * causal or k <= p), (left = -1 or k >= p - left), (right = -1 or k <= p + right). Returns the lse.
     */
    private static double bruteForce(CacheAttentionSpec spec, KvCacheModel model, float[] q, long row, int b, int h,
                                     int length, int n, int j, double[] out) {
        int p = length - n + j;
        int kvHead = h / (HEADS / KV_HEADS);
        double sink = spec.sinks().isEmpty() ? Double.NEGATIVE_INFINITY : spec.sinks().get(h);
        double[] scores = new double[length];
        boolean[] seen = new boolean[length];
        double max = sink;
        for (int k = 0; k < length; k++) {
            seen[k] = (!spec.causal() || k <= p) && (spec.windowLeft() < 0 || k >= p - spec.windowLeft())
                    && (spec.windowRight() < 0 || k <= p + spec.windowRight());
            if (!seen[k]) {
                continue;
            }
            float[] key = model.keys.get(b).get(k)[kvHead];
            double dot = 0;
            for (int c = 0; c < D; c++) {
                dot += (double) q[(int) (row + c)] * key[c];
            }
            double s = spec.scale() * dot;
            scores[k] = spec.softcap() > 0 ? spec.softcap() * Math.tanh(s / spec.softcap()) : s;
            max = Math.max(max, scores[k]);
        }
        if (max == Double.NEGATIVE_INFINITY) {
            return max;
        }
        double sum = Math.exp(sink - max);
        for (int k = 0; k < length; k++) {
            if (seen[k]) {
                sum += Math.exp(scores[k] - max);
            }
        }
        for (int k = 0; k < length; k++) {
            if (seen[k]) {
                double w = Math.exp(scores[k] - max) / sum;
                float[] value = model.values.get(b).get(k)[kvHead];
                for (int c = 0; c < D; c++) {
                    out[c] += w * value[c];
                }
            }
        }
        return max + Math.log(sum);
    }

    private static void refused(String argument, Executable call) {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, call);
        assertEquals(argument, e.argument(), e.getMessage());
    }
}
