import java.util.ArrayList;
import java.util.List;
import uk.ac.manchester.tornado.api.ImmutableTaskGraph;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.annotations.Parallel;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * Minimal reproducer of "TornadoVM 5.2.0 gave wrong results once several plans had lived in one JVM" (the
 * device-resident inputs removed in 68bafba), and the pattern that is safe. TornadoVM API only; no project
 * classes. See tornado-kernels/README.md, "Device residency in TornadoVM 5.2.0".
 *
 * <pre>  (-g: TornadoVM reads the kernels' local variable tables)
 *   javac -g -cp $TORNADOVM_HOME/share/java/tornado/tornado-api-5.2.0-jdk25.jar -d out/repro tornado-kernels/tools/ResidencyRepro.java
 *   java @$TORNADOVM_HOME/tornado-argfile --enable-native-access=ALL-UNNAMED -Dtornado.recover.bailout=False \
 *       -cp out/repro ResidencyRepro MODE [ROUNDS] [ELEMENTS]
 * </pre>
 *
 * MODE:
 * <ul>
 *   <li>{@code old}: the removed scheme in small. Per round, a new plan of two task graphs over a new array
 *       {@code a}: graph 0 sends {@code a} ({@code EVERY_EXECUTION}) and keeps it ({@code persistOnDevice}); graph 1
 *       takes it ({@code consumeFromDevice}) and computes {@code out = a + 1}. Both run through
 *       {@code withGraph(i).execute()}, then the plan is closed and dropped. TornadoVM's {@code close()} frees only the
 *       graph selected last, so graph 0's device buffer and its pinning of {@code a}'s host memory
 *       ({@code cuMemHostRegister}) are never released; when the garbage collector frees {@code a} and a later round
 *       gets new memory at the same address, the driver still holds the old pinned pages.</li>
 *   <li>{@code fixed}: the same, with {@code withAllGraphs()} before {@code close()}: every graph is freed.</li>
 *   <li>{@code single}: one task graph per plan (what the library does now).</li>
 *   <li>{@code resident}: the pattern for a KV cache: one task graph per plan, the cache sent once
 *       ({@code FIRST_EXECUTION}) and appended to on the device by a task, only the new token and the length sent per
 *       step; two such plans alive at once, stepped in turn, then closed. The host writes a prefix into the cache
 *       before the first execution.</li>
 *   <li>{@code resident-writeonly}: the same with an append task that only writes the cache: TornadoVM then never
 *       sends the cache (its first task's access decides), and the host's prefix is lost on the device.</li>
 * </ul>
 * Each round prints the host address of {@code a} and PASS/FAIL of {@code out} on the host (values are not checked
 * on the fake driver of tools/fakecuda, whose launches do nothing). Run it under the fake driver with
 * {@code LD_PRELOAD=libhostpin.so} (tools/fakecuda/hostpin.c) to see each registration, unregistration and the
 * release of registered memory.
 */
public final class ResidencyRepro {
    /** 9 Mi floats (36 MiB): glibc maps blocks of 32 MiB and more on their own and unmaps them on free. */
    private static final int DEFAULT_ELEMENTS = 9 << 20;
    private static boolean fake;
    private static int failures;

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "old";
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 6;
        int n = args.length > 2 ? Integer.parseInt(args[2]) : DEFAULT_ELEMENTS;
        fake = TornadoExecutionPlan.getDevice(0, 0).getPhysicalDevice().getDeviceName().contains("(fake)");
        System.out.println("[tornadovm] backend " + TornadoExecutionPlan.getDevice(0, 0).getTornadoVMBackend());
        System.out.println("[repro] mode " + mode + ", " + rounds + " rounds, " + n + " floats, device "
                + TornadoExecutionPlan.getDevice(0, 0).getPhysicalDevice().getDeviceName());
        switch (mode) {
            case "old", "fixed", "single" -> {
                for (int r = 0; r < rounds; r++) {
                    round(mode, r, n);
                    collectGarbage();
                }
            }
            case "resident" -> resident(rounds, Math.min(n, 1 << 16), false);
            case "resident-writeonly" -> resident(rounds, Math.min(n, 1 << 16), true);
            default -> throw new IllegalArgumentException("mode: old | fixed | single | resident | resident-writeonly");
        }
        System.out.println("[repro] end " + mode + ": " + (fake ? "values not checked (fake driver)"
                : failures == 0 ? "all PASS" : failures + " FAIL"));
    }

    public static void touch(FloatArray a) {
    }

    public static void addOne(FloatArray a, FloatArray out) {
        for (@Parallel int i = 0; i < a.getSize(); i++) {
            out.set(i, a.get(i) + 1f);
        }
    }

    private static void round(String mode, int r, int n) throws Exception {
        FloatArray a = new FloatArray(n);
        FloatArray out = new FloatArray(n);
        a.init(r + 1f);
        out.init(-1f);
        System.out.printf("[repro] round %d a@0x%x%n", r, a.getSegmentWithHeader().address());
        TornadoExecutionPlan plan;
        if (mode.equals("single")) {
            TaskGraph g = new TaskGraph("single" + r)
                    .transferToDevice(DataTransferMode.EVERY_EXECUTION, a)
                    .task("add", ResidencyRepro::addOne, a, out)
                    .transferToHost(DataTransferMode.EVERY_EXECUTION, out);
            plan = new TornadoExecutionPlan(g.snapshot());
            plan.execute();
        } else {
            TaskGraph send = new TaskGraph("send" + r)
                    .transferToDevice(DataTransferMode.EVERY_EXECUTION, a)
                    .task("touch", ResidencyRepro::touch, a)
                    .persistOnDevice(a);
            TaskGraph use = new TaskGraph("use" + r)
                    .consumeFromDevice(a)
                    .task("add", ResidencyRepro::addOne, a, out)
                    .transferToHost(DataTransferMode.EVERY_EXECUTION, out);
            ImmutableTaskGraph[] graphs = {send.snapshot(), use.snapshot()};
            plan = new TornadoExecutionPlan(graphs);
            plan.withGraph(0).execute();
            plan.withGraph(1).execute();
        }
        check("round " + r, out, r + 2f);
        if (mode.equals("fixed")) {
            plan.withAllGraphs();   // close() frees the graphs selected now: all of them
        }
        System.out.println("[repro] close round " + r);
        plan.close();
        System.out.println("[repro] closed round " + r);
    }

    /**
     * Appends the token (one value) at {@code length[0]} of the cache, on the device. It reads the cache (adds to the
     * zero there), so TornadoVM's dataflow analysis deems the cache READ_WRITE in the graph's first task and honours
     * its transfer to the device.
     */
    public static void append(FloatArray cache, FloatArray token, IntArray length) {
        for (@Parallel int i = 0; i < 1; i++) {
            int at = length.get(0);
            cache.set(at, cache.get(at) + token.get(0));
        }
    }

    /**
     * The same append, write-only: as the graph's first task touching the cache, it makes TornadoVM drop the cache's
     * declared transfer (TornadoGraphBuilder: a WRITE_ONLY argument gets an allocation node only), so the host's
     * prefix never reaches the device.
     */
    public static void appendWriteOnly(FloatArray cache, FloatArray token, IntArray length) {
        for (@Parallel int i = 0; i < 1; i++) {
            cache.set(length.get(0), token.get(0));
        }
    }

    /**
     * {@code out[0]} = sum of the cache's first {@code length[0] + 1} values ("attention" over the cache). (Written
     * with {@code j < end}: TornadoVM 5.2.0 compiled {@code for (j = 0; j <= length.get(0); j++)} inside the
     * parallel loop into PTX whose loop body is unreachable, so the sum was always 0.)
     */
    public static void attend(FloatArray cache, IntArray length, FloatArray out) {
        for (@Parallel int i = 0; i < 1; i++) {
            int end = length.get(0) + 1;
            float s = 0f;
            for (int j = 0; j < end; j++) {
                s += cache.get(j);
            }
            out.set(0, s);
        }
    }

    /** A decode step's graph: the cache resident (sent once), token and length sent per step, the sum back. */
    private record Decoder(String name, FloatArray cache, FloatArray token, IntArray length, FloatArray out,
                           TornadoExecutionPlan plan) {
        static Decoder create(String name, int capacity, float prefix, boolean writeOnlyAppend) {
            FloatArray cache = new FloatArray(capacity);
            cache.init(0f);
            cache.set(0, prefix);   // the "prompt", written on the host before the first execution
            FloatArray token = new FloatArray(1);
            IntArray length = new IntArray(1);
            FloatArray out = new FloatArray(1);
            TaskGraph g = new TaskGraph(name)
                    .transferToDevice(DataTransferMode.FIRST_EXECUTION, cache)
                    .transferToDevice(DataTransferMode.EVERY_EXECUTION, token, length)
                    .task("append", writeOnlyAppend ? ResidencyRepro::appendWriteOnly : ResidencyRepro::append,
                            cache, token, length)
                    .task("attend", ResidencyRepro::attend, cache, length, out)
                    .transferToHost(DataTransferMode.EVERY_EXECUTION, out);
            return new Decoder(name, cache, token, length, out, new TornadoExecutionPlan(g.snapshot()));
        }

        /** Step {@code s} (1-based) appends value {@code s} at position {@code s}; expected sum: prefix + s(s+1)/2. */
        void step(int s, float prefix) {
            token.set(0, s);
            length.set(0, s);
            System.out.println("[repro] step " + name + " " + s);
            plan.execute();
            check(name + " step " + s, out, prefix + s * (s + 1) / 2f);
        }
    }

    private static void resident(int steps, int capacity, boolean writeOnlyAppend) throws Exception {
        Decoder a = Decoder.create("decA", capacity, 100f, writeOnlyAppend);
        Decoder b = Decoder.create("decB", capacity, 1000f, writeOnlyAppend);
        for (int s = 1; s <= steps; s++) {
            a.step(s, 100f);
            b.step(s, 1000f);
        }
        System.out.println("[repro] close resident");
        a.plan().close();
        b.plan().close();
        System.out.println("[repro] closed resident");
    }

    private static void check(String what, FloatArray out, float expected) {
        if (fake) {
            System.out.println("[repro] " + what + " ran (values not checked on the fake driver)");
            return;
        }
        int size = out.getSize();
        int[] probes = {0, size / 3, size / 2, size - 1};
        for (int i : probes) {
            if (out.get(i) != expected) {
                failures++;
                System.out.println("[repro] FAIL " + what + ": out[" + i + "] = " + out.get(i) + ", expected " + expected);
                return;
            }
        }
        System.out.println("[repro] PASS " + what);
    }

    /** Lets the Cleaner free the dropped arrays' off-heap memory (Arena.ofAuto). */
    private static void collectGarbage() throws InterruptedException {
        List<byte[]> pressure = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            System.gc();
            Thread.sleep(50);
            pressure.add(new byte[1 << 20]);
        }
        pressure.clear();
    }
}
