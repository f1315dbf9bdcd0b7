package io.github.tornadoattention.examples.llama;

import io.github.tornadoattention.cpu.CpuReference;
import java.util.Map;
import java.util.SplittableRandom;
import uk.ac.manchester.tornado.api.GridScheduler;
import uk.ac.manchester.tornado.api.KernelContext;
import uk.ac.manchester.tornado.api.TaskGraph;
import uk.ac.manchester.tornado.api.TornadoExecutionResult;
import uk.ac.manchester.tornado.api.types.arrays.FloatArray;
import uk.ac.manchester.tornado.api.types.arrays.HalfFloatArray;
import uk.ac.manchester.tornado.api.types.arrays.IntArray;

/**
 * The part of a decoder layer the two variants do differently: RoPE with the cache write, attention over the
 * layer's KV cache, and the output projection that reads attention's output (fp16 for ours, fp32 for the scalar
 * baseline). Everything else in the layer (RMSNorm, QKV projection, FFN) is the same task for both.
 *
 * <p>A layer is one task graph ({@code layer_l}: RoPE, attention and the output projection together) or two
 * ({@link #twoGraphsPerLayer}): {@code layer_l_a} ends with RoPE, whose outputs it owns and persists, and
 * {@code layer_l_b} starts with attention, consuming them. Two graphs are what a prebuilt (PTX) attention task needs
 * under TornadoVM 5.2.0: it runs correctly only as the first task of its graph ({@code CacheAttentionTasks}).
 */
interface AttentionVariant {
    /** Which graph of a layer ran, for {@link #download}; a one-graph layer is both parts. */
    enum Part { ROPE, ATTENTION }

    /** Short name for tables and JSON, e.g. {@code ours(ptx-tornado)}. */
    String name();

    /**
     * The per-step metadata each layer graph sends ({@code EVERY_EXECUTION}); element 0 is the length after this
     * step's token, which the RoPE kernels read as position + 1.
     */
    IntArray meta();

    /** Writes this step's metadata on the host, before the graphs run. */
    void setStep(int lengthAfter);

    /** Whether each layer is two task graphs ({@code layer_l_a}, {@code layer_l_b}) rather than one. */
    boolean twoGraphsPerLayer();

    /**
     * Adds layer {@code layer}'s RoPE ({@code ropeCos}, {@code ropeSin}: [maxLength, D / 2]) reading the fused
     * projection {@code qkv} ([q; k; v], fp32) to {@code graph} (named {@code graphName}), with the arrays it
     * writes; in a two-graph layer they are persisted for the attention graph.
     */
    void addRope(TaskGraph graph, String graphName, GridScheduler scheduler, KernelContext context, int layer,
                 FloatArray qkv, FloatArray ropeCos, FloatArray ropeSin);

    /**
     * Adds layer {@code layer}'s attention and {@code x += wo . attention} to {@code graph} (named
     * {@code graphName}): the graph {@link #addRope} went into (one graph per layer), or the layer's second graph,
     * which takes RoPE's outputs from {@code ropeGraphName} and gets attention as its first task. Declares the
     * arrays attention owns (caches, scratch) and puts the worker grids in {@code scheduler}.
     */
    void addAttention(TaskGraph graph, String graphName, String ropeGraphName, GridScheduler scheduler,
                      KernelContext context, int layer, FloatArray x, HalfFloatArray wo);

    /**
     * Before the first step: positions [0, {@code positions}) of every layer's cache hold {@code rows}' K and V
     * (in the host arrays, which the first execution sends).
     */
    void fillPrefix(int positions, PrefixRows rows);

    /** Whether the task named {@code task} (without the graph prefix) is attention proper, for the timing table. */
    boolean isAttentionTask(String task);

    /**
     * Turns this variant's own device timing on or off for the next steps: for tasks TornadoVM's profiler cannot time
     * on the device (the library task). None by default.
     */
    default void timeOnDevice(boolean on) {
    }

    /** Device nanoseconds per task name (without the graph prefix) timed since the last call ({@link #timeOnDevice}). */
    default Map<String, Long> drainDeviceNanos() {
        return Map.of();
    }

    /**
     * Right after layer {@code layer}'s graph that holds {@code part} ran (result {@code result}, still the
     * selected graph): downloads what that graph owns of what attention read and wrote (q; the caches and O).
     */
    void download(TornadoExecutionResult result, int layer, Part part);

    /** What attention saw and gave at layer {@code layer} in the step whose parts were just downloaded. */
    Sample sample(int layer);

    /**
     * The synthetic cache prefix ({@code --prefix}): the same fp16-representable random values in [-1, 1] for every
     * variant. {@link #rows} gives layer {@code layer}'s K ({@code values} false) or V rows as [positions, kvHeads, D];
     * {@link #row} one position's [kvHeads, D] (each position has its own generator, so a row costs only itself).
     */
    record PrefixRows(long seed, int kvHeads, int headDim) {
        float[] rows(int layer, boolean values, int positions) {
            int rowFloats = kvHeads * headDim;
            float[] r = new float[Math.toIntExact((long) positions * rowFloats)];
            for (int p = 0; p < positions; p++) {
                System.arraycopy(row(layer, values, p), 0, r, p * rowFloats, rowFloats);
            }
            return r;
        }

        float[] row(int layer, boolean values, int position) {
            SplittableRandom random = new SplittableRandom(((seed * 31 + layer) * 2 + (values ? 1 : 0)) * 1_000_003L
                    + position);
            float[] r = new float[kvHeads * headDim];
            for (int i = 0; i < r.length; i++) {
                r[i] = Float.float16ToFloat(Float.floatToFloat16((float) (random.nextDouble() * 2 - 1)));
            }
            return r;
        }
    }

    /** What attention saw and gave at one layer and step: q [heads, D], O [heads, D], the cache rows. */
    record Sample(float[] q, float[] output, CpuReference.RowSource keys, CpuReference.RowSource values) {
    }
}
