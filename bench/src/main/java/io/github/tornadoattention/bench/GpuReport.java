package io.github.tornadoattention.bench;

import com.fasterxml.jackson.jr.ob.JSON;
import io.github.tornadoattention.measure.TimingStats;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Turns one GPU run's raw results (JMH JSON, device-timed kernel samples, the PyTorch SDPA
 * baseline, the selftest logs and the versions) into the report: a Markdown table, a JSON file and
 * a PNG chart. Everything is recomputed from raw samples with {@link TimingStats}.
 */
@Command(name = "report", mixinStandardHelpOptions = true, description = "Write the GPU report from a results folder.")
final class GpuReport implements Callable<Integer> {
    @Option(names = "--results", required = true, description = "folder with jmh*.json, kernel-times/, sdpa.json, selftest*.log (selftest --json), env.json")
    Path results;

    @Option(names = "--name", required = true, description = "report file name without extension, e.g. h100-2026-11-21")
    String name;

    @Option(names = "--to", defaultValue = "bench/results", description = "output folder (default: ${DEFAULT-VALUE})")
    Path to;

    @Option(names = "--command", defaultValue = "", description = "the command that produced the results, quoted in the report")
    String command;

    /** One timed (backend, shape, mode). */
    record Row(String backend, String shape, String mode, int samples, double medianMs, double lowMs, double highMs,
               double tflops, Double vsFlash, Double vsCudnn) {
    }

    @Override
    public Integer call() throws IOException {
        Map<String, Object> env = readJson(results.resolve("env.json"));
        Map<String, Map<String, double[]>> sdpa = readSdpa();
        List<Row> rows = new ArrayList<>();
        Map<String, Map<String, double[]>> ours = new LinkedHashMap<>(); // backend|mode -> shape -> samples
        readJmh(ours);
        readKernelTimes(ours);
        for (BenchShape shape : BenchShape.ALL) {
            String spec = shape.spec();
            Double flash = median(sdpa.get("FLASH"), spec);
            Double cudnn = median(sdpa.get("CUDNN"), spec);
            for (Map.Entry<String, Map<String, double[]>> e : ours.entrySet()) {
                double[] samples = e.getValue().get(spec);
                if (samples != null) {
                    String[] backendMode = e.getKey().split("\\|");
                    rows.add(row(backendMode[0], shape, backendMode[1], samples, flash, cudnn));
                }
            }
            for (String sdpaBackend : List.of("FLASH", "CUDNN")) {
                double[] samples = sdpa.getOrDefault(sdpaBackend, Map.of()).get(spec);
                if (samples != null) {
                    rows.add(row("sdpa-" + sdpaBackend.toLowerCase(), shape, "cuda events", samples, flash, cudnn));
                }
            }
        }
        List<String> correctness = readSelftests();
        Files.createDirectories(to);
        Files.writeString(to.resolve(name + ".md"), markdown(env, correctness, rows));
        Map<String, Object> json = new LinkedHashMap<>();
        json.put("environment", env);
        json.put("command", command);
        json.put("correctness", correctness);
        json.put("rows", rows.stream().map(GpuReport::rowMap).toList());
        json.put("chart_tflops", Chart.data(rows));
        Files.writeString(to.resolve(name + ".json"), JSON.std.with(JSON.Feature.PRETTY_PRINT_OUTPUT).asString(json));
        String chart = ", .png";
        try {
            Chart.write(rows, to.resolve(name + ".png"));
        } catch (RuntimeException | Error e) {
            System.err.println("chart not drawn (" + e + "); the table and JSON are complete (bench/chart.py draws"
                    + " the chart from the JSON)");
            chart = "";
        }
        System.out.println("wrote " + to.resolve(name + ".md") + ", .json" + chart);
        return 0;
    }

    private static Row row(String backend, BenchShape shape, String mode, double[] samples, Double flash, Double cudnn) {
        TimingStats t = TimingStats.of(samples);
        return new Row(backend, shape.label(), mode, samples.length, t.medianMillis(), t.lowMillis(), t.highMillis(),
                t.teraflops(shape.toShape().flops()), flash == null ? null : flash / t.medianMillis(),
                cudnn == null ? null : cudnn / t.medianMillis());
    }

    private static Double median(Map<String, double[]> byShape, String spec) {
        double[] samples = byShape == null ? null : byShape.get(spec);
        return samples == null ? null : TimingStats.of(samples).medianMillis();
    }

