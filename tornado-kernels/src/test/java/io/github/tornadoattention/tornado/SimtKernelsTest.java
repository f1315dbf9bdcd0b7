package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.cpu.CpuReference;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.NanCheck;
import io.github.tornadoattention.verify.RandomInputs;
import java.lang.foreign.MemorySegment;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;

/** The tornado-simt kernels, run by {@link KernelEmulator} on the CPU, against the CPU reference (and NaN semantics). */
class SimtKernelsTest {

    static Stream<AttentionShape> shapes() {
        return Stream.of(
                shape(1, 2, 2, 70, 150, 64, false, Layout.BHSD),
                shape(1, 2, 2, 65, 65, 64, true, Layout.BHSD),
                shape(1, 2, 2, 50, 20, 64, true, Layout.BSHD),       // rows that see no key
                shape(2, 4, 2, 33, 33, 48, true, Layout.BHSD),       // GQA, D = 48
                shape(1, 2, 1, 40, 50, 128, false, Layout.BSHD),     // MQA
                shape(1, 1, 1, 17, 60, 100, true, Layout.BHSD),      // D = 100, Sq < Skv
                shape(1, 1, 1, 1, 1, 1, true, Layout.BHSD),          // D = 1
                shape(1, 2, 1, 20, 45, 256, true, Layout.BSHD),      // D = 256
                shape(1, 2, 2, 19, 19, 200, false, Layout.BHSD),     // D = 200 (the D <= 256 kernel)
                shape(1, 1, 1, 9, 40, 136, true, Layout.BHSD));      // D = 136
    }

    /**
     * Window, softcap and sinks (alone and together, causal or not, Sq < Skv and Sq > Skv, every kernel of the table),
     * against the CPU reference; rows that see no key (with a sink: O = 0, logsumexp = the sink).
     */
    static Stream<AttentionShape> featureShapes() {
        AttentionShape d64 = shape(1, 2, 2, 70, 150, 64, false, Layout.BHSD);
        AttentionShape d128 = shape(2, 4, 2, 33, 90, 128, true, Layout.BSHD);
        AttentionShape d256 = shape(1, 2, 1, 24, 60, 256, true, Layout.BHSD);
        float[] sinks2 = {0.7f, -1.3f};
        float[] sinks4 = {2.5f, -0.4f, 0.0f, 1.1f};
        return Stream.of(
                d64.toBuilder().window(20, 5).build(),
                d64.toBuilder().window(-1, 0).build(),
                d64.toBuilder().window(7, -1).build(),
                d64.toBuilder().softcap(2.0f).build(),
                d64.toBuilder().sinks(sinks2).build(),
                d64.toBuilder().causal(true).window(33, 0).softcap(5.0f).sinks(sinks2).build(),
                shape(1, 2, 2, 50, 20, 64, true, Layout.BSHD).toBuilder().sinks(sinks2).build(),   // rows with no key
                shape(1, 2, 2, 40, 40, 64, false, Layout.BHSD).toBuilder().window(0, 0).sinks(sinks2).build(),
                d128.toBuilder().window(16, 0).build(),
                d128.toBuilder().softcap(1.5f).sinks(sinks4).build(),
                d128.toBuilder().causal(false).window(3, 12).softcap(20.0f).sinks(sinks4).build(),
                d256.toBuilder().window(10, -1).softcap(3.0f).sinks(sinks2).build(),
                d256.toBuilder().causal(false).window(0, 4).build(),
                shape(1, 1, 1, 30, 30, 96, true, Layout.BHSD).toBuilder().window(40, 0).softcap(50.0f).build());
    }

    @ParameterizedTest
    @MethodSource("featureShapes")
    void featuresMatchTheReference(AttentionShape s) {
        matchesTheReference(s);
    }

