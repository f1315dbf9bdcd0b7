package io.github.tornadoattention;

/**
 * Element types of tensors. Attention inputs and outputs are {@link #FP16} or {@link #BF16}, one type per call
 * (bf16 runs on cpu-reference only for now; the GPU backends refuse it at plan time); logsumexp is
 * {@link #FP32}; lengths, offsets and block tables are {@link #INT32}. The two 16-bit types convert here, once
 * ({@link #fromFloat}, {@link #toFloat}), for every host tensor and the CPU device.
 */
public enum DType {
    FP16(2),
    BF16(2),
    FP32(4),
    INT32(4);

    private final int bytes;

    DType(int bytes) {
        this.bytes = bytes;
    }

    /** Bytes per element. */
    public int bytes() {
        return bytes;
    }

    /** Lower-case name as the CLI and messages write it: fp16, bf16, fp32, int32. */
    public String label() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }

    /**
     * The bits of {@code value} in this 16-bit type, rounded to nearest, ties to even; NaN stays NaN (quiet, sign
     * kept), infinities stay, values past the largest finite round to infinity, subnormals round like any value.
     */
    public short fromFloat(float value) {
        return switch (this) {
            case FP16 -> Float.floatToFloat16(value);
            case BF16 -> bf16Bits(value);
            default -> throw new UnsupportedOperationException(label() + " is not a 16-bit float type");
        };
    }

    /**
     * {@link #fromFloat} of a double, rounded once: a double that lands by rounding to float exactly halfway between
     * two bf16 values is nudged back toward its side first, so bf16 results are the correctly rounded ones (the
     * oracle stores O this way). fp16 keeps its float-then-fp16 rounding.
     */
    public short fromDouble(double value) {
        float f = (float) value;
        if (this == BF16 && (Float.floatToRawIntBits(f) & 0xFFFF) == 0x8000 && f != value && !Float.isInfinite(f)) {
            f = value > f ? Math.nextUp(f) : Math.nextDown(f);
        }
        return fromFloat(f);
    }

    /** The exact float value of 16-bit {@code bits} of this type. */
    public float toFloat(short bits) {
        return switch (this) {
            case FP16 -> Float.float16ToFloat(bits);
            case BF16 -> Float.intBitsToFloat((bits & 0xFFFF) << 16);
            default -> throw new UnsupportedOperationException(label() + " is not a 16-bit float type");
        };
    }

    /** bf16 is fp32's upper half: add half an ulp of the kept part (less one unless the kept part is odd), truncate. */
    private static short bf16Bits(float value) {
        int bits = Float.floatToRawIntBits(value);
        if (Float.isNaN(value)) {
            return (short) ((bits >>> 16) | 0x0040); // quiet; the low mantissa bits alone may be the payload
        }
        int roundingBias = 0x7FFF + ((bits >>> 16) & 1);
        return (short) ((bits + roundingBias) >>> 16);
    }

    /** Throws unless this is a type attention data (Q, K, V, O) may have on a backend that supports {@code supported}. */
    static void requireAttentionType(String argument, DType type, java.util.Set<DType> supported) {
        InvalidArgumentException.requireNonNull(argument, type);
        if (!supported.contains(type)) {
            throw new InvalidArgumentException(argument, type, "this backend supports " + supported);
        }
    }
}
