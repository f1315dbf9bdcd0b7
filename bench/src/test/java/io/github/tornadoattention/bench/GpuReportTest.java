package io.github.tornadoattention.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.jr.ob.JSON;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/** The report computed from raw samples: medians, TFLOP/s and ratios to SDPA. */
class GpuReportTest {

    private static Map<String, Object> selftestCase(String backend, double maxAbs, double rel) {
        return Map.of("backend", backend, "check_passed", true, "max_abs_error", maxAbs, "rel_error", rel, "lse_error", 1e-6);
    }

    @Test
    void ratiosAndThroughputComeFromTheSamples(@TempDir Path dir) throws Exception {
        Path raw = Files.createDirectories(dir.resolve("raw"));
        String spec = "16,8,8,512,512,64,0"; // 4*16*8*512*512*64 = 8.59e9 FLOPs
        Files.writeString(raw.resolve("env.json"), "{\"gpu\":\"Test GPU\",\"date\":\"2026-11-21\",\"jdk\":\"25\"}");
        Files.writeString(raw.resolve("sdpa.json"), JSON.std.asString(Map.of("results", List.of(
                Map.of("backend", "FLASH", "shape", spec, "samples_ms", List.of(0.04, 0.05, 0.06)),
                Map.of("backend", "CUDNN", "shape", spec, "error", "not supported")))));
        Files.createDirectories(raw.resolve("kernel-times"));
        Files.writeString(raw.resolve("kernel-times/ptx-cuda.json"), JSON.std.asString(Map.of("backend", "ptx-cuda",
                "shape", spec, "kernel_ms", List.of(0.1, 0.1, 0.1, 0.2, 0.2), "per_launch_ms", List.of(0.3, 0.3, 0.3))));
        // selftest --json: human lines, then one JSON object (a line on stderr may follow it)
        Files.writeString(raw.resolve("selftest-ptx-cuda.log"), "[1/2] PASS a [x] max abs 9.99e-01\n2 passed, 0 failed\n"
                + JSON.std.asString(Map.of("seed", 7, "passed", 2, "failed", 0,
                        "backends", List.of(Map.of("backend", "ptx-cuda", "passed", 2, "failed", 0)),
                        "cases", List.of(selftestCase("ptx-cuda", 1.0e-3, 2.0e-4), selftestCase("ptx-cuda", 3.0e-3, 1.0e-4))))
                + "\nWARNING: something at exit\n");
        Files.writeString(raw.resolve("selftest.log"), JSON.std.asString(Map.of("seed", 7, "passed", 3, "failed", 1,
                "backends", List.of(Map.of("backend", "ptx-tornado", "passed", 2, "failed", 0),
                        Map.of("backend", "tornado-mma", "passed", 1, "failed", 1)),
                "cases", List.of(selftestCase("ptx-tornado", 2.0e-3, 3.0e-4), selftestCase("ptx-tornado", 1.0e-3, 1.0e-4),
                        Map.of("backend", "tornado-mma", "check_passed", false, "failure", "IllegalStateException: boom"),
                        selftestCase("tornado-mma", 4.0e-3, 5.0e-4)))) + "\n");
        Files.writeString(raw.resolve("selftest-tornado-simt.log"), "[1/2] PASS a [x] max abs 1.00e-03\n");
        int exit = new CommandLine(new GpuReport()).execute("--results", raw.toString(), "--name", "r",
                "--to", dir.toString(), "--command", "test");
        assertEquals(0, exit);
        String md = Files.readString(dir.resolve("r.md"));
        assertTrue(md.contains("| ptx-cuda | 2 passed, 0 failed (seed 7) | 3.00e-03 | 2.00e-04 |"), md);
        assertTrue(md.contains("| ptx-tornado | 2 passed, 0 failed (seed 7) | 2.00e-03 | 3.00e-04 |"), md);
        assertTrue(md.contains("| tornado-mma | 1 passed, 1 failed (seed 7) | 4.00e-03 | 5.00e-04 |"), md);
        assertTrue(md.contains("| tornado-simt | did not finish | n/a | n/a |"), md);
        Map<String, Object> json = JSON.std.mapFrom(Files.readString(dir.resolve("r.json")));
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> rows = (List<Map<String, Object>>) json.get("rows");
        Map<String, Object> ours = rows.stream().filter(r -> r.get("backend").equals("ptx-cuda")).findFirst().orElseThrow();
        assertEquals(0.1, ((Number) ours.get("median_ms")).doubleValue(), 1e-12);
        assertEquals(0.5, ((Number) ours.get("vs_sdpa_flash")).doubleValue(), 1e-12); // 0.05 / 0.1
        assertEquals(null, ours.get("vs_sdpa_cudnn"));
        assertEquals(85.9, ((Number) ours.get("tflops")).doubleValue(), 0.1);
        Map<String, Object> perLaunch = rows.stream()
                .filter(r -> r.get("backend").equals("ptx-cuda") && r.get("mode").equals("device-timed, per launch"))
                .findFirst().orElseThrow();
        assertEquals(0.3, ((Number) perLaunch.get("median_ms")).doubleValue(), 1e-12);
        assertTrue(Files.size(dir.resolve("r.png")) > 1000);
    }
}
