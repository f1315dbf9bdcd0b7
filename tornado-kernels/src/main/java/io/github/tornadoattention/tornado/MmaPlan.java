package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.Layout;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
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
     * System property selecting how K/V tiles reach local memory: {@code true} (the default) the kernels that
     * prefetch the whole next K/V tile through registers ({@link MmaKernels#attentionD64Prefetch}); {@code split}
     * those that keep half as much in flight (next K during P V, this V during S and softmax:
     * {@link MmaKernels#attentionD64Split}); {@code false} the synchronous K/V staging of
     * {@link MmaKernels#attentionD64}. Anything else is refused.
     */
    static final String PIPELINE_PROPERTY = "tornado.attention.mma.pipeline";
    /** {@link #PIPELINE_PROPERTY}'s default. */
    static final String DEFAULT_PIPELINE = "true";
    private final LongArray o;

    /** The kernel variant {@link #PIPELINE_PROPERTY} selects: "true", "split" or "false". */
    static String pipeline() {
        String value = System.getProperty(PIPELINE_PROPERTY, DEFAULT_PIPELINE).trim();
        if (!value.equals("true") && !value.equals("split") && !value.equals("false")) {
            throw new IllegalArgumentException("-D" + PIPELINE_PROPERTY + "=" + value + ": expected true, split or false");
        }
        return value;
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
        String pipeline = pipeline();
        boolean d64 = config.headDim() == 64;
        if (pipeline.equals("true")) {
            if (d64) {
                attend.task("flash", MmaKernels::attentionD64Prefetch, kc, q, k, v, o, lseArray, scratch, s.batch(),
                        s.queryHeads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize);
            } else {
                attend.task("flash", MmaKernels::attentionD128Prefetch, kc, q, k, v, o, lseArray, scratch, s.batch(),
                        s.queryHeads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize);
            }
        } else if (pipeline.equals("split")) {
            if (d64) {
                attend.task("flash", MmaKernels::attentionD64Split, kc, q, k, v, o, lseArray, scratch, s.batch(),
                        s.queryHeads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize);
            } else {
                attend.task("flash", MmaKernels::attentionD128Split, kc, q, k, v, o, lseArray, scratch, s.batch(),
                        s.queryHeads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize);
            }
        } else if (d64) {
            attend.task("flash", MmaKernels::attentionD64, kc, q, k, v, o, lseArray, scratch, s.batch(),
                    s.queryHeads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize);
        } else {
            attend.task("flash", MmaKernels::attentionD128, kc, q, k, v, o, lseArray, scratch, s.batch(),
                    s.queryHeads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize);
        }
        attend.transferToHost(DataTransferMode.UNDER_DEMAND, o, lseArray);
        build(device, q, k, v, attend, scheduler);
    }

    @Override
    protected TornadoNativeArray outputArray() {
        return o;
    }
}
