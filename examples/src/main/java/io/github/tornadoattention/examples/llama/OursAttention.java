package io.github.tornadoattention.examples.llama;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.common.TornadoDevice;
import uk.ac.manchester.tornado.api.enums.DataTransferMode;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * Our attention through {@link CacheAttentionTasks}, each layer in two task graphs (on every backend: one code
 * path). {@code layer_l_a} ends with RoPE, which writes q, k and v as fp16 ({@link LlamaKernels#ropeHalf}); that
 * graph owns q, newK and newV ({@code FIRST_EXECUTION}) and persists them. {@code layer_l_b} consumes them and starts
 * with {@link CacheAttentionTasks#addAppendAndDecode}: on ptx-tornado one fused prebuilt task ({@code attn_decode}:
 * append k and v to the layer's fp16 cache [1, Hkv, maxLength, D] at position L - 1, then split-KV decode), which
 * TornadoVM 5.2.0 runs correctly only as the first task of its graph; on tornado-mma/tornado-simt the Java tasks
 * {@code attn_Append}, {@code attn_DecodeSplit}, {@code attn_DecodeCombine}. Then the output projection reading
 * O fp16 [1, Hq, 1, D]. Graph b owns the caches, O and the facade's workspace ({@code FIRST_EXECUTION}: resident).
 */
final class OursAttention implements AttentionVariant {
    /** Every attention task's name starts with it (ptx-tornado: attn_decode; Java: attn_Append, attn_Decode*). */
    static final String PREFIX = "attn_";

    private final LlamaConfig config;
    private final CacheAttentionTasks tasks;
    private final IntArray step = CacheAttentionTasks.newStepArray(1);
    private final List<Layer> layers = new ArrayList<>();

    /** One layer's arrays: q, new K/V [Hkv, D] fp16, the fp16 caches [1, Hkv, maxLength, D], O [Hq, D]; also the library variant's. */
    record Layer(HalfFloatArray q, HalfFloatArray newK, HalfFloatArray newV, HalfFloatArray kCache,
                 HalfFloatArray vCache, IntArray blockTable, HalfFloatArray out) {
        /** A layer's arrays for {@code config}, the caches and block table made by {@code tasks}. */
        static Layer allocate(LlamaConfig config, CacheAttentionTasks tasks) {
            int dim = config.dim();
            int kvDim = config.kvDim();
            return new Layer(new HalfFloatArray(dim), new HalfFloatArray(kvDim), new HalfFloatArray(kvDim),
                    tasks.newCacheArray(), tasks.newCacheArray(), tasks.newBlockTable(), new HalfFloatArray(dim));
        }
    }

    OursAttention(LlamaConfig config, String backendId, TornadoDevice device) {
        this.config = config;
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(1).heads(config.heads()).kvHeads(config.kvHeads())
                .headDim(config.headDim()).maxQueryLength(1).maxLength(config.maxLength()).causal(true).build();
        KvCacheSpec cacheSpec = KvCacheSpec.contiguous(1, config.kvHeads(), config.maxLength(), config.headDim());
        this.tasks = CacheAttentionTasks.create(backendId, spec, cacheSpec, device);
    }

    @Override
    public String name() {
        return "ours(" + tasks.backendId() + ")";
    }

    @Override
    public IntArray meta() {
        return step;
    }

    @Override
    public void setStep(int lengthAfter) {
        CacheAttentionTasks.setStep(step, new int[] {lengthAfter}, new int[] {1});
    }

    @Override
    public boolean twoGraphsPerLayer() {
        return true;
    }

    @Override
    public void addRope(TaskGraph graph, String graphName, GridScheduler scheduler, KernelContext context, int layer,
                        FloatArray qkv, FloatArray ropeCos, FloatArray ropeSin) {
        int dim = config.dim();
        int kvDim = config.kvDim();
        Layer arrays = Layer.allocate(config, tasks);
        layers.add(arrays);
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, arrays.q, arrays.newK, arrays.newV);
        graph.task("rope", LlamaKernels::ropeHalf, context, step, qkv, ropeCos, ropeSin, arrays.q, arrays.newK,
                arrays.newV, dim, kvDim, config.headDim());
        scheduler.addWorkerGrid(graphName + ".rope", LlamaDecoder.grid(dim / 2, LlamaDecoder.localSize(dim / 2, 128)));
        // Owned here, handed to the attention graph (persistOnDevice is transferToHost(UNDER_DEMAND): q can also be
        // downloaded from this graph for the check).
        graph.persistOnDevice(arrays.q, arrays.newK, arrays.newV);
    }

    @Override
    public void addAttention(TaskGraph graph, String graphName, String ropeGraphName, GridScheduler scheduler,
                             KernelContext context, int layer, FloatArray x, HalfFloatArray wo) {
        if (graphName.equals(ropeGraphName)) {
            throw new IllegalArgumentException("our attention needs a graph of its own after RoPE's: " + graphName);
        }
        int dim = config.dim();
        Layer arrays = layers.get(layer);
        graph.consumeFromDevice(ropeGraphName, arrays.q, arrays.newK, arrays.newV);
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, arrays.kCache, arrays.vCache, arrays.blockTable,
                arrays.out);
        // The graph's first task (ptx-tornado: the one prebuilt task; TornadoVM 5.2.0 needs it first).
        tasks.addAppendAndDecode(graph, graphName, scheduler, PREFIX, arrays.newK, arrays.newV, arrays.q, arrays.kCache,
                arrays.vCache, step, arrays.blockTable, arrays.out, null);
        graph.task("out_proj", LlamaKernels::matvecResidualHalf, context, arrays.out, wo, x, dim);
        scheduler.addWorkerGrid(graphName + ".out_proj", LlamaDecoder.grid(dim * LlamaKernels.MATVEC_THREADS,
                LlamaKernels.MATVEC_THREADS));
        graph.transferToHost(DataTransferMode.UNDER_DEMAND, arrays.kCache, arrays.vCache, arrays.out);
    }

    @Override
    public void fillPrefix(int positions, PrefixRows rows) {
        fillPrefix(config, layers, positions, rows);
    }

    /** Positions [0, positions) of every layer's fp16 caches hold {@code rows}' K and V (host arrays). */
    static void fillPrefix(LlamaConfig config, List<Layer> layers, int positions, PrefixRows rows) {
        int capacity = config.maxLength();
        int hkv = config.kvHeads();
        int d = config.headDim();
        for (int l = 0; l < layers.size(); l++) {
            for (boolean values : new boolean[] {false, true}) {
                float[] r = rows.rows(l, values, positions);
                MemorySegment cache = (values ? layers.get(l).vCache : layers.get(l).kCache).getSegment();
                for (int j = 0; j < positions; j++) {
                    for (int h = 0; h < hkv; h++) {
                        for (int c = 0; c < d; c++) {
                            cache.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED,
                                    ((long) h * capacity + j) * d + c, Float.floatToFloat16(r[(j * hkv + h) * d + c]));
                        }
                    }
                }
            }
        }
    }

    @Override
    public boolean isAttentionTask(String task) {
        return task.startsWith(PREFIX);
    }

    @Override
    public void download(TornadoExecutionResult result, int layer, Part part) {
        Layer arrays = layers.get(layer);
        if (part == Part.ROPE) {
            result.transferToHost(arrays.q);
        } else {
            result.transferToHost(arrays.kCache, arrays.vCache, arrays.out);
        }
    }

    @Override
    public Sample sample(int layer) {
        return sample(config, layers.get(layer));
    }

    /** A layer's q, O and cache rows as the check reads them. */
    static Sample sample(LlamaConfig config, Layer arrays) {
        int capacity = config.maxLength();
        int d = config.headDim();
        return new Sample(toFloats(arrays.q), toFloats(arrays.out),
                (slot, kvHead, position, into) -> copyRow(arrays.kCache, (kvHead * capacity + position) * d, into),
                (slot, kvHead, position, into) -> copyRow(arrays.vCache, (kvHead * capacity + position) * d, into));
    }

    private static float[] toFloats(HalfFloatArray a) {
        float[] f = new float[a.getSize()];
        for (int i = 0; i < f.length; i++) {
            f[i] = a.get(i).getFloat32();
        }
        return f;
    }

    private static void copyRow(HalfFloatArray cache, int start, float[] into) {
        for (int i = 0; i < into.length; i++) {
            into[i] = cache.get(start + i).getFloat32();
        }
    }
}
