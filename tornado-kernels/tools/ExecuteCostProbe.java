import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import uk.ac.manchester.tornado.api.AccessorParameters;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionPlan;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.Access;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.runtime.TornadoRuntimeProvider;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * What one {@code TornadoExecutionPlan.execute()} costs on a GPU apart from its kernels: a graph of one tiny
 * prebuilt kernel (PTX on TornadoVM's PTX backend, CUDA C on its CUDA backend) with IN arrays sent and OUT arrays received with every execution, timed over many
 * executions after a JIT warm-up, with and without CUDA graphs. TornadoVM API only; no project classes.
 *
 * <pre>  javac -cp $TORNADOVM_HOME/share/java/tornado/tornado-api-5.2.0-jdk25.jar -d out/probe tornado-kernels/tools/ExecuteCostProbe.java
 *   java @$TORNADOVM_HOME/tornado-argfile --enable-native-access=ALL-UNNAMED -Dtornado.recover.bailout=False \
 *       -cp out/probe ExecuteCostProbe [BYTES_PER_ARRAY [WARMUP RUNS]]
 * </pre>
 *
 * Prints one line per (ins, outs, CUDA graph): the median and 10th percentile microseconds of an execute().
 */
public final class ExecuteCostProbe {
    private static int warmup = 2000;
    private static int runs = 3000;

    public static void main(String[] args) throws Exception {
        int bytes = args.length > 0 ? Integer.parseInt(args[0]) : 16384;
        warmup = args.length > 1 ? Integer.parseInt(args[1]) : warmup;
        runs = args.length > 2 ? Integer.parseInt(args[2]) : runs;
        int floats = bytes / 4;
        System.out.println("[tornadovm] backend " + backend());
        System.out.printf("[probe] %d bytes per array, %d warm-up and %d timed executions%n", bytes, warmup, runs);
        for (boolean cudaGraph : new boolean[] {false, true}) {
            for (int[] io : new int[][] {{0, 0}, {0, 1}, {1, 1}, {2, 1}, {4, 1}, {4, 2}, {6, 2}}) {
                double[] us = time(io[0], io[1], floats, cudaGraph);
                System.out.printf("[probe] ins %d outs %d cudaGraph %-5s  median %7.1f us  p10 %7.1f us%n", io[0], io[1],
                        cudaGraph, us[0], us[1]);
            }
        }
    }

    private static double[] time(int ins, int outs, int floats, boolean cudaGraph) throws Exception {
        String g = "g" + ins + outs + (cudaGraph ? "c" : "p");
        FloatArray[] arrays = new FloatArray[ins + Math.max(outs, 1)];
        for (int i = 0; i < arrays.length; i++) {
            arrays[i] = new FloatArray(floats);
            arrays[i].init(i);
        }
        FloatArray[] in = Arrays.copyOfRange(arrays, 0, ins);
        FloatArray[] out = Arrays.copyOfRange(arrays, ins, arrays.length);
        TaskGraph graph = new TaskGraph(g);
        if (ins > 0) {
            graph.transferToDevice(DataTransferMode.EVERY_EXECUTION, (Object[]) in);
        }
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, (Object[]) out);
        GridScheduler scheduler = new GridScheduler();
        prebuilt(graph, scheduler, g, arrays, ins);
        if (outs > 0) {
            graph.transferToHost(DataTransferMode.EVERY_EXECUTION, (Object[]) out);
        }
        try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
            plan.withGridScheduler(scheduler);
            if (cudaGraph) {
                plan.withCUDAGraph();
            }
            System.out.printf("[probe] start ins %d outs %d cudaGraph %s%n", ins, outs, cudaGraph);
            for (int i = 0; i < warmup; i++) {
                plan.execute();
            }
            long[] ns = new long[runs];
            for (int i = 0; i < runs; i++) {
                long t0 = System.nanoTime();
                plan.execute();
                ns[i] = System.nanoTime() - t0;
            }
            Arrays.sort(ns);
            return new double[] {ns[runs / 2] / 1e3, ns[runs / 10] / 1e3};
        }
    }

    private static TornadoVMBackendType backend() {
        return TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice().getTornadoVMBackend();
    }

    /**
     * A kernel over all {@code arrays} that stores 1.0 into the last one's first 32 floats; the arrays from
     * {@code firstOut} on are declared written (TornadoVM copies back only arrays a task writes).
     */
    private static void prebuilt(TaskGraph graph, GridScheduler scheduler, String graphName, FloatArray[] arrays,
                                 int firstOut) throws Exception {
        StringBuilder name = new StringBuilder(graphName + "_t_touch");
        StringBuilder params = new StringBuilder(".param .u64 ctx");
        for (int i = 0; i < arrays.length; i++) {
            name.append("_arrays_floatarray");
            params.append(", .param .u64 a").append(i);
        }
        String ptx = ".visible .entry " + name + "(" + params + ")\n{\n"
                + "  .reg .b32 %r<2>;\n  .reg .b64 %rd<5>;\n  .reg .f32 %f<2>;\n"
                + "  ld.param.u64 %rd1, [a" + (arrays.length - 1) + "];\n  cvta.to.global.u64 %rd2, %rd1;\n"
                + "  mov.u32 %r1, %tid.x;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
                + "  mov.f32 %f1, 0f3F800000;\n"
                + "  st.global.f32 [%rd4+" + TornadoNativeArray.ARRAY_HEADER + "], %f1;\n  ret;\n}\n";
        // CUDA backend: CUDA C under the entry's own name, after the four words its launches pass first.
        StringBuilder cudaParams = new StringBuilder("long *_kernel_context, unsigned char *_constant_region,"
                + " unsigned char *_local_region, int *_atomics");
        for (int i = 0; i < arrays.length; i++) {
            cudaParams.append(", unsigned char *a").append(i);
        }
        String cuda = "extern \"C\" __global__ void touch(" + cudaParams + ") {\n    ((float *) (a" + (arrays.length - 1)
                + " + " + TornadoNativeArray.ARRAY_HEADER + "))[threadIdx.x] = 1.0f;\n}\n";
        boolean onCuda = backend() == TornadoVMBackendType.CUDA;
        Path file = Files.createTempFile("execute-cost-", onCuda ? ".cu" : ".ptx");
        file.toFile().deleteOnExit();
        Files.writeString(file, onCuda ? cuda : ptx);
        AccessorParameters accessors = new AccessorParameters(arrays.length);
        for (int i = 0; i < arrays.length; i++) {
            accessors.set(i, arrays[i], i >= firstOut ? Access.READ_WRITE : Access.READ_ONLY);
        }
        graph.prebuiltTask("t", "touch", file.toString(), accessors);
        WorkerGrid1D grid = new WorkerGrid1D(32);
        grid.setLocalWork(32, 1, 1);
        scheduler.addWorkerGrid(graphName + ".t", grid);
    }
}
