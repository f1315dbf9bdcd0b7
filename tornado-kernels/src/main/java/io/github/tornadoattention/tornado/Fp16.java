package io.github.tornadoattention.tornado;

import uk.ac.manchester.tornado.api.math.TornadoMath;

/**
 * fp32 to fp16 inside a TornadoVM kernel. TornadoVM's PTX backend emits {@code cvt.rn.f16.f32} only for
 * {@code new HalfFloat(floatArray.get(i))}, a value read straight from a FloatArray; a computed value
 * ({@code new HalfFloat(x)}) fails to compile, and there is no float-to-int bit cast
 * ({@code Float.floatToRawIntBits} is unimplemented) to do it with integer operations. {@link #bits}
 * does it with float arithmetic and float-to-int conversion: about 25 instructions instead of one.
 */
final class Fp16 {
    private Fp16() {
    }

    /**
     * IEEE fp16 bits of {@code x}, rounded to nearest (ties away from zero); |x| >= 65520 gives infinity, NaN the
     * canonical quiet NaN 0x7E00.
     */
    static int bits(float x) {
        if (x != x) {
            return 0x7E00;
        }
        float a = Math.abs(x);
        int sign = x < 0.0f ? 0x8000 : 0;
        if (a < 6.1035156e-5f) {
            return sign | (int) (a * 16777216.0f + 0.5f);                 // subnormal: multiples of 2^-24
        }
        if (a >= 65520.0f) {
            return sign | 0x7C00;
        }
        int e = (int) TornadoMath.floor(TornadoMath.log(a) * 1.4426950f);    // log2 a, possibly off by one
        float r = a * ((float) (1L << (16 - e)) * 1.5258789e-5f);            // a / 2^e, exactly
        if (r >= 2.0f) {
            r = r * 0.5f;
            e = e + 1;
        }
        if (r < 1.0f) {
            r = r * 2.0f;
            e = e - 1;
        }
        return sign | (((e + 15) << 10) + (int) ((r - 1.0f) * 1024.0f + 0.5f));
    }
}
