package io.github.tornadoattention;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.cuda.PtxCudaBackend;
import io.github.tornadoattention.ptx.KernelManifest;
import io.github.tornadoattention.ptx.KernelVariant;
import io.github.tornadoattention.ptx.KernelVariant.Kind;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * bf16 on dense calls: the rounding (against a restatement in double arithmetic), the host tensor of either type,
 * one element type per call, the CPU reference on bf16 inputs, and ptx-cuda finding bf16 kernels in the manifest.
 */
class Bf16Test {
    private static final DType BF16 = DType.BF16;
    private static final AttentionShape SHAPE = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(9)
            .kvLength(13).headDim(16).causal(true).dtype(BF16).build();

    private static short bits(float f) {
        return BF16.fromFloat(f);
    }

    private static float f(int floatBits) {
        return Float.intBitsToFloat(floatBits);
    }

    @Test
    void roundsToNearestTiesToEven() {
        assertEquals((short) 0x3F80, bits(f(0x3F808000))); // 1 + 2^-8: halfway, 1.0 is even
        assertEquals((short) 0x3F82, bits(f(0x3F818000))); // halfway above an odd kept part: up to even
        assertEquals((short) 0x3F81, bits(f(0x3F808001))); // just past halfway: up
        assertEquals((short) 0x3F80, bits(f(0x3F807FFF))); // just below: down
        assertEquals((short) 0xBF80, bits(f(0xBF808000))); // the same for negatives
        assertEquals((short) 0xBF82, bits(f(0xBF818000)));
        assertEquals((short) 0x8000, bits(-0f));
        assertEquals(1.0f, BF16.toFloat((short) 0x3F80));
    }

    @Test
    void keepsNanAndInfinityAndOverflowsToInfinity() {
        assertEquals((short) 0x7F80, bits(Float.POSITIVE_INFINITY));
        assertEquals((short) 0xFF80, bits(Float.NEGATIVE_INFINITY));
        assertEquals((short) 0x7F80, bits(Float.MAX_VALUE)); // past bf16's largest finite: rounds to infinity
        assertEquals((short) 0xFF80, bits(-Float.MAX_VALUE));
        assertEquals(f(0x7F7F0000), BF16.toFloat(bits(f(0x7F7F7FFF)))); // largest finite bf16 stays finite
        for (int nan : new int[] {0x7FC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFC00000}) {
            short b = bits(f(nan));
            assertTrue(Float.isNaN(BF16.toFloat(b)), Integer.toHexString(nan) + " -> " + Integer.toHexString(b & 0xFFFF));
            assertEquals(nan < 0, b < 0, "sign of " + Integer.toHexString(nan));
        }
    }

    @Test
    void roundsSubnormalsAndConvertsBackExactly() {
        assertEquals((short) 0x0000, bits(Float.MIN_VALUE));
        assertEquals((short) 0x0000, bits(f(0x00008000))); // halfway to the smallest bf16 subnormal: to even (0)
        assertEquals((short) 0x0002, bits(f(0x00018000)));
        assertEquals((short) 0x0001, bits(f(0x00008001)));
        assertEquals(f(0x00010000), BF16.toFloat((short) 0x0001));
        assertEquals(f(0x007F0000), BF16.toFloat((short) 0x007F));
        assertEquals((short) 0x0080, bits(f(0x007F8000))); // the largest subnormal rounds up into the normals
        for (int b = 0; b < 0x10000; b++) { // every pattern: exact to float and back
            float value = BF16.toFloat((short) b);
            assertEquals(f(b << 16), value);
            if (!Float.isNaN(value)) {
                assertEquals((short) b, bits(value));
            }
        }
    }

