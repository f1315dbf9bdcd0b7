import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import uk.ac.manchester.tornado.api.AccessorParameters;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * Can executions of different TornadoVM execution plans, issued from several host threads, hide TornadoVM's
 * synchronous per-execution cost? A decode step through the inference API is one execution per layer, each of its
 * own plan (so its own CUDA stream); here PLANS plans stand for the layers. Each plan's kernel reads a resident
 * array of MB megabytes (bandwidth-bound, as a decode kernel is, so concurrent kernels share the GPU's memory
 * bandwidth instead of overlapping for free), then writes out[j] = in[j] + plan + 1 (in sent and out received
 * with every execution, 64 KB each, as a staged decode execution moves). A round = every plan executed once, plan
 * i always by thread i mod T, then all threads meet (one synchronisation per token). Every output is checked.
 * TornadoVM API only; no project classes.
 *
 * <pre>  javac -cp $TORNADOVM_HOME/share/java/tornado/tornado-api-5.2.0-jdk25.jar -d out/probe tornado-kernels/tools/ConcurrentExecuteProbe.java
 *   java @$TORNADOVM_HOME/tornado-argfile --enable-native-access=ALL-UNNAMED -Dtornado.recover.bailout=False \
 *       -Dtornado.max.events=1024 -cp out/probe ConcurrentExecuteProbe [PLANS [MB [WARMUP ROUNDS [THREADS,...]]]]
 * </pre>
 *
 * Prints one line per (threads, CUDA graph): median and 10th percentile microseconds of a round, and mismatches.
 */
public final class ConcurrentExecuteProbe {
    private static final int N = 16384;          // floats of in and out: 64 KB each
    private static final int THREADS_PER_BLOCK = 256;

    public static void main(String[] args) throws Exception {
        int plans = args.length > 0 ? Integer.parseInt(args[0]) : 8;
        int mb = args.length > 1 ? Integer.parseInt(args[1]) : 147;
        int warmup = args.length > 2 ? Integer.parseInt(args[2]) : 300;
        int rounds = args.length > 3 ? Integer.parseInt(args[3]) : 500;
        int[] threadCounts = args.length > 4 ? Arrays.stream(args[4].split(",")).mapToInt(Integer::parseInt).toArray()
                : new int[] {1, 2, 4, 8};
        System.out.printf("[concurrent] %d plans, %d MB read per kernel, %d warm-up and %d timed rounds%n", plans, mb,
                warmup, rounds);
        for (boolean cudaGraph : new boolean[] {false, true}) {
            List<Plan> built = new ArrayList<>();
            try {
                for (int p = 0; p < plans; p++) {
                    built.add(new Plan(p, mb, cudaGraph));
                }
                for (int t : threadCounts) {
                    if (t > plans) {
                        continue;
                    }
                    run(built, t, warmup, rounds, cudaGraph);
                }
            } finally {
                for (Plan p : built) {
                    p.plan.close();
                }
            }
        }
    }

    private static void run(List<Plan> plans, int threads, int warmup, int rounds, boolean cudaGraph) throws Exception {
        int total = warmup + rounds;
        long[] roundNs = new long[total];
        AtomicLong mismatches = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long[] start = new long[1];
        CyclicBarrier begin = new CyclicBarrier(threads, () -> start[0] = System.nanoTime());
        int[] round = new int[1];
        CyclicBarrier end = new CyclicBarrier(threads, () -> roundNs[round[0]++] = System.nanoTime() - start[0]);
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int first = t;
            Thread w = new Thread(() -> {
                try {
                    for (int r = 0; r < total; r++) {
                        begin.await();
                        for (int p = first; p < plans.size(); p += threads) {
                            mismatches.addAndGet(plans.get(p).executeAndCheck(r));
                        }
                        end.await();
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                    begin.reset();
                    end.reset();
                }
            }, "probe-" + t);
            workers.add(w);
            w.start();
        }
        for (Thread w : workers) {
            w.join();
        }
        if (failure.get() != null) {
            System.out.printf("[concurrent] threads %d cudaGraph %-5s  FAILED: %s%n", threads, cudaGraph, failure.get());
            failure.get().printStackTrace(System.out);
            return;
        }
        long[] timed = Arrays.copyOfRange(roundNs, warmup, total);
        Arrays.sort(timed);
        System.out.printf("[concurrent] threads %d cudaGraph %-5s  round median %8.1f us  p10 %8.1f us  (%d executions per"
                + " round)  mismatches %d%n", threads, cudaGraph, timed[timed.length / 2] / 1e3, timed[timed.length / 10] / 1e3,
                plans.size(), mismatches.get());
    }

    /** One plan: a resident array of mb MB, in and out sent / received with every execution. */
    private static final class Plan {
        final int id;
        final FloatArray in = new FloatArray(N);
        final FloatArray out = new FloatArray(N);
        final TornadoExecutionPlan plan;

