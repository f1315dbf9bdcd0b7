package io.github.tornadoattention.verify;

import io.github.tornadoattention.DType;
import io.github.tornadoattention.HalfTensor;

/**
 * Differences between a result and the reference. A NaN or infinity where the reference is finite
 * (or a finite logsumexp where the reference is -infinity) counts as a bad value and fails. The
 * logsumexp error is measured from the reference rounded to fp32 (the type of the output). {@code dtype} is the
 * output's element type, which picks the {@link Tolerance}.
 */
public record ErrorStats(double maxAbsError, double relativeError, double maxLseError, long badValues, DType dtype) {

    /** Stats of an fp16 output. */
    public ErrorStats(double maxAbsError, double relativeError, double maxLseError, long badValues) {
        this(maxAbsError, relativeError, maxLseError, badValues, DType.FP16);
    }

    public static ErrorStats compare(HalfTensor output, double[] expected, float[] lse, double[] expectedLse) {
        if (output.length() != expected.length) {
            throw new IllegalArgumentException("output.length = " + output.length() + ": expected " + expected.length);
        }
        double maxAbs = 0;
        double diffSquares = 0;
        double refSquares = 0;
        long bad = 0;
        for (int i = 0; i < expected.length; i++) {
            double actual = output.get(i);
            if (!Double.isFinite(actual)) {
                bad++;
                continue;
            }
            double diff = actual - expected[i];
            maxAbs = Math.max(maxAbs, Math.abs(diff));
            diffSquares += diff * diff;
            refSquares += expected[i] * expected[i];
        }
        double relative = refSquares == 0 ? Math.sqrt(diffSquares) : Math.sqrt(diffSquares / refSquares);
        double maxLse = 0;
        if (lse != null) {
            for (int i = 0; i < expectedLse.length; i++) {
                if (expectedLse[i] == Double.NEGATIVE_INFINITY) {
                    if (lse[i] != Float.NEGATIVE_INFINITY) {
                        bad++;
                    }
                } else if (!Float.isFinite(lse[i])) {
                    bad++;
                } else {
                    // Against the fp32 nearest the reference: no fp32 output can come closer, which matters
                    // at large scales, where one fp32 step of the logsumexp exceeds the tolerance.
                    maxLse = Math.max(maxLse, Math.abs((double) lse[i] - (float) expectedLse[i]));
                }
            }
        }
        return new ErrorStats(maxAbs, relative, maxLse, bad, output.dtype());
    }

    public boolean passes() {
        return badValues == 0 && maxAbsError <= Tolerance.maxAbsError(dtype)
                && relativeError <= Tolerance.maxRelativeError(dtype) && maxLseError <= Tolerance.MAX_LSE_ERROR;
    }

    @Override
    public String toString() {
        return String.format("max abs %.2e, rel %.2e, lse %.2e%s", maxAbsError, relativeError, maxLseError,
                badValues == 0 ? "" : ", " + badValues + " NaN/inf/unwritten");
    }
}