    /** Nearest of the two bf16 neighbours in double arithmetic (exact for floats), the even one on a tie. */
    @Test
    void matchesARestatementOnRandomFloats() {
        SplittableRandom random = new SplittableRandom(22);
        for (int i = 0; i < 200_000; i++) {
            float value = f(random.nextInt());
            if (Float.isNaN(value) || Float.isInfinite(value)) {
                continue;
            }
            int truncated = Float.floatToRawIntBits(value) >>> 16;
            double down = f(truncated << 16);
            double up = f((truncated + 1) << 16); // the next one away from zero; infinity stands in for 2^128 there
            up = Double.isInfinite(up) ? Math.copySign(0x1p128, up) : up;
            double distDown = Math.abs(value - down);
            double distUp = Math.abs(up - value);
            int expected = distDown < distUp || distDown == distUp && (truncated & 1) == 0 ? truncated : truncated + 1;
            assertEquals((short) expected, bits(value), Float.toString(value));
        }
    }

    @Test
    void roundsADoubleOnce() {
        double justAboveATie = 1 + 0x1p-8 + 0x1p-40; // (float) gives exactly the tie, which would round down to 1.0
        assertEquals((short) 0x3F81, BF16.fromDouble(justAboveATie));
        assertEquals((short) 0x3F80, BF16.fromDouble(1 + 0x1p-8 - 0x1p-40));
        assertEquals((short) 0x3F80, BF16.fromDouble(1 + 0x1p-8));
        assertEquals((short) 0x7F80, BF16.fromDouble(1e300));
        assertTrue(Float.isNaN(BF16.toFloat(BF16.fromDouble(Double.NaN))));
    }

    @Test
    void hostTensorOfEitherType() {
        try (HalfTensor t = HalfTensor.of(BF16, 1f, 1.00390625f, -3.14159f, 1e-40f); HalfTensor z = HalfTensor.allocate(BF16, 3);
             HalfTensor h = HalfTensor.of(1f, 1.00390625f)) {
            assertEquals(BF16, t.dtype());
            assertEquals(DType.FP16, h.dtype());
            assertArrayEquals(new float[] {1f, 1f, -3.140625f, BF16.toFloat(bits(1e-40f))}, t.toFloatArray());
            assertEquals(1.00390625f, h.get(1)); // fp16 keeps it
            assertArrayEquals(new short[] {0x3F80, 0x3F80, (short) 0xC049, bits(1e-40f)}, t.toBitsArray());
            assertArrayEquals(new float[3], z.toFloatArray());
            z.fill(Float.NaN);
            assertTrue(Float.isNaN(z.get(2)));
            z.set(0, 2.5f);
            assertEquals(2.5f, z.get(0));
            try (HalfTensor raw = HalfTensor.ofBits(BF16, (short) 0x4049)) {
                assertEquals(3.140625f, raw.get(0));
            }
        }
        assertEquals("dtype", assertThrows(InvalidArgumentException.class, () -> HalfTensor.allocate(DType.FP32, 4)).argument());
    }

    @Test
    void mixingElementTypesIsRefusedNamingEachTensor() {
        AttentionPlan plan = Backends.get(Backends.CPU_REFERENCE).plan(SHAPE);
        try (plan; HalfTensor q = HalfTensor.allocate(BF16, SHAPE.queryElements());
             HalfTensor k = HalfTensor.allocate(DType.FP16, SHAPE.kvElements());
             HalfTensor v = HalfTensor.allocate(BF16, SHAPE.kvElements());
             HalfTensor o = HalfTensor.allocate(BF16, SHAPE.outputElements());
             HalfTensor q16 = HalfTensor.allocate(SHAPE.queryElements()); HalfTensor k16 = HalfTensor.allocate(SHAPE.kvElements());
             HalfTensor v16 = HalfTensor.allocate(SHAPE.kvElements()); HalfTensor o16 = HalfTensor.allocate(SHAPE.outputElements())) {
            o.fill(Float.NaN);
            InvalidArgumentException mixed = assertThrows(InvalidArgumentException.class, () -> plan.forward(q, k, v, o, null));
            assertEquals("q, k, v, o = q bf16, k fp16, v bf16, o bf16: must share one element type (one type per call;"
                    + " this plan's is bf16)", mixed.getMessage());
            assertTrue(Float.isNaN(o.get(0)), "nothing written");
            InvalidArgumentException other = assertThrows(InvalidArgumentException.class,
                    () -> plan.forward(q16, k16, v16, o16, null));
            assertEquals("q, k, v, o = fp16: this plan was made for bf16 tensors (AttentionShape.dtype)", other.getMessage());
        }
    }

