package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.tornado.engine.EngineTasksCheck;
import io.github.tornadoattention.verify.RandomInputs;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;
import uk.ac.manchester.tornado.api.types.arrays.BFloat16Array;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;

/**
 * Every generated Java kernel compiles to PTX, without a GPU: {@link Probe} runs in a child JVM under TornadoVM (PTX
 * backend, or CUDA backend with tools/fakenvrtc standing in for NVRTC) with the fake driver of tools/fakecuda ({@code -Dtornado.recover.bailout=False}, so a kernel that fails to
 * compile fails its plan instead of running as Java) and plans each kernel of the variant tables with window, softcap
 * and sinks set: tornado-simt's per row of its table, tornado-mma's per row of its, the KV-cache kernels (append, decode
 * split and combine, prefill) per head dim through {@code CacheAttentionTasks}. Launches are no-ops there: the kernels'
 * results are checked by the emulator tests and, on a GPU, by TornadoDeviceTest and EngineTasksCheck. The PTX of every
 * module is assembled with ptxas for sm_89 and sm_90.
 *
 * <p>bf16, found out by trying: TornadoVM 5.2's PTX backend compiles BFloat16's software conversions and a kernel
 * over a {@link BFloat16Array} (the smallest is compiled here), but its runtime moves a BFloat16Array as an object of
 * fields (PTXTornadoDevice has no buffer type for it; copied back, it overwrote the array's own fields and crashed the
 * JVM), so tornado-simt's bf16 kernels take bf16 bits in ShortArrays; they are compiled and run here too. Skipped where
 * gcc, cuda.h or TornadoVM are missing.
 */
class VariantCompileTest {
    private static String log;
    /** Every module TornadoVM loaded (the PTX backend's PTX; on the CUDA backend the PTX NVRTC made). */
    private static Path modules;
    /** On the CUDA backend: each NVRTC compilation's CUDA C (tools/fakenvrtc, FAKENVRTC_KEEP). */
    private static Path nvrtc;

    @BeforeAll
    static void runTheProbe() throws IOException, InterruptedException {
        Path argfile = FakeCuda.argfile();
        assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        Path lib = FakeCuda.library();
        assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        List<String> command = FakeCuda.tornadoJvm(argfile, "-Dtornado.recover.bailout=False", Probe.class.getName());
        Path cwd = Files.createTempDirectory("variant-compile");   // the argfile puts "." on the module path
        Path out = cwd.resolve("probe.log");
        modules = Files.createDirectories(cwd.resolve("ptx"));
        nvrtc = cwd.resolve("nvrtc");
        int exit = FakeCuda.run(command, out, Map.of("LD_LIBRARY_PATH", lib.toString(), "FAKECUDA_PTX_DIR", modules.toString(),
                "FAKENVRTC_KEEP", nvrtc.toString()));
        log = Files.readString(out, StandardCharsets.UTF_8);
        assertEquals(0, exit, log);
    }

    private static List<String> results(String prefix) {
        return log.lines().filter(l -> l.startsWith("[compile] " + prefix)).toList();
    }

    @Test
    void everyTornadoSimtKernelCompiles() {
        List<String> lines = results("tornado-simt D=");
        assertEquals(SimtKernels.CONFIGS.size(), lines.size(), log);
        lines.forEach(l -> assertTrue(l.endsWith(" ok"), l + "\n" + log));
    }

    @Test
    void everyTornadoSimtBf16KernelCompiles() {
        List<String> lines = results("tornado-simt bf16 D=");
        assertEquals(SimtKernels.CONFIGS.size(), lines.size(), log);
        lines.forEach(l -> assertTrue(l.endsWith(" ok"), l + "\n" + log));
    }

    @Test
    void everyTornadoMmaKernelCompiles() {
        List<String> lines = results("tornado-mma D=");
        assertEquals(MmaKernels.CONFIGS.size(), lines.size(), log);
        lines.forEach(l -> assertTrue(l.endsWith(" ok"), l + "\n" + log));
    }

    @Test
    void everyCacheKernelCompiles() {
        List<String> lines = results("cache ");
        assertEquals(4, lines.size(), log);
        lines.forEach(l -> assertTrue(l.endsWith(" ok"), l + "\n" + log));
    }

