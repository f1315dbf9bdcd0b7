package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.BackendUnavailableException;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.PlanOptions;

/**
 * {@code tornado-mma}: the FlashAttention-2 kernels of {@link MmaKernels} (TornadoVM's PTX backend) and
 * {@link MmaCpAsyncKernels} (its CUDA backend: cp.async, fp16 and bf16), both matrix products on tensor cores through
 * KernelContext's MMA intrinsics; {@link MmaPlan} picks the family by the device's backend. Needs an NVIDIA GPU of
 * compute capability 8.0 or newer.
 */
public final class TornadoMmaBackend implements AttentionBackend {

    @Override
    public String id() {
        return Backends.TORNADO_MMA;
    }

    @Override
    public String description() {
        return "Java KernelContext kernel (TornadoVM PTX or CUDA backend) with tensor-core intrinsics (mma.sync m16n8k16;"
                + " cp.async and bf16 on CUDA)";
    }

    @Override
    public Availability availability() {
        return TornadoBackendSupport.availability(() -> TornadoDevices.nvidiaDevice().availability());
    }

    /**
     * Head dims 32, 64, 96, 128, 192 and 256 (the rows of {@link MmaTileConfig#forHeadDim}); both layouts, MHA/GQA/MQA, any
     * lengths; fp16, and bf16 where the device is of TornadoVM's CUDA backend ({@link MmaCpAsyncKernels}); window, softcap
     * and sinks.
     */
    @Override
    public void checkSupported(AttentionShape shape) {
        if (shape.dtype() != io.github.tornadoattention.DType.FP16 && !(shape.dtype() == io.github.tornadoattention.DType.BF16
                && onCudaBackend())) {
            throw new io.github.tornadoattention.InvalidArgumentException("dtype", shape.dtype().label(), id()
                    + " serves fp16, and bf16 on TornadoVM's CUDA backend (mmaBF16): TornadoVM 5.2's PTX backend has no bf16"
                    + " MMA; tornado-simt and cpu-reference serve bf16");
        }
        MmaTileConfig.forHeadDim(shape.headDim());
    }

    /** Whether the device tornado-mma plans on is one of TornadoVM's CUDA backend (its kernels there serve bf16: MmaPlan). */
    private static boolean onCudaBackend() {
        TornadoDevices.Probe probe = TornadoDevices.nvidiaDevice();
        return probe.found() && probe.backend() == uk.ac.manchester.tornado.api.enums.TornadoVMBackendType.CUDA;
    }

    /**
     * Options used: {@link PlanOptions#profile()}, {@link PlanOptions#cudaGraph()}, {@link PlanOptions#mmaJitFlags()} (PTX
     * backend only: the CUDA backend compiles with NVRTC and takes no JIT options).
     */
    @Override
    public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
        checkCanPlan(shape, options);
        TornadoBackendSupport.requireNoBailout(id());
        TornadoDevices.Probe probe = TornadoDevices.nvidiaDevice();
        if (probe.found() && probe.backend() == uk.ac.manchester.tornado.api.enums.TornadoVMBackendType.CUDA
                && options.mmaJitFlags() != null && !options.mmaJitFlags().isEmpty()) {
            // TornadoVM 5.2's CUDA backend passes no options to NVRTC (CUDAProgram.build ignores them): refuse, not ignore.
            throw new io.github.tornadoattention.InvalidArgumentException("mmaJitFlags", "'" + options.mmaJitFlags() + "'",
                    "CUDA JIT options apply on TornadoVM's PTX backend only; this TornadoVM runs " + id()
                    + " on its CUDA backend, which compiles with NVRTC and takes none (leave mmaJitFlags unset)");
        }
        try {
            return new MmaPlan(shape, probe.require(id()), options);
        } catch (RuntimeException e) {
            // TornadoVM refuses MMA intrinsics on devices below compute capability 8.0 when it compiles.
            if (e.getClass().getSimpleName().equals("TornadoDeviceMMANotSupported")) {
                throw new BackendUnavailableException(id(), e.getMessage());
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
