package io.github.tornadoattention.examples.llama;

import io.github.tornadoattention.cpu.CpuReference;
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
 */
interface AttentionVariant {
    /** Short name for tables and JSON, e.g. {@code ours(ptx-tornado)}. */
    String name();

    /**
     * The per-step metadata each layer graph sends ({@code EVERY_EXECUTION}); element 0 is the length after this
     * step's token, which the RoPE kernels read as position + 1.
     */
    IntArray meta();

    /** Writes this step's metadata on the host, before the graphs run. */
    void setStep(int lengthAfter);

    /**
     * Adds layer {@code layer}'s tasks to {@code graph} (named {@code graphName}): RoPE ({@code ropeCos},
     * {@code ropeSin}: [maxLength, D / 2]) + cache write reading the fused projection {@code qkv} ([q; k; v], fp32),
     * attention, and {@code x += wo . attention}; declares the arrays they own (caches, per-layer scratch) and puts
     * their worker grids in {@code scheduler}.
     */
    void addAttentionBlock(TaskGraph graph, String graphName, GridScheduler scheduler, KernelContext context, int layer,
                           FloatArray qkv, FloatArray ropeCos, FloatArray ropeSin, FloatArray x, HalfFloatArray wo);

    /** Whether the task named {@code task} (without the graph prefix) is attention proper, for the timing table. */
    boolean isAttentionTask(String task);

    /**
     * After layer {@code layer}'s graph ran (result {@code result}) at a step whose length is {@code length}:
     * downloads what attention read and wrote (q, the cache prefix, O) for the check against the CPU reference.
     */
    Sample sample(TornadoExecutionResult result, int layer, int length);

    /** What attention saw and gave at one layer and step: q [heads, D], O [heads, D], the cache rows. */
    record Sample(float[] q, float[] output, CpuReference.RowSource keys, CpuReference.RowSource values) {
    }
}