    /**
     * The cache kernels of both element types (bf16: the ShortArray twins and their {@code Bf16} conversions) and both
     * kinds of configuration (a thread per column: D 96; wide, fewer threads than columns: D 256), with every feature,
     * each added through {@code CacheAttentionTasks} as an engine adds them: append, decode split and combine, prefill.
     */
    @Test
    void theCacheKernelsOfEachTypeAndConfigurationCompile() {
        List<String> lines = results("cache-tasks ");
        assertEquals(4, lines.size(), log);
        lines.forEach(l -> assertTrue(l.endsWith(" ok"), l + "\n" + log));
    }

    /**
     * The smallest BFloat16Array kernel compiles on TornadoVM 5.2's PTX backend (only its input array is sent, nothing
     * copied back: see the class comment for what a copy back does).
     */
    @Test
    void aBf16KernelCompilesOnThePtxBackend() {
        List<String> lines = results("bf16 ");
        assertEquals(1, lines.size(), log);
        assertTrue(lines.getFirst().endsWith(" ok"), log);
    }

    /**
     * The PTX of every kernel compiled above assembles with ptxas for sm_89 (L4) and sm_90 (H100/H200), as the driver
     * would JIT it there: on the PTX backend TornadoVM's PTX (sm_80-level, one module for both); on the CUDA backend
     * NVRTC compiles for the GPU it runs on, so the PTX it made here (for the fake H100: sm_90) is assembled for sm_90
     * and each kernel's CUDA C is compiled again for compute_89 (nvcc --ptx, as the stand-in NVRTC does) and assembled
     * for sm_89. Skipped without ptxas (and nvcc, on the CUDA backend).
     */
    @Test
    void everyModuleAssemblesForSm89AndSm90() throws IOException, InterruptedException {
        assumeTrue(FakeCuda.run(List.of("ptxas", "--version"), null, Map.of()) == 0, "no ptxas on PATH");
        boolean cuda = FakeCuda.backend(log).equals("CUDA");
        List<Path> ptx;
        try (var files = Files.list(modules)) {
            ptx = files.filter(p -> p.toString().endsWith(".ptx")).sorted().toList();
        }
        // Every Java kernel of the tables, the cache kernels and the small ones: more modules than table rows.
        assertTrue(ptx.size() >= SimtKernels.CONFIGS.size() * 2 + MmaKernels.CONFIGS.size(), ptx + "\n" + log);
        List<String[]> jobs = new ArrayList<>();   // {ptx or CUDA C file, arch}
        for (Path file : ptx) {
            jobs.add(new String[] {file.toString(), "sm_90"});
            if (!cuda) {
                jobs.add(new String[] {file.toString(), "sm_89"});
            }
        }
        if (cuda) {
            assumeTrue(FakeCuda.run(List.of("nvcc", "--version"), null, Map.of()) == 0, "no nvcc on PATH");
            try (var files = Files.walk(nvrtc)) {
                List<Path> sources = files.filter(p -> p.toString().endsWith(".cu")).sorted().toList();
                // TornadoVM compiles each distinct source once (its modules may repeat one): at least a source per kernel.
                assertTrue(sources.size() >= SimtKernels.CONFIGS.size() * 2 + MmaKernels.CONFIGS.size(), sources.toString());
                sources.forEach(cu -> jobs.add(new String[] {cu.toString(), "sm_89"}));
            }
        }
        List<String> failures = java.util.Collections.synchronizedList(new ArrayList<>());
        jobs.parallelStream().forEach(job -> {
            try {
                Path report = Files.createTempFile("ptxas-" + job[1], ".log");
                String file = job[0];
                int rc = 0;
                if (file.endsWith(".cu")) {
                    Path compiled = Files.createTempFile("compute_89", ".ptx");
                    rc = FakeCuda.run(List.of("nvcc", "-x", "cu", "--ptx", "-arch=compute_89", "-o", compiled.toString(), file),
                            report, Map.of());
                    file = compiled.toString();
                }
                if (rc == 0) {
                    rc = FakeCuda.run(List.of("ptxas", "-arch=" + job[1], "-o", "/dev/null", file), report, Map.of());
                }
                if (rc != 0) {
                    failures.add(job[0] + " " + job[1] + ": " + Files.readString(report));
                }
                Files.deleteIfExists(report);
            } catch (IOException | InterruptedException e) {
                failures.add(job[0] + " " + job[1] + ": " + e);
            }
        });
        assertEquals(List.of(), failures, FakeCuda.backend(log));
    }

