package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.BenchmarkHooks;
import io.github.tornadoattention.verify.RandomInputs;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * What the TornadoVM-hosted plans ask of the CUDA driver, without a GPU: {@link Probe} runs in a child JVM under
 * TornadoVM with the fake driver of tools/fakecuda, which logs every allocation, copy, launch and module load, and
 * tools/fakecuda/hostpin.c preloaded, which models host registrations (cuMemHostRegister); the log is cut at the
 * probe's step markers. Checked for tornado-simt, tornado-mma and ptx-tornado, per call: the device receives exactly
 * the inputs whose tensor or version changed (Q alone for a new query, nothing when nothing changed, K or V when they
 * changed), O comes back every time, a rerun copies nothing either way, every attention launch reads the buffers the
 * inputs were sent to, and no call creates an execution plan or loads a module; closing the plan frees every device
 * buffer and undoes every host registration; the profile option gives device times, the defaults none. The same on
 * TornadoVM's PTX and CUDA backends (on the CUDA backend, what stays allocated is the device's constant and atomics
 * regions, which TornadoVM keeps for the device's life: {@link FakeCuda#cudaDeviceRegions}). Skipped
 * where gcc, cuda.h or TornadoVM are missing.
 */
class FakeDriverTest {
    private static final List<String> BACKENDS = List.of("tornado-simt", "tornado-mma", "ptx-tornado");
    static final AttentionShape SHAPE = AttentionShape.builder().batch(1).heads(2).queryLength(100).kvLength(300)
            .headDim(64).causal(true).build();
    /** What sending Q (K, V) copies: TornadoVM's array header and the data, in one copy. */
    private static final long Q_BYTES = TornadoNativeArray.ARRAY_HEADER + 2 * SHAPE.queryElements();
    private static final long KV_BYTES = TornadoNativeArray.ARRAY_HEADER + 2 * SHAPE.kvElements();
    /** The calls of the probe, in order, each a forward except the reruns. */
    private static final List<String> FORWARDS = List.of("first", "same", "new-q", "new-k", "new-v", "other-k", "all",
            "after-reruns");
    private static final Pattern LAUNCH_ARG = Pattern.compile(" #(\\d+)\\+");
    private static final Pattern EXIT = Pattern.compile(
            "\\[hostpin] exit: (\\d+) registered, (\\d+) unregistered, (\\d+) still registered, (\\d+) freed while registered");
    private static String log;

    @BeforeAll
    static void runTheProbe() throws IOException, InterruptedException {
        Path lib = FakeCuda.library();
        assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        Path hostpin = ResidencyReproTest.hostpin(lib);
        assumeTrue(hostpin != null, "hostpin.c could not be built");
        log = FakeCuda.runProbe(Probe.class, "fake-driver", Map.of("LD_PRELOAD", hostpin.toString(), "FAKECUDA_VERBOSE", "1"),
                BACKENDS.toArray(String[]::new));
    }

    private static Map<String, List<String>> steps(String id) {
        return FakeCuda.steps(log, id);
    }

    /** The input-sized host-to-device copies of a step: destination allocation id to bytes, in order. */
    private static List<long[]> inputCopies(List<String> lines) {
        List<long[]> copies = new ArrayList<>();
        for (String line : lines) {
            Matcher m = FakeCuda.HOST_TO_DEVICE.matcher(line);
            if (m.find() && Long.parseLong(m.group(1)) >= Q_BYTES) {
                copies.add(new long[] {Long.parseLong(m.group(2)), Long.parseLong(m.group(1))});
            }
        }
        return copies;
    }

    private static long count(List<String> lines, Pattern pattern) {
        return lines.stream().filter(l -> pattern.matcher(l).find()).count();
    }

    private static List<Set<Integer>> launches(List<String> lines) {
        List<Set<Integer>> launches = new ArrayList<>();
        for (String line : lines) {
            if (line.startsWith("[fakecuda] launch")) {
                Set<Integer> args = new HashSet<>();
                Matcher m = LAUNCH_ARG.matcher(line);
                while (m.find()) {
                    args.add(Integer.parseInt(m.group(1)));
                }
                launches.add(args);
            }
        }
        return launches;
    }