    /**
     * The window skips the keys left of every row of a query tile: a NaN in V at key 0, which no row's window reaches,
     * leaves every row finite (a tile that was loaded would give 0 * NaN = NaN in P V).
     */
    @ParameterizedTest
    @ValueSource(ints = {64, 128, 256})
    void theWindowSkipsKeysLeftOfEveryRow(int headDim) {
        AttentionShape s = AttentionShape.builder().batch(1).heads(2).kvHeads(1).queryLength(8).kvLength(300)
                .headDim(headDim).window(20, 0).build();
        try (RandomInputs in = RandomInputs.generate(s, 13)) {
            in.v().set(s.kvStrides().rowStart(0, 0, 0), Float.NaN);
            in.k().set(s.kvStrides().rowStart(0, 0, 0) + 1, Float.NaN);
            ShortArray o = EmulatedInputs.shortsFor(s);
            EmulatedInputs.poison(o.getSegment());
            FloatArray lse = EmulatedInputs.poisonedLse(s);
            run(s, in, o, lse);
            ErrorStats errors = EmulatedInputs.compare("tornado-simt", s, in, o.getSegment(), lse);
            assertTrue(errors.passes(), s + ": " + errors);
        }
    }

    private static AttentionShape shape(int b, int hq, int hkv, int sq, int skv, int d, boolean causal, Layout layout) {
        return AttentionShape.builder().batch(b).heads(hq).kvHeads(hkv).queryLength(sq).kvLength(skv).headDim(d)
                .causal(causal).layout(layout).build();
    }

    @ParameterizedTest
    @MethodSource("shapes")
    void matchesTheReference(AttentionShape s) {
        try (RandomInputs in = RandomInputs.generate(s, 11)) {
            ShortArray o = EmulatedInputs.shortsFor(s);
            EmulatedInputs.poison(o.getSegment());
            FloatArray lse = EmulatedInputs.poisonedLse(s);
            run(s, in, o, lse);
            ErrorStats errors = EmulatedInputs.compare("tornado-simt", s, in, o.getSegment(), lse);
            assertTrue(errors.passes(), s + ": " + errors);
        }
    }

    /**
     * A NaN in one K element makes NaN exactly the rows that see that key, in O and in logsumexp, as in the CPU
     * reference ({@link NanCheck}); every other row is unchanged. (The kernel used to write such rows as finite
     * values: its fp16 conversion turned NaN into 1.0, and a NaN row sum into "no key".)
     */
    @ParameterizedTest
    @ValueSource(ints = {64, 128, 256})
    void aNaNInOneKeyReachesExactlyTheRowsThatSeeIt(int headDim) {
        AttentionShape s = NanCheck.testCase().shape().toBuilder().headDim(headDim).build();
        try (RandomInputs in = RandomInputs.generate(s, 12); HalfTensor out = HalfTensor.allocate(s.outputElements())) {
            NanCheck.poison(s, in.k());
            ShortArray o = EmulatedInputs.shortsFor(s);
            FloatArray lse = new FloatArray(s.logSumExpElements());
            lse.init(NanCheck.SENTINEL);
            o.init((short) Float.floatToFloat16(NanCheck.SENTINEL));
            run(s, in, o, lse);
            MemorySegment.copy(o.getSegment(), 0, out.data(), 0, out.data().byteSize());
            out.markModified();
            CpuReference.Result ref = CpuReference.compute(s, in.q(), in.k(), in.v());
            float[] lseValues = lse.toHeapArray();
            ErrorStats errors = NanCheck.compare(s, out, ref.output(), lseValues, ref.logSumExp());
            assertTrue(errors.passes(), s + ": " + errors);
            for (int i = 0; i < lseValues.length; i++) {
                assertEquals(Double.isNaN(ref.logSumExp()[i]), Float.isNaN(lseValues[i]), "logsumexp " + i);
            }
        }
    }

    @Test
    void fp16BitsOfSpecialValues() {
        assertEquals(0x7E00, Fp16.bits(Float.NaN));
        assertEquals(0x7C00, Fp16.bits(Float.POSITIVE_INFINITY));
        assertEquals(0xFC00, Fp16.bits(Float.NEGATIVE_INFINITY));
        assertEquals(0x7C00, Fp16.bits(65520f));
        for (float x : new float[] {0f, 1f, -2.5f, 1e-5f, 65504f, 0.333f}) {
            assertEquals(Float.floatToFloat16(x) & 0xFFFF, Fp16.bits(x), "x = " + x);
        }
    }

