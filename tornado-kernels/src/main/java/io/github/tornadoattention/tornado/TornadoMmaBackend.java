package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.BackendUnavailableException;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.PlanOptions;

/**
 * {@code tornado-mma}: the FlashAttention-2 kernels of {@link MmaKernels}, both matrix products on tensor cores through
 * KernelContext's MMA intrinsics, on TornadoVM's PTX or CUDA backend; bf16 on the CUDA backend only, through its
 * cp.async family {@link MmaCpAsyncKernels} ({@link MmaPlan#loadsOn}). Needs an NVIDIA GPU of compute capability 8.0 or
 * newer.
 */
public final class TornadoMmaBackend implements AttentionBackend {

    @Override
    public String id() {
        return Backends.TORNADO_MMA;
    }

    @Override
    public String description() {
        return "Java KernelContext kernel (TornadoVM PTX or CUDA backend) with tensor-core intrinsics (mma.sync m16n8k16)";
    }

    @Override
    public Availability availability() {
        return TornadoBackendSupport.availability(() -> TornadoDevices.nvidiaDevice().availability());
    }

    /**
     * Head dims 32, 64, 96, 128, 192 and 256 (the rows of {@link MmaTileConfig#forHeadDim}); both layouts, MHA/GQA/MQA, any
     * lengths; fp16, and bf16 where the NVIDIA device found runs TornadoVM's CUDA backend; window, softcap and sinks.
     */
    @Override
    public void checkSupported(AttentionShape shape) {
        TornadoDevices.Probe probe = shape.dtype() == io.github.tornadoattention.DType.FP16 ? null : TornadoDevices.nvidiaDevice();
        if (probe != null && probe.backend() != uk.ac.manchester.tornado.api.enums.TornadoVMBackendType.CUDA) {
            throw new io.github.tornadoattention.InvalidArgumentException("dtype", shape.dtype().label(), id()
                    + " serves bf16 on TornadoVM's CUDA backend only (TornadoVM 5.2's PTX backend has no bf16 MMA), fp16 on"
                    + " both; " + (probe.found() ? "this TornadoVM's NVIDIA device runs the " + TornadoDevices.backendName(probe.backend())
                    + " backend" : "no NVIDIA device was found") + "; tornado-simt, ptx-tornado and cpu-reference serve bf16");
        }
        MmaTileConfig.forHeadDim(shape.headDim());
    }

    /** Options used: {@link PlanOptions#profile()}, {@link PlanOptions#cudaGraph()}, {@link PlanOptions#mmaJitFlags()}. */
    @Override
    public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
        checkCanPlan(shape, options);
        TornadoBackendSupport.requireNoBailout(id());
        TornadoDevices.Probe probe = TornadoDevices.nvidiaDevice();
        try {
            return new MmaPlan(shape, probe.require(Backends.TORNADO_MMA), options);
        } catch (RuntimeException e) {
            // TornadoVM refuses MMA intrinsics on devices below compute capability 8.0 when it compiles.
            if (e.getClass().getSimpleName().equals("TornadoDeviceMMANotSupported")) {
                throw new BackendUnavailableException(Backends.TORNADO_MMA, e.getMessage());
            }
            throw e;
        }
    }

    /** The inference API on this backend: KV caches kept on the GPU by TornadoVM task graphs. */
    @Override
    public io.github.tornadoattention.AttentionDevice device() {
        return device(PlanOptions.defaults());
    }

    /** Options used: {@link PlanOptions#profile()} (kernel times for {@code timeEach}), {@link PlanOptions#cudaGraph()}. */
    @Override
    public io.github.tornadoattention.AttentionDevice device(PlanOptions options) {
        return TornadoBackendSupport.device(id(), TornadoDevices::nvidiaDevice, options);
    }
}