    /** The oracle on bf16 inputs: the values the tensors hold, double accumulation, O correctly rounded to bf16. */
    @Test
    void cpuReferenceComputesOnTheRoundedInputs() {
        SplittableRandom random = new SplittableRandom(7);
        try (HalfTensor q = gaussian(SHAPE.queryElements(), random); HalfTensor k = gaussian(SHAPE.kvElements(), random);
             HalfTensor v = gaussian(SHAPE.kvElements(), random); AttentionPlan plan = Backends.get(Backends.AUTO).plan(SHAPE)) {
            assertEquals(Backends.CPU_REFERENCE, plan.backendId(), "auto plans bf16 on cpu-reference");
            float[] lse = new float[SHAPE.logSumExpElements()];
            try (HalfTensor o = HalfTensor.allocate(BF16, SHAPE.outputElements())) {
                plan.forward(q, k, v, o, lse);
                float[] qs = q.toFloatArray();
                float[] ks = k.toFloatArray();
                float[] vs = v.toFloatArray();
                int d = SHAPE.headDim();
                for (int b = 0; b < SHAPE.batch(); b++) {
                    for (int h = 0; h < SHAPE.heads(); h++) {
                        int g = h / SHAPE.groupSize();
                        for (int i = 0; i < SHAPE.queryLength(); i++) {
                            int qRow = ((b * SHAPE.heads() + h) * SHAPE.queryLength() + i) * d;
                            int last = i + SHAPE.kvLength() - SHAPE.queryLength();
                            double[] p = new double[last + 1];
                            double max = Double.NEGATIVE_INFINITY;
                            for (int j = 0; j <= last; j++) {
                                int kRow = ((b * SHAPE.kvHeads() + g) * SHAPE.kvLength() + j) * d;
                                double dot = 0;
                                for (int c = 0; c < d; c++) {
                                    dot += (double) qs[qRow + c] * ks[kRow + c];
                                }
                                p[j] = SHAPE.scale() * dot;
                                max = Math.max(max, p[j]);
                            }
                            double sum = 0;
                            for (int j = 0; j <= last; j++) {
                                p[j] = Math.exp(p[j] - max);
                                sum += p[j];
                            }
                            assertEquals(max + Math.log(sum), lse[qRow / d], 1e-6);
                            for (int c = 0; c < d; c++) {
                                double out = 0;
                                for (int j = 0; j <= last; j++) {
                                    out += p[j] / sum * vs[((b * SHAPE.kvHeads() + g) * SHAPE.kvLength() + j) * d + c];
                                }
                                // Correctly rounded: within half a bf16 ulp (8 significant bits: 2^-8 relative).
                                assertEquals(out, o.get(qRow + c), Math.abs(out) * 0x1p-8 + 1e-30, "row " + qRow / d);
                            }
                        }
                    }
                }
            }
        }
    }

