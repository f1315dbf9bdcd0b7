package io.github.tornadoattention.cpu;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.verify.OnlineSoftmaxReference;
import java.util.SplittableRandom;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Window, softcap and sinks in the CPU reference, against a brute-force restatement of the definition (written
 * here from FlashAttention's formulas, not from the shape's methods), and the online-softmax reference against
 * the CPU reference on random shapes with random features. Inputs are fresh N(0,1) each run.
 */
class ScoreFeaturesReferenceTest {
    private static final double CLOSE = 1e-9;
    private static final SplittableRandom SEEDS = new SplittableRandom();

    /** (Sq, Skv, causal, left, right, softcap, sinks) */
    static Stream<Arguments> definitionCases() {
        return Stream.of(
                Arguments.of(37, 37, false, 5, -1, 0f, false),    // left only
                Arguments.of(37, 37, false, -1, 4, 0f, false),    // right only
                Arguments.of(37, 37, false, 3, 6, 0f, false),     // both
                Arguments.of(37, 37, true, 7, -1, 0f, false),     // left with causal
                Arguments.of(37, 37, true, 2, 5, 0f, false),      // causal bounds the right side
                Arguments.of(20, 53, false, 4, 2, 0f, false),     // Sq < Skv
                Arguments.of(20, 53, true, 10, -1, 0f, true),
                Arguments.of(45, 17, false, 3, 0, 0f, false),     // Sq > Skv: rows that see nothing
                Arguments.of(45, 17, true, -1, -1, 0f, true),     // causal empty rows with sinks
                Arguments.of(45, 17, false, 0, 0, 2.5f, true),    // one key per row, or none
                Arguments.of(33, 33, false, -1, -1, 1.5f, false), // softcap only
                Arguments.of(33, 60, true, -1, -1, 0f, true),     // sinks only
                Arguments.of(64, 64, true, 16, -1, 20f, true));   // all three
    }

    @ParameterizedTest
    @MethodSource("definitionCases")
    void cpuReferenceIsTheDefinition(int sq, int skv, boolean causal, int left, int right, float softcap, boolean sinks) {
        long seed = SEEDS.nextLong();
        SplittableRandom random = new SplittableRandom(seed);
        for (Layout layout : Layout.values()) {
            AttentionShape.Builder b = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(sq).kvLength(skv)
                    .headDim(16).causal(causal).window(left, right).softcap(softcap).layout(layout)
                    .scale(0.7f); // larger scores than 1/sqrt(D), so the cap bends them
            if (sinks) {
                b.sinks(gaussian(random, 4));
            }
            AttentionShape s = b.build();
            float[] q = gaussian(random, (int) s.queryElements());
            float[] k = gaussian(random, (int) s.kvElements());
            float[] v = gaussian(random, (int) s.kvElements());
            double[][] expected = bruteForce(s, q, k, v);
            CpuReference.Result r = CpuReference.compute(s, q, k, v);
            assertArrayEquals(expected[0], r.output(), CLOSE, "O, seed " + seed + " " + s);
            assertArrayEquals(expected[1], r.logSumExp(), CLOSE, "lse, seed " + seed + " " + s);
        }
    }

    /** A sink worked by hand: one key with score 0 and value 4, sink log 3: O = 4/(1+3), lse = log 4. */
    @Test
    void sinkJoinsTheDenominatorAndAddsNoValue() {
        AttentionShape s = AttentionShape.builder().headDim(1).scale(1f).sinks(new float[] {(float) Math.log(3)}).build();
        CpuReference.Result r = CpuReference.compute(s, new float[] {0}, new float[] {1}, new float[] {4});
        assertEquals(1.0, r.output()[0], 1e-6);
        assertEquals(Math.log(4), r.logSumExp()[0], 1e-6);
        // A row that sees no key (Sq 2 > Skv 1, causal): O = 0 and lse = the sink; without a sink, -inf.
        AttentionShape empty = s.toBuilder().queryLength(2).kvLength(1).causal(true).sinks(new float[] {0.25f}).build();
        CpuReference.Result e = CpuReference.compute(empty, new float[] {1, 1}, new float[] {1}, new float[] {4});
        assertEquals(0.0, e.output()[0]);
        assertEquals(0.25, e.logSumExp()[0], 1e-7);
        assertEquals(4 / (1 + Math.exp(0.25 - 1)), e.output()[1], 1e-6);
        CpuReference.Result none = CpuReference.compute(empty.toBuilder().sinks(null).build(), new float[] {1, 1},
                new float[] {1}, new float[] {4});
        assertEquals(Double.NEGATIVE_INFINITY, none.logSumExp()[0]);
        assertEquals(0.0, none.output()[0]);
    }

    /** Softcap by hand: scores 0 and 10, cap 2: 0 and 2 tanh(5). */
    @Test
    void softcapBendsTheScoresBeforeTheSoftmax() {
        AttentionShape s = AttentionShape.builder().headDim(1).scale(1f).kvLength(2).softcap(2f).build();
        CpuReference.Result r = CpuReference.compute(s, new float[] {10}, new float[] {0, 1}, new float[] {1, 3});
        double capped = 2 * Math.tanh(5);
        double w = Math.exp(capped) / (1 + Math.exp(capped));
        assertEquals(1 * (1 - w) + 3 * w, r.output()[0], 1e-12);
        assertEquals(Math.log(1 + Math.exp(capped)), r.logSumExp()[0], 1e-12);
    }

