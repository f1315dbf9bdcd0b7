package io.github.tornadoattention;

/**
 * A way of computing attention (CPU reference, TornadoVM kernels, hand-tuned PTX). Implementations
 * are discovered with {@link java.util.ServiceLoader}; see {@link Backends}. A provider's
 * constructor must be cheap and must not fail when its runtime is missing: it reports that through
 * {@link #availability()} instead.
 */
public interface AttentionBackend {

    /** The id users select it by, e.g. {@code cpu-reference}. */
    String id();

    /** One line saying what it is. */
    String description();

    /** Whether it can run here, and on what, or why not. Cheap after the first call. */
    Availability availability();

    /**
     * Throws {@link InvalidArgumentException} naming the argument (for example {@code headDim}) if
     * this backend cannot run {@code shape}.
     */
    void checkSupported(AttentionShape shape);

    /**
     * Prepares a reusable plan for {@code shape} with {@code options} (device, profiling, CUDA graphs, JIT options;
     * those that do not concern this backend are ignored): compiles kernels and allocates device buffers.
     *
     * @throws BackendUnavailableException if the backend cannot run here
     * @throws InvalidArgumentException if the shape is not supported or an option cannot be met here
     */
    AttentionPlan plan(AttentionShape shape, PlanOptions options);

    /** {@link #plan(AttentionShape, PlanOptions)} with {@link PlanOptions#defaults()}. */
    default AttentionPlan plan(AttentionShape shape) {
        return plan(shape, PlanOptions.defaults());
    }

    /**
     * The device this backend computes on, for device tensors, KV caches and cache plans (the
     * inference API). Throws {@link BackendUnavailableException} where the backend cannot run here
     * and {@link UnsupportedOperationException} where it has no inference API yet.
     */
    default AttentionDevice device() {
        throw new UnsupportedOperationException(id() + " has no device-resident inference API yet");
    }

    /** {@link #device()} on the device {@code options} name (ptx-cuda: {@link PlanOptions#cudaDevice()}). */
    default AttentionDevice device(PlanOptions options) {
        InvalidArgumentException.requireNonNull("options", options);
        return device();
    }

    /** Checks availability and support, in that order; the first step of every {@link #plan}. */
    default void checkCanPlan(AttentionShape shape, PlanOptions options) {
        InvalidArgumentException.requireNonNull("options", options);
        checkCanPlan(shape);
    }

    /** See {@link #checkCanPlan(AttentionShape, PlanOptions)}. */
    default void checkCanPlan(AttentionShape shape) {
        InvalidArgumentException.requireNonNull("shape", shape);
        Availability availability = availability();
        if (!availability.available()) {
            throw new BackendUnavailableException(id(), availability.detail());
        }
        checkSupported(shape);
    }
}
