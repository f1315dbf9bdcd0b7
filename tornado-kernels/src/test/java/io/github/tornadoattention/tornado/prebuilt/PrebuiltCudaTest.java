package io.github.tornadoattention.tornado.prebuilt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.ptx.KernelManifest;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The CUDA C that ptx-tornado hands TornadoVM's CUDA backend as a prebuilt task ({@link PrebuiltCuda}): the CUDA
 * backend's kernel signature, the twin's PTX inside it; and, where a CUDA toolkit is installed, that it compiles as
 * NVRTC would (nvcc --ptx, what tools/fakenvrtc runs) and that ptxas gives it, for sm_89 and sm_90, exactly the
 * registers and static shared memory the manifest records for the shipped twin: the same kernel.
 */
class PrebuiltCudaTest {
    private static final Pattern PTXAS = Pattern.compile("Used (\\d+) registers.*?(\\d+) bytes smem");

    /** One twin of each kind per element type (the first and the widest head dim), as the manifest lists them. */
    private static List<KernelManifest.Kernel> sample() {
        Map<String, KernelManifest.Kernel> first = new LinkedHashMap<>();
        Map<String, KernelManifest.Kernel> widest = new LinkedHashMap<>();
        for (KernelManifest.Kernel k : KernelManifest.shipped().kernels()) {
            if (k.headerBytes() == 0 || !k.selectable()) {
                continue;
            }
            String key = k.kind() + " " + k.dtype();
            first.putIfAbsent(key, k);
            if (!widest.containsKey(key) || k.headDim() > widest.get(key).headDim()) {
                widest.put(key, k);
            }
        }
        List<KernelManifest.Kernel> sample = new ArrayList<>(first.values());
        widest.values().stream().filter(k -> !sample.contains(k)).forEach(sample::add);
        return sample;
    }

    @Test
    void theSourceHasTheCudaBackendsSignatureAndTheTwinsBody() {
        List<KernelManifest.Kernel> sample = sample();
        assertTrue(sample.size() >= 12, "twins sampled: " + sample.size());
        for (KernelManifest.Kernel k : sample) {
            String ptx = KernelManifest.ptx(k.module());
            String src = PrebuiltCuda.source(ptx, k.entry());
            String signature = src.lines().filter(l -> l.startsWith("extern \"C\" __global__")).findFirst().orElseThrow();
            assertTrue(signature.contains(" " + k.entry() + "(long *_kernel_context, unsigned char *_constant_region,"
                    + " unsigned char *_local_region, int *_atomics, unsigned char *a1,"), signature);
            assertTrue(signature.contains("__launch_bounds__(" + k.threads()), signature);
            // One asm operand per twin parameter: TornadoVM's context word, then each array.
            long params = Pattern.compile("\\.param\\s+\\.u64\\s+" + k.entry() + "_param_\\d+\\b").matcher(ptx).results().count();
            long operands = Pattern.compile("\"l\"\\(").matcher(src).results().count();
            assertFalse(src.contains("ld.param"), k.entry());
            assertFalse(src.contains(".entry"), k.entry());
            // Every register is the block's own: none of NVRTC's names (%r12, %rd3, %f1, %p2) is left unprefixed.
            assertFalse(Pattern.compile("%%(r|rd|rs|f|fd|p|h)\\d").matcher(src).find(), k.entry());
            assertTrue(params > 1, k.entry());
            assertEquals(params, operands, k.entry());
        }
    }

