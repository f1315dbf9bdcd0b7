package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import java.util.List;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.common.TornadoFunctions.Task18;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The tornado-mma kernel task for one shape (see {@link TornadoAttentionPlan} for the graphs around it).
 * fp16 tensors live in {@link LongArray}s (four fp16 values per element) so the kernel moves 64 bits per
 * global access; the bytes are the same as the tensors'.
 */
final class MmaPlan extends TornadoAttentionPlan {
    private final LongArray o;

    /** The signature every tornado-mma kernel shares (see {@link MmaKernels}). */
    interface Kernel extends Task18<KernelContext, LongArray, LongArray, LongArray, LongArray, FloatArray, FloatArray,
            Integer, Integer, Integer, Integer, Integer, Integer, Integer, Float, Integer, IntArray, FloatArray> {
    }

    MmaPlan(AttentionShape s, TornadoDevice device, PlanOptions options) {
        this(s, device, options, MmaKernels.kernel(MmaTileConfig.forHeadDim(s.headDim())));
    }

    /**
     * A plan running {@code kernel}, which must take {@link MmaTileConfig#forHeadDim}'s tiles and scratch (the
     * tests run the synchronous kernels, the baseline of the pipelined ones, this way).
     */
    MmaPlan(AttentionShape s, TornadoDevice device, PlanOptions options, Kernel kernel) {
        super(Backends.TORNADO_MMA, s, options);
        MmaTileConfig config = MmaTileConfig.forHeadDim(s.headDim());
        LongArray q = new LongArray(Math.toIntExact(s.queryElements() / 4));
        LongArray k = new LongArray(Math.toIntExact(s.kvElements() / 4));
        LongArray v = new LongArray(Math.toIntExact(s.kvElements() / 4));
        this.o = new LongArray(Math.toIntExact(s.outputElements() / 4));
        int causal = causalWord(s);
        int bshd = s.layout() == Layout.BSHD ? 1 : 0;

        // One CTA of 4 warps per (query tile, batch x head), at most MAX_CTAS of them (the kernel loops over
        // the rest); each CTA owns scratchFloatsPerCta() floats of scratch. A 1D grid.
        int gridSize = config.gridSize(s.batch(), s.heads(), s.queryLength());
        FloatArray scratch = new FloatArray(gridSize * config.scratchFloatsPerCta());
        IntArray window = SimtPlan.windowOf(s);     // window, softcap, sinks: run-time words (ScoreFeatures)
        FloatArray scores = SimtPlan.scoresOf(s);
        build(device, q, k, v, List.of(scratch, window, scores), (graph, name, scheduler) -> {   // scratch: device-only workspace
            WorkerGrid1D worker = new WorkerGrid1D(gridSize * config.threads());
            worker.setLocalWork(config.threads(), 1, 1);
            scheduler.addWorkerGrid(name + ".flash", worker);
            KernelContext kc = new KernelContext();
            // Listed so that closing the plan frees TornadoVM's device buffer for it (it is never copied).
            graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, kc);
            graph.task("flash", kernel, kc, q, k, v, o, lseArray, scratch, s.batch(), s.heads(),
                    s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize, window, scores);
        }, config.jitFlags(options));
    }

    /**
     * The kernels' {@code causal} scalar: bit 0 causal, bit 1 a window on either side (the window's sides themselves are
     * run-time words): both compile into the kernel as constants, so that its masking compiles away without them.
     */
    static int causalWord(AttentionShape s) {
        return (s.causal() ? 1 : 0) | (s.hasWindow() ? 2 : 0);
    }

    @Override
    protected TornadoNativeArray outputArray() {
        return o;
    }
}
