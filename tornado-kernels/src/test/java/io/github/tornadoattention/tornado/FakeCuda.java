package io.github.tornadoattention.tornado;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

/**
 * The fake CUDA driver of tools/fakecuda (libcuda.so.1 and libnvidia-ml.so.1 reporting one H100, launches as
 * no-ops), built with gcc into target/fakecuda for tests that run TornadoVM in a child JVM without a GPU; beside it
 * the stand-in NVRTC of tools/fakenvrtc (libnvrtc.so.13: nvcc --ptx), which TornadoVM's CUDA backend loads.
 */
final class FakeCuda {
    /** The fake driver's log lines (FAKECUDA_VERBOSE=1): copies, allocations, frees; group 1 bytes or id. */
    static final Pattern HOST_TO_DEVICE = Pattern.compile("\\[fakecuda] HtoD (\\d+) bytes into #(\\d+)");
    static final Pattern DEVICE_TO_HOST = Pattern.compile("\\[fakecuda] DtoH (\\d+) bytes from #(\\d+)");
    static final Pattern ALLOC = Pattern.compile("\\[fakecuda] alloc #(\\d+) (\\d+) bytes");
    static final Pattern FREE = Pattern.compile("\\[fakecuda] free #(\\d+)");
    /** The line a probe (or a tool under tools/) prints first: the TornadoVM backend of the device it runs on. */
    static final Pattern BACKEND = Pattern.compile("\\[tornadovm] backend (\\w+)");
    private static final Pattern LAUNCH_ARGS = Pattern.compile("\\[fakecuda] launch \\S+ .* args:(.*)$");

    private FakeCuda() {
    }

    /** The module's folder (surefire's {@code basedir}). */
    static Path basedir() {
        return Path.of(System.getProperty("basedir", ".")).toAbsolutePath();
    }

    /** TornadoVM's argfile with TORNADOVM_HOME filled in (written by the build), or null. */
    static Path argfile() {
        Path argfile = basedir().resolve("target/tornado-argfile");
        return System.getenv("TORNADOVM_HOME") != null && Files.isRegularFile(argfile) ? argfile : null;
    }

    /** The folder holding the fake libcuda.so.1, built on first use; null where gcc or cuda.h is missing. */
    static synchronized Path library() throws IOException, InterruptedException {
        Path source = basedir().resolve("tools/fakecuda");
        Path cudaInclude = Path.of(System.getenv().getOrDefault("CUDA_INCLUDE", "/usr/local/cuda/include"));
        Path lib = basedir().resolve("target/fakecuda");
        Path nvrtc = basedir().resolve("tools/fakenvrtc");
        if (Files.isRegularFile(lib.resolve("libcuda.so.1")) && Files.isRegularFile(lib.resolve("libnvidia-ml.so.1"))
                && Files.isRegularFile(lib.resolve("libnvrtc.so.13"))
                && Files.isRegularFile(source.resolve("fakecuda.c"))
                && newerThan(lib.resolve("libcuda.so.1"), source.resolve("fakecuda.c"))
                && newerThan(lib.resolve("libnvrtc.so.13"), nvrtc.resolve("fakenvrtc.c"))) {
            return lib;   // built from the present sources
        }
        if (!Files.isRegularFile(source.resolve("fakecuda.c")) || !Files.isRegularFile(cudaInclude.resolve("cuda.h"))) {
            return null;
        }
        Files.createDirectories(lib);
        boolean built = run(List.of("gcc", "-shared", "-fPIC", "-O1", "-I" + cudaInclude, "-Wl,-soname,libcuda.so.1",
                "-o", lib.resolve("libcuda.so.1").toString(), source.resolve("fakecuda.c").toString()), null, Map.of()) == 0
                && run(List.of("gcc", "-shared", "-fPIC", "-O1", "-Wl,-soname,libnvidia-ml.so.1", "-o",
                lib.resolve("libnvidia-ml.so.1").toString(), source.resolve("fakenvml.c").toString()), null, Map.of()) == 0
                // TornadoVM's CUDA backend links NVRTC; the PTX backend never loads it.
                && run(List.of("gcc", "-shared", "-fPIC", "-O1", "-I" + nvrtc, "-Wl,-soname,libnvrtc.so.13", "-o",
                lib.resolve("libnvrtc.so.13").toString(), nvrtc.resolve("fakenvrtc.c").toString()), null, Map.of()) == 0;
        if (built) {
            Files.deleteIfExists(lib.resolve("libnvrtc.so"));
            Files.createSymbolicLink(lib.resolve("libnvrtc.so"), Path.of("libnvrtc.so.13"));
        }
        return built ? lib : null;
    }