    /** Every {@code jmh*.json} in the results folder (a run may come in parts). */
    private void readJmh(Map<String, Map<String, double[]>> ours) throws IOException {
        try (Stream<Path> files = Files.list(results)) {
            for (Path file : files.filter(f -> f.getFileName().toString().matches("jmh.*\\.json")).sorted().toList()) {
                readJmh(file, ours);
            }
        }
    }

    @SuppressWarnings("unchecked")
    private void readJmh(Path file, Map<String, Map<String, double[]>> ours) throws IOException {
        for (Object o : JSON.std.listFrom(Files.readString(file))) {
            Map<String, Object> bench = (Map<String, Object>) o;
            Map<String, Object> params = (Map<String, Object>) bench.get("params");
            String method = ((String) bench.get("benchmark")).replaceAll(".*\\.", "");
            String mode = method.equals("kernel") ? "JMH resident" : "JMH java call";
            List<Double> samples = new ArrayList<>();
            Map<String, Object> metric = (Map<String, Object>) bench.get("primaryMetric");
            // SampleTime: rawDataHistogram[fork][iteration] = [[value, count], ...]
            for (Object fork : (List<Object>) metric.get("rawDataHistogram")) {
                for (Object iteration : (List<Object>) fork) {
                    for (Object bin : (List<Object>) iteration) {
                        List<Number> valueCount = (List<Number>) bin;
                        for (int i = 0; i < valueCount.get(1).intValue() && samples.size() < 100_000; i++) {
                            samples.add(valueCount.get(0).doubleValue());
                        }
                    }
                }
            }
            if (!samples.isEmpty()) {
                ours.computeIfAbsent(params.get("backend") + "|" + mode, k -> new LinkedHashMap<>())
                        .put((String) params.get("shape"), samples.stream().mapToDouble(Double::doubleValue).toArray());
            }
        }
    }

    @SuppressWarnings("unchecked")
    private void readKernelTimes(Map<String, Map<String, double[]>> ours) throws IOException {
        Path dir = results.resolve("kernel-times");
        if (!Files.isDirectory(dir)) {
            return;
        }
        try (Stream<Path> files = Files.list(dir)) {
            for (Path file : files.sorted().toList()) {
                Map<String, Object> m = readJson(file);
                double[] samples = ((List<Number>) m.get("kernel_ms")).stream().mapToDouble(Number::doubleValue).toArray();
                ours.computeIfAbsent(m.get("backend") + "|device-timed kernel", k -> new LinkedHashMap<>())
                        .put((String) m.get("shape"), samples);
                if (m.get("per_launch_ms") != null) {
                    double[] perLaunch = ((List<Number>) m.get("per_launch_ms")).stream().mapToDouble(Number::doubleValue).toArray();
                    ours.computeIfAbsent(m.get("backend") + "|device-timed, per launch", k -> new LinkedHashMap<>())
                            .put((String) m.get("shape"), perLaunch);
                }
            }
        }
    }

    @SuppressWarnings("unchecked")
    private Map<String, Map<String, double[]>> readSdpa() throws IOException {
        Map<String, Map<String, double[]>> byBackend = new LinkedHashMap<>();
        Path file = results.resolve("sdpa.json");
        if (!Files.exists(file)) {
            return byBackend;
        }
        for (Object o : (List<Object>) readJson(file).get("results")) {
            Map<String, Object> r = (Map<String, Object>) o;
            if (r.get("samples_ms") != null) {
                byBackend.computeIfAbsent((String) r.get("backend"), k -> new LinkedHashMap<>()).put((String) r.get("shape"),
                        ((List<Number>) r.get("samples_ms")).stream().mapToDouble(Number::doubleValue).toArray());
            }
        }
        return byBackend;
    }

    /**
     * One table line per backend from the selftest results: each {@code selftest*.log} ends with the
     * JSON object of {@code selftest --json} (per-backend totals and every case's errors). A log
     * without it is a run that did not finish.
     */
    @SuppressWarnings("unchecked")
    private List<String> readSelftests() throws IOException {
        List<String> lines = new ArrayList<>();
        try (Stream<Path> files = Files.list(results)) {
            for (Path file : files.filter(f -> f.getFileName().toString().matches("selftest.*\\.log")).sorted().toList()) {
                Map<String, Object> result = lastJsonObject(file);
                if (result == null) {
                    String backend = file.getFileName().toString().replaceAll("selftest-?(.*)\\.log", "$1");
                    lines.add(String.format("| %s | did not finish | n/a | n/a |", backend.isEmpty() ? file.getFileName() : backend));
                    continue;
                }
                List<Map<String, Object>> cases = (List<Map<String, Object>>) result.get("cases");
                for (Map<String, Object> total : (List<Map<String, Object>>) result.get("backends")) {
                    Object backend = total.get("backend");
                    double maxAbs = 0;
                    double maxRel = 0;
                    for (Map<String, Object> c : cases) {
                        if (backend.equals(c.get("backend")) && c.get("max_abs_error") != null) {
                            maxAbs = Math.max(maxAbs, ((Number) c.get("max_abs_error")).doubleValue());
                            maxRel = Math.max(maxRel, ((Number) c.get("rel_error")).doubleValue());
                        }
                    }
                    lines.add(String.format("| %s | %s passed, %s failed (seed %s) | %.2e | %.2e |", backend,
                            total.get("passed"), total.get("failed"), result.get("seed"), maxAbs, maxRel));
                }
            }
        }
        return lines;
    }

