package io.github.tornadoattention.tornado;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.HalfTensor;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.verify.RandomInputs;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
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
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.BFloat16;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;

/**
 * The PTX that TornadoVM 5.2 generates for the bf16 conversions, checked without a GPU: {@link Probe}
 * runs in a child JVM under the fake driver of tools/fakecuda, which writes every module TornadoVM loads to
 * {@code FAKECUDA_PTX_DIR} (on the CUDA backend the PTX that tools/fakenvrtc, standing in for NVRTC, built the cubin
 * from: what the GPU's driver would run). Probe compiles three one-line kernels ({@link Bf16#toFloat}, {@link Bf16#fromFloat}, and
 * TornadoVM's own {@code BFloat16.bf16ToFloat} as the control) and plans tornado-simt in bf16 (D = 64 and 256, window,
 * softcap and sinks), so that its kernels are compiled.
 *
 * <p>Two checks. {@link PtxInterpreter} runs the one-line kernels' PTX with PTX's meaning of each instruction
 * ({@code shr.b32} fills with zeros): {@link Bf16} must give the exact value of all 65536 patterns and round like the
 * JDK, and the control must not (it is what made every bf16 selftest fail on an H200: -1.0 and every other negative
 * input came out as garbage, since the PTX backend emits Java's {@code >>} as the logical {@code shr.b32}). And a data
 * flow check over the tornado-simt bf16 kernels' PTX: no right shift reads bits that came sign-extended from a 16-bit
 * load, unless an {@code and} with a non-negative constant cleared the sign first (the control has such shifts). Skipped
 * where gcc, cuda.h or TornadoVM are missing.
 */
class Bf16PtxTest {
    private static final Pattern ENTRY = Pattern.compile("\\.entry\\s+(\\w+)\\s*\\(");
    private static String log;
    private static final Map<String, String> PTX = new LinkedHashMap<>();   // entry name to its module

    @BeforeAll
    static void runTheProbe() throws IOException, InterruptedException {
        Path argfile = FakeCuda.argfile();
        assumeTrue(argfile != null, "TORNADOVM_HOME or target/tornado-argfile missing");
        Path lib = FakeCuda.library();
        assumeTrue(lib != null, "the fake driver could not be built (gcc, cuda.h)");
        Path cwd = Files.createTempDirectory("bf16-ptx");   // the argfile puts "." on the module path
        Path modules = Files.createDirectories(cwd.resolve("ptx"));
        Path out = cwd.resolve("probe.log");
        List<String> command = FakeCuda.tornadoJvm(argfile, "-Dtornado.recover.bailout=False", Probe.class.getName());
        int exit = FakeCuda.run(command, out, Map.of("LD_LIBRARY_PATH", lib.toString(), "FAKECUDA_PTX_DIR", modules.toString()));
        log = Files.readString(out, StandardCharsets.UTF_8);
        assertEquals(0, exit, log);
        try (Stream<Path> files = Files.list(modules)) {
            for (Path file : files.sorted().toList()) {
                String ptx = Files.readString(file, StandardCharsets.UTF_8);
                Matcher m = ENTRY.matcher(ptx);
                if (m.find()) {
                    PTX.put(m.group(1), ptx);
                }
            }
        }
    }

    /**
     * The PTX of the probe's kernel {@code method} (lower case): TornadoVM's PTX backend names it
     * {@code <graph>_k_<method>_<argument types>}, its CUDA backend (NVRTC's PTX) by the method alone.
     */
    private static String kernel(String method) {
        List<String> found = PTX.keySet().stream().filter(n -> n.toLowerCase(java.util.Locale.ROOT)
                .matches("(.*_k_)?" + method + "(_.*)?")).toList();
        assertEquals(1, found.size(), method + " among " + PTX.keySet() + "\n" + log);
        return PTX.get(found.getFirst());
    }

    @Test
    void everyProbeStepRan() {
        List<String> lines = log.lines().filter(l -> l.startsWith("[probe] ")).toList();
        assertEquals(5, lines.size(), log);
        lines.forEach(l -> assertTrue(l.endsWith(" ok"), l + "\n" + log));
    }