    private static float[] normals(long length, SplittableRandom random) {
        float[] values = new float[Math.toIntExact(length)];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) random.nextGaussian();
        }
        return values;
    }

    private static HalfTensor gaussian(long length, SplittableRandom random) {
        float[] values = new float[Math.toIntExact(length)];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) random.nextGaussian();
        }
        HalfTensor t = HalfTensor.of(BF16, values);
        for (int i = 0; i < values.length; i++) { // the tensor holds the bf16-rounded values
            assertEquals(BF16.toFloat(BF16.fromFloat(values[i])), t.get(i));
        }
        return t;
    }

    /**
     * ptx-cuda looks bf16 up in the manifest like any variant field, without a driver: the table ships bf16 entries
     * for every head dim it has, and a head dim it lacks is refused by name in either type.
     */
    @Test
    void ptxCudaLooksBf16UpInTheManifest() {
        PtxCudaBackend cuda = new PtxCudaBackend();
        AttentionShape d64 = SHAPE.toBuilder().headDim(64).build();
        cuda.checkSupported(d64.toBuilder().dtype(DType.FP16).build());
        for (AttentionShape shape : new AttentionShape[] {d64, d64.toBuilder().queryLength(1).build()}) {
            cuda.checkSupported(shape);
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> cuda.checkSupported(shape.toBuilder().headDim(80).build()));
            assertEquals("headDim", e.argument());
        }
    }

    /** The definition serves every element type, head dim and feature together (the GPU hosts: where their manifest does). */
    @Test
    void cpuReferenceServesEveryTypeHeadDimAndFeature() {
        SplittableRandom random = new SplittableRandom(5);
        for (DType type : new DType[] {DType.FP16, BF16}) {
            for (int d : new int[] {32, 96, 192, 256}) {
                AttentionShape shape = AttentionShape.builder().batch(1).heads(2).kvHeads(1).queryLength(3).kvLength(11)
                        .headDim(d).causal(true).window(4, 0).softcap(20f).sinks(new float[] {0.25f, -1f}).dtype(type).build();
                try (AttentionPlan plan = Attention.plan(shape, "cpu-reference");
                     HalfTensor q = HalfTensor.of(type, normals(shape.queryElements(), random));
                     HalfTensor k = HalfTensor.of(type, normals(shape.kvElements(), random));
                     HalfTensor v = HalfTensor.of(type, normals(shape.kvElements(), random));
                     HalfTensor o = HalfTensor.allocate(type, shape.outputElements())) {
                    float[] lse = new float[shape.logSumExpElements()];
                    plan.forward(q, k, v, o, lse);
                    for (int i = 0; i < o.length(); i++) {
                        assertTrue(Float.isFinite(o.get(i)), type + " D=" + d);
                    }
                    assertTrue(Float.isFinite(lse[0]), type + " D=" + d);
                }
            }
        }
    }

    /** Device tensors move bf16 bits both ways; a host tensor of the other 16-bit type is refused naming it. */
    @Test
    void bf16DeviceTensorsCopyBitsAndRefuseTheOtherType() {
        AttentionDevice device = Attention.device("cpu-reference");
        short[] bits = {(short) 0x3F80, (short) 0xC2F7, (short) 0x7FC0, (short) 0x0001, (short) 0xFF80};
        try (HalfTensor up = HalfTensor.ofBits(BF16, bits); DeviceTensor t = device.allocate(BF16, bits.length);
             HalfTensor down = HalfTensor.allocate(BF16, bits.length); HalfTensor fp16 = HalfTensor.allocate(bits.length)) {
            t.copyFrom(up);
            t.copyTo(down);
            device.synchronize();
            assertArrayEquals(bits, down.toBitsArray());
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> t.copyFrom(fp16));
            assertEquals("source.dtype", e.argument());
            e = assertThrows(InvalidArgumentException.class, () -> t.copyTo(fp16));
            assertEquals("destination.dtype", e.argument());
        }
    }

    @Test
    void theShapeCarriesItsType() {
        assertEquals(DType.FP16, AttentionShape.builder().build().dtype());
        assertEquals(BF16, SHAPE.toBuilder().build().dtype());
        assertTrue(SHAPE.toString().endsWith(" bf16"), SHAPE.toString());
        assertEquals("dtype", assertThrows(InvalidArgumentException.class,
                () -> AttentionShape.builder().dtype(DType.INT32).build()).argument());
    }
}
