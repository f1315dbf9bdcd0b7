package io.github.tornadoattention.examples.llama;

import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;
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
 * Our attention as tasks of the layer's graph ({@link CacheAttentionTasks}): RoPE writes q, k and v as fp16
 * ({@link LlamaKernels#ropeHalf}), the append task writes k and v into the layer's fp16 cache
 * [1, Hkv, maxLength, D] at position L - 1, the decode task (split-KV) writes O fp16 [1, Hq, 1, D], which the
 * output projection reads. Caches and the facade's workspace are declared {@code FIRST_EXECUTION}: resident.
 */
final class OursAttention implements AttentionVariant {
    private static final String PREFIX = "attn_";

    private final LlamaConfig config;
    private final CacheAttentionTasks tasks;
    private final IntArray step = CacheAttentionTasks.newStepArray(1);
    private final List<Layer> layers = new ArrayList<>();

    private record Layer(HalfFloatArray q, HalfFloatArray newK, HalfFloatArray newV, HalfFloatArray kCache,
                         HalfFloatArray vCache, IntArray blockTable, HalfFloatArray out) {
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
    public void addAttentionBlock(TaskGraph graph, String graphName, GridScheduler scheduler, KernelContext context,
                                  int layer, FloatArray qkv, FloatArray ropeCos, FloatArray ropeSin, FloatArray x,
                                  HalfFloatArray wo) {
        int dim = config.dim();
        int kvDim = config.kvDim();
        Layer arrays = new Layer(new HalfFloatArray(dim), new HalfFloatArray(kvDim), new HalfFloatArray(kvDim),
                tasks.newCacheArray(), tasks.newCacheArray(), tasks.newBlockTable(), new HalfFloatArray(dim));
        layers.add(arrays);
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, arrays.kCache, arrays.vCache, arrays.blockTable,
                arrays.q, arrays.newK, arrays.newV, arrays.out);
        graph.task("rope", LlamaKernels::ropeHalf, context, step, qkv, ropeCos, ropeSin, arrays.q, arrays.newK,
                arrays.newV, dim, kvDim, config.headDim());
        scheduler.addWorkerGrid(graphName + ".rope", LlamaDecoder.grid(dim / 2, LlamaDecoder.localSize(dim / 2, 128)));
        tasks.addAppend(graph, graphName, scheduler, PREFIX, arrays.newK, arrays.newV, arrays.kCache, arrays.vCache, step,
                arrays.blockTable);
        tasks.addDecode(graph, graphName, scheduler, PREFIX, arrays.q, arrays.kCache, arrays.vCache, step,
                arrays.blockTable, arrays.out, null);
        graph.task("out_proj", LlamaKernels::matvecResidualHalf, context, arrays.out, wo, x, dim);
        scheduler.addWorkerGrid(graphName + ".out_proj", LlamaDecoder.grid(dim * LlamaKernels.MATVEC_THREADS,
                LlamaKernels.MATVEC_THREADS));
        graph.transferToHost(DataTransferMode.UNDER_DEMAND, arrays.q, arrays.kCache, arrays.vCache, arrays.out);
    }

    @Override
    public boolean isAttentionTask(String task) {
        return task.startsWith(PREFIX);
    }

    @Override
    public Sample sample(TornadoExecutionResult result, int layer, int length) {
        Layer arrays = layers.get(layer);
        result.transferToHost(arrays.q, arrays.kCache, arrays.vCache, arrays.out);
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
