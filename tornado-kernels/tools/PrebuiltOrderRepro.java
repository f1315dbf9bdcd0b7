import java.nio.file.Files;
import java.nio.file.Path;
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
 * Minimal reproducer of "TornadoVM 5.2.0 runs a prebuilt task correctly only as the first task of its graph"
 * (tornado-kernels/README.md, "Known problems"). TornadoVM API only; no project classes.
 *
 * <pre>  javac -g -cp $TORNADOVM_HOME/share/java/tornado/tornado-api-5.2.0-jdk25.jar -d out/repro tornado-kernels/tools/PrebuiltOrderRepro.java
 *   java @$TORNADOVM_HOME/tornado-argfile --enable-native-access=ALL-UNNAMED -Dtornado.recover.bailout=False \
 *       -cp out/repro PrebuiltOrderRepro MODE
 * </pre>
 *
 * Two prebuilt kernels with the same signature (PTX on TornadoVM's PTX backend, CUDA C on its CUDA backend, which
 * compiles a prebuilt task's file with NVRTC): {@code write1} stores 1.0 into its array, {@code write2} stores
 * 2.0 into its own. MODE {@code together}: both tasks in one graph (a, then b); {@code apart}: each in a graph of its
 * own. Expected: a = 1, b = 2. With {@code together}, TornadoVM launches task b with task a's kernel
 * ({@code TornadoVMInterpreter.globalToLocalTaskIndex} finds the task with {@code indexOf}, and {@code
 * PrebuiltTask.equals} matches no prebuilt task, so both use installed-code slot 0): b = 1, a wrong result with no
 * error. Under the fake driver of tools/fakecuda (values not checked there) the launch log names the kernel run.
 */
public final class PrebuiltOrderRepro {
    private static final int N = 32;

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "together";
        System.out.println("[tornadovm] backend " + backend());
        FloatArray a = new FloatArray(N);
        FloatArray b = new FloatArray(N);
        if (mode.equals("together")) {
            TaskGraph graph = new TaskGraph("g").transferToDevice(DataTransferMode.FIRST_EXECUTION, a, b);
            GridScheduler scheduler = new GridScheduler();
            prebuilt(graph, scheduler, "g", "a", "write1", 1f, a);
            prebuilt(graph, scheduler, "g", "b", "write2", 2f, b);
            graph.transferToHost(DataTransferMode.EVERY_EXECUTION, a, b);
            try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
                plan.withGridScheduler(scheduler).execute();
            }
        } else if (mode.equals("apart")) {
            for (String[] t : new String[][] {{"ga", "a", "write1"}, {"gb", "b", "write2"}}) {
                FloatArray out = t[1].equals("a") ? a : b;
                TaskGraph graph = new TaskGraph(t[0]).transferToDevice(DataTransferMode.FIRST_EXECUTION, out);
                GridScheduler scheduler = new GridScheduler();
                prebuilt(graph, scheduler, t[0], t[1], t[2], t[1].equals("a") ? 1f : 2f, out);
                graph.transferToHost(DataTransferMode.EVERY_EXECUTION, out);
                try (TornadoExecutionPlan plan = new TornadoExecutionPlan(graph.snapshot())) {
                    plan.withGridScheduler(scheduler).execute();
                }
            }
        } else {
            throw new IllegalArgumentException("mode: together | apart");
        }
        boolean pass = a.get(0) == 1f && b.get(0) == 2f;
        System.out.println("[repro] " + mode + ": a[0] = " + a.get(0) + ", b[0] = " + b.get(0) + " (expected 1.0, 2.0): "
                + (pass ? "PASS" : "FAIL"));
    }

    private static TornadoVMBackendType backend() {
        return TornadoRuntimeProvider.getTornadoRuntime().getDefaultDevice().getTornadoVMBackend();
    }

    /** Task {@code task} of graph {@code graphName}: a kernel storing {@code value} into {@code out[0..N)}. */
    private static void prebuilt(TaskGraph graph, GridScheduler scheduler, String graphName, String task, String entry,
                                 float value, FloatArray out) throws Exception {
        String bits = "0x" + Integer.toHexString(Float.floatToRawIntBits(value)).toUpperCase();
        // CUDA backend: the entry's own name, after the four words its launches pass first (kernel context, constant
        // region, local region, atomics). PTX backend: looked up as <graph>_<task>_<entry>_<one token per array>.
        String cuda = "extern \"C\" __global__ void " + entry + "(long *_kernel_context, unsigned char *_constant_region,"
                + " unsigned char *_local_region, int *_atomics, unsigned char *out) {\n"
                + "    ((float *) (out + " + TornadoNativeArray.ARRAY_HEADER + "))[threadIdx.x] = __int_as_float(" + bits + ");\n}\n";
        String name = graphName + "_" + task + "_" + entry + "_arrays_floatarray";
        String ptx = ".visible .entry " + name + "(.param .u64 ctx, .param .u64 out)\n{\n"
                + "  .reg .b32 %r<2>;\n  .reg .b64 %rd<5>;\n  .reg .f32 %f<2>;\n"
                + "  ld.param.u64 %rd1, [out];\n  cvta.to.global.u64 %rd2, %rd1;\n"
                + "  mov.u32 %r1, %tid.x;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
                + "  mov.f32 %f1, 0f" + Integer.toHexString(Float.floatToRawIntBits(value)).toUpperCase() + ";\n"
                + "  st.global.f32 [%rd4+" + TornadoNativeArray.ARRAY_HEADER + "], %f1;\n  ret;\n}\n";
        boolean onCuda = backend() == TornadoVMBackendType.CUDA;
        Path file = Files.createTempFile("prebuilt-order-", onCuda ? ".cu" : ".ptx");
        file.toFile().deleteOnExit();
        Files.writeString(file, onCuda ? cuda : ptx);
        AccessorParameters accessors = new AccessorParameters(1);
        accessors.set(0, out, Access.WRITE_ONLY);
        graph.prebuiltTask(task, entry, file.toString(), accessors);
        WorkerGrid1D grid = new WorkerGrid1D(N);
        grid.setLocalWork(N, 1, 1);
        scheduler.addWorkerGrid(graphName + "." + task, grid);
    }
}