    /** The last line of {@code file} that is a JSON object, or null. */
    private static Map<String, Object> lastJsonObject(Path file) throws IOException {
        List<String> lines = Files.readAllLines(file);
        for (int i = lines.size() - 1; i >= 0; i--) {
            if (lines.get(i).startsWith("{")) {
                return JSON.std.mapFrom(lines.get(i));
            }
        }
        return null;
    }

    private String markdown(Map<String, Object> env, List<String> correctness, List<Row> rows) {
        StringBuilder md = new StringBuilder();
        md.append("# GPU report: ").append(env.getOrDefault("gpu", "?")).append(", ").append(env.getOrDefault("date", "?")).append("\n\n");
        md.append("| | |\n|---|---|\n");
        for (String key : List.of("gpu", "driver", "cuda", "tornadovm", "jdk", "torch")) {
            md.append("| ").append(key).append(" | ").append(env.getOrDefault(key, "?")).append(" |\n");
        }
        if (!command.isBlank()) {
            md.append("\nProduced by: `").append(command).append("`\n");
        }
        md.append("\n## Correctness (against the CPU reference, run first)\n\n");
        md.append("| backend | result | max abs error | max rel error |\n|---|---|---|---|\n");
        correctness.forEach(l -> md.append(l).append('\n'));
        md.append("\n## Performance\n\n");
        md.append("Median over samples with a bootstrap 95% interval. TFLOP/s = 4·B·Hq·Sq·Skv·D / time (half for causal). ");
        md.append("× SDPA = SDPA's median time / this row's (above 1: faster than SDPA). Modes: *device-timed kernel* ");
        md.append("(the kernels alone, timed on the device: for ptx-cuda CUDA events around 20 back-to-back launches on resident ");
        md.append("data, per launch, as SDPA is timed; for the TornadoVM-hosted backends TornadoVM's profiler around each launch, ");
        md.append("which waits for every kernel before the next launch, so launch latency is inside its events), ");
        md.append("*device-timed, per launch* (ptx-cuda: CUDA events around each single launch, the TornadoVM profiler's method: ");
        md.append("compare ptx-tornado with this row), *JMH resident* (`BenchmarkHooks.rerunOnDevice` from Java, launch and wait, ");
        md.append("no host-device copy on any backend), *JMH java call* (every input sent, O copied back), ");
        md.append("*cuda events* (SDPA, back-to-back calls on resident data).\n\n");
        md.append("| shape | backend | mode | n | median ms | 95% CI ms | TFLOP/s | × SDPA-FLASH | × SDPA-CUDNN |\n");
        md.append("|---|---|---|---|---|---|---|---|---|\n");
        for (Row r : rows) {
            md.append(String.format("| %s | %s | %s | %d | %.4f | %.4f–%.4f | %.1f | %s | %s |%n", r.shape(), r.backend(), r.mode(),
                    r.samples(), r.medianMs(), r.lowMs(), r.highMs(), r.tflops(), ratio(r.vsFlash()), ratio(r.vsCudnn())));
        }
        return md.toString();
    }

    private static String ratio(Double r) {
        return r == null ? "n/a" : String.format("%.2f", r);
    }

    private static Map<String, Object> rowMap(Row r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("shape", r.shape());
        m.put("backend", r.backend());
        m.put("mode", r.mode());
        m.put("samples", r.samples());
        m.put("median_ms", r.medianMs());
        m.put("ci95_low_ms", r.lowMs());
        m.put("ci95_high_ms", r.highMs());
        m.put("tflops", r.tflops());
        m.put("vs_sdpa_flash", r.vsFlash());
        m.put("vs_sdpa_cudnn", r.vsCudnn());
        return m;
    }

    private static Map<String, Object> readJson(Path file) throws IOException {
        return Files.exists(file) ? JSON.std.mapFrom(Files.readString(file)) : new LinkedHashMap<>();
    }
}
