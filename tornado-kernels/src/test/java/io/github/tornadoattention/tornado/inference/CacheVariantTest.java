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

    @Test
    void whatNoTaskCanServeIsRefusedWhenThePlanIsMade() {
        for (String backend : List.of("tornado-simt", "tornado-mma", "ptx-tornado")) {
            // A head dim no Java cache kernel has (multiples of 16 up to 256).
            CacheAttentionSpec d40 = plan(40).build();
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> TornadoCachePlan.checkServed(backend, d40, cache(40, DType.FP16)));
            assertTrue(e.argument().endsWith("headDim"), backend + ": " + e.getMessage());
            // A non-causal windowed prefill plan: its packed calls run in chunks, which would shift the window.
            CacheAttentionSpec prefill = plan(64).maxQueryLength(64).causal(false).window(16, 4).build();
            e = assertThrows(InvalidArgumentException.class,
                    () -> TornadoCachePlan.checkServed(backend, prefill, cache(64, DType.FP16)));
            assertEquals("window", e.argument(), e.getMessage());
            assertEquals("(16, 4)", e.value(), e.getMessage());
            assertTrue(e.allowed().contains("non-causal prefill plan"), e.getMessage());
            // Served: the same window causal, or non-causal on a decode plan; bf16; head dims 96 and 256.
            TornadoCachePlan.checkServed(backend, prefill.toBuilder().causal(true).build(), cache(64, DType.FP16));
            TornadoCachePlan.checkServed(backend, plan(64).causal(false).window(16, 4).build(), cache(64, DType.FP16));
            TornadoCachePlan.checkServed(backend, plan(96).dtype(DType.BF16).sinks(SINKS).build(), cache(96, DType.BF16));
            TornadoCachePlan.checkServed(backend, plan(256).dtype(DType.BF16).softcap(30f).build(), cache(256, DType.BF16));
        }
    }
}