    /** Bf16.toFloat as the GPU runs it: the exact value of every bf16 pattern. */
    @Test
    void decodeIsExactOnThePtx() {
        PtxInterpreter ptx = new PtxInterpreter(kernel("bf16decode"));
        ByteBuffer in = ptx.array(ptx.lastParameters(2).get(0), 2 * 65536);
        ByteBuffer out = ptx.array(ptx.lastParameters(2).get(1), 4 * 65536);
        for (int u = 0; u < 65536; u++) {
            in.putShort(PtxInterpreter.shortAt(u), (short) u);
        }
        for (int u = 0; u < 65536; u++) {
            ptx.run(u);
        }
        for (int u = 0; u < 65536; u++) {
            float expected = Float.intBitsToFloat(u << 16);
            float got = out.getFloat(PtxInterpreter.floatAt(u));
            assertTrue(Float.isNaN(expected) ? Float.isNaN(got) : Float.floatToRawIntBits(expected) == Float.floatToRawIntBits(got),
                    "0x" + Integer.toHexString(u) + ": " + expected + " decoded as " + got);
        }
    }

    /** Bf16.fromFloat as the GPU runs it: rounded to nearest, ties to even, as the JDK's bits say. */
    @Test
    void encodeRoundsToNearestEvenOnThePtx() {
        List<Float> inputs = new ArrayList<>();
        for (int u = 0; u < 0x7F80; u += 7) {
            for (int low : new int[] {0, 0x7FFF, 0x8000, 0x8001}) {
                inputs.add(Float.intBitsToFloat((u << 16) | low));
                inputs.add(-Float.intBitsToFloat((u << 16) | low));
            }
        }
        Random random = new Random(3);
        for (int i = 0; i < 20_000; i++) {
            inputs.add((float) random.nextGaussian() * (1 << random.nextInt(12)));
        }
        inputs.addAll(List.of(Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY, Float.MAX_VALUE,
                Float.MIN_VALUE, Float.intBitsToFloat(0x7F7F8000), Float.intBitsToFloat(0x007FFFFF), 1.0f, -1.0f));
        PtxInterpreter ptx = new PtxInterpreter(kernel("bf16encode"));
        ByteBuffer in = ptx.array(ptx.lastParameters(2).get(0), 4 * inputs.size());
        ByteBuffer out = ptx.array(ptx.lastParameters(2).get(1), 2 * inputs.size());
        for (int i = 0; i < inputs.size(); i++) {
            in.putFloat(PtxInterpreter.floatAt(i), inputs.get(i));
            ptx.run(i);
            float x = inputs.get(i);
            int expected = x == 0.0f ? 0 : Bf16Test.reference(x);   // -0 gives +0 (Bf16#fromFloat)
            assertEquals(expected, out.getShort(PtxInterpreter.shortAt(i)) & 0xFFFF, Float.toHexString(x));
        }
    }

    /**
     * The control: TornadoVM's BFloat16.bf16ToFloat, as the PTX backend compiles it, decodes negative inputs wrong (the
     * bug this class guards against), and the shift check finds its right shifts of sign-extended bits. On the CUDA
     * backend (NVRTC's PTX) it decodes them right, and the check finds nothing.
     */
    @Test
    void theChecksCatchTornadoVmsDecoder() {
        String control = kernel("bf16tornadodecode");
        PtxInterpreter ptx = new PtxInterpreter(control);
        ByteBuffer in = ptx.array(ptx.lastParameters(2).get(0), 2 * 4);
        ByteBuffer out = ptx.array(ptx.lastParameters(2).get(1), 4 * 4);
        short[] patterns = {0x3F80, (short) 0xBF80, 0x4049, (short) 0xC049};   // 1, -1, 3.140625, -3.140625
        for (int i = 0; i < patterns.length; i++) {
            in.putShort(PtxInterpreter.shortAt(i), patterns[i]);
            ptx.run(i);
        }
        assertEquals(1.0f, out.getFloat(PtxInterpreter.floatAt(0)), "positive inputs decode right");
        assertEquals(3.140625f, out.getFloat(PtxInterpreter.floatAt(2)));
        if (FakeCuda.backend(log).equals("CUDA")) {
            // The CUDA backend emits Java's >> as C's >> on an int, an arithmetic shift: its decoder is right there.
            assertEquals(-1.0f, out.getFloat(PtxInterpreter.floatAt(1)));
            assertEquals(-3.140625f, out.getFloat(PtxInterpreter.floatAt(3)));
            assertEquals(List.of(), signExtendedRightShifts(control), control);
            return;
        }
        assertTrue(out.getFloat(PtxInterpreter.floatAt(1)) != -1.0f, "-1.0 decoded right: " + out.getFloat(PtxInterpreter.floatAt(1)));
        assertTrue(out.getFloat(PtxInterpreter.floatAt(3)) != -3.140625f);
        assertFalse(signExtendedRightShifts(control).isEmpty(), control);
    }