    @Test
    void whatAnInlineAsmBodyCannotCarryIsRefusedByName() {
        String dynamic = ".version 8.0\n.target sm_80\n.address_size 64\n.extern .shared .align 16 .b8 smem[];\n"
                + ".visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .u64 k_param_1\n)\n{\n\t.reg .b64 %rd<3>;\n"
                + "\tld.param.u64 %rd1, [k_param_1];\n\tmov.u64 %rd2, smem;\n\tret;\n}\n";
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PrebuiltCuda.source(dynamic, "k"));
        assertTrue(e.getMessage().contains("dynamic shared memory"), e.getMessage());
        String narrow = ".visible .entry k(\n\t.param .u32 k_param_0\n)\n{\n\t.reg .b32 %r<2>;\n\tret;\n}\n";
        e = assertThrows(IllegalArgumentException.class, () -> PrebuiltCuda.source(narrow, "k"));
        assertTrue(e.getMessage().contains("k_param_0 is .u32"), e.getMessage());
    }

    /** A small entry by hand: the parameter loads become the operands, registers and labels get the prefix. */
    @Test
    void parameterLoadsBecomeOperandsAndNamesGetThePrefix() {
        String ptx = ".version 8.0\n.target sm_80\n.address_size 64\n.shared .align 4 .b8 ticket[4];\n"
                + ".visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .u64 k_param_1,\n\t.param .u64 k_param_2\n)\n"
                + ".maxntid 64, 1, 1\n.minnctapersm 2\n{\n\t.reg .pred %p<2>;\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<4>;\n"
                + "\tld.param.u64 %rd1, [k_param_2];\n\tmov.u32 %r1, %tid.x;\n\tsetp.eq.s32 %p1, %r1, 0;\n"
                + "\t@%p1 bra $L__BB0_2;\n\tst.shared.u32 [ticket], %r1;\n$L__BB0_2: // done\n\tret;\n}\n";
        String src = PrebuiltCuda.source(ptx, "k");
        assertTrue(src.contains("extern \"C\" __global__ void __launch_bounds__(64, 2) k(long *_kernel_context,"
                + " unsigned char *_constant_region, unsigned char *_local_region, int *_atomics, unsigned char *a1,"
                + " unsigned char *a2) {"), src);
        assertTrue(src.contains("\"mov.b64 %%ta_rd1, %2;\\n\""), src);
        assertTrue(src.contains("\"mov.u32 %%ta_r1, %%tid.x;\\n\""), src);
        assertTrue(src.contains("\"@%%ta_p1 bra $ta_L__BB0_2;\\n\""), src);
        assertTrue(src.contains("\".shared .align 4 .b8 ticket[4];\\n\""), src);
        assertTrue(src.indexOf("ticket[4]") > src.indexOf("%%ta_rd<4>"), "after the body's own declarations:\n" + src);
        assertTrue(src.contains(":: \"l\"(_kernel_context), \"l\"(a1), \"l\"(a2) : \"memory\");"), src);
    }

    /**
     * Compiled as the stand-in NVRTC compiles it (nvcc --ptx), then ptxas for sm_89 and sm_90: the registers and static
     * shared memory of the shipped twin (manifest columns regs_sm_89, regs_sm_90, smem_static). Skipped without nvcc.
     */
    @Test
    void compiledThroughNvccItIsTheShippedKernel() throws IOException, InterruptedException {
        assumeTrue(run(List.of("nvcc", "--version"), null) == 0, "no nvcc on PATH");
        Map<String, String[]> manifest = manifestColumns();
        Path dir = Files.createTempDirectory("prebuilt-cuda");
        List<KernelManifest.Kernel> sample = sample().stream()
                .filter(k -> k.headDim() == 64 || k.headDim() == 256).toList();
        assertTrue(sample.size() >= 8, "twins checked: " + sample.size());
        for (KernelManifest.Kernel k : sample) {
            Path cu = dir.resolve(k.entry() + ".cu");
            Files.writeString(cu, PrebuiltCuda.source(KernelManifest.ptx(k.module()), k.entry()));
            Path ptx = dir.resolve(k.entry() + ".ptx");
            assertEquals(0, run(List.of("nvcc", "-x", "cu", "--ptx", "-arch=compute_89", "-o", ptx.toString(), cu.toString()),
                    dir.resolve("nvcc.log")), k.entry() + ": " + Files.readString(dir.resolve("nvcc.log")));
            String[] row = manifest.get(k.entry());
            for (String arch : List.of("sm_89", "sm_90")) {
                Path log = dir.resolve("ptxas-" + arch + ".log");
                assertEquals(0, run(List.of("ptxas", "-arch=" + arch, "-v", "-o", dir.resolve("k.cubin").toString(),
                        ptx.toString()), log), k.entry() + " " + arch + ": " + Files.readString(log));
                Matcher m = PTXAS.matcher(Files.readString(log));
                assertTrue(m.find(), Files.readString(log));
                String regs = row[arch.equals("sm_89") ? 0 : 1];
                assertEquals(regs, m.group(1), k.entry() + " registers on " + arch);
                assertEquals(row[2], m.group(2), k.entry() + " static shared memory on " + arch);
            }
        }
    }

    /** entry -> {regs_sm_89, regs_sm_90, smem_static} from ptx-overrides/ptx/manifest.tsv. */
    private static Map<String, String[]> manifestColumns() throws IOException {
        Path tsv = Path.of(System.getProperty("basedir", ".")).toAbsolutePath().resolve("../ptx-overrides/ptx/manifest.tsv");
        List<String> lines = Files.readAllLines(tsv, StandardCharsets.UTF_8);
        List<String> header = List.of(lines.getFirst().split("\t"));
        int entry = header.indexOf("entry");
        int r89 = header.indexOf("regs_sm_89");
        int r90 = header.indexOf("regs_sm_90");
        int smem = header.indexOf("smem_static");
        Map<String, String[]> columns = new LinkedHashMap<>();
        for (String line : lines.subList(1, lines.size())) {
            String[] f = line.split("\t");
            columns.put(f[entry], new String[] {f[r89], f[r90], f[smem]});
        }
        return columns;
    }

    private static int run(List<String> command, Path log) throws IOException, InterruptedException {
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        builder.redirectOutput(log == null ? ProcessBuilder.Redirect.DISCARD : ProcessBuilder.Redirect.to(log.toFile()));
        Process p;
        try {
            p = builder.start();
        } catch (IOException e) {
            return -1;
        }
        if (!p.waitFor(300, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            return -2;
        }
        return p.exitValue();
    }
}