    /**
     * bf16 (Q, K, V, O as bf16 bits in ShortArrays): every kernel of the table, with and without the features, against the
     * reference on the same bf16 inputs, within the bf16 tolerance (verify/Tolerance).
     */
    static Stream<AttentionShape> bf16Shapes() {
        float[] sinks = {0.3f, -0.8f};
        return Stream.of(
                shape(1, 2, 1, 70, 150, 64, false, Layout.BHSD),
                shape(1, 2, 2, 33, 33, 128, true, Layout.BSHD),
                shape(1, 2, 2, 20, 45, 256, true, Layout.BHSD),
                shape(1, 2, 1, 40, 90, 80, true, Layout.BHSD).toBuilder().window(20, 0).softcap(4f).sinks(sinks).build(),
                shape(1, 2, 2, 50, 20, 192, true, Layout.BSHD).toBuilder().sinks(sinks).build())
                .map(s -> s.toBuilder().dtype(io.github.tornadoattention.DType.BF16).build());
    }

    @ParameterizedTest
    @MethodSource("bf16Shapes")
    void bf16MatchesTheReference(AttentionShape s) {
        try (RandomInputs in = RandomInputs.generate(s, 17)) {
            ShortArray o = EmulatedInputs.shortsFor(s);
            EmulatedInputs.poison(o.getSegment());
            FloatArray lse = EmulatedInputs.poisonedLse(s);
            SimtTileConfig config = SimtTileConfig.forHeadDim(s.headDim());
            ShortArray q = EmulatedInputs.bits(in.q());
            ShortArray k = EmulatedInputs.bits(in.k());
            ShortArray v = EmulatedInputs.bits(in.v());
            SimtPlan.Bf16Kernel kernel = SimtKernels.bf16Kernel(config);
            KernelEmulator.launch(config.workgroups(s.batch(), s.heads(), s.queryLength()), config.threads(),
                    kc -> kernel.apply(kc, q, k, v, o, lse, s.batch(), s.heads(), s.kvHeads(), s.queryLength(), s.kvLength(),
                            s.headDim(), s.causal() ? 1 : 0, s.layout() == Layout.BSHD ? 1 : 0, s.scale(),
                            SimtPlan.windowOf(s), SimtPlan.scoresOf(s)));
            assertEquals(config.sharedMemoryBytes(), KernelEmulator.localBytesOfLastLaunch());
            ErrorStats errors = EmulatedInputs.compare("tornado-simt", s, in, o.getSegment(), lse);
            assertTrue(errors.passes(), s + ": " + errors);
        }
    }

    private static void run(AttentionShape s, RandomInputs in, ShortArray o, FloatArray lse) {
        SimtTileConfig config = SimtTileConfig.forHeadDim(s.headDim());
        HalfFloatArray q = EmulatedInputs.halves(in.q());
        HalfFloatArray k = EmulatedInputs.halves(in.k());
        HalfFloatArray v = EmulatedInputs.halves(in.v());
        int causal = s.causal() ? 1 : 0;
        int bshd = s.layout() == Layout.BSHD ? 1 : 0;
        SimtPlan.Kernel kernel = SimtKernels.kernel(config);
        KernelEmulator.launch(config.workgroups(s.batch(), s.heads(), s.queryLength()), config.threads(),
                kc -> kernel.apply(kc, q, k, v, o, lse, s.batch(), s.heads(), s.kvHeads(), s.queryLength(), s.kvLength(),
                        s.headDim(), causal, bshd, s.scale(), SimtPlan.windowOf(s), SimtPlan.scoresOf(s)));
        assertEquals(config.sharedMemoryBytes(), KernelEmulator.localBytesOfLastLaunch(),
                "SimtTileConfig and the kernel's local arrays disagree");
    }
}