    /**
     * On the CUDA backend, tornado-mma's mmaStore writes behind the Java heap's float[] header (16 bytes), as on the PTX
     * backend: what {@link MmaKernels#MMA_STORE_SKEW} makes up for ({@code CUDALIRStmt.MMAStoreStmt} writes
     * {@code ((float *) ((char *) c + 16u))[index]}).
     */
    @Test
    void onTheCudaBackendMmaStoreWritesBehindTheHeapHeader() throws IOException {
        assumeTrue(FakeCuda.backend(log).equals("CUDA"), "the PTX backend's lowering: MmaKernelsTest's emulator");
        Pattern store = Pattern.compile("\\(\\(float \\*\\) \\(\\(char \\*\\) \\w+ \\+ (\\d+)u\\)\\)\\[__idx");
        int kernels = 0;
        try (var files = Files.walk(nvrtc)) {
            for (Path cu : files.filter(p -> p.toString().endsWith(".cu")).toList()) {
                String source = Files.readString(cu);
                if (!source.contains(" attentionD")) {
                    continue;
                }
                kernels++;
                Matcher m = store.matcher(source);
                int stores = 0;
                while (m.find()) {
                    stores++;
                    assertEquals("16", m.group(1), cu + ": " + m.group());
                }
                assertTrue(stores > 0, cu + " has no mmaStore");
            }
        }
        assertEquals(MmaKernels.CONFIGS.size(), kernels, "one tornado-mma kernel per head dim");
    }

    /** Runs in the child JVM: one plan per kernel, a line "[compile] what ok|failed ..." each. */
    static final class Probe {
        private Probe() {
        }

        public static void main(String[] args) {
            FakeCuda.printBackend();
            for (SimtTileConfig config : SimtKernels.CONFIGS) {
                dense(new TornadoSimtBackend(), config.maxHeadDim(), io.github.tornadoattention.DType.FP16);
                dense(new TornadoSimtBackend(), config.maxHeadDim(), io.github.tornadoattention.DType.BF16);
            }
            for (MmaTileConfig config : MmaKernels.CONFIGS) {
                dense(new TornadoMmaBackend(), config.headDim(), io.github.tornadoattention.DType.FP16);
            }
            TornadoDevice device = TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice();
            for (int d : new int[] {64, 128}) {
                String what = "cache D=" + d + " window+softcap+sinks";
                try {
                    EngineTasksCheck.decode("tornado-simt", device, d, true, true, true, new Random(d));
                    result(what + " append+decode", null);
                } catch (Exception | Error e) {
                    result(what + " append+decode", e);
                }
                try {
                    EngineTasksCheck.prefill("tornado-simt", device, d, false, true, true, new Random(d));
                    result(what + " prefill", null);
                } catch (Exception | Error e) {
                    result(what + " prefill", e);
                }
            }
            for (io.github.tornadoattention.DType dtype : io.github.tornadoattention.DType.values()) {
                if (dtype == io.github.tornadoattention.DType.FP16 || dtype == io.github.tornadoattention.DType.BF16) {
                    for (int d : new int[] {96, 256}) {
                        cacheTasks(device, dtype, d);
                    }
                }
            }
            bf16(device);
            System.out.flush();
        }

        /** An engine's graph of the cache tasks (append + decode, prefill) for {@code dtype} at head dim {@code d}. */
        private static void cacheTasks(TornadoDevice device, io.github.tornadoattention.DType dtype, int d) {
            String what = "cache-tasks " + dtype.label() + " D=" + d + " window+softcap+sinks";
            boolean bf16 = dtype == io.github.tornadoattention.DType.BF16;
            java.util.function.IntFunction<uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray> tensor = n -> bf16
                    ? new uk.ac.manchester.tornado.api.types.arrays.ShortArray(n)
                    : new uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray(n);
            try {
                io.github.tornadoattention.CacheAttentionSpec spec = io.github.tornadoattention.CacheAttentionSpec.builder()
                        .batch(2).heads(4).kvHeads(2).headDim(d).maxQueryLength(2).maxTotalQueries(8).maxLength(64)
                        .causal(true).dtype(dtype).window(16, 0).softcap(20f).sinks(new float[] {0.5f, -0.5f, 1f, 0f})
                        .build();
                io.github.tornadoattention.KvCacheSpec cache = io.github.tornadoattention.KvCacheSpec.paged(2, 2, 64, d, 16)
                        .withDtype(dtype);
                io.github.tornadoattention.tornado.engine.CacheAttentionTasks att =
                        io.github.tornadoattention.tornado.engine.CacheAttentionTasks.create("tornado-simt", spec, cache, device);
                uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray k = att.newCacheArray();
                uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray v = att.newCacheArray();
                uk.ac.manchester.tornado.api.types.arrays.IntArray step =
                        io.github.tornadoattention.tornado.engine.CacheAttentionTasks.newStepArray(2);
                uk.ac.manchester.tornado.api.types.arrays.IntArray blocks = att.newBlockTable();
                var q = tensor.apply(2 * 4 * 2 * d);
                var o = tensor.apply(2 * 4 * 2 * d);
                var newK = tensor.apply(2 * 2 * 2 * d);
                var newV = tensor.apply(2 * 2 * 2 * d);
                var packedQ = tensor.apply(8 * 4 * d);
                var packedO = tensor.apply(8 * 4 * d);
                String name = "cache" + dtype.label() + d;
                TaskGraph graph = new TaskGraph(name).transferToDevice(DataTransferMode.FIRST_EXECUTION, k, v, blocks)
                        .transferToDevice(DataTransferMode.EVERY_EXECUTION, step, q, newK, newV, packedQ);
                GridScheduler scheduler = new GridScheduler();
                att.addAppendAndDecode(graph, name, scheduler, "a_", newK, newV, q, k, v, step, blocks, o,
                        new FloatArray(2 * 4 * 2));
                att.addPrefill(graph, name, scheduler, "p_", packedQ, k, v, step, blocks, packedO, new FloatArray(8 * 4));
                graph.transferToHost(DataTransferMode.EVERY_EXECUTION, o, packedO);
                try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
                    plan.withDevice(device).withGridScheduler(scheduler).execute();
                }
                result(what, null);
            } catch (Exception | Error e) {
                result(what, e);
            }
        }

