package io.github.tornadoattention;

/**
 * Entry points for inference code.
 *
 * <pre>{@code
 * AttentionShape shape = AttentionShape.builder().batch(1).heads(32).kvHeads(8)
 *         .queryLength(1).kvLength(4096).headDim(128).causal(true).build();
 * try (AttentionPlan plan = Attention.plan(shape, "auto")) {   // once per layer shape
 *     plan.forward(q, k, v, o, lse);                           // every step; lse may be null
 * }
 * }</pre>
 */
public final class Attention {
    private Attention() {
    }

    /** A reusable plan on the fastest available backend that supports {@code shape}. */
    public static AttentionPlan plan(AttentionShape shape) {
        return plan(shape, Backends.AUTO);
    }

    /** A reusable plan on the backend with this id (see {@link Backends#IDS}). */
    public static AttentionPlan plan(AttentionShape shape, String backendId) {
        return plan(shape, backendId, PlanOptions.defaults());
    }

    /** A reusable plan on the backend with this id, made and run with {@code options} (device, profiling, ...). */
    public static AttentionPlan plan(AttentionShape shape, String backendId, PlanOptions options) {
        return Backends.get(backendId).plan(shape, options);
    }

    /**
     * The device of backend {@code backendId} ({@code auto}: the first available one with an
     * inference API), for device tensors, KV caches and cache plans.
     */
    public static AttentionDevice device(String backendId) {
        return Backends.get(backendId).device();
    }

    /** {@link #device(String)} on the device {@code options} name (ptx-cuda: {@link PlanOptions#cudaDevice()}). */
    public static AttentionDevice device(String backendId, PlanOptions options) {
        return Backends.get(backendId).device(options);
    }

    /** Attention plans and cache plans made in this JVM so far: an engine's step makes none. */
    public static long plansCreated() {
        return AttentionPlan.created() + CacheAttentionPlan.created();
    }

    /** One-shot attention on the fastest available backend; prefer a plan in loops. */
    public static HalfTensor forward(AttentionShape shape, HalfTensor q, HalfTensor k, HalfTensor v) {
        try (AttentionPlan plan = plan(shape)) {
            return plan.forward(q, k, v);
        }
    }
}
