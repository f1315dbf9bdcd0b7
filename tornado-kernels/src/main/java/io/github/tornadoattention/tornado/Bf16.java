package io.github.tornadoattention.tornado;

/**
 * bf16 bits (in a {@code short}, as a ShortArray holds them) to and from fp32 inside a TornadoVM kernel: the one place
 * the Java cache kernels convert bf16 ({@code CacheKernels}' bf16 twins), so that a fix lands once. Plain bit
 * arithmetic: bf16 is the top half of an fp32.
 */
public final class Bf16 {
    private Bf16() {
    }

    /** The float of bf16 {@code bits} (exact). */
    public static float toFloat(short bits) {
        return Float.intBitsToFloat((bits & 0xFFFF) << 16);
    }

    /**
     * The bf16 bits of {@code x}, rounded to nearest, ties to even (as the CPU reference rounds); overflow gives
     * infinity, a NaN stays a (quiet) NaN with its sign.
     */
    public static short bits(float x) {
        int i = Float.floatToRawIntBits(x);
        int result;
        if ((i & 0x7FFFFFFF) > 0x7F800000) {
            result = (i >>> 16) | 0x0040;
        } else {
            result = (i + 0x7FFF + ((i >>> 16) & 1)) >>> 16;
        }
        return (short) result;
    }
}
