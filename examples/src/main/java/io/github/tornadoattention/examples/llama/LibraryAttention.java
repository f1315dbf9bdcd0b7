package io.github.tornadoattention.examples.llama;

import io.github.tornadoattention.Backends;
import io.github.tornadoattention.CacheAttentionSpec;
import io.github.tornadoattention.KvCacheSpec;
import io.github.tornadoattention.tornado.engine.CacheAttentionTasks;
import io.github.tornadoattention.tornado.library.CacheLibraryTasks;
import io.github.tornadoattention.tornado.library.DispatchTimer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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
 * Our attention as a TornadoVM library task ({@link CacheLibraryTasks}: the ptx-cuda cache kernels on TornadoVM's
 * buffers and stream; TornadoVM's CUDA backend only), each layer ONE task graph as GPULlama3.java builds it: RoPE
 * writes q, k and v as fp16 ({@link LlamaKernels#ropeHalf}), ONE library task appends k and v to the layer's fp16 cache
 * [1, Hkv, maxLength, D] at position L - 1 and decodes ({@code attn_append_decode}: {@link
 * CacheLibraryTasks#appendAndDecode}, the launches ptx-cuda's cache decode makes: its append kernel, the split pass,
 * the combine), then the output projection reads O fp16. A library task may sit anywhere in a graph (unlike a prebuilt
 * one), so nothing is split or relayed between graphs.
 */
final class LibraryAttention implements AttentionVariant {
    private final LlamaConfig config;
    /** Makes the caches and block table (as ours does); no task of it is added. */
    private final CacheAttentionTasks cacheArrays;
    private final CacheLibraryTasks library;
    /** The layer's attention task: the library's append + decode. */
    static final String TASK = OursAttention.PREFIX + "append_decode";
    private final IntArray step = CacheAttentionTasks.newStepArray(1);
    private final List<OursAttention.Layer> layers = new ArrayList<>();

    LibraryAttention(LlamaConfig config, TornadoDevice device) {
        this.config = config;
        CacheAttentionSpec spec = CacheAttentionSpec.builder().batch(1).heads(config.heads()).kvHeads(config.kvHeads())
                .headDim(config.headDim()).maxQueryLength(1).maxLength(config.maxLength()).causal(true).build();
        KvCacheSpec cacheSpec = KvCacheSpec.contiguous(1, config.kvHeads(), config.maxLength(), config.headDim());
        this.cacheArrays = CacheAttentionTasks.create(Backends.TORNADO_SIMT, spec, cacheSpec, device);
        this.library = CacheLibraryTasks.create(spec, cacheSpec);
    }

    @Override
    public String name() {
        return "library-task";
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
        return false;
    }

    @Override
    public void addRope(TaskGraph graph, String graphName, GridScheduler scheduler, KernelContext context, int layer,
                        FloatArray qkv, FloatArray ropeCos, FloatArray ropeSin) {
        int dim = config.dim();
        int kvDim = config.kvDim();
        OursAttention.Layer arrays = OursAttention.Layer.allocate(config, cacheArrays);
        layers.add(arrays);
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, arrays.q(), arrays.newK(), arrays.newV());
        graph.task("rope", LlamaKernels::ropeHalf, context, step, qkv, ropeCos, ropeSin, arrays.q(), arrays.newK(),
                arrays.newV(), dim, kvDim, config.headDim());
        scheduler.addWorkerGrid(graphName + ".rope", LlamaDecoder.grid(dim / 2, LlamaDecoder.localSize(dim / 2, 128)));
    }

    @Override
    public void addAttention(TaskGraph graph, String graphName, String ropeGraphName, GridScheduler scheduler,
                             KernelContext context, int layer, FloatArray x, HalfFloatArray wo) {
        int dim = config.dim();
        OursAttention.Layer arrays = layers.get(layer);
        graph.transferToDevice(DataTransferMode.FIRST_EXECUTION, arrays.kCache(), arrays.vCache(), arrays.blockTable(),
                arrays.out());
        graph.libraryTask(TASK, library::appendAndDecode, arrays.newK(), arrays.newV(), arrays.q(), arrays.kCache(),
                arrays.vCache(), step, arrays.blockTable(), arrays.out());
        graph.task("out_proj", LlamaKernels::matvecResidualHalf, context, arrays.out(), wo, x, dim);
        scheduler.addWorkerGrid(graphName + ".out_proj", LlamaDecoder.grid(dim * LlamaKernels.MATVEC_THREADS,
                LlamaKernels.MATVEC_THREADS));
        graph.transferToHost(DataTransferMode.UNDER_DEMAND, arrays.q(), arrays.kCache(), arrays.vCache(), arrays.out());
    }

    @Override
    public void fillPrefix(int positions, PrefixRows rows) {
        OursAttention.fillPrefix(config, layers, positions, rows);
    }

    /** The library task's device time: CUDA events around its launches ({@link DispatchTimer}). */
    @Override
    public void timeOnDevice(boolean on) {
        DispatchTimer.enable(on);
    }

    @Override
    public Map<String, Long> drainDeviceNanos() {
        Map<String, Long> nanos = new LinkedHashMap<>();
        DispatchTimer.drain().forEach((function, t) -> nanos.merge(function.equals(CacheLibraryTasks.APPEND_DECODE)
                ? TASK : function, Math.round(t.millis() * 1e6), Long::sum));
        return nanos;
    }

    @Override
    public boolean isAttentionTask(String task) {
        return task.startsWith(OursAttention.PREFIX);
    }

    @Override
    public void download(TornadoExecutionResult result, int layer, Part part) {
        OursAttention.Layer arrays = layers.get(layer);
        if (part == Part.ROPE) {
            result.transferToHost(arrays.q());
        } else {
            result.transferToHost(arrays.kCache(), arrays.vCache(), arrays.out());
        }
    }

    @Override
    public Sample sample(int layer) {
        return OursAttention.sample(config, layers.get(layer));
    }
}