    private static boolean newerThan(Path built, Path source) throws IOException {
        return Files.isRegularFile(source) && Files.getLastModifiedTime(built).compareTo(Files.getLastModifiedTime(source)) >= 0;
    }

    /**
     * Runs {@code command} (stdout and stderr into {@code output}, in its folder, or discarded) with {@code env} added;
     * its exit status, -1 if it could not start, -2 if it ran past 5 minutes.
     */
    static int run(List<String> command, Path output, Map<String, String> env) throws IOException, InterruptedException {
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        builder.environment().putAll(env);
        if (output != null) {
            builder.directory(output.getParent().toFile()).redirectOutput(output.toFile());
        } else {
            builder.redirectOutput(ProcessBuilder.Redirect.DISCARD);
        }
        Process process;
        try {
            process = builder.start();
        } catch (IOException e) {
            return -1;
        }
        if (!process.waitFor(300, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            return -2;
        }
        return process.exitValue();
    }

    /** A JVM command under TornadoVM (its argfile), with the test class path, running {@code mainClass}. */
    static List<String> tornadoJvm(Path argfile, String... jvmOptionsThenMainAndArgs) {
        List<String> command = new java.util.ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "@" + argfile,
                "--enable-native-access=ALL-UNNAMED", "-cp",
                System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"))));
        command.addAll(List.of(jvmOptionsThenMainAndArgs));
        return command;
    }

    /**
     * A JVM command under TornadoVM (its argfile, no silent fallback to Java) running a tool compiled by
     * {@link #compileTool} into {@code classes}: {@code mainClass} and its arguments.
     */
    static List<String> toolJvm(Path argfile, Path classes, String... mainClassAndArgs) {
        List<String> command = new java.util.ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "@" + argfile,
                "--enable-native-access=ALL-UNNAMED", "-Dtornado.recover.bailout=False", "-cp", classes.toString()));
        command.addAll(List.of(mainClassAndArgs));
        return command;
    }

    /**
     * Runs {@code probe}'s main in a TornadoVM JVM over the fake driver (no silent fallback to Java) for the backends
     * {@code ids}, in a fresh folder named from {@code folder} ({@code env} added to the fake driver's library path);
     * returns its log and asserts it exited 0. Skips where TornadoVM or the fake driver is missing.
     */
    static String runProbe(Class<?> probe, String folder, Map<String, String> env, String... ids)
            throws IOException, InterruptedException {
        return runProbe(probe, folder, env, List.of(), ids);
    }

    /** {@link #runProbe(Class, String, Map, String...)} with {@code jvmOptions} added (e.g. -XX:MaxDirectMemorySize=64m). */
    static String runProbe(Class<?> probe, String folder, Map<String, String> env, List<String> jvmOptions, String... ids)
            throws IOException, InterruptedException {
        Path argfile = argfile();
        org.junit.jupiter.api.Assumptions.assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        Path lib = library();
        org.junit.jupiter.api.Assumptions.assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        List<String> options = new java.util.ArrayList<>(jvmOptions);
        options.addAll(List.of("-Dtornado.recover.bailout=False", probe.getName()));
        List<String> command = tornadoJvm(argfile, options.toArray(String[]::new));
        command.addAll(List.of(ids));
        Path out = Files.createTempDirectory(folder).resolve("probe.log");   // the argfile puts "." on the module path
        Map<String, String> all = new java.util.HashMap<>(env);
        all.put("LD_LIBRARY_PATH", lib.toString());
        int exit = run(command, out, all);
        String log = Files.readString(out, java.nio.charset.StandardCharsets.UTF_8);
        org.junit.jupiter.api.Assertions.assertEquals(0, exit, log);
        return log;
    }

    /** In a probe: prints the {@link #BACKEND} line for TornadoVM's default device. */
    static void printBackend() {
        System.err.println("[tornadovm] backend " + uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider
                .getTornadoRuntime().getDefaultDevice().getTornadoVMBackend());
        System.err.flush();
    }

    /** The TornadoVM backend a probe's or tool's log says it ran on ({@code PTX}, {@code CUDA}, ...). */
    static String backend(String log) {
        java.util.regex.Matcher m = BACKEND.matcher(log);
        org.junit.jupiter.api.Assertions.assertTrue(m.find(), "no '[tornadovm] backend' line in\n" + log);
        return m.group(1);
    }

    /**
     * The device buffers TornadoVM's CUDA backend keeps for the device's life, allocated when it first runs a task: the
     * constant region and the atomics every launch passes as its second and fourth words (its kernel ABI: kernel
     * context, constant region, local region, atomics; CUDAInstalledCode.setKernelArgs). Allocation ids.
     */
    static Set<Integer> cudaDeviceRegions(List<String> lines) {
        Set<Integer> regions = new java.util.HashSet<>();
        for (String line : lines) {
            java.util.regex.Matcher m = LAUNCH_ARGS.matcher(line);
            if (m.find()) {
                String[] words = m.group(1).trim().split(" ");
                for (int w : new int[] {1, 3}) {
                    // TornadoVM passes the regions themselves (+0); a library task's launches pass array data (+header).
                    if (words.length > w && words[w].startsWith("#") && words[w].endsWith("+0")) {
                        regions.add(Integer.parseInt(words[w].substring(1, words[w].indexOf('+'))));
                    }
                }
            }
        }
        return regions;
    }

    /**
     * The allocations of {@code lines} never freed, less what the backend keeps for the device's life by design (on the
     * CUDA backend {@link #cudaDeviceRegions}, found in {@code wholeLog}'s launches; the PTX backend keeps none).
     */
    static Map<Integer, Long> leftAllocations(List<String> lines, String backend, String wholeLog) {
        Map<Integer, Long> live = liveAllocations(lines);
        if (backend.equals("CUDA")) {
            Set<Integer> regions = cudaDeviceRegions(wholeLog.lines().toList());
            org.junit.jupiter.api.Assertions.assertEquals(2, regions.size(), "the constant and atomics regions: " + regions);
            live.keySet().removeAll(regions);
        }
        return live;
    }

    /**
     * A probe's main: runs {@code run} for each backend id in turn, marking its "end", or "failed" with the exception
     * (which {@link #steps} then reports).
     */
    static void probeEach(String[] ids, java.util.function.Consumer<String> run) {
        printBackend();
        for (String id : ids) {
            try {
                run.accept(id);
                mark(id, "end");
            } catch (RuntimeException | Error e) {
                mark(id, "failed " + e);
                e.printStackTrace();
            }
        }
    }

    /** In a probe: the marker line {@code [probe] <id> <step>} that {@link #steps} splits its log by. */
    static void mark(String id, String step) {
        System.err.println("[probe] " + id + " " + step);
        System.err.flush();
    }

    /**
     * The log lines of each step of {@code id} in a probe's log, by step name: a step starts at a marker line
     * {@code [probe] <id> <step> ...} and runs to the next marker. Asserts the probe reached its "end" marker and no
     * "failed" one.
     */
    static Map<String, List<String>> steps(String log, String id) {
        Map<String, List<String>> steps = new java.util.LinkedHashMap<>();
        List<String> current = null;
        for (String line : log.lines().toList()) {
            if (line.startsWith("[probe] ")) {
                String[] words = line.split(" ", 4);
                current = words[1].equals(id) ? new java.util.ArrayList<>() : null;
                if (current != null) {
                    steps.put(words.length > 2 ? words[2] : "", current);
                    current.add(line);
                }
            } else if (current != null) {
                current.add(line);
            }
        }
        org.junit.jupiter.api.Assertions.assertTrue(steps.containsKey("end") && !steps.containsKey("failed"), id + ":\n" + log);
        return steps;
    }

    /**
     * Compiles {@code tools/<file>} (a reproducer written against tornado-api only) into {@code target/<folder>} and
     * returns that folder; skips the test where TORNADOVM_HOME has no tornado-api jar.
     */
    static Path compileTool(String file, String folder) throws IOException {
        Path classes = basedir().resolve("target").resolve(folder);
        Files.createDirectories(classes);
        Path tornadoApi;
        try (var jars = Files.list(Path.of(System.getenv("TORNADOVM_HOME"), "share", "java", "tornado"))) {
            tornadoApi = jars.filter(p -> p.getFileName().toString().matches("tornado-api-.*\\.jar")).findFirst().orElse(null);
        }
        org.junit.jupiter.api.Assumptions.assumeTrue(tornadoApi != null, "no tornado-api jar under $TORNADOVM_HOME/share/java/tornado");
        int compiled = javax.tools.ToolProvider.getSystemJavaCompiler().run(null, null, null, "-g", "-cp",
                tornadoApi.toString(), "-d", classes.toString(), basedir().resolve("tools").resolve(file).toString());
        org.junit.jupiter.api.Assertions.assertEquals(0, compiled, "tools/" + file + " compiles");
        return classes;
    }

    /** The device allocations of {@code lines} never freed in them: allocation id to bytes. */
    static Map<Integer, Long> liveAllocations(List<String> lines) {
        Map<Integer, Long> live = new java.util.HashMap<>();
        for (String line : lines) {
            java.util.regex.Matcher alloc = ALLOC.matcher(line);
            if (alloc.find()) {
                live.put(Integer.parseInt(alloc.group(1)), Long.parseLong(alloc.group(2)));
            }
            java.util.regex.Matcher free = FREE.matcher(line);
            if (free.find()) {
                live.remove(Integer.parseInt(free.group(1)));
            }
        }
        return live;
    }
}
