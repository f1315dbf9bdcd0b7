package io.github.tornadoattention.verify;

import io.github.tornadoattention.DType;

/**
 * How close a backend must come to the double-precision reference, by output type (fp32 accumulation in both):
 * <ul>
 * <li>fp16: max |O - O_ref| <= 1e-2, ||O - O_ref|| / ||O_ref|| <= 2e-3;</li>
 * <li>bf16: max |O - O_ref| <= 6e-2, ||O - O_ref|| / ||O_ref|| <= 1.6e-2, against the reference computed on the
 * same bf16-rounded inputs. bf16 keeps 8 significant bits to fp16's 11, so its unit roundoff 2^-8 is 8 times
 * fp16's 2^-11: the relative bound is fp16's times 8. The absolute bound covers the two roundings a bf16 kernel
 * makes: O stored in bf16 (half an ulp: 2^-7 ~ 0.008 for |O| < 4, which N(0,1) inputs give) plus P rounded to
 * bf16 for the P V product (at most 2^-8 * max|v| ~ 0.02 for |v| <= 5): about 0.028, with 2x margin.</li>
 * </ul>
 * The logsumexp is fp32 from scores of the same inputs in either type: within 1e-3, and -infinity exactly where
 * the reference has it. NaN never passes.
 */
public final class Tolerance {
    public static final double MAX_ABS_ERROR = 1e-2;
    public static final double MAX_RELATIVE_ERROR = 2e-3;
    public static final double BF16_MAX_ABS_ERROR = 6e-2;
    public static final double BF16_MAX_RELATIVE_ERROR = 1.6e-2;
    public static final double MAX_LSE_ERROR = 1e-3;

    private Tolerance() {
    }

    /** The max |O - O_ref| allowed for output of {@code dtype}. */
    public static double maxAbsError(DType dtype) {
        return dtype == DType.BF16 ? BF16_MAX_ABS_ERROR : MAX_ABS_ERROR;
    }

    /** The ||O - O_ref|| / ||O_ref|| allowed for output of {@code dtype}. */
    public static double maxRelativeError(DType dtype) {
        return dtype == DType.BF16 ? BF16_MAX_RELATIVE_ERROR : MAX_RELATIVE_ERROR;
    }
}
