package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.LaunchTable;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Window, softcap and sinks on the dense shape: validation, the visible range, and the refusals of other backends. */
class ScoreFeaturesTest {
    private static AttentionShape.Builder shape() {
        return AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(300).headDim(64);
    }

    @Test
    void defaultsAreOffAndTheOldConstructorMeansNone() {
        AttentionShape s = shape().build();
        assertEquals(-1, s.windowLeft());
        assertEquals(-1, s.windowRight());
        assertEquals(0f, s.softcap());
        assertEquals(List.of(), s.sinks());
        assertEquals(List.of(), s.features());
        assertEquals(s, new AttentionShape(2, 4, 2, 300, 300, 64, false, AttentionShape.defaultScale(64), Layout.BHSD));
        assertFalse(s.toString().contains("window") || s.toString().contains("softcap") || s.toString().contains("sinks"));
    }

    @Test
    void featuresAreValuesAndShowInToString() {
        float[] logits = {0.5f, -1f, 2f, 0f};
        AttentionShape s = shape().window(128, 0).softcap(30f).sinks(logits).build();
        logits[0] = 99f; // the shape keeps its own copy
        assertEquals(List.of(0.5f, -1f, 2f, 0f), s.sinks());
        assertThrows(UnsupportedOperationException.class, () -> s.sinks().set(0, 1f));
        assertEquals(s, shape().window(128, 0).softcap(30f).sinks(new float[] {0.5f, -1f, 2f, 0f}).build());
        assertEquals(s.hashCode(), shape().window(128, 0).softcap(30f).sinks(new float[] {0.5f, -1f, 2f, 0f}).build().hashCode());
        assertNotEquals(s, shape().window(128, 0).softcap(30f).sinks(new float[] {0.5f, -1f, 2f, 1f}).build());
        assertEquals(s, s.toBuilder().build());
        assertEquals(List.of("window", "softcap", "sinks"), s.features());
        assertTrue(s.toString().endsWith(" window=(128,0) softcap=30.0 sinks"), s.toString());
        assertEquals(0.5, s.sink(0));
        assertEquals(Double.NEGATIVE_INFINITY, shape().build().sink(0));
        assertEquals(List.of("window"), shape().window(-1, 5).build().features());
        assertEquals(0f, shape().softcap(-0f).build().softcap()); // -0 is off, equal to 0
    }

