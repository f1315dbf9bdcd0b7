package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * tools/ResidencyRepro.java under the fake CUDA driver with tools/fakecuda/hostpin.c preloaded, which models page-locked
 * host memory (cuMemHostRegister) like the real driver and reports memory freed while registered and copies through
 * such stale registrations. What it pins down (README, "Device residency in TornadoVM 5.2.0"):
 * <ul>
 *   <li>the removed scheme ({@code old}: persisted/consumed arrays across task graphs run with {@code withGraph(i)},
 *       then {@code close()}) leaves the producer graph's device buffer and host pinning behind, and the next plan's
 *       array, at the same address, is copied through the stale pinning: on an H200 it read the previous plan's
 *       values (PTX backend; on the CUDA backend the buffer leaks but the pinning is undone). This test fails once
 *       TornadoVM frees every graph on {@code close()};</li>
 *   <li>the workarounds ({@code fixed}: {@code withAllGraphs()} before {@code close()}; {@code single}: one graph per
 *       plan) free every buffer and unpin every array;</li>
 *   <li>the KV-cache pattern ({@code resident}: cache {@code FIRST_EXECUTION}, appended on the device by a task that
 *       reads it) sends each plan's cache once and then only the token and the length, two plans alive at once; with a
 *       write-only append ({@code resident-writeonly}) TornadoVM never sends the cache.</li>
 * </ul>
 * On TornadoVM's CUDA backend the constant and atomics regions it keeps for the device's life are not leaks
 * ({@link FakeCuda#leftAllocations}).
 * Skipped where gcc, cuda.h or TornadoVM are missing.
 */
class ResidencyReproTest {
    private static final int ELEMENTS = 9 << 20;   // 36 MiB: glibc unmaps it on free, and the next one lands there
    private static final int CACHE_BYTES = (1 << 16) * 4 + 16;
    private static final Pattern EXIT = Pattern.compile(
            "\\[hostpin] exit: (\\d+) registered, (\\d+) unregistered, (\\d+) still registered, (\\d+) freed while registered");
    private static final Map<String, String> LOGS = new HashMap<>();

    @BeforeAll
    static void runTheRepro() throws IOException, InterruptedException {
        Path argfile = FakeCuda.argfile();
        assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        Path lib = FakeCuda.library();
        assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        Path hostpin = hostpin(lib);
        assumeTrue(hostpin != null, "hostpin.c could not be built");
        Path classes = FakeCuda.compileTool("ResidencyRepro.java", "residency-repro");
        for (String mode : List.of("old", "fixed", "single", "resident", "resident-writeonly")) {
            Path cwd = Files.createTempDirectory("residency-" + mode);   // the argfile puts "." on the module path
            Path out = cwd.resolve("repro.log");
            List<String> command = FakeCuda.toolJvm(argfile, classes, "ResidencyRepro", mode, "3",
                    Integer.toString(ELEMENTS));
            int exit = FakeCuda.run(command, out, Map.of("LD_LIBRARY_PATH", lib.toString(), "LD_PRELOAD", hostpin.toString(),
                    "FAKECUDA_VERBOSE", "1"));
            String log = Files.readString(out, StandardCharsets.UTF_8);
            assertEquals(0, exit, mode + ":\n" + log);
            assertTrue(log.contains("[repro] end " + mode), mode + ":\n" + log);
            LOGS.put(mode, log);
        }
    }

    /** tools/fakecuda/hostpin.c built beside the fake driver in {@code lib} (on first use), or null if gcc fails. */
    static synchronized Path hostpin(Path lib) throws IOException, InterruptedException {
        Path hostpin = lib.resolve("libhostpin.so");
        if (!Files.isRegularFile(hostpin)) {
            Path cudaInclude = Path.of(System.getenv().getOrDefault("CUDA_INCLUDE", "/usr/local/cuda/include"));
            int built = FakeCuda.run(List.of("gcc", "-shared", "-fPIC", "-O1", "-I" + cudaInclude, "-o", hostpin.toString(),
                    FakeCuda.basedir().resolve("tools/fakecuda/hostpin.c").toString(), "-ldl", "-lpthread"), null, Map.of());
            if (built != 0) {
                return null;
            }
        }
        return hostpin;
    }

    /** Device allocations of at least {@code minBytes} never freed: id to bytes. */
    private static Map<Integer, Long> leakedAllocations(String log, long minBytes) {
        Map<Integer, Long> live = FakeCuda.leftAllocations(log.lines().toList(), FakeCuda.backend(log), log);
        live.values().removeIf(bytes -> bytes < minBytes);
        return live;
    }

    /** hostpin's exit line: registered, unregistered, still registered, freed while registered. */
    private static int[] pinning(String log) {
        Matcher m = EXIT.matcher(log);
        assertTrue(m.find(), log);
        return new int[] {Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)),
            Integer.parseInt(m.group(4))};
    }

    private static long count(String log, String prefix) {
        return log.lines().filter(l -> l.startsWith(prefix)).count();
    }

    @Test
    void theRemovedSchemeLeaksTheProducerGraphAndCopiesThroughAStalePinning() {
        String log = LOGS.get("old");
        // close() after withGraph(1) frees graph 1 only: each round's persisted array stays allocated on the device...
        assertEquals(3, leakedAllocations(log, 4L * ELEMENTS).size(), log);
        int[] pins = pinning(log);
        if (FakeCuda.backend(log).equals("CUDA")) {
            // ...on the CUDA backend its host registration is undone all the same: no stale pinning to copy through.
            assertEquals(pins[0], pins[1], log);
            assertEquals(0, pins[3], log);
            assertEquals(0, count(log, "[hostpin] ERROR"), log);
            return;
        }
        // ...and, on the PTX backend, pinned: the garbage collector frees it while registered, the next round's array
        // lands on it and registering it answers 712, which TornadoVM takes for "already pinned".
        assertTrue(pins[3] >= 1, log);
        assertTrue(log.contains("-> 712 (overlaps #"), log);
        assertTrue(count(log, "[hostpin] ERROR HtoD") >= 1, "the next round's input is copied through the stale pinning:\n"
                + log);
    }

    @Test
    void closingEveryGraphOrUsingOneGraphFreesAndUnpinsEverything() {
        for (String mode : List.of("fixed", "single")) {
            String log = LOGS.get(mode);
            assertEquals(Map.of(), leakedAllocations(log, 1), mode + " leaves device buffers:\n" + log);
            int[] pins = pinning(log);
            assertEquals(pins[0], pins[1], mode + ": every registration undone\n" + log);
            assertEquals(0, pins[3], mode + ": nothing freed while registered\n" + log);
            assertEquals(0, count(log, "[hostpin] ERROR") + count(log, "[fakecuda] ERROR"), log);
        }
    }

    @Test
    void aResidentCacheIsSentOncePerPlanAndOnlyTokenAndLengthPerStep() {
        String log = LOGS.get("resident");
        // Two plans alive at once, 3 steps each: the cache of each goes to the device once.
        assertEquals(2, count(log, "[fakecuda] HtoD " + CACHE_BYTES + " bytes"), log);
        // Per step: token and length (20 bytes each, 4 elements of header + 1), the out array once per plan, and
        // TornadoVM's 24-byte kernel-context buffer before each of the 2 launches; nothing else.
        for (String line : log.lines().filter(l -> l.startsWith("[fakecuda] HtoD")).toList()) {
            assertTrue(line.startsWith("[fakecuda] HtoD " + CACHE_BYTES + " ") || line.startsWith("[fakecuda] HtoD 20 ")
                    || line.startsWith("[fakecuda] HtoD 24 "), line);
        }
        assertEquals(2 * 3 * 2 + 2, count(log, "[fakecuda] HtoD 20 "), log);
        assertEquals(Map.of(), leakedAllocations(log, 1), log);
        int[] pins = pinning(log);
        assertEquals(pins[0], pins[1], log);
        assertEquals(0, count(log, "[hostpin] ERROR") + count(log, "[fakecuda] ERROR"), log);
    }

    @Test
    void aWriteOnlyFirstTaskMakesTornadoVmDropTheCachesTransfer() {
        String log = LOGS.get("resident-writeonly");
        assertEquals(0, count(log, "[fakecuda] HtoD " + CACHE_BYTES + " bytes"), log);
    }
}
