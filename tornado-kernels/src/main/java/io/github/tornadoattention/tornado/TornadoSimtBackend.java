package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.PlanOptions;

/** {@code tornado-simt}: the FlashAttention-2 kernel of {@link SimtKernels}, scalar fp32 math, any TornadoVM device. */
public final class TornadoSimtBackend implements AttentionBackend {

    @Override
    public String id() {
        return Backends.TORNADO_SIMT;
    }

    @Override
    public String description() {
        return "Java KernelContext kernel (TornadoVM), local-memory tiles, scalar fp32 math";
    }

    @Override
    public Availability availability() {
        return TornadoBackendSupport.availability(() -> TornadoDevices.anyDevice().availability());
    }

    /**
     * fp16 and bf16 (bf16 bits in ShortArrays, converted by {@link Bf16}, see {@link SimtKernels}); head dims 1..256 (see {@link SimtTileConfig#forHeadDim});
     * both layouts, MHA/GQA/MQA, any lengths; window, softcap and sinks.
     */
    @Override
    public void checkSupported(AttentionShape shape) {
        SimtTileConfig.forHeadDim(shape.headDim());
    }

    /** Options used: {@link PlanOptions#profile()}, {@link PlanOptions#cudaGraph()}. */
    @Override
    public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
        checkCanPlan(shape, options);
        TornadoBackendSupport.requireNoBailout(id());
        return new SimtPlan(shape, TornadoDevices.anyDevice().require(id()), options);
    }

    /** The inference API on this backend: KV caches kept on the GPU by TornadoVM task graphs. */
    @Override
    public io.github.tornadoattention.AttentionDevice device() {
        return device(PlanOptions.defaults());
    }

    /** Options used: {@link PlanOptions#profile()} (kernel times for {@code timeEach}), {@link PlanOptions#cudaGraph()}. */
    @Override
    public io.github.tornadoattention.AttentionDevice device(PlanOptions options) {
        return TornadoBackendSupport.device(id(), TornadoDevices::anyDevice, options);
    }
}
