package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.Layout;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;

/**
 * Every kernel of {@link MmaCpAsyncKernels} (fp16 and bf16, per row of the variant table) compiles through TornadoVM's
 * CUDA backend without a GPU, and ptxas accepts its PTX for sm_89 and sm_90: {@link Probe} runs in a child JVM under a
 * CUDA-backend TornadoVM SDK with the fake driver (tools/fakecuda) and the stand-in NVRTC (tools/fakenvrtc: the CUDA C
 * goes to {@code nvcc --ptx}, kept by FAKENVRTC_KEEP), and adds each kernel to a TaskGraph of its own on the CUDA device
 * ({@code -Dtornado.recover.bailout=False}: a kernel that fails to compile fails its plan), twice: without features on a
 * shape whose last K/V tile is full (the unmasked kernel), and causal with window, softcap and sinks. Launches are no-ops
 * there; the results are the emulator's to check ({@code MmaCpAsyncKernelsTest}) and a GPU's. Each kernel's CUDA C is
 * compiled again by nvcc for compute_89 and compute_90 and its PTX given to ptxas, whose registers, spills and static
 * shared memory are printed (the docs quote them) and checked: the shared memory is {@link MmaTileConfig#sharedMemoryBytes}.
 * Skipped where the SDK's default device is not of the CUDA backend, or nvcc, gcc or cuda.h are missing.
 */
class MmaCpAsyncCompileTest {
    private static String log;
    private static Path work;
    /** ptxas -v per kernel and architecture: "registers", "spillStores", "spillLoads", "shared". */
    private static final Map<String, Map<String, Integer>> RESOURCES = new LinkedHashMap<>();

    @BeforeAll
    static void runTheProbe() throws IOException, InterruptedException {
        Path argfile = FakeCuda.argfile();
        assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        assumeTrue(Files.readString(argfile).contains("tornado.drivers.cuda"), "not a CUDA-backend TornadoVM SDK");
        assumeTrue(FakeCuda.run(List.of("nvcc", "--version"), null, Map.of()) == 0, "nvcc missing");
        Path lib = FakeCuda.library();
        assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        work = Files.createTempDirectory("mma-cpasync-compile");   // the argfile puts "." on the module path
        Path kept = Files.createDirectories(work.resolve("nvrtc"));
        Path out = work.resolve("probe.log");
        int exit = FakeCuda.run(FakeCuda.tornadoJvm(argfile, "-Dtornado.recover.bailout=False", Probe.class.getName()), out,
                Map.of("LD_LIBRARY_PATH", lib.toString(), "FAKENVRTC_KEEP", kept.toString()));
        log = Files.readString(out, StandardCharsets.UTF_8);
        assertEquals(0, exit, log);
        assumeTrue(!log.contains("[cpasync] no CUDA device"), log);
        ptxasEveryKernel(kept);
    }

