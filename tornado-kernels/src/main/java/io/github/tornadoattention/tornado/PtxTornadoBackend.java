package io.github.tornadoattention.tornado;

import io.github.tornadoattention.AttentionBackend;
import io.github.tornadoattention.AttentionPlan;
import io.github.tornadoattention.AttentionShape;
import io.github.tornadoattention.Availability;
import io.github.tornadoattention.Backends;
import io.github.tornadoattention.PlanOptions;
import io.github.tornadoattention.tornado.prebuilt.PrebuiltLaunches;
import java.util.List;
import uk.ac.manchester.tornado.api.types.arrays.TornadoNativeArray;

/**
 * {@code ptx-tornado}: the hand-tuned PTX kernels of ptx-overrides/ run as prebuilt tasks inside
 * TornadoVM task graphs, behind the same plan machinery as tornado-mma ({@link TornadoAttentionPlan}),
 * so switching is one id. Needs TornadoVM's PTX or CUDA backend (the prebuilt form per backend: {@link
 * io.github.tornadoattention.tornado.prebuilt.PrebuiltTasks}) and an sm_80 or newer GPU.
 */
public final class PtxTornadoBackend implements AttentionBackend {

    @Override
    public String id() {
        return Backends.PTX_TORNADO;
    }

    @Override
    public String description() {
        return "hand-tuned PTX (mma.sync, ldmatrix, cp.async) as TornadoVM prebuilt tasks";
    }

    @Override
    public Availability availability() {
        return TornadoBackendSupport.availability(() -> TornadoDevices.nvidiaDevice().availability());
    }

    @Override
    public void checkSupported(AttentionShape shape) {
        // The twins this JVM's array header selects (the plan refuses a header no twin has, as unavailable).
        long header = TornadoNativeArray.ARRAY_HEADER;
        List<Integer> headers = PrebuiltLaunches.headerBytes();
        PrebuiltLaunches.checkSupported(id(), shape, headers.contains((int) header) || headers.isEmpty() ? header : headers.get(0));
    }

    /** Options used: {@link PlanOptions#profile()}, {@link PlanOptions#cudaGraph()}. */
    @Override
    public AttentionPlan plan(AttentionShape shape, PlanOptions options) {
        checkCanPlan(shape, options);
        TornadoBackendSupport.requireNoBailout(id());
        return new PtxTornadoPlan(shape, TornadoDevices.nvidiaDevice().require(id()), options);
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
