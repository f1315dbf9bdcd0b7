package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;

/** The tornado-simt kernels, run by {@link KernelEmulator} on the CPU, against the CPU reference. */
class SimtKernelsTest {

    static Stream<AttentionShape> shapes() {
        return Stream.of(
                shape(1, 2, 2, 70, 150, 64, false, Layout.BHSD),
                shape(1, 2, 2, 65, 65, 64, true, Layout.BHSD),
                shape(1, 2, 2, 50, 20, 64, true, Layout.BSHD),       // rows that see no key
                shape(2, 4, 2, 33, 33, 48, true, Layout.BHSD),       // GQA, D = 48
                shape(1, 2, 1, 40, 50, 128, false, Layout.BSHD),     // MQA
                shape(1, 1, 1, 17, 60, 100, true, Layout.BHSD),      // D = 100, Sq < Skv
                shape(1, 1, 1, 1, 1, 1, true, Layout.BHSD));         // D = 1
    }

    private static AttentionShape shape(int b, int hq, int hkv, int sq, int skv, int d, boolean causal, Layout layout) {
        return AttentionShape.builder().batch(b).heads(hq).kvHeads(hkv).queryLength(sq).kvLength(skv).headDim(d)
                .causal(causal).layout(layout).build();
    }

    @ParameterizedTest
    @MethodSource("shapes")
    void matchesTheReference(AttentionShape s) {
        try (RandomInputs in = RandomInputs.generate(s, 11)) {
            SimtTileConfig config = SimtTileConfig.forHeadDim(s.headDim());
            HalfFloatArray q = EmulatedInputs.halves(in.q());
            HalfFloatArray k = EmulatedInputs.halves(in.k());
            HalfFloatArray v = EmulatedInputs.halves(in.v());
            ShortArray o = EmulatedInputs.shortsFor(s);
            EmulatedInputs.poison(o.getSegment());
            FloatArray lse = EmulatedInputs.poisonedLse(s);
            int causal = s.causal() ? 1 : 0;
            int bshd = s.layout() == Layout.BSHD ? 1 : 0;
            KernelEmulator.launch(config.workgroups(s.batch(), s.queryHeads(), s.queryLength()), config.threads(), kc -> {
                if (config == SimtTileConfig.UP_TO_64) {
                    SimtKernels.attentionUpTo64(kc, q, k, v, o, lse, s.batch(), s.queryHeads(), s.kvHeads(),
                            s.queryLength(), s.kvLength(), s.headDim(), causal, bshd, s.scale());
                } else {
                    SimtKernels.attentionUpTo128(kc, q, k, v, o, lse, s.batch(), s.queryHeads(), s.kvHeads(),
                            s.queryLength(), s.kvLength(), s.headDim(), causal, bshd, s.scale());
                }
            });
            assertEquals(config.sharedMemoryBytes(), KernelEmulator.localBytesOfLastLaunch(),
                    "SimtTileConfig and the kernel's local arrays disagree");
            ErrorStats errors = EmulatedInputs.compare("tornado-simt", s, in, o.getSegment(), lse);
            assertTrue(errors.passes(), s + ": " + errors);
        }
    }
}
