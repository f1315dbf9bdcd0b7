package io.github.tornadoattention.cuda;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionDevice;
import io.github.tornadoattention.BackendUnavailableException;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.ptx.LaunchTable;

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

    private CudaDevice device;

    /** The CUDA device of the process's context, with its own stream (engines may pass theirs: {@link CudaDevice#onStream}). */
    @Override
    public synchronized AttentionDevice device() {
        Availability availability = availability();
        if (!availability.available()) {
            throw new BackendUnavailableException(id(), availability.detail());
        }
        if (device == null) {
            device = new CudaDevice(CudaContext.get());
        }
        return device;
    }

    @Override
    public AttentionPlan plan(AttentionShape shape) {
        checkCanPlan(shape);
        return new PtxCudaPlan(id(), shape, (CudaDevice) device());
    }
}
