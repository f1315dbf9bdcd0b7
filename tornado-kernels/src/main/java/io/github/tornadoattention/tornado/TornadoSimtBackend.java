package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.PlanOptions;

/** {@code tornado-simt}: the FlashAttention-2 kernel of {@link SimtKernels}, scalar fp32 math, any TornadoVM device. */
public final class TornadoSimtBackend implements AttentionBackend {
    /**
     * Why bf16 is refused: TornadoVM 5.2's PTX backend (the SDK this builds against) compiles no BFloat16/BFloat16Array
     * (only its CUDA backend lowers them); tried in {@code Bf16ProbeTest}.
     */
    static final String BF16_REFUSAL = Backends.TORNADO_SIMT + " serves fp16: TornadoVM 5.2's PTX backend compiles no"
            + " BFloat16Array (only TornadoVM's CUDA backend does); cpu-reference serves bf16";

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
     * Head dims 1..256 (see {@link SimtTileConfig#forHeadDim}); both layouts, MHA/GQA/MQA, any lengths; window, softcap
     * and sinks; fp16 only (bf16: TornadoVM 5.2's PTX backend has no BFloat16 type, see the dtype refusal).
     */
    @Override
    public void checkSupported(AttentionShape shape) {
        if (shape.dtype() != io.github.tornadoattention.DType.FP16) {
            throw new io.github.tornadoattention.InvalidArgumentException("dtype", shape.dtype().label(), BF16_REFUSAL);
        }
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
