package io.github.tornadoattention.verify;

/**
 * How close a backend must come to the double-precision reference (fp16 output, fp32
 * accumulation): max |O - O_ref| <= 1e-2, ||O - O_ref|| / ||O_ref|| <= 2e-3, logsumexp within
 * 1e-3 and -infinity exactly where the reference has it. NaN never passes.
 */
public final class Tolerance {
    public static final double MAX_ABS_ERROR = 1e-2;
    public static final double MAX_RELATIVE_ERROR = 2e-3;
    public static final double MAX_LSE_ERROR = 1e-3;

    private Tolerance() {
    }
}
