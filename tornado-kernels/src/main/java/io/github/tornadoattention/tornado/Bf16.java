package io.github.tornadoattention.tornado;

import uk.ac.manchester.tornado.api.math.TornadoMath;

/**
 * bf16 bits (in a {@code short}, as a ShortArray holds them) to and from fp32 inside a TornadoVM kernel: the one place
 * the Java cache kernels convert bf16 ({@code CacheKernels}' bf16 twins), so that a fix lands once.
 *
 * <p>Integer and float arithmetic only, no bit casts: bf16 is the top half of an fp32, but TornadoVM 5.2's PTX backend
 * compiles neither {@code Float.intBitsToFloat} nor {@code Float.floatToRawIntBits} ("unimplemented" in
 * {@code PTXArithmeticTool.emitReinterpret}; VariantCompileTest found it). So the fields are taken apart with shifts
 * and masks on the int bits and put together with exact multiplications by powers of two ({@link #pow2}), and back
 * the exponent comes from a log, corrected by comparisons. Exact both ways for every finite value (tests check all
 * 65536 bf16 values and random floats against {@code DType.BF16}); a NaN becomes the quiet NaN 0x7FC0 (its sign and
 * payload cannot be read without a bit cast). Subnormals are exact where the GPU keeps them (no flush to zero).
 */
public final class Bf16 {
    private Bf16() {
    }

    /** The float of bf16 {@code bits} (exact). */
    public static float toFloat(short bits) {
        int u = bits & 0xFFFF;
        int exponent = (u >>> 7) & 0xFF;
        int mantissa = u & 0x7F;
        float sign = (u & 0x8000) != 0 ? -1.0f : 1.0f;
        float magnitude;
        if (exponent == 0xFF) {
            magnitude = mantissa == 0 ? Float.POSITIVE_INFINITY : Float.NaN;
        } else if (exponent == 0) {
            magnitude = mantissa * pow2(-133);                   // subnormal: mantissa * 2^-7 * 2^-126
        } else {
            magnitude = (128 + mantissa) * pow2(exponent - 134);   // (1 + mantissa / 128) * 2^(exponent - 127)
        }
        return sign * magnitude;
    }

    /**
     * The bf16 bits of {@code x}, rounded to nearest, ties to even (as the CPU reference rounds); past the largest bf16
     * gives infinity; a NaN gives the quiet NaN 0x7FC0.
     */
    public static short bits(float x) {
        int result;
        if (x != x) {
            result = 0x7FC0;
        } else {
            int sign = x < 0.0f || (x == 0.0f && 1.0f / x < 0.0f) ? 0x8000 : 0;
            float a = Math.abs(x);
            if (a == Float.POSITIVE_INFINITY) {
                result = sign | 0x7F80;
            } else if (a < 1.17549435e-38f) {
                // Below the smallest normal: multiples of 2^-133 (a rounding up to 128 is the smallest normal, 0x0080).
                result = sign | nearestEven(a * pow2(66) * pow2(67));
            } else {
                int e = (int) TornadoMath.floor(TornadoMath.log(a) * 1.4426950f);   // log2 a, possibly off by one
                float p = pow2(e);
                if (a < p) {
                    e = e - 1;
                    p = pow2(e);
                } else if (a >= 2.0f * p) {
                    e = e + 1;
                    p = pow2(e);
                }
                // a / 2^e in [1, 2): (a / 2^e - 1) * 128 is exact; a rounding up to 128 carries into the exponent
                // (and from the largest exponent to infinity, 0x7F80).
                float m = (a * pow2(-e) - 1.0f) * 128.0f;
                result = sign | (((e + 127) << 7) + nearestEven(m));
            }
        }
        return (short) result;
    }

    /** {@code m} (>= 0) rounded to the nearest integer, ties to even. */
    private static int nearestEven(float m) {
        int f = (int) m;
        float fraction = m - f;
        if (fraction > 0.5f || (fraction == 0.5f && (f & 1) == 1)) {
            f = f + 1;
        }
        return f;
    }

    /** 2^p for p in [-149, 127], exactly: three factors of at most 2^62 (a long shift, converted), multiplied. */
    static float pow2(int p) {
        int a = Math.max(-62, Math.min(62, p));
        int b = Math.max(-62, Math.min(62, p - a));
        int c = p - a - b;
        return factor(a) * factor(b) * factor(c);
    }

    /** 2^s for s in [-62, 62]: a negative s as 2^(62 + s) times the constant 2^-62 (no division). */
    private static float factor(int s) {
        return s >= 0 ? (float) (1L << s) : (float) (1L << (62 + s)) * 0x1p-62f;
    }
}
