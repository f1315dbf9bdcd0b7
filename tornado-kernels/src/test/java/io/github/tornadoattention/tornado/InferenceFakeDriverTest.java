package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tornadoattention.Attention;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.CacheAttentionPlan;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.DeviceTensor;
import io.github.tornadoattention.KvCache;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.verify.KvCacheModel;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.HashSet;
import java.util.Random;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.BeforeAll;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The TornadoVM inference device (KV caches in task graphs) under the fake CUDA driver of tools/fakecuda, in a
 * child JVM: what a decode step asks of the driver. Per backend, with two layers: after warm-up a step (each layer
 * appends one token per sequence and attends) compiles nothing, loads no module, allocates nothing, creates no
 * plan; each layer is one execution (ptx-tornado: one fused launch; the Java kernels: append, split pass and
 * combine); the host sends the step's small
 * arrays (ptx-tornado: one, the staged twin's), never the cache (the cache went up once, with the first execution); O
 * comes back once per layer, lse only when a call asks for it; a paged
 * cache behaves the same; closing frees every device buffer. mergeStates is one launch of the merge kernel per call,
 * compiled once per size class. The kernels' results need a GPU (launches are no-ops here): TornadoDeviceTest and
 * {@code selftest --inference} check them there (the merge kernel also on the emulator, MergeStatesKernelTest). The
 * same on TornadoVM's PTX and CUDA backends (the CUDA backend names kernels differently and keeps two device-wide
 * buffers: {@link FakeCuda#leftAllocations}).
 */
class InferenceFakeDriverTest {
    static final int SLOTS = 2;
    static final int HQ = 4;
    static final int HKV = 2;
    static final int D = 64;
    static final int CAPACITY = 256;
    static final int LAYERS = 2;
    static final int PROMPT = 37;
    /** Bytes of one K or V cache array on the device (TornadoVM's header, then the data). */
    static final long CACHE_BYTES = TornadoNativeArray.ARRAY_HEADER + 2L * SLOTS * HKV * CAPACITY * D;
    private static final Pattern MODULE = Pattern.compile("\\[fakecuda] module load");
    private static final Pattern LAUNCH = Pattern.compile("\\[fakecuda] launch");
    private static final Pattern LAUNCH_CONTEXT = Pattern.compile("\\[fakecuda] launch .* args: #(\\d+)\\+");
    private static final Pattern COUNTERS = Pattern.compile("compilations (\\d+) plans (\\d+) allocations (\\d+)");
    private static String log;

    @BeforeAll
    static void runTheProbe() throws IOException, InterruptedException {
        log = FakeCuda.runProbe(Probe.class, "fake-inference", Map.of("FAKECUDA_VERBOSE", "1"), "ptx-tornado",
                "tornado-simt", "tornado-mma");
    }

    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt", "tornado-mma"})
    void aDecodeStepIsOneExecutionPerLayerAndCompilesNothing(String id) {
        Map<String, List<String>> steps = steps(id);
        for (String step : List.of("step", "paged-step", "bf16-step")) {
            List<String> lines = steps.get(step);
            String where = id + " " + step + ":\n" + String.join("\n", lines);
            assertEquals(0, count(lines, MODULE), "no module loaded in a step: " + where);
            assertEquals(0, count(lines, FakeCuda.ALLOC), "no device allocation in a step: " + where);
            assertEquals(List.of(0L, 0L, 0L), counters(lines), "no compilation, plan or allocation in a step: " + where);
            long launches = count(lines, LAUNCH);
            // ptx-tornado: one fused launch (append + attention); the Java kernels: append, split pass, combine.
            long perLayer = id.equals("ptx-tornado") ? 1 : 3;
            assertEquals(perLayer * LAYERS, launches, "one execution per layer, its launches only: " + where);
            if (id.equals("ptx-tornado")) {
                // The one prebuilt task a graph may have (TornadoVM 5.2.0, PrebuiltOrderReproTest): the fused PTX twin.
                assertTrue(lines.stream().filter(l -> LAUNCH.matcher(l).find())
                        .allMatch(l -> l.contains("flash_cache_staged_decode_fused")), "the staged twin runs: " + where);
            }
            List<Long> down = bytes(lines, FakeCuda.DEVICE_TO_HOST);
            assertEquals(LAYERS, down.size(), "O comes back once per layer, lse (not asked for) never: " + where);
            List<Long> up = dataUploads(lines);
            // ptx-tornado: one stage array (step, q, new K/V: the staged twin); the Java kernels: step, q, new K, new V.
            // A paged cache's block table goes up too.
            int arrays = (id.equals("ptx-tornado") ? 1 : 4) + (step.startsWith("paged") ? 1 : 0);
            assertEquals(arrays * LAYERS, up.size(), "the step's inputs in " + arrays + " arrays per layer: " + where);
            long sent = up.stream().mapToLong(Long::longValue).sum();
            assertTrue(sent < CACHE_BYTES / 4, "a step sends its small arrays only, not the cache (" + sent + " bytes): " + where);
        }
        for (String step : List.of("lse-step", "paged-lse-step", "bf16-lse-step")) {
            List<String> lines = steps.get(step);
            assertEquals(2 * LAYERS, bytes(lines, FakeCuda.DEVICE_TO_HOST).size(),
                    "asked for, lse comes back with O: " + id + " " + step + ":\n" + String.join("\n", lines));
        }
        List<String> first = steps.get("first-step");
        long cacheUploads = bytes(first, FakeCuda.HOST_TO_DEVICE).stream().filter(b -> b == CACHE_BYTES).count();
        assertEquals(2L * LAYERS, cacheUploads, "K and V of each layer go up once, with the first execution:\n"
                + String.join("\n", first));
        assertEquals(List.of((long) LAYERS, 0L, 0L), counters(first), "one graph per cache, compiled when first used");
    }

    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt", "tornado-mma"})
    void withAPrefillPlanTooADecodeStepRunsTheDecodePlansTaskFirstAndCompilesNothing(String id) {
        List<String> lines = steps(id).get("two-plans-step");
        String where = id + ":\n" + String.join("\n", lines);
        assertEquals(List.of(0L, 0L, 0L), counters(lines), "no compilation, plan or allocation in a step: " + where);
        List<String> launches = lines.stream().filter(l -> LAUNCH.matcher(l).find()).toList();
        // Per layer: the decode plan's task(s) (ptx-tornado: the staged twin; Java: append, split, combine), then the
        // prefill plan's split and combine (attending to nothing in a decode step).
        int mainLaunches = id.equals("ptx-tornado") ? 1 : 3;
        assertEquals((mainLaunches + 2) * LAYERS, launches.size(), "launches per layer: " + where);
        assertEachExecutionRunsBothVariants(id, launches, mainLaunches, "the prefill plan's", where);
    }

    /**
     * {@code launches}, cut into executions of {@code mainLaunches + 2}: each runs the first (decode) plan's task(s)
     * first (ptx-tornado: the staged twin; Java: append, split, combine), then the other plan's own split and combine.
     * TornadoVM's PTX backend names a kernel after its task ("main_append", "attend1_..."); its CUDA backend after the
     * Java method or PTX entry, so there the other plan's split and combine are the two after the first plan's, and
     * (Java kernels) its split reads arrays of its own.
     */
    private static void assertEachExecutionRunsBothVariants(String id, List<String> launches, int mainLaunches, String other,
                                                            String where) {
        boolean cuda = FakeCuda.backend(log).equals("CUDA");
        for (int at = 0; at < launches.size(); at += mainLaunches + 2) {
            String first = launches.get(at);
            String split = launches.get(at + mainLaunches);
            String combine = launches.get(at + mainLaunches + 1);
            if (!cuda) {
                assertTrue(first.contains(id.equals("ptx-tornado") ? "staged_decode_fused" : "main_append"),
                        "the decode plan's task first: " + where);
                assertTrue(split.contains("attend1_") && combine.contains("attend1_"), other + " tasks after it: " + where);
                continue;
            }
            assertTrue(id.equals("ptx-tornado") ? kernel(first).startsWith("flash_cache_staged_decode_fused")
                    : kernel(first).equals("append"), "the decode plan's task first: " + where);
            assertTrue(kernel(split).startsWith("decodeSplit") && kernel(combine).equals("decodeCombine"),
                    other + " split and combine after it: " + where);
            if (mainLaunches == 3) {
                assertTrue(kernel(launches.get(at + 1)).startsWith("decodeSplit"), where);
                assertTrue(!arguments(launches.get(at + 1)).equals(arguments(split)), other + " split reads arrays of its own: "
                        + where);
            }
        }
    }

    /** The kernel a fake-driver launch line names. */
    private static String kernel(String launch) {
        return launch.replaceFirst(".*\\[fakecuda] launch (\\S+) .*", "$1");
    }

    /** The argument words of a fake-driver launch line. */
    private static String arguments(String launch) {
        return launch.substring(launch.indexOf(" args:") + 6).trim();
    }

    /**
     * Two decode plans that differ only in their window are two variants of each cache's graph (one build, both in it):
     * each call is one execution that runs the decode plan's task(s) and the windowed plan's Java split and combine
     * (a graph that took them for one variant would run the first plan's tasks only, and the window would be lost).
     */
    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt", "tornado-mma"})
    void plansThatDifferOnlyInTheirWindowAreTwoVariantsOfOneGraph(String id) {
        Map<String, List<String>> steps = steps(id);
        List<String> first = steps.get("feature-plans-first");
        assertEquals(List.of((long) LAYERS, 0L, 0L), counters(first), "one graph per cache, built once for both plans: "
                + String.join("\n", first));
        List<String> lines = steps.get("feature-plans-step");
        String where = id + ":\n" + String.join("\n", lines);
        assertEquals(List.of(0L, 0L, 0L), counters(lines), "no compilation, plan or allocation in a step: " + where);
        List<String> launches = lines.stream().filter(l -> LAUNCH.matcher(l).find()).toList();
        int mainLaunches = id.equals("ptx-tornado") ? 1 : 3;
        // Per layer two calls (the plain plan's, the windowed plan's), each one execution of both variants' tasks.
        assertEquals(2 * (mainLaunches + 2) * LAYERS, launches.size(), "launches per layer: " + where);
        assertEachExecutionRunsBothVariants(id, launches, mainLaunches, "the windowed plan's", where);
    }

    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt", "tornado-mma"})
    void withLanesADecodeStepDoesTheSameWorkAndAHostReadWaitsForIt(String id) {
        Map<String, List<String>> steps = steps(id);
        for (String step : List.of("lanes-step", "lanes-read")) {
            List<String> lines = steps.get(step);
            String where = id + " " + step + ":\n" + String.join("\n", lines);
            assertEquals(List.of(0L, 0L, 0L), counters(lines), "no compilation, plan or allocation in a step: " + where);
            assertEquals((id.equals("ptx-tornado") ? 1 : 3) * LAYERS, count(lines, LAUNCH), "one execution per layer: " + where);
            assertEquals(LAYERS, bytes(lines, FakeCuda.DEVICE_TO_HOST).size(), "each layer's O came back: " + where);
            assertEquals((id.equals("ptx-tornado") ? 1 : 4) * LAYERS, dataUploads(lines).size(), "the same inputs: " + where);
        }
        assertTrue(steps.get("lanes-read").stream().anyMatch(l -> l.contains("[lanes] read o: not poisoned")),
                "reading o waited for the queued calls and their output copies: " + id);
    }

    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt", "tornado-mma"})
    void mergeStatesIsOneLaunchAndCompilesOncePerSizeClass(String id) {
        Map<String, List<String>> steps = FakeCuda.steps(log, "merge:" + id);
        List<String> first = steps.get("first");
        assertEquals(List.of(1L, 0L, 0L), counters(first), "the first merge builds its graph: " + String.join("\n", first));
        assertEquals(1, count(first, MODULE), "and compiles its kernel once: " + String.join("\n", first));
        for (String step : List.of("step", "lse-step", "same-class")) {
            List<String> lines = steps.get(step);
            String where = id + " merge " + step + ":\n" + String.join("\n", lines);
            assertEquals(List.of(0L, 0L, 0L), counters(lines), "no compilation, plan or allocation: " + where);
            assertEquals(0, count(lines, MODULE), "no module loaded: " + where);
            assertEquals(0, count(lines, FakeCuda.ALLOC), "no device allocation: " + where);
            assertEquals(1, count(lines, LAUNCH), "one launch: " + where);
            assertTrue(lines.stream().filter(l -> LAUNCH.matcher(l).find())
                    .allMatch(l -> l.toLowerCase().contains("mergestates")), "the merge kernel runs: " + where);
            assertEquals(3, dataUploads(lines).size(), "the parts' O and lse and the shape go up: " + where);
            assertEquals(step.equals("lse-step") ? 2 : 1, bytes(lines, FakeCuda.DEVICE_TO_HOST).size(),
                    "O comes back, lse when asked for: " + where);
        }
        List<String> larger = steps.get("larger-class");
        assertEquals(List.of(1L, 0L, 0L), counters(larger), "a larger size class builds its own graph once: "
                + String.join("\n", larger));
        assertEquals(1, count(larger, LAUNCH), String.join("\n", larger));
    }

    @ParameterizedTest
    @ValueSource(strings = {"ptx-tornado", "tornado-simt", "tornado-mma"})
    void closingFreesEveryDeviceBuffer(String id) {
        List<String> all = new ArrayList<>();
        steps(id).values().forEach(all::addAll);
        assertTrue(all.stream().anyMatch(l -> FakeCuda.ALLOC.matcher(l).find()), "the graphs allocated device buffers");
        assertEquals(Map.of(), FakeCuda.leftAllocations(all, FakeCuda.backend(log), log), id
                + ": every buffer freed on close (#id=bytes left)");
    }

    private static Map<String, List<String>> steps(String id) {
        return FakeCuda.steps(log, id);
    }

    private static long count(List<String> lines, Pattern p) {
        return lines.stream().filter(l -> p.matcher(l).find()).count();
    }

    /**
     * The bytes of each host-to-device copy of the lines but TornadoVM's own: before every launch it sends a small
     * kernel-context block, the launch's first argument.
     */
    private static List<Long> dataUploads(List<String> lines) {
        Set<String> contexts = new HashSet<>();
        for (String line : lines) {
            Matcher m = LAUNCH_CONTEXT.matcher(line);
            if (m.find()) {
                contexts.add(m.group(1));
            }
        }
        List<Long> out = new ArrayList<>();
        for (String line : lines) {
            Matcher m = FakeCuda.HOST_TO_DEVICE.matcher(line);
            if (m.find() && !contexts.contains(m.group(2))) {
                out.add(Long.parseLong(m.group(1)));
            }
        }
        return out;
    }

    private static List<Long> bytes(List<String> lines, Pattern p) {
        List<Long> out = new ArrayList<>();
        for (String line : lines) {
            Matcher m = p.matcher(line);
            if (m.find()) {
                out.add(Long.parseLong(m.group(1)));
            }
        }
        return out;
    }

    /** The counter deltas the probe prints at the end of a step: compilations, plans, allocations. */
    private static List<Long> counters(List<String> lines) {
        for (String line : lines) {
            Matcher m = COUNTERS.matcher(line);
            if (m.find()) {
                return List.of(Long.parseLong(m.group(1)), Long.parseLong(m.group(2)), Long.parseLong(m.group(3)));
            }
        }
        throw new AssertionError("no counters in\n" + String.join("\n", lines));
    }

    /** Runs in the child JVM: decode steps on each backend's device, marked for the log. */
    static final class Probe {
        private Probe() {
        }

        public static void main(String[] args) {
            FakeCuda.probeEach(args, Probe::run);
        }

        private static void run(String id) {
            FakeCuda.mark(id, "device");
            AttentionDevice device = Attention.device(id);
            CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(SLOTS).heads(HQ).kvHeads(HKV).headDim(D)
                    .maxQueryLength(1).maxLength(CAPACITY).causal(true).build();
            Random random = new Random(7);
            int[] one = new int[SLOTS];
            Arrays.fill(one, 1);
            int[] prompt = new int[SLOTS];
            Arrays.fill(prompt, PROMPT);
            KvCacheSpec contiguous = KvCacheSpec.contiguous(SLOTS, HKV, CAPACITY, D);
            decodeSteps(id, device, spec, contiguous, "", random, one, prompt);
            decodeSteps(id, device, spec, KvCacheSpec.paged(SLOTS, HKV, CAPACITY, D, 16), "paged-", random, one, prompt);
            // bf16 caches: the same steps (ptx-tornado: its bf16 twin; the Java kernels: their bf16 twins).
            decodeSteps(id, device, spec.toBuilder().dtype(DType.BF16).build(), contiguous.withDtype(DType.BF16), "bf16-",
                    random, one, prompt);
            twoPlans(id, device, spec, random, one, prompt);
            featurePlans(id, device, spec, random, one, prompt);
            // With two lanes: the same steps (queued calls, one synchronisation), then "lanes-read".
            decodeSteps(id, Attention.device(id, PlanOptions.builder().lanes(2).build()), spec, contiguous, "lanes-", random,
                    one, prompt);
            merges(id, device, random);
        }

        /**
         * mergeStates, marked under "merge:" + id (its graphs are the device's, kept for its life, so the closing
         * check of the caches' buffers does not see them): first, warm-up, step, lse-step, another shape of the same
         * size class, a larger class.
         */
        private static void merges(String id, AttentionDevice device, Random random) {
            String at = "merge:" + id;
            int parts = 3;
            int rows = 37;
            try (DeviceTensor op = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, parts * rows * D));
                 DeviceTensor lp = device.allocate(DType.FP32, (long) parts * rows);
                 DeviceTensor o = device.allocate(DType.FP16, (long) rows * D);
                 DeviceTensor lse = device.allocate(DType.FP32, rows);
                 DeviceTensor op2 = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, 2 * 40 * D));
                 DeviceTensor lp2 = device.allocate(DType.FP32, 2 * 40);
                 DeviceTensor o2 = device.allocate(DType.FP16, 40L * D);
                 DeviceTensor op3 = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, parts * 200 * D));
                 DeviceTensor lp3 = device.allocate(DType.FP32, (long) parts * 200);
                 DeviceTensor o3 = device.allocate(DType.FP16, 200L * D)) {
                FakeCuda.mark(at, "first");
                counted(device, () -> device.mergeStates(op, lp, parts, D, o, null));
                FakeCuda.mark(at, "warm-up");
                counted(device, () -> device.mergeStates(op, lp, parts, D, o, null));
                FakeCuda.mark(at, "step");
                counted(device, () -> device.mergeStates(op, lp, parts, D, o, null));
                FakeCuda.mark(at, "lse-step");
                counted(device, () -> device.mergeStates(op, lp, parts, D, o, lse));
                FakeCuda.mark(at, "same-class");
                counted(device, () -> device.mergeStates(op2, lp2, 2, D, o2, null));
                FakeCuda.mark(at, "larger-class");
                counted(device, () -> device.mergeStates(op3, lp3, parts, D, o3, null));
                FakeCuda.mark(at, "end");
            }
        }

        /**
         * LAYERS caches holding a prompt, then decode steps marked {@code prefix} + first-step, warm-up, step, lse-step;
         * on a device with lanes also + read: a step read back without synchronising (o poisoned before), which must
         * wait for the queued calls and their output copies.
         */
        private static void decodeSteps(String id, AttentionDevice device, CacheAttentionSpec spec, KvCacheSpec cacheSpec,
                                        String prefix, Random random, int[] one, int[] prompt) {
            List<KvCache> caches = new ArrayList<>();
            DType t = spec.dtype();
            try (CacheAttentionPlan plan = device.plan(spec, cacheSpec);
                 DeviceTensor q = KvCacheModel.upload(device, t, KvCacheModel.random(t, random, (int) spec.denseQueryElements()));
                 DeviceTensor k = KvCacheModel.upload(device, t, KvCacheModel.random(t, random, SLOTS * HKV * D));
                 DeviceTensor v = KvCacheModel.upload(device, t, KvCacheModel.random(t, random, SLOTS * HKV * D));
                 DeviceTensor pk = KvCacheModel.upload(device, t, KvCacheModel.random(t, random, SLOTS * PROMPT * HKV * D));
                 DeviceTensor pv = KvCacheModel.upload(device, t, KvCacheModel.random(t, random, SLOTS * PROMPT * HKV * D));
                 DeviceTensor o = device.allocate(t, spec.denseQueryElements());
                 DeviceTensor lse = device.allocate(DType.FP32, (long) SLOTS * HQ)) {
                for (int l = 0; l < LAYERS; l++) {
                    KvCache cache = device.kvCache(cacheSpec);
                    caches.add(cache);
                    cache.appendPacked(pk, pv, prompt);
                }
                FakeCuda.mark(id, prefix + "first-step");
                step(id, device, caches, plan, q, k, v, o, null, one);
                FakeCuda.mark(id, prefix + "warm-up");
                step(id, device, caches, plan, q, k, v, o, null, one);
                FakeCuda.mark(id, prefix + "step");
                step(id, device, caches, plan, q, k, v, o, null, one);
                FakeCuda.mark(id, prefix + "lse-step");
                step(id, device, caches, plan, q, k, v, o, lse, one);
                if (prefix.equals("lanes-")) {
                    FakeCuda.mark(id, prefix + "read");
                    KvCacheModel.poison(o);
                    counted(device, () -> {
                        calls(caches, plan, q, k, v, o, null, one);
                        boolean poisoned = false;
                        for (float x : KvCacheModel.download(device, o)) {   // no synchronize(): the read waits
                            poisoned |= Float.isNaN(x);
                        }
                        System.err.println("[lanes] read o: " + (poisoned ? "still poisoned" : "not poisoned"));
                    });
                }
                FakeCuda.mark(id, prefix + "close");
            } finally {
                caches.forEach(KvCache::close);
            }
        }

        /**
         * A decode plan and a prefill plan over the same caches: each cache's graph holds two variants, the decode
         * plan's first (on ptx-tornado the graph's one prebuilt task), the prefill plan's Java tasks after it.
         */
        private static void twoPlans(String id, AttentionDevice device, CacheAttentionSpec spec, Random random, int[] one,
                                     int[] prompt) {
            KvCacheSpec cacheSpec = KvCacheSpec.contiguous(SLOTS, HKV, CAPACITY, D);
            CacheAttentionSpec prefillSpec = spec.toBuilder().maxQueryLength(PROMPT).maxTotalQueries(SLOTS * PROMPT).build();
            List<KvCache> caches = new ArrayList<>();
            try (CacheAttentionPlan decode = device.plan(spec, cacheSpec);
                 CacheAttentionPlan prefill = device.plan(prefillSpec, cacheSpec);
                 DeviceTensor pq = KvCacheModel.upload(device, KvCacheModel.randomFp16(random,
                         (int) prefillSpec.packedQueryElements()));
                 DeviceTensor po = device.allocate(DType.FP16, prefillSpec.packedQueryElements());
                 DeviceTensor q = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, (int) spec.denseQueryElements()));
                 DeviceTensor k = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * HKV * D));
                 DeviceTensor v = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * HKV * D));
                 DeviceTensor pk = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * PROMPT * HKV * D));
                 DeviceTensor pv = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * PROMPT * HKV * D));
                 DeviceTensor o = device.allocate(DType.FP16, spec.denseQueryElements())) {
                for (int l = 0; l < LAYERS; l++) {
                    KvCache cache = device.kvCache(cacheSpec);
                    caches.add(cache);
                    cache.appendPacked(pk, pv, prompt);
                    prefill.forwardPacked(pq, cache, po, null);
                }
                step(id, device, caches, decode, q, k, v, o, null, one);
                FakeCuda.mark(id, "two-plans-step");
                step(id, device, caches, decode, q, k, v, o, null, one);
                FakeCuda.mark(id, "two-plans-close");
            } finally {
                caches.forEach(KvCache::close);
            }
        }

        /**
         * Two decode plans over the same caches that differ only in their window (marked feature-plans-first, -step,
         * -close): each cache's graph holds both variants.
         */
        private static void featurePlans(String id, AttentionDevice device, CacheAttentionSpec spec, Random random,
                                         int[] one, int[] prompt) {
            KvCacheSpec cacheSpec = KvCacheSpec.contiguous(SLOTS, HKV, CAPACITY, D);
            List<KvCache> caches = new ArrayList<>();
            try (CacheAttentionPlan plain = device.plan(spec, cacheSpec);
                 CacheAttentionPlan windowed = device.plan(spec.toBuilder().window(16, 0).build(), cacheSpec);
                 DeviceTensor q = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, (int) spec.denseQueryElements()));
                 DeviceTensor k = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * HKV * D));
                 DeviceTensor v = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * HKV * D));
                 DeviceTensor pk = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * PROMPT * HKV * D));
                 DeviceTensor pv = KvCacheModel.upload(device, KvCacheModel.randomFp16(random, SLOTS * PROMPT * HKV * D));
                 DeviceTensor o = device.allocate(DType.FP16, spec.denseQueryElements());
                 DeviceTensor o2 = device.allocate(DType.FP16, spec.denseQueryElements())) {
                for (int l = 0; l < LAYERS; l++) {
                    KvCache cache = device.kvCache(cacheSpec);
                    caches.add(cache);
                    cache.appendPacked(pk, pv, prompt);
                }
                Runnable both = () -> {
                    for (KvCache cache : caches) {
                        cache.append(k, v, Layout.BHSD, 1, one);
                        plain.forward(q, cache, o, null);
                        windowed.forward(q, cache, o2, null);
                    }
                    device.synchronize();
                };
                FakeCuda.mark(id, "feature-plans-first");
                counted(device, both);
                FakeCuda.mark(id, "feature-plans-warm-up");
                counted(device, both);
                FakeCuda.mark(id, "feature-plans-step");
                counted(device, both);
                FakeCuda.mark(id, "feature-plans-close");
            } finally {
                caches.forEach(KvCache::close);
            }
        }

        private static void step(String id, AttentionDevice device, List<KvCache> caches, CacheAttentionPlan plan,
                                 DeviceTensor q, DeviceTensor k, DeviceTensor v, DeviceTensor o, DeviceTensor lse,
                                 int[] one) {
            counted(device, () -> {
                calls(caches, plan, q, k, v, o, lse, one);
                device.synchronize();
            });
        }

        /** A decode step's calls: per layer, one new token per slot appended, then attention. */
        private static void calls(List<KvCache> caches, CacheAttentionPlan plan, DeviceTensor q, DeviceTensor k,
                                  DeviceTensor v, DeviceTensor o, DeviceTensor lse, int[] one) {
            for (KvCache cache : caches) {
                cache.append(k, v, Layout.BHSD, 1, one);
                plan.forward(q, cache, o, lse);
            }
        }

        /** Runs {@code work}, then prints the compilations, plans and allocations it made. */
        private static void counted(AttentionDevice device, Runnable work) {
            long compilations = device.compilations();
            long plans = Attention.plansCreated();
            long allocations = device.allocations();
            work.run();
            System.err.println("[counters] compilations " + (device.compilations() - compilations) + " plans "
                    + (Attention.plansCreated() - plans) + " allocations " + (device.allocations() - allocations));
        }
    }
}
