package io.github.tornadoattention.verify;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.cpu.CpuReference;
import java.util.List;
import java.util.function.BiConsumer;
import org.junit.jupiter.api.Test;

/** The NaN case: what the reference gives, that the CPU reference passes it, and that wrong NaN handling fails. */
class NanCheckTest {
    private static final AttentionShape SHAPE = NanCheck.SHAPE;

    /** The semantics: exactly the rows that see the NaN key are NaN (O and logsumexp); some rows do, many do not. */
    @Test
    void theReferenceMakesNaNExactlyTheRowsThatSeeTheKey() {
        try (RandomInputs in = RandomInputs.generate(SHAPE, 3)) {
            NanCheck.poison(SHAPE, in.k());
            CpuReference.Result ref = CpuReference.compute(SHAPE, in.q(), in.k(), in.v());
            int nanRows = 0;
            for (int b = 0; b < SHAPE.batch(); b++) {
                for (int h = 0; h < SHAPE.heads(); h++) {
                    for (int i = 0; i < SHAPE.queryLength(); i++) {
                        boolean sees = NanCheck.sees(SHAPE, b, h, i);
                        nanRows += sees ? 1 : 0;
                        long start = SHAPE.queryStrides().rowStart(b, h, i);
                        for (int d = 0; d < SHAPE.headDim(); d++) {
                            assertEquals(sees, Double.isNaN(ref.output()[Math.toIntExact(start + d)]),
                                    "O[" + b + "," + h + "," + i + "," + d + "]");
                        }
                        assertEquals(sees, Double.isNaN(ref.logSumExp()[(b * SHAPE.heads() + h) * SHAPE.queryLength() + i]));
                    }
                }
            }
            // batch 1, the two query heads of kv head 1, queries 70..149 (key 120 is visible from query 120 - 50)
            assertEquals(2 * 80, nanRows);
        }
    }

    @Test
    void theCpuReferencePassesAndTheSuiteHasTheCase() {
        assertTrue(CorrectnessSuite.fullSuite().stream().anyMatch(NanCheck::isNanCase));
        CorrectnessSuite.Outcome outcome = CorrectnessSuite.check(Backends.get(Backends.CPU_REFERENCE),
                NanCheck.testCase(), 5);
        assertTrue(outcome.passed(), outcome.toString());
    }

    /** A NaN row left unwritten, a NaN row written as zeros, a NaN that reaches a row that does not see it: each fails. */
    @Test
    void wrongNaNHandlingFails() {
        List<BiConsumer<HalfTensor, float[]>> breakages = List.of(
                (o, lse) -> nanRows(o, lse, NanCheck.SENTINEL),           // unwritten
                (o, lse) -> nanRows(o, lse, 0f),                          // NaN dropped (as tornado-simt did)
                (o, lse) -> o.set(SHAPE.queryStrides().rowStart(0, 0, 0), Float.NaN),   // leaks into another row
                (o, lse) -> lse[0] = Float.NaN);
        for (BiConsumer<HalfTensor, float[]> breakage : breakages) {
            assertFalse(CorrectnessSuite.check(new Damaged(breakage), NanCheck.testCase(), 5).passed());
        }
        // -infinity for a NaN row's logsumexp is accepted (the kernels that take a NaN row sum for an empty row)
        assertTrue(CorrectnessSuite.check(new Damaged((o, lse) -> nanRowsLse(lse, Float.NEGATIVE_INFINITY)),
                NanCheck.testCase(), 5).passed());
    }

    private static void nanRows(HalfTensor o, float[] lse, float value) {
        for (int h = 0; h < SHAPE.heads(); h++) {
            for (int i = 0; i < SHAPE.queryLength(); i++) {
                if (NanCheck.sees(SHAPE, NanCheck.BATCH, h, i)) {
                    long start = SHAPE.queryStrides().rowStart(NanCheck.BATCH, h, i);
                    for (int d = 0; d < SHAPE.headDim(); d++) {
                        o.set(start + d, value);
                    }
                }
            }
        }
        nanRowsLse(lse, value);
    }

    private static void nanRowsLse(float[] lse, float value) {
        for (int h = 0; h < SHAPE.heads(); h++) {
            for (int i = 0; i < SHAPE.queryLength(); i++) {
                if (NanCheck.sees(SHAPE, NanCheck.BATCH, h, i)) {
                    lse[(NanCheck.BATCH * SHAPE.heads() + h) * SHAPE.queryLength() + i] = value;
                }
            }
        }
    }

    /** The CPU reference, its output then changed; reports itself as another backend. */
    private record Damaged(BiConsumer<HalfTensor, float[]> damage) implements AttentionBackend {
        public String id() {
            return "damaged";
        }

        public String description() {
            return "test double";
        }

        public Availability availability() {
            return Availability.available("CPU");
        }

        public void checkSupported(AttentionShape shape) {
        }

        public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
            AttentionPlan real = Backends.get(Backends.CPU_REFERENCE).plan(shape, options);
            return new AttentionPlan(id(), shape) {
                @Override
                protected void compute(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
                    real.forward(q, k, v, o, lse);
                    damage.accept(o, lse);
                }

                @Override
                protected void release() {
                    real.close();
                }
            };
        }
    }
}
