package io.github.tornadoattention.cpu;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.verify.OnlineSoftmaxReference;
import java.util.SplittableRandom;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.api.Test;
import java.util.stream.Stream;

/** The oracle against cases worked out by hand and against an independent second formulation. */
class CpuReferenceTest {
    private static final double EXACT = 1e-12;

    private static AttentionShape.Builder one() {
        return AttentionShape.builder().batch(1).heads(1).queryLength(1).headDim(1).scale(1f);
    }

    @Test
    void twoKeysByHand() {
        // q = 1, keys 0 and 1: scores 0 and 1, weights 1/(1+e) and e/(1+e); values 2 and 4.
        AttentionShape s = one().kvLength(2).build();
        CpuReference.Result r = CpuReference.compute(s, new float[] {1}, new float[] {0, 1}, new float[] {2, 4});
        double e = Math.E;
        assertEquals((2 + 4 * e) / (1 + e), r.output()[0], EXACT);
        assertEquals(Math.log(1 + e), r.logSumExp()[0], EXACT);
    }

    @Test
    void scaleMultipliesTheScores() {
        // scale 0.5, q = 2, keys 1 and 3: scores 1 and 3.
        AttentionShape s = one().kvLength(2).scale(0.5f).build();
        CpuReference.Result r = CpuReference.compute(s, new float[] {2}, new float[] {1, 3}, new float[] {10, 20});
        double w1 = Math.exp(1) / (Math.exp(1) + Math.exp(3));
        assertEquals(10 * w1 + 20 * (1 - w1), r.output()[0], EXACT);
        assertEquals(Math.log(Math.exp(1) + Math.exp(3)), r.logSumExp()[0], EXACT);
    }

    @Test
    void equalScoresAverageTheValues() {
        // D = 2, q = 0: every score is 0, so O is the mean of V and lse = log(3).
        AttentionShape s = one().headDim(2).kvLength(3).build();
        CpuReference.Result r = CpuReference.compute(s, new float[] {0, 0}, new float[] {1, 2, 3, 4, 5, 6},
                new float[] {1, 10, 2, 20, 6, 60});
        assertArrayEquals(new double[] {3, 30}, r.output(), EXACT);
        assertEquals(Math.log(3), r.logSumExp()[0], EXACT);
    }

    @Test
    void causalMaskIsBottomRightAligned() {
        // Sq = 3, Skv = 2: row 0 sees no key, row 1 sees key 0, row 2 sees keys 0 and 1.
        AttentionShape s = one().queryLength(3).kvLength(2).causal(true).build();
        CpuReference.Result r = CpuReference.compute(s, new float[] {1, 1, 1}, new float[] {0, 0},
                new float[] {5, 7});
        assertArrayEquals(new double[] {0, 5, 6}, r.output(), EXACT);
        assertEquals(Double.NEGATIVE_INFINITY, r.logSumExp()[0]);
        assertEquals(0, r.logSumExp()[1], EXACT);
        assertEquals(Math.log(2), r.logSumExp()[2], EXACT);
        // Sq = 2, Skv = 3: row 0 sees keys 0..1, row 1 sees all three.
        AttentionShape wide = one().queryLength(2).kvLength(3).causal(true).build();
        CpuReference.Result w = CpuReference.compute(wide, new float[] {0, 0}, new float[] {0, 0, 0},
                new float[] {3, 5, 10});
        assertArrayEquals(new double[] {4, 6}, w.output(), EXACT);
    }

    @Test
    void groupedQueryHeadsShareTheirKvHead() {
        // Hq = 4, Hkv = 2, one key per head: O of query head h is V of kv head h/2.
        AttentionShape s = one().heads(4).kvHeads(2).build();
        CpuReference.Result r = CpuReference.compute(s, new float[] {1, 2, 3, 4}, new float[] {1, 1},
                new float[] {7, 9});
        assertArrayEquals(new double[] {7, 7, 9, 9}, r.output(), EXACT);
    }

    @Test
    void bshdIndexesTokensBeforeHeads() {
        // Hq = Hkv = 2, Sq = Skv = 2, D = 1, BSHD: element (s, h) sits at s*2 + h. Keys of head 1 are
        // [0, 100] so its rows pick value (s=1, h=1); head 0's keys are equal so it averages.
        AttentionShape s = one().heads(2).queryLength(2).layout(Layout.BSHD).build();
        float[] q = {1, 1, 1, 1};
        float[] k = {0, 0, 0, 100};
        float[] v = {1, 10, 3, 30};
        CpuReference.Result r = CpuReference.compute(s, q, k, v);
        assertArrayEquals(new double[] {2, 30, 2, 30}, r.output(), 1e-9);
    }

    static Stream<Arguments> randomShapes() {
        return Stream.of(
                Arguments.of(AttentionShape.builder().batch(2).heads(4).queryLength(37).kvLength(100).headDim(16).causal(true).build()),
                Arguments.of(AttentionShape.builder().batch(1).heads(6).kvHeads(2).queryLength(50).kvLength(17).headDim(8).causal(true).build()),
                Arguments.of(AttentionShape.builder().batch(3).heads(4).kvHeads(1).queryLength(65).headDim(32).layout(Layout.BSHD).build()),
                Arguments.of(AttentionShape.builder().batch(1).heads(2).queryLength(130).kvLength(70).headDim(64).scale(0.9f).layout(Layout.BSHD).causal(true).build()));
    }

    @ParameterizedTest
    @MethodSource("randomShapes")
    void agreesWithTheOnlineSoftmaxFormulation(AttentionShape shape) {
        SplittableRandom random = new SplittableRandom(shape.hashCode());
        float[] q = gaussian(shape.queryElements(), random);
        float[] k = gaussian(shape.kvElements(), random);
        float[] v = gaussian(shape.kvElements(), random);
        CpuReference.Result r = CpuReference.compute(shape, q, k, v);
        double[][] second = OnlineSoftmaxReference.compute(shape, q, k, v);
        assertArrayEquals(second[0], r.output(), 1e-9);
        assertArrayEquals(second[1], r.logSumExp(), 1e-9);
        boolean anyNonZero = false;
        for (double x : r.output()) {
            anyNonZero |= x != 0;
        }
        assertTrue(anyNonZero);
    }

    private static float[] gaussian(long n, SplittableRandom random) {
        float[] x = new float[(int) n];
        for (int i = 0; i < x.length; i++) {
            x[i] = (float) random.nextGaussian();
        }
        return x;
    }
}
