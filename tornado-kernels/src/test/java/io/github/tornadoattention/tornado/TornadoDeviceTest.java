package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.BenchmarkHooks;
import io.github.tornadoattention.verify.CorrectnessSuite;
import io.github.tornadoattention.verify.ErrorStats;
import io.github.tornadoattention.verify.RandomInputs;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The TornadoVM backends on the device: the correctness suite, the device-resident inputs (what is sent when,
 * results after each kind of change, many plans in one JVM), rerun and close. Skipped, with the reason, where TornadoVM has no usable device.
 */
class TornadoDeviceTest {

    private static AttentionBackend backend(String id) {
        AttentionBackend backend = switch (id) {
            case "tornado-mma" -> new TornadoMmaBackend();
            case "ptx-tornado" -> new PtxTornadoBackend();
            default -> new TornadoSimtBackend();
        };
        Availability a = backend.availability();
        assumeTrue(a.available(), () -> "skipped: " + id + " has no TornadoVM device here (" + a.detail() + ")");
        return backend;
    }

    static Stream<Arguments> suite() {
        List<Arguments> cases = new ArrayList<>();
        for (String id : List.of("tornado-simt", "tornado-mma")) {
            for (CorrectnessSuite.Case c : CorrectnessSuite.fullSuite()) {
                cases.add(Arguments.of(id, c));
            }
        }
        return cases.stream();
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("suite")
    void passesTheCorrectnessSuite(String id, CorrectnessSuite.Case testCase) {
        AttentionBackend backend = backend(id);
        CorrectnessSuite.Outcome outcome = CorrectnessSuite.check(backend, testCase, 20261121L);
        assertTrue(outcome.passed(), outcome.toString());
    }

    /**
     * Window, softcap, sinks, head dims past 128 and bf16 on the device: each case on every Java backend that serves it
     * (checkSupported; a backend that refuses it skips it, saying so), against the CPU reference.
     */
    static Stream<Arguments> featureCases() {
        AttentionShape base = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(300).kvLength(300)
                .headDim(64).causal(true).build();
        float[] sinks = {0.5f, -1.0f, 2.0f, 0.0f};
        List<CorrectnessSuite.Case> cases = List.of(
                new CorrectnessSuite.Case("window 64,0", base.toBuilder().window(64, 0).build()),
                new CorrectnessSuite.Case("window 17,9 non-causal D=128",
                        base.toBuilder().causal(false).headDim(128).window(17, 9).build()),
                new CorrectnessSuite.Case("softcap 30 D=128", base.toBuilder().headDim(128).softcap(30f).build()),
                new CorrectnessSuite.Case("sinks", base.toBuilder().sinks(sinks).build()),
                new CorrectnessSuite.Case("all three, Sq<Skv",
                        base.toBuilder().queryLength(100).kvLength(517).window(128, 0).softcap(20f).sinks(sinks).build()),
                new CorrectnessSuite.Case("D=256", base.toBuilder().headDim(256).build()),
                new CorrectnessSuite.Case("D=256 all three non-causal, Sq<Skv", base.toBuilder().headDim(256).causal(false)
                        .queryLength(150).kvLength(333).window(30, 50).softcap(10f).sinks(sinks).build()),
                new CorrectnessSuite.Case("D=192 all three",
                        base.toBuilder().headDim(192).window(40, -1).softcap(15f).sinks(sinks).build()),
                new CorrectnessSuite.Case("bf16 D=64", base.toBuilder().dtype(io.github.tornadoattention.DType.BF16).build()),
                new CorrectnessSuite.Case("bf16 D=256 all three", base.toBuilder().headDim(256).window(50, 0).softcap(25f)
                        .sinks(sinks).dtype(io.github.tornadoattention.DType.BF16).build()));
        List<Arguments> arguments = new ArrayList<>();
        for (String id : List.of("tornado-simt", "tornado-mma")) {
            for (CorrectnessSuite.Case c : cases) {
                arguments.add(Arguments.of(id, c));
            }
        }
        return arguments.stream();
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("featureCases")
    void servesTheFeaturesItAccepts(String id, CorrectnessSuite.Case testCase) {
        AttentionBackend backend = backend(id);
        try {
            backend.checkSupported(testCase.shape());
        } catch (io.github.tornadoattention.InvalidArgumentException e) {
            assumeTrue(false, () -> "skipped: " + id + " refuses " + testCase.name() + ": " + e.getMessage());
        }
        CorrectnessSuite.Outcome outcome = CorrectnessSuite.check(backend, testCase, 20261126L);
        assertTrue(outcome.passed(), outcome.toString());
    }

    /**
     * The inference device (KV caches in task graphs) on each TornadoVM backend, against the CPU reference over
     * {@code CacheSuite}'s scenarios (prefill packed, decode steps, rollbacks, shared prefixes, speculative steps;
     * contiguous and paged; outputs poisoned before every call): the score features (a causal local layer with window,
     * softcap and sinks, a non-causal window reaching right, sinks alone), bf16 caches, and head dims past 128 and not
     * powers of two. The features and bf16 used to be lost between a plan and its cache graph's variant (found on an
     * H200 by {@code selftest --inference}); without a GPU, CacheVariantTest checks the variants on the emulator.
     */
    static Stream<Arguments> inferenceCases() {
        List<Arguments> cases = new ArrayList<>();
        for (String id : List.of("tornado-simt", "tornado-mma", "ptx-tornado")) {
            cases.add(Arguments.of(id, "features", 64));
            cases.add(Arguments.of(id, "features", 256));
            cases.add(Arguments.of(id, "bf16", 96));
            cases.add(Arguments.of(id, "bf16", 256));
            cases.add(Arguments.of(id, "fp16", 96));
            cases.add(Arguments.of(id, "fp16", 192));
        }
        return cases.stream();
    }

    @ParameterizedTest(name = "{0} {1} D={2}")
    @MethodSource("inferenceCases")
    void theInferenceDeviceMatchesTheReference(String id, String kind, int headDim) {
        backend(id);   // skips where there is no device
        io.github.tornadoattention.AttentionDevice device = io.github.tornadoattention.Attention.device(id);
        List<io.github.tornadoattention.verify.CacheSuite.CaseResult> results = kind.equals("features")
                ? io.github.tornadoattention.verify.CacheSuite.runWithFeatures(device, headDim, 20261126L)
                : io.github.tornadoattention.verify.CacheSuite.run(device, headDim,
                        io.github.tornadoattention.DType.valueOf(kind.toUpperCase(java.util.Locale.ROOT)), 20261126L);
        List<String> failed = results.stream().filter(r -> !r.passed()).map(r -> r.name() + ": " + r.error()).toList();
        assertTrue(!results.isEmpty(), "no scenario ran");
        assertTrue(failed.isEmpty(), String.join("\n", failed));
    }

    /**
     * Engine threads (issue 23): eight threads at once, each with its own caches and plans, two rounds of
     * {@code CacheSuite}'s scenarios and a merge, spread over the plain device, one with lanes and one with CUDA graphs
     * and lanes (one TornadoVM device), every call against the CPU reference. On an H100 two such threads broke one
     * with {@code reset() was called after warmup()} (TornadoVMLock); EngineThreadsFakeDriverTest checks the same
     * without a GPU, results aside.
     */
    @ParameterizedTest
    @ValueSource(strings = {"tornado-simt", "tornado-mma", "ptx-tornado"})
    void engineThreadsMatchTheReference(String id) {
        backend(id);   // skips where there is no device
        List<io.github.tornadoattention.AttentionDevice> devices = List.of(io.github.tornadoattention.Attention.device(id),
                io.github.tornadoattention.Attention.device(id, PlanOptions.builder().lanes(2).build()),
                io.github.tornadoattention.Attention.device(id, PlanOptions.builder().cudaGraph(true).lanes(4).build()));
        List<io.github.tornadoattention.verify.CacheSuite.CaseResult> results =
                io.github.tornadoattention.verify.CacheSuite.runConcurrently(devices, 128, 8, 2, 20261126L);
        List<String> failed = results.stream().filter(r -> !r.passed()).map(r -> r.name() + ": " + r.error()).toList();
        assertEquals(8 * 2 * 10, results.size(), "every thread's calls were checked");
        assertTrue(failed.isEmpty(), String.join("\n", failed));
    }

    /**
     * A KV cache: K and V are sent once; a new Q alone sends Q (ATTEND_NEW_Q on the resident K and V); a changed V
     * sends V alone, a different K tensor K alone; nothing changed sends nothing (ATTEND). Each result checked against
     * the reference. (What reaches the driver per call is counted without a GPU by FakeDriverTest.)
     */
    @ParameterizedTest
    @ValueSource(strings = {"tornado-simt", "tornado-mma", "ptx-tornado"})
    void sendsOnlyInputsThatChanged(String id) {
        AttentionBackend backend = backend(id);
        AttentionShape shape = AttentionShape.builder().batch(2).heads(8).kvHeads(2).queryLength(100).kvLength(300)
                .headDim(128).causal(true).layout(Layout.BSHD).build();
        try (RandomInputs in = RandomInputs.generate(shape, 1);
             AttentionPlan plan = backend.plan(shape);
             HalfTensor o = HalfTensor.allocate(shape.outputElements())) {
            TornadoAttentionPlan p = (TornadoAttentionPlan) plan;
            float[] lse = new float[shape.logSumExpElements()];

            plan.forward(in.q(), in.k(), in.v(), o, lse);
            assertSends(p, 1, 1, 1);
            assertCorrect(shape, in, o, lse);
            short[] first = o.toBitsArray();

            o.fill(Float.NaN);
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            assertSends(p, 1, 1, 1);
            assertArrayEquals(first, o.toBitsArray(), "same inputs, same output");

            in.q().copyFrom(random(shape.queryElements(), 2));           // a new query: only Q is sent
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            assertSends(p, 2, 1, 1);
            assertCorrect(shape, in, o, lse);

            in.v().copyFrom(random(shape.kvElements(), 3));              // V changed: V alone is sent
            plan.forward(in.q(), in.k(), in.v(), o, null);
            assertSends(p, 2, 1, 2);
            assertCorrect(shape, in, o, null);

            try (HalfTensor k2 = HalfTensor.allocate(shape.kvElements())) {   // another tensor, other bytes
                k2.copyFrom(random(shape.kvElements(), 4));
                in.k().copyFromBits(k2.toBitsArray());
                try (HalfTensor fresh = plan.forward(in.q(), k2, in.v())) {
                    assertSends(p, 2, 2, 2);
                    assertCorrect(shape, in, fresh, null);
                }
            }
            in.q().copyFrom(random(shape.queryElements(), 5));           // Q and K at once
            in.k().copyFrom(random(shape.kvElements(), 6));
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            assertSends(p, 3, 3, 2);
            assertCorrect(shape, in, o, lse);
        }
    }

    /**
     * Plans made and closed one after another in one JVM, each over several calls with inputs changed one at a time,
     * stay correct (the removed multi-graph scheme read an earlier plan's inputs after a few plans; README, "Device
     * residency in TornadoVM 5.2.0").
     */
    @ParameterizedTest
    @ValueSource(strings = {"tornado-simt", "tornado-mma", "ptx-tornado"})
    void manyPlansInOneJvmStayCorrect(String id) {
        AttentionBackend backend = backend(id);
        AttentionShape shape = AttentionShape.builder().batch(1).heads(8).kvHeads(2).queryLength(64).kvLength(4096)
                .headDim(64).causal(true).build();
        for (int round = 0; round < 6; round++) {
            try (RandomInputs in = RandomInputs.generate(shape, 100 + round);
                 AttentionPlan plan = backend.plan(shape);
                 HalfTensor o = HalfTensor.allocate(shape.outputElements())) {
                float[] lse = new float[shape.logSumExpElements()];
                plan.forward(in.q(), in.k(), in.v(), o, lse);
                assertCorrect(shape, in, o, lse);
                for (int step = 0; step < 3; step++) {
                    in.q().copyFrom(random(shape.queryElements(), 1000L * round + step));
                    if (step == 1) {
                        in.v().copyFrom(random(shape.kvElements(), 2000L * round + step));
                    }
                    o.fill(Float.NaN);
                    plan.forward(in.q(), in.k(), in.v(), o, lse);
                    assertCorrect(shape, in, o, lse);
                }
            }
        }
    }

    /**
     * The benchmark hook rerunOnDevice runs the kernels on the inputs on the device (ATTEND): nothing sent, nothing
     * copied back, no plan built; a forward after it sends only what changed; a closed plan refuses calls.
     */
    @ParameterizedTest
    @ValueSource(strings = {"tornado-simt", "tornado-mma", "ptx-tornado"})
    void rerunsWithoutCopiesAndCloses(String id) {
        AttentionBackend backend = backend(id);
        AttentionShape shape = AttentionShape.builder().batch(1).heads(4).queryLength(256).headDim(64).causal(true).build();
        try (RandomInputs in = RandomInputs.generate(shape, 4);
             HalfTensor o = HalfTensor.allocate(shape.outputElements())) {
            AttentionPlan plan = backend.plan(shape);
            BenchmarkHooks hooks = plan.benchmarkHooks();
            TornadoAttentionPlan p = (TornadoAttentionPlan) plan;
            plan.forward(in.q(), in.k(), in.v(), o, null);
            short[] first = o.toBitsArray();
            o.fill(0f);
            int attends = p.runs(TornadoAttentionPlan.Graph.ATTEND);
            for (int i = 0; i < 3; i++) {
                hooks.rerunOnDevice();
            }
            assertSends(p, 1, 1, 1);
            assertEquals(attends + 3, p.runs(TornadoAttentionPlan.Graph.ATTEND), "a rerun runs ATTEND");
            assertEquals(0f, o.get(0), "rerun copies nothing back");
            plan.forward(in.q(), in.k(), in.v(), o, null);
            assertSends(p, 1, 1, 1);
            assertArrayEquals(first, o.toBitsArray());
            in.k().markModified();
            plan.forward(in.q(), in.k(), in.v(), o, null);
            assertSends(p, 1, 2, 1);
            hooks.rerunOnDevice();
            plan.close();
            assertThrows(IllegalStateException.class, () -> plan.forward(in.q(), in.k(), in.v(), o, null));
            assertThrows(IllegalStateException.class, hooks::rerunOnDevice);
        }
    }

    /** PlanOptions: profile reports each call's kernel time; CUDA graphs give the same result. */
    @ParameterizedTest
    @ValueSource(strings = {"tornado-simt", "tornado-mma", "ptx-tornado"})
    void honoursThePlanOptions(String id) {
        AttentionBackend backend = backend(id);
        AttentionShape shape = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(130).kvLength(200)
                .headDim(64).causal(true).build();
        try (RandomInputs in = RandomInputs.generate(shape, 5);
             HalfTensor o = HalfTensor.allocate(shape.outputElements())) {
            try (AttentionPlan plain = backend.plan(shape)) {
                plain.forward(in.q(), in.k(), in.v(), o, null);
                assertTrue(plain.benchmarkHooks().lastDeviceMillis().isEmpty(), "no profiler by default");
            }
            short[] expected = o.toBitsArray();
            try (AttentionPlan profiled = backend.plan(shape, PlanOptions.builder().profile(true).build())) {
                profiled.forward(in.q(), in.k(), in.v(), o, null);
                assertTrue(profiled.benchmarkHooks().lastDeviceMillis().orElse(-1) >= 0, "profiled kernel time");
                profiled.benchmarkHooks().rerunOnDevice();
                assertTrue(profiled.benchmarkHooks().lastDeviceMillis().orElse(-1) >= 0, "profiled rerun");
            }
            o.fill(Float.NaN);
            try (AttentionPlan graphs = backend.plan(shape, PlanOptions.builder().cudaGraph(true).build())) {
                graphs.forward(in.q(), in.k(), in.v(), o, null);
                graphs.forward(in.q(), in.k(), in.v(), o, null);   // a replay
                assertArrayEquals(expected, o.toBitsArray(), "CUDA graphs: the same result");
            }
        }
    }

    /** The synchronous tornado-mma kernels of the tests (the measured baseline) still run on the device. */
    @ParameterizedTest
    @ValueSource(ints = {64, 128})
    void synchronousMmaKernelsPassOnTheDevice(int headDim) {
        backend("tornado-mma");
        AttentionShape shape = AttentionShape.builder().batch(2).heads(4).kvHeads(2).queryLength(200).kvLength(333)
                .headDim(headDim).causal(true).layout(Layout.BSHD).build();
        try (RandomInputs in = RandomInputs.generate(shape, 6);
             HalfTensor o = HalfTensor.allocate(shape.outputElements());
             AttentionPlan plan = new MmaPlan(shape, TornadoDevices.nvidiaDevice().require("tornado-mma"),
                     PlanOptions.defaults(), MmaSynchronousKernels.kernel(headDim))) {
            float[] lse = new float[shape.logSumExpElements()];
            plan.forward(in.q(), in.k(), in.v(), o, lse);
            assertCorrect(shape, in, o, lse);
        }
    }

    private static void assertSends(TornadoAttentionPlan plan, int q, int k, int v) {
        assertArrayEquals(new int[] {q, k, v}, new int[] {plan.sends(0), plan.sends(1), plan.sends(2)},
                "times q, k, v were sent to the device");
    }

    private static void assertCorrect(AttentionShape shape, RandomInputs in, HalfTensor o, float[] lse) {
        ErrorStats errors = CorrectnessSuite.compareWithOracle("tornado", shape, in, o, lse);
        assertTrue(errors.passes(), errors.toString());
    }

    private static float[] random(long n, long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        float[] values = new float[Math.toIntExact(n)];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) (random.nextDouble() * 2 - 1);
        }
        return values;
    }
}
