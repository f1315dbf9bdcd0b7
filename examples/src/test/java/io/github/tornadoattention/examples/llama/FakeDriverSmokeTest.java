package io.github.tornadoattention.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.jr.ob.JSON;
import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The whole demo under TornadoVM without a GPU: a child JVM with TornadoVM's argfile and tornado-kernels' fake
 * libcuda (reports an H100, backs device memory with host memory, launches nothing; on a CUDA-backend SDK with the
 * stand-in NVRTC of tornado-kernels/tools/fakenvrtc). What it shows: every kernel
 * JIT-compiles to PTX that ptxas accepts (when ptxas is installed), the task graphs build, the residual stream goes
 * from graph to graph (persist/consume), our layers are two graphs each with the facade's fused prebuilt task first in
 * the second (the JSON's graph layout, from the profiler's task ids), the profiler's per-task times
 * reach the report and the JSON, and closing frees. Kernel results are meaningless here (no launch runs).
 * Skipped without TORNADOVM_HOME, gcc or cuda.h.
 */
class FakeDriverSmokeTest {
    private static final Path BASEDIR = Path.of(System.getProperty("basedir", ".")).toAbsolutePath();

    @Test
    void theDemoRunsUnderTornadoVmWithTheFakeDriver() throws Exception {
        String home = System.getenv("TORNADOVM_HOME");
        assumeTrue(home != null, "TORNADOVM_HOME is not set");
        Path argfile = Path.of(home, "tornado-argfile");
        assumeTrue(Files.isRegularFile(argfile), "no " + argfile);
        Path lib = fakeDriver();
        assumeTrue(lib != null, "gcc or cuda.h missing: cannot build the fake libcuda");

        Path work = BASEDIR.resolve("target/fake-driver-smoke");
        Path ptx = work.resolve("ptx");
        deleteTree(work);
        Files.createDirectories(ptx);
        Path json = work.resolve("result.json");
        // tornado-api comes from the argfile's module path; a class-path copy would only confuse.
        String classPath = Arrays.stream(System.getProperty("surefire.test.class.path",
                        System.getProperty("java.class.path")).split(File.pathSeparator))
                .filter(p -> !p.contains("tornado-api")).collect(Collectors.joining(File.pathSeparator));
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "@" + argfile, "--enable-native-access=ALL-UNNAMED", "-Dtornado.recover.bailout=False",
                "-Dtornado.panama.objectHeader=128", "-Dtornado.max.events=1024", "-cp", classPath, LlamaDecoderDemo.class.getName(),
                "--attention", "ours,scalar", "--backend", "ptx-tornado", "--layers", "2", "--dim", "256", "--heads", "4",
                "--kv-heads", "2", "--head-dim", "64", "--ffn-dim", "64", "--vocab", "512", "--prompt", "20",
                "--generate", "6", "--profile-steps", "2", "--check-steps", "2", "--json", json.toString()));
        Path log = work.resolve("run.log");
        ProcessBuilder builder = new ProcessBuilder(command).directory(work.toFile()).redirectErrorStream(true)
                .redirectOutput(log.toFile());
        builder.environment().put("LD_LIBRARY_PATH", lib + File.pathSeparator + System.getenv().getOrDefault("LD_LIBRARY_PATH", ""));
        builder.environment().put("FAKECUDA_PTX_DIR", ptx.toString());
        Process process = builder.start();
        assertTrue(process.waitFor(300, TimeUnit.SECONDS), "the demo ran past 5 minutes");
        String output = Files.readString(log);
        assertEquals(0, process.exitValue(), output);
        assertTrue(output.contains("scalar / ours(ptx-tornado) attention time"), output);
        // The fake driver reports launches or copies through freed buffers (a hand-over between graphs gone wrong).
        assertFalse(output.contains("[fakecuda] ERROR"), output);

        @SuppressWarnings("unchecked")
        List<Map<String, Object>> variants = (List<Map<String, Object>>) JSON.std.mapFrom(Files.readString(json))
                .get("variants");
        assertEquals(List.of("ours(ptx-tornado)", "scalar"), variants.stream().map(v -> v.get("name")).toList());
        for (Map<String, Object> v : variants) {
            @SuppressWarnings("unchecked")
            Map<String, Object> tasks = (Map<String, Object>) v.get("kernel_ms_per_token");
            assertTrue(tasks.keySet().containsAll(List.of("embed", "rms_att", "qkv", "rope", "out_proj", "rms_ffn",
                    "ffn_gate_up", "ffn_down", "final_norm", "lm_head")), v.get("name") + ": " + tasks.keySet());
            assertTrue(tasks.containsKey(v.get("name").equals("scalar") ? "attention" : "attn_decode"), tasks.keySet().toString());
            assertEquals(6, ((List<?>) v.get("tokens")).size());
            // The graphs in run order with the tasks timed in each: ours is two graphs per layer, attention (on
            // ptx-tornado the one prebuilt task) first in the second; scalar is one graph per layer.
            @SuppressWarnings("unchecked")
            Map<String, List<String>> graphs = (Map<String, List<String>>) v.get("graphs");
            List<String> ffn = List.of("rms_ffn", "ffn_gate_up", "ffn_down");
            Map<String, List<String>> expected = new java.util.LinkedHashMap<>();
            expected.put("embed", List.of("embed"));
            for (int l = 0; l < 2; l++) {
                if (v.get("name").equals("scalar")) {
                    expected.put("layer_" + l, concat(List.of("rms_att", "qkv", "rope", "attention", "out_proj"), ffn));
                } else {
                    expected.put("layer_" + l + "_a", List.of("rms_att", "qkv", "rope"));
                    expected.put("layer_" + l + "_b", concat(List.of("attn_decode", "out_proj"), ffn));
                }
            }
            expected.put("logits", List.of("final_norm", "lm_head"));
            assertEquals(expected, graphs, v.get("name") + ": graphs and their tasks");
            assertEquals(new ArrayList<>(expected.keySet()), new ArrayList<>(graphs.keySet()), "graph order");
            assertEquals(2 * 2, ((List<?>) v.get("checks")).size(), "2 steps x 2 layers");
        }

        List<Path> modules;
        try (Stream<Path> files = Files.list(ptx)) {
            modules = files.filter(p -> p.toString().endsWith(".ptx")).sorted().toList();
        }
        assertTrue(modules.size() >= 10, "PTX modules: " + modules.size());
        if (onPath("ptxas")) {
            for (Path module : modules) {
                Process ptxas = new ProcessBuilder("ptxas", "-arch=sm_90", module.toString(), "-o", "/dev/null")
                        .redirectErrorStream(true).start();
                String report = new String(ptxas.getInputStream().readAllBytes());
                assertTrue(ptxas.waitFor(60, TimeUnit.SECONDS));
                assertEquals(0, ptxas.exitValue(), module + ": " + report);
            }
        }
    }

    private static List<String> concat(List<String> a, List<String> b) {
        List<String> all = new ArrayList<>(a);
        all.addAll(b);
        return all;
    }

    /** tornado-kernels' fake libcuda and libnvidia-ml, built into target/fakecuda; null if that cannot be done. */
    private static Path fakeDriver() throws IOException, InterruptedException {
        Path source = BASEDIR.resolve("../tornado-kernels/tools/fakecuda").normalize();
        Path nvrtc = BASEDIR.resolve("../tornado-kernels/tools/fakenvrtc").normalize();
        Path include = Path.of(System.getenv().getOrDefault("CUDA_INCLUDE", "/usr/local/cuda/include"));
        Path lib = BASEDIR.resolve("target/fakecuda");
        if (!Files.isRegularFile(source.resolve("fakecuda.c")) || !Files.isRegularFile(include.resolve("cuda.h"))
                || !onPath("gcc")) {
            return null;
        }
        Files.createDirectories(lib);
        boolean built = run("gcc", "-shared", "-fPIC", "-O1", "-I" + include, "-Wl,-soname,libcuda.so.1", "-o",
                lib.resolve("libcuda.so.1").toString(), source.resolve("fakecuda.c").toString())
                && run("gcc", "-shared", "-fPIC", "-O1", "-Wl,-soname,libnvidia-ml.so.1", "-o",
                lib.resolve("libnvidia-ml.so.1").toString(), source.resolve("fakenvml.c").toString())
                // TornadoVM's CUDA backend loads NVRTC: the stand-in runs nvcc (the PTX backend never loads it).
                && run("gcc", "-shared", "-fPIC", "-O1", "-I" + nvrtc, "-Wl,-soname,libnvrtc.so.13", "-o",
                lib.resolve("libnvrtc.so.13").toString(), nvrtc.resolve("fakenvrtc.c").toString());
        return built ? lib : null;
    }

    private static boolean run(String... command) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD)
                .start();
        return p.waitFor(120, TimeUnit.SECONDS) && p.exitValue() == 0;
    }

    private static boolean onPath(String tool) {
        return Stream.of(System.getenv().getOrDefault("PATH", "").split(File.pathSeparator))
                .anyMatch(dir -> Files.isExecutable(Path.of(dir, tool)));
    }

    private static void deleteTree(Path root) throws IOException {
        if (Files.exists(root)) {
            try (Stream<Path> paths = Files.walk(root)) {
                for (Path p : paths.sorted((a, b) -> b.compareTo(a)).toList()) {
                    Files.delete(p);
                }
            }
        }
    }
}
