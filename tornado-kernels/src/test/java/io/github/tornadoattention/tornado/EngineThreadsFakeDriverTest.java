package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.verify.CacheSuite;
import io.github.tornadoattention.verify.KvCacheModel;
import java.io.IOException;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * An engine serving requests from several threads on one TornadoVM device, under the fake CUDA driver in a child JVM
 * (TornadoVM's real runtime: its builds, code caches, device-context flags and execution plans; launches are no-ops,
 * so results are not checked here: {@code selftest --inference --threads N} and TornadoDeviceTest check them on a GPU).
 * Issue 23: on an H100 two such threads broke one with {@code TornadoFailureException: reset() was called after
 * warmup()}: closing any plan sets the device's reset flag, and every plan built {@code withPreCompilation()} refuses to
 * launch while it is set ({@link TornadoVMLock}).
 * <ul>
 *   <li>{@code close-then-step}, one thread: two caches built and stepped, one closed, the other steps again. Without
 *       {@link TornadoVMLock#close} clearing the flag this fails deterministically, threads or not;</li>
 *   <li>{@code threads}: {@link CacheSuite#runConcurrently} with six threads, two rounds each (varlen prefill, decode
 *       steps, truncate/reset/shared prefix, a speculative step, a rollback, a packed step, a merge; caches and plans
 *       made and closed per round), two threads on each of the plain device, one with lanes and one with CUDA graphs
 *       and lanes (three {@code DeviceState}s, one TornadoVM device): no thread fails, and the fake driver reports no
 *       error (it refuses, as the real one does, another thread's allocation while a plan's first execution captures
 *       a CUDA graph in global mode);</li>
 *   <li>{@code classic}: the same with a classic {@code AttentionPlan} per thread (built, run, closed) beside them.</li>
 * </ul>
 */
class EngineThreadsFakeDriverTest {
    static final int SLOTS = 2;
    static final int HQ = 4;
    static final int HKV = 2;
    static final int D = 64;
    static final int CAPACITY = 128;
    static final int PROMPT = 9;
    static final int THREADS = 6;
    private static final Pattern COUNTERS = Pattern.compile("\\[counters] compilations (\\d+)");
    private static String log;

    @BeforeAll
    static void runTheProbe() throws IOException, InterruptedException {
        log = FakeCuda.runProbe(Probe.class, "fake-engine-threads", Map.of(), "ptx-tornado", "tornado-simt");
    }

    /** The probe's steps of {@code id}; both backends run on TornadoVM's PTX and CUDA backends, so both must be there. */
    private static Map<String, List<String>> stepsOf(String id) {
        Map<String, List<String>> steps = FakeCuda.steps(log, id);
        assertTrue(steps.keySet().stream().noneMatch(k -> k.startsWith("unavailable")), () -> id + " unavailable under the"
                + " fake driver (" + FakeCuda.backend(log) + "): " + String.join("\n", steps.keySet()));
        return steps;
    }

    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt"})
    void closingOneCacheLeavesTheOthersRunnable(String id) {
        Map<String, List<String>> steps = stepsOf(id);
        List<String> lines = steps.get("close-then-step");
        String where = id + ":\n" + String.join("\n", lines);
        assertTrue(lines.stream().anyMatch(l -> l.contains("[close-then-step] stepped after the close")), where);
        assertEquals(List.of(2L, 0L), counts(lines), "two builds, then no build for the step after the close: " + where);
    }

    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt"})
    void engineThreadsRunWithoutATornadoFailure(String id) {
        Map<String, List<String>> steps = stepsOf(id);
        for (String step : List.of("threads", "classic")) {
            List<String> lines = steps.get(step);
            String where = id + " " + step + ":\n" + String.join("\n", lines);
            assertTrue(lines.stream().anyMatch(l -> l.startsWith("[threads] ") && l.contains(" checked calls")), where);
            if (step.equals("classic")) {
                assertTrue(lines.stream().anyMatch(l -> l.startsWith("[classic] three plans")), where);
            }
            assertTrue(lines.stream().noneMatch(l -> l.contains("reset() was called after warmup()")), where);
            // The fake driver's complaints: a capture overlapped by another thread's allocation, a use after free.
            assertTrue(lines.stream().noneMatch(l -> l.contains("[fakecuda] ERROR")), where);
        }
    }

    /** The compilations each {@code [counters]} line of {@code lines} reports. */
    private static List<Long> counts(List<String> lines) {
        return lines.stream().map(COUNTERS::matcher).filter(Matcher::find).map(m -> Long.parseLong(m.group(1))).toList();
    }

    /** Runs in the child JVM: the scenarios on each backend's device, marked for the log. */
    static final class Probe {
        private Probe() {
        }

        public static void main(String[] args) {
            FakeCuda.probeEach(args, Probe::run);
        }

        private static void run(String id) {
            io.github.tornadoattention.Availability availability = io.github.tornadoattention.Backends.get(id).availability();
            if (!availability.available()) {   // a failure of the test, with the reason
                FakeCuda.mark(id, "unavailable " + availability.detail());
                return;
            }
            AttentionDevice device = Attention.device(id);
            FakeCuda.mark(id, "close-then-step");
            closeThenStep(device);
            List<AttentionDevice> devices = List.of(device, Attention.device(id, PlanOptions.builder().lanes(2).build()),
                    Attention.device(id, PlanOptions.builder().cudaGraph(true).lanes(2).build()));
            FakeCuda.mark(id, "threads");
            report(CacheSuite.runConcurrently(devices, D, THREADS, 2, 20261126L));
            FakeCuda.mark(id, "classic");
            AtomicReference<Throwable> classicFailure = new AtomicReference<>();
            Thread classic = Thread.ofPlatform().name("classic-plans").start(() -> {
                try {
                    classicPlans(id);
                } catch (Throwable e) {
                    classicFailure.set(e);
                }
            });
            report(CacheSuite.runConcurrently(devices, D, 2, 1, 20261127L));
            join(classic);
            if (classicFailure.get() != null) {
                throw new IllegalStateException("the classic plans' thread failed: " + classicFailure.get(),
                        classicFailure.get());
            }
        }

        /** Two caches built and stepped; one closed; the other steps again (no build: its graph is still valid). */
        private static void closeThenStep(AttentionDevice device) {
            CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(SLOTS).heads(HQ).kvHeads(HKV).headDim(D)
                    .maxQueryLength(1).maxLength(CAPACITY).causal(true).build();
            KvCacheSpec cacheSpec = KvCacheSpec.contiguous(SLOTS, HKV, CAPACITY, D);
            Random random = new Random(5);
            int[] one = new int[SLOTS];
            Arrays.fill(one, 1);
            int[] prompt = new int[SLOTS];
            Arrays.fill(prompt, PROMPT);
            try (CacheAttentionPlan plan = device.plan(spec, cacheSpec);
                 DeviceTensor q = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, (int) spec.denseQueryElements()));
                 DeviceTensor k = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * HKV * D));
                 DeviceTensor v = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * HKV * D));
                 DeviceTensor pk = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * PROMPT * HKV * D));
                 DeviceTensor pv = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * PROMPT * HKV * D));
                 DeviceTensor o = device.allocate(spec.dtype(), spec.denseQueryElements());
                 KvCache a = device.kvCache(cacheSpec);
                 KvCache b = device.kvCache(cacheSpec)) {
                counted(device, () -> {
                    for (KvCache cache : List.of(a, b)) {
                        cache.appendPacked(pk, pv, prompt);
                        cache.append(k, v, Layout.BHSD, 1, one);
                        plan.forward(q, cache, o, null);
                    }
                    device.synchronize();
                });
                a.close();   // its plan closed: TornadoVM sets the device's reset flag
                counted(device, () -> {
                    b.append(k, v, Layout.BHSD, 1, one);
                    plan.forward(q, b, o, null);
                    device.synchronize();
                });
                System.err.println("[close-then-step] stepped after the close");
            }
        }

        /** Classic plans (one execution plan each: built, run, closed) on another thread, beside the engine threads. */
        private static void classicPlans(String id) {
            io.github.tornadoattention.AttentionShape shape = io.github.tornadoattention.AttentionShape.builder()
                    .batch(1).heads(2).queryLength(64).headDim(D).causal(true).build();
            Random random = new Random(9);
            for (int i = 0; i < 3; i++) {
                try (io.github.tornadoattention.AttentionPlan plan = Attention.plan(shape, id);
                     HalfTensor q = HalfTensor.of(KvCacheModel.randomFp16(random, (int) shape.queryElements()));
                     HalfTensor k = HalfTensor.of(KvCacheModel.randomFp16(random, (int) shape.kvElements()));
                     HalfTensor v = HalfTensor.of(KvCacheModel.randomFp16(random, (int) shape.kvElements()));
                     HalfTensor o = HalfTensor.allocate(shape.outputElements())) {
                    plan.forward(q, k, v, o, null);
                    plan.forward(q, k, v, o, null);
                }
            }
            System.err.println("[classic] three plans built, run and closed");
        }

        private static void report(List<CacheSuite.CaseResult> results) {
            // Launches are no-ops under the fake driver: the results are not the attention's, only their count is.
            System.err.println("[threads] " + results.size() + " checked calls");
        }

        private static void join(Thread thread) {
            try {
                thread.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }

        private static void counted(AttentionDevice device, Runnable work) {
            long compilations = device.compilations();
            work.run();
            System.err.println("[counters] compilations " + (device.compilations() - compilations));
        }
    }
}