        /** A plan of {@code backend} at head dim {@code d}, with every feature the backend serves, and one call. */
        private static void dense(AttentionBackend backend, int d, io.github.tornadoattention.DType dtype) {
            AttentionShape plain = AttentionShape.builder().batch(1).heads(2).kvHeads(1).queryLength(70).kvLength(90)
                    .headDim(d).causal(true).layout(Layout.BHSD).dtype(dtype).build();
            AttentionShape shape = plain.toBuilder().window(33, 0).softcap(20f).sinks(new float[] {0.5f, -0.5f}).build();
            String features = "window+softcap+sinks";
            try {
                backend.checkSupported(shape);
            } catch (RuntimeException e) {
                shape = plain;
                features = "plain";
            }
            String what = backend.id() + (dtype == io.github.tornadoattention.DType.BF16 ? " bf16" : "") + " D=" + d + " "
                    + features;
            try (RandomInputs in = RandomInputs.generate(shape, 1); HalfTensor o = HalfTensor.allocate(dtype, shape.outputElements());
                 AttentionPlan plan = backend.plan(shape)) {
                plan.forward(in.q(), in.k(), in.v(), o, new float[shape.logSumExpElements()]);
                result(what, null);
            } catch (RuntimeException | Error e) {
                result(what, e);
            }
        }

        /** bf16 in, fp32 out: the smallest kernel that reads a BFloat16Array. */
        public static void bf16Kernel(KernelContext kc, BFloat16Array in, FloatArray out) {
            int i = kc.globalIdx;
            out.set(i, in.getFloat(i) * 2.0f);
        }

        private static void bf16(TornadoDevice device) {
            BFloat16Array in = BFloat16Array.fromFloats(new float[64]);
            FloatArray out = new FloatArray(64);
            KernelContext kc = new KernelContext();
            GridScheduler scheduler = new GridScheduler();
            WorkerGrid1D worker = new WorkerGrid1D(64);
            worker.setLocalWork(64, 1, 1);
            scheduler.addWorkerGrid("bf16.k", worker);
            TaskGraph graph = new TaskGraph("bf16").transferToDevice(DataTransferMode.EVERY_EXECUTION, in)
                    .task("k", Probe::bf16Kernel, kc, in, out).transferToHost(DataTransferMode.EVERY_EXECUTION, out);
            try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
                plan.withDevice(device).withGridScheduler(scheduler).execute();
                result("bf16 BFloat16Array kernel on " + device.getTornadoVMBackend(), null);
            } catch (Exception | Error e) {
                result("bf16 BFloat16Array kernel on " + device.getTornadoVMBackend(), e);
            }
        }

        private static void result(String what, Throwable failure) {
            if (failure != null) {
                System.out.println("[compile] " + what + " failed: " + String.valueOf(failure).replace('\n', ' '));
                failure.printStackTrace(System.out);
            } else {
                System.out.println("[compile] " + what + " ok");
            }
            System.out.flush();
        }
    }
}
