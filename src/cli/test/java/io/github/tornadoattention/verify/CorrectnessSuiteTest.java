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
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import java.util.List;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class CorrectnessSuiteTest {

    static List<CorrectnessSuite.Case> fullSuite() {
        return CorrectnessSuite.fullSuite();
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("fullSuite")
    void cpuReferencePassesEveryCase(CorrectnessSuite.Case testCase) {
        CorrectnessSuite.Outcome outcome = CorrectnessSuite.check(Backends.get(Backends.CPU_REFERENCE), testCase,
                System.nanoTime());
        assertTrue(outcome.passed(), outcome.toString());
    }

    @Test
    void theSuiteCoversWhatTheDesignNames() {
        List<CorrectnessSuite.Case> seeds = CorrectnessSuite.seedCases();
        assertEquals(7, seeds.size());
        assertTrue(seeds.stream().allMatch(c -> c.shape().headDim() == 64));
        assertTrue(seeds.stream().anyMatch(c -> c.shape().causal()));
        assertTrue(seeds.stream().anyMatch(c -> !c.shape().causal()));
        assertEquals(128, seeds.stream().mapToInt(c -> c.shape().queryLength()).min().orElseThrow());
        assertEquals(2048, seeds.stream().mapToInt(c -> c.shape().queryLength()).max().orElseThrow());
        List<AttentionShape> all = fullSuite().stream().map(CorrectnessSuite.Case::shape).toList();
        assertTrue(all.stream().anyMatch(s -> s.headDim() == 128));
        assertTrue(all.stream().anyMatch(s -> s.causal() && s.queryLength() < s.kvLength()));
        assertTrue(all.stream().anyMatch(s -> s.causal() && s.queryLength() > s.kvLength()));
        assertTrue(all.stream().anyMatch(s -> s.queryLength() % 2 == 1 && s.kvLength() % 2 == 1));
        assertTrue(all.stream().anyMatch(s -> s.kvHeads() > 1 && s.groupSize() > 1));
        assertTrue(all.stream().anyMatch(s -> s.kvHeads() == 1 && s.heads() > 1));
        assertTrue(all.stream().anyMatch(s -> s.layout() == Layout.BSHD));
    }

    @Test
    void theSuiteCoversEveryHeadDimBothTypesAndEveryFeature() {
        List<AttentionShape> all = fullSuite().stream().map(CorrectnessSuite.Case::shape).toList();
        for (int d : CorrectnessSuite.HEAD_DIMS) {
            assertTrue(all.stream().anyMatch(s -> s.headDim() == d && s.causal() && s.queryLength() > 1), "prefill D=" + d);
            assertTrue(all.stream().anyMatch(s -> s.headDim() == d && !s.causal()), "non-causal D=" + d);
            assertTrue(all.stream().anyMatch(s -> s.headDim() == d && s.queryLength() == 1), "decode D=" + d);
            assertTrue(all.stream().anyMatch(s -> s.headDim() == d && s.dtype() == io.github.tornadoattention.DType.BF16),
                    "bf16 D=" + d);
        }
        assertTrue(all.stream().anyMatch(s -> s.hasWindow() && s.windowRight() < 0 && s.causal()));
        assertTrue(all.stream().anyMatch(s -> s.hasWindow() && s.windowLeft() >= 0 && s.windowRight() > 0 && !s.causal()));
        assertTrue(all.stream().anyMatch(s -> s.hasWindow() && s.windowLeft() < 0));
        assertTrue(all.stream().anyMatch(s -> s.hasWindow() && s.queryLength() == 1));
        assertTrue(all.stream().anyMatch(s -> s.hasSoftcap()));
        assertTrue(all.stream().anyMatch(s -> s.hasSinks() && s.queryLength() > s.kvLength() && s.causal()));
        assertTrue(all.stream().anyMatch(s -> s.hasSinks() && s.hasSoftcap() && s.hasWindow() && s.dtype()
                == io.github.tornadoattention.DType.BF16));
        List<AttentionShape> random = CorrectnessSuite.randomCases(200, 9).stream().map(CorrectnessSuite.Case::shape).toList();
        for (int d : CorrectnessSuite.HEAD_DIMS) {
            assertTrue(random.stream().anyMatch(s -> s.headDim() == d), "random D=" + d);
        }
        assertTrue(random.stream().anyMatch(s -> s.dtype() == io.github.tornadoattention.DType.BF16));
        assertTrue(random.stream().anyMatch(AttentionShape::hasWindow));
        assertTrue(random.stream().anyMatch(AttentionShape::hasSoftcap));
        assertTrue(random.stream().anyMatch(AttentionShape::hasSinks));
    }

    /** A backend with no kernel for a case refuses it at plan time: reported as not served, neither passed nor failed. */
    @Test
    void aRefusalAtPlanTimeIsNotServedAndAnyOtherErrorFails() {
        AttentionBackend cpu = Backends.get(Backends.CPU_REFERENCE);
        CorrectnessSuite.Case bf16 = new CorrectnessSuite.Case("bf16", AttentionShape.builder().batch(1).heads(2)
                .queryLength(20).kvLength(20).headDim(32).dtype(io.github.tornadoattention.DType.BF16).build());
        AttentionBackend refuses = new Refusing(cpu, new io.github.tornadoattention.InvalidArgumentException("dtype", "bf16",
                "test double serves fp16"));
        CorrectnessSuite.Outcome skipped = CorrectnessSuite.check(refuses, bf16, 1);
        assertFalse(skipped.served());
        assertFalse(skipped.passed());
        assertTrue(skipped.toString().startsWith("SKIP bf16") && skipped.toString().contains("test double serves fp16"),
                skipped.toString());
        CorrectnessSuite.Outcome crashed = CorrectnessSuite.check(new Refusing(cpu, new IllegalStateException("boom")), bf16, 1);
        assertTrue(crashed.served());
        assertFalse(crashed.passed());
        assertTrue(crashed.toString().startsWith("FAIL bf16") && crashed.toString().contains("boom"), crashed.toString());
    }

    /** Throws {@code error} from plan. */
    private record Refusing(AttentionBackend inner, RuntimeException error) implements AttentionBackend {
        public String id() {
            return "refusing";
        }

        public String description() {
            return "test double";
        }

        public Availability availability() {
            return inner.availability();
        }

        public void checkSupported(AttentionShape shape) {
        }

        public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
            throw error;
        }
    }

    @Test
    void randomShapesAreReproducibleFromTheirSeed() {
        assertEquals(CorrectnessSuite.randomCases(20, 5), CorrectnessSuite.randomCases(20, 5));
        assertEquals(20, CorrectnessSuite.randomCases(20, 5).stream().map(CorrectnessSuite.Case::shape).distinct().count());
    }

    /** The check must be able to fail: each broken backend below is caught. */
    @Test
    void brokenBackendsFail() {
        CorrectnessSuite.Case c = new CorrectnessSuite.Case("small", AttentionShape.builder().batch(2).heads(4)
                .kvHeads(2).queryLength(40).kvLength(50).headDim(64).causal(true).build());
        AttentionBackend cpu = Backends.get(Backends.CPU_REFERENCE);
        List<Consumer<HalfTensor>> breakages = List.of(
                o -> o.set(o.length() - 1, Float.NaN),            // one NaN
                o -> o.set(5, o.get(5) + 0.05f),                 // one element off by 0.05
                o -> {                                            // every element off by 0.5%
                    for (long i = 0; i < o.length(); i++) {
                        o.set(i, o.get(i) * 1.005f);
                    }
                },
                o -> o.fill(0f));                                 // unwritten output
        for (Consumer<HalfTensor> breakage : breakages) {
            AttentionBackend broken = new Broken(cpu, breakage);
            assertFalse(CorrectnessSuite.check(broken, c, 1).passed());
        }
        assertTrue(CorrectnessSuite.check(new Broken(cpu, o -> { }), c, 1).passed());
    }

    /** Runs the CPU reference, then damages its output; reports itself as another backend. */
    private record Broken(AttentionBackend inner, Consumer<HalfTensor> damage) implements AttentionBackend {
        public String id() {
            return "broken";
        }

        public String description() {
            return "test double";
        }

        public Availability availability() {
            return inner.availability();
        }

        public void checkSupported(AttentionShape shape) {
        }

        public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
            AttentionPlan real = inner.plan(shape, options);
            return new AttentionPlan(id(), shape) {
                @Override
                protected void compute(HalfTensor q, HalfTensor k, HalfTensor v, HalfTensor o, float[] lse) {
                    real.forward(q, k, v, o, lse);
                    damage.accept(o);
                }

                @Override
                protected void release() {
                    real.close();
                }
            };
        }
    }
}