    /** nvcc --ptx for compute_89 and compute_90 of each kept CUDA C file, then ptxas -v; fills {@link #RESOURCES}. */
    private static void ptxasEveryKernel(Path kept) throws IOException, InterruptedException {
        List<Path> sources;
        try (Stream<Path> files = Files.walk(kept)) {
            sources = files.filter(p -> p.toString().endsWith(".cu")).sorted().toList();
        }
        Pattern entry = Pattern.compile("Compiling entry function '([^']+)' for '(sm_\\d+)'");
        Pattern used = Pattern.compile("Used (\\d+) registers.*?(\\d+) bytes smem");
        Pattern spills = Pattern.compile("(\\d+) bytes spill stores, (\\d+) bytes spill loads");
        for (Path source : sources) {
            String text = Files.readString(source);
            if (!text.contains("CpAsync")) {
                continue;
            }
            for (String arch : List.of("89", "90")) {
                Path ptx = source.resolveSibling(source.getFileName() + "." + arch + ".ptx");
                Path report = source.resolveSibling(source.getFileName() + "." + arch + ".txt");
                assertEquals(0, FakeCuda.run(List.of("nvcc", "-x", "cu", "--ptx", "-arch=compute_" + arch, "-o", ptx.toString(),
                        source.toString()), report, Map.of()), source + ": " + Files.readString(report));
                assertEquals(0, FakeCuda.run(List.of("ptxas", "-v", "-arch=sm_" + arch, "-o", "/dev/null", ptx.toString()),
                        report, Map.of()), ptx + ": " + Files.readString(report));
                String name = null;
                Map<String, Integer> numbers = null;
                for (String line : Files.readAllLines(report)) {
                    Matcher m = entry.matcher(line);
                    if (m.find()) {
                        name = m.group(1).replaceAll(".*(attentionD\\d+CpAsync(Bf16)?).*", "$1") + " " + m.group(2);
                        numbers = new LinkedHashMap<>();
                        RESOURCES.put(name, numbers);
                    }
                    m = spills.matcher(line);
                    if (numbers != null && m.find()) {
                        numbers.put("spillStores", Integer.parseInt(m.group(1)));
                        numbers.put("spillLoads", Integer.parseInt(m.group(2)));
                    }
                    m = used.matcher(line);
                    if (numbers != null && m.find()) {
                        numbers.put("registers", Integer.parseInt(m.group(1)));
                        numbers.put("shared", Integer.parseInt(m.group(2)));
                    }
                }
            }
        }
        RESOURCES.forEach((kernel, numbers) -> System.out.println("[ptxas] " + kernel + " " + numbers));
    }

    private static List<String> results(String prefix) {
        return log.lines().filter(l -> l.startsWith("[cpasync] " + prefix)).toList();
    }

    @Test
    void everyKernelCompilesOnTheCudaBackend() {
        List<String> lines = results("D=");
        assertEquals(MmaCpAsyncKernels.CONFIGS.size() * 2 * 2, lines.size(), log);   // fp16, bf16; plain, featured
        lines.forEach(l -> assertTrue(l.endsWith(" ok"), l + "\n" + log));
    }

    /** ptxas takes every kernel for sm_89 and sm_90, within 255 registers, with the tile configuration's shared memory. */
    @Test
    void ptxasTakesEveryKernelForSm89AndSm90() {
        for (MmaTileConfig config : MmaCpAsyncKernels.CONFIGS) {
            for (boolean bf16 : new boolean[] {false, true}) {
                for (String arch : List.of("sm_89", "sm_90")) {
                    String kernel = MmaCpAsyncKernels.kernelName(config, bf16) + " " + arch;
                    Map<String, Integer> numbers = RESOURCES.get(kernel);
                    assertTrue(numbers != null && numbers.containsKey("registers"), kernel + " not compiled: " + RESOURCES);
                    assertTrue(numbers.get("registers") <= 255, kernel + ": " + numbers);
                    // Equal: every local array kept whole, each a multiple of 16 bytes (so each 16-byte aligned for ldmatrix).
                    assertEquals(config.sharedMemoryBytes(), numbers.get("shared"), kernel + ": " + numbers);
                    assertTrue(config.sharedMemoryBytes() <= MmaTileConfig.MAX_SHARED_BYTES, kernel + ": " + numbers);
                }
            }
        }
    }

    /** The CUDA C of the kernels copies with cp.async and multiplies bf16 with mma.sync's bf16 form. */
    @Test
    void theKernelsUseCpAsyncAndBf16Mma() throws IOException {
        List<String> texts = new ArrayList<>();
        try (Stream<Path> files = Files.walk(work.resolve("nvrtc"))) {
            for (Path p : files.filter(p -> p.toString().endsWith(".cu")).toList()) {
                texts.add(Files.readString(p));
            }
        }
        List<String> bf16 = texts.stream().filter(t -> t.contains("CpAsyncBf16")).toList();
        List<String> fp16 = texts.stream().filter(t -> t.contains("CpAsync") && !t.contains("CpAsyncBf16")).toList();
        assertTrue(!bf16.isEmpty() && !fp16.isEmpty(), "no kernel source kept");
        fp16.forEach(t -> assertTrue(t.contains("cp.async.ca.shared.global") && t.contains("cp.async.wait_group 0")
                && t.contains(".f32.f16.f16.f32") && !t.contains("bf16.bf16"), t));
        bf16.forEach(t -> assertTrue(t.contains("cp.async.ca.shared.global") && t.contains(".f32.bf16.bf16.f32"), t));
    }