    /** The online-softmax reference (blocks of 64 keys, sink folded in last) agrees with the CPU reference. */
    @Test
    void onlineReferenceAgreesOnRandomShapesWithRandomFeatures() {
        long seed = SEEDS.nextLong();
        SplittableRandom random = new SplittableRandom(seed);
        for (int n = 0; n < 25; n++) {
            int kvHeads = 1 << random.nextInt(2);
            int heads = kvHeads * (1 + random.nextInt(3));
            int sq = 1 + random.nextInt(150);
            int skv = random.nextBoolean() ? sq : 1 + random.nextInt(300);
            AttentionShape.Builder b = AttentionShape.builder().batch(1 + random.nextInt(2)).heads(heads).kvHeads(kvHeads)
                    .queryLength(sq).kvLength(skv).headDim(8 * (1 + random.nextInt(4))).causal(random.nextBoolean())
                    .layout(random.nextBoolean() ? Layout.BHSD : Layout.BSHD)
                    .window(random.nextInt(3) == 0 ? -1 : random.nextInt(100), random.nextInt(3) == 0 ? -1 : random.nextInt(100));
            if (random.nextBoolean()) {
                b.softcap((float) (0.5 + 30 * random.nextDouble()));
            }
            if (random.nextBoolean()) {
                b.sinks(gaussian(random, heads));
            }
            AttentionShape s = b.build();
            float[] q = gaussian(random, (int) s.queryElements());
            float[] k = gaussian(random, (int) s.kvElements());
            float[] v = gaussian(random, (int) s.kvElements());
            CpuReference.Result ref = CpuReference.compute(s, q, k, v);
            double[][] online = OnlineSoftmaxReference.compute(s, q, k, v);
            assertArrayEquals(ref.output(), online[0], 1e-9, "O, seed " + seed + " case " + n + " " + s);
            assertArrayEquals(ref.logSumExp(), online[1], 1e-9, "lse, seed " + seed + " case " + n + " " + s);
        }
    }

    /** The definition restated: every (row, key) pair tested against the window formula; no max subtraction trick shared. */
    static double[][] bruteForce(AttentionShape s, float[] q, float[] k, float[] v) {
        int sq = s.queryLength();
        int skv = s.kvLength();
        int d = s.headDim();
        double[] out = new double[q.length];
        double[] lse = new double[s.batch() * s.heads() * sq];
        for (int b = 0; b < s.batch(); b++) {
            for (int h = 0; h < s.heads(); h++) {
                int g = h / (s.heads() / s.kvHeads());
                for (int i = 0; i < sq; i++) {
                    double[] score = new double[skv];
                    boolean[] sees = new boolean[skv];
                    int diagonal = i + skv - sq;
                    double max = s.sinks().isEmpty() ? Double.NEGATIVE_INFINITY : s.sinks().get(h);
                    for (int j = 0; j < skv; j++) {
                        sees[j] = (s.windowLeft() == -1 || j >= diagonal - s.windowLeft())
                                && (s.windowRight() == -1 || j <= diagonal + s.windowRight())
                                && (!s.causal() || j <= diagonal);
                        if (!sees[j]) {
                            continue;
                        }
                        double dot = 0;
                        for (int c = 0; c < d; c++) {
                            dot += (double) q[at(s.layout(), b, h, i, c, s.heads(), sq, d)]
                                    * k[at(s.layout(), b, g, j, c, s.kvHeads(), skv, d)];
                        }
                        double x = s.scale() * dot;
                        score[j] = s.softcap() > 0 ? s.softcap() * Math.tanh(x / s.softcap()) : x;
                        max = Math.max(max, score[j]);
                    }
                    int row = (b * s.heads() + h) * sq + i;
                    if (max == Double.NEGATIVE_INFINITY) {
                        lse[row] = Double.NEGATIVE_INFINITY;
                        continue;
                    }
                    double denominator = s.sinks().isEmpty() ? 0 : Math.exp(s.sinks().get(h) - max);
                    for (int j = 0; j < skv; j++) {
                        denominator += sees[j] ? Math.exp(score[j] - max) : 0;
                    }
                    lse[row] = max + Math.log(denominator);
                    for (int j = 0; j < skv; j++) {
                        if (sees[j]) {
                            double p = Math.exp(score[j] - lse[row]);
                            for (int c = 0; c < d; c++) {
                                out[at(s.layout(), b, h, i, c, s.heads(), sq, d)] += p * v[at(s.layout(), b, g, j, c, s.kvHeads(), skv, d)];
                            }
                        }
                    }
                }
            }
        }
        return new double[][] {out, lse};
    }

    @Test
    void bruteForceSeesEmptyRows() {
        // The cases above include rows that see nothing; make sure the restatement really produces them.
        AttentionShape s = AttentionShape.builder().queryLength(45).kvLength(17).headDim(8).window(3, 0).build();
        double[][] r = bruteForce(s, new float[(int) s.queryElements()], new float[(int) s.kvElements()],
                new float[(int) s.kvElements()]);
        assertEquals(Double.NEGATIVE_INFINITY, r[1][0]);
        assertTrue(Double.isFinite(r[1][44]));
    }

    private static int at(Layout layout, int b, int h, int s, int c, int heads, int seq, int d) {
        return layout == Layout.BHSD ? ((b * heads + h) * seq + s) * d + c : ((b * seq + s) * heads + h) * d + c;
    }

    private static float[] gaussian(SplittableRandom random, int n) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) {
            a[i] = (float) random.nextGaussian();
        }
        return a;
    }
}
