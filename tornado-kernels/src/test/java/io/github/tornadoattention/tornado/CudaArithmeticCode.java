package io.github.tornadoattention.tornado;

/**
 * Kernel arithmetic that TornadoVM 5.2's CUDA backend computes differently from Java, or must not, loaded by
 * {@link KernelEmulatorCudaTest} with {@link KernelEmulator#cudaMethod}. Not kernels: one expression each.
 */
final class CudaArithmeticCode {
    private CudaArithmeticCode() {
    }

    /**
     * fp16 3 of two words of four, the first's in the low half, as the kernels paired them before
     * {@link MmaLayout#halfPair}: Graal folds the mask after {@code >>> 48} and the backend writes {@code >>}.
     */
    static int unsignedPair3(long first, long second) {
        return (int) ((first >>> 48) & 0xFFFF) | ((int) ((second >>> 48) & 0xFFFF) << 16);
    }

    /**
     * fp16 c of the same, the old way in a helper: the amount {@code 16 * c} is no constant here, but one in a kernel that
     * calls this with a constant c, once Graal has inlined it (the emulator takes the amount the shift has at run time).
     */
    static int unsignedPair(long first, long second, int c) {
        return (int) ((first >>> (16 * c)) & 0xFFFF) | ((int) ((second >>> (16 * c)) & 0xFFFF) << 16);
    }

    /** fp16 1 of the same, the old way: the mask after {@code >>> 16} is not redundant and stays. */
    static int unsignedPair1(long first, long second) {
        return (int) ((first >>> 16) & 0xFFFF) | ((int) ((second >>> 16) & 0xFFFF) << 16);
    }

    /** fp16 3 with the narrowing before the mask: {@code (int) (x >>> 48) & 0xFFFF}, folded too. */
    static int narrowedPair3(long first, long second) {
        return (int) (first >>> 48) & 0xFFFF | ((int) (second >>> 48) & 0xFFFF) << 16;
    }

    /** The top 16 bits of an int, the old way: {@code >>> 16} then a mask Graal folds. */
    static int top16(int x) {
        return (x >>> 16) & 0xFFFF;
    }

    /** fp16 3 the way the kernels pair them now ({@link MmaLayout#halfPair}, which is loaded with the CUDA semantics too). */
    static int halfPair3(long first, long second) {
        return MmaLayout.halfPair(first, second, 3);
    }

    static int divideBy64(int x) {
        return x / 64;
    }

    static long divideBy64(long x) {
        return x / 64;
    }

    static int divideByMinus4(int x) {
        return x / -4;
    }

    /** Not a power of two: a C division, as Java's. */
    static int divideBy48(int x) {
        return x / 48;
    }

    /** Not a constant: a C division, as Java's. */
    static int divide(int x, int d) {
        return x / d;
    }

    /** A C {@code %}, as Java's (Graal does not lower it to shifts where x may have either sign). */
    static int remainder64(int x) {
        return x % 64;
    }

    /** A helper of another class, which the GPU inlines: loaded with the CUDA semantics as well. */
    static final class Caller {
        private Caller() {
        }

        static int pair3(long first, long second) {
            return unsignedPair3(first, second);
        }
    }
}
