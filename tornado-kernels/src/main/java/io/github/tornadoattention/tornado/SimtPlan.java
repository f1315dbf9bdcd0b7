package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import java.util.List;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.common.TornadoFunctions.Task17;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.ShortArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/** The tornado-simt kernel task for one shape (see {@link TornadoAttentionPlan} for the graphs around it). */
final class SimtPlan extends TornadoAttentionPlan {
    private final TornadoNativeArray o;

    /** The signature every tornado-simt kernel shares (see {@link SimtKernels}). */
    interface Kernel extends Task17<KernelContext, HalfFloatArray, HalfFloatArray, HalfFloatArray, ShortArray, FloatArray,
            Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Float, IntArray, FloatArray> {
    }

    /** The signature of the bf16 kernels: the same over bf16 bits in {@link ShortArray}s. */
    interface Bf16Kernel extends Task17<KernelContext, ShortArray, ShortArray, ShortArray, ShortArray,
            FloatArray, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Float, IntArray, FloatArray> {
    }

    SimtPlan(AttentionShape s, TornadoDevice device, PlanOptions options) {
        super(Backends.TORNADO_SIMT, s, options);
        SimtTileConfig config = SimtTileConfig.forHeadDim(s.headDim());
        // The tensors' bytes as they are: fp16 in HalfFloatArrays (O as fp16 bits in a ShortArray, see SimtKernels), bf16
        // bits in ShortArrays (SimtKernels says why not BFloat16Array).
        boolean bf16 = s.dtype() == io.github.tornadoattention.DType.BF16;
        int qn = Math.toIntExact(s.queryElements());
        int kvn = Math.toIntExact(s.kvElements());
        TornadoNativeArray q = bf16 ? new ShortArray(qn) : new HalfFloatArray(qn);
        TornadoNativeArray k = bf16 ? new ShortArray(kvn) : new HalfFloatArray(kvn);
        TornadoNativeArray v = bf16 ? new ShortArray(kvn) : new HalfFloatArray(kvn);
        this.o = new ShortArray(qn);
        int causal = s.causal() ? 1 : 0;
        int bshd = s.layout() == Layout.BSHD ? 1 : 0;

        // Window, softcap and sinks: device arrays sent once (ScoreFeatures says why not scalars).
        IntArray window = windowOf(s);
        FloatArray scores = scoresOf(s);

        // One workgroup of config.threads() threads per (query tile, batch x head), a 1D grid.
        int workgroups = config.workgroups(s.batch(), s.heads(), s.queryLength());
        build(device, q, k, v, List.of(window, scores), (graph, name, scheduler) -> {
            WorkerGrid1D worker = new WorkerGrid1D(workgroups * config.threads());
            worker.setLocalWork(config.threads(), 1, 1);
            scheduler.addWorkerGrid(name + ".flash", worker);
            KernelContext kc = new KernelContext();
            // Listed so that closing the plan frees TornadoVM's device buffer for it (it is never copied).
            graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, kc);
            if (bf16) {
                graph.task("flash", SimtKernels.bf16Kernel(config), kc, (ShortArray) q, (ShortArray) k,
                        (ShortArray) v, (ShortArray) o, lseArray, s.batch(), s.heads(), s.kvHeads(), s.queryLength(),
                        s.kvLength(), s.headDim(), causal, bshd, s.scale(), window, scores);
            } else {
                graph.task("flash", SimtKernels.kernel(config), kc, (HalfFloatArray) q, (HalfFloatArray) k,
                        (HalfFloatArray) v, (ShortArray) o, lseArray, s.batch(), s.heads(), s.kvHeads(), s.queryLength(),
                        s.kvLength(), s.headDim(), causal, bshd, s.scale(), window, scores);
            }
        }, null);
    }

    /** The shape's window words ({@link ScoreFeatures#window}). */
    static IntArray windowOf(AttentionShape s) {
        return ScoreFeatures.window(s.windowLeft(), s.windowRight(), ScoreFeatures.windowBound(s.queryLength(), s.kvLength()));
    }

    /** The shape's score words ({@link ScoreFeatures#scores}). */
    static FloatArray scoresOf(AttentionShape s) {
        return ScoreFeatures.scores(s.softcap(), s.sinkArray(), s.heads());
    }

    @Override
    protected TornadoNativeArray outputArray() {
        return o;
    }
}
