package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.lang.classfile.ClassFile;
import java.lang.classfile.CodeElement;
import java.lang.classfile.MethodModel;
import java.lang.classfile.Opcode;
import java.lang.classfile.instruction.InvokeInstruction;
import java.lang.classfile.Instruction;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * {@link Bf16} against the JDK's bit operations: every bf16 pattern, and fp32 to bf16 rounding (ties to even); and the
 * bytecode rules that keep it right on TornadoVM 5.2's PTX backend (see {@link Bf16PtxTest} for the PTX itself).
 */
class Bf16Test {

    /** The bf16 bits of {@code x}, rounded to nearest, ties to even (NaN: 0x7FC0), by the JDK's bit operations. */
    static int reference(float x) {
        if (Float.isNaN(x)) {
            return 0x7FC0;
        }
        int bits = Float.floatToRawIntBits(x);
        return ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16) & 0xFFFF;
    }

    @Test
    void everyPatternDecodesExactly() {
        for (int u = 0; u < 65536; u++) {
            float expected = Float.intBitsToFloat(u << 16);
            float got = Bf16.toFloat((short) u);   // as a kernel passes it: sign-extended
            if (Float.isNaN(expected)) {
                assertTrue(Float.isNaN(got), Integer.toHexString(u));
            } else {
                assertEquals(Float.floatToRawIntBits(expected), Float.floatToRawIntBits(got), Integer.toHexString(u));
            }
            assertEquals(Float.floatToRawIntBits(Bf16.toFloat(u)), Float.floatToRawIntBits(got), "bits above 16 ignored");
        }
    }

    @Test
    void everyPatternRoundTrips() {
        for (int u = 0; u < 65536; u++) {
            float x = Float.intBitsToFloat(u << 16);
            int expected = Float.isNaN(x) ? 0x7FC0 : u == 0x8000 ? 0 : u;   // -0 gives +0
            assertEquals(expected, Bf16.fromFloat(x) & 0xFFFF, Integer.toHexString(u));
        }
    }

    /** Exact ties, just off ties, and the ends of each bf16 interval, for every exponent (subnormals included). */
    @Test
    void roundsToNearestTiesToEven() {
        for (int u = 0; u < 0x7F80; u++) {
            int bits = u << 16;
            for (int low : new int[] {0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF}) {
                for (int sign : new int[] {0, 0x80000000}) {
                    float x = Float.intBitsToFloat(sign | bits | low);
                    assertEquals(reference(x), Bf16.fromFloat(x) & 0xFFFF, Float.toHexString(x));
                }
            }
        }
    }

    @Test
    void randomFloats() {
        Random random = new Random(7);
        for (int i = 0; i < 2_000_000; i++) {
            float x = Float.intBitsToFloat(random.nextInt());
            if (x == 0.0f && Float.floatToRawIntBits(x) != 0) {
                continue;   // -0: +0 here
            }
            assertEquals(reference(x), Bf16.fromFloat(x) & 0xFFFF, Float.toHexString(x));
        }
        for (int i = 0; i < 1_000_000; i++) {
            float x = (float) random.nextGaussian() * (1 << random.nextInt(20));
            assertEquals(reference(x), Bf16.fromFloat(x) & 0xFFFF, Float.toHexString(x));
        }
    }

    @Test
    void specialValues() {
        assertEquals(0x7FC0, Bf16.fromFloat(Float.NaN) & 0xFFFF);
        assertEquals(0x7F80, Bf16.fromFloat(Float.POSITIVE_INFINITY) & 0xFFFF);
        assertEquals(0xFF80, Bf16.fromFloat(Float.NEGATIVE_INFINITY) & 0xFFFF);
        assertEquals(0x7F80, Bf16.fromFloat(Float.MAX_VALUE) & 0xFFFF);
        assertEquals(0x7F7F, Bf16.fromFloat(Float.intBitsToFloat(0x7F7F7FFF)) & 0xFFFF);
        assertEquals(0x7F80, Bf16.fromFloat(Float.intBitsToFloat(0x7F7F8000)) & 0xFFFF);   // tie: to even, infinity
        assertEquals(0x0000, Bf16.fromFloat(Float.MIN_VALUE) & 0xFFFF);
        assertEquals(0x0080, Bf16.fromFloat(Float.intBitsToFloat(0x007FFFFF)) & 0xFFFF);   // up to the smallest normal
        assertEquals(0xBF80, Bf16.fromFloat(-1.0f) & 0xFFFF);
        assertEquals(Float.POSITIVE_INFINITY, Bf16.toFloat(0x7F80));
        assertEquals(Float.NEGATIVE_INFINITY, Bf16.toFloat((short) 0xFF80));
        assertTrue(Float.isNaN(Bf16.toFloat(0x7FC0)));
        assertTrue(Float.isNaN(Bf16.toFloat((short) 0xFF81)));
        assertEquals(-1.0f, Bf16.toFloat((short) 0xBF80));
    }

    /**
     * Bf16 has no right shift, division or remainder (the PTX backend's {@code >>} is a logical shift, and Graal lowers a
     * signed division by a power of two with one) and no bit reinterpretation (the PTX backend has none); the
     * tornado-simt kernels convert bf16 with Bf16 only, never with TornadoVM's BFloat16 (whose decoder shifts
     * sign-extended bits right).
     */
    @Test
    void bytecodeKeepsToWhatThePtxBackendLowersRight() throws IOException {
        List<String> found = new ArrayList<>();
        for (Class<?> code : List.of(Bf16.class, SimtKernels.class)) {
            byte[] bytes;
            try (InputStream in = code.getResourceAsStream(code.getSimpleName() + ".class")) {
                bytes = in.readAllBytes();
            }
            for (MethodModel method : ClassFile.of().parse(bytes).methods()) {
                for (var body : method.code().stream().toList()) {
                    for (CodeElement element : body) {
                        String where = code.getSimpleName() + "." + method.methodName().stringValue() + ": ";
                        if (element instanceof InvokeInstruction call) {
                            String owner = call.owner().asInternalName();
                            String name = call.name().stringValue();
                            if (owner.equals("uk/ac/manchester/tornado/api/types/BFloat16")
                                    || (owner.equals("java/lang/Float") && name.contains("Bits"))) {
                                found.add(where + owner + "." + name);
                            }
                        } else if (code == Bf16.class && element instanceof Instruction instruction) {
                            Opcode op = instruction.opcode();
                            if (op == Opcode.ISHR || op == Opcode.IUSHR || op == Opcode.LSHR || op == Opcode.LUSHR
                                    || op == Opcode.IDIV || op == Opcode.IREM) {
                                found.add(where + op);
                            }
                        }
                    }
                }
            }
        }
        assertTrue(found.isEmpty(), String.valueOf(found));
    }
}