    /** tornado-simt's bf16 kernels: no right shift of sign-extended bf16 bits, and no call left (all inlined). */
    @Test
    void theTornadoSimtBf16KernelsShiftNoSignExtendedBitsRight() {
        List<String> simt = PTX.keySet().stream().filter(n -> n.toLowerCase(java.util.Locale.ROOT).contains("attentionupto")
                && n.toLowerCase(java.util.Locale.ROOT).contains("bf16")).toList();
        assertTrue(simt.stream().anyMatch(n -> n.toLowerCase(java.util.Locale.ROOT).contains("attentionupto64bf16")), PTX.keySet() + "\n" + log);
        assertTrue(simt.stream().anyMatch(n -> n.toLowerCase(java.util.Locale.ROOT).contains("attentionupto256bf16")), PTX.keySet() + "\n" + log);
        for (String name : simt) {
            String ptx = PTX.get(name);
            // PTX backend: ld.global.s16; NVRTC: generic ld.s16 (or ld.global.nc.u16 where it proves the space).
            assertTrue(Pattern.compile("\\bld(\\.global)?(\\.nc)?\\.[su]16\\b").matcher(ptx).find(), name + " loads no 16-bit data");
            assertEquals(List.of(), signExtendedRightShifts(ptx), name);
        }
        assertEquals(List.of(), signExtendedRightShifts(kernel("bf16decode")));
        assertEquals(List.of(), signExtendedRightShifts(kernel("bf16encode")));
    }

    /**
     * The instructions of {@code ptx} that shift right ({@code shr.b}/{@code shr.u}: zero fill) a register that may hold
     * bits sign-extended from a 16- or 8-bit value: such registers start at a {@code cvt} from {@code .s16}/{@code .s8}
     * (or a signed 16/8-bit load) and pass through every instruction except an {@code and} with a non-negative constant.
     * Flow-insensitive (a register tainted anywhere is tainted everywhere), so it can only over-report.
     */
    static List<String> signExtendedRightShifts(String ptx) {
        List<String[]> instructions = new ArrayList<>();
        for (String raw : ptx.split("\n")) {
            String line = raw.trim();
            if (!line.endsWith(";") || line.startsWith(".")) {
                continue;
            }
            line = line.substring(0, line.length() - 1).trim();
            if (line.startsWith("@")) {
                line = line.substring(line.indexOf(' ') + 1).trim();
            }
            String[] split = line.split("\\s+", 2);
            List<String> parts = new ArrayList<>();
            parts.add(split[0]);
            if (split.length > 1) {
                for (String operand : split[1].split(",")) {
                    parts.add(operand.trim());
                }
            }
            instructions.add(parts.toArray(String[]::new));
        }
        Set<String> tainted = new HashSet<>();
        boolean changed = true;
        while (changed) {
            changed = false;
            for (String[] in : instructions) {
                String op = in[0];
                if (in.length < 2 || op.startsWith("st") || op.startsWith("bra") || op.startsWith("setp")
                        || op.startsWith("testp")) {
                    continue;
                }
                String dest = in[1];
                boolean taints;
                if ((op.startsWith("cvt.") && (op.endsWith(".s16") || op.endsWith(".s8")))
                        || (op.startsWith("ld.") && (op.endsWith(".s16") || op.endsWith(".s8")))) {
                    taints = true;
                } else if (op.startsWith("and.") && Stream.of(in).skip(2).anyMatch(o -> o.matches("\\d+"))) {
                    taints = false;
                } else {
                    taints = Stream.of(in).skip(2).anyMatch(tainted::contains);
                }
                if (taints && tainted.add(dest)) {
                    changed = true;
                }
            }
        }
        List<String> found = new ArrayList<>();
        for (String[] in : instructions) {
            if ((in[0].startsWith("shr.b") || in[0].startsWith("shr.u")) && in.length > 2 && tainted.contains(in[2])) {
                found.add(String.join(" ", in));
            }
        }
        return found;
    }

