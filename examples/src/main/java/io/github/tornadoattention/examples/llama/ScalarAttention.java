package io.github.tornadoattention.examples.llama;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.WorkerGrid1D;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The baseline, GPULlama3.java's way: fp32 caches [maxLength, kvDim] per layer written by the fused RoPE task
 * ({@link LlamaKernels#ropeCacheFp32}), attention by {@link LlamaKernels#scalarAttention} (its
 * processHeadsFlashAttention: one workgroup per query head, {@link #THREADS_PER_HEAD} threads as its
 * WorkerGridFactory.createAttentionWorker gives for D = 128), fp32 output into the output projection.
 */
final class ScalarAttention implements AttentionVariant {
    /** GPULlama3's findOptimalLocalSize(headSize): min(headSize, 64) for the head dims it runs. */
    static final int THREADS_PER_HEAD = 64;

    private final LlamaConfig config;
    private final IntArray meta = new IntArray(4);   // [length after this step, unused...]
    private final List<Layer> layers = new ArrayList<>();

    private record Layer(FloatArray q, FloatArray keyCache, FloatArray valueCache, FloatArray out) {
    }

    ScalarAttention(LlamaConfig config) {
        this.config = config;
    }

    @Override
    public String name() {
        return "scalar";
    }

    @Override
    public IntArray meta() {
        return meta;
    }

    @Override
    public void setStep(int lengthAfter) {
        meta.set(0, lengthAfter);
    }

    @Override
    public boolean twoGraphsPerLayer() {
        return false;   // GPULlama3's layout: RoPE, attention and the output projection in one graph
    }

    @Override
    public void addRope(TaskGraph graph, String graphName, GridScheduler scheduler, KernelContext context, int layer,
                        FloatArray qkv, FloatArray ropeCos, FloatArray ropeSin) {
        int dim = config.dim();
        int kvDim = config.kvDim();
        Layer arrays = new Layer(new FloatArray(dim), new FloatArray(config.maxLength() * kvDim),
                new FloatArray(config.maxLength() * kvDim), new FloatArray(dim));
        layers.add(arrays);
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, arrays.q, arrays.keyCache, arrays.valueCache, arrays.out);
        graph.task("rope", LlamaKernels::ropeCacheFp32, context, meta, qkv, ropeCos, ropeSin, arrays.q,
                arrays.keyCache, arrays.valueCache, dim, kvDim, config.headDim());
        scheduler.addWorkerGrid(graphName + ".rope", LlamaDecoder.grid(dim / 2, 128));
    }

    @Override
    public void addAttention(TaskGraph graph, String graphName, String ropeGraphName, GridScheduler scheduler,
                             KernelContext context, int layer, FloatArray x, HalfFloatArray wo) {
        if (!graphName.equals(ropeGraphName)) {
            throw new IllegalArgumentException("the scalar variant's layer is one graph: " + graphName + " != "
                    + ropeGraphName);
        }
        int dim = config.dim();
        Layer arrays = layers.get(layer);
        graph.task("attention", LlamaKernels::scalarAttention, context, meta, arrays.q, arrays.keyCache,
                arrays.valueCache, arrays.out, config.headDim(), config.kvDim(), config.heads() / config.kvHeads(),
                (float) (1.0 / Math.sqrt(config.headDim())));
        graph.task("out_proj", LlamaKernels::matvecResidual, context, arrays.out, wo, x, dim);
        graph.transferToHost(DataTransferMode.UNDER_DEMAND, arrays.q, arrays.keyCache, arrays.valueCache, arrays.out);
        scheduler.addWorkerGrid(graphName + ".attention", LlamaDecoder.grid(config.heads() * THREADS_PER_HEAD,
                THREADS_PER_HEAD));
        scheduler.addWorkerGrid(graphName + ".out_proj", LlamaDecoder.grid(dim * LlamaKernels.MATVEC_THREADS,
                LlamaKernels.MATVEC_THREADS));
    }

    @Override
    public void fillPrefix(int positions, PrefixRows rows) {
        int kvDim = config.kvDim();
        for (int l = 0; l < layers.size(); l++) {
            for (boolean values : new boolean[] {false, true}) {
                float[] r = rows.rows(l, values, positions);   // [position, kvHead, D]: this cache's layout
                FloatArray cache = values ? layers.get(l).valueCache : layers.get(l).keyCache;
                MemorySegment.copy(r, 0, cache.getSegment(),
                        ValueLayout.JAVA_FLOAT_UNALIGNED, 0, positions * kvDim);
            }
        }
    }

    @Override
    public boolean isAttentionTask(String task) {
        return task.equals("attention");
    }

    @Override
    public void download(TornadoExecutionResult result, int layer, Part part) {
        Layer arrays = layers.get(layer);
        if (part == Part.ROPE) {
            result.transferToHost(arrays.q);
        } else {
            result.transferToHost(arrays.keyCache, arrays.valueCache, arrays.out);
        }
    }

    @Override
    public Sample sample(int layer) {
        Layer arrays = layers.get(layer);
        int kvDim = config.kvDim();
        int d = config.headDim();
        return new Sample(arrays.q.toHeapArray(), arrays.out.toHeapArray(),
                (slot, kvHead, position, into) -> copyRow(arrays.keyCache, position * kvDim + kvHead * d, into),
                (slot, kvHead, position, into) -> copyRow(arrays.valueCache, position * kvDim + kvHead * d, into));
    }

    private static void copyRow(FloatArray cache, int start, float[] into) {
        for (int i = 0; i < into.length; i++) {
            into[i] = cache.get(start + i);
        }
    }
}
