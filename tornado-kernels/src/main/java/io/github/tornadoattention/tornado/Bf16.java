package io.github.tornadoattention.tornado;

/**
 * bf16 bits to fp32 and back inside a TornadoVM kernel, for every Java kernel that reads or writes bf16 (bf16 bits in
 * a {@code ShortArray}): {@link #toFloat} on each load, {@link #fromFloat} on each store. Exact both ways: the value of
 * every bf16 bit pattern (subnormals, infinities, NaN as NaN), and fp32 to bf16 rounded to nearest, ties to even, as
 * the CPU reference and the GPU's {@code cvt.rn.bf16.f32}.
 *
 * <p>Why not TornadoVM's {@code BFloat16.bf16ToFloat/bf16FromFloat}: TornadoVM 5.2's PTX backend emits Java's
 * {@code >>} as {@code shr.b32}, which in PTX is a logical shift (zero fill). BFloat16's decoder starts with
 * {@code if (b < 0) b += 65536}, which Graal turns into {@code b + ((b >> 31) & 65536)}, and divides by 32768 and 128,
 * which Graal turns into shifts with a {@code >> 31} sign fix-up: on the GPU the sign-extended bits of every negative
 * bf16 value stayed negative and came out as {@code 131071} for the sign, so every negative input decoded to garbage
 * (~1e5 times too large), while TornadoVM's Java emulation (arithmetic {@code >>}) was right. Nor
 * {@code Float.intBitsToFloat}/{@code Float.floatToRawIntBits}: the PTX backend's {@code emitReinterpret} is
 * unimplemented, so a kernel that computes with a reinterpreted value fails to compile.
 *
 * <p>So both directions here use only what the PTX backend lowers right: {@code &} with constants (no right shift of
 * anything that can be negative; no right shift at all), int compares, {@code <<} of non-negative ints, int to float
 * conversion of small exact values and multiplications by powers of two (exact, no {@code .ftz}), and float to int of
 * an integral value. {@code Bf16Test} checks all 65536 patterns and the rounding against the JDK's bit operations;
 * {@code Bf16PtxTest} checks the PTX of the bf16 kernels shifts no sign-extended bits right.
 */
public final class Bf16 {
    private Bf16() {
    }

    /** The value of the bf16 bit pattern in the low 16 bits of {@code bits} (the rest is ignored, sign-extended or not). */
    public static float toFloat(int bits) {
        int m = bits & 0x7F;                              // mantissa
        int eb = bits & 0x7F80;                           // exponent << 7
        // (128 + m) * 2^(e - 134), a subnormal (e = 0) as m * 2^(1 - 134): start from 2^-134 (a float subnormal, so the
        // product is exact) and multiply by 2^(bit of e) for each bit of e, every step exact; e = 255 overflows to
        // infinity, as it should for m = 0.
        float x = (float) (eb == 0 ? m : m + 128) * 0x1p-134f;
        x = x * ((eb & 0x0080) != 0 || eb == 0 ? 2.0f : 1.0f);
        x = x * ((eb & 0x0100) != 0 ? 4.0f : 1.0f);
        x = x * ((eb & 0x0200) != 0 ? 16.0f : 1.0f);
        x = x * ((eb & 0x0400) != 0 ? 256.0f : 1.0f);
        x = x * ((eb & 0x0800) != 0 ? 65536.0f : 1.0f);
        x = x * ((eb & 0x1000) != 0 ? 0x1p32f : 1.0f);
        x = x * ((eb & 0x2000) != 0 ? 0x1p64f : 1.0f);
        float big = (eb & 0x4000) != 0 ? 0x1p64f : 1.0f;  // 2^128 in two steps (no float holds it)
        x = x * big * big;
        x = eb == 0x7F80 && m != 0 ? Float.NaN : x;
        return (bits & 0x8000) != 0 ? -x : x;
    }

    /**
     * The bf16 bits of {@code x} rounded to nearest, ties to even (overflow to infinity, NaN the quiet NaN 0x7FC0); -0.0
     * gives +0 (0x0000).
     */
    public static short fromFloat(float x) {
        float a = x < 0.0f ? -x : x;
        // e = floor(log2 a) and t = a / 2^e in [1, 2) for a normal a, by a binary search of exact power-of-two steps.
        float t = a;
        int e = 0;
        boolean c = t >= 0x1p64f;
        t = t * (c ? 0x1p-64f : 1.0f);
        e += c ? 64 : 0;
        c = t >= 0x1p32f;
        t = t * (c ? 0x1p-32f : 1.0f);
        e += c ? 32 : 0;
        c = t >= 0x1p16f;
        t = t * (c ? 0x1p-16f : 1.0f);
        e += c ? 16 : 0;
        c = t >= 0x1p8f;
        t = t * (c ? 0x1p-8f : 1.0f);
        e += c ? 8 : 0;
        c = t >= 0x1p4f;
        t = t * (c ? 0x1p-4f : 1.0f);
        e += c ? 4 : 0;
        c = t >= 0x1p2f;
        t = t * (c ? 0x1p-2f : 1.0f);
        e += c ? 2 : 0;
        c = t >= 0x1p1f;
        t = t * (c ? 0x1p-1f : 1.0f);
        e += c ? 1 : 0;
        c = t < 0x1p-63f;
        t = t * (c ? 0x1p64f : 1.0f);
        e -= c ? 64 : 0;
        c = t < 0x1p-31f;
        t = t * (c ? 0x1p32f : 1.0f);
        e -= c ? 32 : 0;
        c = t < 0x1p-15f;
        t = t * (c ? 0x1p16f : 1.0f);
        e -= c ? 16 : 0;
        c = t < 0x1p-7f;
        t = t * (c ? 0x1p8f : 1.0f);
        e -= c ? 8 : 0;
        c = t < 0x1p-3f;
        t = t * (c ? 0x1p4f : 1.0f);
        e -= c ? 4 : 0;
        c = t < 0x1p-1f;
        t = t * (c ? 0x1p2f : 1.0f);
        e -= c ? 2 : 0;
        c = t < 1.0f;
        t = t * (c ? 2.0f : 1.0f);
        e -= c ? 1 : 0;
        // The significand in units of the last bf16 place: [128, 256) for a normal bf16, [0, 128) for a subnormal one
        // (a < 2^-126: a * 2^133, in two exact steps); rounded to an integer, ties to even, by the fp32 adder.
        boolean tiny = a < 0x1p-126f;
        float s = tiny ? a * 0x1p64f * 0x1p69f : t * 128.0f;
        float r = (s + 8388608.0f) - 8388608.0f;
        // A significand that rounded up to 256 (or a subnormal to 128) carries into the exponent field by the addition.
        int bits = ((tiny ? 0 : e + 126) << 7) + (int) r;
        bits = a >= 0x1.ffp127f ? 0x7F80 : bits;         // half a bf16 place above the largest bf16 (and infinity)
        bits = bits | (x < 0.0f ? 0x8000 : 0);
        return (short) (x != x ? 0x7FC0 : bits);
    }
}