    /** Bad input: one exception naming the argument, its value and what is allowed. */
    @Test
    void badFeaturesAreRefusedByName() {
        InvalidArgumentException left = assertThrows(InvalidArgumentException.class, () -> shape().window(-2, 0).build());
        assertEquals("window.left", left.argument());
        assertEquals("-2", left.value());
        assertTrue(left.allowed().contains("-1 (unbounded)"), left.allowed());
        InvalidArgumentException right = assertThrows(InvalidArgumentException.class, () -> shape().window(3, -7).build());
        assertEquals("window.right = -7: must be -1 (unbounded) or a number of keys >= 0", right.getMessage());
        for (float bad : new float[] {-1f, Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY}) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> shape().softcap(bad).build());
            assertEquals("softcap", e.argument());
            assertEquals(String.valueOf(bad), e.value());
            assertTrue(e.allowed().contains("finite number > 0"), e.allowed());
        }
        InvalidArgumentException length = assertThrows(InvalidArgumentException.class,
                () -> shape().sinks(new float[] {1f, 2f}).build());
        assertEquals("sinks = length 2: must hold one logit per query head: length heads = 4", length.getMessage());
        assertEquals("sinks", assertThrows(InvalidArgumentException.class, () -> shape().sinks(new float[0]).build()).argument());
        InvalidArgumentException nan = assertThrows(InvalidArgumentException.class,
                () -> shape().sinks(new float[] {0f, 0f, Float.NaN, 0f}).build());
        assertEquals("sinks = [2] = NaN: every sink logit must be finite", nan.getMessage());
        assertEquals("sinks", assertThrows(InvalidArgumentException.class, () -> new AttentionShape(1, 2, 2, 4, 4, 64, false,
                0.1f, Layout.BHSD, -1, -1, 0f, java.util.Arrays.asList(1f, null))).argument());
    }

    /** The visible range, worked out by hand from i + Skv - Sq - left <= j <= i + Skv - Sq + right. */
    @Test
    void visibleRangeFollowsFlashAttentionsWindow() {
        // Sq = Skv = 6, left 2: row 4 sees 2..4 with causal, 2..5 without (right unbounded).
        AttentionShape square = AttentionShape.builder().queryLength(6).window(2, -1).build();
        assertEquals(2, square.firstVisibleKey(4));
        assertEquals(5, square.lastVisibleKey(4));
        assertEquals(4, square.toBuilder().causal(true).build().lastVisibleKey(4));
        // Right only: row 0 sees 0..1.
        AttentionShape rightOnly = AttentionShape.builder().queryLength(6).window(-1, 1).build();
        assertEquals(0, rightOnly.firstVisibleKey(0));
        assertEquals(1, rightOnly.lastVisibleKey(0));
        // Causal with right 3: causal is the tighter bound (as FlashAttention sets right to 0 under causal).
        assertEquals(2, AttentionShape.builder().queryLength(6).causal(true).window(1, 3).build().lastVisibleKey(2));
        // Sq = 4, Skv = 10 (offset 6): row 1 with (2, 1) sees 5..8.
        AttentionShape wide = AttentionShape.builder().queryLength(4).kvLength(10).window(2, 1).build();
        assertEquals(5, wide.firstVisibleKey(1));
        assertEquals(8, wide.lastVisibleKey(1));
        assertEquals(4, wide.visibleKeys(1));
        assertTrue(wide.sees(1, 5) && wide.sees(1, 8) && !wide.sees(1, 4) && !wide.sees(1, 9));
        // Sq = 10, Skv = 4 (offset -6), right 0: rows 0..5 see nothing, row 6 sees key 0.
        AttentionShape tall = AttentionShape.builder().queryLength(10).kvLength(4).window(-1, 0).build();
        assertEquals(0, tall.visibleKeys(5));
        assertEquals(-1, tall.lastVisibleKey(5));
        assertEquals(1, tall.visibleKeys(6));
        // flops count the visible pairs.
        AttentionShape w = AttentionShape.builder().queryLength(100).window(9, 0).headDim(8).build();
        double pairs = 0;
        for (int i = 0; i < 100; i++) {
            pairs += Math.min(i, 9) + 1;
        }
        assertEquals(4.0 * 8 * pairs, w.flops());
    }

    /**
     * ptx-cuda and ptx-tornado find each feature in the manifest like any variant field: every launch of a shape with
     * it runs an entry that lists it (a refusal by the feature's name, where a table lacks it, is LaunchTableTest's).
     */
    @ParameterizedTest
    @ValueSource(strings = {"window", "softcap", "sinks"})
    void ptxHostsServeEachFeatureThroughTheManifestLookup(String feature) {
        KernelVariant.Feature f = KernelVariant.Feature.valueOf(feature.toUpperCase(java.util.Locale.ROOT));
        for (int seq : new int[] {300, 1}) { // prefill and decode kernels
            AttentionShape s = with(shape().queryLength(seq).kvLength(300), feature).build();
            Backends.get(Backends.PTX_CUDA).checkSupported(s);
            LaunchTable.checkSupported("ptx-tornado", s);
            for (LaunchTable.Launch launch : LaunchTable.launches(s, 2)) {
                assertTrue(launch.kernel().features().contains(f), launch.entry());
            }
        }
        assertTrue(KernelManifest.shipped().select(KernelVariant.of(KernelVariant.Kind.PREFILL, DType.FP16, 64)
                .features(Set.of(f))).features().contains(f));
    }

    /** auto skips backends that refuse a feature; here the CPU reference serves it. */
    @Test
    void autoPlansFeaturesOnTheCpuReference() {
        AttentionShape s = shape().queryLength(8).window(2, 0).softcap(20f).sinks(new float[4]).build();
        try (AttentionPlan plan = Backends.get(Backends.AUTO).plan(s)) {
            assertEquals(Backends.CPU_REFERENCE, plan.backendId());
        }
        try (AttentionPlan plan = Attention.plan(s)) {
            assertEquals(Backends.CPU_REFERENCE, plan.backendId());
        }
    }

    static AttentionShape.Builder with(AttentionShape.Builder b, String feature) {
        return switch (feature) {
            case "window" -> b.window(64, 0);
            case "softcap" -> b.softcap(50f);
            case "sinks" -> b.sinks(new float[] {0.1f, 0.2f, 0.3f, 0.4f});
            default -> throw new IllegalArgumentException(feature);
        };
    }
}
