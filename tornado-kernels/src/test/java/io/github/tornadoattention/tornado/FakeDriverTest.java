package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * What the TornadoVM-hosted plans ask of the CUDA driver, without a GPU: {@link FakeDriverProbeMain} runs in a child
 * JVM under TornadoVM with the fake driver of tools/fakecuda, which logs every allocation, copy and launch; the log is
 * cut at the probe's step markers. Checked for tornado-simt, tornado-mma and ptx-tornado: a forward sends Q, K and V;
 * a rerun (the benchmark hook) launches the kernels and copies nothing, after the first one, which sends the inputs
 * to the rerun plan once; closing the plans frees all their buffers; the profile option gives device times, the
 * defaults none. Skipped where gcc, cuda.h or TornadoVM are missing.
 */
class FakeDriverTest {
    private static final List<String> BACKENDS = List.of("tornado-simt", "tornado-mma", "ptx-tornado");
    private static final Pattern HOST_TO_DEVICE = Pattern.compile("\\[fakecuda] HtoD (\\d+) bytes into #(\\d+)");
    private static final Pattern ALLOC = Pattern.compile("\\[fakecuda] alloc #(\\d+) (\\d+) bytes");
    private static final Pattern FREE = Pattern.compile("\\[fakecuda] free #(\\d+)");
    /** Q is the smallest input (2 bytes per element); kernel-context and parameter copies are far smaller. */
    private static final long INPUT_BYTES = 2 * FakeDriverProbeMain.SHAPE.queryElements();
    private static String log;

    @BeforeAll
    static void runTheProbe() throws IOException, InterruptedException {
        Path argfile = FakeCuda.argfile();
        assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        Path lib = FakeCuda.library();
        assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        List<String> command = FakeCuda.tornadoJvm(argfile, "-Dtornado.recover.bailout=False",
                FakeDriverProbeMain.class.getName());
        command.addAll(BACKENDS);
        Path cwd = Files.createTempDirectory("fake-driver");   // the argfile puts "." on the module path
        Path out = cwd.resolve("probe.log");
        int exit = FakeCuda.run(command, out, Map.of("LD_LIBRARY_PATH", lib.toString(), "FAKECUDA_VERBOSE", "1"));
        log = Files.readString(out, StandardCharsets.UTF_8);
        assertEquals(0, exit, log);
    }

    /** The log lines of each step of backend {@code id}, by step name (the marker's first word). */
    private static Map<String, List<String>> steps(String id) {
        Map<String, List<String>> steps = new LinkedHashMap<>();
        List<String> current = null;
        for (String line : log.lines().toList()) {
            if (line.startsWith("[probe] ")) {
                String[] words = line.split(" ", 4);
                current = words[1].equals(id) ? new ArrayList<>() : null;
                if (current != null) {
                    steps.put(words.length > 2 ? words[2] : "", current);
                    current.add(line);
                }
            } else if (current != null) {
                current.add(line);
            }
        }
        assertTrue(steps.containsKey("end") && !steps.containsKey("failed"), id + ":\n" + log);
        return steps;
    }

    private static long inputCopies(List<String> lines) {
        return lines.stream().map(HOST_TO_DEVICE::matcher).filter(Matcher::find)
                .filter(m -> Long.parseLong(m.group(1)) >= INPUT_BYTES).count();
    }

    private static long launches(List<String> lines) {
        return lines.stream().filter(l -> l.startsWith("[fakecuda] launch")).count();
    }

    @Test
    void aForwardSendsQkvAndARerunLaunchesWithoutCopies() {
        for (String id : BACKENDS) {
            Map<String, List<String>> steps = steps(id);
            assertEquals(3, inputCopies(steps.get("forward")), id + " forward sends q, k, v: " + steps.get("forward"));
            assertTrue(launches(steps.get("forward")) >= 1, id + ": " + steps.get("forward"));
            // Its first execution sends q, k, v (and, as the forward plan's first one does, what TornadoVM deems read
            // by the kernel: mma's O and scratch).
            assertTrue(inputCopies(steps.get("first-rerun")) >= 3, id + " the rerun plan gets the inputs once: "
                    + steps.get("first-rerun"));
            List<String> reruns = steps.get("reruns");
            assertEquals(0, inputCopies(reruns), id + " reruns copy no input: " + reruns);
            assertTrue(reruns.stream().noneMatch(l -> l.startsWith("[fakecuda] DtoH")), id + " reruns copy nothing back");
            assertEquals(3 * launches(steps.get("first-rerun")), launches(reruns), id + " one launch set per rerun: "
                    + reruns);
            assertEquals(3, inputCopies(steps.get("forward-again")), id + " a forward still sends: "
                    + steps.get("forward-again"));
        }
    }

    /** Every device buffer of a plan of input size or more, its rerun plan's included, is freed when it closes. */
    @Test
    void closingFreesEveryBuffer() {
        for (String id : BACKENDS) {
            Map<Integer, Long> live = new HashMap<>();
            for (List<String> lines : steps(id).values()) {
                for (String line : lines) {
                    Matcher alloc = ALLOC.matcher(line);
                    if (alloc.find()) {
                        live.put(Integer.parseInt(alloc.group(1)), Long.parseLong(alloc.group(2)));
                    }
                    Matcher free = FREE.matcher(line);
                    if (free.find()) {
                        live.remove(Integer.parseInt(free.group(1)));
                    }
                }
            }
            live.values().removeIf(bytes -> bytes < INPUT_BYTES);
            assertTrue(live.isEmpty(), id + " leaves device buffers (#id=bytes) " + live);
            assertTrue(log.lines().noneMatch(l -> l.startsWith("[fakecuda] ERROR")), log);
        }
    }

    @Test
    void theProfileOptionGivesDeviceTimes() {
        for (String id : BACKENDS) {
            Map<String, List<String>> steps = steps(id);
            assertTrue(steps.get("millis-default").getFirst().endsWith("false"), id + ": no profiler by default");
            assertTrue(steps.get("millis-profiled").getFirst().endsWith("true"), id + ": profile on");
        }
    }
}