        Plan(int id, int mb, boolean cudaGraph) throws Exception {
            this.id = id;
            int vec4 = mb * (1 << 20) / 16;
            FloatArray big = new FloatArray(vec4 * 4);   // zeros: the kernel's sum over it is exactly 0
            String g = "cp" + id + (cudaGraph ? "c" : "p");
            TaskGraph graph = new TaskGraph(g)
                    .transferToDevice(DataTransferMode.FIRST_EXECUTION, big)
                    .transferToDevice(DataTransferMode.EVERY_EXECUTION, in);
            GridScheduler scheduler = new GridScheduler();
            prebuilt(graph, scheduler, g, big, vec4);
            graph.transferToHost(DataTransferMode.EVERY_EXECUTION, out);
            plan = new TornadoExecutionPlan(graph.snapshot());
            plan.withGridScheduler(scheduler);
            if (cudaGraph) {
                plan.withCUDAGraph();
            }
        }

        /** Fills in for round r, executes, returns how many outputs are wrong. */
        long executeAndCheck(int r) {
            for (int j = 0; j < N; j++) {
                in.set(j, (r % 1000) * 16 + (j % 97));
            }
            out.init(Float.NaN);
            plan.execute();
            long wrong = 0;
            for (int j = 0; j < N; j++) {
                if (out.get(j) != in.get(j) + id + 1) {
                    wrong++;
                }
            }
            return wrong;
        }

        private void prebuilt(TaskGraph graph, GridScheduler scheduler, String g, FloatArray big, int vec4)
                throws Exception {
            String name = g + "_t_readsum_arrays_floatarray_arrays_floatarray_arrays_floatarray";
            long h = TornadoNativeArray.ARRAY_HEADER;
            String ptx = ".visible .entry " + name + "(.param .u64 ctx, .param .u64 big, .param .u64 in, .param .u64 out)\n{\n"
                    + "  .reg .pred %p<3>;\n  .reg .b32 %r<10>;\n  .reg .b64 %rd<12>;\n  .reg .f32 %f<12>;\n"
                    + "  ld.param.u64 %rd1, [big];\n  cvta.to.global.u64 %rd1, %rd1;\n  add.s64 %rd1, %rd1, " + h + ";\n"
                    + "  ld.param.u64 %rd2, [in];\n  cvta.to.global.u64 %rd2, %rd2;\n  add.s64 %rd2, %rd2, " + h + ";\n"
                    + "  ld.param.u64 %rd3, [out];\n  cvta.to.global.u64 %rd3, %rd3;\n  add.s64 %rd3, %rd3, " + h + ";\n"
                    + "  mov.u32 %r1, %tid.x;\n  mov.u32 %r2, %ctaid.x;\n  mov.u32 %r3, %ntid.x;\n  mov.u32 %r4, %nctaid.x;\n"
                    + "  mad.lo.u32 %r5, %r2, %r3, %r1;\n  mul.lo.u32 %r6, %r3, %r4;\n"
                    + "  mov.f32 %f1, 0f00000000;\n  mov.u32 %r7, %r5;\n"
                    + "LOOP:\n  setp.ge.u32 %p1, %r7, " + vec4 + ";\n  @%p1 bra DONE;\n"
                    + "  mul.wide.u32 %rd4, %r7, 16;\n  add.s64 %rd5, %rd1, %rd4;\n"
                    + "  ld.global.v4.f32 {%f2, %f3, %f4, %f5}, [%rd5];\n"
                    + "  add.f32 %f1, %f1, %f2;\n  add.f32 %f1, %f1, %f3;\n  add.f32 %f1, %f1, %f4;\n  add.f32 %f1, %f1, %f5;\n"
                    + "  add.u32 %r7, %r7, %r6;\n  bra LOOP;\n"
                    + "DONE:\n  setp.ge.u32 %p2, %r5, " + N + ";\n  @%p2 bra END;\n"
                    + "  mul.wide.u32 %rd6, %r5, 4;\n  add.s64 %rd7, %rd2, %rd6;\n  add.s64 %rd8, %rd3, %rd6;\n"
                    + "  ld.global.f32 %f6, [%rd7];\n  add.f32 %f6, %f6, %f1;\n"
                    + "  add.f32 %f6, %f6, 0f" + Integer.toHexString(Float.floatToIntBits(id + 1)).toUpperCase() + ";\n"
                    + "  st.global.f32 [%rd8], %f6;\n"
                    + "END:\n  ret;\n}\n";
            Path file = Files.createTempFile("concurrent-probe-", ".ptx");
            file.toFile().deleteOnExit();
            Files.writeString(file, ptx);
            AccessorParameters accessors = new AccessorParameters(3);
            accessors.set(0, big, Access.READ_ONLY);
            accessors.set(1, in, Access.READ_ONLY);
            accessors.set(2, out, Access.READ_WRITE);
            graph.prebuiltTask("t", "readsum", file.toString(), accessors);
            WorkerGrid1D grid = new WorkerGrid1D(132 * 8 * THREADS_PER_BLOCK);
            grid.setLocalWork(THREADS_PER_BLOCK, 1, 1);
            scheduler.addWorkerGrid(g + ".t", grid);
        }
    }
}
