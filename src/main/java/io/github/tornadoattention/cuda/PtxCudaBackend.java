package io.github.tornadoattention.cuda;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.BackendUnavailableException;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.InvalidArgumentException;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.ptx.LaunchTable;
import java.util.HashMap;
import java.util.Map;

/**
 * {@code ptx-cuda}: the hand-tuned PTX kernels (ptx-overrides/) launched through the CUDA driver
 * API with java.lang.foreign: no JNI, no TornadoVM. Needs an NVIDIA driver (libcuda.so.1) and an
 * sm_80 or newer GPU.
 */
public final class PtxCudaBackend implements AttentionBackend {

    @Override
    public String id() {
        return Backends.PTX_CUDA;
    }

    @Override
    public String description() {
        return "hand-tuned PTX (mma.sync, ldmatrix, cp.async) through the CUDA driver API (java.lang.foreign)";
    }

    @Override
    public Availability availability() {
        return CudaContext.availability();
    }

    @Override
    public void checkSupported(AttentionShape shape) {
        LaunchTable.checkSupported(id(), shape);
    }

    private final Map<Integer, CudaDevice> devices = new HashMap<>();

    /** The CUDA device 0, with its own stream (engines may pass theirs: {@link CudaDevice#onStream}). */
    @Override
    public AttentionDevice device() {
        return device(PlanOptions.defaults());
    }

    /** The CUDA device {@link PlanOptions#cudaDevice()}, one per ordinal, with its own stream. */
    @Override
    public synchronized AttentionDevice device(PlanOptions options) {
        InvalidArgumentException.requireNonNull("options", options);
        int ordinal = options.cudaDevice();
        CudaDevice device = devices.get(ordinal);
        if (device == null) {
            CudaContext context;
            try {
                context = CudaContext.get(ordinal);
            } catch (InvalidArgumentException e) {
                throw e;
            } catch (RuntimeException e) {
                throw new BackendUnavailableException(id(), e.getMessage());
            }
            device = new CudaDevice(context);
            devices.put(ordinal, device);
        }
        return device;
    }

    /** Options used: {@link PlanOptions#cudaDevice()} (kernels are always timed with CUDA events). */
    @Override
    public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
        checkCanPlan(shape, options);
        return new PtxCudaPlan(id(), shape, (CudaDevice) device(options));
    }
}