    /** The one allocation every input-sized copy of {@code step} went to, checking each copy's size. */
    private static int onlyDestination(String id, Map<String, List<String>> steps, String step, long bytes) {
        List<long[]> copies = inputCopies(steps.get(step));
        assertEquals(1, copies.size(), id + " " + step + " sends one input: " + steps.get(step));
        assertEquals(bytes, copies.getFirst()[1], id + " " + step + ": " + steps.get(step));
        return (int) copies.getFirst()[0];
    }

    @Test
    void eachCallSendsExactlyTheInputsThatChanged() {
        for (String id : BACKENDS) {
            Map<String, List<String>> steps = steps(id);
            int q = onlyDestination(id, steps, "new-q", Q_BYTES);
            int k = onlyDestination(id, steps, "new-k", KV_BYTES);
            int v = onlyDestination(id, steps, "new-v", KV_BYTES);
            assertNotEquals(k, v, id);
            assertEquals(k, onlyDestination(id, steps, "other-k", KV_BYTES), id + ": another K tensor, same buffer");
            for (String step : List.of("first", "all")) {   // new tensors: all three, into the same buffers
                List<long[]> copies = inputCopies(steps.get(step));
                Set<Integer> destinations = new HashSet<>();
                copies.forEach(c -> destinations.add((int) c[0]));
                assertEquals(3, copies.size(), id + " " + step + ": " + steps.get(step));
                assertEquals(Set.of(q, k, v), destinations, id + " " + step + ": " + steps.get(step));
            }
            for (String step : List.of("same", "after-reruns")) {
                assertEquals(0, inputCopies(steps.get(step)).size(), id + " " + step + " sends nothing: " + steps.get(step));
            }
            for (String step : FORWARDS) {
                List<String> lines = steps.get(step);
                assertTrue(count(lines, FakeCuda.DEVICE_TO_HOST) >= 1, id + " " + step + ": O comes back: " + lines);
                // The attention kernel reads the buffers the inputs went to (a send graph's task takes one of them).
                List<Set<Integer>> attention = launches(lines).stream().filter(a -> a.containsAll(Set.of(q, k, v))).toList();
                assertEquals(1, attention.size(), id + " " + step + ": one attention launch on Q, K, V's buffers: " + lines);
            }
            List<String> reruns = steps.get("reruns");
            assertEquals(0, inputCopies(reruns).size(), id + " reruns copy no input: " + reruns);
            assertEquals(0, count(reruns, FakeCuda.DEVICE_TO_HOST), id + " reruns copy nothing back: " + reruns);
            assertEquals(3, launches(reruns).stream().filter(a -> a.containsAll(Set.of(q, k, v))).count(), id + ": " + reruns);
        }
    }

    /**
     * After the plan is made, no call loads a module: nothing is compiled per call (and so no task graph is built, as
     * TornadoVM compiles every new graph's tasks; {@code TaskGraph}s are made in the plan's constructor only).
     */
    @Test
    void noCallCompilesAnything() {
        for (String id : BACKENDS) {
            Map<String, List<String>> steps = steps(id);
            for (String step : List.of("first", "same", "new-q", "new-k", "new-v", "other-k", "all", "reruns", "after-reruns")) {
                assertEquals(0, steps.get(step).stream().filter(l -> l.startsWith("[fakecuda] module")).count(),
                        id + " " + step + " loads no module: " + steps.get(step));
            }
            assertTrue(steps.get("plan").stream().anyMatch(l -> l.startsWith("[fakecuda] module")), id + ": the plan compiles");
        }
    }

    /** Every device buffer of the plans is freed when they close, and every host registration undone. */
    @Test
    void closingFreesEveryBufferAndUnpinsEveryArray() {
        for (String id : BACKENDS) {
            List<String> all = new java.util.ArrayList<>();
            steps(id).values().forEach(all::addAll);
            Map<Integer, Long> live = FakeCuda.leftAllocations(all, FakeCuda.backend(log), log);
            assertEquals(Map.of(), live, id + " leaves device buffers (#id=bytes)");
        }
        Matcher exit = EXIT.matcher(log);
        assertTrue(exit.find(), log);
        assertEquals(exit.group(1), exit.group(2), "every registration undone: " + exit.group());
        assertEquals("0", exit.group(4), "nothing freed while registered: " + exit.group());
        assertTrue(log.lines().noneMatch(l -> l.startsWith("[fakecuda] ERROR") || l.startsWith("[hostpin] ERROR")), log);
    }