    /** Runs in the child JVM: one TaskGraph per kernel and shape, a line "[cpasync] what ok|failed ..." each. */
    static final class Probe {
        private Probe() {
        }

        public static void main(String[] args) {
            TornadoDevice device = TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice();
            if (device.getTornadoVMBackend() != TornadoVMBackendType.CUDA) {
                System.out.println("[cpasync] no CUDA device: " + device.getTornadoVMBackend());
                return;
            }
            for (MmaTileConfig config : MmaCpAsyncKernels.CONFIGS) {
                for (DType dtype : new DType[] {DType.FP16, DType.BF16}) {
                    int d = config.headDim();
                    AttentionShape plain = AttentionShape.builder().batch(1).heads(2).kvHeads(1).queryLength(70)
                            .kvLength(4 * config.blockKv()).headDim(d).causal(false).layout(Layout.BHSD).dtype(dtype).build();
                    AttentionShape featured = plain.toBuilder().kvLength(90).causal(true).window(33, 0).softcap(20f)
                            .sinks(new float[] {0.5f, -0.5f}).build();
                    compile(device, config, plain, "plain");
                    compile(device, config, featured, "causal+window+softcap+sinks");
                }
            }
            System.out.flush();
        }

        private static void compile(TornadoDevice device, MmaTileConfig config, AttentionShape s, String features) {
            boolean bf16 = s.dtype() == DType.BF16;
            String what = "D=" + s.headDim() + " " + s.dtype().label() + " " + features;
            try {
                MmaPlan.CpAsyncKernel kernel = MmaCpAsyncKernels.kernel(config, bf16);
                LongArray q = new LongArray(Math.toIntExact(s.queryElements() / 4));
                HalfFloatArray k = new HalfFloatArray(Math.toIntExact(s.kvElements()));
                HalfFloatArray v = new HalfFloatArray(Math.toIntExact(s.kvElements()));
                LongArray o = new LongArray(Math.toIntExact(s.outputElements() / 4));
                FloatArray lse = new FloatArray(s.logSumExpElements());
                int grid = config.gridSize(s.batch(), s.heads(), s.queryLength());
                FloatArray scratch = new FloatArray(grid * config.scratchFloatsPerCta());
                IntArray window = SimtPlan.windowOf(s);
                FloatArray scores = SimtPlan.scoresOf(s);
                String name = "cpasync" + s.headDim() + (bf16 ? "bf16" : "fp16") + features.length();
                GridScheduler scheduler = new GridScheduler();
                WorkerGrid1D worker = new WorkerGrid1D(grid * config.threads());
                worker.setLocalWork(config.threads(), 1, 1);
                scheduler.addWorkerGrid(name + ".flash", worker);
                KernelContext kc = new KernelContext();
                TaskGraph graph = new TaskGraph(name).transferToDevice(DataTransferMode.EVERY_EXECUTION, q, k, v, scratch,
                                window, scores)
                        .task("flash", kernel, kc, q, k, v, o, lse, scratch, s.batch(), s.heads(), s.kvHeads(),
                                s.queryLength(), s.kvLength(), MmaPlan.causalWord(s), 0, s.scale(), grid, window, scores)
                        .transferToHost(DataTransferMode.EVERY_EXECUTION, o, lse);
                try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
                    plan.withDevice(device).withGridScheduler(scheduler).execute();
                }
                result(what, null);
            } catch (Exception | Error e) {
                result(what, e);
            }
        }

        private static void result(String what, Throwable failure) {
            if (failure != null) {
                System.out.println("[cpasync] " + what + " failed: " + String.valueOf(failure).replace('\n', ' '));
                failure.printStackTrace(System.out);
            } else {
                System.out.println("[cpasync] " + what + " ok");
            }
            System.out.flush();
        }
    }
}
