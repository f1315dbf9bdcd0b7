package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.DType;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.Layout;
import io.github.tornadoattention.PlanOptions;
import java.util.List;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.enums.TornadoVMBackendType;
import uk.ac.manchester.tornado.api.common.TornadoFunctions.Task18;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
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

    /**
     * The signature of the CUDA backend's kernels ({@link MmaCpAsyncKernels}): K and V in {@link HalfFloatArray}s,
     * the source type of {@code asyncCopyToLocal} (bf16 bits travel in them unchanged: the copies move bytes).
     */
    interface CpAsyncKernel extends Task18<KernelContext, LongArray, HalfFloatArray, HalfFloatArray, LongArray, FloatArray,
            FloatArray, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Float, Integer, IntArray, FloatArray> {
    }

    /** The kernel family {@link #loadsOn} picks for the device's backend. */
    MmaPlan(AttentionShape s, TornadoDevice device, PlanOptions options) {
        this(s, device, options, loadsOn(device.getTornadoVMBackend(), s));
    }

    MmaPlan(AttentionShape s, TornadoDevice device, PlanOptions options, MmaTileConfig.Loads loads) {
        this(s, device, options, loads == MmaTileConfig.Loads.REGISTERS ? MmaKernels.kernel(MmaTileConfig.forHeadDim(s.headDim())) : null,
                loads == MmaTileConfig.Loads.CP_ASYNC ? MmaCpAsyncKernels.kernel(MmaTileConfig.forHeadDim(s.headDim(), loads),
                        s.dtype() == DType.BF16) : null);
    }

    /**
     * A plan running {@code kernel} of the PTX backend's family, which must take {@link MmaTileConfig#forHeadDim}'s tiles
     * and scratch (the tests run the synchronous kernels, the baseline of the pipelined ones, this way).
     */
    MmaPlan(AttentionShape s, TornadoDevice device, PlanOptions options, Kernel kernel) {
        this(s, device, options, kernel, null);
    }

    /**
     * Which kernel family serves {@code s} on {@code backend}: fp16 takes the 64-bit loads through registers
     * ({@link MmaKernels}) on both NVIDIA backends; bf16 takes the cp.async family ({@link MmaCpAsyncKernels}), which only
     * the CUDA backend compiles (cp.async and bf16 MMA). That family also serves fp16 there, but on an H200 it ran at
     * 0.53-0.79x the register family's speed (the backend's {@code asyncCopyToLocal} moves 4 bytes per copy), so fp16 does
     * not use it.
     */
    static MmaTileConfig.Loads loadsOn(TornadoVMBackendType backend, AttentionShape s) {
        if (s.dtype() == DType.FP16) {
            return MmaTileConfig.Loads.REGISTERS;
        }
        if (backend == TornadoVMBackendType.CUDA) {
            return MmaTileConfig.Loads.CP_ASYNC;
        }
        throw new InvalidArgumentException("dtype", s.dtype().label(), Backends.TORNADO_MMA + " on TornadoVM's "
                + TornadoDevices.backendName(backend) + " backend serves fp16 (bf16 needs the CUDA backend's bf16 MMA;"
                + " TornadoVM 5.2's PTX backend has none)");
    }

    private MmaPlan(AttentionShape s, TornadoDevice device, PlanOptions options, Kernel kernel, CpAsyncKernel cpAsyncKernel) {
        super(Backends.TORNADO_MMA, s, options);
        MmaTileConfig config = MmaTileConfig.forHeadDim(s.headDim(),
                cpAsyncKernel != null ? MmaTileConfig.Loads.CP_ASYNC : MmaTileConfig.Loads.REGISTERS);
        LongArray q = new LongArray(Math.toIntExact(s.queryElements() / 4));
        // K and V: HalfFloatArrays for cp.async (the fp16 or bf16 bytes as they are), else 64-bit words.
        TornadoNativeArray k = cpAsyncKernel != null ? new HalfFloatArray(Math.toIntExact(s.kvElements()))
                : new LongArray(Math.toIntExact(s.kvElements() / 4));
        TornadoNativeArray v = cpAsyncKernel != null ? new HalfFloatArray(Math.toIntExact(s.kvElements()))
                : new LongArray(Math.toIntExact(s.kvElements() / 4));
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
            if (cpAsyncKernel != null) {
                graph.task("flash", cpAsyncKernel, kc, q, (HalfFloatArray) k, (HalfFloatArray) v, o, lseArray, scratch,
                        s.batch(), s.heads(), s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize,
                        window, scores);
            } else {
                graph.task("flash", kernel, kc, q, (LongArray) k, (LongArray) v, o, lseArray, scratch, s.batch(), s.heads(),
                        s.kvHeads(), s.queryLength(), s.kvLength(), causal, bshd, s.scale(), gridSize, window, scores);
            }
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