    @Test
    void theProfileOptionGivesDeviceTimes() {
        for (String id : BACKENDS) {
            Map<String, List<String>> steps = steps(id);
            assertTrue(steps.get("millis-default").getFirst().contains(" false"), id + ": no profiler by default");
            assertTrue(steps.get("millis-profiled").getFirst().contains(" true"), id + ": profile on");
        }
    }

    /**
     * Run by {@link FakeDriverTest} in a child JVM under TornadoVM with the fake CUDA driver ({@code FAKECUDA_VERBOSE=1}:
     * it logs every allocation, copy, launch and module load to stderr). For each backend id given, it makes a plan and
     * calls forward with inputs changed one at a time, and the benchmark hooks, writing a marker line
     * ({@code [probe] <id> <step>}) to stderr before each step, so that the driver
     * calls between two markers are those of one step. Kernel results are meaningless here (launches are no-ops).
     */
    static final class Probe {
        private Probe() {
        }

        public static void main(String[] args) {
            FakeCuda.printBackend();
            for (String id : args) {
                AttentionBackend backend = switch (id) {
                    case "tornado-mma" -> new TornadoMmaBackend();
                    case "ptx-tornado" -> new PtxTornadoBackend();
                    default -> new TornadoSimtBackend();
                };
                FakeCuda.mark(id, "availability " + backend.availability());
                try (RandomInputs in = RandomInputs.generate(SHAPE, 1);
                     HalfTensor o = HalfTensor.allocate(SHAPE.outputElements());
                     HalfTensor k2 = HalfTensor.allocate(SHAPE.kvElements())) {
                    k2.copyFromBits(in.k().toBitsArray());
                    FakeCuda.mark(id, "plan");
                    AttentionPlan plan = backend.plan(SHAPE);
                    BenchmarkHooks hooks = plan.benchmarkHooks();
                    FakeCuda.mark(id, "first");
                    plan.forward(in.q(), in.k(), in.v(), o, null);
                    FakeCuda.mark(id, "same");
                    plan.forward(in.q(), in.k(), in.v(), o, new float[SHAPE.logSumExpElements()]);
                    FakeCuda.mark(id, "new-q");
                    in.q().markModified();
                    plan.forward(in.q(), in.k(), in.v(), o, null);
                    FakeCuda.mark(id, "new-k");
                    in.k().markModified();
                    plan.forward(in.q(), in.k(), in.v(), o, null);
                    FakeCuda.mark(id, "new-v");
                    in.v().markModified();
                    plan.forward(in.q(), in.k(), in.v(), o, null);
                    FakeCuda.mark(id, "other-k");
                    plan.forward(in.q(), k2, in.v(), o, null);
                    FakeCuda.mark(id, "all");
                    in.q().markModified();
                    in.k().markModified();
                    in.v().markModified();
                    plan.forward(in.q(), in.k(), in.v(), o, null);
                    FakeCuda.mark(id, "reruns");
                    for (int i = 0; i < 3; i++) {
                        hooks.rerunOnDevice();
                    }
                    FakeCuda.mark(id, "after-reruns");
                    plan.forward(in.q(), in.k(), in.v(), o, null);
                    FakeCuda.mark(id, "millis-default " + hooks.lastDeviceMillis().isPresent());
                    FakeCuda.mark(id, "close");
                    plan.close();
                    FakeCuda.mark(id, "profiled-plan");
                    PlanOptions profile = PlanOptions.builder().profile(true).build();
                    try (AttentionPlan profiled = backend.plan(SHAPE, profile)) {
                        profiled.forward(in.q(), in.k(), in.v(), o, null);
                        FakeCuda.mark(id, "millis-profiled " + profiled.benchmarkHooks().lastDeviceMillis().isPresent());
                        FakeCuda.mark(id, "close-profiled");
                    }
                } catch (RuntimeException e) {
                    FakeCuda.mark(id, "failed " + e);
                    e.printStackTrace();
                }
                FakeCuda.mark(id, "end");
            }
        }
    }
}
