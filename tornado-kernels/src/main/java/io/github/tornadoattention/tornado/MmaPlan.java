package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.Layout;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.common.TornadoFunctions.Task16;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.LongArray;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * The tornado-mma task graph for one shape (see {@link TornadoAttentionPlan} for the graphs around it).
 * fp16 tensors live in {@link LongArray}s (four fp16 values per element) so the kernel moves 64 bits per
 * global access; the bytes are the same as the tensors'.
 */
final class MmaPlan extends TornadoAttentionPlan {
    /**
     * System property: {@code true} (the default) runs {@link MmaKernels#attentionD64Pipelined} and
     * {@link MmaKernels#attentionD128Pipelined} (K/V loads overlapped with compute, row max by warp shuffles,
     * 2 barriers per K/V tile); {@code false} the synchronous {@link MmaKernels#attentionD64} and
     * {@link MmaKernels#attentionD128}, the baseline of those changes.
     */
    static final String PIPELINE_PROPERTY = "tornado.attention.mma.pipeline";
    /**
     * CUDA JIT options for the D=64 kernels: at most 128 registers, so 4 CTAs of 128 threads fit an SM instead
     * of 3 (measured on an H200 with the pipelined kernel before its row max moved to shuffles: 0.232 ms
     * instead of 0.277 at (16,8,512,64), 0.157 instead of 0.183 causal; the few spills this causes cost less
     * than the occupancy gains). D=128 needs its ~250 registers.
     */
    static final String D64_JIT_FLAGS = "CU_JIT_OPTIMIZATION_LEVEL 4 CU_JIT_MAX_REGISTERS 128";
    /**
     * System property: CUDA JIT options for the tornado-mma kernels, replacing the defaults ({@link #D64_JIT_FLAGS}
     * at D=64, none at D=128), separated by spaces or commas (a JAVA_OPTS word), e.g.
     * {@code -Dtornado.attention.mma.jitFlags=CU_JIT_OPTIMIZATION_LEVEL,4,CU_JIT_MAX_REGISTERS,168}; for tuning.
     */
    static final String JIT_FLAGS_PROPERTY = "tornado.attention.mma.jitFlags";
    private final LongArray o;

    /** Whether {@link #PIPELINE_PROPERTY} selects the pipelined kernels. */
    static boolean pipelined() {
        String value = System.getProperty(PIPELINE_PROPERTY, "true").trim();
        if (!value.equals("true") && !value.equals("false")) {
            throw new IllegalArgumentException("-D" + PIPELINE_PROPERTY + "=" + value + ": expected true or false");
        }
        return value.equals("true");
    }

    /** The signature every tornado-mma kernel shares (see {@link MmaKernels#attentionD64}). */
    interface Kernel extends Task16<KernelContext, LongArray, LongArray, LongArray, LongArray, FloatArray, FloatArray,
            Integer, Integer, Integer, Integer, Integer, Integer, Integer, Float, Integer> {
    }

    /** The kernel for a head dim (64 or 128), pipelined or synchronous. */
    static Kernel kernel(int headDim, boolean pipelined) {
        if (headDim == 64) {
            return pipelined ? MmaKernels::attentionD64Pipelined : MmaKernels::attentionD64;
        }
        return pipelined ? MmaKernels::attentionD128Pipelined : MmaKernels::attentionD128;
    }

    MmaPlan(AttentionShape s, TornadoDevice device) {
        super(Backends.TORNADO_MMA, s);
        MmaTileConfig config = MmaTileConfig.forHeadDim(s.headDim());
        LongArray q = new LongArray(Math.toIntExact(s.queryElements() / 4));
        LongArray k = new LongArray(Math.toIntExact(s.kvElements() / 4));
        LongArray v = new LongArray(Math.toIntExact(s.kvElements() / 4));
        this.o = new LongArray(Math.toIntExact(s.outputElements() / 4));
        int causal = s.causal() ? 1 : 0;
        int bshd = s.layout() == Layout.BSHD ? 1 : 0;

        // One CTA of 4 warps per (query tile, batch x head), at most MAX_CTAS of them (the kernel loops over
        // the rest); each CTA owns scratchFloatsPerCta() floats of scratch. A 1D grid.
        int gridSize = config.gridSize(s.batch(), s.queryHeads(), s.queryLength());
        FloatArray scratch = new FloatArray(gridSize * config.scratchFloatsPerCta());
        WorkerGrid1D worker = new WorkerGrid1D(gridSize * config.threads());
        worker.setLocalWork(config.threads(), 1, 1);
        String graph = prefix + "attend";
        GridScheduler scheduler = new GridScheduler(graph + ".flash", worker);

        KernelContext kc = new KernelContext();
        TaskGraph attend = consumeInputs(new TaskGraph(graph), q, k, v)
                .transferToDevice(DataTransferMode.FIRST_EXECUTION, scratch);   // device-only workspace
        attend.task("flash", kernel(config.headDim(), pipelined()), kc, q, k, v, o, lseArray, scratch, s.batch(),
                s.queryHeads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize);
        attend.transferToHost(DataTransferMode.UNDER_DEMAND, o, lseArray);
        String jitFlags = System.getProperty(JIT_FLAGS_PROPERTY, config.headDim() == 64 ? D64_JIT_FLAGS : "")
                .replace(',', ' ').trim();
        build(device, q, k, v, attend, scheduler, jitFlags.isEmpty() ? null : jitFlags);
    }

    @Override
    protected TornadoNativeArray outputArray() {
        return o;
    }
}
