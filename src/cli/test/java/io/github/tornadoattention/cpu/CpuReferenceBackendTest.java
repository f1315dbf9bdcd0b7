package io.github.tornadoattention.cpu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.BenchmarkHooks;
import io.github.tornadoattention.verify.CorrectnessSuite;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import org.junit.jupiter.api.Test;

class CpuReferenceBackendTest {
    private final AttentionShape shape = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(33)
            .kvLength(40).headDim(16).causal(true).build();

    @Test
    void aPlanIsReusableAcrossCallsWithNewInputs() {
        try (AttentionPlan plan = Backends.get(Backends.CPU_REFERENCE).plan(shape);
             HalfTensor o = RandomInputs.poisonedOutput(shape)) {
            for (long seed = 1; seed <= 3; seed++) {
                try (RandomInputs in = RandomInputs.generate(shape, seed)) {
                    o.fill(Float.NaN);
                    float[] lse = RandomInputs.poisonedLogSumExp(shape);
                    plan.forward(in.q(), in.k(), in.v(), o, lse);
                    ErrorStats errors = CorrectnessSuite.compareWithOracle(plan.backendId(), shape, in, o, lse);
                    assertTrue(errors.passes(), errors.toString());
                }
            }
        }
    }

    @Test
    void badBuffersAreRejectedBeforeAnythingIsWritten() {
        try (AttentionPlan plan = Backends.get(Backends.CPU_REFERENCE).plan(shape);
             RandomInputs in = RandomInputs.generate(shape, 7);
             HalfTensor o = RandomInputs.poisonedOutput(shape);
             HalfTensor shortK = HalfTensor.allocate(shape.kvElements() - 1)) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> plan.forward(in.q(), shortK, in.v(), o, null));
            assertEquals("k.length", e.argument());
            assertEquals(String.valueOf(shape.kvElements() - 1), e.value());
            assertThrows(InvalidArgumentException.class, () -> plan.forward(in.q(), in.k(), in.v(), o, new float[3]));
            assertThrows(InvalidArgumentException.class, () -> plan.forward(null, in.k(), in.v(), o, null));
            assertThrows(InvalidArgumentException.class, () -> plan.forward(in.q(), in.k(), in.v(), in.q(), null));
            for (long i = 0; i < o.length(); i++) {
                assertTrue(Float.isNaN(o.get(i)), "element " + i + " was written");
            }
        }
    }

    @Test
    void aClosedPlanOrTensorIsRefused() {
        AttentionPlan plan = Backends.get(Backends.CPU_REFERENCE).plan(shape);
        try (RandomInputs in = RandomInputs.generate(shape, 3); HalfTensor o = RandomInputs.poisonedOutput(shape)) {
            HalfTensor closed = HalfTensor.allocate(shape.queryElements());
            closed.close();
            assertThrows(InvalidArgumentException.class, () -> plan.forward(closed, in.k(), in.v(), o, null));
            BenchmarkHooks hooks = plan.benchmarkHooks();
            assertThrows(IllegalStateException.class, () -> hooks.timeOnDevice(5), "no forward call yet");
            assertThrows(IllegalStateException.class, hooks::rerunOnDevice, "no forward call yet");
            plan.forward(in.q(), in.k(), in.v(), o, null);
            assertTrue(hooks.timeOnDevice(5).isEmpty(), "the CPU has no device timer");
            assertTrue(hooks.lastDeviceMillis().isEmpty(), "the CPU has no device timer");
            assertThrows(InvalidArgumentException.class, () -> hooks.timeOnDevice(0));
            hooks.rerunOnDevice();
            plan.close();
            assertThrows(IllegalStateException.class, () -> plan.forward(in.q(), in.k(), in.v(), o, null));
            assertThrows(IllegalStateException.class, hooks::rerunOnDevice);
        }
    }

    @Test
    void emptyCausalRowsGiveZeroAndMinusInfinity() {
        AttentionShape tall = AttentionShape.builder().batch(1).heads(2).queryLength(9).kvLength(4).headDim(8)
                .causal(true).build();
        try (AttentionPlan plan = Backends.get(Backends.CPU_REFERENCE).plan(tall);
             RandomInputs in = RandomInputs.generate(tall, 11);
             HalfTensor o = RandomInputs.poisonedOutput(tall)) {
            float[] lse = RandomInputs.poisonedLogSumExp(tall);
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            for (int row = 0; row < 5; row++) {
                assertEquals(Float.NEGATIVE_INFINITY, lse[row]);
                for (int c = 0; c < 8; c++) {
                    assertEquals(0f, o.get(row * 8L + c));
                }
            }
            assertTrue(Float.isFinite(lse[5]));
        }
    }
}
