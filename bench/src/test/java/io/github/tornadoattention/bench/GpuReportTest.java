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
        Files.writeString(raw.resolve("selftest-ptx-cuda.log"),
                "[1/2] PASS a [x] max abs 1.00e-03, rel 2.00e-04, lse 1e-6\n[2/2] PASS b [y] max abs 3.00e-03, rel 1.00e-04, lse 1e-6\n2 passed, 0 failed\n");
        Files.writeString(raw.resolve("selftest.log"), """
                [1/2] ptx-tornado PASS a [x] max abs 2.00e-03, rel 3.00e-04, lse 1e-6
                [1/2] tornado-mma FAIL a [x] IllegalStateException: boom
                [2/2] ptx-tornado PASS b [y] max abs 1.00e-03, rel 1.00e-04, lse 1e-6
                [2/2] tornado-mma PASS b [y] max abs 4.00e-03, rel 5.00e-04, lse 1e-6
                ptx-tornado: 2 passed, 0 failed
                tornado-mma: 1 passed, 1 failed
                3 passed, 1 failed
                """);
        int exit = new CommandLine(new GpuReport()).execute("--results", raw.toString(), "--name", "r",
                "--to", dir.toString(), "--command", "test");
        assertEquals(0, exit);
        String md = Files.readString(dir.resolve("r.md"));
        assertTrue(md.contains("| ptx-cuda | 2 passed, 0 failed | 3.00e-03 | 2.00e-04 |"), md);
        assertTrue(md.contains("| ptx-tornado | 2 passed, 0 failed | 2.00e-03 | 3.00e-04 |"), md);
        assertTrue(md.contains("| tornado-mma | 1 passed, 1 failed | 4.00e-03 | 5.00e-04 |"), md);
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