    /** Runs in the child JVM: a line "[probe] what ok|failed ..." per step. */
    static final class Probe {
        private Probe() {
        }

        public static void bf16Decode(KernelContext kc, ShortArray in, FloatArray out) {
            int i = kc.globalIdx;
            out.set(i, Bf16.toFloat(in.get(i)));
        }

        public static void bf16Encode(KernelContext kc, FloatArray in, ShortArray out) {
            int i = kc.globalIdx;
            out.set(i, Bf16.fromFloat(in.get(i)));
        }

        public static void bf16TornadoDecode(KernelContext kc, ShortArray in, FloatArray out) {
            int i = kc.globalIdx;
            out.set(i, BFloat16.bf16ToFloat(in.get(i)));
        }

        public static void main(String[] args) {
            FakeCuda.printBackend();
            ShortArray shorts = new ShortArray(64);
            FloatArray floats = new FloatArray(64);
            KernelContext kc = new KernelContext();
            run("decode", new TaskGraph("decode").transferToDevice(DataTransferMode.EVERY_EXECUTION, shorts)
                    .task("k", Probe::bf16Decode, kc, shorts, floats).transferToHost(DataTransferMode.EVERY_EXECUTION, floats));
            run("encode", new TaskGraph("encode").transferToDevice(DataTransferMode.EVERY_EXECUTION, floats)
                    .task("k", Probe::bf16Encode, kc, floats, shorts).transferToHost(DataTransferMode.EVERY_EXECUTION, shorts));
            run("control", new TaskGraph("control").transferToDevice(DataTransferMode.EVERY_EXECUTION, shorts)
                    .task("k", Probe::bf16TornadoDecode, kc, shorts, floats).transferToHost(DataTransferMode.EVERY_EXECUTION, floats));
            for (int d : new int[] {64, 256}) {
                AttentionShape shape = AttentionShape.builder().batch(1).heads(2).kvHeads(1).queryLength(70).kvLength(90)
                        .headDim(d).causal(true).layout(Layout.BHSD).dtype(DType.BF16).window(33, 0).softcap(20f)
                        .sinks(new float[] {0.5f, -0.5f}).build();
                try (RandomInputs in = RandomInputs.generate(shape, 1);
                     HalfTensor o = HalfTensor.allocate(DType.BF16, shape.outputElements());
                     AttentionPlan plan = new TornadoSimtBackend().plan(shape)) {
                    plan.forward(in.q(), in.k(), in.v(), o, new float[shape.logSumExpElements()]);
                    result("tornado-simt bf16 D=" + d, null);
                } catch (RuntimeException | Error e) {
                    result("tornado-simt bf16 D=" + d, e);
                }
            }
            System.out.flush();
        }

        private static void run(String name, TaskGraph graph) {
            GridScheduler scheduler = new GridScheduler();
            WorkerGrid1D worker = new WorkerGrid1D(64);
            worker.setLocalWork(64, 1, 1);
            scheduler.addWorkerGrid(name + ".k", worker);
            try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
                plan.withGridScheduler(scheduler).execute();
                result(name, null);
            } catch (Exception | Error e) {
                result(name, e);
            }
        }

        private static void result(String what, Throwable failure) {
            if (failure != null) {
                System.out.println("[probe] " + what + " failed: " + String.valueOf(failure).replace('\n', ' '));
                failure.printStackTrace(System.out);
            } else {
                System.out.println("[probe] " + what + " ok");
            }
            System.out.flush();
        }
    }
}
