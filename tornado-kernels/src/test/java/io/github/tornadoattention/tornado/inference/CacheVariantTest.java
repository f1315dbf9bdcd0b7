package io.github.tornadoattention.tornado.inference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.tornado.engine.CacheEmulation;
import io.github.tornadoattention.tornado.inference.CacheGraph.VariantKey;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The inference device's graph variants carry the plan's whole attention definition: two plans that differ only in a
 * feature (window, softcap, the sink values) or the element type are two variants, and the spec a variant's tasks are
 * built from ({@link VariantKey#spec}) computes what the plan defines: its Java kernels, run on the KernelEmulator with
 * outputs poisoned, match the CPU reference of the plan's own spec (a key without the features ran every plan without
 * them: a silently wrong answer on the GPU, found by {@code selftest --inference}). And what no task of a cache's graph
 * can serve is refused when the plan is made ({@link TornadoCachePlan#checkServed}).
 */
class CacheVariantTest {
    private static final int SLOTS = 3;
    private static final int ROWS = 4;   // staging rows per slot: the plans' maxQueryLength, so the shapes are the plan's
    private static final float[] SINKS = {0.9f, -0.6f, 1.7f, 0.0f};

    private static CacheAttentionSpec.Builder plan(int d) {
        return CacheAttentionSpec.builder().batch(SLOTS).heads(4).kvHeads(2).headDim(d).maxQueryLength(ROWS)
                .maxLength(160).causal(true);
    }

    private static KvCacheSpec cache(int d, DType dtype) {
        return KvCacheSpec.paged(SLOTS, 2, 160, d, 16).withDtype(dtype);
    }

    @Test
    void plansThatDifferOnlyInTheirFeaturesOrTypeAreDistinctVariants() {
        CacheAttentionSpec base = plan(64).build();
        List<CacheAttentionSpec> specs = List.of(base, base.toBuilder().window(16, 0).build(),
                base.toBuilder().window(16, 5).build(), base.toBuilder().window(32, 0).build(),
                base.toBuilder().softcap(30f).build(), base.toBuilder().softcap(20f).build(),
                base.toBuilder().sinks(SINKS).build(), base.toBuilder().sinks(new float[] {0.9f, -0.6f, 1.7f, 0.5f}).build(),
                base.toBuilder().dtype(DType.BF16).build());
        Set<VariantKey> keys = new java.util.HashSet<>();
        for (CacheAttentionSpec s : specs) {
            assertTrue(keys.add(VariantKey.of(s, false)), "a variant of its own: " + s);
        }
        // The same definition is the same variant (another maxQueryLength is the staging's, not the variant's).
        assertEquals(VariantKey.of(base.toBuilder().sinks(SINKS).build(), false),
                VariantKey.of(base.toBuilder().sinks(SINKS.clone()).maxQueryLength(2).build(), false));
        assertNotEquals(VariantKey.of(base, false), VariantKey.of(base, true), "dense and packed");
    }

    @Test
    void aVariantsSpecHasThePlansDefinition() {
        CacheAttentionSpec p = plan(96).window(24, 3).softcap(2.5f).sinks(SINKS).scale(0.2f).causal(false)
                .dtype(DType.BF16).build();
        CacheAttentionSpec built = VariantKey.of(p, false).spec(cache(96, DType.BF16), ROWS);
        assertEquals(p.toBuilder().maxLength(160).build(), built, "the plan's spec, staging rows and capacity aside");
        assertEquals(List.of("window", "softcap", "sinks"), built.features());
    }

    /**
     * The variant's kernels against the plan's reference, each feature on its own and all together, fp16 and bf16, head
     * dims 96 and 256 (Java cache kernels: multiples of 16 up to 256); and, so that the check is known to catch it, a
     * spec built without the features (what the graph built before) fails the same comparison.
     */
    @Test
    void aVariantsKernelsComputeThePlansAttention() {
        int[] lengths = {5, 150, 77};
        int[] newTokens = {3, 2, 0};
        long seed = 1000;
        for (DType dtype : List.of(DType.FP16, DType.BF16)) {
            for (int d : new int[] {64, 96, 256}) {
                List<CacheAttentionSpec> plans = List.of(plan(d).dtype(dtype).window(16, 0).build(),
                        plan(d).dtype(dtype).causal(false).window(16, 5).build(),
                        plan(d).dtype(dtype).softcap(1.5f).build(), plan(d).dtype(dtype).sinks(SINKS).build(),
                        plan(d).dtype(dtype).window(40, 0).softcap(2.5f).sinks(SINKS).build());
                for (CacheAttentionSpec p : plans) {
                    if (d != 64 && !p.features().equals(List.of("window", "softcap", "sinks"))) {
                        continue;   // D 96 and 256: all three together (the emulator is slow)
                    }
                    CacheAttentionSpec built = VariantKey.of(p, false).spec(cache(d, dtype), ROWS);
                    CacheEmulation.decode(built, p, cache(d, dtype), 3, lengths, newTokens, seed++);
                    CacheAttentionSpec packed = VariantKey.of(p, true).spec(cache(d, dtype), ROWS);
                    assertEquals(built.features(), packed.features());
                }
            }
        }
        CacheAttentionSpec p = plan(64).window(16, 0).softcap(1.5f).sinks(SINKS).build();
        CacheAttentionSpec withoutFeatures = CacheAttentionSpec.builder().batch(SLOTS).heads(4).kvHeads(2).headDim(64)
                .maxQueryLength(ROWS).maxLength(160).causal(true).scale(p.scale()).build();
        assertThrows(AssertionError.class, () -> CacheEmulation.decode(withoutFeatures, p, cache(64, DType.FP16), 3,
                lengths, newTokens, 2000), "the comparison catches a variant without the plan's features");
    }

    /**
     * A packed call as the device runs it: the packed variant's chunked decode over chunks of {@code ROWS} queries per
     * slot staged by {@link StagingRows#stagePackedQueries} and gathered by {@link StagingRows#unstagePackedOutputs},
     * on the emulator, against the reference of the whole packed call: prompts longer than a chunk, causal and not, with
     * windows reaching left and right (a chunk's queries keep their positions), softcap and sinks; fp16 and bf16. As
     * the graph built it before (chunks without their positions), the non-causal window fails the comparison.
     */
    @Test
    void packedCallsInChunksKeepEachQuerysPosition() {
        int[] lengths = {30, 0, 150};
        int[] newTokens = {23, 0, 11};   // slot 0: its whole prompt; slot 2: 11 tokens after a prefix of 139
        for (DType dtype : List.of(DType.FP16, DType.BF16)) {
            for (boolean causal : new boolean[] {true, false}) {
                CacheAttentionSpec p = plan(64).dtype(dtype).maxQueryLength(32).maxTotalQueries(40).causal(causal)
                        .window(5, causal ? 0 : 3).softcap(2f).sinks(SINKS).build();
                packed(p, cache(64, dtype), lengths, newTokens, true, 3000 + (causal ? 1 : 0) + 2 * dtype.ordinal());
            }
        }
        CacheAttentionSpec p = plan(64).maxQueryLength(32).maxTotalQueries(40).causal(false).window(5, 3).build();
        assertThrows(AssertionError.class, () -> packed(p, cache(64, DType.FP16), lengths, newTokens, false, 3100),
                "chunks that do not keep their positions shift a non-causal window");
    }

    /** {@code spec}'s packed call over a random cache, run as the device runs it ({@code chunked}: the variant's tasks). */
    private static void packed(CacheAttentionSpec spec, KvCacheSpec cacheSpec, int[] lengths, int[] newTokens,
                               boolean chunked, long seed) {
        java.util.Random random = new java.util.Random(seed);
        DType dtype = spec.dtype();
        CacheEmulation.Cache c = new CacheEmulation.Cache(cacheSpec, random);
        int slots = SLOTS;
        int heads = spec.heads();
        int d = spec.headDim();
        int[] step = new int[3 * slots + 1];
        for (int b = 0; b < slots; b++) {
            step[b] = lengths[b];
            step[slots + b] = newTokens[b];
            step[2 * slots + b] = step[3 * slots];
            step[3 * slots] += newTokens[b];
        }
        int maxTotal = spec.maxTotalQueries();
        float[] qf = new float[maxTotal * heads * d];
        var q = CacheEmulation.randomTensor(dtype, random, qf);
        var o = CacheEmulation.poisoned(dtype, maxTotal * heads * d);
        var lse = CacheEmulation.poisonedFloats(heads * maxTotal);
        CacheAttentionSpec task = VariantKey.of(spec, true).spec(cacheSpec, ROWS);
        var stagedQ = CacheEmulation.poisoned(dtype, SLOTS * heads * ROWS * d);
        int maxNew = StagingRows.maxNew(step, slots);
        for (int j0 = 0; j0 < maxNew; j0 += ROWS) {
            int[] chunk = StagingRows.stagePackedQueries(q.getSegment(), stagedQ.getSegment(), step, slots, heads, ROWS,
                    d, spec.causal(), j0);
            if (!chunked) {
                java.util.Arrays.fill(chunk, 2 * slots, 3 * slots, 0);
            }
            var stagedO = CacheEmulation.poisoned(dtype, SLOTS * heads * ROWS * d);
            var stagedLse = CacheEmulation.poisonedFloats(SLOTS * heads * ROWS);
            CacheEmulation.runDecode(task, chunked, c, 2, uk.ac.manchester.tornado.api.types.arrays.IntArray.fromArray(chunk),
                    stagedQ, stagedO, stagedLse);
            StagingRows.unstagePackedOutputs(stagedO.getSegment(), stagedLse.getSegment(), o.getSegment(),
                    lse.getSegment(), chunk, step, slots, heads, ROWS, d, maxTotal, j0);
        }
        io.github.tornadoattention.cpu.CpuReference.Result ref = io.github.tornadoattention.cpu.CpuReference.cached(spec,
                qf, true, c.keys(), c.values(), lengths, newTokens);
        int total = step[3 * slots];
        float[] out = CacheEmulation.values(o);
        for (int i = total * heads * d; i < out.length; i++) {
            out[i] = (float) ref.output()[i];   // rows past the total are not the call's
        }
        for (int h = 0; h < heads; h++) {
            for (int t = total; t < maxTotal; t++) {
                lse.set(h * maxTotal + t, (float) ref.logSumExp()[h * maxTotal + t]);
            }
        }
        CacheEmulation.compare("packed in chunks of " + ROWS + " " + dtype.label() + " causal=" + spec.causal()
                + " features=" + spec.features(), dtype, out, lse, ref, (long) heads * maxTotal);
    }

    @Test
    void whatNoTaskCanServeIsRefusedWhenThePlanIsMade() {
        for (String backend : List.of("tornado-simt", "tornado-mma", "ptx-tornado")) {
            // A head dim no Java cache kernel has (multiples of 16 up to 256).
            CacheAttentionSpec d40 = plan(40).build();
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> TornadoCachePlan.checkServed(backend, d40, cache(40, DType.FP16)));
            assertTrue(e.argument().endsWith("headDim"), backend + ": " + e.getMessage());
            // Served: windowed prefill plans (packed calls run in chunks that keep their positions), causal or not;
            // bf16; head dims 96 and 256.
            CacheAttentionSpec prefill = plan(64).maxQueryLength(64).causal(false).window(16, 4).build();
            TornadoCachePlan.checkServed(backend, prefill, cache(64, DType.FP16));
            TornadoCachePlan.checkServed(backend, prefill.toBuilder().causal(true).build(), cache(64, DType.FP16));
            TornadoCachePlan.checkServed(backend, plan(64).causal(false).window(16, 4).build(), cache(64, DType.FP16));
            TornadoCachePlan.checkServed(backend, plan(96).dtype(DType.BF16).sinks(SINKS).build(), cache(96, DType.BF16));
            TornadoCachePlan.checkServed(backend, plan(256).dtype(DType.BF16).softcap(30f).build(), cache(256, DType.BF16));
        }
    }
}
