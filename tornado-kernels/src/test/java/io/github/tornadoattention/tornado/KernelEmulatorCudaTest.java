package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodType;
import org.junit.jupiter.api.Test;

/**
 * {@link KernelEmulator}'s model of the integer arithmetic of TornadoVM 5.2's CUDA backend (its {@code CudaIntegerSemantics}):
 * small pieces of kernel code ({@link CudaArithmeticCode}) loaded with {@link KernelEmulator#cudaMethod} compute what
 * the CUDA C computes, where that differs from Java and where it must not. The first is the bug that tornado-mma had on
 * that backend (a negative top fp16 turned its pair's other half into NaN); the emulator, which ran the Java bytecode,
 * could not see it.
 */
class KernelEmulatorCudaTest {
    private static final MethodType PAIR = MethodType.methodType(int.class, long.class, long.class);
    private static final MethodType INT = MethodType.methodType(int.class, int.class);

    /** Four fp16, the first in the low 16 bits. */
    private static long word(float... halves) {
        long word = 0;
        for (int i = 0; i < 4; i++) {
            word |= (Float.floatToFloat16(halves[i]) & 0xFFFFL) << (16 * i);
        }
        return word;
    }

    private static int fp16(float x) {
        return Float.floatToFloat16(x) & 0xFFFF;
    }

    private static final long FIRST = word(1.0f, 2.0f, 3.0f, -1.5f);     // negative: its top fp16 is
    private static final long SECOND = word(0.5f, -2.0f, 4.0f, 2.5f);

    private static int pair(String name, Class<?> code) throws Throwable {
        return (int) KernelEmulator.cudaMethod(code, name, PAIR).invoke(FIRST, SECOND);
    }

    /**
     * The pre-fix packing {@code (int) ((la >>> 48) & 0xFFFF) | ((int) ((lb >>> 48) & 0xFFFF) << 16)} on a negative la:
     * right in Java, and with CUDA's semantics the mask is gone, la's top fp16 sign-extended, the pair's upper half
     * 0xFFFF, a NaN; the same through a helper of another class (inlined on the GPU). {@link MmaLayout#halfPair} is right.
     */
    @Test
    void theOldPackingTurnsThePairIntoNanAndHalfPairDoesNot() throws Throwable {
        int expected = fp16(-1.5f) | fp16(2.5f) << 16;
        assertEquals(expected, CudaArithmeticCode.unsignedPair3(FIRST, SECOND), "Java");
        for (String name : new String[] {"unsignedPair3", "narrowedPair3"}) {
            int cuda = pair(name, CudaArithmeticCode.class);
            assertEquals(fp16(-1.5f), cuda & 0xFFFF, name);
            assertEquals(0xFFFF, cuda >>> 16, name + ": the other half");
            assertTrue(Float.isNaN(Float.float16ToFloat((short) (cuda >>> 16))), name);
        }
        assertEquals(0xFFFF, pair("pair3", CudaArithmeticCode.Caller.class) >>> 16, "through a helper");
        MethodHandle pairC = KernelEmulator.cudaMethod(CudaArithmeticCode.class, "unsignedPair",
                MethodType.methodType(int.class, long.class, long.class, int.class));
        assertEquals(0xFFFF, (int) pairC.invoke(FIRST, SECOND, 3) >>> 16, "a shift by 16 c, c = 3");
        assertEquals(fp16(2.0f) | fp16(-2.0f) << 16, (int) pairC.invoke(FIRST, SECOND, 1), "c = 1: the mask stays");
        assertEquals(expected, pair("halfPair3", CudaArithmeticCode.class), "MmaLayout.halfPair");
        for (int c = 0; c < 4; c++) {
            assertEquals(fp16(new float[] {1.0f, 2.0f, 3.0f, -1.5f}[c]) | fp16(new float[] {0.5f, -2.0f, 4.0f, 2.5f}[c]) << 16,
                    MmaLayout.halfPair(FIRST, SECOND, c), "halfPair in Java, c = " + c);
        }
    }

    /** A mask that {@code >>> c} does not make redundant stays, and with it the right value; an int's folds as a long's. */
    @Test
    void onlyARedundantMaskIsDropped() throws Throwable {
        assertEquals(fp16(2.0f) | fp16(-2.0f) << 16, pair("unsignedPair1", CudaArithmeticCode.class));
        MethodHandle top16 = KernelEmulator.cudaMethod(CudaArithmeticCode.class, "top16", INT);
        assertEquals(0x8000, CudaArithmeticCode.top16(0x8000_1234), "Java");
        assertEquals(0xFFFF_8000, (int) top16.invoke(0x8000_1234), "CUDA: (x >> 16), sign-extended");
        assertEquals(0x7000, (int) top16.invoke(0x7000_1234), "a non-negative x");
    }

    /**
     * {@code x / 64} is Graal's {@code (x + ((x >> 31) >>> 26)) >> 6}, whose {@code >>>} the backend writes {@code >>}: for
     * a negative x, floor((x - 1) / 64), so -64 / 64 is -2 and -1 / 64 is -1; the same for a long and, negated, for a
     * divisor -4. A divisor not a power of two or not a constant, and a remainder, are C's, which are Java's.
     */
    @Test
    void divisionByAPowerOfTwoRoundsDownPastNegativeDividends() throws Throwable {
        MethodHandle by64 = KernelEmulator.cudaMethod(CudaArithmeticCode.class, "divideBy64", INT);
        MethodHandle by64Long = KernelEmulator.cudaMethod(CudaArithmeticCode.class, "divideBy64",
                MethodType.methodType(long.class, long.class));
        MethodHandle byMinus4 = KernelEmulator.cudaMethod(CudaArithmeticCode.class, "divideByMinus4", INT);
        MethodHandle by48 = KernelEmulator.cudaMethod(CudaArithmeticCode.class, "divideBy48", INT);
        MethodHandle divide = KernelEmulator.cudaMethod(CudaArithmeticCode.class, "divide",
                MethodType.methodType(int.class, int.class, int.class));
        MethodHandle remainder = KernelEmulator.cudaMethod(CudaArithmeticCode.class, "remainder64", INT);
        assertEquals(-1, CudaArithmeticCode.divideBy64(-64), "Java");
        assertEquals(-2, (int) by64.invoke(-64));
        assertEquals(-1, (int) by64.invoke(-1));
        for (int x = -300; x <= 300; x++) {
            int onGpu = x < 0 ? Math.floorDiv(x - 1, 64) : x / 64;
            assertEquals(onGpu, (int) by64.invoke(x), "x = " + x);
            assertEquals((long) onGpu, (long) by64Long.invoke((long) x), "long, x = " + x);
            assertEquals(x < 0 ? -Math.floorDiv(x - 1, 4) : x / -4, (int) byMinus4.invoke(x), "/ -4, x = " + x);
            assertEquals(x / 48, (int) by48.invoke(x), "/ 48, x = " + x);
            assertEquals(x / 64, (int) divide.invoke(x, 64), "x / d, x = " + x);
            assertEquals(x % 64, (int) remainder.invoke(x), "% 64, x = " + x);
        }
        assertNotEquals(CudaArithmeticCode.divideBy64(-64), (int) by64.invoke(-64));
        assertEquals(Integer.MAX_VALUE / 64, (int) by64.invoke(Integer.MAX_VALUE));
        assertEquals(-(1L << 34) - 1, (long) by64Long.invoke(-(1L << 40)), "a long past the int range");
    }
}
