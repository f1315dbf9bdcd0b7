package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * tools/ExecuteCostProbe.java (TornadoVM's cost per execute() on a GPU, quoted in bench/results) under the fake CUDA
 * driver: it compiles against TornadoVM's API, prints every configuration, and each plain (not CUDA graph)
 * configuration sends and receives what its line says on every execution: IN arrays of the given size host to
 * device, OUT arrays back. (Times under the fake driver mean nothing; the GPU gives them.)
 */
class ExecuteCostProbeTest {
    private static final int BYTES = 4096;
    private static final int WARMUP = 3;
    private static final int RUNS = 7;
    private static final Pattern START = Pattern.compile("\\[probe] start ins (\\d+) outs (\\d+) cudaGraph (\\w+)");
    private static final Pattern RESULT = Pattern.compile("\\[probe] ins \\d+ outs \\d+ cudaGraph \\w+ +median +[\\d.]+ us");

    @Test
    void eachConfigurationSendsAndReceivesWhatItSays() throws IOException, InterruptedException {
        Path argfile = FakeCuda.argfile();
        assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        Path lib = FakeCuda.library();
        assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        Path classes = FakeCuda.compileTool("ExecuteCostProbe.java", "execute-cost-probe");
        Path cwd = Files.createTempDirectory("execute-cost");   // the argfile puts "." on the module path
        Path out = cwd.resolve("probe.log");
        List<String> command = FakeCuda.toolJvm(argfile, classes, "ExecuteCostProbe", String.valueOf(BYTES),
                String.valueOf(WARMUP), String.valueOf(RUNS));
        int exit = FakeCuda.run(command, out, Map.of("LD_LIBRARY_PATH", lib.toString(), "FAKECUDA_VERBOSE", "1"));
        String log = Files.readString(out, StandardCharsets.UTF_8);
        assertEquals(0, exit, log);
        assertEquals(14, log.lines().filter(l -> RESULT.matcher(l).find()).count(), log);

        List<int[]> plain = new ArrayList<>();   // ins, outs, copies in, copies out of BYTES bytes (plain configurations)
        int[] current = null;
        for (String line : log.lines().toList()) {
            Matcher start = START.matcher(line);
            if (start.find()) {
                current = start.group(3).equals("false")
                        ? new int[] {Integer.parseInt(start.group(1)), Integer.parseInt(start.group(2)), 0, 0} : null;
                if (current != null) {
                    plain.add(current);
                }
            } else if (current != null) {
                Matcher in = FakeCuda.HOST_TO_DEVICE.matcher(line);
                Matcher back = FakeCuda.DEVICE_TO_HOST.matcher(line);
                if (in.find() && Long.parseLong(in.group(1)) >= BYTES) {
                    current[2]++;
                } else if (back.find() && Long.parseLong(back.group(1)) >= BYTES) {
                    current[3]++;
                }
            }
        }
        assertEquals(7, plain.size(), log);
        int executions = WARMUP + RUNS;
        for (int[] c : plain) {
            String what = "ins " + c[0] + " outs " + c[1];
            // The OUT arrays go up once (FIRST_EXECUTION; one array when there are none, for the kernel to write).
            assertEquals(c[0] * executions + Math.max(c[1], 1), c[2], what + ": arrays sent");
            assertEquals(c[1] * executions, c[3], what + ": arrays received");
        }
        assertTrue(plain.stream().anyMatch(c -> c[0] == 6 && c[1] == 2), "the largest configuration ran");
    }
}
