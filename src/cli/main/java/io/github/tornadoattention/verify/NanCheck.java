package io.github.tornadoattention.verify;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import java.util.Arrays;

/**
 * The suite's case for a non-finite input: one element of one K row is NaN. What every backend must give (README,
 * Semantics): the O rows of the queries that see that key are NaN in every element, and their logsumexp is not a
 * number either (NaN, as the CPU reference gives; -infinity is accepted for now, which is what the kernels that take
 * a NaN row sum for an empty row give); every other row is the reference's, within the usual tolerance. The output
 * is poisoned with a finite {@link #SENTINEL} instead of NaN, so that an unwritten NaN row cannot pass.
 */
public final class NanCheck {
    public static final String CASE_NAME = "nan-in-one-key";
    /** Written into O and logsumexp before the run: finite, so that only a written NaN passes for a NaN row. */
    public static final float SENTINEL = 4096f;
    /** GQA with two query heads per kv head, causal with Sq < Skv: before the key's diagonal, rows do not see it. */
    static final AttentionShape SHAPE = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(150)
            .kvLength(200).headDim(64).causal(true).layout(Layout.BSHD).build();
    /** Where the NaN is: batch 1, kv head 1, key 120, column 7. */
    static final int BATCH = 1;
    static final int KV_HEAD = 1;
    static final int KEY = 120;
    static final int COLUMN = 7;

    private NanCheck() {
    }

    public static CorrectnessSuite.Case testCase() {
        return new CorrectnessSuite.Case(CASE_NAME, SHAPE);
    }

    public static boolean isNanCase(CorrectnessSuite.Case testCase) {
        return testCase.name().equals(CASE_NAME);
    }

    /** Puts the NaN into {@code k} (of {@code shape}'s layout). */
    public static void poison(AttentionShape shape, HalfTensor k) {
        k.set(shape.kvStrides().rowStart(BATCH, KV_HEAD, KEY) + COLUMN, Float.NaN);
    }

    /** Fills O and logsumexp with {@link #SENTINEL}. */
    public static void prepare(HalfTensor o, float[] lse) {
        o.fill(SENTINEL);
        if (lse != null) {
            Arrays.fill(lse, SENTINEL);
        }
    }

    /** Whether query row {@code row} of query head {@code head} in batch {@code batch} sees the NaN key. */
    public static boolean sees(AttentionShape shape, int batch, int head, int row) {
        return batch == BATCH && shape.kvHeadOf(head) == KV_HEAD && shape.sees(row, KEY);
    }

    /**
     * Compares a backend's {@code o} and {@code lse} (may be null) for the poisoned inputs with the reference's
     * {@code expected} and {@code expectedLse} for the same inputs: a row that sees the NaN key must be NaN in O and
     * have a non-finite logsumexp (each element otherwise is one bad value), every other row is compared as
     * {@link ErrorStats} does.
     */
    public static ErrorStats compare(AttentionShape shape, HalfTensor o, double[] expected, float[] lse,
                                     double[] expectedLse) {
        double maxAbs = 0;
        double diffSquares = 0;
        double refSquares = 0;
        double maxLse = 0;
        long bad = 0;
        for (int b = 0; b < shape.batch(); b++) {
            for (int h = 0; h < shape.heads(); h++) {
                for (int i = 0; i < shape.queryLength(); i++) {
                    boolean nanRow = sees(shape, b, h, i);
                    long start = shape.queryStrides().rowStart(b, h, i);
                    for (int d = 0; d < shape.headDim(); d++) {
                        double actual = o.get(start + d);
                        if (nanRow || !Double.isFinite(expected[Math.toIntExact(start + d)])) {
                            bad += Double.isNaN(actual) ? 0 : 1;
                        } else if (!Double.isFinite(actual)) {
                            bad++;
                        } else {
                            double diff = actual - expected[Math.toIntExact(start + d)];
                            maxAbs = Math.max(maxAbs, Math.abs(diff));
                            diffSquares += diff * diff;
                            refSquares += expected[Math.toIntExact(start + d)] * expected[Math.toIntExact(start + d)];
                        }
                    }
                    if (lse == null) {
                        continue;
                    }
                    int at = (b * shape.heads() + h) * shape.queryLength() + i;
                    if (nanRow || Double.isNaN(expectedLse[at])) {
                        bad += Float.isFinite(lse[at]) ? 1 : 0;
                    } else if (expectedLse[at] == Double.NEGATIVE_INFINITY) {
                        bad += lse[at] == Float.NEGATIVE_INFINITY ? 0 : 1;
                    } else if (!Float.isFinite(lse[at])) {
                        bad++;
                    } else {
                        maxLse = Math.max(maxLse, Math.abs((double) lse[at] - (float) expectedLse[at]));
                    }
                }
            }
        }
        double relative = refSquares == 0 ? Math.sqrt(diffSquares) : Math.sqrt(diffSquares / refSquares);
        return new ErrorStats(maxAbs, relative, maxLse, bad, shape.dtype());
    }
}
